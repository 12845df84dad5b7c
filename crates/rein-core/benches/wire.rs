//! The cost of one streamed token in each direction of the gateway hop:
//! an OpenAI chunk read from an upstream (the provider) and written to a
//! client (the gateway), and an Anthropic text delta read. Nearly every
//! event of a stream is one of these, so their cost is paid per token.
//!
//! And the cost of a request, paid per call: a chat completion request of
//! a short tool loop read (the gateway) and written (the provider), the
//! write measured beside the same body built as a `serde_json::Value`
//! first, as the provider built it before it wrote the typed request.
//!
//! Run: `cargo bench -p rein-core --bench wire`.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::wire::openai::request::{
    ChatMessage, ChatRequest, ChatTool, ChatToolCall, Content, FunctionDef, ToolChoice,
    ToolChoiceMode,
};
use rein_core::wire::{anthropic, openai};
use serde_json::{Value, json};

/// A text chunk as OpenAI sends it.
const OPENAI_CHUNK: &str = r#"{"id":"chatcmpl-CdVbDvUyFnyLm3M4oP5Hhy6yC3dTO","object":"chat.completion.chunk","created":1767225600,"model":"gpt-4o-mini-2024-07-18","service_tier":"default","system_fingerprint":"fp_560af6e559","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}],"usage":null,"obfuscation":"x3mZ"}"#;

/// A text delta as Anthropic sends it.
const ANTHROPIC_DELTA: &str =
    r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" token"}}"#;

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("wire");
    group.bench_function("openai_chunk_read", |b| {
        b.iter(|| serde_json::from_str::<openai::Chunk<'_>>(black_box(OPENAI_CHUNK)).unwrap())
    });
    group.bench_function("openai_chunk_write", |b| {
        let mut out = Vec::with_capacity(256);
        b.iter(|| {
            out.clear();
            let choice = [openai::ChunkChoice::first(
                openai::Delta::text(black_box(" token")),
                None,
            )];
            let chunk = openai::Chunk::new(
                "chatcmpl-019af0c2a8d07a3b9c4e5f60718293a4",
                1_767_225_600,
                "bench",
                &choice,
            );
            serde_json::to_writer(&mut out, &chunk).unwrap();
            black_box(out.len())
        })
    });
    group.bench_function("anthropic_delta_read", |b| {
        b.iter(|| {
            serde_json::from_str::<anthropic::StreamEvent>(black_box(ANTHROPIC_DELTA)).unwrap()
        })
    });
    group.bench_function("openai_request_read", |b| {
        let body = serde_json::to_vec(&request()).unwrap();
        b.iter(|| serde_json::from_slice::<ChatRequest>(black_box(&body)).unwrap())
    });
    group.bench_function("openai_request_write_typed", |b| {
        let mut out = Vec::with_capacity(1024);
        b.iter(|| {
            out.clear();
            serde_json::to_writer(&mut out, &black_box(request())).unwrap();
            black_box(out.len())
        })
    });
    group.bench_function("openai_request_write_value", |b| {
        let mut out = Vec::with_capacity(1024);
        b.iter(|| {
            out.clear();
            serde_json::to_writer(&mut out, &black_box(request_value())).unwrap();
            black_box(out.len())
        })
    });
    group.finish();
}

const INSTRUCTIONS: &str = "You move orders between warehouses. Use the tools.";
const ASK: &str = "Move order A-1 to the Leeds warehouse and tell me when it ships.";
const PARAMETERS: &str = r#"{"type":"object","properties":{"order_id":{"type":"string"},"warehouse":{"type":"string"}},"required":["order_id","warehouse"]}"#;

/// A short tool loop's request: instructions, the ask, one call and its
/// result, one tool.
fn request() -> ChatRequest {
    ChatRequest {
        model: "gpt-4o-mini".into(),
        messages: vec![
            ChatMessage::System {
                content: Content::Text(INSTRUCTIONS.into()),
            },
            ChatMessage::User {
                content: Content::Text(ASK.into()),
            },
            ChatMessage::Assistant {
                content: None,
                tool_calls: Some(vec![ChatToolCall::function(
                    "call_1".into(),
                    "move_order".into(),
                    r#"{"order_id":"A-1","warehouse":"leeds"}"#.into(),
                )]),
                prefix: None,
            },
            ChatMessage::Tool {
                tool_call_id: "call_1".into(),
                content: Content::Text(r#"{"status":"moved","ships":"2026-12-09"}"#.into()),
            },
        ],
        tools: Some(vec![ChatTool::function(FunctionDef {
            name: "move_order".into(),
            description: Some("Moves an order to a warehouse.".into()),
            parameters: Some(serde_json::from_str(PARAMETERS).unwrap()),
            strict: None,
        })]),
        tool_choice: Some(ToolChoice::Mode(ToolChoiceMode::Auto)),
        max_tokens: Some(512),
        stream: Some(false),
        temperature: Some(0.2),
        ..ChatRequest::default()
    }
}

/// [`request`] as a `Value` built with `json!`.
fn request_value() -> Value {
    json!({
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": INSTRUCTIONS},
            {"role": "user", "content": ASK},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "move_order", "arguments": r#"{"order_id":"A-1","warehouse":"leeds"}"#}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": r#"{"status":"moved","ships":"2026-12-09"}"#},
        ],
        "tools": [{"type": "function", "function": {"name": "move_order",
            "description": "Moves an order to a warehouse.",
            "parameters": serde_json::from_str::<Value>(PARAMETERS).unwrap()}}],
        "tool_choice": "auto",
        "max_tokens": 512,
        "stream": false,
        "temperature": 0.2,
    })
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The cost of one streamed token in each direction of the gateway hop:
//! an OpenAI chunk read from an upstream (the provider) and written to a
//! client (the gateway), and an Anthropic text delta read. Nearly every
//! event of a stream is one of these, so their cost is paid per token.
//!
//! Run: `cargo bench -p rein-core --bench wire`.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::wire::{anthropic, openai};

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
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

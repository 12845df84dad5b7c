//! What the prompt bound costs per model call (issue 32, item 4): the
//! bound rein takes before every attempt, over a transcript like the one
//! `tests/token_bound.rs` runs (a system prompt, the task, three tool
//! round trips of ~800-character results, the budget note, one tool
//! definition), with the provider's last count known.
//!
//! Three variants: a token per byte (no count learned yet), a learned
//! bytes-per-token ratio (`rein_core::token_ratio::TokenRatio`), and the
//! `o200k_base` tokenizer of gpt-4o's family. The one-time read of the
//! encoding is timed once and printed beside the bounds.
//!
//! Run: `cargo bench -p rein-engine --bench prompt_bound`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::token_ratio::TokenRatio;
use rein_engine::provider::{Message, ToolCall};
use rein_engine::run::{Encoding, PromptMeter, prompt_estimate};
use serde_json::json;

fn transcript() -> (Vec<Message>, Vec<serde_json::Value>) {
    let mut messages = vec![
        Message::System {
            content: "You adjust orders.".into(),
        },
        Message::user("Look up orders B-1 to B-3 and summarise them."),
    ];
    for n in 1..=3 {
        let items: Vec<_> = (0..11)
            .map(|i| json!({"sku": format!("SKU-{n}-{i:03}"), "name": "Garden chair, teak", "quantity": 2}))
            .collect();
        let result = json!({"order_id": format!("B-{n}"), "status": "confirmed",
            "delivery_date": "2026-12-20", "buyer_email": "buyer@example.com", "items": items});
        messages.push(Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: format!("c{n}"),
                name: "get_order".into(),
                arguments: json!({"order_id": format!("B-{n}")}).to_string(),
            }],
        });
        messages.push(Message::Tool {
            call_id: format!("c{n}"),
            content: result.to_string(),
        });
    }
    messages.push(Message::user(
        "Budget left for this run: 6 steps, 15.9 s, 1,676 tokens.",
    ));
    let tools = vec![json!({"type": "function", "function": {
        "name": "get_order", "description": "Look up one order by its id.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string", "description": "the order"}}}}})];
    (messages, tools)
}

fn bench(c: &mut Criterion) {
    let (messages, tools) = transcript();
    let bytes = PromptMeter::from(TokenRatio::new());
    let mut ratio = TokenRatio::new();
    for _ in 0..3 {
        ratio.observe(3_300, 1_000);
    }
    let learned = PromptMeter::from(ratio);
    let read = std::time::Instant::now();
    assert!(Encoding::O200kBase.load());
    let read = read.elapsed();
    let tokenizer = PromptMeter::encoding(Encoding::O200kBase);
    let mut group = c.benchmark_group("prompt_bound");
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("one_token_per_byte", |b| {
        b.iter(|| prompt_estimate(black_box(&messages), black_box(&tools), 707, &bytes));
    });
    group.bench_function("learned_ratio", |b| {
        b.iter(|| prompt_estimate(black_box(&messages), black_box(&tools), 707, &learned));
    });
    group.bench_function("o200k_tokenizer", |b| {
        b.iter(|| prompt_estimate(black_box(&messages), black_box(&tools), 707, &tokenizer));
    });
    group.bench_function("o200k_tokenizer_whole_transcript", |b| {
        b.iter(|| prompt_estimate(black_box(&messages), black_box(&tools), 0, &tokenizer));
    });
    group.finish();
    eprintln!(
        "bound: {} tokens at a token per byte, {} at the learned ratio, {} by o200k_base ({} for the whole transcript); o200k_base read in {read:?}",
        prompt_estimate(&messages, &tools, 707, &bytes),
        prompt_estimate(&messages, &tools, 707, &learned),
        prompt_estimate(&messages, &tools, 707, &tokenizer),
        prompt_estimate(&messages, &tools, 0, &tokenizer),
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);

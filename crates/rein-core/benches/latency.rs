//! What observed latency costs: recording one sample (done after every
//! tool attempt and model answer, under the latency book's lock), reading
//! the profile a call is planned with, and the text form a flush writes
//! (its size and its encode/decode time for a histogram of 10 000 samples
//! spread over five orders of magnitude).
//!
//! Run: `cargo bench -p rein-core --bench latency`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::latency::LatencyHistogram;

/// 10 000 samples from 100 µs to 10 s, deterministic.
fn spread() -> LatencyHistogram {
    let mut h = LatencyHistogram::new();
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for _ in 0..10_000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let exp = (x % 5) as u32;
        let micros = 100 * 10u64.pow(exp) + x % (100 * 10u64.pow(exp));
        h.record(Duration::from_micros(micros));
    }
    h
}

fn bench(c: &mut Criterion) {
    let mut h = spread();
    let text = h.encode();
    eprintln!(
        "encoded histogram of {} samples: {} bytes",
        h.samples(),
        text.len()
    );
    c.bench_function("record one sample", |b| {
        b.iter(|| h.record(black_box(Duration::from_millis(42))))
    });
    let h = spread();
    c.bench_function("profile (p50, p95, p99)", |b| {
        b.iter(|| black_box(h.profile()))
    });
    c.bench_function("encode 10k samples", |b| b.iter(|| black_box(h.encode())));
    c.bench_function("decode 10k samples", |b| {
        b.iter(|| black_box(LatencyHistogram::decode(black_box(&text)).unwrap()))
    });
    let other = spread();
    c.bench_function("merge two histograms", |b| {
        b.iter_batched(
            || h.clone(),
            |mut sum| {
                sum.merge(&other);
                sum
            },
            criterion::BatchSize::SmallInput,
        )
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! What the metrics cost on the guarded-call path: the events of one real
//! 10-step run (nine tool calls, then the answer; scripted model, loopback
//! order desk, SQLite store) recorded into the engine's metrics, against
//! the run itself — the ratio is the share of a run's time its metrics
//! take. The scrape (`render`) is measured apart: it runs per scrape, not
//! per call.
//!
//! Run: `cargo bench -p rein-engine --bench metrics`. After the group it
//! prints the per-run recording time and its ratio to the run.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::{Event, Outcome};
use rein_engine::metrics::Metrics;
use rein_engine::run::{AcceptAll, AgentBinding, Engine};
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::OrderDesk;
use support::{STEPS, agent, calls, provider, request, script};

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let desk = runtime.block_on(OrderDesk::start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let engine = Engine::builder(store).rng_seed(7).build().unwrap();
    let calls = calls();
    let script = script(&calls);
    let template = agent(&desk, &script);

    // One run's events, as the engine emitted them.
    let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
    let sink = seen.clone();
    let observer: rein_engine::run::Observer = Arc::new(move |e: &Event| {
        sink.lock().unwrap().push(e.clone());
    });
    let out = runtime
        .block_on(engine.run(&template, &AcceptAll, request(Some(observer))))
        .unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(out.report.steps, STEPS);
    let events = std::mem::take(&mut *seen.lock().unwrap());
    assert!(events.len() > 20, "{} events", events.len());

    let mut group = c.benchmark_group("metrics");
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(8));

    let metrics = Metrics::default();
    let scope = metrics.scope("acme", "order_desk");
    let mut record_ns = 0.0;
    group.bench_function("record_one_runs_events", |b| {
        b.iter_custom(|iters| {
            let start = Instant::now();
            for _ in 0..iters {
                for event in &events {
                    metrics.record(black_box(event), &scope);
                }
            }
            let took = start.elapsed();
            record_ns = took.as_nanos() as f64 / iters as f64;
            took
        })
    });
    let mut run_ns = 0.0;
    group.bench_function("run_10_steps", |b| {
        b.iter_custom(|iters| {
            let agents: Vec<AgentBinding> = (0..iters)
                .map(|_| {
                    let mut agent = template.clone();
                    agent.provider = provider(&script);
                    agent
                })
                .collect();
            runtime.block_on(async {
                let start = Instant::now();
                for agent in &agents {
                    let out = engine.run(agent, &AcceptAll, request(None)).await.unwrap();
                    black_box(out);
                }
                let took = start.elapsed();
                run_ns = took.as_nanos() as f64 / iters as f64;
                took
            })
        })
    });
    group.bench_function("render_scrape", |b| b.iter(|| black_box(metrics.render())));
    group.finish();
    println!(
        "metrics: {} events per run recorded in {:.1} µs; a run takes {:.0} µs; metrics are {:.3}% of a run (the last sample of each)",
        events.len(),
        record_ns / 1e3,
        run_ns / 1e3,
        100.0 * record_ns / run_ns
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);

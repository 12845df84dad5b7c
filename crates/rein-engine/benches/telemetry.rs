//! What telemetry costs on the guarded-call path: one real 10-step run
//! (nine tool calls, then the answer; scripted model, loopback order
//! desk, SQLite store; `support`) with traces off and on, in the same
//! process, and the events of one run recorded into metrics and into a
//! trace, against each other.
//!
//! With traces on, spans go over OTLP/HTTP to a receiver on loopback that
//! answers every export at once (the batch processor's own thread, the
//! export on the same runtime): the whole cost a process pays, not only
//! the building of spans. Metrics are always on (every engine counts its
//! events), so `run_traces_off` is the run with metrics alone.
//!
//! Run (short settings on a shared machine):
//! `cargo bench -p rein-engine --bench telemetry -- --warm-up-time 1 --measurement-time 3`.
//! Medians are in `target/criterion/telemetry/*/new/estimates.json`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::hint::black_box;
use std::sync::{Arc, Mutex};

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::registry::TelemetrySpec;
use rein_core::{Event, Outcome};
use rein_engine::metrics::Metrics;
use rein_engine::run::{AcceptAll, Engine};
use rein_engine::telemetry::Telemetry;
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::OrderDesk;
use support::{STEPS, agent, calls, provider, request, script};

/// An OTLP/HTTP receiver that accepts and drops every export; its URL.
async fn receiver() -> String {
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(|| async { "" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/v1/traces", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let desk = runtime.block_on(OrderDesk::start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine_with = |name: &str, telemetry: Option<Telemetry>| {
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join(name)).unwrap());
        Engine::builder(store)
            .rng_seed(7)
            .telemetry(telemetry)
            .build()
            .unwrap()
    };
    let telemetry = runtime.block_on(async {
        let spec = TelemetrySpec::new(receiver().await, "rein-bench");
        Telemetry::new(&spec, rein_engine::run::http_client().unwrap()).unwrap()
    });
    let off = engine_with("off.db", None);
    let on = engine_with("on.db", Some(telemetry.clone()));
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
        .block_on(on.run(&template, &AcceptAll, request(Some(observer))))
        .unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(out.report.steps, STEPS);
    let events = std::mem::take(&mut *seen.lock().unwrap());

    let mut group = c.benchmark_group("telemetry");
    group.sample_size(20);
    for (name, engine) in [("run_traces_off", &off), ("run_traces_on", &on)] {
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let mut agent = template.clone();
                    agent.provider = provider(&script);
                    agent
                },
                |agent| {
                    runtime.block_on(async {
                        black_box(engine.run(&agent, &AcceptAll, request(None)).await.unwrap())
                    })
                },
                criterion::BatchSize::SmallInput,
            )
        });
    }
    let metrics = Metrics::default();
    let scope = metrics.scope("acme", "order_desk");
    group.bench_function("record_events_metrics", |b| {
        b.iter(|| {
            for event in &events {
                metrics.record(black_box(event), &scope);
            }
        })
    });
    group.bench_function("record_events_trace", |b| {
        b.iter(|| {
            let trace = telemetry.run(None, "acme", "order_desk");
            for event in &events {
                trace.record(black_box(event));
            }
        })
    });
    group.finish();
    runtime.block_on(telemetry.shutdown());
}

criterion_group!(benches, bench);
criterion_main!(benches);

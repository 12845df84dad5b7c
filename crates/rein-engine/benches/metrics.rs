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

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::deadline::BudgetLimits;
use rein_core::idempotency::Normalizer;
use rein_core::loop_guard::LoopGuardConfig;
use rein_core::registry::DEFAULT_IDEMPOTENCY_HEADER;
use rein_core::retry::RetryPolicy;
use rein_core::{Event, LatencyProfile, Outcome, TenantId, ToolClass};
use rein_engine::metrics::Metrics;
use rein_engine::provider::ScriptedProvider;
use rein_engine::run::{AcceptAll, AgentBinding, Engine, RunRequest, ToolBinding};
use rein_engine::tool_http::HttpTarget;
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{GET_ORDER, OrderDesk, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};

/// Model turns per run: nine tool calls, then the answer.
const STEPS: u32 = 10;
const INPUT: &str = "Check orders A-1001..A-1003 and move their delivery dates.";

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// The nine calls: reads and idempotent writes alternating, all arguments
/// distinct, so every call adds a new fact and the loop guard never trips.
fn calls() -> Vec<(&'static str, Value)> {
    let orders = ["A-1001", "A-1002", "A-1003"];
    (0..STEPS as usize - 1)
        .map(|i| {
            let order = orders[i % orders.len()];
            if i % 2 == 0 {
                (GET_ORDER, json!({"order_id": order}))
            } else {
                let date = format!("2026-12-{:02}T10:00:00Z", 10 + i);
                (
                    UPDATE_DELIVERY_TIME,
                    json!({"order_id": order, "delivery_date": date}),
                )
            }
        })
        .collect()
}

fn script(calls: &[(&str, Value)]) -> String {
    let mut turns: Vec<Value> = calls
        .iter()
        .map(|(name, args)| json!({"tool_calls": [{"name": name, "arguments": args}]}))
        .collect();
    turns.push(json!({"text": "Done: three orders checked, four dates moved."}));
    json!({ "turns": turns }).to_string()
}

fn tool(desk: &OrderDesk, name: &str, class: ToolClass) -> ToolBinding {
    ToolBinding {
        name: name.to_owned(),
        class,
        latency: LatencyProfile::new(ms(10), ms(100), ms(250), 100).unwrap(),
        normalizer: Normalizer::default(),
        target: HttpTarget {
            name: name.to_owned(),
            url: desk.tool_url(name),
            method: reqwest::Method::POST,
            headers: BTreeMap::new(),
            idempotency_header: DEFAULT_IDEMPOTENCY_HEADER.to_owned(),
            status_url: Some(format!("{}/tools/{name}/status", desk.base_url())),
            max_result_bytes: 16 * 1024,
        }
        .into(),
        resource_group: Some("order_api".to_owned()),
        self_heal_allowance: None,
        declared: Default::default(),
    }
}

/// The agent without its provider (a placeholder one, replaced per run).
fn agent(desk: &OrderDesk, script: &str) -> AgentBinding {
    let tools: BTreeMap<String, ToolBinding> = [
        tool(desk, GET_ORDER, ToolClass::Read),
        tool(desk, UPDATE_DELIVERY_TIME, ToolClass::IdempotentWrite),
    ]
    .into_iter()
    .map(|t| (t.name.clone(), t))
    .collect();
    AgentBinding {
        name: "order_desk".into(),
        model: "scripted".into(),
        system_prompt: "You adjust orders.".into(),
        provider: provider(script),
        price: None,
        max_output_tokens: None,
        tool_definitions: vec![],
        tools,
        budget: BudgetLimits::new(Duration::from_secs(60))
            .unwrap()
            .with_steps(20)
            .unwrap(),
        retry: RetryPolicy::default(),
        loop_guard: LoopGuardConfig::default(),
        model_latency: LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap(),
        on_failure: rein_core::FailurePolicy::default(),
        compensation_reserve: rein_core::Ratio::new("r", 0.2).unwrap(),
        compensations: Default::default(),
        group_limits: Default::default(),
        group_rates: Default::default(),
        fallbacks: Vec::new(),
        context_fallbacks: Vec::new(),
        provider_limits: Default::default(),
        model_retry: Default::default(),
        fan_out: Default::default(),
    }
}

/// A fresh scripted model: it is stateful (its cursor is the run's place in
/// the script), so each run needs its own.
fn provider(script: &str) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::from_json("scripted", script).unwrap())
}

fn request(observer: Option<rein_engine::run::Observer>) -> RunRequest {
    RunRequest {
        input: INPUT.into(),
        tenant: Some(TenantId::new("acme").unwrap()),
        observer,
        ..RunRequest::default()
    }
}

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
                .map(|_| AgentBinding {
                    provider: provider(&script),
                    ..template.clone()
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

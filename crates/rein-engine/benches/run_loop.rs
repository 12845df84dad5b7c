//! A whole run against real parts: a 10-step run (nine tool calls, then the
//! answer) of the scripted model over the testkit's loopback order desk,
//! recorded in a durable SQLite file — against the baseline of making the
//! same nine tool requests directly with one HTTP client, no rein.
//!
//! The difference, divided by the ten steps, is what rein costs per step:
//! validation, planning, intent ids, keys, breakers, the write-ahead ledger,
//! events, checkpoints and their SQLite commits. One bare store commit is
//! measured too, for attribution.
//!
//! Run: `cargo bench -p rein-engine --bench run_loop`. After the group it
//! prints runs/s and the per-step overhead from criterion's medians.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

mod support;

use rein_core::Timestamp;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::deadline::DEADLINE_HEADER;
use rein_core::header::{ATTEMPT_HEADER, ATTEMPT_ID_HEADER, INTENT_ID_HEADER, RUN_ID_HEADER};
use rein_core::registry::DEFAULT_IDEMPOTENCY_HEADER;
use rein_core::{Event, Outcome, RunId, TenantId, ToolClass};
use rein_engine::run::{AcceptAll, AgentBinding, Engine, http_client};
use rein_store::{NewRun, StepCommit, Store};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{GET_ORDER, OrderDesk, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};
use support::{INPUT, STEPS, agent, calls, provider, request, script};

const GROUP: &str = "run_loop";
const RUN: &str = "run_10_steps";
const DIRECT: &str = "direct_9_calls";
const COMMIT: &str = "store_commit_one_event";
fn bench(c: &mut Criterion) {
    let started = SystemTime::now();
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

    // Check once, outside the measurement, that a run is what we think.
    let out = runtime
        .block_on(engine.run(&template, &AcceptAll, request(None)))
        .unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(out.report.steps, STEPS);
    assert_eq!(out.report.completed.len(), calls.len());
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 4);

    let mut group = c.benchmark_group(GROUP);
    group.sample_size(20);
    group.warm_up_time(Duration::from_secs(2));
    group.measurement_time(Duration::from_secs(10));

    group.bench_function(RUN, |b| {
        b.iter_custom(|iters| {
            // Fresh providers, built before the clock starts.
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
                    assert_eq!(out.report.outcome, Outcome::Succeeded);
                    black_box(out);
                }
                start.elapsed()
            })
        })
    });

    // The same requests, as the adapter sends them, with no rein around.
    let client = http_client().unwrap();
    let urls: Vec<String> = calls.iter().map(|(t, _)| desk.tool_url(t)).collect();
    let run_id = uuid::Uuid::now_v7().to_string();
    let mut iteration = 0u64;
    group.bench_function(DIRECT, |b| {
        b.iter_custom(|iters| {
            runtime.block_on(async {
                let start = Instant::now();
                for _ in 0..iters {
                    iteration += 1;
                    for (i, ((tool, args), url)) in calls.iter().zip(&urls).enumerate() {
                        let intent = format!("{run_id}-{iteration}-{i}");
                        let mut request = client
                            .post(url)
                            .header(DEADLINE_HEADER, "60000")
                            .header(RUN_ID_HEADER, run_id.as_str())
                            .header(INTENT_ID_HEADER, intent.as_str())
                            .header(ATTEMPT_HEADER, "1")
                            .header(ATTEMPT_ID_HEADER, intent.as_str())
                            .json(args)
                            .timeout(Duration::from_millis(500));
                        if *tool == UPDATE_DELIVERY_TIME {
                            // Unique per iteration, so the desk applies it.
                            request = request.header(DEFAULT_IDEMPOTENCY_HEADER, intent.as_str());
                        }
                        let response = request.send().await.unwrap();
                        assert!(response.status().is_success(), "{}", response.status());
                        let body = response.bytes().await.unwrap();
                        black_box(serde_json::from_slice::<Value>(&body).unwrap());
                    }
                }
                start.elapsed()
            })
        })
    });

    // For attribution: one store commit of one small event on an open run,
    // the floor of each of a run's commits (channel to the store thread,
    // `BEGIN IMMEDIATE … COMMIT` in WAL, reply).
    let store = engine.store().clone();
    let run_id: RunId = RunId::new(uuid::Uuid::now_v7().to_string()).unwrap();
    runtime
        .block_on(store.create_run(NewRun {
            run_id: run_id.clone(),
            tenant: TenantId::new("default").unwrap(),
            agent: "order_desk".into(),
            input: INPUT.into(),
            parent_run_id: None,
            budget: json!({}),
            created_at_ms: Timestamp::from_millis(0),
            trace_parent: None,
        }))
        .unwrap();
    let event = Event {
        run_id: run_id.clone(),
        seq: 0,
        step: 1,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms: Timestamp::from_millis(0),
        data: rein_core::event::PlanCreated {
            intents: vec![rein_core::event::PlannedIntentSummary {
                intent_id: rein_core::IntentId::new("intent-1").unwrap(),
                tool: GET_ORDER.into(),
                call_id: "call-1".into(),
                class: Some(ToolClass::Read),
                salvaged: false,
            }],
            rejected: 0,
        }
        .into(),
    };
    group.bench_function(COMMIT, |b| {
        b.iter_custom(|iters| {
            let commits: Vec<StepCommit> = (0..iters)
                .map(|_| StepCommit {
                    events: vec![event.clone()],
                    ..StepCommit::default()
                })
                .collect();
            runtime.block_on(async {
                let start = Instant::now();
                for commit in commits {
                    black_box(store.commit_step(&run_id, commit).await.unwrap());
                }
                start.elapsed()
            })
        })
    });
    group.finish();

    print_derived(started);
    drop(engine);
    runtime.block_on(desk.shutdown()).unwrap();
}

/// Criterion's output directory, found as criterion finds it.
fn criterion_home() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/criterion")
}

/// The median (ns) with its 95% interval, if this process wrote it.
fn median(bench: &str, since: SystemTime) -> Option<(f64, f64, f64)> {
    let path = criterion_home()
        .join(GROUP)
        .join(bench)
        .join("new/estimates.json");
    let fresh = std::fs::metadata(&path).ok()?.modified().ok()? >= since;
    let estimates: Value = serde_json::from_slice(&std::fs::read(&path).ok()?).ok()?;
    let m = &estimates["median"];
    let ci = &m["confidence_interval"];
    fresh.then_some((
        m["point_estimate"].as_f64()?,
        ci["lower_bound"].as_f64()?,
        ci["upper_bound"].as_f64()?,
    ))
}

/// The closing note: runs/s and rein's per-step overhead.
fn print_derived(since: SystemTime) {
    let (Some(run), Some(direct)) = (median(RUN, since), median(DIRECT, since)) else {
        eprintln!(
            "run_loop: no fresh medians under {} (filtered run or test mode); nothing derived",
            criterion_home().display()
        );
        return;
    };
    let us = |ns: f64| ns / 1_000.0;
    eprintln!(
        "run_loop: {RUN} median {:.1} µs [{:.1}, {:.1}]; {DIRECT} median {:.1} µs [{:.1}, {:.1}]",
        us(run.0),
        us(run.1),
        us(run.2),
        us(direct.0),
        us(direct.1),
        us(direct.2),
    );
    eprintln!(
        "run_loop: {:.0} runs/s; per-step overhead {:.1} µs ((run - direct) / {STEPS}); run/direct = {:.2}x",
        1e9 / run.0,
        us((run.0 - direct.0) / f64::from(STEPS)),
        run.0 / direct.0,
    );
    if let Some(commit) = median(COMMIT, since) {
        eprintln!(
            "run_loop: one store commit {:.1} µs [{:.1}, {:.1}]; the overhead per run is {:.0} such commits",
            us(commit.0),
            us(commit.1),
            us(commit.2),
            (run.0 - direct.0) / commit.0,
        );
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

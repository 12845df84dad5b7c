//! Issue 13 item 5: every config `rein check` accepts starts.
//!
//! A property test feeds [`startup::prepare`] — the library path of
//! `rein check`, `rein run` and `rein serve` alike — configs whose numeric
//! fields (durations, sizes, counts, ratios) take extreme values, at and
//! beyond their ranges. Every config it accepts must bind an engine (the
//! one `rein serve` builds) and run an agent that reads from the testkit's
//! order desk on loopback, without a panic, to an outcome it explains (a
//! run that waits — one call a day — is cancelled and must then end); a
//! sample of `[server]` settings is also served for real. Every config it
//! refuses must name the changed field (or its partner in a rule between
//! two fields). CI pins the seed (`PROPTEST_RNG_SEED` in `.ci/run`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use rein_core::Outcome;
use rein_core::report::End;
use rein_engine::bind::bind_agent;
use rein_engine::config::Loader;
use rein_engine::run::{RunRequest, http_client};
use rein_engine::startup::{self, Purpose};
use rein_server::AppState;
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::OrderDesk;
use tokio_util::sync::CancellationToken;

/// A config using every numeric field this test varies; `DESK` is the
/// order desk's URL.
const BASE: &str = r#"
[providers.s]
kind = "scripted"
script = "script.json"
max_concurrency = 4
[providers.s.prices.m1]
input_per_mtok_usd = 1.0
output_per_mtok_usd = 2.0

[providers.o]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
timeout = "30s"
max_concurrency = 4
max_output_tokens = { gpt = 4096 }
[providers.o.stream]
first_byte_timeout = "5s"
idle_timeout = "5s"

[models.m]
provider = "o"
model = "gpt"

[resource_groups.g]
rate_per_sec = 100.0
burst = 10
max_concurrency = 4

[tools.get_order]
description = "Look up one order."
class = "read"
resource_group = "g"
side_effect_tier = "none"
owner = "orders"
self_heal_allowance = 1
schema = { type = "object", properties = { order_id = { type = "string", description = "e.g. A-1001" } } }
[tools.get_order.latency]
p50 = "10ms"
p95 = "20ms"
p99 = "30ms"
samples = 10
[tools.get_order.adapter]
kind = "http"
url = "${DESK}/tools/get_order"
max_result_bytes = 16000

[tools.watch]
description = "Watch an order."
class = "read"
resource_group = "g"
side_effect_tier = "none"
owner = "orders"
schema = { type = "object", properties = {} }
[tools.watch.latency]
mode = "observe"
fallback_p99 = "2s"
min_samples = 5
[tools.watch.adapter]
kind = "command"
program = "true"
max_output_bytes = 1000

[agents.a]
provider = "s"
model = "m1"
tools = ["get_order", "watch"]
compensation_reserve = 0.1
[agents.a.budget]
wall_clock = "60s"
max_steps = 10
max_tokens = 100000
max_cost_usd = 1.0
[agents.a.retry]
max_attempts = 3
base_delay = "10ms"
max_delay = "100ms"
budget_ratio = 0.2
budget_initial = 10
budget_max = 100
[agents.a.model_retry]
max_retries = 2
max_wait = "5s"
max_wasted_tokens = 1000
[agents.a.loop_guard]
max_repeats = 3
no_progress_window = 5
repeat_failure_threshold = 3
self_heal_allowance = 2

[breakers.tool]
break_duration = "30s"
half_open_max_wait = "10s"
consecutive_failures = 5
half_open_probes = 1
close_after_successes = 1

[server]
body_limit = 1048576
[server.idempotency]
max_key_length = 255
retention = "24h"
[server.queue]
lease = "60s"
max_attempts = 3
workers = 2
[server.reconciliation]
heartbeat_interval = "30s"
orphan_threshold = "5m"
scan_interval = "1m"
max_runs_per_scan = 100
[server.agent_graph]
max_depth = 3
max_total_tokens = 200000
max_total_runs = 25
"#;

/// The script: read one order over HTTP and run the command tool, then
/// answer.
const SCRIPT: &str = r#"{"turns": [
  {"text": "", "tool_calls": [{"id": "c1", "name": "get_order", "arguments": {"order_id": "A-1001"}},
                              {"id": "c2", "name": "watch", "arguments": {}}], "usage": {"input": 10, "output": 5}},
  {"text": "A-1001 is on its way.", "usage": {"input": 20, "output": 5}}
]}"#;

#[derive(Debug, Clone, Copy)]
enum Kind {
    Duration,
    Count,
    Ratio,
}

/// Every numeric field varied, by dotted path.
const FIELDS: &[(&str, Kind)] = &[
    ("providers.s.max_concurrency", Kind::Count),
    ("providers.s.prices.m1.input_per_mtok_usd", Kind::Ratio),
    ("providers.s.prices.m1.output_per_mtok_usd", Kind::Ratio),
    ("providers.o.timeout", Kind::Duration),
    ("providers.o.max_concurrency", Kind::Count),
    ("providers.o.stream.first_byte_timeout", Kind::Duration),
    ("providers.o.stream.idle_timeout", Kind::Duration),
    ("resource_groups.g.rate_per_sec", Kind::Ratio),
    ("resource_groups.g.burst", Kind::Count),
    ("resource_groups.g.max_concurrency", Kind::Count),
    ("tools.get_order.self_heal_allowance", Kind::Count),
    ("tools.get_order.latency.p50", Kind::Duration),
    ("tools.get_order.latency.p95", Kind::Duration),
    ("tools.get_order.latency.p99", Kind::Duration),
    ("tools.get_order.latency.samples", Kind::Count),
    ("tools.get_order.adapter.max_result_bytes", Kind::Count),
    ("tools.watch.latency.fallback_p99", Kind::Duration),
    ("tools.watch.latency.min_samples", Kind::Count),
    ("tools.watch.adapter.max_output_bytes", Kind::Count),
    ("agents.a.compensation_reserve", Kind::Ratio),
    ("agents.a.budget.wall_clock", Kind::Duration),
    ("agents.a.budget.max_steps", Kind::Count),
    ("agents.a.budget.max_tokens", Kind::Count),
    ("agents.a.budget.max_cost_usd", Kind::Ratio),
    ("agents.a.retry.max_attempts", Kind::Count),
    ("agents.a.retry.base_delay", Kind::Duration),
    ("agents.a.retry.max_delay", Kind::Duration),
    ("agents.a.retry.budget_ratio", Kind::Ratio),
    ("agents.a.retry.budget_initial", Kind::Count),
    ("agents.a.retry.budget_max", Kind::Count),
    ("agents.a.model_retry.max_retries", Kind::Count),
    ("agents.a.model_retry.max_wait", Kind::Duration),
    ("agents.a.model_retry.max_wasted_tokens", Kind::Count),
    ("agents.a.loop_guard.max_repeats", Kind::Count),
    ("agents.a.loop_guard.no_progress_window", Kind::Count),
    ("agents.a.loop_guard.repeat_failure_threshold", Kind::Count),
    ("agents.a.loop_guard.self_heal_allowance", Kind::Count),
    ("breakers.tool.break_duration", Kind::Duration),
    ("breakers.tool.half_open_max_wait", Kind::Duration),
    ("breakers.tool.consecutive_failures", Kind::Count),
    ("breakers.tool.half_open_probes", Kind::Count),
    ("breakers.tool.close_after_successes", Kind::Count),
    ("server.body_limit", Kind::Count),
    ("server.idempotency.max_key_length", Kind::Count),
    ("server.idempotency.retention", Kind::Duration),
    ("server.queue.lease", Kind::Duration),
    ("server.queue.max_attempts", Kind::Count),
    ("server.queue.workers", Kind::Count),
    ("server.reconciliation.heartbeat_interval", Kind::Duration),
    ("server.reconciliation.orphan_threshold", Kind::Duration),
    ("server.reconciliation.scan_interval", Kind::Duration),
    ("server.reconciliation.max_runs_per_scan", Kind::Count),
    ("server.agent_graph.max_depth", Kind::Count),
    ("server.agent_graph.max_total_tokens", Kind::Count),
    ("server.agent_graph.max_total_runs", Kind::Count),
    ("server.shutdown_grace", Kind::Duration),
    ("server.limits.header_timeout", Kind::Duration),
    ("server.limits.body_timeout", Kind::Duration),
    ("server.limits.idle_timeout", Kind::Duration),
    ("server.limits.max_connections", Kind::Count),
];

fn duration() -> impl Strategy<Value = toml::Value> {
    prop_oneof![
        Just("0s".to_owned()),
        Just("1ns".to_owned()),
        Just("366d".to_owned()),
        Just("367d".to_owned()),
        Just("18446744073709551615s".to_owned()),
        Just("1000000000000d".to_owned()),
        any::<u64>().prop_map(|n| format!("{n}s")),
        any::<u64>().prop_map(|n| format!("{n}ns")),
        (0u64..100_000).prop_map(|n| format!("{n}ms")),
    ]
    .prop_map(toml::Value::String)
}

fn count() -> impl Strategy<Value = toml::Value> {
    prop_oneof![
        Just(0i64),
        Just(1),
        Just(-1),
        Just(i64::from(u32::MAX)),
        Just(i64::from(u32::MAX) + 1),
        Just(i64::MAX),
        Just(i64::MIN),
        any::<i64>(),
        0i64..1000,
    ]
    .prop_map(toml::Value::Integer)
}

fn ratio() -> impl Strategy<Value = toml::Value> {
    prop_oneof![
        Just(0.0f64),
        Just(-1.0),
        Just(1.0),
        Just(1e-300),
        Just(1e300),
        Just(f64::MAX),
        Just(f64::INFINITY),
        Just(f64::NAN),
        0.0f64..2.0,
    ]
    .prop_map(toml::Value::Float)
}

fn change() -> impl Strategy<Value = (&'static str, toml::Value)> {
    (0..FIELDS.len()).prop_flat_map(|i| {
        let (path, kind) = FIELDS[i];
        let value = match kind {
            Kind::Duration => duration().boxed(),
            Kind::Count => count().boxed(),
            Kind::Ratio => ratio().boxed(),
        };
        value.prop_map(move |v| (path, v))
    })
}

/// `table` with `path` set to `value`.
fn set(table: &mut toml::Table, path: &str, value: toml::Value) {
    let mut parts: Vec<&str> = path.split('.').collect();
    let last = parts.pop().unwrap();
    let mut at = table;
    for part in parts {
        at = at
            .entry(part)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .unwrap();
    }
    at.insert(last.to_owned(), value);
}

/// How long an accepted config's run may take before it is cancelled: a
/// rate of one call a day legitimately waits for its token.
const GRACE: Duration = Duration::from_secs(2);

/// How long a run, once cancelled, or a server, once told to stop, may
/// take to end: generous, so two loaded cores never flake it; a hang
/// fails the case.
const BOUND: Duration = Duration::from_secs(30);

/// Rules between two fields: a refusal of one may name the other.
const RELATED: &[&[&str]] = &[
    &[
        "tools.get_order.latency.p50",
        "tools.get_order.latency.p95",
        "tools.get_order.latency.p99",
    ],
    &["agents.a.retry.base_delay", "agents.a.retry.max_delay"],
    &[
        "providers.o.timeout",
        "providers.o.stream.first_byte_timeout",
        "providers.o.stream.idle_timeout",
    ],
    &["agents.a.retry.budget_initial", "agents.a.retry.budget_max"],
    &[
        "server.reconciliation.heartbeat_interval",
        "server.reconciliation.orphan_threshold",
    ],
];

/// Whether `field`, named by a refusal, is one of `changed` or bound to
/// one by a rule between fields.
fn names_a_changed_field(field: &str, changed: &[&str]) -> bool {
    changed.iter().any(|c| {
        *c == field
            || RELATED
                .iter()
                .any(|rule| rule.contains(c) && rule.contains(&field))
    })
}

/// The fields whose effect on a running server the single-field sweep
/// checks with a real `serve` (see [`serve_once`]).
const SERVED: &[&str] = &[
    "server.limits.header_timeout",
    "server.limits.body_timeout",
    "server.limits.idle_timeout",
    "server.limits.max_connections",
    "server.shutdown_grace",
    "server.idempotency.retention",
];

/// Prepares the config with `changes` as `rein serve` does; runs the
/// agent when it is accepted (and, with `serve`, serves it), and checks
/// that a refusal names a changed field.
fn check_case(
    dir: &Path,
    changes: &[(&'static str, toml::Value)],
    serve: bool,
) -> Result<(), TestCaseError> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let desk = OrderDesk::start().await.unwrap();
        let mut table: toml::Table = toml::from_str(BASE).unwrap();
        for (path, value) in changes {
            set(&mut table, path, value.clone());
        }
        let path = dir.join("rein.toml");
        std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
        std::fs::write(dir.join("script.json"), SCRIPT).unwrap();
        let desk_url = desk.base_url().to_owned();
        let env = move |name: &str| (name == "DESK").then(|| desk_url.clone());
        let client = http_client().unwrap();
        let purpose = Purpose::Serve { listen: None };
        let started = match startup::prepare(&Loader::with_env(&env), &path, &client, &env, purpose)
        {
            Err(errors) => {
                let changed: Vec<&str> = changes.iter().map(|(p, _)| *p).collect();
                for problem in errors.problems() {
                    prop_assert!(!problem.field.is_empty(), "no field: {problem}");
                }
                prop_assert!(
                    errors
                        .problems()
                        .iter()
                        .any(|p| names_a_changed_field(&p.field, &changed)),
                    "refused {changed:?} without naming one of them:\n{errors}"
                );
                return Ok(());
            }
            Ok(started) => started,
        };
        let registry = &started.registry;
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.join("rein.db")).unwrap());
        let engine =
            rein_server::build_engine(registry, store.clone(), client.clone(), Some(7)).unwrap();
        prop_assert!(started.models.contains_key("m"), "the binding is bound");
        let agent = bind_agent(registry, "a", &client, &env).unwrap();
        let cancel = CancellationToken::new();
        let request = RunRequest {
            input: "Where is A-1001?".into(),
            cancel: Some(cancel.clone()),
            ..RunRequest::default()
        };
        let (out, cancelled) = {
            let run = engine.run(&agent, &started.schemas, request);
            tokio::pin!(run);
            match tokio::time::timeout(GRACE, &mut run).await {
                Ok(out) => (out, false),
                Err(_) => {
                    // It waits (a rate of one call a day): cancelled, it must
                    // end, and say so.
                    cancel.cancel();
                    match tokio::time::timeout(BOUND, &mut run).await {
                        Ok(out) => (out, true),
                        Err(_) => {
                            return Err(TestCaseError::fail(format!(
                                "the run did not end within {BOUND:?} of being cancelled"
                            )));
                        }
                    }
                }
            }
        };
        let out = out.map_err(|e| TestCaseError::fail(format!("run failed: {e}")))?;
        let report = &out.report;
        let end = report.basis.as_ref().map(|b| &b.end);
        prop_assert!(
            !matches!(end, Some(End::Internal(_) | End::StoreFailed(_))),
            "rein failed the run: {report:?}"
        );
        match report.outcome {
            Outcome::Succeeded => prop_assert_eq!(report.completed.len(), 2, "{:?}", report),
            Outcome::Cancelled => prop_assert!(cancelled, "cancelled by nobody: {report:?}"),
            // A ceiling at an extreme (a step, token, cost or time budget,
            // a reserve, a loop guard) ends the run explicitly.
            Outcome::BudgetExhausted => {}
            _ => prop_assert!(
                matches!(end, Some(End::Loop(_) | End::Budget(_))) || !changes.is_empty(),
                "{report:?}"
            ),
        }
        if changes.is_empty() {
            // The base config's run really reads and answers.
            prop_assert_eq!(report.outcome, Outcome::Succeeded);
        }
        if serve {
            serve_once(started, store, engine, client).await?;
        }
        Ok(())
    })
}

/// Serves `started` on a loopback port as `rein serve` does: a keyed,
/// queued submission is accepted and replayed (the retention's arithmetic),
/// a connection is served within `server.limits`, and the server stops
/// within [`BOUND`] of being told to (its `shutdown_grace`, hurried as a
/// second signal hurries it).
async fn serve_once(
    started: startup::Startup,
    store: Arc<dyn Store>,
    engine: rein_engine::run::Engine,
    client: reqwest::Client,
) -> Result<(), TestCaseError> {
    let state = Arc::new(AppState::new(
        started.registry,
        started.schemas,
        store,
        engine,
        client,
        started.models,
    ));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(rein_server::serve(state.clone(), listener, async move {
        let _ = stopped.await;
    }));
    let http = reqwest::Client::builder().timeout(BOUND).build().unwrap();
    let submit = || {
        http.post(format!("http://{addr}/v1/agents/a/runs"))
            .header("Idempotency-Key", "k")
            .json(&serde_json::json!({"input": "Where is A-1001?", "mode": "queued"}))
            .send()
    };
    let first = submit()
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let status = first.status().as_u16();
    let first: serde_json::Value = first.json().await.unwrap();
    prop_assert_eq!(status, 202, "{}", first);
    let again = submit()
        .await
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let status = again.status().as_u16();
    let again: serde_json::Value = again.json().await.unwrap();
    prop_assert!(status == 202 || status == 200, "{status}: {again}");
    // The retention is honoured: within it the key replays the run; past
    // it (1 ns is past by the second request) the key is free again.
    let retention = state.settings.idempotency.retention;
    if retention >= BOUND {
        prop_assert_eq!(
            &first["run_id"],
            &again["run_id"],
            "replayed within retention"
        );
    } else if retention <= Duration::from_micros(1) {
        prop_assert_ne!(
            &first["run_id"],
            &again["run_id"],
            "retention {:?}",
            retention
        );
    }
    let _ = stop.send(());
    // A second signal: what is still in flight is handed on at once.
    state.engine.interrupt(rein_engine::run::HandOn::AnyWorker);
    match tokio::time::timeout(BOUND, server).await {
        Ok(Ok(Ok(()))) => Ok(()),
        other => Err(TestCaseError::fail(format!(
            "the server did not stop within {BOUND:?}: {other:?}"
        ))),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_config_prepare_accepts_starts_and_every_refusal_names_its_field(
        changes in proptest::collection::vec(change(), 1..4)
    ) {
        let dir = tempfile::tempdir().unwrap();
        check_case(dir.path(), &changes, false)?;
    }
}

/// The values at and beyond the ranges of each kind of field.
fn extremes(kind: Kind) -> Vec<toml::Value> {
    match kind {
        Kind::Duration => [
            "0s",
            "1ns",
            "366d",
            "367d",
            "18446744073709551615s",
            "1000000000000d",
        ]
        .map(|s| toml::Value::String(s.to_owned()))
        .to_vec(),
        Kind::Count => [
            0,
            1,
            -1,
            i64::from(u32::MAX),
            i64::from(u32::MAX) + 1,
            i64::MAX,
        ]
        .map(toml::Value::Integer)
        .to_vec(),
        Kind::Ratio => [0.0, -1.0, 1e-300, 1e300, f64::INFINITY, f64::NAN]
            .map(toml::Value::Float)
            .to_vec(),
    }
}

/// Every field at every extreme, one at a time: the sweep a random search
/// could miss (one field in 60 at one value in 9).
#[test]
fn every_field_at_every_extreme_starts_or_is_refused_by_name() {
    for (path, kind) in FIELDS {
        for value in extremes(*kind) {
            let dir = tempfile::tempdir().unwrap();
            let serve = SERVED.contains(path);
            if let Err(e) = check_case(dir.path(), &[(path, value.clone())], serve) {
                panic!("{path} = {value}: {e}");
            }
        }
    }
}

/// Issue 13 item 5, as reproduced: both durations passed `rein check`,
/// then one panicked the engine (overflow adding durations) and the other
/// failed the run's lease.
#[test]
fn r13_overflowing_wall_clock_is_refused_naming_the_field() {
    for value in ["18446744073709551615s", "1000000000000d"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.toml");
        let mut table: toml::Table = toml::from_str(BASE).unwrap();
        set(
            &mut table,
            "agents.a.budget.wall_clock",
            toml::Value::String(value.into()),
        );
        std::fs::write(&path, toml::to_string(&table).unwrap()).unwrap();
        std::fs::write(dir.path().join("script.json"), SCRIPT).unwrap();
        let env = |name: &str| (name == "DESK").then(|| "http://127.0.0.1:9".to_owned());
        let client = http_client().unwrap();
        let errors = startup::prepare(
            &Loader::with_env(env),
            &path,
            &client,
            &env,
            Purpose::Serve { listen: None },
        )
        .expect_err("an overflowing wall_clock is refused");
        let problem = &errors.problems()[0];
        assert_eq!(problem.field, "agents.a.budget.wall_clock", "{errors}");
        assert!(
            problem.message.starts_with("must be at most 366d"),
            "{errors}"
        );
        assert!(problem.position.is_some(), "names the line: {errors}");
    }
}

/// Issue 13 item 5: a missing script file passed `rein check` and failed
/// `rein run`; now the check reads it, and says the cause once.
#[test]
fn r13_missing_script_is_refused_once_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.toml");
    std::fs::write(&path, BASE).unwrap();
    let env = |name: &str| (name == "DESK").then(|| "http://127.0.0.1:9".to_owned());
    let client = http_client().unwrap();
    let errors = startup::prepare(
        &Loader::with_env(env),
        &path,
        &client,
        &env,
        Purpose::Serve { listen: None },
    )
    .expect_err("a missing script is refused");
    assert_eq!(errors.len(), 1, "{errors}");
    let problem = &errors.problems()[0];
    assert_eq!(problem.field, "providers.s.script");
    let cause = "No such file or directory";
    assert_eq!(problem.message.matches(cause).count(), 1, "{errors}");
}

#[test]
fn base_config_starts() {
    let dir = tempfile::tempdir().unwrap();
    check_case(dir.path(), &[], true).unwrap();
}

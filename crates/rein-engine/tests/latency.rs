//! Observed latency (issue 16 item 1): `mode = "observe"` learns a tool's
//! latency from real calls at the order desk (injected delays, paused
//! time), the allowance follows it, and a second engine on the same SQLite
//! file plans with the persisted profile from its first call.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::call;
use common::configured::{degradations, engine, registry, run, write_config};
use rein_core::event::{BaselineSource, ToolCallStarted};
use rein_core::{Event, EventData, Outcome};
use rein_store::HealthStore;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};
use serde_json::json;

/// Samples before the observed profile is trusted.
const MIN_SAMPLES: usize = 5;

const CONFIG: &str = r#"
[providers.replay]
kind = "scripted"
script = "script.json"

[resource_groups.order_api]
max_concurrency = 8

[tools.get_order]
description = "Look up one order."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
schema = { type = "object", properties = { order_id = { type = "string", description = "The order id." } }, required = ["order_id"] }
latency = { mode = "observe", fallback_p99 = "5s", min_samples = 5, allowance_factor = 3 }
adapter = { kind = "http", url = "${ORDER_DESK_URL}/tools/get_order" }

[agents.desk]
provider = "replay"
model = "m"
system_prompt = "Look orders up."
tools = ["get_order"]
model_latency = "50ms"
[agents.desk.budget]
wall_clock = "600s"
max_steps = 40
[agents.desk.loop_guard]
max_repeats = 100
no_progress_window = 100
"#;

/// A config directory whose script looks up `lookups` orders, then answers.
fn config(dir: &std::path::Path, lookups: usize) -> std::path::PathBuf {
    let ids = ["A-1001", "A-1002", "A-1003"];
    let turns = (0..lookups)
        .map(|n| call(GET_ORDER, json!({ "order_id": ids[n % ids.len()] })))
        .collect();
    write_config(dir, CONFIG, turns)
}

/// The allowance of every tool attempt, in order.
fn allowances(events: &[Event]) -> Vec<Duration> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ToolCallStarted(ToolCallStarted { allowance, .. }) => Some(*allowance),
            _ => None,
        })
        .collect()
}

fn within(d: Duration, low: Duration, high: Duration) -> bool {
    (low..=high).contains(&d)
}

#[tokio::test(start_paused = true)]
async fn observe_mode_learns_from_real_calls_and_a_second_engine_uses_the_persisted_profile() {
    let ms = Duration::from_millis;
    let first_run = 8;
    let degraded_run = 20;
    // The desk answers the first two runs' lookups after 300 ms, the
    // last run's after 800 ms: a degradation (still inside the learnt
    // allowance of 900 ms, so every call answers).
    let mut faults = Faults::none();
    for n in 0..first_run + 1 + degraded_run {
        let delay = if n <= first_run { ms(300) } else { ms(800) };
        faults = faults.then(GET_ORDER, Fault::Delay(delay));
    }
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");

    // Process one learns: the fallback (5 s × 3) until five samples
    // exist, then the observed p99 (300 ms × 3).
    let path = config(dir.path(), first_run);
    let reg = registry(&path, &desk);
    let one = engine(&db, &reg);
    let (outcome, events) = run(&one, &reg).await;
    assert_eq!(outcome, Outcome::Succeeded, "{events:#?}");
    let seen = allowances(&events);
    assert_eq!(seen.len(), first_run);
    for (n, allowance) in seen.iter().enumerate() {
        if n < MIN_SAMPLES {
            assert_eq!(*allowance, ms(15_000), "call {n}: the fallback × 3");
        } else {
            assert!(
                within(*allowance, ms(900), ms(960)),
                "call {n}: 3 × the observed p99 (~300 ms), not {allowance:?}"
            );
        }
    }

    // Process two, a fresh engine on the same file, plans its very first
    // call with the persisted profile.
    let dir_two = tempfile::tempdir().unwrap();
    let path = config(dir_two.path(), 1);
    let reg = registry(&path, &desk);
    let two = engine(&db, &reg);
    let (_, events) = run(&two, &reg).await;
    let seen = allowances(&events);
    assert!(
        within(seen[0], ms(900), ms(960)),
        "the second engine's first call: 3 × the persisted p99, not {:?}",
        seen[0]
    );

    // The desk slows to 800 ms: a window of 20 samples has its p99 above
    // twice the baseline (the profile when first trusted): an event and a
    // counter; and the allowance follows the slower profile.
    let dir_three = tempfile::tempdir().unwrap();
    let path = config(dir_three.path(), degraded_run);
    let reg = registry(&path, &desk);
    let (outcome, events) = run(&two, &reg).await;
    assert_eq!(outcome, Outcome::Succeeded);
    let degraded = degradations(&events);
    assert_eq!(degraded.len(), 1, "{degraded:?}");
    assert_eq!(degraded[0].subject, "tool:get_order");
    assert_eq!(degraded[0].baseline_source, BaselineSource::Observed);
    assert!(
        within(degraded[0].baseline, ms(300), ms(320)),
        "{degraded:?}"
    );
    assert!(within(degraded[0].p99, ms(800), ms(810)), "{degraded:?}");
    let last = *allowances(&events).last().unwrap();
    assert!(
        within(last, ms(2_400), ms(2_480)),
        "3 × the p99 of a profile now mostly at 800 ms, not {last:?}"
    );
    assert!(
        two.metrics()
            .render()
            .contains("rein_latency_degraded_total{subject=\"tool:get_order\"} 1"),
        "{}",
        two.metrics().render()
    );

    // Both processes' samples are in the store, summed.
    let stored = SqliteStore::open(&db).unwrap().latency_histograms().await;
    let rows = stored.unwrap();
    let get_order = rows
        .records
        .iter()
        .find(|r| r.subject == "tool:get_order")
        .unwrap();
    assert_eq!(
        get_order.histogram.samples(),
        (first_run + 1 + degraded_run) as u64
    );
    assert!(rows.corrupt.is_empty());
}

/// `model_latency` is what a turn is assumed to need: a median longer than
/// the run's wall clock ends the run before any model call is sent.
#[tokio::test(start_paused = true)]
async fn model_latency_decides_whether_a_turn_fits_before_it_is_sent() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), 1);
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("model_latency = \"50ms\"", "model_latency = \"10m\""),
    )
    .unwrap();
    let reg = registry(&path, &desk);
    let one = engine(&dir.path().join("rein.db"), &reg);
    let (outcome, events) = run(&one, &reg).await;
    assert_eq!(outcome, Outcome::BudgetExhausted, "{events:#?}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.data, EventData::ModelCallStarted(_))),
        "no model call was sent"
    );
}

//! What one process learns of its retries, every process knows (issue 16
//! items 4 and 6): the success rate a retry's worth is decided on is kept
//! in the store, so a second engine on the same SQLite file decides its
//! first retry from the first engine's outcomes instead of the prior (½),
//! and old outcomes fade (halved per `RETRY_RATE_HALF_LIFE`).
//!
//! Each engine has its own store handle on one file, as two processes do,
//! and a manual clock whose wall time says which decay window it is in;
//! the tool always fails transiently at the order desk on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use common::{agent, call, pause_safe, script};
use rein_core::breaker::BreakersConfig;
use rein_core::clock::MANUAL_CLOCK_WALL_ORIGIN_UNIX_SECS;
use rein_core::deadline::{BudgetLimits, Cost};
use rein_core::retry::{RETRY_RATE_HALF_LIFE, RetryConfig, RetryPolicy};
use rein_core::{EventKind, ManualClock};
use rein_engine::run::{AcceptAll, Engine, RunRequest};
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};
use serde_json::{Value, json};

/// One engine as one process: its own handle on the store file, its own
/// clock reading `wall` at its origin.
struct Node {
    engine: Engine,
    store: Arc<dyn Store>,
}

fn node(file: &Path, wall: SystemTime) -> Node {
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(file).unwrap());
    let store: Arc<dyn Store> = Arc::new(pause_safe(sqlite));
    // The manual clock never moves, so an arm opened by the failures would
    // stay open: the tool's arms never open here, its retries are judged
    // by their worth alone.
    let mut breakers = BreakersConfig::default();
    for arm in [&mut breakers.tool, &mut breakers.resource_group] {
        arm.consecutive_failures = Some(1_000_000);
        arm.failure_ratio = None;
    }
    let engine = Engine::builder(store.clone())
        .rng_seed(7)
        .breakers(breakers)
        .clock(Arc::new(ManualClock::with_wall_origin(wall)))
        .build()
        .unwrap();
    Node { engine, store }
}

/// The manual clock's wall origin, plus `later`.
fn wall(later: Duration) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(MANUAL_CLOCK_WALL_ORIGIN_UNIX_SECS) + later
}

/// One run looking an order up, worth $1, within 2 s: the worth rationale
/// of its first retry decision, as `(kind, rate)` — `retry_scheduled` with
/// the rate it was made on, or `retry_abandoned` (`not_worth_its_cost`).
async fn first_decision(node: &Node, desk: &OrderDesk) -> (EventKind, Value) {
    let mut a = agent(
        desk,
        script(json!([call(GET_ORDER, json!({"order_id": "A-1001"}))])),
        true,
    );
    a.budget = BudgetLimits::new(Duration::from_secs(2)).unwrap();
    // One retry per run at most, and a retry budget that never runs dry:
    // only the worth rule stops a retry.
    let mut retry = RetryConfig::default();
    retry.max_attempts = 2;
    retry.budget_ratio = 1.0;
    retry.budget_initial = 1_000;
    retry.budget_max = 1_000;
    a.retry = RetryPolicy::try_from(retry).unwrap();
    a.planner = a
        .planner
        .with_value_of_success(Some(Cost::from_usd("v", 1.0).unwrap()));
    let out = node
        .engine
        .run(
            &a,
            &AcceptAll,
            RunRequest {
                input: "Look order A-1001 up.".into(),
                ..RunRequest::default()
            },
        )
        .await
        .unwrap();
    let events = node.store.events(&out.run_id, 0).await.unwrap();
    let all: Vec<(EventKind, Value)> = events
        .iter()
        .map(|e| (e.kind(), e.data.to_value().unwrap()))
        .collect();
    events
        .into_iter()
        .map(|e| (e.kind(), e.data.to_value().unwrap()))
        .find_map(|(kind, data)| match kind {
            EventKind::RetryScheduled if data.get("worth").is_some() => {
                Some((kind, data["worth"]["rate"].clone()))
            }
            EventKind::RetryAbandoned if data["reason"]["kind"] == "not_worth_its_cost" => {
                Some((kind, data["reason"]["worth"]["rate"].clone()))
            }
            _ => None,
        })
        .unwrap_or_else(|| panic!("a worth decision: {all:#?}"))
}

/// Runs on `node` until one judges the lookup's first retry not worth it
/// (its rate learnt from the runs before); that rate.
async fn learn_until_abandoned(node: &Node, desk: &OrderDesk) -> Value {
    for _ in 0..40 {
        let (kind, rate) = first_decision(node, desk).await;
        if kind == EventKind::RetryAbandoned {
            assert_eq!(rate["successes"], 0);
            return rate;
        }
    }
    panic!("the lookup's retries were never judged not worth it");
}

async fn failing_desk() -> OrderDesk {
    OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().always(GET_ORDER, Fault::status(503))),
    )
    .await
    .unwrap()
}

fn tries(rate: &Value) -> u64 {
    rate["tries"].as_u64().unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_second_engine_decides_its_first_retry_from_the_first_ones_outcomes() {
    let desk = failing_desk().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rein.db");
    let one = node(&file, wall(Duration::ZERO));
    let learnt = learn_until_abandoned(&one, &desk).await;
    assert!(tries(&learnt) >= 2, "learnt from several retries: {learnt}");

    // A fresh engine on the same file, as a new `rein run` process: its
    // very first decision rests on what the first one counted (whether
    // that gives the retry up also depends on its jitter, drawn from its
    // own seed).
    let two = node(&file, wall(Duration::ZERO));
    let (_, rate) = first_decision(&two, &desk).await;
    assert_eq!(rate, learnt, "the second engine's first decision");

    // On a store of its own, the same first decision starts from the
    // prior and the retry is made.
    let other = tempfile::tempdir().unwrap();
    let alone = node(&other.path().join("rein.db"), wall(Duration::ZERO));
    let (kind, rate) = first_decision(&alone, &desk).await;
    assert_eq!(
        (kind, rate),
        (
            EventKind::RetryScheduled,
            json!({"successes": 0, "tries": 0})
        )
    );
}

#[tokio::test(start_paused = true)]
async fn old_outcomes_fade_back_toward_the_prior() {
    let desk = failing_desk().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rein.db");
    let one = node(&file, wall(Duration::ZERO));
    let learnt = learn_until_abandoned(&one, &desk).await;

    // One half-life later the counts are halved (rounding down)…
    let later = node(&file, wall(RETRY_RATE_HALF_LIFE));
    let (_, rate) = first_decision(&later, &desk).await;
    assert_eq!(
        tries(&rate),
        tries(&learnt) / 2,
        "halved: {rate} of {learnt}"
    );

    // …and a day later nothing is left: the prior again, and the retry is
    // made.
    let next_day = node(&file, wall(Duration::from_secs(86_400)));
    let (kind, rate) = first_decision(&next_day, &desk).await;
    assert_eq!(
        (kind, rate),
        (
            EventKind::RetryScheduled,
            json!({"successes": 0, "tries": 0})
        )
    );
}

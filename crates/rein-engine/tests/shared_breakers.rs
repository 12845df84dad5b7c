//! Provider breaker openings shared across nodes through the store (issue 7
//! item 2): two engines on one SQLite file, a real mock model server over
//! loopback, the OpenAI-compatible provider, manual clocks. A node that
//! never saw a failure refuses a provider another node opened, without
//! calling it, until the opening ends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::Timestamp;
use std::sync::Arc;
use std::time::Duration;

use rein_core::breaker::{DEFAULT_BREAK_DURATION, DEFAULT_CLOSE_AFTER_SUCCESSES};
use rein_core::{Category, Clock, EventKind, ManualClock};
use rein_engine::run::{Engine, ModelBinding, ModelError};
use rein_engine::testing::{openai_binding as binding, question};
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use serde_json::Value;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One node: its own store handle on the shared file, its own clock.
struct Node {
    engine: Engine,
    clock: ManualClock,
}

fn node(path: &std::path::Path, name: &str, refresh: Duration) -> Node {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(path).unwrap());
    // Each node has its own monotonic clock; their wall clocks agree.
    let clock = ManualClock::new();
    let engine = Engine::builder(store)
        .clock(Arc::new(clock.clone()))
        .rng_seed(7)
        .shared_breakers(name, refresh)
        .build()
        .unwrap();
    Node { engine, clock }
}

impl Node {
    async fn ask(&self, b: &ModelBinding) -> (Result<(), ModelError>, Vec<(EventKind, Value)>) {
        let (ask, seen) = question();
        let result = self.engine.ask_model(b, ask).await.map(drop);
        let events = seen.lock().unwrap().clone();
        (result, events)
    }

    /// Asks until this node's own arm opens.
    async fn fail_until_open(&self, b: &ModelBinding) {
        for _ in 0..10 {
            if let (Err(e), _) = self.ask(b).await
                && e.category == Category::CircuitOpen
            {
                return;
            }
        }
        panic!("the circuit never opened");
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(
            self.clock
                .system_now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap()
    }
}

fn rejected(events: &[(EventKind, Value)]) -> Vec<Value> {
    events
        .iter()
        .filter(|(k, _)| *k == EventKind::CallRejected)
        .map(|(_, d)| d.clone())
        .collect()
}

fn advance(nodes: &[&Node], by: Duration) {
    for n in nodes {
        n.clock.advance(by);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_one_node_opened_is_refused_by_another_until_the_break_ends() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    // Refresh zero: each call reads the openings, so the test synchronizes
    // on the store's state, never on time.
    let a = node(&path, "node-a", Duration::ZERO);
    let b = node(&path, "node-b", Duration::ZERO);
    let model = MockModel::start_with(
        MockModelConfig::default()
            .with_model("primary-model")
            .with_fallback_text("answered"),
    )
    .await
    .unwrap();
    // Five failures, then answers.
    model.push_replies((0..5).map(|_| Reply::server_error()));
    let bind = binding(&model.openai_base_url());

    a.fail_until_open(&bind).await;
    assert_eq!(model.request_count(), 5, "A's arm opened after 5 failures");
    let store = a.engine.store();
    let openings = store
        .breaker_openings(Timestamp::from_millis(a.now_ms()))
        .await
        .unwrap();
    assert_eq!(openings.len(), 1, "{openings:?}");
    assert_eq!(openings[0].arm, "provider.primary");
    assert_eq!(openings[0].opened_by, "node-a");
    assert_eq!(
        openings[0].open_until_ms,
        Timestamp::from_millis(
            a.now_ms() + u64::try_from(DEFAULT_BREAK_DURATION.as_millis()).unwrap()
        )
    );

    // B never saw a failure, yet refuses at once, without a request.
    let (result, events) = b.ask(&bind).await;
    let e = result.expect_err("B refuses the provider A opened");
    assert_eq!(e.category, Category::CircuitOpen, "{e}");
    let after = e.retry_after.expect("the caller is told when to come back");
    assert!(
        !after.is_zero() && after <= DEFAULT_BREAK_DURATION,
        "{after:?}"
    );
    assert_eq!(model.request_count(), 5, "B did not call the provider");
    let refused = rejected(&events);
    assert_eq!(refused.len(), 1, "{events:?}");
    assert_eq!(refused[0]["shared"], true);
    assert_eq!(refused[0]["opened_by"], "node-a");
    assert_eq!(refused[0]["name"], "primary");
    assert_eq!(refused[0]["reason"], "circuit_open");
    assert!(
        !events
            .iter()
            .any(|(k, _)| *k == EventKind::ModelCallStarted),
        "no call was started"
    );

    // Just before the end of the break B still refuses; at its end B's
    // calls reach the provider again (its own arm is closed).
    advance(&[&a, &b], DEFAULT_BREAK_DURATION - ms(1));
    let (result, _) = b.ask(&bind).await;
    assert_eq!(result.unwrap_err().category, Category::CircuitOpen);
    assert_eq!(model.request_count(), 5);
    advance(&[&a, &b], ms(1));
    let (result, events) = b.ask(&bind).await;
    result.expect("B asks the provider again after the break");
    assert_eq!(model.request_count(), 6);
    assert!(rejected(&events).is_empty(), "{events:?}");

    // A's own probes close its arm, and it clears its opening.
    assert_eq!(
        store
            .breaker_openings(Timestamp::from_millis(0))
            .await
            .unwrap()
            .len(),
        1,
        "an ended opening stays stored until cleared"
    );
    for _ in 0..DEFAULT_CLOSE_AFTER_SUCCESSES {
        a.ask(&bind).await.0.expect("A's probe succeeds");
    }
    assert!(
        store
            .breaker_openings(Timestamp::from_millis(0))
            .await
            .unwrap()
            .is_empty(),
        "A cleared its opening when its arm closed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_reads_the_openings_at_most_once_per_refresh() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let a = node(&path, "node-a", Duration::ZERO);
    let b = node(&path, "node-b", Duration::from_secs(1));
    let model = MockModel::start_with(
        MockModelConfig::default()
            .with_model("primary-model")
            .with_fallback_text("answered"),
    )
    .await
    .unwrap();
    model.push_reply(Reply::text("first"));
    model.push_replies((0..5).map(|_| Reply::server_error()));
    let bind = binding(&model.openai_base_url());

    // B reads the (empty) openings with its first call.
    b.ask(&bind).await.0.expect("B's first call answers");
    assert_eq!(model.request_count(), 1);
    a.fail_until_open(&bind).await;
    assert_eq!(model.request_count(), 6);

    // Within B's refresh interval its view is not re-read: the call goes
    // through (proof that there is no store read per call).
    advance(&[&a, &b], ms(999));
    b.ask(&bind)
        .await
        .0
        .expect("B's stale view lets the call through");
    assert_eq!(model.request_count(), 7);

    // Once the interval passed, B re-reads and refuses.
    advance(&[&a, &b], ms(1));
    let (result, events) = b.ask(&bind).await;
    assert_eq!(result.unwrap_err().category, Category::CircuitOpen);
    assert_eq!(model.request_count(), 7);
    assert_eq!(rejected(&events)[0]["shared"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_shared_breakers_another_node_calls_the_provider() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let a = node(&path, "node-a", Duration::ZERO);
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(&path).unwrap());
    let b = Engine::builder(store.clone())
        .clock(Arc::new(ManualClock::new()))
        .build()
        .unwrap();
    let model = MockModel::start_with(
        MockModelConfig::default()
            .with_model("primary-model")
            .with_fallback_text("answered"),
    )
    .await
    .unwrap();
    model.push_replies((0..5).map(|_| Reply::server_error()));
    let bind = binding(&model.openai_base_url());
    a.fail_until_open(&bind).await;
    assert_eq!(
        store
            .breaker_openings(Timestamp::from_millis(0))
            .await
            .unwrap()
            .len(),
        1
    );
    let (ask, _) = question();
    b.ask_model(&bind, ask)
        .await
        .expect("an engine without shared breakers keeps its own counsel");
    assert_eq!(model.request_count(), 6);
}

#[test]
fn a_node_id_the_store_would_refuse_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    for bad in ["", "a\nb"] {
        let built = Engine::builder(store.clone())
            .shared_breakers(bad, Duration::from_secs(1))
            .build();
        assert!(
            matches!(built, Err(rein_engine::run::EngineError::Config(_))),
            "{bad:?}"
        );
    }
}

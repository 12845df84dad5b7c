//! Shared health pushed over `LISTEN`/`NOTIFY` (issue 17 item 3): a
//! breaker opening or cooldown published or cleared through one store is
//! announced to every other store on the database as
//! `Notification::HealthChanged`, and an engine sharing breakers re-reads
//! the openings at its next call instead of waiting out its refresh
//! interval. Two stores (two pools, like two nodes) on a scratch database
//! of the machine's PostgreSQL; skips without a server, fails under CI.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use rein_store::Timestamp;
use std::sync::Arc;
use std::time::Duration;

use rein_core::{Category, EventKind, ManualClock};
use rein_engine::run::{Engine, ModelBinding};
use rein_engine::testing::{openai_binding as binding, question};
use rein_store::{BreakerOpening, HealthStore as _, Notification, RunStore as _, Store};
use rein_store_postgres::scratch::ScratchDatabase;
use rein_store_postgres::{PostgresOptions, PostgresStore};
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use serde_json::Value;
use tokio::sync::broadcast::Receiver;

/// The next notification that `wanted` picks, skipping others. The bound
/// only turns a lost notification into a failure instead of a hang.
async fn next(receiver: &mut Receiver<Notification>, wanted: impl Fn(&Notification) -> bool) {
    tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match receiver.recv().await {
                Ok(n) if wanted(&n) => return,
                Ok(_) => {}
                Err(e) => panic!("the notifications ended: {e}"),
            }
        }
    })
    .await
    .expect("the notification arrived");
}

fn changed(arm: &'static str) -> impl Fn(&Notification) -> bool {
    move |n| matches!(n, Notification::HealthChanged(a) if a == arm)
}

async fn two_stores(prefix: &str) -> Option<(ScratchDatabase, PostgresStore, PostgresStore)> {
    let database = ScratchDatabase::create(prefix).await?;
    let a = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    let b = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    Some((database, a, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openings_published_and_cleared_on_one_store_are_notified_to_another() {
    let Some((database, a, b)) = two_stores("health_notify").await else {
        return;
    };
    let mut notified = b.notifications().expect("PostgreSQL notifies");
    // The listener announces itself with a resync once it listens.
    next(&mut notified, |n| *n == Notification::Resync).await;

    let opening = BreakerOpening {
        arm: "tool.get_order".to_owned(),
        open_until_ms: Timestamp::from_millis(2_000_000),
        opened_by: "node-a".to_owned(),
        reason: "5 consecutive failures".to_owned(),
        updated_at_ms: Timestamp::from_millis(1_000_000),
    };
    a.publish_breaker_open(opening.clone()).await.unwrap();
    next(&mut notified, changed("tool.get_order")).await;
    let cooldown = BreakerOpening {
        arm: "cooldown.tool.send_email".to_owned(),
        ..opening.clone()
    };
    a.publish_breaker_open(cooldown).await.unwrap();
    next(&mut notified, changed("cooldown.tool.send_email")).await;
    // A clear by someone who did not publish it changes nothing (and is
    // not announced); the publisher's is. The order of arrival shows it:
    // the next announcement of the arm is the publisher's clear.
    assert!(
        !a.clear_breaker_open("tool.get_order", "node-b")
            .await
            .unwrap()
    );
    assert!(
        a.clear_breaker_open("tool.get_order", "node-a")
            .await
            .unwrap()
    );
    next(&mut notified, changed("tool.get_order")).await;
    assert!(
        b.breaker_openings(Timestamp::from_millis(1_500_000))
            .await
            .unwrap()
            .iter()
            .all(|o| o.arm != "tool.get_order"),
        "the store agrees with the notification"
    );
    // Nothing was announced in between: a run id's change is not health.
    while let Ok(n) = notified.try_recv() {
        assert!(
            !matches!(n, Notification::HealthChanged(_)),
            "an unexpected health change: {n:?}"
        );
    }
    a.close();
    b.close();
    database.drop_database().await;
}

/// Asks once through `engine`; the events it emitted.
async fn ask(engine: &Engine, b: &ModelBinding) -> (Option<Category>, Vec<(EventKind, Value)>) {
    let (request, seen) = question();
    let failed = engine.ask_model(b, request).await.err().map(|e| e.category);
    let events = seen.lock().unwrap().clone();
    (failed, events)
}

/// An engine on `store` sharing breakers as `node`, re-reading the
/// openings at most once an hour on its own: within the test, only a
/// notification makes it read again.
fn engine(store: PostgresStore, node: &str) -> Engine {
    let store: Arc<dyn Store> = Arc::new(store);
    let clock = ManualClock::new();
    Engine::builder(store)
        .clock(Arc::new(clock))
        .rng_seed(7)
        .shared_breakers(node, Duration::from_secs(3600))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_on_one_node_is_honoured_on_another_without_waiting_for_the_poll() {
    let Some((database, a_store, b_store)) = two_stores("health_engines").await else {
        return;
    };
    let mut notified = b_store.notifications().expect("PostgreSQL notifies");
    let a = engine(a_store.clone(), "node-a");
    let b = engine(b_store.clone(), "node-b");
    let model = MockModel::start_with(
        MockModelConfig::default()
            .with_model("primary-model")
            .with_fallback_text("answered"),
    )
    .await
    .unwrap();
    model.push_reply(Reply::text("first"));
    model.push_reply(Reply::text("second"));
    model.push_replies((0..5).map(|_| Reply::server_error()));
    let bind = binding(&model.openai_base_url());

    // B reads the (empty) openings with its first call, and subscribes.
    let (failed, _) = ask(&b, &bind).await;
    assert_eq!(failed, None, "B's first call answers");
    assert_eq!(model.request_count(), 1);
    next(&mut notified, |n| *n == Notification::Resync).await;
    // B takes that resync now (one more read, still empty), so that only
    // a notification of A's opening can make it read again below.
    let (failed, _) = ask(&b, &bind).await;
    assert_eq!(failed, None, "B's second call answers");
    assert_eq!(model.request_count(), 2);

    // A's arm opens after five failures and publishes the opening.
    for _ in 0..10 {
        if ask(&a, &bind).await.0 == Some(Category::CircuitOpen) {
            break;
        }
    }
    assert_eq!(model.request_count(), 7, "A's arm opened after 5 failures");
    next(&mut notified, changed("provider.primary")).await;

    // B's view is an hour from stale, yet B refuses at once, without a
    // request: the notification made it read the openings again.
    let (failed, events) = ask(&b, &bind).await;
    assert_eq!(failed, Some(Category::CircuitOpen), "{events:?}");
    assert_eq!(model.request_count(), 7, "B did not call the provider");
    let refused: Vec<&Value> = events
        .iter()
        .filter(|(k, _)| *k == EventKind::CallRejected)
        .map(|(_, d)| d)
        .collect();
    assert_eq!(refused.len(), 1, "{events:?}");
    assert_eq!(refused[0]["shared"], true);
    assert_eq!(refused[0]["opened_by"], "node-a");

    drop((a, b));
    a_store.close();
    b_store.close();
    database.drop_database().await;
}

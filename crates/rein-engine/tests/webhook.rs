//! The webhook dispatcher against the real SQLite store and real loopback
//! sockets, on a manual clock: a delivery that keeps failing is given up
//! at its webhook's `max_age`, and a redirect is a failure, never followed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::post;
use rein_core::event::{Event, EventData, EventKind};
use rein_core::registry::WebhookSpec;
use rein_core::webhook::Topic;
use rein_core::{Clock, ManualClock, RunId, TenantId};
use rein_engine::webhook::Dispatcher;
use rein_store::{DeliveryState, NewRun, Store, StoreExt as _};
use rein_store_sqlite::SqliteStore;
use serde_json::json;

/// A store with one run whose `run_finished` (at the clock's wall time) is
/// in the outbox.
async fn store_with_a_finished_run(dir: &tempfile::TempDir, clock: &ManualClock) -> Arc<dyn Store> {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let run_id = RunId::new("run-hook-1").unwrap();
    let at = clock.timestamp();
    store
        .create_run(NewRun {
            run_id: run_id.clone(),
            tenant: TenantId::new("t").unwrap(),
            agent: "a".to_owned(),
            input: "in".to_owned(),
            parent_run_id: None,
            budget: json!({}),
            created_at_ms: at,
            trace_parent: None,
        })
        .await
        .unwrap();
    let data = EventData::decode(
        EventKind::RunFinished,
        json!({"outcome": "failed", "steps": 1, "consumed": {"steps": 1, "tokens": 0, "cost": 0},
               "elapsed_ms": 5, "recoverable": false}),
    )
    .unwrap();
    store
        .append_events(
            &run_id,
            vec![Event {
                run_id: run_id.clone(),
                seq: 0,
                step: 1,
                intent_id: None,
                attempt_id: None,
                idempotency_key: None,
                at_ms: at,
                data,
            }],
        )
        .await
        .unwrap();
    store
}

fn hooks(url: String, max_age: Duration) -> BTreeMap<String, WebhookSpec> {
    let mut spec = WebhookSpec::new("ops", url, [Topic::RunFinished], "HOOK_SECRET");
    spec.max_age = max_age;
    spec.timeout = Duration::from_secs(2);
    BTreeMap::from([("ops".to_owned(), spec)])
}

fn secret(var: &str) -> Option<String> {
    (var == "HOOK_SECRET").then(|| "s3cret-for-tests".to_owned())
}

#[tokio::test]
async fn a_delivery_that_keeps_failing_is_given_up_at_its_max_age() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::with_wall_origin(std::time::SystemTime::now());
    let store = store_with_a_finished_run(&dir, &clock).await;
    // A port nobody listens on: every attempt is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", closed.local_addr().unwrap());
    drop(closed);
    let dispatcher = Dispatcher::new(
        store.clone(),
        &hooks(url, Duration::from_secs(60)),
        secret,
        Arc::new(clock.clone()),
    )
    .unwrap()
    .seeded(7);
    assert_eq!(dispatcher.route(100).await.unwrap(), 1);

    let due = dispatcher.claim(10).await.unwrap();
    assert_eq!(due.len(), 1);
    let first = dispatcher
        .deliver(due.into_iter().next().unwrap())
        .await
        .unwrap();
    assert_eq!((first.state, first.attempts), (DeliveryState::Pending, 1));
    assert!(first.last_error.is_some());
    // The retry is drawn from [now, now + 1 s]: full jitter of the first
    // ceiling.
    let waited = first
        .next_attempt_at_ms
        .saturating_duration_since(first.last_attempt_at_ms.unwrap());
    assert!(waited <= Duration::from_secs(1), "{waited:?}");

    clock.advance(Duration::from_secs(61));
    let due = dispatcher.claim(10).await.unwrap();
    assert_eq!(due.len(), 1, "due again once its time came");
    let last = dispatcher
        .deliver(due.into_iter().next().unwrap())
        .await
        .unwrap();
    assert_eq!((last.state, last.attempts), (DeliveryState::GivenUp, 2));
    assert_eq!(
        last.last_error.as_deref(),
        Some("older than the webhook's max_age")
    );
    assert!(
        dispatcher.claim(10).await.unwrap().is_empty(),
        "never tried again"
    );

    // Its log stays a week past the max age, then goes with its event.
    assert_eq!(dispatcher.prune(100).await.unwrap(), 0);
    clock.advance(rein_engine::webhook::KEPT_PAST_MAX_AGE);
    assert_eq!(dispatcher.prune(100).await.unwrap(), 1);
    assert!(
        store
            .webhook_deliveries("ops", 10)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_redirect_is_a_failure_and_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::with_wall_origin(std::time::SystemTime::now());
    let store = store_with_a_finished_run(&dir, &clock).await;
    let elsewhere = Arc::new(AtomicU32::new(0));
    let hits = elsewhere.clone();
    let app = Router::new()
        .route(
            "/hook",
            post(|| async {
                (
                    StatusCode::TEMPORARY_REDIRECT,
                    [(header::LOCATION, "/elsewhere")],
                )
                    .into_response()
            }),
        )
        .route(
            "/elsewhere",
            post(move || {
                let hits = hits.clone();
                async move {
                    hits.fetch_add(1, Ordering::SeqCst);
                    StatusCode::NO_CONTENT
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dispatcher = Dispatcher::new(
        store,
        &hooks(url, Duration::from_secs(3600)),
        secret,
        Arc::new(clock),
    )
    .unwrap()
    .seeded(1);
    dispatcher.route(100).await.unwrap();
    let due = dispatcher
        .claim(10)
        .await
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    let attempt = dispatcher.deliver(due).await.unwrap();
    assert_eq!(attempt.state, DeliveryState::Pending);
    assert_eq!(attempt.last_status, Some(307));
    assert!(
        attempt
            .last_error
            .unwrap()
            .contains("redirects are not followed")
    );
    assert_eq!(
        elsewhere.load(Ordering::SeqCst),
        0,
        "the redirect was followed"
    );
}

#[tokio::test]
async fn outcomes_leave_out_the_run_finished_of_other_outcomes() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::with_wall_origin(std::time::SystemTime::now());
    // The run finished `failed`.
    let store = store_with_a_finished_run(&dir, &clock).await;
    let mut webhooks = hooks("http://127.0.0.1:9/x".to_owned(), Duration::from_secs(60));
    let mut only_failures = webhooks["ops"].clone();
    only_failures.name = "failures".to_owned();
    only_failures.outcomes = Some(vec![rein_core::Outcome::Failed]);
    webhooks.get_mut("ops").unwrap().outcomes = Some(vec![rein_core::Outcome::Succeeded]);
    webhooks.insert("failures".to_owned(), only_failures);
    let dispatcher = Dispatcher::new(store.clone(), &webhooks, secret, Arc::new(clock)).unwrap();
    assert_eq!(dispatcher.route(100).await.unwrap(), 1);
    assert!(
        store
            .webhook_deliveries("ops", 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .webhook_deliveries("failures", 10)
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn a_receiver_that_does_not_answer_is_cut_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::with_wall_origin(std::time::SystemTime::now());
    let store = store_with_a_finished_run(&dir, &clock).await;
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let mut webhooks = hooks(url, Duration::from_secs(3600));
    webhooks.get_mut("ops").unwrap().timeout = Duration::from_millis(200);
    let dispatcher = Dispatcher::new(store, &webhooks, secret, Arc::new(clock)).unwrap();
    dispatcher.route(100).await.unwrap();
    let due = dispatcher
        .claim(10)
        .await
        .unwrap()
        .into_iter()
        .next()
        .unwrap();
    let attempt = dispatcher.deliver(due).await.unwrap();
    assert_eq!(
        (attempt.state, attempt.attempts),
        (DeliveryState::Pending, 1)
    );
    assert_eq!(attempt.last_status, None);
    assert_eq!(
        attempt.last_error.as_deref(),
        Some("no answer within 200 ms")
    );
}

#[test]
fn a_webhook_whose_secret_is_not_set_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let err = Dispatcher::new(
        store,
        &hooks("http://127.0.0.1:9/x".to_owned(), Duration::from_secs(60)),
        |_| None,
        Arc::new(ManualClock::new()),
    )
    .unwrap_err();
    assert!(err.to_string().contains("HOOK_SECRET"), "{err}");
}

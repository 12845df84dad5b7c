//! Conformance checks of the webhook outbox ([`WebhookStore`]): events
//! recorded with the events they come from, routed once, claimed,
//! attempted and logged.
//!
//! [`WebhookStore`]: crate::WebhookStore

use std::future::Future;
use std::pin::Pin;

use rein_core::EventKind;
use rein_core::RunId;
use rein_core::webhook::Topic;

use super::{BASE_MS, created, event, join_all, ms, unique};
use crate::StoreExt as _;
use crate::webhook::{AttemptNext, DeliveryState, DueDelivery, MAX_WEBHOOK_PAGE, WebhookAttempt};
use crate::{Store, StoreError};

/// The outbox events of `run_id` not yet routed.
async fn unrouted_of(store: &dyn Store, run_id: &RunId) -> Vec<crate::WebhookEvent> {
    store
        .unrouted_webhook_events(MAX_WEBHOOK_PAGE)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| &e.run_id == run_id)
        .collect()
}

/// The deliveries claimed at `now` that belong to `webhooks`.
async fn claim(
    store: &dyn Store,
    now: rein_core::Timestamp,
    webhooks: &[&str],
) -> Vec<DueDelivery> {
    let mut due: Vec<DueDelivery> = store
        .claim_webhook_deliveries(now, now + ms(10_000), MAX_WEBHOOK_PAGE)
        .await
        .unwrap()
        .into_iter()
        .filter(|d| webhooks.contains(&d.delivery.webhook.as_str()))
        .collect();
    due.sort_by(|a, b| a.delivery.webhook.cmp(&b.delivery.webhook));
    due
}

fn attempt(
    webhook: &str,
    event_id: &str,
    at: rein_core::Timestamp,
    next: AttemptNext,
) -> WebhookAttempt {
    let delivered = next == AttemptNext::Delivered;
    WebhookAttempt {
        webhook: webhook.to_owned(),
        event_id: event_id.to_owned(),
        at_ms: at,
        status: Some(if delivered { 204 } else { 500 }),
        error: (!delivered).then(|| "answered 500".to_owned()),
        next,
    }
}

/// Appending events writes an outbox row for the one with a topic (and
/// only it), in the same commit, with a stable id and the body it will be
/// sent with; routing it records one delivery per webhook once.
pub async fn webhook_events_are_recorded_with_their_events_and_routed_once(store: &dyn Store) {
    let run_id = created(store, "webhook-outbox").await;
    let stored = store
        .append_events(
            &run_id,
            vec![
                event(&run_id, EventKind::RunStarted, 0),
                event(&run_id, EventKind::ToolCallStarted, 1),
                event(&run_id, EventKind::RunFinished, 2),
            ],
        )
        .await
        .unwrap();
    let unrouted = unrouted_of(store, &run_id).await;
    assert_eq!(
        unrouted.len(),
        1,
        "only run_finished has a topic: {unrouted:?}"
    );
    let recorded = &unrouted[0];
    assert_eq!(recorded.event_id, format!("{run_id}:{}", stored[2].seq));
    assert_eq!(recorded.topic, Topic::RunFinished);
    assert_eq!(recorded.outcome, Some(rein_core::Outcome::Succeeded));
    assert_eq!(recorded.created_at_ms, stored[2].at_ms);
    let body: serde_json::Value = serde_json::from_str(&recorded.body).unwrap();
    assert_eq!(body["id"], recorded.event_id.as_str());
    assert_eq!(body["type"], "run_finished");
    assert_eq!(body["run_id"], run_id.as_str());
    assert_eq!(body["data"]["outcome"], "succeeded");

    let hooks = [unique("outbox-a"), unique("outbox-b")];
    store
        .route_webhook_event(&recorded.event_id, &hooks, BASE_MS)
        .await
        .unwrap();
    assert!(unrouted_of(store, &run_id).await.is_empty(), "routed once");
    // Routing again (a dispatcher that crashed before learning it routed)
    // keeps the deliveries as they are.
    store
        .route_webhook_event(&recorded.event_id, &hooks, BASE_MS + ms(5))
        .await
        .unwrap();
    for hook in &hooks {
        let log = store.webhook_deliveries(hook, 10).await.unwrap();
        assert_eq!(log.len(), 1, "{log:?}");
        assert_eq!(log[0].event_id, recorded.event_id);
        assert_eq!(log[0].state, DeliveryState::Pending);
        assert_eq!((log[0].attempts, log[0].next_attempt_at_ms), (0, BASE_MS));
        assert_eq!(log[0].topic, Topic::RunFinished);
    }
    assert!(matches!(
        store
            .route_webhook_event("no-such-run:1", &hooks, BASE_MS)
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store
            .route_webhook_event(&recorded.event_id, &["bad\nname".to_owned()], BASE_MS)
            .await,
        Err(StoreError::Invalid { .. })
    ));
}

/// A due delivery is claimed by one caller until its claim runs out, a
/// failed attempt reschedules it, a 2xx delivers it for good, and the log
/// shows each delivery's last answer.
pub async fn webhook_deliveries_are_claimed_attempted_and_logged(store: &dyn Store) {
    let run_id = created(store, "webhook-deliver").await;
    store
        .append_events(&run_id, vec![event(&run_id, EventKind::RunFinished, 1)])
        .await
        .unwrap();
    let recorded = unrouted_of(store, &run_id).await.remove(0);
    let id = recorded.event_id.as_str();
    let (a, b) = (unique("deliver-a"), unique("deliver-b"));
    let hooks = [a.as_str(), b.as_str()];
    store
        .route_webhook_event(id, &[a.clone(), b.clone()], BASE_MS)
        .await
        .unwrap();

    let due = claim(store, BASE_MS, &hooks).await;
    assert_eq!(due.len(), 2, "{due:?}");
    assert_eq!(due[0].body, recorded.body, "sent as recorded");
    assert!(
        claim(store, BASE_MS + ms(1), &hooks).await.is_empty(),
        "claimed"
    );

    let failed = store
        .record_webhook_attempt(&attempt(
            &a,
            id,
            BASE_MS + ms(100),
            AttemptNext::RetryAt(BASE_MS + ms(20_000)),
        ))
        .await
        .unwrap();
    assert_eq!(failed.state, DeliveryState::Pending);
    assert_eq!(failed.attempts, 1);
    assert_eq!(failed.last_status, Some(500));
    assert_eq!(failed.last_error.as_deref(), Some("answered 500"));
    assert_eq!(failed.last_attempt_at_ms, Some(BASE_MS + ms(100)));
    assert_eq!(failed.next_attempt_at_ms, BASE_MS + ms(20_000));

    // b's claim ran out unanswered (its sender died): b is due again, at
    // least once; a is not due before its next attempt.
    let again = claim(store, BASE_MS + ms(10_001), &hooks).await;
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0].delivery.webhook, b);
    let later = claim(store, BASE_MS + ms(20_000), &hooks).await;
    assert_eq!(later.len(), 1, "{later:?}");
    assert_eq!(later[0].delivery.webhook, a);

    let done = store
        .record_webhook_attempt(&attempt(
            &a,
            id,
            BASE_MS + ms(20_050),
            AttemptNext::Delivered,
        ))
        .await
        .unwrap();
    assert_eq!((done.state, done.attempts), (DeliveryState::Delivered, 2));
    assert_eq!(
        (done.last_status, done.last_error.as_deref()),
        (Some(204), None)
    );
    // A late answer of an earlier attempt does not undo a delivery.
    let kept = store
        .record_webhook_attempt(&attempt(&a, id, BASE_MS + ms(20_060), AttemptNext::GiveUp))
        .await
        .unwrap();
    assert_eq!(kept, done);
    let given_up = store
        .record_webhook_attempt(&attempt(&b, id, BASE_MS + ms(20_070), AttemptNext::GiveUp))
        .await
        .unwrap();
    assert_eq!(given_up.state, DeliveryState::GivenUp);
    assert!(
        claim(store, BASE_MS + ms(999_999), &hooks).await.is_empty(),
        "nothing left due"
    );
    let log = store.webhook_deliveries(&a, 10).await.unwrap();
    assert_eq!(log, vec![done]);

    assert!(matches!(
        store
            .record_webhook_attempt(&attempt(
                &a,
                "no-such-run:1",
                BASE_MS,
                AttemptNext::Delivered
            ))
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        store.claim_webhook_deliveries(BASE_MS, BASE_MS, 10).await,
        Err(StoreError::Invalid { .. })
    ));
}

/// Pruning deletes the deliveries that are over and the events left
/// without one, before the given time only, and never a pending delivery
/// or an unrouted event.
pub async fn webhook_outbox_prunes_what_is_over_and_keeps_what_is_not(store: &dyn Store) {
    let run_id = created(store, "webhook-prune").await;
    store
        .append_events(
            &run_id,
            vec![
                event(&run_id, EventKind::RunFinished, 1),
                event(&run_id, EventKind::RunFinished, 2),
                event(&run_id, EventKind::RunFinished, 3),
            ],
        )
        .await
        .unwrap();
    let recorded = unrouted_of(store, &run_id).await;
    assert_eq!(recorded.len(), 3);
    let (done, pending, unrouted) = (&recorded[0], &recorded[1], &recorded[2]);
    let hook = unique("prune-hook");
    for e in [done, pending] {
        store
            .route_webhook_event(&e.event_id, std::slice::from_ref(&hook), BASE_MS)
            .await
            .unwrap();
    }
    store
        .claim_webhook_deliveries(BASE_MS, BASE_MS + ms(10), MAX_WEBHOOK_PAGE)
        .await
        .unwrap();
    store
        .record_webhook_attempt(&attempt(
            &hook,
            &done.event_id,
            BASE_MS,
            AttemptNext::Delivered,
        ))
        .await
        .unwrap();

    // Nothing is older than the events: nothing goes.
    store
        .prune_webhook_outbox(BASE_MS, MAX_WEBHOOK_PAGE)
        .await
        .unwrap();
    assert_eq!(store.webhook_deliveries(&hook, 10).await.unwrap().len(), 2);

    let later = BASE_MS + ms(1_000_000);
    let pruned = store
        .prune_webhook_outbox(later, MAX_WEBHOOK_PAGE)
        .await
        .unwrap();
    assert!(pruned >= 1, "the delivered event is pruned");
    let left = store.webhook_deliveries(&hook, 10).await.unwrap();
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(
        left[0].event_id, pending.event_id,
        "a pending delivery stays"
    );
    let still: Vec<String> = unrouted_of(store, &run_id)
        .await
        .into_iter()
        .map(|e| e.event_id)
        .collect();
    assert_eq!(
        still,
        vec![unrouted.event_id.clone()],
        "an unrouted event stays"
    );
    assert!(matches!(
        store
            .route_webhook_event(&done.event_id, &[], BASE_MS)
            .await,
        Err(StoreError::NotFound { .. })
    ));
}

/// Two processes claiming due deliveries at once never both get the same
/// one: each is sent by one dispatcher per claim.
pub async fn two_handles_race_to_claim_webhook_deliveries(store: &dyn Store, other: &dyn Store) {
    let run_id = created(store, "webhook-race").await;
    let events = (1..=8)
        .map(|step| event(&run_id, EventKind::RunFinished, step))
        .collect();
    store.append_events(&run_id, events).await.unwrap();
    let hook = unique("race-hook");
    let hook = hook.as_str();
    for recorded in unrouted_of(store, &run_id).await {
        store
            .route_webhook_event(&recorded.event_id, &[hook.to_owned()], BASE_MS)
            .await
            .unwrap();
    }
    let racers: Vec<&dyn Store> = vec![store, other, store, other];
    let claims = racers
        .into_iter()
        .map(|racer| {
            Box::pin(async move {
                racer
                    .claim_webhook_deliveries(BASE_MS, BASE_MS + ms(10_000), 3)
                    .await
                    .unwrap()
            }) as Pin<Box<dyn Future<Output = Vec<DueDelivery>> + Send + '_>>
        })
        .collect::<Vec<_>>();
    let mut ids: Vec<String> = join_all(claims)
        .await
        .into_iter()
        .flatten()
        .filter(|d| d.delivery.webhook == hook)
        .map(|d| d.delivery.event_id)
        .collect();
    let claimed = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), claimed, "a delivery was claimed twice");
}

//! The SQL of the webhook outbox (migration 0009): the row an event with a
//! topic writes in its commit, routing, claims, attempts and the delivery
//! log. See `rein_store::webhook`.
//!
//! A claim locks the rows it takes with `FOR UPDATE SKIP LOCKED`: two
//! nodes claiming at once take disjoint deliveries instead of waiting for
//! each other, and neither takes one the other holds.

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::Event;
use rein_store::webhook::{MAX_WEBHOOK_PAGE, outbox_event, validate_webhook_name};
use rein_store::{
    DeliveryState, DueDelivery, StoreError, Timestamp, WebhookAttempt, WebhookDelivery,
    WebhookEvent,
};

use super::{execute, query_all, query_opt};
use crate::codec::PgResult;
use crate::codec::{
    WEBHOOK_DELIVERY_COLUMNS, WEBHOOK_EVENT_COLUMNS, decode_due_delivery, decode_webhook_delivery,
    decode_webhook_event, int,
};

/// `limit`, capped at [`MAX_WEBHOOK_PAGE`], as PostgreSQL binds it.
fn page(limit: usize) -> i64 {
    i64::try_from(limit.min(MAX_WEBHOOK_PAGE)).unwrap_or(0)
}

/// Records the outbox row of `event` when it has a topic. Part of the
/// transaction that appends it; an event offered twice keeps its row.
pub(crate) async fn record(tx: &Transaction<'_>, event: &Event) -> Result<(), StoreError> {
    let Some(row) = outbox_event(event)? else {
        return Ok(());
    };
    execute(
        tx,
        "INSERT INTO webhook_events (event_id, run_id, topic, outcome, body, created_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (event_id) DO NOTHING",
        &[
            &row.event_id,
            &row.run_id.as_str(),
            &row.topic.as_str(),
            &row.outcome.map(|o| o.as_str()),
            &row.body,
            &int(row.created_at_ms, "webhook event created_at_ms")?,
        ],
    )
    .await?;
    Ok(())
}

/// See `WebhookStore::unrouted_webhook_events`.
pub(crate) async fn unrouted(
    client: &impl GenericClient,
    limit: usize,
) -> Result<Vec<WebhookEvent>, StoreError> {
    query_all(
        client,
        &format!(
            "SELECT {WEBHOOK_EVENT_COLUMNS} FROM webhook_events WHERE NOT routed \
             ORDER BY created_at_ms, event_id LIMIT $1"
        ),
        &[&page(limit)],
        decode_webhook_event,
    )
    .await
}

/// See `WebhookStore::route_webhook_event`.
pub(crate) async fn route(
    tx: &Transaction<'_>,
    event_id: &str,
    webhooks: &[String],
    now_ms: Timestamp,
) -> Result<(), StoreError> {
    for webhook in webhooks {
        validate_webhook_name(webhook)?;
    }
    let found = execute(
        tx,
        "UPDATE webhook_events SET routed = TRUE WHERE event_id = $1",
        &[&event_id],
    )
    .await?;
    if found == 0 {
        return Err(StoreError::NotFound {
            what: "webhook event",
            id: event_id.to_owned(),
        });
    }
    let now = int(now_ms, "webhook route now")?;
    for webhook in webhooks {
        execute(
            tx,
            "INSERT INTO webhook_deliveries (webhook, event_id, state, attempts, \
             next_attempt_at_ms, claimed_until_ms) VALUES ($1, $2, 'pending', 0, $3, 0) \
             ON CONFLICT (webhook, event_id) DO NOTHING",
            &[webhook, &event_id, &now],
        )
        .await?;
    }
    Ok(())
}

/// See `WebhookStore::claim_webhook_deliveries`.
pub(crate) async fn claim(
    tx: &Transaction<'_>,
    now_ms: Timestamp,
    claim_until_ms: Timestamp,
    limit: usize,
) -> Result<Vec<DueDelivery>, StoreError> {
    if claim_until_ms <= now_ms {
        return Err(StoreError::Invalid {
            what: "webhook claim",
            expected: "a claim that ends after now".to_owned(),
            found: format!(
                "until {} ms at {} ms",
                claim_until_ms.as_millis(),
                now_ms.as_millis()
            ),
        });
    }
    let now = int(now_ms, "webhook claim now")?;
    let until = int(claim_until_ms, "webhook claim until")?;
    let due = query_all(
        tx,
        &format!(
            "SELECT {WEBHOOK_DELIVERY_COLUMNS}, e.body FROM webhook_deliveries d \
             JOIN webhook_events e ON e.event_id = d.event_id \
             WHERE d.state = 'pending' AND d.next_attempt_at_ms <= $1 \
             AND d.claimed_until_ms <= $1 \
             ORDER BY d.next_attempt_at_ms, d.event_id, d.webhook LIMIT $2 \
             FOR UPDATE OF d SKIP LOCKED"
        ),
        &[&now, &page(limit)],
        decode_due_delivery,
    )
    .await?;
    for d in &due {
        execute(
            tx,
            "UPDATE webhook_deliveries SET claimed_until_ms = $3 \
             WHERE webhook = $1 AND event_id = $2",
            &[&d.delivery.webhook, &d.delivery.event_id, &until],
        )
        .await?;
    }
    Ok(due)
}

async fn delivery(
    client: &impl GenericClient,
    webhook: &str,
    event_id: &str,
    lock: bool,
) -> Result<Option<WebhookDelivery>, StoreError> {
    let sql = format!(
        "SELECT {WEBHOOK_DELIVERY_COLUMNS} FROM webhook_deliveries d \
         JOIN webhook_events e ON e.event_id = d.event_id \
         WHERE d.webhook = $1 AND d.event_id = $2{}",
        if lock { " FOR UPDATE OF d" } else { "" }
    );
    query_opt(
        client,
        &sql,
        &[&webhook, &event_id],
        decode_webhook_delivery,
    )
    .await
}

/// See `WebhookStore::record_webhook_attempt`.
pub(crate) async fn record_attempt(
    tx: &Transaction<'_>,
    attempt: &WebhookAttempt,
) -> Result<WebhookDelivery, StoreError> {
    let not_found = || StoreError::NotFound {
        what: "webhook delivery",
        id: format!("{} {}", attempt.webhook, attempt.event_id),
    };
    let stored = delivery(tx, &attempt.webhook, &attempt.event_id, true)
        .await?
        .ok_or_else(not_found)?;
    if stored.state != DeliveryState::Pending {
        return Ok(stored);
    }
    let (state, next, attempts) = attempt.applied(stored.attempts, stored.next_attempt_at_ms);
    execute(
        tx,
        "UPDATE webhook_deliveries SET state = $3, attempts = $4, next_attempt_at_ms = $5, \
         claimed_until_ms = 0, last_attempt_at_ms = $6, last_status = $7, last_error = $8 \
         WHERE webhook = $1 AND event_id = $2",
        &[
            &attempt.webhook,
            &attempt.event_id,
            &state.as_str(),
            &i64::from(attempts),
            &int(next, "webhook next attempt")?,
            &int(attempt.at_ms, "webhook attempt at")?,
            &attempt.status.map(i64::from),
            &attempt.stored_error(),
        ],
    )
    .await?;
    delivery(tx, &attempt.webhook, &attempt.event_id, false)
        .await?
        .ok_or_else(not_found)
}

/// See `WebhookStore::prune_webhook_outbox`: the events are locked
/// (`SKIP LOCKED`) so a delivery being recorded is never pruned under it.
pub(crate) async fn prune(
    tx: &Transaction<'_>,
    before_ms: Timestamp,
    limit: usize,
) -> Result<u64, StoreError> {
    let old: Vec<String> = query_all(
        tx,
        "SELECT event_id FROM webhook_events e WHERE routed AND created_at_ms < $1 \
         AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
         WHERE d.event_id = e.event_id AND d.state = 'pending') \
         ORDER BY created_at_ms, event_id LIMIT $2 FOR UPDATE SKIP LOCKED",
        &[&int(before_ms, "webhook prune before")?, &page(limit)],
        |row| row.try_get::<_, String>(0).pg(),
    )
    .await?;
    execute(
        tx,
        "DELETE FROM webhook_deliveries WHERE event_id = ANY($1)",
        &[&old],
    )
    .await?;
    execute(
        tx,
        "DELETE FROM webhook_events WHERE event_id = ANY($1)",
        &[&old],
    )
    .await
}

/// See `WebhookStore::webhook_deliveries`.
pub(crate) async fn deliveries(
    client: &impl GenericClient,
    webhook: &str,
    limit: usize,
) -> Result<Vec<WebhookDelivery>, StoreError> {
    query_all(
        client,
        &format!(
            "SELECT {WEBHOOK_DELIVERY_COLUMNS} FROM webhook_deliveries d \
             JOIN webhook_events e ON e.event_id = d.event_id WHERE d.webhook = $1 \
             ORDER BY e.created_at_ms DESC, d.event_id DESC LIMIT $2"
        ),
        &[&webhook, &page(limit)],
        decode_webhook_delivery,
    )
    .await
}

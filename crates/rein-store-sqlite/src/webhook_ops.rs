//! The SQL of the webhook outbox (schema v19): the row an event with a
//! topic writes in its commit, routing, claims, attempts and the delivery
//! log. See `rein_store::webhook`.

use rein_core::Event;
use rusqlite::{Connection, params};

use super::codec::{SqlResult, SqliteRow, int};
use rein_store::codec::{
    WEBHOOK_DELIVERY_COLUMNS, WEBHOOK_EVENT_COLUMNS, decode_due_delivery, decode_webhook_delivery,
    decode_webhook_event,
};
use rein_store::webhook::{MAX_WEBHOOK_PAGE, outbox_event, validate_webhook_name};
use rein_store::{
    DeliveryState, DueDelivery, StoreError, Timestamp, WebhookAttempt, WebhookDelivery,
    WebhookEvent,
};

/// Records the outbox row of `event` when it has a topic. Part of the
/// transaction that appends it; an event offered twice keeps its row.
pub fn record(conn: &Connection, event: &Event) -> Result<(), StoreError> {
    let Some(row) = outbox_event(event)? else {
        return Ok(());
    };
    conn.prepare_cached(
        "INSERT INTO webhook_events (event_id, run_id, topic, outcome, body, created_at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (event_id) DO NOTHING",
    )
    .sql()?
    .execute(params![
        row.event_id,
        row.run_id.as_str(),
        row.topic.as_str(),
        row.outcome.map(|o| o.as_str()),
        row.body,
        int(row.created_at_ms, "webhook event created_at_ms")?,
    ])
    .sql()?;
    Ok(())
}

/// See [`WebhookStore::unrouted_webhook_events`](rein_store::WebhookStore::unrouted_webhook_events).
pub fn unrouted(conn: &Connection, limit: usize) -> Result<Vec<WebhookEvent>, StoreError> {
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {WEBHOOK_EVENT_COLUMNS} FROM webhook_events WHERE routed = 0 \
             ORDER BY created_at_ms, event_id LIMIT ?1"
        ))
        .sql()?;
    let mut rows = statement.query(params![page(limit)]).sql()?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().sql()? {
        out.push(decode_webhook_event(SqliteRow(row))?);
    }
    Ok(out)
}

/// See [`WebhookStore::route_webhook_event`](rein_store::WebhookStore::route_webhook_event).
pub fn route(
    conn: &Connection,
    event_id: &str,
    webhooks: &[String],
    now_ms: Timestamp,
) -> Result<(), StoreError> {
    for webhook in webhooks {
        validate_webhook_name(webhook)?;
    }
    let found = conn
        .prepare_cached("UPDATE webhook_events SET routed = 1 WHERE event_id = ?1")
        .sql()?
        .execute(params![event_id])
        .sql()?;
    if found == 0 {
        return Err(StoreError::NotFound {
            what: "webhook event",
            id: event_id.to_owned(),
        });
    }
    let mut insert = conn
        .prepare_cached(
            "INSERT INTO webhook_deliveries (webhook, event_id, state, attempts, \
             next_attempt_at_ms, claimed_until_ms) VALUES (?1, ?2, 'pending', 0, ?3, 0) \
             ON CONFLICT (webhook, event_id) DO NOTHING",
        )
        .sql()?;
    for webhook in webhooks {
        insert
            .execute(params![
                webhook,
                event_id,
                int(now_ms, "webhook route now")?
            ])
            .sql()?;
    }
    Ok(())
}

/// See [`WebhookStore::claim_webhook_deliveries`](rein_store::WebhookStore::claim_webhook_deliveries).
pub fn claim(
    conn: &Connection,
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
    let due: Vec<DueDelivery> = {
        let mut statement = conn
            .prepare_cached(&format!(
                "SELECT {WEBHOOK_DELIVERY_COLUMNS}, e.body FROM webhook_deliveries d \
                 JOIN webhook_events e ON e.event_id = d.event_id \
                 WHERE d.state = 'pending' AND d.next_attempt_at_ms <= ?1 \
                 AND d.claimed_until_ms <= ?1 \
                 ORDER BY d.next_attempt_at_ms, d.event_id, d.webhook LIMIT ?2"
            ))
            .sql()?;
        let mut rows = statement.query(params![now, page(limit)]).sql()?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().sql()? {
            out.push(decode_due_delivery(SqliteRow(row))?);
        }
        out
    };
    let mut update = conn
        .prepare_cached(
            "UPDATE webhook_deliveries SET claimed_until_ms = ?3 WHERE webhook = ?1 AND event_id = ?2",
        )
        .sql()?;
    for d in &due {
        update
            .execute(params![
                d.delivery.webhook,
                d.delivery.event_id,
                int(claim_until_ms, "webhook claim until")?
            ])
            .sql()?;
    }
    Ok(due)
}

fn delivery(
    conn: &Connection,
    webhook: &str,
    event_id: &str,
) -> Result<Option<WebhookDelivery>, StoreError> {
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {WEBHOOK_DELIVERY_COLUMNS} FROM webhook_deliveries d \
             JOIN webhook_events e ON e.event_id = d.event_id \
             WHERE d.webhook = ?1 AND d.event_id = ?2"
        ))
        .sql()?;
    let mut rows = statement.query(params![webhook, event_id]).sql()?;
    rows.next()
        .sql()?
        .map(|row| decode_webhook_delivery(SqliteRow(row)))
        .transpose()
}

/// See [`WebhookStore::record_webhook_attempt`](rein_store::WebhookStore::record_webhook_attempt).
pub fn record_attempt(
    conn: &Connection,
    attempt: &WebhookAttempt,
) -> Result<WebhookDelivery, StoreError> {
    let not_found = || StoreError::NotFound {
        what: "webhook delivery",
        id: format!("{} {}", attempt.webhook, attempt.event_id),
    };
    let stored = delivery(conn, &attempt.webhook, &attempt.event_id)?.ok_or_else(not_found)?;
    if stored.state != DeliveryState::Pending {
        return Ok(stored);
    }
    let (state, next, attempts) = attempt.applied(stored.attempts, stored.next_attempt_at_ms);
    conn.prepare_cached(
        "UPDATE webhook_deliveries SET state = ?3, attempts = ?4, next_attempt_at_ms = ?5, \
         claimed_until_ms = 0, last_attempt_at_ms = ?6, last_status = ?7, last_error = ?8 \
         WHERE webhook = ?1 AND event_id = ?2",
    )
    .sql()?
    .execute(params![
        attempt.webhook,
        attempt.event_id,
        state.as_str(),
        attempts,
        int(next, "webhook next attempt")?,
        int(attempt.at_ms, "webhook attempt at")?,
        attempt.status,
        attempt.stored_error(),
    ])
    .sql()?;
    delivery(conn, &attempt.webhook, &attempt.event_id)?.ok_or_else(not_found)
}

/// See [`WebhookStore::prune_webhook_outbox`](rein_store::WebhookStore::prune_webhook_outbox).
pub fn prune(conn: &Connection, before_ms: Timestamp, limit: usize) -> Result<u64, StoreError> {
    let before = int(before_ms, "webhook prune before")?;
    let old: Vec<String> = {
        let mut statement = conn
            .prepare_cached(
                "SELECT event_id FROM webhook_events e WHERE routed = 1 AND created_at_ms < ?1 \
                 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
                 WHERE d.event_id = e.event_id AND d.state = 'pending') \
                 ORDER BY created_at_ms, event_id LIMIT ?2",
            )
            .sql()?;
        let rows = statement
            .query_map(params![before, page(limit)], |row| row.get(0))
            .sql()?;
        rows.collect::<Result<_, _>>().sql()?
    };
    let mut deliveries = conn
        .prepare_cached("DELETE FROM webhook_deliveries WHERE event_id = ?1")
        .sql()?;
    let mut events = conn
        .prepare_cached("DELETE FROM webhook_events WHERE event_id = ?1")
        .sql()?;
    for event_id in &old {
        deliveries.execute(params![event_id]).sql()?;
        events.execute(params![event_id]).sql()?;
    }
    Ok(u64::try_from(old.len()).unwrap_or(u64::MAX))
}

/// See [`WebhookStore::webhook_deliveries`](rein_store::WebhookStore::webhook_deliveries).
pub fn deliveries(
    conn: &Connection,
    webhook: &str,
    limit: usize,
) -> Result<Vec<WebhookDelivery>, StoreError> {
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {WEBHOOK_DELIVERY_COLUMNS} FROM webhook_deliveries d \
             JOIN webhook_events e ON e.event_id = d.event_id WHERE d.webhook = ?1 \
             ORDER BY e.created_at_ms DESC, d.event_id DESC LIMIT ?2"
        ))
        .sql()?;
    let mut rows = statement.query(params![webhook, page(limit)]).sql()?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().sql()? {
        out.push(decode_webhook_delivery(SqliteRow(row))?);
    }
    Ok(out)
}

/// `limit`, capped at [`MAX_WEBHOOK_PAGE`], as SQLite binds it.
fn page(limit: usize) -> i64 {
    i64::try_from(limit.min(MAX_WEBHOOK_PAGE)).unwrap_or(0)
}

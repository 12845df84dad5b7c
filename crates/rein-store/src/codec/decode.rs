//! The `*_COLUMNS` lists and the `decode_*` functions of rein's types.

use rein_core::deadline::{Cost, Usage};
use rein_core::{Event, EventData, LedgerRecord, LedgerStatus};

use super::columns::{Columns, RowReader};
use crate::breaker::BreakerOpening;
use crate::checkpoint::{Checkpoint, CheckpointDelta};
use crate::error::StoreError;
use crate::idempotency::{IdempotencyRecord, IdempotencyState, StoredResponse};
use crate::intent::PlannedIntent;
use crate::lease::{Lease, LeaseKind};
use crate::run::{RunRecord, RunStatus};
use crate::singleton::SingletonLease;
use rein_core::Timestamp;

/// The columns [`decode_run`] reads, in order.
pub const RUN_COLUMNS: &str = "run_id, tenant, agent, input, parent_run_id, budget, status, \
                               report, created_at_ms, updated_at_ms, ledger_revision, \
                               trace_parent, first_span";

/// A `runs` row selected with [`RUN_COLUMNS`].
pub fn decode_run<R: Columns>(row: R) -> Result<RunRecord, StoreError> {
    let r = RowReader::new(row, "runs", &[0]);
    Ok(RunRecord {
        run_id: r.id(0, "run_id")?,
        tenant: r.id(1, "tenant")?,
        agent: r.text(2, "agent")?,
        input: r.text(3, "input")?,
        parent_run_id: r.opt_id(4, "parent_run_id")?,
        budget: r.json(5, "budget")?,
        status: r.name(6, "status", RunStatus::parse)?,
        report: r.opt_json(7, "report")?,
        created_at_ms: r.timestamp(8, "created_at_ms")?,
        updated_at_ms: r.timestamp(9, "updated_at_ms")?,
        ledger_revision: r.u64(10, "ledger_revision")?,
        trace_parent: span(&r, 11, "trace_parent")?,
        first_span: span(&r, 12, "first_span")?,
    })
}

/// A nullable `traceparent` column.
fn span<R: Columns>(
    r: &RowReader<R>,
    index: usize,
    column: &'static str,
) -> Result<Option<crate::SpanRef>, StoreError> {
    r.opt_text(index, column)?
        .map(|text| crate::SpanRef::parse_traceparent(&text).map_err(|e| r.corrupt(column, e)))
        .transpose()
}

/// The columns [`decode_event`] reads, in order.
pub const EVENT_COLUMNS: &str =
    "run_id, seq, step, intent_id, attempt_id, idempotency_key, at_ms, kind, data";

/// An `events` row selected with [`EVENT_COLUMNS`].
pub fn decode_event<R: Columns>(row: R) -> Result<Event, StoreError> {
    let r = RowReader::new(row, "events", &[0, 1]);
    let kind = r.serde_name(7, "kind")?;
    let data =
        EventData::decode(kind, r.json(8, "data")?).map_err(|error| r.corrupt("data", error))?;
    Ok(Event {
        run_id: r.id(0, "run_id")?,
        seq: r.u64(1, "seq")?,
        step: r.u32(2, "step")?,
        intent_id: r.opt_id(3, "intent_id")?,
        attempt_id: r.opt_id(4, "attempt_id")?,
        idempotency_key: r.opt_id(5, "idempotency_key")?,
        at_ms: r.timestamp(6, "at_ms")?,
        data,
    })
}

/// The columns [`decode_intent`] reads, in order.
pub const INTENT_COLUMNS: &str = "run_id, intent_id, step, ordinal, call_id, tool, args";

/// An `intents` row selected with [`INTENT_COLUMNS`].
pub fn decode_intent<R: Columns>(row: R) -> Result<(u32, PlannedIntent), StoreError> {
    let r = RowReader::new(row, "intents", &[0, 1]);
    let step = r.u32(2, "step")?;
    Ok((
        step,
        PlannedIntent {
            intent_id: r.id(1, "intent_id")?,
            ordinal: r.u32(3, "ordinal")?,
            call_id: r.text(4, "call_id")?,
            tool: r.text(5, "tool")?,
            args: r.json(6, "args")?,
        },
    ))
}

/// The columns [`decode_ledger`] reads, in order.
pub const LEDGER_COLUMNS: &str = "run_id, intent_id, seq, step, tool, class, idempotency_key, \
                                  args, status, result, failure, attempts, created_at_ms, \
                                  updated_at_ms";

/// A `ledger` row selected with [`LEDGER_COLUMNS`].
pub fn decode_ledger<R: Columns>(row: R) -> Result<LedgerRecord, StoreError> {
    let r = RowReader::new(row, "ledger", &[0, 1]);
    Ok(LedgerRecord {
        run_id: r.id(0, "run_id")?,
        intent_id: r.id(1, "intent_id")?,
        seq: r.u64(2, "seq")?,
        step: r.u32(3, "step")?,
        tool: r.text(4, "tool")?,
        class: r.serde_name(5, "class")?,
        idempotency_key: r.opt_id(6, "idempotency_key")?,
        args: r.json(7, "args")?,
        status: r.name(8, "status", LedgerStatus::parse)?,
        result: r.opt_json(9, "result")?,
        failure: r.opt_json(10, "failure")?,
        attempts: r.u32(11, "attempts")?,
        created_at_ms: r.timestamp(12, "created_at_ms")?,
        updated_at_ms: r.timestamp(13, "updated_at_ms")?,
    })
}

/// The columns [`decode_checkpoint`] reads, in order.
pub const CHECKPOINT_COLUMNS: &str = "run_id, step, messages, completed_intents, consumed_steps, \
                                      consumed_tokens, consumed_cost_micros, elapsed_ms, state, \
                                      at_ms";

/// A `checkpoints` row selected with [`CHECKPOINT_COLUMNS`].
pub fn decode_checkpoint<R: Columns>(row: R) -> Result<Checkpoint, StoreError> {
    let r = RowReader::new(row, "checkpoints", &[0, 1]);
    Ok(Checkpoint {
        run_id: r.id(0, "run_id")?,
        step: r.u32(1, "step")?,
        messages: r.json(2, "messages")?,
        completed_intents: r.json(3, "completed_intents")?,
        consumed: Usage {
            steps: r.u32(4, "consumed_steps")?,
            tokens: r.u64(5, "consumed_tokens")?,
            cost: Cost::from_micros(r.u64(6, "consumed_cost_micros")?),
        },
        elapsed_ms: r.u64(7, "elapsed_ms")?,
        state: r.json(8, "state")?,
        at_ms: r.timestamp(9, "at_ms")?,
    })
}

/// The columns [`decode_checkpoint_delta`] reads, in order.
pub const CHECKPOINT_DELTA_COLUMNS: &str = "run_id, step, messages, completed_intents, appended, \
                                            state, consumed_steps, consumed_tokens, \
                                            consumed_cost_micros, elapsed_ms, at_ms";

/// A `checkpoint_deltas` row selected with [`CHECKPOINT_DELTA_COLUMNS`].
pub fn decode_checkpoint_delta<R: Columns>(row: R) -> Result<CheckpointDelta, StoreError> {
    let r = RowReader::new(row, "checkpoint_deltas", &[0, 1]);
    Ok(CheckpointDelta {
        run_id: r.id(0, "run_id")?,
        step: r.u32(1, "step")?,
        messages: r.json(2, "messages")?,
        completed_intents: r.json(3, "completed_intents")?,
        appended: r.json(4, "appended")?,
        state: r.json(5, "state")?,
        consumed: Usage {
            steps: r.u32(6, "consumed_steps")?,
            tokens: r.u64(7, "consumed_tokens")?,
            cost: Cost::from_micros(r.u64(8, "consumed_cost_micros")?),
        },
        elapsed_ms: r.u64(9, "elapsed_ms")?,
        at_ms: r.timestamp(10, "at_ms")?,
    })
}

/// The columns [`decode_lease`] reads, in order.
pub const LEASE_COLUMNS: &str =
    "lease_id, run_id, intent_id, kind, pgid, path, owner, acquired_at_ms, expires_at_ms";

/// A `leases` row selected with [`LEASE_COLUMNS`].
pub fn decode_lease<R: Columns>(row: R) -> Result<Lease, StoreError> {
    let r = RowReader::new(row, "leases", &[0]);
    let pgid = match r.opt_i64(4, "pgid")? {
        None => None,
        Some(value) => Some(i32::try_from(value).map_err(|_| {
            r.corrupt(
                "pgid",
                format!("expected a process group id that fits i32, found {value}"),
            )
        })?),
    };
    Ok(Lease {
        lease_id: r.text(0, "lease_id")?,
        run_id: r.id(1, "run_id")?,
        intent_id: r.opt_id(2, "intent_id")?,
        kind: r.name(3, "kind", LeaseKind::parse)?,
        pgid,
        path: r.opt_text(5, "path")?.map(std::path::PathBuf::from),
        owner: r.text(6, "owner")?,
        acquired_at_ms: r.timestamp(7, "acquired_at_ms")?,
        expires_at_ms: r.timestamp(8, "expires_at_ms")?,
    })
}

/// The columns [`decode_idempotency`] reads, in order.
pub const IDEMPOTENCY_COLUMNS: &str = "tenant, idempotency_key, fingerprint, state, status, \
                                       content_type, location, body, created_at_ms, \
                                       updated_at_ms, expires_at_ms, owner, run_id, \
                                       holder_since_ms, holder_until_ms, headers";

/// An `idempotency` row selected with [`IDEMPOTENCY_COLUMNS`].
pub fn decode_idempotency<R: Columns>(row: R) -> Result<IdempotencyRecord, StoreError> {
    let r = RowReader::new(row, "idempotency", &[0, 1]);
    let state = r.name(3, "state", IdempotencyState::parse)?;
    let status = r.opt_i64(4, "status")?;
    let body = r.opt_blob(7, "body")?;
    let response = match (state, status, body) {
        (IdempotencyState::Completed, Some(status), Some(body)) => Some(StoredResponse {
            status: u16::try_from(status)
                .ok()
                .filter(|status| (200..300).contains(status))
                .ok_or_else(|| {
                    r.corrupt("status", format!("expected a 2xx status, found {status}"))
                })?,
            content_type: r.opt_text(5, "content_type")?,
            location: r.opt_text(6, "location")?,
            headers: match r.opt_text(15, "headers")? {
                None => Vec::new(),
                Some(text) => {
                    decode_headers(&text).map_err(|reason| r.corrupt("headers", reason))?
                }
            },
            body,
        }),
        (IdempotencyState::Completed, None, _) => {
            return Err(r.corrupt(
                "status",
                "expected a status for a completed record, found NULL",
            ));
        }
        (IdempotencyState::Completed, _, None) => {
            return Err(r.corrupt("body", "expected a body for a completed record, found NULL"));
        }
        (IdempotencyState::InProgress, None, None) => None,
        (IdempotencyState::InProgress, _, _) => {
            return Err(r.corrupt(
                "status",
                "expected no response for an in_progress record, found one",
            ));
        }
    };
    Ok(IdempotencyRecord {
        tenant: r.id(0, "tenant")?,
        key: r.text(1, "idempotency_key")?,
        fingerprint: r.text(2, "fingerprint")?,
        state,
        response,
        created_at_ms: r.timestamp(8, "created_at_ms")?,
        updated_at_ms: r.timestamp(9, "updated_at_ms")?,
        expires_at_ms: r.timestamp(10, "expires_at_ms")?,
        owner: r.opt_text(11, "owner")?,
        run_id: r.opt_id(12, "run_id")?,
        holder_since_ms: r.opt_timestamp(13, "holder_since_ms")?,
        holder_until_ms: r.opt_timestamp(14, "holder_until_ms")?,
    })
}

/// A stored response's other headers, as [`super::headers_text`]
/// wrote them.
fn decode_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    serde_json::from_str(text)
        .map_err(|e| format!("expected a JSON array of [name, value] pairs: {e}"))
}

/// The columns [`decode_singleton`] reads, in order.
pub const SINGLETON_COLUMNS: &str = "name, owner, acquired_at_ms, expires_at_ms";

/// A `singletons` row selected with [`SINGLETON_COLUMNS`].
pub fn decode_singleton<R: Columns>(row: R) -> Result<SingletonLease, StoreError> {
    let r = RowReader::new(row, "singletons", &[0]);
    Ok(SingletonLease {
        name: r.text(0, "name")?,
        owner: r.text(1, "owner")?,
        acquired_at_ms: r.timestamp(2, "acquired_at_ms")?,
        expires_at_ms: r.timestamp(3, "expires_at_ms")?,
    })
}

/// The columns [`decode_breaker_opening`] reads, in order.
pub const BREAKER_OPENING_COLUMNS: &str = "arm, open_until_ms, opened_by, reason, updated_at_ms";

/// A `breaker_openings` row selected with [`BREAKER_OPENING_COLUMNS`].
pub fn decode_breaker_opening<R: Columns>(row: R) -> Result<BreakerOpening, StoreError> {
    let r = RowReader::new(row, "breaker_openings", &[0]);
    Ok(BreakerOpening {
        arm: r.text(0, "arm")?,
        open_until_ms: r.timestamp(1, "open_until_ms")?,
        opened_by: r.text(2, "opened_by")?,
        reason: r.text(3, "reason")?,
        updated_at_ms: r.timestamp(4, "updated_at_ms")?,
    })
}

/// The columns [`decode_approval`] reads, in order.
pub const APPROVAL_COLUMNS: &str = "run_id, intent_id, tenant, step, tool, args, args_digest, \
                                    why, requested_at_ms, expires_at_ms, verdict, decided_by, \
                                    decided_at_ms, reason";

/// An `approvals` row selected with [`APPROVAL_COLUMNS`].
pub fn decode_approval<R: Columns>(row: R) -> Result<rein_core::approval::Approval, StoreError> {
    use rein_core::approval::{Approval, ApprovalRequest, ArgsDigest, Decision, Verdict};
    let r = RowReader::new(row, "approvals", &[0, 1]);
    let decision = match r.opt_text(10, "verdict")? {
        None => None,
        Some(name) => Some(Decision {
            verdict: Verdict::parse(&name).ok_or_else(|| {
                r.corrupt(
                    "verdict",
                    format!("expected approved, rejected or expired, found {name:?}"),
                )
            })?,
            by: r.text(11, "decided_by")?,
            at_ms: r.timestamp(12, "decided_at_ms")?,
            reason: r.opt_text(13, "reason")?,
        }),
    };
    Ok(Approval {
        request: ApprovalRequest {
            run_id: r.id(0, "run_id")?,
            intent_id: r.id(1, "intent_id")?,
            tenant: r.id(2, "tenant")?,
            step: r.u32(3, "step")?,
            tool: r.text(4, "tool")?,
            args: r.json(5, "args")?,
            args_digest: ArgsDigest::from_stored(r.text(6, "args_digest")?),
            why: r.text(7, "why")?,
            requested_at_ms: r.timestamp(8, "requested_at_ms")?,
            expires_at_ms: r.timestamp(9, "expires_at_ms")?,
        },
        decision,
    })
}

/// The columns [`decode_webhook_event`] reads, in order (`webhook_events`).
pub const WEBHOOK_EVENT_COLUMNS: &str = "event_id, run_id, topic, outcome, body, created_at_ms";

/// A `webhook_events` row selected with [`WEBHOOK_EVENT_COLUMNS`].
pub fn decode_webhook_event<R: Columns>(row: R) -> Result<crate::WebhookEvent, StoreError> {
    let r = RowReader::new(row, "webhook_events", &[0]);
    let outcome = match r.opt_text(3, "outcome")? {
        None => None,
        Some(name) => Some(
            rein_core::Outcome::parse(&name)
                .ok_or_else(|| r.corrupt("outcome", format!("unknown outcome {name:?}")))?,
        ),
    };
    Ok(crate::WebhookEvent {
        event_id: r.text(0, "event_id")?,
        run_id: r.id(1, "run_id")?,
        topic: crate::webhook::decode_topic("webhook_events", &r.text(2, "topic")?)?,
        outcome,
        body: r.text(4, "body")?,
        created_at_ms: r.timestamp(5, "created_at_ms")?,
    })
}

/// The columns [`decode_webhook_delivery`] reads, in order, of
/// `webhook_deliveries d JOIN webhook_events e`; the event's body follows
/// them in a claim (index 11).
pub const WEBHOOK_DELIVERY_COLUMNS: &str = "d.webhook, d.event_id, e.topic, e.run_id, d.state, \
                                            d.attempts, e.created_at_ms, d.next_attempt_at_ms, \
                                            d.last_attempt_at_ms, d.last_status, d.last_error";

/// A delivery selected with [`WEBHOOK_DELIVERY_COLUMNS`].
pub fn decode_webhook_delivery<R: Columns>(row: R) -> Result<crate::WebhookDelivery, StoreError> {
    let r = RowReader::new(row, "webhook_deliveries", &[0, 1]);
    Ok(crate::WebhookDelivery {
        webhook: r.text(0, "webhook")?,
        event_id: r.text(1, "event_id")?,
        topic: crate::webhook::decode_topic("webhook_events", &r.text(2, "topic")?)?,
        run_id: r.id(3, "run_id")?,
        state: crate::DeliveryState::decode(&r.text(4, "state")?)?,
        attempts: r.u32(5, "attempts")?,
        created_at_ms: r.timestamp(6, "created_at_ms")?,
        next_attempt_at_ms: r.timestamp(7, "next_attempt_at_ms")?,
        last_attempt_at_ms: r
            .opt_u64(8, "last_attempt_at_ms")?
            .map(Timestamp::from_millis),
        last_status: r.opt_int(9, "last_status")?,
        last_error: r.opt_text(10, "last_error")?,
    })
}

/// A claimed delivery: [`WEBHOOK_DELIVERY_COLUMNS`] and the body.
pub fn decode_due_delivery<R: Columns + Clone>(row: R) -> Result<crate::DueDelivery, StoreError> {
    let body = RowReader::new(row.clone(), "webhook_events", &[1]).text(11, "body")?;
    Ok(crate::DueDelivery {
        delivery: decode_webhook_delivery(row)?,
        body,
    })
}

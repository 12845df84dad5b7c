//! Resolving an idempotency record found `in_progress`: is its holder
//! still working, and if not, what did its request do?
//!
//! The decision is [`rein_core::submission::resolve`]'s; this module reads
//! what it needs from the store and the process table, and applies it:
//!
//! | holder recorded as | alive when |
//! | --- | --- |
//! | a process of this host | it runs ([`Owner::is_alive`]: pid and start time) |
//! | a process elsewhere | its run's claim is unexpired, or (before the run holds one) the reservation is younger than a queue lease |
//! | nobody (a record written before holders, or by a store API caller) | until the record expires |
//!
//! So no key a holder left behind stays blocked longer than the claim
//! lease (`server.queue.lease`).

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rein_core::submission::{Holder, Resolution, RunState, Submission, resolve};
use rein_engine::lease::Owner;
use rein_store::{IdempotencyRecord, IdempotencySettlement, LeaseKind, RunRecord, StoredResponse};
use serde_json::{Value, json};

use crate::idempotency::{REPLAYED, in_progress, replay};
use crate::problem::Problem;
use crate::recovery::now_ms;
use crate::runs::{Mode, RunView, location};
use crate::state::AppState;

/// What became of a record found in progress.
pub enum Resolved {
    /// The answer to send.
    Answer(Response),
    /// The dead holder's record was released: reserve the key again.
    Released,
}

/// Resolves `record` (found `in_progress` by a request with `body`).
pub async fn resolve_in_progress(
    state: &Arc<AppState>,
    record: &IdempotencyRecord,
    body: &[u8],
) -> Resolved {
    let Some(owner) = record.owner.as_deref() else {
        // Nobody to ask about: the record blocks its key until it expires.
        return Resolved::Answer(in_progress());
    };
    let run = match &record.run_id {
        Some(id) => match state.store.get_run(id).await {
            Ok(run) => run,
            Err(e) => return Resolved::Answer(Problem::from(e).into_response()),
        },
        None => None,
    };
    let claim_expiry = match &run {
        Some(run) => match state.store.leases_of_run(&run.run_id).await {
            Ok(leases) => leases
                .into_iter()
                .find(|l| l.kind == LeaseKind::Run)
                .map(|l| l.expires_at_ms),
            Err(e) => return Resolved::Answer(Problem::from(e).into_response()),
        },
        None => None,
    };
    let lease_ms = u64::try_from(state.settings.queue.lease.as_millis()).unwrap_or(u64::MAX);
    let holder = holder(owner, record, claim_expiry, now_ms(), lease_ms);
    let run_state = match &run {
        None => RunState::Absent,
        Some(run) if run.status.is_finished() => RunState::Finished,
        Some(_) => RunState::InFlight,
    };
    let submission = match serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| serde_json::from_value::<Mode>(v.get("mode")?.clone()).ok())
    {
        Some(Mode::Queued) => Submission::Queued,
        _ => Submission::Sync,
    };
    let resolution = resolve(holder, run_state, submission);
    tracing::info!(tenant = %record.tenant, ?holder, ?run_state, ?resolution, "resolving an idempotency record in progress");
    let settle = |settlement: IdempotencySettlement| async move {
        state
            .store
            .settle_idempotency(&record.tenant, &record.key, owner, settlement, now_ms())
            .await
    };
    match (resolution, run) {
        (Resolution::Wait, _) => Resolved::Answer(in_progress()),
        (Resolution::Release, _) => match settle(IdempotencySettlement::Release).await {
            Ok(_) => Resolved::Released,
            Err(e) => Resolved::Answer(Problem::from(e).into_response()),
        },
        (Resolution::Recovering, Some(run)) => Resolved::Answer(recovering(&run, body)),
        (Resolution::Complete, Some(run)) => {
            let status = match submission {
                Submission::Sync => StatusCode::OK,
                Submission::Queued => StatusCode::ACCEPTED,
            };
            let stored = StoredResponse {
                status: status.as_u16(),
                content_type: Some("application/json".to_owned()),
                location: Some(location(&run.run_id)),
                body: view(&run, body),
            };
            // Fenced: when another retry resolved it first, its answer is
            // this run's too; replay what is stored then.
            match settle(IdempotencySettlement::Complete(stored.clone())).await {
                Ok(true) => Resolved::Answer(replay(stored)),
                Ok(false) => Resolved::Answer(replay(stored)),
                Err(e) => Resolved::Answer(Problem::from(e).into_response()),
            }
        }
        // A resolution that needs a run always has one (see `resolve`).
        (Resolution::Recovering | Resolution::Complete, None) => Resolved::Answer(in_progress()),
    }
}

/// Whether the reservation's holder can still answer (see the module's
/// table).
fn holder(
    owner: &str,
    record: &IdempotencyRecord,
    claim_expiry: Option<u64>,
    now_ms: u64,
    lease_ms: u64,
) -> Holder {
    match Owner::parse(owner) {
        Some(process) if process.is_local() => {
            if process.is_alive() {
                Holder::Alive
            } else {
                Holder::Gone
            }
        }
        _ => {
            let beat = claim_expiry.unwrap_or(record.updated_at_ms.saturating_add(lease_ms));
            if beat > now_ms {
                Holder::Alive
            } else {
                Holder::Gone
            }
        }
    }
}

/// The run's view as its submission's answer shows it: with the
/// submission's metadata.
fn view(run: &RunRecord, body: &[u8]) -> Vec<u8> {
    let mut view = json!(RunView::of(run.clone()));
    let metadata = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.get("metadata").cloned())
        .unwrap_or(Value::Null);
    view["metadata"] = metadata;
    serde_json::to_vec(&view).unwrap_or_default()
}

/// 202 for a sync submission whose holder died while its run is still
/// being recovered: the run exists, its end is not known yet. Not stored.
fn recovering(run: &RunRecord, body: &[u8]) -> Response {
    let mut response = (StatusCode::ACCEPTED, view(run, body)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Ok(location) = HeaderValue::from_str(&location(&run.run_id)) {
        headers.insert(header::LOCATION, location);
    }
    headers.insert(REPLAYED, HeaderValue::from_static("true"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(updated_at_ms: u64) -> IdempotencyRecord {
        IdempotencyRecord {
            tenant: rein_core::TenantId::new("acme").unwrap(),
            key: "k".into(),
            fingerprint: "0".repeat(64),
            state: rein_store::IdempotencyState::InProgress,
            response: None,
            created_at_ms: updated_at_ms,
            updated_at_ms,
            expires_at_ms: u64::MAX,
            owner: None,
            run_id: None,
        }
    }

    #[test]
    fn a_holder_of_this_host_is_alive_while_its_process_runs() {
        let me = format!("{}#token", Owner::current());
        assert_eq!(
            holder(&me, &record(0), None, 10_000_000, 3_000),
            Holder::Alive
        );
        // Above any pid_max: no such process.
        let gone = me.replacen(&format!("pid:{}", std::process::id()), "pid:999999999", 1);
        assert_eq!(
            holder(&gone, &record(10_000_000), None, 10_000_000, 3_000),
            Holder::Gone
        );
    }

    #[test]
    fn a_holder_elsewhere_is_alive_until_its_claim_or_a_lease_ran_out() {
        let elsewhere = "pid:1@some-other-host#token";
        assert_eq!(
            holder(elsewhere, &record(1_000), None, 3_999, 3_000),
            Holder::Alive
        );
        assert_eq!(
            holder(elsewhere, &record(1_000), None, 4_000, 3_000),
            Holder::Gone
        );
        assert_eq!(
            holder(elsewhere, &record(1_000), Some(9_000), 8_999, 3_000),
            Holder::Alive
        );
        assert_eq!(
            holder(elsewhere, &record(1_000), Some(9_000), 9_000, 3_000),
            Holder::Gone
        );
    }
}

//! `POST /v1/runs/{id}/cancel`.
//!
//! A queued run is cancelled through the store, from any node: it never
//! starts. A running run is cancelled by the process driving it: when
//! that is this process, at once; otherwise the request is recorded in
//! the store ([`rein_store::RunStore::request_cancel`]) and the driving
//! process, wherever it runs, sees it at its next claim renewal and
//! cancels the run as a local cancel does. Either way the answer is 202
//! `cancelling`, a promise of delivery, not that the run already stopped:
//! follow its events or poll the run until it ends. The run's in-flight
//! calls are aborted and it settles like a failed run, as `cancelled`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rein_core::Outcome;
use rein_store::{RunStatus, StoreError, StoreExt};
use serde_json::json;

use crate::api::runs::owned;
use crate::http::auth::Tenant;
use crate::http::extract::Segment;
use crate::http::problem::Problem;
use crate::http::state::AppState;

fn terminal(id: &str, status: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "run-terminal",
        "Run already ended",
        format!("run {id} already ended as {status}; there is nothing to cancel"),
    )
}

/// The public node id of the process driving `run_id` (from the run's
/// claim), if one holds it: never its PID or host, which only the log
/// shows.
async fn driving_node(state: &AppState, run_id: &rein_core::RunId) -> Option<String> {
    let claim = match state.store.leases_of_run(run_id).await {
        Ok(leases) => leases
            .into_iter()
            .find(|l| l.kind == rein_store::LeaseKind::Run),
        Err(e) => {
            tracing::warn!(run = %run_id, "cannot read the run's claim: {e}");
            None
        }
    };
    claim
        .as_ref()
        .and_then(|l| rein_engine::lease::claim_node(&l.owner))
        .map(str::to_owned)
}

/// The 202 of a cancel delivered to this process's own run.
fn delivered_here(run_id: &rein_core::RunId) -> Response {
    (
        StatusCode::ACCEPTED,
        axum::Json(json!({
            "run_id": run_id,
            "status": "cancelling",
            "delivery": "local",
            "note": "the run is driven by this node and is cancelling; follow its events or GET the run until it ends",
        })),
    )
        .into_response()
}

/// A cancel of a run this process does not drive (another node does, or
/// it is starting here, or its owner died): recorded in the store, where
/// the driving process sees it at its next claim renewal (at once on
/// PostgreSQL, which notifies it) and cancels the run as a local cancel
/// does. A process that takes an orphaned run over sees it too.
async fn through_store(
    state: &AppState,
    record: &rein_store::RunRecord,
    id: &str,
) -> Result<Response, Problem> {
    let request = rein_store::CancelRequest {
        run_id: record.run_id.clone(),
        requested_by: state.engine.node().to_owned(),
        requested_at_ms: crate::lifecycle::recovery::now_ms(),
    };
    match state.store.request_cancel(request).await {
        Ok(stored) => {
            let node = driving_node(state, &record.run_id).await;
            tracing::info!(run = %record.run_id, driving_node = ?node, "cancellation recorded for the process driving the run");
            Ok((
                StatusCode::ACCEPTED,
                axum::Json(json!({
                    "run_id": record.run_id,
                    "status": "cancelling",
                    "delivery": "store",
                    "driving_node": node,
                    "requested_at_ms": stored.requested_at_ms,
                    "note": "the cancellation is recorded; the node driving the run cancels it at its next claim renewal; follow its events or GET the run until it ends",
                })),
            )
                .into_response())
        }
        Err(StoreError::FinishedRun { outcome, .. }) => Err(terminal(id, outcome.as_str())),
        Err(e) => Err(e.into()),
    }
}

/// Delivers the cancels other nodes record for runs this process drives,
/// as the store notifies them (PostgreSQL `NOTIFY`), until the server
/// stops: the fast path of `through_store`. After a gap (the listener
/// reconnected, say after a database restart, or this receiver lagged)
/// the cancel requests of every run driven here are read again, so a
/// cancel recorded meanwhile is not left to the next claim renewal.
pub async fn deliver_notified(
    state: Arc<AppState>,
    mut notified: tokio::sync::broadcast::Receiver<rein_store::Notification>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        match notified.recv().await {
            Ok(rein_store::Notification::CancelRequested(run_id)) => {
                if state.engine.cancel(&run_id) {
                    tracing::info!(run = %run_id, "cancel notified through the store; cancelling the run");
                }
            }
            Ok(rein_store::Notification::Resync) => deliver_missed(&state).await,
            Ok(_) => {}
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "cancel notifications lagged; reading the cancel requests of the runs driven here"
                );
                deliver_missed(&state).await;
            }
            Err(RecvError::Closed) => return,
        }
    }
}

/// Cancels every run driven here whose cancel request is recorded: what
/// notifications missed during a gap would have delivered. A store that
/// cannot be read leaves it to the claim renewals.
async fn deliver_missed(state: &AppState) {
    for run_id in state.engine.live_runs() {
        match state.store.cancel_request(&run_id).await {
            Ok(Some(_)) => {
                if state.engine.cancel(&run_id) {
                    tracing::info!(run = %run_id, "cancel found through the store after a notification gap; cancelling the run");
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(run = %run_id, "cannot read the cancel request after a notification gap; the claim renewal reads it: {e}");
            }
        }
    }
}

/// Cancels a run.
#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    request_body(content = crate::api::runs::NoBody, description = "Nothing: an empty body or `{}`, sent as `application/json`"),
    responses(
        (status = 202, description = "the cancellation was taken: a queued run is cancelled (`status: cancelled`); a running one is `cancelling`, delivered to this node's run (`delivery: local`) or recorded in the store for the node driving it, which cancels it at its next claim renewal (`delivery: store`). Follow `GET /v1/runs/{id}` or its `/events` until `run_finished`", body = Object),
        (status = 400, description = "a body other than nothing or `{}`", body = Problem),
        (status = 401, description = "missing or invalid API key", body = Problem),
        (status = 404, description = "unknown run, or another tenant's", body = Problem),
        (status = 409, description = "the run already ended (`run-terminal`)", body = Problem),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Segment(id): Segment,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, Problem> {
    crate::api::runs::no_body(&state, body)?;
    let record = owned(&state, &tenant, &id).await?;
    match record.status {
        RunStatus::Finished(outcome) => Err(terminal(&id, outcome.as_str())),
        RunStatus::Running if state.engine.cancel(&record.run_id) => {
            Ok(delivered_here(&record.run_id))
        }
        RunStatus::Running => through_store(&state, &record, &id).await,
        RunStatus::Queued => {
            close_idle(
                &state,
                &record,
                &id,
                "cancelled while queued: the run never started",
            )
            .await
        }
        RunStatus::AwaitingApproval => close_idle(
            &state,
            &record,
            &id,
            "cancelled while awaiting approval: the calls waiting for a decision were never made",
        )
        .await,
    }
}

/// Cancels a run no worker drives (queued, or paused for a decision) by
/// closing it, atomically against a worker taking it at the same moment:
/// then the cancel goes to that worker, here or through the store.
async fn close_idle(
    state: &Arc<AppState>,
    record: &rein_store::RunRecord,
    id: &str,
    reason: &str,
) -> Result<Response, Problem> {
    let closing = rein_engine::run::Closing {
        outcome: Outcome::Cancelled,
        end: rein_engine::run::End::Closed {
            error_type: None,
            reason: reason.into(),
        },
        events: Vec::new(),
        expect: Some(record.status),
    };
    match state.engine.close(record, closing).await {
        Ok(_) => Ok((
            StatusCode::ACCEPTED,
            axum::Json(json!({"run_id": record.run_id, "status": "cancelled"})),
        )
            .into_response()),
        // A worker started (and maybe finished) it meanwhile.
        Err(StoreError::FinishedRun { outcome, .. }) => Err(terminal(id, outcome.as_str())),
        Err(StoreError::StatusChanged { .. }) => {
            // It started meanwhile: deliver to its live owner, here or
            // through the store.
            if state.engine.cancel(&record.run_id) {
                Ok(delivered_here(&record.run_id))
            } else {
                through_store(state, record, id).await
            }
        }
        Err(e) => Err(e.into()),
    }
}

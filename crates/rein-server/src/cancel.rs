//! `POST /v1/runs/{id}/cancel`.
//!
//! A queued run is cancelled through the store, from any node: it never
//! starts. A running run is cancelled by the process driving it: 202 means
//! the request reached that owner (a promise of delivery, not that the run
//! already stopped — poll it); a request reaching another process, or an
//! owner that restarted, gets 409 `cancel-not-delivered`. The run's
//! in-flight calls are aborted and it settles like a failed run.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rein_core::Outcome;
use rein_store::{RunStatus, StoreError, StoreExt};
use serde_json::json;

use crate::auth::Tenant;
use crate::extract::Segment;
use crate::problem::Problem;
use crate::runs::owned;
use crate::state::AppState;

fn terminal(id: &str, status: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "run-terminal",
        "Run already ended",
        format!("run {id} already ended as {status}; there is nothing to cancel"),
    )
}

/// The 409 of a running run this process does not drive: it names the
/// node that does by its opaque id (from the run's claim), never its PID
/// or host, which only the log shows.
async fn not_delivered(state: &AppState, run_id: &rein_core::RunId, id: &str) -> Problem {
    let claim = match state.store.leases_of_run(run_id).await {
        Ok(leases) => leases
            .into_iter()
            .find(|l| l.kind == rein_store::LeaseKind::Run),
        Err(e) => {
            tracing::warn!(run = %run_id, "cannot read the run's claim: {e}");
            None
        }
    };
    let node = claim
        .as_ref()
        .and_then(|l| rein_engine::lease::claim_node(&l.owner))
        .map(str::to_owned);
    if let Some(claim) = &claim {
        tracing::info!(run = %run_id, owner = %claim.owner, "cancellation not delivered: another process drives the run");
    }
    let answering = state.engine.node();
    let mut problem = Problem::new(
        StatusCode::CONFLICT,
        "cancel-not-delivered",
        "Cancellation not delivered",
        not_delivered_detail(id, node.as_deref(), answering),
    )
    .with(json!({"driving_node": node, "answering_node": answering}));
    if node.as_deref() == Some(answering) {
        problem.retry_after = Some(1);
    }
    problem
}

/// What the 409 says when the run is driven by `driving` (its claim's
/// node, if it names one) and `answering` answered.
///
/// # Why a case for this very node
///
/// A worker of this process claims a run before the engine registers the
/// run's cancellation token; a cancel arriving between the two finds the
/// claim naming this node and no token yet. That run is starting here,
/// and a retry a moment later reaches it.
fn not_delivered_detail(id: &str, driving: Option<&str>, answering: &str) -> String {
    match driving {
        Some(node) if node == answering => format!(
            "run {id} is starting on this node ({node}) and cannot be cancelled until it runs; retry the cancel in a moment"
        ),
        Some(node) => format!(
            "run {id} is driven by node {node}, not the one that answered ({answering}); the cancellation could not be delivered here"
        ),
        None => format!(
            "run {id} is driven by another process (or its owner restarted); the cancellation could not be delivered here"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_claimed_by_the_answering_node_is_starting_not_elsewhere() {
        let starting = not_delivered_detail("r-1", Some("n1"), "n1");
        assert!(starting.contains("starting on this node"), "{starting}");
        assert!(starting.contains("retry"), "{starting}");
        assert!(
            !starting.contains("not the one that answered"),
            "{starting}"
        );
        let elsewhere = not_delivered_detail("r-1", Some("n2"), "n1");
        assert!(
            elsewhere.contains("driven by node n2, not the one that answered (n1)"),
            "{elsewhere}"
        );
        let unknown = not_delivered_detail("r-1", None, "n1");
        assert!(unknown.contains("another process"), "{unknown}");
    }
}

/// Cancels a run.
#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    request_body(content = crate::runs::NoBody, description = "Nothing: an empty body or `{}`, sent as `application/json`"),
    responses(
        (status = 202, description = "the cancellation was delivered (a queued run is cancelled)", body = Object),
        (status = 400, description = "a body other than nothing or `{}`", body = Problem),
        (status = 401, description = "missing or invalid API key", body = Problem),
        (status = 404, description = "unknown run, or another tenant's", body = Problem),
        (status = 409, description = "the run already ended, or its live owner could not be reached", body = Problem),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Segment(id): Segment,
    body: Result<axum::body::Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, Problem> {
    crate::runs::no_body(&state, body)?;
    let record = owned(&state, &tenant, &id).await?;
    match record.status {
        RunStatus::Finished(outcome) => Err(terminal(&id, outcome.as_str())),
        RunStatus::Running
            if state.engine.cancel(&record.run_id) =>
        {
            Ok((
            StatusCode::ACCEPTED,
            axum::Json(json!({"run_id": record.run_id, "status": "cancelling",
                              "note": "the cancellation reached the run's owner; poll the run until it ends"})),
        )
            .into_response())
        }
        RunStatus::Running => Err(not_delivered(&state, &record.run_id, &id).await),
        RunStatus::Queued => {
            let closing = rein_engine::run::Closing {
                outcome: Outcome::Cancelled,
                end: rein_engine::run::End::Closed {
                    error_type: None,
                    reason: "cancelled while queued: the run never started".into(),
                },
                events: Vec::new(),
                // Atomic against a worker starting it at the same moment.
                expect: Some(RunStatus::Queued),
            };
            match state.engine.close(&record, closing).await {
                Ok(_) => Ok((
                    StatusCode::ACCEPTED,
                    axum::Json(json!({"run_id": record.run_id, "status": "cancelled"})),
                )
                    .into_response()),
                // A worker started (and maybe finished) it meanwhile.
                Err(StoreError::FinishedRun { outcome, .. }) => {
                    Err(terminal(&id, outcome.as_str()))
                }
                Err(StoreError::StatusChanged { .. }) => {
                    // It started meanwhile: deliver to its live owner, if
                    // that is this process.
                    if state.engine.cancel(&record.run_id) {
                        Ok((
                            StatusCode::ACCEPTED,
                            axum::Json(json!({"run_id": record.run_id, "status": "cancelling"})),
                        )
                            .into_response())
                    } else {
                        Err(not_delivered(&state, &record.run_id, &id).await)
                    }
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

//! `POST /v1/runs/{id}/cancel`.
//!
//! A queued run is cancelled through the store, from any node: it never
//! starts. A running run is cancelled by the process driving it: 202 means
//! the request reached that owner (a promise of delivery, not that the run
//! already stopped — poll it); a request reaching another process, or an
//! owner that restarted, gets 409 `cancel-not-delivered`. The run's
//! in-flight calls are aborted and it settles like a failed run.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rein_core::outcome::RunReport;
use rein_core::{Event, EventKind, Outcome};
use rein_store::{RunStatus, StatusChange, StepCommit, StoreError};
use serde_json::json;

use crate::auth::Tenant;
use crate::problem::Problem;
use crate::runs::owned;
use crate::state::AppState;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn terminal(id: &str, status: &str) -> Problem {
    Problem::new(
        StatusCode::CONFLICT,
        "run-terminal",
        "Run already ended",
        format!("run {id} already ended as {status}; there is nothing to cancel"),
    )
}

/// Cancels a run.
#[utoipa::path(
    post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses(
        (status = 202, description = "the cancellation was delivered (a queued run is cancelled)", body = Object),
        (status = 404, description = "unknown run, or another tenant's", body = Problem),
        (status = 409, description = "the run already ended, or its live owner could not be reached", body = Problem),
    ),
    security(("bearer" = []))
)]
pub async fn cancel_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
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
        RunStatus::Running => Err(Problem::new(
            StatusCode::CONFLICT,
            "cancel-not-delivered",
            "Cancellation not delivered",
            format!(
                "run {id} is driven by another process (or its owner restarted); the cancellation could not be delivered here"
            ),
        )),
        RunStatus::Queued => {
            let at_ms = now_ms();
            let report = RunReport {
                outcome: Outcome::Cancelled,
                completed: Vec::new(),
                incomplete: Vec::new(),
                recoverable: true,
                recommendation: "submit the task again if it is still wanted".into(),
                summary: "Cancelled while queued: the run never started; nothing happened.".into(),
                answer: None,
                consumed: rein_core::deadline::Usage::default(),
                elapsed_ms: 0,
                steps: 0,
                compensations: Vec::new(),
                handoff: None,
                resume: None,
            };
            let event = Event {
                run_id: record.run_id.clone(),
                seq: 0,
                step: 0,
                intent_id: None,
                attempt_id: None,
                idempotency_key: None,
                at_ms,
                kind: EventKind::RunFinished,
                data: json!({"outcome": "cancelled", "reason": "cancelled while queued", "steps": 0}),
            };
            let commit = StepCommit {
                status: Some(StatusChange {
                    status: RunStatus::Finished(Outcome::Cancelled),
                    report: Some(report),
                    at_ms,
                }),
                events: vec![event],
                // Atomic against a worker starting it at the same moment.
                expect_status: Some(RunStatus::Queued),
                ..StepCommit::default()
            };
            match state.store.commit_step(&record.run_id, commit).await {
                Ok(_) => Ok((
                    StatusCode::ACCEPTED,
                    axum::Json(json!({"run_id": record.run_id, "status": "cancelled"})),
                )
                    .into_response()),
                // A worker started (and maybe finished) it meanwhile.
                Err(StoreError::FinishedRun { outcome, .. }) => {
                    Err(terminal(&id, outcome.as_str()))
                }
                Err(StoreError::Conflict {
                    what: "run status", ..
                }) => {
                    // It started meanwhile: deliver to its live owner, if
                    // that is this process.
                    if state.engine.cancel(&record.run_id) {
                        Ok((
                            StatusCode::ACCEPTED,
                            axum::Json(json!({"run_id": record.run_id, "status": "cancelling"})),
                        )
                            .into_response())
                    } else {
                        Err(Problem::new(
                            StatusCode::CONFLICT,
                            "cancel-not-delivered",
                            "Cancellation not delivered",
                            format!("run {id} started meanwhile in another process; poll the run"),
                        ))
                    }
                }
                Err(e) => Err(e.into()),
            }
        }
    }
}

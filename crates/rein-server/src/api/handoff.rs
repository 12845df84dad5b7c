//! Handoff decisions over HTTP (`POST /v1/runs/{id}/handoff/decisions`):
//! a human settles a record a run left awaiting one.
//!
//! The decider is named as for approvals: the API key's label, or the
//! body's `by` in the keyless loopback mode. What each decision does, and
//! how the last one closes the run, is [`rein_engine::handoff`]'s.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use rein_core::IntentId;
use rein_core::handoff::Decision;
use rein_engine::handoff::{DecisionRequest, Resolution, ResolveError, Resolver};
use serde::Deserialize;
use serde_json::json;
use utoipa::ToSchema;

use crate::http::auth::Caller;
use crate::http::extract::Segment;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// A handoff decision, as sent.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HandoffDecisionBody {
    /// The record (its intent), as the handoff package's
    /// `awaiting_decision` lists it.
    #[schema(min_length = 1, max_length = 200)]
    pub intent_id: String,
    /// `undone` (undone by hand), `accepted` (the effect stands),
    /// `compensate` (run its registered compensation now) or `retry` (an
    /// idempotent write, again under its original key).
    #[schema(value_type = String, pattern = "^(undone|accepted|compensate|retry)$")]
    pub decision: Decision,
    /// Why, in the decider's words.
    #[serde(default)]
    #[schema(max_length = 2000)]
    pub reason: Option<String>,
    /// Who decides, in the keyless loopback mode (default `operator`);
    /// ignored with API keys, where the key's name is recorded.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = "^[^\\x00-\\x1f\\x7f]+$")]
    pub by: Option<String>,
}

/// Records a human's decision on a record the run left awaiting one.
#[utoipa::path(
    post, path = "/v1/runs/{id}/handoff/decisions", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    request_body(content = HandoffDecisionBody, description = "The decision"),
    responses((status = 200, description = "applied (or the same decision was applied before: `repeated`): the record's `from` and `status`, the `result` of a retry, `still_awaiting`, the run's `run_status`, and `closed` when this was the last decision a handed-off run awaited", body = Object),
              (status = 400, description = "a body that is not a decision", body = Problem),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 404, description = "unknown run or record, or another tenant's run", body = Problem),
              (status = 409, description = "the record does not await a decision (`/not-awaiting`, `status` says what it is), another decision stands (`/already-decided`: `decision`, `by`, `status`), it belongs to a child run (`/child-record`: `child_run_id`), or the run has not finished (`/run-not-finished`)", body = Problem),
              (status = 422, description = "the decision does not apply to this record (`/not-applicable`: a retry of a write that is not idempotent, a compensation of an effect in doubt or of a tool without one)", body = Problem),
              (status = 502, description = "the compensation or retry was sent and failed (`/action-failed`): the attempt is recorded and the record still awaits a decision", body = Problem)),
    security(("bearer" = []))
)]
pub async fn decide(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Segment(id): Segment,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Json<Resolution>, Problem> {
    let body = crate::api::runs::raw_body(&state, body)?;
    let mut de = serde_json::Deserializer::from_slice(&body);
    let sent: HandoffDecisionBody = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| crate::api::runs::invalid_body("a handoff decision", e.path(), e.inner()))?;
    let by = caller.decider(sent.by);
    let record = crate::api::runs::owned(&state, &caller.tenant, &id).await?;
    let intent_id = IntentId::new(sent.intent_id.clone()).map_err(|_| {
        Problem::not_found(format!(
            "run {id} has no ledger record `{}`",
            sent.intent_id
        ))
    })?;
    let resolver = resolver(&state)?;
    let request = DecisionRequest {
        intent_id,
        decision: sent.decision,
        by,
        reason: sent.reason,
    };
    match resolver.resolve(&record.run_id, &request).await {
        Ok(resolution) => {
            tracing::info!(
                run = %resolution.run_id,
                intent = %resolution.intent_id,
                decision = %resolution.decision,
                by = %resolution.by,
                closed = ?resolution.closed,
                "handoff decided"
            );
            Ok(Json(resolution))
        }
        Err(e) => Err(problem(e)),
    }
}

/// A resolver with the server's tools and compensations.
fn resolver(state: &AppState) -> Result<Resolver, Problem> {
    let tools = rein_engine::bind::bind_tools(&state.registry)
        .map_err(|e| Problem::internal(format!("cannot bind the config's tools: {e}")))?;
    let compensations = rein_engine::bind::bind_compensations(&state.registry)
        .map_err(|e| Problem::internal(format!("cannot bind the config's compensations: {e}")))?;
    Ok(Resolver::new(
        state.store.clone(),
        state.engine.clock().clone(),
        state.client.clone(),
        tools,
        compensations,
    ))
}

/// The problem a refused decision answers with: each names what stands.
fn problem(e: ResolveError) -> Problem {
    let detail = e.to_string();
    match e {
        ResolveError::RunNotFound(_) | ResolveError::NoRecord { .. } => Problem::not_found(detail),
        ResolveError::NotFinished { status, .. } => Problem::new(
            StatusCode::CONFLICT,
            "run-not-finished",
            "Run not finished",
            detail,
        )
        .with(json!({"run_status": status.as_str()})),
        ResolveError::OfChild { child, .. } => Problem::new(
            StatusCode::CONFLICT,
            "child-record",
            "Record of a child run",
            detail,
        )
        .with(json!({"child_run_id": child})),
        ResolveError::NotAwaiting { status, .. } => Problem::new(
            StatusCode::CONFLICT,
            "not-awaiting",
            "Not awaiting a decision",
            detail,
        )
        .with(json!({"status": status})),
        ResolveError::AlreadyDecided {
            decision,
            by,
            status,
            ..
        } => Problem::new(
            StatusCode::CONFLICT,
            "already-decided",
            "Already decided",
            detail,
        )
        .with(json!({"decision": decision, "by": by, "status": status})),
        ResolveError::NotApplicable { .. } => Problem::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "not-applicable",
            "Decision does not apply",
            detail,
        ),
        ResolveError::ActionFailed { .. } => Problem::new(
            StatusCode::BAD_GATEWAY,
            "action-failed",
            "Action failed",
            detail,
        ),
        ResolveError::Contended { .. } => Problem::unavailable(detail),
        ResolveError::Store(e) => e.into(),
        _ => Problem::internal(detail),
    }
}

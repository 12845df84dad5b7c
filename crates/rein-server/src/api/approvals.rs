//! Approvals over HTTP: the calls waiting for a human
//! (`GET /v1/approvals`), a decision on one
//! (`POST /v1/runs/{id}/approvals/{intent_id}`), and the sweep that
//! records `expired` on those nobody decided in time.
//!
//! # Why the author is the key
//!
//! A decision's `by` is the label of the API key that sent it: a body
//! cannot name someone else (its `by` is ignored). Only the keyless loopback mode, where there
//! is no key to name, takes `by` from the body.
//!
//! # Why a decision wakes the queue
//!
//! The decision that completes a turn moves its run back to `running`
//! with no claim, in the store's transaction. The workers of every node
//! find such runs when they look for abandoned work; waking this node's
//! at once spares the decider the idle poll.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use rein_core::IntentId;
use rein_core::approval::{Approval, Decision, Verdict};
use rein_store::approval::MAX_APPROVALS_PAGE;
use rein_store::{ApprovalFilter, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::json;
use utoipa::ToSchema;

use crate::http::auth::{Caller, Tenant};
use crate::http::extract::Segments;
use crate::http::problem::Problem;
use crate::http::query;
use crate::http::state::AppState;

/// Approvals per listing when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;

/// How often the sweep records expiries and reads the pending count.
pub const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// The singleton of the expiry sweep.
pub const APPROVAL_EXPIRY: &str = "approval-expiry";

/// Seconds a decision may take: a minute to a month.
const DECISION_BUCKETS: [f64; 10] = [
    60.0,
    300.0,
    900.0,
    3_600.0,
    14_400.0,
    43_200.0,
    86_400.0,
    259_200.0,
    604_800.0,
    2_592_000.0,
];

/// The decision's verdict, as a label.
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct VerdictLabel {
    verdict: String,
}

/// The approval metrics, in the engine's registry.
#[derive(Debug, Clone)]
pub struct ApprovalMetrics {
    latency: Family<VerdictLabel, Histogram, fn() -> Histogram>,
    pending: Gauge,
}

impl ApprovalMetrics {
    /// Registers them in `metrics` (once per process).
    pub fn register(metrics: &rein_engine::metrics::Metrics) -> Self {
        fn histogram() -> Histogram {
            Histogram::new(DECISION_BUCKETS)
        }
        let latency: Family<VerdictLabel, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(histogram);
        let pending = Gauge::default();
        metrics.register(
            "rein_approval_decision_seconds",
            "How long calls waited for a human's decision, from the request to the decision, by verdict (expired: the whole window)",
            latency.clone(),
        );
        metrics.register(
            "rein_approvals_pending",
            "Calls waiting for a human's decision, store-wide, as this node read them at its last sweep (every node reads the same store: aggregate with max)",
            pending.clone(),
        );
        ApprovalMetrics { latency, pending }
    }

    fn decided(&self, approval: &Approval) {
        if let (Some(decision), Some(waited)) = (&approval.decision, approval.waited()) {
            self.latency
                .get_or_create(&VerdictLabel {
                    verdict: decision.verdict.as_str().to_owned(),
                })
                .observe(waited.as_secs_f64());
        }
    }
}

/// A listing of approvals.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct ApprovalList {
    /// The approvals, oldest request first; each is the request
    /// (`run_id`, `intent_id`, `tool`, `args`, `args_digest`, `why`,
    /// `requested_at_ms`, `expires_at_ms`, …) and its `decision`, `null`
    /// while pending.
    #[schema(value_type = Vec<Object>)]
    pub approvals: Vec<Approval>,
}

/// The query of `GET /v1/approvals`, for its documentation: the handler
/// reads the pairs itself, so that an unknown or repeated parameter is a
/// 400 naming it.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalQuery {
    /// Only those without a decision whose run still waits (default true).
    pub pending: Option<bool>,
    /// Only this run's (an id no run can have lists none).
    pub run_id: Option<String>,
    /// At most this many (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A decision, as sent.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    /// `approved` or `rejected` (`expired` is rein's to record).
    pub decision: HumanVerdict,
    /// Why; a rejection's reason is what the model is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 2000)]
    pub reason: Option<String>,
    /// Who decides, in the keyless loopback mode (default `operator`);
    /// ignored with API keys, where the key's name is recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 1, max_length = 200, pattern = "^[^\\x00-\\x1f\\x7f]+$")]
    pub by: Option<String>,
}

/// What a human may decide.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum HumanVerdict {
    /// Send the call, with exactly the arguments it was requested with.
    Approved,
    /// Never send it; the model is told.
    Rejected,
}

/// The pending (or all) approvals of the caller's tenant.
#[utoipa::path(
    get, path = "/v1/approvals", tag = "approvals",
    params(ApprovalQuery),
    responses((status = 200, description = "The approvals, oldest request first", body = ApprovalList),
              (status = 400, description = "a parameter unknown, repeated or out of range (`parameter` names it)", body = Problem),
              (status = 401, description = "missing or invalid API key", body = Problem)),
    security(("bearer" = []))
)]
pub async fn list_approvals(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<ApprovalList>, Problem> {
    let Query(pairs) = query.map_err(|e| Problem::bad_request(format!("invalid query: {e}")))?;
    let mut filter = parse(&pairs)?;
    // The caller's tenant, whatever the query.
    filter.tenant = Some(tenant);
    let approvals = if filter.limit == 0 {
        Vec::new()
    } else {
        state.store.approvals(&filter).await?
    };
    Ok(Json(ApprovalList { approvals }))
}

fn parse(pairs: &[(String, String)]) -> Result<ApprovalFilter, Problem> {
    let mut filter = ApprovalFilter {
        pending: true,
        limit: DEFAULT_LIMIT,
        ..ApprovalFilter::default()
    };
    query::once(pairs)?;
    let mut no_such_run = false;
    for (name, value) in pairs {
        match name.as_str() {
            "pending" => {
                filter.pending = value.parse().map_err(|_| {
                    query::invalid(
                        name,
                        format!("pending must be true or false, but it is {value:?}"),
                    )
                })?;
            }
            "run_id" => match rein_core::RunId::new(value.clone()) {
                Ok(run_id) => filter.run_id = Some(run_id),
                // No run has such an id: it has no approvals.
                Err(_) => no_such_run = true,
            },
            "limit" => filter.limit = query::limit(value, MAX_APPROVALS_PAGE)?,
            other => return Err(query::unknown(other, "pending, run_id or limit")),
        }
    }
    if no_such_run {
        filter.limit = 0;
    }
    Ok(filter)
}

/// What a decision's `POST` answers: the approval with its decision, and
/// whether the run continues.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Decided {
    /// The approval, decided.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    pub approval: Approval,
    /// Whether it was the last its run's turn waited for: the run is
    /// `running` again, for a worker to continue.
    pub continues: bool,
}

/// Records a decision on a call that waits for one.
#[utoipa::path(
    post, path = "/v1/runs/{id}/approvals/{intent_id}", tag = "approvals",
    params(("id" = String, Path, description = "The run"),
           ("intent_id" = String, Path, description = "The call (its intent)")),
    request_body(content = DecisionBody, description = "The decision"),
    responses((status = 200, description = "recorded: the approval with its decision, and `continues`: whether it was the last its run's turn waited for (the run is `running` again, for a worker to continue)", body = Decided),
              (status = 400, description = "a body that is not a decision", body = Problem),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 404, description = "unknown run or call, or another tenant's run", body = Problem),
              (status = 409, description = "the call was decided before, or its window closed (`type` ends in `/already-decided`: `approval` holds the decision that stands), or the run ended while it waited (`/run-terminal`)", body = Problem)),
    security(("bearer" = []))
)]
pub async fn decide(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    Segments(id, intent): Segments,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, Problem> {
    let body = crate::api::runs::raw_body(&state, body)?;
    let mut de = serde_json::Deserializer::from_slice(&body);
    let sent: DecisionBody = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| crate::api::runs::invalid_body("a decision", e.path(), e.inner()))?;
    let by = caller.decider(sent.by);
    let record = crate::api::runs::owned(&state, &caller.tenant, &id).await?;
    let missing = || {
        Problem::not_found(format!(
            "run {id} has no call `{intent}` waiting for approval"
        ))
    };
    let intent_id = IntentId::new(intent.clone()).map_err(|_| missing())?;
    let decision = Decision {
        verdict: match sent.decision {
            HumanVerdict::Approved => Verdict::Approved,
            HumanVerdict::Rejected => Verdict::Rejected,
        },
        by,
        at_ms: crate::lifecycle::recovery::now_ms(),
        reason: sent.reason,
    };
    match state
        .store
        .decide_approval(&record.run_id, &intent_id, decision)
        .await
    {
        Ok(decided) => {
            state.approvals.decided(&decided.approval);
            if decided.continues {
                state.queue.notify_one();
            }
            tracing::info!(run = %record.run_id, intent = %intent_id, by = %decided.approval.decision.as_ref().map_or("", |d| d.by.as_str()), continues = decided.continues, "approval decided");
            let body = Decided {
                approval: decided.approval,
                continues: decided.continues,
            };
            Ok((StatusCode::OK, Json(body)).into_response())
        }
        Err(StoreError::AlreadyDecided { approval }) => {
            let stands = approval
                .decision
                .as_ref()
                .map_or("decided", |d| d.verdict.as_str());
            Err(Problem::new(
                StatusCode::CONFLICT,
                "already-decided",
                "Already decided",
                format!(
                    "call {intent_id} of run {id} is {stands} already; a decision is recorded once"
                ),
            )
            .with(json!({"approval": approval})))
        }
        Err(StoreError::NotFound {
            what: "approval", ..
        }) => Err(missing()),
        Err(StoreError::FinishedRun { outcome, .. }) => Err(Problem::new(
            StatusCode::CONFLICT,
            "run-terminal",
            "Run already ended",
            format!(
                "run {id} ended {outcome} while its calls waited: nothing of its turn will be sent"
            ),
        )),
        Err(StoreError::Invalid { found, .. }) => Err(Problem::bad_request(found)),
        Err(e) => Err(e.into()),
    }
}

/// Records `expired` on the approvals whose window closed, every
/// [`SWEEP_EVERY`], while this process holds the [`APPROVAL_EXPIRY`]
/// singleton; every node reads the pending count for its gauge.
pub async fn sweep_forever(state: Arc<AppState>) {
    loop {
        state.engine.clock().sleep(SWEEP_EVERY).await;
        if crate::lifecycle::singleton::holds(&state, APPROVAL_EXPIRY, SWEEP_EVERY).await {
            match state
                .store
                .expire_approvals(crate::lifecycle::recovery::now_ms(), MAX_APPROVALS_PAGE)
                .await
            {
                Ok(expired) => {
                    for approval in &expired {
                        state.approvals.decided(approval);
                        tracing::info!(run = %approval.request.run_id, intent = %approval.request.intent_id, "approval expired: nobody decided within its window");
                    }
                    if !expired.is_empty() {
                        state.queue.notify_one();
                    }
                }
                Err(e) => tracing::warn!("approval sweep: cannot record expiries: {e}"),
            }
        }
        let pending = ApprovalFilter {
            pending: true,
            limit: MAX_APPROVALS_PAGE,
            ..ApprovalFilter::default()
        };
        match state.store.approvals(&pending).await {
            Ok(listed) => {
                state
                    .approvals
                    .pending
                    .set(i64::try_from(listed.len()).unwrap_or(i64::MAX));
            }
            Err(e) => tracing::warn!("approval sweep: cannot count pending approvals: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn pairs(query: &[(&str, &str)]) -> Vec<(String, String)> {
        query
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_listing_is_pending_by_default_and_refuses_what_it_does_not_know() {
        let filter = parse(&[]).unwrap();
        assert!(filter.pending);
        assert_eq!(filter.limit, DEFAULT_LIMIT);
        let all = parse(&pairs(&[("pending", "false"), ("limit", "5")])).unwrap();
        assert!(!all.pending);
        assert_eq!(all.limit, 5);
        for bad in [
            vec![("pending", "maybe")],
            vec![("limit", "0")],
            vec![("limit", "1001")],
            vec![("stauts", "x")],
            vec![("limit", "1"), ("limit", "2")],
        ] {
            let problem = parse(&pairs(&bad)).unwrap_err();
            assert_eq!(problem.status, 400, "{bad:?}");
        }
    }
}

//! The runs API: submit, inspect, resume.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use rein_core::deadline::{BudgetLimits, Cost};
use rein_core::{RunId, RunReport};
use rein_engine::run::{AgentBinding, EngineError, RunRequest};
use rein_store::{RunRecord, RunStatus, StoreError};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::api::idempotency;
use crate::http::auth::Tenant;
use crate::http::extract::Segment;
use crate::http::problem::Problem;
use crate::http::state::AppState;
use crate::lifecycle::drain::Admission;

/// How a submission is executed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Run now; the response carries the outcome and report.
    #[default]
    Sync,
    /// Record the run and return 202 at once; a worker runs it.
    Queued,
}

/// The smallest cost limit a submission may set, in US dollars: one
/// micro-dollar, the unit costs are counted in (a smaller one would round
/// to a zero limit).
///
/// NOTE: the `minimum` of [`BudgetOverrides::max_cost_usd`] in the OpenAPI
/// document repeats this value; change both together.
pub const MIN_COST_USD: f64 = 0.000_001;

/// The largest cost limit a submission may set, in US dollars: far above
/// any real budget and well inside what a cost can hold.
///
/// NOTE: the `maximum` of [`BudgetOverrides::max_cost_usd`] in the OpenAPI
/// document repeats this value; change both together.
pub const MAX_COST_USD: f64 = 1e12;

/// Limits a submission may lower (never raise) below the agent's own.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetOverrides {
    /// Wall-clock limit in milliseconds.
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1)]
    pub wall_clock_ms: Option<u64>,
    /// Step limit.
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1)]
    pub max_steps: Option<u32>,
    /// Token limit.
    #[serde(default, deserialize_with = "whole")]
    #[schema(minimum = 1)]
    pub max_tokens: Option<u64>,
    /// Cost limit in US dollars, from one micro-dollar to 10^12.
    #[schema(minimum = 0.000001, maximum = 1000000000000.0)]
    pub max_cost_usd: Option<f64>,
}

/// A whole number, written `4064` or `4064.0`: JSON Schema's `integer`, and
/// so the OpenAPI document, admits both, and clients whose numbers are all
/// floats send the second.
fn whole<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<u64>,
{
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let whole = number.as_u64().or_else(|| {
        // Exactly representable whole floats only (below 2^53).
        const EXACT: f64 = 9_007_199_254_740_992.0;
        number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && (0.0..EXACT).contains(f))
            .map(|f| f as u64)
    });
    whole
        .and_then(|n| T::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| {
            D::Error::custom(format!(
                "invalid value: {number}, expected a whole number from 0 to 2^{} - 1",
                std::mem::size_of::<T>() * 8
            ))
        })
}

/// `POST /v1/agents/{name}/runs`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRun {
    /// The task.
    pub input: String,
    /// Lower limits for this run.
    #[serde(default)]
    pub budgets: Option<BudgetOverrides>,
    /// `sync` (default) or `queued`.
    #[serde(default)]
    pub mode: Mode,
    /// Free-form metadata (a JSON object), returned as given.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<serde_json::Map<String, Value>>,
}

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RunView {
    /// The run.
    pub run_id: String,
    /// Its agent.
    pub agent: String,
    /// `queued`, `running`, `awaiting_approval`, or its outcome.
    pub status: String,
    /// The budget it runs under: `wall_clock`, and the `steps`, `tokens`
    /// and `cost` ceilings (`null` for none).
    #[schema(value_type = Option<Object>)]
    pub budget: Option<rein_core::deadline::BudgetLimits>,
    /// The report, once it ended (`null` before). Without its `basis`
    /// (what rein derives it from again when the ledger changes: an
    /// internal record the store keeps, not part of the API).
    #[schema(value_type = Option<Object>)]
    pub report: Option<RunReport>,
    /// What it consumed, from its report once it ended (`null` before).
    #[schema(value_type = Option<Object>)]
    pub consumed: Value,
    /// The parent run, for a child run.
    pub parent_run_id: Option<String>,
    /// Child runs.
    pub children: Vec<String>,
    /// Created, unix milliseconds.
    pub created_at_ms: u64,
    /// Last change, unix milliseconds.
    pub updated_at_ms: u64,
    /// The submission's `metadata`, as given (`null` when it had none): on
    /// the answers to a submission, absent from a run read later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>, nullable = true)]
    pub metadata: Option<Value>,
    /// Why a run that stopped before its end was handed on, and where it
    /// goes on (a 202 while the server drains or the store is away).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handed_on: Option<HandedOn>,
    /// The calls the run paused for, waiting for a human's decision.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Object>)]
    pub awaiting_approval: Vec<rein_store::ApprovalRequest>,
}

/// Why a run was handed on before its end, and who continues it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HandedOn {
    /// Why it stopped.
    pub reason: String,
    /// Who continues it, and what the caller does meanwhile.
    pub next: String,
}

impl HandedOn {
    /// Handed on by a server that is shutting down (`draining`), or
    /// because the run store stayed away.
    pub fn because(draining: bool) -> HandedOn {
        let (reason, next) = if draining {
            (
                "the server that ran it is shutting down; it stopped at a safe point",
                "another server on the same store resumes it at once; follow its Location",
            )
        } else {
            (
                "the run store stayed unavailable; it stopped at a safe point and nothing it did is lost",
                "a server on the same store takes it over once the store is back (or POST its resume); follow its Location",
            )
        };
        HandedOn {
            reason: reason.to_owned(),
            next: next.to_owned(),
        }
    }
}

/// The `metadata` member of an answer to a submission: the object given,
/// or `null`.
fn echoed(metadata: Option<serde_json::Map<String, Value>>) -> Option<Value> {
    Some(metadata.map_or(Value::Null, Value::Object))
}

impl RunView {
    /// The view of `record` (children not filled in).
    pub fn of(record: RunRecord) -> RunView {
        let consumed = record
            .report
            .as_ref()
            .map(|r| json!(r.consumed))
            .unwrap_or(Value::Null);
        RunView {
            budget: serde_json::from_value(record.budget.clone()).ok(),
            run_id: record.run_id.to_string(),
            agent: record.agent,
            status: record.status.as_str().to_owned(),
            report: record.report.map(|mut report| {
                report.basis = None;
                report
            }),
            consumed,
            parent_run_id: record.parent_run_id.map(|p| p.to_string()),
            children: Vec::new(),
            created_at_ms: record.created_at_ms.as_millis(),
            updated_at_ms: record.updated_at_ms.as_millis(),
            metadata: None,
            handed_on: None,
            awaiting_approval: Vec::new(),
        }
    }
}

/// The location of a run.
pub fn location(run_id: &RunId) -> String {
    format!("/v1/runs/{run_id}")
}

/// Applies a submission's lower limits to the agent.
fn lower(agent: &mut AgentBinding, o: &BudgetOverrides) -> Result<(), Problem> {
    let field = |name: &str, e: rein_core::ConfigError| {
        Problem::bad_request(format!("budgets.{name}: {e}"))
            .with(json!({"field": crate::http::pointer::of_keys(&["budgets", name])}))
    };
    let current = agent.budget;
    let wall = match o.wall_clock_ms {
        Some(ms) => current.wall_clock().min(Duration::from_millis(ms)),
        None => current.wall_clock(),
    };
    let mut limits = BudgetLimits::new(wall).map_err(|e| field("wall_clock_ms", e))?;
    let steps = match (current.steps(), o.max_steps) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(steps) = steps {
        limits = limits
            .with_steps(steps)
            .map_err(|e| field("max_steps", e))?;
    }
    let tokens = match (current.tokens(), o.max_tokens) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(tokens) = tokens {
        limits = limits
            .with_tokens(tokens)
            .map_err(|e| field("max_tokens", e))?;
    }
    let requested = o
        .max_cost_usd
        .map(|usd| {
            if (MIN_COST_USD..=MAX_COST_USD).contains(&usd) {
                Cost::from_usd("budgets.max_cost_usd", usd)
            } else {
                Err(rein_core::ConfigError::OutOfRange {
                    field: "budgets.max_cost_usd",
                    expected: "from 0.000001 (one micro-dollar) to 1e12 dollars",
                    found: usd.to_string(),
                })
            }
        })
        .transpose()
        .map_err(|e| field("max_cost_usd", e))?;
    let cost = match (current.cost(), requested) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(cost) = cost {
        limits = limits
            .with_cost(cost)
            .map_err(|e| field("max_cost_usd", e))?;
    }
    agent.budget = limits;
    Ok(())
}

/// Parses a submission body, naming the offending field.
fn parse(body: &[u8]) -> Result<CreateRun, Problem> {
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize::<_, CreateRun>(&mut de)
        .map_err(|e| invalid_body("a valid run submission", e.path(), e.inner()))
}

/// The 400 of a body that does not deserialize: `field` is the JSON
/// pointer to the offending member, or absent when none can be named.
pub fn invalid_body(
    expected: &str,
    path: &serde_path_to_error::Path,
    error: &serde_json::Error,
) -> Problem {
    match crate::http::pointer::of_path(path) {
        Some(pointer) => {
            Problem::bad_request(format!("the body is not {expected}: at {pointer}: {error}"))
                .with(json!({"field": pointer}))
        }
        None => Problem::bad_request(format!("the body is not {expected}: {error}")),
    }
}

/// The body of a POST that takes none (cancel, resume): empty, or `{}`.
/// It is still `application/json` ([`crate::http::media`]).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoBody {}

/// The body of `POST /v1/runs/{id}/resume`: empty, `{}`, or `{"now":
/// true}` to send at once what the run's report said to retry later,
/// before the wait it was asked for has passed (`rein resume --now`).
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeBody {
    /// Send the refused actions now rather than answer 409 until their
    /// wait (a Retry-After, an open breaker's cooldown) has passed.
    #[serde(default)]
    pub now: bool,
}

/// Reads the body of a resume: nothing, `{}` or `{"now": bool}`.
///
/// # Errors
///
/// A 400 problem naming the member that is not `now`, or not a boolean.
fn resume_body(
    state: &AppState,
    body: Result<Bytes, BytesRejection>,
) -> Result<ResumeBody, Problem> {
    let body = raw_body(state, body)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(ResumeBody::default());
    }
    let mut de = serde_json::Deserializer::from_slice(&body);
    serde_path_to_error::deserialize::<_, ResumeBody>(&mut de)
        .map_err(|e| invalid_body("empty, `{}` or `{\"now\": true}`", e.path(), e.inner()))
}

/// Checks the body of a POST that takes none.
///
/// # Errors
///
/// 413 over the body limit; 400 for anything but nothing or `{}`.
pub fn no_body(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<(), Problem> {
    let body = raw_body(state, body)?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let mut de = serde_json::Deserializer::from_slice(&body);
    serde_path_to_error::deserialize::<_, NoBody>(&mut de)
        .map(|_| ())
        .map_err(|e| invalid_body("empty or `{}`", e.path(), e.inner()))
}

/// A finished response, kept whole so an idempotent submission can store
/// and replay it byte for byte.
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The JSON body.
    pub body: Vec<u8>,
    /// `Location`, when the run has one.
    pub location: Option<String>,
    /// Further headers (the gateway's `Rein-Model` and `Rein-Fallback`),
    /// stored with an idempotent response and replayed with it.
    pub headers: Vec<(&'static str, String)>,
    /// The run has not ended (a draining server handed it on, or another
    /// process took it over): the answer is not its final one, so an
    /// idempotency key does not store it (a retry finds the run
    /// recovering, then replays its final view).
    pub provisional: bool,
}

impl Answer {
    /// The answer as an idempotency record stores it, to replay it with
    /// the same status, body and headers.
    pub fn stored(&self) -> rein_store::StoredResponse {
        rein_store::StoredResponse {
            status: self.status.as_u16(),
            content_type: Some("application/json".to_owned()),
            location: self.location.clone(),
            headers: self
                .headers
                .iter()
                .map(|(name, value)| ((*name).to_owned(), value.clone()))
                .collect(),
            body: self.body.clone(),
        }
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut response = (self.status, self.body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(location) = self.location.and_then(|l| HeaderValue::from_str(&l).ok()) {
            headers.insert(header::LOCATION, location);
        }
        for (name, value) in self.headers {
            if let Ok(value) = HeaderValue::from_str(&value) {
                headers.insert(name, value);
            }
        }
        response
    }
}

/// A request's raw body (its bytes are the idempotency fingerprint), or
/// the problem: 408 when it stopped arriving for `server.limits.body_timeout`,
/// 413 over the body limit, 400 otherwise.
///
/// NOTE: every route that reads a body reads it here (a run submission and
/// a gateway call; resume and cancel take none), so the 408 of
/// `body_timeout` holds for all of them. A new route with a body must read
/// it here too, and document the 408.
pub fn raw_body(state: &AppState, body: Result<Bytes, BytesRejection>) -> Result<Bytes, Problem> {
    match body {
        Ok(b) => Ok(b),
        Err(BytesRejection::FailedToBufferBody(e)) if is_body_timeout(&e) => {
            state.connections.on_body_timeout();
            let timeout = state.settings.limits.body_timeout;
            Err(Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                "Request body too slow",
                format!(
                    "the request body stopped arriving for {} ms (server.limits.body_timeout)",
                    timeout.as_millis()
                ),
            ))
        }
        Err(BytesRejection::FailedToBufferBody(_)) => {
            Err(Problem::too_large(state.settings.body_limit))
        }
        Err(e) => Err(Problem::bad_request(e.to_string())),
    }
}

/// Whether a body read failed because the body stopped arriving
/// (`tower_http`'s body timeout), anywhere in the error's chain.
fn is_body_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(error) = cause {
        if error.is::<tower_http::timeout::TimeoutError>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// A run a draining server handed on before it ended: 202 with its
/// location, like queued work (another server continues it), so a caller
/// follows it instead of losing it with the connection.
fn handed_on(
    record: RunRecord,
    metadata: Option<serde_json::Map<String, Value>>,
    draining: bool,
) -> Answer {
    let run_id = record.run_id.clone();
    // The engine hands a run on for one of two reasons: its process is
    // stopping, or the run store stayed unavailable past its patience.
    let view = RunView {
        metadata: echoed(metadata),
        handed_on: Some(HandedOn::because(draining)),
        ..RunView::of(record)
    };
    Answer {
        status: StatusCode::ACCEPTED,
        body: serde_json::to_vec(&view).unwrap_or_default(),
        location: Some(location(&run_id)),
        headers: Vec::new(),
        provisional: true,
    }
}

/// Submits a run of agent `name`.
#[utoipa::path(
    post, path = "/v1/agents/{name}/runs", tag = "runs",
    // NOTE: the key's pattern is what `idempotency::key` accepts (visible
    // ASCII); its `maxLength` is set from the config when served
    // (`crate::document`).
    params(("name" = String, Path, description = "The agent, as named in the config"),
           ("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, pattern = "^[!-~]+$",
            description = "Makes the submission safe to retry: visible ASCII, at most `server.idempotency.max_key_length` characters")),
    request_body = CreateRun,
    responses(
        (status = 200, description = "sync: the run ended; its outcome and report", body = RunView),
        (status = 202, description = "queued: the run is recorded; poll its Location (also a sync run that has not ended: handed on by a draining server, or taken over by another process, or paused for a human: `awaiting_approval` lists the calls to decide)", body = RunView,
         headers(("Location" = String, description = "The run"))),
        (status = 400, description = "invalid body or idempotency key", body = Problem),
        (status = 401, description = "missing or invalid API key", body = Problem),
        (status = 404, description = "unknown agent", body = Problem),
        (status = 409, description = "the same Idempotency-Key is still in progress", body = Problem),
        (status = 408, description = "the body stopped arriving (server.limits.body_timeout)", body = Problem),
        (status = 413, description = "body over the limit", body = Problem),
        (status = 422, description = "the same Idempotency-Key with another request", body = Problem),
        (status = 429, description = "the tenant is over a `[server.quotas]` quota (`type` ends in `/quota-exceeded`; `quota` names it): retry after `Retry-After`", body = Problem,
         headers(("Retry-After" = u32, description = "Seconds until the quota admits a submission again"))),
        (status = 501, description = "Idempotency-Key sent while idempotency is disabled", body = Problem),
        (status = 503, description = "the server is draining (`type` ends in `/draining`): send it to another server after `Retry-After`; or no run slot came free within the run's wall clock (`/run-slots-busy`)", body = Problem,
         headers(("Retry-After" = u32, description = "Seconds to wait"))),
    ),
    security(("bearer" = []))
)]
pub async fn create_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Segment(name): Segment,
    admission: Option<Extension<Admission>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match raw_body(&state, body) {
        Ok(b) => b,
        Err(problem) => return problem.into_response(),
    };
    let path = format!("/v1/agents/{name}/runs");
    let key = match idempotency::key(&state, &headers, &body) {
        Ok(key) => key,
        Err(problem) => return problem.into_response(),
    };
    // The run's id is known before anything runs: a sync submission's
    // reservation names it, so a retry after this process died answers
    // from that run.
    let run_id = match crate::http::state::new_run_id() {
        Ok(id) => id,
        Err(problem) => return problem.into_response(),
    };
    // The parent of the run's span: a queued run keeps it in the store for
    // the worker, in any process, that drives it later.
    let parent = crate::http::trace_context::from_headers(&headers);
    // Its own task: a client that hangs up abandons neither the run
    // half-way through its side effects nor the idempotency record. The
    // task holds the request's admission: a drain waits for it (or hands
    // its run on) however long the client stays.
    let task = tokio::spawn(async move {
        let _admission = admission;
        match key {
            None => submit(state, tenant, name, body, (run_id, parent), None)
                .await
                .into_response(),
            Some(key) => {
                // A queued submission is reserved, enqueued and answered
                // in one write; anything else runs under the reservation.
                // Not with a rate or a queued cap to check: those are
                // checked when the key executes (a replay passes them).
                let quota = state.settings.quotas.of(&tenant);
                let checked = quota.submissions.is_some() || quota.max_queued.is_some();
                if let Some(queued) =
                    prepare_queued(&state, &tenant, &name, &body, &run_id, parent.as_ref())
                        .filter(|_| !checked)
                {
                    return submit_queued_keyed(&state, &tenant, &key, &path, &body, queued).await;
                }
                let (s, t, n, b) = (state.clone(), tenant.clone(), name, body.clone());
                let run = Some(run_id.clone());
                idempotency::guarded_run(
                    &state,
                    &tenant,
                    &key,
                    "POST",
                    &path,
                    &body,
                    run,
                    move |fence| submit(s, t, n, b, (run_id, parent), Some(fence)),
                )
                .await
            }
        }
    });
    match task.await {
        Ok(response) => response,
        Err(e) => Problem::internal(format!("the submission's task failed: {e}")).into_response(),
    }
}

/// A queued submission ready to be stored in one write: its run and the
/// answer naming it.
struct Queued {
    run: rein_store::NewRun,
    answer: Answer,
}

/// The run and answer of a valid queued submission of agent `name`;
/// `None` for any other body (sync, or invalid: it runs under the
/// reservation, which answers a replay or a mismatch before the problem).
fn prepare_queued(
    state: &AppState,
    tenant: &rein_core::TenantId,
    name: &str,
    body: &[u8],
    run_id: &RunId,
    parent: Option<&rein_engine::telemetry::TraceParent>,
) -> Option<Queued> {
    let request = parse(body).ok().filter(|r| r.mode == Mode::Queued)?;
    let mut agent = state.bind(name).ok()?;
    if let Some(o) = &request.budgets {
        lower(&mut agent, o).ok()?;
    }
    let mut run = state.engine.queued_run(
        &agent,
        tenant.clone(),
        request.input.clone(),
        Some(run_id.clone()),
    );
    run.trace_parent = parent.and_then(|p| p.to_span());
    Some(Queued {
        run,
        answer: queued_answer(&agent, run_id, request.metadata),
    })
}

/// The 202 of a queued run: built from what is in hand, so that once the
/// run is queued nothing can fail the answer.
fn queued_answer(
    agent: &AgentBinding,
    run_id: &RunId,
    metadata: Option<serde_json::Map<String, Value>>,
) -> Answer {
    let now = crate::lifecycle::recovery::now_ms().as_millis();
    let view = RunView {
        budget: Some(agent.budget),
        run_id: run_id.to_string(),
        agent: agent.name.clone(),
        status: "queued".into(),
        report: None,
        consumed: Value::Null,
        parent_run_id: None,
        children: Vec::new(),
        created_at_ms: now,
        updated_at_ms: now,
        metadata: echoed(metadata),
        handed_on: None,
        awaiting_approval: Vec::new(),
    };
    Answer {
        status: StatusCode::ACCEPTED,
        body: serde_json::to_vec(&view).unwrap_or_default(),
        location: Some(location(run_id)),
        headers: Vec::new(),
        provisional: false,
    }
}

/// A queued submission under `key`: the reservation, the run and the
/// answer in one store write ([`rein_store::Store::submit_queued`]), so a
/// process killed at any moment leaves either all three or nothing. A
/// record left in progress (by an older rein) is resolved, and the key
/// reserved again once it is released.
async fn submit_queued_keyed(
    state: &Arc<AppState>,
    tenant: &rein_core::TenantId,
    key: &str,
    path: &str,
    body: &[u8],
    queued: Queued,
) -> Response {
    let print = idempotency::fingerprint("POST", path, body);
    let stored = queued.answer.stored();
    for _ in 0..idempotency::RESERVE_ROUNDS {
        let (reservation, _) = idempotency::new_reservation(
            state,
            tenant,
            key,
            print.clone(),
            Some(queued.run.run_id.clone()),
        );
        match state
            .store
            .submit_queued(reservation, queued.run.clone(), stored.clone())
            .await
        {
            Ok(rein_store::Reservation::Reserved) => {
                state.queue.notify_one();
                return queued.answer.into_response();
            }
            Ok(rein_store::Reservation::InProgress(record)) => {
                match crate::api::submission::resolve_in_progress(state, &record, body).await {
                    crate::api::submission::Resolved::Answer(response) => return response,
                    crate::api::submission::Resolved::Again => continue,
                }
            }
            Ok(other) => return idempotency::decided(other),
            Err(e) => return Problem::from(e).into_response(),
        }
    }
    idempotency::in_progress()
}

/// Executes a submission: the part an idempotency key guards. The run gets
/// `run_id` (and a sync run's span the caller's `traceparent`); a sync run
/// is created only while `reservation` (the key's, when there is one) is
/// still this request's.
async fn submit(
    state: Arc<AppState>,
    tenant: rein_core::TenantId,
    name: String,
    body: Bytes,
    (run_id, trace_parent): (RunId, Option<rein_engine::telemetry::TraceParent>),
    reservation: Option<rein_store::ReservationFence>,
) -> Result<Answer, Problem> {
    let request = parse(&body)?;
    let mut agent = state.bind(&name)?;
    if let Some(o) = &request.budgets {
        lower(&mut agent, o)?;
    }
    match request.mode {
        Mode::Queued => {
            crate::queue::admit::queued(&state, &tenant).await?;
            let mut run = state
                .engine
                .queued_run(&agent, tenant, request.input, Some(run_id));
            run.trace_parent = trace_parent.as_ref().and_then(|p| p.to_span());
            let run_id = state
                .engine
                .enqueue_run(run)
                .await
                .map_err(engine_problem)?;
            state.queue.notify_one();
            Ok(queued_answer(&agent, &run_id, request.metadata))
        }
        Mode::Sync => {
            let _admitted =
                crate::queue::admit::sync(&state, &tenant, agent.budget.wall_clock()).await?;
            let out = state
                .engine
                .run(
                    &agent,
                    &state.schemas,
                    RunRequest {
                        run_id: Some(run_id),
                        tenant: Some(tenant),
                        input: request.input,
                        reservation,
                        trace_parent,
                        ..RunRequest::default()
                    },
                )
                .await
                .map_err(|e| match e {
                    // A retry took this request's holder for dead (it
                    // stalled for a lease) and executes the key itself: this
                    // run was never created.
                    EngineError::Store(StoreError::ReservationLost { .. }) => {
                        idempotency::in_progress_problem()
                    }
                    other => engine_problem(other),
                })?;
            let record = state
                .store
                .get_run(&out.run_id)
                .await?
                .ok_or_else(|| Problem::internal("the finished run vanished"))?;
            if out.interrupted {
                return Ok(handed_on(
                    record,
                    request.metadata,
                    state.drain.is_draining(),
                ));
            }
            // Not ended (another process took the run over and drives it):
            // where to follow it, like a handed-on run, not a final answer.
            let ended = record.status.is_finished();
            // Paused for a human: the calls to decide, where to decide them.
            let view = RunView {
                metadata: echoed(request.metadata),
                awaiting_approval: out.awaiting_approval,
                ..RunView::of(record)
            };
            Ok(Answer {
                status: if ended {
                    StatusCode::OK
                } else {
                    StatusCode::ACCEPTED
                },
                body: serde_json::to_vec(&view).unwrap_or_default(),
                location: Some(location(&out.run_id)),
                headers: Vec::new(),
                provisional: !ended,
            })
        }
    }
}

/// An engine error as a problem.
pub fn engine_problem(e: EngineError) -> Problem {
    match e {
        // The engine read the run as unfinished, and it finished before the
        // engine could continue it (its worker ended it meanwhile): the
        // run's state, not a fault of rein.
        EngineError::Store(StoreError::FinishedRun {
            run_id, outcome, ..
        }) => Problem::new(
            StatusCode::CONFLICT,
            "not-resumable",
            "Run cannot continue",
            format!(
                "run {run_id} ended as {outcome} meanwhile; resume it again if its report says it is recoverable"
            ),
        ),
        EngineError::Store(s) => s.into(),
        EngineError::NotResumable { run_id, reason } => Problem::new(
            StatusCode::CONFLICT,
            "not-resumable",
            "Run cannot continue",
            format!("run {run_id} cannot be resumed: {reason}"),
        ),
        // Resuming now would send again what was refused for a time
        // before that time is over: the run's state, said with the wait.
        not_yet @ EngineError::NotYet { .. } => Problem::new(
            StatusCode::CONFLICT,
            "not-resumable",
            "Run cannot continue yet",
            not_yet.to_string(),
        ),
        other => Problem::internal(other.to_string()),
    }
}

/// The run, if it exists and is the tenant's (another tenant's run is
/// indistinguishable from a missing one).
pub async fn owned(
    state: &AppState,
    tenant: &rein_core::TenantId,
    id: &str,
) -> Result<RunRecord, Problem> {
    let missing = || Problem::not_found(format!("there is no run `{id}`"));
    let run_id = RunId::new(id.to_owned()).map_err(|_| missing())?;
    match state.store.get_run(&run_id).await? {
        Some(record) if &record.tenant == tenant => Ok(record),
        _ => Err(missing()),
    }
}

/// A run's status, report, consumption, parent and children.
#[utoipa::path(
    get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses((status = 200, description = "The run", body = RunView),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 404, description = "unknown run, or another tenant's", body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Segment(id): Segment,
) -> Result<Json<RunView>, Problem> {
    let record = owned(&state, &tenant, &id).await?;
    let run_id = record.run_id.clone();
    let mut view = RunView::of(record);
    view.children = state
        .store
        .children_of(&run_id)
        .await?
        .into_iter()
        .map(|r| r.run_id.to_string())
        .collect();
    Ok(Json(view))
}

/// The run's side-effect ledger.
#[utoipa::path(
    get, path = "/v1/runs/{id}/ledger", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses((status = 200, description = "The ledger records in execution order", body = LedgerList),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 404, description = "unknown run, or another tenant's", body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_ledger(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Segment(id): Segment,
) -> Result<Json<LedgerList>, Problem> {
    let record = owned(&state, &tenant, &id).await?;
    let records = state.store.ledger(&record.run_id).await?;
    Ok(Json(LedgerList {
        run_id: record.run_id.to_string(),
        records,
    }))
}

/// What `GET /v1/runs/{id}/ledger` answers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LedgerList {
    /// The run.
    pub run_id: String,
    /// Its side-effect records in execution order (`seq`), each with its
    /// intent, tool, idempotency key, status and result.
    #[schema(value_type = Vec<Object>)]
    pub records: Vec<rein_core::LedgerRecord>,
}

/// The handoff package of a run any of whose records awaits a human.
#[utoipa::path(
    get, path = "/v1/runs/{id}/handoff", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses((status = 200, description = "The handoff package", body = Object),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 404, description = "unknown run, or none of its records awaits a human", body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_handoff(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Segment(id): Segment,
) -> Result<Json<rein_core::handoff::HandoffPackage>, Problem> {
    let record = owned(&state, &tenant, &id).await?;
    // From the ledger as it stands: a record the reconciler handed to a
    // human after the run ended has a package, whatever the stored report
    // said when it was written.
    let ledger = rein_engine::run::tree_records(state.store.as_ref(), &record.run_id).await?;
    let fresh = rein_engine::run::revise(state.store.as_ref(), &record, &ledger).await?;
    match fresh.or(record.report).and_then(|r| r.handoff) {
        Some(handoff) => Ok(Json(handoff)),
        None => Err(Problem::new(
            StatusCode::NOT_FOUND,
            "no-handoff",
            "No handoff",
            format!("none of run {id}'s records awaits a human"),
        )),
    }
}

/// Continues a run that stopped mid-way, or a recoverable finished one.
#[utoipa::path(
    post, path = "/v1/runs/{id}/resume", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    request_body(content = ResumeBody, description = "Nothing (an empty body or `{}`), or `{\"now\": true}` to send what the report said to retry later before its wait has passed; sent as `application/json`"),
    responses((status = 200, description = "The resumed run ended", body = RunView),
              (status = 202, description = "the resumed run did not end: the server began draining and handed it on (`handed_on` says so; another server continues it), or it paused again for a human (`awaiting_approval` lists the calls); follow its Location", body = RunView,
               headers(("Location" = String, description = "The run"))),
              (status = 400, description = "a body other than nothing, `{}` or `{\"now\": bool}`", body = Problem),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 404, description = "unknown run, or another tenant's", body = Problem),
              (status = 409, description = "the run cannot be resumed, or not yet: what its report said to retry later was refused for a time that has not passed (the detail says how long; send `{\"now\": true}` to send it anyway)", body = Problem),
              (status = 503, description = "the server is draining (`type` ends in `/draining`): send it to another server after `Retry-After`", body = Problem,
               headers(("Retry-After" = u32, description = "Seconds to wait")))),
    security(("bearer" = []))
)]
pub async fn resume_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Segment(id): Segment,
    admission: Option<Extension<Admission>>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, Problem> {
    let ResumeBody { now } = resume_body(&state, body)?;
    let timing = if now {
        rein_engine::run::RetryTiming::Now
    } else {
        rein_engine::run::RetryTiming::AfterWait
    };
    let record = owned(&state, &tenant, &id).await?;
    if record.status == RunStatus::Queued {
        return Err(Problem::new(
            StatusCode::CONFLICT,
            "not-resumable",
            "Run cannot continue",
            format!("run {id} is queued; a worker will start it"),
        ));
    }
    let agent = state.bind(&record.agent)?;
    let engine = state.engine.clone();
    let shared = state.clone();
    let run_id = record.run_id.clone();
    let handle = tokio::spawn(async move {
        let _admission = admission;
        engine
            .resume_timed(&agent, &shared.schemas, &run_id, None, None, timing)
            .await
    });
    let out = handle
        .await
        .map_err(|e| Problem::internal(format!("the resume's task failed: {e}")))?
        .map_err(engine_problem)?;
    let record = owned(&state, &tenant, out.run_id.as_str()).await?;
    if out.interrupted {
        return Ok(handed_on(record, None, state.drain.is_draining()).into_response());
    }
    // Paused again for a human: not an end, where to follow it.
    let ended = record.status.is_finished();
    let view = RunView {
        awaiting_approval: out.awaiting_approval,
        ..RunView::of(record)
    };
    Ok(Answer {
        status: if ended {
            StatusCode::OK
        } else {
            StatusCode::ACCEPTED
        },
        body: serde_json::to_vec(&view).unwrap_or_default(),
        location: Some(location(&out.run_id)),
        headers: Vec::new(),
        provisional: !ended,
    }
    .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_problem_when_the_run_finished_meanwhile_is_a_409() {
        // A resume read the run as running; its worker ended it before the
        // resume could continue it (found by the API fuzzer as a 500).
        let problem = engine_problem(EngineError::Store(StoreError::FinishedRun {
            run_id: "r-1".into(),
            outcome: rein_core::Outcome::Succeeded,
            requested: RunStatus::Running,
        }));
        assert_eq!(problem.status, 409);
        assert!(problem.kind.ends_with("/not-resumable"), "{}", problem.kind);
        assert!(problem.detail.contains("ended as succeeded meanwhile"));
    }

    #[test]
    fn whole_numbers_may_be_written_as_floats_but_not_as_fractions() {
        let parse = |budgets: &str| {
            super::parse(format!(r#"{{"input": "x", "budgets": {budgets}}}"#).as_bytes())
                .map(|r| r.budgets.unwrap_or_default())
        };
        let b = parse(r#"{"max_steps": 3.0, "max_tokens": 4064, "wall_clock_ms": null}"#).unwrap();
        assert_eq!(
            (b.max_steps, b.max_tokens, b.wall_clock_ms),
            (Some(3), Some(4064), None)
        );
        for bad in [
            r#"{"max_steps": 2.5}"#,
            r#"{"max_steps": -1}"#,
            r#"{"max_steps": 4294967296}"#,
            r#"{"max_tokens": 1e300}"#,
            r#"{"max_tokens": "7"}"#,
        ] {
            let problem = parse(bad).unwrap_err();
            assert_eq!(problem.status, 400, "{bad}");
        }
    }
}

//! The runs API: submit, inspect, resume.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use rein_core::deadline::{BudgetLimits, Cost};
use rein_core::{RunId, RunReport};
use rein_engine::run::{AgentBinding, EngineError, RunRequest};
use rein_store::{RunRecord, RunStatus};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::ToSchema;

use crate::auth::Tenant;
use crate::idempotency;
use crate::problem::Problem;
use crate::state::AppState;

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

/// Limits a submission may lower (never raise) below the agent's own.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetOverrides {
    /// Wall-clock limit in milliseconds.
    pub wall_clock_ms: Option<u64>,
    /// Step limit.
    pub max_steps: Option<u32>,
    /// Token limit.
    pub max_tokens: Option<u64>,
    /// Cost limit in US dollars.
    pub max_cost_usd: Option<f64>,
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
    /// Free-form metadata, returned as given.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub metadata: Option<Value>,
}

/// A run as the API shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RunView {
    /// The run.
    pub run_id: String,
    /// Its agent.
    pub agent: String,
    /// `queued`, `running`, or its outcome.
    pub status: String,
    /// The report, once it ended.
    #[schema(value_type = Object)]
    pub report: Option<RunReport>,
    /// What it consumed so far (from its report when ended).
    #[schema(value_type = Object)]
    pub consumed: Value,
    /// The parent run, for a child run.
    pub parent_run_id: Option<String>,
    /// Child runs.
    pub children: Vec<String>,
    /// Created, unix milliseconds.
    pub created_at_ms: u64,
    /// Last change, unix milliseconds.
    pub updated_at_ms: u64,
}

impl RunView {
    fn of(record: RunRecord) -> RunView {
        let consumed = record
            .report
            .as_ref()
            .map(|r| json!(r.consumed))
            .unwrap_or(Value::Null);
        RunView {
            run_id: record.run_id.to_string(),
            agent: record.agent,
            status: record.status.as_str().to_owned(),
            report: record.report,
            consumed,
            parent_run_id: record.parent_run_id.map(|p| p.to_string()),
            children: Vec::new(),
            created_at_ms: record.created_at_ms,
            updated_at_ms: record.updated_at_ms,
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
            .with(json!({"field": format!("budgets.{name}")}))
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
        .map(|usd| Cost::from_usd("budgets.max_cost_usd", usd))
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
    serde_path_to_error::deserialize::<_, CreateRun>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        Problem::bad_request(format!(
            "the body is not a valid run submission: {path}: {}",
            e.inner()
        ))
        .with(json!({"field": path}))
    })
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
        response
    }
}

/// Submits a run of agent `name`.
#[utoipa::path(
    post, path = "/v1/agents/{name}/runs", tag = "runs",
    params(("name" = String, Path, description = "The agent, as named in the config"),
           ("Idempotency-Key" = Option<String>, Header, description = "Makes the submission safe to retry")),
    request_body = CreateRun,
    responses(
        (status = 200, description = "sync: the run ended; its outcome and report", body = RunView),
        (status = 202, description = "queued: the run is recorded; poll its Location", body = RunView),
        (status = 400, description = "invalid body or idempotency key", body = Problem),
        (status = 401, description = "missing or invalid API key", body = Problem),
        (status = 404, description = "unknown agent", body = Problem),
        (status = 409, description = "the same Idempotency-Key is still in progress", body = Problem),
        (status = 413, description = "body over the limit", body = Problem),
        (status = 422, description = "the same Idempotency-Key with another request", body = Problem),
        (status = 501, description = "Idempotency-Key sent while idempotency is disabled", body = Problem),
    ),
    security(("bearer" = []))
)]
pub async fn create_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match body {
        Ok(b) => b,
        Err(BytesRejection::FailedToBufferBody(_)) => {
            return Problem::too_large(state.settings.body_limit).into_response();
        }
        Err(e) => return Problem::bad_request(e.to_string()).into_response(),
    };
    let path = format!("/v1/agents/{name}/runs");
    let key = match idempotency::key(&state, &headers, &body) {
        Ok(key) => key,
        Err(problem) => return problem.into_response(),
    };
    // Its own task: a client that hangs up abandons neither the run
    // half-way through its side effects nor the idempotency record.
    let task = tokio::spawn(async move {
        match key {
            None => submit(state, tenant, name, body).await.into_response(),
            Some(key) => {
                let (s, t, n, b) = (state.clone(), tenant.clone(), name, body.clone());
                idempotency::guarded(&state, &tenant, &key, "POST", &path, &body, move || {
                    submit(s, t, n, b)
                })
                .await
            }
        }
    });
    match task.await {
        Ok(response) => response,
        Err(e) => Problem::internal(format!("the submission's task failed: {e}")).into_response(),
    }
}

/// Executes a submission: the part an idempotency key guards.
async fn submit(
    state: Arc<AppState>,
    tenant: rein_core::TenantId,
    name: String,
    body: Bytes,
) -> Result<Answer, Problem> {
    let request = parse(&body)?;
    let mut agent = state.bind(&name)?;
    if let Some(o) = &request.budgets {
        lower(&mut agent, o)?;
    }
    match request.mode {
        Mode::Queued => {
            let run_id = state
                .engine
                .enqueue(&agent, tenant, request.input, None)
                .await
                .map_err(engine_problem)?;
            state.queue.notify_one();
            // Built from what is in hand: once the run is queued, nothing
            // may fail this answer (a failure would release the key and
            // let a retry queue a second run).
            let now = crate::recovery::now_ms();
            let mut view = json!(RunView {
                run_id: run_id.to_string(),
                agent: agent.name.clone(),
                status: "queued".into(),
                report: None,
                consumed: Value::Null,
                parent_run_id: None,
                children: Vec::new(),
                created_at_ms: now,
                updated_at_ms: now,
            });
            view["metadata"] = request.metadata.unwrap_or(Value::Null);
            Ok(Answer {
                status: StatusCode::ACCEPTED,
                body: serde_json::to_vec(&view).unwrap_or_default(),
                location: Some(location(&run_id)),
            })
        }
        Mode::Sync => {
            let run_id = crate::state::new_run_id()?;
            let out = state
                .engine
                .run(
                    &agent,
                    &state.schemas,
                    RunRequest {
                        run_id: Some(run_id),
                        tenant: Some(tenant),
                        input: request.input,
                        ..RunRequest::default()
                    },
                )
                .await
                .map_err(engine_problem)?;
            let record = state
                .store
                .get_run(&out.run_id)
                .await?
                .ok_or_else(|| Problem::internal("the finished run vanished"))?;
            let mut view = json!(RunView::of(record));
            view["metadata"] = request.metadata.unwrap_or(Value::Null);
            Ok(Answer {
                status: StatusCode::OK,
                body: serde_json::to_vec(&view).unwrap_or_default(),
                location: Some(location(&out.run_id)),
            })
        }
    }
}

/// An engine error as a problem.
pub fn engine_problem(e: EngineError) -> Problem {
    match e {
        EngineError::Store(s) => s.into(),
        EngineError::NotResumable { run_id, reason } => Problem::new(
            StatusCode::CONFLICT,
            "not-resumable",
            "Run cannot continue",
            format!("run {run_id} cannot be resumed: {reason}"),
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
    responses((status = 200, body = RunView), (status = 401, body = Problem), (status = 404, body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
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
    responses((status = 200, description = "The ledger records in execution order", body = Object),
              (status = 404, body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_ledger(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let record = owned(&state, &tenant, &id).await?;
    let ledger = state.store.ledger(&record.run_id).await?;
    Ok(Json(json!({"run_id": record.run_id, "records": ledger})))
}

/// The handoff package of a run automation had to stop.
#[utoipa::path(
    get, path = "/v1/runs/{id}/handoff", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses((status = 200, description = "The handoff package", body = Object),
              (status = 404, description = "unknown run, or it has no handoff", body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_handoff(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<Value>, Problem> {
    let record = owned(&state, &tenant, &id).await?;
    match record.report.and_then(|r| r.handoff) {
        Some(handoff) => Ok(Json(json!(handoff))),
        None => Err(Problem::new(
            StatusCode::NOT_FOUND,
            "no-handoff",
            "No handoff",
            format!("run {id} was not handed to a human"),
        )),
    }
}

/// Continues a run that stopped mid-way, or a recoverable finished one.
#[utoipa::path(
    post, path = "/v1/runs/{id}/resume", tag = "runs",
    params(("id" = String, Path, description = "The run")),
    responses((status = 200, description = "The resumed run ended", body = RunView),
              (status = 404, body = Problem),
              (status = 409, description = "the run cannot be resumed", body = Problem)),
    security(("bearer" = []))
)]
pub async fn resume_run(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Response, Problem> {
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
        engine
            .resume_cancellable(&agent, &shared.schemas, &run_id, None, None)
            .await
    });
    let out = handle
        .await
        .map_err(|e| Problem::internal(format!("the resume's task failed: {e}")))?
        .map_err(engine_problem)?;
    let record = owned(&state, &tenant, out.run_id.as_str()).await?;
    Ok(Answer {
        status: StatusCode::OK,
        body: serde_json::to_vec(&RunView::of(record)).unwrap_or_default(),
        location: Some(location(&out.run_id)),
    }
    .into_response())
}

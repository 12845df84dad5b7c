//! rein-server: `rein serve`, the HTTP API over the run engine.
//!
//! # Why
//!
//! Teams run agents behind HTTP. The submission itself must be idempotent
//! (a double click or a transport retry must not start two runs), work
//! accepted must survive the process that accepted it, and status, events
//! and cancellation must behave the same whichever process answers. Every
//! error is RFC 9457 problem+json with a stable `type`; every query is
//! scoped to the tenant of the caller's API key.
//!
//! # Embedding it
//!
//! `rein serve` is this crate's three calls, which a program can make
//! itself (to add routes of its own, or to run the API inside a larger
//! service):
//!
//! 1. the parts: a config ([`rein_engine::config::load`]), a store (any
//!    `Arc<dyn Store>`: `rein-store-sqlite` on one node,
//!    `rein-store-postgres` on several), and the engine over both
//!    ([`build_engine`], with the gateway's models from [`bind_models`]);
//! 2. [`AppState::new`], what every handler shares; its public `settings`
//!    and `workers` may be changed before serving;
//! 3. [`serve`] on a `TcpListener` (workers, sweepers, connection limits,
//!    the drain on shutdown), or just [`router`], an `axum::Router` that is
//!    a `tower::Service` to call or nest.
//!
//! The example submits a run to the router in-process, as a client would
//! over HTTP, on an agent whose model is a recorded script:
//!
//! ```
//! use std::sync::Arc;
//! use axum::body::{Body, to_bytes};
//! use axum::http::{Request, StatusCode, header};
//! use rein_engine::config::CompiledSchemas;
//! use rein_server::AppState;
//! use rein_store::Store;
//! use rein_store_sqlite::SqliteStore;
//! use tower::ServiceExt as _;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! std::fs::write(dir.path().join("rein.toml"), r#"
//!     [providers.replay]
//!     kind = "scripted"
//!     script = "script.json"
//!
//!     [agents.order_desk]
//!     provider = "replay"
//!     model = "gpt-4o-mini"
//!     system_prompt = "You are the order desk."
//!     tools = []
//!     budget = { wall_clock = "30s", max_steps = 5 }
//! "#)?;
//! // The model's one turn: an answer, no tool call.
//! std::fs::write(
//!     dir.path().join("script.json"),
//!     r#"{"turns": [{"text": "Order 42 now arrives on Friday.", "usage": {"input": 20, "output": 8}}]}"#,
//! )?;
//!
//! let registry = rein_engine::config::load(&dir.path().join("rein.toml"))?;
//! let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db"))?);
//! let client = rein_engine::run::http_client()?;
//! let engine = rein_server::build_engine(&registry, store.clone(), client.clone(), None)?;
//! let models = rein_server::bind_models(&registry, &client)?;
//! let schemas = CompiledSchemas::compile(&registry)?;
//! let state = Arc::new(AppState::new(registry, schemas, store, engine, client, models));
//!
//! // Without API keys the API answers loopback hosts only, for tenant `default`.
//! let submit = |agent: &str| {
//!     Request::post(format!("/v1/agents/{agent}/runs"))
//!         .header(header::HOST, "127.0.0.1:8787")
//!         .header(header::CONTENT_TYPE, "application/json")
//!         .body(Body::from(r#"{"input": "Move order 42 to Friday."}"#))
//! };
//! let response = rein_server::router(state.clone()).oneshot(submit("order_desk")?).await?;
//! assert_eq!(response.status(), StatusCode::OK);
//! let run: serde_json::Value = serde_json::from_slice(&to_bytes(response.into_body(), 1 << 20).await?)?;
//! assert_eq!(run["status"], "succeeded");
//!
//! // Every error is problem+json, with a `type` a client can match on.
//! let response = rein_server::router(state).oneshot(submit("no_such_agent")?).await?;
//! assert_eq!(response.status(), StatusCode::NOT_FOUND);
//! assert_eq!(response.headers()[header::CONTENT_TYPE], "application/problem+json");
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
//!
//! Grouped by concern, so that a route, a middleware or a scheduler change
//! has one obvious home: [`api`] (the runs API and its companions),
//! [`gateway`] (the model gateway and its keys' budgets), [`queue`] (queued
//! work: workers, fairness, slots, quotas, admission), [`http`] (what every
//! request passes through), [`lifecycle`] (the process: connections,
//! readiness, drain, the periodic services) and [`ui`] (the dashboard).
//!
//! | module | job |
//! | --- | --- |
//! | [`api::runs`] | submit (sync or queued), status, ledger, handoff, resume |
//! | [`api::listing`] | the caller's runs, filtered, newest first, a cursor page at a time |
//! | [`api::approvals`] | calls waiting for a human: listing, decisions, expiry |
//! | [`api::handoff`] | a human's decision on each record a run left awaiting one |
//! | [`api::webhooks`] | the configured webhooks, their delivery logs, and the dispatcher loop |
//! | [`api::idempotency`] | seed 004's `Idempotency-Key` table, in the store |
//! | [`api::submission`] | resolving a key whose holding process died |
//! | [`api::events`] | the event list and the live SSE stream |
//! | [`api::cancel`] | cancellation |
//! | [`api::breakers`] | the breaker arms this process knows and the openings shared through the store |
//! | [`api::stats`] | the caller's runs over a window: outcomes, cost, spend per key and model |
//! | [`api::live`] | the work in flight now, the capacity it uses, the gateway's counters |
//! | [`api::config`] | the configuration as applied, redacted, for operators |
//! | [`gateway`] | the OpenAI-compatible `POST /v1/chat/completions` and `POST /v1/responses` and Anthropic-compatible `POST /v1/messages` over model bindings; `GET /v1/models` |
//! | [`gateway::key_budget`] | per-key and per-tenant budgets at the gateway's door |
//! | [`gateway::spend_book`] | spend no limit reads at once, written behind |
//! | [`queue::worker`] | queue workers: queued runs, takeover of expired claims, dead letters |
//! | [`queue::quota`] | per-tenant quotas: submission rate, running and queued caps, 429 |
//! | [`queue::fair`] | which queued run starts next: deficit round robin between tenants |
//! | [`queue::floor`] | the tenant floor: a worker kept for a tenant with nothing running |
//! | [`queue::slots`] | run slots shared by interactive (sync) and batch (queued) runs |
//! | [`queue::admit`] | a submission's quota and slot checks |
//! | [`http::auth`] | bearer keys → tenants; failed attempts logged |
//! | [`http::exposure`] | `Host` and `Origin` checks, `[server.cors]` |
//! | [`http::media`] | every POST is `application/json` |
//! | [`http::access`] | `Request-Id` and one access line per request |
//! | [`http::pointer`](mod@http::pointer) | JSON pointers for the `field` of a 400 |
//! | [`http::problem`] | problem+json, also for the router's own errors |
//! | [`http::query`] | query strings read by hand: unknown, repeated and out-of-range parameters |
//! | [`http::extract`] | extractors whose rejections are problems |
//! | [`http::request_metrics`] | the API request histogram; connection and drain values |
//! | [`http::state`] | what every handler shares ([`AppState`]) |
//! | [`lifecycle::recovery`] | runs whose process died: takeover, dead letter, orphans |
//! | [`lifecycle::singleton`] | one owner per periodic service across processes |
//! | [`lifecycle::mcp_discovery`] | MCP servers' tools listed again on their `refresh`, pins compared |
//! | [`lifecycle::readiness`] | whether the queue workers still loop, for `/readyz` |
//! | [`lifecycle::connections`] | the accept loop: connection limit, header/body/idle timeouts |
//! | [`lifecycle::drain`] | SIGTERM/SIGINT: finish or hand on the work in flight, then exit |
//! | [`ui`] | the operator's dashboard at `/ui`: sign-in, runs, a run's live timeline, approvals and handoffs, breakers, in flight and capacity, trends, the gateway, the config |
//! | [`document`] | the OpenAPI document of every route registered (`api_routes`), with this server's limits |
//! | [`metrics`] | the engine's metrics and the server's for a Prometheus scraper |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod api;
pub mod gateway;
pub mod http;
pub mod lifecycle;
pub mod queue;
pub mod ui;

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, get};
use axum::{Json, Router};
use serde_json::json;
use utoipa::OpenApi;
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt as _};
use utoipa_axum::routes;

pub use http::state::AppState;
pub use rein_core::registry::ServerSpec;

// `POST /v1/messages` documents Anthropic's error shape, not problems.
use crate::gateway::anthropic::ErrorShape as AnthropicErrors;
// `GET /v1/models` documents both error shapes.
use crate::gateway::models::TwoErrorShapes as ModelErrors;
use crate::http::problem::Problem;

/// The OpenAPI document's frame: its info, tags and the schemas no
/// operation names. The operations are added as `api_routes` registers
/// each route, and the modifiers (`MODIFIERS`) run over the result in
/// [`openapi_document`].
#[derive(OpenApi)]
#[openapi(
    info(title = "rein", description = "Runs LLM agents safely against the real world."),
    components(schemas(api::webhooks::WebhookList, api::webhooks::WebhookView, api::webhooks::DeliveryList, api::approvals::ApprovalList, api::approvals::DecisionBody, api::approvals::HumanVerdict, api::handoff::HandoffDecisionBody, api::stats::Stats, api::stats::Tally, api::stats::KeySpend, api::stats::ModelSpend, api::stats::Fired, api::stats::GuardrailTally, api::live::Live, api::live::TenantLoad, api::live::ProcessLoad, api::live::GroupLoad, api::live::GatewayCounts, api::live::CallCount, api::live::FallbackCount, api::live::RecoveryCount, api::config::ConfigView, api::config::AgentView, api::config::ToolView, api::config::ProviderView, api::config::BindingView, api::config::GroupView, api::config::ServerView, api::config::KeyView, api::config::WebhookView, api::breakers::BreakerList, api::breakers::ArmState, api::breakers::SharedOpening, api::listing::RunList, api::listing::RunSummary, api::runs::CreateRun, api::runs::BudgetOverrides, api::runs::Mode, api::runs::RunView, api::runs::LedgerList, api::events::EventList, api::approvals::Decided, api::runs::HandedOn, api::runs::NoBody, api::runs::ResumeBody, http::problem::Problem, rein_core::wire::openai::request::ChatRequest, gateway::responses::ResponsesRequest, rein_core::wire::anthropic::request::MessagesRequest, gateway::anthropic::AnthropicError, gateway::count_tokens::TokenCount, gateway::models::ModelList, gateway::models::Model, gateway::models::OpenAiModelList, gateway::models::OpenAiModel, gateway::models::AnthropicModelList, gateway::models::AnthropicModel, gateway::models::ModelTag, gateway::models::ListTag)),
    tags((name = "runs", description = "Agent runs"), (name = "approvals", description = "Calls waiting for a human's decision"), (name = "webhooks", description = "Signed POSTs of approvals, handoffs, finished runs and opened breakers, and their delivery logs"), (name = "gateway", description = "OpenAI- and Anthropic-compatible model calls through rein's breakers, fallbacks and limits"), (name = "health", description = "Liveness and readiness"), (name = "server", description = "This server itself: its configuration as applied, for operators"))
)]
pub(crate) struct ApiDoc;

/// What [`openapi_document`] adds over every operation, in order: the security
/// schemes, the answers of the front door's layers, problem+json, and the
/// gateway's own error shapes.
const MODIFIERS: [&(dyn utoipa::Modify + Sync); 5] = [
    &Bearer,
    &Refusals,
    &ProblemJson,
    &AnthropicErrors,
    &ModelErrors,
];

struct Bearer;

impl utoipa::Modify for Bearer {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        if let Some(components) = openapi.components.as_mut() {
            components.add_security_scheme(
                "bearer",
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
            // The same key as Anthropic's SDKs send it.
            components.add_security_scheme(
                "api_key",
                SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(
                    http::auth::API_KEY_HEADER,
                ))),
            );
        }
    }
}

/// The answers every operation may get before its handler runs
/// ([`http::exposure`], [`http::media`]): 400 without a `Host`, 403 from an origin not
/// admitted, 421 for a host not allowed, and 415 for a POST that is not
/// JSON.
struct Refusals;

/// The 403 every operation may answer ([`http::exposure`]).
const FOREIGN_ORIGIN: &str =
    "a browser origin that is neither this server's nor in server.cors.allowed_origins";

impl utoipa::Modify for Refusals {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
        let problem = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("Problem")))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in openapi.paths.paths.values_mut() {
            let post = item.post.is_some();
            for operation in operations(item) {
                let responses = &mut operation.responses.responses;
                responses
                    .entry("400".to_owned())
                    .or_insert_with(|| problem("no Host header, or two"));
                // An operation's own 403 (a tenant not allowed) keeps its
                // meaning beside this one.
                match responses.get_mut("403") {
                    Some(RefOr::T(own)) => {
                        own.description = format!("{}; or {FOREIGN_ORIGIN}", own.description);
                    }
                    _ => {
                        responses.insert("403".to_owned(), problem(FOREIGN_ORIGIN));
                    }
                }
                responses.insert(
                    "421".to_owned(),
                    problem("a Host that is not loopback nor in server.allowed_hosts"),
                );
                if post {
                    responses.insert(
                        "415".to_owned(),
                        problem("the body is not `application/json` (the only type POST accepts)"),
                    );
                    if let Some(body) = operation.request_body.as_mut() {
                        body.required = Some(utoipa::openapi::Required::True);
                    }
                }
            }
        }
    }
}

/// Every error is `application/problem+json` ([`Problem::into_response`]):
/// the document says so for each response whose body is a [`Problem`],
/// rather than each annotation repeating the content type.
struct ProblemJson;

impl utoipa::Modify for ProblemJson {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::RefOr;
        const JSON: &str = "application/json";
        const PROBLEM_JSON: &str = "application/problem+json";
        let is_problem = |content: &utoipa::openapi::Content| match &content.schema {
            Some(RefOr::Ref(r)) => r.ref_location.ends_with("/Problem"),
            _ => false,
        };
        for item in openapi.paths.paths.values_mut() {
            for operation in operations(item) {
                for response in operation.responses.responses.values_mut() {
                    let RefOr::T(response) = response else {
                        continue;
                    };
                    if response.content.get(JSON).is_some_and(is_problem)
                        && let Some(content) = response.content.shift_remove(JSON)
                    {
                        response.content.insert(PROBLEM_JSON.to_owned(), content);
                    }
                }
            }
        }
    }
}

fn operations(
    item: &mut utoipa::openapi::PathItem,
) -> impl Iterator<Item = &mut utoipa::openapi::path::Operation> {
    [
        item.get.as_mut(),
        item.put.as_mut(),
        item.post.as_mut(),
        item.delete.as_mut(),
        item.options.as_mut(),
        item.head.as_mut(),
        item.patch.as_mut(),
        item.trace.as_mut(),
    ]
    .into_iter()
    .flatten()
}

/// The OpenAPI document of every route, as any server answers it before
/// its config's limits are applied ([`document`] applies them).
pub fn openapi_document() -> utoipa::openapi::OpenApi {
    // Built once per process: it is the same for every server.
    static DOCUMENT: std::sync::OnceLock<utoipa::openapi::OpenApi> = std::sync::OnceLock::new();
    DOCUMENT
        .get_or_init(|| {
            let (_, mut doc) = api_routes().split_for_parts();
            for modifier in MODIFIERS {
                modifier.modify(&mut doc);
            }
            doc
        })
        .clone()
}

/// The OpenAPI document of a server with `settings`: [`openapi_document`]
/// with the limits that come from the config (the longest
/// `Idempotency-Key`), so a client, or a fuzzer, sees exactly what this
/// server accepts.
pub fn document(settings: &ServerSpec) -> utoipa::openapi::OpenApi {
    use utoipa::openapi::RefOr;
    use utoipa::openapi::schema::Schema;
    let mut doc = openapi_document();
    // `/metrics` asks for a key only where one is needed.
    let open_metrics = settings.api_keys.is_empty()
        || settings.metrics == rein_core::registry::MetricsAccess::Open;
    if open_metrics
        && let Some(get) = doc
            .paths
            .paths
            .get_mut("/metrics")
            .and_then(|item| item.get.as_mut())
    {
        get.security = None;
        get.responses.responses.remove("401");
        if let Some(RefOr::T(forbidden)) = get.responses.responses.get_mut("403") {
            FOREIGN_ORIGIN.clone_into(&mut forbidden.description);
        }
    }
    for item in doc.paths.paths.values_mut() {
        for operation in operations(item) {
            let parameters = operation.parameters.iter_mut().flatten();
            for parameter in parameters.filter(|p| p.name == api::idempotency::IDEMPOTENCY_KEY) {
                if let Some(RefOr::T(Schema::Object(schema))) = parameter.schema.as_mut() {
                    schema.max_length = Some(settings.idempotency.max_key_length);
                }
            }
        }
    }
    doc
}

/// The engine's metrics (runs, model and tool calls with their latency
/// histograms, tokens, cost, breakers, retries, fallbacks, compensations,
/// handoffs, idempotency, budgets; per tenant, agent, tool, provider and
/// model) and the server's (API requests, connections) in the Prometheus
/// text format. Per process, like the breakers they describe.
///
/// With `[[server.api_keys]]` configured it needs the key of a tenant in
/// `server.metrics_tenants` (the counters are the whole process's, so not
/// any tenant's key) unless `server.metrics = "open"`; in open mode there
/// are no keys, and the server is on loopback ([`http::auth::authorize_metrics`]).
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text exposition format", body = String, content_type = "text/plain"),
              (status = 401, description = "missing or invalid API key (keys configured, server.metrics protected)", body = Problem),
              (status = 403, description = "the key's tenant is not in server.metrics_tenants", body = Problem)),
    security(("bearer" = [])))]
pub async fn metrics(
    State(state): State<Arc<AppState>>,
    parts: axum::http::request::Parts,
) -> Response {
    if let Err(problem) = http::auth::authorize_metrics(&parts, &state) {
        return problem.into_response();
    }
    (
        [(
            axum::http::header::CONTENT_TYPE,
            rein_engine::metrics::CONTENT_TYPE,
        )],
        // The server's own families are in the engine's registry.
        state.engine.metrics().render(),
    )
        .into_response()
}

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "health", responses((status = 200, description = "alive", body = Object)))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: the process can drive work — it is not draining, the store
/// answers, and every queue worker it started still loops.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses((status = 200, description = "ready", body = Object), (status = 503, description = "the server is draining, the store is unavailable, or a queue worker ended", body = Problem)))]
pub async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    // A load balancer stops sending to a draining server.
    if state.drain.is_draining() {
        return Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "draining",
            "Server is shutting down",
            "this server is draining its work before it exits",
        )
        .into_response();
    }
    let ended = state.health.workers_ended();
    if ended > 0 {
        let loops = queue::floor::loops(state.workers);
        return Problem::unavailable(format!(
            "{ended} of this process's {loops} queue workers ended; queued work is not driven here (restart the process)",
        ))
        .with(json!({"workers": loops, "workers_alive": state.health.workers_alive()}))
        .into_response();
    }
    match state.store.list_runs(1).await {
        // Marks held while the store was away are being written now: said,
        // so an operator sees the outage's tail drain.
        Ok(_) => Json(json!({
            "status": "ready",
            "workers": state.health.workers_alive(),
            "held_ledger_marks": state.engine.held_marks(),
        }))
        .into_response(),
        // The probe is answered whatever the Host (`exposure::PROBES`), so
        // the store's error (a path, a server address) stays in the log.
        Err(e) => {
            tracing::warn!("readiness: the run store does not answer: {e}");
            Problem::unavailable("the run store does not answer (the server log says why)")
                .into_response()
        }
    }
}

async fn openapi(State(state): State<Arc<AppState>>) -> Json<utoipa::openapi::OpenApi> {
    Json(document(&state.settings))
}

/// The 404 of a path no route has, naming it as OpenAI's does (its
/// SDKs show the message): a client that called the wrong path sees which.
async fn no_route(method: axum::http::Method, uri: axum::http::Uri) -> Problem {
    Problem::new(
        StatusCode::NOT_FOUND,
        "no-route",
        "No such endpoint",
        format!(
            "{method} {} is not an endpoint of this server; see /openapi.json for those that are",
            uri.path()
        ),
    )
}

/// The engine `rein serve` runs: configured from `registry` as every
/// command's ([`EngineBuilder::registry`]: breakers, agent tools, tree
/// bounds), claims with the queue lease (a process that dies hands its
/// queued work to another worker), and provider breaker openings shared
/// through `store` (refreshed every
/// [`DEFAULT_SHARED_BREAKERS_REFRESH`]), so that processes sharing one
/// database stop calling a provider as soon as one of them opened its arm.
/// The engine publishes them, and names itself in claims, under a fresh
/// opaque node id ([`rein_engine::run::Engine::node`]).
///
/// [`DEFAULT_SHARED_BREAKERS_REFRESH`]: rein_engine::run::DEFAULT_SHARED_BREAKERS_REFRESH
/// [`EngineBuilder::registry`]: rein_engine::run::EngineBuilder::registry
/// See [`bind_models`] for the gateway's model bindings.
///
/// # Errors
///
/// When the engine's settings are invalid.
pub fn build_engine(
    registry: &rein_engine::config::Registry,
    store: Arc<dyn rein_store::Store>,
    client: reqwest::Client,
    rng_seed: Option<u64>,
) -> Result<rein_engine::run::Engine, rein_engine::run::EngineError> {
    engine_builder(registry, store, client, rng_seed).build()
}

/// [`build_engine`]'s builder, for a caller that sets more before
/// building: `rein serve` names the config its runs start from
/// ([`EngineBuilder::config_source`]), so that `rein resume RUN` finds it.
///
/// [`EngineBuilder::config_source`]: rein_engine::run::EngineBuilder::config_source
pub fn engine_builder(
    registry: &rein_engine::config::Registry,
    store: Arc<dyn rein_store::Store>,
    client: reqwest::Client,
    rng_seed: Option<u64>,
) -> rein_engine::run::EngineBuilder {
    let settings = registry.server();
    // One opaque id names this process in claims and shared breaker
    // openings, which answers may show; its PID and host stay in the log.
    let node = uuid::Uuid::now_v7().simple().to_string();
    let mut builder = rein_engine::run::Engine::builder(store)
        .registry(registry, &client, rein_engine::bind::process_env())
        .node(node.clone())
        .claim_lease(settings.queue.lease)
        .claim_renewal(settings.reconciliation.heartbeat_interval)
        .shared_breakers(node, rein_engine::run::DEFAULT_SHARED_BREAKERS_REFRESH)
        // Resource group limits hold for every process on the store.
        .shared_limits(rein_engine::run::DEFAULT_SHARE_RENEWAL);
    if let Some(seed) = rng_seed {
        builder = builder.rng_seed(seed);
    }
    builder
}

/// A POST route whose body must be `application/json` ([`http::media`]). The
/// check sits on the method, so a POST to a route without one is still
/// 405, not 415.
fn json_body(route: MethodRouter<Arc<AppState>>) -> MethodRouter<Arc<AppState>> {
    route.route_layer(axum::middleware::from_fn(http::media::require_json))
}

/// Every documented route, each registered once: its handler and its
/// operation in the OpenAPI document come from the handler's
/// `#[utoipa::path]` (method and path included), so a route cannot be
/// served undocumented or documented at another path.
fn api_routes() -> OpenApiRouter<Arc<AppState>> {
    // NOTE: `exposure::PROBES` names the probes' paths.
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(api::runs::create_run).map(json_body))
        .routes(routes!(api::listing::list_runs))
        .routes(routes!(api::breakers::list_breakers))
        .routes(routes!(api::stats::get_stats))
        .routes(routes!(api::live::get_live))
        .routes(routes!(api::config::get_config))
        .routes(routes!(api::runs::get_run))
        .routes(routes!(api::events::get_events))
        .routes(routes!(api::runs::get_ledger))
        .routes(routes!(api::runs::get_handoff))
        .routes(routes!(api::handoff::decide).map(json_body))
        .routes(routes!(api::runs::resume_run).map(json_body))
        .routes(routes!(api::cancel::cancel_run).map(json_body))
        .routes(routes!(api::approvals::list_approvals))
        .routes(routes!(api::approvals::decide).map(json_body))
        .routes(routes!(api::webhooks::list_webhooks))
        .routes(routes!(api::webhooks::list_deliveries))
        .routes(routes!(gateway::openai::chat_completions).map(json_body))
        .routes(routes!(gateway::embeddings::embeddings).map(json_body))
        .routes(routes!(gateway::responses::responses).map(json_body))
        .routes(routes!(gateway::anthropic::messages).map(json_body))
        .routes(routes!(gateway::count_tokens::count_tokens).map(json_body))
        .routes(routes!(gateway::models::list_models))
        .routes(routes!(gateway::models::get_model))
        .routes(routes!(healthz))
        .routes(routes!(metrics))
        .routes(routes!(readyz))
}

/// The API's routes over `state`, behind the front door.
///
/// # Layers, outside in
///
/// Each layer sees what the ones outside it let through, and its answers
/// pass out through them:
///
/// | layer | sees | answers itself |
/// | --- | --- | --- |
/// | `RequestBodyTimeoutLayer` ([`serve`]) | every request the router gets | nothing: cuts a stalled body |
/// | [`http::access::record`] | every request the router gets | nothing: the `Request-Id` and access line of every answer below |
/// | [`http::problem::plain_errors_as_problems`] | every answer below | turns axum's plain errors (405, a rejection) into problems; adds OpenAI's `error` to those of an OpenAI caller of the gateway's paths and answers Anthropic's error shape to an Anthropic one ([`gateway::dialect`]) |
/// | [`http::exposure::guard`] | every request | 400/403/421 for a host or origin not admitted, before CORS may answer a preflight |
/// | CORS ([`http::exposure::cors_layer`], with `[server.cors]`) | admitted requests | preflights; adds `Access-Control-*` to every answer below, the drain's 503 included, so a listed page can read it |
/// | [`lifecycle::drain::refuse_new_work`] | admitted requests | 503 for new work while draining |
/// | `DefaultBodyLimit` | the handlers' body extractors | 413 past `server.body_limit` |
/// | [`http::media::require_json`] (POST routes) | POSTs to a route that has them | 415 for a body that is not JSON |
pub fn router(state: Arc<AppState>) -> Router {
    let limit = state.settings.body_limit;
    let (routes, _) = api_routes().split_for_parts();
    let routes = routes
        .route("/openapi.json", get(openapi))
        // The dashboard, behind the same layers.
        .merge(ui::router(state.clone()))
        .fallback(no_route)
        // Layers run outside in: the last added sees the request first.
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            lifecycle::drain::refuse_new_work,
        ));
    let routes = match &state.settings.cors {
        Some(cors) => routes.layer(http::exposure::cors_layer(cors)),
        None => routes,
    };
    routes
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http::exposure::guard,
        ))
        .layer(axum::middleware::map_response(
            http::problem::plain_errors_as_problems,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            http::access::record,
        ))
        .with_state(state)
}

/// Serves the API on `listener` with `state.workers` queue workers and the
/// tenant floor's ([`queue::floor`]), until
/// `shutdown` resolves; then drains ([`lifecycle::drain`]), all of it within
/// `server.shutdown_grace`: new work is refused, the work in flight gets
/// the first part of the grace to finish, what is left is interrupted and
/// handed on, and connections close after their last response.
/// Connections are served within `server.limits` ([`lifecycle::connections`]).
///
/// # Errors
///
/// None today: a failing `accept` is logged and retried (the signature
/// keeps room for a listener that cannot recover).
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let mut background = Vec::new();
    let loops = queue::floor::loops(state.workers);
    state.floor.spawned(loops);
    for _ in 0..loops {
        background.push(tokio::spawn(queue::worker::work(state.clone())));
    }
    background.push(tokio::spawn(api::idempotency::sweep_forever(state.clone())));
    background.push(tokio::spawn(lifecycle::recovery::orphans_forever(
        state.clone(),
    )));
    background.push(tokio::spawn(lifecycle::recovery::ledger_forever(
        state.clone(),
    )));
    background.push(tokio::spawn(api::approvals::sweep_forever(state.clone())));
    background.push(tokio::spawn(lifecycle::mcp_discovery::refresh_forever(
        state.clone(),
    )));
    background.push(tokio::spawn({
        let book = state.spend.clone();
        async move { book.flush_forever().await }
    }));
    if !state.registry.webhooks().is_empty() {
        // The loader refused a webhook whose secret is not set; a
        // dispatcher that still cannot be built sends nothing, loudly.
        match rein_engine::webhook::Dispatcher::new(
            state.store.clone(),
            state.registry.webhooks(),
            |var| std::env::var(var).ok(),
            state.engine.clock().clone(),
        ) {
            Ok(dispatcher) => background.push(tokio::spawn(api::webhooks::dispatch_forever(
                state.clone(),
                dispatcher,
            ))),
            Err(e) => tracing::error!("webhooks: not dispatching: {e}"),
        }
    }
    // Cancels taken by other nodes, at once where the store notifies
    // (PostgreSQL); every run's claim renewal also reads them.
    if let Some(notified) = state.store.notifications() {
        background.push(tokio::spawn(api::cancel::deliver_notified(
            state.clone(),
            notified,
        )));
    }
    // Workers and periodic services end with the server.
    struct Stop(Vec<tokio::task::JoinHandle<()>>);
    impl Drop for Stop {
        fn drop(&mut self) {
            for task in &self.0 {
                task.abort();
            }
        }
    }
    let _stop = Stop(background);
    // `router` refuses new work while draining (`drain::refuse_new_work`).
    let app = router(state.clone()).layer(tower_http::timeout::RequestBodyTimeoutLayer::new(
        state.settings.limits.body_timeout,
    ));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let stop_accepting = tokio_util::sync::CancellationToken::new();
    let draining = async {
        shutdown.await;
        let began = tokio::time::Instant::now();
        let drained = lifecycle::drain::drain_work(&state, began).await;
        stop_accepting.cancel();
        (began, drained)
    };
    let accepting = lifecycle::connections::accept(
        &state,
        &listener,
        &app,
        &graceful,
        stop_accepting.cancelled(),
    );
    let ((), (began, drained)) = tokio::join!(accepting, draining);
    drop(listener);
    state.drain.close();
    let close_by = began + lifecycle::drain::Phases::of(state.settings.shutdown_grace).close;
    if tokio::time::timeout_at(close_by, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            connections = state.connections.open(),
            "connections still busy at the end of server.shutdown_grace are closed"
        );
    }
    state
        .connections
        .flush_refusals(state.settings.limits.max_connections.get());
    // After the last connection: every answered call's spend is in the
    // book. Within the grace, but never less than a moment to write it.
    let until = (began + state.settings.shutdown_grace)
        .max(tokio::time::Instant::now() + gateway::spend_book::FLUSH_EVERY);
    state.spend.flush_last(until).await;
    tracing::info!("{}", drained.summary(began.elapsed()));
    Ok(())
}

/// The `[models.*]` bindings the gateway answers, built once (their
/// providers are stateless; the engine holds the breakers and slots they
/// share with runs). API keys come from the process environment.
///
/// # Errors
///
/// When a binding's provider cannot be built.
pub fn bind_models(
    registry: &rein_engine::config::Registry,
    client: &reqwest::Client,
) -> Result<
    std::collections::BTreeMap<String, rein_engine::run::ModelBinding>,
    rein_engine::bind::BindError,
> {
    let env = |k: &str| std::env::var(k).ok();
    rein_engine::bind::bind_models(registry, client, &env)
}

//! What every handler shares.

use std::sync::Arc;

use rein_core::RunId;
use rein_core::registry::ServerSpec;
use rein_engine::config::{CompiledSchemas, Registry};
use rein_engine::run::{AgentBinding, Engine};
use rein_store::Store;
use tokio::sync::Notify;

use crate::http::problem::Problem;

/// The server's shared state.
pub struct AppState {
    /// The loaded config.
    pub registry: Registry,
    /// Its compiled argument schemas.
    pub schemas: CompiledSchemas,
    /// The run store.
    pub store: Arc<dyn Store>,
    /// The engine (one per process: breakers and retry budgets are
    /// process-wide health memory; it also knows which runs this process
    /// drives, which is where a cancellation is delivered).
    pub engine: Arc<Engine>,
    /// The HTTP client shared by tools and providers.
    pub client: reqwest::Client,
    /// The `[server]` section of the config.
    pub settings: ServerSpec,
    /// Queue workers this process runs (the config's `queue.workers`; a
    /// test may run none to hold work in the queue).
    pub workers: usize,
    /// Wakes the queue workers when work is enqueued.
    pub queue: Notify,
    /// The `[models.*]` bindings the gateway answers, by name.
    pub models: std::collections::BTreeMap<String, rein_engine::run::ModelBinding>,
    /// Whether the queue workers still loop, for `/readyz`.
    pub health: crate::lifecycle::readiness::Health,
    /// Whether the server is draining ([`crate::lifecycle::drain`]).
    pub drain: Arc<crate::lifecycle::drain::Drain>,
    /// The counters of its connections ([`crate::lifecycle::connections`]).
    pub connections: Arc<crate::lifecycle::connections::Connections>,
    /// The API request histogram ([`crate::http::request_metrics`]).
    pub requests: crate::http::request_metrics::RequestMetrics,
    /// The approval metrics ([`crate::api::approvals`]).
    pub approvals: crate::api::approvals::ApprovalMetrics,
    /// The discovery refresh metrics ([`crate::lifecycle::mcp_discovery`]).
    pub mcp_discovery: crate::lifecycle::mcp_discovery::DiscoveryMetrics,
    /// The gateway keys' spend and budget refusals ([`crate::gateway::key_budget`]).
    pub budgets: crate::gateway::key_budget::BudgetMetrics,
    /// Unbudgeted keys' spend, written behind ([`crate::gateway::spend_book`]).
    pub spend: Arc<crate::gateway::spend_book::SpendBook>,
    /// Per-tenant quota state: submission buckets, own running runs,
    /// refusals ([`crate::queue::quota`]).
    pub quotas: Arc<crate::queue::quota::Quotas>,
    /// The run slots ([`crate::queue::slots`]).
    pub slots: Arc<crate::queue::slots::RunSlots>,
    /// The queue workers' round between tenants ([`crate::queue::fair`]).
    pub fair: crate::queue::fair::FairPick,
    /// The runs the queue workers hold, by tenant ([`crate::queue::floor`]).
    pub floor: crate::queue::floor::TenantFloor,
    /// How the run store was named at start, without credentials (`rein
    /// serve` sets it: `--data`, `[store]`, or its default), for the
    /// config view; `None`: the view shows the config's `[store]`.
    pub store_shown: Option<String>,
    /// When this state was made: the server's start, when the model
    /// bindings were made from the config (their `created` in
    /// `GET /v1/models`).
    pub started_at: rein_core::Timestamp,
}

impl AppState {
    /// The state of a server over `registry`: its `[server]` settings and
    /// `queue.workers` as configured, and its run-time parts (queue wake-up,
    /// readiness, drain, connection counters) fresh. A caller may change the
    /// public settings (`settings`, `workers`) before serving.
    pub fn new(
        registry: Registry,
        schemas: CompiledSchemas,
        store: Arc<dyn Store>,
        engine: Engine,
        client: reqwest::Client,
        models: std::collections::BTreeMap<String, rein_engine::run::ModelBinding>,
    ) -> AppState {
        let settings = registry.server().clone();
        let engine = Arc::new(engine);
        let drain = Arc::new(crate::lifecycle::drain::Drain::default());
        let connections = Arc::new(crate::lifecycle::connections::Connections::default());
        let quotas = Arc::new(crate::queue::quota::Quotas::default());
        // The server's families join the engine's: one `/metrics`.
        let requests = crate::http::request_metrics::RequestMetrics::register(
            engine.metrics(),
            &connections,
            &drain,
        );
        engine
            .metrics()
            .register_collector(Box::new(quotas.clone()));
        let approvals = crate::api::approvals::ApprovalMetrics::register(engine.metrics());
        let mcp_discovery =
            crate::lifecycle::mcp_discovery::DiscoveryMetrics::register(engine.metrics());
        let budgets = crate::gateway::key_budget::BudgetMetrics::register(engine.metrics());
        let spend = Arc::new(crate::gateway::spend_book::SpendBook::new(store.clone()));
        let settings_quotas = settings.quotas.clone();
        let workers = usize::try_from(settings.queue.workers.get()).unwrap_or(1);
        AppState {
            workers,
            settings,
            registry,
            schemas,
            store,
            engine,
            client,
            queue: Notify::new(),
            models,
            health: Default::default(),
            drain,
            connections,
            requests,
            approvals,
            mcp_discovery,
            budgets,
            spend,
            quotas,
            slots: Arc::new(crate::queue::slots::RunSlots::new(
                settings_quotas.run_slots,
                settings_quotas.weights(),
            )),
            fair: crate::queue::fair::FairPick::new(&settings_quotas),
            floor: crate::queue::floor::TenantFloor::new(crate::queue::floor::loops(workers)),
            started_at: crate::lifecycle::recovery::now_ms(),
            store_shown: None,
        }
    }

    /// Binds `agent` from the config, fresh for one run.
    ///
    /// # Errors
    ///
    /// 404 naming the known agents when there is no such agent.
    pub fn bind(&self, agent: &str) -> Result<AgentBinding, Problem> {
        let env = |k: &str| std::env::var(k).ok();
        rein_engine::bind::bind_agent(&self.registry, agent, &self.client, &env).map_err(
            |e| match e {
                rein_engine::bind::BindError::UnknownAgent { .. } => {
                    let known: Vec<&String> = self.registry.agents().keys().collect();
                    Problem::not_found(format!("there is no agent `{agent}`"))
                        .with(serde_json::json!({"known_agents": known}))
                }
                other => Problem::internal(format!("agent `{agent}` cannot be bound: {other}")),
            },
        )
    }
}

/// A fresh run id, so a run's id is known before it starts.
pub fn new_run_id() -> Result<RunId, Problem> {
    RunId::new(format!("{}", uuid::Uuid::now_v7())).map_err(|e| Problem::internal(e.to_string()))
}

//! What every handler shares.

use std::sync::Arc;

use rein_core::RunId;
use rein_core::registry::ServerSpec;
use rein_engine::config::{CompiledSchemas, Registry};
use rein_engine::run::{AgentBinding, Engine};
use rein_store::Store;
use tokio::sync::Notify;

use crate::problem::Problem;

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
    /// This process's identity in singleton elections.
    pub node: String,
    /// The `[models.*]` bindings the gateway answers, by name.
    pub models: std::collections::BTreeMap<String, rein_engine::run::ModelBinding>,
    /// Whether the queue workers still loop, for `/readyz`.
    pub health: crate::readiness::Health,
    /// Whether the server is draining ([`crate::drain`]).
    pub drain: crate::drain::Drain,
    /// The counters of its connections ([`crate::connections`]).
    pub connections: crate::connections::Connections,
}

/// A node identity: this process on this host, unique per start.
pub fn node_id() -> String {
    format!(
        "{}#{}",
        rein_engine::lease::Owner::current(),
        uuid::Uuid::now_v7().simple()
    )
}

impl AppState {
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

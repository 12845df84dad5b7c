//! What every handler shares.

use std::sync::Arc;

use rein_core::RunId;
use rein_engine::config::{CompiledSchemas, Registry};
use rein_engine::run::{AgentBinding, CancellationToken, Engine};
use rein_store::Store;
use tokio::sync::Notify;

use crate::problem::Problem;
use rein_core::registry::ServerSpec;

/// The server's shared state.
pub struct AppState {
    /// The loaded config.
    pub registry: Registry,
    /// Its compiled argument schemas.
    pub schemas: CompiledSchemas,
    /// The run store.
    pub store: Arc<dyn Store>,
    /// The engine (one per process: breakers and retry budgets are
    /// process-wide health memory).
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
    /// The runs this process drives, by id: where a cancellation is
    /// delivered.
    pub live: LiveRuns,
    /// This process's identity in singleton elections.
    pub node: String,
}

/// A node identity: this process on this host, unique per start.
pub fn node_id() -> String {
    format!(
        "{}#{}",
        rein_engine::lease::Owner::current(),
        uuid::Uuid::now_v7().simple()
    )
}

/// The cancellation handles of the runs this process drives.
///
/// # Why in-process
///
/// Only the process driving a run can stop its in-flight calls. A cancel
/// request that reaches another process finds nothing here and answers
/// 409; a queued run is cancelled through the store instead, from anywhere.
#[derive(Default)]
pub struct LiveRuns {
    runs: std::sync::Mutex<std::collections::HashMap<RunId, CancellationToken>>,
}

/// Keeps a run registered while it is driven; deregisters on drop.
pub struct LiveGuard<'a> {
    live: &'a LiveRuns,
    run_id: RunId,
    /// The run's cancellation token.
    pub token: CancellationToken,
}

impl Drop for LiveGuard<'_> {
    fn drop(&mut self) {
        self.live.lock().remove(&self.run_id);
    }
}

impl LiveRuns {
    fn lock(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<RunId, CancellationToken>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers `run_id` as driven here until the guard drops.
    pub fn register(&self, run_id: &RunId) -> LiveGuard<'_> {
        let token = CancellationToken::new();
        self.lock().insert(run_id.clone(), token.clone());
        LiveGuard {
            live: self,
            run_id: run_id.clone(),
            token,
        }
    }

    /// Whether this process drives `run_id`.
    pub fn contains(&self, run_id: &RunId) -> bool {
        self.lock().contains_key(run_id)
    }

    /// Delivers a cancellation; false when the run is not driven here.
    pub fn cancel(&self, run_id: &RunId) -> bool {
        match self.lock().get(run_id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }
}

/// A fresh run id, so a run can be registered before it starts.
pub fn new_run_id() -> Result<RunId, Problem> {
    RunId::new(format!("{}", uuid::Uuid::now_v7())).map_err(|e| Problem::internal(e.to_string()))
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

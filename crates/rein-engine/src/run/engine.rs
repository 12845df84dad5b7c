//! The engine and its builder: what every run of a process shares
//! (breaker arms, retry budgets, the jitter source, concurrency slots).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rein_core::Clock;
use rein_core::breaker::{Breakers, BreakersConfig};
use rein_core::ids::IdError;
use rein_core::registry::AgentGraphLimits;
use rein_core::retry::{RetryBudget, RetryDecision, RetryInput, RetryPolicy};
use rein_store::Store;
use tokio_util::sync::CancellationToken;

use crate::tool_http::HttpToolAdapter;
use crate::{SystemClock, Timer};

use super::error::EngineError;
use super::hand_on::HandOn;
use super::latency::{DEFAULT_LATENCY_FLUSH, LatencyBook, ToolLatency};
use super::retry_memory::{DEFAULT_RETRY_FLUSH, RetryMemory};
use super::{concurrency, shared_breakers, tree};

/// State shared by all runs of an engine: breaker arms (health memory
/// across runs), retry budgets per target, the jitter source, and the
/// concurrency slots of resource groups.
pub(super) struct Shared {
    pub(super) breakers: Arc<Mutex<Breakers>>,
    pub(super) retry_budgets: Mutex<HashMap<String, RetryBudget>>,
    /// How the retries of each target ended, by ordinal, here and in
    /// every process on the store: the success rate a retry's worth is
    /// decided on (`retry_worth`, `retry_memory`).
    pub(super) retry_memory: Arc<RetryMemory>,
    pub(super) rng: Mutex<StdRng>,
    pub(super) slots: concurrency::GroupSlots,
    /// The gate of every provider, by name: its `max_concurrency`,
    /// `tokens_per_minute` and pause after a 429.
    pub(super) provider_slots: concurrency::GroupSlots,
    /// Counters of every decision, per target.
    pub(super) metrics: Arc<crate::metrics::Metrics>,
    pub(super) live: tree::LiveRegistry,
    /// Provider breaker openings shared through the store, when on.
    pub(super) shared_breakers: Option<Arc<shared_breakers::SharedBreakers>>,
    /// Observed latency of tools and models, shared through the store.
    pub(super) latency: Arc<LatencyBook>,
    /// The bytes per token each model's provider counted: the prompt
    /// bound of its next call.
    pub(super) token_ratios: super::model_chain::token_ratios::TokenRatios,
    /// Fires when this process stops driving runs ([`Engine::interrupt`]).
    pub(super) interrupt: CancellationToken,
    /// Ledger marks the store would not take, written once it is back.
    pub(super) held_marks: Arc<super::durable::HeldMarks>,
    /// Who continues the runs the interrupt stopped; set by its first call.
    pub(super) hand_on: std::sync::OnceLock<HandOn>,
    /// Where runs' spans go, when traces are on (`[telemetry]`).
    pub(super) telemetry: Option<crate::telemetry::Telemetry>,
}

impl Shared {
    pub(super) fn breakers(&self) -> MutexGuard<'_, Breakers> {
        self.breakers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds an [`Engine`].
pub struct EngineBuilder {
    pub(super) store: Arc<dyn Store>,
    pub(super) clock: Arc<dyn Timer>,
    pub(super) client: Option<reqwest::Client>,
    pub(super) breakers: BreakersConfig,
    pub(super) rng_seed: Option<u64>,
    pub(super) claim_lease: Option<std::time::Duration>,
    pub(super) claim_renewal: Option<std::time::Duration>,
    pub(super) store_patience: std::time::Duration,
    pub(super) agents: Option<tree::AgentResolver>,
    pub(super) agent_graph: AgentGraphLimits,
    pub(super) metrics_labels: crate::metrics::LabelBounds,
    /// This node's id and the refresh interval of shared breaker openings.
    pub(super) shared_breakers: Option<(String, std::time::Duration)>,
    /// This engine's public node id; a fresh one when unset.
    pub(super) node: Option<String>,
    /// How often share leases of governed groups are renewed, when their
    /// limits are divided with the other nodes on the store.
    pub(super) shared_limits: Option<std::time::Duration>,
    /// How each tool's latency is planned, by tool name.
    pub(super) tool_latency: std::collections::BTreeMap<String, ToolLatency>,
    /// How often observed latency is flushed to the store at most.
    pub(super) latency_flush: std::time::Duration,
    /// How often at most counted retry outcomes are added to the store.
    pub(super) retry_flush: std::time::Duration,
    /// Calls of a provider and model observed before their latency
    /// replaces the configured `model_latency`.
    pub(super) model_min_samples: u64,
    pub(super) telemetry: Option<crate::telemetry::Telemetry>,
    /// Traces to set up at build, from `[telemetry]`.
    pub(super) traces: Option<rein_core::registry::TelemetrySpec>,
    /// What a resume does when the run's contract changed.
    pub(super) contract_change: rein_core::outcome::ContractPolicy,
    /// When a resume sends again what a report said to retry later.
    pub(super) retry_timing: super::RetryTiming,
    /// The config runs are started from, recorded in their `run_started`.
    pub(super) config_source: Option<String>,
    #[cfg(feature = "sabotage")]
    pub(super) sabotage: crate::sabotage::Sabotage,
}

impl EngineBuilder {
    /// When a resume of a finished, recoverable run sends again the
    /// actions its report said to retry later ([`RetryTiming`](super::RetryTiming)):
    /// once their wait has passed (the default), or now.
    pub fn retry_timing(mut self, timing: super::RetryTiming) -> Self {
        self.retry_timing = timing;
        self
    }

    /// The config file (or directory) this engine's agents come from,
    /// recorded in each run's `run_started`, so that the run can be
    /// resumed later without naming its config again (`rein resume RUN`).
    pub fn config_source(mut self, path: impl Into<String>) -> Self {
        self.config_source = Some(path.into());
        self
    }

    /// What a resume does when the system prompt or a tool definition
    /// changed since the run started ([`ContractPolicy`](rein_core::outcome::ContractPolicy)):
    /// continue and say so (the default), or refuse.
    pub fn contract_change(mut self, policy: rein_core::outcome::ContractPolicy) -> Self {
        self.contract_change = policy;
        self
    }

    /// Renews claims every `every` (the heartbeat), or every third of the
    /// lease if that is sooner.
    pub fn claim_renewal(mut self, every: std::time::Duration) -> Self {
        self.claim_renewal = Some(every);
        self
    }

    /// Offers a run's commit to a store that refuses it as unavailable for
    /// up to `patience` before the run is handed on (default
    /// [`STORE_PATIENCE`](super::STORE_PATIENCE)): longer rides out a
    /// slower failover, shorter frees a slot sooner.
    pub fn store_patience(mut self, patience: std::time::Duration) -> Self {
        self.store_patience = patience;
        self
    }

    /// Lets `agent` tools start child runs: `resolve` binds an agent by
    /// name (a fresh binding per child run). Without it an agent tool
    /// fails with a structured `not_found`.
    pub fn agents(mut self, resolve: tree::AgentResolver) -> Self {
        self.agents = Some(resolve);
        self
    }

    /// Bounds every root run's agent tree by `limits` (default: the
    /// `[server.agent_graph]` defaults, depth 3, 200,000 tokens, 25 child
    /// runs).
    pub fn agent_graph(mut self, limits: AgentGraphLimits) -> Self {
        self.agent_graph = limits;
        self
    }

    /// Traces every run to `telemetry` (off without it).
    pub fn telemetry(mut self, telemetry: Option<crate::telemetry::Telemetry>) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Traces every run as `spec` says (`[telemetry]`), exported with the
    /// engine's HTTP client; set up by [`EngineBuilder::build`], inside the
    /// tokio runtime. A [`EngineBuilder::telemetry`] given too wins.
    pub fn traces(mut self, spec: Option<rein_core::registry::TelemetrySpec>) -> Self {
        self.traces = spec;
        self
    }

    /// Bounds the tenant and agent label values of the metrics by
    /// `bounds` (default: the first
    /// [`DEFAULT_MAX_VALUES`](crate::metrics::DEFAULT_MAX_VALUES) of each).
    pub fn metrics_labels(mut self, bounds: crate::metrics::LabelBounds) -> Self {
        self.metrics_labels = bounds;
        self
    }

    /// Claims runs with a lease of `lease`, renewed every third of it while
    /// the run is driven: a process that dies stops renewing, and another
    /// process may take the run over once the lease ran out (a queue
    /// worker's takeover, an orphan scan). Without it a claim lasts the
    /// run's wall clock plus a margin and is taken over only from a dead
    /// process of this host.
    pub fn claim_lease(mut self, lease: std::time::Duration) -> Self {
        self.claim_lease = Some(lease);
        self
    }

    /// Uses `clock` instead of the system clock: for reading the time and
    /// for every wait of the engine and its tool adapters.
    pub fn clock(mut self, clock: Arc<dyn Timer>) -> Self {
        self.clock = clock;
        self
    }

    /// Uses `client` for tool calls (one pool per process).
    pub fn http_client(mut self, client: reqwest::Client) -> Self {
        self.client = Some(client);
        self
    }

    /// Uses these breaker settings.
    pub fn breakers(mut self, config: BreakersConfig) -> Self {
        self.breakers = config;
        self
    }

    /// Names this engine `node` in what others may see of its claims (a
    /// refused resume says which node drives the run), instead of a fresh
    /// random id.
    ///
    /// # Why opaque
    ///
    /// A claim's owner also records the process id and host name, so that
    /// a process of the same host can tell its owner is dead. Those stay in
    /// the store and the logs; an API answer names only this id. It must be
    /// 1 to [`MAX_NODE_ID_LENGTH`](crate::lease::MAX_NODE_ID_LENGTH) (64)
    /// visible ASCII characters without `#` or `.` (the separators
    /// of a claim's owner); [`build`](EngineBuilder::build) refuses another.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Plans each named tool's latency by `tools` (its spec, declared or
    /// observed, and its allowance factor); a tool not named is planned
    /// with its binding's profile and the default factor.
    /// [`EngineBuilder::registry`] sets it from the config.
    pub fn tool_latency(mut self, tools: std::collections::BTreeMap<String, ToolLatency>) -> Self {
        self.tool_latency = tools;
        self
    }

    /// Adds the latency recorded since the last time to the store at most
    /// every `every` in the background (default [`DEFAULT_LATENCY_FLUSH`];
    /// also at every run's end and on [`Engine::flush_latency`]).
    pub fn latency_flush(mut self, every: std::time::Duration) -> Self {
        self.latency_flush = every;
        self
    }

    /// Adds the retry outcomes counted since the last time to the store at
    /// most every `every` in the background (default
    /// [`DEFAULT_RETRY_FLUSH`]; also at every run's end and on
    /// [`Engine::flush_retry_outcomes`]).
    pub fn retry_flush(mut self, every: std::time::Duration) -> Self {
        self.retry_flush = every;
        self
    }

    /// Plans a model call with its observed latency once `n` calls of its
    /// provider and model were observed (by any process on the store); the
    /// configured `model_latency` until then. Default
    /// [`DEFAULT_OBSERVE_MIN_SAMPLES`](rein_core::registry::DEFAULT_OBSERVE_MIN_SAMPLES)
    /// (50), as a tool's `mode = "observe"`.
    pub fn model_latency_min_samples(mut self, n: u64) -> Self {
        self.model_min_samples = n;
        self
    }

    /// Seeds the jitter source, for reproducible runs.
    pub fn rng_seed(mut self, seed: u64) -> Self {
        self.rng_seed = Some(seed);
        self
    }

    /// Breaks the mechanisms `s` names, so that a checker can prove it
    /// catches them. Test-only: see [`crate::sabotage`].
    #[cfg(feature = "sabotage")]
    pub fn sabotage(mut self, s: crate::sabotage::Sabotage) -> Self {
        self.sabotage = s;
        self
    }

    /// Builds the engine.
    ///
    /// # Errors
    ///
    /// [`EngineError::Config`] for invalid breaker settings,
    /// [`EngineError::Http`] when the HTTP client cannot be built,
    /// [`EngineError::Telemetry`] when traces cannot be set up.
    pub fn build(self) -> Result<Engine, EngineError> {
        let client = match self.client {
            Some(c) => c,
            None => http_client().map_err(|e| EngineError::Http(e.to_string()))?,
        };
        let telemetry = match (self.telemetry, &self.traces) {
            (Some(t), _) => Some(t),
            (None, Some(spec)) => Some(crate::telemetry::Telemetry::new(spec, client.clone())?),
            (None, None) => None,
        };
        let rng = match self.rng_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let shared_breakers = shared_breakers::from_settings(
            self.shared_breakers,
            &self.store,
            &(self.clock.clone() as Arc<dyn Clock>),
        )?;
        let node = match self.node {
            None => uuid::Uuid::now_v7().simple().to_string(),
            Some(node) if crate::lease::is_node_id(&node) => node,
            Some(node) => {
                return Err(EngineError::Config(rein_core::ConfigError::OutOfRange {
                    field: "node",
                    // NOTE: 64 is `lease::MAX_NODE_ID_LENGTH`.
                    expected: "1 to 64 visible ASCII characters without `#` or `.`",
                    found: format!("{node:?}"),
                }));
            }
        };
        let cluster = self.shared_limits.map(|renew| {
            Arc::new(concurrency::Cluster::new(
                self.store.clone(),
                node.clone(),
                renew,
            ))
        });
        let latency = Arc::new(
            LatencyBook::new(
                self.tool_latency,
                self.latency_flush,
                self.store.clone(),
                self.clock.clone() as Arc<dyn Clock>,
            )
            .with_model_min_samples(self.model_min_samples),
        );
        let retry_memory = Arc::new(RetryMemory::new(
            self.retry_flush,
            self.store.clone(),
            self.clock.clone() as Arc<dyn Clock>,
        ));
        let heartbeats = self.claim_lease.map(|lease| {
            let every = self
                .claim_renewal
                .map_or(lease / 3, |every| every.min(lease / 3));
            super::heartbeat::Heartbeats::new(self.store.clone(), self.clock.clone(), lease, every)
        });
        Ok(Engine {
            node,
            contract_change: self.contract_change,
            retry_timing: self.retry_timing,
            config_source: self.config_source,
            command: crate::tool_command::CommandToolAdapter::new(self.store.clone())
                .with_clock(self.clock.clone()),
            store: self.store,
            clock: self.clock.clone(),
            http: HttpToolAdapter::new(client).with_clock(self.clock.clone()),
            shared: Shared {
                breakers: Arc::new(Mutex::new(Breakers::new(self.breakers)?)),
                retry_budgets: Mutex::new(HashMap::new()),
                retry_memory,
                rng: Mutex::new(rng),
                slots: concurrency::GroupSlots::shared(self.clock.clone(), cluster.clone()),
                // Providers' ceilings and token buckets are the account's:
                // divided with the cluster like the groups' (leases
                // `provider:NAME`).
                provider_slots: concurrency::GroupSlots::shared(self.clock.clone(), cluster),
                metrics: Arc::new(crate::metrics::Metrics::new(self.metrics_labels)),
                live: tree::LiveRegistry::default(),
                shared_breakers,
                latency,
                token_ratios: Default::default(),
                interrupt: CancellationToken::new(),
                held_marks: Arc::default(),
                hand_on: std::sync::OnceLock::new(),
                telemetry,
            },
            agents: self.agents,
            agent_graph: self.agent_graph,
            heartbeats,
            claim_lease: self.claim_lease,
            store_patience: self.store_patience,
            #[cfg(feature = "sabotage")]
            sabotage: self.sabotage,
        })
    }
}

/// The process-wide HTTP client settings: `TCP_NODELAY`, pooled.
///
/// # Errors
///
/// When the TLS backend cannot initialize.
pub fn http_client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_idle_timeout(std::time::Duration::from_secs(30))
        .build()
}

/// Runs agents: the imperative shell around rein-core's policies.
pub struct Engine {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Timer>,
    pub(super) http: HttpToolAdapter,
    pub(super) command: crate::tool_command::CommandToolAdapter,
    pub(super) shared: Shared,
    /// The renewed claim lease, when configured.
    pub(super) claim_lease: Option<std::time::Duration>,
    /// The process's heartbeat, renewing every claim of the runs it
    /// drives, when a claim lease is configured.
    pub(super) heartbeats: Option<Arc<super::heartbeat::Heartbeats>>,
    /// How long a run's commit is offered to a store that is away.
    pub(super) store_patience: std::time::Duration,
    /// Binds the agents that `agent` tools start.
    pub(crate) agents: Option<tree::AgentResolver>,
    /// Bounds of every agent tree.
    pub(crate) agent_graph: AgentGraphLimits,
    /// The public node id in this engine's claims.
    pub(super) node: String,
    /// What a resume does when the run's contract changed.
    pub(super) contract_change: rein_core::outcome::ContractPolicy,
    /// When a resume sends again what a report said to retry later.
    pub(super) retry_timing: super::RetryTiming,
    /// The config runs are started from, recorded in their `run_started`.
    pub(super) config_source: Option<String>,
    /// The mechanisms deliberately broken (test-only).
    #[cfg(feature = "sabotage")]
    pub(super) sabotage: crate::sabotage::Sabotage,
}

/// A fresh, time-ordered id.
pub(crate) fn new_id<T: TryFrom<String, Error = IdError>>() -> T {
    match T::try_from(uuid::Uuid::now_v7().to_string()) {
        Ok(id) => id,
        Err(_) => unreachable!("a UUID is a valid identifier"),
    }
}

impl Engine {
    /// When this engine's resumes send again what a report said to retry
    /// later, unless a resume says otherwise ([`Engine::resume_timed`]).
    pub(crate) fn retry_timing(&self) -> super::RetryTiming {
        self.retry_timing
    }
}

impl Engine {
    /// An engine over `store`, with the system clock and default breakers.
    pub fn builder(store: Arc<dyn Store>) -> EngineBuilder {
        EngineBuilder {
            store,
            clock: Arc::new(SystemClock::new()),
            client: None,
            breakers: BreakersConfig::default(),
            rng_seed: None,
            claim_lease: None,
            claim_renewal: None,
            store_patience: super::STORE_PATIENCE,
            agents: None,
            agent_graph: AgentGraphLimits::default(),
            metrics_labels: crate::metrics::LabelBounds::default(),
            shared_breakers: None,
            node: None,
            shared_limits: None,
            tool_latency: std::collections::BTreeMap::new(),
            latency_flush: DEFAULT_LATENCY_FLUSH,
            contract_change: rein_core::outcome::ContractPolicy::default(),
            retry_timing: super::RetryTiming::default(),
            config_source: None,
            retry_flush: DEFAULT_RETRY_FLUSH,
            model_min_samples: rein_core::registry::DEFAULT_OBSERVE_MIN_SAMPLES,
            telemetry: None,
            traces: None,
            #[cfg(feature = "sabotage")]
            sabotage: crate::sabotage::Sabotage::default(),
        }
    }

    /// This engine's public node id ([`EngineBuilder::node`]): what an
    /// answer may say about which process drives a run.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The store runs are recorded in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The clock this engine reads and waits on ([`EngineBuilder::clock`]):
    /// what a host's own run-related waits should use too, so that one
    /// time line (paused, in tests) drives them all.
    pub fn clock(&self) -> &Arc<dyn Timer> {
        &self.clock
    }

    /// The counters of every decision this engine made (runs and gateway
    /// calls alike), for an operator's scraper.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.shared.metrics
    }

    /// Where runs' spans go, when traces are on: what a host flushes at
    /// shutdown ([`Telemetry::shutdown`](crate::telemetry::Telemetry::shutdown)).
    pub fn telemetry(&self) -> Option<&crate::telemetry::Telemetry> {
        self.shared.telemetry.as_ref()
    }

    /// The spans of a run of `agent` for `tenant` under `parent`, when traces are on.
    pub(crate) fn run_trace(
        &self,
        parent: Option<&crate::telemetry::TraceParent>,
        tenant: &str,
        agent: &str,
    ) -> Option<Arc<crate::telemetry::RunTrace>> {
        self.shared
            .telemetry
            .as_ref()
            .map(|t| t.run(parent, tenant, agent))
    }

    /// The spans of a run driven again, when traces are on: under the
    /// caller's context `record` kept, linked to its first run span.
    pub(crate) fn resumed_run_trace(
        &self,
        record: &rein_store::RunRecord,
        agent: &str,
    ) -> Option<Arc<crate::telemetry::RunTrace>> {
        use crate::telemetry::TraceParent;
        let parent = record
            .trace_parent
            .as_ref()
            .and_then(TraceParent::from_span);
        let first = record.first_span.as_ref().and_then(TraceParent::from_span);
        self.shared.telemetry.as_ref().map(|t| {
            t.resumed_run(
                parent.as_ref(),
                first.as_ref(),
                record.tenant.as_str(),
                agent,
            )
        })
    }

    /// Calls waiting in the governor of resource group `group` (0 for a
    /// group not governed, or not called yet): what an operator's gauge
    /// shows, and what a test synchronises on instead of sleeping.
    pub fn governor_queued(&self, group: &str) -> usize {
        self.shared.slots.queued(group)
    }

    /// The current concurrency limit of resource group `group`'s governor
    /// (`None` for a group not governed, or not called yet): where adaptive
    /// concurrency stands between 1 and the group's `max_concurrency`.
    pub fn governor_limit(&self, group: &str) -> Option<u32> {
        self.shared.slots.limit(group)
    }

    /// Stops every run this engine drives at its next safe point, for good
    /// (the process is stopping): no new step, model turn or tool call
    /// starts. A model call or a read in flight is aborted (nothing to
    /// undo); a write already sent is never aborted: it finishes within its
    /// allowance and its result is recorded, so a rolling restart leaves no
    /// effect in doubt. A write declared but not yet sent (waiting for a
    /// concurrency slot, or to retry an attempt that did not apply) is not
    /// sent: its ledger record is marked failed, not applied, and the
    /// resume sends it afresh under its intent and key.
    ///
    /// Each run records `run_interrupted` (with `to`: who may continue it),
    /// stays `running` and releases its claim; its
    /// [`RunOutput::interrupted`](super::RunOutput::interrupted) is true. A run already settling its
    /// effects finishes settling and ends normally. Runs started afterwards
    /// are interrupted at once. The first call's `to` holds for the rest of
    /// the engine's life.
    pub fn interrupt(&self, to: HandOn) {
        let _ = self.shared.hand_on.set(to);
        self.shared.interrupt.cancel();
    }

    /// Adds the latency this engine recorded since its last flush to the
    /// store (a server's shutdown; every run's end does it too). A store
    /// that refuses is logged, and the samples are kept for the next try.
    pub async fn flush_latency(&self) {
        self.shared.latency.flush_now().await;
    }

    /// Adds the retry outcomes this engine counted since its last flush to
    /// the store (a server's shutdown; every run's end does it too). A
    /// store that refuses is logged, and the counts are kept for the next
    /// try.
    pub async fn flush_retry_outcomes(&self) {
        self.shared.retry_memory.flush_now().await;
    }

    /// Reads what every process on the store learnt (observed latency,
    /// retry outcomes) once, before this engine's first decision on it.
    pub(super) async fn load_learned(&self) {
        self.shared.latency.load().await;
        self.shared.retry_memory.load().await;
        self.shared.token_ratios.load(self.store.as_ref()).await;
    }

    /// Shares what this engine learnt since its last flush (observed
    /// latency, retry outcomes) with every process on the store.
    pub(super) async fn flush_learned(&self) {
        self.shared.latency.flush_now().await;
        self.shared.retry_memory.flush_now().await;
        let now_ms = rein_core::Timestamp::from_system_time(self.clock.system_now());
        self.shared
            .token_ratios
            .flush_now(self.store.as_ref(), now_ms)
            .await;
    }

    /// Gives up this engine's share leases of its resource groups
    /// ([`EngineBuilder::shared_limits`]) so the other nodes on the store
    /// take its part of each group's limits back at once, and stops
    /// renewing them (a process that stops: `rein serve`'s drain, the end
    /// of `rein run`). Calls made afterwards keep this node's last part.
    pub async fn leave_shared_limits(&self) {
        self.shared.slots.leave_cluster().await;
        self.shared.provider_slots.leave_cluster().await;
    }

    /// Whether [`Engine::interrupt`] was called.
    pub fn is_interrupted(&self) -> bool {
        self.shared.interrupt.is_cancelled()
    }

    /// Decides about a failed attempt with the target's retry budget and the
    /// shared jitter source.
    pub(super) fn decide(
        &self,
        target: &str,
        policy: &RetryPolicy,
        input: &RetryInput<'_>,
    ) -> RetryDecision {
        let mut budgets = self
            .shared
            .retry_budgets
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let budget = budgets
            .entry(target.to_owned())
            .or_insert_with(|| RetryBudget::new(policy));
        let mut rng = self.shared.rng.lock().unwrap_or_else(|p| p.into_inner());
        policy.decide(input, budget, &mut *rng)
    }

    /// Withdraws one retry from the target's retry budget (a retry made
    /// outside [`decide`](Engine::decide)); `false` when it is empty.
    pub(super) fn withdraw_retry(&self, target: &str, policy: &RetryPolicy) -> bool {
        let mut budgets = self
            .shared
            .retry_budgets
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        budgets
            .entry(target.to_owned())
            .or_insert_with(|| RetryBudget::new(policy))
            .withdraw()
    }

    /// Credits one original request to the target's retry budget.
    pub(super) fn deposit_request(&self, target: &str, policy: &RetryPolicy) {
        let mut budgets = self
            .shared
            .retry_budgets
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        budgets
            .entry(target.to_owned())
            .or_insert_with(|| RetryBudget::new(policy))
            .deposit();
    }
}

/// The retry-budget key of a provider (tools and providers may share names).
pub(crate) fn provider_target(name: &str) -> String {
    format!("provider:{name}")
}

/// The retry-budget key of a tool.
pub(crate) fn tool_target(name: &str) -> String {
    format!("tool:{name}")
}

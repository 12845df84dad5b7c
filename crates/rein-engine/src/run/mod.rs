//! The run loop: model turn → validate → plan (intent ids persisted) →
//! guarded calls → facts or placeholders back to the model → loop guard →
//! checkpoint → … until the model answers or a guard ends the run.
//!
//! # Why this shape
//!
//! The model writes the control flow at run time, so every guarantee has
//! to be enforced here, per step, in code: one deadline and one triple
//! budget checked before each step, validation before any tool sees a call,
//! the ledger written before any side effect, classified retries inside a
//! breaker, and an explicit outcome when anything stops the loop. The loop
//! never returns an unstructured error for something that happened during
//! the run: it ends with a [`RunReport`].

mod args;
mod binding;
mod close;
mod concurrency;
mod contain;
mod emitter;
mod event_log;
mod guarded;
mod model_chain;
mod report;
mod settle;
mod shared_breakers;
mod tree;
mod tree_settle;

pub use args::{ParsedArgs, parse_args};
pub use binding::{
    AcceptAll, AgentBinding, AgentTarget, ArgValidator, DEFAULT_ALLOWANCE_FACTOR,
    DEFAULT_COMPENSATION_RESERVE, DEFAULT_MAX_MODEL_RETRIES, DEFAULT_MAX_MODEL_RETRY_WAIT,
    ModelLink, ModelRetryLimits, ToolBinding, ToolTarget,
};
pub use close::{Closing, close_run};
pub use emitter::{Correlation, Observer};
pub use guarded::{CallResult, Planned};
pub use model_chain::{ModelAnswer, ModelAsk, ModelBinding, ModelError, ModelReply};
pub use report::{
    End, REPORT_WRITE_TRIES, is_revision_conflict, revise, revise_stored, tree_records,
};
pub use settle::{CompensationBinding, STRONG_COMPENSATION_ATTEMPTS};
pub use shared_breakers::DEFAULT_SHARED_BREAKERS_REFRESH;
pub use tree::{AgentResolver, TreeLimits};

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::SeedableRng;
use rand::rngs::StdRng;
use rein_core::breaker::{Breakers, BreakersConfig};
use rein_core::deadline::{Budget, ChildCaps, Dimension, Exhausted, Usage};
use rein_core::event::{
    AllocationShape, BudgetAllocated, BudgetExhausted, BudgetScope, CallRejected, LoopDetected,
    ModelOutputTruncated, PartialSuccessReturned, PlanCreated, PlannedIntentSummary, Refused,
    RetryTarget, RunCancelled, RunInterrupted, RunResumed, RunStarted, ToolDisabled,
    TruncationAction,
};
use rein_core::ids::IdError;
use rein_core::loop_guard::{Action, FailureVerdict, LoopGuard, StateDigest, Verdict};
use rein_core::retry::{RetryBudget, RetryDecision, RetryInput, RetryPolicy};
use rein_core::{
    Category, Clock, ConfigError, EventData, EventKind, Failure, IntentId, LedgerRecord, Outcome,
    RunId, RunReport, TenantId, ToolClass, Weight,
};
use rein_store::{
    Checkpoint, NewRun, PlannedIntent, RunStatus, StatusChange, StepCommit, Store, StoreError,
};
use serde_json::{Value, json};
pub use tokio_util::sync::CancellationToken;

use crate::SystemClock;
use crate::provider::{FinishReason, Message, ModelRequest, ModelResponse};
use crate::tool_http::HttpToolAdapter;
use emitter::{Emitter, unix_ms};
use guarded::millis;

/// A run that could not start (a run that started always ends in a report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The store refused to record the run.
    #[error("cannot record the run: {0}")]
    Store(#[from] StoreError),
    /// A setting was invalid.
    #[error("invalid setting: {0}")]
    Config(#[from] ConfigError),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
    /// rein failed the run before it was recorded, or cannot record its
    /// end (a panic inside it was caught; see the run's boundary).
    #[error(
        "run {run_id} failed inside rein ({}): {message}",
        rein_core::report::INTERNAL
    )]
    Internal {
        /// The run.
        run_id: RunId,
        /// What failed.
        message: String,
    },
    /// The run cannot be resumed.
    #[error("run {run_id} cannot be resumed: {reason}")]
    NotResumable {
        /// The run.
        run_id: RunId,
        /// Why.
        reason: String,
    },
}

/// What a run needs besides its agent.
#[derive(Clone, Default)]
pub struct RunRequest {
    /// The run id; a new one when `None`.
    pub run_id: Option<RunId>,
    /// The tenant; `default` when `None`.
    pub tenant: Option<TenantId>,
    /// The task.
    pub input: String,
    /// Receives each event as it happens.
    pub observer: Option<Observer>,
    /// Cancels the run: its forward path stops at once (in-flight calls are
    /// aborted) and it settles like a failed run, ending `cancelled`.
    pub cancel: Option<CancellationToken>,
    /// The run was already recorded `queued` by [`Engine::enqueue`]: it is
    /// started, not created (a server accepts the work durably first, a
    /// worker drives it later).
    pub enqueued: bool,
    /// The idempotency reservation the run's creation is fenced on (a sync
    /// submission under an `Idempotency-Key`): the run is created only
    /// while the reservation is still its holder's
    /// ([`Store::create_run_held`]), else the run fails to start with
    /// [`StoreError::Conflict`]` { what: "idempotency reservation" }` and
    /// nothing ran. Ignored for an `enqueued` run, which exists already.
    pub reservation: Option<rein_store::ReservationFence>,
}

/// The end of a run.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The run.
    pub run_id: RunId,
    /// Its report; provisional (what it had done, not an outcome) when
    /// `interrupted`.
    pub report: RunReport,
    /// The run did not end: [`Engine::interrupt`] stopped it at a safe
    /// point. It is still `running` in the store with its claim released,
    /// and resumable ([`Engine::resume`]) by whoever its [`HandOn`] names.
    pub interrupted: bool,
}

/// Who continues the runs [`Engine::interrupt`] stops: recorded with each
/// run's `run_interrupted` event, read by the servers sharing the store
/// before they take a run over. Defined with the event it is recorded in.
pub use rein_core::event::HandOn;

/// State shared by all runs of an engine: breaker arms (health memory
/// across runs), retry budgets per target, the jitter source, and the
/// concurrency slots of resource groups.
struct Shared {
    breakers: Arc<Mutex<Breakers>>,
    retry_budgets: Mutex<HashMap<String, RetryBudget>>,
    rng: Mutex<StdRng>,
    slots: concurrency::GroupSlots,
    /// Concurrency slots per provider (`max_concurrency`), by name.
    provider_slots: concurrency::GroupSlots,
    /// Counters of every decision, per target.
    metrics: Arc<crate::metrics::Metrics>,
    live: tree::LiveRegistry,
    /// Provider breaker openings shared through the store, when on.
    shared_breakers: Option<Arc<shared_breakers::SharedBreakers>>,
    /// Fires when this process stops driving runs ([`Engine::interrupt`]).
    interrupt: CancellationToken,
    /// Who continues the runs the interrupt stopped; set by its first call.
    hand_on: std::sync::OnceLock<HandOn>,
}

impl Shared {
    fn breakers(&self) -> MutexGuard<'_, Breakers> {
        self.breakers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds an [`Engine`].
pub struct EngineBuilder {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    client: Option<reqwest::Client>,
    breakers: BreakersConfig,
    rng_seed: Option<u64>,
    claim_lease: Option<std::time::Duration>,
    claim_renewal: Option<std::time::Duration>,
    agents: Option<tree::AgentResolver>,
    tree_limits: tree::TreeLimits,
    /// This node's id and the refresh interval of shared breaker openings.
    shared_breakers: Option<(String, std::time::Duration)>,
    /// This engine's public node id; a fresh one when unset.
    node: Option<String>,
    #[cfg(feature = "sabotage")]
    sabotage: crate::sabotage::Sabotage,
}

impl EngineBuilder {
    /// Renews claims every `every` (the heartbeat), or every third of the
    /// lease if that is sooner.
    pub fn claim_renewal(mut self, every: std::time::Duration) -> Self {
        self.claim_renewal = Some(every);
        self
    }

    /// Lets `agent` tools start child runs: `resolve` binds an agent by
    /// name (a fresh binding per child run). Without it an agent tool
    /// fails with a structured `not_found`.
    pub fn agents(mut self, resolve: tree::AgentResolver) -> Self {
        self.agents = Some(resolve);
        self
    }

    /// Bounds every root run's agent tree (default: depth 3, 200,000
    /// tokens, 25 child runs).
    pub fn tree_limits(mut self, limits: tree::TreeLimits) -> Self {
        self.tree_limits = limits;
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

    /// Uses `clock` instead of the system clock.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
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
    /// [`EngineError::Http`] when the HTTP client cannot be built.
    pub fn build(self) -> Result<Engine, EngineError> {
        let client = match self.client {
            Some(c) => c,
            None => http_client().map_err(|e| EngineError::Http(e.to_string()))?,
        };
        let rng = match self.rng_seed {
            Some(seed) => StdRng::seed_from_u64(seed),
            None => StdRng::from_os_rng(),
        };
        let shared_breakers =
            shared_breakers::from_settings(self.shared_breakers, &self.store, &self.clock)?;
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
        Ok(Engine {
            node,
            command: crate::tool_command::CommandToolAdapter::new(self.store.clone()),
            store: self.store,
            clock: self.clock,
            http: HttpToolAdapter::new(client),
            shared: Shared {
                breakers: Arc::new(Mutex::new(Breakers::new(self.breakers)?)),
                retry_budgets: Mutex::new(HashMap::new()),
                rng: Mutex::new(rng),
                slots: concurrency::GroupSlots::default(),
                provider_slots: concurrency::GroupSlots::default(),
                metrics: Arc::default(),
                live: tree::LiveRegistry::default(),
                shared_breakers,
                interrupt: CancellationToken::new(),
                hand_on: std::sync::OnceLock::new(),
            },
            agents: self.agents,
            tree_limits: self.tree_limits,
            claim_lease: self.claim_lease,
            claim_renewal: self.claim_renewal,
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
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    http: HttpToolAdapter,
    command: crate::tool_command::CommandToolAdapter,
    shared: Shared,
    /// The renewed claim lease, when configured.
    claim_lease: Option<std::time::Duration>,
    /// How often the claim is renewed, at most a third of the lease.
    claim_renewal: Option<std::time::Duration>,
    /// Binds the agents that `agent` tools start.
    agents: Option<tree::AgentResolver>,
    /// Bounds of every agent tree.
    tree_limits: tree::TreeLimits,
    /// The public node id in this engine's claims.
    node: String,
    /// The mechanisms deliberately broken (test-only).
    #[cfg(feature = "sabotage")]
    sabotage: crate::sabotage::Sabotage,
}

/// One run's context, shared by its concurrent calls.
pub(crate) struct RunCtx<'a> {
    run_id: RunId,
    tenant: TenantId,
    input: String,
    agent: &'a AgentBinding,
    store: &'a Arc<dyn Store>,
    emitter: Emitter,
    /// Model calls made for this run, failed ones included (a scripted
    /// provider's position on resume).
    provider_calls: std::sync::atomic::AtomicU32,
    /// Input tokens of the last answered model call: the floor of the next
    /// prompt, which only grows.
    last_input_tokens: std::sync::atomic::AtomicU64,
    /// Cancels the forward path (never the settlement).
    cancel: CancellationToken,
    /// Fires when another process took the run's claim over: this process
    /// stops everything at once and records nothing more.
    lost: CancellationToken,
    /// Fires when this process stops driving runs ([`Engine::interrupt`]):
    /// the forward path stops at its next safe point and the run is handed
    /// on, unfinished; a settlement in progress finishes first.
    interrupt: CancellationToken,
    /// The identity of this process's claim on the run.
    claim_owner: String,
    /// Set once the run settles: from then on cancellation is ignored, so
    /// compensation always runs to its end.
    settling: std::sync::atomic::AtomicBool,
    /// Validates proposed calls (child runs validate with it too).
    validator: &'a dyn ArgValidator,
    /// Where the run sits in its agent tree.
    lineage: Lineage,
    /// What child runs started by this run's calls consumed, by intent,
    /// until the call's budget grant is settled with it.
    child_usage: std::sync::Mutex<HashMap<IntentId, Usage>>,
    /// The models that answered this run's turns (`provider/model`), in
    /// first-use order.
    models: std::sync::Mutex<Vec<String>>,
    /// Model retries made, their waits (ms) and the tokens failed model
    /// calls consumed, against [`ModelRetryLimits`].
    model_retries: ModelRetryUse,
}

/// What a run spent retrying model calls.
#[derive(Default)]
pub(crate) struct ModelRetryUse {
    retries: std::sync::atomic::AtomicU32,
    wait_ms: std::sync::atomic::AtomicU64,
    wasted_tokens: std::sync::atomic::AtomicU64,
}

/// A run's place in its agent tree: its parent, its depth (the root is 0)
/// and the tree's shared counters.
#[derive(Clone)]
pub(crate) struct Lineage {
    pub(crate) parent: Option<RunId>,
    pub(crate) depth: u32,
    pub(crate) tree: Arc<Tree>,
}

/// What a whole agent tree has used, shared by every run in it.
#[derive(Default)]
pub(crate) struct Tree {
    /// Child runs started.
    pub(crate) runs: std::sync::atomic::AtomicU32,
    /// Tokens used by every run of the tree.
    pub(crate) tokens: std::sync::atomic::AtomicU64,
}

impl Lineage {
    /// A root run: depth 0, a tree of its own.
    pub(crate) fn root() -> Lineage {
        Lineage {
            parent: None,
            depth: 0,
            tree: Arc::new(Tree::default()),
        }
    }
}

impl model_chain::TurnHost for RunCtx<'_> {
    fn emitter(&self) -> &Emitter {
        &self.emitter
    }

    fn cancelled(&self) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send + '_>> {
        Box::pin(RunCtx::cancelled(self))
    }

    fn interrupted(&self) -> bool {
        self.is_interrupted()
    }

    fn retry(&self) -> &RetryPolicy {
        &self.agent.retry
    }

    fn model_latency(&self) -> rein_core::LatencyProfile {
        self.agent.model_latency
    }

    fn provider_limits(&self) -> &std::collections::BTreeMap<String, std::num::NonZeroU32> {
        &self.agent.provider_limits
    }

    fn calling(&self) {
        self.provider_calls
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    }

    fn allow_model_retry(&self, delay: std::time::Duration) -> Result<(), String> {
        use std::sync::atomic::Ordering;
        let limits = self.agent.model_retry;
        let used = &self.model_retries;
        let retries = used.retries.load(Ordering::Acquire);
        if retries >= limits.max_retries {
            return Err(format!(
                "the run already retried model calls {retries} times (model_retry.max_retries = {})",
                limits.max_retries
            ));
        }
        let waited = std::time::Duration::from_millis(used.wait_ms.load(Ordering::Acquire));
        if waited + delay > limits.max_wait {
            return Err(format!(
                "waiting {delay:?} more would exceed the run's {:?} of model retry waits ({waited:?} used)",
                limits.max_wait
            ));
        }
        if let Some(max) = limits.max_wasted_tokens {
            let wasted = used.wasted_tokens.load(Ordering::Acquire);
            if wasted >= max {
                return Err(format!(
                    "failed model calls already consumed {wasted} tokens (model_retry.max_wasted_tokens = {max})"
                ));
            }
        }
        used.retries.fetch_add(1, Ordering::AcqRel);
        used.wait_ms.fetch_add(
            u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            Ordering::AcqRel,
        );
        Ok(())
    }

    fn spent(&self, tokens: u64) {
        self.model_retries
            .wasted_tokens
            .fetch_add(tokens, std::sync::atomic::Ordering::AcqRel);
        self.lineage
            .tree
            .tokens
            .fetch_add(tokens, std::sync::atomic::Ordering::AcqRel);
    }

    fn answered(&self, provider: &str, model: &str, usage: &crate::provider::TokenUsage) {
        self.last_input_tokens
            .store(usage.input, std::sync::atomic::Ordering::Release);
        self.lineage
            .tree
            .tokens
            .fetch_add(usage.total(), std::sync::atomic::Ordering::AcqRel);
        self.answered_by(provider, model);
    }
}

impl RunCtx<'_> {
    /// Records that `provider`'s `model` answered a turn.
    fn answered_by(&self, provider: &str, model: &str) {
        let name = format!("{provider}/{model}");
        let mut models = self
            .models
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if !models.contains(&name) {
            models.push(name);
        }
    }

    /// Records what the child run of `intent` consumed.
    fn record_child_usage(&self, intent: &IntentId, used: Usage) {
        self.child_usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(intent.clone(), used);
    }

    /// What the child run of `intent` consumed (zero for other calls).
    fn take_child_usage(&self, intent: &IntentId) -> Usage {
        self.child_usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(intent)
            .unwrap_or_default()
    }

    /// Resolves when the run's forward path is cancelled; never during
    /// settlement.
    async fn cancelled(&self) {
        if self.settling.load(std::sync::atomic::Ordering::Acquire) {
            return self.lost.cancelled().await;
        }
        tokio::select! {
            () = self.cancel.cancelled() => {}
            () = self.lost.cancelled() => {}
            () = self.interrupt.cancelled() => {}
        }
    }

    /// Resolves when a call of `class` in flight must be dropped: the
    /// forward path was cancelled or the claim lost, or, for a read only,
    /// the run is interrupted (a write is let finish). Never during
    /// settlement.
    async fn aborts(&self, class: ToolClass) {
        if class == ToolClass::Read {
            return self.cancelled().await;
        }
        if self.settling.load(std::sync::atomic::Ordering::Acquire) {
            return self.lost.cancelled().await;
        }
        tokio::select! {
            () = self.cancel.cancelled() => {}
            () = self.lost.cancelled() => {}
        }
    }

    /// Resolves once the run is interrupted ([`RunCtx::is_interrupted`]);
    /// never when it is cancelled or settling instead.
    async fn interrupted(&self) {
        self.interrupt.cancelled().await;
        if !self.is_interrupted() {
            std::future::pending::<()>().await;
        }
    }

    /// Whether the forward path was cancelled (or the claim lost, or the
    /// process is handing its runs on).
    fn is_cancelled(&self) -> bool {
        self.lost.is_cancelled()
            || ((self.cancel.is_cancelled() || self.interrupt.is_cancelled())
                && !self.settling.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Whether the forward path stops because the process is handing its
    /// runs on (and not because the caller cancelled it, which wins: a
    /// cancelled run settles and ends `cancelled`).
    fn is_interrupted(&self) -> bool {
        self.interrupt.is_cancelled()
            && !self.cancel.is_cancelled()
            && !self.lost.is_cancelled()
            && !self.settling.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Commits `commit` for this run; when the store refuses it, its events
    /// go back to the emitter so the next commit carries them.
    async fn commit(&self, mut commit: StepCommit) -> Result<rein_store::Committed, StoreError> {
        // Fenced by this process's claim: once another process took the
        // run over, nothing more is written from here.
        commit.expect_claim = Some(rein_store::ClaimFence {
            lease_id: claim_id(&self.run_id),
            owner: self.claim_owner.clone(),
        });
        let events = commit.events.clone();
        let result = self.store.commit_step(&self.run_id, commit).await;
        match &result {
            Ok(_) => {}
            Err(StoreError::Conflict {
                what: "run claim", ..
            }) => {
                tracing::warn!(run = %self.run_id, "the run's claim was taken over; stopping here");
                self.lost.cancel();
            }
            Err(_) => self.emitter.requeue(events),
        }
        result
    }
}

/// How often the end of a run is offered to a store that is briefly
/// unavailable, and the first pause (doubled each time): the one write
/// that must land, or the run stays `running` until an orphan sweep.
const END_COMMIT_TRIES: u32 = 6;
const END_COMMIT_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

/// How a refusal of cut-off arguments begins (the truncation event finds
/// them by it).
const CUT_ARGUMENTS: &str = "the arguments were cut off";

/// Output tokens a model call must have room for to be worth making: below
/// this the answer is all but certain to be cut off, so the run ends
/// `budget_exhausted` instead of paying for a truncated turn.
pub const MIN_OUTPUT_TOKENS: u64 = 64;

/// Releases a run's claim when dropped while armed: a resume that stopped
/// before it was recorded must not keep the run locked until the claim
/// expires.
struct ClaimGuard {
    store: Arc<dyn Store>,
    lease_id: String,
    owner: String,
    armed: bool,
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        // Unwinding from a panic: the run's boundary takes the claim back
        // to settle the run (`contain`), so it is not let go here.
        if !self.armed || std::thread::panicking() {
            return;
        }
        let (store, lease_id, owner) = (
            self.store.clone(),
            std::mem::take(&mut self.lease_id),
            std::mem::take(&mut self.owner),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store.release_lease_of(&lease_id, &owner).await {
                    tracing::warn!(lease = %lease_id, "cannot release an abandoned claim: {e}");
                }
            });
        }
    }
}

/// Stops a run's heartbeat when dropped (the run ended, or its future was
/// dropped).
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The lease id of a process's claim on a run.
fn claim_id(run_id: &RunId) -> String {
    format!("run:{run_id}")
}

/// A fresh, time-ordered id.
pub(crate) fn new_id<T: TryFrom<String, Error = IdError>>() -> T {
    match T::try_from(uuid::Uuid::now_v7().to_string()) {
        Ok(id) => id,
        Err(_) => unreachable!("a UUID is a valid identifier"),
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
            agents: None,
            tree_limits: tree::TreeLimits::default(),
            shared_breakers: None,
            node: None,
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

    /// The counters of every decision this engine made (runs and gateway
    /// calls alike), for an operator's scraper.
    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.shared.metrics
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
    /// [`RunOutput::interrupted`] is true. A run already settling its
    /// effects finishes settling and ends normally. Runs started afterwards
    /// are interrupted at once. The first call's `to` holds for the rest of
    /// the engine's life.
    pub fn interrupt(&self, to: HandOn) {
        let _ = self.shared.hand_on.set(to);
        self.shared.interrupt.cancel();
    }

    /// Whether [`Engine::interrupt`] was called.
    pub fn is_interrupted(&self) -> bool {
        self.shared.interrupt.is_cancelled()
    }

    /// Claims `run_id` for this process: only one process drives a run at a
    /// time, so two resumes (or a resume while the original process still
    /// lives) cannot both replay its step. A claim whose owner is dead is
    /// taken over.
    async fn claim(
        &self,
        run_id: &RunId,
        hold: std::time::Duration,
    ) -> Result<String, EngineError> {
        use crate::lease::Owner;
        use rein_store::{Lease, LeaseKind};
        let now_ms = unix_ms(self.clock.system_now());
        // The claim's own identity: this process, the public node id and a
        // token, so renewals and the release are fenced to this claim, not
        // any claim of the process (`crate::lease::claim_node` reads the
        // node back).
        let owner = format!(
            "{}#{}.{}",
            Owner::current(),
            self.node,
            uuid::Uuid::now_v7().simple()
        );
        let lease = Lease {
            lease_id: claim_id(run_id),
            run_id: run_id.clone(),
            intent_id: None,
            kind: LeaseKind::Run,
            pgid: None,
            path: None,
            owner: owner.clone(),
            acquired_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(millis(hold)),
        };
        match self.store.acquire_lease(lease.clone()).await {
            Ok(_) => return Ok(owner),
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let held = self
            .store
            .leases_of_run(run_id)
            .await?
            .into_iter()
            .find(|l| l.kind == LeaseKind::Run);
        if let Some(held) = held {
            // Taken over when its lease ran out (the owner stopped renewing
            // it: dead, or cut off), or when the owner is provably gone (a
            // process of this machine and pid namespace that no longer
            // runs: `Owner::is_gone`). An owner elsewhere, or one we cannot
            // identify, is alive until its lease says otherwise: refusing is
            // safe, taking over is not.
            let expired = held.expires_at_ms <= now_ms;
            let dead_here = Owner::is_gone_id(&held.owner);
            if !expired && !dead_here {
                return Err(EngineError::NotResumable {
                    run_id: run_id.clone(),
                    // The public node id only: the owner's process id and
                    // host stay in the store and the log.
                    reason: format!(
                        "it is being driven by a live process (node {})",
                        crate::lease::claim_node(&held.owner).unwrap_or("unknown")
                    ),
                });
            }
            if expired {
                // One atomic step: of two takers, one wins; a stalled owner
                // that wakes up finds its renewals refused.
                return if self.store.take_over_lease(lease, now_ms).await? {
                    Ok(owner)
                } else {
                    Err(EngineError::NotResumable {
                        run_id: run_id.clone(),
                        reason: "another process took it over at the same moment".into(),
                    })
                };
            }
            // Its owner is a dead process of this host: nobody renews it.
            self.store
                .release_lease_of(&held.lease_id, &held.owner)
                .await?;
        }
        match self.store.acquire_lease(lease).await {
            Ok(_) => Ok(owner),
            Err(StoreError::Conflict { .. }) => Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "another process claimed it at the same moment".into(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// How long a claim holds before it must be renewed.
    fn claim_hold(&self, agent: &AgentBinding) -> std::time::Duration {
        self.claim_lease
            .unwrap_or(agent.budget.wall_clock() + CLAIM_MARGIN)
    }

    /// Renews the run's claim every third of the lease while the returned
    /// guard lives: the heartbeat that tells other processes this run's
    /// owner is alive. Without a configured lease, nothing.
    fn heartbeat(
        &self,
        run_id: &RunId,
        owner: &str,
        lost: &CancellationToken,
    ) -> Option<Heartbeat> {
        let lease = self.claim_lease?;
        let owner = owner.to_owned();
        let lost = lost.clone();
        let store = self.store.clone();
        let clock = self.clock.clone();
        let lease_id = claim_id(run_id);
        let run = run_id.clone();
        let every = self.claim_renewal.map_or(lease / 3, |r| r.min(lease / 3));
        let task = tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                let until = unix_ms(clock.system_now()).saturating_add(millis(lease));
                match store.renew_lease_of(&lease_id, &owner, until).await {
                    Ok(true) => {}
                    // Taken over after a stall: another process drives the
                    // run now. This one stops at once, without settling or
                    // recording anything more.
                    Ok(false) => {
                        tracing::warn!(run = %run, "the run's claim was taken over; stopping here");
                        lost.cancel();
                        return;
                    }
                    // Transient: the next beat tries again.
                    Err(e) => tracing::warn!(run = %run, "cannot renew the run's claim: {e}"),
                }
            }
        });
        Some(Heartbeat(task))
    }

    /// Records a run of `agent` as `queued`, durably, without starting it:
    /// [`Engine::run`] with [`RunRequest::enqueued`] starts it later, in
    /// this process or another one sharing the store.
    ///
    /// # Errors
    ///
    /// [`EngineError::Store`] when the store refuses the record.
    pub async fn enqueue(
        &self,
        agent: &AgentBinding,
        tenant: TenantId,
        input: String,
        run_id: Option<RunId>,
    ) -> Result<RunId, EngineError> {
        let run = self.queued_run(agent, tenant, input, run_id);
        let run_id = run.run_id.clone();
        self.store.create_run(run).await?;
        Ok(run_id)
    }

    /// The record [`Engine::enqueue`] creates for a run of `agent`, for a
    /// caller that stores it together with something else in one write
    /// (a keyed submission: [`Store::submit_queued`]). A worker starts it
    /// like any enqueued run.
    pub fn queued_run(
        &self,
        agent: &AgentBinding,
        tenant: TenantId,
        input: String,
        run_id: Option<RunId>,
    ) -> NewRun {
        NewRun {
            run_id: run_id.unwrap_or_else(new_id::<RunId>),
            tenant,
            agent: agent.name.clone(),
            input,
            parent_run_id: None,
            budget: json!(agent.budget),
            created_at_ms: unix_ms(self.clock.system_now()),
        }
    }

    /// Runs `agent` on a task to its end.
    ///
    /// # Errors
    ///
    /// [`EngineError`] when the run cannot start (the store refuses to
    /// record it, or the agent's settings are invalid), and
    /// [`EngineError::Store`] when its end cannot be recorded (the ledger
    /// its report comes from cannot be read, or the store refuses the end):
    /// the run then exists, `running` with its claim released, and is
    /// recovered like one whose process died. Everything else that happens
    /// once it started ends in the returned report.
    pub async fn run(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        request: RunRequest,
    ) -> Result<RunOutput, EngineError> {
        self.run_in(agent, validator, request, Lineage::root())
            .await
    }

    /// A run at its place in an agent tree. A panic inside it is caught
    /// here, at its boundary: the run ends `failed` (`error_type`
    /// `internal`) with its effects settled, and the caller (a queue
    /// worker, a parent run) lives on (see [`contain`]).
    pub(crate) async fn run_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        mut request: RunRequest,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        use futures_util::FutureExt as _;
        let run_id = request.run_id.clone().unwrap_or_else(new_id::<RunId>);
        request.run_id = Some(run_id.clone());
        // AssertUnwindSafe is sound here: nothing the run shares is left
        // half-changed by an unwind. Its mutexes are read with
        // `unwrap_or_else(PoisonError::into_inner)` and hold whole values;
        // governor permits and concurrency slots are guards dropped while
        // unwinding; its claim is released (or taken back by `contain`)
        // through the store, not through state in memory: a `ClaimGuard` is
        // one of the future's live locals, dropped by the unwinding poll
        // itself while `std::thread::panicking()` holds, so it leaves the
        // claim to `contain`; the heartbeat task is aborted with its guard;
        // and `contain` reads the run back from the store only.
        let started =
            std::panic::AssertUnwindSafe(self.start_in(agent, validator, request, lineage.clone()))
                .catch_unwind()
                .await;
        match started {
            Ok(result) => result,
            Err(panic) => {
                self.contain(
                    agent,
                    validator,
                    &run_id,
                    contain::message(&*panic),
                    lineage,
                )
                .await
            }
        }
    }

    /// [`Engine::run_in`] without the panic boundary.
    async fn start_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        request: RunRequest,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        crate::crash::panic_point("run_start", &agent.name);
        let run_id = request.run_id.unwrap_or_else(new_id::<RunId>);
        let tenant = match request.tenant {
            Some(t) => t,
            None => TenantId::new("default").map_err(|e| EngineError::Http(e.to_string()))?,
        };
        let guard = LoopGuard::new(agent.loop_guard.clone())?;
        let started = self.clock.now();
        // The forward path runs on the wall clock minus the compensation
        // reserve; compensation may use everything up to the full deadline.
        let full_deadline = Budget::start(agent.budget, started).deadline();
        let forward_wall = agent.budget.wall_clock()
            - agent
                .compensation_reserve
                .of_duration(agent.budget.wall_clock());
        let forward_limits = agent
            .budget
            .with_wall_clock(forward_wall)
            .unwrap_or(agent.budget);
        let budget = Budget::start(forward_limits, started);
        let at_ms = unix_ms(self.clock.system_now());
        // Queued work waits for a process that is not stopping.
        if request.enqueued && self.is_interrupted() {
            return Err(EngineError::NotResumable {
                run_id,
                reason: "this process is stopping; it stays queued".into(),
            });
        }
        if request.enqueued {
            match self.store.get_run(&run_id).await? {
                Some(record)
                    if record.status == RunStatus::Queued && record.agent == agent.name => {}
                Some(record) => {
                    return Err(EngineError::NotResumable {
                        run_id,
                        reason: format!(
                            "it is {} (agent `{}`), not a queued run of `{}`",
                            record.status.as_str(),
                            record.agent,
                            agent.name
                        ),
                    });
                }
                None => {
                    return Err(EngineError::NotResumable {
                        run_id,
                        reason: "no such queued run".into(),
                    });
                }
            }
        } else {
            let new = NewRun {
                run_id: run_id.clone(),
                tenant: tenant.clone(),
                agent: agent.name.clone(),
                input: request.input.clone(),
                parent_run_id: lineage.parent.clone(),
                budget: json!(agent.budget),
                created_at_ms: at_ms,
            };
            match &request.reservation {
                Some(fence) => self.store.create_run_held(new, fence).await?,
                None => self.store.create_run(new).await?,
            };
        }
        let owner = self.claim(&run_id, self.claim_hold(agent)).await?;
        let lost = CancellationToken::new();
        let _heartbeat = self.heartbeat(&run_id, &owner, &lost);
        let ctx = RunCtx {
            run_id: run_id.clone(),
            tenant,
            input: request.input.clone(),
            agent,
            store: &self.store,
            emitter: Emitter::new(run_id.clone(), self.clock.clone(), request.observer)
                .with_metrics(self.shared.metrics.clone()),
            provider_calls: std::sync::atomic::AtomicU32::new(0),
            last_input_tokens: std::sync::atomic::AtomicU64::new(0),
            cancel: request.cancel.unwrap_or_default(),
            lost,
            interrupt: self.shared.interrupt.clone(),
            claim_owner: owner,
            settling: std::sync::atomic::AtomicBool::new(false),
            validator,
            lineage,
            child_usage: std::sync::Mutex::new(HashMap::new()),
            models: std::sync::Mutex::new(Vec::new()),
            model_retries: ModelRetryUse::default(),
        };
        let _live = self.shared.live.register(&run_id, &ctx.cancel);
        ctx.emitter.emit(
            &Correlation::default(),
            RunStarted {
                agent: agent.name.clone(),
                model: agent.model.clone(),
                provider: agent.provider.name().to_owned(),
                budget: agent.budget,
                tools: agent.tools.keys().cloned().collect(),
                input: request.input.clone(),
                enqueued: request.enqueued,
            },
        );
        let status = StepCommit {
            status: Some(StatusChange {
                status: RunStatus::Running,
                report: None,
                at_ms,
            }),
            events: ctx.emitter.drain(),
            // Only a run still queued starts: a cancellation (or another
            // starter) that got there first wins, atomically.
            expect_status: Some(RunStatus::Queued),
            ..StepCommit::default()
        };
        match self.store.commit_step(&run_id, status).await {
            Ok(_) => {}
            Err(StoreError::Conflict {
                what: "run status", ..
            }) => {
                if let Err(e) = self
                    .store
                    .release_lease_of(&claim_id(&run_id), &ctx.claim_owner)
                    .await
                {
                    tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
                }
                return Err(EngineError::NotResumable {
                    run_id,
                    reason: "it stopped being queued before it started (cancelled?)".into(),
                });
            }
            Err(e) => return Err(e.into()),
        }

        let state = LoopState {
            budget,
            full_deadline,
            started,
            elapsed_before_ms: 0,
            guard,
            messages: vec![
                Message::System {
                    content: agent.system_prompt.clone(),
                },
                Message::User {
                    content: request.input,
                },
            ],
            calls: Vec::new(),
            facts: BTreeSet::new(),
            tools_tried: BTreeSet::new(),
            step: 0,
            resume: None,
        };
        self.drive(&ctx, validator, state, None, None).await
    }

    /// Continues a run that stopped mid-way (its process crashed or was
    /// killed) from its last checkpoint, with what is left of its budget.
    ///
    /// Completed steps are not run again. The interrupted step's persisted
    /// plan is replayed with its original intent ids and idempotency keys:
    /// an effect already recorded is not repeated, an idempotent write in
    /// doubt runs again with its key (the tool deduplicates), an
    /// irreversible call in doubt is never repeated. The report carries a
    /// [`ResumeMarker`](rein_core::outcome::ResumeMarker).
    ///
    /// # Errors
    ///
    /// [`EngineError::NotResumable`] for an unknown or finished run, or one
    /// of another agent; [`EngineError::Store`] when its state cannot be read.
    pub async fn resume(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
    ) -> Result<RunOutput, EngineError> {
        let lineage = self.lineage_of(run_id).await?;
        self.resume_in(agent, validator, run_id, observer, None, lineage)
            .await
    }

    /// [`Engine::resume`], cancellable like a run started with
    /// [`RunRequest::cancel`].
    ///
    /// # Errors
    ///
    /// As [`Engine::resume`].
    pub async fn resume_cancellable(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
    ) -> Result<RunOutput, EngineError> {
        let lineage = self.lineage_of(run_id).await?;
        self.resume_in(agent, validator, run_id, observer, cancel, lineage)
            .await
    }

    /// A resume at its place in an agent tree, within the same panic
    /// boundary as [`Engine::run_in`].
    pub(crate) async fn resume_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        use futures_util::FutureExt as _;
        // AssertUnwindSafe: sound for the reasons given in `run_in`.
        let resumed = std::panic::AssertUnwindSafe(self.continue_in(
            agent,
            validator,
            run_id,
            observer,
            cancel,
            lineage.clone(),
        ))
        .catch_unwind()
        .await;
        match resumed {
            Ok(result) => result,
            Err(panic) => {
                self.contain(agent, validator, run_id, contain::message(&*panic), lineage)
                    .await
            }
        }
    }

    /// [`Engine::resume_in`] without the panic boundary.
    async fn continue_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        if self.is_interrupted() {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "this process is stopping".into(),
            });
        }
        let Some(record) = self.store.get_run(run_id).await? else {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "no such run".into(),
            });
        };
        // A finished run continues only when its report says a retry can
        // run without repeating side effects (partial success after a
        // rate limit, a budget raised since): its outcome is reopened.
        let reopen = record.status.is_finished();
        // A run that succeeded has nothing left to do: reopening it would
        // drive its last step again (a second model call, a second end).
        if record.status == RunStatus::Finished(Outcome::Succeeded) {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "it succeeded; there is nothing left to continue".into(),
            });
        }
        if reopen && !record.report.as_ref().is_some_and(|r| r.recoverable) {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: format!(
                    "it ended {} and is not recoverable; its outcome is final",
                    record.status.as_str()
                ),
            });
        }
        if record.agent != agent.name {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: format!(
                    "it is a run of agent `{}`, not `{}`",
                    record.agent, agent.name
                ),
            });
        }
        let owner = self.claim(run_id, self.claim_hold(agent)).await?;
        // Any early return from here until the resume is recorded lets the
        // claim go, so a store hiccup does not lock the run out until the
        // claim expires.
        let mut claimed = ClaimGuard {
            store: self.store.clone(),
            lease_id: claim_id(run_id),
            owner: owner.clone(),
            armed: true,
        };
        // Under the claim the status is authoritative (an owner records a
        // run's end before it lets its claim go): a run that ended or was
        // resumed by someone else between the read above and the claim is
        // left alone.
        let now_status = self.store.get_run(run_id).await?.map(|r| r.status);
        if now_status != Some(record.status) {
            claimed.armed = false;
            if let Err(e) = self.store.release_lease_of(&claim_id(run_id), &owner).await {
                tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
            }
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: format!(
                    "it changed while it was being claimed (it is now {})",
                    now_status.map_or("gone", RunStatus::as_str)
                ),
            });
        }
        let lost = CancellationToken::new();
        let _heartbeat = self.heartbeat(run_id, &owner, &lost);
        // Whatever the crashed process started (a command's process group,
        // its temp dir) is ended before anything is replayed or settled, so
        // a forward effect cannot land after its own compensation.
        let reaped = crate::lease::Reaper::new()
            .reap_run(self.store.as_ref(), run_id)
            .await?;
        let checkpoint = self.store.latest_checkpoint(run_id).await?;
        let intents = self.store.intents(run_id).await?;
        let ledger: HashMap<IntentId, LedgerRecord> = self
            .store
            .ledger(run_id)
            .await?
            .into_iter()
            .map(|r| (r.intent_id.clone(), r))
            .collect();
        let guard = LoopGuard::new(agent.loop_guard.clone())?;

        let events = self.store.events(run_id, 0).await?;
        let done_step = checkpoint.as_ref().map_or(0, |c| c.step);
        // A settlement that started is finished, never rolled forward.
        let settling = events
            .iter()
            .any(|e| e.kind() == EventKind::SettlementStarted)
            .then(|| End::Settling("an interrupted settlement was resumed".into()));
        // What the interrupted step consumed before the crash (its model
        // turn is durable with the plan) and the time it ran: charged, so a
        // crash never refunds budget.
        let after_checkpoint: Vec<&rein_core::Event> =
            events.iter().filter(|e| e.step > done_step).collect();
        // Failed calls count too: what a cut stream consumed is charged.
        let model_calls =
            |events: &[&rein_core::Event]| -> Vec<rein_core::event::ModelCallFinished> {
                events
                    .iter()
                    .filter_map(|e| match &e.data {
                        EventData::ModelCallFinished(f) => Some(f.clone()),
                        _ => None,
                    })
                    .collect()
            };
        let interrupted_calls = model_calls(&after_checkpoint);
        let interrupted_tokens: (u64, u64) = interrupted_calls.iter().fold((0, 0), |(i, o), f| {
            (i + f.input_tokens(), o + f.output_tokens())
        });
        let last_input_tokens = events
            .iter()
            .rev()
            .find_map(|e| match &e.data {
                EventData::ModelCallFinished(f) if f.ok() => Some(f.input_tokens()),
                _ => None,
            })
            .unwrap_or(0);
        let since_ms = checkpoint
            .as_ref()
            .map_or(record.created_at_ms, |c| c.at_ms);
        let interrupted_ms = after_checkpoint
            .iter()
            .map(|e| e.at_ms)
            .max()
            .map_or(0, |last| last.saturating_sub(since_ms));
        let state_json = checkpoint
            .as_ref()
            .map(|c| c.state.clone())
            .unwrap_or(Value::Null);
        let messages: Vec<Message> = checkpoint
            .as_ref()
            .and_then(|c| serde_json::from_value(c.messages.clone()).ok())
            .unwrap_or_else(|| {
                vec![
                    Message::System {
                        content: agent.system_prompt.clone(),
                    },
                    Message::User {
                        content: record.input.clone(),
                    },
                ]
            });
        let calls: Vec<CallResult> =
            serde_json::from_value(state_json["calls"].clone()).unwrap_or_default();
        let facts: BTreeSet<String> =
            serde_json::from_value(state_json["facts"].clone()).unwrap_or_default();
        let tools_tried: BTreeSet<String> =
            serde_json::from_value(state_json["tools_tried"].clone()).unwrap_or_default();
        let provider_calls = state_json["provider_calls"].as_u64().unwrap_or(0);
        let elapsed_before_ms = checkpoint.as_ref().map_or(0, |c| c.elapsed_ms) + interrupted_ms;
        let mut consumed = checkpoint.as_ref().map(|c| c.consumed).unwrap_or_default();
        consumed.tokens = consumed
            .tokens
            .saturating_add(interrupted_tokens.0 + interrupted_tokens.1);
        // At the price of the model that answered (a fallback may cost
        // more than the primary), as each call recorded it; the primary's
        // price only for calls recorded before calls carried their cost.
        let interrupted_cost =
            interrupted_calls
                .iter()
                .fold(rein_core::deadline::Cost::default(), |sum, f| {
                    let cost = match f.cost {
                        Some(cost) => cost,
                        None => agent
                            .price
                            .map(|p| p.cost(f.input_tokens(), f.output_tokens()))
                            .unwrap_or_default(),
                    };
                    sum.saturating_add(cost)
                });
        consumed.cost = consumed.cost.saturating_add(interrupted_cost);

        // The interrupted step: its plan, if it was persisted.
        let mut planned: Vec<PlannedIntent> = intents
            .into_iter()
            .filter(|(step, _)| *step == done_step + 1)
            .map(|(_, intent)| intent)
            .collect();
        planned.sort_by_key(|i| i.ordinal);
        let resumed = (!planned.is_empty() && settling.is_none()).then(|| ResumedTurn {
            response: ModelResponse {
                text: None,
                tool_calls: planned
                    .iter()
                    .map(|i| crate::provider::ToolCall {
                        id: i.call_id.clone(),
                        name: i.tool.clone(),
                        arguments: i.args.to_string(),
                    })
                    .collect(),
                finish: FinishReason::ToolCalls,
                usage: Default::default(),
            },
            intent_ids: planned.iter().map(|i| Some(i.intent_id.clone())).collect(),
            prior: planned
                .iter()
                .filter_map(|i| {
                    ledger
                        .get(&i.intent_id)
                        .map(|r| (i.intent_id.clone(), r.clone()))
                })
                .collect(),
        });
        // The model has served the checkpointed calls, and the interrupted
        // step's turn when its plan exists.
        let served = provider_calls + u64::from(resumed.is_some());
        agent
            .provider
            .resume_at(usize::try_from(served).unwrap_or(usize::MAX));

        // The budget is not reset: what the checkpoint consumed is charged,
        // and only the active time that remained is available.
        let started = self.clock.now();
        let forward_wall = agent.budget.wall_clock()
            - agent
                .compensation_reserve
                .of_duration(agent.budget.wall_clock());
        let left = forward_wall
            .saturating_sub(std::time::Duration::from_millis(elapsed_before_ms))
            .max(std::time::Duration::from_millis(1));
        let reserve = agent
            .compensation_reserve
            .of_duration(agent.budget.wall_clock());
        let full_deadline = rein_core::deadline::Deadline::after(started, left + reserve);
        let mut budget = Budget::start(agent.budget.with_wall_clock(left)?, started);
        let _ = budget.charge(consumed, started);

        let (not_reexecuted, reexecuted): (Vec<IntentId>, Vec<IntentId>) = resumed
            .as_ref()
            .map(|t| {
                t.intent_ids.iter().flatten().cloned().partition(|id| {
                    // Run again: a write in doubt (under its key), and a
                    // call its interrupted process never sent.
                    t.prior.get(id).is_some_and(|r| {
                        let again = (r.status == rein_core::LedgerStatus::Pending
                            && r.class == ToolClass::IdempotentWrite)
                            || guarded::is_unsent(r);
                        !again
                    })
                })
            })
            .unwrap_or_default();
        let reexecuted_with_same_key: Vec<IntentId> = reexecuted
            .into_iter()
            .filter(|id| resumed.as_ref().is_some_and(|t| t.prior.contains_key(id)))
            .collect();
        let marker = rein_core::outcome::ResumeMarker {
            continued_from_step: done_step,
            steps_skipped: done_step,
            reused_intents: resumed
                .as_ref()
                .map(|t| t.intent_ids.iter().flatten().cloned().collect())
                .unwrap_or_default(),
            not_reexecuted,
            reexecuted_with_same_key,
            maybe_duplicated: false,
            note: format!(
                "continued after step {done_step}; completed steps were not run again; effects in doubt were repeated only with their original idempotency keys, irreversible ones never"
            ),
        };
        // What the run already spent retrying model calls stays spent.
        let retried_so_far = ModelRetryUse::default();
        for e in &events {
            if let EventData::RetryScheduled(r) = &e.data
                && matches!(r.target, RetryTarget::Provider(_))
            {
                retried_so_far
                    .retries
                    .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                retried_so_far
                    .wait_ms
                    .fetch_add(millis(r.delay), std::sync::atomic::Ordering::AcqRel);
            }
            if let EventData::ModelCallFinished(f) = &e.data
                && let rein_core::event::ModelCallResult::Failed(failed) = &f.result
            {
                retried_so_far
                    .wasted_tokens
                    .fetch_add(failed.tokens_spent, std::sync::atomic::Ordering::AcqRel);
            }
        }
        // The models that answered before the interruption stay on record.
        let mut answered_so_far: Vec<String> = Vec::new();
        for e in &events {
            if let EventData::ModelCallFinished(f) = &e.data
                && f.ok()
            {
                let name = format!("{}/{}", f.provider, f.model);
                if !answered_so_far.contains(&name) {
                    answered_so_far.push(name);
                }
            }
        }
        let ctx = RunCtx {
            run_id: run_id.clone(),
            tenant: record.tenant.clone(),
            input: record.input.clone(),
            agent,
            store: &self.store,
            emitter: Emitter::new(run_id.clone(), self.clock.clone(), observer)
                .with_metrics(self.shared.metrics.clone()),
            provider_calls: std::sync::atomic::AtomicU32::new(
                u32::try_from(served).unwrap_or(u32::MAX),
            ),
            last_input_tokens: std::sync::atomic::AtomicU64::new(last_input_tokens),
            cancel: cancel.unwrap_or_default(),
            lost,
            interrupt: self.shared.interrupt.clone(),
            claim_owner: owner,
            settling: std::sync::atomic::AtomicBool::new(false),
            validator,
            lineage,
            child_usage: std::sync::Mutex::new(HashMap::new()),
            models: std::sync::Mutex::new(answered_so_far),
            model_retries: retried_so_far,
        };
        let _live = self.shared.live.register(run_id, &ctx.cancel);
        ctx.emitter.emit(
            &Correlation {
                step: done_step,
                ..Correlation::default()
            },
            RunResumed {
                marker: marker.clone(),
                remaining: budget.remaining(started),
                reclaimed_leases: reaped.reclaimed.len(),
                leases_left: reaped.skipped.len(),
            },
        );
        let commit = StepCommit {
            reopen,
            // Atomic with the claim check above: nobody changed it since.
            expect_status: Some(record.status),
            status: Some(StatusChange {
                status: RunStatus::Running,
                report: None,
                at_ms: unix_ms(self.clock.system_now()),
            }),
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        if let Err(e) = self.store.commit_step(run_id, commit).await {
            // Not resumed: the guard lets the claim go.
            return Err(match e {
                StoreError::Conflict {
                    what: "run status", ..
                } => EngineError::NotResumable {
                    run_id: run_id.clone(),
                    reason: "it changed while it was being resumed".into(),
                },
                other => other.into(),
            });
        }
        claimed.armed = false;
        let state = LoopState {
            budget,
            full_deadline,
            started,
            elapsed_before_ms,
            guard,
            messages,
            calls,
            facts,
            tools_tried,
            step: done_step,
            resume: Some(marker),
        };
        self.drive(&ctx, validator, state, resumed, settling).await
    }

    /// The loop: from `state` (fresh or restored from a checkpoint) to the
    /// run's end, its settlement and its final record (see
    /// [`Engine::conclude`] for when that cannot be recorded).
    async fn drive(
        &self,
        ctx: &RunCtx<'_>,
        validator: &dyn ArgValidator,
        state: LoopState,
        mut resumed: Option<ResumedTurn>,
        settling: Option<End>,
    ) -> Result<RunOutput, EngineError> {
        let agent = ctx.agent;
        let run_id = ctx.run_id.clone();
        let LoopState {
            mut budget,
            full_deadline,
            started,
            elapsed_before_ms,
            mut guard,
            mut messages,
            mut calls,
            mut facts,
            mut tools_tried,
            mut step,
            resume,
        } = state;

        // The steps checkpointed so far: what an interrupted run has done.
        let mut completed_steps = step;
        let end = if let Some(end) = settling {
            end
        } else {
            loop {
                let now = self.clock.now();
                if ctx.is_interrupted() {
                    break End::Interrupted;
                }
                if ctx.is_cancelled() {
                    ctx.emitter.emit(
                        &Correlation {
                            step,
                            ..Correlation::default()
                        },
                        RunCancelled {
                            reason: "cancelled by the caller".into(),
                            at_step_boundary: Some(true),
                            aborted: None,
                            provider: None,
                        },
                    );
                    break End::Cancelled("cancelled by the caller".into());
                }
                if let Verdict::Trip(trip) = guard.check_budget(&budget, now) {
                    let exhausted = match trip {
                        rein_core::loop_guard::Trip::Budget(e) => e,
                        _ => wall_clock_exhausted(),
                    };
                    ctx.emitter.emit(
                        &Correlation {
                            step,
                            ..Correlation::default()
                        },
                        BudgetExhausted {
                            used: Some(budget.used()),
                            ..BudgetExhausted::new(BudgetScope::Run, exhausted)
                        },
                    );
                    break End::Budget(exhausted);
                }
                step += 1;
                let _ = budget.charge(Usage::ONE_STEP, now);
                let c = Correlation {
                    step,
                    ..Correlation::default()
                };

                // A resumed turn replays its persisted plan instead of asking
                // the model again: the intents, their ids and keys are durable.
                let (response, prior, prior_ids, price) = match resumed.take() {
                    Some(turn) => (turn.response, turn.prior, turn.intent_ids, agent.price),
                    None => match self.model_turn(ctx, &messages, &mut budget, step).await {
                        Ok((response, price)) => (response, HashMap::new(), Vec::new(), price),
                        // A turn cut short by the hand-on is not a failure
                        // of the model: the step runs again on resume.
                        Err(_) if ctx.is_interrupted() => break End::Interrupted,
                        Err(end) => break end,
                    },
                };
                let cost = price
                    .map(|p| p.cost(response.usage.input, response.usage.output))
                    .unwrap_or_default();
                let usage = Usage {
                    steps: 0,
                    tokens: response.usage.total(),
                    cost,
                };
                let charged = budget.charge(usage, self.clock.now());
                messages.push(Message::Assistant {
                    content: response.text.clone(),
                    tool_calls: response.tool_calls.clone(),
                });
                if let Err(exhausted) = charged {
                    ctx.emitter.emit(
                        &c,
                        BudgetExhausted {
                            used: Some(budget.used()),
                            proposed_calls_not_run: Some(response.tool_calls.len()),
                            ..BudgetExhausted::new(BudgetScope::ModelTurn, exhausted)
                        },
                    );
                    break End::Budget(exhausted);
                }
                if response.tool_calls.is_empty() {
                    if response.finish == FinishReason::Length {
                        break End::ModelFailed(
                            Category::Unknown,
                            "the final answer was cut off at the output-token limit".into(),
                        );
                    }
                    if response.finish == FinishReason::ContentFilter {
                        break End::ModelFailed(
                            Category::ContentBlocked,
                            "the final answer was stopped by a content filter".into(),
                        );
                    }
                    break End::Answer(response.text);
                }

                // Validate and plan: intent ids are assigned and persisted
                // before anything runs.
                // Replies are matched to calls by position, not by the model's
                // call id: a model may repeat an id, and a completed write must
                // never be reported to it as failed.
                let mut planned = Vec::new();
                let mut replies: Vec<Option<String>> = vec![None; response.tool_calls.len()];
                let mut observed: Vec<(String, Value)> = Vec::new();
                let mut rejected_failures: Vec<(String, String)> = Vec::new();
                for (position, call) in response.tool_calls.iter().enumerate() {
                    match self.validate_call(ctx, &guard, validator, call, step, position) {
                        Ok(mut p) => {
                            if let Some(Some(id)) = prior_ids.get(position) {
                                p.intent_id = id.clone();
                            }
                            observed.push((p.tool.clone(), p.args.clone()));
                            planned.push(p);
                        }
                        Err((clarification, args, reason)) => {
                            observed.push((call.name.clone(), args));
                            rejected_failures.push((call.name.clone(), reason));
                            replies[position] = Some(clarification);
                        }
                    }
                }
                // A cut turn is said so, call by call: salvaged (a read's
                // complete fields) or asked again (never a write from partial
                // arguments).
                let salvaged = planned.iter().filter(|p| p.salvaged).count();
                let asked_again: Vec<&str> = rejected_failures
                    .iter()
                    .filter(|(_, reason)| reason.starts_with(CUT_ARGUMENTS))
                    .map(|(tool, _)| tool.as_str())
                    .collect();
                if response.finish.is_truncated() || salvaged > 0 || !asked_again.is_empty() {
                    ctx.emitter.emit(
                        &c,
                        ModelOutputTruncated {
                            finish: response.finish,
                            calls: response.tool_calls.len(),
                            salvaged: planned
                                .iter()
                                .filter(|p| p.salvaged)
                                .map(|p| p.tool.clone())
                                .collect(),
                            action: if asked_again.is_empty() {
                                TruncationAction::Salvaged
                            } else {
                                TruncationAction::AskedAgain
                            },
                            asked_again: asked_again.iter().map(|t| (*t).to_owned()).collect(),
                        },
                    );
                }
                if !planned.is_empty() {
                    let intents: Vec<(u32, PlannedIntent)> = planned
                        .iter()
                        .enumerate()
                        .map(|(i, p)| {
                            (
                                step,
                                PlannedIntent {
                                    intent_id: p.intent_id.clone(),
                                    ordinal: u32::try_from(i).unwrap_or(u32::MAX),
                                    call_id: p.call_id.clone(),
                                    tool: p.tool.clone(),
                                    args: p.args.clone(),
                                },
                            )
                        })
                        .collect();
                    ctx.emitter.emit(
                        &c,
                        PlanCreated {
                            intents: planned
                                .iter()
                                .map(|p| PlannedIntentSummary {
                                    intent_id: p.intent_id.clone(),
                                    tool: p.tool.clone(),
                                    call_id: p.call_id.clone(),
                                    class: agent.tools.get(&p.tool).map(|t| t.class),
                                    salvaged: p.salvaged,
                                })
                                .collect(),
                            rejected: rejected_failures.len(),
                        },
                    );
                    let commit = StepCommit {
                        intents,
                        events: ctx.emitter.drain(),
                        ..StepCommit::default()
                    };
                    if let Err(e) = ctx.commit(commit).await {
                        break End::StoreFailed(format!("cannot persist the plan: {e}"));
                    }
                }

                // Execute: independent calls concurrently on a divided budget;
                // irreversible calls after the others succeeded.
                let any_rejected = !rejected_failures.is_empty();
                let results = self
                    .execute(ctx, &mut budget, planned, step, any_rejected, &prior)
                    .await;
                // Interrupted mid-step: nothing of this step is checkpointed
                // and nothing of its results is observed (the loop guard
                // would count the interrupt's own refusals as failures).
                // Its plan and ledger are durable, so a resume replays it
                // with the same intents and keys: what completed is not run
                // again, what was never sent is sent afresh.
                if ctx.is_interrupted() {
                    break End::Interrupted;
                }
                for result in &results {
                    let content = match &result.outcome {
                        Ok(value) => {
                            json!({"tool": result.planned.tool, "ok": true, "result": value})
                                .to_string()
                        }
                        Err(failure) => self.failure_reply(failure).to_owned(),
                    };
                    if let Some(slot) = replies.get_mut(result.planned.position) {
                        *slot = Some(content);
                    }
                }
                for (call, reply) in response.tool_calls.iter().zip(replies) {
                    let content = reply.unwrap_or_else(|| {
                        Failure::new(&call.name, Category::Unknown)
                            .model_message()
                            .to_owned()
                    });
                    messages.push(Message::Tool {
                        call_id: call.id.clone(),
                        content,
                    });
                }

                // Observe: failures for repeat detection and self-heal, every
                // proposal for repetition and progress.
                let mut trip = None;
                for (tool, reason) in &rejected_failures {
                    if let FailureVerdict::Trip(t) = guard.on_failure(tool, reason) {
                        trip.get_or_insert(t);
                    }
                }
                for result in &results {
                    tools_tried.insert(result.planned.tool.clone());
                    match &result.outcome {
                        Ok(value) => {
                            facts.insert(format!(
                                "{}|{}|{}",
                                result.planned.tool, result.planned.args, value
                            ));
                        }
                        Err(failure) => {
                            match guard.on_failure(&result.planned.tool, failure.human_message()) {
                                FailureVerdict::Trip(t) => {
                                    trip.get_or_insert(t);
                                }
                                FailureVerdict::ToolDisabled {
                                    tool,
                                    failures,
                                    allowance,
                                } => {
                                    ctx.emitter.emit(
                                        &c,
                                        ToolDisabled {
                                            tool,
                                            failures,
                                            allowance,
                                        },
                                    );
                                }
                                _ => {}
                            }
                        }
                    }
                }
                calls.extend(results);
                // The state digest: facts obtained and the tools attempted (by
                // name: rephrasing a query of the same tool is not progress).
                let state = StateDigest::of(
                    facts.iter().map(String::as_str),
                    std::iter::empty::<&str>(),
                    tools_tried.iter().map(|t| Action::new(t, &Value::Null)),
                );
                // One observation per step: the no-progress window counts steps,
                // and a turn of several calls is one composite action (the same
                // set of calls on the same state is a repetition).
                let (turn_tool, turn_args) = match observed.as_slice() {
                    [(tool, args)] => (tool.clone(), args.clone()),
                    many => (
                        many.iter()
                            .map(|(t, _)| t.as_str())
                            .collect::<Vec<_>>()
                            .join("+"),
                        Value::Array(many.iter().map(|(t, a)| json!([t, a])).collect()),
                    ),
                };
                if let Verdict::Trip(t) = guard.observe(Action::new(&turn_tool, &turn_args), state)
                {
                    trip.get_or_insert(t);
                }
                let checkpoint = self.checkpoint(
                    ctx,
                    &budget,
                    &messages,
                    &calls,
                    &facts,
                    &tools_tried,
                    step,
                    elapsed_before_ms,
                    started,
                );
                if let Some(trip) = &trip {
                    ctx.emitter.emit(
                        &c,
                        LoopDetected {
                            trip: trip.clone(),
                            message: trip.to_string(),
                        },
                    );
                }
                crate::crash::point("during_checkpoint");
                crate::crash::panic_point("during_checkpoint", &agent.name);
                let commit = StepCommit {
                    checkpoint: Some(checkpoint),
                    events: ctx.emitter.drain(),
                    ..StepCommit::default()
                };
                if let Err(e) = ctx.commit(commit).await {
                    break End::StoreFailed(format!("cannot write the checkpoint: {e}"));
                }
                completed_steps = step;
                if let Some(trip) = trip {
                    break End::Loop(trip);
                }
            }
        };

        let now = self.clock.now();
        let elapsed_ms = elapsed_before_ms + millis(now.saturating_duration_since(started));
        let facts = rein_core::report::RunFacts {
            run_id: run_id.clone(),
            agent: agent.name.clone(),
            input: ctx.input.clone(),
            end: end.clone(),
            settled: rein_core::report::Settled::Kept,
            outcome: None,
            calls,
            consumed: budget.used(),
            elapsed_ms,
            steps: step,
            models: ctx
                .models
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            compensations: Vec::new(),
            resume,
            in_flight: Vec::new(),
            strategies_not_tried: report::strategies_not_tried(agent),
        };
        if matches!(end, End::Interrupted) {
            // Handed on unfinished: never settled (what it did so far is
            // the report, provisional).
            let so_far = rein_core::report::derive(&facts, &[]);
            return Ok(self.hand_on(ctx, so_far, step, completed_steps).await);
        }
        self.conclude(ctx, facts, full_deadline, step, started, elapsed_before_ms)
            .await
    }

    /// The end of a run this process drives, from `facts` (why it stopped,
    /// its calls, what it consumed): its settlement, decided on the calls
    /// and the ledger as they stand; its report derived from the ledger
    /// afterwards; its final record; its claim released.
    ///
    /// # Errors
    ///
    /// [`EngineError::Store`] when the ledger cannot be read (before the
    /// settlement, or for the report after it) or the run's end cannot be
    /// recorded: the run stays `running` with its claim released, to be
    /// recovered, rather than end with a report that does not say what its
    /// ledger says.
    async fn conclude(
        &self,
        ctx: &RunCtx<'_>,
        mut facts: rein_core::report::RunFacts,
        full_deadline: rein_core::deadline::Deadline,
        step: u32,
        started: rein_core::Instant,
        elapsed_before_ms: u64,
    ) -> Result<RunOutput, EngineError> {
        let run_id = ctx.run_id.clone();
        let end = facts.end.clone();
        let lost = |mut report: RunReport| {
            // Another process took the run over and drives it now: no
            // settlement, no status, no release from here.
            report.summary = format!(
                "This process lost its claim on the run to another process, which continues it. {}",
                report.summary
            );
            RunOutput {
                run_id: run_id.clone(),
                report,
                interrupted: false,
            }
        };
        if ctx.lost.is_cancelled() {
            return Ok(lost(rein_core::report::derive(&facts, &[])));
        }
        // What the calls and the ledger say before anything is settled: what
        // the settlement decides on (a record of a step cut before its
        // checkpoint is in the ledger only). The report itself is derived
        // once, after.
        let ledger = match self.read_ledger(&run_id).await {
            Ok(ledger) => ledger,
            Err(e) => return Err(self.unrecorded(ctx, "its ledger cannot be read", e).await),
        };
        let before = rein_core::report::derive(&facts, &ledger);
        let settlement = self.settle(ctx, &end, &before, full_deadline, step).await;
        if settlement.lost {
            return Ok(lost(before));
        }
        facts.settled = settlement.settled;
        facts.compensations = settlement.compensations;
        facts.in_flight = settlement.in_flight;
        facts.elapsed_ms =
            elapsed_before_ms + millis(self.clock.now().saturating_duration_since(started));
        // Events of the settlement, recorded with the end.
        let pending = ctx.emitter.drain();
        let at_ms = unix_ms(self.clock.system_now());
        let mut pause = END_COMMIT_FIRST_PAUSE;
        for attempt in 1..=END_COMMIT_TRIES {
            // The revision first, then the ledger as the settlement left it
            // (every effect with its status now): the end is recorded only
            // if no record changed in between (a reconciler marking one),
            // else the report is derived again.
            let derived = async {
                let revision = self
                    .store
                    .get_run(&run_id)
                    .await?
                    .ok_or_else(|| StoreError::NotFound {
                        what: "run",
                        id: run_id.to_string(),
                    })?
                    .ledger_revision;
                let ledger = report::tree_records(self.store.as_ref(), &run_id).await?;
                Ok::<_, StoreError>((revision, rein_core::report::derive(&facts, &ledger)))
            };
            let (revision, report) = match derived.await {
                Ok(derived) => derived,
                Err(e) if e.is_transient() && attempt < END_COMMIT_TRIES => {
                    tracing::warn!(run = %run_id, attempt, "the ledger cannot be read for the report yet: {e}");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    continue;
                }
                Err(e) => return Err(self.unrecorded(ctx, "its ledger cannot be read", e).await),
            };
            let finals = self.final_events(ctx, &facts, &report, step);
            let commit = StepCommit {
                status: Some(StatusChange {
                    status: RunStatus::Finished(report.outcome),
                    report: Some(report.clone()),
                    at_ms,
                }),
                events: pending
                    .iter()
                    .cloned()
                    .chain(finals.iter().cloned())
                    .collect(),
                expect_ledger_revision: Some(revision),
                ..StepCommit::default()
            };
            let committed = ctx.commit(commit).await;
            if committed.is_err() {
                // `pending` is kept here; the finals are derived again.
                drop(ctx.emitter.drain());
            }
            match committed {
                Ok(committed) => {
                    ctx.emitter.announce(&finals);
                    self.release_claim(ctx).await;
                    return Ok(RunOutput {
                        run_id,
                        // As stored: with the ledger revision it reflects.
                        report: committed.run.and_then(|r| r.report).unwrap_or(report),
                        interrupted: false,
                    });
                }
                Err(StoreError::Conflict {
                    what: "ledger revision",
                    ..
                }) if attempt < END_COMMIT_TRIES => {
                    tracing::info!(run = %run_id, attempt, "the ledger changed while the run ended; deriving its report again");
                }
                Err(StoreError::Conflict {
                    what: "run claim", ..
                }) => return Ok(lost(report)),
                Err(e) if e.is_transient() && attempt < END_COMMIT_TRIES => {
                    tracing::warn!(run = %run_id, attempt, "the run's end was not recorded yet: {e}");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => {
                    ctx.emitter.requeue(pending);
                    return Err(self.unrecorded(ctx, "its end cannot be recorded", e).await);
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The ledger records of `run_id`'s tree, read again while the store
    /// is briefly unavailable (as the end commit is offered again).
    async fn read_ledger(&self, run_id: &RunId) -> Result<Vec<LedgerRecord>, StoreError> {
        let mut pause = END_COMMIT_FIRST_PAUSE;
        let mut attempt = 1;
        loop {
            match report::tree_records(self.store.as_ref(), run_id).await {
                Err(e) if e.is_transient() && attempt < END_COMMIT_TRIES => {
                    tracing::warn!(run = %run_id, attempt, "the ledger cannot be read yet: {e}");
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// The events that end a run with `report`: the handoff package when
    /// a human has it, the partial success, and the terminal
    /// `run_finished`; built, not emitted, so that a report derived again
    /// is not announced twice ([`Emitter::announce`] once they are stored).
    fn final_events(
        &self,
        ctx: &RunCtx<'_>,
        facts: &rein_core::report::RunFacts,
        report: &RunReport,
        step: u32,
    ) -> Vec<rein_core::Event> {
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        let mut events = Vec::new();
        if matches!(facts.settled, rein_core::report::Settled::HandedOff(_)) {
            events.push(ctx.emitter.event(&c, close::handoff_data(report)));
        }
        if report.outcome == Outcome::PartialSuccess {
            events.push(ctx.emitter.event(
                &c,
                PartialSuccessReturned {
                    completed: report.completed.len(),
                    incomplete: report.incomplete.len(),
                    recoverable: report.recoverable,
                },
            ));
        }
        events.push(ctx.emitter.event(&c, close::run_finished(report, step)));
        events
    }

    /// Releases the run's claim (this process stops driving it).
    async fn release_claim(&self, ctx: &RunCtx<'_>) {
        if let Err(e) = ctx
            .store
            .release_lease_of(&claim_id(&ctx.run_id), &ctx.claim_owner)
            .await
        {
            tracing::warn!(run = %ctx.run_id, "cannot release the run's claim: {e}");
        }
    }

    /// The error of a run whose end cannot be recorded (`why`): it stays
    /// `running`, its claim released so that recovery takes it at once.
    async fn unrecorded(&self, ctx: &RunCtx<'_>, why: &str, e: StoreError) -> EngineError {
        tracing::error!(run = %ctx.run_id, "the run's end is not recorded: {why}: {e}");
        self.release_claim(ctx).await;
        EngineError::Store(e)
    }

    /// Hands an interrupted run on: records that it stopped at a safe
    /// point (with the events of its cut step), leaves it `running`, and
    /// releases its claim so that another process takes it over at once
    /// rather than when the claim expires.
    async fn hand_on(
        &self,
        ctx: &RunCtx<'_>,
        mut report: RunReport,
        step: u32,
        completed_steps: u32,
    ) -> RunOutput {
        let run_id = ctx.run_id.clone();
        let to = self
            .shared
            .hand_on
            .get()
            .copied()
            .unwrap_or(HandOn::AnyWorker);
        ctx.emitter.emit(
            &Correlation {
                step,
                ..Correlation::default()
            },
            RunInterrupted {
                reason: "its process is stopping".into(),
                handed_on: to == HandOn::AnyWorker,
                continue_with: Some(to),
                resumable: true,
                completed_steps,
            },
        );
        let mut pause = END_COMMIT_FIRST_PAUSE;
        for attempt in 1..=END_COMMIT_TRIES {
            let commit = StepCommit {
                events: ctx.emitter.drain(),
                ..StepCommit::default()
            };
            match ctx.commit(commit).await {
                Ok(_) => break,
                Err(e) if e.is_transient() && attempt < END_COMMIT_TRIES => {
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => {
                    tracing::error!(run = %run_id, "cannot record the run's interruption: {e}");
                    break;
                }
            }
        }
        if !ctx.lost.is_cancelled()
            && let Err(e) = ctx
                .store
                .release_lease_of(&claim_id(&run_id), &ctx.claim_owner)
                .await
        {
            tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
        }
        report.recoverable = true;
        report.recommendation =
            "resume it: it stopped at a safe point and nothing it did is repeated".into();
        let next = match to {
            HandOn::AnyWorker => "its claim released for another process to continue it",
            HandOn::Caller => "its claim released; it continues when it is resumed",
        };
        report.summary = format!(
            "The run was interrupted because its process is stopping; it is not finished. It is still running in the store, resumable, {next}. So far: {}",
            report.summary
        );
        RunOutput {
            run_id,
            report,
            interrupted: true,
        }
    }

    /// Validates one proposed call. A refusal is a clarification for the
    /// model; the tool never sees the call.
    fn validate_call(
        &self,
        ctx: &RunCtx<'_>,
        guard: &LoopGuard,
        validator: &dyn ArgValidator,
        call: &crate::provider::ToolCall,
        step: u32,
        position: usize,
    ) -> Result<Planned, (String, Value, String)> {
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        let refuse = |category: Category, reason: String, args: Value| {
            ctx.emitter.emit(
                &c,
                CallRejected::Refused(Refused {
                    tool: call.name.clone(),
                    call_id: Some(call.id.clone()),
                    category: Some(category),
                    reason: reason.clone(),
                }),
            );
            let failure = Failure::new(&call.name, category).with_human_message(reason.clone());
            let mut text = failure.model_message().to_owned();
            if category == Category::InvalidArguments {
                // The problems are rein's own short descriptions (schema
                // paths), not raw tool output: they tell the model what to fix.
                text.push_str(" problems: ");
                text.push_str(&reason);
            }
            Err((text, args, reason))
        };
        let Some(tool) = ctx.agent.tools.get(&call.name) else {
            let known: Vec<&str> = ctx.agent.tools.keys().map(String::as_str).collect();
            return refuse(
                Category::InvalidArguments,
                format!("unknown tool; available tools: {}", known.join(", ")),
                Value::Null,
            );
        };
        if !guard.is_available(&tool.name) {
            return refuse(
                Category::CircuitOpen,
                "tool disabled for the rest of this run after repeated failures".into(),
                Value::Null,
            );
        }
        let mut salvaged = false;
        let args = match parse_args(&call.arguments) {
            ParsedArgs::Complete(v) => v,
            // Salvaging a cut-off call is safe for a read; for a write an
            // optional field lost in the cut would silently change what is
            // done, so the model is asked again.
            ParsedArgs::Salvaged { value, .. } if tool.class == ToolClass::Read => {
                salvaged = true;
                value
            }
            ParsedArgs::Salvaged { dropped_bytes, .. } => {
                return refuse(
                    Category::InvalidArguments,
                    format!(
                        "{CUT_ARGUMENTS} ({dropped_bytes} bytes incomplete); a call with side effects is never made from partial arguments — send the complete call"
                    ),
                    Value::Null,
                );
            }
            ParsedArgs::Invalid { reason } => {
                return refuse(Category::InvalidArguments, reason, Value::Null);
            }
        };
        if let Err(problems) = validator.validate(&tool.name, &args) {
            return refuse(Category::InvalidArguments, problems.join("; "), args);
        }
        Ok(Planned {
            intent_id: new_id::<IntentId>(),
            call_id: call.id.clone(),
            tool: tool.name.clone(),
            args,
            step,
            position,
            salvaged,
        })
    }

    /// Runs a turn's planned calls.
    async fn execute(
        &self,
        ctx: &RunCtx<'_>,
        budget: &mut Budget,
        planned: Vec<Planned>,
        step: u32,
        any_rejected: bool,
        prior: &HashMap<IntentId, LedgerRecord>,
    ) -> Vec<CallResult> {
        let agent = ctx.agent;
        let (irreversible, others): (Vec<Planned>, Vec<Planned>) =
            planned.into_iter().partition(|p| {
                agent
                    .tools
                    .get(&p.tool)
                    .is_some_and(|t| t.class == ToolClass::Irreversible)
            });
        let mut results = Vec::new();
        if !others.is_empty() {
            let now = self.clock.now();
            let weights = vec![Weight::default(); others.len()];
            let shares = budget.parallel(now, &weights, ChildCaps::default());
            if others.len() > 1 {
                ctx.emitter.emit(
                    &Correlation {
                        step,
                        ..Correlation::default()
                    },
                    BudgetAllocated {
                        shape: AllocationShape::Parallel,
                        branches: others.len(),
                        each: shares.first().map(|(b, _)| b.remaining(now).time),
                        remaining: budget.remaining(now).time,
                    },
                );
            }
            let intents: Vec<IntentId> = others.iter().map(|p| p.intent_id.clone()).collect();
            let futures = others
                .into_iter()
                .zip(shares.iter())
                .filter_map(|(p, (child, _))| {
                    let tool = agent.tools.get(&p.tool)?;
                    let before = prior.get(&p.intent_id);
                    Some(self.guarded_call(ctx, p, tool, child, before))
                });
            results.extend(futures_util::future::join_all(futures).await);
            let now = self.clock.now();
            // A child run's consumption is charged to this run: one
            // budget for the whole tree, never reset.
            for ((_, grant), intent) in shares.into_iter().zip(intents) {
                let _ = budget.settle(grant, ctx.take_child_usage(&intent), now);
            }
        }
        for p in irreversible {
            // Recomputed before each irreversible call: a refused sibling or
            // a failed earlier irreversible call stops the rest.
            let earlier_failed = any_rejected || results.iter().any(|r| r.outcome.is_err());
            // A replayed irreversible call with a ledger record already ran
            // (or may have): its record speaks, not the sibling gate.
            let earlier_failed = earlier_failed && !prior.contains_key(&p.intent_id);
            let Some(tool) = agent.tools.get(&p.tool) else {
                continue;
            };
            if earlier_failed {
                let failure = Failure::new(&tool.name, Category::Cancelled).with_human_message(
                    "not run: an irreversible call runs only after the other calls of its turn succeed",
                );
                ctx.emitter.emit(
                    &Correlation {
                        step,
                        intent_id: Some(p.intent_id.clone()),
                        ..Correlation::default()
                    },
                    CallRejected::Refused(Refused {
                        tool: tool.name.clone(),
                        call_id: None,
                        category: None,
                        reason: failure.human_message().to_owned(),
                    }),
                );
                results.push(CallResult::refused(p, tool.class, failure));
                continue;
            }
            let now = self.clock.now();
            let (child, grant) = budget.serial(now);
            let before = prior.get(&p.intent_id);
            let intent = p.intent_id.clone();
            let result = self.guarded_call(ctx, p, tool, &child, before).await;
            let _ = budget.settle(grant, ctx.take_child_usage(&intent), self.clock.now());
            results.push(result);
        }
        results
    }

    /// One model turn along the agent's model chain: each link with
    /// classified retries under its provider's concurrency limit and
    /// breaker arm, within the run's deadline; the next link on a transient
    /// failure, a larger-context link on a context overflow.
    async fn model_turn(
        &self,
        ctx: &RunCtx<'_>,
        messages: &[Message],
        budget: &mut Budget,
        step: u32,
    ) -> Result<(ModelResponse, Option<rein_core::registry::Price>), End> {
        let agent = ctx.agent;
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        // The prompt is charged too, so the output ceiling is what the
        // token budget leaves after the prompt; a call without room for a
        // useful answer is not made (a breach cannot be undone afterwards).
        let prompt = ctx
            .last_input_tokens
            .load(std::sync::atomic::Ordering::Acquire);
        let max_tokens = match budget.remaining(self.clock.now()).tokens {
            Some(left) if left < prompt.saturating_add(MIN_OUTPUT_TOKENS) => {
                let exhausted = Exhausted {
                    dimension: Dimension::Tokens,
                    needed: prompt.saturating_add(MIN_OUTPUT_TOKENS),
                    remaining: left,
                };
                ctx.emitter.emit(
                    &c,
                    BudgetExhausted {
                        reason: Some(
                            "the next prompt and a minimal answer do not fit the tokens left"
                                .into(),
                        ),
                        prompt_tokens_at_least: Some(prompt),
                        min_output_tokens: Some(MIN_OUTPUT_TOKENS),
                        ..BudgetExhausted::new(BudgetScope::ModelCall, exhausted)
                    },
                );
                return Err(End::Budget(exhausted));
            }
            Some(left) => Some(left - prompt),
            None => None,
        };
        let request = ModelRequest {
            model: agent.model.clone(),
            messages: messages.to_vec(),
            tools: agent.tool_definitions.clone(),
            max_tokens,
            options: Default::default(),
        };
        let chain = model_chain::Chain {
            primary: model_chain::LinkRef {
                provider: &agent.provider,
                model: &agent.model,
                price: agent.price,
            },
            fallbacks: &agent.fallbacks,
            context: &agent.context_fallbacks,
        };
        let answered = self
            .ask_chain(
                ctx,
                &c,
                chain,
                &request,
                budget,
                model_chain::Mode::Complete,
            )
            .await?;
        match answered.reply {
            model_chain::Reply::Complete(response) => Ok((response, answered.price)),
            // Not asked for: a run's turns are whole.
            model_chain::Reply::Stream { .. } => Err(End::ModelFailed(
                Category::Unknown,
                "a streamed reply where a whole one was asked for".into(),
            )),
        }
    }

    /// What the model is told about a failed call: its structured
    /// placeholder, never raw error text (invariant 10).
    fn failure_reply<'f>(&self, failure: &'f Failure) -> &'f str {
        // Sabotage hook `raw_error_text`: the operator's text, which holds
        // the tool's own error message, goes to the model instead.
        #[cfg(feature = "sabotage")]
        if self.sabotage.raw_error_text {
            return failure.human_message();
        }
        failure.model_message()
    }

    /// Decides about a failed attempt with the target's retry budget and the
    /// shared jitter source.
    fn decide(&self, target: &str, policy: &RetryPolicy, input: &RetryInput<'_>) -> RetryDecision {
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

    /// Credits one original request to the target's retry budget.
    fn deposit_request(&self, target: &str, policy: &RetryPolicy) {
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

    #[allow(clippy::too_many_arguments)]
    fn checkpoint(
        &self,
        ctx: &RunCtx<'_>,
        budget: &Budget,
        messages: &[Message],
        calls: &[CallResult],
        facts: &BTreeSet<String>,
        tools_tried: &BTreeSet<String>,
        step: u32,
        elapsed_before_ms: u64,
        started: rein_core::Instant,
    ) -> Checkpoint {
        let now = self.clock.now();
        Checkpoint {
            run_id: ctx.run_id.clone(),
            step,
            messages: json!(messages),
            completed_intents: calls
                .iter()
                .filter(|c| c.outcome.is_ok())
                .map(|c| c.planned.intent_id.clone())
                .collect(),
            consumed: budget.used(),
            elapsed_ms: elapsed_before_ms + millis(now.saturating_duration_since(started)),
            // What a resume needs besides the transcript: every call's
            // result (for the report), the loop guard's progress inputs, and
            // how many model calls were served.
            state: json!({
                "calls": calls,
                "facts": facts,
                "tools_tried": tools_tried,
                "provider_calls": ctx.provider_calls.load(std::sync::atomic::Ordering::Acquire),
            }),
            at_ms: unix_ms(self.clock.system_now()),
        }
    }
}

/// Everything the loop carries from step to step.
struct LoopState {
    budget: Budget,
    full_deadline: rein_core::deadline::Deadline,
    started: rein_core::Instant,
    elapsed_before_ms: u64,
    guard: LoopGuard,
    messages: Vec<Message>,
    calls: Vec<CallResult>,
    facts: BTreeSet<String>,
    tools_tried: BTreeSet<String>,
    step: u32,
    resume: Option<rein_core::outcome::ResumeMarker>,
}

/// The interrupted step of a resumed run: its persisted plan, replayed.
struct ResumedTurn {
    response: ModelResponse,
    /// The persisted intent id of each proposed call, by position.
    intent_ids: Vec<Option<IntentId>>,
    /// The ledger records of the step's intents.
    prior: HashMap<IntentId, LedgerRecord>,
}

/// How long a claim outlives the run's wall clock (the reconciler treats an
/// expired claim of a dead owner as abandoned).
const CLAIM_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

/// The retry-budget key of a provider (tools and providers may share names).
pub(crate) fn provider_target(name: &str) -> String {
    format!("provider:{name}")
}

/// The retry-budget key of a tool.
pub(crate) fn tool_target(name: &str) -> String {
    format!("tool:{name}")
}

fn wall_clock_exhausted() -> Exhausted {
    Exhausted {
        dimension: Dimension::WallClock,
        needed: 0,
        remaining: 0,
    }
}

//! One run's context: what its concurrent calls share while it is driven.

use std::collections::HashMap;
use std::sync::Arc;

use rein_core::deadline::Usage;
use rein_core::governor::Class;
use rein_core::retry::RetryPolicy;
use rein_core::{IntentId, RunId, TenantId, ToolClass};
use rein_store::{StepCommit, Store, StoreError};
use tokio_util::sync::CancellationToken;

use super::claim::claim_id;
use super::emitter::Emitter;
use super::{AgentBinding, ArgValidator, model_chain};

/// One run's context, shared by its concurrent calls.
pub(crate) struct RunCtx<'a> {
    pub(crate) run_id: RunId,
    pub(crate) tenant: TenantId,
    pub(super) input: String,
    pub(super) agent: &'a AgentBinding,
    pub(super) store: &'a Arc<dyn Store>,
    pub(super) emitter: Emitter,
    /// Model calls made for this run, failed ones included (a scripted
    /// provider's position on resume).
    pub(super) provider_calls: std::sync::atomic::AtomicU32,
    /// Input tokens of the last answered model call: the floor of the next
    /// prompt, which only grows.
    pub(super) last_input_tokens: std::sync::atomic::AtomicU64,
    /// What the last failed model call of each category said besides its
    /// category: the report's advice names the key's env var or the wait.
    pub(super) model_failures:
        std::sync::Mutex<HashMap<rein_core::Category, rein_core::advice::FailureHint>>,
    /// Cancels the forward path (never the settlement).
    pub(crate) cancel: CancellationToken,
    /// Fires when another process took the run's claim over: this process
    /// stops everything at once and records nothing more.
    pub(super) lost: CancellationToken,
    /// Fires when this process stops driving runs ([`Engine::interrupt`]):
    /// the forward path stops at its next safe point and the run is handed
    /// on, unfinished; a settlement in progress finishes first.
    pub(super) interrupt: CancellationToken,
    /// Why the run stopped because the store stayed away, once it did
    /// ([`RunCtx::stop_for_store`]): it is then handed on like an
    /// interrupted run.
    pub(super) store_away: std::sync::Mutex<Option<String>>,
    /// The identity of this process's claim on the run.
    pub(super) claim_owner: String,
    /// Set once the run settles: from then on cancellation is ignored, so
    /// compensation always runs to its end.
    pub(super) settling: std::sync::atomic::AtomicBool,
    /// Validates proposed calls (child runs validate with it too).
    pub(crate) validator: &'a dyn ArgValidator,
    /// Where the run sits in its agent tree.
    pub(crate) lineage: Lineage,
    /// What child runs started by this run's calls consumed, by intent,
    /// until the call's budget grant is settled with it.
    pub(super) child_usage: std::sync::Mutex<HashMap<IntentId, Usage>>,
    /// The models that answered this run's turns (`provider/model`), in
    /// first-use order.
    pub(super) models: std::sync::Mutex<Vec<String>>,
    /// Model retries made, their waits (ms) and the tokens failed model
    /// calls consumed, against [`ModelRetryLimits`](rein_core::registry::ModelRetryLimits).
    pub(super) model_retries: ModelRetryUse,
    /// The refused actions a resume sends again (what the run's report
    /// said to retry), and whether before their wait ended.
    pub(super) retries: Retries,
}

/// The intents a resume sends again although their ledger records say
/// `failed` (decided not applied: safe to send again), and whether it
/// sends them before the wait their refusal asked for has passed.
#[derive(Default)]
pub(crate) struct Retries {
    pub(super) intents: std::collections::HashSet<IntentId>,
    pub(super) now: bool,
}

impl RunCtx<'_> {
    /// Whether this drive sends `intent` again, its failed record reopened.
    pub(super) fn retries(&self, intent: &IntentId) -> bool {
        self.retries.intents.contains(intent)
    }

    /// Whether `intent` is sent again now, a shared Retry-After cooldown
    /// of its tool notwithstanding (the operator decided: `--now`).
    pub(super) fn retries_now(&self, intent: &IntentId) -> bool {
        self.retries.now && self.retries(intent)
    }
}

/// What a run spent retrying model calls.
#[derive(Default)]
pub(crate) struct ModelRetryUse {
    pub(super) retries: std::sync::atomic::AtomicU32,
    pub(super) wait_ms: std::sync::atomic::AtomicU64,
    pub(super) wasted_tokens: std::sync::atomic::AtomicU64,
}

/// A run's place in its agent tree: its parent, its depth (the root is 0)
/// and the tree's shared counters.
#[derive(Clone)]
pub(crate) struct Lineage {
    pub(crate) parent: Option<RunId>,
    pub(crate) depth: u32,
    pub(crate) tree: Arc<Tree>,
}

/// What a whole agent tree has used, shared by every run in it, and the
/// governor class its tool calls ask under.
#[derive(Default)]
pub(crate) struct Tree {
    /// Child runs started.
    pub(crate) runs: std::sync::atomic::AtomicU32,
    /// Tokens used by every run of the tree.
    pub(crate) tokens: std::sync::atomic::AtomicU64,
    /// The root's class: [`Class::Batch`] when the root was queued (no
    /// caller waits on it), else [`Class::Interactive`]. A child works for
    /// its root, so it asks the governor in the root's class.
    pub(crate) class: Class,
}

impl Tree {
    /// A fresh tree whose root runs as `class`.
    pub(crate) fn of_class(class: Class) -> Tree {
        Tree {
            class,
            ..Tree::default()
        }
    }
}

impl Lineage {
    /// A root run: depth 0, a tree of its own, in `class`.
    pub(crate) fn root(class: Class) -> Lineage {
        Lineage {
            parent: None,
            depth: 0,
            tree: Arc::new(Tree::of_class(class)),
        }
    }
}

/// The governor class of a run started by `request`: batch when it was
/// queued first ([`super::RunRequest::enqueued`]), interactive otherwise.
pub(crate) fn class_of(enqueued: bool) -> Class {
    if enqueued {
        Class::Batch
    } else {
        Class::Interactive
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

    fn provider_tokens(
        &self,
    ) -> &std::collections::BTreeMap<String, rein_core::registry::TokenLimit> {
        &self.agent.provider_tokens
    }

    fn cost_account(&self) -> Option<String> {
        Some(format!("{}/{}", self.tenant, self.agent.name))
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

    fn failed(&self, category: rein_core::Category, hint: rein_core::advice::FailureHint) {
        self.model_failures
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(category, hint);
    }

    fn value_of_success(&self) -> Option<rein_core::deadline::Cost> {
        self.agent.planner.value_of_success
    }

    fn last_input_tokens(&self) -> u64 {
        self.last_input_tokens
            .load(std::sync::atomic::Ordering::Acquire)
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

/// What a run's context is made of when a process takes the run: the
/// rest starts empty (no model call served, nothing settling).
pub(super) struct Taken<'a> {
    pub(super) run_id: RunId,
    pub(super) tenant: TenantId,
    pub(super) input: String,
    pub(super) agent: &'a AgentBinding,
    pub(super) store: &'a Arc<dyn Store>,
    pub(super) emitter: Emitter,
    pub(super) validator: &'a dyn ArgValidator,
    pub(super) lineage: Lineage,
    /// The claim this process holds on the run.
    pub(super) claim_owner: String,
    pub(super) cancel: CancellationToken,
    pub(super) lost: CancellationToken,
    /// The process's interrupt; the run gets its own child of it, so that
    /// a store that stays away stops this run only.
    pub(super) interrupt: &'a CancellationToken,
}

impl<'a> RunCtx<'a> {
    /// The context of a run this process has just started, resumed or
    /// taken back: one construction for every way in.
    pub(super) fn taken(parts: Taken<'a>) -> RunCtx<'a> {
        RunCtx {
            run_id: parts.run_id,
            tenant: parts.tenant,
            input: parts.input,
            agent: parts.agent,
            store: parts.store,
            emitter: parts.emitter,
            provider_calls: std::sync::atomic::AtomicU32::new(0),
            last_input_tokens: std::sync::atomic::AtomicU64::new(0),
            model_failures: Default::default(),
            cancel: parts.cancel,
            lost: parts.lost,
            interrupt: parts.interrupt.child_token(),
            store_away: std::sync::Mutex::new(None),
            claim_owner: parts.claim_owner,
            settling: std::sync::atomic::AtomicBool::new(false),
            validator: parts.validator,
            lineage: parts.lineage,
            child_usage: std::sync::Mutex::new(HashMap::new()),
            models: std::sync::Mutex::new(Vec::new()),
            model_retries: ModelRetryUse::default(),
            retries: Retries::default(),
        }
    }
}

impl RunCtx<'_> {
    /// What the model failure that ended the run with `end` said besides
    /// its category (nothing for any other end).
    pub(super) fn failure_hint(&self, end: &super::End) -> rein_core::advice::FailureHint {
        match end {
            super::End::ModelFailed(category, _) => self
                .model_failures
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(category)
                .cloned()
                .unwrap_or_default(),
            _ => Default::default(),
        }
    }

    /// Records that `provider`'s `model` answered a turn.
    pub(super) fn answered_by(&self, provider: &str, model: &str) {
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
    pub(crate) fn record_child_usage(&self, intent: &IntentId, used: Usage) {
        self.child_usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(intent.clone(), used);
    }

    /// What the child run of `intent` consumed (zero for other calls).
    pub(super) fn take_child_usage(&self, intent: &IntentId) -> Usage {
        self.child_usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(intent)
            .unwrap_or_default()
    }

    /// Resolves when the run's forward path is cancelled; never during
    /// settlement.
    pub(super) async fn cancelled(&self) {
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
    pub(super) async fn aborts(&self, class: ToolClass) {
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
    pub(super) async fn interrupted(&self) {
        self.interrupt.cancelled().await;
        if !self.is_interrupted() {
            std::future::pending::<()>().await;
        }
    }

    /// Whether the forward path was cancelled (or the claim lost, or the
    /// process is handing its runs on).
    pub(super) fn is_cancelled(&self) -> bool {
        self.lost.is_cancelled()
            || ((self.cancel.is_cancelled() || self.interrupt.is_cancelled())
                && !self.settling.load(std::sync::atomic::Ordering::Acquire))
    }

    /// Whether the forward path stops because the process is handing its
    /// runs on (and not because the caller cancelled it, which wins: a
    /// cancelled run settles and ends `cancelled`).
    pub(super) fn is_interrupted(&self) -> bool {
        self.interrupt.is_cancelled()
            && !self.cancel.is_cancelled()
            && !self.lost.is_cancelled()
            && !self.settling.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Offers `commit` for this run to the store once, fenced by this
    /// process's claim. Nothing is put back on failure: the caller decides
    /// what becomes of the commit's events ([`Engine::commit`] offers it
    /// again while the store is briefly away).
    ///
    /// [`Engine::commit`]: super::engine::Engine
    pub(super) async fn commit_once(
        &self,
        mut commit: StepCommit,
    ) -> Result<rein_store::Committed, StoreError> {
        // Fenced by this process's claim: once another process took the
        // run over, nothing more is written from here.
        commit.expect_claim = Some(rein_store::ClaimFence {
            lease_id: claim_id(&self.run_id),
            owner: self.claim_owner.clone(),
        });
        let result = self.store.commit_step(&self.run_id, commit).await;
        if let Err(StoreError::ClaimLost { .. }) = &result {
            tracing::warn!(run = %self.run_id, "the run's claim was taken over; stopping here");
            self.lost.cancel();
        }
        result
    }
}

//! Agent trees: a tool of kind `agent` starts a child run of another
//! agent, inside bounds the whole tree shares; and the registry of live
//! runs through which a cancellation reaches any of them.
//!
//! # Why bounded, why deterministic
//!
//! A model that can start agents can fan out without limit, so the tree
//! has a depth, a count of child runs and a token total (seed 004's
//! AgentGraph: 3, 25 and 200,000 by default); past a bound a new child is
//! refused with a structured failure to its parent. A child's id is derived
//! from the intent that started it, so a parent resumed after a crash finds
//! its child again (finished: its report is the result; interrupted: it is
//! resumed) instead of starting a second one.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use rein_core::deadline::{Budget, BudgetLimits};
use rein_core::{Category, Effect, Failure, Outcome, RunId};
use rein_store::RunStatus;
use serde_json::json;

use super::binding::{AgentBinding, AgentTarget, ToolBinding};
use super::guarded::Planned;
use super::{CancellationToken, Engine, EngineError, Lineage, RunCtx, RunRequest, Tree};
use crate::tool::ToolOutput;

/// Resolves an agent's name to a fresh binding (a new provider per run),
/// for the engine to start child runs with.
pub type AgentResolver = Arc<dyn Fn(&str) -> Option<AgentBinding> + Send + Sync>;

/// Bounds of one root run's whole tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeLimits {
    /// The deepest a child may be; the root is depth 0.
    pub max_depth: u32,
    /// Tokens every run of the tree may use together; `None`: unlimited.
    pub max_total_tokens: Option<u64>,
    /// Child runs the tree may start; `None`: unlimited.
    pub max_total_runs: Option<u32>,
}

impl Default for TreeLimits {
    fn default() -> Self {
        use rein_core::registry::{
            DEFAULT_AGENT_GRAPH_MAX_DEPTH, DEFAULT_AGENT_GRAPH_MAX_TOTAL_RUNS,
            DEFAULT_AGENT_GRAPH_MAX_TOTAL_TOKENS,
        };
        // The registry's `[server.agent_graph]` defaults, one source.
        TreeLimits {
            max_depth: DEFAULT_AGENT_GRAPH_MAX_DEPTH,
            max_total_tokens: Some(DEFAULT_AGENT_GRAPH_MAX_TOTAL_TOKENS),
            max_total_runs: Some(DEFAULT_AGENT_GRAPH_MAX_TOTAL_RUNS),
        }
    }
}

/// The cancellation tokens of the runs this engine drives (roots and
/// children alike).
pub(crate) struct LiveRegistry {
    runs: Mutex<HashMap<RunId, CancellationToken>>,
    /// How many runs are live, for whoever waits for them to end (a drain).
    count: tokio::sync::watch::Sender<usize>,
    /// Every run live since [`Engine::note_runs`], once it was called.
    noted: Mutex<Option<std::collections::BTreeSet<RunId>>>,
}

impl Default for LiveRegistry {
    fn default() -> Self {
        LiveRegistry {
            runs: Mutex::default(),
            count: tokio::sync::watch::Sender::new(0),
            noted: Mutex::new(None),
        }
    }
}

/// Keeps a run registered while it is driven.
pub(crate) struct LiveEntry<'a> {
    registry: &'a LiveRegistry,
    run_id: RunId,
}

impl Drop for LiveEntry<'_> {
    fn drop(&mut self) {
        let mut runs = self.registry.lock();
        runs.remove(&self.run_id);
        self.registry.count.send_replace(runs.len());
    }
}

impl LiveRegistry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<RunId, CancellationToken>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn register(&self, run_id: &RunId, token: &CancellationToken) -> LiveEntry<'_> {
        let mut runs = self.lock();
        runs.insert(run_id.clone(), token.clone());
        self.count.send_replace(runs.len());
        if let Some(noted) = self
            .noted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_mut()
        {
            noted.insert(run_id.clone());
        }
        drop(runs);
        LiveEntry {
            registry: self,
            run_id: run_id.clone(),
        }
    }
}

impl Engine {
    /// Cancels a run this engine is driving — a root (its children follow)
    /// or a single child (its parent and siblings do not). False when the
    /// run is not driven here.
    pub fn cancel(&self, run_id: &RunId) -> bool {
        match self.shared.live.lock().get(run_id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// Whether this engine is driving `run_id` right now.
    pub fn is_live(&self, run_id: &RunId) -> bool {
        self.shared.live.lock().contains_key(run_id)
    }

    /// The runs this engine is driving right now (roots and children).
    pub fn live_runs(&self) -> Vec<RunId> {
        self.shared.live.lock().keys().cloned().collect()
    }

    /// How many runs this engine drives, as it changes: a drain waits on
    /// it for the last run to end instead of polling.
    pub fn live_count(&self) -> tokio::sync::watch::Receiver<usize> {
        self.shared.live.count.subscribe()
    }

    /// From now on, notes every run this engine drives — those live now
    /// and every one that starts later, however briefly — for
    /// [`Engine::noted_runs`]: a drain's account of what it finished and
    /// what it handed on misses none.
    pub fn note_runs(&self) {
        let runs = self.shared.live.lock();
        let mut noted = self
            .shared
            .live
            .noted
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        noted
            .get_or_insert_with(Default::default)
            .extend(runs.keys().cloned());
    }

    /// The runs noted since [`Engine::note_runs`] (none before it).
    pub fn noted_runs(&self) -> Vec<RunId> {
        self.shared
            .live
            .noted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// A resumed run's place in its tree, rebuilt from the store: its
    /// depth (by walking up its parents) and what its root's tree already
    /// used (every descendant's runs and tokens), so a crash never resets
    /// the tree's bounds.
    pub(super) async fn lineage_of(&self, run_id: &RunId) -> Result<Lineage, EngineError> {
        let mut depth = 0u32;
        let mut parent = None;
        let mut root = run_id.clone();
        let mut cursor = self.store.get_run(run_id).await?;
        while let Some(record) = cursor {
            let Some(up) = record.parent_run_id.clone() else {
                break;
            };
            if parent.is_none() {
                parent = Some(up.clone());
            }
            depth = depth.saturating_add(1);
            root = up.clone();
            // A cycle cannot be written (ids derive from intents), but a
            // damaged store must not loop forever.
            if depth > 64 {
                break;
            }
            cursor = self.store.get_run(&up).await?;
        }
        // Tokens are counted where they were spent: each run's own model
        // calls (a parent's consumption also carries its finished
        // children's, so reports would count them twice, and an
        // interrupted child has no report yet).
        let tree = Tree::default();
        tree.tokens
            .fetch_add(self.own_tokens(&root).await?, Ordering::AcqRel);
        let mut pending = vec![root];
        while let Some(run) = pending.pop() {
            for child in self.store.children_of(&run).await? {
                tree.runs.fetch_add(1, Ordering::AcqRel);
                tree.tokens
                    .fetch_add(self.own_tokens(&child.run_id).await?, Ordering::AcqRel);
                pending.push(child.run_id);
            }
        }
        Ok(Lineage {
            parent,
            depth,
            tree: Arc::new(tree),
        })
    }

    /// Tokens `run`'s own model calls used, from its durable events.
    async fn own_tokens(&self, run: &RunId) -> Result<u64, EngineError> {
        Ok(self
            .store
            .events(run, 0)
            .await?
            .iter()
            .filter_map(|e| match &e.data {
                // An answered call's usage; a failed one's tokens spent.
                rein_core::EventData::ModelCallFinished(f) => Some(f.tokens()),
                _ => None,
            })
            .sum())
    }

    /// Runs the child agent of an `agent` tool call, as one attempt.
    pub(super) async fn child_run(
        &self,
        ctx: &RunCtx<'_>,
        planned: &Planned,
        tool: &ToolBinding,
        target: &AgentTarget,
        budget: &Budget,
    ) -> Result<ToolOutput, Failure> {
        let refuse = |why: String| {
            Failure::new(&tool.name, Category::BudgetExhausted)
                .with_effect(Effect::NotApplied)
                .with_retryable(false)
                .with_human_message(why)
        };
        let limits = self.tree_limits;
        let depth = ctx.lineage.depth + 1;
        if depth > limits.max_depth {
            return Err(refuse(format!(
                "agent `{}` not started: the tree is at its depth limit ({})",
                target.agent, limits.max_depth
            )));
        }
        let tree = &ctx.lineage.tree;
        if let Some(max) = limits.max_total_tokens
            && tree.tokens.load(Ordering::Acquire) >= max
        {
            return Err(refuse(format!(
                "agent `{}` not started: the tree used its {max} tokens",
                target.agent
            )));
        }
        let child_id = RunId::new(format!("{}-child", planned.intent_id))
            .map_err(|e| refuse(format!("no child run id: {e}")))?;
        let existing = self.store.get_run(&child_id).await.map_err(|e| {
            Failure::new(&tool.name, Category::Transient).with_human_message(e.to_string())
        })?;
        // A child that already finished (the parent resumed after a crash):
        // its report is the result.
        if let Some(record) = &existing
            && let (RunStatus::Finished(_), Some(report)) = (record.status, &record.report)
        {
            ctx.record_child_usage(&planned.intent_id, report.consumed);
            return outcome_of(tool, &child_id, report.clone());
        }
        if existing.is_none()
            && let Some(max) = limits.max_total_runs
        {
            let started = tree.runs.fetch_add(1, Ordering::AcqRel) + 1;
            if started > max {
                tree.runs.fetch_sub(1, Ordering::AcqRel);
                return Err(refuse(format!(
                    "agent `{}` not started: the tree already started its {max} child runs",
                    target.agent
                )));
            }
        }
        let Some(mut agent) = self
            .agents
            .as_ref()
            .and_then(|resolve| resolve(&target.agent))
        else {
            return Err(Failure::new(&tool.name, Category::NotFound)
                .with_effect(Effect::NotApplied)
                .with_retryable(false)
                .with_human_message(format!("agent `{}` cannot be bound here", target.agent)));
        };
        // The child's share: a ratio of what the call may still use,
        // capped, and never more than the child agent's own budget.
        let now = self.clock.now();
        let mut parent = budget.clone();
        let (share, _grant) = parent.nested(now, target.budget_ratio, target.caps);
        let left = share.remaining(now);
        let own = agent.budget;
        let mut child = BudgetLimits::new(left.time.min(own.wall_clock()))
            .map_err(|e| refuse(format!("no budget left for a child: {e}")))?;
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(steps) = min(left.steps.map(u64::from), own.steps().map(u64::from)) {
            child = child
                .with_steps(u32::try_from(steps).unwrap_or(u32::MAX).max(1))
                .map_err(|e| refuse(e.to_string()))?;
        }
        if let Some(tokens) = min(left.tokens, own.tokens()) {
            child = child
                .with_tokens(tokens.max(1))
                .map_err(|e| refuse(e.to_string()))?;
        }
        let cost = min(
            left.cost.map(rein_core::deadline::Cost::micros),
            own.cost().map(rein_core::deadline::Cost::micros),
        );
        if let Some(micros) = cost {
            child = child
                .with_cost(rein_core::deadline::Cost::from_micros(micros.max(1)))
                .map_err(|e| refuse(e.to_string()))?;
        }
        agent.budget = child;
        let input = planned.args["task"]
            .as_str()
            .map_or_else(|| planned.args.to_string(), str::to_owned);
        let lineage = Lineage {
            parent: Some(ctx.run_id.clone()),
            depth,
            tree: tree.clone(),
        };
        // Cancelling the parent cancels the child; cancelling the child
        // alone leaves the parent and its siblings running.
        let cancel = ctx.cancel.child_token();
        let out = if existing.is_some() {
            Box::pin(self.resume_in(
                &agent,
                ctx.validator,
                &child_id,
                None,
                Some(cancel),
                lineage,
            ))
            .await
        } else {
            let request = RunRequest {
                run_id: Some(child_id.clone()),
                tenant: Some(ctx.tenant.clone()),
                input,
                cancel: Some(cancel),
                ..RunRequest::default()
            };
            Box::pin(self.run_in(&agent, ctx.validator, request, lineage)).await
        };
        match out {
            // Handed on with its parent: in doubt until the parent's resume
            // finds the child (by its id) and resumes it too.
            Ok(out) if out.interrupted => Err(Failure::new(&tool.name, Category::Cancelled)
                .with_effect(Effect::MaybeApplied)
                .with_human_message(format!(
                    "child run {child_id} was interrupted with its process; it continues when its parent is resumed"
                ))),
            Ok(out) => {
                ctx.record_child_usage(&planned.intent_id, out.report.consumed);
                outcome_of(tool, &child_id, out.report)
            }
            Err(EngineError::NotResumable { reason, .. }) => {
                Err(Failure::new(&tool.name, Category::Conflict)
                    .with_effect(Effect::MaybeApplied)
                    .with_human_message(format!(
                        "child run {child_id} cannot be driven here: {reason}"
                    )))
            }
            Err(e) => Err(Failure::new(&tool.name, Category::Transient)
                .with_effect(Effect::NotApplied)
                .with_human_message(format!("child run {child_id} could not start: {e}"))),
        }
    }
}

/// A finished child run as the parent's tool result.
fn outcome_of(
    tool: &ToolBinding,
    child_id: &RunId,
    report: rein_core::RunReport,
) -> Result<ToolOutput, Failure> {
    let summary = json!({
        "child_run_id": child_id, "outcome": report.outcome, "answer": report.answer,
        "consumed": report.consumed, "completed": report.completed.len(),
    });
    let (category, effect) = match report.outcome {
        Outcome::Succeeded => {
            return Ok(ToolOutput {
                result: summary,
                truncated: false,
                replayed: false,
            });
        }
        // Undone completely, or never started: nothing stands.
        Outcome::Failed | Outcome::Cancelled
            if report
                .completed
                .iter()
                .all(|c| !matches!(c.ledger, Some(rein_core::LedgerStatus::Succeeded))) =>
        {
            (Category::Unknown, Effect::NotApplied)
        }
        Outcome::BudgetExhausted => (Category::BudgetExhausted, Effect::Applied),
        Outcome::HandedOff => (Category::Unknown, Effect::MaybeApplied),
        _ => (Category::Unknown, Effect::Applied),
    };
    Err(Failure::new(&tool.name, category)
        .with_effect(effect)
        .with_retryable(false)
        .with_human_message(format!(
            "child run {child_id} ended {}: {}",
            report.outcome.as_str(),
            report.summary
        )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use rein_core::event::{
        Flag, ModelAnswered, ModelCallFailed, ModelCallFinished, ModelCallResult,
    };
    use rein_core::model::{FinishReason, TokenUsage};
    use rein_core::{Category, Event, TenantId};
    use rein_store::{NewRun, SqliteStore, StepCommit, Store};

    /// A run of `agent` under `parent` whose model calls used `tokens`
    /// (one answered call each), plus a failed call that spent 5.
    async fn run_with_calls(
        store: &Arc<dyn Store>,
        id: &str,
        parent: Option<&str>,
        tokens: &[u64],
    ) {
        let run_id = RunId::new(id).unwrap();
        store
            .create_run(NewRun {
                run_id: run_id.clone(),
                tenant: TenantId::new("t").unwrap(),
                agent: "a".into(),
                input: "x".into(),
                parent_run_id: parent.map(|p| RunId::new(p).unwrap()),
                budget: json!({}),
                created_at_ms: 1,
            })
            .await
            .unwrap();
        let event = |ok: bool, used: u64| Event {
            run_id: run_id.clone(),
            seq: 0,
            step: 1,
            intent_id: None,
            attempt_id: None,
            idempotency_key: None,
            at_ms: 2,
            data: ModelCallFinished {
                provider: "p".into(),
                model: "m".into(),
                attempt: 1,
                cost: None,
                result: if ok {
                    ModelCallResult::Answered(ModelAnswered {
                        ok: Flag,
                        usage: TokenUsage {
                            input: used - 1,
                            output: 1,
                        },
                        finish: FinishReason::Stop,
                        tool_calls: Vec::new(),
                    })
                } else {
                    ModelCallResult::Failed(ModelCallFailed {
                        ok: Flag,
                        category: Category::Transient,
                        reason: "cut".into(),
                        tokens_spent: 5,
                        key_env: None,
                    })
                },
            }
            .into(),
        };
        let mut events: Vec<Event> = tokens.iter().map(|t| event(true, *t)).collect();
        events.push(event(false, 0));
        store
            .commit_step(
                &run_id,
                StepCommit {
                    events,
                    ..StepCommit::default()
                },
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_resumed_run_rebuilds_its_depth_and_its_trees_use_from_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("r.db")).unwrap());
        // root ─┬─ a ── a1
        //       └─ b
        run_with_calls(&store, "root", None, &[100, 50]).await;
        run_with_calls(&store, "a", Some("root"), &[20]).await;
        run_with_calls(&store, "a1", Some("a"), &[7, 3]).await;
        run_with_calls(&store, "b", Some("root"), &[]).await;
        let engine = Engine::builder(store).build().unwrap();

        let lineage = engine.lineage_of(&RunId::new("a1").unwrap()).await.unwrap();
        assert_eq!(lineage.depth, 2);
        assert_eq!(lineage.parent, Some(RunId::new("a").unwrap()));
        // Every run's own calls, the root's included; failed calls count
        // what they spent.
        assert_eq!(lineage.tree.tokens.load(Ordering::Acquire), 180 + 4 * 5);
        assert_eq!(lineage.tree.runs.load(Ordering::Acquire), 3, "child runs");

        let root = engine
            .lineage_of(&RunId::new("root").unwrap())
            .await
            .unwrap();
        assert_eq!((root.depth, root.parent), (0, None));
        assert_eq!(
            root.tree.tokens.load(Ordering::Acquire),
            200,
            "the same tree"
        );
    }
}

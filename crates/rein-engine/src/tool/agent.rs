//! The agent adapter: a tool of kind `agent` reaches its tool by starting
//! a child run of another agent, on a share of the caller's budget, inside
//! bounds the whole tree shares ([`AgentGraphLimits`]).
//!
//! # Why it is driven by the engine
//!
//! Unlike an HTTP request or a command, one attempt of an agent tool is a
//! whole run: the engine drives it with the parent's context (its lineage
//! in the tree, its cancellation, its validator), so this adapter is an
//! [`Engine`] method rather than a value beside the engine. A child is
//! never dropped mid-way: it sees a cancellation through its own (child)
//! token, settles its effects and records its end, and its parent waits
//! for that.
//!
//! # Why deterministic
//!
//! A child's id is derived from the intent that started it, so a parent
//! resumed after a crash finds its child again (finished: its report is
//! the result; interrupted: it is resumed) instead of starting a second
//! one.
//!
//! | the child | the parent's tool result |
//! | --- | --- |
//! | succeeded | its answer, outcome and consumption |
//! | failed or cancelled with nothing standing | a failure, `not_applied` |
//! | ran out of budget | a failure, `applied` (what it did stands) |
//! | handed off | a failure, `maybe_applied` |
//! | interrupted with its process | a failure, `maybe_applied`, until the parent's resume resumes it |
//! | refused by the tree's bounds | `budget_exhausted`, `not_applied`, not retryable |

use std::num::{NonZeroU32, NonZeroU64};
use std::sync::atomic::Ordering;

use rein_core::deadline::{Budget, BudgetLimits, Cost};
use rein_core::registry::AgentGraphLimits;
use rein_core::{Category, Effect, Failure, LedgerStatus, Outcome, RunId, RunReport};
use rein_store::RunStatus;
use serde_json::json;

use super::ToolOutput;
use crate::run::child_stack::OnEnoughStack;
use crate::run::{
    AgentBinding, AgentTarget, Engine, EngineError, Lineage, Planned, RunCtx, RunRequest,
    ToolBinding,
};

impl Engine {
    /// Runs the child agent of an `agent` tool call, as one attempt.
    pub(crate) async fn child_run(
        &self,
        ctx: &RunCtx<'_>,
        planned: &Planned,
        tool: &ToolBinding,
        target: &AgentTarget,
        budget: &Budget,
    ) -> Result<ToolOutput, Failure> {
        let refuse = |why: String| refused(tool, why);
        let limits = self.agent_graph;
        let depth = ctx.lineage.depth + 1;
        let tree = &ctx.lineage.tree;
        if let Some(why) = beyond_bounds(&limits, depth, tree.tokens.load(Ordering::Acquire)) {
            return Err(refuse(format!(
                "agent `{}` not started: {why}",
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
            && let Some(max) = limits.max_total_runs.map(NonZeroU32::get)
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
        agent.budget = self.child_budget(budget, target, &agent).map_err(refuse)?;
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
            // On a stack segment of its own once the thread's runs low
            // (see `child_stack`): a tree's depth must not overflow it.
            OnEnoughStack::new(self.resume_in(
                &agent,
                ctx.validator,
                &child_id,
                None,
                Some(cancel),
                self.retry_timing(),
                lineage,
            ))
            .await
        } else {
            let request = RunRequest {
                run_id: Some(child_id.clone()),
                tenant: Some(ctx.tenant.clone()),
                input,
                cancel: Some(cancel),
                // The agent tool's attempt span, when traces are on.
                trace_parent: crate::telemetry::TraceParent::current(),
                ..RunRequest::default()
            };
            OnEnoughStack::new(self.run_in(&agent, ctx.validator, request, lineage)).await
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

    /// The child's budget: a ratio of what the call may still use
    /// (`budget`), capped by the target's caps, and never more than the
    /// child agent's own budget in any dimension.
    fn child_budget(
        &self,
        budget: &Budget,
        target: &AgentTarget,
        agent: &AgentBinding,
    ) -> Result<BudgetLimits, String> {
        let now = self.clock.now();
        let mut parent = budget.clone();
        let (share, _grant) = parent.nested(now, target.budget_ratio, target.caps);
        let left = share.remaining(now);
        let own = agent.budget;
        let mut child = BudgetLimits::new(left.time.min(own.wall_clock()))
            .map_err(|e| format!("no budget left for a child: {e}"))?;
        let min = |a: Option<u64>, b: Option<u64>| match (a, b) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(steps) = min(left.steps.map(u64::from), own.steps().map(u64::from)) {
            child = child
                .with_steps(u32::try_from(steps).unwrap_or(u32::MAX).max(1))
                .map_err(|e| e.to_string())?;
        }
        if let Some(tokens) = min(left.tokens, own.tokens()) {
            child = child
                .with_tokens(tokens.max(1))
                .map_err(|e| e.to_string())?;
        }
        if let Some(micros) = min(left.cost.map(Cost::micros), own.cost().map(Cost::micros)) {
            child = child
                .with_cost(Cost::from_micros(micros.max(1)))
                .map_err(|e| e.to_string())?;
        }
        Ok(child)
    }
}

/// Why a child at `depth` may not start in a tree that used `tokens`, if
/// a bound forbids it (the count of child runs is checked when one is
/// really started: a resumed child does not count again).
fn beyond_bounds(limits: &AgentGraphLimits, depth: u32, tokens: u64) -> Option<String> {
    if depth > limits.max_depth {
        return Some(format!(
            "the tree is at its depth limit ({})",
            limits.max_depth
        ));
    }
    match limits.max_total_tokens.map(NonZeroU64::get) {
        Some(max) if tokens >= max => Some(format!("the tree used its {max} tokens")),
        _ => None,
    }
}

/// A child that was not started: out of the tree's bounds or its budget.
fn refused(tool: &ToolBinding, why: String) -> Failure {
    Failure::new(&tool.name, Category::BudgetExhausted)
        .with_effect(Effect::NotApplied)
        .with_retryable(false)
        .with_human_message(why)
}

/// A finished child run as the parent's tool result.
fn outcome_of(
    tool: &ToolBinding,
    child_id: &RunId,
    report: RunReport,
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
                .all(|c| !matches!(c.ledger, Some(LedgerStatus::Succeeded))) =>
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
    use super::*;

    #[test]
    fn beyond_bounds_refuses_past_the_depth_and_at_the_token_total() {
        let limits = AgentGraphLimits::default()
            .with_max_depth(2)
            .with_max_total_tokens(NonZeroU64::new(100));
        assert_eq!(beyond_bounds(&limits, 2, 99), None);
        assert_eq!(
            beyond_bounds(&limits, 3, 0).as_deref(),
            Some("the tree is at its depth limit (2)")
        );
        assert_eq!(
            beyond_bounds(&limits, 1, 100).as_deref(),
            Some("the tree used its 100 tokens")
        );
        let unlimited = limits.with_max_total_tokens(None);
        assert_eq!(beyond_bounds(&unlimited, 1, u64::MAX), None);
    }
}

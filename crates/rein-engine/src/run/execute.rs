//! Running a turn's planned calls on a divided budget.

use std::collections::HashMap;
use std::time::Duration;

use rein_core::deadline::{Budget, ChildCaps, Deadline, Usage};
use rein_core::event::{AllocationShape, BudgetAllocated, CallRejected, Refused};
use rein_core::{Category, Clock, Failure, IntentId, LedgerRecord, ToolClass, Weight};

use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::Engine;
use super::guarded::{CallResult, Planned};

impl Engine {
    /// Runs a turn's planned calls.
    pub(super) async fn execute(
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
            // Sabotage hook `parallel_same_resource`: every write its own lane.
            #[cfg(feature = "sabotage")]
            let serialise = !self.sabotage.parallel_same_resource;
            #[cfg(not(feature = "sabotage"))]
            let serialise = true;
            let lanes = super::fan_out::lanes(agent, others, serialise);
            let now = self.clock.now();
            // A lane of k calls runs them one after another: it gets k
            // shares of the remainder.
            let weights: Vec<Weight> = lanes
                .iter()
                .map(|lane| Weight::new("lane", lane.len() as f64).unwrap_or_default())
                .collect();
            let shares = budget.parallel(now, &weights, ChildCaps::default());
            if lanes.len() > 1 {
                ctx.emitter.emit(
                    &Correlation {
                        step,
                        ..Correlation::default()
                    },
                    BudgetAllocated {
                        shape: AllocationShape::Parallel,
                        branches: lanes.len(),
                        each: shares.first().map(|(b, _)| b.remaining(now).time),
                        remaining: budget.remaining(now).time,
                    },
                );
            }
            let (branches, grants): (Vec<Budget>, Vec<_>) = shares.into_iter().unzip();
            // What the turn still has to do once its parallel calls are
            // sent: its irreversible calls, one by one, and the model turn
            // that reads the results.
            let tail = irreversible
                .iter()
                .filter_map(|p| self.allowance_of(ctx, p))
                .fold(self.answer_turn(ctx), |sum, d| sum.saturating_add(d));
            let turn_deadline = budget.deadline();
            let futures = lanes
                .into_iter()
                .zip(branches)
                .map(|(lane, branch)| self.run_lane(ctx, lane, branch, prior, turn_deadline, tail));
            let mut used = Vec::new();
            for (lane_results, lane_used) in futures_util::future::join_all(futures).await {
                results.extend(lane_results);
                used.push(lane_used);
            }
            results.sort_by_key(|r| r.planned.position);
            let now = self.clock.now();
            // A child run's consumption is charged to this run: one
            // budget for the whole tree, never reset.
            for (grant, lane_used) in grants.into_iter().zip(used) {
                let _ = budget.settle(grant, lane_used, now);
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
            let (mut child, grant) = budget.serial(now);
            let before = prior.get(&p.intent_id);
            let intent = p.intent_id.clone();
            let result = self
                .guarded_call(ctx, p, tool, &mut child, before, None)
                .await;
            let _ = budget.settle(grant, ctx.take_child_usage(&intent), self.clock.now());
            results.push(result);
        }
        results
    }

    /// Runs one lane's calls one after another on the lane's `branch`, each
    /// with everything the lane has left: what the lane used (its child
    /// runs' consumption) is returned for the turn's budget.
    ///
    /// Each call may wait at its resource group's governor until the turn's
    /// deadline less `tail` (what the turn does after its parallel calls)
    /// and less the allowances of the calls after it in the lane — its
    /// horizon — rather than only within its own share; its share (and the
    /// lane's) then starts when it is sent.
    async fn run_lane(
        &self,
        ctx: &RunCtx<'_>,
        lane: Vec<Planned>,
        mut branch: Budget,
        prior: &HashMap<IntentId, LedgerRecord>,
        turn_deadline: Deadline,
        tail: Duration,
    ) -> (Vec<CallResult>, Usage) {
        let mut results = Vec::with_capacity(lane.len());
        // What follows each call in the lane: the allowances of the ones
        // after it.
        let allowances: Vec<Duration> = lane
            .iter()
            .map(|p| self.allowance_of(ctx, p).unwrap_or_default())
            .collect();
        let mut following: Duration = allowances
            .iter()
            .fold(Duration::ZERO, |sum, d| sum.saturating_add(*d));
        for (p, allowance) in lane.into_iter().zip(allowances) {
            following = following.saturating_sub(allowance);
            let Some(tool) = ctx.agent.tools.get(&p.tool) else {
                continue;
            };
            let horizon = earlier_by(turn_deadline, tail.saturating_add(following));
            let (mut child, grant) = branch.serial(self.clock.now());
            let planned_deadline = child.deadline();
            let intent = p.intent_id.clone();
            let before = prior.get(&p.intent_id);
            results.push(
                self.guarded_call(ctx, p, tool, &mut child, before, Some(horizon))
                    .await,
            );
            // The call's wait moved its share: the lane's moves with it.
            let waited = child
                .deadline()
                .instant()
                .saturating_duration_since(planned_deadline.instant());
            branch.postpone(waited, horizon);
            let _ = branch.settle(grant, ctx.take_child_usage(&intent), self.clock.now());
        }
        (results, branch.used())
    }

    /// One attempt's whole allowance of a planned call (its latency
    /// profile's p99 × factor, as planned now); `None` for a tool the agent
    /// does not have.
    fn allowance_of(&self, ctx: &RunCtx<'_>, p: &Planned) -> Option<Duration> {
        let tool = ctx.agent.tools.get(&p.tool)?;
        Some(
            self.shared
                .latency
                .plan(tool, Some(&p.args))
                .allowance(Duration::MAX),
        )
    }

    /// The median of the model turn that reads a turn's results (observed
    /// once trusted, the agent's `model_latency` until then).
    fn answer_turn(&self, ctx: &RunCtx<'_>) -> Duration {
        let agent = ctx.agent;
        self.shared
            .latency
            .plan_model(agent.provider.name(), &agent.model, agent.model_latency)
            .profile
            .p50()
    }
}

/// `deadline` moved `by` earlier (not before the origin).
fn earlier_by(deadline: Deadline, by: Duration) -> Deadline {
    Deadline::at(rein_core::Instant::from_origin(
        deadline.instant().since_origin().saturating_sub(by),
    ))
}

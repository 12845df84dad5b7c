//! Running a turn's planned calls on a divided budget.

use std::collections::HashMap;

use rein_core::deadline::{Budget, ChildCaps};
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
}

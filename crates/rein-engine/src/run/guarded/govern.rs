//! Step 4 of the guarded call: the governor of the tool's resource group
//! (its bucket and adaptive concurrency limit, see `run/concurrency.rs`),
//! before anything is declared or sent, and the slot's release with what
//! the attempt taught the limit.

use std::time::Duration;

use rein_core::deadline::{Budget, Deadline, Need};
use rein_core::event::{BudgetExhausted, BudgetScope, CallShed, ConcurrencyAdjusted, RateLimited};
use rein_core::governor::{Adjustment, Cause, Completion};
use rein_core::{Category, Clock, Effect, Failure};

use crate::run::binding::ToolBinding;
use crate::run::concurrency::{BUDGET_AFTER_WAIT, Caller, Gate, GroupLimits, Shed, Slot};
use crate::run::emitter::Correlation;
use crate::run::latency::Plan;
use crate::run::{Engine, RunCtx};

impl Engine {
    /// The governor's gate of `tool`'s resource group, when the agent gives
    /// that group a rate or a ceiling.
    pub(in crate::run) fn gate<'t>(
        &self,
        ctx: &RunCtx<'_>,
        tool: &'t ToolBinding,
    ) -> Option<Gate<'t>> {
        // Sabotage hook `bypass_governor`: no group is governed.
        #[cfg(feature = "sabotage")]
        if self.sabotage.bypass_governor {
            return None;
        }
        let group = tool.resource_group.as_deref()?;
        let limits = GroupLimits {
            rate: ctx.agent.group_rates.get(group).copied(),
            max_concurrency: ctx.agent.group_limits.get(group).copied(),
        };
        // Sabotage hook `fixed_concurrency`: the limit never adapts.
        #[cfg(feature = "sabotage")]
        if self.sabotage.fixed_concurrency {
            return self.shared.slots.governed_fixed(group, limits);
        }
        self.shared.slots.governed(group, limits)
    }

    /// A slot of `tool`'s resource group before anything is declared or
    /// sent (`None`: the group is not governed). The wait is bounded by
    /// [`latest_start`]: `horizon` (the turn's deadline less what the turn
    /// still has to do after this call) less the call's whole allowance,
    /// or the call's own deadline less what it needs when sent (both by
    /// its latency `plan`), whichever is later. A call that waited under a
    /// horizon has its `budget` postponed by the wait (within the
    /// horizon): its share of time starts when it is sent. After a wait
    /// the budget is checked again, so a write never goes out without its
    /// allowance.
    ///
    /// # Errors
    ///
    /// The structured failure of a call shed unsent: no time to wait
    /// (`timeout`), the budget spent while waiting (`budget_exhausted`), or
    /// the run interrupted while waiting (`cancelled`).
    pub(super) async fn govern(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        tool: &ToolBinding,
        budget: &mut Budget,
        plan: &Plan,
        horizon: Option<Deadline>,
    ) -> Result<Option<Slot>, Failure> {
        let Some(gate) = self.gate(ctx, tool) else {
            return Ok(None);
        };
        let (need, allowance) = (plan.need(tool.class), plan.allowance(Duration::MAX));
        let latest = latest_start(budget.deadline(), need, horizon, allowance);
        let entered = tokio::select! {
            entered = gate.enter_for(caller(ctx), latest, Duration::ZERO) => entered,
            () = ctx.interrupted() => {
                return Err(Failure::new(&tool.name, Category::Cancelled)
                    .with_effect(Effect::NotApplied)
                    .with_human_message(format!(
                        "{} not started: the run was interrupted while it waited for resource group `{}`",
                        tool.name,
                        gate.group()
                    )));
            }
        };
        if let (Some(horizon), Ok(slot)) = (horizon, &entered) {
            budget.postpone(slot.waited, horizon);
        }
        self.admitted(ctx, c, tool, &gate, entered, budget, need)
            .map(Some)
    }

    /// What an attempt's entry at its group's gate gave, made visible and
    /// checked: a shed is `call_shed` and its structured failure; a slot
    /// that came after a wait is `rate_limited` when a bucket made it wait,
    /// and the budget is checked again (the wait spent time): a call that
    /// no longer fits is shed too (`budget_exhausted`, then `call_shed`
    /// with reason `budget_after_wait`), so it never goes out without its
    /// allowance. The same for every attempt, a retry's included.
    ///
    /// # Errors
    ///
    /// The structured failure of the call that was not sent.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn admitted(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        tool: &ToolBinding,
        gate: &Gate<'_>,
        entered: Result<Slot, Shed>,
        budget: &Budget,
        need: Duration,
    ) -> Result<Slot, Failure> {
        let slot = match entered {
            Ok(slot) => slot,
            Err(shed) => {
                ctx.emitter.emit(
                    c,
                    CallShed {
                        tool: tool.name.clone(),
                        model: None,
                        resource_group: gate.group().to_owned(),
                        reason: shed.reason.as_str().to_owned(),
                        waited: shed.waited,
                    },
                );
                return Err(shed.failure(&tool.name, gate));
            }
        };
        if slot.waited.is_zero() {
            return Ok(slot);
        }
        if let Some(Cause::RateLimited { bucket, .. }) = slot.cause {
            ctx.emitter.emit(
                c,
                RateLimited {
                    tool: tool.name.clone(),
                    model: None,
                    resource_group: gate.group().to_owned(),
                    bucket: bucket.as_str().to_owned(),
                    waited: slot.waited,
                },
            );
        }
        // The wait spent time: what is left must still cover the call.
        if let Err(exhausted) = budget.check(&Need::time(need), self.clock.now()) {
            ctx.emitter.emit(
                c,
                BudgetExhausted {
                    tool: Some(tool.name.clone()),
                    ..BudgetExhausted::new(BudgetScope::ToolCall, exhausted)
                },
            );
            ctx.emitter.emit(
                c,
                CallShed {
                    tool: tool.name.clone(),
                    model: None,
                    resource_group: gate.group().to_owned(),
                    reason: BUDGET_AFTER_WAIT.to_owned(),
                    waited: slot.waited,
                },
            );
            return Err(
                Failure::new(&tool.name, Category::BudgetExhausted).with_human_message(format!(
                    "{} not started: after waiting {:?} for resource group `{}`, {exhausted}",
                    tool.name,
                    slot.waited,
                    gate.group()
                )),
            );
        }
        Ok(slot)
    }

    /// Releases an attempt's slot with how it ended.
    pub(super) fn finish_slot(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        slot: Option<Slot>,
        completion: Completion,
    ) {
        let Some(slot) = slot else { return };
        let group = slot.group().to_owned();
        let (old, new, reason) = match slot.finish(completion) {
            Adjustment::Unchanged => return,
            Adjustment::Shrunk { old, new, reason } => (old, new, reason.to_string()),
            Adjustment::Grew { old, new } => (
                old,
                new,
                "a round of successes with the limit in use".to_owned(),
            ),
        };
        ctx.emitter.emit(
            c,
            ConcurrencyAdjusted {
                resource_group: group,
                old,
                new,
                reason,
            },
        );
    }
}

/// The latest instant a call may leave its group's queue, as a deadline
/// with nothing more needed after it: its own `deadline` less `need` (what
/// it needs left when sent), or — for a call of a parallel turn — its
/// `horizon` less its whole `allowance`, whichever is later. A call's
/// share of the turn starts when it is sent (see `Budget::postpone`), so
/// a wait planned against the horizon still leaves the call its allowance.
pub(in crate::run) fn latest_start(
    deadline: Deadline,
    need: Duration,
    horizon: Option<Deadline>,
    allowance: Duration,
) -> Deadline {
    let before = |d: Deadline, by: Duration| {
        Deadline::at(rein_core::Instant::from_origin(
            d.instant().since_origin().saturating_sub(by),
        ))
    };
    let own = before(deadline, need);
    match horizon {
        Some(horizon) => own.max(before(horizon, allowance.max(need))),
        None => own,
    }
}

/// The governor's caller of a run's tool call: its tenant and run, in its
/// tree's class (batch for a queued root's tree, interactive for a sync
/// one; see `concurrency.rs` on classes).
pub(in crate::run) fn caller<'a>(ctx: &'a RunCtx<'_>) -> Caller<'a> {
    Caller {
        tenant: &ctx.tenant,
        run: &ctx.run_id,
        class: class_of(ctx),
    }
}

/// The class a run's calls are admitted in: its tree's, unless a test
/// build runs with the `no_class_priority` sabotage (`REIN_SABOTAGE`, see
/// `crash.rs`), which admits every call as batch so interactive work gets
/// no priority and no reserved share at a busy group.
fn class_of(ctx: &RunCtx<'_>) -> rein_core::governor::Class {
    static NO_CLASS_PRIORITY: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if crate::crash::ENABLED
        && *NO_CLASS_PRIORITY.get_or_init(|| crate::crash::sabotaged(NO_CLASS_PRIORITY_SWITCH))
    {
        return rein_core::governor::Class::Batch;
    }
    ctx.lineage.tree.class
}

/// The [`crate::crash::SABOTAGE_ENV`] switch that takes class priority
/// away from the governor's queues.
pub(crate) const NO_CLASS_PRIORITY_SWITCH: &str = "no_class_priority";

//! The guarded call: budget, breakers, key, ledger, attempts with classified
//! retries, record — in the order of DESIGN.md.

mod admit;
mod attempt;
mod govern;
mod ledger;
mod replay;

use std::time::Duration;

use rein_core::deadline::{Budget, Deadline, Need};
use rein_core::event::{BudgetExhausted, BudgetScope};
use rein_core::idempotency::IdempotencyKey;
use rein_core::{Category, Clock, Effect, Failure, LedgerRecord, LedgerStatus};
use serde_json::Value;

use super::binding::ToolBinding;
use super::emitter::Correlation;
use super::{Engine, RunCtx};
pub(super) use govern::caller;
pub use rein_core::call::{CallResult, Planned};

/// What the attempt loop ended with.
pub(super) struct Attempted {
    /// The result, or the failure it gave up with.
    pub(super) outcome: Result<Value, Failure>,
    /// Attempts made, including any that never got a concurrency slot.
    pub(super) attempts: u32,
    /// Attempts that reached the tool.
    pub(super) sent: u32,
}

impl Engine {
    /// Runs one planned call through the guard. Never returns an error:
    /// every failure is a structured [`Failure`] in the result.
    ///
    /// `horizon`, for a call of a parallel turn: the latest deadline its
    /// wait at the governor may plan for (the turn's, less what the turn
    /// still has to do after it). The call's own `budget` (its share of the
    /// turn) then starts when it is sent: postponed by the wait, within the
    /// horizon, which the caller reads back. `None`: the wait is bounded by
    /// the call's own deadline.
    pub(super) async fn guarded_call(
        &self,
        ctx: &RunCtx<'_>,
        planned: Planned,
        tool: &ToolBinding,
        budget: &mut Budget,
        prior: Option<&LedgerRecord>,
        horizon: Option<Deadline>,
    ) -> CallResult {
        let mut c = Correlation {
            step: planned.step,
            intent_id: Some(planned.intent_id.clone()),
            ..Correlation::default()
        };
        // 0. A resumed call whose effect is already recorded is not run
        // again; an irreversible call in doubt is never repeated.
        if let Some(record) = prior
            && let Some(result) = self.replay_prior(ctx, &c, &planned, tool, record)
        {
            return result;
        }
        // 1. Nothing new starts once the run is being handed on.
        if ctx.is_interrupted() {
            let failure = Failure::new(&tool.name, Category::Cancelled)
                .with_effect(Effect::NotApplied)
                .with_human_message(format!(
                    "{} not started: the run was interrupted (its process is stopping)",
                    tool.name
                ));
            return CallResult::refused(planned, tool.class, failure);
        }

        // 2. Budget: refuse before sending what cannot finish, by the
        // latency profile in force now (observed once trusted).
        self.load_learned().await;
        let plan = self.shared.latency.plan(tool, Some(&planned.args));
        if let Err(failure) = self.check_call_budget(ctx, &c, tool, budget, plan.need(tool.class)) {
            return CallResult::refused(planned, tool.class, failure);
        }

        // 3. Breakers: the tool's arm, then its resource group's. Each
        // permit is held by a guard from here: a return below, or this
        // future dropped mid-call, gives it back unused.
        // Another process's opening of either arm, or a Retry-After
        // cooldown of the tool, refuses it first (shared breakers).
        // A retry the operator sent early (`rein resume --now`) is not held
        // back by the cooldown its own refusal shared.
        if !ctx.retries_now(&planned.intent_id)
            && let Some(f) = self.admit_shared_call(&ctx.emitter, &c, tool).await
        {
            return CallResult::refused(planned, tool.class, f);
        }
        let (tool_permit, group_permit) = match self.admit_call(&ctx.emitter, &c, tool) {
            Ok(permits) => permits,
            Err(f) => return CallResult::refused(planned, tool.class, f),
        };

        // 4. Governor: the resource group's bucket and concurrency limit.
        // Over them the call waits, bounded by its horizon (or deadline)
        // less what it needs; one that cannot start in time is shed here —
        // before its ledger record exists, so nothing is pending and
        // nothing is sent.
        // Sabotage hook `declare_before_shed`: the write is declared before
        // the governor decides, and a shed leaves that record pending.
        #[cfg(feature = "sabotage")]
        let declared_early = self.sabotage.declare_before_shed && tool.class.has_side_effect();
        #[cfg(feature = "sabotage")]
        if declared_early {
            let key = IdempotencyKey::derive(
                tool.class,
                &ctx.tenant,
                &planned.intent_id,
                &tool.name,
                &planned.args,
                &tool.normalizer,
            );
            if let Err(failure) = self
                .declare_pending(ctx, &c, &planned, tool, key.as_ref(), prior)
                .await
            {
                return CallResult::refused(planned, tool.class, failure);
            }
        }
        let admitted = match self.govern(ctx, &c, tool, budget, &plan, horizon).await {
            Ok(slot) => slot,
            Err(failure) => return CallResult::refused(planned, tool.class, failure),
        };

        // 5. Key: bound to the intent; none for irreversible tools.
        let key = IdempotencyKey::derive(
            tool.class,
            &ctx.tenant,
            &planned.intent_id,
            &tool.name,
            &planned.args,
            &tool.normalizer,
        );
        c.idempotency_key = key.clone();

        // 6. Ledger: declared before the call, durably.
        let mut ledger = None;
        if tool.class.has_side_effect() {
            #[cfg(feature = "sabotage")]
            let declared = declared_early;
            #[cfg(not(feature = "sabotage"))]
            let declared = false;
            if !declared
                && let Err(failure) = self
                    .declare_pending(ctx, &c, &planned, tool, key.as_ref(), prior)
                    .await
            {
                return CallResult::refused(planned, tool.class, failure);
            }
            ledger = Some(LedgerStatus::Pending);
        }

        // 7–8. Attempts, classified and decided.
        self.deposit_request(&super::tool_target(&tool.name), &ctx.agent.retry);
        let Attempted {
            outcome,
            attempts,
            sent,
        } = self
            .attempts(
                ctx,
                &mut c,
                &planned,
                tool,
                budget,
                key.as_ref(),
                &ctx.agent.retry,
                admitted,
            )
            .await;

        // 9. Record. A call that never reached the tool (no concurrency
        // slot before its deadline) says nothing about the target's health:
        // its permits go back unused.
        for permit in std::iter::once(tool_permit).chain(group_permit) {
            if sent > 0 {
                self.report_outcome(&ctx.emitter, &c, permit, outcome.as_ref().map(|_| ()))
                    .await;
            } else {
                drop(permit);
            }
        }
        if ledger.is_some() {
            let status = self
                .mark_ledger(ctx, &c, &planned, tool, &outcome, attempts)
                .await;
            ledger = Some(status);
        }
        CallResult {
            planned,
            class: tool.class,
            outcome,
            ledger,
            attempts,
        }
    }

    /// Step 2 of the guarded call: refuses, before sending, a call the
    /// budget cannot finish (`need`: see `Plan::need`), with a
    /// `budget_exhausted` failure and event.
    fn check_call_budget(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        tool: &ToolBinding,
        budget: &Budget,
        need: Duration,
    ) -> Result<(), Failure> {
        let now = self.clock.now();
        let Err(exhausted) = budget.check(&Need::time(need), now) else {
            return Ok(());
        };
        ctx.emitter.emit(
            c,
            BudgetExhausted {
                tool: Some(tool.name.clone()),
                ..BudgetExhausted::new(BudgetScope::ToolCall, exhausted)
            },
        );
        Err(Failure::new(&tool.name, Category::BudgetExhausted)
            .with_human_message(format!("{} not started: {exhausted}", tool.name)))
    }
}

/// Whether `record` is a call an interrupt stopped after its declaration
/// and before anything was sent ([`Engine::not_sent`]): failed, not
/// applied, cancelled, with no attempt made. A resume sends it afresh under
/// its intent and key; any other failed record stands.
///
/// NOTE: matches what `Engine::not_sent` marks; no other path marks a
/// record failed without an attempt (the attempt loop counts every attempt
/// it starts, one that never got a concurrency slot included).
pub(super) fn is_unsent(record: &LedgerRecord) -> bool {
    record.status == LedgerStatus::Failed
        && record.attempts == 0
        && record.failure.as_ref().is_some_and(|f| {
            f.category() == Category::Cancelled && f.effect() == Effect::NotApplied
        })
}

/// Whole milliseconds of `d`.
pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

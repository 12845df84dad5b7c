//! Settling a failed run's side effects: the partial-failure decision, the
//! compensation executor and the handoff package.
//!
//! # Why
//!
//! Retries cannot un-send an email. When a run fails after it changed the
//! world, its effects are either kept on purpose (and reported as partial
//! success), undone in strict reverse order of execution, or handed to a
//! human with everything needed to decide — never left dangling (invariant
//! 3). Compensation runs on a reserved share of the run's time, not on
//! whatever the forward path left over.
//!
//! ```text
//! decision    whether effects are kept, undone or handed to a human
//! compensate  undoing one effect: resolve it if in doubt, then its compensation
//! handoff     leaving effects to a human, with what they must check first
//! ```

use rein_core::deadline::Deadline;
use rein_core::handoff::InFlight;
use rein_core::outcome::CompensationResult;
use rein_core::report::{End, Settled};
use rein_core::{
    Clock, EventKind, FailurePolicy, IntentId, LedgerRecord, LedgerStatus, Outcome, RunReport,
};
use rein_store::{LedgerMark, StepCommit};
use serde_json::{Value, json};

use super::emitter::{Correlation, unix_ms};
use super::tree_settle::{self, Item, is_open};
use super::{Engine, RunCtx};

mod compensate;
mod decision;
mod handoff;

pub use compensate::{CompensationBinding, STRONG_COMPENSATION_ATTEMPTS};
use decision::fixable_by_time;

/// What the settlement of a run did: its conclusion, what became of each
/// effect, and what a human taking over must check first. The report is
/// derived from it and from the ledger afterwards, once.
#[derive(Debug, Clone)]
pub(super) struct Settlement {
    /// What it concluded.
    pub(super) settled: Settled,
    /// Each compensation (or decision to leave an effect) and its result.
    pub(super) compensations: Vec<CompensationResult>,
    /// Resources still held for the run, when it was handed off.
    pub(super) in_flight: Vec<InFlight>,
    /// Another process took the run over mid-settlement: nothing more is
    /// recorded from here.
    pub(super) lost: bool,
}

impl Settlement {
    pub(super) fn kept() -> Settlement {
        Settlement {
            settled: Settled::Kept,
            compensations: Vec::new(),
            in_flight: Vec::new(),
            lost: false,
        }
    }
}

impl Engine {
    /// Applies the partial-failure decision to a run that did not succeed
    /// (`report` is its report before settlement: what the calls say).
    pub(super) async fn settle(
        &self,
        ctx: &RunCtx<'_>,
        end: &End,
        report: &RunReport,
        compensation_deadline: Deadline,
        step: u32,
    ) -> Settlement {
        if report.outcome == Outcome::Succeeded {
            return Settlement::kept();
        }
        // From here on cancellation is ignored: undoing effects must finish.
        ctx.settling
            .store(true, std::sync::atomic::Ordering::Release);
        let ledger = match ctx.store.ledger(&ctx.run_id).await {
            Ok(records) => records,
            Err(e) => {
                let reason = format!("the ledger cannot be read to settle the run: {e}");
                return self.hand_off(ctx, Vec::new(), reason).await;
            }
        };
        // A call that started a child and was left in doubt is settled by
        // whether its child exists, before anything is decided.
        let ledger = self.resolve_child_calls(ctx, ledger, step).await;
        // The whole agent tree settles with its root: its children's
        // effects are the effects of the root's calls that started them.
        let tree = match self.descendants(&ctx.run_id).await {
            Ok(members) => self
                .intent_order(&ctx.run_id)
                .await
                .map(|order| (members, order)),
            Err(e) => Err(e),
        };
        let (members, root_order) = match tree {
            Ok(tree) => tree,
            Err(e) => {
                let reason = format!("the agent tree cannot be read to settle the run: {e}");
                return self.hand_off(ctx, Vec::new(), reason).await;
            }
        };
        let items = tree_settle::items(ctx, &ledger, &root_order, &members);
        let open: Vec<&Item> = items.iter().filter(|i| is_open(&i.record)).collect();
        // Records an earlier process (or the reconciler) already left to a
        // human: the run cannot end as if the world were restored.
        let already_human = items.iter().any(|i| {
            matches!(
                i.record.status,
                LedgerStatus::Manual | LedgerStatus::Uncompensatable
            )
        });
        // A read-only prefix (or writes that certainly did not happen):
        // degrade, the report already flags the gap.
        if open.is_empty() && !already_human {
            // An interrupted settlement that had already undone every
            // effect: the run failed and the world is as before.
            let settled = if matches!(end, End::Settling(_)) {
                Settled::Undone
            } else {
                Settled::Kept
            };
            return Settlement {
                settled,
                ..Settlement::kept()
            };
        }
        // An effect in doubt is never kept silently: even a failure that
        // time may fix must settle it.
        let in_doubt = open
            .iter()
            .any(|i| i.record.status == LedgerStatus::Pending);
        if !already_human
            && !in_doubt
            && (fixable_by_time(end, report) || ctx.agent.on_failure == FailurePolicy::Continue)
        {
            return Settlement::kept();
        }
        // An irreversible effect that cannot be undone (done, in doubt, or
        // already with a human), anywhere in the tree, stops automatic
        // undoing altogether: reverting the other writes alone could
        // contradict what it already told the world.
        let irreversible_open = tree_settle::irreversible_open(ctx, &items, &members);
        // From here on the run settles: make that durable first, so that a
        // process that dies mid-settlement is resumed into the settlement,
        // never back into the forward path.
        ctx.emitter.emit(
            EventKind::SettlementStarted,
            &Correlation {
                step,
                ..Correlation::default()
            },
            json!({"policy": ctx.agent.on_failure, "irreversible_open": irreversible_open,
                   "open_records": open.len(), "already_with_a_human": already_human,
                   "child_runs": members.len()}),
        );
        let commit = StepCommit {
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        if let Err(e) = ctx.commit(commit).await {
            let reason = format!("the settlement could not be recorded: {e}");
            return self.hand_off(ctx, Vec::new(), reason).await;
        }
        // Each child run with something to settle is acted on under its own
        // claim, in its own ledger.
        let mut member_ctxs: Vec<Option<Result<RunCtx<'_>, String>>> =
            members.iter().map(|_| None).collect();
        for (i, member) in members.iter().enumerate() {
            if member.ledger.iter().any(is_open) {
                member_ctxs[i] = Some(self.member_ctx(ctx, member).await);
            }
        }
        let held = |i: usize| -> Result<&RunCtx<'_>, String> {
            match &member_ctxs[i] {
                Some(Ok(c)) => Ok(c),
                Some(Err(why)) => Err(why.clone()),
                None => Err("the child run was not claimed".to_owned()),
            }
        };
        let unreachable = |item: &Item, why: String| CompensationResult {
            intent_id: item.record.intent_id.clone(),
            tool: item.record.tool.clone(),
            compensation_tool: None,
            status: LedgerStatus::Manual,
            note: format!("left for a human: {why}"),
        };
        let mut parties: Vec<(&RunCtx<'_>, Vec<LedgerRecord>)> = vec![(ctx, ledger.clone())];
        for (i, member) in members.iter().enumerate() {
            if let Ok(c) = held(i) {
                parties.push((c, member.ledger.clone()));
            }
        }

        let mut results = Vec::new();
        if ctx.agent.on_failure == FailurePolicy::Handoff || irreversible_open {
            let reason = if irreversible_open {
                "the run failed after an irreversible effect that cannot be undone; nothing was undone automatically"
            } else {
                "the run failed after changing the world and its policy is to hand off"
            };
            let own: Vec<LedgerRecord> = open
                .iter()
                .filter(|i| i.member.is_none())
                .map(|i| i.record.clone())
                .collect();
            results.extend(self.leave_for_human(ctx, own, step).await);
            for (i, _) in members.iter().enumerate() {
                let theirs: Vec<&Item> = open
                    .iter()
                    .copied()
                    .filter(|o| o.member == Some(i))
                    .collect();
                if theirs.is_empty() {
                    continue;
                }
                match held(i) {
                    Ok(c) => {
                        let records = theirs.iter().map(|o| o.record.clone()).collect();
                        results.extend(self.leave_for_human(c, records, step).await);
                    }
                    Err(why) => results.extend(theirs.iter().map(|o| unreachable(o, why.clone()))),
                }
            }
            results.extend(self.mark_child_calls(&parties, &members, step).await);
            for (i, member) in members.iter().enumerate() {
                if let Ok(c) = held(i) {
                    self.release_member(c, member, &ctx.run_id).await;
                }
            }
            return self.hand_off(ctx, results, reason.to_owned()).await;
        }

        // Compensate in strict reverse order of execution, across the tree.
        let mut order: Vec<&Item> = open.clone();
        order.sort_by(|a, b| {
            b.path
                .cmp(&a.path)
                .then_with(|| b.record.seq.cmp(&a.record.seq))
        });
        // Sabotage hook `forward_order_compensation`: undo in the order of
        // execution instead, breaking invariant 4.
        #[cfg(feature = "sabotage")]
        if self.sabotage.forward_order_compensation {
            order.reverse();
        }
        let mut lost = false;
        for item in order {
            if ctx.lost.is_cancelled() {
                // Another process owns the run now and will settle it.
                lost = true;
                break;
            }
            let target = match item.member {
                None => Ok(ctx),
                Some(i) => held(i),
            };
            match target {
                Ok(c) => {
                    if let Some(r) = self
                        .compensate_one(c, item.record.clone(), compensation_deadline, step)
                        .await
                    {
                        results.push(r);
                    }
                }
                Err(why) => results.push(unreachable(item, why)),
            }
        }
        if !lost {
            results.extend(self.mark_child_calls(&parties, &members, step).await);
        }
        for (i, member) in members.iter().enumerate() {
            if let Ok(c) = held(i) {
                self.release_member(c, member, &ctx.run_id).await;
            }
        }
        if lost {
            return Settlement {
                compensations: results,
                lost: true,
                ..Settlement::kept()
            };
        }
        let unsettled = already_human
            || results
                .iter()
                .any(|r| r.status != LedgerStatus::Compensated);
        if unsettled {
            let reason = "the run failed and some of its effects could not be undone automatically"
                .to_owned();
            self.hand_off(ctx, results, reason).await
        } else {
            // Undone completely: a cancelled run stays `cancelled` (the
            // caller's decision, honoured), any other ends `failed`.
            Settlement {
                settled: Settled::Undone,
                compensations: results,
                ..Settlement::kept()
            }
        }
    }

    /// Marks a ledger record and makes the events so far durable with it.
    pub(super) async fn mark(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        intent: &IntentId,
        status: LedgerStatus,
        result: Option<Value>,
        note: &str,
    ) {
        ctx.emitter.emit(
            EventKind::LedgerRecorded,
            c,
            json!({"status": status, "note": note}),
        );
        let mark = LedgerMark {
            status,
            result,
            failure: None,
            attempts: 0,
            at_ms: unix_ms(self.clock.system_now()),
        };
        let commit = StepCommit {
            marks: vec![(intent.clone(), mark)],
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        if let Err(e) = ctx.commit(commit).await {
            tracing::error!(run = %ctx.run_id, intent = %intent, "ledger mark {status} failed: {e}");
        }
    }
}

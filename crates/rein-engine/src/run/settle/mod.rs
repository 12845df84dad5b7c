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

use std::collections::HashMap;

use rein_core::deadline::Deadline;
use rein_core::event::{LedgerRecorded, SettlementStarted};
use rein_core::handoff::InFlight;
use rein_core::outcome::CompensationResult;
use rein_core::report::{End, Settled};
use rein_core::{Clock, IntentId, LedgerRecord, LedgerStatus, Outcome, RunReport};
use rein_store::{LedgerMark, StepCommit};
use serde_json::Value;

use super::emitter::{Correlation, unix_ms};
use super::tree_settle::{self, Item, Member, is_open};
use super::{Engine, RunCtx};

mod compensate;
mod decision;
mod handoff;

pub use compensate::{CompensationBinding, CompensationCall, STRONG_COMPENSATION_ATTEMPTS};
use decision::{Decision, Situation, compensation_order, decide};

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

/// The runs of an agent tree that settle together: the root, and each
/// child run with something open, under its own claim (or why it has
/// none).
struct Parties<'p> {
    root: &'p RunCtx<'p>,
    root_ledger: &'p [LedgerRecord],
    members: &'p [Member],
    /// By member: its context, why it has none, or `None` when it had
    /// nothing open.
    held: Vec<Option<Result<RunCtx<'p>, String>>>,
}

impl<'p> Parties<'p> {
    /// The context the records of `member` (the root's: `None`) settle in.
    fn of(&self, member: Option<usize>) -> Result<&RunCtx<'p>, String> {
        let Some(i) = member else {
            return Ok(self.root);
        };
        match self.held.get(i) {
            Some(Some(Ok(c))) => Ok(c),
            Some(Some(Err(why))) => Err(why.clone()),
            Some(None) | None => Err("the child run was not claimed".to_owned()),
        }
    }

    /// Each run held, with its ledger as the settlement found it.
    fn ledgers(&self) -> Vec<(&RunCtx<'p>, Vec<LedgerRecord>)> {
        let mut parties = vec![(self.root, self.root_ledger.to_vec())];
        for (i, member) in self.members.iter().enumerate() {
            if let Ok(c) = self.of(Some(i)) {
                parties.push((c, member.ledger.clone()));
            }
        }
        parties
    }
}

/// The result of a record whose run could not be acted on (`why`).
fn unreachable(item: &Item, why: String) -> CompensationResult {
    CompensationResult {
        intent_id: item.record.intent_id.clone(),
        tool: item.record.tool.clone(),
        compensation_tool: None,
        status: LedgerStatus::Manual,
        note: format!("left for a human: {why}"),
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
        let (ledger, members, root_order) = match self.read_tree(ctx, step).await {
            Ok(tree) => tree,
            Err(reason) => return self.hand_off(ctx, Vec::new(), reason).await,
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
        let irreversible_open = tree_settle::irreversible_open(ctx, &items, &members);
        let open_records: Vec<&LedgerRecord> = open.iter().map(|i| &i.record).collect();
        let decision = decide(&Situation {
            end,
            report,
            policy: ctx.agent.on_failure,
            open: &open_records,
            already_human,
            irreversible_open,
        });
        match decision {
            Decision::Nothing(settled) => {
                return Settlement {
                    settled,
                    ..Settlement::kept()
                };
            }
            Decision::Keep => return Settlement::kept(),
            Decision::HandOff(_) | Decision::Compensate => {}
        }
        // From here on the run settles: make that durable first, so that a
        // process that dies mid-settlement is resumed into the settlement,
        // never back into the forward path.
        ctx.emitter.emit(
            &Correlation {
                step,
                ..Correlation::default()
            },
            SettlementStarted {
                policy: ctx.agent.on_failure,
                irreversible_open,
                open_records: open.len(),
                already_with_a_human: already_human,
                child_runs: members.len(),
            },
        );
        let commit = StepCommit {
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        if let Err(e) = self.commit(ctx, commit).await {
            let reason = format!("the settlement could not be recorded: {e}");
            return self.hand_off(ctx, Vec::new(), reason).await;
        }
        // Each child run with something to settle is acted on under its own
        // claim, in its own ledger.
        let mut held = Vec::with_capacity(members.len());
        for member in &members {
            held.push(if member.ledger.iter().any(is_open) {
                Some(self.member_ctx(ctx, member).await)
            } else {
                None
            });
        }
        let parties = Parties {
            root: ctx,
            root_ledger: &ledger,
            members: &members,
            held,
        };
        let settlement = match decision {
            Decision::HandOff(reason) => {
                self.leave_tree_for_human(&parties, &open, &reason, step)
                    .await
            }
            _ => {
                self.undo_tree(&parties, &open, already_human, compensation_deadline, step)
                    .await
            }
        };
        for (i, member) in members.iter().enumerate() {
            if let Ok(c) = parties.of(Some(i)) {
                self.release_member(c, member, &ctx.run_id).await;
            }
        }
        match settlement {
            Ok(settlement) => settlement,
            Err((results, reason)) => self.hand_off(ctx, results, reason).await,
        }
    }

    /// The root's ledger (its calls that started a child and were left in
    /// doubt settled first, by whether the child exists), its tree's child
    /// runs and the root's intent order; why not, when the store cannot say.
    async fn read_tree(
        &self,
        ctx: &RunCtx<'_>,
        step: u32,
    ) -> Result<
        (
            Vec<LedgerRecord>,
            Vec<Member>,
            HashMap<IntentId, (u32, u32)>,
        ),
        String,
    > {
        let ledger = match ctx.store.ledger(&ctx.run_id).await {
            Ok(records) => records,
            Err(e) => return Err(format!("the ledger cannot be read to settle the run: {e}")),
        };
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
        match tree {
            Ok((members, order)) => Ok((ledger, members, order)),
            Err(e) => Err(format!(
                "the agent tree cannot be read to settle the run: {e}"
            )),
        }
    }

    /// Leaves every open record of the tree to a human, each in its own
    /// run's ledger; the handoff's results and `reason`.
    async fn leave_tree_for_human(
        &self,
        parties: &Parties<'_>,
        open: &[&Item],
        reason: &str,
        step: u32,
    ) -> Result<Settlement, (Vec<CompensationResult>, String)> {
        let own: Vec<LedgerRecord> = open
            .iter()
            .filter(|i| i.member.is_none())
            .map(|i| i.record.clone())
            .collect();
        let mut results = self.leave_for_human(parties.root, own, step).await;
        for i in 0..parties.members.len() {
            let theirs: Vec<&Item> = open
                .iter()
                .copied()
                .filter(|o| o.member == Some(i))
                .collect();
            if theirs.is_empty() {
                continue;
            }
            match parties.of(Some(i)) {
                Ok(c) => {
                    let records = theirs.iter().map(|o| o.record.clone()).collect();
                    results.extend(self.leave_for_human(c, records, step).await);
                }
                Err(why) => results.extend(theirs.iter().map(|o| unreachable(o, why.clone()))),
            }
        }
        results.extend(
            self.mark_child_calls(&parties.ledgers(), parties.members, step)
                .await,
        );
        Err((results, reason.to_owned()))
    }

    /// Compensates every open record of the tree in strict reverse order
    /// of execution: `Ok` when all were undone (or the run was lost
    /// mid-way), else the results for a human and why.
    async fn undo_tree(
        &self,
        parties: &Parties<'_>,
        open: &[&Item],
        already_human: bool,
        deadline: Deadline,
        step: u32,
    ) -> Result<Settlement, (Vec<CompensationResult>, String)> {
        #[allow(unused_mut)]
        let mut order = compensation_order(open);
        // Sabotage hook `forward_order_compensation`: undo in the order of
        // execution instead, breaking invariant 4.
        #[cfg(feature = "sabotage")]
        if self.sabotage.forward_order_compensation {
            order.reverse();
        }
        let mut results = Vec::new();
        for item in order {
            if parties.root.lost.is_cancelled() {
                // Another process owns the run now and will settle it.
                return Ok(Settlement {
                    compensations: results,
                    lost: true,
                    ..Settlement::kept()
                });
            }
            match parties.of(item.member) {
                Ok(c) => {
                    if let Some(r) = self
                        .compensate_one(c, item.record.clone(), deadline, step)
                        .await
                    {
                        results.push(r);
                    }
                }
                Err(why) => results.push(unreachable(item, why)),
            }
        }
        results.extend(
            self.mark_child_calls(&parties.ledgers(), parties.members, step)
                .await,
        );
        let unsettled = already_human
            || results
                .iter()
                .any(|r| r.status != LedgerStatus::Compensated);
        if unsettled {
            let reason = "the run failed and some of its effects could not be undone automatically";
            return Err((results, reason.to_owned()));
        }
        // Undone completely: a cancelled run stays `cancelled` (the
        // caller's decision, honoured), any other ends `failed`.
        Ok(Settlement {
            settled: Settled::Undone,
            compensations: results,
            ..Settlement::kept()
        })
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
            c,
            LedgerRecorded {
                note: Some(note.to_owned()),
                ..LedgerRecorded::new(status)
            },
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
        if let Err(e) = self.commit_marks(ctx, commit).await {
            tracing::error!(run = %ctx.run_id, intent = %intent, "ledger mark {status} failed: {e}");
        }
    }
}

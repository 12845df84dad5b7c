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

use std::time::Duration;

use rein_core::deadline::{Budget, BudgetLimits, Deadline};
use rein_core::event::{
    CompensationFinished, CompensationStarted, LedgerRecorded, SettlementStarted,
};
use rein_core::handoff::InFlight;
use rein_core::idempotency::IdempotencyKey;
use rein_core::outcome::CompensationResult;
use rein_core::registry::{CompensationGrade, CompensationSpec};
use rein_core::report::{End, Settled};
use rein_core::retry::{RetryConfig, RetryPolicy};
use rein_core::{
    Category, Clock, EventKind, FailurePolicy, IntentId, LedgerRecord, LedgerStatus, Outcome,
    RunReport,
};
use rein_store::{LedgerMark, StepCommit};
use serde_json::Value;

use super::binding::ToolBinding;
use super::emitter::{Correlation, unix_ms};
use super::guarded::Planned;
use super::tree_settle::{self, Item, is_open};
use super::{Engine, RunCtx};

/// Attempts a strong compensation may make: it is safe to repeat, so it is
/// retried until this ceiling or the compensation budget ends it.
pub const STRONG_COMPENSATION_ATTEMPTS: u32 = 8;

/// How to undo one tool's effect: its compensation spec and the bound
/// compensation tool.
#[derive(Debug, Clone)]
pub struct CompensationBinding {
    /// Grade, window and argument mapping.
    pub spec: CompensationSpec,
    /// The compensation tool.
    pub tool: ToolBinding,
}

/// Whether the failure that stopped the run is one that time may fix: a
/// rate limit, a timeout, an open breaker, an exhausted budget. Then the
/// effects are kept and the run is recoverable by resuming.
fn fixable_by_time(end: &End, report: &RunReport) -> bool {
    match end {
        End::Budget(_) => true,
        // A model that is down may come back; one that refuses the
        // credentials or the request will not.
        End::ModelFailed(category, _) => matches!(
            category,
            Category::Transient
                | Category::Timeout
                | Category::RateLimited
                | Category::Overloaded
                | Category::CircuitOpen
        ),
        // Never settled: an interrupted run is handed on before this.
        End::Interrupted => true,
        End::Loop(_)
        | End::StoreFailed(_)
        | End::Settling(_)
        | End::Cancelled(_)
        | End::Closed { .. }
        | End::Internal(_) => false,
        End::Answer(_) => report.incomplete.iter().all(|a| {
            matches!(
                a.category,
                Category::Transient
                    | Category::Timeout
                    | Category::RateLimited
                    | Category::Overloaded
                    | Category::CircuitOpen
                    | Category::BudgetExhausted
            )
        }),
    }
}

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
    fn kept() -> Settlement {
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

    /// Settles one open ledger record: resolves a `pending` one, then
    /// compensates it according to its grade. `None` when it turned out
    /// never to have happened.
    async fn compensate_one(
        &self,
        ctx: &RunCtx<'_>,
        record: LedgerRecord,
        deadline: Deadline,
        step: u32,
    ) -> Option<CompensationResult> {
        let c = Correlation {
            step,
            intent_id: Some(record.intent_id.clone()),
            idempotency_key: record.idempotency_key.clone(),
            ..Correlation::default()
        };
        let forward_tool = ctx.agent.tools.get(&record.tool);
        let mut result = record.result.clone();
        if record.status == LedgerStatus::Pending {
            // Ask the tool; if it cannot say, assume the effect happened.
            let found = match (forward_tool, &record.idempotency_key) {
                (Some(tool), Some(key)) if tool.target.has_status_lookup() => {
                    // The lookup is a call to the tool's backend: it holds a
                    // slot of its resource group; no slot in time, no answer.
                    let gate = self.gate(ctx, tool);
                    let slot = match &gate {
                        Some(gate) => gate.enter(self.clock.as_ref(), deadline).await.map(Some),
                        None => Ok(None),
                    };
                    let allowance = tool.allowance(deadline.remaining(self.clock.now()));
                    match (tool.target.http(), slot) {
                        (Some(target), Ok(_slot)) => {
                            self.http.lookup(target, key, allowance).await.ok()
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            match found {
                Some(None) => {
                    self.mark(
                        ctx,
                        &c,
                        &record.intent_id,
                        LedgerStatus::Failed,
                        None,
                        "never executed (the tool has no record of its key)",
                    )
                    .await;
                    return None;
                }
                Some(Some(value)) => {
                    self.mark(
                        ctx,
                        &c,
                        &record.intent_id,
                        LedgerStatus::Succeeded,
                        Some(value.clone()),
                        "executed (found by its key)",
                    )
                    .await;
                    result = Some(value);
                }
                None => {
                    if !ctx.agent.compensations.contains_key(&record.tool) {
                        let note =
                            "in doubt and the tool cannot say whether it ran; a human must check";
                        self.mark(ctx, &c, &record.intent_id, LedgerStatus::Manual, None, note)
                            .await;
                        return Some(CompensationResult {
                            intent_id: record.intent_id.clone(),
                            tool: record.tool.clone(),
                            compensation_tool: None,
                            status: LedgerStatus::Manual,
                            note: note.to_owned(),
                        });
                    }
                    self.mark(
                        ctx,
                        &c,
                        &record.intent_id,
                        LedgerStatus::Succeeded,
                        None,
                        "undecidable: assumed executed so that it is compensated",
                    )
                    .await;
                }
            }
        }
        let binding = ctx.agent.compensations.get(&record.tool);
        let finish = |status: LedgerStatus, note: String| CompensationResult {
            intent_id: record.intent_id.clone(),
            tool: record.tool.clone(),
            compensation_tool: binding.map(|b| b.tool.name.clone()),
            status,
            note,
        };
        let Some(binding) = binding else {
            let note = format!(
                "{} has no compensation: its effect stays and needs a human",
                record.tool
            );
            ctx.emitter.emit(
                &c,
                CompensationFinished {
                    tool: record.tool.clone(),
                    status: LedgerStatus::Uncompensatable,
                    note: note.clone(),
                    compensation_tool: None,
                    attempts: None,
                    alert: Some(true),
                },
            );
            self.mark(
                ctx,
                &c,
                &record.intent_id,
                LedgerStatus::Uncompensatable,
                None,
                &note,
            )
            .await;
            return Some(finish(LedgerStatus::Uncompensatable, note));
        };
        let now_ms = unix_ms(self.clock.system_now());
        if let Some(window) = binding.spec.window {
            let until = record
                .created_at_ms
                .saturating_add(u64::try_from(window.as_millis()).unwrap_or(u64::MAX));
            if now_ms > until {
                let note = format!("past its compensatable window of {window:?}");
                self.mark(
                    ctx,
                    &c,
                    &record.intent_id,
                    LedgerStatus::Manual,
                    None,
                    &note,
                )
                .await;
                return Some(finish(LedgerStatus::Manual, note));
            }
        }
        let args = match binding
            .spec
            .arguments(&record.args, result.as_ref().unwrap_or(&Value::Null))
        {
            Ok(args) => args,
            Err(unresolved) => {
                let note = format!(
                    "cannot build the compensation's argument `{}` from `{}`",
                    unresolved.target, unresolved.from
                );
                self.mark(
                    ctx,
                    &c,
                    &record.intent_id,
                    LedgerStatus::Manual,
                    None,
                    &note,
                )
                .await;
                return Some(finish(LedgerStatus::Manual, note));
            }
        };
        // The compensation's own intent and key derive from the forward
        // record, so repeating it (a retry, a resumed settlement) is harmless.
        let intent = match IntentId::new(format!("{}/compensation", record.intent_id)) {
            Ok(id) => id,
            Err(_) => record.intent_id.clone(),
        };
        if binding.spec.grade == CompensationGrade::Weak
            && self.compensation_was_started(ctx, &record.intent_id).await
        {
            // A weak compensation runs once: if an interrupted process may
            // already have run it, repeating it could be a second injury.
            let note = "its weak compensation may have run before an interruption; not repeated";
            self.mark(ctx, &c, &record.intent_id, LedgerStatus::Manual, None, note)
                .await;
            return Some(finish(LedgerStatus::Manual, note.to_owned()));
        }
        let tool = &binding.tool;
        let key = IdempotencyKey::derive(
            tool.class,
            &ctx.tenant,
            &intent,
            &tool.name,
            &args,
            &tool.normalizer,
        );
        let grade = binding.spec.grade;
        ctx.emitter.emit(
            &Correlation {
                idempotency_key: key.clone(),
                ..c.clone()
            },
            CompensationStarted {
                tool: record.tool.clone(),
                compensation_tool: tool.name.clone(),
                grade,
                forward_seq: record.seq,
                compensation_intent: intent.clone(),
            },
        );
        // Durable before the call: a crash mid-compensation is visible.
        let commit = StepCommit {
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        if let Err(e) = ctx.commit(commit).await {
            let note = format!("compensation not started: the store refused its start ({e})");
            return Some(finish(LedgerStatus::Succeeded, note));
        }
        crate::crash::point("mid_compensation");
        let attempts = match grade {
            CompensationGrade::Strong => STRONG_COMPENSATION_ATTEMPTS,
            _ => 1,
        };
        let policy = compensation_policy(&ctx.agent.retry, attempts);
        let planned = Planned {
            intent_id: intent.clone(),
            call_id: format!("compensation:{}", record.intent_id),
            tool: tool.name.clone(),
            args,
            step,
            position: 0,
            salvaged: false,
        };
        let budget = Budget::within(
            deadline,
            BudgetLimits::new(
                deadline
                    .remaining(self.clock.now())
                    .max(Duration::from_millis(1)),
            )
            .unwrap_or_else(|_| unreachable!("a positive duration is a valid wall clock")),
            self.clock.now(),
        );
        let mut cc = Correlation {
            step,
            intent_id: Some(intent),
            idempotency_key: key.clone(),
            ..Correlation::default()
        };
        let attempted = self
            .attempts_with(ctx, &mut cc, &planned, tool, &budget, key.as_ref(), &policy)
            .await;
        let (outcome, tries) = (attempted.outcome, attempted.attempts);
        let (status, note) = match outcome {
            Ok(_) => (
                LedgerStatus::Compensated,
                format!("undone by {} ({tries} attempt(s))", tool.name),
            ),
            Err(f) => (
                LedgerStatus::Manual,
                format!(
                    "{} compensation by {} failed after {tries} attempt(s): {} — a human must decide",
                    grade.as_str(),
                    tool.name,
                    f.human_message()
                ),
            ),
        };
        ctx.emitter.emit(
            &c,
            CompensationFinished {
                tool: record.tool.clone(),
                status,
                note: note.clone(),
                compensation_tool: Some(tool.name.clone()),
                attempts: Some(tries),
                alert: None,
            },
        );
        self.mark(ctx, &c, &record.intent_id, status, None, &note)
            .await;
        Some(finish(status, note))
    }

    /// Whether an earlier process started compensating this record (its
    /// `compensation_started` event is durable) without finishing.
    async fn compensation_was_started(&self, ctx: &RunCtx<'_>, intent: &IntentId) -> bool {
        let Ok(events) = ctx.store.events(&ctx.run_id, 0).await else {
            // Unknown: assume it may have run.
            return true;
        };
        let mine = |kind: EventKind| {
            events
                .iter()
                .filter(|e| e.kind() == kind && e.intent_id.as_ref() == Some(intent))
                .count()
        };
        mine(EventKind::CompensationStarted) > mine(EventKind::CompensationFinished)
    }

    /// Leaves every open record to a human: in doubt → `manual`; done with
    /// no compensation → `uncompensatable` (with an alert); done with a
    /// compensation that is deliberately not run → `manual`.
    async fn leave_for_human(
        &self,
        ctx: &RunCtx<'_>,
        mut records: Vec<LedgerRecord>,
        step: u32,
    ) -> Vec<CompensationResult> {
        records.sort_by_key(|r| std::cmp::Reverse(r.seq));
        let mut results = Vec::new();
        for record in records {
            let c = Correlation {
                step,
                intent_id: Some(record.intent_id.clone()),
                idempotency_key: record.idempotency_key.clone(),
                ..Correlation::default()
            };
            let compensation = ctx.agent.compensations.get(&record.tool);
            let (status, note) = match (record.status, compensation) {
                (LedgerStatus::Pending, _) => (
                    LedgerStatus::Manual,
                    "in doubt: it may or may not have run; a human must check".to_owned(),
                ),
                (_, None) => (
                    LedgerStatus::Uncompensatable,
                    format!("{} took effect and has no compensation", record.tool),
                ),
                (_, Some(b)) => (
                    LedgerStatus::Manual,
                    format!(
                        "kept for a human to decide; it can be undone with {}",
                        b.tool.name
                    ),
                ),
            };
            ctx.emitter.emit(
                &c,
                CompensationFinished {
                    tool: record.tool.clone(),
                    status,
                    note: note.clone(),
                    compensation_tool: None,
                    attempts: None,
                    alert: Some(status == LedgerStatus::Uncompensatable),
                },
            );
            self.mark(ctx, &c, &record.intent_id, status, None, &note)
                .await;
            results.push(CompensationResult {
                intent_id: record.intent_id.clone(),
                tool: record.tool.clone(),
                compensation_tool: compensation.map(|b| b.tool.name.clone()),
                status,
                note,
            });
        }
        results
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
        if let Err(e) = ctx.commit(commit).await {
            tracing::error!(run = %ctx.run_id, intent = %intent, "ledger mark {status} failed: {e}");
        }
    }

    /// Hands the run to a human: what its settlement did, and the
    /// resources still held for it (a process group, a temp dir), which
    /// whoever takes over must check before repeating anything.
    async fn hand_off(
        &self,
        ctx: &RunCtx<'_>,
        compensations: Vec<CompensationResult>,
        reason: String,
    ) -> Settlement {
        let mut in_flight = Vec::new();
        if let Ok(leases) = ctx.store.leases_of_run(&ctx.run_id).await {
            for lease in leases
                .into_iter()
                .filter(|l| l.kind != rein_store::LeaseKind::Run)
            {
                in_flight.push(InFlight {
                    intent_id: lease.intent_id.clone(),
                    what: format!(
                        "lease {} ({:?}{}) held by {}",
                        lease.lease_id,
                        lease.kind,
                        lease.pgid.map(|g| format!(", process group {g}")).unwrap_or_default(),
                        lease.owner
                    ),
                    may_be_running: true,
                    advice: "kill the process group (or let rein reconcile reap it) before repeating the action".into(),
                });
            }
        }
        Settlement {
            settled: Settled::HandedOff(reason),
            compensations,
            in_flight,
            lost: false,
        }
    }
}

/// The retry policy of a compensation: the agent's backoff, with `attempts`
/// as the ceiling.
fn compensation_policy(agent: &RetryPolicy, attempts: u32) -> RetryPolicy {
    let mut config = RetryConfig::default();
    config.max_attempts = attempts;
    config.base_delay = agent.backoff_ceiling(1);
    config.max_delay = agent.backoff_ceiling(u32::MAX);
    RetryPolicy::try_from(config).unwrap_or(*agent)
}

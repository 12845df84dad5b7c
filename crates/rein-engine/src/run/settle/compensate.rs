//! The compensation executor: one open ledger record settled, in doubt
//! resolved first, then undone by its compensation according to its grade.

use std::time::Duration;

use rein_core::deadline::{Budget, BudgetLimits, Deadline};
use rein_core::event::{CompensationFinished, CompensationStarted};
use rein_core::idempotency::IdempotencyKey;
use rein_core::outcome::CompensationResult;
use rein_core::registry::{CompensationGrade, CompensationSpec, UnresolvedArg};
use rein_core::retry::{RetryConfig, RetryPolicy};
use rein_core::{Clock, EventKind, IntentId, LedgerRecord, LedgerStatus, TenantId};
use rein_store::StepCommit;
use serde_json::Value;

use super::super::binding::ToolBinding;
use super::super::emitter::{Correlation, unix_ms};
use super::super::guarded::Planned;
use super::super::{Engine, RunCtx};

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

/// The call that undoes one forward record: its own intent, its arguments
/// and its idempotency key.
#[derive(Debug, Clone, PartialEq)]
pub struct CompensationCall {
    /// The compensation's own intent: the forward intent's, with
    /// `/compensation` appended.
    pub intent: IntentId,
    /// The arguments, mapped from the forward call's arguments and result.
    pub args: Value,
    /// The key it carries (none for an irreversible compensation tool).
    pub key: Option<IdempotencyKey>,
}

impl CompensationBinding {
    /// The call that undoes `record` in `tenant`'s run, `result` being the
    /// forward call's result as known (the record's own, or found by its
    /// key). The one recipe: the engine's settlement, a resumed settlement
    /// and the reconciler all derive the call here, so each asks for (or
    /// repeats) the same call under the same key, which makes repeating it
    /// harmless.
    ///
    /// # Errors
    ///
    /// [`UnresolvedArg`] when a mapped argument's source is missing: such
    /// a compensation would undo the wrong thing and is not attempted.
    pub fn call_for(
        &self,
        tenant: &TenantId,
        record: &LedgerRecord,
        result: Option<&Value>,
    ) -> Result<CompensationCall, UnresolvedArg> {
        let args = self
            .spec
            .arguments(&record.args, result.unwrap_or(&Value::Null))?;
        let intent = IntentId::new(format!("{}/compensation", record.intent_id))
            .unwrap_or_else(|_| record.intent_id.clone());
        let key = IdempotencyKey::derive(
            self.tool.class,
            tenant,
            &intent,
            &self.tool.name,
            &args,
            &self.tool.normalizer,
        );
        Ok(CompensationCall { intent, args, key })
    }
}

/// What became of a call in doubt, asked by its key.
enum Resolved {
    /// It never ran: nothing to undo (its record is marked failed).
    NeverRan,
    /// It ran (or is assumed to have), with its result when the tool had it.
    Ran(Option<Value>),
    /// Nobody can tell and nothing could undo it: a human checks.
    ForHuman(CompensationResult),
}

/// A compensation ready to run: the forward record, its binding and the
/// compensating call.
struct Undo<'u> {
    record: &'u LedgerRecord,
    binding: &'u CompensationBinding,
    call: CompensationCall,
}

/// The result of settling `record` with `status`.
fn outcome_of(
    record: &LedgerRecord,
    binding: Option<&CompensationBinding>,
    status: LedgerStatus,
    note: String,
) -> CompensationResult {
    CompensationResult {
        intent_id: record.intent_id.clone(),
        tool: record.tool.clone(),
        compensation_tool: binding.map(|b| b.tool.name.clone()),
        status,
        note,
    }
}

impl Engine {
    /// Settles one open ledger record: resolves a `pending` one, then
    /// compensates it according to its grade. `None` when it turned out
    /// never to have happened.
    pub(super) async fn compensate_one(
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
        let mut result = record.result.clone();
        if record.status == LedgerStatus::Pending {
            match self.resolve_in_doubt(ctx, &record, deadline, &c).await {
                Resolved::NeverRan => return None,
                Resolved::ForHuman(r) => return Some(r),
                Resolved::Ran(Some(value)) => result = Some(value),
                Resolved::Ran(None) => {}
            }
        }
        let Some(binding) = ctx.agent.compensations.get(&record.tool) else {
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
            return Some(
                self.settle_as(ctx, &c, &record, None, LedgerStatus::Uncompensatable, note)
                    .await,
            );
        };
        let now_ms = unix_ms(self.clock.system_now());
        if let Some(window) = binding.spec.window {
            let until = record.created_at_ms.saturating_add(window);
            if now_ms > until {
                let note = format!("past its compensatable window of {window:?}");
                return Some(
                    self.settle_as(ctx, &c, &record, Some(binding), LedgerStatus::Manual, note)
                        .await,
                );
            }
        }
        // The compensation's own intent and key derive from the forward
        // record, so repeating it (a retry, a resumed settlement, the
        // reconciler) is harmless.
        let call = match binding.call_for(&ctx.tenant, &record, result.as_ref()) {
            Ok(call) => call,
            Err(unresolved) => {
                let note = format!(
                    "cannot build the compensation's argument `{}` from `{}`",
                    unresolved.target, unresolved.from
                );
                return Some(
                    self.settle_as(ctx, &c, &record, Some(binding), LedgerStatus::Manual, note)
                        .await,
                );
            }
        };
        if binding.spec.grade == CompensationGrade::Weak
            && self.compensation_was_started(ctx, &record.intent_id).await
        {
            // A weak compensation runs once: if an interrupted process may
            // already have run it, repeating it could be a second injury.
            let note = "its weak compensation may have run before an interruption; not repeated";
            return Some(
                self.settle_as(
                    ctx,
                    &c,
                    &record,
                    Some(binding),
                    LedgerStatus::Manual,
                    note.to_owned(),
                )
                .await,
            );
        }
        let undo = Undo {
            record: &record,
            binding,
            call,
        };
        Some(self.run_compensation(ctx, undo, deadline, step, &c).await)
    }

    /// Runs `undo`'s compensation with its grade's attempts within
    /// `deadline`, durable before the call, and marks the forward record.
    async fn run_compensation(
        &self,
        ctx: &RunCtx<'_>,
        undo: Undo<'_>,
        deadline: Deadline,
        step: u32,
        c: &Correlation,
    ) -> CompensationResult {
        let Undo {
            record,
            binding,
            call: CompensationCall { intent, args, key },
        } = undo;
        let tool = &binding.tool;
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
        if let Err(e) = self.commit(ctx, commit).await {
            let note = format!("compensation not started: the store refused its start ({e})");
            return outcome_of(record, Some(binding), LedgerStatus::Succeeded, note);
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
            .attempts(
                ctx,
                &mut cc,
                &planned,
                tool,
                &budget,
                key.as_ref(),
                &policy,
                None,
            )
            .await;
        let (outcome, tries) = (attempted.outcome, attempted.attempts);
        let (status, note) = match outcome {
            Ok(_) => (
                LedgerStatus::Compensated,
                format!(
                    "undone by {} ({})",
                    tool.name,
                    rein_core::plural::count(tries, "attempt")
                ),
            ),
            Err(f) => (
                LedgerStatus::Manual,
                format!(
                    "{} compensation by {} failed after {}: {} — a human must decide",
                    grade.as_str(),
                    tool.name,
                    rein_core::plural::count(tries, "attempt"),
                    f.human_message()
                ),
            ),
        };
        ctx.emitter.emit(
            c,
            CompensationFinished {
                tool: record.tool.clone(),
                status,
                note: note.clone(),
                compensation_tool: Some(tool.name.clone()),
                attempts: Some(tries),
                alert: None,
            },
        );
        self.settle_as(ctx, c, record, Some(binding), status, note)
            .await
    }

    /// Marks `record` with `status` and `note` and returns it settled so:
    /// the last step of every settlement, whether a compensation ran or
    /// a human must take over.
    async fn settle_as(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        record: &LedgerRecord,
        binding: Option<&CompensationBinding>,
        status: LedgerStatus,
        note: String,
    ) -> CompensationResult {
        self.mark(ctx, c, &record.intent_id, status, None, &note)
            .await;
        outcome_of(record, binding, status, note)
    }

    /// Asks the tool whether a call in doubt ran, by its key; if it cannot
    /// say, the effect is assumed to have happened (so that it is
    /// compensated) when it has a compensation, else left to a human.
    async fn resolve_in_doubt(
        &self,
        ctx: &RunCtx<'_>,
        record: &LedgerRecord,
        deadline: Deadline,
        c: &Correlation,
    ) -> Resolved {
        // Ask the tool; if it cannot say, assume the effect happened.
        let forward_tool = ctx.agent.tools.get(&record.tool);
        let found = match (forward_tool, &record.idempotency_key) {
            (Some(tool), Some(key)) if tool.target.has_status_lookup() => {
                // The lookup is a call to the tool's backend: it holds a
                // slot of its resource group; no slot in time, no answer.
                let gate = self.gate(ctx, tool);
                let slot = match &gate {
                    Some(gate) => gate
                        .enter_for(
                            super::super::guarded::caller(ctx),
                            deadline,
                            std::time::Duration::ZERO,
                        )
                        .await
                        .map(Some),
                    None => Ok(None),
                };
                let allowance = self
                    .shared
                    .latency
                    .plan(tool, None)
                    .allowance(deadline.remaining(self.clock.now()));
                match slot {
                    Ok(_slot) => {
                        crate::tool::lookup(&self.http, &tool.name, &tool.target, key, allowance)
                            .await
                            .ok()
                    }
                    Err(_) => None,
                }
            }
            _ => None,
        };
        match found {
            Some(None) => {
                self.mark(
                    ctx,
                    c,
                    &record.intent_id,
                    LedgerStatus::Failed,
                    None,
                    "never executed (the tool has no record of its key)",
                )
                .await;
                Resolved::NeverRan
            }
            Some(Some(value)) => {
                self.mark(
                    ctx,
                    c,
                    &record.intent_id,
                    LedgerStatus::Succeeded,
                    Some(value.clone()),
                    "executed (found by its key)",
                )
                .await;
                Resolved::Ran(Some(value))
            }
            None => {
                if !ctx.agent.compensations.contains_key(&record.tool) {
                    let note =
                        "in doubt and the tool cannot say whether it ran; a human must check";
                    return Resolved::ForHuman(
                        self.settle_as(ctx, c, record, None, LedgerStatus::Manual, note.to_owned())
                            .await,
                    );
                }
                self.mark(
                    ctx,
                    c,
                    &record.intent_id,
                    LedgerStatus::Succeeded,
                    None,
                    "undecidable: assumed executed so that it is compensated",
                )
                .await;
                Resolved::Ran(None)
            }
        }
    }

    /// Whether an earlier process started compensating this record (its
    /// `compensation_started` event is durable) without finishing.
    pub(super) async fn compensation_was_started(
        &self,
        ctx: &RunCtx<'_>,
        intent: &IntentId,
    ) -> bool {
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

//! The guarded call: budget, breakers, key, ledger, attempts with classified
//! retries, record — in the order of DESIGN.md.

use std::time::Duration;

use rein_core::breaker::{Admit, ArmKind};
use rein_core::deadline::{Budget, Need};
use rein_core::event::{
    AbandonReason, BreakerStateChanged, BudgetExhausted, BudgetScope, CallRejected, CircuitOpen,
    CircuitRejected, ConcurrencyWaitExpired, Flag, IdempotencyLookup, LedgerRecorded,
    RetryAbandoned, RetryScheduled, RetryTarget, StopReason, ToolCallFailed, ToolCallFinished,
    ToolCallNotSent, ToolCallSkipped, ToolCallStarted, ToolCallSucceeded,
};
use rein_core::idempotency::IdempotencyKey;
use rein_core::retry::{RetryDecision, RetryInput};
use rein_core::{
    AttemptId, Category, Clock, Effect, Failure, LedgerRecord, LedgerStatus, ToolClass,
};
use rein_store::{LedgerMark, StepCommit};
use serde_json::Value;

use super::binding::{ToolBinding, ToolTarget};
use super::emitter::{Correlation, Emitter, unix_ms};
use super::permit::HeldPermit;
use super::{Engine, RunCtx, new_id};
use crate::tool::Attempt;
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
    pub(super) async fn guarded_call(
        &self,
        ctx: &RunCtx<'_>,
        planned: Planned,
        tool: &ToolBinding,
        budget: &Budget,
        prior: Option<&LedgerRecord>,
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
        let now = self.clock.now();

        // 2. Budget: refuse before sending what cannot finish. A call with
        // side effects needs its full allowance (p99 × factor): started
        // without it, it may time out after sending and leave an effect in
        // doubt. A read needs at least its median.
        let need = if tool.class.has_side_effect() {
            tool.latency
                .p99()
                .saturating_mul(super::DEFAULT_ALLOWANCE_FACTOR)
        } else {
            tool.latency.p50()
        };
        if let Err(exhausted) = budget.check(&Need::time(need), now) {
            ctx.emitter.emit(
                &c,
                BudgetExhausted {
                    tool: Some(tool.name.clone()),
                    ..BudgetExhausted::new(BudgetScope::ToolCall, exhausted)
                },
            );
            let failure = Failure::new(&tool.name, Category::BudgetExhausted)
                .with_human_message(format!("{} not started: {exhausted}", tool.name));
            return CallResult::refused(planned, tool.class, failure);
        }

        // 3. Breakers: the tool's arm, then its resource group's. Each
        // permit is held by a guard from here: a return below, or this
        // future dropped mid-call, gives it back unused.
        let tool_permit = match self.admit(&ctx.emitter, &c, ArmKind::Tool, &tool.name) {
            Ok(p) => p,
            Err(f) => return CallResult::refused(planned, tool.class, f),
        };
        let group_permit = match &tool.resource_group {
            Some(group) => match self.admit(&ctx.emitter, &c, ArmKind::ResourceGroup, group) {
                Ok(p) => Some(p),
                Err(f) => return CallResult::refused(planned, tool.class, f),
            },
            None => None,
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

        // 6. Ledger: declared before the call, durably. A record an
        // interrupt left unsent (failed, nothing applied) is declared
        // again under its intent: pending, as if for the first time.
        let mut ledger = None;
        if tool.class.has_side_effect() {
            let at_ms = unix_ms(self.clock.system_now());
            let record = LedgerRecord {
                run_id: ctx.run_id.clone(),
                intent_id: planned.intent_id.clone(),
                seq: 0,
                step: planned.step,
                tool: tool.name.clone(),
                class: tool.class,
                idempotency_key: key.clone(),
                args: planned.args.clone(),
                status: LedgerStatus::Pending,
                result: None,
                failure: None,
                attempts: 0,
                created_at_ms: at_ms,
                updated_at_ms: at_ms,
            };
            ctx.emitter.emit(
                &c,
                LedgerRecorded {
                    tool: Some(tool.name.clone()),
                    class: Some(tool.class),
                    ..LedgerRecorded::new(LedgerStatus::Pending)
                },
            );
            crate::crash::point("before_pending");
            let reopen = prior.filter(|r| is_unsent(r)).map(|_| {
                (
                    planned.intent_id.clone(),
                    LedgerMark {
                        status: LedgerStatus::Pending,
                        result: None,
                        failure: None,
                        attempts: 0,
                        at_ms,
                    },
                )
            });
            let commit = StepCommit {
                declares: vec![record],
                marks: reopen.into_iter().collect(),
                events: ctx.emitter.drain(),
                ..StepCommit::default()
            };
            if let Err(e) = ctx.commit(commit).await {
                // Write-ahead: no durable declaration, no call (the permits
                // go back unused).
                let failure = Failure::new(&tool.name, Category::Unknown)
                    .with_human_message(format!("ledger unavailable, call not made: {e}"));
                return CallResult::refused(planned, tool.class, failure);
            }
            ledger = Some(LedgerStatus::Pending);
            crate::crash::point("after_pending");
        }

        // 7–8. Attempts, classified and decided.
        self.deposit_request(&super::tool_target(&tool.name), &ctx.agent.retry);
        let Attempted {
            outcome,
            attempts,
            sent,
        } = self
            .attempts(ctx, &mut c, &planned, tool, budget, key.as_ref())
            .await;

        // 9. Record. A call that never reached the tool (no concurrency
        // slot before its deadline) says nothing about the target's health:
        // its permits go back unused.
        for permit in std::iter::once(tool_permit).chain(group_permit) {
            if sent > 0 {
                self.report_outcome(&ctx.emitter, &c, permit, outcome.as_ref().map(|_| ()));
            } else {
                drop(permit);
            }
        }
        if ledger.is_some() {
            let status = match &outcome {
                Ok(_) => LedgerStatus::Succeeded,
                Err(f) => match f.effect() {
                    Effect::NotApplied => LedgerStatus::Failed,
                    Effect::Applied => LedgerStatus::Succeeded,
                    // In doubt: left pending for reconciliation.
                    Effect::MaybeApplied => LedgerStatus::Pending,
                },
            };
            let mark = LedgerMark {
                status,
                result: outcome.as_ref().ok().cloned(),
                failure: outcome.as_ref().err().cloned(),
                attempts,
                at_ms: unix_ms(self.clock.system_now()),
            };
            ctx.emitter.emit(
                &c,
                LedgerRecorded {
                    tool: Some(tool.name.clone()),
                    attempts: Some(attempts),
                    ..LedgerRecorded::new(status)
                },
            );
            let commit = StepCommit {
                marks: vec![(planned.intent_id.clone(), mark)],
                events: ctx.emitter.drain(),
                ..StepCommit::default()
            };
            match ctx.commit(commit).await {
                Ok(_) => ledger = Some(status),
                Err(e) => {
                    tracing::error!(run = %ctx.run_id, intent = %planned.intent_id, "ledger mark failed: {e}")
                }
            }
        }
        CallResult {
            planned,
            class: tool.class,
            outcome,
            ledger,
            attempts,
        }
    }

    /// The result of a resumed call from its ledger record, or `None` when
    /// it must run (an idempotent write in doubt: again, with its key).
    fn replay_prior(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        planned: &Planned,
        tool: &ToolBinding,
        record: &LedgerRecord,
    ) -> Option<CallResult> {
        let done = |outcome: Result<Value, Failure>, note: &str| {
            ctx.emitter.emit(
                c,
                ToolCallFinished::Skipped(ToolCallSkipped {
                    tool: tool.name.clone(),
                    skipped: Flag,
                    ok: outcome.is_ok(),
                    category: outcome.as_ref().err().map(Failure::category),
                    effect: outcome.as_ref().err().map(Failure::effect),
                    ledger: record.status,
                    reason: note.to_owned(),
                }),
            );
            Some(CallResult {
                planned: planned.clone(),
                class: tool.class,
                outcome,
                ledger: Some(record.status),
                attempts: 0,
            })
        };
        match record.status {
            LedgerStatus::Pending if tool.class == ToolClass::IdempotentWrite => None,
            // Declared, then never sent: its process was interrupted first.
            // It runs now, under its intent (and key), like any new call.
            LedgerStatus::Failed if is_unsent(record) => None,
            LedgerStatus::Pending => done(
                Err(Failure::new(&tool.name, Category::Unknown)
                    .with_effect(Effect::MaybeApplied)
                    .with_human_message(format!(
                        "{} may have run before the interruption; an irreversible call is never repeated",
                        tool.name
                    ))),
                "in doubt after an interruption; not repeated",
            ),
            LedgerStatus::Succeeded => done(
                Ok(record.result.clone().unwrap_or(Value::Null)),
                "completed before the interruption; not run again",
            ),
            LedgerStatus::Failed => done(
                Err(record.failure.clone().unwrap_or_else(|| {
                    Failure::new(&tool.name, Category::Unknown).with_human_message(format!(
                        "{} failed before the interruption",
                        tool.name
                    ))
                })),
                "failed before the interruption; not run again",
            ),
            // Compensated, uncompensatable or manual: it took effect (or may
            // have), and a human or a compensation has dealt with it.
            other => done(
                Err(Failure::new(&tool.name, Category::Unknown)
                    .with_effect(if other == LedgerStatus::Manual {
                        Effect::MaybeApplied
                    } else {
                        Effect::Applied
                    })
                    .with_human_message(format!(
                        "{} ended {other} before the interruption",
                        tool.name
                    ))),
                "settled before the interruption; not run again",
            ),
        }
    }

    /// The attempt loop: invoke, classify, decide (retry, look up by key, or
    /// give up), always under the same deadline and the same key.
    async fn attempts(
        &self,
        ctx: &RunCtx<'_>,
        c: &mut Correlation,
        planned: &Planned,
        tool: &ToolBinding,
        budget: &Budget,
        key: Option<&IdempotencyKey>,
    ) -> Attempted {
        self.attempts_with(ctx, c, planned, tool, budget, key, &ctx.agent.retry)
            .await
    }

    /// The attempt loop under an explicit retry policy (compensations use
    /// their own ceiling).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn attempts_with(
        &self,
        ctx: &RunCtx<'_>,
        c: &mut Correlation,
        planned: &Planned,
        tool: &ToolBinding,
        budget: &Budget,
        key: Option<&IdempotencyKey>,
        policy: &rein_core::retry::RetryPolicy,
    ) -> Attempted {
        let deadline = budget.deadline();
        // The resource group's concurrency ceiling, resolved once per call:
        // `None` (no ceiling) costs nothing per attempt.
        let gate = self.gate(ctx, tool);
        // Sabotage hook `retry_irreversible`: decide as for an idempotent
        // write, so an irreversible call is retried.
        #[cfg(feature = "sabotage")]
        let decide_class =
            if self.sabotage.retry_irreversible && tool.class == ToolClass::Irreversible {
                ToolClass::IdempotentWrite
            } else {
                tool.class
            };
        #[cfg(not(feature = "sabotage"))]
        let decide_class = tool.class;
        let mut attempt = 0u32;
        let mut sent = 0u32;
        loop {
            attempt += 1;
            let attempt_id = new_id::<AttemptId>();
            c.attempt_id = Some(attempt_id.clone());
            // Sabotage hook `fresh_key_per_attempt`: a new key for every
            // attempt after the first, for the request and the lookup alike.
            #[cfg(feature = "sabotage")]
            let fresh = (self.sabotage.fresh_key_per_attempt && attempt > 1)
                .then(|| key.map(|k| crate::sabotage::fresh_key(k, attempt)))
                .flatten();
            #[cfg(feature = "sabotage")]
            let key = fresh.as_ref().or(key);
            // The attempt holds a slot of its group from before it is sent
            // until its outcome is decided (a lookup by key included), and
            // not while it waits to retry.
            let (failure, slot) = 'attempt: {
                // Until its first attempt is sent, an interrupt stops the
                // call: it waits for no slot, and nothing goes out.
                let first = sent == 0;
                let slot = match &gate {
                    None => None,
                    Some(gate) => match tokio::select! {
                        entered = gate.enter(self.clock.as_ref(), deadline) => entered,
                        () = ctx.interrupted(), if first => {
                            return self.not_sent(ctx, c, tool);
                        }
                    } {
                        Ok(slot) => Some(slot),
                        Err(expired) => {
                            ctx.emitter.emit(
                                c,
                                ConcurrencyWaitExpired {
                                    tool: tool.name.clone(),
                                    attempt,
                                    resource_group: gate.group().to_owned(),
                                    max_concurrency: gate.ceiling(),
                                    queue_wait: expired.waited,
                                },
                            );
                            let failure = expired
                                .failure(&tool.name, gate)
                                .with_attempt(attempt_id.clone());
                            break 'attempt (failure, None);
                        }
                    },
                };
                let queue_wait = slot.as_ref().map_or(Duration::ZERO, |s| s.waited);
                let now = self.clock.now();
                let remaining = deadline.remaining(now);
                let allowance = tool.allowance(remaining);
                ctx.emitter.emit(
                    c,
                    ToolCallStarted {
                        tool: tool.name.clone(),
                        attempt,
                        class: tool.class,
                        allowance,
                        remaining,
                        queue_wait,
                    },
                );
                let request = Attempt {
                    run_id: &ctx.run_id,
                    intent_id: &planned.intent_id,
                    attempt_id: &attempt_id,
                    number: attempt,
                    key,
                    remaining,
                    allowance,
                };
                if first && ctx.is_interrupted() {
                    return self.not_sent(ctx, c, tool);
                }
                let started = self.clock.now();
                sent += 1;
                let invoke = async {
                    match &tool.target {
                        ToolTarget::Http(target) => {
                            self.http.invoke(target, &planned.args, &request).await
                        }
                        ToolTarget::Command(target) => {
                            self.command.invoke(target, &planned.args, &request).await
                        }
                        // A child run is never dropped mid-way: it sees the
                        // cancellation through its own (child) token, settles
                        // its effects and records its end, and its parent
                        // waits for that.
                        ToolTarget::Agent(_) => Err(Failure::new(&tool.name, Category::Unknown)
                            .with_human_message("an agent call is awaited without racing")),
                    }
                };
                let agent_call = match &tool.target {
                    ToolTarget::Agent(target) => Some(target),
                    _ => None,
                };
                // Cancellation drops the attempt: an HTTP request is aborted,
                // a command's process group killed (its drop guard). A
                // write that was sent may have landed: in doubt, settled.
                // An interrupt drops only a read: a write it let through
                // finishes within its allowance, so a rolling restart
                // leaves nothing in doubt (its step stops right after).
                let result = if let Some(target) = agent_call {
                    self.child_run(ctx, planned, tool, target, budget).await
                } else {
                    tokio::select! {
                    result = invoke => result,
                    () = ctx.aborts(tool.class) => {
                        let why = if ctx.is_interrupted() {
                            "the run was interrupted (its process is stopping)"
                        } else {
                            "the run was cancelled"
                        };
                        Err(Failure::new(&tool.name, Category::Cancelled)
                            .with_effect(if tool.class == ToolClass::Read {
                                Effect::NotApplied
                            } else {
                                Effect::MaybeApplied
                            })
                            .with_human_message(format!("{} was aborted: {why}", tool.name)))
                    }
                    }
                };
                crate::crash::point("after_call");
                let now = self.clock.now();
                let elapsed = now.saturating_duration_since(started);
                let failure = match result {
                    Ok(output) => {
                        ctx.emitter.emit(
                            c,
                            ToolCallFinished::Succeeded(ToolCallSucceeded {
                                tool: tool.name.clone(),
                                attempt,
                                ok: Flag,
                                replayed: output.replayed,
                                truncated: output.truncated,
                                elapsed,
                            }),
                        );
                        return Attempted {
                            outcome: Ok(output.result),
                            attempts: attempt,
                            sent,
                        };
                    }
                    Err(f) => f,
                };
                ctx.emitter.emit(
                    c,
                    ToolCallFinished::Failed(ToolCallFailed {
                        tool: tool.name.clone(),
                        attempt,
                        ok: Flag,
                        category: failure.category(),
                        effect: failure.effect(),
                        retryable: failure.retryable(),
                        elapsed,
                        reason: failure.human_message().to_owned(),
                    }),
                );
                (failure, slot)
            };
            // Decide; a lookup that settles the effect decides again.
            let mut deciding = failure.clone();
            let decision = loop {
                let now = self.clock.now();
                let input = RetryInput {
                    class: decide_class,
                    failure: &deciding,
                    attempt,
                    deadline,
                    latency: tool.latency,
                    now,
                };
                let decision = self.decide(&super::tool_target(&tool.name), policy, &input);
                if decision != RetryDecision::LookupByKey {
                    break decision;
                }
                let Some(key) = key else {
                    deciding = deciding.with_effect(Effect::NotApplied);
                    continue;
                };
                let allowance = tool.allowance(deadline.remaining(now));
                let lookup = match tool.target.http() {
                    Some(target) => self.http.lookup(target, key, allowance).await,
                    None => Err(Failure::new(&tool.name, Category::Unknown)
                        .with_human_message(format!("{} has no status lookup", tool.name))),
                };
                match lookup {
                    Ok(Some(result)) => {
                        ctx.emitter.emit(
                            c,
                            IdempotencyLookup {
                                tool: tool.name.clone(),
                                found: Some(true),
                                collapsed: Some(true),
                                lookup_failure: None,
                                reason: "the lost attempt had applied; its result is used instead of re-executing".into(),
                            },
                        );
                        return Attempted {
                            outcome: Ok(result),
                            attempts: attempt,
                            sent,
                        };
                    }
                    Ok(None) => {
                        ctx.emitter.emit(
                            c,
                            IdempotencyLookup {
                                tool: tool.name.clone(),
                                found: Some(false),
                                collapsed: None,
                                lookup_failure: None,
                                reason: "the lost attempt had not applied; re-execution is decided as a retry".into(),
                            },
                        );
                    }
                    Err(lookup_failure) => {
                        ctx.emitter.emit(
                            c,
                            IdempotencyLookup {
                                tool: tool.name.clone(),
                                found: None,
                                collapsed: None,
                                lookup_failure: Some(lookup_failure.category()),
                                reason: "lookup unavailable; a retry with the same key is deduplicated by the tool".into(),
                            },
                        );
                    }
                }
                // Either it did not apply, or the same key makes a repeat
                // harmless: decide as for a failure that did not apply.
                deciding = deciding.with_effect(Effect::NotApplied);
            };
            // The slot is free before any wait to retry.
            drop(slot);
            match decision {
                RetryDecision::Retry { delay, .. } => {
                    if let Some(scheduled) = RetryScheduled::of(
                        RetryTarget::Tool(tool.name.clone()),
                        &decision,
                        deadline.remaining(self.clock.now()),
                    ) {
                        let same_key = Some(key.is_some());
                        ctx.emitter.emit(
                            c,
                            RetryScheduled {
                                same_key,
                                ..scheduled
                            },
                        );
                    }
                    // An interrupt does not stop a write between its attempts:
                    // it was sent, and it finishes (a read stops).
                    let cancelled = tokio::select! {
                        () = self.clock.sleep(delay) => false,
                        () = ctx.aborts(tool.class) => true,
                    };
                    if cancelled {
                        ctx.emitter.emit(
                            c,
                            RetryAbandoned {
                                target: RetryTarget::Tool(tool.name.clone()),
                                attempts: attempt,
                                reason: AbandonReason::Stopped(StopReason::Cancelled),
                                detail: None,
                                category: failure.category(),
                            },
                        );
                        return Attempted {
                            outcome: Err(failure),
                            attempts: attempt,
                            sent,
                        };
                    }
                    // The breaker stays the outermost gate: an arm that opened
                    // while this call waited (another call's failures) stops
                    // the retry, so no call reaches an open target.
                    if let Some(open) = self.open_arm(tool) {
                        ctx.emitter.emit(
                            c,
                            RetryAbandoned {
                                target: RetryTarget::Tool(tool.name.clone()),
                                attempts: attempt,
                                reason: AbandonReason::Stopped(StopReason::CircuitOpen {
                                    arm: open.0,
                                    name: open.1.clone(),
                                }),
                                detail: None,
                                category: failure.category(),
                            },
                        );
                        let rejected =
                            Failure::circuit_open(&open.1, open.2).with_effect(failure.effect());
                        return Attempted {
                            outcome: Err(rejected),
                            attempts: attempt,
                            sent,
                        };
                    }
                }
                RetryDecision::GiveUp { reason } => {
                    ctx.emitter.emit(
                        c,
                        RetryAbandoned {
                            target: RetryTarget::Tool(tool.name.clone()),
                            attempts: attempt,
                            reason: AbandonReason::GaveUp(reason),
                            detail: None,
                            category: failure.category(),
                        },
                    );
                    return Attempted {
                        outcome: Err(failure),
                        attempts: attempt,
                        sent,
                    };
                }
                RetryDecision::LookupByKey => {
                    return Attempted {
                        outcome: Err(failure),
                        attempts: attempt,
                        sent,
                    };
                }
            }
        }
    }

    /// A call the interrupt stopped before anything of it was sent: the
    /// failure its ledger record is marked with (failed, not applied, no
    /// attempt made), so the resume sends it afresh ([`is_unsent`]).
    fn not_sent(&self, ctx: &RunCtx<'_>, c: &Correlation, tool: &ToolBinding) -> Attempted {
        ctx.emitter.emit(
            c,
            ToolCallFinished::NotSent(ToolCallNotSent {
                tool: tool.name.clone(),
                ok: Flag,
                sent: Flag,
                category: Category::Cancelled,
                effect: Effect::NotApplied,
                reason: "the run was interrupted before the call was sent; the resume sends it"
                    .into(),
            }),
        );
        Attempted {
            outcome: Err(Failure::new(&tool.name, Category::Cancelled)
                .with_effect(Effect::NotApplied)
                .with_human_message(format!(
                    "{} was not sent: the run was interrupted (its process is stopping); the resume sends it under its intent",
                    tool.name
                ))),
            attempts: 0,
            sent: 0,
        }
    }

    /// The concurrency gate of `tool`'s resource group, when the agent
    /// gives that group a ceiling.
    pub(super) fn gate<'t>(
        &self,
        ctx: &RunCtx<'_>,
        tool: &'t ToolBinding,
    ) -> Option<super::concurrency::Gate<'t>> {
        let group = tool.resource_group.as_deref()?;
        let limit = *ctx.agent.group_limits.get(group)?;
        Some(self.shared.slots.gate(group, limit))
    }

    /// Admits a call through one breaker arm, recording any transition; an
    /// open arm gives the model a `circuit_open` failure and no call is made.
    /// The permit is held: given back unused unless its outcome is reported.
    pub(super) fn admit(
        &self,
        emitter: &Emitter,
        c: &Correlation,
        kind: ArmKind,
        name: &str,
    ) -> Result<HeldPermit, Failure> {
        let now = self.clock.now();
        let admission = self.shared.breakers().admit(kind, name, now);
        if admission.transition.is_change() {
            emitter.emit(
                c,
                BreakerStateChanged {
                    arm: kind,
                    name: name.to_owned(),
                    transition: admission.transition,
                },
            );
        }
        match admission.admit {
            Admit::Accepted(permit) => Ok(HeldPermit::new(
                self.shared.breakers.clone(),
                kind,
                name,
                permit,
            )),
            Admit::Rejected { retry_after } => {
                emitter.emit(
                    c,
                    CallRejected::CircuitOpen(CircuitRejected {
                        arm: kind,
                        name: name.to_owned(),
                        reason: CircuitOpen::CircuitOpen,
                        retry_after,
                        shared: None,
                        opened_by: None,
                        open_reason: None,
                    }),
                );
                Err(Failure::circuit_open(name, retry_after))
            }
        }
    }

    /// The first open breaker arm of a tool (its own, then its resource
    /// group's), with the time until it may admit again.
    fn open_arm(&self, tool: &ToolBinding) -> Option<(ArmKind, String, std::time::Duration)> {
        let now = self.clock.now();
        let breakers = self.shared.breakers();
        let mut arms = vec![(ArmKind::Tool, tool.name.as_str())];
        if let Some(group) = &tool.resource_group {
            arms.push((ArmKind::ResourceGroup, group.as_str()));
        }
        arms.into_iter().find_map(|(kind, name)| {
            let until = breakers.get(kind, name)?.open_until()?;
            (until > now).then(|| (kind, name.to_owned(), until.saturating_duration_since(now)))
        })
    }

    /// Reports a call's final outcome to the arm of `permit`.
    pub(super) fn report_outcome(
        &self,
        emitter: &Emitter,
        c: &Correlation,
        mut permit: HeldPermit,
        outcome: Result<(), &Failure>,
    ) {
        let transition = permit.finish(outcome, self.clock.now());
        if transition.is_change() {
            emitter.emit(
                c,
                BreakerStateChanged {
                    arm: permit.kind(),
                    name: permit.name().to_owned(),
                    transition,
                },
            );
        }
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

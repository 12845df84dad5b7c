//! The attempt loop: invoke, classify, decide (retry, look up by key, or
//! give up), always under the same deadline and the same key.

//!
//! Each attempt is [`Engine::attempt_once`] (a slot of the resource group,
//! the call, its record); its failure is decided by
//! [`Engine::decide_attempt`] (a timeout of an idempotent write looks its
//! key up first), and a retry waits in [`Engine::wait_to_retry`], which
//! keeps the breaker the outermost gate.

use std::time::Duration;

use opentelemetry::context::FutureExt as _;

use rein_core::deadline::{Budget, Deadline};
use rein_core::event::{
    AbandonReason, Flag, IdempotencyLookup, RetryAbandoned, RetryScheduled, RetryTarget,
    StopReason, ToolCallFailed, ToolCallFinished, ToolCallNotSent, ToolCallStarted,
    ToolCallSucceeded,
};
use rein_core::governor::Completion;
use rein_core::idempotency::IdempotencyKey;
use rein_core::retry::{GiveUpReason, RetryDecision, RetryInput, RetryPolicy};
use rein_core::{AttemptId, Category, Clock, Effect, Failure, ToolClass};
use serde_json::Value;

use super::{Attempted, Planned};
use crate::run::binding::{ToolBinding, ToolTarget};
use crate::run::concurrency::{Gate, Slot};
use crate::run::emitter::Correlation;
use crate::run::latency::Plan;
use crate::run::{Engine, RunCtx, new_id};
use crate::tool::{Attempt, Reach, ToolOutput};

/// One guarded call's attempt loop, as each of its steps sees it.
struct Attempts<'a, 'r> {
    ctx: &'a RunCtx<'r>,
    planned: &'a Planned,
    tool: &'a ToolBinding,
    budget: &'a Budget,
    policy: &'a RetryPolicy,
    /// The call's deadline: every attempt, lookup and wait is under it.
    deadline: Deadline,
    /// The class retries are decided for (the tool's, unless sabotaged).
    decide_class: ToolClass,
    /// The latency profile and allowance factor the call is planned with
    /// (read once per call: declared, or observed once trusted).
    plan: Plan,
}

/// How one attempt ended.
enum AttemptEnd {
    /// The call ends here: it succeeded, or an interrupt stopped it before
    /// anything was sent.
    Ended(Attempted),
    /// It failed; its slot, if it got one, is held until the failure is
    /// decided.
    Failed(Failure, Option<Slot>),
}

/// What deciding a failure gave.
enum Decided {
    /// What to do next.
    Then(RetryDecision),
    /// A lookup by key found that the lost attempt had applied: its result.
    Found(Value),
}

impl Engine {
    /// The attempt loop: invoke, classify, decide (retry, look up by key, or
    /// give up), always under the same deadline, the same key and `policy`
    /// (the agent's, or a compensation's own ceiling). A slot already
    /// `admitted` (step 4's) carries the first attempt; every other attempt
    /// enters the group's gate itself.
    #[allow(clippy::too_many_arguments)]
    pub(in crate::run) async fn attempts(
        &self,
        ctx: &RunCtx<'_>,
        c: &mut Correlation,
        planned: &Planned,
        tool: &ToolBinding,
        budget: &Budget,
        key: Option<&IdempotencyKey>,
        policy: &RetryPolicy,
        mut admitted: Option<Slot>,
    ) -> Attempted {
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
        let call = Attempts {
            ctx,
            planned,
            tool,
            budget,
            policy,
            deadline: budget.deadline(),
            decide_class,
            plan: self.shared.latency.plan(tool, Some(&planned.args)),
        };
        // The resource group's concurrency ceiling, resolved once per call:
        // `None` (no ceiling) costs nothing per attempt.
        let gate = self.gate(ctx, tool);
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
            let tried = self
                .attempt_once(
                    &call,
                    c,
                    gate.as_ref(),
                    admitted.take(),
                    attempt,
                    &attempt_id,
                    key,
                    &mut sent,
                )
                .await;
            let (failure, slot) = match tried {
                AttemptEnd::Ended(attempted) => return attempted,
                AttemptEnd::Failed(failure, slot) => (failure, slot),
            };
            self.share_cooldown(tool, &failure).await;
            let ended = |outcome| Attempted {
                outcome,
                attempts: attempt,
                sent,
            };
            let decision = match self.decide_attempt(&call, c, attempt, &failure, key).await {
                Decided::Found(result) => return ended(Ok(result)),
                Decided::Then(decision) => decision,
            };
            // The slot is free before any wait to retry; the limit learns
            // from how the attempt failed (429, overload, timeout shrink it).
            self.finish_slot(ctx, c, slot, Completion::from_failure(failure.category()));
            match decision {
                RetryDecision::Retry { delay, .. } => {
                    let waited = self
                        .wait_to_retry(&call, c, attempt, &failure, &decision, delay, key)
                        .await;
                    if let Err(outcome) = waited {
                        return ended(Err(outcome));
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
                    // The report says why a retry was not worth making.
                    let failure = match reason {
                        GiveUpReason::NotWorthItsCost { worth } => {
                            let why = crate::run::not_worth_it(&worth);
                            let message = format!("{} ({why})", failure.human_message());
                            failure.with_human_message(message)
                        }
                        _ => failure,
                    };
                    return ended(Err(failure));
                }
                RetryDecision::LookupByKey => return ended(Err(failure)),
            }
        }
    }

    /// One attempt: a slot of the tool's resource group (from before it is
    /// sent until its outcome is decided, a lookup by key included; not
    /// while it waits to retry), the call, and its record.
    #[allow(clippy::too_many_arguments)]
    async fn attempt_once(
        &self,
        call: &Attempts<'_, '_>,
        c: &Correlation,
        gate: Option<&Gate<'_>>,
        admitted: Option<Slot>,
        attempt: u32,
        attempt_id: &AttemptId,
        key: Option<&IdempotencyKey>,
        sent: &mut u32,
    ) -> AttemptEnd {
        let (ctx, tool) = (call.ctx, call.tool);
        // Until its first attempt is sent, an interrupt stops the call: it
        // waits for no slot, and nothing goes out.
        let first = *sent == 0;
        let slot = match (gate, admitted) {
            (_, Some(slot)) => Some(slot),
            (None, None) => None,
            (Some(gate), None) => {
                let need = call.plan.need(tool.class);
                let entered = tokio::select! {
                    entered = gate.enter_for(super::caller(ctx), call.deadline, need) => entered,
                    () = ctx.interrupted(), if first => {
                        return AttemptEnd::Ended(self.not_sent(ctx, c, tool));
                    }
                };
                match self.admitted(ctx, c, tool, gate, entered, call.budget, need) {
                    Ok(slot) => Some(slot),
                    Err(failure) => {
                        return AttemptEnd::Failed(failure.with_attempt(attempt_id.clone()), None);
                    }
                }
            }
        };
        let queue_wait = slot.as_ref().map_or(Duration::ZERO, |s| s.waited);
        let now = self.clock.now();
        let remaining = call.deadline.remaining(now);
        let allowance = call.plan.allowance(remaining);
        ctx.emitter.emit(
            c,
            ToolCallStarted {
                tool: tool.name.clone(),
                attempt,
                class: tool.class,
                allowance,
                remaining,
                queue_wait,
                latency_bucket: call.plan.bucket,
                owner: tool.declared.owner.clone(),
                side_effect_tier: tool.declared.side_effect_tier,
            },
        );
        let request = Attempt {
            run_id: &ctx.run_id,
            intent_id: &call.planned.intent_id,
            attempt_id,
            number: attempt,
            key,
            remaining,
            allowance,
        };
        if first && ctx.is_interrupted() {
            return AttemptEnd::Ended(self.not_sent(ctx, c, tool));
        }
        let started = self.clock.now();
        *sent += 1;
        // The attempt's span is open now (`tool_call_started`): the tool
        // gets it as `traceparent`.
        let span = ctx
            .emitter
            .trace()
            .and_then(|t| t.attempt_context(attempt_id))
            .unwrap_or_default();
        let result = self.invoke(call, &request).with_context(span).await;
        crate::crash::point("after_call");
        let elapsed = self.clock.now().saturating_duration_since(started);
        self.observe_attempt(ctx, c, tool, &call.planned.args, &result, elapsed);
        self.record_retry(
            &crate::run::tool_target(&tool.name),
            attempt,
            result.is_ok(),
        );
        let failure = match result {
            Ok(output) => {
                self.finish_slot(ctx, c, slot, Completion::SUCCEEDED);
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
                return AttemptEnd::Ended(Attempted {
                    outcome: Ok(output.result),
                    attempts: attempt,
                    sent: *sent,
                });
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
        AttemptEnd::Failed(failure, slot)
    }

    /// Records an attempt's latency when it says something about the
    /// tool's (see `run::latency`: a success or the target's failure, not
    /// a cancellation nor rein's own refusal), and emits the degradation
    /// it reveals, if any.
    fn observe_attempt(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        tool: &ToolBinding,
        args: &Value,
        result: &Result<ToolOutput, Failure>,
        elapsed: Duration,
    ) {
        let counts = match result {
            Ok(_) => true,
            Err(f) => !matches!(
                f.category(),
                Category::Cancelled | Category::CircuitOpen | Category::BudgetExhausted
            ),
        };
        if !counts {
            return;
        }
        if let Some(degraded) = self.shared.latency.record_tool(tool, args, elapsed) {
            ctx.emitter.emit(c, degraded);
        }
    }

    /// Sends one attempt to the tool's adapter.
    ///
    /// Cancellation drops the attempt: an HTTP request is aborted, a
    /// command's process group killed (its drop guard). A write that was
    /// sent may have landed: in doubt, settled. An interrupt drops only a
    /// read: a write it let through finishes within its allowance, so a
    /// rolling restart leaves nothing in doubt (its step stops right after).
    async fn invoke(
        &self,
        call: &Attempts<'_, '_>,
        request: &Attempt<'_>,
    ) -> Result<ToolOutput, Failure> {
        let (ctx, tool, args) = (call.ctx, call.tool, &call.planned.args);
        let invoke = async {
            match Reach::of(&self.http, Some(&self.command), &tool.target) {
                Some(reach) => reach.invoke(args, request).await,
                // A child run is never dropped mid-way: it sees the
                // cancellation through its own (child) token, settles its
                // effects and records its end, and its parent waits for
                // that.
                None => Err(Failure::new(&tool.name, Category::Unknown)
                    .with_human_message("an agent call is awaited without racing")),
            }
        };
        if let ToolTarget::Agent(target) = &tool.target {
            return self
                .child_run(ctx, call.planned, tool, target, call.budget)
                .await;
        }
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
    }

    /// Decides what follows a failed attempt. A decision to look the key up
    /// (the timeout of an idempotent write) asks the tool; a lookup that
    /// settles the effect decides again.
    async fn decide_attempt(
        &self,
        call: &Attempts<'_, '_>,
        c: &Correlation,
        attempt: u32,
        failure: &Failure,
        key: Option<&IdempotencyKey>,
    ) -> Decided {
        let (ctx, tool, deadline) = (call.ctx, call.tool, call.deadline);
        let mut deciding = failure.clone();
        loop {
            let now = self.clock.now();
            let input = RetryInput {
                class: call.decide_class,
                failure: &deciding,
                attempt,
                deadline,
                latency: call.plan.profile,
                now,
                // A tool declares no price: its retry costs its time.
                worth: self.worth_input(
                    &crate::run::tool_target(&tool.name),
                    ctx.agent.planner.value_of_success,
                    attempt,
                    rein_core::deadline::Cost::ZERO,
                ),
            };
            let decision = self.decide(&crate::run::tool_target(&tool.name), call.policy, &input);
            if decision != RetryDecision::LookupByKey {
                return Decided::Then(decision);
            }
            let Some(key) = key else {
                deciding = deciding.with_effect(Effect::NotApplied);
                continue;
            };
            let allowance = call.plan.allowance(deadline.remaining(now));
            let lookup =
                crate::tool::lookup(&self.http, &tool.name, &tool.target, key, allowance).await;
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
                    return Decided::Found(result);
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
        }
    }

    /// Waits `delay` before the next attempt. `Err` ends the call with that
    /// failure: the run was cancelled meanwhile, or an arm of the tool
    /// opened (the breaker stays the outermost gate: an arm that opened
    /// while this call waited, from another call's failures, stops the
    /// retry, so no call reaches an open target).
    #[allow(clippy::too_many_arguments)]
    async fn wait_to_retry(
        &self,
        call: &Attempts<'_, '_>,
        c: &Correlation,
        attempt: u32,
        failure: &Failure,
        decision: &RetryDecision,
        delay: Duration,
        key: Option<&IdempotencyKey>,
    ) -> Result<(), Failure> {
        let (ctx, tool) = (call.ctx, call.tool);
        if let Some(scheduled) = RetryScheduled::of(
            RetryTarget::Tool(tool.name.clone()),
            decision,
            call.deadline.remaining(self.clock.now()),
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
        // An interrupt does not stop a write between its attempts: it was
        // sent, and it finishes (a read stops).
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
            return Err(failure.clone());
        }
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
            return Err(Failure::circuit_open(&open.1, open.2).with_effect(failure.effect()));
        }
        Ok(())
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
}

//! The attempt loop: invoke, classify, decide (retry, look up by key, or
//! give up), always under the same deadline and the same key.

use std::time::Duration;

use rein_core::deadline::Budget;
use rein_core::idempotency::IdempotencyKey;
use rein_core::retry::{RetryDecision, RetryInput};
use rein_core::{AttemptId, Category, Clock, Effect, EventKind, Failure, ToolClass};
use serde_json::json;

use super::{Attempted, Planned, millis, retry_scheduled};
use crate::run::binding::{ToolBinding, ToolTarget};
use crate::run::emitter::Correlation;
use crate::run::{Engine, RunCtx, new_id};
use crate::tool::Attempt;

impl Engine {
    /// The attempt loop: invoke, classify, decide (retry, look up by key, or
    /// give up), always under the same deadline and the same key.
    pub(super) async fn attempts(
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
    pub(in crate::run) async fn attempts_with(
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
                                EventKind::ConcurrencyWaitExpired,
                                c,
                                json!({
                                    "tool": tool.name, "attempt": attempt,
                                    "resource_group": gate.group(),
                                    "max_concurrency": gate.ceiling(),
                                    "queue_wait_ms": millis(expired.waited),
                                }),
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
                    EventKind::ToolCallStarted,
                    c,
                    json!({
                        "tool": tool.name, "attempt": attempt, "class": tool.class,
                        "allowance_ms": millis(allowance), "remaining_ms": millis(remaining),
                        "queue_wait_ms": millis(queue_wait),
                    }),
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
                            EventKind::ToolCallFinished,
                            c,
                            json!({
                                "tool": tool.name, "attempt": attempt, "ok": true,
                                "replayed": output.replayed, "truncated": output.truncated,
                                "elapsed_ms": millis(elapsed),
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
                    EventKind::ToolCallFinished,
                    c,
                    json!({
                        "tool": tool.name, "attempt": attempt, "ok": false,
                        "category": failure.category(), "effect": failure.effect(),
                        "retryable": failure.retryable(), "elapsed_ms": millis(elapsed),
                        "reason": failure.human_message(),
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
                let decision = self.decide(&crate::run::tool_target(&tool.name), policy, &input);
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
                            EventKind::IdempotencyLookup,
                            c,
                            json!({"tool": tool.name, "found": true, "collapsed": true,
                                   "reason": "the lost attempt had applied; its result is used instead of re-executing"}),
                        );
                        return Attempted {
                            outcome: Ok(result),
                            attempts: attempt,
                            sent,
                        };
                    }
                    Ok(None) => {
                        ctx.emitter.emit(
                            EventKind::IdempotencyLookup,
                            c,
                            json!({"tool": tool.name, "found": false,
                                   "reason": "the lost attempt had not applied; re-execution is decided as a retry"}),
                        );
                    }
                    Err(lookup_failure) => {
                        ctx.emitter.emit(
                            EventKind::IdempotencyLookup,
                            c,
                            json!({"tool": tool.name, "found": null,
                                   "lookup_failure": lookup_failure.category(),
                                   "reason": "lookup unavailable; a retry with the same key is deduplicated by the tool"}),
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
                    let mut data = retry_scheduled(
                        ("tool", &tool.name),
                        &decision,
                        deadline.remaining(self.clock.now()),
                    );
                    data["same_key"] = json!(key.is_some());
                    ctx.emitter.emit(EventKind::RetryScheduled, c, data);
                    // An interrupt does not stop a write between its attempts:
                    // it was sent, and it finishes (a read stops).
                    let cancelled = tokio::select! {
                        () = self.clock.sleep(delay) => false,
                        () = ctx.aborts(tool.class) => true,
                    };
                    if cancelled {
                        ctx.emitter.emit(
                            EventKind::RetryAbandoned,
                            c,
                            json!({"tool": tool.name, "attempts": attempt,
                                   "reason": {"kind": "cancelled"}, "category": failure.category()}),
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
                            EventKind::RetryAbandoned,
                            c,
                            json!({"tool": tool.name, "attempts": attempt,
                                   "reason": {"kind": "circuit_open", "arm": open.0, "name": open.1},
                                   "category": failure.category()}),
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
                        EventKind::RetryAbandoned,
                        c,
                        json!({"tool": tool.name, "attempts": attempt, "reason": reason,
                               "category": failure.category()}),
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
            EventKind::ToolCallFinished,
            c,
            json!({"tool": tool.name, "ok": false, "sent": false, "category": Category::Cancelled,
                   "effect": Effect::NotApplied,
                   "reason": "the run was interrupted before the call was sent; the resume sends it"}),
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

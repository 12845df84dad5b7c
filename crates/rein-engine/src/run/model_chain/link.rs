//! One link asked: its slot, its breaker, the call, and classified retries
//! under the host's policy.

use futures_util::StreamExt;
use rein_core::breaker::ArmKind;
use rein_core::deadline::{Budget, Dimension, Exhausted, Need, Usage};
use rein_core::retry::{GiveUpReason, RetryDecision, RetryInput};
use rein_core::{Category, EventKind, Failure, ToolClass};
use serde_json::json;

use super::chain::LinkEnd;
use super::held::{GuardedStream, Held, record_transition};
use super::{LinkRef, Mode, Reply, TurnHost};
use crate::provider::ModelRequest;
use crate::run::emitter::Correlation;
use crate::run::report::End;
use crate::run::{Engine, guarded, millis, provider_target};

impl Engine {
    /// Asks one link, with retries under the host's policy. A transient
    /// failure moves on at once when a next link is `ready`; a context
    /// overflow always does.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn call_link(
        &self,
        host: &dyn TurnHost,
        c: &Correlation,
        link: LinkRef<'_>,
        request: &ModelRequest,
        budget: &mut Budget,
        next_links: usize,
        mode: Mode,
    ) -> Result<Reply, LinkEnd> {
        let provider = link.provider.name().to_owned();
        let model = link.model;
        let ready = next_links > 0;
        // With links still to try, this one gets an even share of what is
        // left (its retries and its wait for a slot included): a provider
        // that hangs must leave time for the fallback, not eat the whole
        // deadline.
        let deadline = if ready {
            let now = self.clock.now();
            let share = budget.deadline().remaining(now)
                / u32::try_from(next_links + 1).unwrap_or(u32::MAX);
            rein_core::deadline::Deadline::after(now, share)
        } else {
            budget.deadline()
        };
        let policy = *host.retry();
        let latency = host.model_latency();
        let emitter = host.emitter();
        let gate = host
            .provider_limits()
            .get(&provider)
            .map(|limit| self.shared.provider_slots.gate(&provider, *limit));
        let stop_or_move = |failure: Failure| {
            if ready {
                LinkEnd::MoveOn(failure)
            } else {
                LinkEnd::Stop(End::ModelFailed(
                    failure.category(),
                    failure.human_message().to_owned(),
                ))
            }
        };
        let mut attempt = 0u32;
        self.deposit_request(&provider_target(&provider), &policy);
        loop {
            attempt += 1;
            let now = self.clock.now();
            if let Err(exhausted) = budget.check(&Need::time(latency.p50()), now) {
                emitter.emit(
                    EventKind::BudgetExhausted,
                    c,
                    json!({"scope": "model_call", "exhausted": exhausted}),
                );
                return Err(LinkEnd::Stop(End::Budget(exhausted)));
            }
            // The provider's concurrency slot first (a wait in line, within
            // the deadline and the caller's cancellation), then its breaker.
            let slot = match &gate {
                None => None,
                Some(gate) => {
                    let entered = tokio::select! {
                        r = gate.enter(self.clock.as_ref(), deadline) => r,
                        () = host.cancelled() => {
                            return Err(LinkEnd::Stop(End::Cancelled(
                                "cancelled by the caller while a model call waited for a slot".into(),
                            )));
                        }
                    };
                    match entered {
                        Ok(slot) => {
                            if !slot.waited.is_zero() {
                                emitter.emit(
                                    EventKind::ModelQueueWaited,
                                    c,
                                    json!({"provider": provider, "max_concurrency": gate.ceiling(),
                                           "queue_wait_ms": millis(slot.waited), "expired": false}),
                                );
                            }
                            Some(slot)
                        }
                        Err(expired) => {
                            emitter.emit(
                                EventKind::ModelQueueWaited,
                                c,
                                json!({"provider": provider, "max_concurrency": gate.ceiling(),
                                       "queue_wait_ms": millis(expired.waited), "expired": true}),
                            );
                            return Err(stop_or_move(
                                Failure::new(&provider, Category::Timeout).with_human_message(
                                    format!(
                                        "{provider} was not asked: no slot of its max_concurrency ({}) came within the call's deadline (waited {:?})",
                                        gate.ceiling(),
                                        expired.waited
                                    ),
                                ),
                            ));
                        }
                    }
                }
            };
            // Another node's opening of this provider, when breakers are
            // shared: refused like an open local arm, before the local arm.
            if let Some(refused) = self.admit_shared(emitter, c, &provider).await {
                return Err(stop_or_move(refused));
            }
            let permit = match self.admit(emitter, c, ArmKind::Provider, &provider) {
                Ok(p) => p,
                Err(f) => return Err(stop_or_move(f)),
            };
            // From here the breaker permit and the provider slot are held
            // by a guard: given back unused if the call is dropped (a
            // caller that went away is not the provider's failure), and
            // held by a streamed answer until its stream ends.
            let mut held = Held {
                clock: self.clock.clone(),
                provider: provider.clone(),
                permit,
                _slot: slot,
                shared: self.shared_breakers().cloned(),
            };
            let now = self.clock.now();
            let allowance = deadline.remaining(now);
            emitter.emit(
                EventKind::ModelCallStarted,
                c,
                json!({"provider": provider, "model": model, "attempt": attempt,
                       "allowance_ms": millis(allowance), "messages": request.messages.len(),
                       "stream": matches!(mode, Mode::Stream(_))}),
            );
            host.calling();
            let call = async {
                match mode {
                    Mode::Complete => link
                        .provider
                        .complete(request, allowance)
                        .await
                        .map(Reply::Complete),
                    Mode::Stream(settings) => {
                        // Each link under its own provider's limits.
                        let settings = link.provider.stream_settings().unwrap_or(settings);
                        let mut stream = link
                            .provider
                            .stream(request, settings.limits(allowance))
                            .await?;
                        match stream.next().await {
                            Some(Ok(first)) => Ok(Reply::Stream {
                                first,
                                rest: stream,
                            }),
                            Some(Err(f)) => Err(f),
                            None => Err(Failure::new(link.provider.name(), Category::Transient)
                                .with_human_message(format!(
                                    "{} ended its stream before any event",
                                    link.provider.name()
                                ))),
                        }
                    }
                }
            };
            let result = tokio::select! {
                r = self.clock.timeout(allowance, call) => match r {
                    Ok(r) => r,
                    Err(_) => Err(
                        Failure::new(&provider, Category::Timeout).with_human_message(format!(
                            "{provider} did not answer within {allowance:?}"
                        )),
                    ),
                },
                () = host.cancelled() => {
                    // The caller's cancellation is not the provider's fault:
                    // the guard gives the permit back unused.
                    drop(held);
                    if !host.interrupted() {
                        emitter.emit(
                            EventKind::RunCancelled,
                            c,
                            json!({"reason": "cancelled by the caller", "aborted": "model_call",
                                   "provider": provider}),
                        );
                    }
                    return Err(LinkEnd::Stop(End::Cancelled(
                        "cancelled by the caller during a model call".into(),
                    )));
                }
            };
            let now = self.clock.now();
            let failure = match result {
                // A stream is judged by how it ends, not by its first event:
                // the guard goes with it and reports its outcome then.
                Ok(Reply::Stream { first, rest }) => {
                    return Ok(Reply::Stream {
                        first,
                        rest: Box::pin(GuardedStream {
                            inner: rest,
                            held: Some(held),
                        }),
                    });
                }
                Ok(reply) => {
                    let transition = held.finish(Ok(()));
                    record_transition(emitter, c, &provider, &transition);
                    if let Some(shared) = self.shared_breakers() {
                        shared.share(&provider, &transition).await;
                    }
                    if let Reply::Complete(response) = &reply {
                        host.answered(&provider, model, &response.usage);
                        let cost = link
                            .price
                            .map(|p| p.cost(response.usage.input, response.usage.output))
                            .unwrap_or_default();
                        emitter.emit(
                            EventKind::ModelCallFinished,
                            c,
                            json!({"provider": provider, "model": model, "attempt": attempt, "ok": true,
                                   "usage": response.usage, "cost_micros": cost.micros(),
                                   "finish": response.finish,
                                   "tool_calls": response.tool_calls.iter().map(|t| &t.name).collect::<Vec<_>>()}),
                        );
                    }
                    return Ok(reply);
                }
                Err(f) => f,
            };
            let transition = held.finish(Err(&failure));
            record_transition(emitter, c, &provider, &transition);
            drop(held);
            if let Some(shared) = self.shared_breakers() {
                shared.share(&provider, &transition).await;
            }
            // A call that failed midway (a stream cut after the prompt was
            // read) still consumed tokens: they are charged, so a run of
            // failing streams cannot burn tokens outside its budget.
            let spent = failure.tokens_spent();
            let spent_cost = link.price.map(|p| p.cost(spent, 0)).unwrap_or_default();
            emitter.emit(
                EventKind::ModelCallFinished,
                c,
                json!({"provider": provider, "model": model, "attempt": attempt, "ok": false,
                       "category": failure.category(), "reason": failure.human_message(),
                       "tokens_spent": spent, "cost_micros": spent_cost.micros(),
                       "key_env": link.provider.key_env()}),
            );
            if spent > 0 {
                host.spent(spent);
                let usage = Usage {
                    steps: 0,
                    tokens: spent,
                    cost: spent_cost,
                };
                if let Err(exhausted) = budget.charge(usage, now) {
                    emitter.emit(
                        EventKind::BudgetExhausted,
                        c,
                        json!({"scope": "model_call", "exhausted": exhausted,
                               "reason": "tokens spent by failed model calls"}),
                    );
                    return Err(LinkEnd::Stop(End::Budget(exhausted)));
                }
            }
            if failure.category() == Category::ContextOverflow
                || (ready && failure.category().falls_back())
            {
                return Err(LinkEnd::MoveOn(failure));
            }
            let input = RetryInput {
                class: ToolClass::Read,
                failure: &failure,
                attempt,
                deadline,
                latency,
                now,
            };
            let decision = self.decide(&provider_target(&provider), &policy, &input);
            match decision {
                RetryDecision::Retry { delay, .. } => {
                    if let Err(why) = host.allow_model_retry(delay) {
                        emitter.emit(
                            EventKind::RetryAbandoned,
                            c,
                            json!({"provider": provider, "attempts": attempt,
                                   "reason": "run_model_retry_budget", "detail": why,
                                   "category": failure.category()}),
                        );
                        return Err(LinkEnd::Stop(End::ModelFailed(
                            failure.category(),
                            format!("{} (not retried: {why})", failure.human_message()),
                        )));
                    }
                    emitter.emit(
                        EventKind::RetryScheduled,
                        c,
                        guarded::retry_scheduled(
                            ("provider", &provider),
                            &decision,
                            deadline.remaining(now),
                        ),
                    );
                    tokio::select! {
                        () = self.clock.sleep(delay) => {}
                        () = host.cancelled() => {
                            return Err(LinkEnd::Stop(End::Cancelled(
                                "cancelled by the caller while a model call waited to retry".into(),
                            )));
                        }
                    }
                }
                RetryDecision::GiveUp { reason } => {
                    emitter.emit(
                        EventKind::RetryAbandoned,
                        c,
                        json!({"provider": provider, "attempts": attempt, "reason": reason,
                               "category": failure.category()}),
                    );
                    return Err(LinkEnd::Stop(match reason {
                        GiveUpReason::DeadlineTooClose { remaining, needed } => {
                            End::Budget(Exhausted {
                                dimension: Dimension::WallClock,
                                needed: millis(needed),
                                remaining: millis(remaining),
                            })
                        }
                        GiveUpReason::ServerWaitBeyondDeadline {
                            retry_after,
                            remaining,
                        } => End::Budget(Exhausted {
                            dimension: Dimension::WallClock,
                            needed: millis(retry_after),
                            remaining: millis(remaining),
                        }),
                        _ => {
                            End::ModelFailed(failure.category(), failure.human_message().to_owned())
                        }
                    }));
                }
                RetryDecision::LookupByKey => {
                    return Err(LinkEnd::Stop(End::ModelFailed(
                        failure.category(),
                        failure.human_message().to_owned(),
                    )));
                }
            }
        }
    }
}

//! Model chains: one turn asked along a binding's `{provider, model}`
//! links, each under its provider's concurrency limit and breaker arm,
//! with classified retries inside the caller's deadline.
//!
//! # Why here, and why a host
//!
//! A run's model turns and the OpenAI-compatible gateway's requests must
//! behave alike: the same breakers (one arm per provider, shared by the
//! engine), the same slots, the same fallback rules. The chain therefore
//! talks to a [`TurnHost`] — a run, or a gateway request — for the few
//! things that differ: where events go, what cancels the turn, which retry
//! policy and provider ceilings apply, what an answer is charged to.
//!
//! # Rules (seed 004)
//!
//! - The next link is tried only after a transient failure: the local
//!   circuit open, 5xx, 429, overload, a bare connection error, or no first
//!   byte in time. Never after 401/403, cancellation or a content filter.
//!   With a next link ready a transient failure moves on at once (another
//!   provider is likelier to answer than a retry of a failing one); the
//!   last link retries under the policy.
//! - A context overflow goes to the next context-fallback link; the same
//!   model is never asked again. Without one the turn fails at once.
//! - A switch is never silent: `model_fallback_used` names the primary and
//!   the link that answered; the answer carries that link's price and name.
//! - When every link failed, the first failure (the root cause) is
//!   surfaced, naming every link tried.
//! - Streaming: a link is committed to once its first event arrived; before
//!   that it may be retried or left like any failed call.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;

use futures_util::StreamExt;
use rein_core::breaker::ArmKind;
use rein_core::deadline::{Budget, Dimension, Exhausted, Need, Usage};
use rein_core::event::{
    AbandonReason, AbortedWork, BreakerStateChanged, BudgetExhausted, BudgetScope, Flag, LinkName,
    ModelAnswered, ModelCallFailed, ModelCallFinished, ModelCallResult, ModelCallStarted,
    ModelFallbackUsed, ModelQueueWaited, MovedOn, RetryAbandoned, RetryScheduled, RetryTarget,
    RunCancelled, RunModelRetryBudget,
};
use rein_core::registry::Price;
use rein_core::retry::{GiveUpReason, RetryDecision, RetryInput, RetryPolicy};
use rein_core::{Category, Failure, LatencyProfile, ToolClass};

use super::binding::ModelLink;
use super::emitter::{Correlation, Emitter};
use super::permit::HeldPermit;
use super::report::End;
use super::{Engine, millis, provider_target};
use crate::provider::{
    ModelProvider, ModelRequest, ModelResponse, StreamEvent, StreamSettings, TokenUsage, TurnStream,
};

/// What a model turn is asked on behalf of: a run, or a gateway request.
pub(crate) trait TurnHost: Send + Sync {
    /// Where the turn's events go.
    fn emitter(&self) -> &Emitter;
    /// Resolves when the turn must stop (the caller cancelled).
    fn cancelled(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;

    /// Whether the turn stops because its process hands the run on (not a
    /// cancellation: nothing says `run_cancelled` then).
    fn interrupted(&self) -> bool {
        false
    }
    /// The retry policy of model calls.
    fn retry(&self) -> &RetryPolicy;
    /// The latency profile of a model call.
    fn model_latency(&self) -> LatencyProfile;
    /// Calls in flight at once per provider name.
    fn provider_limits(&self) -> &BTreeMap<String, NonZeroU32>;
    /// A call is about to be sent.
    fn calling(&self) {}
    /// Whether one more model retry, waiting `delay`, fits the host's own
    /// ceiling on model retries (it is counted when it does); `Err` says
    /// why not.
    fn allow_model_retry(&self, delay: std::time::Duration) -> Result<(), String> {
        let _ = delay;
        Ok(())
    }
    /// A failed call consumed `tokens` (charged to the host's budget by the
    /// chain; this is for the host's own counters).
    fn spent(&self, tokens: u64) {
        let _ = tokens;
    }
    /// `provider`'s `model` answered, using `usage`.
    fn answered(&self, provider: &str, model: &str, usage: &TokenUsage) {
        let _ = (provider, model, usage);
    }
}

/// A model binding's chain, borrowed: the primary, the links tried after a
/// transient failure, and the larger-context links tried after an overflow.
#[derive(Clone, Copy)]
pub(crate) struct Chain<'a> {
    pub(crate) primary: LinkRef<'a>,
    pub(crate) fallbacks: &'a [ModelLink],
    pub(crate) context: &'a [ModelLink],
}

/// One link of a chain, borrowed.
#[derive(Clone, Copy)]
pub(crate) struct LinkRef<'a> {
    pub(crate) provider: &'a Arc<dyn ModelProvider>,
    pub(crate) model: &'a str,
    pub(crate) price: Option<Price>,
}

impl<'a> From<&'a ModelLink> for LinkRef<'a> {
    fn from(link: &'a ModelLink) -> Self {
        LinkRef {
            provider: &link.provider,
            model: &link.model,
            price: link.price,
        }
    }
}

/// How a turn is wanted: whole, or as a stream (committed to a link at
/// its first event).
#[derive(Clone, Copy)]
pub(crate) enum Mode {
    /// The whole answer.
    Complete,
    /// A stream, with these first-byte and idle limits.
    Stream(StreamSettings),
}

/// What a link gave.
pub(crate) enum Reply {
    /// The whole answer.
    Complete(ModelResponse),
    /// The first event, and the rest of the stream.
    Stream {
        first: StreamEvent,
        rest: TurnStream,
    },
}

/// A turn's answer and the link that gave it: cost and the model on record
/// are the answering link's, never the primary's.
pub(crate) struct Answered {
    pub(crate) reply: Reply,
    pub(crate) price: Option<Price>,
    pub(crate) provider: String,
    pub(crate) model: String,
    /// Whether a link other than the primary answered.
    pub(crate) fell_back: bool,
}

/// A provider call's breaker permit and concurrency slot, both given back
/// when it is dropped (the permit unused unless [`Held::finish`] reported
/// its outcome).
struct Held {
    clock: Arc<dyn rein_core::Clock>,
    provider: String,
    permit: HeldPermit,
    _slot: Option<super::concurrency::Slot>,
    /// Where a transition of the arm is published, when breakers are
    /// shared across nodes.
    shared: Option<Arc<super::shared_breakers::SharedBreakers>>,
}

impl Held {
    /// Reports the call's outcome to the provider's arm.
    fn finish(&mut self, outcome: Result<(), &Failure>) -> rein_core::breaker::Transition {
        self.permit.finish(outcome, self.clock.now())
    }
}

/// A streamed answer that holds its provider's slot and breaker permit
/// until it ends: its terminal event is the outcome the breaker counts; a
/// stream dropped before it gives the permit back unused.
struct GuardedStream {
    inner: TurnStream,
    held: Option<Held>,
}

impl futures_util::Stream for GuardedStream {
    type Item = Result<StreamEvent, Failure>;

    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        let item = std::task::ready!(self.inner.as_mut().poll_next(cx));
        let outcome = match &item {
            Some(Ok(StreamEvent::Done(_))) => Some(Ok(())),
            Some(Err(f)) => Some(Err(f)),
            Some(Ok(StreamEvent::Delta(_))) => None,
            // Ended without a terminal item: neither success nor failure.
            None => {
                self.held = None;
                None
            }
        };
        if let Some(outcome) = outcome
            && let Some(mut held) = self.held.take()
        {
            let transition = held.finish(outcome);
            if transition.is_change() {
                tracing::info!(provider = %held.provider, ?transition, "provider breaker changed at the end of a stream");
            }
            if let Some(shared) = &held.shared {
                shared.share_later(&held.provider, &transition);
            }
        }
        std::task::Poll::Ready(item)
    }
}

/// Records a breaker transition of `provider`'s arm as an event.
fn record_transition(
    emitter: &Emitter,
    c: &Correlation,
    provider: &str,
    transition: &rein_core::breaker::Transition,
) {
    if transition.is_change() {
        emitter.emit(
            c,
            BreakerStateChanged {
                arm: ArmKind::Provider,
                name: provider.to_owned(),
                transition: transition.clone(),
            },
        );
    }
}

/// How one link ended without an answer.
enum LinkEnd {
    /// The turn moves on (a transient failure with a next link ready, or a
    /// context overflow).
    MoveOn(Failure),
    /// The turn ends.
    Stop(End),
}

/// The end of a turn whose every link failed surfaces the first failure,
/// naming every link tried.
fn surface_first(end: End, moved_on: &[(String, String, Failure)], last: LinkRef<'_>) -> End {
    // An overflow that a larger window resolved is not the root cause of
    // what failed after it: the first failure after the last overflow is
    // (or, when none, the end itself).
    let after_overflow = moved_on
        .iter()
        .rposition(|(_, _, f)| f.category() == Category::ContextOverflow)
        .map_or(0, |i| i + 1);
    let first = match moved_on.get(after_overflow) {
        Some((_, _, first)) => first.clone(),
        None if after_overflow == 0 => return end,
        None => match &end {
            End::ModelFailed(category, message) => {
                Failure::new(last.provider.name(), *category).with_human_message(message.clone())
            }
            _ => return end,
        },
    };
    match end {
        End::ModelFailed(..) => {
            let mut tried: Vec<String> = moved_on
                .iter()
                .map(|(p, m, _)| format!("{p}/{m}"))
                .collect();
            let last = format!("{}/{}", last.provider.name(), last.model);
            if !tried.contains(&last) {
                tried.push(last);
            }
            End::ModelFailed(
                first.category(),
                format!(
                    "{} (every link failed; tried {})",
                    first.human_message(),
                    tried.join(", ")
                ),
            )
        }
        other => other,
    }
}

impl Engine {
    /// Asks one turn along `chain`. `base.model` is replaced by each link's.
    pub(crate) async fn ask_chain(
        &self,
        host: &dyn TurnHost,
        c: &Correlation,
        chain: Chain<'_>,
        base: &ModelRequest,
        budget: &mut Budget,
        mode: Mode,
    ) -> Result<Answered, End> {
        let mut transient: VecDeque<LinkRef<'_>> =
            chain.fallbacks.iter().map(LinkRef::from).collect();
        let mut context: VecDeque<LinkRef<'_>> = chain.context.iter().map(LinkRef::from).collect();
        let mut link = chain.primary;
        // Each link that failed, and the failure that moved the turn on.
        let mut moved_on: Vec<(String, String, Failure)> = Vec::new();
        loop {
            let request = ModelRequest {
                model: link.model.to_owned(),
                ..base.clone()
            };
            let outcome = self
                .call_link(host, c, link, &request, budget, transient.len(), mode)
                .await;
            let failure = match outcome {
                Ok(reply) => {
                    if !moved_on.is_empty() {
                        host.emitter().emit(
                            c,
                            ModelFallbackUsed {
                                primary: LinkName {
                                    provider: chain.primary.provider.name().to_owned(),
                                    model: chain.primary.model.to_owned(),
                                },
                                answered: LinkName {
                                    provider: link.provider.name().to_owned(),
                                    model: link.model.to_owned(),
                                },
                                after: moved_on
                                    .iter()
                                    .map(|(p, m, f)| MovedOn {
                                        provider: p.to_string(),
                                        model: m.to_string(),
                                        category: f.category(),
                                        reason: f.human_message().to_owned(),
                                    })
                                    .collect(),
                            },
                        );
                    }
                    return Ok(Answered {
                        reply,
                        price: link.price,
                        provider: link.provider.name().to_owned(),
                        model: link.model.to_owned(),
                        fell_back: !moved_on.is_empty(),
                    });
                }
                Err(LinkEnd::Stop(end)) => return Err(surface_first(end, &moved_on, link)),
                Err(LinkEnd::MoveOn(f)) => f,
            };
            let overflow = failure.category() == Category::ContextOverflow;
            let (category, message) = (failure.category(), failure.human_message().to_owned());
            moved_on.push((
                link.provider.name().to_owned(),
                link.model.to_owned(),
                failure,
            ));
            let next = if overflow {
                // A larger window, never the same model again; its own
                // transient failures are retried, not chained further.
                transient.clear();
                context.pop_front()
            } else {
                transient.pop_front()
            };
            match next {
                Some(next) => link = next,
                None => {
                    return Err(surface_first(
                        End::ModelFailed(category, message),
                        &moved_on,
                        link,
                    ));
                }
            }
        }
    }

    /// Asks one link, with retries under the host's policy. A transient
    /// failure moves on at once when a next link is `ready`; a context
    /// overflow always does.
    #[allow(clippy::too_many_arguments)]
    async fn call_link(
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
                emitter.emit(c, BudgetExhausted::new(BudgetScope::ModelCall, exhausted));
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
                                    c,
                                    ModelQueueWaited {
                                        provider: provider.to_owned(),
                                        max_concurrency: gate.ceiling(),
                                        queue_wait: slot.waited,
                                        expired: false,
                                    },
                                );
                            }
                            Some(slot)
                        }
                        Err(expired) => {
                            emitter.emit(
                                c,
                                ModelQueueWaited {
                                    provider: provider.to_owned(),
                                    max_concurrency: gate.ceiling(),
                                    queue_wait: expired.waited,
                                    expired: true,
                                },
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
                c,
                ModelCallStarted {
                    provider: provider.to_owned(),
                    model: model.to_owned(),
                    attempt,
                    allowance,
                    messages: request.messages.len(),
                    stream: matches!(mode, Mode::Stream(_)),
                },
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
                            c,
                            RunCancelled {
                                reason: "cancelled by the caller".into(),
                                at_step_boundary: None,
                                aborted: Some(AbortedWork::ModelCall),
                                provider: Some(provider.to_owned()),
                            },
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
                            c,
                            ModelCallFinished {
                                provider: provider.to_owned(),
                                model: model.to_owned(),
                                attempt,
                                cost: Some(cost),
                                result: ModelCallResult::Answered(ModelAnswered {
                                    ok: Flag,
                                    usage: response.usage,
                                    finish: response.finish,
                                    tool_calls: response
                                        .tool_calls
                                        .iter()
                                        .map(|t| t.name.clone())
                                        .collect(),
                                }),
                            },
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
                c,
                ModelCallFinished {
                    provider: provider.to_owned(),
                    model: model.to_owned(),
                    attempt,
                    cost: Some(spent_cost),
                    result: ModelCallResult::Failed(ModelCallFailed {
                        ok: Flag,
                        category: failure.category(),
                        reason: failure.human_message().to_owned(),
                        tokens_spent: spent,
                        key_env: link.provider.key_env().map(str::to_owned),
                    }),
                },
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
                        c,
                        BudgetExhausted {
                            reason: Some("tokens spent by failed model calls".into()),
                            ..BudgetExhausted::new(BudgetScope::ModelCall, exhausted)
                        },
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
                            c,
                            RetryAbandoned {
                                target: RetryTarget::Provider(provider.to_owned()),
                                attempts: attempt,
                                reason: AbandonReason::RunBudget(
                                    RunModelRetryBudget::RunModelRetryBudget,
                                ),
                                detail: Some(why.clone()),
                                category: failure.category(),
                            },
                        );
                        return Err(LinkEnd::Stop(End::ModelFailed(
                            failure.category(),
                            format!("{} (not retried: {why})", failure.human_message()),
                        )));
                    }
                    if let Some(scheduled) = RetryScheduled::of(
                        RetryTarget::Provider(provider.to_owned()),
                        &decision,
                        deadline.remaining(now),
                    ) {
                        emitter.emit(c, scheduled);
                    }
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
                        c,
                        RetryAbandoned {
                            target: RetryTarget::Provider(provider.to_owned()),
                            attempts: attempt,
                            reason: AbandonReason::GaveUp(reason),
                            detail: None,
                            category: failure.category(),
                        },
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

/// A model binding as callers outside a run ask it (the OpenAI-compatible
/// gateway): its chain and the limits every call of it shares with runs.
#[derive(Clone, Debug)]
pub struct ModelBinding {
    /// The binding's name (the `model` a gateway client sends).
    pub name: String,
    /// The first link.
    pub primary: ModelLink,
    /// Links tried in order after a transient failure.
    pub fallbacks: Vec<ModelLink>,
    /// Larger-context links tried in order after a context overflow.
    pub context_fallbacks: Vec<ModelLink>,
    /// Calls in flight at once per provider name, shared with runs.
    pub provider_limits: BTreeMap<String, NonZeroU32>,
    /// The retry policy of its calls.
    pub retry: RetryPolicy,
    /// The latency profile of a call, for retry and deadline decisions.
    pub model_latency: LatencyProfile,
    /// First-byte and idle limits when the caller streams.
    pub stream: StreamSettings,
}

/// One request to a [`ModelBinding`].
pub struct ModelAsk {
    /// The request; its `model` is replaced by each link's.
    pub request: ModelRequest,
    /// How long the whole call may take, fallbacks and retries included.
    pub deadline: std::time::Duration,
    /// Whether the caller wants the answer as a stream.
    pub stream: bool,
    /// Fires when the caller went away.
    pub cancel: tokio_util::sync::CancellationToken,
    /// Sees every decision (slot waits, breaker transitions, retries,
    /// fallbacks) as it happens.
    pub observer: Option<super::Observer>,
}

/// A binding's answer and the link that gave it.
pub struct ModelAnswer {
    /// The provider that answered.
    pub provider: String,
    /// The model that answered.
    pub model: String,
    /// Whether a link other than the primary answered.
    pub fell_back: bool,
    /// Its price, when known.
    pub price: Option<Price>,
    /// The answer.
    pub reply: ModelReply,
}

/// A whole answer, or a stream committed to the answering link: its first
/// event already arrived, so failures from here on are in-band.
pub enum ModelReply {
    /// The whole answer.
    Complete(ModelResponse),
    /// The stream, first event included.
    Stream(TurnStream),
}

/// Why a binding gave no answer.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    /// The failure's category (of the first link's failure when every link
    /// failed).
    pub category: Category,
    /// For a human; names every link tried when all failed.
    pub message: String,
    /// When every link's circuit is open: how long until the first of them
    /// admits a probe again (for the caller's `Retry-After`).
    pub retry_after: Option<std::time::Duration>,
}

/// The host of a call from outside a run.
struct AskHost<'a> {
    binding: &'a ModelBinding,
    emitter: Emitter,
    cancel: &'a tokio_util::sync::CancellationToken,
}

impl TurnHost for AskHost<'_> {
    fn emitter(&self) -> &Emitter {
        &self.emitter
    }

    fn cancelled(&self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.cancel.cancelled())
    }

    fn retry(&self) -> &RetryPolicy {
        &self.binding.retry
    }

    fn model_latency(&self) -> LatencyProfile {
        self.binding.model_latency
    }

    fn provider_limits(&self) -> &BTreeMap<String, NonZeroU32> {
        &self.binding.provider_limits
    }
}

impl Engine {
    /// How long until the first open arm of `chain`'s providers admits a
    /// probe again.
    fn reopens_in(&self, chain: &Chain<'_>) -> Option<std::time::Duration> {
        let now = self.clock.now();
        let breakers = self.shared.breakers();
        std::iter::once(chain.primary)
            .chain(chain.fallbacks.iter().map(LinkRef::from))
            .filter_map(|l| {
                let local = breakers
                    .get(ArmKind::Provider, l.provider.name())
                    .and_then(|arm| arm.open_until())
                    .map(|until| until.saturating_duration_since(now));
                // Another node's opening, when breakers are shared.
                let shared = self.shared_reopens_in(l.provider.name());
                local.max(shared)
            })
            .min()
    }

    /// Asks `binding` one turn from outside a run — through the same
    /// breaker arms, provider slots, retry budgets and fallback rules as
    /// runs — within `ask.deadline`.
    ///
    /// # Errors
    ///
    /// [`ModelError`] when no link answered: the first failure's category
    /// (`circuit_open`, `rate_limited`, `unauthorized`, `context_overflow`,
    /// `budget_exhausted` when the deadline ran out, `cancelled`, …).
    pub async fn ask_model(
        &self,
        binding: &ModelBinding,
        ask: ModelAsk,
    ) -> Result<ModelAnswer, ModelError> {
        let limits = rein_core::deadline::BudgetLimits::new(
            ask.deadline.max(std::time::Duration::from_millis(1)),
        )
        .map_err(|e| ModelError {
            category: Category::InvalidArguments,
            message: e.to_string(),
            retry_after: None,
        })?;
        let mut budget = Budget::start(limits, self.clock.now());
        let host = AskHost {
            binding,
            emitter: Emitter::new(
                super::new_id::<rein_core::RunId>(),
                self.clock.clone(),
                ask.observer,
            )
            .with_metrics(self.shared.metrics.clone())
            .without_run_in_logs(),
            cancel: &ask.cancel,
        };
        let chain = Chain {
            primary: LinkRef::from(&binding.primary),
            fallbacks: &binding.fallbacks,
            context: &binding.context_fallbacks,
        };
        let mode = if ask.stream {
            Mode::Stream(binding.stream)
        } else {
            Mode::Complete
        };
        let answered = self
            .ask_chain(
                &host,
                &Correlation::default(),
                chain,
                &ask.request,
                &mut budget,
                mode,
            )
            .await;
        // Nothing of a call outside a run is stored: the observer saw it.
        drop(host.emitter.drain());
        let answered = answered.map_err(|end| {
            let (category, message) = match end {
                End::ModelFailed(category, message) => (category, message),
                End::Budget(exhausted) => (
                    Category::BudgetExhausted,
                    format!("the call's deadline ran out: {exhausted}"),
                ),
                End::Cancelled(message) => (Category::Cancelled, message),
                other => (Category::Unknown, format!("{other:?}")),
            };
            let retry_after = (category == Category::CircuitOpen)
                .then(|| self.reopens_in(&chain))
                .flatten();
            ModelError {
                category,
                message,
                retry_after,
            }
        })?;
        let reply = match answered.reply {
            Reply::Complete(response) => ModelReply::Complete(response),
            Reply::Stream { first, rest } => ModelReply::Stream(Box::pin(
                futures_util::stream::once(async { Ok(first) }).chain(rest),
            )),
        };
        Ok(ModelAnswer {
            provider: answered.provider,
            model: answered.model,
            fell_back: answered.fell_back,
            price: answered.price,
            reply,
        })
    }
}

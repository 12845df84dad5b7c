//! One link asked: its slot, its breaker, the call, and classified retries
//! under the host's policy.
//!
//! Each attempt is [`Engine::try_link`] — budget, [slot and
//! breaker](Engine::hold_link), the call raced against the caller's
//! cancellation, the outcome reported — and a failure that does not move
//! the turn on goes to [`Engine::retry_link`]. The decisions that need no
//! I/O ([`link_deadline`], [`give_up_end`]) are plain functions.

use std::time::Duration;

use futures_util::StreamExt;
use opentelemetry::context::FutureExt as _;
use rein_core::breaker::ArmKind;
use rein_core::deadline::{Budget, Cost, Deadline, Dimension, Exhausted, Grant, Need, Usage};
use rein_core::event::{
    AbandonReason, AbortedWork, BudgetExhausted, BudgetScope, CallShed, Flag, ModelAnswered,
    ModelCallFailed, ModelCallFinished, ModelCallResult, ModelCallStarted, ModelQueueWaited,
    RateLimited, RetryAbandoned, RetryScheduled, RetryTarget, RunCancelled, RunModelRetryBudget,
};
use rein_core::governor::Cause;
use rein_core::retry::{GiveUpReason, RetryDecision, RetryInput, RetryPolicy};
use rein_core::{Category, Failure, Instant, LatencyProfile, ToolClass};

use super::ceiling::Reservation;
use super::chain::LinkEnd;
use super::held::{GuardedStream, Held, StreamEnd, record_cost, record_transition};
use super::same_model::AfterFailure;
use super::{LinkRef, Mode, Reply, TurnHost};
use crate::provider::{ModelRequest, ModelResponse, StreamEvent};
use crate::run::concurrency::{BUDGET_AFTER_WAIT, Gate, ShedReason, Slot};
use crate::run::emitter::Correlation;
use crate::run::report::End;
use crate::run::{Engine, MIN_OUTPUT_TOKENS, millis, provider_target};

/// One link's call, as each of its steps sees it.
pub(super) struct LinkCall<'a> {
    pub(super) host: &'a dyn TurnHost,
    pub(super) c: &'a Correlation,
    pub(super) link: LinkRef<'a>,
    request: &'a ModelRequest,
    /// An upper bound of the request's prompt tokens.
    prompt: u64,
    mode: Mode,
    pub(super) provider: String,
    /// Whether a next link is ready: a transient failure then moves on.
    ready: bool,
    /// This link's share of the caller's deadline ([`link_deadline`]).
    pub(super) deadline: Deadline,
    /// The name of the model's cooldown gate and of its shared pause
    /// ([`cooldown_key`]).
    cooldown: String,
    pub(super) policy: RetryPolicy,
    latency: LatencyProfile,
}

impl LinkCall<'_> {
    /// A refusal before the call (no slot, an open arm): the next link
    /// when one is ready, else the turn's end.
    fn stop_or_move(&self, failure: Failure) -> LinkEnd {
        if self.ready {
            LinkEnd::MoveOn(failure)
        } else {
            LinkEnd::Stop(End::ModelFailed(
                failure.category(),
                failure.human_message().to_owned(),
            ))
        }
    }
}

/// An attempt as sent: its number and when its request went out.
#[derive(Debug, Clone, Copy)]
struct Sent {
    number: u32,
    at: Instant,
}

/// How one attempt at a link ended, when it did not end the link.
enum Tried {
    /// It answered, with what the attempt reserved.
    Answered(Reply, Reservation),
    /// It failed; `at` is when its outcome was known (the retry decision's
    /// `now`).
    Failed { failure: Failure, at: Instant },
}

/// The name of a model's cooldown gate and shared pause: a 429's
/// `Retry-After` pauses that (provider, model), not the whole provider, so
/// another model of the same provider keeps answering (issue 35, item 4).
/// Provider names hold no `/` (`rein check`), so no two keys collide.
fn cooldown_key(provider: &str, model: &str) -> String {
    format!("{MODEL_GATE_PREFIX}{provider}/{model}")
}

/// What a model's cooldown gate is named by, before `provider/model`.
pub(crate) const MODEL_GATE_PREFIX: &str = "model:";

/// The deadline of a link with `next_links` still to try after it.
///
/// With links still to try, this one gets an even share of what is left
/// (its retries and its wait for a slot included): a provider that hangs
/// must leave time for the fallback, not eat the whole deadline. The last
/// link gets the caller's deadline.
fn link_deadline(budget: &Budget, now: Instant, next_links: usize) -> Deadline {
    if next_links == 0 {
        return budget.deadline();
    }
    let share =
        budget.deadline().remaining(now) / u32::try_from(next_links + 1).unwrap_or(u32::MAX);
    Deadline::after(now, share)
}

/// The end of a link whose retry was given up for `reason`: a wait that
/// does not fit is the wall clock's budget running out; anything else is
/// the model's failure.
fn give_up_end(reason: GiveUpReason, failure: &Failure) -> End {
    match reason {
        GiveUpReason::DeadlineTooClose { remaining, needed } => End::Budget(Exhausted {
            dimension: Dimension::WallClock,
            needed: millis(needed),
            remaining: millis(remaining),
        }),
        GiveUpReason::ServerWaitBeyondDeadline {
            retry_after,
            remaining,
        } => End::Budget(Exhausted {
            dimension: Dimension::WallClock,
            needed: millis(retry_after),
            remaining: millis(remaining),
        }),
        GiveUpReason::NotWorthItsCost { worth } => End::ModelFailed(
            failure.category(),
            format!(
                "{} ({})",
                failure.human_message(),
                crate::run::not_worth_it(&worth)
            ),
        ),
        _ => End::ModelFailed(failure.category(), failure.human_message().to_owned()),
    }
}

/// Sends one attempt: the whole answer, or a stream up to its first event
/// (each link under its own provider's stream limits).
async fn send(
    link: LinkRef<'_>,
    request: &ModelRequest,
    mode: Mode,
    allowance: Duration,
) -> Result<Reply, Failure> {
    match mode {
        Mode::Complete => link
            .provider
            .complete(request, allowance)
            .await
            .map(Reply::Complete),
        Mode::Embed => link
            .provider
            .embed(request, allowance)
            .await
            .map(Reply::Embedded),
        Mode::Stream(settings) => {
            // Each link under its own provider's limits.
            let settings = link.provider.stream_settings().unwrap_or(settings);
            let mut stream = link
                .provider
                .stream(request, settings.limits(allowance))
                .await?;
            // The provider's count of the prompt is no answer yet: the
            // attempt is judged by its first fragment, as before the count
            // was passed on, so a failure between them still moves on.
            let mut prompt = None;
            let first = loop {
                match stream.next().await {
                    Some(Ok(StreamEvent::PromptTokens(tokens))) => prompt = Some(tokens),
                    other => break other,
                }
            };
            match first {
                // A whole answer at once is checked whole (its usage holds
                // the prompt's count anyway).
                Some(Ok(first @ StreamEvent::Done(_))) => Ok(Reply::Stream {
                    first,
                    rest: stream,
                }),
                Some(Ok(first)) => Ok(match prompt {
                    Some(tokens) => Reply::Stream {
                        first: StreamEvent::PromptTokens(tokens),
                        rest: Box::pin(futures_util::stream::iter([Ok(first)]).chain(stream)),
                    },
                    None => Reply::Stream {
                        first,
                        rest: stream,
                    },
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
}

impl Engine {
    /// Asks one link `request` (whose prompt is at most `prompt` tokens),
    /// with retries under the host's policy. A transient failure moves on
    /// at once when a next link is `ready`; a context overflow always does.
    /// The answer comes with what its attempt reserved.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn call_link(
        &self,
        host: &dyn TurnHost,
        c: &Correlation,
        link: LinkRef<'_>,
        (request, prompt): (&ModelRequest, u64),
        budget: &mut Budget,
        next_links: usize,
        mode: Mode,
    ) -> Result<(Reply, Reservation), LinkEnd> {
        // The stored latency first: a new process plans its first call
        // with what every process observed.
        self.load_learned().await;
        let call = LinkCall {
            host,
            c,
            link,
            request,
            prompt,
            mode,
            provider: link.provider.name().to_owned(),
            cooldown: cooldown_key(link.provider.name(), link.model),
            ready: next_links > 0,
            deadline: link_deadline(budget, self.clock.now(), next_links),
            policy: *host.retry(),
            // The configured profile until this link's own calls were
            // observed `min_samples` times.
            latency: self
                .shared
                .latency
                .plan_model(link.provider.name(), link.model, host.model_latency())
                .profile,
        };
        // A link whose API cannot carry the request (audio to Anthropic) is
        // passed over before anything is reserved, counted or sent.
        let carried = match mode {
            Mode::Embed if !link.provider.embeds() => {
                Err(crate::provider::no_embeddings(link.provider.name()))
            }
            Mode::Embed => Ok(()),
            Mode::Complete | Mode::Stream(_) => link.provider.carries(request),
        };
        if let Err(failure) = carried {
            tracing::info!(
                provider = %call.provider,
                model = link.model,
                reason = failure.human_message(),
                "a link cannot carry the request"
            );
            return Err(if call.ready {
                LinkEnd::PassOver(failure)
            } else {
                call.stop_or_move(failure)
            });
        }
        // Every provider has a gate: its ceiling and token bucket when it
        // has them, and always its pause after a 429 (shared by every run).
        let gate = Some(self.shared.provider_slots.provider_gate(
            &call.provider,
            host.provider_limits().get(&call.provider).copied(),
            host.provider_tokens().get(&call.provider).copied(),
        ));
        let mut attempt = 0u32;
        // Same-model retries made before falling back (issue 35, item 3).
        let mut same_model = 0u32;
        let format = super::answer_format::expected(request);
        self.deposit_request(&provider_target(&call.provider), &call.policy);
        loop {
            attempt += 1;
            let target = provider_target(&call.provider);
            let (failure, at) = match self.try_link(&call, budget, gate.as_ref(), attempt).await? {
                Tried::Answered(reply, reserved) => {
                    self.record_retry(&target, attempt, true);
                    let link = (call.provider.as_str(), call.link.model);
                    return match super::answer_format::check(format.as_ref(), link, reply) {
                        Ok(reply) => Ok((reply, reserved)),
                        Err(misformatted) => {
                            Err(self.misformatted(&call, budget, reserved, *misformatted))
                        }
                    };
                }
                Tried::Failed { failure, at } => {
                    self.record_retry(&target, attempt, false);
                    (failure, at)
                }
            };
            if failure.category() == Category::ContextOverflow {
                return Err(LinkEnd::MoveOn(failure));
            }
            if call.ready && failure.category().falls_back() {
                // The model asked for first, when it is worth a short wait
                // (a short Retry-After, a one-off 5xx); else the next link.
                match self
                    .retry_same_model(&call, (attempt, same_model), failure, at)
                    .await?
                {
                    AfterFailure::Retry => {
                        same_model += 1;
                        continue;
                    }
                    AfterFailure::MoveOn(failure) => return Err(LinkEnd::MoveOn(failure)),
                }
            }
            // A generation that timed out after it was sent is not sent
            // again unless the host allows it (issue 35, item 2).
            // (A timeout is always after sending: a connection that cannot
            // be made is refused, not timed out.)
            if failure.category() == Category::Timeout && !host.resends_timeouts() {
                return Err(LinkEnd::Stop(End::ModelFailed(
                    failure.category(),
                    format!(
                        "{} (not sent again: the provider may still be generating and billing \
                         it; the binding's retry_timeouts = true allows it)",
                        failure.human_message()
                    ),
                )));
            }
            self.retry_link(&call, attempt, failure, at).await?;
        }
    }

    /// The end of a link whose answer is not in the format the caller
    /// asked for ([`answer_format`](super::answer_format)): what it
    /// consumed is settled, and the turn moves on to the next link when
    /// one is ready, else ends with the failure.
    fn misformatted(
        &self,
        call: &LinkCall<'_>,
        budget: &mut Budget,
        reserved: Reservation,
        super::answer_format::Misformatted { failure, usage }: super::answer_format::Misformatted,
    ) -> LinkEnd {
        tracing::warn!(
            provider = %call.provider,
            model = call.link.model,
            reason = failure.human_message(),
            "a model's answer is not in the response_format asked for; not passed on"
        );
        let cost = call
            .link
            .price
            .map(|p| p.cost(usage.input, usage.output))
            .unwrap_or_default();
        let used = Usage {
            steps: 0,
            tokens: usage.total(),
            cost,
        };
        if let Err(exhausted) = budget.settle(reserved.grant, used, self.clock.now()) {
            return LinkEnd::Stop(End::Budget(exhausted));
        }
        if call.ready {
            LinkEnd::MoveOn(failure)
        } else {
            LinkEnd::Stop(End::ModelFailed(
                failure.category(),
                failure.human_message().to_owned(),
            ))
        }
    }

    /// One attempt at a link: the budget, the slot and the breaker, the call
    /// raced against the caller's cancellation, and its outcome reported.
    async fn try_link(
        &self,
        call: &LinkCall<'_>,
        budget: &mut Budget,
        gate: Option<&Gate<'_>>,
        attempt: u32,
    ) -> Result<Tried, LinkEnd> {
        let (emitter, c, provider) = (call.host.emitter(), call.c, &call.provider);
        let now = self.clock.now();
        if let Err(exhausted) = budget.check(&Need::time(call.latency.p50()), now) {
            emitter.emit(c, BudgetExhausted::new(BudgetScope::ModelCall, exhausted));
            return Err(LinkEnd::Stop(End::Budget(exhausted)));
        }
        let held = self.hold_link(call, budget, gate).await?;
        let now = self.clock.now();
        // Reserved before the call, at this link's price and cap; a call
        // that cannot fit is not sent (the permit and slot go back unused).
        let (request, reservation) = match self.reserve_attempt(
            (call.host, call.c),
            call.link,
            (call.request, call.prompt),
            budget,
            now,
        ) {
            Ok(reserved) => reserved,
            Err(end) => {
                drop(held);
                return Err(end);
            }
        };
        let allowance = call.deadline.remaining(now);
        emitter.emit(
            c,
            ModelCallStarted {
                provider: provider.to_owned(),
                model: call.link.model.to_owned(),
                attempt,
                allowance,
                messages: call.request.messages.len(),
                stream: matches!(call.mode, Mode::Stream(_)),
                max_tokens: reservation.max_tokens,
                max_tokens_limited_by: reservation.limited_by,
            },
        );
        call.host.calling();
        let sent = Sent {
            number: attempt,
            at: self.clock.now(),
        };
        // The call's span is open now (`model_call_started`): the provider
        // gets it as `traceparent`.
        let span = emitter
            .trace()
            .and_then(|t| t.model_context())
            .unwrap_or_default();
        let sending = send(call.link, &request, call.mode, allowance).with_context(span);
        let result = tokio::select! {
            r = self.clock.timeout(allowance, sending) => match r {
                Ok(r) => r,
                Err(_) => Err(
                    Failure::new(provider, Category::Timeout).with_human_message(format!(
                        "{provider} did not answer within {allowance:?}"
                    )),
                ),
            },
            () = call.host.cancelled() => {
                // The caller's cancellation is not the provider's fault:
                // the guard gives the permit back unused.
                drop(held);
                let _ = budget.settle(reservation.grant, Usage::default(), self.clock.now());
                if !call.host.interrupted() {
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
        match result {
            Ok(reply) => Ok(Tried::Answered(
                self.link_answered(call, held, sent, reply).await,
                reservation,
            )),
            Err(failure) => {
                if let (Category::RateLimited, Some(wait)) =
                    (failure.category(), failure.retry_after())
                {
                    call.host.rate_limited_until(now + wait);
                }
                self.pause_provider(call, &failure).await;
                self.link_failed(call, held, sent, &failure, (budget, reservation.grant), now)
                    .await?;
                Ok(Tried::Failed { failure, at: now })
            }
        }
    }

    /// The provider's concurrency slot first (a wait in line, within the
    /// deadline and the caller's cancellation), then its breaker: another
    /// node's opening (when breakers are shared) before the local arm.
    ///
    /// From here the breaker permit and the provider slot are held by a
    /// guard: given back unused if the call is dropped (a caller that went
    /// away is not the provider's failure), and held by a streamed answer
    /// until its stream ends.
    async fn hold_link(
        &self,
        call: &LinkCall<'_>,
        budget: &Budget,
        gate: Option<&Gate<'_>>,
    ) -> Result<Held, LinkEnd> {
        let (emitter, c, provider) = (call.host.emitter(), call.c, &call.provider);
        // The model's cooldown after a 429 first (another process's
        // included): waited out while it fits, else the next link.
        let cooldown = self
            .shared
            .provider_slots
            .provider_gate(&call.cooldown, None, None);
        self.honour_shared_pause(&call.cooldown, &cooldown).await;
        drop(
            self.link_slot(call, budget, &cooldown, (0, self.cooldown_deadline(call)))
                .await?,
        );
        let slot = match gate {
            None => None,
            Some(gate) => {
                let charge = (self.token_charge(call, budget), call.deadline);
                Some(self.link_slot(call, budget, gate, charge).await?)
            }
        };
        // Another node's opening of this provider, when breakers are
        // shared: refused like an open local arm, before the local arm.
        if let Some(refused) = self.admit_shared(emitter, c, provider).await {
            return Err(call.stop_or_move(refused));
        }
        let permit = self
            .admit(emitter, c, ArmKind::Provider, provider)
            .map_err(|f| call.stop_or_move(f))?;
        // The cost account's arm: every link spends from the same account,
        // so an open one ends the turn instead of moving on.
        let cost = match call.host.cost_account() {
            None => None,
            Some(account) => Some(self.admit(emitter, c, ArmKind::Cost, &account).map_err(
                |f| {
                    LinkEnd::Stop(End::ModelFailed(
                        f.category(),
                        format!(
                            "the cost arm of {account} is open: its model calls kept spending \
                                 tokens without an answer; no model call is made until it admits \
                                 one again ({})",
                            f.human_message()
                        ),
                    ))
                },
            )?),
        };
        Ok(Held {
            clock: self.clock.clone(),
            provider: provider.clone(),
            permit,
            slot,
            shared: self.shared_breakers().cloned(),
            cost,
            deadline: call.deadline,
        })
    }

    /// The tokens an attempt charges to its provider's token bucket before
    /// it is sent: the prompt's upper bound and the most output the
    /// ceiling would reserve under what the budget leaves now (the
    /// reservation made after the wait can only be smaller, the budget
    /// only shrinks); settled with the usage the provider counts.
    fn token_charge(&self, call: &LinkCall<'_>, budget: &Budget) -> u64 {
        // Sabotage hook `uncharged_model_tokens`: nothing is charged.
        #[cfg(feature = "sabotage")]
        if self.sabotage.uncharged_model_tokens {
            return 0;
        }
        let output = super::ceiling::ceiling(
            budget,
            self.clock.now(),
            call.prompt,
            call.link.max_output,
            call.link.price,
            call.request.max_tokens,
        )
        .ok()
        .and_then(|c| c.max_tokens)
        .unwrap_or(MIN_OUTPUT_TOKENS);
        call.prompt.saturating_add(output)
    }

    /// Waits in line for the provider's gate — a slot of its
    /// `max_concurrency`, its `tokens_per_minute` bucket charged with the
    /// attempt's [token charge](Engine::token_charge), and the end of a
    /// pause after its 429 — within the link's deadline and the caller's
    /// cancellation. After a wait the budget is checked again: a call that
    /// no longer fits is shed (`call_shed`, reason `budget_after_wait`)
    /// before it goes out.
    async fn link_slot(
        &self,
        call: &LinkCall<'_>,
        budget: &Budget,
        gate: &Gate<'_>,
        (tokens, deadline): (u64, Deadline),
    ) -> Result<Slot, LinkEnd> {
        let (emitter, c, provider) = (call.host.emitter(), call.c, &call.provider);
        let entered = tokio::select! {
            r = gate.enter(deadline, call.latency.p50(), tokens) => r,
            () = call.host.cancelled() => {
                return Err(LinkEnd::Stop(End::Cancelled(
                    "cancelled by the caller while a model call waited for a slot".into(),
                )));
            }
        };
        let model = format!("{provider}/{}", call.link.model);
        let slot = match entered {
            Ok(slot) => slot,
            Err(shed) => {
                emitter.emit(
                    c,
                    CallShed {
                        tool: String::new(),
                        model: Some(model),
                        resource_group: provider.to_owned(),
                        reason: shed.reason.as_str().to_owned(),
                        waited: shed.waited,
                    },
                );
                // A rate limit that admits it only later (the provider's
                // pause after its 429, or its token or request bucket) is
                // that, with the instant it lifts: the caller learns when
                // to come back, not that time ran out.
                let limited_until = match shed.reason {
                    ShedReason::NoTime {
                        not_before,
                        cause: Cause::RateLimited { .. },
                        ..
                    } => Some(not_before),
                    ShedReason::WaitExpired {
                        cause: Cause::RateLimited { until, .. },
                    } => Some(until),
                    _ => None,
                };
                let why = match shed.reason {
                    ShedReason::Rejected(rejection) => rejection.to_string(),
                    _ => format!(
                        "its limits (max_concurrency, tokens_per_minute, or a pause after its 429) \
                         admitted the call too late to finish within the call's deadline (waited {:?})",
                        shed.waited
                    ),
                };
                let failure = match limited_until {
                    Some(until) => {
                        call.host.rate_limited_until(until);
                        Failure::new(provider, Category::RateLimited)
                            .with_retry_after(until.saturating_duration_since(self.clock.now()))
                    }
                    None => Failure::new(provider, Category::Timeout),
                };
                return Err(call.stop_or_move(
                    failure.with_human_message(format!("{provider} was not asked: {why}")),
                ));
            }
        };
        if slot.waited.is_zero() {
            return Ok(slot);
        }
        match slot.cause {
            Some(Cause::RateLimited { bucket, .. }) => emitter.emit(
                c,
                RateLimited {
                    tool: String::new(),
                    model: Some(model.clone()),
                    resource_group: provider.to_owned(),
                    bucket: bucket.as_str().to_owned(),
                    waited: slot.waited,
                },
            ),
            _ => emitter.emit(
                c,
                ModelQueueWaited {
                    provider: provider.to_owned(),
                    max_concurrency: gate.ceiling(),
                    queue_wait: slot.waited,
                    expired: false,
                },
            ),
        }
        // The wait spent time: what is left must still cover the call.
        if let Err(exhausted) = budget.check(&Need::time(call.latency.p50()), self.clock.now()) {
            emitter.emit(c, BudgetExhausted::new(BudgetScope::ModelCall, exhausted));
            emitter.emit(
                c,
                CallShed {
                    tool: String::new(),
                    model: Some(model),
                    resource_group: provider.to_owned(),
                    reason: BUDGET_AFTER_WAIT.to_owned(),
                    waited: slot.waited,
                },
            );
            return Err(LinkEnd::Stop(End::Budget(exhausted)));
        }
        Ok(slot)
    }

    /// How long a call waits out its model's cooldown: with a next link
    /// ready, at most the host's `retry_after_max` (a longer cooldown moves
    /// the turn on at once); the last link, within its deadline.
    fn cooldown_deadline(&self, call: &LinkCall<'_>) -> Deadline {
        if !call.ready {
            return call.deadline;
        }
        let wait = call.host.same_model().retry_after_max + call.latency.p50();
        call.deadline.min(Deadline::after(self.clock.now(), wait))
    }

    /// A provider's 429 that says when to come back (`Retry-After`) pauses
    /// that model's cooldown gate until then, for every run and gateway
    /// request of the engine: they wait (or move on) instead of each sending
    /// into the model's empty bucket, while the provider's other models are
    /// untouched. With breakers shared, the pause is published to every
    /// process on the store before this call goes on (its retry included).
    async fn pause_provider(&self, call: &LinkCall<'_>, failure: &Failure) {
        // Sabotage hook `ignore_provider_retry_after`: no pause.
        #[cfg(feature = "sabotage")]
        if self.sabotage.ignore_provider_retry_after {
            return;
        }
        let (Category::RateLimited, Some(wait)) = (failure.category(), failure.retry_after())
        else {
            return;
        };
        let gate = self
            .shared
            .provider_slots
            .provider_gate(&call.cooldown, None, None);
        let until = self.clock.now() + wait;
        if gate.pause_until(until) {
            tracing::info!(
                provider = %call.provider,
                retry_after_ms = millis(wait),
                model = call.link.model,
                "provider answered 429: every call to this model waits until its Retry-After"
            );
            if let Some(shared) = self.shared_breakers() {
                shared.publish_pause(&call.cooldown, wait).await;
            }
        }
    }

    /// An answer. A stream is judged by how it ends, not by its first
    /// event: the guard goes with it and reports its outcome then. A whole
    /// answer reports success to the arm now, and is recorded.
    async fn link_answered(
        &self,
        call: &LinkCall<'_>,
        held: Held,
        sent: Sent,
        reply: Reply,
    ) -> Reply {
        let (emitter, c, provider, model) =
            (call.host.emitter(), call.c, &call.provider, call.link.model);
        let attempt = sent.number;
        let response = match reply {
            Reply::Stream { first, rest } => {
                let end = StreamEnd {
                    announcer: emitter.announcer(),
                    c: c.clone(),
                    provider: provider.clone(),
                    model: model.to_owned(),
                    attempt,
                    price: call.link.price,
                    key_env: call.link.provider.key_env().map(str::to_owned),
                    clock: held.clock.clone(),
                    sent: sent.at,
                    first_event: self.clock.now().saturating_duration_since(sent.at),
                    latency: self.shared.latency.clone(),
                };
                return Reply::Stream {
                    first,
                    rest: Box::pin(GuardedStream {
                        inner: rest,
                        held: Some(held),
                        end: Some(end),
                    }),
                };
            }
            Reply::Complete(response) => response,
            // Recorded as a turn that wrote nothing: its tokens are the
            // inputs'.
            Reply::Embedded(embeddings) => {
                let usage = embeddings.usage;
                self.record_answer(
                    call,
                    held,
                    sent,
                    &ModelResponse {
                        text: None,
                        tool_calls: Vec::new(),
                        finish: rein_core::model::FinishReason::Stop,
                        stop_sequence: None,
                        usage,
                    },
                )
                .await;
                return Reply::Embedded(embeddings);
            }
        };
        self.record_answer(call, held, sent, &response).await;
        Reply::Complete(response)
    }

    /// Reports a whole answer to the arm, settles its tokens, and records
    /// it (its cost, its latency, what it teaches the prompt bound).
    async fn record_answer(
        &self,
        call: &LinkCall<'_>,
        mut held: Held,
        sent: Sent,
        response: &ModelResponse,
    ) {
        let (emitter, c, provider, model) =
            (call.host.emitter(), call.c, &call.provider, call.link.model);
        let attempt = sent.number;
        let elapsed = self.clock.now().saturating_duration_since(sent.at);
        held.settle_tokens(Some(response.usage.total()));
        let (transition, cost) = held.finish(Ok(()));
        record_transition(emitter, c, provider, &transition);
        record_cost(emitter, c, cost.as_ref());
        if let Some(shared) = self.shared_breakers() {
            shared.share(provider, &transition).await;
        }
        // What the provider counted teaches the prompt bound of the
        // model's next call (before `answered` replaces the last count).
        self.shared.token_ratios.learn(
            (provider, model),
            &call.request.messages,
            &call.request.tools,
            (response.usage.input, call.host.last_input_tokens()),
        );
        call.host.answered(provider, model, &response.usage);
        if let Some(degraded) =
            self.shared
                .latency
                .record_model(provider, model, elapsed, response.usage.output)
        {
            emitter.emit(c, degraded);
        }
        let cost = call
            .link
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
                elapsed: Some(elapsed),
                first_event: None,
                result: ModelCallResult::Answered(ModelAnswered {
                    ok: Flag,
                    usage: response.usage,
                    finish: response.finish,
                    tool_calls: response.tool_calls.iter().map(|t| t.name.clone()).collect(),
                }),
            },
        );
    }

    /// A failure: reported to the arm and recorded. A call that failed
    /// midway (a stream cut after the prompt was read) still consumed
    /// tokens: they are charged, so a run of failing streams cannot burn
    /// tokens outside its budget; `Stop` when that exhausts it.
    async fn link_failed(
        &self,
        call: &LinkCall<'_>,
        mut held: Held,
        sent: Sent,
        failure: &Failure,
        (budget, grant): (&mut Budget, Grant),
        now: Instant,
    ) -> Result<(), LinkEnd> {
        let (emitter, c, provider, model) =
            (call.host.emitter(), call.c, &call.provider, call.link.model);
        let attempt = sent.number;
        // What the provider counted: the tokens it says a failure spent, none
        // for a call it refused unread; unknown otherwise (the estimate
        // stays charged).
        let used = (failure.tokens_spent() > 0
            || failure.effect() == rein_core::Effect::NotApplied)
            .then(|| failure.tokens_spent());
        held.settle_tokens(used);
        let (transition, cost) = held.finish(Err(failure));
        record_transition(emitter, c, provider, &transition);
        record_cost(emitter, c, cost.as_ref());
        drop(held);
        if let Some(shared) = self.shared_breakers() {
            shared.share(provider, &transition).await;
        }
        call.host.failed(
            failure.category(),
            rein_core::advice::FailureHint {
                key_env: call.link.provider.key_env().map(str::to_owned),
                retry_after_ms: failure.retry_after().map(millis),
            },
        );
        let spent = failure.tokens_spent();
        let spent_cost = call
            .link
            .price
            .map(|p| p.cost(spent, 0))
            .unwrap_or_default();
        emitter.emit(
            c,
            ModelCallFinished {
                provider: provider.to_owned(),
                model: model.to_owned(),
                attempt,
                cost: Some(spent_cost),
                elapsed: Some(now.saturating_duration_since(sent.at)),
                first_event: None,
                result: ModelCallResult::Failed(ModelCallFailed {
                    ok: Flag,
                    category: failure.category(),
                    reason: failure.human_message().to_owned(),
                    tokens_spent: spent,
                    key_env: call.link.provider.key_env().map(str::to_owned),
                }),
            },
        );
        let usage = Usage {
            steps: 0,
            tokens: spent,
            cost: spent_cost,
        };
        let settled = budget.settle(grant, usage, now);
        if spent > 0 {
            call.host.spent(spent);
            if let Err(exhausted) = settled {
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
        Ok(())
    }

    /// Decides the retry of a failed attempt under the host's policy (and
    /// its own ceiling on model retries): `Ok` once the delay has passed,
    /// to try again; else the link's end.
    async fn retry_link(
        &self,
        call: &LinkCall<'_>,
        attempt: u32,
        failure: Failure,
        now: Instant,
    ) -> Result<(), LinkEnd> {
        let (emitter, c, provider) = (call.host.emitter(), call.c, &call.provider);
        let input = RetryInput {
            class: ToolClass::Read,
            failure: &failure,
            attempt,
            deadline: call.deadline,
            latency: call.latency,
            now,
            // The retry spends the prompt and the most output the model
            // gives (a minimal answer's worth when it has no cap), at its
            // price: what it would reserve at most.
            worth: self.worth_input(
                &provider_target(provider),
                call.host.value_of_success(),
                attempt,
                call.link.price.map_or(Cost::ZERO, |p| {
                    p.cost(
                        call.prompt,
                        call.link.max_output.map_or(MIN_OUTPUT_TOKENS, u64::from),
                    )
                }),
            ),
        };
        let decision = self.decide(&provider_target(provider), &call.policy, &input);
        match decision {
            RetryDecision::Retry { delay, .. } => {
                if let Err(why) = call.host.allow_model_retry(delay) {
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
                    call.deadline.remaining(now),
                ) {
                    emitter.emit(c, scheduled);
                }
                tokio::select! {
                    () = self.clock.sleep(delay) => Ok(()),
                    () = call.host.cancelled() => Err(LinkEnd::Stop(End::Cancelled(
                        "cancelled by the caller while a model call waited to retry".into(),
                    ))),
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
                Err(LinkEnd::Stop(give_up_end(reason, &failure)))
            }
            RetryDecision::LookupByKey => Err(LinkEnd::Stop(End::ModelFailed(
                failure.category(),
                failure.human_message().to_owned(),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use rein_core::deadline::BudgetLimits;

    use super::*;

    fn budget(wall_clock: Duration, now: Instant) -> Budget {
        Budget::start(BudgetLimits::new(wall_clock).unwrap(), now)
    }

    #[test]
    fn a_link_with_links_after_it_gets_an_even_share_of_what_is_left() {
        let start = Instant::from_origin(Duration::from_secs(100));
        let budget = budget(Duration::from_secs(30), start);
        let now = start + Duration::from_secs(6);
        // 24 s left, two links after this one: a third each.
        let share = link_deadline(&budget, now, 2);
        assert_eq!(share.remaining(now), Duration::from_secs(8));
        assert!(
            share <= budget.deadline(),
            "a share never outlives the caller"
        );
        // The last link gets the caller's deadline itself.
        assert_eq!(link_deadline(&budget, now, 0), budget.deadline());
    }

    #[test]
    fn giving_up_for_time_is_the_wall_clock_running_out_and_else_the_models_failure() {
        let failure = Failure::new("p", Category::Transient).with_human_message("busy");
        let too_close = GiveUpReason::DeadlineTooClose {
            remaining: Duration::from_millis(40),
            needed: Duration::from_millis(250),
        };
        let End::Budget(exhausted) = give_up_end(too_close, &failure) else {
            panic!("a deadline too close is the budget's end");
        };
        assert_eq!(
            (exhausted.dimension, exhausted.needed, exhausted.remaining),
            (Dimension::WallClock, 250, 40)
        );
        let server = GiveUpReason::ServerWaitBeyondDeadline {
            retry_after: Duration::from_secs(9),
            remaining: Duration::from_secs(2),
        };
        let End::Budget(exhausted) = give_up_end(server, &failure) else {
            panic!("a server wait beyond the deadline is the budget's end");
        };
        assert_eq!((exhausted.needed, exhausted.remaining), (9_000, 2_000));
        let attempts = GiveUpReason::AttemptsExhausted {
            attempts: 3,
            max_attempts: 3,
        };
        assert!(matches!(
            give_up_end(attempts, &failure),
            End::ModelFailed(Category::Transient, ref m) if m == "busy"
        ));
    }
}

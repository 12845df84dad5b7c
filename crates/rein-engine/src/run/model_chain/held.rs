//! What a provider call holds while it runs: its breaker permit and its
//! concurrency slot, given back when dropped, and carried by a streamed
//! answer until its stream ends.

use std::pin::Pin;
use std::sync::Arc;

use std::time::Duration;

use rein_core::breaker::ArmKind;
use rein_core::event::{
    BreakerStateChanged, Flag, ModelAnswered, ModelCallFailed, ModelCallFinished, ModelCallResult,
};
use rein_core::registry::Price;
use rein_core::{Category, Failure};

use crate::provider::{ModelResponse, StreamEvent, TurnStream};
use crate::run::emitter::{Announcer, Correlation, Emitter};
use crate::run::permit::HeldPermit;

/// A provider call's breaker permit and concurrency slot, both given back
/// when it is dropped (the permit unused unless [`Held::finish`] reported
/// its outcome).
pub(super) struct Held {
    pub(super) clock: Arc<dyn rein_core::Clock>,
    pub(super) provider: String,
    pub(super) permit: HeldPermit,
    /// The provider's slot: its release settles the token charge.
    pub(super) slot: Option<crate::run::concurrency::Slot>,
    /// Where a transition of the arm is published, when breakers are
    /// shared across nodes.
    pub(super) shared: Option<Arc<crate::run::shared_breakers::SharedBreakers>>,
    /// The permit of the host's cost account (`[breakers.cost]`), when it
    /// has one.
    pub(super) cost: Option<HeldPermit>,
    /// The call's own deadline: a timeout once it has run out is rein
    /// cutting the call, not the provider failing, and never counts
    /// against the provider's arm (issue 35, item 2).
    pub(super) deadline: rein_core::deadline::Deadline,
}

impl Held {
    /// Gives the provider's slot back, settling its token charge with the
    /// `used` tokens the provider counted (`None`: unknown, the estimate
    /// stays charged).
    pub(super) fn settle_tokens(&mut self, used: Option<u64>) {
        let Some(slot) = self.slot.take() else { return };
        let charged = slot.charged();
        if let Some(settled) = slot.settle(used) {
            tracing::debug!(
                provider = %self.provider,
                charged,
                used = ?used,
                ?settled,
                "provider token bucket settled with the usage counted"
            );
        }
    }

    /// Reports the call's outcome to the provider's arm, and to the cost
    /// arm: an answer is a success, a failure that consumed tokens is
    /// spending that bought nothing (a counted failure), and a failure
    /// that cost nothing says nothing about spending (the permit goes back
    /// unused). Returns the provider arm's transition and the cost arm's.
    pub(super) fn finish(
        &mut self,
        outcome: Result<(), &Failure>,
    ) -> (
        rein_core::breaker::Transition,
        Option<(String, rein_core::breaker::Transition)>,
    ) {
        let now = self.clock.now();
        // A 429 is a cooldown of the model (its gate paused), not a
        // failure of the provider: it never counts toward the provider's
        // arm (issue 35, item 4); nor does a timeout that rein's own
        // deadline caused (item 2).
        let own_cut = |f: &Failure| {
            f.category() == rein_core::Category::Timeout && self.deadline.remaining(now).is_zero()
        };
        let provider = match outcome {
            Err(f) if f.category() == rein_core::Category::RateLimited || own_cut(f) => {
                self.permit.ignore();
                rein_core::breaker::Transition::Unchanged
            }
            _ => self.permit.finish(outcome, now),
        };
        let cost = match (self.cost.take(), outcome) {
            (Some(mut permit), Ok(())) => {
                Some((permit.name().to_owned(), permit.finish(Ok(()), now)))
            }
            (Some(mut permit), Err(f)) if f.tokens_spent() > 0 => {
                Some((permit.name().to_owned(), permit.finish(Err(f), now)))
            }
            // Dropped: given back unused.
            _ => None,
        };
        (provider, cost)
    }
}

/// A streamed answer that holds its provider's slot and breaker permit
/// until it ends: its terminal event is the outcome the breaker counts; a
/// stream dropped before it gives the permit back unused.
pub(super) struct GuardedStream {
    pub(super) inner: TurnStream,
    pub(super) held: Option<Held>,
    /// What the attempt's `model_call_finished` needs, until it is
    /// announced at the stream's end.
    pub(super) end: Option<StreamEnd>,
}

/// A streamed attempt whose `model_call_finished` waits for the stream's
/// end: the gateway reads the stream after the call that opened it
/// returned, so the event is announced (log, observer, metrics) then, and
/// a stream's mid-way failure is counted like any failed attempt.
pub(super) struct StreamEnd {
    pub(super) announcer: Announcer,
    pub(super) c: Correlation,
    pub(super) provider: String,
    pub(super) model: String,
    pub(super) attempt: u32,
    pub(super) price: Option<Price>,
    pub(super) key_env: Option<String>,
    pub(super) clock: Arc<dyn rein_core::Clock>,
    /// When the request went out.
    pub(super) sent: rein_core::Instant,
    /// How long the first event took.
    pub(super) first_event: Duration,
    /// Where an answered stream's latency is recorded.
    pub(super) latency: Arc<crate::run::latency::LatencyBook>,
}

impl StreamEnd {
    /// Announces the attempt's end: the whole turn, or the failure that
    /// cut it.
    fn announce(self, outcome: Result<&ModelResponse, &Failure>) {
        let elapsed = self.clock.now().saturating_duration_since(self.sent);
        if let Ok(response) = outcome
            && let Some(degraded) = self.latency.record_stream(
                &self.provider,
                &self.model,
                (self.first_event, elapsed),
                response.usage.output,
            )
        {
            self.announcer.announce(&self.c, degraded);
        }
        let (cost, result) = match outcome {
            Ok(response) => (
                self.price
                    .map(|p| p.cost(response.usage.input, response.usage.output)),
                ModelCallResult::Answered(ModelAnswered {
                    ok: Flag,
                    usage: response.usage,
                    finish: response.finish,
                    tool_calls: response.tool_calls.iter().map(|t| t.name.clone()).collect(),
                }),
            ),
            Err(failure) => {
                let spent = failure.tokens_spent();
                (
                    self.price.map(|p| p.cost(spent, 0)),
                    ModelCallResult::Failed(ModelCallFailed {
                        ok: Flag,
                        category: failure.category(),
                        reason: failure.human_message().to_owned(),
                        tokens_spent: spent,
                        key_env: self.key_env.clone(),
                    }),
                )
            }
        };
        self.announcer.announce(
            &self.c,
            ModelCallFinished {
                provider: self.provider,
                model: self.model,
                attempt: self.attempt,
                cost: Some(cost.unwrap_or_default()),
                elapsed: Some(elapsed),
                first_event: Some(self.first_event),
                result,
            },
        );
    }
}

impl Drop for GuardedStream {
    /// A stream dropped before its last event (the caller went away) ended
    /// the attempt too: its event says `cancelled` (the breaker does not
    /// count it: it is not the provider's failure).
    fn drop(&mut self) {
        if let Some(end) = self.end.take() {
            let provider = end.provider.clone();
            end.announce(Err(&Failure::new(&provider, Category::Cancelled)
                .with_human_message(
                    "the caller stopped reading the stream before its end",
                )));
        }
    }
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
            Some(Ok(
                StreamEvent::PromptTokens(_) | StreamEvent::Delta(_) | StreamEvent::Recovered(_),
            )) => None,
            // Ended without a terminal item: neither success nor failure
            // for the breaker; a failure for the attempt's event.
            None => {
                self.held = None;
                if let Some(end) = self.end.take() {
                    let provider = end.provider.clone();
                    end.announce(Err(&Failure::new(&provider, Category::Transient)
                        .with_human_message("the stream ended without its last event")));
                }
                None
            }
        };
        match &item {
            Some(Ok(StreamEvent::Done(response))) => {
                let used = response.usage.total();
                if let Some(held) = self.held.as_mut() {
                    held.settle_tokens(Some(used));
                }
                if let Some(end) = self.end.take() {
                    end.announce(Ok(response));
                }
            }
            Some(Err(failure)) => {
                if let Some(end) = self.end.take() {
                    end.announce(Err(failure));
                }
            }
            _ => {}
        }
        if let Some(outcome) = outcome
            && let Some(mut held) = self.held.take()
        {
            let (transition, cost) = held.finish(outcome);
            if let Some((account, cost)) = cost.filter(|(_, t)| t.is_change()) {
                tracing::info!(account = %account, transition = ?cost, "cost breaker changed at the end of a stream");
            }
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
pub(super) fn record_transition(
    emitter: &Emitter,
    c: &Correlation,
    provider: &str,
    transition: &rein_core::breaker::Transition,
) {
    record_arm(emitter, c, ArmKind::Provider, provider, transition);
}

/// Records a transition of the cost account's arm, if there was one.
pub(super) fn record_cost(
    emitter: &Emitter,
    c: &Correlation,
    cost: Option<&(String, rein_core::breaker::Transition)>,
) {
    if let Some((account, transition)) = cost {
        record_arm(emitter, c, ArmKind::Cost, account, transition);
    }
}

fn record_arm(
    emitter: &Emitter,
    c: &Correlation,
    arm: ArmKind,
    name: &str,
    transition: &rein_core::breaker::Transition,
) {
    if transition.is_change() {
        emitter.emit(
            c,
            BreakerStateChanged {
                arm,
                name: name.to_owned(),
                transition: transition.clone(),
            },
        );
    }
}

//! What a provider call holds while it runs: its breaker permit and its
//! concurrency slot, given back when dropped, and carried by a streamed
//! answer until its stream ends.

use std::pin::Pin;
use std::sync::Arc;

use rein_core::Failure;
use rein_core::breaker::ArmKind;
use rein_core::event::BreakerStateChanged;

use crate::provider::{StreamEvent, TurnStream};
use crate::run::emitter::{Correlation, Emitter};
use crate::run::permit::HeldPermit;

/// A provider call's breaker permit and concurrency slot, both given back
/// when it is dropped (the permit unused unless [`Held::finish`] reported
/// its outcome).
pub(super) struct Held {
    pub(super) clock: Arc<dyn rein_core::Clock>,
    pub(super) provider: String,
    pub(super) permit: HeldPermit,
    pub(super) _slot: Option<crate::run::concurrency::Slot>,
    /// Where a transition of the arm is published, when breakers are
    /// shared across nodes.
    pub(super) shared: Option<Arc<crate::run::shared_breakers::SharedBreakers>>,
}

impl Held {
    /// Reports the call's outcome to the provider's arm.
    pub(super) fn finish(
        &mut self,
        outcome: Result<(), &Failure>,
    ) -> rein_core::breaker::Transition {
        self.permit.finish(outcome, self.clock.now())
    }
}

/// A streamed answer that holds its provider's slot and breaker permit
/// until it ends: its terminal event is the outcome the breaker counts; a
/// stream dropped before it gives the permit back unused.
pub(super) struct GuardedStream {
    pub(super) inner: TurnStream,
    pub(super) held: Option<Held>,
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
pub(super) fn record_transition(
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

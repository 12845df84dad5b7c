//! A link's retry of its own model before its chain falls back (issue 35,
//! item 3): the decision is [`SameModelRetry::decide`] in rein-core; this
//! is where it is budgeted, recorded and waited out.
//!
//! # Why budgeted
//!
//! A same-model retry is a retry like any other: under a burst of 5xx every
//! call of every caller would double the provider's load. It withdraws from
//! the provider's retry budget (a share of its requests), and an empty
//! budget moves the chain on as before.

use std::time::Duration;

use rein_core::Failure;
use rein_core::event::{RetryScheduled, RetryTarget};
use rein_core::retry::{SameModel, SameModelReason};

use super::chain::LinkEnd;
use super::link::LinkCall;
use crate::run::report::End;
use crate::run::{Engine, provider_target};

/// What a link does after a failure that would move its chain on.
pub(super) enum AfterFailure {
    /// Ask the same model again (the wait is over).
    Retry,
    /// Fall back with this failure.
    MoveOn(Failure),
}

impl Engine {
    /// Decides whether `failure` of attempt `attempt`, after `done`
    /// same-model retries of the link, is retried on the same model; when
    /// it is, records it (`retry_scheduled` with `before_fallback`, counted
    /// in `rein_retries`) and waits its delay out within the caller's
    /// cancellation.
    pub(super) async fn retry_same_model(
        &self,
        call: &LinkCall<'_>,
        (attempt, done): (u32, u32),
        failure: Failure,
        now: rein_core::Instant,
    ) -> Result<AfterFailure, LinkEnd> {
        let remaining = call.deadline.remaining(now);
        let SameModel::Retry { delay, reason } =
            call.host.same_model().decide(&failure, done, remaining)
        else {
            return Ok(AfterFailure::MoveOn(failure));
        };
        let target = provider_target(&call.provider);
        if !self.withdraw_retry(&target, &call.policy)
            || call.host.allow_model_retry(delay).is_err()
        {
            tracing::debug!(
                provider = %call.provider,
                "no retry budget left for a same-model retry: falling back"
            );
            return Ok(AfterFailure::MoveOn(failure));
        }
        tracing::info!(
            provider = %call.provider,
            model = call.link.model,
            reason = reason.as_str(),
            delay_ms = crate::run::millis(delay),
            "retrying the same model before falling back"
        );
        call.host.emitter().emit(
            call.c,
            RetryScheduled {
                target: RetryTarget::Provider(call.provider.clone()),
                next_attempt: attempt + 1,
                reason: failure.category(),
                delay,
                from_server: reason == SameModelReason::RetryAfter,
                backoff_ceiling: delay,
                clamped: false,
                remaining,
                same_key: None,
                worth: None,
                before_fallback: Some(reason),
            },
        );
        if delay == Duration::ZERO {
            return Ok(AfterFailure::Retry);
        }
        tokio::select! {
            () = self.clock.sleep(delay) => Ok(AfterFailure::Retry),
            () = call.host.cancelled() => Err(LinkEnd::Stop(End::Cancelled(
                "cancelled by the caller while a model call waited out a Retry-After".into(),
            ))),
        }
    }
}

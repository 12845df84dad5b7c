//! Deadline propagation: `Rein-Deadline-Ms` in and out.
//!
//! # Why
//!
//! A deadline is the one budget every hop must share (seed 000, "one
//! deadline per run, inherited by every call"): a callee that restarts
//! the clock lets a chain of services outlive its caller. A service
//! adopts the remainder its caller sent ([`AdoptDeadlineLayer`]); a client
//! sends the remainder on and stops waiting when it is spent
//! ([`DeadlineLayer`]). Remaining milliseconds, not an absolute time: the
//! two processes' clocks need not agree.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use rein_core::Failure;
use rein_core::deadline::{DEADLINE_HEADER, Deadline};
use rein_core::failure::{Category, Effect};
use tower::{BoxError, Layer, Service};

use crate::error::Refused;
use crate::time::{CallDeadline, deadline_of, now, tokio_instant};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Adopts the caller's `Rein-Deadline-Ms` as the request's
/// [`CallDeadline`], for a service that receives calls.
///
/// A request without the header passes with no deadline (the callee must
/// not invent one), unless [`or_within`](AdoptDeadlineLayer::or_within)
/// gives a default; a malformed header is refused as invalid arguments.
#[derive(Debug, Clone, Copy, Default)]
pub struct AdoptDeadlineLayer {
    default: Option<Duration>,
}

impl AdoptDeadlineLayer {
    /// Adopts the header when present.
    pub fn new() -> AdoptDeadlineLayer {
        AdoptDeadlineLayer::default()
    }

    /// A request without the header gets `within` from its arrival.
    pub fn or_within(mut self, within: Duration) -> AdoptDeadlineLayer {
        self.default = Some(within);
        self
    }
}

impl<S> Layer<S> for AdoptDeadlineLayer {
    type Service = AdoptDeadline<S>;

    fn layer(&self, inner: S) -> AdoptDeadline<S> {
        AdoptDeadline {
            inner,
            default: self.default,
        }
    }
}

/// The service of [`AdoptDeadlineLayer`].
#[derive(Debug, Clone)]
pub struct AdoptDeadline<S> {
    inner: S,
    default: Option<Duration>,
}

impl<S, B> Service<http::Request<B>> for AdoptDeadline<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let arrived = now();
        let header = request
            .headers()
            .get(DEADLINE_HEADER)
            .map(|v| v.to_str().unwrap_or("(not text)").to_owned());
        let deadline = match (header, self.default) {
            (Some(value), _) => match Deadline::from_header(Some(&value), arrived) {
                Ok(deadline) => Some(deadline),
                Err(error) => {
                    let failure = Failure::new("caller", Category::InvalidArguments)
                        .with_human_message(error.to_string());
                    return Box::pin(async move { Err(Refused(failure).into()) });
                }
            },
            (None, Some(within)) => Some(Deadline::after(arrived, within)),
            (None, None) => None,
        };
        if let Some(deadline) = deadline {
            request.extensions_mut().insert(CallDeadline(deadline));
        }
        let called = self.inner.call(request);
        Box::pin(async move { called.await.map_err(Into::into) })
    }
}

/// Sends the request's deadline on as `Rein-Deadline-Ms` and stops waiting
/// when it is spent, for a client.
///
/// The deadline is the request's [`CallDeadline`], or
/// [`within`](DeadlineLayer::within) from the call when it has none; a
/// request with neither passes unchanged. A deadline already spent is
/// refused before anything is sent (`budget_exhausted`, not applied); one
/// that runs out while the call is in flight ends it as a `timeout` whose
/// effect is unknown.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeadlineLayer {
    default: Option<Duration>,
}

impl DeadlineLayer {
    /// Propagates the request's own deadline.
    pub fn new() -> DeadlineLayer {
        DeadlineLayer::default()
    }

    /// A request without a deadline gets `within` from the call.
    pub fn within(mut self, within: Duration) -> DeadlineLayer {
        self.default = Some(within);
        self
    }
}

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;

    fn layer(&self, inner: S) -> DeadlineService<S> {
        DeadlineService {
            inner,
            default: self.default,
        }
    }
}

/// The service of [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct DeadlineService<S> {
    inner: S,
    default: Option<Duration>,
}

impl<S, B> Service<http::Request<B>> for DeadlineService<S>
where
    S: Service<http::Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<B>) -> Self::Future {
        let at = now();
        let deadline = deadline_of(&request).or_else(|| {
            self.default.map(|within| {
                let deadline = Deadline::after(at, within);
                request.extensions_mut().insert(CallDeadline(deadline));
                deadline
            })
        });
        let Some(deadline) = deadline else {
            let called = self.inner.call(request);
            return Box::pin(async move { called.await.map_err(Into::into) });
        };
        let target = request.uri().host().unwrap_or("target").to_owned();
        if deadline.is_expired(at) {
            let failure = Failure::new(&target, Category::BudgetExhausted)
                .with_human_message(format!("the deadline passed before {target} was called"));
            return Box::pin(async move { Err(Refused(failure).into()) });
        }
        let value = deadline.to_header(at);
        if let Ok(value) = http::HeaderValue::from_str(&value) {
            request.headers_mut().insert(DEADLINE_HEADER, value);
        }
        let called = self.inner.call(request);
        Box::pin(async move {
            match tokio::time::timeout_at(tokio_instant(deadline.instant()), called).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(Refused(
                    Failure::new(&target, Category::Timeout)
                        .with_effect(Effect::MaybeApplied)
                        .with_human_message(format!("{target} did not answer before the deadline")),
                )
                .into()),
            }
        })
    }
}

//! The circuit breaker around a plain service call.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use rein_core::ConfigError;
use rein_core::breaker::{Breaker, BreakerConfig, BreakerState, Permit};
use tower::{BoxError, Layer, Service};

use crate::classify::{Classify, HttpStatus};
use crate::error::Refused;
use crate::time::now;

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// One breaker arm for a target ([`Breaker`]: consecutive failures or a
/// failure ratio open it, a break refuses every call, half-open probes
/// decide). Every service the layer makes shares the arm. A refused call
/// fails at once with [`Refused`] (`circuit_open`, with the wait until
/// the arm may admit again); only failures whose category counts for a
/// breaker (not a 400, not a 404) are counted.
#[derive(Clone)]
pub struct BreakerLayer<C = HttpStatus> {
    arm: Arc<Arm>,
    classify: C,
}

struct Arm {
    target: String,
    breaker: Mutex<Breaker>,
}

impl BreakerLayer<HttpStatus> {
    /// An arm for `target` with `config`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting when `config` is invalid.
    pub fn new(
        target: &str,
        config: BreakerConfig,
    ) -> Result<BreakerLayer<HttpStatus>, ConfigError> {
        BreakerLayer::with_classify(target, config, HttpStatus::new(target))
    }
}

impl<C> BreakerLayer<C> {
    /// As [`BreakerLayer::new`], judging answers with `classify`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting when `config` is invalid.
    pub fn with_classify(
        target: &str,
        config: BreakerConfig,
        classify: C,
    ) -> Result<BreakerLayer<C>, ConfigError> {
        Ok(BreakerLayer {
            arm: Arc::new(Arm {
                target: target.to_owned(),
                breaker: Mutex::new(Breaker::new(config)?),
            }),
            classify,
        })
    }

    /// The arm's state now.
    pub fn state(&self) -> BreakerState {
        self.arm.lock().state()
    }
}

impl Arm {
    fn lock(&self) -> std::sync::MutexGuard<'_, Breaker> {
        self.breaker.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl<S, C: Clone> Layer<S> for BreakerLayer<C> {
    type Service = BreakerService<S, C>;

    fn layer(&self, inner: S) -> BreakerService<S, C> {
        BreakerService {
            inner,
            arm: self.arm.clone(),
            classify: self.classify.clone(),
        }
    }
}

/// The service of [`BreakerLayer`].
#[derive(Clone)]
pub struct BreakerService<S, C> {
    inner: S,
    arm: Arc<Arm>,
    classify: C,
}

/// An admitted call's permit, reported once: with the call's outcome, or
/// as ignored when the call is dropped before it answers (so a probe that
/// never finishes does not hold its slot until the arm's
/// `half_open_max_wait`).
struct Admitted {
    arm: Arc<Arm>,
    permit: Option<Permit>,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.arm.lock().on_ignored(permit);
        }
    }
}

impl<S, C, Req> Service<Req> for BreakerService<S, C>
where
    S: Service<Req>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    C: Classify<S::Response>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        let admission = self.arm.lock().admit(now());
        let permit = match admission.admit.into_result(&self.arm.target) {
            Ok(permit) => permit,
            Err(failure) => return Box::pin(async move { Err(Refused(failure).into()) }),
        };
        let mut admitted = Admitted {
            arm: self.arm.clone(),
            permit: Some(permit),
        };
        let called = self.inner.call(request);
        let classify = self.classify.clone();
        Box::pin(async move {
            let outcome = called.await.map_err(Into::into);
            let failure = classify.classify(&outcome);
            if let Some(permit) = admitted.permit.take() {
                let mut breaker = admitted.arm.lock();
                let _transition = match &failure {
                    None => breaker.on_success(permit, now()),
                    Some(failure) => breaker.on_failure(permit, failure.category(), now()),
                };
            }
            outcome
        })
    }
}

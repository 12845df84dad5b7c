//! rein's retry decision around a plain service call.
//!
//! # Why rein's and not `tower::retry`
//!
//! `tower::retry` asks a policy "again?" and leaves the rest to it. rein's
//! decision ([`RetryPolicy::decide`]) is the one its tool calls get: the
//! tool's class first (an irreversible call is never repeated), then the
//! failure's category, the attempt ceiling, the server's `Retry-After`
//! (never shortened), full jitter, room for one median attempt before the
//! deadline, and the target's retry budget (retries at most a share of
//! requests, so a degraded target is not stormed). Writing it as a
//! `tower::retry::Policy` would split one decision across two crates.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use rand::SeedableRng;
use rand::rngs::StdRng;
use rein_core::deadline::Deadline;
use rein_core::failure::Effect;
use rein_core::retry::{RetryBudget, RetryDecision, RetryInput, RetryPolicy};
use rein_core::{LatencyProfile, MAX_DURATION, ToolClass};
use tower::{BoxError, Layer, Service};

use crate::classify::{Classify, HttpStatus};
use crate::time::{deadline_of, now};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The header whose presence makes a repeated write safe: the server
/// deduplicates by it, so sending again with the same key is the lookup.
pub const IDEMPOTENCY_KEY: &str = "Idempotency-Key";

/// Retries a call by rein's decision; one budget per layer (per target).
///
/// The request is cloned for each attempt (`http::Request<B>` with a
/// cloneable body). An idempotent write whose effect is unknown (a 502, a
/// reset after sending) is sent again only when the request carries an
/// `Idempotency-Key` (the server's deduplication is the lookup by key);
/// without one it is given up, as rein gives up a write it cannot look up.
/// What gives up is the last answer as the service gave it: a 503 stays
/// a 503 response.
#[derive(Clone)]
pub struct RetryLayer<C = HttpStatus> {
    shared: Arc<Shared>,
    classify: C,
}

struct Shared {
    class: ToolClass,
    policy: RetryPolicy,
    latency: LatencyProfile,
    budget: Mutex<RetryBudget>,
    rng: Mutex<StdRng>,
}

impl RetryLayer<HttpStatus> {
    /// Retries calls of `class` to `target` with the default policy
    /// (4 attempts, 250 ms → 8 s full jitter, a 20 % budget) and a latency
    /// profile of `p50` (the room a retry must leave before the deadline).
    pub fn new(target: &str, class: ToolClass, p50: Duration) -> RetryLayer<HttpStatus> {
        RetryLayer::with_classify(HttpStatus::new(target), class, p50)
    }
}

impl<C> RetryLayer<C> {
    /// As [`RetryLayer::new`], judging answers with `classify`.
    pub fn with_classify(classify: C, class: ToolClass, p50: Duration) -> RetryLayer<C> {
        let p50 = p50.max(Duration::from_millis(1));
        let latency = LatencyProfile::new(p50, p50, p50, 0)
            .unwrap_or_else(|_| unreachable!("a positive p50 is a valid profile"));
        let policy = RetryPolicy::default();
        RetryLayer {
            shared: Arc::new(Shared {
                class,
                policy,
                latency,
                budget: Mutex::new(RetryBudget::new(&policy)),
                rng: Mutex::new(StdRng::from_os_rng()),
            }),
            classify,
        }
    }

    /// With `policy` (and a fresh budget of its size).
    pub fn policy(self, policy: RetryPolicy) -> RetryLayer<C> {
        self.rebuild(|s| {
            s.policy = policy;
            s.budget = Mutex::new(RetryBudget::new(&policy));
        })
    }

    /// With a jitter drawn from a seeded generator: reproducible pauses.
    pub fn rng_seed(self, seed: u64) -> RetryLayer<C> {
        self.rebuild(|s| s.rng = Mutex::new(StdRng::seed_from_u64(seed)))
    }

    /// Whole retries the budget allows now.
    pub fn budget_available(&self) -> u64 {
        lock(&self.shared.budget).available()
    }

    fn rebuild(self, change: impl FnOnce(&mut Shared)) -> RetryLayer<C> {
        let mut shared = Shared {
            class: self.shared.class,
            policy: self.shared.policy,
            latency: self.shared.latency,
            budget: Mutex::new(lock(&self.shared.budget).clone()),
            rng: Mutex::new(lock(&self.shared.rng).clone()),
        };
        change(&mut shared);
        RetryLayer {
            shared: Arc::new(shared),
            classify: self.classify,
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

impl<S, C: Clone> Layer<S> for RetryLayer<C> {
    type Service = Retry<S, C>;

    fn layer(&self, inner: S) -> Retry<S, C> {
        Retry {
            inner,
            shared: self.shared.clone(),
            classify: self.classify.clone(),
        }
    }
}

/// The service of [`RetryLayer`].
#[derive(Clone)]
pub struct Retry<S, C> {
    inner: S,
    shared: Arc<Shared>,
    classify: C,
}

impl<S, C, B> Service<http::Request<B>> for Retry<S, C>
where
    S: Service<http::Request<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    C: Classify<S::Response>,
    B: Clone + Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        // The clone is not ready; the one polled ready makes this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let shared = self.shared.clone();
        let classify = self.classify.clone();
        Box::pin(async move {
            lock(&shared.budget).deposit();
            let deadline =
                deadline_of(&request).unwrap_or_else(|| Deadline::after(now(), MAX_DURATION));
            let keyed = request.headers().contains_key(IDEMPOTENCY_KEY);
            let mut attempt = 1u32;
            loop {
                if attempt > 1 {
                    std::future::poll_fn(|cx| inner.poll_ready(cx))
                        .await
                        .map_err(Into::into)?;
                }
                let outcome = inner.call(request.clone()).await.map_err(Into::into);
                let Some(failure) = classify.classify(&outcome) else {
                    return outcome;
                };
                match shared.decide(&failure, attempt, deadline, keyed) {
                    Some(delay) => {
                        tokio::time::sleep(delay).await;
                        attempt = attempt.saturating_add(1);
                    }
                    None => return outcome,
                }
            }
        })
    }
}

impl Shared {
    /// The pause before the next attempt, or `None` to give up.
    fn decide(
        &self,
        failure: &rein_core::Failure,
        attempt: u32,
        deadline: Deadline,
        keyed: bool,
    ) -> Option<Duration> {
        let mut failure = failure.clone();
        loop {
            let input = RetryInput {
                class: self.class,
                failure: &failure,
                attempt,
                deadline,
                latency: self.latency,
                now: now(),
                worth: None,
            };
            let decision = {
                let mut budget = lock(&self.budget);
                let mut rng = lock(&self.rng);
                self.policy.decide(&input, &mut budget, &mut *rng)
            };
            match decision {
                RetryDecision::Retry { delay, .. } => return Some(delay),
                // The server deduplicates by the key: sending again is
                // the lookup, decided as a write that did not apply.
                RetryDecision::LookupByKey if keyed => {
                    failure = failure.with_effect(Effect::NotApplied);
                }
                RetryDecision::LookupByKey | RetryDecision::GiveUp { .. } => return None,
            }
        }
    }
}

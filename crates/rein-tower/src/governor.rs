//! The governor around a plain service call: a rate, a burst, an adaptive
//! concurrency limit and fair shares between tenants.
//!
//! # Why not `tower::limit`
//!
//! `tower::limit` holds a fixed rate and a fixed concurrency. rein's
//! [`Governor`] adapts the limit to the target's latency and overload
//! (429s, timeouts shrink it), shares it fairly between tenants and
//! queues in fair order; and a waiter is bounded by its call's deadline,
//! shed at once when the earliest grant lies beyond it instead of
//! waiting in vain.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use rein_core::failure::{Category, Effect};
use rein_core::governor::{
    Admit, Blocked, Completion, Governor, GovernorConfig, Permit, Poll as Turn, Request, Ticket,
};
use rein_core::{ConfigError, Failure, Instant, RunId, TenantId};
use tokio::sync::Notify;
use tower::{BoxError, Layer, Service};

use crate::classify::{Classify, HttpStatus};
use crate::error::Refused;
use crate::time::{deadline_of, now, tokio_instant};

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Who a governed call is for: its tenant's share and its run's quota.
/// Put it in the request's extensions; without it a call is the layer's
/// default caller's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The tenant whose share the call uses.
    pub tenant: TenantId,
    /// The run (or any unit of work) whose quota the call uses.
    pub run: RunId,
}

/// One resource group's governor; every service the layer makes shares it.
#[derive(Clone)]
pub struct GovernorLayer<C = HttpStatus> {
    group: Arc<Group>,
    classify: C,
}

struct Group {
    name: String,
    state: Mutex<State>,
    /// Woken after a release, a cancel and each grant.
    changed: Notify,
    default_caller: Caller,
}

struct State {
    governor: Governor,
    /// Permits handed to tickets whose waiters have not taken them yet.
    granted: HashMap<Ticket, Permit>,
}

impl GovernorLayer<HttpStatus> {
    /// The governor of the resource group `name` with `config`.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting (`governor.…`) when `config` is
    /// invalid.
    pub fn new(
        name: &str,
        config: GovernorConfig,
    ) -> Result<GovernorLayer<HttpStatus>, ConfigError> {
        GovernorLayer::with_classify(name, config, HttpStatus::new(name))
    }
}

impl<C> GovernorLayer<C> {
    /// As [`GovernorLayer::new`], judging answers with `classify` (what the
    /// adaptive limit learns: overload and timeouts shrink it).
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting when `config` is invalid.
    pub fn with_classify(
        name: &str,
        config: GovernorConfig,
        classify: C,
    ) -> Result<GovernorLayer<C>, ConfigError> {
        let default_caller = Caller {
            tenant: TenantId::new("default")
                .unwrap_or_else(|_| unreachable!("\"default\" is a valid tenant id")),
            run: RunId::new("service")
                .unwrap_or_else(|_| unreachable!("\"service\" is a valid run id")),
        };
        Ok(GovernorLayer {
            group: Arc::new(Group {
                name: name.to_owned(),
                state: Mutex::new(State {
                    governor: Governor::new(config)?,
                    granted: HashMap::new(),
                }),
                changed: Notify::new(),
                default_caller,
            }),
            classify,
        })
    }

    /// Calls in flight under the limit now.
    pub fn in_flight(&self) -> u32 {
        self.group.lock().governor.concurrency().in_flight()
    }

    /// Calls waiting for their turn now.
    pub fn queued(&self) -> usize {
        self.group.lock().governor.queued()
    }
}

impl Group {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Hands every permit the governor can grant now to its ticket; the
    /// instant a bucket refills when the next waiter needs one.
    fn pump(&self, state: &mut State, at: Instant) -> Option<Instant> {
        let mut woke = false;
        let next = loop {
            match state.governor.poll(at) {
                Turn::Granted(grant) => {
                    state.granted.insert(grant.ticket, grant.permit);
                    woke = true;
                }
                Turn::Blocked(Blocked::Until { at, .. }) => break Some(at),
                Turn::Blocked(Blocked::Release) | Turn::Idle => break None,
            }
        };
        if woke {
            self.changed.notify_waiters();
        }
        next
    }

    /// Gives `permit` back with what the call taught, and lets the next
    /// waiters go.
    fn release(&self, permit: Permit, completion: Completion) {
        let at = now();
        let mut state = self.lock();
        let _released = state.governor.release(permit, completion, None, at);
        self.pump(&mut state, at);
        drop(state);
        self.changed.notify_waiters();
    }

    fn shed(&self, why: String, retry_after: Option<std::time::Duration>) -> BoxError {
        let mut failure = Failure::new(&self.name, Category::RateLimited)
            .with_effect(Effect::NotApplied)
            .with_human_message(why);
        if let Some(wait) = retry_after {
            failure = failure.with_retry_after(wait);
        }
        Refused(failure).into()
    }
}

/// A permit held by a call: released with the call's outcome, or as
/// teaching nothing when the call is dropped first (a slot is never lost).
struct Held {
    group: Arc<Group>,
    permit: Option<Permit>,
}

impl Held {
    fn release(mut self, completion: Completion) {
        if let Some(permit) = self.permit.take() {
            self.group.release(permit, completion);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(permit) = self.permit.take() {
            self.group.release(permit, Completion::Ignored);
        }
    }
}

/// A ticket in the queue: cancelled when its waiter gives up or is
/// dropped; a permit granted meanwhile is given back.
struct Waiting {
    group: Arc<Group>,
    ticket: Option<Ticket>,
}

impl Waiting {
    /// The permit, once granted.
    fn take(&mut self, state: &mut State) -> Option<Permit> {
        let ticket = self.ticket?;
        let permit = state.granted.remove(&ticket)?;
        self.ticket = None;
        Some(permit)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let Some(ticket) = self.ticket.take() else {
            return;
        };
        let mut state = self.group.lock();
        if !state.governor.cancel(ticket)
            && let Some(permit) = state.granted.remove(&ticket)
        {
            drop(state);
            self.group.release(permit, Completion::Ignored);
        }
    }
}

impl<S, C: Clone> Layer<S> for GovernorLayer<C> {
    type Service = GovernorService<S, C>;

    fn layer(&self, inner: S) -> GovernorService<S, C> {
        GovernorService {
            inner,
            group: self.group.clone(),
            classify: self.classify.clone(),
        }
    }
}

/// The service of [`GovernorLayer`].
#[derive(Clone)]
pub struct GovernorService<S, C> {
    inner: S,
    group: Arc<Group>,
    classify: C,
}

impl<S, C, B> Service<http::Request<B>> for GovernorService<S, C>
where
    S: Service<http::Request<B>> + Clone + Send + 'static,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    C: Classify<S::Response>,
    B: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = BoxFuture<Result<S::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        let group = self.group.clone();
        let classify = self.classify.clone();
        let caller = request
            .extensions()
            .get::<Caller>()
            .unwrap_or(&group.default_caller)
            .clone();
        let deadline = deadline_of(&request);
        Box::pin(async move {
            let held = admit(&group, &caller, deadline).await?;
            let outcome = inner.call(request).await.map_err(Into::into);
            let completion = match classify.classify(&outcome) {
                None => Completion::Succeeded {
                    output_tokens: None,
                },
                Some(failure) => Completion::from_failure(failure.category()),
            };
            held.release(completion);
            outcome
        })
    }
}

/// A permit for `caller`'s call: at once, or after waiting its turn
/// within `deadline`; shed when it cannot come in time.
async fn admit(
    group: &Arc<Group>,
    caller: &Caller,
    deadline: Option<rein_core::deadline::Deadline>,
) -> Result<Held, BoxError> {
    let at = now();
    let admitted = group
        .lock()
        .governor
        .admit(Request::new(&caller.tenant, &caller.run), at);
    let (ticket, not_before) = match admitted {
        Admit::Granted(permit) => {
            return Ok(Held {
                group: group.clone(),
                permit: Some(permit),
            });
        }
        Admit::Rejected(rejection) => return Err(group.shed(rejection.to_string(), None)),
        Admit::Queued {
            ticket, not_before, ..
        } => (ticket, not_before),
    };
    let mut waiting = Waiting {
        group: group.clone(),
        ticket: Some(ticket),
    };
    if let Some(deadline) = deadline
        && not_before > deadline.instant()
    {
        return Err(group.shed(
            format!(
                "{} cannot take the call before its deadline (earliest in {:?})",
                group.name,
                not_before.saturating_duration_since(at)
            ),
            Some(not_before.saturating_duration_since(at)),
        ));
    }
    loop {
        let changed = group.changed.notified();
        let refill = {
            let mut state = group.lock();
            let refill = group.pump(&mut state, now());
            if let Some(permit) = waiting.take(&mut state) {
                return Ok(Held {
                    group: group.clone(),
                    permit: Some(permit),
                });
            }
            refill
        };
        let wake = match (refill, deadline) {
            (Some(r), Some(d)) => Some(r.min(d.instant())),
            (Some(r), None) => Some(r),
            (None, Some(d)) => Some(d.instant()),
            (None, None) => None,
        };
        match wake {
            Some(wake) => {
                tokio::select! {
                    () = changed => {}
                    () = tokio::time::sleep_until(tokio_instant(wake)) => {}
                }
            }
            None => changed.await,
        }
        if let Some(deadline) = deadline
            && deadline.is_expired(now())
        {
            let mut state = group.lock();
            if let Some(permit) = waiting.take(&mut state) {
                return Ok(Held {
                    group: group.clone(),
                    permit: Some(permit),
                });
            }
            drop(state);
            return Err(group.shed(
                format!("{} did not take the call before its deadline", group.name),
                None,
            ));
        }
    }
}

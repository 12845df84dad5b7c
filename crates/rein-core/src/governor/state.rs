//! The governor of one resource group: request and token buckets, the
//! adaptive limit, tiered quotas and the fair queue behind one `admit`.

use std::time::Duration;

use super::adaptive::{AdaptiveLimit, Completion, LimitPermit};
use super::bucket::{Acquire, Rate, TokenBucket};
use super::config::{GovernorConfig, Settings};
use super::decision::{
    Admit, Blocked, BucketKind, Cause, Grant, Poll, Rejection, Released, Ticket,
};
use super::fair::{Class, FairQueue};
use super::quota::{Holder, Quotas};
use super::share::{Members, Share};
use crate::clock::Instant;
use crate::config::ConfigError;
use crate::ids::{RunId, TenantId};

/// One call asking for a slot of a resource group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Request<'a> {
    /// Whose call it is.
    pub tenant: &'a TenantId,
    /// The run making it.
    pub run: &'a RunId,
    /// Interactive or batch.
    pub class: Class,
    /// The token estimate of a model call (prompt plus expected output), for
    /// a group with a token bucket; zero otherwise.
    pub tokens: u64,
}

impl<'a> Request<'a> {
    /// An interactive call of `run` for `tenant`, with no token estimate.
    pub fn new(tenant: &'a TenantId, run: &'a RunId) -> Request<'a> {
        Request {
            tenant,
            run,
            class: Class::Interactive,
            tokens: 0,
        }
    }

    /// The same call in `class`.
    pub fn class(self, class: Class) -> Request<'a> {
        Request { class, ..self }
    }

    /// The same call with a token estimate.
    pub fn tokens(self, tokens: u64) -> Request<'a> {
        Request { tokens, ..self }
    }
}

/// Proof that a call holds a slot of its group, to release exactly once
/// with [`Governor::release`].
///
/// Not `Clone`: a slot is released once, by value. A permit belongs to the
/// governor that granted it; releasing it to another is a caller bug the
/// governor cannot detect (it never panics on one).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "release the permit with Governor::release when the call is over"]
pub struct Permit {
    holder: Holder,
    class: Class,
    tokens: u64,
    slot: LimitPermit,
}

impl Permit {
    /// The class the call was admitted in.
    pub fn class(&self) -> Class {
        self.class
    }

    /// The tokens charged to the token bucket (the estimate).
    pub fn tokens(&self) -> u64 {
        self.tokens
    }

    /// When the slot was taken.
    pub fn acquired_at(&self) -> Instant {
        self.slot.acquired_at()
    }
}

/// What is queued ahead of a request in its own lane.
#[derive(Debug, Clone, Copy, Default)]
struct Ahead {
    requests: u64,
    tokens: u64,
}

/// A request waiting in the fair queue.
#[derive(Debug, Clone)]
struct Waiter {
    ticket: Ticket,
    holder: Holder,
    class: Class,
    tokens: u64,
    enqueued_at: Instant,
}

/// The governor of one resource group: whether, and when, a call of the
/// group's tools (or of a model resource group) may be sent.
///
/// # Why
///
/// Step 4 of the guarded call (DESIGN.md). The model decides the fan-out,
/// so it must be bounded where calls leave, per downstream resource rather
/// than per tool (seed 000): a bucket of calls per second (and of tokens
/// per minute for models), a concurrency limit that follows the backend's
/// latency, quotas that keep one tenant or one run from taking the group,
/// and a fair queue so that waiting is shared by weight, interactive work
/// first. Over the limit a call waits — bounded by its deadline, which the
/// caller enforces — rather than failing.
///
/// # Deciding
///
/// A request is granted at once only when nobody waits, a slot is free
/// under the adaptive limit, its tenant and run are under their quotas and
/// the buckets hold what it needs; checked in that order, the first that
/// fails is the [`Cause`] it is queued with. It is rejected only when it
/// could never be granted (a token estimate above `token_burst`).
///
/// Queued requests leave through [`poll`](Governor::poll), one per call, in
/// fair order: while any tenant that is owed (waiting, below its share of
/// the limit) waits, only owed tenants are served — borrowed capacity is
/// returned on demand as borrowers release (see `quota.rs`) — and among
/// them the fair queue's deficit round robin decides, interactive before
/// batch with batch's reserved share. The waiter chosen keeps its turn
/// while a bucket refills for it: a large model call is not overtaken
/// forever by small ones.
///
/// # Invariants
///
/// - Never more slots in flight than the limit at the time of each grant,
///   and never more than `concurrency.max` (invariant 7).
/// - Never more than `burst + rate × t` calls granted in any window `t`,
///   and likewise for tokens (net of settlements).
/// - A tenant never holds more than `tenant_max`, a run never more than
///   `run_max`.
/// - A waiting tenant below its share is served before any borrower; every
///   waiter is served once enough slots are released (no starvation).
///
/// # Cost
///
/// [`admit`](Governor::admit) on the success path does integer arithmetic
/// and one hash lookup per tier, and allocates nothing for a tenant (and,
/// with `run_max`, a run) the group has seen before; the first admission
/// of a new one stores its id. Queueing allocates; the benchmark
/// `cargo bench -p rein-core --bench governor` measures the success path.
///
/// # Example
///
/// ```
/// # use std::time::Duration;
/// use rein_core::{Instant, RunId, TenantId};
/// use rein_core::governor::{Admit, Cause, Completion, Governor, GovernorConfig, Poll, Request};
///
/// let mut config = GovernorConfig::default();
/// config.rate_per_sec = Some(20.0);
/// config.burst = Some(1);
/// let mut governor = Governor::new(config)?;
/// let (tenant, run) = (TenantId::new("acme")?, RunId::new("run-1")?);
/// let now = Instant::ORIGIN;
///
/// let Admit::Granted(permit) = governor.admit(Request::new(&tenant, &run), now) else {
///     unreachable!("a fresh group grants");
/// };
/// let Admit::Queued { ticket, cause: Cause::RateLimited { until, .. }, .. } =
///     governor.admit(Request::new(&tenant, &run), now)
/// else {
///     unreachable!("the bucket holds one call");
/// };
/// assert_eq!(until, now + Duration::from_millis(50));
/// let Poll::Granted(grant) = governor.poll(until) else { unreachable!() };
/// assert_eq!(grant.ticket, ticket);
/// let _ = governor.release(permit, Completion::SUCCEEDED, None, until);
/// let _ = governor.release(grant.permit, Completion::SUCCEEDED, None, until);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Governor {
    requests: Option<TokenBucket>,
    tokens: Option<TokenBucket>,
    limit: AdaptiveLimit,
    quotas: Quotas,
    queue: FairQueue<Waiter>,
    /// The waiter whose turn it is, waiting for a bucket to refill.
    next: Option<Waiter>,
    next_ticket: u64,
    /// The group's whole request bucket and ceiling, as configured: what
    /// [`share_among`](Governor::share_among) divides.
    whole: Whole,
    /// The nodes the limits are divided among now.
    members: Members,
    /// Until when the provider behind the group asked not to be called
    /// (its 429's `Retry-After`): nothing is granted before.
    paused_until: Option<Instant>,
}

/// A group's limits before any division among nodes.
#[derive(Debug, Clone, Copy)]
struct Whole {
    requests: Option<(Rate, u64)>,
    tokens: Option<(Rate, u64)>,
    max_concurrency: u32,
}

impl TryFrom<GovernorConfig> for Governor {
    type Error = ConfigError;

    fn try_from(config: GovernorConfig) -> Result<Governor, ConfigError> {
        Governor::new(config)
    }
}

impl Governor {
    /// A governor with full buckets, its initial limit and nobody waiting.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting (`governor.…`) when a value is
    /// outside its range (see the defaults table in [`governor`](super)),
    /// or a setting would have no effect (`burst` without `rate_per_sec`,
    /// `token_burst` without `tokens_per_minute`, a quota cap at or above
    /// the tier above it, `default_weight` without `weights`).
    pub fn new(config: GovernorConfig) -> Result<Governor, ConfigError> {
        let s = Settings::validate(&config)?;
        let whole = Whole {
            requests: s.requests.as_ref().map(|b| (b.rate(), b.burst())),
            tokens: s.tokens.as_ref().map(|b| (b.rate(), b.burst())),
            max_concurrency: s.limit.max,
        };
        Ok(Governor {
            whole,
            members: Members::ALONE,
            requests: s.requests,
            tokens: s.tokens,
            limit: AdaptiveLimit::from_settings(s.limit),
            quotas: Quotas::new(s.quotas.clone()),
            queue: FairQueue::new(s.quotas.weights, s.batch_share),
            next: None,
            next_ticket: 0,
            paused_until: None,
        })
    }

    /// Divides the group's request bucket and ceiling among `members` at
    /// `now`: this node keeps its [part](Members::part) of the burst and
    /// the ceiling and its [part](Members::rate_part) of the rate (see
    /// `share.rs` for the accuracy this gives a cluster). The buckets keep
    /// their level in proportion, so a change never grants a fresh burst.
    /// The token bucket of a model group is divided the same way: the
    /// account's tokens per minute are the cluster's, not each node's.
    /// [`Members::ALONE`] restores the whole limits. Call
    /// [`poll`](Governor::poll) afterwards: a larger part may let waiters
    /// go.
    pub fn share_among(&mut self, members: Members, now: Instant) -> Share {
        self.members = members;
        let requests = self.whole.requests.map(|(rate, burst)| {
            let part = (members.rate_part(rate), members.part(burst));
            if let Some(bucket) = &mut self.requests {
                // A burst part is at least one, so this cannot fail.
                let _ = bucket.reshape(part.0, part.1, now);
            }
            part
        });
        if let (Some((rate, burst)), Some(bucket)) = (self.whole.tokens, &mut self.tokens) {
            let _ = bucket.reshape(members.rate_part(rate), members.part(burst), now);
        }
        let max = members.part(u64::from(self.whole.max_concurrency));
        self.limit
            .reshape_ceiling(u32::try_from(max).unwrap_or(u32::MAX));
        Share {
            members,
            requests,
            max_concurrency: self.limit.max(),
        }
    }

    /// The nodes the group's limits are divided among now.
    pub fn members(&self) -> Members {
        self.members
    }

    /// The adaptive limit, to read its state.
    pub fn concurrency(&self) -> &AdaptiveLimit {
        &self.limit
    }

    /// The request bucket, if the group has one.
    pub fn requests_bucket(&self) -> Option<&TokenBucket> {
        self.requests.as_ref()
    }

    /// The token bucket, if the group has one.
    pub fn tokens_bucket(&self) -> Option<&TokenBucket> {
        self.tokens.as_ref()
    }

    /// Holds every call until `until`: the provider behind the group
    /// answered 429 and said when to come back (`Retry-After`, or a
    /// rate-limit reset header). Calls admitted meanwhile queue with
    /// [`Cause::RateLimited`] on [`BucketKind::Provider`], and the queue
    /// moves again at `until`. A pause only ever extends (an earlier
    /// `until` than the one held changes nothing); `true` when it did.
    ///
    /// # Why
    ///
    /// A 429 is the provider's own bucket speaking: it is empty for the
    /// whole account, so every run calling the provider would get the
    /// same answer. Holding the group stops rein from hammering it (and
    /// from spending retries that cannot succeed) instead of each run
    /// learning it alone.
    pub fn pause_until(&mut self, until: Instant, now: Instant) -> bool {
        if until <= now || self.paused_until.is_some_and(|p| p >= until) {
            return false;
        }
        self.paused_until = Some(until);
        true
    }

    /// Until when the group holds every call, if it does at `now`.
    pub fn paused(&self, now: Instant) -> Option<Instant> {
        self.paused_until.filter(|p| *p > now)
    }

    /// Requests waiting.
    pub fn queued(&self) -> usize {
        self.queue.len() + usize::from(self.next.is_some())
    }

    /// Slots `tenant` holds.
    pub fn tenant_held(&self, tenant: &TenantId) -> u32 {
        self.quotas.tenant_held(tenant)
    }

    /// The share of the current limit `tenant` is guaranteed, given the
    /// tenants active now (itself included).
    pub fn tenant_share(&self, tenant: &TenantId) -> u32 {
        self.quotas.tenant_share(tenant, self.limit.limit())
    }

    /// Decides whether `request` may be sent at `now`.
    pub fn admit(&mut self, request: Request<'_>, now: Instant) -> Admit {
        if let Some(bucket) = &self.tokens {
            if request.tokens > bucket.burst() {
                return Admit::Rejected(Rejection::TokensExceedBurst {
                    requested: request.tokens,
                    burst: bucket.burst(),
                });
            }
        }
        let holder = self.quotas.holder(request.tenant, request.run);
        let queued = self.queued();
        let cause = if queued > 0 {
            Cause::Backlog { queued }
        } else {
            match self.limit.try_acquire(now) {
                Err(at) => Cause::Concurrency {
                    limit: at.limit,
                    in_flight: at.in_flight,
                },
                Ok(slot) => match self.quotas.check(holder) {
                    Err(tier) => {
                        self.unacquire(slot, now);
                        Cause::Quota(tier)
                    }
                    Ok(()) => match self.take_tokens(request.tokens, now) {
                        Err((bucket, until)) => {
                            self.unacquire(slot, now);
                            Cause::RateLimited { bucket, until }
                        }
                        Ok(()) => {
                            self.quotas.take(holder);
                            return Admit::Granted(Permit {
                                holder,
                                class: request.class,
                                tokens: request.tokens,
                                slot,
                            });
                        }
                    },
                },
            }
        };
        // Its place in its own lane of the fair queue: the requests of its
        // tenant and class queued before it, and the one whose turn it is.
        // Others' requests may also go first (fair order), never these.
        let ahead = self.ahead_of(holder, request.class);
        let ticket = Ticket(self.next_ticket);
        self.next_ticket = self.next_ticket.wrapping_add(1);
        self.quotas.wait(holder);
        let waiter = Waiter {
            ticket,
            holder,
            class: request.class,
            tokens: request.tokens,
            enqueued_at: now,
        };
        let cost = self.queue_cost(request.tokens);
        self.queue
            .enqueue(waiter, request.tenant, request.class, cost, now);
        Admit::Queued {
            ticket,
            cause,
            not_before: self.ready_behind(ahead, request.tokens, now),
        }
    }

    /// Hands the next waiter in fair order its permit, if it can go at
    /// `now`.
    ///
    /// Call after every [`admit`](Governor::admit) that queued, every
    /// [`release`](Governor::release) and every [`cancel`](Governor::cancel),
    /// and at the instant of [`Blocked::Until`]; keep calling while it
    /// grants.
    pub fn poll(&mut self, now: Instant) -> Poll {
        if self.next.is_none() && self.queue.is_empty() {
            return Poll::Idle;
        }
        if !self.limit.has_room() {
            return Poll::Blocked(Blocked::Release);
        }
        let waiter = match self.next.take() {
            Some(waiter) => waiter,
            None => match self.choose(now) {
                Some(waiter) => waiter,
                None => return Poll::Blocked(Blocked::Release),
            },
        };
        if let Err((bucket, at)) = self.take_tokens(waiter.tokens, now) {
            self.next = Some(waiter);
            return Poll::Blocked(Blocked::Until { bucket, at });
        }
        let slot = match self.limit.try_acquire(now) {
            Ok(slot) => slot,
            // Checked above; kept total rather than unwrapped.
            Err(_) => {
                self.refund_tokens(waiter.tokens, now);
                self.next = Some(waiter);
                return Poll::Blocked(Blocked::Release);
            }
        };
        self.quotas.stop_waiting(waiter.holder);
        self.quotas.take(waiter.holder);
        Poll::Granted(Grant {
            ticket: waiter.ticket,
            waited: now.saturating_duration_since(waiter.enqueued_at),
            permit: Permit {
                holder: waiter.holder,
                class: waiter.class,
                tokens: waiter.tokens,
                slot,
            },
        })
    }

    /// Takes a waiter that gave up (its deadline passed, its run was
    /// cancelled) out of the queue; `false` when the ticket is not queued
    /// (already granted, or never issued here).
    pub fn cancel(&mut self, ticket: Ticket) -> bool {
        let waiter = if self.next.as_ref().is_some_and(|w| w.ticket == ticket) {
            self.next.take()
        } else {
            self.queue.remove(|w| w.ticket == ticket)
        };
        match waiter {
            Some(waiter) => {
                self.quotas.stop_waiting(waiter.holder);
                true
            }
            None => false,
        }
    }

    /// Releases a call's slot at `now`: adjusts the limit from how the call
    /// ended and, for a group with a token bucket, settles the estimate with
    /// `used_tokens` (when known; unknown keeps the estimate charged).
    pub fn release(
        &mut self,
        permit: Permit,
        completion: Completion,
        used_tokens: Option<u64>,
        now: Instant,
    ) -> Released {
        self.quotas.give_back(permit.holder);
        let adjustment = self.limit.release(permit.slot, completion, now);
        let settled = match (&mut self.tokens, used_tokens) {
            (Some(bucket), Some(actual)) => Some(bucket.settle(permit.tokens, actual, now)),
            _ => None,
        };
        Released {
            adjustment,
            settled,
        }
    }

    /// The next waiter in fair order whose quotas allow it: owed tenants
    /// first, then anyone (so a free slot is never left idle because the
    /// owed tenants are all at their own caps).
    fn choose(&mut self, now: Instant) -> Option<Waiter> {
        let capacity = self.limit.limit();
        let quotas = &self.quotas;
        if quotas.owed_waiting(capacity) {
            let owed = self
                .queue
                .dequeue_where(now, |w| quotas.eligible(w.holder, capacity, true));
            if let Some(owed) = owed {
                return Some(owed.item);
            }
        }
        self.queue
            .dequeue_where(now, |w| quotas.eligible(w.holder, capacity, false))
            .map(|d| d.item)
    }

    /// The fair queue's cost of a request: its tokens for a token-limited
    /// group (fairness in what is scarce), one call otherwise.
    fn queue_cost(&self, tokens: u64) -> u64 {
        if self.tokens.is_some() {
            tokens.max(1)
        } else {
            1
        }
    }

    /// Takes one call from the request bucket and `tokens` from the token
    /// bucket, both or neither.
    fn take_tokens(&mut self, tokens: u64, now: Instant) -> Result<(), (BucketKind, Instant)> {
        if let Some(until) = self.paused(now) {
            return Err((BucketKind::Provider, until));
        }
        if let Some(bucket) = &mut self.requests {
            if let Some(until) = waits(bucket.try_acquire(1, now)) {
                return Err((BucketKind::Requests, until));
            }
        }
        if let Some(bucket) = &mut self.tokens {
            if let Some(until) = waits(bucket.try_acquire(tokens, now)) {
                if let Some(requests) = &mut self.requests {
                    requests.refund(1, now);
                }
                return Err((BucketKind::Tokens, until));
            }
        }
        Ok(())
    }

    fn refund_tokens(&mut self, tokens: u64, now: Instant) {
        if let Some(bucket) = &mut self.requests {
            bucket.refund(1, now);
        }
        if let Some(bucket) = &mut self.tokens {
            bucket.refund(tokens, now);
        }
    }

    /// Gives back a slot taken by an admission that then had to queue: no
    /// call was made, so the limit learns nothing.
    fn unacquire(&mut self, slot: LimitPermit, now: Instant) {
        let _ = self.limit.release(slot, Completion::Ignored, now);
    }

    /// The requests and tokens queued ahead of a new request of `holder`
    /// in `class`, whatever the fair order decides between tenants: the
    /// request whose turn it is, and its own tenant's of its class.
    fn ahead_of(&self, holder: Holder, class: Class) -> Ahead {
        let mut ahead = Ahead::default();
        let mine = self
            .queue
            .iter()
            .filter(|w| w.holder.same_tenant(&holder) && w.class == class);
        for waiter in self.next.iter().chain(mine) {
            ahead.requests += 1;
            ahead.tokens = ahead.tokens.saturating_add(waiter.tokens);
        }
        ahead
    }

    /// The earliest instant the buckets could grant `tokens` once `ahead`
    /// was granted before it (and any pause has ended).
    fn ready_behind(&self, ahead: Ahead, tokens: u64, now: Instant) -> Instant {
        let requests = self
            .requests
            .as_ref()
            .and_then(|b| b.ready_behind(ahead.requests, 1, now));
        let tokens = self
            .tokens
            .as_ref()
            .and_then(|b| b.ready_behind(ahead.tokens, tokens, now));
        requests
            .into_iter()
            .chain(tokens)
            .chain(self.paused(now))
            .fold(now, Instant::max)
    }
}

/// The instant a bucket asks to wait until; a rejection (admit refused
/// those already) waits forever.
fn waits(acquire: Acquire) -> Option<Instant> {
    match acquire {
        Acquire::Granted => None,
        Acquire::Wait { until } => Some(until),
        Acquire::Rejected { .. } => Some(Instant::from_origin(Duration::MAX)),
    }
}

#[cfg(test)]
mod tests;

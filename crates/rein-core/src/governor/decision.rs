//! What a [`Governor`](super::Governor) decides: [`Admit`] for a new
//! request, [`Poll`] for the queue, [`Released`] for a finished call — each
//! serializable for the event stream.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::adaptive::Adjustment;
use super::bucket::Settled;
use super::quota::QuotaTier;
use super::state::Permit;
use crate::clock::Instant;

/// A queued request's number, to match the permit [`Poll`] hands out (or to
/// [`cancel`](super::Governor::cancel) it) with the caller that waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Ticket(pub(super) u64);

impl Ticket {
    /// The ticket's number: tickets of one governor increase in the order
    /// requests were queued.
    pub fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Which bucket made a request wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BucketKind {
    /// Calls per second (`rate_per_sec`, `burst`).
    Requests,
    /// Model tokens per minute (`tokens_per_minute`, `token_burst`).
    Tokens,
    /// The provider's own limit: it answered 429 with a time to wait
    /// (`Retry-After`, or a rate-limit reset header), and the group holds
    /// every call until then ([`Governor::pause_until`](super::Governor::pause_until)).
    Provider,
}

impl BucketKind {
    /// The bucket's name as events show it.
    pub fn as_str(self) -> &'static str {
        match self {
            BucketKind::Requests => "requests",
            BucketKind::Tokens => "tokens",
            BucketKind::Provider => "provider",
        }
    }
}

/// The answer to [`Governor::admit`](super::Governor::admit).
#[derive(Debug, PartialEq)]
#[must_use = "a request that was not granted must not be sent"]
pub enum Admit {
    /// Send the call now; release the permit when it is over.
    Granted(Permit),
    /// Wait: [`Governor::poll`](super::Governor::poll) hands the ticket a
    /// permit when its turn comes. Waiting is the caller's to bound (by its
    /// deadline); a caller that gives up cancels the ticket.
    Queued {
        /// The request's place in the queue.
        ticket: Ticket,
        /// Why it could not go at once (the event's rationale).
        cause: Cause,
        /// The earliest instant the buckets could grant it behind the
        /// requests queued before it in its own lane (its tenant's of its
        /// class, and the one whose turn it is): a caller whose deadline
        /// leaves no room after it can shed the call at once instead of
        /// waiting in vain. Other tenants' requests may still go first in
        /// fair order, so a caller still bounds its wait.
        not_before: Instant,
    },
    /// Shed: this request can never be granted.
    Rejected(Rejection),
}

impl Admit {
    /// Whether the request may be sent now.
    pub fn is_granted(&self) -> bool {
        matches!(self, Admit::Granted(_))
    }
}

/// Why a request was queued instead of granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum Cause {
    /// Others were waiting already: nobody jumps the fair queue.
    Backlog {
        /// Requests waiting before this one.
        queued: usize,
    },
    /// Every slot under the adaptive limit is held.
    Concurrency {
        /// The current limit.
        limit: u32,
        /// Slots held.
        in_flight: u32,
    },
    /// The tenant or the run holds all the slots its quota allows
    /// (`quota_exceeded`).
    Quota(QuotaTier),
    /// A bucket is empty until `until` (`rate_limited`).
    RateLimited {
        /// Which bucket.
        bucket: BucketKind,
        /// When it holds what the request needs.
        until: Instant,
    },
}

/// Why a request can never be granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "rejection", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Rejection {
    /// The request's token estimate is larger than the token bucket holds.
    TokensExceedBurst {
        /// Tokens the request would charge.
        requested: u64,
        /// The bucket's `token_burst`.
        burst: u64,
    },
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rejection::TokensExceedBurst { requested, burst } => write!(
                f,
                "the call needs an estimated {requested} tokens, more than the group's \
                 token_burst of {burst} can ever hold"
            ),
        }
    }
}

/// The answer to [`Governor::poll`](super::Governor::poll).
#[derive(Debug, PartialEq)]
#[must_use = "a granted permit must reach its waiter"]
pub enum Poll {
    /// The next waiter in fair order may go: hand it the permit, and poll
    /// again.
    Granted(Grant),
    /// Waiters remain but none can go yet.
    Blocked(Blocked),
    /// Nobody waits.
    Idle,
}

/// A waiter's turn has come.
#[derive(Debug, PartialEq)]
pub struct Grant {
    /// Whose turn it is.
    pub ticket: Ticket,
    /// Its permit, to release when the call is over.
    pub permit: Permit,
    /// How long it waited.
    pub waited: Duration,
}

/// Why no waiter can go yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "blocked", rename_all = "snake_case")]
pub enum Blocked {
    /// Every slot is held, or every waiter is at its quota: poll again
    /// after a release.
    Release,
    /// The next waiter in fair order needs a bucket to refill: poll again at
    /// `at` (or after a release).
    Until {
        /// Which bucket.
        bucket: BucketKind,
        /// When it will hold what the waiter needs.
        at: Instant,
    },
}

/// What a release changed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[must_use = "an adjustment is an event to record"]
pub struct Released {
    /// How the adaptive limit moved (`concurrency_adjusted`).
    pub adjustment: Adjustment,
    /// How the token bucket's charge was corrected, for a group with a
    /// token bucket when the usage was known.
    pub settled: Option<Settled>,
}

/// The kind of every decision a governor makes, for coverage tests and
/// metrics labels.
///
/// NOTE: `kind_of_admit`, `kind_of_poll` and [`DecisionKind::ALL`] must list
/// every variant; the exhaustive matches fail to compile otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    /// [`Admit::Granted`].
    Granted,
    /// [`Admit::Queued`] behind a backlog.
    QueuedBacklog,
    /// [`Admit::Queued`] at the concurrency limit.
    QueuedConcurrency,
    /// [`Admit::Queued`] at a quota.
    QueuedQuota,
    /// [`Admit::Queued`] on an empty bucket.
    QueuedRateLimited,
    /// [`Admit::Rejected`].
    Rejected,
    /// [`Poll::Granted`].
    PollGranted,
    /// [`Poll::Blocked`] until a release.
    PollBlockedRelease,
    /// [`Poll::Blocked`] until a bucket refills.
    PollBlockedUntil,
    /// [`Poll::Idle`].
    PollIdle,
}

impl DecisionKind {
    /// Every kind.
    pub const ALL: [DecisionKind; 10] = [
        DecisionKind::Granted,
        DecisionKind::QueuedBacklog,
        DecisionKind::QueuedConcurrency,
        DecisionKind::QueuedQuota,
        DecisionKind::QueuedRateLimited,
        DecisionKind::Rejected,
        DecisionKind::PollGranted,
        DecisionKind::PollBlockedRelease,
        DecisionKind::PollBlockedUntil,
        DecisionKind::PollIdle,
    ];

    /// The kind of an admission.
    pub fn of_admit(admit: &Admit) -> DecisionKind {
        match admit {
            Admit::Granted(_) => DecisionKind::Granted,
            Admit::Queued { cause, .. } => match cause {
                Cause::Backlog { .. } => DecisionKind::QueuedBacklog,
                Cause::Concurrency { .. } => DecisionKind::QueuedConcurrency,
                Cause::Quota(_) => DecisionKind::QueuedQuota,
                Cause::RateLimited { .. } => DecisionKind::QueuedRateLimited,
            },
            Admit::Rejected(_) => DecisionKind::Rejected,
        }
    }

    /// The kind of a poll.
    pub fn of_poll(poll: &Poll) -> DecisionKind {
        match poll {
            Poll::Granted(_) => DecisionKind::PollGranted,
            Poll::Blocked(Blocked::Release) => DecisionKind::PollBlockedRelease,
            Poll::Blocked(Blocked::Until { .. }) => DecisionKind::PollBlockedUntil,
            Poll::Idle => DecisionKind::PollIdle,
        }
    }
}

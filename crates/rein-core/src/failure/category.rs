use std::fmt;

use serde::{Deserialize, Serialize};

/// What kind of failure happened; decides between the retry path and the
/// degradation path.
///
/// | category | retryable by default | counts for a breaker |
/// | --- | --- | --- |
/// | `transient` | yes | yes |
/// | `timeout` | yes | yes |
/// | `rate_limited` | yes | yes |
/// | `overloaded` | yes | yes |
/// | `invalid_arguments` | no | no (caller's fault) |
/// | `unauthorized` | no | yes (target misconfigured) |
/// | `forbidden` | no | yes (target misconfigured) |
/// | `not_found` | no | no (caller's fault) |
/// | `conflict` | no | no (caller's fault) |
/// | `content_blocked` | no | no |
/// | `context_overflow` | no | no (caller's fault) |
/// | `circuit_open` | no | no (rein's own refusal) |
/// | `budget_exhausted` | no | no (rein's own refusal) |
/// | `cancelled` | no | no |
/// | `unknown` | no | yes |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Category {
    /// A passing fault: 5xx, connection reset, 408.
    Transient,
    /// The call did not answer in its allowance.
    Timeout,
    /// The target asked us to slow down (429).
    RateLimited,
    /// The target is over capacity (529, provider overload).
    Overloaded,
    /// The arguments were wrong (400, 422, schema validation).
    InvalidArguments,
    /// Credentials missing or rejected (401).
    Unauthorized,
    /// Credentials valid but not allowed (403).
    Forbidden,
    /// The resource does not exist (404, 410).
    NotFound,
    /// The request conflicts with current state (409).
    Conflict,
    /// Refused by a content policy.
    ContentBlocked,
    /// The input did not fit the model's context window.
    ContextOverflow,
    /// Refused because a breaker arm is open; no call was made.
    CircuitOpen,
    /// Refused because a budget would be breached; no call was made.
    BudgetExhausted,
    /// The run or the call was cancelled.
    Cancelled,
    /// Anything not classified above.
    Unknown,
}

impl Category {
    /// Every category, in declaration order.
    pub const ALL: [Category; 15] = [
        Category::Transient,
        Category::Timeout,
        Category::RateLimited,
        Category::Overloaded,
        Category::InvalidArguments,
        Category::Unauthorized,
        Category::Forbidden,
        Category::NotFound,
        Category::Conflict,
        Category::ContentBlocked,
        Category::ContextOverflow,
        Category::CircuitOpen,
        Category::BudgetExhausted,
        Category::Cancelled,
        Category::Unknown,
    ];

    /// The category's name as it appears in events, config and messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Transient => "transient",
            Category::Timeout => "timeout",
            Category::RateLimited => "rate_limited",
            Category::Overloaded => "overloaded",
            Category::InvalidArguments => "invalid_arguments",
            Category::Unauthorized => "unauthorized",
            Category::Forbidden => "forbidden",
            Category::NotFound => "not_found",
            Category::Conflict => "conflict",
            Category::ContentBlocked => "content_blocked",
            Category::ContextOverflow => "context_overflow",
            Category::CircuitOpen => "circuit_open",
            Category::BudgetExhausted => "budget_exhausted",
            Category::Cancelled => "cancelled",
            Category::Unknown => "unknown",
        }
    }

    /// Whether a failure of this category is retryable unless the adapter
    /// says otherwise.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            Category::Transient | Category::Timeout | Category::RateLimited | Category::Overloaded
        )
    }

    /// Whether an adapter may mark a failure of this category retryable.
    /// rein's own refusals and cancellation never are: retrying them would
    /// defeat the mechanism that refused.
    pub fn may_be_retried(self) -> bool {
        !matches!(
            self,
            Category::CircuitOpen | Category::BudgetExhausted | Category::Cancelled
        )
    }

    /// Whether a failure of this category counts toward opening a breaker.
    ///
    /// Caller-side mistakes, content refusals, cancellation and rein's own
    /// refusals say nothing about the target's health.
    pub fn counts_for_breaker(self) -> bool {
        matches!(
            self,
            Category::Transient
                | Category::Timeout
                | Category::RateLimited
                | Category::Overloaded
                | Category::Unauthorized
                | Category::Forbidden
                | Category::Unknown
        )
    }

    /// Whether a model call that failed so moves its turn on to the next
    /// link of a fallback chain (seed 004): the local circuit open, 5xx,
    /// 429, overload, a bare connection error, no first byte in time.
    /// Never auth (401/403), cancellation or a content filter: a silent
    /// switch would mask a misconfiguration or the model's own verdict.
    /// (A context overflow has its own chain of larger windows.)
    pub fn falls_back(self) -> bool {
        matches!(
            self,
            Category::CircuitOpen
                | Category::Transient
                | Category::RateLimited
                | Category::Overloaded
                | Category::Timeout
        )
    }

    /// Whether the model can fix the failure by changing its call.
    pub fn is_correctable(self) -> bool {
        matches!(
            self,
            Category::InvalidArguments | Category::NotFound | Category::ContextOverflow
        )
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a failed call may have changed the outside world.
///
/// Only the adapter can know this, from the operation and the phase the call
/// reached; no outer layer can infer it reliably.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effect {
    /// Certainly not applied: the request never reached the target, or the
    /// target refused it before acting.
    NotApplied,
    /// Unknown: the request was sent and the answer was lost. An idempotent
    /// write is looked up by key before any re-execution; anything else is
    /// treated as applied for compensation.
    MaybeApplied,
    /// Applied, although the call reported a failure.
    Applied,
}

impl Effect {
    /// The effect's name as it appears in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::NotApplied => "not_applied",
            Effect::MaybeApplied => "maybe_applied",
            Effect::Applied => "applied",
        }
    }
}

impl fmt::Display for Effect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

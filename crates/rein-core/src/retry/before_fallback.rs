//! Retries of a chain's link on the same model before the chain falls back.
//!
//! # Why
//!
//! A fallback is a different model: another price, another voice, maybe a
//! smaller window. The caller asked for the primary, so a failure that the
//! primary itself will soon get over is worth a short wait on it first
//! (issue 35, item 3):
//!
//! - a 429 or 503 whose `Retry-After` is short (at most
//!   [`retry_after_max`](SameModelRetry::retry_after_max)) and fits what is
//!   left of the link's deadline is waited out;
//! - a single 5xx, or a connection reset before any byte, is retried once
//!   at once (one-off faults are the commonest fault of a model API);
//! - a timeout after the request went out is *not* retried: the provider may
//!   be generating (and billing) the first answer still, and a second send
//!   would be billed twice. Only a binding that says so
//!   ([`retry_timeouts`](SameModelRetry::retry_timeouts)) retries one.
//!
//! Anything else — a 429 without `Retry-After` or with a long one, an
//! overload without a hint, the retries used up — moves the chain on at
//! once, as before.
//!
//! The decision is a pure function of the failure, the retries already made
//! on this link and what is left of its deadline; the engine waits and
//! records it.
//!
//! # Defaults
//!
//! | setting | default |
//! | --- | --- |
//! | `retry_before_fallback` | [`DEFAULT_RETRY_BEFORE_FALLBACK`] (1) |
//! | `retry_after_max` | [`DEFAULT_RETRY_AFTER_MAX`] (5 s) |
//! | `retry_timeouts` | `false` |

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::{Category, Effect, Failure};

/// Same-model retries a link gets before its chain falls back.
pub const DEFAULT_RETRY_BEFORE_FALLBACK: u32 = 1;
/// The longest `Retry-After` waited out on the same model before falling
/// back.
pub const DEFAULT_RETRY_AFTER_MAX: Duration = Duration::from_secs(5);
/// The most `retry_before_fallback` accepts: more would turn a fallback
/// chain into a retry loop (the retry policy's job).
pub const MAX_RETRY_BEFORE_FALLBACK: u32 = 5;
/// The most `retry_after_max` accepts: a gateway call's whole deadline is
/// of this order; a longer wait is better spent on the fallback.
pub const MAX_RETRY_AFTER_MAX: Duration = Duration::from_secs(60);

/// How a link with a fallback after it retries its own model first.
///
/// [`NONE`](SameModelRetry::NONE) moves on at the first transient failure
/// (what runs' chains do); [`Default`] is the gateway's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct SameModelRetry {
    /// Same-model retries before the chain falls back (`retry_before_fallback`).
    pub retries: u32,
    /// The longest server wait (`Retry-After`) waited out on the same model
    /// (`retry_after_max`).
    pub retry_after_max: Duration,
    /// Whether a timeout after the request went out is retried on the same
    /// model (`retry_timeouts`): off, since the generation may be billed.
    pub retry_timeouts: bool,
}

impl Default for SameModelRetry {
    fn default() -> Self {
        SameModelRetry {
            retries: DEFAULT_RETRY_BEFORE_FALLBACK,
            retry_after_max: DEFAULT_RETRY_AFTER_MAX,
            retry_timeouts: false,
        }
    }
}

/// Why a link is retried on its own model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SameModelReason {
    /// The provider said when to come back, soon enough.
    RetryAfter,
    /// A one-off fault (a 5xx, a reset before any byte).
    Transient,
    /// A timeout, retried because the binding says so.
    Timeout,
}

impl SameModelReason {
    /// Its name in events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            SameModelReason::RetryAfter => "retry_after",
            SameModelReason::Transient => "transient",
            SameModelReason::Timeout => "timeout",
        }
    }
}

/// What a link does after a failure, with a fallback after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SameModel {
    /// Ask the same model again after `delay`.
    Retry {
        /// The wait first (the server's `Retry-After`, or none).
        delay: Duration,
        /// Why.
        reason: SameModelReason,
    },
    /// Fall back now.
    MoveOn,
}

impl SameModelRetry {
    /// No same-model retry: a transient failure moves the chain on at once.
    pub const NONE: SameModelRetry = SameModelRetry {
        retries: 0,
        retry_after_max: Duration::ZERO,
        retry_timeouts: false,
    };

    /// Whether `failure`, after `done` same-model retries of this link, is
    /// retried on the same model, with `remaining` left of the link's
    /// deadline.
    ///
    /// A server wait must leave time after it (it is strictly less than
    /// `remaining`): a retry that starts at the deadline only fails later.
    pub fn decide(&self, failure: &Failure, done: u32, remaining: Duration) -> SameModel {
        if done >= self.retries || !failure.retryable() {
            return SameModel::MoveOn;
        }
        if let Some(wait) = failure.retry_after() {
            return if wait <= self.retry_after_max && wait < remaining {
                SameModel::Retry {
                    delay: wait,
                    reason: SameModelReason::RetryAfter,
                }
            } else {
                SameModel::MoveOn
            };
        }
        match failure.category() {
            // No word on when: another model is likelier to answer.
            Category::RateLimited | Category::Overloaded => SameModel::MoveOn,
            Category::Timeout if self.retry_timeouts => SameModel::Retry {
                delay: Duration::ZERO,
                reason: SameModelReason::Timeout,
            },
            Category::Timeout => SameModel::MoveOn,
            // A transient failure after the answer began (tokens spent) is
            // a generation that may be billed: as a timeout.
            Category::Transient
                if failure.tokens_spent() > 0 && failure.effect() != Effect::NotApplied =>
            {
                if self.retry_timeouts {
                    SameModel::Retry {
                        delay: Duration::ZERO,
                        reason: SameModelReason::Timeout,
                    }
                } else {
                    SameModel::MoveOn
                }
            }
            Category::Transient => SameModel::Retry {
                delay: Duration::ZERO,
                reason: SameModelReason::Transient,
            },
            _ => SameModel::MoveOn,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PLENTY: Duration = Duration::from_secs(60);

    fn limited(wait: u64) -> Failure {
        Failure::new("p", Category::RateLimited).with_retry_after(Duration::from_secs(wait))
    }

    #[test]
    fn a_short_retry_after_that_fits_is_waited_out_on_the_same_model() {
        let policy = SameModelRetry::default();
        assert_eq!(
            policy.decide(&limited(1), 0, PLENTY),
            SameModel::Retry {
                delay: Duration::from_secs(1),
                reason: SameModelReason::RetryAfter
            }
        );
    }

    #[test]
    fn a_long_retry_after_or_one_beyond_the_deadline_moves_on() {
        let policy = SameModelRetry::default();
        assert_eq!(policy.decide(&limited(6), 0, PLENTY), SameModel::MoveOn);
        assert_eq!(
            policy.decide(&limited(2), 0, Duration::from_secs(2)),
            SameModel::MoveOn
        );
    }

    #[test]
    fn a_429_without_retry_after_moves_on() {
        let f = Failure::new("p", Category::RateLimited);
        assert_eq!(
            SameModelRetry::default().decide(&f, 0, PLENTY),
            SameModel::MoveOn
        );
    }

    #[test]
    fn a_single_5xx_is_retried_once_then_moves_on() {
        let f = Failure::new("p", Category::Transient).with_effect(Effect::MaybeApplied);
        let policy = SameModelRetry::default();
        assert_eq!(
            policy.decide(&f, 0, PLENTY),
            SameModel::Retry {
                delay: Duration::ZERO,
                reason: SameModelReason::Transient
            }
        );
        assert_eq!(policy.decide(&f, 1, PLENTY), SameModel::MoveOn);
    }

    #[test]
    fn a_timeout_is_not_resent_unless_the_binding_says_so() {
        let f = Failure::new("p", Category::Timeout).with_effect(Effect::MaybeApplied);
        assert_eq!(
            SameModelRetry::default().decide(&f, 0, PLENTY),
            SameModel::MoveOn
        );
        let resend = SameModelRetry {
            retry_timeouts: true,
            ..SameModelRetry::default()
        };
        assert!(matches!(
            resend.decide(&f, 0, PLENTY),
            SameModel::Retry {
                reason: SameModelReason::Timeout,
                ..
            }
        ));
    }

    #[test]
    fn a_failure_that_spent_tokens_is_not_resent() {
        let f = Failure::new("p", Category::Transient)
            .with_effect(Effect::MaybeApplied)
            .with_tokens_spent(40);
        assert_eq!(
            SameModelRetry::default().decide(&f, 0, PLENTY),
            SameModel::MoveOn
        );
    }

    #[test]
    fn none_and_permanent_failures_always_move_on() {
        let f = Failure::new("p", Category::Transient);
        assert_eq!(
            SameModelRetry::NONE.decide(&f, 0, PLENTY),
            SameModel::MoveOn
        );
        let auth = Failure::new("p", Category::Unauthorized);
        assert_eq!(
            SameModelRetry::default().decide(&auth, 0, PLENTY),
            SameModel::MoveOn
        );
    }
}

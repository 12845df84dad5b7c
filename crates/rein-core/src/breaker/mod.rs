//! Circuit breakers: closed / open / half-open, with hysteresis, in
//! independent arms per provider, tool, resource group and cost account.
//!
//! # Why
//!
//! When a target fails persistently, every further call spends deadline,
//! budget and the target's recovery capacity for nothing. A breaker notices
//! (N consecutive counted failures, or a failure ratio over a sliding window
//! with a minimum throughput), refuses calls for a break duration — the
//! model gets a `circuit_open` [`Failure`](crate::Failure) with
//! `retry_after`, and no call is made (invariant 6) — then lets a bounded
//! number of probes decide between closing and reopening. Closing requires a
//! clearly better failure ratio than the one that opened the arm
//! (`close_below < open_at`), so an arm near its threshold does not flap.
//!
//! In the guarded call the breaker is outermost (seed 002): before the
//! idempotency lookup and the retry loop.
//!
//! # Use
//!
//! The engine reads the clock once, then:
//!
//! 1. [`Breakers::admit`] (or [`Breaker::admit`]) → an [`Admission`]: a
//!    [`Permit`] or a rejection ([`Admit::into_result`] gives the
//!    `circuit_open` failure), plus a [`Transition`] to record;
//! 2. makes the call;
//! 3. reports its outcome with the permit — `on_success`, `on_failure`
//!    (judged by [`Category::counts_for_breaker`](crate::Category)) or
//!    `on_ignored` for a cancelled call — and records the returned
//!    [`Transition`] as the event `breaker.{kind}.{name}`
//!    ([`ArmKey::event_name`]) with its [`OpenReason`].
//!
//! Nothing here reads the clock, sleeps, locks or allocates per call.
//!
//! # Defaults
//!
//! | constant | value |
//! | --- | --- |
//! | [`DEFAULT_CONSECUTIVE_FAILURES`] | 5 |
//! | [`DEFAULT_OPEN_AT`] | 0.6 (ratio trigger off by default) |
//! | [`DEFAULT_CLOSE_BELOW`] | 0.2 |
//! | [`DEFAULT_WINDOW`] | 60 s |
//! | [`DEFAULT_MIN_THROUGHPUT`] | 20 |
//! | [`DEFAULT_BREAK_DURATION`] | 30 s |
//! | [`DEFAULT_HALF_OPEN_PROBES`] | 3 |
//! | [`DEFAULT_CLOSE_AFTER_SUCCESSES`] | 2 |
//! | [`DEFAULT_HALF_OPEN_MAX_WAIT`] | 120 s |
//! | [`DEFAULT_COST_CONSECUTIVE_FAILURES`] | 3 (cost arms) |
//! | [`DEFAULT_COST_BREAK_DURATION`] | 120 s (cost arms) |
//! | [`WINDOW_BUCKETS`] | 10 |

mod arms;
mod config;
mod constants;
mod state;
mod transition;
mod window;

pub use arms::{ArmKey, ArmKind, Breakers};
pub use config::{BreakerConfig, BreakersConfig, FailureRatioConfig};
pub use constants::{
    DEFAULT_BREAK_DURATION, DEFAULT_CLOSE_AFTER_SUCCESSES, DEFAULT_CLOSE_BELOW,
    DEFAULT_CONSECUTIVE_FAILURES, DEFAULT_COST_BREAK_DURATION, DEFAULT_COST_CONSECUTIVE_FAILURES,
    DEFAULT_HALF_OPEN_MAX_WAIT, DEFAULT_HALF_OPEN_PROBES, DEFAULT_MIN_THROUGHPUT, DEFAULT_OPEN_AT,
    DEFAULT_WINDOW, WINDOW_BUCKETS,
};
pub use state::{Admission, Admit, Breaker, Permit};
pub use transition::{BreakerState, OpenReason, Transition};

//! What a breaker reports: its [`BreakerState`], each [`Transition`] and the
//! [`OpenReason`] behind an opening, all serializable for the event stream.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::clock::Instant;

/// The state of a breaker arm, as events and metrics see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    /// Calls flow; outcomes are counted.
    Closed,
    /// Every call is refused until the break duration has passed.
    Open,
    /// A bounded number of probe calls decide between closing and reopening.
    HalfOpen,
}

impl BreakerState {
    /// The state's name as it appears in events and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A change of state, with the rationale the event stream records.
///
/// Serialized with a `transition` tag: `{"transition": "opened", "reason":
/// {"kind": "consecutive_failures", "count": 5, "threshold": 5}, …}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "transition", rename_all = "snake_case")]
#[must_use = "a transition is an event to record"]
#[non_exhaustive]
pub enum Transition {
    /// Nothing changed.
    Unchanged,
    /// The arm opened (from closed or half-open) and refuses every call
    /// until `until`.
    Opened {
        /// Why it opened, with the counts that decided.
        reason: OpenReason,
        /// When it will admit probes again, on this process's clock.
        ///
        /// Not written to events (schema 2): an instant of one process's
        /// monotonic clock means nothing to a reader elsewhere — the
        /// event's `at_ms` plus `break_duration` says when. A transition
        /// read back from an event holds the clock's origin here.
        #[serde(skip_serializing, default = "origin")]
        until: Instant,
        /// The break it started (`until - now`).
        #[serde(with = "humantime_serde")]
        break_duration: Duration,
    },
    /// The break duration passed; the arm admits up to `probes` probes.
    HalfOpened {
        /// How long the arm was open.
        #[serde(with = "humantime_serde")]
        open_for: Duration,
        /// Probes it admits in this half-open period.
        probes: u32,
    },
    /// Enough probes succeeded; calls flow again with fresh counts.
    Closed {
        /// Probes that succeeded in the half-open period.
        probe_successes: u32,
        /// Probes that failed (counted failures) in the half-open period.
        probe_failures: u32,
    },
}

/// What a transition read back holds for an instant it was not given.
fn origin() -> Instant {
    Instant::ORIGIN
}

impl Transition {
    /// Whether the state changed.
    pub fn is_change(&self) -> bool {
        !matches!(self, Transition::Unchanged)
    }

    /// Its name as the event stream writes it (the `transition` tag):
    /// `unchanged`, `opened`, `half_opened` or `closed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Transition::Unchanged => "unchanged",
            Transition::Opened { .. } => "opened",
            Transition::HalfOpened { .. } => "half_opened",
            Transition::Closed { .. } => "closed",
        }
    }

    /// The state the arm is in after this transition, or `None` when
    /// unchanged.
    pub fn state_after(&self) -> Option<BreakerState> {
        match self {
            Transition::Unchanged => None,
            Transition::Opened { .. } => Some(BreakerState::Open),
            Transition::HalfOpened { .. } => Some(BreakerState::HalfOpen),
            Transition::Closed { .. } => Some(BreakerState::Closed),
        }
    }
}

impl fmt::Display for Transition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Transition::Unchanged => f.write_str("unchanged"),
            Transition::Opened {
                reason,
                break_duration,
                ..
            } => write!(f, "opened for {break_duration:?}: {reason}"),
            Transition::HalfOpened { open_for, probes } => write!(
                f,
                "half-opened after {open_for:?} open; admitting up to {probes} probes"
            ),
            Transition::Closed {
                probe_successes,
                probe_failures,
            } => write!(
                f,
                "closed after {probe_successes} probe successes and {probe_failures} probe failures"
            ),
        }
    }
}

/// Why an arm opened, with the numbers that decided it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum OpenReason {
    /// `count` counted failures in a row reached `threshold`.
    ConsecutiveFailures {
        /// Counted failures in a row.
        count: u32,
        /// The configured `consecutive_failures`.
        threshold: u32,
    },
    /// The failure ratio over the sliding window reached `open_at` with at
    /// least the minimum throughput.
    FailureRatio {
        /// Counted failures in the window.
        failures: u32,
        /// Counted outcomes in the window.
        total: u32,
        /// `failures / total`.
        ratio: f64,
        /// The configured threshold.
        open_at: f64,
        /// The window's length.
        #[serde(with = "humantime_serde")]
        window: Duration,
        /// The configured minimum throughput.
        min_throughput: u32,
    },
    /// A half-open probe failed (without a ratio trigger), or the probes'
    /// failure ratio reached `open_at` (with one).
    ProbeFailed {
        /// Probe successes so far in the period.
        successes: u32,
        /// Probe failures so far in the period, including this one.
        failures: u32,
    },
    /// Every probe of the period reported, yet too few succeeded or the
    /// failure ratio stayed at or above `close_below` (hysteresis).
    ProbesInconclusive {
        /// Probe successes in the period.
        successes: u32,
        /// Probe failures in the period.
        failures: u32,
        /// The configured `close_after_successes`.
        needed_successes: u32,
    },
    /// Every probe slot was taken and no verdict came within
    /// `half_open_max_wait`: the probes hang or their outcomes were lost.
    ProbesUnanswered {
        /// Probe slots taken.
        admitted: u32,
        /// Probes that reported.
        reported: u32,
        /// How long the half-open period lasted.
        #[serde(with = "humantime_serde")]
        waited: Duration,
    },
}

impl fmt::Display for OpenReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OpenReason::ConsecutiveFailures { count, threshold } => write!(
                f,
                "{count} consecutive failures reached the threshold of {threshold}"
            ),
            OpenReason::FailureRatio {
                failures,
                total,
                ratio,
                open_at,
                window,
                ..
            } => write!(
                f,
                "{failures} of {total} calls failed in the last {window:?} \
                 (ratio {ratio:.2}, threshold {open_at})"
            ),
            OpenReason::ProbeFailed {
                successes,
                failures,
            } => write!(
                f,
                "half-open probe failed ({successes} probe successes, {failures} probe failures)"
            ),
            OpenReason::ProbesInconclusive {
                successes,
                failures,
                needed_successes,
            } => write!(
                f,
                "half-open probes inconclusive ({successes} successes of {needed_successes} \
                 needed, {failures} failures)"
            ),
            OpenReason::ProbesUnanswered {
                admitted,
                reported,
                waited,
            } => write!(
                f,
                "only {reported} of {admitted} half-open probes reported within {waited:?}"
            ),
        }
    }
}

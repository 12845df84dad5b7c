use std::fmt;

use serde::{Deserialize, Serialize};

use super::digest::{FailureSignature, StateDigest};
use crate::deadline::Exhausted;

/// Why the loop guard stopped a run: the typed reason the engine turns into an
/// explicit outcome and an event.
///
/// Each variant carries the rationale of the decision — the count that was
/// reached and the setting it exceeded — so the event explains itself.
/// Serialized with a `reason` tag in snake_case:
///
/// ```json
/// {"reason": "repeat_failure", "tool": "run_sql", "signature": "…",
///  "error": "lock timeout on row <n>", "count": 3, "threshold": 2}
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Trip {
    /// Shape three: a ceiling of the triple budget — steps, tokens, cost or
    /// wall clock — is reached, and the run ends explicitly rather than
    /// being truncated silently.
    #[serde(rename = "budget_exhausted")]
    Budget(Exhausted),
    /// Shape one: the same action with the same arguments on the same state,
    /// more than `max` times.
    RepeatedAction {
        /// The tool called.
        tool: String,
        /// The state the action was repeated on.
        digest: StateDigest,
        /// How many times the action was seen on that state.
        count: u32,
        /// The setting exceeded: `loop_guard.max_repeats`.
        max: u32,
    },
    /// Shape two: the state digest did not change over `window` consecutive
    /// steps, whatever the actions were.
    NoProgress {
        /// The setting reached: `loop_guard.no_progress_window`.
        window: u32,
        /// The state the run stood still on.
        digest: StateDigest,
    },
    /// The same tool failed with the same normalized error more than
    /// `threshold` times.
    RepeatFailure {
        /// The tool that failed.
        tool: String,
        /// The signature over the tool and the normalized error.
        signature: FailureSignature,
        /// The normalized error text (ids, times and numbers collapsed).
        error: String,
        /// How many times the signature was seen.
        count: u32,
        /// The setting exceeded: `loop_guard.repeat_failure_threshold`.
        threshold: u32,
    },
}

impl Trip {
    /// The trip's name as it appears in events and metrics labels.
    pub fn as_str(&self) -> &'static str {
        match self {
            Trip::Budget(_) => "budget_exhausted",
            Trip::RepeatedAction { .. } => "repeated_action",
            Trip::NoProgress { .. } => "no_progress",
            Trip::RepeatFailure { .. } => "repeat_failure",
        }
    }
}

impl fmt::Display for Trip {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trip::Budget(exhausted) => write!(f, "budget: {exhausted}"),
            Trip::RepeatedAction {
                tool, count, max, ..
            } => write!(
                f,
                "repeated action: `{tool}` was called {count} times with the same arguments \
                 on the same state (at most {max} allowed)"
            ),
            Trip::NoProgress { window, digest } => write!(
                f,
                "no progress: the state did not change over {window} consecutive steps \
                 (state {digest}); the information at hand is not enough to go on"
            ),
            Trip::RepeatFailure {
                tool,
                error,
                count,
                threshold,
                ..
            } => write!(
                f,
                "repeat failure: `{tool}` failed {count} times with the same error \
                 \"{error}\" (at most {threshold} allowed)"
            ),
        }
    }
}

/// What [`LoopGuard::observe`](super::LoopGuard::observe) decided about a
/// step.
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum Verdict {
    /// No rule tripped: the run may take another step.
    Continue,
    /// A rule tripped: the run must end with an explicit outcome.
    Trip(Trip),
}

impl Verdict {
    /// Whether a rule tripped.
    pub fn is_trip(&self) -> bool {
        matches!(self, Verdict::Trip(_))
    }
}

/// What [`LoopGuard::on_failure`](super::LoopGuard::on_failure) decided about
/// a failed call.
///
/// ```text
///   failures of the tool ≤ allowance   → Allowed { remaining }
///   failures = allowance + 1           → ToolDisabled      (once)
///   failures > allowance + 1           → AlreadyDisabled
///   same signature > threshold times   → Trip(RepeatFailure)  (wins over the above)
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
#[non_exhaustive]
pub enum FailureVerdict {
    /// The model may try to fix the failure itself.
    Allowed {
        /// Further failures of this tool that still leave it available; 0
        /// means the next failure disables it.
        remaining: u32,
    },
    /// This failure used up the tool's self-heal allowance: the tool is
    /// unavailable for the rest of the run and the model must take another
    /// path. Returned once per tool.
    ToolDisabled {
        /// The tool disabled.
        tool: String,
        /// Its failures in this run.
        failures: u32,
        /// Its allowance: `loop_guard.self_heal_allowance` or its override.
        allowance: u32,
    },
    /// The tool was already disabled; the call should not have been made.
    AlreadyDisabled {
        /// Its failures in this run.
        failures: u32,
    },
    /// The same failure recurred too often: the run must end.
    Trip(Trip),
}

impl FailureVerdict {
    /// Whether a rule tripped.
    pub fn is_trip(&self) -> bool {
        matches!(self, FailureVerdict::Trip(_))
    }
}

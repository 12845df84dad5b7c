//! Why a run could not start (a run that started ends in a report).

use rein_core::{ConfigError, RunId};
use rein_store::StoreError;

/// A run that could not start (a run that started always ends in a report).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The store refused to record the run.
    #[error("cannot record the run: {0}")]
    Store(#[from] StoreError),
    /// A setting was invalid.
    #[error("invalid setting: {0}")]
    Config(#[from] ConfigError),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    Http(String),
    /// Traces could not be set up (`[telemetry]`).
    #[error("cannot set up traces: {0}")]
    Telemetry(#[from] crate::telemetry::TelemetryError),
    /// rein failed the run before it was recorded, or cannot record its
    /// end (a panic inside it was caught; see the run's boundary).
    #[error(
        "run {run_id} failed inside rein ({}): {message}",
        rein_core::report::INTERNAL
    )]
    Internal {
        /// The run.
        run_id: RunId,
        /// What failed.
        message: String,
    },
    /// The run cannot be started or resumed here: it is finished, driven by
    /// a live process, of another agent, or its stored state does not
    /// decode (the reason names the field: a resume never continues with a
    /// default in place of what was stored).
    #[error("run {run_id} cannot be resumed: {reason}")]
    NotResumable {
        /// The run.
        run_id: RunId,
        /// Why.
        reason: String,
    },
    /// The run is to be resumed by sending again an action that was
    /// refused for a time (its `Retry-After`, an open breaker's
    /// cooldown), and that time has not passed: resuming now would only be
    /// refused again. Resume it after `left`, or with
    /// [`RetryTiming::Now`](super::RetryTiming::Now).
    #[error(
        "run {run_id} is not due yet: {tool} was refused for a time, and {} of it remain",
        humantime_fmt(*left)
    )]
    NotYet {
        /// The run.
        run_id: RunId,
        /// The tool whose wait is the longest.
        tool: String,
        /// How long is left.
        left: std::time::Duration,
    },
}

/// `d` for a human, to the second.
fn humantime_fmt(d: std::time::Duration) -> String {
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{s}s"),
        (0, _) => format!("{m}m {s}s"),
        _ => format!("{h}h {m}m {s}s"),
    }
}

//! Checkpoints: [`Checkpoint`].

use rein_core::deadline::Usage;
use rein_core::{IntentId, RunId};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The state of a run after a step, from which a resume continues.
///
/// One per (run, step); writing the same step again replaces it, so an
/// engine that re-runs the tail of a step after a crash simply overwrites.
///
/// # Why it holds what it holds
///
/// A resume must neither repeat a completed step (invariant 8) nor forget
/// what it consumed (invariant 2): so the transcript, the intents already
/// completed, and the budget consumed so far. `messages` and `state` are
/// opaque to the store; the engine owns their shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The run.
    pub run_id: RunId,
    /// The step it follows.
    pub step: u32,
    /// The transcript as the engine keeps it.
    pub messages: Value,
    /// Intents that completed and must not run again.
    pub completed_intents: Vec<IntentId>,
    /// Budget consumed so far.
    pub consumed: Usage,
    /// Wall-clock time consumed so far, in milliseconds.
    pub elapsed_ms: u64,
    /// Engine-opaque extras (loop-guard state, breaker snapshots, ...).
    pub state: Value,
    /// When written, ms since the Unix epoch.
    pub at_ms: u64,
}

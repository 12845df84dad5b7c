//! What a step makes durable for a resume: what it added to the transcript,
//! its calls' results, the loop guard's new progress inputs, and the
//! model's position.
//!
//! # Why a delta
//!
//! The transcript and the calls only grow, so a step appends what it added
//! ([`CheckpointDelta`]) instead of writing them whole: a step serialises
//! and writes `O(step size)` bytes however long the run is, where the whole
//! form made a run of `n` steps write `O(n²)` (see `rein_store`'s
//! checkpoint module for the store's side, and why not a delta with a
//! periodic compaction). The store rebuilds the whole [`Checkpoint`] from
//! the deltas when a resume reads it, so `restore` decodes one form only,
//! whether the run was checkpointed whole (by a release before deltas) or
//! step by step.
//!
//! [`Checkpoint`]: rein_store::Checkpoint

use rein_core::Timestamp;
use std::collections::BTreeMap;

use rein_core::{Instant, RunId};
use rein_store::CheckpointDelta;
use serde_json::{Map, Value, json};

use super::guarded::millis;
use super::step::LoopState;

/// How much of the loop state the run's checkpoint already holds: the
/// transcript and the calls up to these lengths.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Checkpointed {
    /// Messages of the transcript checkpointed.
    pub(super) messages: usize,
    /// Calls checkpointed.
    pub(super) calls: usize,
}

impl Checkpointed {
    /// Everything `state` holds: its checkpoint is durable.
    pub(super) fn all_of(state: &LoopState) -> Checkpointed {
        Checkpointed {
            messages: state.messages.len(),
            calls: state.calls.len(),
        }
    }
}

/// What `state`'s last step adds to the run's checkpoint, taken at `now`
/// (`at_ms` on the wall clock), with `provider_calls` model calls served so
/// far: the messages and calls after `state.checkpointed`, and the facts
/// (`learned`) and tools (`tried`) the step recorded first.
// NOTE: `restore::decode` reads back every field written here, once the
// store has applied the deltas; they change together. Every `state` member
// `decode` requires is written by every delta (an empty list is a few
// bytes), so that the first delta of a run is a whole checkpoint on its
// own.
pub(super) fn delta(
    run_id: &RunId,
    state: &LoopState,
    learned: &[String],
    tried: &[String],
    provider_calls: u32,
    now: Instant,
    at_ms: Timestamp,
) -> CheckpointDelta {
    let since = state.checkpointed;
    let messages = state.messages.get(since.messages..).unwrap_or_default();
    let calls = state.calls.get(since.calls..).unwrap_or_default();
    CheckpointDelta {
        run_id: run_id.clone(),
        step: state.step,
        messages: messages.iter().map(|m| json!(m)).collect(),
        completed_intents: calls
            .iter()
            .filter(|c| c.outcome.is_ok())
            .map(|c| c.planned.intent_id.clone())
            .collect(),
        // What a resume needs besides the transcript: every call's result
        // (for the report) and the loop guard's progress inputs...
        appended: BTreeMap::from([
            ("calls".to_owned(), calls.iter().map(|c| json!(c)).collect()),
            (
                "facts".to_owned(),
                learned.iter().map(|f| json!(f)).collect(),
            ),
            (
                "tools_tried".to_owned(),
                tried.iter().map(|t| json!(t)).collect(),
            ),
        ]),
        // ...and how many model calls were served.
        state: Map::from_iter([("provider_calls".to_owned(), Value::from(provider_calls))]),
        consumed: state.budget.used(),
        elapsed_ms: state.elapsed_before_ms + millis(now.saturating_duration_since(state.started)),
        at_ms,
    }
}

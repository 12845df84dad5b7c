//! What a step makes durable for a resume: the transcript, every call's
//! result, the loop guard's progress inputs and the model's position.

use rein_core::{Instant, RunId};
use rein_store::Checkpoint;
use serde_json::json;

use super::guarded::millis;
use super::step::LoopState;

/// The checkpoint of `state`'s last step, taken at `now` (`at_ms` on the
/// wall clock), with `provider_calls` model calls served so far.
// NOTE: `restore::decode` reads back every field written here; they
// change together.
pub(super) fn checkpoint(
    run_id: &RunId,
    state: &LoopState,
    provider_calls: u32,
    now: Instant,
    at_ms: u64,
) -> Checkpoint {
    Checkpoint {
        run_id: run_id.clone(),
        step: state.step,
        messages: json!(state.messages),
        completed_intents: state
            .calls
            .iter()
            .filter(|c| c.outcome.is_ok())
            .map(|c| c.planned.intent_id.clone())
            .collect(),
        consumed: state.budget.used(),
        elapsed_ms: state.elapsed_before_ms + millis(now.saturating_duration_since(state.started)),
        // What a resume needs besides the transcript: every call's
        // result (for the report), the loop guard's progress inputs, and
        // how many model calls were served.
        state: json!({
            "calls": state.calls,
            "facts": state.facts,
            "tools_tried": state.tools_tried,
            "provider_calls": provider_calls,
        }),
        at_ms,
    }
}

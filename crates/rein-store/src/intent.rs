//! Planned intents: [`PlannedIntent`].

use rein_core::IntentId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One call the model planned, with the intent id rein assigned to it.
///
/// # Why it is persisted
///
/// The intent id is what the idempotency key binds to. It must survive a
/// crash so that a resumed run reuses it (invariant 8) and a retried write
/// carries the same key; a fresh id on resume would make the target see a
/// new action and apply it twice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedIntent {
    /// The id rein assigned.
    pub intent_id: IntentId,
    /// Its position in the model's turn, from 0.
    pub ordinal: u32,
    /// The model's id for the tool call, needed to answer it in the
    /// transcript.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The arguments the model proposed.
    pub args: Value,
}

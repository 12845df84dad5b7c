//! One guarded call as a run remembers it: what was planned ([`Planned`])
//! and what became of it ([`CallResult`]).
//!
//! # Why in the core
//!
//! A run's calls are the facts its report is derived from, together with
//! the ledger (see [`crate::report`]). They are written into every
//! checkpoint, so whoever closes or re-derives a run's report later (the
//! orphan scan, the dead-letter path, the reconciler) reads the same type
//! the run loop wrote.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::failure::Failure;
use crate::ids::IntentId;
use crate::ledger::LedgerStatus;
use crate::tool::ToolClass;

/// A call the model planned and rein validated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Planned {
    /// Its intent id, persisted before anything runs.
    pub intent_id: IntentId,
    /// The model's id for the call.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The validated arguments.
    pub args: Value,
    /// The step that planned it.
    pub step: u32,
    /// Its position among the turn's proposed calls; the reply goes there.
    pub position: usize,
    /// Whether its arguments were salvaged from cut-off JSON (reads only).
    pub salvaged: bool,
}

/// What became of one guarded call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallResult {
    /// The call.
    pub planned: Planned,
    /// The tool's class.
    pub class: ToolClass,
    /// Its result, or the failure rein gave up with.
    pub outcome: Result<Value, Failure>,
    /// Its ledger status when the call ended, for calls with side effects
    /// (the ledger may have moved on since: a report reads the ledger).
    pub ledger: Option<LedgerStatus>,
    /// Attempts made.
    pub attempts: u32,
}

impl CallResult {
    /// A call refused before any attempt.
    pub fn refused(planned: Planned, class: ToolClass, failure: Failure) -> Self {
        CallResult {
            planned,
            class,
            outcome: Err(failure),
            ledger: None,
            attempts: 0,
        }
    }
}

//! The handoff package: everything a human needs to take over a run that
//! automation had to stop.
//!
//! # Why
//!
//! Handoff quality decides the cost of a human takeover (seed 000, "What the
//! Handoff Package Should Contain"): a timeline of what happened, what is
//! certain and what is not, which strategies were tried, and — the item most
//! often dropped — which actions may still be running, so the person taking
//! over does not duplicate them.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::idempotency::Normalizer;

use crate::ids::{IntentId, RunId};
use crate::ledger::LedgerStatus;
use crate::registry::SideEffectTier;

/// One action of the run, as the timeline shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineEntry {
    /// The step that planned it.
    pub step: u32,
    /// The planned action.
    pub intent_id: IntentId,
    /// The tool.
    pub tool: String,
    /// A digest of its input (16 hex characters of SHA-256 over the
    /// canonical arguments), so inputs can be matched without exposing them.
    pub input_digest: String,
    /// Its ledger status, for calls with side effects.
    pub ledger: Option<LedgerStatus>,
    /// The result's key fields, or the failure's reason.
    pub result: Value,
}

/// A side effect whose state a human must know or decide.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EffectState {
    /// The planned action.
    pub intent_id: IntentId,
    /// The tool.
    pub tool: String,
    /// Its ledger status.
    pub status: LedgerStatus,
    /// What is known, in words.
    pub note: String,
    /// Who answers for the tool (its `owner`): whom to call about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// How visible the tool's effect is outside (its `side_effect_tier`):
    /// how urgently it must be looked at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side_effect_tier: Option<SideEffectTier>,
}

/// Who answers for a tool and how visible its effect is, as its config
/// declares: what a handoff package names beside each of the tool's
/// effects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolOwner {
    /// The tool's `owner`.
    pub owner: String,
    /// The tool's `side_effect_tier`.
    pub side_effect_tier: SideEffectTier,
}

/// An action that may still be running, with what holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    /// The planned action, if known.
    pub intent_id: Option<IntentId>,
    /// What it is (a tool call, a process group).
    pub what: String,
    /// Whether it might still be running.
    pub may_be_running: bool,
    /// What to do first.
    pub advice: String,
}

/// The package handed to a human when a run ends `handed_off`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffPackage {
    /// The run.
    pub run_id: RunId,
    /// The agent.
    pub agent: String,
    /// The task it was given.
    pub input: String,
    /// Why automation stopped.
    pub reason: String,
    /// Every action, in order.
    pub timeline: Vec<TimelineEntry>,
    /// Effects known to have happened or known not to have.
    pub certain: Vec<EffectState>,
    /// Effects whose state is unknown.
    pub uncertain: Vec<EffectState>,
    /// What rein already tried (retries, lookups by key, compensations).
    pub strategies_tried: Vec<String>,
    /// What rein did not try, and why.
    pub strategies_not_tried: Vec<String>,
    /// Actions that may still be running.
    pub in_flight: Vec<InFlight>,
    /// Ledger records that wait for a human decision.
    pub awaiting_decision: Vec<EffectState>,
}

/// The 16-hex-character digest of canonical arguments (SHA-256 over their
/// canonical JSON), for timelines: inputs can be matched without being
/// exposed.
pub fn input_digest(args: &Value) -> String {
    let canonical = Normalizer::default().canonical_json(args);
    Sha256::digest(&canonical)
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A human's decision on a ledger record that awaited one (issue 33's
/// "handoff decisions"): what the person taking over found or did.
///
/// # Why four
///
/// A record awaits a human because automation could not conclude it
/// (seed 000, "When You Must Hand Over to a Human"). The human either
/// settles it from what they know (`undone` by hand, `accepted` as it
/// stands) or asks rein to act on it with the machinery the run had: its
/// registered compensation (`compensate`), or the call again under its
/// original key (`retry`), which only an idempotent write can take
/// without risking a second effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// The human undid the effect by hand: the record is `compensated`.
    Undone,
    /// The effect stands: the record is `accepted`.
    Accepted,
    /// Run the tool's registered compensation now; once it worked the
    /// record is `compensated`.
    Compensate,
    /// Send the call again with its recorded arguments under its original
    /// idempotency key (idempotent writes only); once it answered the
    /// record is `accepted`, with the result.
    Retry,
}

impl Decision {
    /// Every decision, in the order help texts list them.
    pub const ALL: [Decision; 4] = [
        Decision::Undone,
        Decision::Accepted,
        Decision::Compensate,
        Decision::Retry,
    ];

    /// The decision's name on the wire and in the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Undone => "undone",
            Decision::Accepted => "accepted",
            Decision::Compensate => "compensate",
            Decision::Retry => "retry",
        }
    }

    /// The status the record ends in once the decision is applied.
    pub fn settles_as(self) -> LedgerStatus {
        match self {
            Decision::Undone | Decision::Compensate => LedgerStatus::Compensated,
            Decision::Accepted | Decision::Retry => LedgerStatus::Accepted,
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

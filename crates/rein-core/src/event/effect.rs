//! Payloads of the effect layer: the ledger, settlement, compensation and
//! the handoff to a human.

use serde::{Deserialize, Serialize};

use crate::handoff::Decision;
use crate::ids::IntentId;
use crate::ledger::LedgerStatus;
use crate::outcome::{FailurePolicy, Outcome};
use crate::registry::CompensationGrade;
use crate::tool::ToolClass;

/// `ledger_recorded`: a side effect was declared or its record changed
/// status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRecorded {
    /// The record's new status.
    pub status: LedgerStatus,
    /// The tool, when the writer names it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The tool's class, on the `pending` declaration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ToolClass>,
    /// Attempts made, on the mark after the call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Why, when settlement marked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Who marked it from outside the run (`reconciler`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// Why, when marked from outside the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl LedgerRecorded {
    /// A record now `status`, with nothing else to say.
    pub fn new(status: LedgerStatus) -> Self {
        LedgerRecorded {
            status,
            tool: None,
            class: None,
            attempts: None,
            note: None,
            by: None,
            reason: None,
        }
    }
}

/// `settlement_started`: the run's effects are being settled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SettlementStarted {
    /// The agent's `on_failure` policy.
    pub policy: FailurePolicy,
    /// Whether an irreversible effect is among the open ones.
    pub irreversible_open: bool,
    /// Records still open.
    pub open_records: usize,
    /// Whether some record already waits for a human.
    pub already_with_a_human: bool,
    /// Child runs settled with it.
    pub child_runs: usize,
}

/// `compensation_started`: compensation of one effect began (durable
/// before the call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompensationStarted {
    /// The forward tool whose effect is undone.
    pub tool: String,
    /// The tool that undoes it.
    pub compensation_tool: String,
    /// How precisely it undoes it.
    pub grade: CompensationGrade,
    /// The forward record's position in the ledger.
    pub forward_seq: u64,
    /// The compensation's own intent.
    pub compensation_intent: IntentId,
}

/// `compensation_finished`: compensation of one effect ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompensationFinished {
    /// The forward tool.
    pub tool: String,
    /// The record's status now: compensated, uncompensatable or manual.
    pub status: LedgerStatus,
    /// What happened, for a human.
    pub note: String,
    /// The tool that undid it, when one was called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compensation_tool: Option<String>,
    /// Its attempts, when one was called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// Set (`true` for `uncompensatable`) when an operator must look.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<bool>,
}

/// What a handoff package holds, counted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffSummary {
    /// Why automation stopped.
    pub reason: String,
    /// Records awaiting a human's decision.
    pub awaiting_decision: usize,
    /// Effects whose state is uncertain.
    pub uncertain: usize,
}

/// `handoff_created`: the run was handed to a human; the package is in its
/// report. `null` on the wire when the report carried no package.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct HandoffCreated {
    /// The package, counted.
    pub package: Option<HandoffSummary>,
}

/// `handoff_decided`: a human decided a ledger record that awaited one.
/// Stored in the commit that marks the record (or, when the decision asked
/// rein to act and the action failed, alone, with `failed` set and the
/// record unchanged).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandoffDecided {
    /// The tool whose effect was decided.
    pub tool: String,
    /// What the human decided.
    pub decision: Decision,
    /// Who decided: the API key's name, or the CLI's `--by`.
    pub by: String,
    /// Why, in the decider's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The record's status before the decision.
    pub from: LedgerStatus,
    /// The record's status now (`from` again when the action failed).
    pub status: LedgerStatus,
    /// Why the action the decision asked for (a compensation, a retry)
    /// failed; the record still awaits a decision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
    /// The outcome the run was closed with, when this decision was the
    /// last one a handed-off run awaited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub closed: Option<Outcome>,
}

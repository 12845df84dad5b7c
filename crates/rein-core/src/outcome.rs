//! Honest outcomes: how a run ended, and the machine-readable report of
//! everything that did and did not complete.
//!
//! # Why
//!
//! "Most of the operation completed" inside a `success` status lets the
//! caller advance its workflow and defers the inconsistency somewhere worse
//! (seed 000, "Report partial success honestly"). A run's [`Outcome`] is
//! `succeeded` only when every planned action completed; anything else comes
//! with a [`RunReport`] that lists completed and incomplete actions, says
//! whether a retry can run without repeating side effects, and recommends
//! what to do.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::deadline::Usage;
use crate::failure::Category;
use crate::handoff::HandoffPackage;
use crate::ids::IntentId;
use crate::ledger::LedgerStatus;

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every planned action completed and the model gave its answer.
    Succeeded,
    /// Some actions completed and some did not; the report says which.
    PartialSuccess,
    /// Nothing useful completed, or a failure made the result unusable.
    Failed,
    /// A ceiling (steps, tokens, cost, wall clock) was reached first.
    BudgetExhausted,
    /// The run was cancelled.
    Cancelled,
    /// Automation stopped and a human has the handoff package.
    HandedOff,
}

impl Outcome {
    /// The outcome's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::PartialSuccess => "partial_success",
            Outcome::Failed => "failed",
            Outcome::BudgetExhausted => "budget_exhausted",
            Outcome::Cancelled => "cancelled",
            Outcome::HandedOff => "handed_off",
        }
    }

    /// Reads a stored name.
    pub fn parse(text: &str) -> Option<Outcome> {
        Some(match text {
            "succeeded" => Outcome::Succeeded,
            "partial_success" => Outcome::PartialSuccess,
            "failed" => Outcome::Failed,
            "budget_exhausted" => Outcome::BudgetExhausted,
            "cancelled" => Outcome::Cancelled,
            "handed_off" => Outcome::HandedOff,
            _ => return None,
        })
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An action that completed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompletedAction {
    /// The planned action.
    pub intent_id: IntentId,
    /// The tool.
    pub tool: String,
    /// The key fields of the result.
    pub result: Value,
    /// Its ledger status (`None` for reads, which have no record).
    pub ledger: Option<LedgerStatus>,
}

/// An action that did not complete.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IncompleteAction {
    /// The planned action.
    pub intent_id: IntentId,
    /// The tool.
    pub tool: String,
    /// Why, as a category.
    pub category: Category,
    /// Why, for a human.
    pub reason: String,
    /// Its ledger status, if the call was declared.
    pub ledger: Option<LedgerStatus>,
    /// Whether it may have taken effect anyway.
    pub maybe_applied: bool,
}

/// The fixed, machine-readable report of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    /// How the run ended.
    pub outcome: Outcome,
    /// Actions that completed, with their key results.
    pub completed: Vec<CompletedAction>,
    /// Actions that did not complete, with category and reason.
    pub incomplete: Vec<IncompleteAction>,
    /// Whether a retry of the run can proceed without repeating side effects
    /// (completed writes are keyed and no effect is in doubt).
    pub recoverable: bool,
    /// What to do next.
    pub recommendation: String,
    /// One paragraph for a human.
    pub summary: String,
    /// The model's final answer, if it gave one.
    pub answer: Option<String>,
    /// What the run consumed.
    pub consumed: Usage,
    /// Wall-clock time the run took, in milliseconds.
    pub elapsed_ms: u64,
    /// Model turns taken.
    pub steps: u32,
    /// The models that answered the run's turns (`provider/model`), in the
    /// order first used: after a fallback, the model that really answered,
    /// never just the primary the agent names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// How the run's side effects were settled after a failure: each
    /// compensation and its result, in the order they ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compensations: Vec<CompensationResult>,
    /// The package for a human, whenever any of the run's records awaits
    /// one (always when the run ended `handed_off`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<HandoffPackage>,
    /// Set when the run was resumed after it stopped mid-way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume: Option<ResumeMarker>,
    /// What the report was derived from besides the ledger (why the run
    /// stopped, what its settlement concluded), so that it can be derived
    /// again when the ledger changes (see [`crate::report::derive`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<crate::report::ReportBasis>,
    /// What this report could not establish and says instead of hiding:
    /// e.g. a last checkpoint that could not be read, so its calls are
    /// listed from the ledger alone. Empty for a report with nothing to
    /// qualify (and in reports stored before notes existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<ReportNote>,
}

/// Something a report could not establish, said in the report (and in its
/// summary) rather than left out silently.
///
/// # Why
///
/// A report that silently lists less than happened reads as "nothing else
/// happened": a run closed from outside whose checkpoint did not decode
/// would report no reads and no failed calls, and a human would trust it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ReportNote {
    /// The run's last checkpoint could not be decoded: the calls it
    /// recorded are missing, so actions are listed from the ledger alone
    /// (its writes are all there; its reads, and why failed calls failed,
    /// are not).
    CheckpointUnreadable {
        /// The step the checkpoint was taken after.
        step: u32,
        /// What could not be decoded, and why.
        reason: String,
    },
    /// The run was handed off, and closed once a human had decided every
    /// record that awaited a decision: its outcome is what then stood,
    /// and its `handoff_decided` events say who decided what.
    ClosedByHuman {
        /// Why automation had stopped.
        handed_off: String,
        /// The decisions that closed it.
        decisions: u32,
    },
}

impl std::fmt::Display for ReportNote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReportNote::CheckpointUnreadable { step, reason } => write!(
                f,
                "its checkpoint of step {step} could not be read ({reason}), so its actions are listed from the ledger alone: its reads and the reasons of its failed calls are missing"
            ),
            ReportNote::ClosedByHuman {
                handed_off,
                decisions,
            } => write!(
                f,
                "it was handed off ({handed_off}) and closed once a human had decided the {} that awaited a decision",
                crate::plural::count(*decisions, "record")
            ),
        }
    }
}

/// How a resumed run continued: visible to the user, because a resume that
/// hides what it skipped or repeated cannot be trusted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResumeMarker {
    /// The last step whose checkpoint was durable.
    pub continued_from_step: u32,
    /// Completed steps that were not run again.
    pub steps_skipped: u32,
    /// Intents of the interrupted step that were replayed with their
    /// original ids and keys.
    pub reused_intents: Vec<IntentId>,
    /// Intents whose effect was already recorded and were not executed again.
    pub not_reexecuted: Vec<IntentId>,
    /// Idempotent writes in doubt that were executed again with their
    /// original key (the tool deduplicates them).
    pub reexecuted_with_same_key: Vec<IntentId>,
    /// Whether any side effect might have executed twice: only when an
    /// effect in doubt was repeated without a key, which rein never does.
    pub maybe_duplicated: bool,
    /// One line for a human.
    pub note: String,
    /// The run continued under another contract than it started with (a
    /// changed system prompt or tool definition), as the policy allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract_changed: Option<ContractChange>,
    /// Incomplete actions of a finished, recoverable run that were sent
    /// again under their original intent ids (and keys) before the model
    /// was asked anything new: each was refused without effect (a
    /// `Retry-After`, an open breaker, a budget), so sending it again
    /// cannot repeat an effect. What its report recommended, done.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub retried: Vec<IntentId>,
    /// The retries were sent before the wait their refusal asked for had
    /// passed, because the operator said so (`rein resume --now`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub retried_early: bool,
}

/// A run's contract (the digest of what its model was shown) at its start
/// and at a resume.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContractChange {
    /// At the run's start.
    pub was: String,
    /// Now.
    pub now: String,
}

/// What a resume does when the run's contract changed since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ContractPolicy {
    /// Continue, and say so in `run_resumed` and the report's resume
    /// marker.
    #[default]
    Warn,
    /// Refuse to continue: the model would act on instructions or tools
    /// the run did not start with.
    Refuse,
}

/// What became of one effect when a failed run was settled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompensationResult {
    /// The forward action.
    pub intent_id: IntentId,
    /// The forward tool.
    pub tool: String,
    /// The compensation tool, if it has one.
    pub compensation_tool: Option<String>,
    /// The forward record's final status: `compensated`,
    /// `uncompensatable` or `manual`.
    pub status: LedgerStatus,
    /// Why, for a human.
    pub note: String,
}

/// What a run does with the effects it already caused when a later step
/// fails (seed 000, "Partial Failure: Continue or Roll Back").
///
/// | policy | a failure that time may fix (rate limit, timeout, budget) | a failure that will not go away |
/// | --- | --- | --- |
/// | `compensate` (default) | keep the effects; partial success, recoverable | compensate in reverse order; hand off what cannot be undone |
/// | `continue` | keep the effects; partial success | keep the effects; partial success |
/// | `handoff` | keep the effects; partial success | hand off to a human, nothing undone |
///
/// A failure before any write (a read-only prefix) always degrades: the
/// report flags the gap. No policy continues silently: every path that keeps
/// a failed run's effects ends in an explicit `partial_success`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailurePolicy {
    /// Compensate what can be undone, hand off what cannot.
    #[default]
    Compensate,
    /// Keep every effect and report partial success.
    Continue,
    /// Hand off to a human without undoing anything.
    Handoff,
}

//! The side-effect ledger's record and its state machine.
//!
//! # Why
//!
//! Compensation written only in application code dies with the process. A
//! write-ahead ledger declares every non-read call `pending` durably *before*
//! it runs, then marks the result: after a crash the next process knows
//! exactly which effects happened, which might have, and which did not
//! (seed 000, "The Ledger Must Be Written Before Execution").
//!
//! ```text
//!               ┌──────────► succeeded ──┬──► compensated
//!   pending ────┤                        ├──► uncompensatable
//!               │                        └──► manual
//!               ├──────────► failed
//!               └──────────► manual   (cannot be decided; a human decides)
//!
//!   manual ──► compensated   (a later retry of a strong compensation worked)
//!   failed ──► pending       (declared again: the same intent runs afresh)
//!
//!   pending, manual, uncompensatable ──► accepted   (a human: it stands)
//!   manual, uncompensatable ──► compensated         (a human: undone)
//! ```
//!
//! `failed` is the only result a record leaves again, and only back to
//! `pending`: the effect certainly did not happen, so running the intent
//! again (under its original key) cannot double it. The engine does so
//! for a call its process declared and then never sent, because the
//! process was stopping; nothing else reopens a record. An effect that
//! happened, or may have, never moves back.
//!
//! The last two lines are a human's handoff decisions
//! ([`crate::handoff::Decision`]): a record that awaited a human is
//! settled by what the human found or did, and nothing automatic touches
//! it again.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::failure::Failure;
use crate::idempotency::IdempotencyKey;
use crate::ids::{IntentId, RunId};
use crate::timestamp::Timestamp;
use crate::tool::ToolClass;

/// Where a side effect stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LedgerStatus {
    /// Declared; the call may be in flight, or may have happened before a
    /// crash.
    Pending,
    /// The effect happened.
    Succeeded,
    /// The effect certainly did not happen.
    Failed,
    /// The effect was undone by its compensation.
    Compensated,
    /// The effect happened and cannot be undone.
    Uncompensatable,
    /// A human must decide.
    Manual,
    /// A human decided that the effect stands (it happened, or was
    /// completed by a retry under its original key, and is kept).
    Accepted,
}

/// A status change the state machine does not allow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("ledger record cannot move from {from} to {to}")]
pub struct LedgerTransitionError {
    /// The current status.
    pub from: LedgerStatus,
    /// The refused status.
    pub to: LedgerStatus,
}

impl LedgerStatus {
    /// The status's name as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerStatus::Pending => "pending",
            LedgerStatus::Succeeded => "succeeded",
            LedgerStatus::Failed => "failed",
            LedgerStatus::Compensated => "compensated",
            LedgerStatus::Uncompensatable => "uncompensatable",
            LedgerStatus::Manual => "manual",
            LedgerStatus::Accepted => "accepted",
        }
    }

    /// Reads a stored name.
    pub fn parse(text: &str) -> Option<LedgerStatus> {
        Some(match text {
            "pending" => LedgerStatus::Pending,
            "succeeded" => LedgerStatus::Succeeded,
            "failed" => LedgerStatus::Failed,
            "compensated" => LedgerStatus::Compensated,
            "uncompensatable" => LedgerStatus::Uncompensatable,
            "manual" => LedgerStatus::Manual,
            "accepted" => LedgerStatus::Accepted,
            _ => return None,
        })
    }

    /// Checks a status change against the state machine.
    ///
    /// # Errors
    ///
    /// [`LedgerTransitionError`] for a change the diagram does not show.
    /// Setting the same status again is allowed (idempotent marks).
    pub fn transition(self, to: LedgerStatus) -> Result<LedgerStatus, LedgerTransitionError> {
        use LedgerStatus::*;
        let allowed = self == to
            || matches!(
                (self, to),
                (Pending, Succeeded | Failed | Manual)
                    | (Succeeded, Compensated | Uncompensatable | Manual)
                    | (Manual, Compensated)
                    | (Failed, Pending)
                    | (Pending | Manual | Uncompensatable, Accepted)
                    | (Uncompensatable, Compensated)
            );
        if allowed {
            Ok(to)
        } else {
            Err(LedgerTransitionError { from: self, to })
        }
    }

    /// Whether the record needs no further action.
    pub fn is_settled(self) -> bool {
        !matches!(self, LedgerStatus::Pending | LedgerStatus::Succeeded)
    }
}

impl fmt::Display for LedgerStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One declared side effect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRecord {
    /// The run.
    pub run_id: RunId,
    /// The planned action; one record per intent.
    pub intent_id: IntentId,
    /// Execution order within the run, from 1; compensation runs in reverse.
    pub seq: u64,
    /// The step that planned it.
    pub step: u32,
    /// The tool.
    pub tool: String,
    /// The tool's class at the time of the call.
    pub class: ToolClass,
    /// The key the call carried, if its class has one.
    pub idempotency_key: Option<IdempotencyKey>,
    /// The arguments as sent.
    pub args: Value,
    /// Where the effect stands.
    pub status: LedgerStatus,
    /// The tool's result, once succeeded.
    pub result: Option<Value>,
    /// The last failure, if any.
    pub failure: Option<Failure>,
    /// Attempts made.
    pub attempts: u32,
    /// When declared.
    pub created_at_ms: Timestamp,
    /// When last changed.
    pub updated_at_ms: Timestamp,
}

#[cfg(test)]
mod tests {
    use super::LedgerStatus::*;
    use super::*;

    #[test]
    fn pending_moves_to_a_result_and_succeeded_to_a_settlement() {
        assert_eq!(Pending.transition(Succeeded), Ok(Succeeded));
        assert_eq!(Pending.transition(Failed), Ok(Failed));
        assert_eq!(Succeeded.transition(Compensated), Ok(Compensated));
        assert_eq!(Succeeded.transition(Manual), Ok(Manual));
    }

    #[test]
    fn settled_records_never_move_back() {
        assert_eq!(Manual.transition(Compensated), Ok(Compensated));
        for from in [Compensated, Uncompensatable, Manual] {
            for to in [Pending, Succeeded] {
                assert!(from.transition(to).is_err(), "{from} -> {to}");
            }
        }
        assert!(Failed.transition(Succeeded).is_err(), "failed -> succeeded");
        assert!(Pending.transition(Compensated).is_err());
        assert_eq!(Failed.transition(Failed), Ok(Failed));
    }

    #[test]
    fn a_human_settles_only_what_awaited_a_human() {
        for from in [Pending, Manual, Uncompensatable] {
            assert_eq!(from.transition(Accepted), Ok(Accepted), "{from}");
        }
        for from in [Manual, Uncompensatable] {
            assert_eq!(from.transition(Compensated), Ok(Compensated), "{from}");
        }
        // An effect in doubt is taken to have happened before it is
        // undone: `succeeded`, then `compensated`, as the reconciler does.
        assert!(Pending.transition(Compensated).is_err());
        for from in [Succeeded, Failed, Compensated] {
            assert!(from.transition(Accepted).is_err(), "{from} -> accepted");
        }
        // A decided record stays decided.
        for to in [
            Pending,
            Succeeded,
            Failed,
            Compensated,
            Manual,
            Uncompensatable,
        ] {
            assert!(Accepted.transition(to).is_err(), "accepted -> {to}");
        }
        assert!(Accepted.is_settled());
    }

    #[test]
    fn a_failed_record_may_only_be_declared_again() {
        // Nothing happened, so the intent may run afresh: pending again.
        assert_eq!(Failed.transition(Pending), Ok(Pending));
        for to in [Succeeded, Compensated, Uncompensatable, Manual, Accepted] {
            assert!(Failed.transition(to).is_err(), "failed -> {to}");
        }
    }

    #[test]
    fn status_names_round_trip() {
        for s in [
            Pending,
            Succeeded,
            Failed,
            Compensated,
            Uncompensatable,
            Manual,
            Accepted,
        ] {
            assert_eq!(LedgerStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
    }
}

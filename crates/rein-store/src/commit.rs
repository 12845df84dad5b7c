//! Atomic step writes: [`StepCommit`] and what it returns, [`Committed`].

use rein_core::{Event, IntentId, LedgerRecord, Outcome, RunId, RunReport};

use crate::checkpoint::{Checkpoint, CheckpointDelta};
use crate::error::StoreError;
use crate::intent::PlannedIntent;
use crate::ledger::LedgerMark;
use crate::run::{RunRecord, RunStatus, StatusChange};

/// Everything one step of a run writes, applied in one transaction.
///
/// # Why one write per step
///
/// A step's records only make sense together: the checkpoint that says an
/// intent completed, the ledger mark that says its effect succeeded, and the
/// events that explain both. Writing them separately would let a crash leave
/// a checkpoint ahead of its ledger, and would cost one durable commit (one
/// fsync under `synchronous = FULL`) per record instead of one per step.
///
/// # Order of application
///
/// Parts are applied in this order, and the first refusal rolls back all of
/// them:
///
/// 0. `expect_status`, then `expect_claim`, then `expect_ledger_revision`
///    (checked before anything is applied)
/// 1. `intents` (first write per intent wins; a repeat is a no-op)
/// 2. `declares` (an existing record for the intent is returned unchanged)
/// 3. `marks` (checked against the ledger state machine)
/// 4. `checkpoint` (replaces the same step, and drops the deltas of the
///    steps up to it, which it holds), then `checkpoint_delta` (appended
///    after the run's latest checkpoint; see [`CheckpointDelta`])
/// 5. `events` (the store assigns `seq`, gap-free from 1)
/// 6. `status` (refused if the run already finished)
/// 7. `revised_report` (refused unless the run is finished, by then, with
///    the report's outcome)
///
/// A commit with `declares` or `marks` bumps the ledger revision of the run
/// and of every run above it ([`RunRecord::ledger_revision`]), once. A
/// report stored by `status` or `revised_report` whose basis is set gets
/// the run's revision after the commit as its basis's `ledger_revision`:
/// the ledger it reflects.
///
/// Every item must belong to the run the commit is made for.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepCommit {
    /// Planned intents, each with the step that planned it.
    pub intents: Vec<(u32, PlannedIntent)>,
    /// Calls the step pauses for, each waiting for a human's decision;
    /// written after the intents (a request already stored is kept as it
    /// is). See [`crate::approval`].
    pub approvals: Vec<crate::approval::ApprovalRequest>,
    /// Ledger records to declare `pending` before their calls; the store
    /// assigns `seq` and `status` and ignores what they hold.
    pub declares: Vec<LedgerRecord>,
    /// Ledger marks, in order; two marks of one intent apply in sequence.
    pub marks: Vec<(IntentId, LedgerMark)>,
    /// The checkpoint after the step, whole.
    pub checkpoint: Option<Checkpoint>,
    /// What the step added to the run's checkpoint: how the engine
    /// checkpoints a step (see [`CheckpointDelta`] for why).
    pub checkpoint_delta: Option<CheckpointDelta>,
    /// Events to append; the store assigns `seq` and ignores what they hold.
    pub events: Vec<Event>,
    /// A run status change.
    pub status: Option<StatusChange>,
    /// Replaces the report of a run that finished, keeping its status: the
    /// report's outcome must be the run's (outcomes are final; a report's
    /// account of the ledger is not). A record changed after the run ended
    /// (the reconciler settled it) lands with the report that says so, in
    /// one commit.
    pub revised_report: Option<RunReport>,
    /// Reopen a finished run whose report says it is recoverable, so that
    /// it can be resumed: the one exception to "an outcome is final",
    /// applied before `status`. Refused for any other run.
    pub reopen: bool,
    /// When set, the commit applies only if the run's current status equals
    /// it; otherwise nothing is stored and the commit fails with
    /// [`StoreError::StatusChanged`](crate::StoreError::StatusChanged).
    ///
    /// Checked first, in the commit's own transaction: when concurrent
    /// commits expect the same status and each changes it (a cancel moving
    /// `queued` to `cancelled`, a worker moving `queued` to `running`),
    /// exactly one succeeds, across every process sharing the store. It is
    /// a condition, not a write: [`StepCommit::is_empty`] ignores it.
    ///
    /// [`StoreError::Conflict`]: crate::StoreError::Conflict
    pub expect_status: Option<RunStatus>,
    /// When set, the commit applies only if a lease with the fence's
    /// `lease_id` exists and its `owner` equals the fence's `owner`;
    /// otherwise nothing is stored and the commit fails with
    /// [`StoreError::ClaimLost`] (another process took the run over).
    ///
    /// The lease's expiry is not checked: a live owner whose lease just
    /// lapsed, but was not taken over, may still write. Checked right after
    /// `expect_status`, before any part is applied, in the commit's own
    /// transaction, so a take-over and a commit of the old owner never both
    /// land. It is a condition, not a write: [`StepCommit::is_empty`]
    /// ignores it.
    ///
    /// [`StoreError::ClaimLost`]: crate::StoreError::ClaimLost
    pub expect_claim: Option<ClaimFence>,
    /// When set, the commit applies only if the run's ledger revision
    /// ([`RunRecord::ledger_revision`]) still equals it; otherwise nothing
    /// is stored and the commit fails with
    /// [`StoreError::LedgerChanged`].
    ///
    /// # Why
    ///
    /// A report is derived from the ledger read before the commit. Without
    /// this condition two writers (the server's reconciler and a
    /// `rein reconcile`, a reconciler and the run closing) each derived a
    /// report from the ledger they read, and the last to commit stored a
    /// report that missed the other's change. With it, a writer reads the
    /// revision first (with the run), then the ledger, derives, and
    /// commits expecting that revision; a conflict means the ledger moved:
    /// read again, derive again. It is a condition, not a write:
    /// [`StepCommit::is_empty`] ignores it.
    ///
    /// [`StoreError::LedgerChanged`]: crate::StoreError::LedgerChanged
    pub expect_ledger_revision: Option<u64>,
    /// The run span of the run's first drive: stored only while the run
    /// has none ([`RunRecord::first_span`] is set once; a later drive's
    /// span links to it).
    ///
    /// [`RunRecord::first_span`]: crate::RunRecord::first_span
    pub first_span: Option<crate::SpanRef>,
}

/// The claim a commit must still hold: the lease `lease_id` owned by `owner`.
///
/// See [`StepCommit::expect_claim`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimFence {
    /// The lease that claims the run.
    pub lease_id: String,
    /// The owner the lease must still have.
    pub owner: String,
}

impl StepCommit {
    /// Whether the commit writes a checkpoint, whole or as a delta.
    pub fn writes_checkpoint(&self) -> bool {
        self.checkpoint.is_some() || self.checkpoint_delta.is_some()
    }

    /// Whether the commit writes nothing.
    pub fn is_empty(&self) -> bool {
        self.intents.is_empty()
            && self.approvals.is_empty()
            && self.declares.is_empty()
            && self.marks.is_empty()
            && !self.writes_checkpoint()
            && self.events.is_empty()
            && self.status.is_none()
            && self.revised_report.is_none()
            && !self.reopen
            && self.first_span.is_none()
    }
}

/// What a [`StepCommit`] stored, as the store now holds it.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Committed {
    /// The declared records, in the order given, each with its `seq` (or
    /// the record that already existed for its intent).
    pub declared: Vec<LedgerRecord>,
    /// The marked records after each mark, in the order given.
    pub marked: Vec<LedgerRecord>,
    /// The appended events with their assigned `seq`, in the order given.
    pub events: Vec<Event>,
    /// The run after a status change.
    pub run: Option<RunRecord>,
}

// The rules of a step commit that need no SQL: each backend reads the
// rows, asks these, and writes what they decide, so SQLite and PostgreSQL
// refuse and merge alike (re-exported in `crate::rules`).

/// Checks that an item of a commit (`what`) belongs to the run the commit
/// is made for.
///
/// # Errors
///
/// [`StoreError::Invalid`] naming both runs otherwise.
pub fn same_run(what: &'static str, expected: &RunId, found: &RunId) -> Result<(), StoreError> {
    if expected == found {
        Ok(())
    } else {
        Err(StoreError::Invalid {
            what,
            expected: format!("run {expected}"),
            found: format!("run {found}"),
        })
    }
}

/// The `seq` after the largest one stored in `table` for the run (`0`:
/// none yet), so sequences run gap-free from 1.
///
/// # Errors
///
/// [`StoreError::Corrupt`] for a negative or exhausted maximum.
pub fn next_seq(table: &'static str, run_id: &RunId, max: i64) -> Result<u64, StoreError> {
    u64::try_from(max)
        .ok()
        .and_then(|max| max.checked_add(1))
        .ok_or_else(|| StoreError::Corrupt {
            table,
            column: "seq",
            reason: format!("expected a sequence from 1, found maximum {max} (run {run_id})"),
        })
}

/// The record `mark` leaves (see [`LedgerMark`]'s merge rules): its status
/// moved along the ledger's state machine, `result` and `failure` replaced
/// only by a value, `attempts` only grown.
///
/// # Errors
///
/// [`StoreError::InvalidTransition`] for a move the state machine refuses.
pub fn marked(mut record: LedgerRecord, mark: LedgerMark) -> Result<LedgerRecord, StoreError> {
    record.status = record.status.transition(mark.status)?;
    if mark.result.is_some() {
        record.result = mark.result;
    }
    if mark.failure.is_some() {
        record.failure = mark.failure;
    }
    record.attempts = record.attempts.max(mark.attempts);
    record.updated_at_ms = mark.at_ms;
    Ok(record)
}

/// Checks a checkpoint delta's `step` against the run's latest checkpoint
/// (`latest`, a delta when `is_delta`): the step after it, or the same
/// step when that is a delta (replaced).
///
/// # Errors
///
/// [`StoreError::Invalid`] for any other step.
pub fn validate_delta_step(latest: u32, is_delta: bool, step: u32) -> Result<(), StoreError> {
    let next = latest.saturating_add(1);
    if step != next && !(is_delta && step == latest) {
        return Err(StoreError::Invalid {
            what: "checkpoint delta step",
            expected: format!("{next}, the step after the run's latest checkpoint"),
            found: step.to_string(),
        });
    }
    Ok(())
}

/// Records in `report`'s basis (when it has one) the ledger revision it
/// reflects: the run's, as the commit leaves it.
pub fn stamp_revision(report: Option<&mut RunReport>, revision: u64) {
    if let Some(basis) = report.and_then(|report| report.basis.as_mut()) {
        basis.ledger_revision = Some(revision);
    }
}

/// The outcome of a run a commit reopens (see [`StepCommit::reopen`]).
///
/// # Errors
///
/// [`StoreError::Invalid`] for a run that has not finished.
pub fn reopened_outcome(current: RunStatus) -> Result<Outcome, StoreError> {
    current.outcome().ok_or_else(|| StoreError::Invalid {
        what: "reopen",
        expected: "a finished run".to_owned(),
        found: current.as_str().to_owned(),
    })
}

/// Checks that the finished run `run_id` (its `outcome`, its stored
/// `report` text) may be reopened: its report says it is recoverable. An
/// absent or unreadable report is not.
///
/// # Errors
///
/// [`StoreError::FinishedRun`] otherwise.
pub fn validate_reopen(
    run_id: &RunId,
    outcome: Outcome,
    report: Option<&str>,
) -> Result<(), StoreError> {
    let recoverable = report
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .and_then(|report| {
            report
                .get("recoverable")
                .and_then(serde_json::Value::as_bool)
        })
        .unwrap_or(false);
    if recoverable {
        Ok(())
    } else {
        Err(StoreError::FinishedRun {
            run_id: run_id.to_string(),
            outcome,
            requested: RunStatus::Running,
        })
    }
}

/// Checks a status change of run `run_id`, now `current`: the run has not
/// finished, and a report comes only with a finished status, of its
/// outcome.
///
/// # Errors
///
/// [`StoreError::FinishedRun`] for a finished run, [`StoreError::Invalid`]
/// for a report of another outcome.
pub fn validate_status_change(
    run_id: &RunId,
    current: RunStatus,
    change: &StatusChange,
) -> Result<(), StoreError> {
    if let Some(outcome) = current.outcome() {
        return Err(StoreError::FinishedRun {
            run_id: run_id.to_string(),
            outcome,
            requested: change.status,
        });
    }
    if let Some(report) = &change.report {
        let expected = change.status.outcome();
        if expected != Some(report.outcome) {
            return Err(StoreError::Invalid {
                what: "report outcome",
                expected: match expected {
                    Some(outcome) => format!("{outcome} (the run's new status)"),
                    None => format!("absent for a {} run", change.status),
                },
                found: report.outcome.to_string(),
            });
        }
    }
    Ok(())
}

/// Checks a revised report (see [`StepCommit::revised_report`]) against
/// the run's status: finished, with the report's outcome; or handed off,
/// with a report that no longer hands anything to a human (the last
/// handoff decision closes the run with what happened: see
/// `closes_handoff`).
///
/// # Errors
///
/// [`StoreError::Invalid`] otherwise.
pub fn validate_revised_report(current: RunStatus, report: &RunReport) -> Result<(), StoreError> {
    if current.outcome() == Some(report.outcome) || closes_handoff(current, report) {
        return Ok(());
    }
    Err(StoreError::Invalid {
        what: "revised report outcome",
        expected: match current.outcome() {
            Some(Outcome::HandedOff) => {
                "handed_off, or another outcome once nothing awaits a human".to_owned()
            }
            Some(outcome) => format!("{outcome} (the run's final outcome)"),
            None => format!("a finished run, not a {current} one"),
        },
        found: report.outcome.to_string(),
    })
}

/// Whether `report` closes a run that was handed off: the run is
/// `handed_off`, the report says another outcome, and its handoff package
/// (if any) awaits no decision.
///
/// # Why the one exception
///
/// Outcomes are final, with two exceptions that a human causes: a
/// recoverable run is reopened to be resumed ([`StepCommit::reopen`]), and
/// a handed-off run whose every awaiting record a human has decided is
/// closed with what happened (its effects undone, or kept). The store
/// checks the second here, so no writer can close a run that a human
/// still has to look at.
pub fn closes_handoff(current: RunStatus, report: &RunReport) -> bool {
    current.outcome() == Some(Outcome::HandedOff)
        && report.outcome != Outcome::HandedOff
        && report
            .handoff
            .as_ref()
            .is_none_or(|package| package.awaiting_decision.is_empty())
}

#[cfg(test)]
mod tests {
    use rein_core::{LedgerStatus, Timestamp, ToolClass};
    use serde_json::json;

    use super::*;

    fn run(id: &str) -> RunId {
        RunId::new(id).unwrap()
    }

    fn record(status: LedgerStatus) -> LedgerRecord {
        LedgerRecord {
            run_id: run("r"),
            intent_id: IntentId::new("i").unwrap(),
            seq: 1,
            step: 1,
            tool: "t".to_owned(),
            class: ToolClass::IdempotentWrite,
            idempotency_key: None,
            args: json!({}),
            status,
            result: Some(json!({"forward": true})),
            failure: None,
            attempts: 3,
            created_at_ms: Timestamp::from_millis(1),
            updated_at_ms: Timestamp::from_millis(1),
        }
    }

    fn mark(status: LedgerStatus, attempts: u32) -> LedgerMark {
        LedgerMark {
            status,
            result: None,
            failure: None,
            attempts,
            at_ms: Timestamp::from_millis(9),
        }
    }

    #[test]
    fn same_run_refuses_an_item_of_another_run() {
        assert!(same_run("event run id", &run("a"), &run("a")).is_ok());
        let err = same_run("event run id", &run("a"), &run("b")).unwrap_err();
        assert!(
            matches!(
                err,
                StoreError::Invalid {
                    what: "event run id",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    #[test]
    fn next_seq_follows_the_maximum_and_refuses_an_impossible_one() {
        assert_eq!(next_seq("events", &run("r"), 0).unwrap(), 1);
        assert_eq!(next_seq("events", &run("r"), 41).unwrap(), 42);
        assert!(matches!(
            next_seq("ledger", &run("r"), -1),
            Err(StoreError::Corrupt {
                table: "ledger",
                ..
            })
        ));
    }

    #[test]
    fn a_mark_keeps_the_result_grows_attempts_and_follows_the_state_machine() {
        let done = marked(
            record(LedgerStatus::Pending),
            mark(LedgerStatus::Succeeded, 1),
        )
        .unwrap();
        assert_eq!(done.status, LedgerStatus::Succeeded);
        assert_eq!(done.result, Some(json!({"forward": true})), "kept");
        assert_eq!(done.attempts, 3, "never shrinks");
        assert_eq!(done.updated_at_ms, Timestamp::from_millis(9));
        let more = marked(done, mark(LedgerStatus::Succeeded, 5)).unwrap();
        assert_eq!(more.attempts, 5, "grows");
        assert!(matches!(
            marked(more, mark(LedgerStatus::Pending, 5)),
            Err(StoreError::InvalidTransition(_))
        ));
    }

    #[test]
    fn a_delta_goes_after_the_latest_checkpoint_or_replaces_the_latest_delta() {
        assert!(validate_delta_step(0, false, 1).is_ok());
        assert!(validate_delta_step(3, true, 4).is_ok());
        assert!(validate_delta_step(3, true, 3).is_ok(), "replaces a delta");
        assert!(validate_delta_step(3, false, 3).is_err(), "not a whole one");
        assert!(validate_delta_step(3, true, 5).is_err(), "no gap");
    }

    #[test]
    fn only_a_recoverable_finished_run_reopens() {
        let failed = RunStatus::Finished(Outcome::Failed);
        assert_eq!(reopened_outcome(failed).unwrap(), Outcome::Failed);
        assert!(reopened_outcome(RunStatus::Running).is_err());
        let id = run("r");
        let ok = json!({"recoverable": true}).to_string();
        assert!(validate_reopen(&id, Outcome::Failed, Some(&ok)).is_ok());
        let no = json!({"recoverable": false}).to_string();
        for report in [None, Some(no.as_str()), Some("{garbage")] {
            assert!(matches!(
                validate_reopen(&id, Outcome::Failed, report),
                Err(StoreError::FinishedRun { .. })
            ));
        }
    }
}

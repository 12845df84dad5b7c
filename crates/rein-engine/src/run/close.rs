//! Closing runs from outside the process that would drive them: a queued
//! run cancelled before it started, a direct run whose process died
//! (`orphaned`), queued work whose deliveries ran out (`dead_letter`), a
//! child settled with its root, a run rein failed before it started.
//!
//! # Why the ledger decides the report
//!
//! A run closed from outside may have changed the world before its process
//! died: it sent an update and an email, or it was killed mid-compensation
//! and left effects `manual`. Its report lists each of them with its
//! ledger status as it stands (from [`rein_core::report::derive`], like
//! every report), says what a human must decide, and carries a handoff
//! package when a record awaits one — not "nothing completed, submit the
//! task again". Nothing is compensated here: the process that could have
//! is gone, and the reconciler settles what is left (and revises the
//! report when it does).

use rein_core::Timestamp;
use rein_core::event::{HandoffCreated, HandoffSummary, RunFailed, RunFinished};
use rein_core::report::{End, derive};
use rein_core::{Event, EventData, Outcome, RunReport};
use rein_store::{RunRecord, RunStatus, StatusChange, StepCommit, Store, StoreError};

use super::report::{REPORT_WRITE_TRIES, is_revision_conflict, stored_facts, tree_records};

/// How a run is closed from outside.
#[derive(Debug, Clone)]
pub struct Closing {
    /// Its final outcome.
    pub outcome: Outcome,
    /// Why it ends ([`End::Closed`], or [`End::Internal`]).
    pub end: End,
    /// Events before the terminal `run_finished`; a `run_failed` with the
    /// end's `error_type` is added when it has one.
    pub events: Vec<EventData>,
    /// Applies only if the run is still in this status.
    pub expect: Option<RunStatus>,
}

/// Ends `record` from outside (it never started, or its owner is gone):
/// its final status, its report derived from its ledger as it stands, its
/// events and the terminal `run_finished` every stream waits for, in one
/// commit at `at_ms`. Returns the report stored.
///
/// The commit is fenced on the ledger revision `record` was read at: when
/// a record changed since (a reconciler marked it while the run was being
/// closed), the run is read again and its report derived again, up to
/// [`REPORT_WRITE_TRIES`] times, so the closed report never misses it.
///
/// # Errors
///
/// The store's refusal, e.g. [`StoreError::StatusChanged`] when `expect`
/// no longer holds, [`StoreError::LedgerChanged`] when the ledger changed
/// on every try, or
/// [`StoreError::FinishedRun`] when it already ended.
pub async fn close_run(
    store: &dyn Store,
    record: &RunRecord,
    closing: Closing,
    at_ms: Timestamp,
) -> Result<RunReport, StoreError> {
    let mut current = record.clone();
    let mut tries = 0;
    loop {
        tries += 1;
        let (commit, report) = closing_commit(store, &current, closing.clone(), at_ms).await?;
        match store.commit_step(&current.run_id, commit).await {
            // As stored: with the ledger revision it reflects.
            Ok(committed) => return Ok(committed.run.and_then(|r| r.report).unwrap_or(report)),
            Err(e) if is_revision_conflict(&e) && tries < REPORT_WRITE_TRIES => {
                current =
                    store
                        .get_run(&record.run_id)
                        .await?
                        .ok_or_else(|| StoreError::NotFound {
                            what: "run",
                            id: record.run_id.to_string(),
                        })?;
            }
            Err(e) => return Err(e),
        }
    }
}

/// The commit that closes `record` (see [`close_run`]) and the report in
/// it, for a caller that commits it under its own claim. Fenced on
/// `record`'s ledger revision (read before the ledger is read here).
///
/// # Errors
///
/// The store's, when the run's ledger or checkpoint cannot be read.
pub(super) async fn closing_commit(
    store: &dyn Store,
    record: &RunRecord,
    closing: Closing,
    at_ms: Timestamp,
) -> Result<(StepCommit, RunReport), StoreError> {
    let mut facts = stored_facts(store, record, closing.end, at_ms).await?;
    facts.outcome = Some(closing.outcome);
    let ledger = tree_records(store, &record.run_id).await?;
    let report = derive(&facts, &ledger);
    let event = |data: EventData| Event {
        run_id: record.run_id.clone(),
        seq: 0,
        step: 0,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms,
        data: data.redacted(),
    };
    let mut events: Vec<Event> = closing.events.into_iter().map(event).collect();
    let reason = match &facts.end {
        End::Closed { reason, .. } | End::Internal(reason) => reason.clone(),
        _ => String::new(),
    };
    if let Some(error_type) = facts.end.error_type() {
        events.push(event(
            RunFailed {
                error_type: error_type.to_owned(),
                reason,
            }
            .into(),
        ));
    }
    if report.handoff.is_some() {
        events.push(event(handoff_data(&report).into()));
    }
    events.push(event(run_finished(&report, report.steps).into()));
    let commit = StepCommit {
        status: Some(StatusChange {
            status: RunStatus::Finished(report.outcome),
            report: Some(report.clone()),
            at_ms,
        }),
        events,
        expect_status: closing.expect,
        expect_ledger_revision: Some(record.ledger_revision),
        ..StepCommit::default()
    };
    Ok((commit, report))
}

/// The data of a `handoff_created` event for `report`'s package.
pub(super) fn handoff_data(report: &RunReport) -> HandoffCreated {
    HandoffCreated {
        package: report.handoff.as_ref().map(|package| HandoffSummary {
            reason: package.reason.clone(),
            awaiting_decision: package.awaiting_decision.len(),
            uncertain: package.uncertain.len(),
        }),
    }
}

/// The data of the terminal `run_finished` event for `report`, after
/// `steps` steps.
pub(super) fn run_finished(report: &RunReport, steps: u32) -> RunFinished {
    RunFinished {
        outcome: report.outcome,
        steps,
        consumed: report.consumed,
        elapsed: std::time::Duration::from_millis(report.elapsed_ms),
        recoverable: report.recoverable,
    }
}

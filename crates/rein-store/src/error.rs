//! [`StoreError`]: everything a [`Store`](crate::Store) call can refuse or
//! fail with.

use rein_core::Outcome;
use rein_core::ledger::LedgerTransitionError;

use crate::run::RunStatus;

/// Why a store call did not do what was asked.
///
/// # Why these variants
///
/// The engine reacts differently to each: a transient [`Unavailable`] is
/// retried, a [`Conflict`] or [`InvalidTransition`] is a bug or a lost race
/// and ends the run, a [`Corrupt`] row needs an operator. Each lost race
/// has its own variant ([`StatusChanged`], [`ClaimLost`], [`LedgerChanged`],
/// [`ReservationLost`]), because each calls for its own reaction: stop at
/// once on a lost claim, derive again on a moved ledger. Callers classify
/// with the variants, [`StoreError::is_transient`] and
/// [`StoreError::is_conflict`], never by matching message text.
///
/// [`Unavailable`]: StoreError::Unavailable
/// [`Conflict`]: StoreError::Conflict
/// [`StatusChanged`]: StoreError::StatusChanged
/// [`ClaimLost`]: StoreError::ClaimLost
/// [`LedgerChanged`]: StoreError::LedgerChanged
/// [`ReservationLost`]: StoreError::ReservationLost
/// [`InvalidTransition`]: StoreError::InvalidTransition
/// [`Corrupt`]: StoreError::Corrupt
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The run, ledger record or other row does not exist.
    #[error("{what} {id} was not found")]
    NotFound {
        /// What was looked for (`run`, `ledger record`).
        what: &'static str,
        /// Its identifier.
        id: String,
    },
    /// A row with this identity already exists and must not be replaced.
    #[error("{what} {id} already exists; expected a new {what}")]
    Conflict {
        /// What was created (`run`, `lease`).
        what: &'static str,
        /// The identifier that is taken.
        id: String,
    },
    /// A commit's [`expect_status`](crate::StepCommit::expect_status) did
    /// not match the run's current status: another writer changed it first
    /// (a lost compare-and-set).
    #[error(
        "run {run_id} is no longer in the status this change expected; \
         another writer changed it first"
    )]
    StatusChanged {
        /// The run whose status changed.
        run_id: String,
    },
    /// A commit's [`expect_claim`](crate::StepCommit::expect_claim) lease is
    /// gone or has another owner: another process took the run over.
    #[error(
        "run {run_id} is no longer claimed by this process; \
         another process took the run over"
    )]
    ClaimLost {
        /// The run whose claim was lost.
        run_id: String,
    },
    /// A commit's
    /// [`expect_ledger_revision`](crate::StepCommit::expect_ledger_revision)
    /// is not the run's ledger revision: the ledger changed since the
    /// commit's content was derived from it.
    #[error(
        "the ledger of run {run_id} changed since this change read it; \
         derive it again from the ledger as it is now"
    )]
    LedgerChanged {
        /// The run whose ledger changed.
        run_id: String,
    },
    /// [`IdempotencyStore::create_run_held`](crate::IdempotencyStore::create_run_held): the
    /// idempotency reservation the run's creation is fenced on is no longer
    /// the caller's (another request took it over).
    #[error(
        "the idempotency reservation {key} is no longer held by this request; \
         another request took it over"
    )]
    ReservationLost {
        /// The reservation, as `tenant/key`.
        key: String,
    },
    /// A ledger mark the ledger state machine does not allow.
    #[error(transparent)]
    InvalidTransition(#[from] LedgerTransitionError),
    /// A status change of a run whose outcome is already final.
    #[error("run {run_id} already finished as {outcome}; its status cannot change to {requested}")]
    FinishedRun {
        /// The run.
        run_id: String,
        /// Its final outcome.
        outcome: Outcome,
        /// The refused status.
        requested: RunStatus,
    },
    /// A write whose content does not fit the call: an item for another run,
    /// a report that contradicts the status, a number the backend cannot
    /// hold.
    #[error("{what} must be {expected}, but it is {found}")]
    Invalid {
        /// The offending field (`event run id`, `report outcome`).
        what: &'static str,
        /// What the store expected.
        expected: String,
        /// What it was given.
        found: String,
    },
    /// A stored value could not be decoded; the row was written by something
    /// else or damaged. Never a panic.
    #[error("stored {table}.{column} is corrupt: {reason}")]
    Corrupt {
        /// The table (or collection).
        table: &'static str,
        /// The column (or field).
        column: &'static str,
        /// What was wrong, naming the row.
        reason: String,
    },
    /// The database was written by a newer rein and this binary does not
    /// know its schema.
    #[error(
        "database schema version must be at most {supported}, but it is {found}; \
         upgrade rein or point the store path at another file"
    )]
    SchemaTooNew {
        /// The newest version this binary knows.
        supported: u32,
        /// The version in the database.
        found: i64,
    },
    /// The backend is busy or briefly unreachable; retrying may succeed.
    #[error("store is unavailable: {0}")]
    Unavailable(String),
    /// The backend failed (I/O, SQL, a stopped worker); retrying the same
    /// call is not expected to help.
    #[error("store backend failed: {0}")]
    Backend(String),
    /// The connection was lost while the backend committed the write, and
    /// the store could not learn afterwards whether the commit landed.
    ///
    /// Not transient: offering the same write again could apply it twice
    /// (events written twice, a run claimed twice). The caller stops and
    /// lets whoever drives the run next read what the store holds.
    #[error("store commit outcome unknown: {0}")]
    InDoubt(String),
    /// A decision on an approval that already has one: the first decision
    /// stands (a late decision on an approval whose window closed finds it
    /// `expired`).
    #[error(
        "the call {} of run {} was already decided: {} by {}",
        approval.request.intent_id,
        approval.request.run_id,
        approval.decision.as_ref().map_or("undecided", |d| d.verdict.as_str()),
        approval.decision.as_ref().map_or("nobody", |d| d.by.as_str())
    )]
    AlreadyDecided {
        /// The approval as stored, with its decision.
        approval: Box<rein_core::approval::Approval>,
    },
}

impl StoreError {
    /// Whether retrying the same call later may succeed (a busy or briefly
    /// unreachable backend), as opposed to a refusal or a broken store.
    ///
    /// A transient error promises that nothing of the call was applied (a
    /// backend that cannot promise it answers [`StoreError::InDoubt`]), so
    /// the same write may be offered again.
    pub fn is_transient(&self) -> bool {
        matches!(self, StoreError::Unavailable(_))
    }

    /// Whether the call lost a race or found its identity taken: the
    /// caller's view of the store is stale (another writer got there
    /// first), not the store broken.
    pub fn is_conflict(&self) -> bool {
        matches!(
            self,
            StoreError::Conflict { .. }
                | StoreError::StatusChanged { .. }
                | StoreError::ClaimLost { .. }
                | StoreError::LedgerChanged { .. }
                | StoreError::ReservationLost { .. }
        )
    }

    /// A `NotFound` for a run.
    pub fn run_not_found(run_id: &rein_core::RunId) -> StoreError {
        StoreError::NotFound {
            what: "run",
            id: run_id.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use rein_core::LedgerStatus;

    use super::*;

    #[test]
    fn only_unavailable_is_transient() {
        assert!(StoreError::Unavailable("busy".into()).is_transient());
        assert!(!StoreError::Backend("disk i/o error".into()).is_transient());
        assert!(!StoreError::InDoubt("lost at commit".into()).is_transient());
        let transition = StoreError::from(LedgerTransitionError {
            from: LedgerStatus::Failed,
            to: LedgerStatus::Succeeded,
        });
        assert!(!transition.is_transient());
        assert_eq!(
            transition.to_string(),
            "ledger record cannot move from failed to succeeded"
        );
    }

    #[test]
    fn lost_races_and_taken_identities_are_conflicts() {
        let run_id = || "r-1".to_owned();
        for conflict in [
            StoreError::Conflict {
                what: "run",
                id: run_id(),
            },
            StoreError::StatusChanged { run_id: run_id() },
            StoreError::ClaimLost { run_id: run_id() },
            StoreError::LedgerChanged { run_id: run_id() },
            StoreError::ReservationLost { key: run_id() },
        ] {
            assert!(conflict.is_conflict(), "{conflict:?}");
            assert!(!conflict.is_transient(), "{conflict:?}");
        }
        assert!(!StoreError::Unavailable("busy".into()).is_conflict());
        assert!(!StoreError::Backend("disk".into()).is_conflict());
    }

    #[test]
    fn messages_are_lowercase_and_name_the_value() {
        let err = StoreError::Conflict {
            what: "run",
            id: "r-1".into(),
        };
        assert_eq!(
            err.to_string(),
            "run r-1 already exists; expected a new run"
        );
        let err = StoreError::StatusChanged {
            run_id: "r-1".into(),
        };
        assert_eq!(
            err.to_string(),
            "run r-1 is no longer in the status this change expected; \
             another writer changed it first"
        );
        let err = StoreError::ClaimLost {
            run_id: "r-1".into(),
        };
        assert_eq!(
            err.to_string(),
            "run r-1 is no longer claimed by this process; \
             another process took the run over"
        );
        let err = StoreError::LedgerChanged {
            run_id: "r-1".into(),
        };
        assert_eq!(
            err.to_string(),
            "the ledger of run r-1 changed since this change read it; \
             derive it again from the ledger as it is now"
        );
        let err = StoreError::ReservationLost {
            key: "default/k-1".into(),
        };
        assert_eq!(
            err.to_string(),
            "the idempotency reservation default/k-1 is no longer held by this request; \
             another request took it over"
        );
        let err = StoreError::FinishedRun {
            run_id: "r-1".into(),
            outcome: Outcome::Failed,
            requested: RunStatus::Running,
        };
        assert_eq!(
            err.to_string(),
            "run r-1 already finished as failed; its status cannot change to running"
        );
    }
}

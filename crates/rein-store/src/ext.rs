//! [`StoreExt`]: the conveniences of the store API, each one call of an
//! atomic method of a capability trait.

use async_trait::async_trait;
use rein_core::Timestamp;
use rein_core::{Event, IntentId, LedgerRecord, RunId, RunReport};

use crate::checkpoint::{Checkpoint, CheckpointDelta};
use crate::commit::StepCommit;
use crate::error::StoreError;
use crate::intent::PlannedIntent;
use crate::lease::{Lease, LeaseChange, LeaseFilter};
use crate::ledger::LedgerMark;
use crate::run::{RunRecord, RunStatus, StatusChange};
use crate::store::Store;

/// Conveniences over every [`Store`]: single-purpose writers that commit
/// one part of a [`StepCommit`] ([`RunStore::commit_step`](crate::RunStore::commit_step)), and the common
/// lease changes and listings ([`LeaseStore::change_lease`](crate::LeaseStore::change_lease),
/// [`LeaseStore::leases`](crate::LeaseStore::leases)).
///
/// # Why an extension trait
///
/// Each method is a pure composition of one atomic call, so a backend has
/// nothing to implement and no way to get it wrong: the trait is
/// implemented for every [`Store`] (including `dyn Store`) and for nothing
/// else, so no wrapper can override a convenience to mean something other
/// than the call it composes. Bring it into scope (`use
/// rein_store::StoreExt`) to call these methods.
#[async_trait]
pub trait StoreExt: Store {
    /// Sets the run's status, with its report when it finishes.
    ///
    /// # Errors
    ///
    /// [`StoreError::FinishedRun`] when the run already finished: outcomes
    /// are final.
    async fn set_run_status(
        &self,
        run_id: &RunId,
        status: RunStatus,
        report: Option<RunReport>,
        at_ms: Timestamp,
    ) -> Result<RunRecord, StoreError> {
        let commit = StepCommit {
            status: Some(StatusChange {
                status,
                report,
                at_ms,
            }),
            ..StepCommit::default()
        };
        self.commit_step(run_id, commit)
            .await?
            .run
            .ok_or_else(|| missing("run", "a status change"))
    }

    /// Appends events in one transaction (one durable commit for the batch)
    /// and returns them with their assigned `seq`.
    async fn append_events(
        &self,
        run_id: &RunId,
        events: Vec<Event>,
    ) -> Result<Vec<Event>, StoreError> {
        let commit = StepCommit {
            events,
            ..StepCommit::default()
        };
        Ok(self.commit_step(run_id, commit).await?.events)
    }

    /// Saves the intents planned at `step`. An intent already saved for the
    /// run is left as it is: a resume re-saves the intents it reuses.
    async fn save_intents(
        &self,
        run_id: &RunId,
        step: u32,
        intents: Vec<PlannedIntent>,
    ) -> Result<(), StoreError> {
        let commit = StepCommit {
            intents: intents.into_iter().map(|intent| (step, intent)).collect(),
            ..StepCommit::default()
        };
        self.commit_step(run_id, commit).await.map(drop)
    }

    /// Declares a side effect `pending` before its call, assigning the next
    /// `seq` of the run. If the intent was declared before (a resumed run
    /// re-declares), returns that record unchanged.
    async fn declare(&self, record: LedgerRecord) -> Result<LedgerRecord, StoreError> {
        let run_id = record.run_id.clone();
        let commit = StepCommit {
            declares: vec![record],
            ..StepCommit::default()
        };
        self.commit_step(&run_id, commit)
            .await?
            .declared
            .pop()
            .ok_or_else(|| missing("ledger record", "a declaration"))
    }

    /// Marks a declared side effect and returns the updated record.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] when the intent was never declared;
    /// [`StoreError::InvalidTransition`] when the ledger state machine
    /// refuses the change.
    async fn mark(
        &self,
        run_id: &RunId,
        intent_id: &IntentId,
        mark: LedgerMark,
    ) -> Result<LedgerRecord, StoreError> {
        let commit = StepCommit {
            marks: vec![(intent_id.clone(), mark)],
            ..StepCommit::default()
        };
        self.commit_step(run_id, commit)
            .await?
            .marked
            .pop()
            .ok_or_else(|| missing("ledger record", "a mark"))
    }

    /// Registers `lease` before its resource is created.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] when the lease id is held;
    /// [`StoreError::NotFound`] for an unknown run; [`StoreError::Invalid`]
    /// for a lease that breaks [`Lease::validate`].
    async fn acquire_lease(&self, lease: Lease) -> Result<Lease, StoreError> {
        self.change_lease(LeaseChange::Acquire(lease))
            .await?
            .ok_or_else(|| missing("lease", "an acquire"))
    }

    /// Moves a held lease's expiry to `expires_at_ms`.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] when the lease is not held;
    /// [`StoreError::Invalid`] for an expiry before its acquisition.
    async fn renew_lease(
        &self,
        lease_id: &str,
        expires_at_ms: Timestamp,
    ) -> Result<Lease, StoreError> {
        let change = LeaseChange::Renew {
            lease_id: lease_id.to_owned(),
            expires_at_ms,
        };
        self.change_lease(change)
            .await?
            .ok_or_else(|| missing("lease", "a renewal"))
    }

    /// Releases a lease: idempotent. Returns the lease if it was held.
    async fn release_lease(&self, lease_id: &str) -> Result<Option<Lease>, StoreError> {
        let change = LeaseChange::Release {
            lease_id: lease_id.to_owned(),
        };
        self.change_lease(change).await
    }

    /// Up to `limit` leases expired at `now_ms`, soonest expiry first: the
    /// reaper's work list.
    async fn expired_leases(
        &self,
        now_ms: Timestamp,
        limit: usize,
    ) -> Result<Vec<Lease>, StoreError> {
        self.leases(&LeaseFilter::all().expired_at(now_ms).limit(limit))
            .await
    }

    /// The run's held leases.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] when the run does not exist.
    async fn leases_of_run(&self, run_id: &RunId) -> Result<Vec<Lease>, StoreError> {
        self.leases(&LeaseFilter::all().of_run(run_id.clone()))
            .await
    }

    /// Writes the checkpoint of a step, replacing one of the same step.
    async fn write_checkpoint(&self, checkpoint: Checkpoint) -> Result<(), StoreError> {
        let run_id = checkpoint.run_id.clone();
        let commit = StepCommit {
            checkpoint: Some(checkpoint),
            ..StepCommit::default()
        };
        self.commit_step(&run_id, commit).await.map(drop)
    }

    /// Appends what a step added to the run's checkpoint.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] when `delta` does not follow the run's
    /// latest checkpoint (see [`CheckpointDelta`]).
    async fn append_checkpoint(&self, delta: CheckpointDelta) -> Result<(), StoreError> {
        let run_id = delta.run_id.clone();
        let commit = StepCommit {
            checkpoint_delta: Some(delta),
            ..StepCommit::default()
        };
        self.commit_step(&run_id, commit).await.map(drop)
    }
}

impl<S: Store + ?Sized> StoreExt for S {}

/// A backend that did not return what its commit must return.
fn missing(what: &str, after: &str) -> StoreError {
    StoreError::Backend(format!(
        "backend returned no {what} after {after}; expected exactly one"
    ))
}

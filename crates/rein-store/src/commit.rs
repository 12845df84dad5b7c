//! Atomic step writes: [`StepCommit`] and what it returns, [`Committed`].

use rein_core::{Event, IntentId, LedgerRecord, RunReport};

use crate::checkpoint::{Checkpoint, CheckpointDelta};
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

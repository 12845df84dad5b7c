//! The store API: one capability trait per kind of durable state, and
//! [`Store`], all of them together, which the engine holds.
//!
//! # Why capability traits
//!
//! Following restate's `storage-api`, each trait is one capability a backend
//! provides: [`RunStore`] (runs and step commits, run statistics, cancel
//! requests and change notifications), [`LeaseStore`] (resource
//! leases and their fenced claims), [`IdempotencyStore`] (HTTP
//! `Idempotency-Key` records), [`SingletonStore`] (the election of a
//! periodic service's owner) and [`HealthStore`] (breaker openings, latency
//! histograms and the governor's share leases, shared by every process) and
//! [`WebhookStore`] (the webhook outbox and its deliveries). A backend
//! implements each;
//! [`Store`] is blanket-implemented for every type that implements them all,
//! so callers keep writing `Arc<dyn Store>`. The conveniences composed of
//! these methods are in [`StoreExt`](crate::StoreExt).

use async_trait::async_trait;
use rein_core::Timestamp;
use rein_core::approval::{Approval, Decision};
use rein_core::{Event, IntentId, LedgerRecord, RunId, TenantId};

use crate::approval::{ApprovalFilter, Decided};
use crate::breaker::BreakerOpening;
use crate::cancel::CancelRequest;
use crate::checkpoint::Checkpoint;
use crate::commit::{Committed, StepCommit};
use crate::error::StoreError;
use crate::idempotency::{
    IdempotencyRecord, IdempotencySettled, IdempotencySettlement, IdempotencyState, NewReservation,
    Reservation, ReservationFence, StoredResponse,
};
use crate::intent::PlannedIntent;
use crate::latency::LatencyRows;
use crate::lease::{Lease, LeaseChange, LeaseFilter};
use crate::retry_outcome::RetryOutcomes;
use crate::run::{NewRun, RunCursor, RunFilter, RunPage, RunRecord, RunStatus};
use crate::singleton::SingletonLease;
use crate::token_ratio::TokenRatioRecord;
use crate::webhook::{DueDelivery, WebhookAttempt, WebhookDelivery, WebhookEvent};
use rein_core::latency::LatencyHistogram;
use rein_core::retry::RetryRecord;
use rein_core::token_ratio::TokenRatio;

/// Durable state of runs: the runs themselves, their event streams, planned
/// intents, the side-effect ledger, checkpoints and resource leases; and
/// the HTTP idempotency records, singleton leases and shared health of
/// `rein serve`: every capability trait of this module together.
///
/// # Why a trait
///
/// The engine holds an `Arc<dyn Store>` and never sees SQL: the embedded
/// SQLite backend (`rein_store_sqlite::SqliteStore`) serves one node, the
/// PostgreSQL one (`rein_store_postgres::PostgresStore`) several, and both
/// must pass the same conformance suite (`rein_store::conformance`, feature
/// `conformance`).
///
/// # Contract
///
/// - Reads and writes of a run that does not exist fail with
///   [`StoreError::NotFound`] (`what = "run"`).
/// - Event `seq` is assigned by the store per run, from 1 and gap-free;
///   ledger `seq` is the execution order of declarations within the run.
/// - A finished run's status never changes again.
/// - A stored value that cannot be decoded is a [`StoreError::Corrupt`],
///   never a panic.
///
/// # No defaults
///
/// `Store` has no methods of its own and is implemented for every type that
/// implements the five capability traits; those have no provided methods
/// at all: there is no fallback that fails, scans only part of the data, or
/// does in two steps what must be one atomic write, so a backend (or a
/// store wrapping another) that forgets one does not compile, instead of
/// silently breaking a take-over or an idempotency key. The conveniences
/// (each one call of an atomic method: [`RunStore::commit_step`],
/// [`LeaseStore::change_lease`], [`LeaseStore::leases`]) are in
/// [`StoreExt`](crate::StoreExt), blanket-implemented, so a wrapper cannot
/// override one to mean something else.
pub trait Store:
    RunStore + LeaseStore + IdempotencyStore + SingletonStore + HealthStore + WebhookStore + SpendStore
{
}

impl<S> Store for S where
    S: RunStore
        + LeaseStore
        + IdempotencyStore
        + SingletonStore
        + HealthStore
        + WebhookStore
        + SpendStore
        + ?Sized
{
}

/// Runs and their step commits: creating, reading and listing runs, their
/// events, planned intents, ledger and checkpoints, and the one write path,
/// [`RunStore::commit_step`].
///
/// # Writes
///
/// Every write of a run's state goes through [`RunStore::commit_step`],
/// which applies a whole [`StepCommit`] atomically. The single-purpose
/// writers ([`set_run_status`], [`append_events`], [`declare`], [`mark`],
/// ...) are conveniences of [`StoreExt`](crate::StoreExt) that commit one
/// part, so a backend implements the write path once and gets them all
/// with the same semantics.
///
/// [`set_run_status`]: crate::StoreExt::set_run_status
/// [`append_events`]: crate::StoreExt::append_events
/// [`declare`]: crate::StoreExt::declare
/// [`mark`]: crate::StoreExt::mark
#[async_trait]
pub trait RunStore: Send + Sync {
    /// Creates a run, `queued`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Conflict`] when the run id is taken.
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError>;

    /// Creates `run` (`queued`, as [`RunStore::create_run`]) and acquires
    /// `claim`, the lease of the process that drives it, in one atomic
    /// write; with a `fence`, only while its reservation is held (as
    /// [`IdempotencyStore::create_run_held`]).
    ///
    /// # Why one write
    ///
    /// A run created first and claimed next is `queued` and unclaimed in
    /// between: a queue worker of any process sharing the store could pick
    /// it as queued work and win the claim, and the caller that created it
    /// (a sync submission) was then refused its own run. Created with its
    /// claim, the run is never visible unclaimed. The claim cannot come
    /// first: a lease names a run that exists.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a claim that breaks [`Lease::validate`]
    /// or names another run; [`StoreError::Conflict`] when the run id or
    /// the claim's lease id is taken; [`StoreError::ReservationLost`] as
    /// [`IdempotencyStore::create_run_held`]. Nothing is written then.
    async fn create_run_claimed(
        &self,
        run: NewRun,
        claim: Lease,
        fence: Option<&ReservationFence>,
    ) -> Result<RunRecord, StoreError>;

    /// The run, if it exists.
    async fn get_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StoreError>;

    /// Up to `limit` runs, newest (`created_at_ms`) first.
    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError>;

    /// Up to `limit` runs with `status`, oldest (`created_at_ms`, then run
    /// id) first. A finished status matches its outcome only:
    /// `Finished(Succeeded)` lists the succeeded runs, not every finished
    /// one.
    ///
    /// Required: a scan of the newest runs would silently miss older ones
    /// (a takeover scan must see every run). Backends answer it with an
    /// indexed query.
    async fn runs_with_status(
        &self,
        status: RunStatus,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError>;

    // ----- paging and counting runs by status (a server's takeover scan
    // and its drain) -----

    /// Up to `limit` runs with `status` that come after `after` (all of
    /// them when `None`), in the order of [`RunStore::runs_with_status`]: the
    /// next page of a scan that must see every such run, however many of
    /// the oldest ones it passes over.
    async fn runs_with_status_after(
        &self,
        status: RunStatus,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError>;

    /// How many runs have `status`.
    async fn count_runs_with_status(&self, status: RunStatus) -> Result<u64, StoreError>;

    /// The runs whose parent is `parent`, oldest (`created_at_ms`, then run
    /// id) first. A parent without children, or one that does not exist,
    /// has none: an empty list, not [`StoreError::NotFound`].
    async fn children_of(&self, parent: &RunId) -> Result<Vec<RunRecord>, StoreError>;

    /// One page of the runs `filter` selects, newest (`created_at_ms`, then
    /// run id, descending) first: up to `limit` runs that come after
    /// `after` ([`RunCursor::is_newer_than`]; from the newest when `None`),
    /// and the cursor of the next page when more runs follow.
    ///
    /// Paging visits every run that existed when the listing began exactly
    /// once, in order, however many runs are created meanwhile: a run
    /// created later with an older time than the cursor is listed on a
    /// later page, a newer one never (it sorts before the first page).
    ///
    /// Required, not provided: a listing that scanned only the newest runs
    /// would silently stop short, and a wrapping store that forgot to
    /// forward it would list nothing.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a time filter or cursor beyond what the
    /// backend can store.
    async fn list_runs_page(
        &self,
        filter: &RunFilter,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<RunPage, StoreError>;

    /// Every tenant with queued or running root runs (only `tenant`'s when
    /// given), in tenant id order: how many it has of each, and up to
    /// `oldest` of its oldest queued root runs (`created_at_ms`, then run
    /// id). What a queue worker picks from, fairly between tenants, and
    /// what a tenant's run caps are checked against, for every process
    /// sharing the store.
    ///
    /// Required, not provided: counting from a scan of the newest runs
    /// would undercount a long queue, and a tenant whose oldest run it
    /// missed would never be picked.
    async fn tenant_backlogs(
        &self,
        tenant: Option<&TenantId>,
        oldest: usize,
    ) -> Result<Vec<crate::TenantBacklog>, StoreError>;

    /// Every tenant with queued root runs, in tenant id order: how many
    /// root runs it has running, and up to `oldest` of its oldest queued
    /// root runs (`created_at_ms`, then run id). What a queue worker picks
    /// from, fairly between tenants.
    ///
    /// Unlike [`RunStore::tenant_backlogs`], the queued runs are not
    /// counted: a pick is read at every run's end by every worker, and a
    /// count of the queue made each pick cost the whole backlog (behind
    /// 4,500 queued runs of two tenants, SQLite's count took 1 ms where
    /// this takes about 0.05 ms). Required, not provided, for the same
    /// reason as [`RunStore::tenant_backlogs`].
    async fn queue_heads(&self, oldest: usize) -> Result<Vec<crate::QueueHead>, StoreError>;

    /// The run's events with `seq > after_seq`, in `seq` order; `0` gives
    /// them all.
    async fn events(&self, run_id: &RunId, after_seq: u64) -> Result<Vec<Event>, StoreError>;

    /// The run's planned intents with the step that planned each, ordered by
    /// step then ordinal.
    async fn intents(&self, run_id: &RunId) -> Result<Vec<(u32, PlannedIntent)>, StoreError>;

    /// The run's ledger in execution order (`seq`).
    async fn ledger(&self, run_id: &RunId) -> Result<Vec<LedgerRecord>, StoreError>;

    /// Up to `limit` `pending` ledger records across all runs, oldest
    /// declaration first: the reconciler's work list.
    async fn pending_ledger(&self, limit: usize) -> Result<Vec<LedgerRecord>, StoreError>;

    /// The checkpoint of the run's highest step, if any: its latest whole
    /// checkpoint with every [`CheckpointDelta`](crate::CheckpointDelta) after it applied
    /// ([`Checkpoint::rebuild`]).
    ///
    /// # Errors
    ///
    /// [`StoreError::Corrupt`] when the stored parts do not fit together
    /// ([`Checkpoint::apply`]).
    async fn latest_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError>;

    /// Applies every part of `commit` to `run_id` in one transaction, in the
    /// order [`StepCommit`] documents; either all parts are stored or none.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] for an unknown run or a mark of an undeclared
    /// intent; [`StoreError::Invalid`] for an item of another run or a report
    /// that contradicts the status; [`StoreError::InvalidTransition`] for an
    /// illegal mark; [`StoreError::FinishedRun`] for a status change of a
    /// finished run; [`StoreError::StatusChanged`],
    /// [`StoreError::ClaimLost`] or [`StoreError::LedgerChanged`] when
    /// [`StepCommit::expect_status`], [`StepCommit::expect_claim`] or
    /// [`StepCommit::expect_ledger_revision`] does not hold.
    ///
    /// [`StoreError::Unavailable`] only when nothing of the commit was
    /// applied, so that the engine may offer it again: a backend that lost
    /// its connection while committing first learns whether the commit
    /// landed (returning `Ok` if it did) and answers
    /// [`StoreError::InDoubt`] when it cannot learn it.
    ///
    /// # Which parts are safe to offer twice
    ///
    /// A planned intent and a declaration are first-write-wins; a mark to
    /// the status a record already holds leaves the record as it is; a
    /// checkpoint of a step replaces itself. Events and a status change
    /// are not idempotent, which is why a commit is offered again only
    /// after an `Unavailable`.
    async fn commit_step(
        &self,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError>;

    /// The runs `query` selects, counted in the store: by agent and
    /// status, by model, and the guardrails fired by agent
    /// ([`RunStats`](crate::RunStats)). Tokens and cost are those of each
    /// run's report as it stands (revisions included).
    ///
    /// Required, not provided: the point is that the store aggregates;
    /// a default that listed every run would be the scan this replaces.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a time beyond what the backend can
    /// store; [`StoreError::Corrupt`] for a stored status or guardrail it
    /// does not know.
    async fn run_stats(&self, query: &crate::StatsQuery) -> Result<crate::RunStats, StoreError>;

    // ----- cancel requests (a cancel that reaches the driving process
    // through the store; see the `cancel` module docs of this crate) -----

    /// Records a request to cancel `request.run_id`, in one atomic step
    /// against the run finishing, and returns the request as stored: the
    /// first one of the run, kept whole when another arrives.
    ///
    /// Required: a store that dropped it would answer a cancel with 202
    /// and never stop the run.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] (`what = "run"`) for an unknown run;
    /// [`StoreError::FinishedRun`] when the run already ended;
    /// [`StoreError::Invalid`] for a malformed `requested_by`
    /// ([`MAX_CANCEL_REQUESTER_LEN`](crate::MAX_CANCEL_REQUESTER_LEN)).
    async fn request_cancel(&self, request: CancelRequest) -> Result<CancelRequest, StoreError>;

    /// The cancel request of `run_id`, if one was recorded (an unknown run
    /// has none).
    async fn cancel_request(&self, run_id: &RunId) -> Result<Option<CancelRequest>, StoreError>;

    /// The cancel requests recorded for any of `run_ids`, in no particular
    /// order (an unknown run has none): what a process reads at each
    /// heartbeat for every run it drives, in one read rather than one per
    /// run. The default reads them one by one.
    async fn cancel_requests(&self, run_ids: &[RunId]) -> Result<Vec<CancelRequest>, StoreError> {
        let mut requests = Vec::new();
        for run_id in run_ids {
            requests.extend(self.cancel_request(run_id).await?);
        }
        Ok(requests)
    }

    /// Records `decision` on the call `intent_id` of `run_id`, once
    /// (see [`crate::approval`]). A decision after the window closed
    /// records the expiry instead and is refused with it. When it is the
    /// last decision the run waits for and the run is `awaiting_approval`,
    /// the run is `running` again, claim-free, in the same transaction.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] (`what = "approval"`) when the call never
    /// waited; [`StoreError::AlreadyDecided`] with the stored approval
    /// when it was decided (or expired) before; [`StoreError::Invalid`]
    /// for a decision a human may not record.
    async fn decide_approval(
        &self,
        run_id: &RunId,
        intent_id: &IntentId,
        decision: Decision,
    ) -> Result<Decided, StoreError>;

    /// The approvals `filter` selects, oldest request first.
    async fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>, StoreError>;

    /// Records `expired` on up to `limit` undecided approvals whose window
    /// closed by `now_ms`, continuing each run none of whose calls still
    /// waits, as [`RunStore::decide_approval`] does. Returns them, decided.
    async fn expire_approvals(
        &self,
        now_ms: Timestamp,
        limit: usize,
    ) -> Result<Vec<Approval>, StoreError>;

    // ----- notifications (see the `notify` module docs of this crate) -----

    /// A receiver of the [`Notification`](crate::Notification)s of every process sharing the
    /// store, from now on; `None` when the backend does not notify (the
    /// embedded SQLite one: readers poll).
    ///
    /// Provided, returning `None`, unlike the methods above: a
    /// notification is only a hint to read again sooner, and every reader
    /// polls as well, so a store without them is slower, never wrong. A
    /// wrapping store should still forward it.
    fn notifications(&self) -> Option<tokio::sync::broadcast::Receiver<crate::Notification>> {
        None
    }
}

/// Resource leases ([`Lease`]) held for a run until released or reaped.
///
/// # Why their own write path
///
/// Leases have their own write path, [`LeaseStore::change_lease`] (with
/// `acquire_lease`, `renew_lease` and `release_lease` on top, in
/// [`StoreExt`](crate::StoreExt)), and the fenced
/// [`renew_lease_of`], [`release_lease_of`] and [`take_over_lease`], which
/// act only for the lease's holder (or on an expired lease) so that a
/// stalled holder cannot renew or release a lease another process took
/// over. They are not part of a
/// [`StepCommit`]: a lease is taken and released by a tool adapter around
/// one call (and by the reaper after a crash), not at a step boundary, and
/// it must be durable before the resource exists, not when the step ends.
///
/// [`renew_lease_of`]: LeaseStore::renew_lease_of
/// [`release_lease_of`]: LeaseStore::release_lease_of
/// [`take_over_lease`]: LeaseStore::take_over_lease
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Applies one lease change durably and returns the lease as stored
    /// (`None` for a release of a lease that was not held).
    ///
    /// # Errors
    ///
    /// See each [`LeaseChange`] variant; [`StoreError::Invalid`] for a lease
    /// that breaks the invariants of [`Lease::validate`].
    async fn change_lease(&self, change: LeaseChange) -> Result<Option<Lease>, StoreError>;

    /// The held leases that `filter` selects, by `expires_at_ms` then
    /// `lease_id`.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] when the filter names a run that does not
    /// exist.
    async fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError>;

    /// Renews `lease_id` to `expires_at_ms` only if `owner` holds it;
    /// `Ok(false)` when the lease is missing or held by another owner (the
    /// caller lost it), and nothing changed.
    ///
    /// This fences a stalled holder: after another process took the lease
    /// over ([`LeaseStore::take_over_lease`]), the old holder's renewal is
    /// refused instead of extending the new holder's lease.
    ///
    /// One atomic write (the owner check and the renewal together): a
    /// read-then-renew would let a take-over slip in between.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for an empty owner, or (when `owner` holds
    /// the lease) an expiry before its acquisition.
    async fn renew_lease_of(
        &self,
        lease_id: &str,
        owner: &str,
        expires_at_ms: Timestamp,
    ) -> Result<bool, StoreError>;

    /// Renews each of `held` (a lease id and the owner that holds it) as
    /// [`LeaseStore::renew_lease_of`] does, all until `expires_at_ms`, in
    /// one write: a process's heartbeat renews every run it drives at once,
    /// so a beat costs one commit, not one per run. The answer is in
    /// `held`'s order: whether each was renewed. The default renews them
    /// one by one.
    ///
    /// # Errors
    ///
    /// As [`LeaseStore::renew_lease_of`], for any of them. An invalid owner
    /// renews none; a store away may leave the leases of an earlier
    /// transaction renewed (PostgreSQL renews a chunk per transaction, as
    /// its lock table is bounded), as does the default, which renews them
    /// one by one.
    async fn renew_leases_of(
        &self,
        held: &[(String, String)],
        expires_at_ms: Timestamp,
    ) -> Result<Vec<bool>, StoreError> {
        for (_, owner) in held {
            crate::lease::validate_owner(owner)?;
        }
        let mut renewed = Vec::with_capacity(held.len());
        for (lease_id, owner) in held {
            renewed.push(self.renew_lease_of(lease_id, owner, expires_at_ms).await?);
        }
        Ok(renewed)
    }

    /// Releases `lease_id` only if `owner` holds it (expired or not);
    /// `Ok(false)` otherwise, and nothing changed.
    ///
    /// One atomic write, as [`LeaseStore::renew_lease_of`].
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for an empty owner.
    async fn release_lease_of(&self, lease_id: &str, owner: &str) -> Result<bool, StoreError>;

    /// Puts `lease` in place of the lease with the same id if there is none
    /// or the held one expired at `now_ms` (`expires_at_ms <= now_ms`);
    /// `Ok(false)` when a live lease holds the id, and nothing changed.
    ///
    /// Backends make this one atomic write: of any number of concurrent
    /// take-overs of one lease, across processes sharing the store, at most
    /// one returns `true`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a lease that breaks
    /// [`Lease::validate`]; [`StoreError::NotFound`] for an unknown run.
    async fn take_over_lease(&self, lease: Lease, now_ms: Timestamp) -> Result<bool, StoreError>;
}

/// HTTP `Idempotency-Key` records ([`IdempotencyRecord`]; see
/// [`Reservation`] for the decision table), per tenant, until they expire.
///
/// They are not tied to a run: [`IdempotencyStore::reserve_idempotency`]
/// runs before the run exists. Each method is one atomic operation of its
/// own; a reservation in particular reads and writes in one transaction
/// that excludes every other writer of the store, across processes sharing
/// it, so of any number of concurrent reservations of one key exactly one
/// is [`Reservation::Reserved`].
#[async_trait]
pub trait IdempotencyStore: Send + Sync {
    /// Reserves `key` of `tenant` for the request with `fingerprint`, or
    /// says why not, in one atomic step:
    ///
    /// - no record, or one expired at `now_ms` (which is replaced): stores
    ///   an `in_progress` record (created and updated at `now_ms`, expiring
    ///   at `expires_at_ms`) and returns [`Reservation::Reserved`];
    /// - a record with another fingerprint, in any state:
    ///   [`Reservation::Mismatch`];
    /// - a record with this fingerprint: [`Reservation::Replay`] when
    ///   completed, [`Reservation::InProgress`] while in progress.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a key of 0 or more than
    /// [`MAX_IDEMPOTENCY_KEY_LEN`](crate::MAX_IDEMPOTENCY_KEY_LEN) bytes or
    /// with control characters, a fingerprint that is not 64 lowercase hex
    /// digits, or `expires_at_ms <= now_ms`.
    async fn reserve_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Reservation, StoreError>;

    /// [`IdempotencyStore::reserve_idempotency`] for `reservation`, recording its
    /// holder (the process executing the request, the run it starts) in
    /// the same atomic write, so that a holder that dies can be told apart
    /// from one still working ([`IdempotencyStore::settle_idempotency`]).
    ///
    /// # Errors
    ///
    /// As [`IdempotencyStore::reserve_idempotency`]; [`StoreError::Invalid`] for an
    /// empty holder owner.
    async fn reserve_idempotency_as(
        &self,
        reservation: NewReservation,
    ) -> Result<Reservation, StoreError>;

    /// A queued submission under an `Idempotency-Key`, in one atomic write:
    /// the reservation decides as [`IdempotencyStore::reserve_idempotency_as`] does;
    /// when it is [`Reservation::Reserved`], `run` is created (`queued`)
    /// and the record is completed at once with `response` and the run's
    /// id. Otherwise nothing is written and the decision is returned.
    ///
    /// # Why one write
    ///
    /// Reserving, enqueueing and completing in three writes let a process
    /// killed between them leave the key `in_progress` with no run, or with
    /// a run the client could never learn: every retry then answered 409
    /// until the record expired, and a client that gave up and used a new
    /// key ran the operation twice.
    ///
    /// # Errors
    ///
    /// As [`IdempotencyStore::reserve_idempotency_as`]; [`StoreError::Conflict`] when
    /// the run id is taken, [`StoreError::Invalid`] for a response that is
    /// not 2xx — and then nothing is written.
    async fn submit_queued(
        &self,
        reservation: NewReservation,
        run: NewRun,
        response: StoredResponse,
    ) -> Result<Reservation, StoreError>;

    /// Settles the `in_progress` record of `key` held by `owner` (its
    /// holder answering, or a retry resolving a holder that is gone):
    /// completes it with a response ([`IdempotencySettlement::Complete`],
    /// updated at `now_ms`), or deletes it ([`IdempotencySettlement::Release`]).
    ///
    /// Applies only while the record is `in_progress` and held by `owner`
    /// (else [`IdempotencySettled::Superseded`]): fenced so that of two
    /// retries resolving the same dead holder at once, the loser cannot
    /// release the reservation the winner's fresh request just made. A
    /// release applies only while no run with the record's `run_id` exists
    /// (else [`IdempotencySettled::RunExists`]), checked in the same atomic
    /// write: a holder judged dead wrongly may create its run at any moment
    /// before, and a key whose run exists must answer from it, never start
    /// a second one.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a response that is not 2xx.
    async fn settle_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        settlement: IdempotencySettlement,
        now_ms: Timestamp,
    ) -> Result<IdempotencySettled, StoreError>;

    /// The heartbeat of a reservation's holder: sets the `in_progress`
    /// record of `key` held by `owner` to be held until `until_ms`
    /// (`holder_until_ms`). Returns whether it did: `false` when the record
    /// is no longer this holder's reservation in progress (completed,
    /// released, or resolved by a retry that took the holder for dead).
    ///
    /// A holder that gives its reservation up while alive (a draining
    /// server that handed its run on) renews it until now: a retry then
    /// resolves it at once, from its run.
    async fn renew_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        until_ms: Timestamp,
    ) -> Result<bool, StoreError>;

    /// Creates `run` (`queued`, as [`RunStore::create_run`]) only while the
    /// `in_progress` record of the fence's key is held by its owner, in one
    /// atomic write: the run of a sync submission, fenced on the
    /// reservation that names it.
    ///
    /// # Why
    ///
    /// A retry that took the holder for dead (its heartbeat lapsed while
    /// it stalled) releases the record when no run exists and executes the
    /// request itself. The stalled holder must then not create its run: it
    /// would be a second run of the same request.
    ///
    /// # Errors
    ///
    /// [`StoreError::ReservationLost`] when the record is not `owner`'s
    /// reservation in progress, and nothing is written; as
    /// [`RunStore::create_run`] otherwise.
    async fn create_run_held(
        &self,
        run: NewRun,
        fence: &ReservationFence,
    ) -> Result<RunRecord, StoreError>;

    /// Completes the `in_progress` record of `key`: stores `response` and
    /// moves it to `completed` (updated at `now_ms`; its expiry stays).
    ///
    /// The fingerprint is not checked again: a request that outlives its
    /// record's expiry could complete a newer reservation of the key, so
    /// the retention must stay well above the endpoint's longest answer.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] (`what = "idempotency record"`) when there
    /// is no record; [`StoreError::Invalid`] when it is already completed
    /// or `response` is not 2xx ([`StoredResponse::validate`]).
    async fn complete_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        response: StoredResponse,
        now_ms: Timestamp,
    ) -> Result<(), StoreError>;

    /// Releases the reservation of `key` after the endpoint failed, so a
    /// retry can run: deletes the record only while it is `in_progress`.
    /// Returns whether a record was deleted (a completed one never is).
    async fn release_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError>;

    /// Up to `limit` stored records, expired or not, of `tenant` (all
    /// tenants when `None`) in `state` (any when `None`), oldest
    /// (`created_at_ms`, then tenant and key) first: what an operator lists
    /// to find reservations a crash left behind.
    async fn idempotency_records(
        &self,
        tenant: Option<&TenantId>,
        state: Option<IdempotencyState>,
        limit: usize,
    ) -> Result<Vec<IdempotencyRecord>, StoreError>;

    /// Deletes the record of `key` in any state (an operator clearing a
    /// stuck reservation). Returns whether there was one.
    async fn clear_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError>;

    /// Deletes up to `limit` records expired at `now_ms`
    /// (`expires_at_ms <= now_ms`), in any state, soonest expiry first, and
    /// returns how many it deleted: the sweeper's step.
    async fn sweep_idempotency(&self, now_ms: Timestamp, limit: usize)
    -> Result<usize, StoreError>;
}

/// Singleton leases ([`SingletonLease`]): elects the one process, among
/// those sharing the store, that runs a periodic service.
///
/// [`SingletonStore::claim_singleton`] is one atomic operation that
/// excludes every other writer of the store, across processes, so of any
/// number of concurrent claims of a free lease exactly one wins.
#[async_trait]
pub trait SingletonStore: Send + Sync {
    /// Takes or renews the singleton lease `name` for `owner` until
    /// `expires_at_ms`, in one atomic step across every process sharing the
    /// store. Returns the lease as stored when:
    ///
    /// - nobody holds it, or its holder's lease expired at `now_ms`
    ///   (`expires_at_ms <= now_ms`), even `owner`'s own: a new tenure,
    ///   acquired at `now_ms`;
    /// - `owner` holds it, live: a renewal, the expiry moves to
    ///   `expires_at_ms` and `acquired_at_ms` is kept.
    ///
    /// Otherwise returns `None`: another live owner holds it, and the
    /// caller must not act as owner.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a name or owner of 0 or more than
    /// [`MAX_SINGLETON_LEN`](crate::MAX_SINGLETON_LEN) bytes or with
    /// control characters, or `expires_at_ms <= now_ms`.
    async fn claim_singleton(
        &self,
        name: &str,
        owner: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Option<SingletonLease>, StoreError>;

    /// Gives the singleton lease `name` up if `owner` holds it (expired or
    /// not); returns whether it did. Another owner's lease is left alone.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a malformed name or owner (as for
    /// [`SingletonStore::claim_singleton`]).
    async fn release_singleton(&self, name: &str, owner: &str) -> Result<bool, StoreError>;

    /// The current holder of the singleton lease `name`, expired or not
    /// (check [`SingletonLease::is_expired`]).
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a malformed name (as for
    /// [`SingletonStore::claim_singleton`]).
    async fn singleton(&self, name: &str) -> Result<Option<SingletonLease>, StoreError>;
}

/// Health shared by every process sharing the store: open circuit breaker
/// arms, observed latency and retry outcomes.
///
/// # Breaker openings
///
/// A [`BreakerOpening`] shares one node's open circuit breaker arm with
/// every process sharing the store (see the `breaker` module docs of this
/// crate).
///
/// # Latency histograms
///
/// Observed latency (see the `latency` module docs of this crate): each
/// process adds the samples it recorded since its last merge to the stored
/// histogram of each subject ([`HealthStore::merge_latency`], one
/// transaction), and any process reads the sums
/// ([`HealthStore::latency_histograms`]).
#[async_trait]
pub trait HealthStore: Send + Sync {
    /// Publishes that `opening.arm` refuses calls until
    /// `opening.open_until_ms`, in one atomic step across every process
    /// sharing the store. An opening of the arm already stored that stays
    /// open longer is kept whole (its node and reason with it); otherwise
    /// `opening` replaces it. Returns the opening as stored. A reason over
    /// [`MAX_BREAKER_REASON_LEN`](crate::MAX_BREAKER_REASON_LEN) bytes is
    /// cut.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for an arm or `opened_by` of 0 or more than
    /// [`MAX_BREAKER_ARM_LEN`](crate::MAX_BREAKER_ARM_LEN) bytes or with
    /// control characters.
    async fn publish_breaker_open(
        &self,
        opening: BreakerOpening,
    ) -> Result<BreakerOpening, StoreError>;

    /// The openings still in force at `now_ms` (`open_until_ms > now_ms`),
    /// by arm name. Ended ones stay stored until cleared or replaced, but
    /// are never listed.
    async fn breaker_openings(&self, now_ms: Timestamp) -> Result<Vec<BreakerOpening>, StoreError>;

    /// Deletes `arm`'s opening if `opened_by` published it (the node's arm
    /// closed after a successful probe); returns whether it did. An opening
    /// another node published since is left alone: that node's evidence is
    /// newer than this one's recovery.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a malformed arm or node (as for
    /// [`HealthStore::publish_breaker_open`]).
    async fn clear_breaker_open(&self, arm: &str, opened_by: &str) -> Result<bool, StoreError>;

    /// Adds each `(subject, delta)` to its subject's stored histogram, all
    /// in one transaction across every process sharing the store (two
    /// processes merging at once both count), and returns the sums of those
    /// subjects. A stored histogram that cannot be read is replaced by the
    /// delta and listed in [`LatencyRows::corrupt`]; a delta of a subject
    /// listed twice counts twice. Empty deltas change nothing (their
    /// subjects are still returned if stored).
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a subject of 0 or more than
    /// [`MAX_LATENCY_SUBJECT_LEN`](crate::MAX_LATENCY_SUBJECT_LEN) bytes or
    /// with control characters (nothing is written then).
    async fn merge_latency(
        &self,
        deltas: &[(String, LatencyHistogram)],
        now_ms: Timestamp,
    ) -> Result<LatencyRows, StoreError>;

    /// Every stored histogram, by subject; rows that cannot be read are
    /// listed in [`LatencyRows::corrupt`] with the reason, never a failure
    /// of the whole read.
    async fn latency_histograms(&self) -> Result<LatencyRows, StoreError>;

    /// Adds each `(model, delta)` to its model's stored bytes-per-token
    /// ratio (samples summed, the least ratio kept), all in one
    /// transaction across every process sharing the store, and returns
    /// the sums of those models (see the `token_ratio` module docs of
    /// this crate). A delta without samples changes nothing.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a model key of 0 or more than
    /// [`MAX_LATENCY_SUBJECT_LEN`](crate::MAX_LATENCY_SUBJECT_LEN) bytes or
    /// with control characters (nothing is written then).
    async fn merge_token_ratios(
        &self,
        deltas: &[(String, TokenRatio)],
        now_ms: Timestamp,
    ) -> Result<Vec<TokenRatioRecord>, StoreError>;

    /// Every stored ratio, by model.
    async fn token_ratios(&self) -> Result<Vec<TokenRatioRecord>, StoreError>;

    /// Decays each `(target, delta)`'s stored retry outcomes to `now_ms`
    /// (see the `retry_outcome` module docs of this crate) and adds the
    /// delta, all in one transaction across every process sharing the
    /// store (two processes merging at once both count), and returns the
    /// sums of those targets. A target listed twice counts twice. An empty
    /// delta writes nothing (its target is still returned, decayed to
    /// `now_ms`, if stored).
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a target of 0 or more than
    /// [`MAX_RETRY_TARGET_LEN`](crate::MAX_RETRY_TARGET_LEN) bytes or with
    /// control characters (nothing is written then).
    async fn merge_retry_outcomes(
        &self,
        deltas: &[(String, RetryRecord)],
        now_ms: Timestamp,
    ) -> Result<Vec<RetryOutcomes>, StoreError>;

    /// Every stored target's retry outcomes decayed to `now_ms`, by
    /// target; targets whose counts decayed to nothing are left out.
    /// Nothing is written.
    async fn retry_outcomes(&self, now_ms: Timestamp) -> Result<Vec<RetryOutcomes>, StoreError>;

    // ----- share leases: the nodes dividing a resource group's limits -----

    /// Takes or renews `node`'s share lease of `group` until
    /// `expires_at_ms`, deletes the group's leases expired at `now_ms`, and
    /// returns the nodes holding a live one (`expires_at_ms > now_ms`),
    /// `node` included, sorted — all in one atomic step across every
    /// process sharing the store, so of two nodes renewing at once the
    /// second lists the first.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a group or node of 0 or more than
    /// [`MAX_SHARE_LEASE_LEN`](crate::MAX_SHARE_LEASE_LEN) bytes or with
    /// control characters, or `expires_at_ms <= now_ms` (nothing is
    /// written then).
    async fn renew_share_lease(
        &self,
        group: &str,
        node: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Vec<String>, StoreError>;

    /// Gives `node`'s share lease of `group` up; returns whether it held
    /// one. The other nodes' leases are left alone.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a malformed group or node (as for
    /// [`HealthStore::renew_share_lease`]).
    async fn release_share_lease(&self, group: &str, node: &str) -> Result<bool, StoreError>;
}

/// The webhook outbox (see the `webhook` module docs of this crate): the
/// events recorded for webhooks with the events themselves, routed to the
/// configured webhooks, claimed, attempted and logged.
///
/// Every method is one atomic write or one read, across every process
/// sharing the store; the dispatcher runs under a singleton, and the
/// claims keep a second one (a node that lost its singleton mid-send)
/// from sending a delivery again before the first attempt's claim runs
/// out. Delivery stays at least once: a receiver deduplicates by
/// `Rein-Event-Id`.
#[async_trait]
pub trait WebhookStore: Send + Sync {
    /// Up to `limit` events not routed yet, oldest first.
    async fn unrouted_webhook_events(&self, limit: usize) -> Result<Vec<WebhookEvent>, StoreError>;

    /// Records one pending delivery of `event_id` for each of `webhooks`
    /// (due at `now_ms`; one already there is kept as it is) and marks the
    /// event routed, in one atomic write. An empty list only marks it: no
    /// webhook wants it.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] (`what = "webhook event"`) for an unknown
    /// event; [`StoreError::Invalid`] for a malformed webhook name
    /// (nothing is written then).
    async fn route_webhook_event(
        &self,
        event_id: &str,
        webhooks: &[String],
        now_ms: Timestamp,
    ) -> Result<(), StoreError>;

    /// Up to `limit` pending deliveries due at `now_ms` (next attempt at or
    /// before it) and not claimed past it, oldest due first, each claimed
    /// until `claim_until_ms` in the same atomic write.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] when `claim_until_ms <= now_ms`.
    async fn claim_webhook_deliveries(
        &self,
        now_ms: Timestamp,
        claim_until_ms: Timestamp,
        limit: usize,
    ) -> Result<Vec<DueDelivery>, StoreError>;

    /// Records `attempt` on its pending delivery (attempts, last answer,
    /// the state and next attempt it leads to) and releases its claim;
    /// returns the delivery as it stands. A delivery no longer pending
    /// (delivered or given up by an earlier attempt) is left as it is.
    ///
    /// # Errors
    ///
    /// [`StoreError::NotFound`] (`what = "webhook delivery"`) when there is
    /// no such delivery.
    async fn record_webhook_attempt(
        &self,
        attempt: &WebhookAttempt,
    ) -> Result<WebhookDelivery, StoreError>;

    /// Deletes, of the events created before `before_ms`, the deliveries
    /// that are over (delivered or given up) and then the routed events
    /// left without a delivery, up to `limit` events; returns how many
    /// events it deleted. A pending delivery and an unrouted event are
    /// kept, whatever their age: nothing is dropped before it was decided.
    async fn prune_webhook_outbox(
        &self,
        before_ms: Timestamp,
        limit: usize,
    ) -> Result<u64, StoreError>;

    /// Up to `limit` (at most
    /// [`MAX_WEBHOOK_PAGE`](crate::webhook::MAX_WEBHOOK_PAGE)) deliveries of
    /// `webhook`, newest event first: its delivery log.
    async fn webhook_deliveries(
        &self,
        webhook: &str,
        limit: usize,
    ) -> Result<Vec<WebhookDelivery>, StoreError>;
}

/// What API keys spent on models ([`crate::SpendDelta`]), per tenant, key,
/// model and UTC day, summed over every process on the store.
#[async_trait]
pub trait SpendStore: Send + Sync {
    /// Adds each delta to its row (creating it at zero), atomically with
    /// other processes' additions.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a delta [`validate_spend`] refuses
    /// (nothing is written); the backend's errors.
    ///
    /// [`validate_spend`]: crate::rules::validate_spend
    async fn add_spend(&self, deltas: &[crate::SpendDelta]) -> Result<(), StoreError>;

    /// The rows `query` selects, by day, tenant, key and model.
    async fn spend(&self, query: &crate::SpendQuery) -> Result<Vec<crate::SpendRow>, StoreError>;
}

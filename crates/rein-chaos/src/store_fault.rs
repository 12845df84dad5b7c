//! Storage faults: a [`Store`] whose writes fail on a plan.
//!
//! # Why a wrapper and not a broken database
//!
//! The faults the orchestration layer must survive are "the store is
//! briefly unreachable" and "a checkpoint write failed". A wrapper makes
//! them exact and reproducible — the n-th commit fails, and only it —
//! while every write that does go through lands in the real SQLite file,
//! so recovery is tested against real durable state. Reads are never
//! faulted: the checker reads the truth through the same store.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rein_core::{Event, LedgerRecord, RunId, TenantId};
use rein_store::{
    BreakerOpening, Checkpoint, Committed, HealthStore, IdempotencyRecord, IdempotencyState,
    IdempotencyStore, Lease, LeaseChange, LeaseFilter, LeaseStore, NewRun, PlannedIntent,
    Reservation, RunRecord, RunStore, SingletonLease, SingletonStore, StepCommit, Store,
    StoreError, StoredResponse,
};
use serde::{Deserialize, Serialize};

/// One planned storage fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StoreFault {
    /// Commits number `from ..= from + count - 1` (1-based, every
    /// `commit_step` counted) fail as [`StoreError::Unavailable`]: the
    /// store is down for a window.
    Unavailable {
        /// The first failing commit.
        from: u32,
        /// How many fail.
        count: u32,
    },
    /// The `nth` commit that carries a checkpoint fails (1-based).
    CheckpointFails {
        /// Which checkpoint write.
        nth: u32,
    },
    /// The first `count` commits that end a run (a status change to an
    /// outcome) fail as [`StoreError::Unavailable`]: the one write of a
    /// run that must land is refused, whoever offers it.
    EndsUnavailable {
        /// How many fail.
        count: u32,
    },
}

/// A [`Store`] that fails writes according to its plan.
pub struct FaultyStore {
    inner: Arc<dyn Store>,
    faults: Vec<StoreFault>,
    commits: AtomicU32,
    checkpoints: AtomicU32,
    ends: AtomicU32,
    injected: Mutex<Vec<String>>,
}

impl FaultyStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>, faults: Vec<StoreFault>) -> FaultyStore {
        FaultyStore {
            inner,
            faults,
            commits: AtomicU32::new(0),
            checkpoints: AtomicU32::new(0),
            ends: AtomicU32::new(0),
            injected: Mutex::new(Vec::new()),
        }
    }

    /// What was injected, one line per refused write.
    pub fn injected(&self) -> Vec<String> {
        self.injected
            .lock()
            .map(|v| v.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    fn refuse(&self, what: String) -> StoreError {
        match self.injected.lock() {
            Ok(mut v) => v.push(what.clone()),
            Err(p) => p.into_inner().push(what.clone()),
        }
        StoreError::Unavailable(format!("injected by rein-chaos: {what}"))
    }

    /// The fault for this commit, if any.
    fn fault_for(&self, commit: &StepCommit) -> Option<String> {
        let n = self.commits.fetch_add(1, Ordering::SeqCst) + 1;
        let checkpoint = if commit.writes_checkpoint() {
            Some(self.checkpoints.fetch_add(1, Ordering::SeqCst) + 1)
        } else {
            None
        };
        let end = commit
            .status
            .as_ref()
            .is_some_and(|s| s.status.is_finished())
            .then(|| self.ends.fetch_add(1, Ordering::SeqCst) + 1);
        self.faults.iter().find_map(|f| match *f {
            StoreFault::Unavailable { from, count } if n >= from && n - from < count => {
                Some(format!("commit {n} refused (store unavailable)"))
            }
            StoreFault::CheckpointFails { nth } if checkpoint == Some(nth) => {
                Some(format!("checkpoint write {nth} (commit {n}) refused"))
            }
            StoreFault::EndsUnavailable { count } if end.is_some_and(|e| e <= count) => {
                Some(format!("the end of a run (commit {n}) refused"))
            }
            _ => None,
        })
    }
}

#[async_trait]
impl RunStore for FaultyStore {
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        self.inner.create_run(run).await
    }

    async fn get_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.inner.get_run(run_id).await
    }

    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.list_runs(limit).await
    }

    async fn tenant_backlogs(
        &self,
        tenant: Option<&rein_core::TenantId>,
        oldest: usize,
    ) -> Result<Vec<rein_store::TenantBacklog>, rein_store::StoreError> {
        self.inner.tenant_backlogs(tenant, oldest).await
    }

    async fn list_runs_page(
        &self,
        filter: &rein_store::RunFilter,
        after: Option<&rein_store::RunCursor>,
        limit: usize,
    ) -> Result<rein_store::RunPage, StoreError> {
        self.inner.list_runs_page(filter, after, limit).await
    }

    async fn events(&self, run_id: &RunId, after_seq: u64) -> Result<Vec<Event>, StoreError> {
        self.inner.events(run_id, after_seq).await
    }

    async fn intents(&self, run_id: &RunId) -> Result<Vec<(u32, PlannedIntent)>, StoreError> {
        self.inner.intents(run_id).await
    }

    async fn ledger(&self, run_id: &RunId) -> Result<Vec<LedgerRecord>, StoreError> {
        self.inner.ledger(run_id).await
    }

    async fn pending_ledger(&self, limit: usize) -> Result<Vec<LedgerRecord>, StoreError> {
        self.inner.pending_ledger(limit).await
    }

    async fn latest_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError> {
        self.inner.latest_checkpoint(run_id).await
    }

    async fn commit_step(
        &self,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        if let Some(what) = self.fault_for(&commit) {
            return Err(self.refuse(what));
        }
        self.inner.commit_step(run_id, commit).await
    }

    async fn runs_with_status(
        &self,
        status: rein_store::RunStatus,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.runs_with_status(status, limit).await
    }

    async fn runs_with_status_after(
        &self,
        status: rein_store::RunStatus,
        after: Option<&rein_store::RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.inner
            .runs_with_status_after(status, after, limit)
            .await
    }

    async fn count_runs_with_status(
        &self,
        status: rein_store::RunStatus,
    ) -> Result<u64, StoreError> {
        self.inner.count_runs_with_status(status).await
    }

    async fn children_of(&self, parent: &RunId) -> Result<Vec<RunRecord>, StoreError> {
        self.inner.children_of(parent).await
    }

    async fn run_stats(
        &self,
        query: &rein_store::StatsQuery,
    ) -> Result<rein_store::RunStats, rein_store::StoreError> {
        self.inner.run_stats(query).await
    }

    async fn request_cancel(
        &self,
        request: rein_store::CancelRequest,
    ) -> Result<rein_store::CancelRequest, rein_store::StoreError> {
        self.inner.request_cancel(request).await
    }

    async fn cancel_request(
        &self,
        run_id: &rein_core::RunId,
    ) -> Result<Option<rein_store::CancelRequest>, rein_store::StoreError> {
        self.inner.cancel_request(run_id).await
    }

    fn notifications(&self) -> Option<tokio::sync::broadcast::Receiver<rein_store::Notification>> {
        self.inner.notifications()
    }
}

#[async_trait]
impl LeaseStore for FaultyStore {
    async fn change_lease(&self, change: LeaseChange) -> Result<Option<Lease>, StoreError> {
        self.inner.change_lease(change).await
    }

    async fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
        self.inner.leases(filter).await
    }

    async fn renew_lease_of(
        &self,
        lease_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        self.inner
            .renew_lease_of(lease_id, owner, expires_at_ms)
            .await
    }

    async fn release_lease_of(&self, lease_id: &str, owner: &str) -> Result<bool, StoreError> {
        self.inner.release_lease_of(lease_id, owner).await
    }

    async fn take_over_lease(&self, lease: Lease, now_ms: u64) -> Result<bool, StoreError> {
        self.inner.take_over_lease(lease, now_ms).await
    }
}

#[async_trait]
impl IdempotencyStore for FaultyStore {
    async fn reserve_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        now_ms: u64,
        expires_at_ms: u64,
    ) -> Result<Reservation, StoreError> {
        self.inner
            .reserve_idempotency(tenant, key, fingerprint, now_ms, expires_at_ms)
            .await
    }

    async fn complete_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        response: StoredResponse,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        self.inner
            .complete_idempotency(tenant, key, response, now_ms)
            .await
    }

    async fn release_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        self.inner.release_idempotency(tenant, key).await
    }

    async fn reserve_idempotency_as(
        &self,
        reservation: rein_store::NewReservation,
    ) -> Result<Reservation, StoreError> {
        self.inner.reserve_idempotency_as(reservation).await
    }

    async fn submit_queued(
        &self,
        reservation: rein_store::NewReservation,
        run: NewRun,
        response: StoredResponse,
    ) -> Result<Reservation, StoreError> {
        self.inner.submit_queued(reservation, run, response).await
    }

    async fn settle_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        settlement: rein_store::IdempotencySettlement,
        now_ms: u64,
    ) -> Result<rein_store::IdempotencySettled, StoreError> {
        self.inner
            .settle_idempotency(tenant, key, owner, settlement, now_ms)
            .await
    }

    async fn renew_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        until_ms: u64,
    ) -> Result<bool, StoreError> {
        self.inner
            .renew_idempotency(tenant, key, owner, until_ms)
            .await
    }

    async fn create_run_held(
        &self,
        run: NewRun,
        fence: &rein_store::ReservationFence,
    ) -> Result<RunRecord, StoreError> {
        self.inner.create_run_held(run, fence).await
    }

    async fn idempotency_records(
        &self,
        tenant: Option<&TenantId>,
        state: Option<IdempotencyState>,
        limit: usize,
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        self.inner.idempotency_records(tenant, state, limit).await
    }

    async fn clear_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        self.inner.clear_idempotency(tenant, key).await
    }

    async fn sweep_idempotency(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        self.inner.sweep_idempotency(now_ms, limit).await
    }
}

#[async_trait]
impl SingletonStore for FaultyStore {
    async fn claim_singleton(
        &self,
        name: &str,
        owner: &str,
        now_ms: u64,
        expires_at_ms: u64,
    ) -> Result<Option<SingletonLease>, StoreError> {
        self.inner
            .claim_singleton(name, owner, now_ms, expires_at_ms)
            .await
    }

    async fn release_singleton(&self, name: &str, owner: &str) -> Result<bool, StoreError> {
        self.inner.release_singleton(name, owner).await
    }

    async fn singleton(&self, name: &str) -> Result<Option<SingletonLease>, StoreError> {
        self.inner.singleton(name).await
    }
}

#[async_trait]
impl HealthStore for FaultyStore {
    async fn publish_breaker_open(
        &self,
        opening: BreakerOpening,
    ) -> Result<BreakerOpening, StoreError> {
        self.inner.publish_breaker_open(opening).await
    }

    async fn breaker_openings(&self, now_ms: u64) -> Result<Vec<BreakerOpening>, StoreError> {
        self.inner.breaker_openings(now_ms).await
    }

    async fn clear_breaker_open(&self, arm: &str, opened_by: &str) -> Result<bool, StoreError> {
        self.inner.clear_breaker_open(arm, opened_by).await
    }

    async fn merge_latency(
        &self,
        deltas: &[(String, rein_core::latency::LatencyHistogram)],
        now_ms: u64,
    ) -> Result<rein_store::LatencyRows, rein_store::StoreError> {
        self.inner.merge_latency(deltas, now_ms).await
    }

    async fn latency_histograms(&self) -> Result<rein_store::LatencyRows, rein_store::StoreError> {
        self.inner.latency_histograms().await
    }

    async fn renew_share_lease(
        &self,
        group: &str,
        node: &str,
        now_ms: u64,
        expires_at_ms: u64,
    ) -> Result<Vec<String>, rein_store::StoreError> {
        self.inner
            .renew_share_lease(group, node, now_ms, expires_at_ms)
            .await
    }

    async fn release_share_lease(
        &self,
        group: &str,
        node: &str,
    ) -> Result<bool, rein_store::StoreError> {
        self.inner.release_share_lease(group, node).await
    }
}

//! A [`Store`] whose calls keep paused tokio time still while they wait.
//!
//! # Why
//!
//! Under `start_paused`, tokio moves time forward whenever the runtime has
//! nothing to do — to the next timer. The SQLite store answers from its own
//! thread, so while a run awaits a commit the runtime looks idle, and time
//! would jump to the next timer (a first-byte limit, a heartbeat) in the
//! middle of a step. Tokio does not advance paused time while a
//! `spawn_blocking` task is alive, so each call here keeps one parked on a
//! channel until the store answered. Outside paused time it only costs a
//! blocking-pool thread per call.

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use rein_core::{Event, LedgerRecord, RunId, TenantId};
use rein_store::{
    BreakerOpening, Checkpoint, Committed, HealthStore, IdempotencyRecord, IdempotencySettled,
    IdempotencySettlement, IdempotencyState, IdempotencyStore, Lease, LeaseChange, LeaseFilter,
    LeaseStore, NewReservation, NewRun, PlannedIntent, Reservation, ReservationFence, RunCursor,
    RunFilter, RunPage, RunRecord, RunStatus, RunStore, SingletonLease, SingletonStore, StepCommit,
    Store, StoreError, StoredResponse,
};

/// Forwards every call to the store it wraps, holding paused time still
/// until the call returns.
pub struct PauseSafeStore(pub Arc<dyn Store>);

/// Awaits `op` while a blocking task is alive (paused time cannot advance).
async fn held<T>(op: impl Future<Output = T>) -> T {
    let (done, parked) = std::sync::mpsc::channel::<()>();
    let blocker = tokio::task::spawn_blocking(move || {
        let _ = parked.recv();
    });
    let out = op.await;
    drop(done);
    let _ = blocker.await;
    out
}

#[async_trait]
impl RunStore for PauseSafeStore {
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        held(self.0.create_run(run)).await
    }

    async fn get_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        held(self.0.get_run(run_id)).await
    }

    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        held(self.0.list_runs(limit)).await
    }

    async fn tenant_backlogs(
        &self,
        tenant: Option<&rein_core::TenantId>,
        oldest: usize,
    ) -> Result<Vec<rein_store::TenantBacklog>, rein_store::StoreError> {
        held(self.0.tenant_backlogs(tenant, oldest)).await
    }

    async fn list_runs_page(
        &self,
        filter: &RunFilter,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        held(self.0.list_runs_page(filter, after, limit)).await
    }

    async fn runs_with_status(
        &self,
        status: RunStatus,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        held(self.0.runs_with_status(status, limit)).await
    }

    async fn runs_with_status_after(
        &self,
        status: RunStatus,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        held(self.0.runs_with_status_after(status, after, limit)).await
    }

    async fn count_runs_with_status(&self, status: RunStatus) -> Result<u64, StoreError> {
        held(self.0.count_runs_with_status(status)).await
    }

    async fn children_of(&self, parent: &RunId) -> Result<Vec<RunRecord>, StoreError> {
        held(self.0.children_of(parent)).await
    }

    async fn events(&self, run_id: &RunId, after_seq: u64) -> Result<Vec<Event>, StoreError> {
        held(self.0.events(run_id, after_seq)).await
    }

    async fn intents(&self, run_id: &RunId) -> Result<Vec<(u32, PlannedIntent)>, StoreError> {
        held(self.0.intents(run_id)).await
    }

    async fn ledger(&self, run_id: &RunId) -> Result<Vec<LedgerRecord>, StoreError> {
        held(self.0.ledger(run_id)).await
    }

    async fn pending_ledger(&self, limit: usize) -> Result<Vec<LedgerRecord>, StoreError> {
        held(self.0.pending_ledger(limit)).await
    }

    async fn latest_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError> {
        held(self.0.latest_checkpoint(run_id)).await
    }

    async fn commit_step(
        &self,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        held(self.0.commit_step(run_id, commit)).await
    }

    async fn run_stats(
        &self,
        query: &rein_store::StatsQuery,
    ) -> Result<rein_store::RunStats, rein_store::StoreError> {
        held(self.0.run_stats(query)).await
    }

    async fn request_cancel(
        &self,
        request: rein_store::CancelRequest,
    ) -> Result<rein_store::CancelRequest, rein_store::StoreError> {
        held(self.0.request_cancel(request)).await
    }

    async fn cancel_request(
        &self,
        run_id: &rein_core::RunId,
    ) -> Result<Option<rein_store::CancelRequest>, rein_store::StoreError> {
        held(self.0.cancel_request(run_id)).await
    }
}

#[async_trait]
impl LeaseStore for PauseSafeStore {
    async fn change_lease(&self, change: LeaseChange) -> Result<Option<Lease>, StoreError> {
        held(self.0.change_lease(change)).await
    }

    async fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
        held(self.0.leases(filter)).await
    }

    async fn renew_lease_of(
        &self,
        lease_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        held(self.0.renew_lease_of(lease_id, owner, expires_at_ms)).await
    }

    async fn release_lease_of(&self, lease_id: &str, owner: &str) -> Result<bool, StoreError> {
        held(self.0.release_lease_of(lease_id, owner)).await
    }

    async fn take_over_lease(&self, lease: Lease, now_ms: u64) -> Result<bool, StoreError> {
        held(self.0.take_over_lease(lease, now_ms)).await
    }
}

#[async_trait]
impl IdempotencyStore for PauseSafeStore {
    async fn reserve_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        now_ms: u64,
        expires_at_ms: u64,
    ) -> Result<Reservation, StoreError> {
        held(
            self.0
                .reserve_idempotency(tenant, key, fingerprint, now_ms, expires_at_ms),
        )
        .await
    }

    async fn reserve_idempotency_as(
        &self,
        reservation: NewReservation,
    ) -> Result<Reservation, StoreError> {
        held(self.0.reserve_idempotency_as(reservation)).await
    }

    async fn submit_queued(
        &self,
        reservation: NewReservation,
        run: NewRun,
        response: StoredResponse,
    ) -> Result<Reservation, StoreError> {
        held(self.0.submit_queued(reservation, run, response)).await
    }

    async fn settle_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        settlement: IdempotencySettlement,
        now_ms: u64,
    ) -> Result<IdempotencySettled, StoreError> {
        held(
            self.0
                .settle_idempotency(tenant, key, owner, settlement, now_ms),
        )
        .await
    }

    async fn renew_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        until_ms: u64,
    ) -> Result<bool, StoreError> {
        held(self.0.renew_idempotency(tenant, key, owner, until_ms)).await
    }

    async fn create_run_held(
        &self,
        run: NewRun,
        fence: &ReservationFence,
    ) -> Result<RunRecord, StoreError> {
        held(self.0.create_run_held(run, fence)).await
    }

    async fn complete_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        response: StoredResponse,
        now_ms: u64,
    ) -> Result<(), StoreError> {
        held(self.0.complete_idempotency(tenant, key, response, now_ms)).await
    }

    async fn release_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        held(self.0.release_idempotency(tenant, key)).await
    }

    async fn idempotency_records(
        &self,
        tenant: Option<&TenantId>,
        state: Option<IdempotencyState>,
        limit: usize,
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        held(self.0.idempotency_records(tenant, state, limit)).await
    }

    async fn clear_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        held(self.0.clear_idempotency(tenant, key)).await
    }

    async fn sweep_idempotency(&self, now_ms: u64, limit: usize) -> Result<usize, StoreError> {
        held(self.0.sweep_idempotency(now_ms, limit)).await
    }
}

#[async_trait]
impl SingletonStore for PauseSafeStore {
    async fn claim_singleton(
        &self,
        name: &str,
        owner: &str,
        now_ms: u64,
        expires_at_ms: u64,
    ) -> Result<Option<SingletonLease>, StoreError> {
        held(self.0.claim_singleton(name, owner, now_ms, expires_at_ms)).await
    }

    async fn release_singleton(&self, name: &str, owner: &str) -> Result<bool, StoreError> {
        held(self.0.release_singleton(name, owner)).await
    }

    async fn singleton(&self, name: &str) -> Result<Option<SingletonLease>, StoreError> {
        held(self.0.singleton(name)).await
    }
}

#[async_trait]
impl HealthStore for PauseSafeStore {
    async fn publish_breaker_open(
        &self,
        opening: BreakerOpening,
    ) -> Result<BreakerOpening, StoreError> {
        held(self.0.publish_breaker_open(opening)).await
    }

    async fn breaker_openings(&self, now_ms: u64) -> Result<Vec<BreakerOpening>, StoreError> {
        held(self.0.breaker_openings(now_ms)).await
    }

    async fn clear_breaker_open(&self, arm: &str, opened_by: &str) -> Result<bool, StoreError> {
        held(self.0.clear_breaker_open(arm, opened_by)).await
    }

    async fn merge_latency(
        &self,
        deltas: &[(String, rein_core::latency::LatencyHistogram)],
        now_ms: u64,
    ) -> Result<rein_store::LatencyRows, rein_store::StoreError> {
        held(self.0.merge_latency(deltas, now_ms)).await
    }

    async fn latency_histograms(&self) -> Result<rein_store::LatencyRows, rein_store::StoreError> {
        held(self.0.latency_histograms()).await
    }

    async fn renew_share_lease(
        &self,
        group: &str,
        node: &str,
        now_ms: u64,
        expires_at_ms: u64,
    ) -> Result<Vec<String>, rein_store::StoreError> {
        held(self.0.renew_share_lease(group, node, now_ms, expires_at_ms)).await
    }

    async fn release_share_lease(
        &self,
        group: &str,
        node: &str,
    ) -> Result<bool, rein_store::StoreError> {
        held(self.0.release_share_lease(group, node)).await
    }
}

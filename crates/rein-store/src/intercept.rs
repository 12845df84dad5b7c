//! Stores that wrap another store: [`Intercept`], the calls a wrapper may
//! change, and [`Intercepted`], which forwards every other call untouched.
//!
//! # Why
//!
//! Fault injection (rein-chaos refuses the n-th commit), metering (a bench
//! timing each durable checkpoint) and test doubles (a ledger that cannot
//! be read) all wrap a real store and change one or two calls. Written by
//! hand, each wrapper forwarded every method of the five capability
//! traits, so every new store method had to be added to every wrapper.
//! Here the forwarding is written once: a wrapper implements [`Intercept`]
//! for the calls it changes and [`Intercepted`] forwards the rest, each
//! through [`Intercept::around`] (which a wrapper overrides to act on
//! every call, such as keeping paused test time still while a call waits).
//!
//! Only the calls some wrapper needs to change are hooks; one more is
//! added here, with a default that forwards, when a wrapper needs it.
//!
//! ```
//! use std::sync::Arc;
//! use std::sync::atomic::{AtomicU32, Ordering};
//!
//! use rein_core::RunId;
//! use rein_store::{Committed, Intercept, Intercepted, StepCommit, Store, StoreError};
//!
//! /// Counts step commits.
//! #[derive(Default)]
//! struct Counting(AtomicU32);
//!
//! #[async_trait::async_trait]
//! impl Intercept for Counting {
//!     async fn commit_step(
//!         &self,
//!         inner: &dyn Store,
//!         run_id: &RunId,
//!         commit: StepCommit,
//!     ) -> Result<Committed, StoreError> {
//!         self.0.fetch_add(1, Ordering::SeqCst);
//!         inner.commit_step(run_id, commit).await
//!     }
//! }
//!
//! fn counting(real: Arc<dyn Store>) -> Arc<Intercepted<Counting>> {
//!     Arc::new(Intercepted::new(real, Counting::default()))
//! }
//! ```

use rein_core::Timestamp;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use rein_core::approval::{Approval, Decision};
use rein_core::latency::LatencyHistogram;
use rein_core::retry::RetryRecord;
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
use crate::store::{HealthStore, IdempotencyStore, LeaseStore, RunStore, SingletonStore, Store};
use crate::token_ratio::TokenRatioRecord;
use crate::webhook::{DueDelivery, WebhookAttempt, WebhookDelivery, WebhookEvent};
use crate::{Notification, RunStats, StatsQuery, TenantBacklog};
use rein_core::token_ratio::TokenRatio;

/// One store call in flight, as [`Intercept::around`] receives it.
pub type Call<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a wrapping store changes; every default forwards to the wrapped
/// store (`inner`) as it is.
#[async_trait]
pub trait Intercept: Send + Sync + 'static {
    /// Wraps every call, hooked or not, on its way to the wrapped store.
    fn around<'a, T: Send + 'a>(&'a self, call: Call<'a, T>) -> Call<'a, T> {
        call
    }

    /// [`RunStore::commit_step`].
    async fn commit_step(
        &self,
        inner: &dyn Store,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        inner.commit_step(run_id, commit).await
    }

    /// [`RunStore::ledger`].
    async fn ledger(
        &self,
        inner: &dyn Store,
        run_id: &RunId,
    ) -> Result<Vec<LedgerRecord>, StoreError> {
        inner.ledger(run_id).await
    }

    /// [`RunStore::create_run_claimed`]: a test holds the run between its
    /// creation and the caller's next step here.
    async fn create_run_claimed(
        &self,
        inner: &dyn Store,
        run: NewRun,
        claim: Lease,
        fence: Option<&ReservationFence>,
    ) -> Result<RunRecord, StoreError> {
        inner.create_run_claimed(run, claim, fence).await
    }

    /// [`LeaseStore::change_lease`].
    async fn change_lease(
        &self,
        inner: &dyn Store,
        change: LeaseChange,
    ) -> Result<Option<Lease>, StoreError> {
        inner.change_lease(change).await
    }
}

/// A [`Store`] that forwards every call to `inner`, through `hooks`.
pub struct Intercepted<I> {
    inner: Arc<dyn Store>,
    hooks: I,
}

impl<I: Intercept> Intercepted<I> {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>, hooks: I) -> Intercepted<I> {
        Intercepted { inner, hooks }
    }

    /// The wrapper's own state.
    pub fn hooks(&self) -> &I {
        &self.hooks
    }

    /// The wrapped store.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }
}

#[async_trait]
impl<I: Intercept> RunStore for Intercepted<I> {
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        self.hooks.around(self.inner.create_run(run)).await
    }

    async fn create_run_claimed(
        &self,
        run: NewRun,
        claim: Lease,
        fence: Option<&ReservationFence>,
    ) -> Result<RunRecord, StoreError> {
        self.hooks
            .around(
                self.hooks
                    .create_run_claimed(&*self.inner, run, claim, fence),
            )
            .await
    }

    async fn get_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        self.hooks.around(self.inner.get_run(run_id)).await
    }

    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        self.hooks.around(self.inner.list_runs(limit)).await
    }

    async fn runs_with_status(
        &self,
        status: RunStatus,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.hooks
            .around(self.inner.runs_with_status(status, limit))
            .await
    }

    async fn runs_with_status_after(
        &self,
        status: RunStatus,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.hooks
            .around(self.inner.runs_with_status_after(status, after, limit))
            .await
    }

    async fn count_runs_with_status(&self, status: RunStatus) -> Result<u64, StoreError> {
        self.hooks
            .around(self.inner.count_runs_with_status(status))
            .await
    }

    async fn children_of(&self, parent: &RunId) -> Result<Vec<RunRecord>, StoreError> {
        self.hooks.around(self.inner.children_of(parent)).await
    }

    async fn list_runs_page(
        &self,
        filter: &RunFilter,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        self.hooks
            .around(self.inner.list_runs_page(filter, after, limit))
            .await
    }

    async fn tenant_backlogs(
        &self,
        tenant: Option<&TenantId>,
        oldest: usize,
    ) -> Result<Vec<TenantBacklog>, StoreError> {
        self.hooks
            .around(self.inner.tenant_backlogs(tenant, oldest))
            .await
    }

    async fn queue_heads(&self, oldest: usize) -> Result<Vec<crate::QueueHead>, StoreError> {
        self.hooks.around(self.inner.queue_heads(oldest)).await
    }

    async fn events(&self, run_id: &RunId, after_seq: u64) -> Result<Vec<Event>, StoreError> {
        self.hooks
            .around(self.inner.events(run_id, after_seq))
            .await
    }

    async fn intents(&self, run_id: &RunId) -> Result<Vec<(u32, PlannedIntent)>, StoreError> {
        self.hooks.around(self.inner.intents(run_id)).await
    }

    async fn ledger(&self, run_id: &RunId) -> Result<Vec<LedgerRecord>, StoreError> {
        self.hooks
            .around(self.hooks.ledger(&*self.inner, run_id))
            .await
    }

    async fn pending_ledger(&self, limit: usize) -> Result<Vec<LedgerRecord>, StoreError> {
        self.hooks.around(self.inner.pending_ledger(limit)).await
    }

    async fn latest_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError> {
        self.hooks
            .around(self.inner.latest_checkpoint(run_id))
            .await
    }

    async fn commit_step(
        &self,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        self.hooks
            .around(self.hooks.commit_step(&*self.inner, run_id, commit))
            .await
    }

    async fn run_stats(&self, query: &StatsQuery) -> Result<RunStats, StoreError> {
        self.hooks.around(self.inner.run_stats(query)).await
    }

    async fn request_cancel(&self, request: CancelRequest) -> Result<CancelRequest, StoreError> {
        self.hooks.around(self.inner.request_cancel(request)).await
    }

    async fn cancel_request(&self, run_id: &RunId) -> Result<Option<CancelRequest>, StoreError> {
        self.hooks.around(self.inner.cancel_request(run_id)).await
    }

    async fn cancel_requests(&self, run_ids: &[RunId]) -> Result<Vec<CancelRequest>, StoreError> {
        self.hooks.around(self.inner.cancel_requests(run_ids)).await
    }

    async fn decide_approval(
        &self,
        run_id: &RunId,
        intent_id: &IntentId,
        decision: Decision,
    ) -> Result<Decided, StoreError> {
        self.hooks
            .around(self.inner.decide_approval(run_id, intent_id, decision))
            .await
    }

    async fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>, StoreError> {
        self.hooks.around(self.inner.approvals(filter)).await
    }

    async fn expire_approvals(
        &self,
        now_ms: Timestamp,
        limit: usize,
    ) -> Result<Vec<Approval>, StoreError> {
        self.hooks
            .around(self.inner.expire_approvals(now_ms, limit))
            .await
    }

    fn notifications(&self) -> Option<tokio::sync::broadcast::Receiver<Notification>> {
        self.inner.notifications()
    }
}

#[async_trait]
impl<I: Intercept> LeaseStore for Intercepted<I> {
    async fn change_lease(&self, change: LeaseChange) -> Result<Option<Lease>, StoreError> {
        self.hooks
            .around(self.hooks.change_lease(&*self.inner, change))
            .await
    }

    async fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
        self.hooks.around(self.inner.leases(filter)).await
    }

    async fn renew_lease_of(
        &self,
        lease_id: &str,
        owner: &str,
        expires_at_ms: Timestamp,
    ) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.renew_lease_of(lease_id, owner, expires_at_ms))
            .await
    }

    async fn renew_leases_of(
        &self,
        held: &[(String, String)],
        expires_at_ms: Timestamp,
    ) -> Result<Vec<bool>, StoreError> {
        self.hooks
            .around(self.inner.renew_leases_of(held, expires_at_ms))
            .await
    }

    async fn release_lease_of(&self, lease_id: &str, owner: &str) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.release_lease_of(lease_id, owner))
            .await
    }

    async fn take_over_lease(&self, lease: Lease, now_ms: Timestamp) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.take_over_lease(lease, now_ms))
            .await
    }
}

#[async_trait]
impl<I: Intercept> IdempotencyStore for Intercepted<I> {
    async fn reserve_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Reservation, StoreError> {
        self.hooks
            .around(
                self.inner
                    .reserve_idempotency(tenant, key, fingerprint, now_ms, expires_at_ms),
            )
            .await
    }

    async fn reserve_idempotency_as(
        &self,
        reservation: NewReservation,
    ) -> Result<Reservation, StoreError> {
        self.hooks
            .around(self.inner.reserve_idempotency_as(reservation))
            .await
    }

    async fn submit_queued(
        &self,
        reservation: NewReservation,
        run: NewRun,
        response: StoredResponse,
    ) -> Result<Reservation, StoreError> {
        self.hooks
            .around(self.inner.submit_queued(reservation, run, response))
            .await
    }

    async fn settle_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        settlement: IdempotencySettlement,
        now_ms: Timestamp,
    ) -> Result<IdempotencySettled, StoreError> {
        self.hooks
            .around(
                self.inner
                    .settle_idempotency(tenant, key, owner, settlement, now_ms),
            )
            .await
    }

    async fn renew_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        until_ms: Timestamp,
    ) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.renew_idempotency(tenant, key, owner, until_ms))
            .await
    }

    async fn create_run_held(
        &self,
        run: NewRun,
        fence: &ReservationFence,
    ) -> Result<RunRecord, StoreError> {
        self.hooks
            .around(self.inner.create_run_held(run, fence))
            .await
    }

    async fn complete_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        response: StoredResponse,
        now_ms: Timestamp,
    ) -> Result<(), StoreError> {
        self.hooks
            .around(
                self.inner
                    .complete_idempotency(tenant, key, response, now_ms),
            )
            .await
    }

    async fn release_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.release_idempotency(tenant, key))
            .await
    }

    async fn idempotency_records(
        &self,
        tenant: Option<&TenantId>,
        state: Option<IdempotencyState>,
        limit: usize,
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        self.hooks
            .around(self.inner.idempotency_records(tenant, state, limit))
            .await
    }

    async fn clear_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.clear_idempotency(tenant, key))
            .await
    }

    async fn sweep_idempotency(
        &self,
        now_ms: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        self.hooks
            .around(self.inner.sweep_idempotency(now_ms, limit))
            .await
    }
}

#[async_trait]
impl<I: Intercept> SingletonStore for Intercepted<I> {
    async fn claim_singleton(
        &self,
        name: &str,
        owner: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Option<SingletonLease>, StoreError> {
        self.hooks
            .around(
                self.inner
                    .claim_singleton(name, owner, now_ms, expires_at_ms),
            )
            .await
    }

    async fn release_singleton(&self, name: &str, owner: &str) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.release_singleton(name, owner))
            .await
    }

    async fn singleton(&self, name: &str) -> Result<Option<SingletonLease>, StoreError> {
        self.hooks.around(self.inner.singleton(name)).await
    }
}

#[async_trait]
impl<I: Intercept> HealthStore for Intercepted<I> {
    async fn publish_breaker_open(
        &self,
        opening: BreakerOpening,
    ) -> Result<BreakerOpening, StoreError> {
        self.hooks
            .around(self.inner.publish_breaker_open(opening))
            .await
    }

    async fn breaker_openings(&self, now_ms: Timestamp) -> Result<Vec<BreakerOpening>, StoreError> {
        self.hooks.around(self.inner.breaker_openings(now_ms)).await
    }

    async fn clear_breaker_open(&self, arm: &str, opened_by: &str) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.clear_breaker_open(arm, opened_by))
            .await
    }

    async fn merge_latency(
        &self,
        deltas: &[(String, LatencyHistogram)],
        now_ms: Timestamp,
    ) -> Result<LatencyRows, StoreError> {
        self.hooks
            .around(self.inner.merge_latency(deltas, now_ms))
            .await
    }

    async fn latency_histograms(&self) -> Result<LatencyRows, StoreError> {
        self.hooks.around(self.inner.latency_histograms()).await
    }

    async fn merge_token_ratios(
        &self,
        deltas: &[(String, TokenRatio)],
        now_ms: Timestamp,
    ) -> Result<Vec<TokenRatioRecord>, StoreError> {
        self.hooks
            .around(self.inner.merge_token_ratios(deltas, now_ms))
            .await
    }

    async fn token_ratios(&self) -> Result<Vec<TokenRatioRecord>, StoreError> {
        self.hooks.around(self.inner.token_ratios()).await
    }

    async fn merge_retry_outcomes(
        &self,
        deltas: &[(String, RetryRecord)],
        now_ms: Timestamp,
    ) -> Result<Vec<RetryOutcomes>, StoreError> {
        self.hooks
            .around(self.inner.merge_retry_outcomes(deltas, now_ms))
            .await
    }

    async fn retry_outcomes(&self, now_ms: Timestamp) -> Result<Vec<RetryOutcomes>, StoreError> {
        self.hooks.around(self.inner.retry_outcomes(now_ms)).await
    }

    async fn renew_share_lease(
        &self,
        group: &str,
        node: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Vec<String>, StoreError> {
        self.hooks
            .around(
                self.inner
                    .renew_share_lease(group, node, now_ms, expires_at_ms),
            )
            .await
    }

    async fn release_share_lease(&self, group: &str, node: &str) -> Result<bool, StoreError> {
        self.hooks
            .around(self.inner.release_share_lease(group, node))
            .await
    }
}

#[async_trait]
impl<I: Intercept> crate::WebhookStore for Intercepted<I> {
    async fn unrouted_webhook_events(&self, limit: usize) -> Result<Vec<WebhookEvent>, StoreError> {
        self.hooks
            .around(self.inner.unrouted_webhook_events(limit))
            .await
    }

    async fn route_webhook_event(
        &self,
        event_id: &str,
        webhooks: &[String],
        now_ms: Timestamp,
    ) -> Result<(), StoreError> {
        self.hooks
            .around(self.inner.route_webhook_event(event_id, webhooks, now_ms))
            .await
    }

    async fn claim_webhook_deliveries(
        &self,
        now_ms: Timestamp,
        claim_until_ms: Timestamp,
        limit: usize,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        self.hooks
            .around(
                self.inner
                    .claim_webhook_deliveries(now_ms, claim_until_ms, limit),
            )
            .await
    }

    async fn record_webhook_attempt(
        &self,
        attempt: &WebhookAttempt,
    ) -> Result<WebhookDelivery, StoreError> {
        self.hooks
            .around(self.inner.record_webhook_attempt(attempt))
            .await
    }

    async fn prune_webhook_outbox(
        &self,
        before_ms: Timestamp,
        limit: usize,
    ) -> Result<u64, StoreError> {
        self.hooks
            .around(self.inner.prune_webhook_outbox(before_ms, limit))
            .await
    }

    async fn webhook_deliveries(
        &self,
        webhook: &str,
        limit: usize,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        self.hooks
            .around(self.inner.webhook_deliveries(webhook, limit))
            .await
    }
}

#[async_trait]
impl<I: Intercept> crate::SpendStore for Intercepted<I> {
    async fn add_spend(&self, deltas: &[crate::SpendDelta]) -> Result<(), StoreError> {
        self.hooks.around(self.inner.add_spend(deltas)).await
    }

    async fn spend(&self, query: &crate::SpendQuery) -> Result<Vec<crate::SpendRow>, StoreError> {
        self.hooks.around(self.inner.spend(query)).await
    }
}

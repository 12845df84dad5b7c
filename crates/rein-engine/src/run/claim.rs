//! Run claims: only one process drives a run at a time; the heartbeat
//! that renews the claim and the guard that lets it go.

use std::sync::Arc;

use rein_core::{Clock, RunId};
use rein_store::{Lease, LeaseKind, Store, StoreError, StoreExt};
use tokio_util::sync::CancellationToken;

use super::AgentBinding;
use super::ctx::RunCtx;
use super::emitter::unix_ms;
use super::engine::Engine;
use super::error::EngineError;
use super::heartbeat::Heartbeat;

/// Releases a run's claim when dropped while armed: a resume that stopped
/// before it was recorded must not keep the run locked until the claim
/// expires.
pub(super) struct ClaimGuard {
    pub(super) store: Arc<dyn Store>,
    pub(super) lease_id: String,
    pub(super) owner: String,
    pub(super) armed: bool,
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        // Unwinding from a panic: the run's boundary takes the claim back
        // to settle the run (`contain`), so it is not let go here.
        if !self.armed || std::thread::panicking() {
            return;
        }
        let (store, lease_id, owner) = (
            self.store.clone(),
            std::mem::take(&mut self.lease_id),
            std::mem::take(&mut self.owner),
        );
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                if let Err(e) = store.release_lease_of(&lease_id, &owner).await {
                    tracing::warn!(lease = %lease_id, "cannot release an abandoned claim: {e}");
                }
            });
        }
    }
}

/// The lease id of a process's claim on a run.
pub(super) fn claim_id(run_id: &RunId) -> String {
    format!("run:{run_id}")
}

/// How long a claim outlives the run's wall clock (the reconciler treats an
/// expired claim of a dead owner as abandoned).
pub(super) const CLAIM_MARGIN: std::time::Duration = std::time::Duration::from_secs(60);

impl Engine {
    /// The claim this process makes on `run_id`, held for `hold` from now:
    /// built apart from taking it, so a new run is created together with
    /// this very lease ([`Engine::claim_new`]) and an existing one claimed
    /// with it ([`Engine::claim`]).
    pub(super) fn new_claim(&self, run_id: &RunId, hold: std::time::Duration) -> Lease {
        use crate::lease::Owner;
        let now_ms = unix_ms(self.clock.system_now());
        // The claim's own identity: this process, the public node id and a
        // token, so renewals and the release are fenced to this claim, not
        // any claim of the process (`crate::lease::claim_node` reads the
        // node back).
        let owner = format!(
            "{}#{}.{}",
            Owner::current(),
            self.node,
            uuid::Uuid::now_v7().simple()
        );
        Lease {
            lease_id: claim_id(run_id),
            run_id: run_id.clone(),
            intent_id: None,
            kind: LeaseKind::Run,
            pgid: None,
            path: None,
            owner,
            acquired_at_ms: now_ms,
            expires_at_ms: now_ms.saturating_add(hold),
        }
    }

    /// Creates `run` already claimed by `claim` (made by
    /// [`Engine::new_claim`]), fenced on `fence` when set; the claim's
    /// owner.
    ///
    /// One write ([`Store::create_run_claimed`]): a run created `queued`
    /// and claimed next could be picked in between by a queue worker of
    /// any process, which then drove it while its creator was refused
    /// (`409 not-resumable` to a sync caller). A queued run stays the
    /// status a new run starts in (the start's `expect_status` and every
    /// reader of it stay as they are); the held claim is what keeps every
    /// other process off it.
    pub(super) async fn claim_new(
        &self,
        run: rein_store::NewRun,
        claim: Lease,
        fence: Option<&rein_store::ReservationFence>,
    ) -> Result<String, EngineError> {
        let owner = claim.owner.clone();
        self.store.create_run_claimed(run, claim, fence).await?;
        Ok(owner)
    }

    /// Claims `run_id` for this process: only one process drives a run at a
    /// time, so two resumes (or a resume while the original process still
    /// lives) cannot both replay its step. A claim whose owner is dead is
    /// taken over.
    pub(super) async fn claim(
        &self,
        run_id: &RunId,
        hold: std::time::Duration,
    ) -> Result<String, EngineError> {
        use crate::lease::Owner;
        let lease = self.new_claim(run_id, hold);
        let owner = lease.owner.clone();
        let now_ms = lease.acquired_at_ms;
        match self.store.acquire_lease(lease.clone()).await {
            Ok(_) => return Ok(owner),
            Err(StoreError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        let held = self
            .store
            .leases_of_run(run_id)
            .await?
            .into_iter()
            .find(|l| l.kind == LeaseKind::Run);
        if let Some(held) = held {
            // Taken over when its lease ran out (the owner stopped renewing
            // it: dead, or cut off), or when the owner is provably gone (a
            // process of this machine and pid namespace that no longer
            // runs: `Owner::is_gone`). An owner elsewhere, or one we cannot
            // identify, is alive until its lease says otherwise: refusing is
            // safe, taking over is not.
            let expired = held.expires_at_ms <= now_ms;
            let dead_here = Owner::is_gone_id(&held.owner);
            if !expired && !dead_here {
                return Err(EngineError::NotResumable {
                    run_id: run_id.clone(),
                    // The public node id only: the owner's process id and
                    // host stay in the store and the log.
                    reason: format!(
                        "it is being driven by a live process (node {})",
                        crate::lease::claim_node(&held.owner).unwrap_or("unknown")
                    ),
                });
            }
            if expired {
                // One atomic step: of two takers, one wins; a stalled owner
                // that wakes up finds its renewals refused.
                return if self.store.take_over_lease(lease, now_ms).await? {
                    Ok(owner)
                } else {
                    Err(EngineError::NotResumable {
                        run_id: run_id.clone(),
                        reason: "another process took it over at the same moment".into(),
                    })
                };
            }
            // Its owner is a dead process of this host: nobody renews it.
            self.store
                .release_lease_of(&held.lease_id, &held.owner)
                .await?;
        }
        match self.store.acquire_lease(lease).await {
            Ok(_) => Ok(owner),
            Err(StoreError::Conflict { .. }) => Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "another process claimed it at the same moment".into(),
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// How long a claim holds before it must be renewed.
    pub(super) fn claim_hold(&self, agent: &AgentBinding) -> std::time::Duration {
        self.claim_lease
            .unwrap_or(agent.budget.wall_clock() + CLAIM_MARGIN)
    }

    /// Renews the run's claim while the returned guard lives: the
    /// heartbeat that tells other processes this run's owner is alive,
    /// beaten for every run of the process at once (see
    /// [`super::heartbeat`]). Without a configured lease, nothing.
    ///
    /// At each beat (and as soon as the run registers) it also reads the
    /// run's cancel request ([`Store::cancel_requests`]): a cancel that
    /// another process took for this run fires `cancel`, exactly as a
    /// local cancel does. A claim taken over fires `lost`.
    pub(super) fn heartbeat(
        &self,
        run_id: &RunId,
        owner: &str,
        lost: &CancellationToken,
        cancel: Option<&CancellationToken>,
    ) -> Option<Heartbeat> {
        let heartbeats = self.heartbeats.as_ref()?;
        Some(heartbeats.beat(run_id, owner, lost, cancel))
    }

    /// Releases the run's claim (this process stops driving it).
    pub(super) async fn release_claim(&self, ctx: &RunCtx<'_>) {
        if let Err(e) = ctx
            .store
            .release_lease_of(&claim_id(&ctx.run_id), &ctx.claim_owner)
            .await
        {
            tracing::warn!(run = %ctx.run_id, "cannot release the run's claim: {e}");
        }
    }
}

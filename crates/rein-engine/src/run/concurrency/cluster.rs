//! Resource group limits held by the cluster, not by each process: every
//! governed group's limits are divided among the nodes that share the
//! store (`rein_core::governor::Members`), from the share leases they
//! renew in it (`Store::renew_share_lease`).
//!
//! # How
//!
//! The first time this engine governs a group, it starts one renewal task
//! for it, on the engine's timer. Every `renew` the task renews this node's
//! share lease (time to live: [`SHARE_LEASE_TTL_RENEWALS`] renewals), reads
//! the live holders back from the same atomic step, and hands the group's
//! governor this node's place among them
//! ([`Governor::share_among`](rein_core::governor::Governor::share_among)):
//! the bucket and the ceiling shrink or grow to this node's part, keeping
//! their level in proportion. A call of the group waits for the first
//! renewal (bounded by its deadline like any governor wait), so no node
//! ever starts at the whole limit while others hold parts of it.
//!
//! # Accuracy (also in the README's governor section)
//!
//! With `n` nodes whose views agree and `burst ≥ n`, the cluster is
//! granted at most `burst + rate × t` calls in any window `t` — what one
//! process alone is granted — and holds at most `max_concurrency` calls in
//! flight. After a node joins, the others learn of it at their next
//! renewal: for at most one `renew` (1 s in `rein serve` and `rein run`)
//! the cluster rate may reach `rate × (1 + 1/n)`, plus the joiner's burst
//! part. After a node leaves without releasing (a crash), the cluster runs
//! *under* the limit until its lease expires (3 s); never over.
//!
//! # Failures of the store
//!
//! A renewal that fails is logged and retried at the next interval; the
//! governor keeps the part it last had (a lease of this node that expires
//! meanwhile only makes the others' parts larger, by at most this node's
//! part, until the store answers again). A first renewal that fails lets
//! the group run at its whole limit, logged as a warning: refusing every
//! call of a group because the store is briefly unavailable would turn a
//! store outage into an outage of every tool.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use rein_core::governor::{Members, Share};
use rein_store::Store;
use tokio::sync::watch;

use super::Governed;
use crate::run::EngineBuilder;
use crate::run::emitter::unix_ms;

/// A share lease lives this many renewal intervals: a node that misses
/// two renewals in a row still counts.
pub const SHARE_LEASE_TTL_RENEWALS: u32 = 3;

/// How often `rein serve` and `rein run` renew their share leases.
pub const DEFAULT_SHARE_RENEWAL: Duration = Duration::from_secs(1);

/// The sabotage switch (`REIN_SABOTAGE`, `crash-points` builds only) under
/// which every node takes the whole of each group's limits, as if alone:
/// the cluster test shows its bound then fails.
const WHOLE_LIMIT_PER_NODE: &str = "whole_limit_per_node";

impl EngineBuilder {
    /// Divides each governed resource group's limits (`rate_per_sec`,
    /// `burst`, `max_concurrency`) with every engine on the same store, so
    /// that the cluster holds them rather than each process (issue 15
    /// item 4): this engine renews a share lease of each group it governs
    /// every `renew` (they expire after [`SHARE_LEASE_TTL_RENEWALS`]
    /// renewals) as its [`node`](EngineBuilder::node), and runs at its
    /// part among the live holders. Off by default: each engine then holds
    /// the whole limits alone. `rein serve` and `rein run` turn it on with
    /// [`DEFAULT_SHARE_RENEWAL`]. See the module docs for the accuracy.
    pub fn shared_limits(mut self, renew: Duration) -> Self {
        self.shared_limits = Some(renew);
        self
    }
}

/// This engine's node id and store, for dividing its groups' limits.
pub(crate) struct Cluster {
    store: Arc<dyn Store>,
    node: String,
    renew: Duration,
    /// Set once this node gave its leases up: it renews none again.
    left: AtomicBool,
}

impl Cluster {
    /// Divides limits as `node` on `store`, renewing every `renew`.
    pub(crate) fn new(store: Arc<dyn Store>, node: String, renew: Duration) -> Cluster {
        Cluster {
            store,
            node,
            renew: renew.max(Duration::from_millis(1)),
            left: AtomicBool::new(false),
        }
    }

    /// Gives up this node's share leases of `groups` and stops renewing
    /// any (the process is stopping): the other nodes take its part back
    /// at their next renewal rather than when the leases expire. A store
    /// that refuses is logged; the leases then expire on their own.
    pub(super) async fn leave(&self, groups: &[String]) {
        self.left.store(true, Ordering::SeqCst);
        for group in groups {
            if let Err(e) = self.store.release_share_lease(group, &self.node).await {
                tracing::warn!(
                    group = %group,
                    node = %self.node,
                    error = %e,
                    "share lease not released; it expires on its own"
                );
            }
        }
    }

    /// Starts renewing `governed`'s share lease; `joined` turns `true`
    /// once the first renewal has set its part. Outside a runtime nothing
    /// can renew, and the group keeps its whole limit.
    pub(super) fn join(self: &Arc<Self>, governed: &Arc<Governed>, joined: watch::Sender<bool>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            let _ = joined.send(true);
            return;
        };
        let me = Arc::clone(self);
        let governed = Arc::downgrade(governed);
        runtime.spawn(async move { me.renew_loop(governed, joined).await });
    }

    async fn renew_loop(self: Arc<Self>, governed: Weak<Governed>, joined: watch::Sender<bool>) {
        loop {
            let Some(group) = governed.upgrade() else {
                return;
            };
            if self.left.load(Ordering::SeqCst) {
                // Calls made after leaving keep the last part.
                let _ = joined.send(true);
                return;
            }
            let clock = group.clock.clone();
            let now_ms = unix_ms(clock.system_now());
            let ttl = self.renew.saturating_mul(SHARE_LEASE_TTL_RENEWALS);
            let until = now_ms.saturating_add(ttl);
            let renewed = self
                .store
                .renew_share_lease(
                    &group.lease,
                    &self.node,
                    now_ms,
                    until.max(now_ms + Duration::from_millis(1)),
                )
                .await;
            match renewed {
                Ok(holders) => {
                    let mut members = Members::among(&holders, &self.node);
                    if crate::crash::sabotaged(WHOLE_LIMIT_PER_NODE) {
                        members = Members::ALONE;
                    }
                    let share = group.share_among(members);
                    if let Some(share) = share {
                        tracing::info!(
                            group = %group.name,
                            node = %self.node,
                            nodes = share.members.count().get(),
                            rank = share.members.rank(),
                            rate_per_sec = share.requests.map(|(r, _)| r.per_second()),
                            burst = share.requests.map(|(_, b)| b),
                            max_concurrency = share.max_concurrency,
                            "resource group limits divided among the nodes sharing the store"
                        );
                    }
                }
                Err(e) => tracing::warn!(
                    group = %group.name,
                    node = %self.node,
                    error = %e,
                    "share lease not renewed; this node keeps its last part of the group's limits"
                ),
            }
            let _ = joined.send(true);
            let next = clock.now() + self.renew;
            drop(group);
            clock.sleep_until(next).await;
        }
    }
}

impl Governed {
    /// Applies this node's place among the group's holders; the share when
    /// it changed.
    fn share_among(self: &Arc<Self>, members: Members) -> Option<Share> {
        let now = self.clock.now();
        let mut state = self.lock();
        if state.governor.members() == members && state.shared {
            return None;
        }
        state.shared = true;
        let share = state.governor.share_among(members, now);
        self.pump(&mut state, now);
        Some(share)
    }
}

//! The tenant floor: one queue worker of each process that a tenant
//! already running there never takes, so a tenant with nothing running
//! finds a worker at once.
//!
//! # Why
//!
//! The fair pick ([`crate::queue::fair`]) decides the ORDER: behind a noisy
//! tenant's 300 queued runs, a quiet tenant's run is next in line. But
//! next in line still waits for a worker to be free, and behind a backlog
//! every worker holds a noisy run: the quiet run waited for one of them to
//! END (measured: p99 213–567 ms against 22–53 ms idle, about 10×). Order
//! cannot remove that wait; capacity kept free can.
//!
//! # The two tiers
//!
//! A process runs `queue.workers` + [`FLOOR`] worker loops:
//!
//! - the shared tier, `queue.workers` of them: any tenant may borrow all of
//!   it while no one else waits (a lone tenant keeps the throughput it had
//!   before the floor), and gives it back on demand at each run end, where
//!   the fair pick hands the freed worker to the next tenant in line;
//! - the floor, [`FLOOR`] more: never lent. A start of a tenant that
//!   already holds a run of this process's workers is allowed only while
//!   at least [`FLOOR`] workers stay free after it; a tenant with nothing
//!   running here may take any free worker. So the last free workers go
//!   only to first runs, and a worker freed by a run end while fewer than
//!   [`FLOOR`] are free is kept free, ahead of any tenant's next run.
//!
//! The floor cannot be lent and returned like the shared tier: a lent
//! worker comes back only when the run on it ends, which is exactly the
//! wait this removes.
//!
//! # The bound
//!
//! With `W` = `queue.workers` and floor `F` = [`FLOOR`]: tenants already
//! running here never leave fewer than `F` of the `W + F` workers free, so
//! one tenant never holds more than `W`. A run of a tenant with nothing
//! running in this process waits for the pick latency only (the wake-up of
//! an idle worker, one store read, the claim), never for a run to end —
//! zero run ends per quiet run — unless `F` first runs of other tenants
//! took the free workers since a run last ended (with one noisy tenant
//! flooding and one quiet tenant submitting: never). A quiet tenant's
//! second concurrent run is a tenant already running: served by the shared
//! tier in fair order, as before.
//!
//! It holds as long as the workers can start what they pick: with
//! `server.quotas.run_slots`, batch work gets `run_slots −
//! interactive_reserve` slots, and below `W + F` the slots, not the
//! workers, are the limit (a quiet run then waits for a slot, and sync
//! runs go ahead of batch by design). Take-overs of abandoned runs count
//! as held but are never refused: recovery goes first.
//!
//! # Across processes
//!
//! Each process keeps its own floor over its own workers, counted exactly
//! under one lock (no store read can lag behind it). `P` processes on one
//! store hold `P` floor workers; a quiet run is picked by the process that
//! accepted it as soon as its idle worker wakes (the submission wakes
//! it), or by any other at its next look ([`crate::queue::worker::IDLE_POLL`]):
//! in no process does it wait for a run to end, as long as that process's
//! floor is not held by another tenant's first run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use rein_core::TenantId;
use rein_core::registry::ServerSpec;

/// The workers of each process kept for tenants with nothing running
/// there.
pub const FLOOR: usize = 1;

/// The worker loops a process runs for `workers` configured: the shared
/// tier and the floor; none when a test runs no workers (work stays
/// queued).
pub fn loops(workers: usize) -> usize {
    if workers == 0 { 0 } else { workers + FLOOR }
}

/// The field [`slots_warning`] is about.
pub const RUN_SLOTS_FIELD: &str = "server.quotas.run_slots";

/// What `rein check` and `rein serve` warn about when
/// `server.quotas.run_slots` leaves batch work fewer slots than this
/// process runs worker loops (`queue.workers` + [`FLOOR`]); `None` when
/// the slots cover them, or there are none.
///
/// # Why a warning, not a refusal
///
/// The server works: every worker that gets a slot runs. But the workers
/// beyond the batch slots wait for one, so the floor kept free for a
/// quiet tenant may be a worker that cannot start (see the module docs,
/// "The bound"): its guarantee is lost without anything failing.
pub fn slots_warning(settings: &ServerSpec) -> Option<String> {
    let slots = settings.quotas.run_slots?;
    let batch = slots.total.get().saturating_sub(slots.interactive_reserve);
    let workers = settings.queue.workers.get();
    let loops = loops(usize::try_from(workers).unwrap_or(usize::MAX));
    if usize::try_from(batch).unwrap_or(usize::MAX) >= loops {
        return None;
    }
    Some(format!(
        "{batch} batch slots (run_slots {} - interactive_reserve {}) for {loops} queue workers \
         (queue.workers {workers} + the tenant floor {FLOOR}): the floor is not kept, a tenant \
         with nothing running may wait for a slot; set run_slots to at least {}",
        slots.total,
        slots.interactive_reserve,
        u64::try_from(loops).unwrap_or(u64::MAX) + u64::from(slots.interactive_reserve),
    ))
}

/// The runs this process's queue workers hold, by tenant.
#[derive(Debug)]
pub struct TenantFloor {
    /// Worker loops running ([`TenantFloor::spawned`]).
    loops: AtomicUsize,
    held: Arc<Mutex<HashMap<TenantId, usize>>>,
    /// Lend the floor like the rest (the `no_tenant_floor` sabotage of
    /// test builds): every worker may be held by one tenant.
    lent: bool,
}

/// A worker held by a run of `tenant`, until dropped.
#[derive(Debug)]
pub struct Seat {
    tenant: TenantId,
    held: Arc<Mutex<HashMap<TenantId, usize>>>,
}

impl Drop for Seat {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = held.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                held.remove(&self.tenant);
            }
        }
    }
}

impl TenantFloor {
    /// A floor over `loops` worker loops (set again by
    /// [`TenantFloor::spawned`] when the server starts them).
    pub fn new(loops: usize) -> TenantFloor {
        TenantFloor {
            loops: AtomicUsize::new(loops),
            held: Arc::default(),
            lent: rein_engine::crash::sabotaged("no_tenant_floor"),
        }
    }

    /// Records how many worker loops this process runs.
    pub fn spawned(&self, loops: usize) {
        self.loops.store(loops, Ordering::Release);
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<TenantId, usize>> {
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a free worker may start a run of `tenant` now: yes for a
    /// tenant with nothing running here, and for another while [`FLOOR`]
    /// workers stay free after it.
    pub fn admits(&self, tenant: &TenantId) -> bool {
        Self::allows(
            &self.lock(),
            tenant,
            self.loops.load(Ordering::Acquire),
            self.lent,
        )
    }

    fn allows(
        held: &HashMap<TenantId, usize>,
        tenant: &TenantId,
        loops: usize,
        lent: bool,
    ) -> bool {
        if lent || !held.contains_key(tenant) {
            return true;
        }
        let busy: usize = held.values().sum();
        // The asking worker's start, then the floor still free.
        busy + 1 + FLOOR <= loops
    }

    /// Counts a worker as held by `tenant`'s run, if
    /// [`TenantFloor::admits`] it (checked again under the same lock).
    pub fn seat(&self, tenant: &TenantId) -> Option<Seat> {
        let mut held = self.lock();
        if !Self::allows(&held, tenant, self.loops.load(Ordering::Acquire), self.lent) {
            return None;
        }
        *held.entry(tenant.clone()).or_insert(0) += 1;
        Some(self.seat_of(tenant))
    }

    /// Counts a worker as held by `tenant`'s run whatever the floor: a
    /// take-over of abandoned work, which recovery does first.
    pub fn seat_anyway(&self, tenant: &TenantId) -> Seat {
        *self.lock().entry(tenant.clone()).or_insert(0) += 1;
        self.seat_of(tenant)
    }

    fn seat_of(&self, tenant: &TenantId) -> Seat {
        Seat {
            tenant: tenant.clone(),
            held: self.held.clone(),
        }
    }

    /// Workers held now by `tenant`'s runs.
    pub fn held_by(&self, tenant: &TenantId) -> usize {
        self.lock().get(tenant).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    #[test]
    fn a_running_tenant_never_takes_the_last_free_worker() {
        // Two workers and the floor.
        let floor = TenantFloor::new(loops(2));
        let noisy = t("noisy");
        let first = floor.seat(&noisy).unwrap();
        let second = floor.seat(&noisy).unwrap();
        assert!(!floor.admits(&noisy), "the third worker is the floor");
        assert!(floor.seat(&noisy).is_none());
        assert_eq!(floor.held_by(&noisy), 2);
        // A tenant with nothing running takes it.
        let quiet = floor.seat(&t("quiet")).unwrap();
        assert!(!floor.admits(&t("quiet")), "quiet runs here now");
        // A noisy run ends: the worker it frees is kept as the floor.
        drop(first);
        assert!(!floor.admits(&noisy));
        assert!(floor.admits(&t("third")));
        // Quiet's run ends: noisy may hold two again.
        drop(quiet);
        assert!(floor.admits(&noisy));
        drop(second);
        assert_eq!(floor.held_by(&noisy), 0);
    }

    #[test]
    fn a_lone_tenant_keeps_the_shared_tier() {
        let floor = TenantFloor::new(loops(4));
        let a = t("a");
        let seats: Vec<Seat> = (0..4).map(|_| floor.seat(&a).unwrap()).collect();
        assert_eq!(seats.len(), 4, "queue.workers runs at once, as before");
        assert!(floor.seat(&a).is_none());
    }

    #[test]
    fn a_take_over_is_counted_but_never_refused() {
        let floor = TenantFloor::new(loops(1));
        let a = t("a");
        let _run = floor.seat(&a).unwrap();
        let _taken = floor.seat_anyway(&a);
        assert_eq!(floor.held_by(&a), 2);
        assert!(!floor.admits(&a), "over the shared tier");
    }

    #[test]
    fn no_workers_no_loops() {
        assert_eq!(loops(0), 0);
        assert_eq!(loops(3), 3 + FLOOR);
    }
}

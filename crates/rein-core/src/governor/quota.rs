//! Tiered quotas below a group's global limit: what each tenant and each run
//! holds, each tenant's guaranteed share, and borrowing.
//!
//! # The tiers
//!
//! ```text
//! global  the group's adaptive limit G: slots in flight, all tenants together
//! tenant  share(t) = max(1, ⌊G × w(t) / Σ w(active)⌋), guaranteed;
//!         tenant_max, a hard cap including what it borrows
//! run     run_max, a hard cap on one run's slots (one fan-out cannot take a
//!         tenant's whole share)
//! ```
//!
//! A tenant is *active* while it holds or waits for a slot of the group.
//!
//! # Borrowing and return on demand
//!
//! - A tenant may hold more than its share — *borrow* idle capacity — while
//!   no other tenant that is *owed* (waiting, and holding less than its
//!   share) waits.
//! - While any owed tenant waits, only owed tenants are granted slots:
//!   borrowers get nothing new, so every slot a borrower releases goes to a
//!   tenant below its share. Borrowed capacity is returned as the
//!   borrower's calls finish; nothing in flight is revoked.
//!
//! So no tenant starves: a waiting tenant below its share is among the owed
//! tenants the fair queue serves in turn; a waiting tenant at or above its
//! share holds slots, and becomes owed as those are released.

// NOTE: foldhash's map, not std's: looking a tenant and a run up is most
// of an admit decision, and SipHash made it half again as slow. It is
// seeded per map from the process's randomness, as std's is, so ids chosen
// by a client cannot be made to collide in advance.
use foldhash::HashMap;
use std::hash::Hash;

use serde::Serialize;

use super::config::{QuotaSettings, TenantWeights};
use crate::ids::{RunId, TenantId};

/// The fewest idle entries a table keeps before sweeping them.
const MIN_RETAINED: usize = 64;

/// Which quota tier refused a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "tier", rename_all = "snake_case")]
pub enum QuotaTier {
    /// The tenant holds `tenant_max` slots.
    Tenant {
        /// Slots the tenant holds.
        held: u32,
        /// The configured `tenant_max`.
        max: u32,
    },
    /// The run holds `run_max` slots.
    Run {
        /// Slots the run holds.
        held: u32,
        /// The configured `run_max`.
        max: u32,
    },
}

/// Where a tenant's and a run's counts live: indices into the tables, valid
/// while the holder holds or waits for a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Holder {
    tenant: u32,
    run: Option<u32>,
}

impl Holder {
    /// Whether `other` holds for the same tenant.
    pub(super) fn same_tenant(&self, other: &Holder) -> bool {
        self.tenant == other.tenant
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Use {
    held: u32,
    waiting: u32,
    /// The tenant's weight in thousandths (zero for runs).
    weight: u64,
}

impl Use {
    fn is_idle(&self) -> bool {
        self.held == 0 && self.waiting == 0
    }
}

/// The counts of every tenant and run that holds or waits.
#[derive(Debug, Clone)]
pub(super) struct Quotas {
    weights: TenantWeights,
    tenant_max: Option<u32>,
    run_max: Option<u32>,
    tenants: Table<TenantId, Use>,
    runs: Table<RunId, Use>,
    /// Σ weight of the active tenants, in thousandths: exact as tenants come
    /// and go.
    active_weight: u64,
}

impl Quotas {
    pub(super) fn new(settings: QuotaSettings) -> Quotas {
        Quotas {
            weights: settings.weights,
            tenant_max: settings.tenant_max,
            run_max: settings.run_max,
            tenants: Table::default(),
            runs: Table::default(),
            active_weight: 0,
        }
    }

    /// The holder for `tenant` and `run`, creating their entries the first
    /// time (the only allocation: the ids are stored once per entry). Runs
    /// are tracked only when `run_max` is set.
    pub(super) fn holder(&mut self, tenant: &TenantId, run: &RunId) -> Holder {
        let weights = &self.weights;
        let tenant = self.tenants.find_or_insert(tenant, || Use {
            weight: weights.milli(tenant),
            ..Use::default()
        });
        let run = self
            .run_max
            .map(|_| self.runs.find_or_insert(run, Use::default));
        Holder { tenant, run }
    }

    /// Whether the tenant and run tiers allow one more slot.
    pub(super) fn check(&self, h: Holder) -> Result<(), QuotaTier> {
        if let (Some(max), Some(run)) = (self.run_max, h.run.and_then(|r| self.runs.get(r))) {
            if run.held >= max {
                return Err(QuotaTier::Run {
                    held: run.held,
                    max,
                });
            }
        }
        if let (Some(max), Some(tenant)) = (self.tenant_max, self.tenants.get(h.tenant)) {
            if tenant.held >= max {
                return Err(QuotaTier::Tenant {
                    held: tenant.held,
                    max,
                });
            }
        }
        Ok(())
    }

    /// Whether a waiting holder may be granted now: its tiers allow it, and
    /// while an owed tenant waits (`owed_waiting`), only if it is owed too.
    pub(super) fn eligible(&self, h: Holder, capacity: u32, owed_waiting: bool) -> bool {
        self.check(h).is_ok() && (!owed_waiting || self.is_owed(h, capacity))
    }

    /// Counts a granted slot.
    pub(super) fn take(&mut self, h: Holder) {
        self.update(h, |u| u.held = u.held.saturating_add(1));
    }

    /// Counts a released slot.
    pub(super) fn give_back(&mut self, h: Holder) {
        self.update(h, |u| u.held = u.held.saturating_sub(1));
    }

    /// Counts a waiter.
    pub(super) fn wait(&mut self, h: Holder) {
        self.update(h, |u| u.waiting = u.waiting.saturating_add(1));
    }

    /// Counts a waiter that was granted or gave up.
    pub(super) fn stop_waiting(&mut self, h: Holder) {
        self.update(h, |u| u.waiting = u.waiting.saturating_sub(1));
    }

    /// The slots `tenant` holds.
    pub(super) fn tenant_held(&self, tenant: &TenantId) -> u32 {
        self.tenants.find(tenant).map_or(0, |u| u.held)
    }

    /// The share of `capacity` `tenant` is guaranteed now (counting it as
    /// active even if it is not yet).
    pub(super) fn tenant_share(&self, tenant: &TenantId, capacity: u32) -> u32 {
        match self.tenants.find(tenant) {
            Some(u) => self.share(u, capacity),
            None => self.share(
                &Use {
                    weight: self.weights.milli(tenant),
                    ..Use::default()
                },
                capacity,
            ),
        }
    }

    /// Whether any waiting tenant holds less than its share.
    pub(super) fn owed_waiting(&self, capacity: u32) -> bool {
        self.tenants
            .values()
            .any(|u| u.waiting > 0 && u.held < self.share(u, capacity))
    }

    fn is_owed(&self, h: Holder, capacity: u32) -> bool {
        self.tenants
            .get(h.tenant)
            .is_some_and(|u| u.held < self.share(u, capacity))
    }

    fn share(&self, u: &Use, capacity: u32) -> u32 {
        let total = if u.is_idle() {
            self.active_weight.saturating_add(u.weight)
        } else {
            self.active_weight
        };
        let share = u64::from(capacity).saturating_mul(u.weight) / total.max(1);
        // At most `capacity`, so the cast is lossless.
        u32::try_from(share)
            .unwrap_or(capacity)
            .clamp(1, capacity.max(1))
    }

    /// Applies `change` to the holder's tenant and run, keeping the sum of
    /// active weights exact.
    fn update(&mut self, h: Holder, change: impl Fn(&mut Use)) {
        if let Some(u) = self.tenants.get_mut(h.tenant) {
            let was_idle = u.is_idle();
            change(u);
            match (was_idle, u.is_idle()) {
                (true, false) => self.active_weight = self.active_weight.saturating_add(u.weight),
                (false, true) => self.active_weight = self.active_weight.saturating_sub(u.weight),
                _ => {}
            }
        }
        if let Some(u) = h.run.and_then(|r| self.runs.get_mut(r)) {
            change(u);
        }
    }

    #[cfg(test)]
    fn entries(&self) -> (usize, usize) {
        (self.tenants.index.len(), self.runs.index.len())
    }
}

/// Entries addressed by key once and by index after that.
///
/// # Why indices
///
/// A permit or a waiter points at its tenant's and run's counts by index, so
/// releasing and granting never hash or clone an id. Idle entries (nothing
/// held or awaited) are kept, so a run's next call finds its entry without
/// allocating, and swept in one pass when the table reaches twice the size
/// it had after the last sweep (at least [`MIN_RETAINED`]): memory stays
/// proportional to the busy entries, at amortized O(1) per insert. An index
/// is freed only by a sweep, and a sweep frees only idle entries, which no
/// permit or waiter points at.
#[derive(Debug, Clone)]
struct Table<K, V> {
    index: HashMap<K, u32>,
    slots: Vec<V>,
    free: Vec<u32>,
    sweep_at: usize,
}

impl<K, V> Default for Table<K, V> {
    fn default() -> Self {
        Table {
            index: HashMap::default(),
            slots: Vec::new(),
            free: Vec::new(),
            sweep_at: MIN_RETAINED,
        }
    }
}

impl<K: Eq + Hash + Clone> Table<K, Use> {
    fn find_or_insert(&mut self, key: &K, make: impl FnOnce() -> Use) -> u32 {
        if let Some(&i) = self.index.get(key) {
            return i;
        }
        if self.index.len() >= self.sweep_at {
            self.sweep();
        }
        let value = make();
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(slot) = self.slots.get_mut(i as usize) {
                    *slot = value;
                }
                i
            }
            None => {
                self.slots.push(value);
                u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.index.insert(key.clone(), i);
        i
    }

    fn sweep(&mut self) {
        let (slots, free) = (&self.slots, &mut self.free);
        self.index.retain(|_, &mut i| {
            let idle = slots.get(i as usize).is_none_or(Use::is_idle);
            if idle {
                free.push(i);
            }
            !idle
        });
        self.sweep_at = (self.index.len() * 2).max(MIN_RETAINED);
    }

    fn find(&self, key: &K) -> Option<&Use> {
        self.index.get(key).and_then(|&i| self.get(i))
    }

    fn get(&self, i: u32) -> Option<&Use> {
        self.slots.get(i as usize)
    }

    fn get_mut(&mut self, i: u32) -> Option<&mut Use> {
        self.slots.get_mut(i as usize)
    }

    fn values(&self) -> impl Iterator<Item = &Use> {
        self.index.values().filter_map(|&i| self.get(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    fn run(name: &str) -> RunId {
        RunId::new(name).unwrap()
    }

    fn quotas(tenant_max: Option<u32>, run_max: Option<u32>) -> Quotas {
        Quotas::new(QuotaSettings {
            weights: TenantWeights::default().with(tenant("heavy"), 3.0).unwrap(),
            tenant_max,
            run_max,
        })
    }

    #[test]
    fn share_divides_capacity_by_weight_among_active_tenants() {
        let mut q = quotas(None, None);
        let a = q.holder(&tenant("a"), &run("r1"));
        let heavy = q.holder(&tenant("heavy"), &run("r2"));
        // Alone, a tenant is owed everything.
        assert_eq!(q.tenant_share(&tenant("a"), 8), 8);
        q.take(a);
        q.wait(heavy);
        // a weighs 1, heavy 3: 2 and 6 of 8.
        assert_eq!(q.tenant_share(&tenant("a"), 8), 2);
        assert_eq!(q.tenant_share(&tenant("heavy"), 8), 6);
        // An inactive tenant asking counts itself in.
        assert_eq!(q.tenant_share(&tenant("b"), 10), 2);
    }

    #[test]
    fn share_is_at_least_one_slot() {
        let mut q = quotas(None, None);
        for name in ["a", "b", "c", "d", "e"] {
            let h = q.holder(&tenant(name), &run(name));
            q.wait(h);
        }
        assert_eq!(q.tenant_share(&tenant("a"), 2), 1);
    }

    #[test]
    fn owed_waiting_sees_a_tenant_below_its_share() {
        let mut q = quotas(None, None);
        let a = q.holder(&tenant("a"), &run("r1"));
        for _ in 0..8 {
            q.take(a);
        }
        assert!(!q.owed_waiting(8));
        let b = q.holder(&tenant("b"), &run("r2"));
        q.wait(b);
        assert!(q.owed_waiting(8));
        // a borrows: beyond its share of 4, it is not eligible while b waits.
        q.wait(a);
        assert!(!q.eligible(a, 8, true));
        assert!(q.eligible(b, 8, true));
        assert!(q.eligible(a, 8, false));
    }

    #[test]
    fn tenant_and_run_caps_refuse_with_the_tier() {
        let mut q = quotas(Some(3), Some(2));
        let r1 = q.holder(&tenant("a"), &run("r1"));
        q.take(r1);
        q.take(r1);
        assert_eq!(q.check(r1), Err(QuotaTier::Run { held: 2, max: 2 }));
        let r2 = q.holder(&tenant("a"), &run("r2"));
        assert_eq!(q.check(r2), Ok(()));
        q.take(r2);
        assert_eq!(q.check(r2), Err(QuotaTier::Tenant { held: 3, max: 3 }));
        q.give_back(r1);
        assert_eq!(q.check(r1), Ok(()));
        assert_eq!(q.tenant_held(&tenant("a")), 2);
    }

    #[test]
    fn runs_are_not_tracked_without_run_max() {
        let mut q = quotas(None, None);
        let h = q.holder(&tenant("a"), &run("r1"));
        q.take(h);
        assert_eq!(q.entries(), (1, 0));
    }

    #[test]
    fn active_weight_returns_to_zero_when_everyone_is_idle() {
        let mut q = quotas(None, Some(4));
        let a = q.holder(&tenant("a"), &run("r1"));
        let heavy = q.holder(&tenant("heavy"), &run("r2"));
        q.take(a);
        q.wait(heavy);
        assert_eq!(q.active_weight, 4000);
        q.stop_waiting(heavy);
        q.give_back(a);
        assert_eq!(q.active_weight, 0);
    }

    #[test]
    fn idle_entries_are_swept_and_busy_ones_kept() {
        let mut q = quotas(None, Some(1));
        let busy = q.holder(&tenant("busy"), &run("keep"));
        q.take(busy);
        for i in 0..1000 {
            let h = q.holder(&tenant("t"), &run(&format!("r{i}")));
            q.take(h);
            q.give_back(h);
        }
        let (_, runs) = q.entries();
        assert!(runs <= 2 * MIN_RETAINED, "{runs} run entries kept");
        // The busy run's entry survived every sweep.
        let again = q.holder(&tenant("busy"), &run("keep"));
        assert_eq!(again, busy);
        assert_eq!(q.check(again), Err(QuotaTier::Run { held: 1, max: 1 }));
        assert_eq!(q.tenant_held(&tenant("busy")), 1);
    }
}

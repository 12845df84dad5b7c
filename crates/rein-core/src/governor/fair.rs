//! The weighted fair queue of a resource group: deficit round robin between
//! tenants, in two classes — interactive ahead of batch, batch keeping a
//! reserved share.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::config::{BatchShare, TenantWeights};
use crate::clock::Instant;
use crate::ids::TenantId;

/// Thousandths: weights and costs are compared in the same unit.
const MILLI: u128 = 1000;

/// Whether work has a caller waiting on it or was queued for later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// A caller is waiting for the answer (a sync run, a gateway request):
    /// served first.
    #[default]
    Interactive,
    /// Queued work (a submitted run): served when interactive work leaves
    /// room, and always for at least its reserved share.
    Batch,
}

impl Class {
    /// The class's name as events and metrics show it.
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Interactive => "interactive",
            Class::Batch => "batch",
        }
    }

    fn lane(self) -> usize {
        match self {
            Class::Interactive => 0,
            Class::Batch => 1,
        }
    }

    fn other(self) -> Class {
        match self {
            Class::Interactive => Class::Batch,
            Class::Batch => Class::Interactive,
        }
    }
}

impl fmt::Display for Class {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An item leaving the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dequeued<T> {
    /// What was queued.
    pub item: T,
    /// Its class.
    pub class: Class,
    /// Its cost as queued (at least 1).
    pub cost: u64,
    /// How long it waited.
    pub waited: Duration,
}

/// A weighted fair queue between tenants, in two classes.
///
/// ```text
///              enqueue(item, tenant, class, cost)
///                 │                        │
///   interactive ┌─▼──────────────────┐  batch ┌─▼──────────────────┐
///               │ DRR over tenants   │        │ DRR over tenants   │
///               └─────────┬──────────┘        └─────────┬──────────┘
///                         └── class arbiter: interactive first; ──┘
///                             batch whenever it is behind its share
///                                        │
///                                   dequeue(now)
/// ```
///
/// # Why
///
/// One FIFO for everyone lets one tenant's 300 queued calls delay another
/// tenant's single call by all 300; and queued (batch) work filling the
/// queue delays the interactive request a person is waiting on (seed 000:
/// "queueing degrades quickly into a fairness problem"). So each tenant has
/// its own FIFO, and the queue serves them by deficit round robin
/// (Shreedhar and Varghese): in turn, each tenant's deficit grows by its
/// weight's quantum and pays for items until the next one costs more than
/// is left. Over any stretch in which two tenants both wait, what each was
/// served, divided by its weight, differs by at most one quantum plus one
/// item's cost from the other's.
///
/// # Classes
///
/// Interactive and batch work queue in separate lanes. While both lanes
/// hold work, batch is served exactly when it is behind its reserved share
/// of the cost served since both started waiting (`batch_share`, default
/// 10 %), and interactive otherwise: interactive comes first, and an
/// interactive flood can take at most `1 − batch_share` — batch is never
/// starved entirely, nor does it ever crowd interactive work out. While only
/// one lane holds work, it is served alone and the accounting starts over.
///
/// # Eligibility
///
/// [`dequeue_where`](FairQueue::dequeue_where) skips items its predicate
/// refuses (a run or tenant at its quota). A tenant with nothing eligible
/// is treated as DRR treats a flow that ran empty: passed over without
/// quantum, its unspent credit forfeited — being blocked banks nothing to
/// burst with later. Within a tenant the first eligible item goes first.
///
/// # Costs
///
/// Costs are whatever the caller weighs work by — one per call, or the
/// token estimate of a model call; a cost of zero counts as one. Dequeue
/// takes O(tenants waiting) whatever the costs: a round in which no tenant
/// can pay is skipped arithmetically, not looped.
///
/// # Example
///
/// ```
/// use rein_core::{Instant, TenantId};
/// use rein_core::governor::{BatchShare, Class, FairQueue, TenantWeights};
///
/// let (noisy, quiet) = (TenantId::new("noisy")?, TenantId::new("quiet")?);
/// let mut queue = FairQueue::new(TenantWeights::default(), BatchShare::default());
/// let now = Instant::ORIGIN;
/// for i in 0..300 {
///     queue.enqueue(format!("noisy-{i}"), &noisy, Class::Interactive, 1, now);
/// }
/// queue.enqueue("quiet-0".to_owned(), &quiet, Class::Interactive, 1, now);
/// let first_two: Vec<_> = (0..2).filter_map(|_| queue.dequeue(now)).map(|d| d.item).collect();
/// assert_eq!(first_two, ["noisy-0", "quiet-0"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct FairQueue<T> {
    lanes: [Lane<T>; 2],
    weights: TenantWeights,
    share: BatchShare,
    /// `batch served × (1000 − share) − interactive served × share`, over
    /// the costs served while both lanes held work: negative while batch is
    /// behind its share.
    lag: i128,
}

#[derive(Debug, Clone)]
struct Lane<T> {
    flows: VecDeque<Flow<T>>,
    /// Whether the front flow has had its quantum for the current turn.
    fresh: bool,
}

#[derive(Debug, Clone)]
struct Flow<T> {
    tenant: TenantId,
    /// The tenant's weight in thousandths.
    quantum: u128,
    /// Credit in thousandths of a cost unit.
    deficit: u128,
    items: VecDeque<Entry<T>>,
}

#[derive(Debug, Clone)]
struct Entry<T> {
    item: T,
    cost: u64,
    enqueued_at: Instant,
}

impl<T> FairQueue<T> {
    /// An empty queue weighing tenants by `weights`, batch keeping `share`.
    pub fn new(weights: TenantWeights, share: BatchShare) -> FairQueue<T> {
        FairQueue {
            lanes: [Lane::new(), Lane::new()],
            weights,
            share,
            lag: 0,
        }
    }

    /// Items queued.
    pub fn len(&self) -> usize {
        self.lanes.iter().map(Lane::len).sum()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.lanes.iter().all(Lane::is_empty)
    }

    /// Items queued in `class`.
    pub fn len_of(&self, class: Class) -> usize {
        self.lanes[class.lane()].len()
    }

    /// Queues `item` for `tenant` in `class` at `cost` (zero counts as one).
    ///
    /// A tenant with nothing queued in the class joins the back of its
    /// round, with no credit.
    pub fn enqueue(&mut self, item: T, tenant: &TenantId, class: Class, cost: u64, now: Instant) {
        let entry = Entry {
            item,
            cost: cost.max(1),
            enqueued_at: now,
        };
        let lane = &mut self.lanes[class.lane()];
        match lane.flows.iter_mut().find(|f| &f.tenant == tenant) {
            Some(flow) => flow.items.push_back(entry),
            None => lane.flows.push_back(Flow {
                tenant: tenant.clone(),
                quantum: u128::from(self.weights.milli(tenant)),
                deficit: 0,
                items: VecDeque::from([entry]),
            }),
        }
    }

    /// The next item in fair order, or `None` when empty.
    pub fn dequeue(&mut self, now: Instant) -> Option<Dequeued<T>> {
        self.dequeue_where(now, |_| true)
    }

    /// The next item in fair order among those `eligible` accepts, or `None`
    /// when none is.
    pub fn dequeue_where(
        &mut self,
        now: Instant,
        mut eligible: impl FnMut(&T) -> bool,
    ) -> Option<Dequeued<T>> {
        let both = !self.lanes[0].is_empty() && !self.lanes[1].is_empty();
        if !both {
            self.lag = 0;
        }
        let first = if self.lanes[0].is_empty() || (both && self.lag < 0) {
            Class::Batch
        } else {
            Class::Interactive
        };
        let (class, entry) = match self.lanes[first.lane()].dequeue_where(&mut eligible) {
            Some(entry) => {
                if both {
                    self.account(first, entry.cost);
                }
                (first, entry)
            }
            // The arbiter's choice had nothing eligible: the other lane may
            // use the slot, without the accounting (batch keeps its claim).
            None => (
                first.other(),
                self.lanes[first.other().lane()].dequeue_where(&mut eligible)?,
            ),
        };
        Some(Dequeued {
            waited: now.saturating_duration_since(entry.enqueued_at),
            item: entry.item,
            class,
            cost: entry.cost,
        })
    }

    /// Removes the first queued item `matches` accepts (a waiter that gave
    /// up), wherever it is.
    pub fn remove(&mut self, mut matches: impl FnMut(&T) -> bool) -> Option<T> {
        self.lanes
            .iter_mut()
            .find_map(|lane| lane.remove(&mut matches))
    }

    /// Queued items, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.lanes
            .iter()
            .flat_map(|l| l.flows.iter().flat_map(|f| f.items.iter().map(|e| &e.item)))
    }

    fn account(&mut self, class: Class, cost: u64) {
        let share = i128::from(self.share.milli());
        let cost = i128::from(cost);
        self.lag = match class {
            Class::Batch => self.lag.saturating_add(cost * (1000 - share)),
            Class::Interactive => self.lag.saturating_sub(cost * share),
        };
    }
}

impl<T> Lane<T> {
    fn new() -> Lane<T> {
        Lane {
            flows: VecDeque::new(),
            fresh: false,
        }
    }

    fn len(&self) -> usize {
        self.flows.iter().map(|f| f.items.len()).sum()
    }

    fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Deficit round robin over the lane's flows.
    fn dequeue_where(&mut self, eligible: &mut impl FnMut(&T) -> bool) -> Option<Entry<T>> {
        for pass in 0..2 {
            let mut any_eligible = false;
            for _ in 0..self.flows.len() {
                let front = self.flows.front_mut()?;
                let Some(pos) = front.items.iter().position(|e| eligible(&e.item)) else {
                    // Blocked: to DRR a flow with nothing eligible is an
                    // empty flow — passed over without quantum, and its
                    // unspent credit forfeited, so that a tenant held back
                    // by its quota cannot bank turns to burst with later.
                    front.deficit = 0;
                    self.rotate();
                    continue;
                };
                any_eligible = true;
                if !self.fresh {
                    front.deficit = front.deficit.saturating_add(front.quantum);
                    self.fresh = true;
                }
                let cost = cost_milli(front.items[pos].cost);
                if cost <= front.deficit {
                    front.deficit -= cost;
                    let entry = front.items.remove(pos);
                    if front.items.is_empty() {
                        self.flows.pop_front();
                        self.fresh = false;
                    }
                    return entry;
                }
                self.rotate();
            }
            if !any_eligible {
                return None;
            }
            if pass == 0 {
                self.skip_rounds(eligible);
            }
        }
        None
    }

    /// After a full round in which no eligible flow could pay: adds the
    /// quanta of the rounds that would pass before one can, so the next
    /// round serves someone.
    fn skip_rounds(&mut self, eligible: &mut impl FnMut(&T) -> bool) {
        let rounds_needed = |f: &Flow<T>, eligible: &mut dyn FnMut(&T) -> bool| {
            f.items.iter().find(|e| eligible(&e.item)).map(|e| {
                cost_milli(e.cost)
                    .saturating_sub(f.deficit)
                    .div_ceil(f.quantum.max(1))
            })
        };
        let Some(least) = self
            .flows
            .iter()
            .filter_map(|f| rounds_needed(f, eligible))
            .min()
        else {
            return;
        };
        let skip = least.saturating_sub(1);
        if skip == 0 {
            return;
        }
        for flow in &mut self.flows {
            if rounds_needed(flow, eligible).is_some() {
                flow.deficit = flow
                    .deficit
                    .saturating_add(skip.saturating_mul(flow.quantum));
            }
        }
    }

    fn rotate(&mut self) {
        if let Some(flow) = self.flows.pop_front() {
            self.flows.push_back(flow);
        }
        self.fresh = false;
    }

    fn remove(&mut self, matches: &mut impl FnMut(&T) -> bool) -> Option<T> {
        let (f, i) = self.flows.iter().enumerate().find_map(|(f, flow)| {
            flow.items
                .iter()
                .position(|e| matches(&e.item))
                .map(|i| (f, i))
        })?;
        let flow = &mut self.flows[f];
        let entry = flow.items.remove(i)?;
        if flow.items.is_empty() {
            self.flows.remove(f);
            if f == 0 {
                self.fresh = false;
            }
        }
        Some(entry.item)
    }
}

fn cost_milli(cost: u64) -> u128 {
    u128::from(cost) * MILLI
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(name: &str) -> TenantId {
        TenantId::new(name).unwrap()
    }

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    fn queue() -> FairQueue<&'static str> {
        FairQueue::new(TenantWeights::default(), BatchShare::default())
    }

    fn drain<T>(q: &mut FairQueue<T>) -> Vec<T> {
        std::iter::from_fn(|| q.dequeue(at(0)).map(|d| d.item)).collect()
    }

    #[test]
    fn empty_queue_dequeues_nothing() {
        let mut q = queue();
        assert!(q.is_empty());
        assert_eq!(q.dequeue(at(0)), None);
    }

    #[test]
    fn one_tenant_is_served_in_fifo_order() {
        let mut q = queue();
        for item in ["a", "b", "c"] {
            q.enqueue(item, &tenant("t"), Class::Interactive, 1, at(0));
        }
        assert_eq!(q.len(), 3);
        assert_eq!(drain(&mut q), ["a", "b", "c"]);
    }

    #[test]
    fn equal_tenants_alternate_whatever_their_backlog() {
        let mut q = queue();
        for item in ["n1", "n2", "n3", "n4"] {
            q.enqueue(item, &tenant("noisy"), Class::Interactive, 1, at(0));
        }
        q.enqueue("q1", &tenant("quiet"), Class::Interactive, 1, at(0));
        q.enqueue("q2", &tenant("quiet"), Class::Interactive, 1, at(0));
        assert_eq!(drain(&mut q), ["n1", "q1", "n2", "q2", "n3", "n4"]);
    }

    #[test]
    fn weights_divide_service_in_proportion() {
        let weights = TenantWeights::default().with(tenant("gold"), 3.0).unwrap();
        let mut q = FairQueue::new(weights, BatchShare::default());
        for _ in 0..40 {
            q.enqueue("gold", &tenant("gold"), Class::Interactive, 1, at(0));
            q.enqueue("base", &tenant("base"), Class::Interactive, 1, at(0));
        }
        let first: Vec<_> = (0..20)
            .filter_map(|_| q.dequeue(at(0)))
            .map(|d| d.item)
            .collect();
        assert_eq!(first.iter().filter(|&&i| i == "gold").count(), 15);
    }

    #[test]
    fn fractional_weights_are_honoured_over_rounds() {
        let weights = TenantWeights::default().with(tenant("half"), 0.5).unwrap();
        let mut q = FairQueue::new(weights, BatchShare::default());
        for _ in 0..30 {
            q.enqueue("half", &tenant("half"), Class::Interactive, 1, at(0));
            q.enqueue("one", &tenant("one"), Class::Interactive, 1, at(0));
        }
        let first: Vec<_> = (0..30)
            .filter_map(|_| q.dequeue(at(0)))
            .map(|d| d.item)
            .collect();
        assert_eq!(first.iter().filter(|&&i| i == "half").count(), 10);
    }

    #[test]
    fn large_costs_are_served_without_looping_round_by_round() {
        let mut q = queue();
        q.enqueue(
            "big",
            &tenant("a"),
            Class::Interactive,
            1_000_000_000,
            at(0),
        );
        q.enqueue("small", &tenant("b"), Class::Interactive, 1, at(0));
        // One billion rounds are skipped arithmetically.
        assert_eq!(drain(&mut q), ["small", "big"]);
    }

    #[test]
    fn costly_items_get_proportionally_fewer_turns() {
        let mut q = queue();
        for _ in 0..20 {
            q.enqueue("heavy", &tenant("heavy"), Class::Interactive, 4, at(0));
            q.enqueue("light", &tenant("light"), Class::Interactive, 1, at(0));
        }
        let first: Vec<_> = (0..20)
            .filter_map(|_| q.dequeue(at(0)))
            .map(|d| d.item)
            .collect();
        let heavy = first.iter().filter(|&&i| i == "heavy").count();
        assert_eq!(heavy, 4, "{first:?}");
    }

    #[test]
    fn zero_cost_counts_as_one() {
        let mut q = queue();
        q.enqueue("a", &tenant("a"), Class::Interactive, 0, at(0));
        assert_eq!(q.dequeue(at(0)).unwrap().cost, 1);
    }

    #[test]
    fn interactive_is_served_ahead_of_batch() {
        let mut q = queue();
        q.enqueue("b1", &tenant("t"), Class::Batch, 1, at(0));
        q.enqueue("b2", &tenant("t"), Class::Batch, 1, at(0));
        q.enqueue("i1", &tenant("t"), Class::Interactive, 1, at(0));
        assert_eq!(q.dequeue(at(0)).unwrap().item, "i1");
    }

    #[test]
    fn batch_keeps_its_share_under_an_interactive_flood() {
        let mut q = queue();
        for _ in 0..200 {
            q.enqueue("i", &tenant("t"), Class::Interactive, 1, at(0));
            q.enqueue("b", &tenant("t"), Class::Batch, 1, at(0));
        }
        let first: Vec<_> = (0..100)
            .filter_map(|_| q.dequeue(at(0)))
            .map(|d| d.item)
            .collect();
        assert_eq!(first.iter().filter(|&&i| i == "b").count(), 10);
        assert_eq!(q.len_of(Class::Batch), 190);
    }

    #[test]
    fn batch_share_setting_changes_the_split() {
        let mut q = FairQueue::new(
            TenantWeights::default(),
            BatchShare::new("s", 0.25).unwrap(),
        );
        for _ in 0..200 {
            q.enqueue("i", &tenant("t"), Class::Interactive, 1, at(0));
            q.enqueue("b", &tenant("t"), Class::Batch, 1, at(0));
        }
        let first: Vec<_> = (0..100)
            .filter_map(|_| q.dequeue(at(0)))
            .map(|d| d.item)
            .collect();
        assert_eq!(first.iter().filter(|&&i| i == "b").count(), 25);
    }

    #[test]
    fn batch_alone_is_served_at_full_rate() {
        let mut q = queue();
        for _ in 0..5 {
            q.enqueue("b", &tenant("t"), Class::Batch, 1, at(0));
        }
        assert_eq!(drain(&mut q).len(), 5);
    }

    #[test]
    fn ineligible_items_are_skipped_and_bank_no_credit() {
        let mut q = queue();
        q.enqueue("blocked-1", &tenant("a"), Class::Interactive, 1, at(0));
        q.enqueue("blocked-2", &tenant("a"), Class::Interactive, 1, at(0));
        q.enqueue("b1", &tenant("b"), Class::Interactive, 1, at(0));
        q.enqueue("b2", &tenant("b"), Class::Interactive, 1, at(0));
        q.enqueue("b3", &tenant("b"), Class::Interactive, 1, at(0));
        let not_blocked = |i: &&str| !i.starts_with("blocked");
        assert_eq!(q.dequeue_where(at(0), not_blocked).unwrap().item, "b1");
        assert_eq!(q.dequeue_where(at(0), not_blocked).unwrap().item, "b2");
        // Unblocked, a did not bank two turns: it alternates with b.
        assert_eq!(drain(&mut q), ["blocked-1", "b3", "blocked-2"]);
    }

    #[test]
    fn a_tenant_blocked_mid_turn_forfeits_its_unspent_credit() {
        let weights = TenantWeights::default().with(tenant("heavy"), 3.0).unwrap();
        let mut q = FairQueue::new(weights, BatchShare::default());
        for _ in 0..10 {
            q.enqueue("heavy", &tenant("heavy"), Class::Interactive, 1, at(0));
            q.enqueue("light", &tenant("light"), Class::Interactive, 1, at(0));
        }
        // heavy's turn: 3 credits, one spent; then it is at its cap.
        assert_eq!(q.dequeue(at(0)).unwrap().item, "heavy");
        assert_eq!(
            q.dequeue_where(at(0), |i| *i == "light").unwrap().item,
            "light"
        );
        // Unblocked, heavy starts a fresh turn of 3, not 3 plus the 2 left.
        let next: Vec<_> = (0..5)
            .filter_map(|_| q.dequeue(at(0)))
            .map(|d| d.item)
            .collect();
        assert_eq!(next, ["heavy", "heavy", "heavy", "light", "heavy"]);
    }

    #[test]
    fn within_a_tenant_the_first_eligible_item_goes_first() {
        let mut q = queue();
        q.enqueue("run1-a", &tenant("t"), Class::Interactive, 1, at(0));
        q.enqueue("run2-a", &tenant("t"), Class::Interactive, 1, at(0));
        let d = q.dequeue_where(at(0), |i| i.starts_with("run2")).unwrap();
        assert_eq!(d.item, "run2-a");
        assert_eq!(q.dequeue_where(at(0), |i| i.starts_with("run2")), None);
    }

    #[test]
    fn when_the_chosen_class_is_blocked_the_other_uses_the_slot() {
        let mut q = queue();
        q.enqueue("i", &tenant("t"), Class::Interactive, 1, at(0));
        q.enqueue("b", &tenant("t"), Class::Batch, 1, at(0));
        assert_eq!(
            q.dequeue_where(at(0), |i| *i == "b").unwrap().class,
            Class::Batch
        );
    }

    #[test]
    fn dequeue_reports_how_long_the_item_waited() {
        let mut q = queue();
        q.enqueue("a", &tenant("t"), Class::Batch, 3, at(100));
        let d = q.dequeue(at(350)).unwrap();
        assert_eq!(
            d,
            Dequeued {
                item: "a",
                class: Class::Batch,
                cost: 3,
                waited: Duration::from_millis(250)
            }
        );
    }

    #[test]
    fn remove_takes_an_item_out_wherever_it_is() {
        let mut q = queue();
        q.enqueue("a1", &tenant("a"), Class::Interactive, 1, at(0));
        q.enqueue("b1", &tenant("b"), Class::Batch, 1, at(0));
        q.enqueue("a2", &tenant("a"), Class::Interactive, 1, at(0));
        assert_eq!(q.remove(|i| *i == "b1"), Some("b1"));
        assert_eq!(q.remove(|i| *i == "zz"), None);
        assert_eq!(q.iter().count(), 2);
        assert_eq!(q.remove(|i| *i == "a1"), Some("a1"));
        assert_eq!(drain(&mut q), ["a2"]);
    }

    #[test]
    fn class_serializes_snake_case() {
        assert_eq!(serde_json::to_value(Class::Batch).unwrap(), "batch");
        assert_eq!(Class::Interactive.to_string(), "interactive");
    }
}

//! Property tests of the governor's invariants, through the public API only.
#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::time::Duration;

use proptest::prelude::*;
use rein_core::governor::{
    Acquire, AdaptiveLimit, Adjustment, Admit, BatchShare, Class, Completion, ConcurrencyConfig,
    FairQueue, Governor, GovernorConfig, Permit, Poll, Rate, Request, TenantWeights, Ticket,
    TokenBucket,
};
use rein_core::{Instant, RunId, TenantId};

fn tenant(i: usize) -> TenantId {
    TenantId::new(format!("tenant-{i}")).unwrap()
}

fn run(i: usize) -> RunId {
    RunId::new(format!("run-{i}")).unwrap()
}

fn nanos(at: Instant) -> u128 {
    at.since_origin().as_nanos()
}

// ----- token bucket ------------------------------------------------------

fn rate() -> impl Strategy<Value = Rate> {
    (1u64..=1000, 1u64..=10_000).prop_map(|(tokens, per_ms)| {
        Rate::new(
            NonZeroU64::new(tokens).unwrap(),
            Duration::from_millis(per_ms),
        )
        .unwrap()
    })
}

proptest! {
    /// Over every window [t_i, t_j] of a random history, the tokens granted
    /// at instants inside it are at most burst + rate × (t_j − t_i).
    #[test]
    fn bucket_never_grants_more_than_burst_plus_rate_times_elapsed(
        rate in rate(),
        burst in 1u64..=50,
        steps in prop::collection::vec((0u64..2_000, 1u64..=50), 1..120),
    ) {
        let mut bucket = TokenBucket::new(rate, burst).unwrap();
        let mut now = Instant::ORIGIN;
        let mut grants: Vec<(u128, u128)> = Vec::new();
        for (advance_ms, n) in steps {
            now = now + Duration::from_millis(advance_ms);
            let n = n.min(burst);
            match bucket.try_acquire(n, now) {
                Acquire::Granted => grants.push((nanos(now), u128::from(n))),
                Acquire::Wait { until } => {
                    prop_assert!(until > now);
                    prop_assert_eq!(bucket.ready_at(n, now), Some(until));
                    // Just before `until` it still waits; at `until` it grants.
                    let mut probe = bucket.clone();
                    let before = until - Duration::from_nanos(1);
                    prop_assert!(!probe.try_acquire(n, before.max(now)).is_granted() || before < now);
                    prop_assert!(probe.try_acquire(n, until).is_granted());
                }
                Acquire::Rejected { .. } => prop_assert!(false, "n ≤ burst is never rejected"),
            }
        }
        let per = rate.per().as_nanos();
        let tokens = u128::from(rate.tokens());
        for i in 0..grants.len() {
            let mut granted = 0u128;
            for j in i..grants.len() {
                granted += grants[j].1;
                let elapsed = grants[j].0 - grants[i].0;
                // granted ≤ burst + elapsed × tokens / per, in exact integers.
                prop_assert!(
                    granted * per <= u128::from(burst) * per + elapsed * tokens,
                    "{} tokens granted in {} ns with burst {} at {}", granted, elapsed, burst, rate
                );
            }
        }
    }

    /// A rejection happens exactly when more than the burst is asked for.
    #[test]
    fn bucket_rejects_exactly_what_exceeds_burst(rate in rate(), burst in 1u64..=50, n in 0u64..=100) {
        let mut bucket = TokenBucket::new(rate, burst).unwrap();
        let rejected = matches!(bucket.try_acquire(n, Instant::ORIGIN), Acquire::Rejected { .. });
        prop_assert_eq!(rejected, n > burst);
    }
}

// ----- adaptive limit ----------------------------------------------------

#[derive(Debug, Clone)]
enum LimitOp {
    Acquire,
    Release(usize, u8, u64),
    Advance(u64),
}

fn limit_op() -> impl Strategy<Value = LimitOp> {
    prop_oneof![
        4 => Just(LimitOp::Acquire),
        4 => (any::<usize>(), 0u8..4, 1u64..500).prop_map(|(i, c, ms)| LimitOp::Release(i, c, ms)),
        1 => (0u64..120_000).prop_map(LimitOp::Advance),
    ]
}

fn concurrency() -> impl Strategy<Value = ConcurrencyConfig> {
    (
        1u32..=10,
        0u32..=60,
        0u32..=100,
        1u32..=99,
        11u32..=40,
        1u32..=10,
        1u64..=30,
        1u32..=20,
    )
        .prop_map(
            |(min, span, initial, backoff, tolerance, smoothing, interval_s, warmup)| {
                let mut c = ConcurrencyConfig::default();
                c.min = min;
                c.max = min + span;
                c.initial = Some(min + initial % (span + 1));
                c.backoff = f64::from(backoff) / 100.0;
                c.latency_tolerance = f64::from(tolerance) / 10.0;
                c.smoothing = f64::from(smoothing) / 10.0;
                c.baseline_interval = Duration::from_secs(interval_s);
                c.warmup_samples = warmup;
                c
            },
        )
}

proptest! {
    /// The limit stays within [min, max]; slots in flight never exceed the
    /// limit they were granted under; an overload reported with a slot of
    /// the current epoch shrinks a limit above min by the backoff factor;
    /// every adjustment reports the limit before and after.
    #[test]
    fn adaptive_limit_stays_within_bounds_and_shrinks_on_overload(
        config in concurrency(),
        ops in prop::collection::vec(limit_op(), 1..300),
    ) {
        let (min, max, backoff) = (config.min, config.max, config.backoff);
        let mut limit = AdaptiveLimit::new(config).unwrap();
        let mut now = Instant::ORIGIN;
        let mut held = Vec::new();
        for op in ops {
            match op {
                LimitOp::Acquire => {
                    let before = limit.limit();
                    match limit.try_acquire(now) {
                        Ok(permit) => {
                            prop_assert!(limit.in_flight() <= before);
                            held.push((permit, limit.epoch()));
                        }
                        Err(at) => prop_assert!(at.in_flight >= at.limit),
                    }
                }
                LimitOp::Release(i, c, ms) if !held.is_empty() => {
                    let (permit, epoch) = held.swap_remove(i % held.len());
                    let completion = match c {
                        0 => Completion::Overloaded,
                        1 => Completion::Ignored,
                        2 => Completion::generated(ms % 50),
                        _ => Completion::SUCCEEDED,
                    };
                    let old = limit.limit();
                    let current = epoch == limit.epoch();
                    now = now + Duration::from_millis(ms);
                    let adjustment = limit.release(permit, completion, now);
                    match &adjustment {
                        Adjustment::Unchanged => prop_assert_eq!(limit.limit(), old),
                        Adjustment::Shrunk { old: o, new, .. } => {
                            prop_assert_eq!((*o, *new), (old, limit.limit()));
                            prop_assert!(*new < old);
                            let floor = ((f64::from(old) * backoff).floor() as u32).max(min);
                            prop_assert_eq!(*new, floor.min(old - 1));
                        }
                        Adjustment::Grew { old: o, new } => {
                            prop_assert_eq!((*o, *new), (old, old + 1));
                            prop_assert_eq!(limit.limit(), old + 1);
                        }
                    }
                    if completion == Completion::Overloaded {
                        prop_assert_eq!(
                            adjustment.is_change(),
                            current && old > min,
                            "overload with a current slot above min shrinks"
                        );
                    }
                }
                LimitOp::Release(..) => {}
                LimitOp::Advance(ms) => now = now + Duration::from_millis(ms),
            }
            prop_assert!((min..=max).contains(&limit.limit()), "limit {} outside [{min}, {max}]", limit.limit());
            prop_assert_eq!(limit.in_flight() as usize, held.len());
        }
    }
}

// ----- fair queue --------------------------------------------------------

fn weights() -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(prop::sample::select(vec![0.5, 1.0, 1.5, 2.0, 3.0]), 2..=4)
}

proptest! {
    /// While every tenant stays backlogged, what each was served divided by
    /// its weight differs between any two by at most two quanta plus one
    /// item's cost over each weight (deficit round robin's bound).
    #[test]
    fn drr_serves_tenants_in_proportion_to_weights_within_a_bound(
        ws in weights(),
        max_cost in 1u64..=5,
        costs in prop::collection::vec(1u64..=5, 400),
        dequeues in 1usize..=200,
    ) {
        let mut table = TenantWeights::default();
        for (i, &w) in ws.iter().enumerate() {
            table = table.with(tenant(i), w).unwrap();
        }
        let mut queue = FairQueue::new(table, BatchShare::default());
        let now = Instant::ORIGIN;
        for (k, &cost) in costs.iter().enumerate() {
            let i = k % ws.len();
            queue.enqueue(i, &tenant(i), Class::Interactive, cost.min(max_cost), now);
        }
        // Enough queued that nobody runs dry within `dequeues` (400 / 4 ≥ 100
        // items of cost ≥ 1 each; at most 200 dequeues share the weight).
        let mut served = vec![0u64; ws.len()];
        let mut left = vec![0usize; ws.len()];
        for k in 0..costs.len() {
            left[k % ws.len()] += 1;
        }
        for _ in 0..dequeues {
            let d = queue.dequeue(now).unwrap();
            served[d.item] += d.cost;
            left[d.item] -= 1;
            if left.contains(&0) {
                break;
            }
        }
        let cmax = max_cost as f64;
        for t in 0..ws.len() {
            for u in 0..ws.len() {
                let gap = served[t] as f64 / ws[t] - served[u] as f64 / ws[u];
                let bound = 2.0 + cmax / ws[t] + cmax / ws[u];
                prop_assert!(gap <= bound + 1e-9, "weights {:?} served {:?}: gap {} > {}", ws, served, gap, bound);
            }
        }
    }

    /// While both classes hold work, batch is served at least its reserved
    /// share of the cost served (less one item), and interactive at least
    /// the rest (less one item): neither class starves the other.
    #[test]
    fn batch_gets_at_least_its_reserved_share(
        share_milli in 1u32..=500,
        items in prop::collection::vec((0usize..3, any::<bool>(), 1u64..=4), 100..300),
        dequeues in 1usize..=100,
    ) {
        let share = BatchShare::new("batch_share", f64::from(share_milli) / 1000.0).unwrap();
        let p = f64::from(share.milli()) / 1000.0;
        let mut queue = FairQueue::new(TenantWeights::default(), share);
        let now = Instant::ORIGIN;
        let mut left = [0usize; 2];
        for &(t, batch, cost) in &items {
            let class = if batch { Class::Batch } else { Class::Interactive };
            left[usize::from(batch)] += 1;
            queue.enqueue(class, &tenant(t), class, cost, now);
        }
        let (mut batch_cost, mut total) = (0u64, 0u64);
        for _ in 0..dequeues {
            if left.contains(&0) {
                break;
            }
            let d = queue.dequeue(now).unwrap();
            prop_assert_eq!(d.item, d.class);
            left[usize::from(d.class == Class::Batch)] -= 1;
            total += d.cost;
            if d.class == Class::Batch {
                batch_cost += d.cost;
            }
            let (b, t, cmax) = (batch_cost as f64, total as f64, 4.0);
            prop_assert!(b >= p * t - p * cmax - 1e-9, "batch {} of {} at share {}", b, t, p);
            prop_assert!(t - b >= (1.0 - p) * t - (1.0 - p) * cmax - 1e-9, "interactive {} of {}", t - b, t);
        }
    }
}

// ----- the governor ------------------------------------------------------

#[derive(Debug, Clone)]
enum GovOp {
    /// Tenant `t` (modulo the tenants) asks `n` calls of run `r`.
    Ask(usize, usize, u8),
    /// The held call at this index (modulo) finishes with this completion.
    Finish(usize, u8),
    Advance(u64),
}

fn gov_op() -> impl Strategy<Value = GovOp> {
    prop_oneof![
        3 => (any::<usize>(), 0usize..6, 1u8..=6).prop_map(|(t, r, n)| GovOp::Ask(t, r, n)),
        4 => (any::<usize>(), 0u8..4).prop_map(|(i, c)| GovOp::Finish(i, c)),
        1 => (0u64..2_000).prop_map(GovOp::Advance),
    ]
}

/// The test's own books on what the governor granted.
struct Books {
    tenants: usize,
    /// Held permits with their tenant and run.
    held: Vec<(Permit, usize, usize)>,
    /// Waiting tickets with their tenant and run.
    waiting: HashMap<Ticket, (usize, usize)>,
    /// Per tenant: grants to others since it was last seen waiting and owed.
    passed_over: Vec<u32>,
    max: u32,
    tenant_max: Option<u32>,
    run_max: Option<u32>,
}

impl Books {
    fn held_by_tenant(&self, t: usize) -> u32 {
        self.held.iter().filter(|h| h.1 == t).count() as u32
    }

    fn held_by_run(&self, r: usize) -> u32 {
        self.held.iter().filter(|h| h.2 == r).count() as u32
    }

    /// Hands out every permit the governor grants now, checking the tiers.
    fn pump(&mut self, g: &mut Governor, now: Instant, bound: &[u32]) -> Result<(), TestCaseError> {
        loop {
            // Owed: waiting with a call its own caps allow, and below its
            // share.
            let owed: Vec<bool> = (0..self.tenants)
                .map(|t| {
                    let held = self.held_by_tenant(t);
                    let under_tenant_max = self.tenant_max.is_none_or(|m| held < m);
                    let waits = self.waiting.values().any(|&(wt, wr)| {
                        wt == t && self.run_max.is_none_or(|m| self.held_by_run(wr) < m)
                    });
                    waits && under_tenant_max && held < g.tenant_share(&tenant(t))
                })
                .collect();
            match g.poll(now) {
                Poll::Granted(grant) => {
                    let (t, r) = self
                        .waiting
                        .remove(&grant.ticket)
                        .ok_or_else(|| TestCaseError::fail("granted a ticket nobody holds"))?;
                    self.held.push((grant.permit, t, r));
                    self.check_tiers(g, t, r)?;
                    for (u, &is_owed) in owed.iter().enumerate() {
                        if u == t || !is_owed {
                            self.passed_over[u] = 0;
                        } else {
                            self.passed_over[u] += 1;
                            prop_assert!(
                                self.passed_over[u] <= bound[u],
                                "tenant {} owed and waiting was passed over {} times (bound {})",
                                u,
                                self.passed_over[u],
                                bound[u]
                            );
                        }
                    }
                }
                Poll::Blocked(_) | Poll::Idle => return Ok(()),
            }
        }
    }

    fn check_tiers(&self, g: &Governor, t: usize, r: usize) -> Result<(), TestCaseError> {
        let limit = g.concurrency().limit();
        let in_flight = g.concurrency().in_flight();
        prop_assert!(
            in_flight <= limit,
            "{} in flight over a limit of {}",
            in_flight,
            limit
        );
        prop_assert!(in_flight <= self.max);
        prop_assert_eq!(in_flight as usize, self.held.len());
        if let Some(max) = self.tenant_max {
            prop_assert!(self.held_by_tenant(t) <= max, "tenant over tenant_max");
        }
        if let Some(max) = self.run_max {
            prop_assert!(self.held_by_run(r) <= max, "run over run_max");
        }
        prop_assert_eq!(g.tenant_held(&tenant(t)), self.held_by_tenant(t));
        Ok(())
    }
}

proptest! {
    /// Through random asks, finishes (successes, overloads, ignored) and
    /// time: no grant ever takes more than the limit in force, the ceiling,
    /// the tenant's or the run's cap — borrowing included; a tenant that
    /// waits below its share is passed over a bounded number of times; and
    /// once everything in flight finishes, every waiter is served.
    #[test]
    fn governor_never_exceeds_its_tiers_and_no_tenant_starves(
        ws in weights(),
        max in 2u32..=12,
        caps in (prop::option::of(1u32..=11), prop::option::of(1u32..=11)),
        adaptive in any::<bool>(),
        ops in prop::collection::vec(gov_op(), 1..250),
    ) {
        let tenants = ws.len();
        let mut config = GovernorConfig::default();
        config.concurrency.max = max;
        config.concurrency.initial = Some(max);
        config.concurrency.min = if adaptive { 1 } else { max };
        config.concurrency.warmup_samples = 1;
        for (i, &w) in ws.iter().enumerate() {
            config.quotas.weights.insert(tenant(i), w);
        }
        // Caps below their tier above (a cap that never binds is refused).
        let tenant_max = caps.0.filter(|&c| c < max);
        let run_max = caps.1.filter(|&c| c < tenant_max.unwrap_or(max));
        config.quotas.tenant_max = tenant_max;
        config.quotas.run_max = run_max;
        let mut g = Governor::new(config).unwrap();
        // Per tenant: (rounds its own turn needs + 1) × what the others get
        // per round, in items (unit costs).
        let bound: Vec<u32> = (0..tenants)
            .map(|t| {
                let own_rounds = (1.0 / ws[t]).ceil() as u32 + 1;
                let others: f64 = (0..tenants).filter(|&u| u != t).map(|u| ws[u] + 1.0).sum();
                own_rounds * others.ceil() as u32
            })
            .collect();
        let mut books = Books {
            tenants,
            held: Vec::new(),
            waiting: HashMap::new(),
            passed_over: vec![0; tenants],
            max,
            tenant_max,
            run_max,
        };
        let mut now = Instant::ORIGIN;
        let mut asked = 0usize;
        for op in ops {
            match op {
                GovOp::Ask(t, r, n) => {
                    let t = t % tenants;
                    // Runs belong to one tenant.
                    let r = t * 10 + r;
                    for _ in 0..n {
                        asked += 1;
                        let (tid, rid) = (tenant(t), run(r));
                        match g.admit(Request::new(&tid, &rid), now) {
                            Admit::Granted(permit) => {
                                prop_assert!(books.waiting.is_empty(), "granted past waiters");
                                books.held.push((permit, t, r));
                                books.check_tiers(&g, t, r)?;
                            }
                            Admit::Queued { ticket, .. } => {
                                books.waiting.insert(ticket, (t, r));
                            }
                            Admit::Rejected(rejection) => {
                                prop_assert!(false, "rejected {:?}", rejection);
                            }
                        }
                    }
                    books.pump(&mut g, now, &bound)?;
                }
                GovOp::Finish(i, c) if !books.held.is_empty() => {
                    let (permit, _, _) = books.held.swap_remove(i % books.held.len());
                    let completion = match c {
                        0 => Completion::Overloaded,
                        1 => Completion::Ignored,
                        _ => Completion::SUCCEEDED,
                    };
                    now = now + Duration::from_millis(5);
                    let _ = g.release(permit, completion, None, now);
                    books.pump(&mut g, now, &bound)?;
                }
                GovOp::Finish(..) => {}
                GovOp::Advance(ms) => now = now + Duration::from_millis(ms),
            }
        }
        // Liveness: finishing everything in flight, round after round,
        // serves every waiter.
        for _ in 0..=asked {
            if books.waiting.is_empty() {
                break;
            }
            now = now + Duration::from_millis(5);
            for (permit, _, _) in std::mem::take(&mut books.held) {
                let _ = g.release(permit, Completion::Ignored, None, now);
            }
            books.pump(&mut g, now, &bound)?;
        }
        prop_assert!(books.waiting.is_empty(), "{} waiters never served", books.waiting.len());
        prop_assert_eq!(g.queued(), 0);
    }
}

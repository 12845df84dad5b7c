//! The decision path of a successful guarded call allocates nothing: the
//! budget check, the idempotency key, breaker admission and success, the
//! retry budget's deposit and the budget's charge, counted by an
//! instrumented global allocator over 10,000 calls of distinct arguments.
//! The loop guard's observation allocates only when its record of the
//! run's actions grows (a map that doubles: a few times per run, never per
//! call), and that is counted and bounded too.
//!
//! A binary of its own without libtest's harness (`harness = false` in
//! Cargo.toml), as `governor_alloc.rs` is: the allocator counts every
//! thread, so nothing but the measurement may run in this process.
#![allow(clippy::unwrap_used)]

use std::alloc::System;
use std::hint::black_box;
use std::time::Duration;

use rein_core::breaker::{Admit, ArmKind, Breakers, BreakersConfig};
use rein_core::deadline::{Budget, BudgetLimits, Need, Usage};
use rein_core::idempotency::{IdempotencyKey, Normalizer};
use rein_core::loop_guard::{Action, LoopGuard, LoopGuardConfig, StateDigest, Verdict};
use rein_core::retry::{RetryBudget, RetryPolicy};
use rein_core::{Instant, IntentId, TenantId, ToolClass};
use serde_json::{Value, json};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Calls measured, each with arguments and a state of its own.
const CALLS: u32 = 10_000;

/// The most allocations the loop guard may make over [`CALLS`] new
/// actions: its map doubles from empty to at least `CALLS` entries
/// (log2(10,000) ≈ 14 growths), and never allocates otherwise.
const GUARD_GROWTHS: usize = 16;

fn main() {
    the_success_path_allocates_nothing_but_the_guards_growth();
    println!("guarded_call_alloc: the success path of a guarded call allocates nothing: ok");
}

fn the_success_path_allocates_nothing_but_the_guards_growth() {
    // The counter counts: an allocation in a region is seen.
    let region = Region::new(GLOBAL);
    black_box(Vec::<u8>::with_capacity(16));
    assert!(
        region.change().allocations >= 1,
        "the allocator is instrumented"
    );

    let start = Instant::from_origin(Duration::from_secs(1));
    let tenant = TenantId::new("acme").unwrap();
    let intent = IntentId::new("01JH5Z3V9Q-intent-7").unwrap();
    let normalizer = Normalizer::default();
    let limits = BudgetLimits::new(Duration::from_secs(3_600))
        .unwrap()
        .with_steps(CALLS + 1)
        .unwrap();
    let mut budget = Budget::start(limits, start);
    let mut breakers = Breakers::new(BreakersConfig::default()).unwrap();
    let mut guard = LoopGuard::new(LoopGuardConfig::default()).unwrap();
    let mut retry_budget = RetryBudget::new(&RetryPolicy::default());
    let need = Need {
        time: Duration::from_millis(800),
        ..Need::default()
    };
    // Built before the measurement: what the model sends and what the
    // run's state is are inputs, not the decision's work.
    let calls: Vec<(Value, StateDigest)> = (0..CALLS)
        .map(|i| {
            let args = json!({"order_id": format!("A-{i}"), "amount": 25.0, "reason": "damaged"});
            let state = StateDigest::of([format!("order A-{i} found")], ["refund"], []);
            (args, state)
        })
        .collect();
    // The first admission of a target creates its breaker arm.
    let Admit::Accepted(permit) = breakers.admit(ArmKind::Tool, "refund_order", start).admit else {
        panic!("a fresh arm admits");
    };
    let _ = breakers.on_success(ArmKind::Tool, "refund_order", permit, start);

    let (mut decision, mut observed) = (0, 0);
    for (i, (args, state)) in calls.iter().enumerate() {
        let now = start + Duration::from_millis(i as u64);
        let region = Region::new(GLOBAL);
        budget.check(black_box(&need), now).unwrap();
        let key = IdempotencyKey::derive(
            ToolClass::IdempotentWrite,
            &tenant,
            &intent,
            "refund_order",
            black_box(args),
            &normalizer,
        );
        let Admit::Accepted(permit) = breakers.admit(ArmKind::Tool, "refund_order", now).admit
        else {
            panic!("a closed arm admits");
        };
        retry_budget.deposit();
        // ... the call happens here ...
        let transition = breakers.on_success(ArmKind::Tool, "refund_order", permit, now);
        budget.charge(Usage::ONE_STEP, now).unwrap();
        let change = region.change();
        decision += change.allocations + change.reallocations;
        let _ = black_box((key, transition));

        let region = Region::new(GLOBAL);
        let verdict = guard.observe(Action::new("refund_order", args), *state);
        let change = region.change();
        observed += change.allocations + change.reallocations;
        assert!(matches!(verdict, Verdict::Continue), "{verdict:?}");
    }
    println!(
        "guarded_call_alloc: {CALLS} calls: {decision} allocations in the decision, \
         {observed} in the loop guard's growth"
    );
    assert_eq!(decision, 0, "the decision path allocated");
    assert!(
        observed <= GUARD_GROWTHS,
        "the loop guard allocated {observed} times for {CALLS} new actions"
    );
}

//! The governor's success path allocates nothing: admit and release of a
//! call for a tenant and run the group has seen, counted by an instrumented
//! global allocator.
//!
//! A binary of its own without libtest's harness (`harness = false` in
//! Cargo.toml): the allocator counts every thread, and the harness's own
//! thread allocates now and then while a test runs (seen under load), so
//! nothing but the measurement may run in this process.
#![allow(clippy::unwrap_used)]

use std::alloc::System;
use std::hint::black_box;
use std::time::Duration;

use rein_core::governor::{Admit, Class, Completion, Governor, GovernorConfig, Request};
use rein_core::{Instant, RunId, TenantId};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// A group with every tier on: request and token buckets, tenant weights,
/// tenant and run caps.
fn config() -> GovernorConfig {
    let mut config = GovernorConfig::default();
    config.rate_per_sec = Some(1_000_000.0);
    config.burst = Some(1_000);
    config.tokens_per_minute = Some(60_000_000_000);
    config.quotas.tenant_max = Some(32);
    config.quotas.run_max = Some(16);
    config
        .quotas
        .weights
        .insert(TenantId::new("acme").unwrap(), 2.0);
    config
}

/// `rounds` admit → release cycles at 1 ms intervals; panics unless every
/// admit is granted.
fn cycle(g: &mut Governor, tenant: &TenantId, run: &RunId, from: u64, rounds: u64) {
    for i in from..from + rounds {
        let now = Instant::from_origin(Duration::from_millis(i));
        let request = Request::new(tenant, run).class(Class::Batch).tokens(500);
        let Admit::Granted(permit) = g.admit(black_box(request), now) else {
            panic!("the success path grants");
        };
        let released = g.release(
            permit,
            Completion::generated(120),
            Some(480),
            now + Duration::from_micros(300),
        );
        let _ = black_box(released);
    }
}

fn main() {
    admit_and_release_on_the_success_path_allocate_nothing();
    println!("governor_alloc: admit and release on the success path allocate nothing: ok");
}

fn admit_and_release_on_the_success_path_allocate_nothing() {
    // The counter counts: an allocation in a region is seen.
    let region = Region::new(GLOBAL);
    black_box(Vec::<u8>::with_capacity(16));
    assert!(
        region.change().allocations >= 1,
        "the allocator is instrumented"
    );

    let mut g = Governor::new(config()).unwrap();
    let (tenant, run) = (TenantId::new("acme").unwrap(), RunId::new("run-1").unwrap());
    // The first admission of a tenant and a run stores their ids.
    cycle(&mut g, &tenant, &run, 0, 1);

    let region = Region::new(GLOBAL);
    cycle(&mut g, &tenant, &run, 1, 10_000);
    let change = region.change();
    assert_eq!(
        (change.allocations, change.reallocations),
        (0, 0),
        "the success path allocated: {change:?}"
    );

    // A group with every default (no buckets, no caps) too.
    let mut plain = Governor::new(GovernorConfig::default()).unwrap();
    cycle(&mut plain, &tenant, &run, 0, 1);
    let region = Region::new(GLOBAL);
    cycle(&mut plain, &tenant, &run, 1, 10_000);
    let change = region.change();
    assert_eq!(
        (change.allocations, change.reallocations),
        (0, 0),
        "{change:?}"
    );
}

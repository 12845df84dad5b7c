//! The governor's admit decision on the success path (a slot free, the
//! tenant and run under their quotas, the buckets holding enough), which
//! rein adds in front of every call of a governed resource group: target ≤
//! 100 ns median, no allocation.
//!
//! Before measuring, the bench counts allocations over 10 000 admit →
//! release cycles with an instrumented global allocator and refuses to run
//! if there is one. The breaker's admit-and-success, measured in the same
//! run, is the reference for the ratio.
//!
//! Run: `cargo bench -p rein-core --bench governor`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::alloc::System;
use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rein_core::breaker::{Admit as BreakerAdmit, ArmKind, Breakers, BreakersConfig};
use rein_core::governor::{Admit, Completion, Governor, GovernorConfig, Permit, Request};
use rein_core::{Instant, RunId, TenantId};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

#[global_allocator]
static GLOBAL: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

/// Slots taken per timed batch, below every cap of the group.
const BATCH: usize = 32;

/// A tool group as the example config writes it, with quotas on.
fn tool_group() -> Governor {
    let mut config = GovernorConfig::default();
    config.rate_per_sec = Some(1_000_000.0);
    config.burst = Some(1_000);
    config.concurrency.initial = Some(64);
    config.concurrency.min = 64;
    config.quotas.tenant_max = Some(63);
    config.quotas.run_max = Some(62);
    config
        .quotas
        .weights
        .insert(TenantId::new("acme").unwrap(), 2.0);
    Governor::new(config).unwrap()
}

/// A model group: a token bucket as well, settled on release.
fn model_group() -> Governor {
    let mut config = GovernorConfig::default();
    config.rate_per_sec = Some(1_000_000.0);
    config.burst = Some(1_000);
    config.tokens_per_minute = Some(60_000_000_000);
    config.concurrency.initial = Some(64);
    config.concurrency.min = 64;
    Governor::new(config).unwrap()
}

fn at(micros: u64) -> Instant {
    Instant::from_origin(Duration::from_micros(micros))
}

fn grant(g: &mut Governor, request: Request<'_>, now: Instant) -> Permit {
    match g.admit(request, now) {
        Admit::Granted(permit) => permit,
        other => panic!("the success path grants, got {other:?}"),
    }
}

/// Refuses to benchmark a success path that allocates.
fn assert_no_allocation(tenant: &TenantId, run: &RunId) {
    for mut g in [tool_group(), model_group()] {
        let warm = grant(&mut g, Request::new(tenant, run).tokens(500), at(0));
        let _ = g.release(warm, Completion::SUCCEEDED, Some(400), at(1));
        let region = Region::new(GLOBAL);
        for i in 1..=10_000u64 {
            let permit = grant(&mut g, Request::new(tenant, run).tokens(500), at(i * 10));
            let released = g.release(permit, Completion::SUCCEEDED, Some(400), at(i * 10 + 5));
            let _ = black_box(released);
        }
        let change = region.change();
        assert_eq!(
            (change.allocations, change.reallocations),
            (0, 0),
            "the governor's success path allocated: {change:?}"
        );
    }
    eprintln!("governor success path: 0 allocations in 10000 admit/release cycles");
}

fn bench(c: &mut Criterion) {
    let tenant = TenantId::new("acme").unwrap();
    let run = RunId::new("01JH5Z3V9Q-run-7").unwrap();
    assert_no_allocation(&tenant, &run);

    let mut group = c.benchmark_group("governor");

    // admit alone: BATCH admits timed together, their releases untimed.
    for (name, make) in [
        ("admit_granted_tool_group", tool_group as fn() -> Governor),
        ("admit_granted_model_group", model_group),
    ] {
        group.bench_function(name, |b| {
            let mut g = make();
            let mut permits: Vec<Permit> = Vec::with_capacity(BATCH);
            let mut now = 0u64;
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    let n = left.min(BATCH as u64);
                    now += 1_000;
                    let start = std::time::Instant::now();
                    for _ in 0..n {
                        let request = Request::new(&tenant, &run).tokens(500);
                        permits.push(grant(&mut g, black_box(request), at(now)));
                    }
                    total += start.elapsed();
                    for permit in permits.drain(..) {
                        let _ = g.release(permit, Completion::SUCCEEDED, Some(400), at(now + 1));
                    }
                    left -= n;
                }
                total
            })
        });
    }

    // The whole cycle a call costs: admit, then release with its outcome.
    group.bench_function("admit_and_release", |b| {
        let mut g = tool_group();
        let mut now = 0u64;
        b.iter(|| {
            now += 10;
            let permit = grant(&mut g, black_box(Request::new(&tenant, &run)), at(now));
            g.release(permit, Completion::SUCCEEDED, None, at(now + 5))
        })
    });

    // Reference in the same run: a breaker arm's admit and success.
    group.bench_function("reference_breaker_admit_and_success", |b| {
        let mut breakers = Breakers::new(BreakersConfig::default()).unwrap();
        let now = at(0);
        b.iter(|| {
            let BreakerAdmit::Accepted(permit) = breakers
                .admit(ArmKind::ResourceGroup, "order_api", now)
                .admit
            else {
                panic!("closed arm admits");
            };
            breakers.on_success(ArmKind::ResourceGroup, "order_api", permit, now)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The decision path of one guarded call, without I/O: budget check,
//! idempotency key, breaker admission and outcome, retry decision, ledger-free
//! loop-guard observation. This is what rein adds in front of every tool
//! call, so it must stay far below any network round trip.
//!
//! Run: `cargo bench -p rein-core --bench guarded_call`.
#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use rand::SeedableRng;
use rand::rngs::StdRng;
use rein_core::breaker::{Admit, ArmKind, Breakers, BreakersConfig};
use rein_core::deadline::{Budget, BudgetLimits, Need, Usage};
use rein_core::idempotency::{IdempotencyKey, Normalizer};
use rein_core::loop_guard::{Action, LoopGuard, LoopGuardConfig, StateDigest};
use rein_core::retry::{RetryBudget, RetryInput, RetryPolicy};
use rein_core::{Category, Failure, Instant, IntentId, LatencyProfile, TenantId, ToolClass};
use serde_json::json;

struct Fixture {
    budget: Budget,
    breakers: Breakers,
    guard: LoopGuard,
    retry_budget: RetryBudget,
}

fn fixture(now: Instant) -> Fixture {
    let limits = BudgetLimits::new(Duration::from_secs(300))
        .unwrap()
        .with_steps(40)
        .unwrap()
        .with_tokens(200_000)
        .unwrap();
    let mut breakers = Breakers::new(BreakersConfig::default()).unwrap();
    // Create the arm outside the measurement: only the first admit allocates.
    let Admit::Accepted(permit) = breakers.admit(ArmKind::Tool, "refund_order", now).admit else {
        panic!("fresh arm admits");
    };
    let _ = breakers.on_success(ArmKind::Tool, "refund_order", permit, now);
    Fixture {
        budget: Budget::start(limits, now),
        breakers,
        guard: LoopGuard::new(LoopGuardConfig::default()).unwrap(),
        retry_budget: RetryBudget::new(&RetryPolicy::default()),
    }
}

fn bench(c: &mut Criterion) {
    let now = Instant::from_origin(Duration::from_secs(1));
    let tenant = TenantId::new("acme").unwrap();
    let intent = IntentId::new("01JH5Z3V9Q-intent-7").unwrap();
    let normalizer = Normalizer::default();
    let args =
        json!({"order_id": "A-1001", "amount": 25.0, "reason": "damaged", "trace_id": "t-1"});
    let latency = LatencyProfile::new(
        Duration::from_millis(80),
        Duration::from_millis(200),
        Duration::from_millis(400),
        1_000,
    )
    .unwrap();
    let policy = RetryPolicy::default();
    let state = StateDigest::of(
        ["order A-1001 found"],
        ["refund A-1001"],
        [Action::new("get_order", &args)],
    );
    let need = Need {
        time: latency.p99() * 2,
        tokens: 0,
        ..Need::default()
    };

    let mut group = c.benchmark_group("guarded_call");

    // The success path: everything rein decides around one successful call.
    group.bench_function("decision_path_success", |b| {
        b.iter_batched_ref(
            || fixture(now),
            |f| {
                f.budget.check(black_box(&need), now).unwrap();
                let key = IdempotencyKey::derive(
                    ToolClass::IdempotentWrite,
                    &tenant,
                    &intent,
                    "refund_order",
                    black_box(&args),
                    &normalizer,
                );
                let admission = f.breakers.admit(ArmKind::Tool, "refund_order", now);
                let Admit::Accepted(permit) = admission.admit else {
                    panic!("closed arm admits");
                };
                f.retry_budget.deposit();
                // ... the call happens here ...
                let t = f
                    .breakers
                    .on_success(ArmKind::Tool, "refund_order", permit, now);
                let charged = f.budget.charge(Usage::ONE_STEP, now);
                let verdict = f.guard.observe(Action::new("refund_order", &args), state);
                let _ = black_box((key, t, charged, verdict));
            },
            BatchSize::SmallInput,
        );
    });

    // The failure path: a transient failure, classified, counted by the
    // breaker, and turned into a retry decision.
    group.bench_function("decision_path_transient_failure", |b| {
        let mut rng = StdRng::seed_from_u64(1);
        b.iter_batched_ref(
            || fixture(now),
            |f| {
                f.budget.check(black_box(&need), now).unwrap();
                let admission = f.breakers.admit(ArmKind::Tool, "refund_order", now);
                let Admit::Accepted(permit) = admission.admit else {
                    panic!("closed arm admits");
                };
                f.retry_budget.deposit();
                let failure = Failure::new("refund_order", Category::Transient);
                let t = f.breakers.on_failure(
                    ArmKind::Tool,
                    "refund_order",
                    permit,
                    failure.category(),
                    now,
                );
                let input = RetryInput {
                    class: ToolClass::IdempotentWrite,
                    failure: &failure,
                    attempt: 1,
                    deadline: f.budget.deadline(),
                    latency,
                    now,
                    worth: None,
                };
                let decision = policy.decide(&input, &mut f.retry_budget, &mut rng);
                let _ = black_box((t, decision));
            },
            BatchSize::SmallInput,
        );
    });

    // The components on their own, for attribution.
    group.bench_function("idempotency_key", |b| {
        b.iter(|| {
            IdempotencyKey::derive(
                ToolClass::IdempotentWrite,
                &tenant,
                &intent,
                "refund_order",
                black_box(&args),
                &normalizer,
            )
        })
    });
    group.bench_function("budget_check", |b| {
        let f = fixture(now);
        b.iter(|| f.budget.check(black_box(&need), now))
    });
    group.bench_function("breaker_admit_and_success", |b| {
        let mut f = fixture(now);
        b.iter(|| {
            let Admit::Accepted(permit) =
                f.breakers.admit(ArmKind::Tool, "refund_order", now).admit
            else {
                panic!("closed arm admits");
            };
            f.breakers
                .on_success(ArmKind::Tool, "refund_order", permit, now)
        })
    });
    group.bench_function("retry_decide", |b| {
        let mut f = fixture(now);
        let mut rng = StdRng::seed_from_u64(1);
        let failure = Failure::new("refund_order", Category::Transient);
        b.iter(|| {
            f.retry_budget.deposit();
            let input = RetryInput {
                class: ToolClass::IdempotentWrite,
                failure: &failure,
                attempt: 1,
                deadline: f.budget.deadline(),
                latency,
                now,
                worth: None,
            };
            policy.decide(black_box(&input), &mut f.retry_budget, &mut rng)
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

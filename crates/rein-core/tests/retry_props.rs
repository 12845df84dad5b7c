//! Property tests of the retry decision (public API only).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rein_core::deadline::Deadline;
use rein_core::retry::{RetryBudget, RetryConfig, RetryDecision, RetryInput, RetryPolicy};
use rein_core::{Category, Effect, Failure, Instant, LatencyProfile, ToolClass};

fn class() -> impl Strategy<Value = ToolClass> {
    prop_oneof![
        Just(ToolClass::Read),
        Just(ToolClass::IdempotentWrite),
        Just(ToolClass::Irreversible)
    ]
}

fn failure() -> impl Strategy<Value = Failure> {
    (
        prop::sample::select(Category::ALL.to_vec()),
        prop_oneof![
            Just(Effect::NotApplied),
            Just(Effect::MaybeApplied),
            Just(Effect::Applied)
        ],
        prop::option::of(0u64..120_000),
    )
        .prop_map(|(category, effect, retry_after)| {
            let f = Failure::new("tool", category).with_effect(effect);
            match retry_after {
                Some(ms) => f.with_retry_after(Duration::from_millis(ms)),
                None => f,
            }
        })
}

fn policy() -> impl Strategy<Value = RetryPolicy> {
    (1u32..8, 1u64..2_000, 0u64..30_000).prop_map(|(attempts, base, extra)| {
        let mut config = RetryConfig::default();
        config.max_attempts = attempts;
        config.base_delay = Duration::from_millis(base);
        config.max_delay = Duration::from_millis(base + extra);
        RetryPolicy::try_from(config).unwrap()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    /// No retry decision ever schedules past the deadline: after the delay,
    /// at least one median attempt still fits.
    #[test]
    fn no_retry_is_ever_scheduled_past_the_deadline(
        policy in policy(),
        class in class(),
        failure in failure(),
        attempt in 1u32..10,
        remaining_ms in 0u64..60_000,
        p50_ms in 1u64..5_000,
        seed in any::<u64>(),
    ) {
        let now = Instant::from_origin(Duration::from_secs(100));
        let deadline = Deadline::after(now, Duration::from_millis(remaining_ms));
        let p50 = Duration::from_millis(p50_ms);
        let latency = LatencyProfile::new(p50, p50 * 2, p50 * 3, 100).unwrap();
        let input = RetryInput { class, failure: &failure, attempt, deadline, latency, now, worth: None };
        let mut budget = RetryBudget::new(&policy);
        let decision = policy.decide(&input, &mut budget, &mut StdRng::seed_from_u64(seed));
        match decision {
            RetryDecision::Retry { delay, backoff_ceiling, from_server, .. } => {
                prop_assert!(now + delay + p50 <= deadline.instant());
                prop_assert!(failure.retryable());
                prop_assert!(class != ToolClass::Irreversible);
                prop_assert!(attempt < policy.max_attempts());
                if from_server {
                    prop_assert_eq!(Some(delay), failure.retry_after());
                } else {
                    // Backoff delays lie in [0, cap].
                    prop_assert!(delay <= backoff_ceiling);
                    prop_assert!(backoff_ceiling <= policy.backoff_ceiling(u32::MAX));
                }
            }
            RetryDecision::LookupByKey => {
                prop_assert_eq!(class, ToolClass::IdempotentWrite);
                prop_assert!(failure.effect() != Effect::NotApplied);
            }
            RetryDecision::GiveUp { .. } => {}
        }
    }

    /// Irreversible tools never get `Retry`, whatever the failure.
    #[test]
    fn irreversible_tools_never_get_retry(
        failure in failure(),
        attempt in 1u32..4,
        seed in any::<u64>(),
    ) {
        let now = Instant::ORIGIN;
        let latency = LatencyProfile::new(Duration::from_millis(1), Duration::from_millis(1), Duration::from_millis(1), 0).unwrap();
        let input = RetryInput {
            class: ToolClass::Irreversible,
            failure: &failure,
            attempt,
            deadline: Deadline::after(now, Duration::from_secs(3_600)),
            latency,
            now,
            worth: None,
        };
        let policy = RetryPolicy::default();
        let mut budget = RetryBudget::new(&policy);
        let d = policy.decide(&input, &mut budget, &mut StdRng::seed_from_u64(seed));
        prop_assert!(matches!(d, RetryDecision::GiveUp { .. }), "{:?}", d);
    }

    /// Retries never exceed the initial allowance plus the ratio of requests.
    #[test]
    fn retry_budget_caps_retries_at_a_share_of_requests(
        ratio in 0.0f64..=1.0,
        initial in 0u32..20,
        ops in prop::collection::vec(any::<bool>(), 0..2_000),
    ) {
        let mut config = RetryConfig::default();
        config.budget_ratio = ratio;
        config.budget_initial = initial;
        config.budget_max = 20;
        let policy = RetryPolicy::try_from(config).unwrap();
        let mut budget = RetryBudget::new(&policy);
        let (mut requests, mut retries) = (0u64, 0u64);
        for is_request in ops {
            if is_request {
                budget.deposit();
                requests += 1;
            } else if budget.withdraw() {
                retries += 1;
            }
        }
        prop_assert!(retries as f64 <= f64::from(initial) + ratio * requests as f64 + 1e-9);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// With a value of success, every retry made is worth its cost by the
    /// numbers it carries, and a retry given up as not worth it spent none
    /// of the target's retry budget.
    #[test]
    fn a_retry_made_with_a_value_is_always_worth_its_cost(
        value in 1u64..10_000_000,
        successes in 0u32..50,
        failures in 0u32..50,
        money in 0u64..2_000_000,
        remaining_ms in 1u64..60_000,
        seed in any::<u64>(),
    ) {
        use rein_core::deadline::Cost;
        use rein_core::retry::{GiveUpReason, SuccessRate, WorthInput};
        let now = Instant::ORIGIN;
        let p50 = Duration::from_millis(10);
        let latency = LatencyProfile::new(p50, p50, p50, 100).unwrap();
        let failure = Failure::new("tool", Category::Transient);
        let input = RetryInput {
            class: ToolClass::Read,
            failure: &failure,
            attempt: 1,
            deadline: Deadline::after(now, Duration::from_millis(remaining_ms)),
            latency,
            now,
            worth: Some(WorthInput {
                value: Cost::from_micros(value),
                rate: SuccessRate { successes, tries: successes + failures },
                money: Cost::from_micros(money),
            }),
        };
        let policy = RetryPolicy::default();
        let mut budget = RetryBudget::new(&policy);
        let mut fresh = RetryBudget::new(&policy);
        match policy.decide(&input, &mut budget, &mut StdRng::seed_from_u64(seed)) {
            RetryDecision::Retry { worth, .. } => {
                let worth = worth.unwrap();
                prop_assert!(worth.expected_value_micros >= worth.expected_cost_micros);
            }
            RetryDecision::GiveUp { reason: GiveUpReason::NotWorthItsCost { worth } } => {
                prop_assert!(worth.expected_value_micros < worth.expected_cost_micros);
                prop_assert!(fresh.withdraw() == budget.withdraw(), "no budget was spent");
            }
            _ => {}
        }
    }
}

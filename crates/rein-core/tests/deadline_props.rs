//! Property tests of the deadline and the triple budget (public API only).
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use proptest::prelude::*;
use rein_core::deadline::{Budget, BudgetLimits, ChildCaps, Cost, Deadline, Usage};
use rein_core::{Instant, Ratio, Weight};

fn weights() -> impl Strategy<Value = Vec<Weight>> {
    prop::collection::vec(0.001f64..1_000.0, 1..12).prop_map(|ws| {
        ws.into_iter()
            .map(|w| Weight::new("w", w).unwrap())
            .collect()
    })
}

fn limits() -> impl Strategy<Value = BudgetLimits> {
    (
        1u64..10_000_000,
        prop::option::of(1u32..10_000),
        prop::option::of(1u64..u64::MAX / 2),
        prop::option::of(1u64..u64::MAX / 2),
    )
        .prop_map(|(ms, steps, tokens, cost)| {
            let mut l = BudgetLimits::new(Duration::from_millis(ms)).unwrap();
            if let Some(s) = steps {
                l = l.with_steps(s).unwrap();
            }
            if let Some(t) = tokens {
                l = l.with_tokens(t).unwrap();
            }
            if let Some(c) = cost {
                l = l.with_cost(Cost::from_micros(c)).unwrap();
            }
            l
        })
}

proptest! {
    /// Parallel children never sum above the parent's remainder, in any
    /// dimension, with or without caps.
    #[test]
    fn parallel_children_never_sum_above_the_parents_remainder(
        limits in limits(),
        weights in weights(),
        elapsed_ms in 0u64..20_000_000,
        used_tokens in 0u64..1_000_000,
        cap_ms in prop::option::of(1u64..5_000_000),
    ) {
        let start = Instant::ORIGIN;
        let mut parent = Budget::start(limits, start);
        let now = start + Duration::from_millis(elapsed_ms);
        let _ = parent.charge(Usage { tokens: used_tokens, ..Usage::default() }, now);
        let before = parent.remaining(now);
        let caps = ChildCaps { wall_clock: cap_ms.map(Duration::from_millis), ..ChildCaps::default() };
        let kids = parent.parallel(now, &weights, caps);
        prop_assert_eq!(kids.len(), weights.len());

        let time: u128 = kids.iter().map(|(k, _)| k.remaining(now).time.as_nanos()).sum();
        prop_assert!(time <= before.time.as_nanos());
        for (kid, _) in &kids {
            prop_assert!(kid.deadline() <= parent.deadline());
        }
        if let Some(left) = before.tokens {
            let sum: u128 = kids.iter().map(|(k, _)| u128::from(k.remaining(now).tokens.unwrap())).sum();
            prop_assert!(sum <= u128::from(left));
            prop_assert_eq!(parent.remaining(now).tokens, Some(left - sum as u64));
        }
        if let Some(left) = before.cost {
            let sum: u128 = kids.iter().map(|(k, _)| u128::from(k.remaining(now).cost.unwrap().micros())).sum();
            prop_assert!(sum <= u128::from(left.micros()));
        }
        if let Some(left) = before.steps {
            let sum: u64 = kids.iter().map(|(k, _)| u64::from(k.remaining(now).steps.unwrap())).sum();
            prop_assert!(sum <= u64::from(left));
        }
    }

    /// A deadline only shrinks as it is handed down, and remaining time only
    /// shrinks as the clock moves.
    #[test]
    fn a_deadline_only_shrinks(
        total_ms in 0u64..10_000_000,
        t1 in 0u64..20_000_000,
        dt in 0u64..20_000_000,
        ratio in 0.0f64..=1.0,
        cap_ms in prop::option::of(0u64..20_000_000),
    ) {
        let d = Deadline::after(Instant::ORIGIN, Duration::from_millis(total_ms));
        let now = Instant::ORIGIN + Duration::from_millis(t1);
        let later = now + Duration::from_millis(dt);
        prop_assert!(d.remaining(later) <= d.remaining(now));
        let nested = d.nested(now, Ratio::new("r", ratio).unwrap(), cap_ms.map(Duration::from_millis));
        prop_assert!(nested <= d);
        prop_assert!(d.serial() == d);
        prop_assert!(d.capped(now, Duration::from_millis(cap_ms.unwrap_or(0))) <= d);
    }

    /// A budget never goes negative and never resets: whatever is charged,
    /// `used` only grows and `remaining` only shrinks.
    #[test]
    fn a_budget_never_goes_negative_or_resets(
        limits in limits(),
        charges in prop::collection::vec((0u32..5, 0u64..1_000_000, 0u64..1_000_000, 0u64..1_000), 1..40),
    ) {
        let mut b = Budget::start(limits, Instant::ORIGIN);
        let mut now = Instant::ORIGIN;
        let mut previous = b.remaining(now);
        let mut used = b.used();
        for (steps, tokens, cost, dt) in charges {
            now = now + Duration::from_millis(dt);
            let _ = b.charge(Usage { steps, tokens, cost: Cost::from_micros(cost) }, now);
            let left = b.remaining(now);
            prop_assert!(left.time <= previous.time);
            prop_assert!(left.tokens <= previous.tokens);
            prop_assert!(left.steps <= previous.steps);
            prop_assert!(left.cost <= previous.cost);
            prop_assert!(b.used().tokens >= used.tokens && b.used().steps >= used.steps);
            previous = left;
            used = b.used();
        }
    }

    /// The header round-trips any remainder to the millisecond, rounding down.
    #[test]
    fn header_round_trip_never_grants_more_time(remaining_us in 0u64..10_000_000_000) {
        let d = Deadline::after(Instant::ORIGIN, Duration::from_micros(remaining_us));
        let value = d.to_header(Instant::ORIGIN);
        let adopted = Deadline::from_header(Some(&value), Instant::ORIGIN).unwrap();
        prop_assert!(adopted.remaining(Instant::ORIGIN) <= d.remaining(Instant::ORIGIN));
        prop_assert!(d.remaining(Instant::ORIGIN) - adopted.remaining(Instant::ORIGIN) < Duration::from_millis(1));
    }

    /// Malformed headers never panic.
    #[test]
    fn header_parsing_never_panics(value in ".*") {
        let _ = Deadline::from_header(Some(&value), Instant::ORIGIN);
    }
}

//! Property tests of the breaker's invariants, through the public API only.

use std::time::Duration;

use proptest::prelude::*;
use rein_core::Instant;
use rein_core::breaker::{
    Admit, ArmKind, Breaker, BreakerConfig, BreakerState, Breakers, BreakersConfig,
    FailureRatioConfig, Permit, Transition,
};
use rein_core::failure::Category;

/// One step of a random history.
#[derive(Debug, Clone)]
enum Op {
    /// Ask to call.
    Admit,
    /// Report the outstanding permit at this index (modulo their number).
    Succeed(usize),
    Fail(usize, Category),
    Ignore(usize),
    /// Let time pass.
    Advance(Duration),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => Just(Op::Admit),
        3 => any::<usize>().prop_map(Op::Succeed),
        4 => (any::<usize>(), prop::sample::select(Category::ALL.to_vec()))
            .prop_map(|(i, c)| Op::Fail(i, c)),
        1 => any::<usize>().prop_map(Op::Ignore),
        3 => (0u64..20_000).prop_map(|ms| Op::Advance(Duration::from_millis(ms))),
    ]
}

fn config() -> impl Strategy<Value = BreakerConfig> {
    let ratio = prop::option::of((1u32..=20, 1u32..=10, 1u64..=30, 1u32..=8).prop_map(
        |(open_at, close_below, window_s, min_throughput)| {
            let mut ratio = FailureRatioConfig::default();
            ratio.open_at = f64::from(open_at) / 20.0;
            // close_below in (0, open_at).
            ratio.close_below = ratio.open_at * f64::from(close_below) / 11.0;
            ratio.window = Duration::from_secs(window_s);
            ratio.min_throughput = min_throughput;
            ratio
        },
    ));
    (
        prop::option::of(1u32..=6),
        ratio,
        1u64..=60_000,
        1u32..=5,
        1u32..=5,
        1u64..=120,
    )
        .prop_filter_map(
            "a breaker needs a trigger",
            |(consecutive, ratio, break_ms, probes, successes, max_wait_s)| {
                if consecutive.is_none() && ratio.is_none() {
                    return None;
                }
                let mut config = BreakerConfig::default();
                config.consecutive_failures = consecutive;
                config.failure_ratio = ratio;
                config.break_duration = Duration::from_millis(break_ms);
                config.half_open_probes = probes;
                config.close_after_successes = successes.min(probes);
                config.half_open_max_wait = Duration::from_secs(max_wait_s);
                Some(config)
            },
        )
}

/// What the model of the breaker expects, checked after every step.
struct Checker {
    probes: u32,
    /// The `until` of the latest opening, while the arm is open.
    open_until: Option<Instant>,
    /// Probe slots held in the current half-open period, per our count.
    slots_held: u32,
}

impl Checker {
    fn observe(&mut self, transition: &Transition) {
        match transition {
            Transition::Opened { until, .. } => {
                self.open_until = Some(*until);
                self.slots_held = 0;
            }
            Transition::HalfOpened { probes, .. } => {
                assert_eq!(*probes, self.probes);
                self.open_until = None;
                self.slots_held = 0;
            }
            Transition::Closed { .. } => {
                self.open_until = None;
                self.slots_held = 0;
            }
            _ => {}
        }
    }
}

fn take(permits: &mut Vec<Permit>, index: usize) -> Option<Permit> {
    if permits.is_empty() {
        None
    } else {
        let len = permits.len();
        Some(permits.swap_remove(index % len))
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whenever the arm opens at `t` with `until = u`, every admission at
    /// `t' < u` is rejected with `retry_after = u - t'`; and a half-open
    /// period never holds more than `half_open_probes` probe slots.
    #[test]
    fn open_breaker_admits_nothing_before_its_break_duration(
        config in config(),
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let mut breaker = Breaker::new(config.clone()).unwrap();
        let mut checker = Checker {
            probes: config.half_open_probes,
            open_until: None,
            slots_held: 0,
        };
        let mut now = Instant::ORIGIN;
        let mut permits: Vec<Permit> = Vec::new();

        for op in ops {
            match op {
                Op::Admit => {
                    let admission = breaker.admit(now);
                    if let Some(until) = checker.open_until.filter(|until| now < *until) {
                        prop_assert_eq!(&admission.transition, &Transition::Unchanged);
                        prop_assert_eq!(
                            admission.admit.retry_after(),
                            Some(until.saturating_duration_since(now)),
                            "admitted at {} while open until {}", now, until
                        );
                    }
                    checker.observe(&admission.transition);
                    if let Admit::Accepted(permit) = admission.admit {
                        if permit.is_probe() {
                            checker.slots_held += 1;
                            prop_assert!(
                                checker.slots_held <= config.half_open_probes,
                                "{} probe slots held, limit {}",
                                checker.slots_held,
                                config.half_open_probes
                            );
                        }
                        permits.push(permit);
                    }
                }
                Op::Succeed(i) => {
                    if let Some(permit) = take(&mut permits, i) {
                        let stale = permit.epoch() != breaker.epoch();
                        let transition = breaker.on_success(permit, now);
                        if stale {
                            prop_assert_eq!(&transition, &Transition::Unchanged);
                        }
                        checker.observe(&transition);
                    }
                }
                Op::Fail(i, category) => {
                    if let Some(permit) = take(&mut permits, i) {
                        let current_probe = permit.is_probe() && permit.epoch() == breaker.epoch();
                        let stale = permit.epoch() != breaker.epoch();
                        let transition = breaker.on_failure(permit, category, now);
                        if stale || !category.counts_for_breaker() {
                            prop_assert_eq!(&transition, &Transition::Unchanged);
                        }
                        if current_probe && !category.counts_for_breaker() {
                            checker.slots_held -= 1;
                        }
                        checker.observe(&transition);
                    }
                }
                Op::Ignore(i) => {
                    if let Some(permit) = take(&mut permits, i) {
                        if permit.is_probe() && permit.epoch() == breaker.epoch() {
                            checker.slots_held -= 1;
                        }
                        let before = breaker.epoch();
                        breaker.on_ignored(permit);
                        prop_assert_eq!(breaker.epoch(), before);
                    }
                }
                Op::Advance(by) => now = now + by,
            }
            match checker.open_until {
                Some(until) => {
                    prop_assert_eq!(breaker.state(), BreakerState::Open);
                    prop_assert_eq!(breaker.open_until(), Some(until));
                }
                None => prop_assert_ne!(breaker.state(), BreakerState::Open),
            }
        }
    }

    /// Outcomes on one arm never change another arm, of the same kind or
    /// of another.
    #[test]
    fn breaker_arms_are_independent(
        ops in prop::collection::vec(op(), 1..100),
    ) {
        let mut breakers = Breakers::new(BreakersConfig::default()).unwrap();
        let now = Instant::ORIGIN;
        let _ = breakers.admit(ArmKind::Tool, "other", now);
        let _ = breakers.admit(ArmKind::Provider, "flaky", now);
        let mut now = now;
        let mut permits: Vec<Permit> = Vec::new();
        for op in ops {
            match op {
                Op::Admit => {
                    if let Admit::Accepted(permit) = breakers.admit(ArmKind::Tool, "flaky", now).admit {
                        permits.push(permit);
                    }
                }
                Op::Succeed(i) => if let Some(p) = take(&mut permits, i) {
                    let _ = breakers.on_success(ArmKind::Tool, "flaky", p, now);
                },
                Op::Fail(i, category) => if let Some(p) = take(&mut permits, i) {
                    let _ = breakers.on_failure(ArmKind::Tool, "flaky", p, category, now);
                },
                Op::Ignore(i) => if let Some(p) = take(&mut permits, i) {
                    breakers.on_ignored(ArmKind::Tool, "flaky", p);
                },
                Op::Advance(by) => now = now + by,
            }
            prop_assert_eq!(breakers.state(ArmKind::Tool, "other"), BreakerState::Closed);
            prop_assert_eq!(breakers.state(ArmKind::Provider, "flaky"), BreakerState::Closed);
            prop_assert_eq!(breakers.get(ArmKind::Tool, "other").map(Breaker::epoch), Some(0));
        }
    }
}

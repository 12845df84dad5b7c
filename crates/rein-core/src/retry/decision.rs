use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

use super::worth::{Worth, WorthInput};
use super::{RetryBudget, RetryPolicy};
use crate::clock::Instant;
use crate::deadline::Deadline;
use crate::failure::{Category, Effect, Failure};
use crate::tool::{LatencyProfile, ToolClass};

/// Everything the retry decision reads about one failed attempt.
#[derive(Debug, Clone, Copy)]
pub struct RetryInput<'a> {
    /// The tool's class, from the registry.
    pub class: ToolClass,
    /// The classified failure of the attempt.
    pub failure: &'a Failure,
    /// Attempts made so far, including the one that failed (≥ 1).
    pub attempt: u32,
    /// The run's deadline — the same one the first attempt had.
    pub deadline: Deadline,
    /// The tool's latency profile.
    pub latency: LatencyProfile,
    /// When the failure was observed.
    pub now: Instant,
    /// What a success is worth, the measured success rate of this retry
    /// and its money ([`WorthInput`]); `None`: the retry is decided
    /// without its worth (no `value_of_success_usd`).
    pub worth: Option<WorthInput>,
}

/// What to do after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum RetryDecision {
    /// Try again after `delay`, with the same deadline and the same key.
    Retry {
        /// How long to wait before the next attempt.
        #[serde(with = "humantime_serde")]
        delay: Duration,
        /// The number the next attempt will have.
        next_attempt: u32,
        /// The failure category that is being retried.
        reason: Category,
        /// Whether `delay` is the server's `Retry-After`.
        from_server: bool,
        /// The upper bound the jitter was drawn from (zero when the server
        /// set the delay).
        #[serde(with = "humantime_serde")]
        backoff_ceiling: Duration,
        /// Whether the delay was shortened to leave one median attempt
        /// before the deadline.
        clamped: bool,
        /// Its expected value and cost, when it was decided with them.
        #[serde(skip_serializing_if = "Option::is_none")]
        worth: Option<Worth>,
    },
    /// The write may have taken effect: query the previous result by its
    /// idempotency key before any re-execution.
    LookupByKey,
    /// Stop retrying; the failure goes to the caller.
    GiveUp {
        /// Why.
        reason: GiveUpReason,
    },
}

/// Why the decision gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum GiveUpReason {
    /// Irreversible tools are never retried automatically.
    Irreversible,
    /// The failure's category is not retryable.
    NotRetryable {
        /// The category.
        category: Category,
    },
    /// The attempt ceiling is reached.
    AttemptsExhausted {
        /// Attempts made.
        attempts: u32,
        /// The ceiling.
        max_attempts: u32,
    },
    /// The remainder cannot cover one more median attempt.
    DeadlineTooClose {
        /// Time left.
        #[serde(with = "humantime_serde")]
        remaining: Duration,
        /// The tool's p50.
        #[serde(with = "humantime_serde")]
        needed: Duration,
    },
    /// The server asked for a wait that, plus a median attempt, does not fit
    /// before the deadline; retrying earlier would ignore the server.
    ServerWaitBeyondDeadline {
        /// The server's wait.
        #[serde(with = "humantime_serde")]
        retry_after: Duration,
        /// Time left.
        #[serde(with = "humantime_serde")]
        remaining: Duration,
    },
    /// The target's retry budget is spent: fail fast, degrade.
    RetryBudgetExhausted,
    /// Its expected value (measured success rate × the value of success)
    /// is below its expected cost (money and time).
    NotWorthItsCost {
        /// The numbers it was decided on.
        worth: Worth,
    },
}

impl RetryPolicy {
    /// Decides what follows a failed attempt. Withdraws from `budget` only
    /// when the decision is [`RetryDecision::Retry`].
    ///
    /// Guarantees, for every input: an irreversible tool never gets `Retry`;
    /// a non-retryable category never gets `Retry`; a `Retry` always leaves
    /// `now + delay + p50 ≤ deadline`; a local delay lies in
    /// `[0, backoff_ceiling]`.
    pub fn decide<R: Rng + ?Sized>(
        &self,
        input: &RetryInput<'_>,
        budget: &mut RetryBudget,
        rng: &mut R,
    ) -> RetryDecision {
        let failure = input.failure;
        // NOTE: the order of these checks is the policy (module docs); the
        // irreversible short-circuit must stay first.
        if input.class == ToolClass::Irreversible {
            return give_up(GiveUpReason::Irreversible);
        }
        let remaining = input.deadline.remaining(input.now);
        let needed = input.latency.p50();
        if input.class == ToolClass::IdempotentWrite
            && matches!(failure.effect(), Effect::MaybeApplied | Effect::Applied)
            && failure.category().may_be_retried()
        {
            // A lookup is a read that settles the uncertainty, so it is not
            // an attempt and spends no retry budget; re-executing after a
            // lookup that found nothing is decided again with
            // `Effect::NotApplied`, where the ceiling and the budget apply.
            if remaining < needed {
                return give_up(GiveUpReason::DeadlineTooClose { remaining, needed });
            }
            return RetryDecision::LookupByKey;
        }
        if !failure.retryable() {
            return give_up(GiveUpReason::NotRetryable {
                category: failure.category(),
            });
        }
        if input.attempt >= self.max_attempts.get() {
            return give_up(GiveUpReason::AttemptsExhausted {
                attempts: input.attempt,
                max_attempts: self.max_attempts.get(),
            });
        }
        if remaining < needed {
            return give_up(GiveUpReason::DeadlineTooClose { remaining, needed });
        }
        let room = remaining - needed;
        let (delay, backoff_ceiling, from_server, clamped) = match failure.retry_after() {
            Some(wait) if wait > room => {
                return give_up(GiveUpReason::ServerWaitBeyondDeadline {
                    retry_after: wait,
                    remaining,
                });
            }
            Some(wait) => (wait, Duration::ZERO, true, false),
            None => {
                let mut ceiling = self.backoff_ceiling(input.attempt);
                if matches!(
                    failure.category(),
                    Category::RateLimited | Category::Overloaded
                ) {
                    ceiling = (ceiling * 2).min(self.max_delay);
                }
                let delay = full_jitter(ceiling, rng);
                (delay.min(room), ceiling, false, delay > room)
            }
        };
        // Worth, before the budget: a retry not made spends none of it.
        let worth = input
            .worth
            .map(|w| Worth::of(&w, delay + needed, remaining));
        if let Some(worth) = worth
            && !worth.worth_it()
        {
            return give_up(GiveUpReason::NotWorthItsCost { worth });
        }
        if !budget.withdraw() {
            return give_up(GiveUpReason::RetryBudgetExhausted);
        }
        RetryDecision::Retry {
            delay,
            next_attempt: input.attempt.saturating_add(1),
            reason: failure.category(),
            from_server,
            backoff_ceiling,
            clamped,
            worth,
        }
    }
}

fn give_up(reason: GiveUpReason) -> RetryDecision {
    RetryDecision::GiveUp { reason }
}

/// A delay drawn uniformly from `[0, ceiling]`.
///
/// Full jitter, not a small perturbation around the ceiling: perturbed
/// exponential backoff still synchronizes many clients, because every
/// client's curve has the same shape.
fn full_jitter<R: Rng + ?Sized>(ceiling: Duration, rng: &mut R) -> Duration {
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rng.random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::RetryConfig;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
    fn latency() -> LatencyProfile {
        LatencyProfile::new(ms(100), ms(300), ms(500), 1000).unwrap()
    }
    fn decide(
        class: ToolClass,
        failure: &Failure,
        attempt: u32,
        remaining: Duration,
    ) -> RetryDecision {
        let policy = RetryPolicy::default();
        let mut budget = RetryBudget::new(&policy);
        decide_with(&policy, &mut budget, class, failure, attempt, remaining)
    }
    fn decide_with(
        policy: &RetryPolicy,
        budget: &mut RetryBudget,
        class: ToolClass,
        failure: &Failure,
        attempt: u32,
        remaining: Duration,
    ) -> RetryDecision {
        let now = Instant::from_origin(ms(1_000));
        let input = RetryInput {
            class,
            failure,
            attempt,
            deadline: Deadline::after(now, remaining),
            latency: latency(),
            now,
            worth: None,
        };
        policy.decide(&input, budget, &mut StdRng::seed_from_u64(7))
    }
    fn transient() -> Failure {
        Failure::new("t", Category::Transient)
    }

    #[test]
    fn irreversible_tool_never_retries_even_when_transient() {
        assert_eq!(
            decide(ToolClass::Irreversible, &transient(), 1, ms(60_000)),
            RetryDecision::GiveUp {
                reason: GiveUpReason::Irreversible
            }
        );
    }

    #[test]
    fn non_retryable_category_gives_up() {
        let f = Failure::new("t", Category::InvalidArguments);
        assert_eq!(
            decide(ToolClass::Read, &f, 1, ms(60_000)),
            RetryDecision::GiveUp {
                reason: GiveUpReason::NotRetryable {
                    category: Category::InvalidArguments
                }
            }
        );
    }

    #[test]
    fn idempotent_write_with_unknown_effect_looks_up_by_key_first() {
        let f = Failure::new("t", Category::Timeout).with_effect(Effect::MaybeApplied);
        assert_eq!(
            decide(ToolClass::IdempotentWrite, &f, 1, ms(60_000)),
            RetryDecision::LookupByKey
        );
        // Too close to the deadline for even a lookup: give up, leave the
        // record pending for reconciliation.
        assert!(matches!(
            decide(ToolClass::IdempotentWrite, &f, 1, ms(50)),
            RetryDecision::GiveUp {
                reason: GiveUpReason::DeadlineTooClose { .. }
            }
        ));
        // A cancelled call is never looked up or retried.
        let cancelled = Failure::new("t", Category::Cancelled).with_effect(Effect::MaybeApplied);
        assert!(matches!(
            decide(ToolClass::IdempotentWrite, &cancelled, 1, ms(60_000)),
            RetryDecision::GiveUp { .. }
        ));
        // A read with an unknown effect is simply retried.
        assert!(matches!(
            decide(ToolClass::Read, &f, 1, ms(60_000)),
            RetryDecision::Retry { .. }
        ));
    }

    #[test]
    fn attempt_ceiling_gives_up() {
        assert_eq!(
            decide(ToolClass::Read, &transient(), 4, ms(60_000)),
            RetryDecision::GiveUp {
                reason: GiveUpReason::AttemptsExhausted {
                    attempts: 4,
                    max_attempts: 4
                }
            }
        );
        assert!(matches!(
            decide(ToolClass::Read, &transient(), 3, ms(60_000)),
            RetryDecision::Retry { .. }
        ));
    }

    #[test]
    fn local_delay_is_full_jitter_within_the_ceiling() {
        for attempt in 1..=3 {
            let RetryDecision::Retry {
                delay,
                backoff_ceiling,
                from_server,
                next_attempt,
                ..
            } = decide(ToolClass::Read, &transient(), attempt, ms(60_000))
            else {
                panic!("expected a retry");
            };
            assert!(!from_server);
            assert_eq!(next_attempt, attempt + 1);
            assert_eq!(
                backoff_ceiling,
                RetryPolicy::default().backoff_ceiling(attempt)
            );
            assert!(delay <= backoff_ceiling);
        }
    }

    #[test]
    fn server_retry_after_takes_precedence_over_backoff() {
        let f = Failure::new("t", Category::RateLimited).with_retry_after(ms(3_000));
        let d = decide(ToolClass::Read, &f, 1, ms(60_000));
        assert!(
            matches!(d, RetryDecision::Retry { delay, from_server: true, .. } if delay == ms(3_000))
        );
    }

    #[test]
    fn server_wait_that_does_not_fit_gives_up_rather_than_retrying_early() {
        let f = Failure::new("t", Category::RateLimited).with_retry_after(ms(3_000));
        assert_eq!(
            decide(ToolClass::Read, &f, 1, ms(3_050)),
            RetryDecision::GiveUp {
                reason: GiveUpReason::ServerWaitBeyondDeadline {
                    retry_after: ms(3_000),
                    remaining: ms(3_050)
                }
            }
        );
    }

    #[test]
    fn remainder_below_one_median_attempt_gives_up_now() {
        assert_eq!(
            decide(ToolClass::Read, &transient(), 1, ms(99)),
            RetryDecision::GiveUp {
                reason: GiveUpReason::DeadlineTooClose {
                    remaining: ms(99),
                    needed: ms(100)
                }
            }
        );
    }

    #[test]
    fn local_delay_is_clamped_to_leave_one_median_attempt() {
        let policy = RetryPolicy::try_from(RetryConfig {
            base_delay: ms(5_000),
            max_delay: ms(5_000),
            ..RetryConfig::default()
        })
        .unwrap();
        let mut budget = RetryBudget::new(&policy);
        let mut clamped_seen = false;
        for _ in 0..20 {
            if let RetryDecision::Retry { delay, clamped, .. } = decide_with(
                &policy,
                &mut budget,
                ToolClass::Read,
                &transient(),
                1,
                ms(150),
            ) {
                assert!(delay <= ms(50));
                clamped_seen |= clamped;
            }
        }
        assert!(clamped_seen);
    }

    #[test]
    fn retry_budget_exhausted_fails_fast() {
        let policy = RetryPolicy::try_from(RetryConfig {
            budget_initial: 1,
            budget_ratio: 0.0,
            ..RetryConfig::default()
        })
        .unwrap();
        let mut budget = RetryBudget::new(&policy);
        let first = decide_with(
            &policy,
            &mut budget,
            ToolClass::Read,
            &transient(),
            1,
            ms(60_000),
        );
        assert!(matches!(first, RetryDecision::Retry { .. }));
        assert_eq!(
            decide_with(
                &policy,
                &mut budget,
                ToolClass::Read,
                &transient(),
                1,
                ms(60_000)
            ),
            RetryDecision::GiveUp {
                reason: GiveUpReason::RetryBudgetExhausted
            }
        );
    }

    #[test]
    fn give_up_does_not_spend_the_retry_budget() {
        let policy = RetryPolicy::default();
        let mut budget = RetryBudget::new(&policy);
        let before = budget.available();
        decide_with(
            &policy,
            &mut budget,
            ToolClass::Irreversible,
            &transient(),
            1,
            ms(60_000),
        );
        decide_with(
            &policy,
            &mut budget,
            ToolClass::Read,
            &transient(),
            1,
            ms(10),
        );
        assert_eq!(budget.available(), before);
    }

    #[test]
    fn rate_limit_without_hint_backs_off_more_conservatively() {
        let f = Failure::new("t", Category::RateLimited);
        let RetryDecision::Retry {
            backoff_ceiling, ..
        } = decide(ToolClass::Read, &f, 1, ms(60_000))
        else {
            panic!("expected a retry");
        };
        assert_eq!(backoff_ceiling, ms(500));
    }

    #[test]
    fn decision_serializes_with_its_rationale() {
        let d = decide(ToolClass::Irreversible, &transient(), 1, ms(1));
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            r#"{"decision":"give_up","reason":{"kind":"irreversible"}}"#
        );
    }
}

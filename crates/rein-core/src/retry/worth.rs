//! Whether a retry is worth its cost (seed 000, "The Marginal Return of a
//! Retry Decreases"; issue 16, item 6).
//!
//! # Why
//!
//! "A call is worth retrying if and only if the probability that it
//! succeeds on retry, multiplied by its value, exceeds the budget it
//! consumes." The first retry of a target usually absorbs jitter; the
//! third usually meets a real fault. So the probability is *measured*,
//! per target and per retry ordinal ([`RetryRecord`]), and the cost is
//! what the retry spends: its money (a model call's price × the tokens it
//! reserves; a tool declares no price, so its money is zero) and its time.
//!
//! # The rule
//!
//! ```text
//! expected value = p × V
//! expected cost  = money + V × (delay + p50) / remaining
//! retry          ⇔ expected value ≥ expected cost
//! ```
//!
//! `V` is the agent's `value_of_success_usd`. Time is priced as the share
//! of what is left that the retry uses, times `V`: spending half of the
//! remaining deadline on one retry forfeits, to first order, half of what
//! the run can still achieve. So with no money at stake, a retry is made
//! exactly when its success rate is at least the share of the remaining
//! time it takes. `p` is `(successes + 1) / (retries + 2)` (Laplace's
//! rule: ½ before any retry is seen, never 0 or 1). Getting the order of
//! magnitude right is the point, not precision.
//!
//! Without `value_of_success_usd` nothing here applies: retries are
//! decided as before.
//!
//! # Old outcomes fade
//!
//! A retry's success rate moves with the fault of the moment: a provider
//! that failed every retry during an outage an hour ago is no evidence
//! now. So the counts are halved once per window of
//! [`RETRY_RATE_HALF_LIFE`] ([`RetryRecord::decayed`]), the windows
//! aligned on the Unix epoch so that every process sharing the counts
//! halves them at the same instants. After six windows (an hour) an
//! outcome weighs 1/64 and the estimate is back near the prior.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::deadline::Cost;

/// Retry ordinals kept apart: the first, the second, and the third or
/// later together.
pub const RETRY_ORDINALS: usize = 3;

/// How long a retry outcome counts whole: counts are halved at every
/// multiple of this since the Unix epoch ([`RetryRecord::decayed`]).
/// Ten minutes: a fault of the moment (an outage, a rate limit) lasts
/// minutes, and a retry's rate learnt during one must not outlive it by
/// hours.
pub const RETRY_RATE_HALF_LIFE: Duration = Duration::from_secs(600);

/// The observed outcomes of the retries of one target (a tool, or a
/// provider), by retry ordinal.
///
/// # Invariants
///
/// At every ordinal, `successes <= tries`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryRecord {
    tries: [u32; RETRY_ORDINALS],
    successes: [u32; RETRY_ORDINALS],
}

/// Counts of one retry ordinal that break [`RetryRecord`]'s invariant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{successes} successes of {tries} retries at ordinal {ordinal}: more successes than tries")]
pub struct ImpossibleCounts {
    /// The slot (0: the first retry).
    pub ordinal: usize,
    /// The tries counted.
    pub tries: u32,
    /// The successes counted.
    pub successes: u32,
}

impl RetryRecord {
    /// The slot of attempt `attempt` (attempt 2 is the first retry);
    /// `None` for a first attempt, which is no retry.
    fn slot(attempt: u32) -> Option<usize> {
        let retry = usize::try_from(attempt.checked_sub(2)?).unwrap_or(usize::MAX);
        Some(retry.min(RETRY_ORDINALS - 1))
    }

    /// Counts how attempt `attempt` ended; first attempts are not counted.
    pub fn record(&mut self, attempt: u32, succeeded: bool) {
        if let Some(i) = Self::slot(attempt) {
            self.tries[i] = self.tries[i].saturating_add(1);
            if succeeded {
                self.successes[i] = self.successes[i].saturating_add(1);
            }
        }
    }

    /// The measured success rate of attempt `next_attempt` (a retry).
    pub fn rate(&self, next_attempt: u32) -> SuccessRate {
        let i = Self::slot(next_attempt).unwrap_or(0);
        SuccessRate {
            successes: self.successes[i],
            tries: self.tries[i],
        }
    }

    /// The counts of every ordinal (index 0: the first retry; the last
    /// holds the third and later), as `(tries, successes)`: what a store
    /// keeps.
    pub fn counts(&self) -> [(u32, u32); RETRY_ORDINALS] {
        std::array::from_fn(|i| (self.tries[i], self.successes[i]))
    }

    /// The record of these counts (as [`counts`](Self::counts) gives them).
    ///
    /// # Errors
    ///
    /// [`ImpossibleCounts`] for an ordinal with more successes than tries.
    pub fn from_counts(counts: [(u32, u32); RETRY_ORDINALS]) -> Result<Self, ImpossibleCounts> {
        let mut record = RetryRecord::default();
        for (ordinal, (tries, successes)) in counts.into_iter().enumerate() {
            if successes > tries {
                return Err(ImpossibleCounts {
                    ordinal,
                    tries,
                    successes,
                });
            }
            record.tries[ordinal] = tries;
            record.successes[ordinal] = successes;
        }
        Ok(record)
    }

    /// Whether nothing is counted.
    pub fn is_empty(&self) -> bool {
        self.tries.iter().all(|&t| t == 0)
    }

    /// Adds `other`'s counts to these.
    pub fn merge(&mut self, other: &RetryRecord) {
        for i in 0..RETRY_ORDINALS {
            self.tries[i] = self.tries[i].saturating_add(other.tries[i]);
            self.successes[i] = self.successes[i].saturating_add(other.successes[i]);
        }
    }

    /// These counts, as kept at `from_ms`, seen at `to_ms` (ms since the
    /// Unix epoch): halved (rounding down) once per multiple of
    /// [`RETRY_RATE_HALF_LIFE`] passed between them. Halving both counts
    /// keeps `successes <= tries`; a time before `from_ms` decays nothing.
    pub fn decayed(&self, from_ms: u64, to_ms: u64) -> RetryRecord {
        let window = u64::try_from(RETRY_RATE_HALF_LIFE.as_millis()).unwrap_or(u64::MAX);
        let halvings = (to_ms / window).saturating_sub(from_ms / window);
        let halve = |n: u32| {
            u32::try_from(halvings)
                .ok()
                .and_then(|h| n.checked_shr(h))
                .unwrap_or(0)
        };
        RetryRecord {
            tries: self.tries.map(halve),
            successes: self.successes.map(halve),
        }
    }
}

/// How often retries of one ordinal succeeded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuccessRate {
    /// Retries that succeeded.
    pub successes: u32,
    /// Retries seen.
    pub tries: u32,
}

impl SuccessRate {
    /// The estimate in millionths: `(successes + 1) / (tries + 2)`.
    pub fn per_million(&self) -> u64 {
        (u64::from(self.successes) + 1) * 1_000_000 / (u64::from(self.tries) + 2)
    }
}

/// What the worth of one retry is decided from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorthInput {
    /// What a successful run is worth.
    pub value: Cost,
    /// The measured success rate of this retry's ordinal at its target.
    pub rate: SuccessRate,
    /// The money it spends (price × tokens, 0 for a tool).
    pub money: Cost,
}

/// The rationale of a worth decision, as events and reports carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Worth {
    /// The success rate it rests on.
    pub rate: SuccessRate,
    /// `p × V`, in micro-dollars.
    pub expected_value_micros: u64,
    /// Money plus the time's share of `V`, in micro-dollars.
    pub expected_cost_micros: u64,
}

impl Worth {
    /// The worth of a retry that takes `time` (its delay and median) of
    /// the `remaining` deadline.
    pub fn of(input: &WorthInput, time: Duration, remaining: Duration) -> Worth {
        let value = u128::from(input.value.micros());
        let expected_value = value * u128::from(input.rate.per_million()) / 1_000_000;
        let time_cost = if remaining.is_zero() {
            value
        } else {
            (value * time.as_nanos() / remaining.as_nanos()).min(value)
        };
        let cost = u128::from(input.money.micros()) + time_cost;
        Worth {
            rate: input.rate,
            expected_value_micros: u64::try_from(expected_value).unwrap_or(u64::MAX),
            expected_cost_micros: u64::try_from(cost).unwrap_or(u64::MAX),
        }
    }

    /// Whether the retry is worth making.
    pub fn worth_it(&self) -> bool {
        self.expected_value_micros >= self.expected_cost_micros
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(value: u64, successes: u32, tries: u32, money: u64) -> WorthInput {
        WorthInput {
            value: Cost::from_micros(value),
            rate: SuccessRate { successes, tries },
            money: Cost::from_micros(money),
        }
    }

    #[test]
    fn rates_are_kept_by_retry_ordinal_and_first_attempts_are_not_retries() {
        let mut r = RetryRecord::default();
        r.record(1, false);
        r.record(2, true);
        r.record(2, true);
        r.record(3, false);
        r.record(7, false);
        assert_eq!(
            r.rate(2),
            SuccessRate {
                successes: 2,
                tries: 2
            }
        );
        assert_eq!(
            r.rate(3),
            SuccessRate {
                successes: 0,
                tries: 1
            }
        );
        assert_eq!(r.rate(9), r.rate(4), "the third and later share a slot");
        assert_eq!(r.rate(4).tries, 1);
        assert_eq!(SuccessRate::default().per_million(), 500_000);
        assert_eq!(r.rate(2).per_million(), 750_000);
    }

    #[test]
    fn counts_halve_per_window_and_round_trip() {
        let mut r = RetryRecord::default();
        for _ in 0..8 {
            r.record(2, false);
        }
        r.record(3, true);
        let window = u64::try_from(RETRY_RATE_HALF_LIFE.as_millis()).unwrap();
        let start = 10 * window + 5;
        assert_eq!(r.decayed(start, start + window - 6), r, "same window");
        let one = r.decayed(start, 11 * window);
        assert_eq!(one.rate(2).tries, 4);
        assert_eq!(
            one.rate(3),
            SuccessRate::default(),
            "1 of 1 halves to 0 of 0"
        );
        assert!(r.decayed(start, start + 40 * window).is_empty());
        assert_eq!(r.decayed(start, 0), r, "the past decays nothing");
        assert_eq!(RetryRecord::from_counts(r.counts()), Ok(r));
        assert!(RetryRecord::from_counts([(1, 2), (0, 0), (0, 0)]).is_err());
        let mut sum = r;
        sum.merge(&r);
        assert_eq!(sum.rate(2).tries, 16);
    }

    #[test]
    fn a_retry_that_fails_mostly_and_costs_much_is_not_worth_it() {
        // p = (0 + 1) / (8 + 2) = 0.1 of $1 = 100_000 µ$; the model call
        // costs 150_000 µ$.
        let w = Worth::of(
            &input(1_000_000, 0, 8, 150_000),
            Duration::ZERO,
            Duration::from_secs(10),
        );
        assert_eq!(
            (w.expected_value_micros, w.expected_cost_micros),
            (100_000, 150_000)
        );
        assert!(!w.worth_it());
        // A hundred-thousand-dollar transfer is worth the same retry.
        let w = Worth::of(
            &input(100_000_000_000, 0, 8, 150_000),
            Duration::ZERO,
            Duration::from_secs(10),
        );
        assert!(w.worth_it());
    }

    #[test]
    fn time_costs_its_share_of_what_is_left() {
        // p = 0.25; the retry takes 3 s of the 10 s left: 0.3 of V.
        let slow = Worth::of(
            &input(1_000_000, 2, 10, 0),
            Duration::from_secs(3),
            Duration::from_secs(10),
        );
        assert_eq!(slow.expected_cost_micros, 300_000);
        assert!(!slow.worth_it());
        let quick = Worth::of(
            &input(1_000_000, 2, 10, 0),
            Duration::from_secs(2),
            Duration::from_secs(10),
        );
        assert!(quick.worth_it());
        let none_left = Worth::of(&input(1_000_000, 9, 10, 0), Duration::ZERO, Duration::ZERO);
        assert!(!none_left.worth_it());
    }
}

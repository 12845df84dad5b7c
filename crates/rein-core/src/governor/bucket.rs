//! The token bucket of a resource group: requests per second with a burst,
//! or model tokens per minute charged with an estimate and settled with the
//! actual usage.

use std::fmt;
use std::num::NonZeroU64;
use std::time::Duration;

use serde::Serialize;

use super::constants::{MAX_RATE_PER_SEC, MIN_RATE_PER_SEC};
use crate::clock::Instant;
use crate::config::ConfigError;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A refill rate: `tokens` every `per`, kept as an exact fraction.
///
/// # Why a fraction
///
/// A bucket refilled with a float rate loses a little on every refill; over
/// days of traffic the loss adds up to a rate that is no longer the one
/// configured. Kept as a reduced fraction, the rate is exact: 20.5 calls per
/// second is 41 calls every 2 s, 100 000 tokens per minute is exactly that.
///
/// # Example
///
/// ```
/// # use std::num::NonZeroU64;
/// # use std::time::Duration;
/// use rein_core::governor::Rate;
///
/// let rate = Rate::from_per_second("rate_per_sec", 20.5)?;
/// assert_eq!((rate.tokens(), rate.per()), (41, Duration::from_secs(2)));
/// let tpm = Rate::per_minute(NonZeroU64::new(90_000).unwrap());
/// assert_eq!(tpm.per_second(), 1500.0);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    tokens: u64,
    per: Duration,
}

impl Rate {
    /// `tokens` every `per`, reduced to lowest terms; `None` when `per` is
    /// zero.
    pub fn new(tokens: NonZeroU64, per: Duration) -> Option<Rate> {
        let per_nanos = per.as_nanos();
        if per_nanos == 0 {
            return None;
        }
        let g = gcd(u128::from(tokens.get()), per_nanos);
        let tokens = u64::try_from(u128::from(tokens.get()) / g).unwrap_or(u64::MAX);
        Some(Rate {
            tokens,
            per: nanos_to_duration(per_nanos / g),
        })
    }

    /// `tokens` every minute.
    pub fn per_minute(tokens: NonZeroU64) -> Rate {
        // A minute is never zero.
        Rate::new(tokens, Duration::from_secs(60)).unwrap_or(Rate {
            tokens: tokens.get(),
            per: Duration::from_secs(60),
        })
    }

    /// A rate of `per_sec` calls per second as an operator writes it, kept
    /// to the millionth of a call per second (rounded to the nearest).
    ///
    /// # Errors
    ///
    /// [`ConfigError::OutOfRange`] naming `field` when `per_sec` is NaN,
    /// infinite, or outside [`MIN_RATE_PER_SEC`]..=[`MAX_RATE_PER_SEC`].
    pub fn from_per_second(field: &'static str, per_sec: f64) -> Result<Rate, ConfigError> {
        if !(per_sec.is_finite() && (MIN_RATE_PER_SEC..=MAX_RATE_PER_SEC).contains(&per_sec)) {
            return Err(ConfigError::OutOfRange {
                field,
                expected: "a number of calls per second in [0.000001, 1000000000]",
                found: per_sec.to_string(),
            });
        }
        // In range, so the product is in [1, 1e15] and the cast exact.
        let micro = (per_sec * 1e6).round().max(1.0) as u64;
        let micro = NonZeroU64::new(micro).unwrap_or(NonZeroU64::MIN);
        Ok(
            Rate::new(micro, Duration::from_secs(1_000_000)).unwrap_or(Rate {
                tokens: micro.get(),
                per: Duration::from_secs(1_000_000),
            }),
        )
    }

    /// Tokens added every [`per`](Rate::per).
    pub fn tokens(self) -> u64 {
        self.tokens
    }

    /// The period [`tokens`](Rate::tokens) are added in.
    pub fn per(self) -> Duration {
        self.per
    }

    /// The rate in tokens per second, for display.
    pub fn per_second(self) -> f64 {
        self.tokens as f64 / self.per.as_secs_f64()
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", self.per_second())
    }
}

impl Serialize for Rate {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_f64(self.per_second())
    }
}

/// What [`TokenBucket::try_acquire`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "acquire", rename_all = "snake_case")]
#[must_use = "a call the bucket did not grant must not be made"]
pub enum Acquire {
    /// The tokens were taken; proceed.
    Granted,
    /// Not enough tokens now; `until` is the earliest instant they will be
    /// there. Nothing was taken or reserved: ask again then.
    Wait {
        /// When the tokens asked for will have refilled.
        until: Instant,
    },
    /// More tokens than the bucket holds: it can never grant this.
    Rejected {
        /// Tokens asked for.
        requested: u64,
        /// The bucket's capacity.
        burst: u64,
    },
}

impl Acquire {
    /// Whether the tokens were taken.
    pub fn is_granted(self) -> bool {
        matches!(self, Acquire::Granted)
    }
}

/// How [`TokenBucket::settle`] corrected a charge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "settled", content = "tokens", rename_all = "snake_case")]
pub enum Settled {
    /// The estimate was right.
    Exact,
    /// The call used fewer tokens than estimated; the difference went back
    /// (up to the bucket's capacity).
    Refunded(u64),
    /// The call used more than estimated; the difference is owed, and later
    /// calls wait until it has refilled.
    Owed(u64),
}

/// A token bucket: holds up to `burst` tokens and refills at a [`Rate`].
///
/// ```text
///            refill: rate × elapsed, never above burst
///                 │
///   ┌─────────────▼─────────────┐
///   │ level ∈ (-debt, burst]    │──▶ try_acquire(n): level ≥ n → take n, Granted
///   └───────────────────────────┘                   level < n → Wait { until }
///        ▲                 ▲                        n > burst → Rejected
///   refund(n)        settle(estimate, actual): refund the difference, or owe it
/// ```
///
/// # Why
///
/// A resource group's bucket bounds what its tools send downstream together,
/// whatever the model's fan-out (seed 000, "global beats per-tool"): over any
/// window of length `t` at most `burst + rate × t` tokens are granted. A
/// group of model calls counts *tokens* per minute the same way: the
/// prompt's estimate is charged before the call (so concurrent calls cannot
/// all spend the same minute), and [`settle`](TokenBucket::settle) replaces
/// the estimate with the actual usage afterwards: a refund, or a debt that
/// later calls wait out, so the long-run rate is the real one.
///
/// # Exactness
///
/// The level is kept in integer units of `1 / per_nanos` token and refilled
/// from the instant of the last refill, so no rounding happens at all: a
/// bucket refilled a billion times holds exactly what one refilled once
/// over the same span holds. The bucket starts full. Time that goes
/// backwards refills nothing and never panics.
///
/// # Example
///
/// ```
/// # use std::num::NonZeroU64;
/// # use std::time::Duration;
/// use rein_core::Instant;
/// use rein_core::governor::{Acquire, Rate, TokenBucket};
///
/// let mut bucket = TokenBucket::new(Rate::from_per_second("rate", 2.0)?, 2)?;
/// let t0 = Instant::ORIGIN;
/// assert_eq!(bucket.try_acquire(2, t0), Acquire::Granted);
/// assert_eq!(
///     bucket.try_acquire(1, t0),
///     Acquire::Wait { until: t0 + Duration::from_millis(500) }
/// );
/// assert_eq!(bucket.try_acquire(1, t0 + Duration::from_millis(500)), Acquire::Granted);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenBucket {
    rate: Rate,
    burst: u64,
    /// Units per token: the rate's period in nanoseconds.
    unit: u128,
    /// Units added per nanosecond: the rate's tokens.
    fill: u128,
    /// `burst × unit`.
    capacity: i128,
    /// Units held; negative while a debt is being refilled.
    level: i128,
    /// Nanoseconds from the clock's origin to the last refill.
    at: u128,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens refilled at `rate`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] (`burst`) when `burst` is zero.
    pub fn new(rate: Rate, burst: u64) -> Result<TokenBucket, ConfigError> {
        if burst == 0 {
            return Err(ConfigError::Zero { field: "burst" });
        }
        let unit = rate.per.as_nanos();
        let capacity = i128::try_from(u128::from(burst).saturating_mul(unit)).unwrap_or(i128::MAX);
        Ok(TokenBucket {
            rate,
            burst,
            unit,
            fill: u128::from(rate.tokens),
            capacity,
            level: capacity,
            at: 0,
        })
    }

    /// The refill rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }

    /// The capacity, in tokens.
    pub fn burst(&self) -> u64 {
        self.burst
    }

    /// Whole tokens available at `now` (zero while in debt).
    pub fn available(&self, now: Instant) -> u64 {
        let level = self.level_at(nanos(now));
        if level <= 0 {
            return 0;
        }
        u64::try_from(level.unsigned_abs() / self.unit).unwrap_or(u64::MAX)
    }

    /// The earliest instant `tokens` will be available, `now` if they are;
    /// `None` when `tokens` is more than the bucket holds. Takes nothing.
    pub fn ready_at(&self, tokens: u64, now: Instant) -> Option<Instant> {
        if tokens > self.burst {
            return None;
        }
        let t = nanos(now).max(self.at);
        let level = self.level_at(t);
        let need = self.units(tokens);
        if level >= need {
            return Some(now);
        }
        Some(self.filled_at(t, level, need))
    }

    /// The earliest instant `tokens` could be taken after `ahead` tokens
    /// were taken first, each as soon as the bucket held it: when a
    /// request queued behind others would get its turn from the bucket
    /// alone. `now` if the bucket holds them all; `None` when `tokens` is
    /// more than the bucket holds. Takes nothing.
    ///
    /// The refill is counted from `now` without the cap: tokens taken as
    /// they arrive never let the level sit at its capacity.
    pub fn ready_behind(&self, ahead: u64, tokens: u64, now: Instant) -> Option<Instant> {
        if tokens > self.burst {
            return None;
        }
        let t = nanos(now).max(self.at);
        let level = self.level_at(t);
        let need = self.units(tokens.saturating_add(ahead));
        if level >= need {
            return Some(now);
        }
        Some(self.filled_at(t, level, need))
    }

    /// Takes `tokens` at `now` if the bucket holds them.
    ///
    /// Nothing is taken or reserved unless granted: a caller told to wait
    /// asks again at `until` (or later), and whoever asks first then gets the
    /// tokens — ordering waiters is the fair queue's job, not the bucket's.
    pub fn try_acquire(&mut self, tokens: u64, now: Instant) -> Acquire {
        if tokens > self.burst {
            return Acquire::Rejected {
                requested: tokens,
                burst: self.burst,
            };
        }
        self.refill(now);
        let need = self.units(tokens);
        if self.level >= need {
            self.level -= need;
            Acquire::Granted
        } else {
            Acquire::Wait {
                until: self.filled_at(self.at, self.level, need),
            }
        }
    }

    /// Gives back `tokens` taken by a call that was not made (up to the
    /// capacity).
    pub fn refund(&mut self, tokens: u64, now: Instant) {
        self.refill(now);
        self.level = self
            .level
            .saturating_add(self.units(tokens))
            .min(self.capacity);
    }

    /// Replaces a charge of `estimate` tokens by the `actual` usage: refunds
    /// what was over-estimated (up to the capacity), or takes what was
    /// under-estimated even into debt.
    pub fn settle(&mut self, estimate: u64, actual: u64, now: Instant) -> Settled {
        self.refill(now);
        match estimate.cmp(&actual) {
            std::cmp::Ordering::Equal => Settled::Exact,
            std::cmp::Ordering::Greater => {
                let over = estimate - actual;
                self.level = self
                    .level
                    .saturating_add(self.units(over))
                    .min(self.capacity);
                Settled::Refunded(over)
            }
            std::cmp::Ordering::Less => {
                let under = actual - estimate;
                // Debt is floored far below anything a real charge reaches,
                // so repeated debts cannot overflow.
                self.level = self
                    .level
                    .saturating_sub(self.units(under))
                    .max(i128::MIN / 2);
                Settled::Owed(under)
            }
        }
    }

    /// Changes the rate and capacity at `now` (a node's part of a group
    /// shared across a cluster changed): the bucket first refills at the
    /// old rate up to `now`, then keeps its level *in proportion* to the
    /// new capacity — a bucket half full stays half full, a debt stays the
    /// same share of it — so a change never hands out a fresh burst.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] (`burst`) when `burst` is zero; the bucket is
    /// unchanged then.
    pub fn reshape(&mut self, rate: Rate, burst: u64, now: Instant) -> Result<(), ConfigError> {
        let mut next = TokenBucket::new(rate, burst)?;
        self.refill(now);
        next.at = self.at;
        next.level = if self.level >= self.capacity {
            next.capacity
        } else {
            // level / capacity = next.level / next.capacity; the product
            // overflows only for capacities far beyond any real limit,
            // where dividing first loses under one unit in 2^64.
            match self.level.checked_mul(next.capacity) {
                Some(scaled) => scaled / self.capacity.max(1),
                None => (self.level / self.capacity.max(1)).saturating_mul(next.capacity),
            }
            .clamp(i128::MIN / 2, next.capacity)
        };
        *self = next;
        Ok(())
    }

    /// `tokens` in units (at most `u64::MAX × per_nanos`, which fits).
    fn units(&self, tokens: u64) -> i128 {
        i128::try_from(u128::from(tokens).saturating_mul(self.unit)).unwrap_or(i128::MAX)
    }

    fn refill(&mut self, now: Instant) {
        let t = nanos(now);
        if t > self.at {
            self.level = self.level_at(t);
            self.at = t;
        }
    }

    /// The level at `t` nanoseconds (not before the last refill).
    fn level_at(&self, t: u128) -> i128 {
        if self.level >= self.capacity || t <= self.at {
            return self.level;
        }
        match (t - self.at)
            .checked_mul(self.fill)
            .and_then(|added| i128::try_from(added).ok())
        {
            Some(added) => self.level.saturating_add(added).min(self.capacity),
            None => self.capacity,
        }
    }

    /// The first instant a level of `level` units at `t` nanoseconds
    /// reaches `need` units (`level < need`), were nothing taken and the
    /// level not capped (with `need ≤ capacity` the cap never interferes;
    /// above it, the instant the refill since `t` covers `need − level`).
    fn filled_at(&self, t: u128, level: i128, need: i128) -> Instant {
        let missing = need.saturating_sub(level).unsigned_abs();
        let wait = missing.div_ceil(self.fill.max(1));
        instant_at(t.saturating_add(wait))
    }
}

fn nanos(now: Instant) -> u128 {
    now.since_origin().as_nanos()
}

fn nanos_to_duration(nanos: u128) -> Duration {
    let secs = u64::try_from(nanos / NANOS_PER_SEC).unwrap_or(u64::MAX);
    // The remainder is below 1e9 and fits.
    let sub = u32::try_from(nanos % NANOS_PER_SEC).unwrap_or(0);
    Duration::new(secs, sub)
}

fn instant_at(nanos: u128) -> Instant {
    Instant::from_origin(nanos_to_duration(nanos))
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    fn bucket(per_sec: f64, burst: u64) -> TokenBucket {
        TokenBucket::new(Rate::from_per_second("rate", per_sec).unwrap(), burst).unwrap()
    }

    #[test]
    fn reshape_keeps_the_level_in_proportion_and_never_refills() {
        let mut b = bucket(20.0, 20);
        assert!(b.try_acquire(10, at(0)).is_granted());
        b.reshape(Rate::from_per_second("rate", 10.0).unwrap(), 10, at(0))
            .unwrap();
        assert_eq!(b.available(at(0)), 5, "half full stays half full");
        assert_eq!(b.ready_at(6, at(0)), Some(at(100)), "the new rate refills");
        let mut full = bucket(20.0, 20);
        full.reshape(Rate::from_per_second("rate", 40.0).unwrap(), 40, at(0))
            .unwrap();
        assert_eq!(full.available(at(0)), 40);
        assert!(full.reshape(full.rate(), 0, at(0)).is_err());
        assert_eq!(full.burst(), 40, "unchanged on error");
    }

    #[test]
    fn rate_per_second_is_reduced_to_an_exact_fraction() {
        let r = Rate::from_per_second("rate", 20.0).unwrap();
        assert_eq!((r.tokens(), r.per()), (1, Duration::from_millis(50)));
        assert_eq!(r.per_second(), 20.0);
        let r = Rate::from_per_second("rate", 0.25).unwrap();
        assert_eq!((r.tokens(), r.per()), (1, Duration::from_secs(4)));
        let third = Rate::from_per_second("rate", 1.0 / 3.0).unwrap();
        assert_eq!(third.tokens(), 333_333);
        assert_eq!(third.per(), Duration::from_secs(1_000_000));
    }

    #[test]
    fn rate_per_second_out_of_range_refuses_naming_the_field() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY, 1e-9, 2e9] {
            let err =
                Rate::from_per_second("resource_groups.orders.rate_per_sec", bad).unwrap_err();
            assert_eq!(err.field(), "resource_groups.orders.rate_per_sec");
            assert!(err.to_string().contains("calls per second"), "{err}");
        }
    }

    #[test]
    fn rate_new_with_zero_period_is_none() {
        assert_eq!(Rate::new(NonZeroU64::MIN, Duration::ZERO), None);
    }

    #[test]
    fn new_with_zero_burst_refuses() {
        let err = TokenBucket::new(Rate::from_per_second("r", 1.0).unwrap(), 0).unwrap_err();
        assert_eq!(err, ConfigError::Zero { field: "burst" });
    }

    #[test]
    fn fresh_bucket_grants_its_burst_at_once_then_waits() {
        let mut b = bucket(20.0, 40);
        for _ in 0..40 {
            assert_eq!(b.try_acquire(1, at(0)), Acquire::Granted);
        }
        assert_eq!(b.try_acquire(1, at(0)), Acquire::Wait { until: at(50) });
        assert_eq!(b.available(at(0)), 0);
    }

    #[test]
    fn wait_until_is_the_first_instant_the_tokens_are_there() {
        let mut b = bucket(3.0, 3);
        assert!(b.try_acquire(3, at(0)).is_granted());
        let Acquire::Wait { until } = b.try_acquire(2, at(0)) else {
            panic!("empty bucket grants nothing");
        };
        // Two tokens at 3/s take 666.666… ms: the wait rounds up to the ns.
        assert_eq!(
            until,
            Instant::from_origin(Duration::from_nanos(666_666_667))
        );
        let just_before = until - Duration::from_nanos(1);
        assert!(matches!(
            b.try_acquire(2, just_before),
            Acquire::Wait { .. }
        ));
        assert_eq!(b.try_acquire(2, until), Acquire::Granted);
    }

    #[test]
    fn ready_at_agrees_with_try_acquire_and_takes_nothing() {
        let mut b = bucket(4.0, 4);
        assert_eq!(b.ready_at(4, at(0)), Some(at(0)));
        assert_eq!(b.ready_at(5, at(0)), None);
        assert!(b.try_acquire(4, at(0)).is_granted());
        assert_eq!(b.ready_at(2, at(100)), Some(at(500)));
        assert_eq!(b.try_acquire(2, at(100)), Acquire::Wait { until: at(500) });
        assert_eq!(b.available(at(500)), 2);
    }

    #[test]
    fn ready_behind_counts_the_tokens_taken_first() {
        let b = bucket(10.0, 5);
        // Five at once, then one every 100 ms: the sixth behind five.
        assert_eq!(b.ready_behind(4, 1, at(0)), Some(at(0)));
        assert_eq!(b.ready_behind(5, 1, at(0)), Some(at(100)));
        assert_eq!(b.ready_behind(39, 1, at(0)), Some(at(3_500)));
        assert_eq!(b.ready_behind(0, 1, at(0)), b.ready_at(1, at(0)));
        assert_eq!(b.ready_behind(3, 6, at(0)), None);
    }

    #[test]
    fn waiting_reserves_nothing() {
        let mut b = bucket(1.0, 1);
        assert!(b.try_acquire(1, at(0)).is_granted());
        let _ = b.try_acquire(1, at(100));
        let _ = b.try_acquire(1, at(200));
        assert_eq!(b.available(at(1000)), 1);
    }

    #[test]
    fn request_above_burst_is_rejected_without_taking_anything() {
        let mut b = bucket(10.0, 5);
        assert_eq!(
            b.try_acquire(6, at(0)),
            Acquire::Rejected {
                requested: 6,
                burst: 5
            }
        );
        assert_eq!(b.available(at(0)), 5);
    }

    #[test]
    fn refill_never_exceeds_burst() {
        let mut b = bucket(100.0, 10);
        assert!(b.try_acquire(10, at(0)).is_granted());
        assert_eq!(b.available(at(3_600_000)), 10);
        let far = Instant::from_origin(Duration::MAX);
        assert_eq!(b.available(far), 10);
        assert!(b.try_acquire(10, far).is_granted());
    }

    #[test]
    fn many_small_refills_equal_one_large_refill() {
        // 1/3 per second is not a whole number of nanoseconds per token.
        let mut stepped = bucket(7.0 / 3.0, 1_000_000);
        let mut once = stepped.clone();
        assert!(stepped.try_acquire(1_000_000, at(0)).is_granted());
        assert!(once.try_acquire(1_000_000, at(0)).is_granted());
        let step = Duration::from_nanos(999_999_937);
        let mut now = at(0);
        for _ in 0..100_000 {
            now = now + step;
            stepped.refund(0, now);
        }
        once.refund(0, now);
        assert_eq!(stepped, once);
        assert_eq!(
            stepped.available(now),
            once.available(now),
            "no drift after 100 000 refills"
        );
    }

    #[test]
    fn time_going_backwards_refills_nothing() {
        let mut b = bucket(1.0, 2);
        assert!(b.try_acquire(2, at(5000)).is_granted());
        assert!(matches!(b.try_acquire(1, at(1000)), Acquire::Wait { until } if until == at(6000)));
        assert!(b.try_acquire(1, at(6000)).is_granted());
    }

    #[test]
    fn refund_gives_tokens_back_up_to_burst() {
        let mut b = bucket(1.0, 4);
        assert!(b.try_acquire(3, at(0)).is_granted());
        b.refund(2, at(0));
        assert_eq!(b.available(at(0)), 3);
        b.refund(100, at(0));
        assert_eq!(b.available(at(0)), 4);
    }

    #[test]
    fn settle_over_estimate_refunds_the_difference() {
        let mut b =
            TokenBucket::new(Rate::per_minute(NonZeroU64::new(6000).unwrap()), 6000).unwrap();
        assert!(b.try_acquire(1000, at(0)).is_granted());
        assert_eq!(b.settle(1000, 400, at(0)), Settled::Refunded(600));
        assert_eq!(b.available(at(0)), 5600);
        assert_eq!(b.settle(10, 10, at(0)), Settled::Exact);
    }

    #[test]
    fn settle_under_estimate_owes_and_later_calls_wait_out_the_debt() {
        // 6000 tokens per minute: 100 per second.
        let mut b =
            TokenBucket::new(Rate::per_minute(NonZeroU64::new(6000).unwrap()), 6000).unwrap();
        assert!(b.try_acquire(6000, at(0)).is_granted());
        assert_eq!(b.settle(6000, 6500, at(0)), Settled::Owed(500));
        assert_eq!(b.available(at(0)), 0);
        // 500 owed plus 100 wanted: 6 s at 100/s.
        assert_eq!(b.try_acquire(100, at(0)), Acquire::Wait { until: at(6000) });
        assert!(b.try_acquire(100, at(6000)).is_granted());
    }

    #[test]
    fn repeated_debts_saturate_instead_of_overflowing() {
        let mut b = bucket(0.000_001, 1);
        for _ in 0..10 {
            assert_eq!(b.settle(0, u64::MAX, at(0)), Settled::Owed(u64::MAX));
        }
        assert_eq!(b.available(at(0)), 0);
        assert!(matches!(b.try_acquire(1, at(0)), Acquire::Wait { .. }));
    }

    #[test]
    fn acquire_and_settle_serialize_for_events() {
        let wait = serde_json::to_value(Acquire::Wait { until: at(50) }).unwrap();
        assert_eq!(wait["acquire"], "wait");
        let owed = serde_json::to_value(Settled::Owed(5)).unwrap();
        assert_eq!(owed, serde_json::json!({"settled": "owed", "tokens": 5}));
        assert_eq!(
            serde_json::to_value(Rate::from_per_second("r", 20.5).unwrap()).unwrap(),
            20.5
        );
    }
}

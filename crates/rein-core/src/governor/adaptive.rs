//! The adaptive concurrency limit of a resource group: AIMD over a smoothed
//! latency and the target's overload signals.

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use super::config::{ConcurrencyConfig, LimitSettings};
use crate::clock::Instant;
use crate::config::ConfigError;
use crate::failure::Category;

/// How a call that held a slot ended, as the limit reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The call answered. Its latency (release − acquire) is a sample; a
    /// model call's is divided by the tokens it generated.
    Succeeded {
        /// Output tokens of a model call; `None` for a tool call.
        output_tokens: Option<u64>,
    },
    /// The target said it is overloaded, or the call outlived its allowance:
    /// the limit shrinks.
    Overloaded,
    /// The outcome says nothing about load (cancelled, the caller's
    /// mistake, a fault unrelated to load): the slot is freed, nothing else.
    Ignored,
}

impl Completion {
    /// A tool call that answered.
    pub const SUCCEEDED: Completion = Completion::Succeeded {
        output_tokens: None,
    };

    /// A model call that answered with `output_tokens` generated.
    pub fn generated(output_tokens: u64) -> Completion {
        Completion::Succeeded {
            output_tokens: Some(output_tokens),
        }
    }

    /// What a failed call in `category` tells the limit.
    ///
    /// `rate_limited` (429) and `overloaded` (529, provider overload) are the
    /// target's own word; `timeout` is the strongest sign a queue is backing
    /// up (a call outlived an allowance sized from its latency profile), as
    /// TCP reads a loss. Every other failure is [`Completion::Ignored`]: a
    /// 500 or a refusal says nothing about how much load the target takes.
    pub fn from_failure(category: Category) -> Completion {
        match category {
            Category::RateLimited | Category::Overloaded | Category::Timeout => {
                Completion::Overloaded
            }
            _ => Completion::Ignored,
        }
    }
}

/// A slot held under the limit, to release with the call's [`Completion`]
/// exactly once.
///
/// Not `Clone`: a slot is released once, by value. It remembers when it was
/// taken (the latency sample is measured from there) and the limit's epoch
/// (a slow call admitted before a shrink cannot shrink the limit again).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "release the slot with AdaptiveLimit::release"]
pub struct LimitPermit {
    epoch: u64,
    acquired_at: Instant,
}

impl LimitPermit {
    /// When the slot was taken.
    pub fn acquired_at(&self) -> Instant {
        self.acquired_at
    }
}

/// Every slot under the limit is taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AtLimit {
    /// The current limit.
    pub limit: u32,
    /// Slots held.
    pub in_flight: u32,
}

/// How a release changed the limit: what the engine records as
/// `concurrency_adjusted` (old, new, why).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "adjustment", rename_all = "snake_case")]
#[must_use = "an adjustment is an event to record"]
pub enum Adjustment {
    /// The limit did not change.
    Unchanged,
    /// The limit shrank (multiplicative decrease).
    Shrunk {
        /// The limit before.
        old: u32,
        /// The limit after.
        new: u32,
        /// What triggered it.
        reason: ShrinkReason,
    },
    /// A full limit's worth of successes while the limit was in use grew it
    /// by one (additive increase).
    Grew {
        /// The limit before.
        old: u32,
        /// The limit after.
        new: u32,
    },
}

impl Adjustment {
    /// Whether the limit changed.
    pub fn is_change(&self) -> bool {
        !matches!(self, Adjustment::Unchanged)
    }
}

impl fmt::Display for Adjustment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Adjustment::Unchanged => f.write_str("unchanged"),
            Adjustment::Shrunk { old, new, reason } => {
                write!(f, "shrank from {old} to {new}: {reason}")
            }
            Adjustment::Grew { old, new } => {
                write!(
                    f,
                    "grew from {old} to {new} after a full limit of successes"
                )
            }
        }
    }
}

/// Why the limit shrank.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ShrinkReason {
    /// The smoothed latency rose past `baseline × tolerance`.
    LatencyRose {
        /// The smoothed latency (per output token for model calls).
        #[serde(with = "humantime_serde")]
        ewma: Duration,
        /// The baseline it is compared with.
        #[serde(with = "humantime_serde")]
        baseline: Duration,
        /// The configured tolerance.
        tolerance: f64,
    },
    /// The target said it is overloaded (429, 529) or a call timed out.
    Overloaded,
}

impl fmt::Display for ShrinkReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ShrinkReason::LatencyRose {
                ewma,
                baseline,
                tolerance,
            } => write!(
                f,
                "smoothed latency {ewma:?} rose past {tolerance} × the baseline {baseline:?}"
            ),
            ShrinkReason::Overloaded => f.write_str("the target signalled overload"),
        }
    }
}

/// An adaptive concurrency limit: how many calls of one resource group may
/// be in flight at once.
///
/// ```text
///            success, latency within tolerance, limit in use:
///            +1 after `limit` such successes (≤ max)
///          ┌──────────────────┐
///          ▼                  │
///   ┌─────────────────────────┴──┐   ewma > baseline × tolerance,
///   │ limit ∈ [min, max]         │   or 429 / overload / timeout,
///   │ (starts at initial = 8)    │──────────────────────────────▶ limit := max(min, ⌊limit × 0.9⌋)
///   └────────────────────────────┘   once per epoch                 epoch += 1
/// ```
///
/// # Why
///
/// A fixed ceiling is wrong both ways (seed 000): too high crushes a
/// degrading backend, too low wastes a healthy one. Latency is the
/// observable of queueing — rising latency means work is backing up, and
/// admitting more makes it worse — so the limit shrinks multiplicatively
/// when the smoothed latency rises past its baseline, or when the target
/// says so (429, overload, a call outliving its allowance), and grows by
/// one per round of successes while it is actually in use.
///
/// # The latency signal
///
/// - Each success's latency (release − acquire; for a model call divided by
///   its output tokens, so a long answer is not mistaken for a slow
///   backend) updates an exponentially weighted moving average: the first
///   sample sets it, each later one moves it by `smoothing` of the way.
/// - The **baseline** is the lowest average seen over the last one to two
///   `baseline_interval`s: time is cut into intervals, each remembers its
///   lowest average, and the baseline is the lower of the current and the
///   previous interval's. So a faster backend lowers it at once, and a
///   backend that became permanently slower becomes the new normal within
///   two intervals instead of shrinking the limit forever. After a quiet
///   gap of two intervals or more, the old intervals are forgotten.
/// - The latency trigger is off until `warmup_samples` samples were seen.
///
/// # Once per epoch
///
/// A shrink starts a new epoch, and only a slot taken in the current epoch
/// can shrink the limit: the calls that were already in flight when it
/// shrank report the same congestion and must not shrink it again (as TCP
/// halves its window once per round trip, not once per lost packet).
///
/// # Growth
///
/// A success whose latency is within tolerance counts toward growth when
/// the limit was in use (at least half its slots held, counting the one
/// released); after `limit` such successes the limit grows by one, up to
/// `max`. A group that never needs its limit does not grow it.
///
/// Slots are never revoked: after a shrink below the number in flight, no
/// slot is granted until enough are released (seed 000's note on swapping
/// semaphores).
///
/// # Example
///
/// ```
/// # use std::time::Duration;
/// use rein_core::Instant;
/// use rein_core::governor::{AdaptiveLimit, Adjustment, Completion, ConcurrencyConfig};
///
/// let mut limit = AdaptiveLimit::new(ConcurrencyConfig::default())?;
/// assert_eq!(limit.limit(), 8);
/// let now = Instant::ORIGIN;
/// let slot = limit.try_acquire(now)?;
/// let adjustment = limit.release(slot, Completion::Overloaded, now + Duration::from_millis(5));
/// assert!(matches!(adjustment, Adjustment::Shrunk { old: 8, new: 7, .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct AdaptiveLimit {
    settings: LimitSettings,
    limit: u32,
    in_flight: u32,
    epoch: u64,
    /// Successes counted toward the next growth.
    successes: u32,
    latency: LatencyTrack,
}

/// The smoothed latency and its baseline, in nanoseconds.
#[derive(Debug, Clone, PartialEq)]
struct LatencyTrack {
    ewma: f64,
    samples: u64,
    interval_start: Instant,
    current_min: f64,
    previous_min: f64,
}

impl AtLimit {
    fn of(limit: &AdaptiveLimit) -> AtLimit {
        AtLimit {
            limit: limit.limit,
            in_flight: limit.in_flight,
        }
    }
}

impl fmt::Display for AtLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} of {} slots in use", self.in_flight, self.limit)
    }
}

impl std::error::Error for AtLimit {}

impl AdaptiveLimit {
    /// A limit at its initial value with nothing in flight.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming the setting (`governor.concurrency.…`) when a
    /// bound is zero, `min > max`, `max` is above 100 000, `initial` is
    /// outside the bounds, or a factor is outside its range.
    pub fn new(config: ConcurrencyConfig) -> Result<AdaptiveLimit, ConfigError> {
        LimitSettings::validate(&config).map(AdaptiveLimit::from_settings)
    }

    pub(super) fn from_settings(settings: LimitSettings) -> AdaptiveLimit {
        AdaptiveLimit {
            limit: settings.initial,
            settings,
            in_flight: 0,
            epoch: 0,
            successes: 0,
            latency: LatencyTrack {
                ewma: 0.0,
                samples: 0,
                interval_start: Instant::ORIGIN,
                current_min: f64::INFINITY,
                previous_min: f64::INFINITY,
            },
        }
    }

    /// The current limit.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Slots held.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// The lower bound.
    pub fn min(&self) -> u32 {
        self.settings.min
    }

    /// The upper bound: the ceiling the limit never passes.
    pub fn max(&self) -> u32 {
        self.settings.max
    }

    /// Moves the ceiling to `max` (at least the lower bound): a node's part
    /// of a group's `max_concurrency` shared across a cluster changed. A
    /// limit at the old ceiling follows it (the operator's ceiling is where
    /// a healthy backend runs); one below stays where the evidence put it,
    /// unless the new ceiling is lower still. Slots held above the new
    /// limit stay held until released.
    pub fn reshape_ceiling(&mut self, max: u32) {
        let max = max.max(self.settings.min);
        if self.limit >= self.settings.max || self.limit > max {
            self.limit = max;
        }
        self.settings.max = max;
        self.settings.initial = self.settings.initial.min(max);
    }

    /// The current epoch; it increases with every shrink.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Whether a slot is free.
    pub fn has_room(&self) -> bool {
        self.in_flight < self.limit
    }

    /// The smoothed latency, once a sample was seen.
    pub fn smoothed_latency(&self) -> Option<Duration> {
        (self.latency.samples > 0).then(|| nanos(self.latency.ewma))
    }

    /// The baseline the latency trigger compares with, once warmed up.
    pub fn baseline(&self) -> Option<Duration> {
        self.latency.baseline(self.settings.warmup).map(nanos)
    }

    /// Takes a slot at `now` if one is free.
    ///
    /// # Errors
    ///
    /// [`AtLimit`] when every slot under the limit is held; wait for a
    /// release.
    pub fn try_acquire(&mut self, now: Instant) -> Result<LimitPermit, AtLimit> {
        if !self.has_room() {
            return Err(AtLimit::of(self));
        }
        self.in_flight += 1;
        Ok(LimitPermit {
            epoch: self.epoch,
            acquired_at: now,
        })
    }

    /// Releases a slot at `now` with how its call ended, and adjusts the
    /// limit.
    pub fn release(
        &mut self,
        permit: LimitPermit,
        completion: Completion,
        now: Instant,
    ) -> Adjustment {
        let in_use = self.in_flight;
        self.in_flight = self.in_flight.saturating_sub(1);
        match completion {
            Completion::Ignored => Adjustment::Unchanged,
            Completion::Overloaded => self.shrink(&permit, ShrinkReason::Overloaded),
            Completion::Succeeded { output_tokens } => {
                let latency = now.saturating_duration_since(permit.acquired_at);
                let per = output_tokens.unwrap_or(1).max(1);
                let sample = latency.as_nanos() as f64 / per as f64;
                self.latency
                    .record(sample, self.settings.smoothing, self.settings.interval, now);
                let ewma = self.latency.ewma;
                match self.latency.baseline(self.settings.warmup) {
                    Some(baseline) if ewma > baseline * self.settings.tolerance => {
                        let reason = ShrinkReason::LatencyRose {
                            ewma: nanos(ewma),
                            baseline: nanos(baseline),
                            tolerance: self.settings.tolerance,
                        };
                        self.shrink(&permit, reason)
                    }
                    _ => self.grow(in_use),
                }
            }
        }
    }

    fn shrink(&mut self, permit: &LimitPermit, reason: ShrinkReason) -> Adjustment {
        if permit.epoch != self.epoch || self.limit <= self.settings.min {
            return Adjustment::Unchanged;
        }
        let old = self.limit;
        // ⌊old × backoff⌋ is below old for backoff < 1; the min guards the
        // float rounding up at large limits.
        let scaled = (f64::from(old) * self.settings.backoff).floor() as u32;
        let new = scaled.min(old - 1).max(self.settings.min);
        self.limit = new;
        self.epoch = self.epoch.wrapping_add(1);
        self.successes = 0;
        Adjustment::Shrunk { old, new, reason }
    }

    fn grow(&mut self, in_use: u32) -> Adjustment {
        if self.limit >= self.settings.max || u64::from(in_use) * 2 < u64::from(self.limit) {
            return Adjustment::Unchanged;
        }
        self.successes += 1;
        if self.successes < self.limit {
            return Adjustment::Unchanged;
        }
        let old = self.limit;
        self.limit = old + 1;
        self.successes = 0;
        Adjustment::Grew {
            old,
            new: self.limit,
        }
    }
}

impl LatencyTrack {
    fn record(&mut self, sample: f64, smoothing: f64, interval: Duration, now: Instant) {
        if self.samples == 0 {
            self.ewma = sample;
            self.interval_start = now;
            self.current_min = sample;
        } else {
            self.ewma += smoothing * (sample - self.ewma);
            let elapsed = now.saturating_duration_since(self.interval_start);
            if elapsed >= interval {
                self.previous_min = if elapsed < interval.saturating_mul(2) {
                    self.current_min
                } else {
                    f64::INFINITY
                };
                self.current_min = self.ewma;
                self.interval_start = now;
            } else {
                self.current_min = self.current_min.min(self.ewma);
            }
        }
        self.samples = self.samples.saturating_add(1);
    }

    fn baseline(&self, warmup: u32) -> Option<f64> {
        (self.samples >= u64::from(warmup)).then(|| self.current_min.min(self.previous_min))
    }
}

fn nanos(value: f64) -> Duration {
    // Latencies are finite and non-negative; the cast saturates otherwise.
    Duration::from_nanos(value.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }

    fn limit_with(edit: impl FnOnce(&mut ConcurrencyConfig)) -> AdaptiveLimit {
        let mut config = ConcurrencyConfig::default();
        edit(&mut config);
        AdaptiveLimit::new(config).unwrap()
    }

    /// One call taken at `start` and answered after `latency_ms`.
    fn call(limit: &mut AdaptiveLimit, start: u64, latency_ms: u64) -> Adjustment {
        let permit = limit.try_acquire(at(start)).unwrap();
        limit.release(permit, Completion::SUCCEEDED, at(start + latency_ms))
    }

    #[test]
    fn new_limit_starts_at_eight_within_one_and_sixty_four() {
        let limit = AdaptiveLimit::new(ConcurrencyConfig::default()).unwrap();
        assert_eq!((limit.min(), limit.limit(), limit.max()), (1, 8, 64));
        assert_eq!(limit.in_flight(), 0);
        assert_eq!(limit.baseline(), None);
    }

    #[test]
    fn try_acquire_at_limit_refuses_until_a_release() {
        let mut limit = limit_with(|c| c.initial = Some(2));
        let a = limit.try_acquire(at(0)).unwrap();
        let _b = limit.try_acquire(at(0)).unwrap();
        assert_eq!(
            limit.try_acquire(at(0)).unwrap_err(),
            AtLimit {
                limit: 2,
                in_flight: 2
            }
        );
        let _ = limit.release(a, Completion::Ignored, at(1));
        assert!(limit.try_acquire(at(1)).is_ok());
    }

    #[test]
    fn overload_shrinks_by_the_backoff_factor() {
        let mut limit = limit_with(|c| c.initial = Some(40));
        let permit = limit.try_acquire(at(0)).unwrap();
        assert_eq!(
            limit.release(permit, Completion::Overloaded, at(1)),
            Adjustment::Shrunk {
                old: 40,
                new: 36,
                reason: ShrinkReason::Overloaded
            }
        );
        assert_eq!(limit.epoch(), 1);
    }

    #[test]
    fn overload_at_small_limits_still_shrinks_by_at_least_one() {
        let mut limit = limit_with(|c| c.initial = Some(3));
        let permit = limit.try_acquire(at(0)).unwrap();
        let adjustment = limit.release(permit, Completion::Overloaded, at(1));
        assert!(matches!(
            adjustment,
            Adjustment::Shrunk { old: 3, new: 2, .. }
        ));
    }

    #[test]
    fn overload_at_min_leaves_the_limit_and_epoch() {
        let mut limit = limit_with(|c| {
            c.initial = Some(2);
            c.min = 2;
        });
        let permit = limit.try_acquire(at(0)).unwrap();
        assert_eq!(
            limit.release(permit, Completion::Overloaded, at(1)),
            Adjustment::Unchanged
        );
        assert_eq!((limit.limit(), limit.epoch()), (2, 0));
    }

    #[test]
    fn overloads_from_one_epoch_shrink_once() {
        let mut limit = limit_with(|c| c.initial = Some(10));
        let permits: Vec<_> = (0..5).map(|_| limit.try_acquire(at(0)).unwrap()).collect();
        let adjustments: Vec<_> = permits
            .into_iter()
            .map(|p| limit.release(p, Completion::Overloaded, at(1)))
            .collect();
        assert!(adjustments[0].is_change());
        assert!(adjustments[1..].iter().all(|a| !a.is_change()));
        assert_eq!(limit.limit(), 9);
        // A slot taken after the shrink may shrink again.
        let permit = limit.try_acquire(at(2)).unwrap();
        assert!(matches!(
            limit.release(permit, Completion::Overloaded, at(3)),
            Adjustment::Shrunk { old: 9, new: 8, .. }
        ));
    }

    #[test]
    fn ignored_outcome_frees_the_slot_and_changes_nothing() {
        let mut limit = AdaptiveLimit::new(ConcurrencyConfig::default()).unwrap();
        let before = limit.clone();
        let permit = limit.try_acquire(at(0)).unwrap();
        assert_eq!(
            limit.release(permit, Completion::Ignored, at(9)),
            Adjustment::Unchanged
        );
        assert_eq!(limit, before);
    }

    #[test]
    fn successes_at_the_limit_grow_it_by_one_per_round() {
        let mut limit = limit_with(|c| c.initial = Some(2));
        // Two in flight (the limit in use): two successes grow it to 3.
        let a = limit.try_acquire(at(0)).unwrap();
        let b = limit.try_acquire(at(0)).unwrap();
        assert_eq!(
            limit.release(a, Completion::SUCCEEDED, at(10)),
            Adjustment::Unchanged
        );
        assert_eq!(
            limit.release(b, Completion::SUCCEEDED, at(10)),
            Adjustment::Grew { old: 2, new: 3 }
        );
    }

    #[test]
    fn successes_while_the_limit_is_mostly_idle_do_not_grow_it() {
        let mut limit = limit_with(|c| c.initial = Some(8));
        for i in 0..100 {
            // One call at a time under a limit of 8: 1 × 2 < 8.
            assert_eq!(call(&mut limit, i * 10, 5), Adjustment::Unchanged);
        }
        assert_eq!(limit.limit(), 8);
    }

    #[test]
    fn growth_stops_at_max() {
        let mut limit = limit_with(|c| {
            c.initial = Some(1);
            c.max = 2;
        });
        assert_eq!(call(&mut limit, 0, 5), Adjustment::Grew { old: 1, new: 2 });
        for i in 1..50 {
            let a = limit.try_acquire(at(i * 10)).unwrap();
            let b = limit.try_acquire(at(i * 10)).unwrap();
            let _ = limit.release(a, Completion::SUCCEEDED, at(i * 10 + 5));
            let _ = limit.release(b, Completion::SUCCEEDED, at(i * 10 + 5));
        }
        assert_eq!(limit.limit(), 2);
    }

    #[test]
    fn latency_rising_past_tolerance_shrinks_after_warmup() {
        let mut limit = limit_with(|c| {
            c.initial = Some(4);
            c.warmup_samples = 3;
            c.smoothing = 1.0;
        });
        for i in 0..3 {
            let _ = call(&mut limit, i * 100, 10);
        }
        assert_eq!(limit.baseline(), Some(Duration::from_millis(10)));
        // 16 ms is past 1.5 × 10 ms.
        let adjustment = call(&mut limit, 400, 16);
        assert_eq!(
            adjustment,
            Adjustment::Shrunk {
                old: 4,
                new: 3,
                reason: ShrinkReason::LatencyRose {
                    ewma: Duration::from_millis(16),
                    baseline: Duration::from_millis(10),
                    tolerance: 1.5
                }
            }
        );
    }

    #[test]
    fn latency_trigger_is_off_during_warmup() {
        let mut limit = limit_with(|c| {
            c.warmup_samples = 5;
            c.smoothing = 1.0;
        });
        let _ = call(&mut limit, 0, 10);
        assert_eq!(call(&mut limit, 100, 500), Adjustment::Unchanged);
        assert_eq!(limit.limit(), 8);
        assert_eq!(limit.baseline(), None);
    }

    #[test]
    fn latency_within_tolerance_leaves_the_limit() {
        let mut limit = limit_with(|c| {
            c.warmup_samples = 1;
            c.smoothing = 1.0;
        });
        let _ = call(&mut limit, 0, 10);
        assert_eq!(call(&mut limit, 100, 15), Adjustment::Unchanged);
    }

    #[test]
    fn ewma_moves_by_the_smoothing_share() {
        let mut limit = limit_with(|c| c.smoothing = 0.5);
        let _ = call(&mut limit, 0, 10);
        let _ = call(&mut limit, 100, 20);
        assert_eq!(limit.smoothed_latency(), Some(Duration::from_millis(15)));
    }

    #[test]
    fn model_latency_is_normalised_by_output_tokens() {
        let mut limit = limit_with(|c| {
            c.warmup_samples = 1;
            c.smoothing = 1.0;
        });
        let p = limit.try_acquire(at(0)).unwrap();
        let _ = limit.release(p, Completion::generated(100), at(1000));
        assert_eq!(limit.smoothed_latency(), Some(Duration::from_millis(10)));
        // Ten times longer for ten times the tokens is the same speed.
        let p = limit.try_acquire(at(2000)).unwrap();
        assert_eq!(
            limit.release(p, Completion::generated(1000), at(12_000)),
            Adjustment::Unchanged
        );
        // Zero tokens count as one, never a division by zero.
        let p = limit.try_acquire(at(20_000)).unwrap();
        let _ = limit.release(p, Completion::generated(0), at(20_010));
        assert_eq!(limit.smoothed_latency(), Some(Duration::from_millis(10)));
    }

    #[test]
    fn baseline_adopts_a_permanently_slower_backend_within_two_intervals() {
        let mut limit = limit_with(|c| {
            c.warmup_samples = 1;
            c.smoothing = 1.0;
            c.latency_tolerance = 100.0;
            c.baseline_interval = Duration::from_secs(10);
        });
        let _ = call(&mut limit, 0, 10);
        assert_eq!(limit.baseline(), Some(Duration::from_millis(10)));
        // From now on the backend takes 50 ms.
        for s in 1..=25 {
            let _ = call(&mut limit, s * 1000, 50);
        }
        assert_eq!(limit.baseline(), Some(Duration::from_millis(50)));
    }

    #[test]
    fn baseline_falls_at_once_for_a_faster_backend() {
        let mut limit = limit_with(|c| {
            c.warmup_samples = 1;
            c.smoothing = 1.0;
        });
        let _ = call(&mut limit, 0, 50);
        let _ = call(&mut limit, 100, 10);
        assert_eq!(limit.baseline(), Some(Duration::from_millis(10)));
    }

    #[test]
    fn baseline_after_a_quiet_gap_forgets_old_intervals() {
        let mut limit = limit_with(|c| {
            c.warmup_samples = 1;
            c.smoothing = 1.0;
            c.latency_tolerance = 100.0;
            c.baseline_interval = Duration::from_secs(10);
        });
        let _ = call(&mut limit, 0, 10);
        let _ = call(&mut limit, 30_000, 40);
        assert_eq!(limit.baseline(), Some(Duration::from_millis(40)));
    }

    #[test]
    fn completion_from_failure_reads_overload_signals() {
        for c in Category::ALL {
            let expected = matches!(
                c,
                Category::RateLimited | Category::Overloaded | Category::Timeout
            );
            assert_eq!(
                Completion::from_failure(c) == Completion::Overloaded,
                expected,
                "{c:?}"
            );
        }
    }

    #[test]
    fn adjustment_serializes_old_new_and_why() {
        let shrunk = Adjustment::Shrunk {
            old: 8,
            new: 7,
            reason: ShrinkReason::LatencyRose {
                ewma: Duration::from_millis(30),
                baseline: Duration::from_millis(10),
                tolerance: 1.5,
            },
        };
        let json = serde_json::to_value(&shrunk).unwrap();
        assert_eq!(json["adjustment"], "shrunk");
        assert_eq!(json["old"], 8);
        assert_eq!(json["new"], 7);
        assert_eq!(json["reason"]["kind"], "latency_rose");
        assert_eq!(json["reason"]["baseline"], "10ms");
        assert!(shrunk.to_string().contains("shrank from 8 to 7"));
    }

    /// Every kind of adjustment, reached through the public transitions:
    /// fails when a variant is added without a scenario that reaches it.
    #[test]
    fn transition_coverage() {
        fn kind(a: &Adjustment) -> &'static str {
            match a {
                Adjustment::Unchanged => "unchanged",
                Adjustment::Grew { .. } => "grew",
                Adjustment::Shrunk {
                    reason: ShrinkReason::Overloaded,
                    ..
                } => "shrunk_overloaded",
                Adjustment::Shrunk {
                    reason: ShrinkReason::LatencyRose { .. },
                    ..
                } => "shrunk_latency",
            }
        }
        let all = ["unchanged", "grew", "shrunk_overloaded", "shrunk_latency"];
        let mut seen = std::collections::BTreeSet::new();
        let mut limit = limit_with(|c| {
            c.initial = Some(4);
            c.warmup_samples = 1;
            c.smoothing = 1.0;
        });
        // One call at a time under 4: no growth.
        seen.insert(kind(&call(&mut limit, 0, 10)));
        let p = limit.try_acquire(at(100)).unwrap();
        seen.insert(kind(&limit.release(p, Completion::Overloaded, at(101))));
        // 100 ms against a 10 ms baseline: 3 → 2.
        seen.insert(kind(&call(&mut limit, 200, 100)));
        // Back to 10 ms; one of two slots is half the limit: 2 → 3.
        let _ = call(&mut limit, 300, 10);
        seen.insert(kind(&call(&mut limit, 400, 10)));
        assert_eq!(limit.limit(), 3);
        assert_eq!(seen, all.into_iter().collect());
    }
}

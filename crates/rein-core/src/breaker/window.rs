//! The sliding window of a closed arm: counted outcomes in time buckets.

use std::time::Duration;

use super::constants::WINDOW_BUCKETS;
use crate::clock::Instant;

/// Counts of successes and failures over the last `window`, in
/// [`WINDOW_BUCKETS`] buckets of `window / WINDOW_BUCKETS` each.
///
/// # Why buckets
///
/// Keeping every outcome's timestamp would allocate per call and grow with
/// throughput; a fixed array of buckets costs 160 bytes per arm, never
/// allocates, and answers "failures over the window" in constant time. The
/// price is granularity: an outcome counts for between `window × 9/10` and
/// `window` after it happened (it leaves with its bucket), never longer.
/// Buckets are at least 1 ns wide, so a window under 10 ns acts as 10 ns.
///
/// Buckets are aligned to the clock's origin, so the window is a pure
/// function of the recorded outcomes and `now`. Time that goes backwards
/// is treated as the latest time seen, never as a reason to panic.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SlidingWindow {
    bucket_nanos: u128,
    latest: u64,
    buckets: [Bucket; WINDOW_BUCKETS],
}

#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Bucket {
    /// Which bucket of the time line this slot holds (time / bucket width).
    index: u64,
    successes: u32,
    failures: u32,
}

/// The window's totals at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Totals {
    pub(super) failures: u32,
    pub(super) total: u32,
}

impl SlidingWindow {
    /// An empty window of length `window` (positive, validated by config).
    pub(super) fn new(window: Duration) -> Self {
        // WINDOW_BUCKETS is a small constant; the cast is lossless.
        let bucket_nanos = (window.as_nanos() / WINDOW_BUCKETS as u128).max(1);
        SlidingWindow {
            bucket_nanos,
            latest: 0,
            buckets: [Bucket::default(); WINDOW_BUCKETS],
        }
    }

    /// Records one counted outcome at `now`.
    pub(super) fn record(&mut self, now: Instant, failed: bool) {
        let index = self.index(now);
        self.latest = index;
        let slot = &mut self.buckets[slot_of(index)];
        if slot.index != index {
            *slot = Bucket {
                index,
                ..Bucket::default()
            };
        }
        if failed {
            slot.failures = slot.failures.saturating_add(1);
        } else {
            slot.successes = slot.successes.saturating_add(1);
        }
    }

    /// Failures and counted outcomes within the window ending at `now`.
    pub(super) fn totals(&self, now: Instant) -> Totals {
        let index = self.index(now);
        let mut totals = Totals {
            failures: 0,
            total: 0,
        };
        for bucket in &self.buckets {
            let live = bucket.index <= index && index - bucket.index < WINDOW_BUCKETS as u64;
            if live {
                totals.failures = totals.failures.saturating_add(bucket.failures);
                totals.total = totals
                    .total
                    .saturating_add(bucket.failures)
                    .saturating_add(bucket.successes);
            }
        }
        totals
    }

    fn index(&self, now: Instant) -> u64 {
        let index =
            u64::try_from(now.since_origin().as_nanos() / self.bucket_nanos).unwrap_or(u64::MAX);
        index.max(self.latest)
    }
}

fn slot_of(index: u64) -> usize {
    // The remainder is below WINDOW_BUCKETS, so it fits any usize.
    (index % WINDOW_BUCKETS as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: u64) -> Instant {
        Instant::from_origin(Duration::from_secs(secs))
    }

    #[test]
    fn totals_count_outcomes_inside_the_window() {
        let mut window = SlidingWindow::new(Duration::from_secs(10));
        window.record(at(1), true);
        window.record(at(2), false);
        window.record(at(2), true);
        assert_eq!(
            window.totals(at(3)),
            Totals {
                failures: 2,
                total: 3
            }
        );
    }

    #[test]
    fn totals_after_the_window_has_passed_forget_old_outcomes() {
        let mut window = SlidingWindow::new(Duration::from_secs(10));
        window.record(at(1), true);
        window.record(at(8), true);
        assert_eq!(window.totals(at(10)).failures, 2);
        // Bucket 1 ([1 s, 2 s)) leaves the window at 11 s.
        assert_eq!(window.totals(at(11)).failures, 1);
        assert_eq!(window.totals(at(30)).total, 0);
    }

    #[test]
    fn record_reuses_a_slot_after_a_full_turn() {
        let mut window = SlidingWindow::new(Duration::from_secs(10));
        window.record(at(1), true);
        window.record(at(11), false);
        assert_eq!(
            window.totals(at(11)),
            Totals {
                failures: 0,
                total: 1
            }
        );
    }

    #[test]
    fn time_going_backwards_is_read_as_the_latest_time() {
        let mut window = SlidingWindow::new(Duration::from_secs(10));
        window.record(at(50), true);
        window.record(at(5), true);
        assert_eq!(window.totals(at(0)).failures, 2);
    }

    #[test]
    fn tiny_window_uses_one_nanosecond_buckets() {
        let mut window = SlidingWindow::new(Duration::from_nanos(3));
        window.record(Instant::ORIGIN, true);
        assert_eq!(window.totals(Instant::ORIGIN).failures, 1);
        assert_eq!(
            window
                .totals(Instant::from_origin(Duration::from_nanos(20)))
                .failures,
            0
        );
    }
}

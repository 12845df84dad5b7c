//! When a webhook delivery is tried again, and when it is given up.

use std::time::Duration;

use rand::Rng;

use crate::timestamp::Timestamp;

/// How long an event is tried when a webhook sets no `max_age`.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(24 * 3600);

/// How long one POST may take when a webhook sets no `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The ceiling of the delay after the first failed attempt; it doubles
/// with each further one.
pub const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The highest ceiling: a receiver that was down for a day is tried at
/// least every ten minutes once it is back.
pub const MAX_RETRY: Duration = Duration::from_secs(600);

/// The retry schedule of one webhook's deliveries.
///
/// # Why full jitter, and why a maximum age instead of a count
///
/// After a receiver's outage every pending delivery fails at about the
/// same time; delays drawn uniformly from `[0, ceiling]` spread their next
/// attempts over the whole window instead of sending them back together
/// (the same reasoning as the tool retries, `retry::decision`). An
/// attempt count says nothing about how stale an event is; an age does: an
/// `approval_requested` a day old is not worth sending, whatever the
/// number of attempts it took to learn that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliverySchedule {
    /// How long after the event it may still be delivered.
    pub max_age: Duration,
    /// The ceiling after the first failure.
    pub first: Duration,
    /// The highest ceiling.
    pub cap: Duration,
}

impl DeliverySchedule {
    /// The schedule with `max_age` and rein's ceilings ([`FIRST_RETRY`]
    /// doubling up to [`MAX_RETRY`]).
    pub fn new(max_age: Duration) -> Self {
        DeliverySchedule {
            max_age,
            first: FIRST_RETRY,
            cap: MAX_RETRY,
        }
    }

    /// The ceiling of the delay after `failed` failed attempts (at least 1).
    pub fn ceiling(&self, failed: u32) -> Duration {
        let doublings = failed.saturating_sub(1).min(31);
        self.first.saturating_mul(1u32 << doublings).min(self.cap)
    }

    /// When to try again after `failed` failed attempts of an event
    /// created at `created`, the last one ending at `now`: a uniform draw
    /// in `[now, now + ceiling]`; `None` when that is past the event's
    /// maximum age (the delivery is given up).
    pub fn next_attempt<R: Rng + ?Sized>(
        &self,
        failed: u32,
        created: Timestamp,
        now: Timestamp,
        rng: &mut R,
    ) -> Option<Timestamp> {
        let ceiling = self.ceiling(failed);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        let at = now.saturating_add(Duration::from_millis(rng.random_range(0..=millis)));
        self.is_live(created, at).then_some(at)
    }

    /// Whether an event created at `created` may still be delivered at `at`.
    pub fn is_live(&self, created: Timestamp, at: Timestamp) -> bool {
        at.saturating_duration_since(created) <= self.max_age
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn ms(v: u64) -> Timestamp {
        Timestamp::from_millis(v)
    }

    #[test]
    fn the_ceiling_doubles_from_the_first_retry_up_to_the_cap() {
        let s = DeliverySchedule::new(DEFAULT_MAX_AGE);
        assert_eq!(s.ceiling(1), Duration::from_secs(1));
        assert_eq!(s.ceiling(2), Duration::from_secs(2));
        assert_eq!(s.ceiling(5), Duration::from_secs(16));
        assert_eq!(s.ceiling(10), Duration::from_secs(512));
        assert_eq!(s.ceiling(11), MAX_RETRY);
        assert_eq!(s.ceiling(u32::MAX), MAX_RETRY);
    }

    #[test]
    fn delays_are_spread_over_the_whole_window_not_bunched_at_its_top() {
        let s = DeliverySchedule::new(DEFAULT_MAX_AGE);
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<u64> = (0..1_000)
            .filter_map(|_| s.next_attempt(4, ms(0), ms(10_000), &mut rng))
            .map(|at| at.as_millis() - 10_000)
            .collect();
        assert_eq!(delays.len(), 1_000);
        assert!(delays.iter().all(|&d| d <= 8_000), "{delays:?}");
        assert!(delays.iter().any(|&d| d < 1_000));
        assert!(delays.iter().any(|&d| d > 7_000));
    }

    #[test]
    fn a_delivery_is_given_up_once_its_next_attempt_would_pass_the_maximum_age() {
        let s = DeliverySchedule::new(Duration::from_secs(60));
        let mut rng = StdRng::seed_from_u64(1);
        // Past the age already: given up whatever the draw.
        assert_eq!(s.next_attempt(1, ms(0), ms(61_000), &mut rng), None);
        // Well inside it: always a time, never before now.
        for _ in 0..100 {
            let at = s.next_attempt(1, ms(0), ms(1_000), &mut rng);
            assert!(matches!(at, Some(at) if at >= ms(1_000) && at <= ms(2_000)));
        }
        assert!(s.is_live(ms(0), ms(60_000)));
        assert!(!s.is_live(ms(0), ms(60_001)));
    }
}

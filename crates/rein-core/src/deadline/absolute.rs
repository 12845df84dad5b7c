use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::split::split;
use crate::clock::Instant;
use crate::config::{Ratio, Weight};

/// The absolute moment by which a run, or a part of it, must be finished.
///
/// A `Deadline` only ever shrinks as it is handed down: every derived
/// deadline is at or before its parent's. There is no way to extend one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Deadline {
    at: Instant,
}

/// Work refused because it cannot finish before the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deadline cannot cover the work: it needs {need:?} but {remaining:?} remain")]
pub struct DeadlineExceeded {
    /// What the work needed.
    pub need: Duration,
    /// What was left.
    pub remaining: Duration,
}

impl Deadline {
    /// The deadline `within` from `now`.
    pub fn after(now: Instant, within: Duration) -> Deadline {
        Deadline { at: now + within }
    }

    /// The deadline at the instant `at`.
    pub fn at(at: Instant) -> Deadline {
        Deadline { at }
    }

    /// The instant of the deadline.
    pub fn instant(&self) -> Instant {
        self.at
    }

    /// What is left at `now`; zero once the deadline has passed.
    pub fn remaining(&self, now: Instant) -> Duration {
        self.at.saturating_duration_since(now)
    }

    /// Whether nothing is left at `now`.
    pub fn is_expired(&self, now: Instant) -> bool {
        self.remaining(now).is_zero()
    }

    /// Refuses to start work that needs `need` when less remains — launching
    /// a call destined to time out wastes a connection, occupies downstream
    /// quota and may leave half a side effect behind.
    ///
    /// # Errors
    ///
    /// [`DeadlineExceeded`] when the deadline has passed or less than `need`
    /// remains.
    pub fn check(&self, need: Duration, now: Instant) -> Result<(), DeadlineExceeded> {
        let remaining = self.remaining(now);
        if remaining.is_zero() || remaining < need {
            Err(DeadlineExceeded { need, remaining })
        } else {
            Ok(())
        }
    }

    /// The deadline of the next stage of a serial chain: the same moment, so
    /// the stage sees everything earlier stages left.
    pub fn serial(&self) -> Deadline {
        *self
    }

    /// This deadline, or `cap` from `now` if that is sooner.
    pub fn capped(&self, now: Instant, cap: Duration) -> Deadline {
        Deadline {
            at: self.at.min(now + cap),
        }
    }

    /// The deadlines of parallel branches: the remainder at `now` divided by
    /// `weights`, each capped at `cap`. The branches' allowances sum to at
    /// most the remainder.
    pub fn parallel(
        &self,
        now: Instant,
        weights: &[Weight],
        cap: Option<Duration>,
    ) -> Vec<Deadline> {
        let remaining = nanos(self.remaining(now));
        split(remaining, weights, cap.map(nanos))
            .into_iter()
            .map(|share| Deadline::after(now, Duration::from_nanos(share)).min(*self))
            .collect()
    }

    /// The deadline of a nested agent: `ratio` of the remainder at `now`,
    /// capped at `cap`.
    pub fn nested(&self, now: Instant, ratio: Ratio, cap: Option<Duration>) -> Deadline {
        let share = ratio.of_duration(self.remaining(now));
        let share = cap.map_or(share, |c| share.min(c));
        // After expiry, `now + 0` is later than the deadline itself.
        Deadline::after(now, share).min(*self)
    }
}

impl fmt::Display for Deadline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "deadline at {}", self.at)
    }
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(ms: u64) -> Instant {
        Instant::from_origin(Duration::from_millis(ms))
    }
    fn ms(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn remaining_decays_with_time_and_stops_at_zero() {
        let d = Deadline::after(t(0), ms(1000));
        assert_eq!(d.remaining(t(400)), ms(600));
        assert_eq!(d.remaining(t(1000)), Duration::ZERO);
        assert_eq!(d.remaining(t(5000)), Duration::ZERO);
        assert!(d.is_expired(t(1000)));
    }

    #[test]
    fn check_refuses_work_that_cannot_finish_in_time() {
        let d = Deadline::after(t(0), ms(1000));
        assert!(d.check(ms(600), t(400)).is_ok());
        assert_eq!(
            d.check(ms(601), t(400)),
            Err(DeadlineExceeded {
                need: ms(601),
                remaining: ms(600)
            })
        );
        assert!(
            d.check(Duration::ZERO, t(1000)).is_err(),
            "expired refuses even zero work"
        );
    }

    #[test]
    fn serial_stage_sees_everything_left() {
        let d = Deadline::after(t(0), ms(1000));
        // A fast first stage leaves more for the second.
        assert_eq!(d.serial().remaining(t(100)), ms(900));
    }

    #[test]
    fn parallel_divides_the_remainder_by_weight() {
        let d = Deadline::after(t(0), ms(1000));
        let w = [
            Weight::new("w", 1.0).unwrap(),
            Weight::new("w", 3.0).unwrap(),
        ];
        let kids = d.parallel(t(200), &w, None);
        assert_eq!(kids[0].remaining(t(200)), ms(200));
        assert_eq!(kids[1].remaining(t(200)), ms(600));
        let capped = d.parallel(t(200), &w, Some(ms(300)));
        assert_eq!(capped[1].remaining(t(200)), ms(300));
    }

    #[test]
    fn nested_gets_ratio_of_remainder_with_cap() {
        let d = Deadline::after(t(0), ms(1000));
        let half = Ratio::new("r", 0.5).unwrap();
        assert_eq!(d.nested(t(0), half, None).remaining(t(0)), ms(500));
        assert_eq!(d.nested(t(0), half, Some(ms(100))).remaining(t(0)), ms(100));
        assert!(d.nested(t(0), Ratio::ONE, None) <= d);
    }

    #[test]
    fn children_of_an_expired_deadline_are_not_later_than_it() {
        let d = Deadline::after(t(0), ms(10));
        let w = [Weight::new("w", 1.0).unwrap()];
        assert_eq!(d.parallel(t(50), &w, None), vec![d]);
        assert_eq!(d.nested(t(50), Ratio::ONE, None), d);
        assert_eq!(d.capped(t(50), ms(1)), d);
    }

    #[test]
    fn capped_never_extends() {
        let d = Deadline::after(t(0), ms(1000));
        assert_eq!(d.capped(t(0), ms(5000)), d);
        assert_eq!(d.capped(t(0), ms(10)).remaining(t(0)), ms(10));
    }
}

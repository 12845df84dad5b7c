//! Time as an input: the [`Clock`] trait, the monotonic [`Instant`] and a
//! [`ManualClock`] for tests.
//!
//! # Why
//!
//! Every policy in rein-core is a state machine over time — deadlines,
//! break durations, sliding windows — and a policy that reads the system
//! clock cannot be tested without sleeping. So rein-core never reads the
//! clock: transitions take `now` as an argument, and the async shell reads
//! a [`Clock`] once per decision (the seatbelt pattern). The real clock lives
//! in `rein-engine`; tests use [`ManualClock`] and `advance` it.

use std::fmt;
use std::ops::{Add, Sub};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use crate::Timestamp;

/// A point on a monotonic time line, measured from an origin the clock chose.
///
/// # Why not `std::time::Instant`
///
/// A std `Instant` cannot be constructed at an arbitrary value, so a manual
/// clock could not produce one and property tests could not explore the time
/// line. Two `Instant`s are comparable only when they come from the same
/// clock; across processes rein carries remaining durations instead
/// (`Rein-Deadline-Ms`), never instants.
///
/// Arithmetic saturates: adding to the far future stays in the far future
/// rather than panicking, and subtracting past the origin yields zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Instant(Duration);

impl Instant {
    /// The clock's origin.
    pub const ORIGIN: Instant = Instant(Duration::ZERO);

    /// An instant `since` after the clock's origin.
    pub const fn from_origin(since: Duration) -> Self {
        Instant(since)
    }

    /// The time elapsed from the origin to this instant.
    pub const fn since_origin(self) -> Duration {
        self.0
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Instant) -> Duration {
        self.0.saturating_sub(earlier.0)
    }
}

impl Add<Duration> for Instant {
    type Output = Instant;

    fn add(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_add(rhs))
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;

    fn sub(self, rhs: Duration) -> Instant {
        Instant(self.0.saturating_sub(rhs))
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "t+{:?}", self.0)
    }
}

/// A source of the current time.
///
/// `now` is monotonic and drives every deadline and window; `system_now` is
/// wall-clock time, needed only to interpret absolute dates that arrive from
/// outside (an HTTP-date `Retry-After`).
pub trait Clock: Send + Sync {
    /// The current monotonic instant.
    fn now(&self) -> Instant;

    /// The current wall-clock time.
    fn system_now(&self) -> SystemTime;

    /// The current wall-clock time as the store records it. `now` stays the
    /// monotonic [`Instant`]: deadlines must not jump with the wall clock,
    /// while stored times must be comparable across processes.
    fn timestamp(&self) -> Timestamp {
        Timestamp::from_system_time(self.system_now())
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Instant {
        (**self).now()
    }

    fn system_now(&self) -> SystemTime {
        (**self).system_now()
    }
}

impl<C: Clock + ?Sized> Clock for &C {
    fn now(&self) -> Instant {
        (**self).now()
    }

    fn system_now(&self) -> SystemTime {
        (**self).system_now()
    }
}

/// A clock that moves only when told to.
///
/// Clones share one time line, so a test can hand a clone to the code under
/// test and `advance` its own copy. The wall clock starts at a fixed date
/// (2026-01-01T00:00:00Z unless set) and moves with the monotonic one.
#[derive(Debug, Clone)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
    wall_origin: SystemTime,
}

/// The wall-clock time of a [`ManualClock`]'s origin: 2026-01-01T00:00:00Z.
pub const MANUAL_CLOCK_WALL_ORIGIN_UNIX_SECS: u64 = 1_767_225_600;

impl ManualClock {
    /// A clock at its origin, with the default wall-clock origin.
    pub fn new() -> Self {
        Self::with_wall_origin(
            SystemTime::UNIX_EPOCH + Duration::from_secs(MANUAL_CLOCK_WALL_ORIGIN_UNIX_SECS),
        )
    }

    /// A clock at its origin whose wall clock reads `wall_origin` there.
    pub fn with_wall_origin(wall_origin: SystemTime) -> Self {
        ManualClock {
            nanos: Arc::new(AtomicU64::new(0)),
            wall_origin,
        }
    }

    /// Moves time forward by `by` (saturating at about 584 years).
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        let mut current = self.nanos.load(Ordering::Acquire);
        loop {
            let next = current.saturating_add(by);
            match self.nanos.compare_exchange_weak(
                current,
                next,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return,
                Err(actual) => current = actual,
            }
        }
    }

    /// Sets the time to `at`; time may not move backwards, so an earlier
    /// `at` leaves the clock where it is.
    pub fn set(&self, at: Instant) {
        let at = u64::try_from(at.since_origin().as_nanos()).unwrap_or(u64::MAX);
        self.nanos.fetch_max(at, Ordering::AcqRel);
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Instant {
        Instant::from_origin(Duration::from_nanos(self.nanos.load(Ordering::Acquire)))
    }

    fn system_now(&self) -> SystemTime {
        self.wall_origin + self.now().since_origin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_advance_is_shared_between_clones() {
        let clock = ManualClock::new();
        let other = clock.clone();
        clock.advance(Duration::from_millis(1500));
        assert_eq!(
            other.now(),
            Instant::from_origin(Duration::from_millis(1500))
        );
    }

    #[test]
    fn manual_clock_set_never_moves_backwards() {
        let clock = ManualClock::new();
        clock.advance(Duration::from_secs(5));
        clock.set(Instant::from_origin(Duration::from_secs(1)));
        assert_eq!(clock.now().since_origin(), Duration::from_secs(5));
        clock.set(Instant::from_origin(Duration::from_secs(9)));
        assert_eq!(clock.now().since_origin(), Duration::from_secs(9));
    }

    #[test]
    fn manual_clock_wall_time_moves_with_monotonic_time() {
        let clock = ManualClock::new();
        let before = clock.system_now();
        clock.advance(Duration::from_secs(3));
        assert_eq!(
            clock.system_now().duration_since(before).unwrap(),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn manual_clock_timestamp_is_its_wall_time() {
        let clock = ManualClock::new();
        clock.advance(Duration::from_millis(1_500));
        assert_eq!(
            clock.timestamp(),
            Timestamp::from_millis(MANUAL_CLOCK_WALL_ORIGIN_UNIX_SECS * 1_000 + 1_500)
        );
    }

    #[test]
    fn instant_arithmetic_saturates_instead_of_panicking() {
        let far = Instant::from_origin(Duration::MAX);
        assert_eq!(far + Duration::from_secs(1), far);
        assert_eq!(Instant::ORIGIN - Duration::from_secs(1), Instant::ORIGIN);
        assert_eq!(
            Instant::ORIGIN.saturating_duration_since(far),
            Duration::ZERO
        );
    }
}

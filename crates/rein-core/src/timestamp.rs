//! Wall-clock points in time as they are stored: [`Timestamp`].
//!
//! # Why a newtype
//!
//! The store records when things happened and until when they hold —
//! a run's creation, a lease's expiry, an idempotency record's holder
//! window — as milliseconds since the Unix epoch. As bare `u64`s those are
//! indistinguishable from durations and counts: `expires_at_ms - ttl_ms`
//! and `ttl_ms - expires_at_ms` both compile, and a duration passed where a
//! point in time is meant goes unnoticed. [`Timestamp`] makes "a point in
//! time" a type, so the compiler checks what a reviewer used to.
//!
//! # The rule
//!
//! A point in time is a [`Timestamp`]; a span of time is a
//! [`std::time::Duration`], or a `u64` of milliseconds where it is a stored
//! count (a checkpoint's `elapsed_ms`). Field and parameter names keep their
//! `_ms` suffix (`created_at_ms: Timestamp`): it names the stored column and
//! the JSON field, which do not change — the type says what the value is.
//!
//! # Not the monotonic clock
//!
//! [`crate::Instant`] is monotonic and local to one process; it drives
//! deadlines and windows. A `Timestamp` is wall-clock time, comparable
//! across processes sharing a store (with the clock skew that implies), and
//! comes from [`crate::Clock::timestamp`] or [`Timestamp::from_system_time`].

use std::fmt;
use std::num::ParseIntError;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

/// A wall-clock point in time: milliseconds since the Unix epoch (UTC).
///
/// It serializes as the bare integer (`#[serde(transparent)]`), so stored
/// rows, event wire forms and the HTTP API read exactly as they did when
/// this was a `u64`; [`fmt::Display`] prints the same integer, so error
/// messages and cursor tokens are unchanged too.
///
/// Arithmetic saturates: adding to the far future stays at
/// [`Timestamp::MAX`], subtracting past the epoch yields the epoch, and a
/// duration "since" a later time is zero — never a panic or a wrap.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch, 1970-01-01T00:00:00Z.
    pub const UNIX_EPOCH: Timestamp = Timestamp(0);

    /// The latest representable time (about 584 million years out): what
    /// saturating arithmetic stops at.
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// The time `ms` milliseconds after the Unix epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch: the stored form.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// The wall-clock time `at`, to the millisecond (truncated). A time
    /// before the epoch reads as the epoch, one beyond the range as
    /// [`Timestamp::MAX`]: a misset clock must not panic the store.
    pub fn from_system_time(at: SystemTime) -> Self {
        let since = at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        Timestamp(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
    }

    /// This time as a [`SystemTime`], for formatting and for comparing with
    /// the system clock.
    pub fn to_system_time(self) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_millis(self.0)
    }

    /// The time `by` after this one (sub-millisecond parts dropped), or
    /// [`Timestamp::MAX`] when that is out of range.
    pub fn saturating_add(self, by: Duration) -> Self {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(by))
    }

    /// The time `by` before this one (sub-millisecond parts dropped), or the
    /// epoch when that is before it.
    pub fn saturating_sub(self, by: Duration) -> Self {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(by))
    }

    /// The time from `earlier` to `self`, or zero when `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturating, like [`Timestamp::saturating_add`].
    fn add(self, rhs: Duration) -> Timestamp {
        self.saturating_add(rhs)
    }
}

impl AddAssign<Duration> for Timestamp {
    /// Saturating, like [`Timestamp::saturating_add`].
    fn add_assign(&mut self, rhs: Duration) {
        *self = self.saturating_add(rhs);
    }
}

impl Sub<Duration> for Timestamp {
    type Output = Timestamp;

    /// Saturating, like [`Timestamp::saturating_sub`].
    fn sub(self, rhs: Duration) -> Timestamp {
        self.saturating_sub(rhs)
    }
}

impl From<SystemTime> for Timestamp {
    fn from(at: SystemTime) -> Self {
        Timestamp::from_system_time(at)
    }
}

/// The stored integer, exactly as a `u64` printed: error messages, cursor
/// tokens and logs read as they did before the newtype. Human-facing
/// renderings (the CLI's tables) format dates themselves.
impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Parses the stored integer (milliseconds since the epoch), the inverse of
/// [`fmt::Display`].
impl FromStr for Timestamp {
    type Err = ParseIntError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        text.parse().map(Timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_at_both_ends() {
        let far = Timestamp::MAX.saturating_sub(Duration::from_millis(1));
        assert_eq!(far + Duration::from_secs(1), Timestamp::MAX);
        assert_eq!(Timestamp::MAX.saturating_add(Duration::MAX), Timestamp::MAX);
        assert_eq!(
            Timestamp::from_millis(500) - Duration::from_secs(1),
            Timestamp::UNIX_EPOCH
        );
        assert_eq!(
            Timestamp::from_millis(5).saturating_duration_since(Timestamp::from_millis(9)),
            Duration::ZERO
        );
    }

    #[test]
    fn arithmetic_counts_milliseconds() {
        let at = Timestamp::from_millis(1_000);
        assert_eq!((at + Duration::from_millis(250)).as_millis(), 1_250);
        assert_eq!((at - Duration::from_millis(250)).as_millis(), 750);
        // Sub-millisecond parts are dropped, as the stored form has none.
        assert_eq!(
            at + Duration::from_micros(1_999),
            Timestamp::from_millis(1_001)
        );
        assert_eq!(
            Timestamp::from_millis(1_750).saturating_duration_since(at),
            Duration::from_millis(750)
        );
        assert!(at < at + Duration::from_millis(1));
    }

    #[test]
    fn serializes_exactly_as_the_bare_integer() {
        for ms in [0, 1, 1_767_225_600_000, u64::MAX] {
            let typed = serde_json::to_string(&Timestamp::from_millis(ms)).unwrap();
            assert_eq!(typed, serde_json::to_string(&ms).unwrap());
            assert_eq!(
                serde_json::from_str::<Timestamp>(&typed).unwrap(),
                Timestamp::from_millis(ms)
            );
        }
        #[derive(Serialize)]
        struct Typed {
            at_ms: Timestamp,
            until_ms: Option<Timestamp>,
        }
        #[derive(Serialize)]
        struct Bare {
            at_ms: u64,
            until_ms: Option<u64>,
        }
        assert_eq!(
            serde_json::to_value(Typed {
                at_ms: Timestamp::from_millis(42),
                until_ms: None
            })
            .unwrap(),
            serde_json::to_value(Bare {
                at_ms: 42,
                until_ms: None
            })
            .unwrap()
        );
        assert!(serde_json::from_str::<Timestamp>("-1").is_err());
        assert!(serde_json::from_str::<Timestamp>("\"5\"").is_err());
    }

    #[test]
    fn display_and_parse_are_the_bare_integer() {
        let at = Timestamp::from_millis(1_767_225_600_123);
        assert_eq!(at.to_string(), "1767225600123");
        assert_eq!("1767225600123".parse::<Timestamp>().unwrap(), at);
        assert!("soon".parse::<Timestamp>().is_err());
    }

    #[test]
    fn system_time_round_trips_to_the_millisecond() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_767_225_600_123_456_789);
        let ts = Timestamp::from_system_time(at);
        assert_eq!(ts.as_millis(), 1_767_225_600_123);
        assert_eq!(
            ts.to_system_time(),
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_767_225_600_123)
        );
        let before_epoch = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(Timestamp::from(before_epoch), Timestamp::UNIX_EPOCH);
    }
}

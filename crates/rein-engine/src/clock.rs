//! The engine's clock seam: time that can be read *and* waited on.
//!
//! # Why the waiting lives here, not in rein-core
//!
//! rein-core's [`Clock`] is read-only on purpose: its policies are pure state
//! machines told `now`, and a crate with no async runtime cannot offer a
//! future that completes later. The engine, though, waits — retry pauses,
//! first-byte and idle limits, heartbeats, slot queues — and a wait that
//! bypasses the clock is a second time line: a test that pauses or moves the
//! clock would see deadlines computed on one line and timers firing on the
//! other. So rein-engine extends the seam with [`Timer`], whose waits are
//! tokio's own timers, placed at the tokio instant that corresponds to a
//! point on the clock's time line ([`Timer::timer_instant`]).
//!
//! Mapping instants onto tokio's timer, rather than returning boxed futures
//! from the clock, keeps the waits allocation-free and cancel-safe (they are
//! `tokio::time::Sleep` and `Timeout`), and makes
//! `#[tokio::test(start_paused = true)]` drive every wait of the engine.
//!
//! # Implementations
//!
//! | clock | `now()` | a wait until `at` ends |
//! | --- | --- | --- |
//! | [`SystemClock`] | tokio's (pausable) monotonic time since the clock was made | when tokio's time reaches `at` |
//! | [`ManualClock`] | wherever the test set it | after `at - now()` of tokio time, measured when the wait starts |
//!
//! NOTE: wall-clock time (`system_now`) is not a timer input; it only stamps
//! records and interprets absolute dates (an HTTP-date `Retry-After`).

use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rein_core::{Clock, Instant, ManualClock};

/// How far ahead a wait "forever" is placed: tokio's own far future.
///
/// A deadline at the end of `Instant`'s range cannot be represented as a
/// tokio instant; thirty years stands in for it, as it does in
/// `tokio::time::sleep(Duration::MAX)`.
const FAR_FUTURE: Duration = Duration::from_secs(86_400 * 365 * 30);

/// A [`Clock`] whose time line can be waited on.
///
/// Implement [`timer_instant`](Timer::timer_instant); the waits follow from
/// it. On `dyn Timer`, [`timeout`](#method.timeout) and
/// [`timeout_at`](#method.timeout_at) bound any future by the clock.
///
/// # Examples
///
/// ```
/// # use std::sync::Arc;
/// # use std::time::Duration;
/// use rein_core::Clock;
/// use rein_engine::{SystemClock, Timer};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// let clock: Arc<dyn Timer> = Arc::new(SystemClock::new());
/// let start = clock.now();
/// clock.sleep(Duration::from_millis(5)).await;
/// assert!(clock.now().saturating_duration_since(start) >= Duration::from_millis(5));
/// let late = clock
///     .timeout(Duration::from_millis(1), std::future::pending::<()>())
///     .await;
/// assert!(late.is_err());
/// # }
/// ```
pub trait Timer: Clock {
    /// The tokio instant at which this clock's time reaches `at` (now or
    /// earlier when `at` has passed).
    fn timer_instant(&self, at: Instant) -> tokio::time::Instant;

    /// Completes once the clock reaches `at`.
    fn sleep_until(&self, at: Instant) -> tokio::time::Sleep {
        tokio::time::sleep_until(self.timer_instant(at))
    }

    /// Completes once `by` has passed on the clock.
    fn sleep(&self, by: Duration) -> tokio::time::Sleep {
        self.sleep_until(self.now() + by)
    }
}

impl<'c> dyn Timer + 'c {
    /// Runs `future` until it completes or the clock reaches `at`.
    pub fn timeout_at<F: IntoFuture>(
        &self,
        at: Instant,
        future: F,
    ) -> tokio::time::Timeout<F::IntoFuture> {
        tokio::time::timeout_at(self.timer_instant(at), future)
    }

    /// Runs `future` until it completes or `limit` has passed on the clock.
    pub fn timeout<F: IntoFuture>(
        &self,
        limit: Duration,
        future: F,
    ) -> tokio::time::Timeout<F::IntoFuture> {
        self.timeout_at(self.now() + limit, future)
    }
}

impl<T: Timer + ?Sized> Timer for Arc<T> {
    fn timer_instant(&self, at: Instant) -> tokio::time::Instant {
        (**self).timer_instant(at)
    }
}

/// The process's clock: tokio's monotonic time and the system's wall clock.
///
/// Instants count from the moment the clock was created; instants of two
/// `SystemClock`s are not comparable (rein carries remaining durations
/// across boundaries, never instants).
///
/// # Why tokio's time
///
/// `tokio::time::Instant` is the system's monotonic clock, except in a
/// runtime whose time is paused (`start_paused`, `tokio::time::pause`),
/// where it moves only when the runtime is idle or told to `advance`. Read
/// through it, the engine's deadlines and its timers stay on one time line
/// in tests as in production. Outside a runtime it reads the system clock.
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: tokio::time::Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        SystemClock {
            origin: tokio::time::Instant::now(),
        }
    }
}

impl Default for SystemClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::from_origin(tokio::time::Instant::now().saturating_duration_since(self.origin))
    }

    fn system_now(&self) -> SystemTime {
        SystemTime::now()
    }
}

impl Timer for SystemClock {
    fn timer_instant(&self, at: Instant) -> tokio::time::Instant {
        self.origin
            .checked_add(at.since_origin())
            .unwrap_or_else(|| tokio::time::Instant::now() + FAR_FUTURE)
    }
}

/// A manual clock moves only when a test tells it to; a wait on it takes
/// the remaining time on tokio's timer, measured when the wait starts.
///
/// # Why not wait for `advance`
///
/// A test that moves a [`ManualClock`] steers the policies (a breaker's
/// break duration, a window) while runs make their ordinary short waits; a
/// wait that ended only on `advance` would hang every run that pauses
/// before a retry. Under paused tokio time these waits end as soon as the
/// runtime is idle.
impl Timer for ManualClock {
    fn timer_instant(&self, at: Instant) -> tokio::time::Instant {
        let remaining = at.saturating_duration_since(self.now());
        let now = tokio::time::Instant::now();
        now.checked_add(remaining)
            .unwrap_or_else(|| now + FAR_FUTURE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
    }

    #[tokio::test(start_paused = true)]
    async fn system_clock_follows_paused_tokio_time_exactly() {
        let clock = SystemClock::new();
        assert_eq!(clock.now(), Instant::ORIGIN);
        tokio::time::advance(ms(1500)).await;
        assert_eq!(clock.now(), Instant::from_origin(ms(1500)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_sleep_ends_exactly_at_its_instant() {
        let clock: Arc<dyn Timer> = Arc::new(SystemClock::new());
        clock.sleep(ms(250)).await;
        assert_eq!(clock.now(), Instant::from_origin(ms(250)));
        clock.sleep_until(Instant::from_origin(ms(400))).await;
        assert_eq!(clock.now(), Instant::from_origin(ms(400)));
        // An instant that has passed ends the wait at once.
        clock.sleep_until(Instant::from_origin(ms(100))).await;
        assert_eq!(clock.now(), Instant::from_origin(ms(400)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_fires_at_its_limit_and_not_before() {
        let clock: Arc<dyn Timer> = Arc::new(SystemClock::new());
        let late = clock.timeout(ms(300), clock.sleep(ms(301))).await;
        assert!(late.is_err());
        assert_eq!(clock.now(), Instant::from_origin(ms(300)));
        let in_time = clock.timeout(ms(300), clock.sleep(ms(300))).await;
        assert!(in_time.is_ok(), "a future ready at the limit wins");
        assert_eq!(clock.now(), Instant::from_origin(ms(600)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_at_the_end_of_time_does_not_panic() {
        let clock: Arc<dyn Timer> = Arc::new(SystemClock::new());
        let far = Instant::from_origin(Duration::MAX);
        assert!(clock.timer_instant(far) > tokio::time::Instant::now());
        let waited = clock.timeout(ms(5), clock.sleep_until(far)).await;
        assert!(waited.is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_manual_clock_waits_the_remaining_time_on_tokio_time() {
        let manual = ManualClock::new();
        manual.advance(ms(1000));
        let clock: Arc<dyn Timer> = Arc::new(manual.clone());
        let started = tokio::time::Instant::now();
        clock.sleep_until(Instant::from_origin(ms(1200))).await;
        assert_eq!(started.elapsed(), ms(200));
        // The manual time line itself does not move.
        assert_eq!(manual.now(), Instant::from_origin(ms(1000)));
    }
}

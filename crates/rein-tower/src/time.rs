//! One time line for every layer: rein-core's [`Instant`] read from tokio's
//! clock.
//!
//! # Why tokio's clock
//!
//! rein-core's policies never read a clock; they are told `now`. The
//! layers sleep with tokio (a retry's pause, a governor's wait), so they
//! read the same clock they sleep on: under `tokio::time::pause` a test
//! drives deadlines, breaker windows and buckets without waiting.
//! Instants are measured from one origin per process, so that a deadline
//! set by one layer is comparable in another.
//!
//! The origin is set back from the moment it is first read. A paused
//! runtime's clock stands still at the moment the runtime was built, so
//! in a process with several runtimes (parallel tests, each paused) one
//! may read a time before the origin another one set; rein-core's
//! instants cannot go below zero, and such a time would saturate to the
//! origin, moving every deadline set from it later by the difference.

use std::sync::OnceLock;
use std::time::Duration;

use rein_core::clock::Instant;
use rein_core::deadline::Deadline;

/// The origin of this process's time line: an hour before it is first
/// read, or as far back as the platform's clock goes (a monotonic clock
/// may start at boot).
fn origin() -> tokio::time::Instant {
    static ORIGIN: OnceLock<tokio::time::Instant> = OnceLock::new();
    *ORIGIN.get_or_init(|| {
        let now = tokio::time::Instant::now();
        [3_600, 60, 1]
            .into_iter()
            .find_map(|back| now.checked_sub(Duration::from_secs(back)))
            .unwrap_or(now)
    })
}

/// Now, on the layers' time line.
pub(crate) fn now() -> Instant {
    Instant::from_origin(tokio::time::Instant::now().saturating_duration_since(origin()))
}

/// The tokio instant of `at`, for `sleep_until`.
pub(crate) fn tokio_instant(at: Instant) -> tokio::time::Instant {
    origin() + at.since_origin()
}

/// The deadline a call must finish by, carried in the request's
/// extensions: set by the caller ([`CallDeadline::within`]), adopted from
/// an incoming `Rein-Deadline-Ms` ([`crate::AdoptDeadlineLayer`]), and
/// read by every layer below (the retry decision, the governor's wait,
/// the header sent on).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallDeadline(pub(crate) Deadline);

impl CallDeadline {
    /// A deadline `within` from now.
    pub fn within(within: Duration) -> CallDeadline {
        CallDeadline(Deadline::after(now(), within))
    }

    /// The time left.
    pub fn remaining(&self) -> Duration {
        self.0.remaining(now())
    }

    /// Whether it has passed.
    pub fn is_expired(&self) -> bool {
        self.0.is_expired(now())
    }

    /// The policy's view of it.
    pub fn deadline(&self) -> Deadline {
        self.0
    }
}

/// The deadline of `request`, if it carries one.
pub(crate) fn deadline_of<B>(request: &http::Request<B>) -> Option<Deadline> {
    request.extensions().get::<CallDeadline>().map(|d| d.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .expect("a runtime")
    }

    #[test]
    fn a_runtime_paused_before_the_origin_was_set_keeps_its_deadlines_exact() {
        // The first runtime's clock stands still at its building; the
        // second, built later, may be the first to read the time line.
        let early = paused_runtime();
        std::thread::sleep(Duration::from_millis(2));
        paused_runtime().block_on(async { now() });

        early.block_on(async {
            let at = tokio::time::Instant::now();
            let deadline = CallDeadline::within(Duration::from_secs(1));
            assert_eq!(
                tokio_instant(deadline.deadline().instant()),
                at + Duration::from_secs(1)
            );
        });
    }
}

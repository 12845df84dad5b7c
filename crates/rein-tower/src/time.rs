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

use std::sync::OnceLock;
use std::time::Duration;

use rein_core::clock::Instant;
use rein_core::deadline::Deadline;

/// The origin of this process's time line.
fn origin() -> tokio::time::Instant {
    static ORIGIN: OnceLock<tokio::time::Instant> = OnceLock::new();
    *ORIGIN.get_or_init(tokio::time::Instant::now)
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

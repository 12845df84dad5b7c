//! The real clock, kept out of rein-core so that the policies stay pure.

use std::time::SystemTime;

use rein_core::{Clock, Instant};

/// The process's monotonic clock, as a [`rein_core::Clock`].
///
/// Instants count from the moment the clock was created; instants of two
/// `SystemClock`s are not comparable (rein carries remaining durations
/// across boundaries, never instants).
#[derive(Debug, Clone, Copy)]
pub struct SystemClock {
    origin: std::time::Instant,
}

impl SystemClock {
    /// A clock whose origin is now.
    pub fn new() -> Self {
        SystemClock {
            origin: std::time::Instant::now(),
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
        Instant::from_origin(self.origin.elapsed())
    }

    fn system_now(&self) -> SystemTime {
        SystemTime::now()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn system_clock_is_monotonic() {
        let clock = SystemClock::new();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        assert!(a.since_origin() < Duration::from_secs(60));
    }
}

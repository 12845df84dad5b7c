//! [`DegradationWatch`]: is a target's recent p99 far above its baseline?

use std::time::Duration;

use super::constants::{DEGRADATION_FACTOR, DEGRADATION_WINDOW};
use super::histogram::LatencyHistogram;

/// A window's p99 came out above [`DEGRADATION_FACTOR`] × the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Degraded {
    /// The window's p99.
    pub p99: Duration,
    /// The baseline it was compared with.
    pub baseline: Duration,
    /// The samples of the window.
    pub samples: u64,
}

/// Watches one subject's latency for degradation: "a p99 above twice the
/// historical baseline usually means the downstream is degrading, and at
/// that point a budget allocated on the baseline makes every single call
/// time out" (seed 000).
///
/// Samples fill a window of [`DEGRADATION_WINDOW`]; when it is full its
/// p99 is compared with the baseline (a declared p99, or the observed
/// profile's when it was first trusted) and the window starts again, so a
/// degradation is reported at most once per window and a recovered target
/// stops being reported within one window.
///
/// ```text
/// sample ─▶ window not full ─────────────────────────▶ None
///        └▶ window full ─▶ p99 > 2 × baseline ─▶ Some(Degraded), window reset
///                        └▶ otherwise (or no baseline) ─▶ None, window reset
/// ```
#[derive(Debug, Clone, Default)]
pub struct DegradationWatch {
    window: LatencyHistogram,
    baseline: Option<Duration>,
}

impl DegradationWatch {
    /// A watch without a baseline yet (nothing is reported until one is set).
    pub fn new() -> Self {
        Self::default()
    }

    /// The baseline compared against, once set.
    pub fn baseline(&self) -> Option<Duration> {
        self.baseline
    }

    /// Sets the baseline if none is set yet: the first trusted profile
    /// stays the reference (a degraded profile must not become its own
    /// baseline).
    pub fn set_baseline_once(&mut self, p99: Duration) {
        self.baseline.get_or_insert(p99);
    }

    /// Counts one sample; reports a degradation when it closes a window
    /// whose p99 exceeds [`DEGRADATION_FACTOR`] × the baseline.
    pub fn on_sample(&mut self, latency: Duration) -> Option<Degraded> {
        self.window.record(latency);
        if self.window.samples() < DEGRADATION_WINDOW {
            return None;
        }
        let p99 = self.window.quantile(0.99);
        let samples = self.window.samples();
        self.window.clear();
        let baseline = self.baseline?;
        (p99 > baseline.saturating_mul(DEGRADATION_FACTOR)).then_some(Degraded {
            p99,
            baseline,
            samples,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn window(w: &mut DegradationWatch, latency: Duration) -> Vec<Degraded> {
        (0..DEGRADATION_WINDOW)
            .filter_map(|_| w.on_sample(latency))
            .collect()
    }

    #[test]
    fn a_window_above_twice_the_baseline_is_reported_once() {
        let mut w = DegradationWatch::new();
        w.set_baseline_once(ms(100));
        assert!(
            window(&mut w, ms(150)).is_empty(),
            "1.5 × is no degradation"
        );
        let seen = window(&mut w, ms(250));
        assert_eq!(seen.len(), 1);
        assert!(seen[0].p99 >= ms(245) && seen[0].baseline == ms(100));
        assert_eq!(seen[0].samples, DEGRADATION_WINDOW);
        assert!(window(&mut w, ms(90)).is_empty(), "recovered");
    }

    #[test]
    fn no_baseline_reports_nothing_and_the_first_baseline_stays() {
        let mut w = DegradationWatch::new();
        assert!(window(&mut w, ms(10_000)).is_empty());
        w.set_baseline_once(ms(100));
        w.set_baseline_once(ms(5_000));
        assert_eq!(w.baseline(), Some(ms(100)));
    }
}

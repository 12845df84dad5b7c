//! [`plan_model`]: the latency a model call is planned with — the
//! configured `model_latency` until the model's own calls say otherwise.

use super::LatencyHistogram;
use crate::LatencyProfile;

/// Where the profile a model call is planned with comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelLatencySource {
    /// The agent's `model_latency` (or its default): fewer than
    /// `min_samples` calls of this provider and model were observed.
    Configured,
    /// The observed calls of this provider and model (every process's).
    Observed,
}

/// The profile a model call is planned with, and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ModelPlan {
    /// The profile in force.
    pub profile: LatencyProfile,
    /// Configured or observed.
    pub source: ModelLatencySource,
}

/// The profile a call of one provider and model is planned with: its
/// observed call latency (`model:PROVIDER/MODEL`) once it rests on at
/// least `min_samples` calls, the `configured` one until then.
///
/// # Why
///
/// A configured `model_latency` is a guess written once; the calls a model
/// actually answered are the distribution the next call comes from (seed
/// 000, "Start from the latency distribution"). A few samples are not a
/// distribution: below `min_samples` the guess stands, as a tool's
/// `mode = "observe"` keeps its fallback.
pub fn plan_model(
    configured: LatencyProfile,
    observed: Option<&LatencyHistogram>,
    min_samples: u64,
) -> ModelPlan {
    match observed
        .filter(|h| h.samples() >= min_samples.max(1))
        .and_then(LatencyHistogram::profile)
    {
        Some(profile) => ModelPlan {
            profile,
            source: ModelLatencySource::Observed,
        },
        None => ModelPlan {
            profile: configured,
            source: ModelLatencySource::Configured,
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn configured_until_min_samples_then_observed() {
        let configured = LatencyProfile::new(ms(10), ms(40), ms(100), 0).unwrap();
        let mut seen = LatencyHistogram::new();
        assert_eq!(
            plan_model(configured, None, 3).source,
            ModelLatencySource::Configured
        );
        for _ in 0..2 {
            seen.record(ms(900));
        }
        let plan = plan_model(configured, Some(&seen), 3);
        assert_eq!(
            (plan.profile, plan.source),
            (configured, ModelLatencySource::Configured)
        );
        seen.record(ms(900));
        let plan = plan_model(configured, Some(&seen), 3);
        assert_eq!(plan.source, ModelLatencySource::Observed);
        assert!(
            (ms(895)..=ms(905)).contains(&plan.profile.p50()),
            "{plan:?}"
        );
        assert_eq!(plan.profile.samples(), 3);
    }

    #[test]
    fn zero_min_samples_still_needs_one_sample() {
        let configured = LatencyProfile::new(ms(10), ms(40), ms(100), 0).unwrap();
        let empty = LatencyHistogram::new();
        assert_eq!(
            plan_model(configured, Some(&empty), 0).source,
            ModelLatencySource::Configured
        );
    }
}

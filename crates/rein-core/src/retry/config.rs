use std::num::NonZeroU32;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::constants::*;
use crate::config::{ConfigError, Ratio, positive_duration};

/// Retry settings as written in config.
///
/// | setting | default | meaning |
/// | --- | --- | --- |
/// | `max_attempts` | `4` | attempts per intent, the first included |
/// | `base_delay` | `250ms` | backoff ceiling of the first retry |
/// | `max_delay` | `8s` | largest backoff ceiling |
/// | `budget_ratio` | `0.2` | retries allowed per request to a target |
/// | `budget_initial` | `10` | retries a fresh budget allows |
/// | `budget_max` | `20` | most retries a budget can hold |
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct RetryConfig {
    /// Attempts per intent, the first included; 1 disables retries.
    pub max_attempts: u32,
    /// The backoff ceiling of the first retry.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "crate::config::duration::Text")]
    pub base_delay: Duration,
    /// The largest backoff ceiling.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "crate::config::duration::Text")]
    pub max_delay: Duration,
    /// Retries allowed per request to a target, in `[0, 1]`.
    pub budget_ratio: f64,
    /// Retries a fresh budget allows before any request has deposited.
    pub budget_initial: u32,
    /// The most retries a budget can hold.
    pub budget_max: u32,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            base_delay: DEFAULT_BASE_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
            budget_ratio: DEFAULT_BUDGET_RATIO,
            budget_initial: DEFAULT_BUDGET_INITIAL,
            budget_max: DEFAULT_BUDGET_MAX,
        }
    }
}

/// The validated retry settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub(super) max_attempts: NonZeroU32,
    pub(super) base_delay: Duration,
    pub(super) max_delay: Duration,
    pub(super) budget_ratio: Ratio,
    pub(super) budget_initial: u32,
    pub(super) budget_max: u32,
}

impl TryFrom<RetryConfig> for RetryPolicy {
    type Error = ConfigError;

    fn try_from(c: RetryConfig) -> Result<Self, ConfigError> {
        let max_attempts = NonZeroU32::new(c.max_attempts).ok_or(ConfigError::Zero {
            field: "retry.max_attempts",
        })?;
        let base_delay = positive_duration("retry.base_delay", c.base_delay)?;
        let max_delay = positive_duration("retry.max_delay", c.max_delay)?;
        if max_delay < base_delay {
            return Err(ConfigError::Inconsistent {
                field: "retry.max_delay",
                reason: format!(
                    "must not be less than retry.base_delay ({base_delay:?}), but it is {max_delay:?}"
                ),
            });
        }
        let budget_ratio = Ratio::new("retry.budget_ratio", c.budget_ratio)?;
        if c.budget_max == 0 {
            return Err(ConfigError::Zero {
                field: "retry.budget_max",
            });
        }
        if c.budget_initial > c.budget_max {
            return Err(ConfigError::Inconsistent {
                field: "retry.budget_initial",
                reason: format!(
                    "must not be greater than retry.budget_max ({}), but it is {}",
                    c.budget_max, c.budget_initial
                ),
            });
        }
        Ok(RetryPolicy {
            max_attempts,
            base_delay,
            max_delay,
            budget_ratio,
            budget_initial: c.budget_initial,
            budget_max: c.budget_max,
        })
    }
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: NonZeroU32::MIN.saturating_add(DEFAULT_MAX_ATTEMPTS - 1),
            base_delay: DEFAULT_BASE_DELAY,
            max_delay: DEFAULT_MAX_DELAY,
            budget_ratio: Ratio::new("retry.budget_ratio", DEFAULT_BUDGET_RATIO)
                .unwrap_or(Ratio::ZERO),
            budget_initial: DEFAULT_BUDGET_INITIAL,
            budget_max: DEFAULT_BUDGET_MAX,
        }
    }
}

impl RetryPolicy {
    /// Attempts per intent, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts.get()
    }

    /// The upper bound of the full-jitter delay after `attempt` attempts
    /// (`attempt ≥ 1`): `min(max_delay, base_delay · 2^(attempt−1))`.
    pub fn backoff_ceiling(&self, attempt: u32) -> Duration {
        let exponent = attempt.saturating_sub(1).min(63);
        let factor = 1u64 << exponent;
        let nanos = u64::try_from(self.base_delay.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(nanos.saturating_mul(factor)).min(self.max_delay)
    }

    /// The schedule of backoff ceilings, one per retry this policy allows:
    /// the schedule as data, for docs, `rein check` and tests.
    pub fn backoff_ceilings(&self) -> impl Iterator<Item = Duration> + '_ {
        (1..self.max_attempts.get()).map(|attempt| self.backoff_ceiling(attempt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(c: RetryConfig) -> Result<RetryPolicy, ConfigError> {
        RetryPolicy::try_from(c)
    }

    #[test]
    fn default_config_matches_default_policy() {
        assert_eq!(
            policy(RetryConfig::default()).unwrap(),
            RetryPolicy::default()
        );
    }

    #[test]
    fn config_refuses_invalid_settings() {
        let d = RetryConfig::default;
        let cases = [
            (
                RetryConfig {
                    max_attempts: 0,
                    ..d()
                },
                "retry.max_attempts",
            ),
            (
                RetryConfig {
                    base_delay: Duration::ZERO,
                    ..d()
                },
                "retry.base_delay",
            ),
            (
                RetryConfig {
                    max_delay: Duration::ZERO,
                    ..d()
                },
                "retry.max_delay",
            ),
            (
                RetryConfig {
                    max_delay: Duration::from_millis(100),
                    ..d()
                },
                "retry.max_delay",
            ),
            (
                RetryConfig {
                    budget_ratio: f64::NAN,
                    ..d()
                },
                "retry.budget_ratio",
            ),
            (
                RetryConfig {
                    budget_ratio: 1.5,
                    ..d()
                },
                "retry.budget_ratio",
            ),
            (
                RetryConfig {
                    budget_ratio: -0.1,
                    ..d()
                },
                "retry.budget_ratio",
            ),
            (
                RetryConfig {
                    budget_max: 0,
                    budget_initial: 0,
                    ..d()
                },
                "retry.budget_max",
            ),
            (
                RetryConfig {
                    budget_initial: 30,
                    ..d()
                },
                "retry.budget_initial",
            ),
        ];
        for (config, field) in cases {
            let err = policy(config).unwrap_err();
            assert_eq!(err.field(), field, "{err}");
        }
    }

    #[test]
    fn backoff_ceilings_double_up_to_the_cap() {
        let p = RetryPolicy::default();
        let ms = Duration::from_millis;
        assert_eq!(
            p.backoff_ceilings().collect::<Vec<_>>(),
            vec![ms(250), ms(500), ms(1000)]
        );
        assert_eq!(p.backoff_ceiling(10), ms(8000));
        assert_eq!(p.backoff_ceiling(u32::MAX), ms(8000));
    }

    #[test]
    fn config_reads_humantime_from_json() {
        let c: RetryConfig = serde_json::from_str(
            r#"{"max_attempts": 3, "base_delay": "100ms", "max_delay": "2s"}"#,
        )
        .unwrap();
        let p = policy(c).unwrap();
        assert_eq!(p.max_attempts(), 3);
        assert_eq!(p.backoff_ceiling(1), Duration::from_millis(100));
    }
}

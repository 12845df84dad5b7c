//! The two config layers of a governor: the plain serde [`GovernorConfig`]
//! an operator writes for one resource group, and the validated settings its
//! parts run on ([`TenantWeights`], [`BatchShare`], the limit's settings).

use std::collections::BTreeMap;
use std::num::NonZeroU64;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::bucket::{Rate, TokenBucket};
use super::constants::{
    DEFAULT_BACKOFF, DEFAULT_BASELINE_INTERVAL, DEFAULT_BATCH_SHARE, DEFAULT_INITIAL_CONCURRENCY,
    DEFAULT_LATENCY_TOLERANCE, DEFAULT_MAX_CONCURRENCY, DEFAULT_MIN_CONCURRENCY, DEFAULT_SMOOTHING,
    DEFAULT_TENANT_WEIGHT, DEFAULT_WARMUP_SAMPLES, MAX_BATCH_SHARE, MAX_CONCURRENCY_CEILING,
    MAX_LATENCY_TOLERANCE, MAX_TENANT_WEIGHT, MAX_TOKENS_PER_MINUTE, MIN_TENANT_WEIGHT,
};
use crate::config::{ConfigError, positive_count, positive_duration};
use crate::ids::TenantId;

/// The governor of one resource group, as an operator writes it.
///
/// Every field has a default (see the table in [`governor`](super)); a
/// missing field takes it and an unknown field is refused. Nothing is
/// checked here: [`Governor::new`](super::Governor::new) validates, naming
/// the field (`governor.…`; the config loader puts the group's path in
/// front).
///
/// NOTE: `rate_per_sec` and `burst` mean what the registry's
/// `[resource_groups.NAME]` fields of the same names mean
/// (`registry::ResourceGroupConfig`); keep the two in step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct GovernorConfig {
    /// Sustained calls per second (the request bucket's refill); `None`: no
    /// request bucket.
    pub rate_per_sec: Option<f64>,
    /// The request bucket's size; defaults to `rate_per_sec` rounded up.
    /// Needs `rate_per_sec`.
    pub burst: Option<u32>,
    /// Model tokens per minute (the token bucket's refill), charged with the
    /// prompt's estimate and settled with the actual usage; `None`: no token
    /// bucket.
    pub tokens_per_minute: Option<u64>,
    /// The token bucket's size; defaults to `tokens_per_minute`. Needs
    /// `tokens_per_minute`.
    pub token_burst: Option<u64>,
    /// The adaptive concurrency limit.
    pub concurrency: ConcurrencyConfig,
    /// Tenant weights and the tenant and run tiers of the quota.
    pub quotas: QuotaConfig,
    /// The share of contended dispatches batch work keeps under an
    /// interactive flood, in `(0, 0.5]`.
    pub batch_share: f64,
}

impl GovernorConfig {
    /// The governor of a tool resource group from the registry's
    /// `[resource_groups.NAME]` settings: the rate as given; with
    /// `max_concurrency = N` an adaptive limit in `[1, N]` that starts at
    /// `N`; without it a fixed ceiling of [`MAX_CONCURRENCY_CEILING`], so a
    /// group that only sets a rate is not capped by a default nobody asked
    /// for. One mapping, used by the engine to build the group's governor
    /// and by the registry check to refuse what that governor would refuse.
    pub fn tool_group(
        rate: Option<crate::registry::RateLimit>,
        max_concurrency: Option<std::num::NonZeroU32>,
    ) -> GovernorConfig {
        let mut config = GovernorConfig::default();
        if let Some(rate) = rate {
            config.rate_per_sec = Some(rate.per_sec);
            config.burst = Some(rate.burst);
        }
        let (min, max) = match max_concurrency {
            Some(max) => (1, max.get()),
            None => (MAX_CONCURRENCY_CEILING, MAX_CONCURRENCY_CEILING),
        };
        config.concurrency.min = min;
        config.concurrency.max = max;
        config.concurrency.initial = Some(max);
        config
    }
}

impl GovernorConfig {
    /// The governor of a model provider from the registry's
    /// `[providers.NAME]` settings: `max_concurrency = N` a ceiling of `N`
    /// that stays there (model calls do not adapt it; `min = 1` so that a
    /// cluster can divide it), none a ceiling of
    /// [`MAX_CONCURRENCY_CEILING`]; `tokens_per_minute` and `token_burst`
    /// the token bucket. One mapping, used by the engine to build the
    /// provider's governor and by the registry check to refuse what that
    /// governor would refuse.
    pub fn provider(
        max_concurrency: Option<std::num::NonZeroU32>,
        tokens: Option<crate::registry::TokenLimit>,
    ) -> GovernorConfig {
        let mut config = GovernorConfig::default();
        if let Some(tokens) = tokens {
            config.tokens_per_minute = Some(tokens.per_minute.get());
            config.token_burst = Some(tokens.burst.get());
        }
        // `min = 1`, not `N`: the limit never adapts (model calls release
        // their slots teaching it nothing), but a cluster divides the
        // ceiling, and a node's part may be below `N` (the adaptive
        // limit never goes below its `min`).
        let (min, max) = match max_concurrency {
            Some(n) => (1, n.get()),
            None => (MAX_CONCURRENCY_CEILING, MAX_CONCURRENCY_CEILING),
        };
        config.concurrency.min = min;
        config.concurrency.max = max;
        config.concurrency.initial = Some(max);
        config
    }
}

impl Default for GovernorConfig {
    fn default() -> Self {
        GovernorConfig {
            rate_per_sec: None,
            burst: None,
            tokens_per_minute: None,
            token_burst: None,
            concurrency: ConcurrencyConfig::default(),
            quotas: QuotaConfig::default(),
            batch_share: DEFAULT_BATCH_SHARE,
        }
    }
}

/// The adaptive concurrency limit of a resource group, as an operator
/// writes it (`[resource_groups.NAME.concurrency]`).
///
/// A fixed limit is `min = max`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ConcurrencyConfig {
    /// The limit at start, in `[min, max]`; `None`: 8, or the nearest bound
    /// when 8 is outside them.
    pub initial: Option<u32>,
    /// The lowest the limit shrinks to, at least 1.
    pub min: u32,
    /// The highest the limit grows to: the group's ceiling (invariant 7).
    pub max: u32,
    /// The factor a shrink multiplies the limit by, in `(0, 1)`.
    pub backoff: f64,
    /// How far the smoothed latency may rise above its baseline before the
    /// limit shrinks, as a multiple in `(1, 100]`.
    pub latency_tolerance: f64,
    /// The weight of a new latency sample in the moving average, in `(0, 1]`.
    pub smoothing: f64,
    /// How long a learned baseline is trusted: the baseline is the lowest
    /// smoothed latency of the last one to two intervals.
    #[serde(with = "crate::config::duration")]
    pub baseline_interval: Duration,
    /// Samples seen before the latency trigger may shrink the limit.
    pub warmup_samples: u32,
}

impl Default for ConcurrencyConfig {
    fn default() -> Self {
        ConcurrencyConfig {
            initial: None,
            min: DEFAULT_MIN_CONCURRENCY,
            max: DEFAULT_MAX_CONCURRENCY,
            backoff: DEFAULT_BACKOFF,
            latency_tolerance: DEFAULT_LATENCY_TOLERANCE,
            smoothing: DEFAULT_SMOOTHING,
            baseline_interval: DEFAULT_BASELINE_INTERVAL,
            warmup_samples: DEFAULT_WARMUP_SAMPLES,
        }
    }
}

/// Tenant weights and the tenant and run tiers of a group's quota, as an
/// operator writes them (`[resource_groups.NAME.quotas]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct QuotaConfig {
    /// The weight of a tenant not named in `weights`, in `[0.001, 1000]`.
    /// Needs `weights`: alone it weighs every tenant the same.
    pub default_weight: f64,
    /// Weights of named tenants, in `[0.001, 1000]`: a tenant's guaranteed
    /// share of the group's slots and of the fair queue's dispatches is its
    /// weight over the weights of the tenants active in the group.
    pub weights: BTreeMap<TenantId, f64>,
    /// The most slots one tenant holds, borrowing included; `None`: up to
    /// the global limit.
    pub tenant_max: Option<u32>,
    /// The most slots one run holds; `None`: up to its tenant's.
    pub run_max: Option<u32>,
}

impl Default for QuotaConfig {
    fn default() -> Self {
        QuotaConfig {
            default_weight: DEFAULT_TENANT_WEIGHT,
            weights: BTreeMap::new(),
            tenant_max: None,
            run_max: None,
        }
    }
}

/// The validated settings of an adaptive limit.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LimitSettings {
    pub(super) initial: u32,
    pub(super) min: u32,
    pub(super) max: u32,
    pub(super) backoff: f64,
    pub(super) tolerance: f64,
    pub(super) smoothing: f64,
    pub(super) interval: Duration,
    pub(super) warmup: u32,
}

impl LimitSettings {
    pub(super) fn validate(c: &ConcurrencyConfig) -> Result<LimitSettings, ConfigError> {
        let min = positive_count("governor.concurrency.min", c.min)?;
        let max = positive_count("governor.concurrency.max", c.max)?;
        if max > MAX_CONCURRENCY_CEILING {
            return Err(ConfigError::OutOfRange {
                field: "governor.concurrency.max",
                expected: "at most 100000",
                found: max.to_string(),
            });
        }
        if min > max {
            return Err(ConfigError::Inconsistent {
                field: "governor.concurrency.min",
                reason: format!(
                    "must not be greater than governor.concurrency.max ({max}), but it is {min}"
                ),
            });
        }
        let initial = match c.initial {
            None => DEFAULT_INITIAL_CONCURRENCY.clamp(min, max),
            Some(initial) if (min..=max).contains(&initial) => initial,
            Some(initial) => {
                return Err(ConfigError::Inconsistent {
                    field: "governor.concurrency.initial",
                    reason: format!(
                        "must be within governor.concurrency.min ({min}) and max ({max}), \
                         but it is {initial}"
                    ),
                });
            }
        };
        let backoff = open_unit("governor.concurrency.backoff", c.backoff)?;
        let tolerance = c.latency_tolerance;
        if !(tolerance.is_finite() && tolerance > 1.0 && tolerance <= MAX_LATENCY_TOLERANCE) {
            return Err(ConfigError::OutOfRange {
                field: "governor.concurrency.latency_tolerance",
                expected: "a multiple of the baseline in (1, 100]",
                found: tolerance.to_string(),
            });
        }
        let smoothing = c.smoothing;
        if !(smoothing.is_finite() && smoothing > 0.0 && smoothing <= 1.0) {
            return Err(ConfigError::OutOfRange {
                field: "governor.concurrency.smoothing",
                expected: "a number in (0, 1]",
                found: smoothing.to_string(),
            });
        }
        let interval = positive_duration(
            "governor.concurrency.baseline_interval",
            c.baseline_interval,
        )?;
        let warmup = positive_count("governor.concurrency.warmup_samples", c.warmup_samples)?;
        Ok(LimitSettings {
            initial,
            min,
            max,
            backoff,
            tolerance,
            smoothing,
            interval,
            warmup,
        })
    }
}

/// A number strictly between zero and one.
fn open_unit(field: &'static str, value: f64) -> Result<f64, ConfigError> {
    if value.is_finite() && value > 0.0 && value < 1.0 {
        Ok(value)
    } else {
        Err(ConfigError::OutOfRange {
            field,
            expected: "a number in (0, 1)",
            found: value.to_string(),
        })
    }
}

/// Tenants' weights, in thousandths: what share of a group's slots and of
/// its fair queue each tenant is owed.
///
/// # Why thousandths
///
/// Shares are computed by summing the weights of the active tenants as
/// tenants come and go; integers sum and subtract exactly, floats drift.
/// A weight is kept to the thousandth (rounded to the nearest), which is why
/// the smallest is 0.001.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantWeights {
    default: u64,
    named: BTreeMap<TenantId, u64>,
}

impl Default for TenantWeights {
    /// Every tenant weighs 1.
    fn default() -> Self {
        TenantWeights {
            default: to_milli(DEFAULT_TENANT_WEIGHT),
            named: BTreeMap::new(),
        }
    }
}

impl TenantWeights {
    /// The weights a quota config names.
    ///
    /// # Errors
    ///
    /// [`ConfigError`] naming `governor.quotas.default_weight` or
    /// `governor.quotas.weights` when a weight is outside `[0.001, 1000]`
    /// (the tenant is named in the message), or when `default_weight` is
    /// set without `weights` (it would have no effect).
    pub fn new(config: &QuotaConfig) -> Result<TenantWeights, ConfigError> {
        let default = weight("governor.quotas.default_weight", config.default_weight)?;
        if config.weights.is_empty() && config.default_weight != DEFAULT_TENANT_WEIGHT {
            return Err(ConfigError::Inconsistent {
                field: "governor.quotas.default_weight",
                reason: "has no effect without governor.quotas.weights: every tenant would \
                         weigh the same"
                    .to_owned(),
            });
        }
        let mut named = BTreeMap::new();
        for (tenant, &w) in &config.weights {
            let milli =
                weight("governor.quotas.weights", w).map_err(|_| ConfigError::Inconsistent {
                    field: "governor.quotas.weights",
                    reason: format!(
                        "must hold weights in [0.001, 1000], but `{tenant}` weighs {w}"
                    ),
                })?;
            named.insert(tenant.clone(), milli);
        }
        Ok(TenantWeights { default, named })
    }

    /// These weights with `tenant` weighing `weight`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::OutOfRange`] when `weight` is outside `[0.001, 1000]`.
    pub fn with(mut self, tenant: TenantId, weight: f64) -> Result<TenantWeights, ConfigError> {
        let milli = self::weight("governor.quotas.weights", weight)?;
        self.named.insert(tenant, milli);
        Ok(self)
    }

    /// `tenant`'s weight in thousandths (1000 is a weight of 1).
    pub fn milli(&self, tenant: &TenantId) -> u64 {
        self.named.get(tenant).copied().unwrap_or(self.default)
    }
}

fn weight(field: &'static str, value: f64) -> Result<u64, ConfigError> {
    if value.is_finite() && (MIN_TENANT_WEIGHT..=MAX_TENANT_WEIGHT).contains(&value) {
        Ok(to_milli(value))
    } else {
        Err(ConfigError::OutOfRange {
            field,
            expected: "a weight in [0.001, 1000]",
            found: value.to_string(),
        })
    }
}

/// A weight in thousandths; callers validated the range, so the result is
/// in `[1, 1_000_000]`.
fn to_milli(value: f64) -> u64 {
    (value * 1000.0).round().clamp(1.0, 1_000_000.0) as u64
}

/// The share of contended dispatches batch work keeps, in thousandths
/// within `[1, 500]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchShare(u32);

impl BatchShare {
    /// The share for the setting `field`, kept to the thousandth.
    ///
    /// # Errors
    ///
    /// [`ConfigError::OutOfRange`] when `share` is NaN or outside
    /// `[0.001, 0.5]` (zero would let an interactive flood starve batch
    /// work; above one half batch would come first).
    pub fn new(field: &'static str, share: f64) -> Result<BatchShare, ConfigError> {
        if share.is_finite() && (0.001..=MAX_BATCH_SHARE).contains(&share) {
            // In range, so the result is in [1, 500].
            Ok(BatchShare((share * 1000.0).round().clamp(1.0, 500.0) as u32))
        } else {
            Err(ConfigError::OutOfRange {
                field,
                expected: "a share in [0.001, 0.5]",
                found: share.to_string(),
            })
        }
    }

    /// The share in thousandths.
    pub fn milli(self) -> u32 {
        self.0
    }
}

impl Default for BatchShare {
    fn default() -> Self {
        BatchShare((DEFAULT_BATCH_SHARE * 1000.0) as u32)
    }
}

/// The validated quota tiers below the global limit.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct QuotaSettings {
    pub(super) weights: TenantWeights,
    pub(super) tenant_max: Option<u32>,
    pub(super) run_max: Option<u32>,
}

/// Everything a [`Governor`](super::Governor) is built from, validated.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) requests: Option<TokenBucket>,
    pub(super) tokens: Option<TokenBucket>,
    pub(super) limit: LimitSettings,
    pub(super) quotas: QuotaSettings,
    pub(super) batch_share: BatchShare,
}

impl Settings {
    pub(super) fn validate(c: &GovernorConfig) -> Result<Settings, ConfigError> {
        let requests = match (c.rate_per_sec, c.burst) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(ConfigError::Inconsistent {
                    field: "governor.burst",
                    reason: "needs governor.rate_per_sec: a bucket that never refills limits \
                             nothing useful"
                        .to_owned(),
                });
            }
            (Some(per_sec), burst) => {
                let rate = Rate::from_per_second("governor.rate_per_sec", per_sec)?;
                // The default bucket holds one second's worth of calls
                // (as the registry's default does).
                let burst = match burst {
                    Some(burst) => u64::from(positive_count("governor.burst", burst)?),
                    None => per_sec.ceil().clamp(1.0, f64::from(u32::MAX)) as u64,
                };
                Some(bucket(rate, burst, "governor.burst")?)
            }
        };
        let tokens = match (c.tokens_per_minute, c.token_burst) {
            (None, None) => None,
            (None, Some(_)) => {
                return Err(ConfigError::Inconsistent {
                    field: "governor.token_burst",
                    reason: "needs governor.tokens_per_minute".to_owned(),
                });
            }
            (Some(tpm), burst) => {
                let tpm = tokens_per_minute("governor.tokens_per_minute", tpm)?;
                let burst = match burst {
                    Some(burst) => tokens_per_minute("governor.token_burst", burst)?.get(),
                    None => tpm.get(),
                };
                Some(bucket(
                    Rate::per_minute(tpm),
                    burst,
                    "governor.token_burst",
                )?)
            }
        };
        let limit = LimitSettings::validate(&c.concurrency)?;
        let weights = TenantWeights::new(&c.quotas)?;
        let tenant_max = c
            .quotas
            .tenant_max
            .map(|n| {
                below(
                    n,
                    "governor.quotas.tenant_max",
                    limit.max,
                    "concurrency.max",
                )
            })
            .transpose()?;
        let run_max = match c.quotas.run_max {
            None => None,
            Some(n) => Some(match tenant_max {
                Some(t) => below(n, "governor.quotas.run_max", t, "quotas.tenant_max")?,
                None => below(n, "governor.quotas.run_max", limit.max, "concurrency.max")?,
            }),
        };
        let batch_share = BatchShare::new("governor.batch_share", c.batch_share)?;
        Ok(Settings {
            requests,
            tokens,
            limit,
            quotas: QuotaSettings {
                weights,
                tenant_max,
                run_max,
            },
            batch_share,
        })
    }
}

fn bucket(rate: Rate, burst: u64, field: &'static str) -> Result<TokenBucket, ConfigError> {
    TokenBucket::new(rate, burst).map_err(|_| ConfigError::Zero { field })
}

fn tokens_per_minute(field: &'static str, value: u64) -> Result<NonZeroU64, ConfigError> {
    match NonZeroU64::new(value) {
        None => Err(ConfigError::Zero { field }),
        Some(n) if value <= MAX_TOKENS_PER_MINUTE => Ok(n),
        Some(_) => Err(ConfigError::OutOfRange {
            field,
            expected: "at most 1000000000000 tokens",
            found: value.to_string(),
        }),
    }
}

/// A tier's cap: positive, and below the tier above it — a cap at or above
/// its parent's never binds, so it would have no effect.
fn below(
    value: u32,
    field: &'static str,
    parent: u32,
    parent_name: &'static str,
) -> Result<u32, ConfigError> {
    let value = positive_count(field, value)?;
    if value >= parent {
        return Err(ConfigError::Inconsistent {
            field,
            reason: format!(
                "must be less than governor.{parent_name} ({parent}) or left out, but it is \
                 {value}: a cap that never binds has no effect"
            ),
        });
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(edit: impl FnOnce(&mut GovernorConfig)) -> ConfigError {
        let mut config = GovernorConfig::default();
        edit(&mut config);
        Settings::validate(&config).unwrap_err()
    }

    #[test]
    fn default_config_validates_to_the_documented_defaults() {
        let s = Settings::validate(&GovernorConfig::default()).unwrap();
        assert!(s.requests.is_none() && s.tokens.is_none());
        assert_eq!((s.limit.min, s.limit.initial, s.limit.max), (1, 8, 64));
        assert_eq!(s.limit.backoff, DEFAULT_BACKOFF);
        assert_eq!(s.limit.tolerance, DEFAULT_LATENCY_TOLERANCE);
        assert_eq!(s.limit.smoothing, DEFAULT_SMOOTHING);
        assert_eq!(s.limit.interval, DEFAULT_BASELINE_INTERVAL);
        assert_eq!(s.limit.warmup, DEFAULT_WARMUP_SAMPLES);
        assert_eq!(s.batch_share.milli(), 100);
        assert_eq!(s.quotas.tenant_max, None);
        assert_eq!(s.quotas.run_max, None);
    }

    #[test]
    fn burst_defaults_to_one_second_of_calls_like_the_registry() {
        let config = GovernorConfig {
            rate_per_sec: Some(20.5),
            ..GovernorConfig::default()
        };
        let s = Settings::validate(&config).unwrap();
        assert_eq!(s.requests.unwrap().burst(), 21);
    }

    #[test]
    fn token_burst_defaults_to_one_minute_of_tokens() {
        let config = GovernorConfig {
            tokens_per_minute: Some(90_000),
            ..GovernorConfig::default()
        };
        let s = Settings::validate(&config).unwrap();
        assert_eq!(s.tokens.unwrap().burst(), 90_000);
    }

    #[test]
    fn initial_defaults_to_eight_clamped_into_the_bounds() {
        let mut config = GovernorConfig::default();
        config.concurrency.max = 4;
        assert_eq!(Settings::validate(&config).unwrap().limit.initial, 4);
        config.concurrency.max = 64;
        config.concurrency.min = 10;
        assert_eq!(Settings::validate(&config).unwrap().limit.initial, 10);
    }

    #[test]
    fn each_invalid_field_is_refused_by_name() {
        type Edit = fn(&mut GovernorConfig);
        let cases: [(Edit, &str); 23] = [
            (|c| c.burst = Some(5), "governor.burst"),
            (|c| c.rate_per_sec = Some(0.0), "governor.rate_per_sec"),
            (|c| c.rate_per_sec = Some(f64::NAN), "governor.rate_per_sec"),
            (
                |c| {
                    c.rate_per_sec = Some(1.0);
                    c.burst = Some(0);
                },
                "governor.burst",
            ),
            (|c| c.token_burst = Some(5), "governor.token_burst"),
            (
                |c| c.tokens_per_minute = Some(0),
                "governor.tokens_per_minute",
            ),
            (
                |c| c.tokens_per_minute = Some(MAX_TOKENS_PER_MINUTE + 1),
                "governor.tokens_per_minute",
            ),
            (
                |c| {
                    c.tokens_per_minute = Some(10);
                    c.token_burst = Some(0);
                },
                "governor.token_burst",
            ),
            (|c| c.concurrency.min = 0, "governor.concurrency.min"),
            (|c| c.concurrency.max = 0, "governor.concurrency.max"),
            (|c| c.concurrency.max = 100_001, "governor.concurrency.max"),
            (|c| c.concurrency.min = 65, "governor.concurrency.min"),
            (
                |c| c.concurrency.initial = Some(65),
                "governor.concurrency.initial",
            ),
            (
                |c| c.concurrency.backoff = 1.0,
                "governor.concurrency.backoff",
            ),
            (
                |c| c.concurrency.backoff = 0.0,
                "governor.concurrency.backoff",
            ),
            (
                |c| c.concurrency.latency_tolerance = 1.0,
                "governor.concurrency.latency_tolerance",
            ),
            (
                |c| c.concurrency.smoothing = 0.0,
                "governor.concurrency.smoothing",
            ),
            (
                |c| c.concurrency.baseline_interval = Duration::ZERO,
                "governor.concurrency.baseline_interval",
            ),
            (
                |c| c.concurrency.warmup_samples = 0,
                "governor.concurrency.warmup_samples",
            ),
            (
                |c| c.quotas.default_weight = 2.0,
                "governor.quotas.default_weight",
            ),
            (
                |c| c.quotas.tenant_max = Some(64),
                "governor.quotas.tenant_max",
            ),
            (
                |c| {
                    c.quotas.tenant_max = Some(4);
                    c.quotas.run_max = Some(4);
                },
                "governor.quotas.run_max",
            ),
            (|c| c.batch_share = 0.0, "governor.batch_share"),
        ];
        for (edit, field) in cases {
            assert_eq!(refused(edit).field(), field);
        }
    }

    #[test]
    fn min_above_max_says_what_was_expected_and_found() {
        let err = refused(|c| {
            c.concurrency.min = 9;
            c.concurrency.max = 4;
        });
        assert_eq!(
            err.to_string(),
            "governor.concurrency.min must not be greater than governor.concurrency.max (4), \
             but it is 9"
        );
    }

    #[test]
    fn out_of_range_tenant_weight_names_the_tenant() {
        let err = refused(|c| {
            c.quotas.weights.insert(TenantId::new("acme").unwrap(), 0.0);
        });
        assert_eq!(err.field(), "governor.quotas.weights");
        assert!(err.to_string().contains("`acme` weighs 0"), "{err}");
    }

    #[test]
    fn run_max_without_tenant_max_is_bounded_by_the_global_max() {
        let err = refused(|c| c.quotas.run_max = Some(64));
        assert!(
            err.to_string()
                .contains("must be less than governor.concurrency.max (64)"),
            "{err}"
        );
        let mut config = GovernorConfig::default();
        config.quotas.run_max = Some(63);
        assert!(Settings::validate(&config).is_ok());
    }

    #[test]
    fn weights_are_kept_in_thousandths() {
        let acme = TenantId::new("acme").unwrap();
        let w = TenantWeights::default().with(acme.clone(), 2.5).unwrap();
        assert_eq!(w.milli(&acme), 2500);
        assert_eq!(w.milli(&TenantId::new("other").unwrap()), 1000);
        assert!(TenantWeights::default().with(acme, 1000.5).is_err());
    }

    #[test]
    fn batch_share_refuses_zero_and_more_than_half() {
        for bad in [0.0, 0.0004, 0.51, 1.0, f64::NAN] {
            assert!(
                BatchShare::new("governor.batch_share", bad).is_err(),
                "{bad}"
            );
        }
        assert_eq!(BatchShare::new("s", 0.5).unwrap().milli(), 500);
        assert_eq!(BatchShare::default().milli(), 100);
    }

    #[test]
    fn config_from_toml_reads_sections_and_humantime() {
        let config: GovernorConfig = toml::from_str(
            r#"
            rate_per_sec = 20.0
            burst = 40
            tokens_per_minute = 90000
            batch_share = 0.2
            [concurrency]
            max = 8
            baseline_interval = "30s"
            [quotas]
            tenant_max = 6
            run_max = 4
            weights = { acme = 2.0 }
            "#,
        )
        .unwrap();
        assert_eq!(config.burst, Some(40));
        assert_eq!(config.concurrency.max, 8);
        assert_eq!(
            config.concurrency.baseline_interval,
            Duration::from_secs(30)
        );
        assert_eq!(config.quotas.weights[&TenantId::new("acme").unwrap()], 2.0);
        let s = Settings::validate(&config).unwrap();
        assert_eq!(s.limit.initial, 8);
        assert_eq!(s.quotas.run_max, Some(4));
    }

    #[test]
    fn config_with_unknown_field_refuses() {
        let err = toml::from_str::<GovernorConfig>("rate = 5").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let err = toml::from_str::<GovernorConfig>("[concurrency]\nmaximum = 5").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn config_round_trips_through_json() {
        let mut config = GovernorConfig {
            rate_per_sec: Some(2.5),
            ..GovernorConfig::default()
        };
        config
            .quotas
            .weights
            .insert(TenantId::new("acme").unwrap(), 3.0);
        let json = serde_json::to_string(&config).unwrap();
        assert!(json.contains(r#""baseline_interval":"1m""#), "{json}");
        assert_eq!(
            serde_json::from_str::<GovernorConfig>(&json).unwrap(),
            config
        );
    }
}

//! The two config layers of a breaker: the plain serde [`BreakerConfig`] an
//! operator writes, and the validated [`Settings`] a [`Breaker`] runs on.
//!
//! [`Breaker`]: super::Breaker

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::arms::ArmKind;
use super::constants::{
    DEFAULT_BREAK_DURATION, DEFAULT_CLOSE_AFTER_SUCCESSES, DEFAULT_CLOSE_BELOW,
    DEFAULT_CONSECUTIVE_FAILURES, DEFAULT_COST_BREAK_DURATION, DEFAULT_COST_CONSECUTIVE_FAILURES,
    DEFAULT_HALF_OPEN_MAX_WAIT, DEFAULT_HALF_OPEN_PROBES, DEFAULT_MIN_THROUGHPUT, DEFAULT_OPEN_AT,
    DEFAULT_WINDOW,
};
use crate::config::{ConfigError, Ratio, positive_count, positive_duration};

/// The settings of one breaker arm, as an operator writes them.
///
/// Every field has a default (see the table in [`breaker`](super)); a missing
/// field takes it and an unknown field is refused, so a typo cannot silently
/// leave a default in place. Durations are humantime strings (`"30s"`).
/// Nothing is checked here: [`Breaker::new`](super::Breaker::new) validates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BreakerConfig {
    /// Consecutive counted failures that open the arm; `None` turns this
    /// trigger off.
    pub consecutive_failures: Option<u32>,
    /// The failure-ratio trigger and its hysteresis; `None` (the default)
    /// turns it off.
    pub failure_ratio: Option<FailureRatioConfig>,
    /// How long an open arm refuses every call (the first time it opens).
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "crate::config::duration::Text")]
    pub break_duration: Duration,
    /// The longest break: when set, each consecutive reopening (its
    /// probes failed, no close between) doubles the break from
    /// `break_duration` up to this; a close starts again from
    /// `break_duration`. `None` (the default): every break is
    /// `break_duration`.
    #[serde(default, with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub max_break_duration: Option<Duration>,
    /// Probes admitted per half-open period; further calls are refused
    /// until the probes reach a verdict.
    pub half_open_probes: u32,
    /// Probe successes that close the arm (`M`); at most
    /// `half_open_probes`.
    pub close_after_successes: u32,
    /// How long a half-open arm with every probe slot taken waits for a
    /// verdict before it reopens. Guards against probes whose outcome is
    /// never reported, which would otherwise wedge the arm half-open.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "crate::config::duration::Text")]
    pub half_open_max_wait: Duration,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            consecutive_failures: Some(DEFAULT_CONSECUTIVE_FAILURES),
            failure_ratio: None,
            break_duration: DEFAULT_BREAK_DURATION,
            max_break_duration: None,
            half_open_probes: DEFAULT_HALF_OPEN_PROBES,
            close_after_successes: DEFAULT_CLOSE_AFTER_SUCCESSES,
            half_open_max_wait: DEFAULT_HALF_OPEN_MAX_WAIT,
        }
    }
}

impl BreakerConfig {
    /// The defaults of a cost arm (seed 002): 3 consecutive failures,
    /// a 120 s break; everything else as [`BreakerConfig::default`].
    pub fn cost_default() -> Self {
        BreakerConfig {
            consecutive_failures: Some(DEFAULT_COST_CONSECUTIVE_FAILURES),
            break_duration: DEFAULT_COST_BREAK_DURATION,
            ..BreakerConfig::default()
        }
    }
}

/// The failure-ratio trigger: open when, over the sliding `window`, at least
/// `min_throughput` counted outcomes were seen and the share of failures is
/// at least `open_at`; a half-open arm closes only when its probes fail
/// below `close_below`.
///
/// # Why two thresholds
///
/// With a single threshold an arm hovering around it flaps open and closed
/// on every probe round. Requiring a clearly better ratio to close than the
/// one that opened (hysteresis, `close_below < open_at`) keeps it open until
/// the target has visibly recovered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct FailureRatioConfig {
    /// Failure ratio at or above which the arm opens, in `(0, 1]`.
    pub open_at: f64,
    /// Probe failure ratio below which a half-open arm may close, in
    /// `(0, open_at)`.
    pub close_below: f64,
    /// Length of the sliding window.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "crate::config::duration::Text")]
    pub window: Duration,
    /// Counted outcomes the window must hold before its ratio counts: a
    /// single failure out of one call is no evidence.
    pub min_throughput: u32,
}

impl Default for FailureRatioConfig {
    fn default() -> Self {
        FailureRatioConfig {
            open_at: DEFAULT_OPEN_AT,
            close_below: DEFAULT_CLOSE_BELOW,
            window: DEFAULT_WINDOW,
            min_throughput: DEFAULT_MIN_THROUGHPUT,
        }
    }
}

/// The settings of every arm kind: one [`BreakerConfig`] per [`ArmKind`].
///
/// Each arm of a kind (each provider, each tool, …) gets its own breaker
/// built from its kind's settings. A section given in part takes the
/// missing fields from *its kind's* defaults: `cost = { break_duration =
/// "60s" }` keeps the cost arm's 3 consecutive failures, not the general 5.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(from = "BreakersConfigRepr")]
#[non_exhaustive]
pub struct BreakersConfig {
    /// Arms keyed by model provider.
    pub provider: BreakerConfig,
    /// Arms keyed by tool name.
    pub tool: BreakerConfig,
    /// Arms keyed by resource group (tools sharing a backend).
    pub resource_group: BreakerConfig,
    /// Arms keyed by cost account; defaults to [`BreakerConfig::cost_default`].
    pub cost: BreakerConfig,
}

impl Default for BreakersConfig {
    fn default() -> Self {
        BreakersConfig {
            provider: BreakerConfig::default(),
            tool: BreakerConfig::default(),
            resource_group: BreakerConfig::default(),
            cost: BreakerConfig::cost_default(),
        }
    }
}

impl BreakersConfig {
    /// The settings of `kind`'s arms.
    pub fn for_kind(&self, kind: ArmKind) -> &BreakerConfig {
        match kind {
            ArmKind::Provider => &self.provider,
            ArmKind::Tool => &self.tool,
            ArmKind::ResourceGroup => &self.resource_group,
            ArmKind::Cost => &self.cost,
        }
    }
}

/// The wire form of [`BreakersConfig`]: every section a patch over its
/// kind's defaults.
#[derive(Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
struct BreakersConfigRepr {
    provider: BreakerConfigPatch,
    tool: BreakerConfigPatch,
    resource_group: BreakerConfigPatch,
    cost: BreakerConfigPatch,
}

impl From<BreakersConfigRepr> for BreakersConfig {
    fn from(repr: BreakersConfigRepr) -> Self {
        BreakersConfig {
            provider: repr.provider.over(BreakerConfig::default()),
            tool: repr.tool.over(BreakerConfig::default()),
            resource_group: repr.resource_group.over(BreakerConfig::default()),
            cost: repr.cost.over(BreakerConfig::cost_default()),
        }
    }
}

/// A [`BreakerConfig`] with every field optional.
///
/// NOTE: mirrors the fields of `BreakerConfig`; add a field to both.
#[derive(Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
struct BreakerConfigPatch {
    /// Outer `None`: absent; `Some(None)`: explicitly `null` (trigger off).
    #[serde(deserialize_with = "present")]
    #[schemars(with = "Option<u32>")]
    consecutive_failures: Option<Option<u32>>,
    #[serde(deserialize_with = "present")]
    #[schemars(with = "Option<FailureRatioConfig>")]
    failure_ratio: Option<Option<FailureRatioConfig>>,
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    break_duration: Option<Duration>,
    #[serde(deserialize_with = "present_duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    max_break_duration: Option<Option<Duration>>,
    half_open_probes: Option<u32>,
    close_after_successes: Option<u32>,
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    half_open_max_wait: Option<Duration>,
}

impl BreakerConfigPatch {
    fn over(self, base: BreakerConfig) -> BreakerConfig {
        BreakerConfig {
            consecutive_failures: self
                .consecutive_failures
                .unwrap_or(base.consecutive_failures),
            failure_ratio: self.failure_ratio.unwrap_or(base.failure_ratio),
            break_duration: self.break_duration.unwrap_or(base.break_duration),
            max_break_duration: self.max_break_duration.unwrap_or(base.max_break_duration),
            half_open_probes: self.half_open_probes.unwrap_or(base.half_open_probes),
            close_after_successes: self
                .close_after_successes
                .unwrap_or(base.close_after_successes),
            half_open_max_wait: self.half_open_max_wait.unwrap_or(base.half_open_max_wait),
        }
    }
}

/// Deserializes a field that is present (possibly `null`) as `Some(value)`,
/// so that a missing field (`None` through `default`) and an explicit
/// `null` stay distinct.
fn present<'de, T, D>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: serde::Deserializer<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

/// Deserializes an optional duration that is present as `Some(value)`.
fn present_duration<'de, D>(deserializer: D) -> Result<Option<Option<Duration>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    crate::config::duration::deserialize(deserializer).map(Some)
}

/// The dotted names of one config section's settings, for [`ConfigError`].
#[derive(Debug)]
pub(super) struct Fields {
    section: &'static str,
    consecutive_failures: &'static str,
    failure_ratio: &'static str,
    open_at: &'static str,
    close_below: &'static str,
    window: &'static str,
    min_throughput: &'static str,
    break_duration: &'static str,
    max_break_duration: &'static str,
    half_open_probes: &'static str,
    close_after_successes: &'static str,
    half_open_max_wait: &'static str,
}

/// `ConfigError` names fields as `&'static str`, so each section's names are
/// spelled out at compile time.
macro_rules! fields {
    ($section:literal) => {
        Fields {
            section: $section,
            consecutive_failures: concat!($section, ".consecutive_failures"),
            failure_ratio: concat!($section, ".failure_ratio"),
            open_at: concat!($section, ".failure_ratio.open_at"),
            close_below: concat!($section, ".failure_ratio.close_below"),
            window: concat!($section, ".failure_ratio.window"),
            min_throughput: concat!($section, ".failure_ratio.min_throughput"),
            break_duration: concat!($section, ".break_duration"),
            max_break_duration: concat!($section, ".max_break_duration"),
            half_open_probes: concat!($section, ".half_open_probes"),
            close_after_successes: concat!($section, ".close_after_successes"),
            half_open_max_wait: concat!($section, ".half_open_max_wait"),
        }
    };
}

/// Field names of a standalone breaker.
pub(super) const BREAKER_FIELDS: Fields = fields!("breaker");

/// Field names of each arm kind's section.
pub(super) fn fields_for(kind: ArmKind) -> &'static Fields {
    const PROVIDER: Fields = fields!("breaker.provider");
    const TOOL: Fields = fields!("breaker.tool");
    const RESOURCE_GROUP: Fields = fields!("breaker.resource_group");
    const COST: Fields = fields!("breaker.cost");
    match kind {
        ArmKind::Provider => &PROVIDER,
        ArmKind::Tool => &TOOL,
        ArmKind::ResourceGroup => &RESOURCE_GROUP,
        ArmKind::Cost => &COST,
    }
}

/// Validated settings of one arm. Invariants: at least one trigger is on;
/// every count and duration is positive; `close_after_successes ≤
/// half_open_probes`; `0 < close_below < open_at ≤ 1`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Settings {
    pub(super) consecutive_failures: Option<u32>,
    pub(super) ratio: Option<RatioSettings>,
    pub(super) break_duration: Duration,
    /// The longest break after consecutive reopenings (`break_duration`
    /// when breaks do not grow).
    pub(super) max_break_duration: Duration,
    pub(super) half_open_probes: u32,
    pub(super) close_after_successes: u32,
    pub(super) half_open_max_wait: Duration,
}

/// Validated failure-ratio trigger.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct RatioSettings {
    pub(super) open_at: Ratio,
    pub(super) close_below: Ratio,
    pub(super) window: Duration,
    pub(super) min_throughput: u32,
}

impl Settings {
    /// Validates `config`, naming refused settings after `fields`.
    pub(super) fn validate(
        config: &BreakerConfig,
        fields: &Fields,
    ) -> Result<Settings, ConfigError> {
        let consecutive_failures = config
            .consecutive_failures
            .map(|n| positive_count(fields.consecutive_failures, n))
            .transpose()?;
        let ratio = config
            .failure_ratio
            .as_ref()
            .map(|r| RatioSettings::validate(r, fields))
            .transpose()?;
        if consecutive_failures.is_none() && ratio.is_none() {
            return Err(ConfigError::Inconsistent {
                field: fields.consecutive_failures,
                reason: format!(
                    "or {} must be set, but both are off and the breaker could never open",
                    fields.failure_ratio
                ),
            });
        }
        let break_duration = positive_duration(fields.break_duration, config.break_duration)?;
        let max_break_duration = match config.max_break_duration {
            None => break_duration,
            Some(max) if max < break_duration => {
                return Err(ConfigError::Inconsistent {
                    field: fields.max_break_duration,
                    reason: format!(
                        "must not be less than {} ({break_duration:?}), but it is {max:?}",
                        fields.break_duration
                    ),
                });
            }
            Some(max) => max,
        };
        let half_open_probes = positive_count(fields.half_open_probes, config.half_open_probes)?;
        let close_after_successes =
            positive_count(fields.close_after_successes, config.close_after_successes)?;
        if close_after_successes > half_open_probes {
            return Err(ConfigError::Inconsistent {
                field: fields.close_after_successes,
                reason: format!(
                    "must not exceed {}.half_open_probes ({half_open_probes}), but it is \
                     {close_after_successes}: the arm could never close",
                    fields.section
                ),
            });
        }
        let half_open_max_wait =
            positive_duration(fields.half_open_max_wait, config.half_open_max_wait)?;
        Ok(Settings {
            consecutive_failures,
            ratio,
            break_duration,
            max_break_duration,
            half_open_probes,
            close_after_successes,
            half_open_max_wait,
        })
    }
}

impl RatioSettings {
    fn validate(
        config: &FailureRatioConfig,
        fields: &Fields,
    ) -> Result<RatioSettings, ConfigError> {
        // A zero open_at would open on a window without a single failure.
        let open_at = Ratio::new_positive(fields.open_at, config.open_at)?;
        // A zero close_below could never be undercut: the arm would never close.
        let close_below = Ratio::new_positive(fields.close_below, config.close_below)?;
        if close_below >= open_at {
            return Err(ConfigError::Inconsistent {
                field: fields.close_below,
                reason: format!(
                    "must be less than {} ({open_at}), but it is {close_below}",
                    fields.open_at
                ),
            });
        }
        let window = positive_duration(fields.window, config.window)?;
        let min_throughput = positive_count(fields.min_throughput, config.min_throughput)?;
        Ok(RatioSettings {
            open_at,
            close_below,
            window,
            min_throughput,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validate(config: &BreakerConfig) -> Result<Settings, ConfigError> {
        Settings::validate(config, &BREAKER_FIELDS)
    }

    fn with_ratio(edit: impl FnOnce(&mut FailureRatioConfig)) -> BreakerConfig {
        let mut ratio = FailureRatioConfig::default();
        edit(&mut ratio);
        BreakerConfig {
            failure_ratio: Some(ratio),
            ..BreakerConfig::default()
        }
    }

    #[test]
    fn defaults_validate() {
        assert!(validate(&BreakerConfig::default()).is_ok());
        assert!(validate(&BreakerConfig::cost_default()).is_ok());
        assert!(validate(&with_ratio(|_| {})).is_ok());
    }

    #[test]
    fn validate_with_zero_consecutive_failures_refuses() {
        let config = BreakerConfig {
            consecutive_failures: Some(0),
            ..BreakerConfig::default()
        };
        assert_eq!(
            validate(&config).unwrap_err(),
            ConfigError::Zero {
                field: "breaker.consecutive_failures"
            }
        );
    }

    #[test]
    fn validate_with_no_trigger_refuses() {
        let config = BreakerConfig {
            consecutive_failures: None,
            failure_ratio: None,
            ..BreakerConfig::default()
        };
        let err = validate(&config).unwrap_err();
        assert_eq!(err.field(), "breaker.consecutive_failures");
        assert!(
            err.to_string()
                .contains("or breaker.failure_ratio must be set"),
            "{err}"
        );
    }

    #[test]
    fn validate_with_only_ratio_trigger_accepts() {
        let mut config = with_ratio(|_| {});
        config.consecutive_failures = None;
        let settings = validate(&config).unwrap();
        assert!(settings.consecutive_failures.is_none());
        assert!(settings.ratio.is_some());
    }

    #[test]
    fn validate_with_ratios_outside_unit_interval_or_nan_refuses() {
        for bad in [f64::NAN, f64::INFINITY, -0.5, 1.5] {
            let err = validate(&with_ratio(|r| r.open_at = bad)).unwrap_err();
            assert_eq!(err.field(), "breaker.failure_ratio.open_at", "{bad}");
            assert!(err.to_string().contains("[0, 1]"), "{err}");
            let err = validate(&with_ratio(|r| r.close_below = bad)).unwrap_err();
            assert_eq!(err.field(), "breaker.failure_ratio.close_below", "{bad}");
        }
    }

    #[test]
    fn validate_with_zero_ratios_refuses() {
        assert_eq!(
            validate(&with_ratio(|r| r.open_at = 0.0)).unwrap_err(),
            ConfigError::Zero {
                field: "breaker.failure_ratio.open_at"
            }
        );
        assert_eq!(
            validate(&with_ratio(|r| r.close_below = 0.0)).unwrap_err(),
            ConfigError::Zero {
                field: "breaker.failure_ratio.close_below"
            }
        );
    }

    #[test]
    fn validate_with_close_below_not_less_than_open_at_refuses() {
        for (open_at, close_below) in [(0.5, 0.5), (0.5, 0.7)] {
            let err = validate(&with_ratio(|r| {
                r.open_at = open_at;
                r.close_below = close_below;
            }))
            .unwrap_err();
            assert_eq!(err.field(), "breaker.failure_ratio.close_below");
            assert!(
                err.to_string()
                    .contains("must be less than breaker.failure_ratio.open_at (0.5)"),
                "{err}"
            );
        }
    }

    #[test]
    fn validate_with_zero_window_or_min_throughput_refuses() {
        assert_eq!(
            validate(&with_ratio(|r| r.window = Duration::ZERO)).unwrap_err(),
            ConfigError::Zero {
                field: "breaker.failure_ratio.window"
            }
        );
        assert_eq!(
            validate(&with_ratio(|r| r.min_throughput = 0)).unwrap_err(),
            ConfigError::Zero {
                field: "breaker.failure_ratio.min_throughput"
            }
        );
    }

    #[test]
    fn validate_with_zero_durations_or_probe_counts_refuses() {
        type Edit = fn(&mut BreakerConfig);
        let cases: [(Edit, &str); 4] = [
            (
                |c| c.break_duration = Duration::ZERO,
                "breaker.break_duration",
            ),
            (|c| c.half_open_probes = 0, "breaker.half_open_probes"),
            (
                |c| c.close_after_successes = 0,
                "breaker.close_after_successes",
            ),
            (
                |c| c.half_open_max_wait = Duration::ZERO,
                "breaker.half_open_max_wait",
            ),
        ];
        for (edit, field) in cases {
            let mut config = BreakerConfig::default();
            edit(&mut config);
            assert_eq!(validate(&config).unwrap_err(), ConfigError::Zero { field });
        }
    }

    #[test]
    fn validate_with_more_successes_than_probes_refuses() {
        let config = BreakerConfig {
            half_open_probes: 2,
            close_after_successes: 3,
            ..BreakerConfig::default()
        };
        let err = validate(&config).unwrap_err();
        assert_eq!(err.field(), "breaker.close_after_successes");
        assert!(
            err.to_string()
                .contains("must not exceed breaker.half_open_probes (2), but it is 3"),
            "{err}"
        );
    }

    #[test]
    fn arm_sections_name_their_kind_in_errors() {
        let config = BreakerConfig {
            break_duration: Duration::ZERO,
            ..BreakerConfig::default()
        };
        let err = Settings::validate(&config, fields_for(ArmKind::ResourceGroup)).unwrap_err();
        assert_eq!(err.field(), "breaker.resource_group.break_duration");
    }

    #[test]
    fn config_from_json_reads_humantime_durations() {
        let config: BreakerConfig = serde_json::from_str(
            r#"{
                "consecutive_failures": 7,
                "failure_ratio": {"open_at": 0.5, "close_below": 0.1, "window": "2m"},
                "break_duration": "30s",
                "half_open_max_wait": "1m 30s"
            }"#,
        )
        .unwrap();
        assert_eq!(config.consecutive_failures, Some(7));
        assert_eq!(config.break_duration, Duration::from_secs(30));
        assert_eq!(config.half_open_max_wait, Duration::from_secs(90));
        assert_eq!(config.half_open_probes, DEFAULT_HALF_OPEN_PROBES);
        let ratio = config.failure_ratio.unwrap();
        assert_eq!(ratio.window, Duration::from_secs(120));
        assert_eq!(ratio.min_throughput, DEFAULT_MIN_THROUGHPUT);
        assert_eq!(ratio.open_at, 0.5);
    }

    #[test]
    fn config_from_json_with_unknown_field_refuses() {
        let err = serde_json::from_str::<BreakerConfig>(r#"{"break_duraton": "30s"}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        let err = serde_json::from_str::<BreakersConfig>(r#"{"tool": {"probes": 1}}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
    }

    #[test]
    fn config_round_trips_through_json() {
        let config = with_ratio(|r| r.window = Duration::from_secs(90));
        let json = serde_json::to_string(&config).unwrap();
        assert!(json.contains(r#""break_duration":"30s""#), "{json}");
        assert!(json.contains(r#""window":"1m 30s""#), "{json}");
        assert_eq!(
            serde_json::from_str::<BreakerConfig>(&json).unwrap(),
            config
        );
        let all = BreakersConfig::default();
        let json = serde_json::to_string(&all).unwrap();
        assert_eq!(serde_json::from_str::<BreakersConfig>(&json).unwrap(), all);
    }

    #[test]
    fn breakers_config_partial_cost_section_keeps_cost_defaults() {
        let config: BreakersConfig = serde_json::from_str(
            r#"{"cost": {"break_duration": "60s"}, "tool": {"consecutive_failures": null,
                "failure_ratio": {}}}"#,
        )
        .unwrap();
        assert_eq!(
            config.cost.consecutive_failures,
            Some(DEFAULT_COST_CONSECUTIVE_FAILURES)
        );
        assert_eq!(config.cost.break_duration, Duration::from_secs(60));
        assert_eq!(config.tool.consecutive_failures, None);
        assert_eq!(
            config.tool.failure_ratio,
            Some(FailureRatioConfig::default())
        );
        assert_eq!(config.provider, BreakerConfig::default());
        assert_eq!(
            serde_json::from_str::<BreakersConfig>("{}").unwrap(),
            BreakersConfig::default()
        );
    }

    #[test]
    fn breakers_config_from_toml_reads_sections() {
        let config: BreakersConfig = toml::from_str(
            r#"
            [provider]
            break_duration = "45s"
            [provider.failure_ratio]
            open_at = 0.5
            close_below = 0.25
            "#,
        )
        .unwrap();
        assert_eq!(config.provider.break_duration, Duration::from_secs(45));
        assert_eq!(
            config.provider.failure_ratio.as_ref().unwrap().close_below,
            0.25
        );
        assert_eq!(config.cost, BreakerConfig::cost_default());
    }
}

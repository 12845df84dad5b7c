//! Validation shared by every policy's configuration: [`ConfigError`] and the
//! constrained value types [`Ratio`] and [`Weight`].
//!
//! # Why one error type
//!
//! Each policy has two layers (STYLE.md): a plain serde `XConfig` an operator
//! writes, and a validated type built from it. Every refusal says which field
//! was wrong, what it held and what was expected, so an operator can fix the
//! setting without reading code. The same type is used by every policy so that
//! a config loader can collect all problems of a file into one list.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A setting that was refused at construction.
///
/// `field` is the dotted path of the setting inside its config section
/// (`breaker.failure_ratio.open_at`), so the message names what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A number fell outside its allowed range.
    #[error("{field} must be {expected}, but it is {found}")]
    OutOfRange {
        /// The setting, as a dotted path.
        field: &'static str,
        /// The allowed range, in words.
        expected: &'static str,
        /// The value that was given.
        found: String,
    },
    /// A duration, count or threshold was zero where it must be positive.
    #[error("{field} must be greater than zero")]
    Zero {
        /// The setting, as a dotted path.
        field: &'static str,
    },
    /// Two settings contradict each other.
    #[error("{field} {reason}")]
    Inconsistent {
        /// The setting that must change, as a dotted path.
        field: &'static str,
        /// What the relation between the settings must be.
        reason: String,
    },
}

impl ConfigError {
    /// The dotted path of the setting that was refused.
    pub fn field(&self) -> &'static str {
        match self {
            ConfigError::OutOfRange { field, .. }
            | ConfigError::Zero { field }
            | ConfigError::Inconsistent { field, .. } => field,
        }
    }
}

/// Refuses a zero duration for `field`.
pub(crate) fn positive_duration(
    field: &'static str,
    value: Duration,
) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        Err(ConfigError::Zero { field })
    } else {
        Ok(value)
    }
}

/// Refuses a zero count for `field`.
pub(crate) fn positive_count(field: &'static str, value: u32) -> Result<u32, ConfigError> {
    if value == 0 {
        Err(ConfigError::Zero { field })
    } else {
        Ok(value)
    }
}

/// The longest duration any setting accepts: 366 days.
///
/// # Why one ceiling for every duration
///
/// A deadline is `now + duration` and a lease expiry a count of
/// milliseconds: a duration near `u64::MAX` seconds overflows both, and no
/// budget, timeout, window or retention is meant to outlast a year. Fields
/// with a tighter range of their own check it after this one.
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 60 * 60);

/// Serde for every duration a config holds: humantime text (`"30s"`,
/// `"1h 30m"`), refused above [`MAX_DURATION`] with the field's name (the
/// config loader adds the file, line and dotted path).
///
/// NOTE: every `Duration` (or `Option<Duration>`) field of a config type
/// uses `#[serde(with = "crate::config::duration")]`; a new one must too.
pub mod duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::MAX_DURATION;

    /// A duration as config writes it, for the config's JSON Schema: the
    /// field is text, not the seconds-and-nanos struct serde would
    /// describe for a [`Duration`].
    pub struct Text;

    impl schemars::JsonSchema for Text {
        fn schema_name() -> std::borrow::Cow<'static, str> {
            "Duration".into()
        }

        fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
            schemars::json_schema!({
                "type": "string",
                "description": "A duration as humans write it: \"250ms\", \"30s\", \"5m\", \"1h 30m\"; at most 366 days.",
                "pattern": "^\\s*[0-9]+\\s*[a-zA-Zµ]+(\\s*[0-9]+\\s*[a-zA-Zµ]+)*\\s*$"
            })
        }
    }

    /// A duration, or an optional one.
    pub trait Bounded: Sized {
        /// The longest duration held.
        fn longest(&self) -> Option<Duration>;
    }

    impl Bounded for Duration {
        fn longest(&self) -> Option<Duration> {
            Some(*self)
        }
    }

    impl Bounded for Option<Duration> {
        fn longest(&self) -> Option<Duration> {
            *self
        }
    }

    /// Serializes as humantime text.
    ///
    /// # Errors
    ///
    /// The serializer's.
    pub fn serialize<T, S>(value: &T, serializer: S) -> Result<S::Ok, S::Error>
    where
        for<'a> humantime_serde::Serde<&'a T>: Serialize,
        S: Serializer,
    {
        humantime_serde::serialize(value, serializer)
    }

    const DAY: u64 = 24 * 60 * 60;

    /// `d` as a config writes it: humantime text (`1h 30m`), and whole
    /// days past one day (`400d 3h`), not humantime's years and months
    /// (whose year is 365.25 days).
    pub(crate) fn text(d: Duration) -> String {
        if d.as_secs() >= DAY {
            in_days(d)
        } else {
            humantime_serde::re::humantime::format_duration(d).to_string()
        }
    }

    /// `d` in whole days and the rest (`400d`, `400d 3h`).
    fn in_days(d: Duration) -> String {
        let days = d.as_secs() / DAY;
        let rest = d.saturating_sub(Duration::from_secs(days * DAY));
        if rest.is_zero() {
            format!("{days}d")
        } else {
            format!(
                "{days}d {}",
                humantime_serde::re::humantime::format_duration(rest)
            )
        }
    }

    /// Deserializes humantime text, refusing more than [`MAX_DURATION`].
    ///
    /// # Errors
    ///
    /// The text is not a duration, or it is longer than [`MAX_DURATION`].
    pub fn deserialize<'de, T, D>(deserializer: D) -> Result<T, D::Error>
    where
        humantime_serde::Serde<T>: Deserialize<'de>,
        T: Bounded,
        D: Deserializer<'de>,
    {
        let value: T = humantime_serde::deserialize(deserializer)?;
        match value.longest() {
            Some(d) if d > MAX_DURATION => Err(serde::de::Error::custom(format!(
                // In days, as the ceiling is set (humantime would say
                // "1year 18h": its year is 365.25 days).
                "must be at most {}d, but it is {}",
                MAX_DURATION.as_secs() / DAY,
                in_days(d)
            ))),
            _ => Ok(value),
        }
    }
}

/// A fraction in `[0, 1]`, finite.
///
/// # Why a newtype
///
/// Ratios drive shares of budgets and failure thresholds; a NaN or a value
/// above one would silently disable a guard. Constructing one is the only
/// place that can fail, so every use after that is total.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Ratio(f64);

impl Ratio {
    /// Zero.
    pub const ZERO: Ratio = Ratio(0.0);
    /// One.
    pub const ONE: Ratio = Ratio(1.0);

    /// A ratio for the setting `field`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::OutOfRange`] when `value` is NaN, infinite, negative or
    /// above one.
    pub fn new(field: &'static str, value: f64) -> Result<Ratio, ConfigError> {
        if value.is_finite() && (0.0..=1.0).contains(&value) {
            Ok(Ratio(value))
        } else {
            Err(ConfigError::OutOfRange {
                field,
                expected: "a number in [0, 1]",
                found: value.to_string(),
            })
        }
    }

    /// A ratio in `(0, 1]`: zero is refused too.
    ///
    /// # Errors
    ///
    /// As [`Ratio::new`], and [`ConfigError::Zero`] for zero.
    pub fn new_positive(field: &'static str, value: f64) -> Result<Ratio, ConfigError> {
        let ratio = Ratio::new(field, value)?;
        if ratio.0 == 0.0 {
            Err(ConfigError::Zero { field })
        } else {
            Ok(ratio)
        }
    }

    /// The fraction as a float in `[0, 1]`.
    pub fn get(self) -> f64 {
        self.0
    }

    /// `self × value`, rounded down; never more than `value`.
    pub fn of_u64(self, value: u64) -> u64 {
        // f64 loses precision above 2^53; the min keeps the result a share.
        (((value as f64) * self.0).floor() as u64).min(value)
    }

    /// `self × value`, rounded down to the nanosecond; never more than `value`.
    pub fn of_duration(self, value: Duration) -> Duration {
        let nanos = u64::try_from(value.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(self.of_u64(nanos)).min(value)
    }
}

impl<'de> Deserialize<'de> for Ratio {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(deserializer)?;
        Ratio::new("ratio", value).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A positive, finite weight for dividing a budget between parallel branches.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize)]
#[serde(transparent)]
pub struct Weight(f64);

impl Weight {
    /// A weight for the setting `field`.
    ///
    /// # Errors
    ///
    /// [`ConfigError::OutOfRange`] when `value` is NaN, infinite, zero or
    /// negative.
    pub fn new(field: &'static str, value: f64) -> Result<Weight, ConfigError> {
        if value.is_finite() && value > 0.0 {
            Ok(Weight(value))
        } else {
            Err(ConfigError::OutOfRange {
                field,
                expected: "a finite number greater than zero",
                found: value.to_string(),
            })
        }
    }

    /// The weight as a float.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl Default for Weight {
    fn default() -> Self {
        Weight(1.0)
    }
}

impl<'de> Deserialize<'de> for Weight {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = f64::deserialize(deserializer)?;
        Weight::new("weight", value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_duration_over_the_ceiling_is_echoed_in_days_as_written() {
        #[derive(Debug, serde::Deserialize)]
        struct Holder {
            #[serde(with = "duration")]
            #[allow(dead_code)]
            d: Option<Duration>,
        }
        let err = serde_json::from_str::<Holder>(r#"{"d": "400d"}"#).unwrap_err();
        assert!(
            err.to_string()
                .contains("must be at most 366d, but it is 400d"),
            "{err}"
        );
        let err = serde_json::from_str::<Holder>(r#"{"d": "400d 3h"}"#).unwrap_err();
        assert!(err.to_string().contains("but it is 400d 3h"), "{err}");
    }

    #[test]
    fn ratio_refuses_nan_infinity_and_values_outside_unit_interval() {
        for bad in [f64::NAN, f64::INFINITY, -0.1, 1.000_001] {
            let err = Ratio::new("retry.budget_ratio", bad).unwrap_err();
            assert_eq!(err.field(), "retry.budget_ratio");
            assert!(
                err.to_string().contains("must be a number in [0, 1]"),
                "{err}"
            );
        }
        assert!(Ratio::new("r", 0.0).is_ok());
        assert!(Ratio::new("r", 1.0).is_ok());
    }

    #[test]
    fn positive_ratio_refuses_zero() {
        assert_eq!(
            Ratio::new_positive("r", 0.0).unwrap_err(),
            ConfigError::Zero { field: "r" }
        );
    }

    #[test]
    fn ratio_share_never_exceeds_the_whole() {
        let r = Ratio::new("r", 1.0).unwrap();
        assert_eq!(r.of_u64(u64::MAX), u64::MAX);
        assert_eq!(
            r.of_duration(Duration::MAX),
            Duration::MAX.min(Duration::from_nanos(u64::MAX))
        );
        let half = Ratio::new("r", 0.5).unwrap();
        assert_eq!(half.of_u64(7), 3);
        // f64 rounds 2^60 - 1 up to 2^60; the share must still not exceed it.
        assert_eq!(Ratio::ONE.of_u64((1 << 60) - 1), (1 << 60) - 1);
        assert_eq!(
            half.of_duration(Duration::from_millis(3)),
            Duration::from_micros(1500)
        );
    }

    #[test]
    fn ratio_deserialization_validates() {
        let err = serde_json::from_str::<Ratio>("1.5").unwrap_err();
        assert!(err.to_string().contains("must be a number in [0, 1]"));
    }

    #[test]
    fn weight_refuses_zero_negative_and_nan() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Weight::new("w", bad).is_err());
        }
    }
}

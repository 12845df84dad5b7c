//! [`AllowanceFactor`]: how much headroom over its p99 one attempt gets.

use std::time::Duration;

use super::constants::{DEFAULT_ALLOWANCE_FACTOR, MAX_ALLOWANCE_FACTOR, MIN_ALLOWANCE_FACTOR};
use crate::config::ConfigError;

/// One attempt's allowance is its p99 × this factor, in
/// [[`MIN_ALLOWANCE_FACTOR`], [`MAX_ALLOWANCE_FACTOR`]]; default
/// [`DEFAULT_ALLOWANCE_FACTOR`] (2).
///
/// # Why configurable
///
/// Two × p99 is a starting point, not a conclusion (seed 000): a tool
/// with an alternative should fail fast (close to 1), the only source of
/// some data may deserve generous headroom.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct AllowanceFactor(f64);

impl Default for AllowanceFactor {
    fn default() -> Self {
        AllowanceFactor(DEFAULT_ALLOWANCE_FACTOR)
    }
}

impl AllowanceFactor {
    /// A factor in [1, 10].
    ///
    /// # Errors
    ///
    /// [`ConfigError::OutOfRange`] for a value outside it (or not a number).
    pub fn new(value: f64) -> Result<Self, ConfigError> {
        if (MIN_ALLOWANCE_FACTOR..=MAX_ALLOWANCE_FACTOR).contains(&value) {
            Ok(AllowanceFactor(value))
        } else {
            Err(ConfigError::OutOfRange {
                field: "latency.allowance_factor",
                expected: "between 1 and 10",
                found: value.to_string(),
            })
        }
    }

    /// The factor.
    pub fn get(self) -> f64 {
        self.0
    }

    /// `p99` × the factor, saturating at [`Duration::MAX`].
    pub fn apply(self, p99: Duration) -> Duration {
        Duration::try_from_secs_f64(p99.as_secs_f64() * self.0).unwrap_or(Duration::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn factor_outside_one_to_ten_is_refused() {
        for bad in [0.0, 0.99, 10.01, f64::NAN, f64::INFINITY, -2.0] {
            assert!(AllowanceFactor::new(bad).is_err(), "{bad}");
        }
        assert!(AllowanceFactor::new(1.0).is_ok());
        assert!(AllowanceFactor::new(10.0).is_ok());
    }

    #[test]
    fn apply_scales_and_saturates() {
        let f = AllowanceFactor::new(1.5).unwrap();
        assert_eq!(
            f.apply(Duration::from_millis(200)),
            Duration::from_millis(300)
        );
        assert_eq!(
            AllowanceFactor::default().apply(Duration::MAX),
            Duration::MAX
        );
        assert_eq!(AllowanceFactor::default().get(), 2.0);
    }
}

//! What rein-core needs to know about a tool to decide about a call:
//! its [`ToolClass`] and its [`LatencyProfile`].

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, positive_duration};

/// A tool's retryability, declared at registration.
///
/// The criterion is not "read or write" but "does repeating it change the
/// semantics" (seed 000, "Splitting Tools into Three Classes").
///
/// | class | retried automatically | idempotency key |
/// | --- | --- | --- |
/// | `read` | yes, bounded | yes (harmless) |
/// | `idempotent_write` | yes, with the same key | yes, required |
/// | `irreversible` | never | none: compensation only |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolClass {
    /// Read-only or naturally idempotent: search, query, read a file.
    Read,
    /// A write the server deduplicates by an idempotency key.
    IdempotentWrite,
    /// An externally visible effect that cannot be deduplicated: send an
    /// email, take a payment.
    Irreversible,
}

impl ToolClass {
    /// The class's name as it appears in config and events.
    pub fn as_str(self) -> &'static str {
        match self {
            ToolClass::Read => "read",
            ToolClass::IdempotentWrite => "idempotent_write",
            ToolClass::Irreversible => "irreversible",
        }
    }

    /// Whether a call of this class changes the outside world and so is
    /// declared in the ledger before it runs.
    pub fn has_side_effect(self) -> bool {
        !matches!(self, ToolClass::Read)
    }
}

impl fmt::Display for ToolClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A tool's latency distribution: the basis of its per-call allowance and of
/// the "can one more attempt still succeed" test of a retry.
///
/// Invariant: `0 < p50 ≤ p95 ≤ p99`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LatencyProfile {
    p50: Duration,
    p95: Duration,
    p99: Duration,
    samples: u64,
}

impl LatencyProfile {
    /// A profile from observed or declared quantiles.
    ///
    /// # Errors
    ///
    /// [`ConfigError::Zero`] for a zero `p50`, and
    /// [`ConfigError::Inconsistent`] unless `p50 ≤ p95 ≤ p99`.
    pub fn new(
        p50: Duration,
        p95: Duration,
        p99: Duration,
        samples: u64,
    ) -> Result<Self, ConfigError> {
        positive_duration("latency.p50", p50)?;
        if p95 < p50 {
            return Err(ConfigError::Inconsistent {
                field: "latency.p95",
                reason: format!("must not be less than latency.p50 ({p50:?}), but it is {p95:?}"),
            });
        }
        if p99 < p95 {
            return Err(ConfigError::Inconsistent {
                field: "latency.p99",
                reason: format!("must not be less than latency.p95 ({p95:?}), but it is {p99:?}"),
            });
        }
        Ok(LatencyProfile {
            p50,
            p95,
            p99,
            samples,
        })
    }

    /// The median latency: the least one more attempt needs to succeed.
    pub fn p50(&self) -> Duration {
        self.p50
    }

    /// The 95th percentile.
    pub fn p95(&self) -> Duration {
        self.p95
    }

    /// The 99th percentile: the basis of the per-call allowance.
    pub fn p99(&self) -> Duration {
        self.p99
    }

    /// How many observations the quantiles rest on (0 when declared).
    pub fn samples(&self) -> u64 {
        self.samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_profile_refuses_unordered_quantiles() {
        let ms = Duration::from_millis;
        assert!(LatencyProfile::new(ms(10), ms(20), ms(30), 0).is_ok());
        let err = LatencyProfile::new(ms(10), ms(5), ms(30), 0).unwrap_err();
        assert_eq!(err.field(), "latency.p95");
        let err = LatencyProfile::new(ms(10), ms(20), ms(15), 0).unwrap_err();
        assert_eq!(err.field(), "latency.p99");
        assert_eq!(
            LatencyProfile::new(Duration::ZERO, ms(1), ms(1), 0).unwrap_err(),
            ConfigError::Zero {
                field: "latency.p50"
            }
        );
    }

    #[test]
    fn tool_class_serializes_in_snake_case() {
        assert_eq!(
            serde_json::to_string(&ToolClass::IdempotentWrite).unwrap(),
            "\"idempotent_write\""
        );
        assert!(!ToolClass::Read.has_side_effect());
        assert!(ToolClass::Irreversible.has_side_effect());
    }
}

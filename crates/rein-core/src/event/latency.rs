//! Payloads of observed-latency events.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Where a degradation's baseline came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BaselineSource {
    /// The p99 declared in config.
    Declared,
    /// The observed profile's p99 when it was first trusted.
    Observed,
}

/// `latency_degraded`: the p99 of a target's last window of samples came
/// out above twice its baseline (seed 000: "a p99 above twice the
/// historical baseline usually means the downstream is degrading").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyDegraded {
    /// What degraded: `tool:NAME`, `tool_scale:NAME/BUCKET` or
    /// `model:PROVIDER/MODEL`.
    pub subject: String,
    /// The window's p99.
    #[serde(rename = "p99_ms", with = "super::millis")]
    pub p99: Duration,
    /// The baseline it exceeded twice over.
    #[serde(rename = "baseline_ms", with = "super::millis")]
    pub baseline: Duration,
    /// Where the baseline came from.
    pub baseline_source: BaselineSource,
    /// The samples of the window.
    pub samples: u64,
}

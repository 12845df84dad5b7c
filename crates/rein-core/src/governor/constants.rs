//! The governor's defaults and limits, named so that docs, config and tests
//! agree.
//!
//! NOTE: the defaults table in `governor/mod.rs` lists these values; change
//! both together.

use std::time::Duration;

/// The concurrency limit a resource group starts at (seed 000).
pub const DEFAULT_INITIAL_CONCURRENCY: u32 = 8;

/// The lowest the adaptive limit may shrink to (seed 000).
pub const DEFAULT_MIN_CONCURRENCY: u32 = 1;

/// The highest the adaptive limit may grow to (seed 000); the ceiling of
/// invariant 7 for a group that sets no `max`.
pub const DEFAULT_MAX_CONCURRENCY: u32 = 64;

/// The largest `max` a group may set: far above what one backend takes,
/// low enough that counts never approach `u32` arithmetic limits.
pub const MAX_CONCURRENCY_CEILING: u32 = 100_000;

/// The factor a shrink multiplies the limit by (seed 000: ×0.9).
pub const DEFAULT_BACKOFF: f64 = 0.9;

/// How far the smoothed latency may rise above its baseline before the limit
/// shrinks: 1.5 × the baseline.
pub const DEFAULT_LATENCY_TOLERANCE: f64 = 1.5;

/// The largest latency tolerance accepted: beyond 100 × the baseline the
/// latency trigger is off in all but name.
pub const MAX_LATENCY_TOLERANCE: f64 = 100.0;

/// The weight of a new latency sample in the moving average (seed 000:
/// `0.9 × ewma + 0.1 × rtt`).
pub const DEFAULT_SMOOTHING: f64 = 0.1;

/// How long a learned latency baseline is trusted: the baseline is the
/// lowest smoothed latency of the last one to two intervals.
pub const DEFAULT_BASELINE_INTERVAL: Duration = Duration::from_secs(60);

/// Samples seen before the latency trigger may shrink the limit: the first
/// few samples are the average's noise, not the backend's.
pub const DEFAULT_WARMUP_SAMPLES: u32 = 10;

/// The share of contended dispatches batch work keeps under an interactive
/// flood.
pub const DEFAULT_BATCH_SHARE: f64 = 0.1;

/// The largest batch share: above one half batch would be ahead of
/// interactive work, which is the other class's job.
pub const MAX_BATCH_SHARE: f64 = 0.5;

/// A tenant's weight when the config names none for it.
pub const DEFAULT_TENANT_WEIGHT: f64 = 1.0;

/// The smallest tenant weight accepted; weights are kept in thousandths.
pub const MIN_TENANT_WEIGHT: f64 = 0.001;

/// The largest tenant weight accepted.
pub const MAX_TENANT_WEIGHT: f64 = 1000.0;

/// The slowest request rate accepted: rates are kept in millionths of a
/// call per second.
pub const MIN_RATE_PER_SEC: f64 = 0.000_001;

/// The fastest request rate accepted.
pub const MAX_RATE_PER_SEC: f64 = 1_000_000_000.0;

/// The largest `tokens_per_minute` and `token_burst` accepted.
pub const MAX_TOKENS_PER_MINUTE: u64 = 1_000_000_000_000;

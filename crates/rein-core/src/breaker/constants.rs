//! The breaker's defaults, named so that docs, config and tests agree.
//!
//! NOTE: the defaults table in `breaker/mod.rs` lists these values; change
//! both together.

use std::time::Duration;

/// Consecutive counted failures that open a closed arm.
pub const DEFAULT_CONSECUTIVE_FAILURES: u32 = 5;

/// Failure ratio in the window at or above which a closed arm opens, and at
/// or above which half-open probes reopen it.
pub const DEFAULT_OPEN_AT: f64 = 0.6;

/// Probe failure ratio below which a half-open arm may close.
pub const DEFAULT_CLOSE_BELOW: f64 = 0.2;

/// Length of the sliding window over which the failure ratio is measured.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

/// Counted outcomes the window must hold before its ratio can open an arm.
pub const DEFAULT_MIN_THROUGHPUT: u32 = 20;

/// How long an open arm refuses every call before it admits probes.
pub const DEFAULT_BREAK_DURATION: Duration = Duration::from_secs(30);

/// Probes a half-open arm admits per half-open period.
pub const DEFAULT_HALF_OPEN_PROBES: u32 = 3;

/// Probe successes that close a half-open arm.
pub const DEFAULT_CLOSE_AFTER_SUCCESSES: u32 = 2;

/// How long a half-open arm whose probe slots are all taken waits for a
/// verdict before it gives up on the outstanding probes and reopens.
pub const DEFAULT_HALF_OPEN_MAX_WAIT: Duration = Duration::from_secs(120);

/// Consecutive counted failures that open a cost arm (seed 002): spending is
/// not retried into, so the cost arm trips sooner than the others.
pub const DEFAULT_COST_CONSECUTIVE_FAILURES: u32 = 3;

/// Break duration of a cost arm (seed 002).
pub const DEFAULT_COST_BREAK_DURATION: Duration = Duration::from_secs(120);

/// Buckets the sliding window is divided into. More buckets slide more
/// smoothly and cost more memory per arm (16 bytes each, no heap).
pub const WINDOW_BUCKETS: usize = 10;

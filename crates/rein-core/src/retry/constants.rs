use std::time::Duration;

/// Attempts per intent, the first included.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 4;
/// The backoff ceiling of the first retry.
pub const DEFAULT_BASE_DELAY: Duration = Duration::from_millis(250);
/// The largest backoff ceiling.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(8);
/// Retries allowed per request to a target: 20%.
pub const DEFAULT_BUDGET_RATIO: f64 = 0.2;
/// Retries a fresh budget allows before any request has deposited.
pub const DEFAULT_BUDGET_INITIAL: u32 = 10;
/// The most retries a budget can hold, however long traffic was healthy.
pub const DEFAULT_BUDGET_MAX: u32 = 20;

//! The registry's named defaults.

use std::time::Duration;

use crate::deadline::DEADLINE_HEADER;

/// The header an idempotency key travels in unless a tool names another.
pub const DEFAULT_IDEMPOTENCY_HEADER: &str = "Idempotency-Key";

/// How much of a tool's result body rein keeps before truncating it with an
/// explicit note: 16 KiB, enough for a structured answer, small enough that
/// one tool cannot flood the model's context.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 16 * 1024;

/// How much of a command tool's stdout (and, separately, stderr) rein keeps
/// before truncating it with an explicit note: 64 KiB. Larger than
/// [`DEFAULT_MAX_RESULT_BYTES`] because a program's output is often text
/// (logs, listings) rather than a structured answer.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The prefix of environment variables rein sets for a command tool
/// (`REIN_RUN_ID`, `REIN_DEADLINE_MS`, ...); a tool's `env` may not set
/// them, or it could forge the deadline or the correlation ids.
pub const RESERVED_ENV_PREFIX: &str = "REIN_";

/// How long an OpenAI-compatible provider may take for one request when its
/// config names no `timeout`; the run's deadline still applies on top.
pub const DEFAULT_PROVIDER_TIMEOUT: Duration = Duration::from_secs(60);

/// Observations a tool in `observe` latency mode needs before its measured
/// profile replaces the conservative fallback: fewer make a p99 noise.
pub const DEFAULT_OBSERVE_MIN_SAMPLES: u64 = 50;

/// Headers rein sets on every tool call; an adapter may not set them itself,
/// or it could forge the deadline or the correlation ids. Compared without
/// case, as HTTP does. The tool's idempotency header is reserved as well.
pub const RESERVED_HEADERS: [&str; 4] = [
    DEADLINE_HEADER,
    "Rein-Run-Id",
    "Rein-Intent-Id",
    "Rein-Attempt",
];

/// The share of an agent's wall clock reserved for compensation by default.
pub const DEFAULT_COMPENSATION_RESERVE: f64 = 0.2;

/// The largest share that may be reserved for compensation: the forward
/// path must keep some time.
pub const MAX_COMPENSATION_RESERVE: f64 = 0.9;

//! The defaults and bounds of observed latency.

use std::time::Duration;

/// The factor applied to a p99 for one attempt's allowance, unless a tool
/// sets `latency.allowance_factor`.
pub const DEFAULT_ALLOWANCE_FACTOR: f64 = 2.0;

/// The least allowance factor accepted: below 1 an attempt would be cut
/// before its own p99.
pub const MIN_ALLOWANCE_FACTOR: f64 = 1.0;

/// The largest allowance factor accepted: beyond it the "allowance" is no
/// bound at all, and the run's deadline decides alone.
pub const MAX_ALLOWANCE_FACTOR: f64 = 10.0;

/// A window's p99 above this many times its baseline is a degradation.
pub const DEGRADATION_FACTOR: u32 = 2;

/// Samples per degradation window.
pub const DEGRADATION_WINDOW: u64 = 20;

/// The longest latency a histogram tells apart; longer samples are
/// recorded as this.
pub const MAX_RECORDED: Duration = Duration::from_secs(3_600);

/// The version of [`LatencyHistogram::encode`](super::LatencyHistogram::encode)'s
/// text form. NOTE: bump it (and keep decoding the old one) when the form
/// changes; a stored row of another version is reported, not guessed at.
pub const HISTOGRAM_FORMAT_VERSION: u32 = 1;

/// The most buckets an encoded histogram may list: more than a histogram
/// of [`MAX_RECORDED`] at two significant digits has, so a longer list is
/// corruption (and is refused before anything is allocated for it).
pub const MAX_ENCODED_BUCKETS: usize = 10_000;

//! [`LatencyHistogram`]: a streaming latency distribution, mergeable
//! across processes, with a versioned text form.

use std::sync::OnceLock;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use super::constants::{HISTOGRAM_FORMAT_VERSION, MAX_ENCODED_BUCKETS, MAX_RECORDED};
use crate::tool::LatencyProfile;

/// Significant digits kept: 1% resolution, a few kilobytes per histogram.
const SIGNIFICANT_DIGITS: u8 = 2;

/// The unit samples are recorded in, as the text form names it.
const UNIT: &str = "us";

/// A stored histogram that cannot be read back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HistogramError {
    /// Not the JSON shape of any version.
    #[error("not an encoded latency histogram: {0}")]
    Malformed(String),
    /// A version this rein does not know (written by a newer one).
    #[error(
        "latency histogram format version {found}; this rein reads version {HISTOGRAM_FORMAT_VERSION}"
    )]
    UnknownVersion {
        /// The version found.
        found: u32,
    },
    /// The right shape, impossible content.
    #[error("latency histogram {0}")]
    Invalid(String),
}

/// A latency distribution: every sample counted in a bucket of 1%
/// resolution, from 1 µs to [`MAX_RECORDED`] (longer samples count as
/// that), so memory stays bounded however many calls are recorded.
///
/// Two histograms [`merge`](Self::merge) by adding their counts: the
/// distribution of both sets of samples, exactly as if one histogram had
/// seen them all — which is what lets several processes each record their
/// own calls and the store hold their sum.
///
/// # Text form
///
/// [`encode`](Self::encode) writes a small versioned JSON object (the
/// recorded buckets, not the whole array);
/// [`decode`](Self::decode) refuses anything else with a
/// [`HistogramError`] and never panics: stored bytes are outside input.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    inner: Histogram<u64>,
    /// [`profile`](Self::profile), kept until the next sample: every model
    /// call plans with it (more than once), and each computation scans the
    /// histogram three times.
    profile: OnceLock<Option<LatencyProfile>>,
}

/// The text form.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Encoded {
    /// [`HISTOGRAM_FORMAT_VERSION`].
    v: u32,
    /// The unit of the bucket values: `us`.
    unit: String,
    /// `[value, count]` per recorded bucket, `value` in `unit`.
    buckets: Vec<(u64, u64)>,
}

/// The version field alone, read first so a newer form is named as such.
#[derive(Deserialize)]
struct Version {
    v: u32,
}

fn max_micros() -> u64 {
    u64::try_from(MAX_RECORDED.as_micros()).unwrap_or(u64::MAX)
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for LatencyHistogram {
    fn eq(&self, other: &Self) -> bool {
        self.inner == other.inner
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        let inner = Histogram::new_with_bounds(1, max_micros(), SIGNIFICANT_DIGITS)
            .unwrap_or_else(|_| unreachable!("the latency histogram bounds are valid"));
        LatencyHistogram {
            inner,
            profile: OnceLock::new(),
        }
    }

    /// Counts one sample (at least 1 µs, at most [`MAX_RECORDED`]).
    pub fn record(&mut self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.inner.saturating_record(micros.clamp(1, max_micros()));
        self.profile = OnceLock::new();
    }

    /// Adds `other`'s samples to this histogram.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.profile = OnceLock::new();
        // Both share the same bounds, so adding cannot fail; if it ever
        // did, the samples are re-recorded bucket by bucket.
        if self.inner.add(&other.inner).is_err() {
            for bucket in other.inner.iter_recorded() {
                self.inner
                    .saturating_record_n(bucket.value_iterated_to(), bucket.count_at_value());
            }
        }
    }

    /// How many samples it holds.
    pub fn samples(&self) -> u64 {
        self.inner.len()
    }

    /// Whether it holds no sample.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Forgets every sample.
    pub fn clear(&mut self) {
        self.inner.reset();
        self.profile = OnceLock::new();
    }

    /// The latency at quantile `q` in [0, 1] (zero when empty).
    pub fn quantile(&self, q: f64) -> Duration {
        Duration::from_micros(self.inner.value_at_quantile(q.clamp(0.0, 1.0)))
    }

    /// The profile (p50, p95, p99, samples) it gives; `None` when empty.
    pub fn profile(&self) -> Option<LatencyProfile> {
        *self.profile.get_or_init(|| {
            if self.is_empty() {
                return None;
            }
            let at = |q| self.quantile(q).max(Duration::from_micros(1));
            LatencyProfile::new(at(0.50), at(0.95), at(0.99), self.samples()).ok()
        })
    }

    /// The versioned text form (see the type's docs).
    pub fn encode(&self) -> String {
        let encoded = Encoded {
            v: HISTOGRAM_FORMAT_VERSION,
            unit: UNIT.to_owned(),
            buckets: self
                .inner
                .iter_recorded()
                .map(|b| (b.value_iterated_to(), b.count_at_value()))
                .collect(),
        };
        serde_json::to_string(&encoded)
            .unwrap_or_else(|_| unreachable!("numbers and a string always serialize"))
    }

    /// Reads the text form back.
    ///
    /// # Errors
    ///
    /// [`HistogramError`] for anything [`encode`](Self::encode) did not
    /// write: another version, a bucket out of range, a zero count, too
    /// many buckets, counts that overflow.
    pub fn decode(text: &str) -> Result<Self, HistogramError> {
        let version: Version =
            serde_json::from_str(text).map_err(|e| HistogramError::Malformed(e.to_string()))?;
        if version.v != HISTOGRAM_FORMAT_VERSION {
            return Err(HistogramError::UnknownVersion { found: version.v });
        }
        let encoded: Encoded =
            serde_json::from_str(text).map_err(|e| HistogramError::Malformed(e.to_string()))?;
        if encoded.unit != UNIT {
            return Err(HistogramError::Invalid(format!(
                "unit must be {UNIT:?}, but it is {:?}",
                encoded.unit
            )));
        }
        if encoded.buckets.len() > MAX_ENCODED_BUCKETS {
            return Err(HistogramError::Invalid(format!(
                "has {} buckets; at most {MAX_ENCODED_BUCKETS} exist",
                encoded.buckets.len()
            )));
        }
        let mut histogram = LatencyHistogram::new();
        let mut total = 0u64;
        for (value, count) in encoded.buckets {
            if value == 0 || value > histogram.inner.highest_equivalent(max_micros()) {
                return Err(HistogramError::Invalid(format!(
                    "bucket value {value} µs is outside 1 µs to {} µs",
                    max_micros()
                )));
            }
            if count == 0 {
                return Err(HistogramError::Invalid(format!(
                    "bucket {value} µs has a zero count"
                )));
            }
            total = total
                .checked_add(count)
                .ok_or_else(|| HistogramError::Invalid("counts overflow".to_owned()))?;
            histogram.inner.saturating_record_n(value, count);
        }
        Ok(histogram)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn of(samples: &[u64]) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for &s in samples {
            h.record(ms(s));
        }
        h
    }

    #[test]
    fn profile_reads_quantiles_within_one_percent() {
        let h = of(&(1..=100).collect::<Vec<_>>());
        let p = h.profile().unwrap();
        assert_eq!(p.samples(), 100);
        let near = |d: Duration, want: u64| {
            let want = ms(want).as_secs_f64();
            (d.as_secs_f64() - want).abs() <= want * 0.01
        };
        assert!(near(p.p50(), 50), "{:?}", p.p50());
        assert!(near(p.p95(), 95), "{:?}", p.p95());
        assert!(near(p.p99(), 99), "{:?}", p.p99());
        assert_eq!(LatencyHistogram::new().profile(), None);
    }

    #[test]
    fn merge_equals_one_histogram_of_both() {
        let mut a = of(&[1, 5, 300]);
        a.merge(&of(&[7, 7, 2_000]));
        assert_eq!(a, of(&[1, 5, 300, 7, 7, 2_000]));
        assert_eq!(a.samples(), 6);
    }

    #[test]
    fn extremes_are_clamped_not_lost() {
        let mut h = LatencyHistogram::new();
        h.record(Duration::ZERO);
        h.record(Duration::from_secs(86_400));
        assert_eq!(h.samples(), 2);
        assert!(h.quantile(1.0) >= MAX_RECORDED);
    }

    #[test]
    fn encode_round_trips() {
        let h = of(&[3, 3, 40, 41, 900, 3_000_000]);
        assert_eq!(LatencyHistogram::decode(&h.encode()).unwrap(), h);
        let empty = LatencyHistogram::new();
        assert_eq!(LatencyHistogram::decode(&empty.encode()).unwrap(), empty);
    }

    #[test]
    fn decode_refuses_what_encode_never_writes() {
        let cases = [
            ("", "not an encoded"),
            ("{\"v\":2,\"unit\":\"us\",\"buckets\":[]}", "version 2"),
            ("{\"v\":1,\"unit\":\"ms\",\"buckets\":[]}", "unit"),
            ("{\"v\":1,\"unit\":\"us\",\"buckets\":[[0,1]]}", "outside"),
            (
                "{\"v\":1,\"unit\":\"us\",\"buckets\":[[99999999999999,1]]}",
                "outside",
            ),
            (
                "{\"v\":1,\"unit\":\"us\",\"buckets\":[[5,0]]}",
                "zero count",
            ),
            (
                "{\"v\":1,\"unit\":\"us\",\"buckets\":[[5,18446744073709551615],[6,1]]}",
                "overflow",
            ),
            (
                "{\"v\":1,\"unit\":\"us\",\"buckets\":[[5,-1]]}",
                "not an encoded",
            ),
            (
                "{\"v\":1,\"unit\":\"us\",\"buckets\":[],\"x\":1}",
                "not an encoded",
            ),
        ];
        for (text, why) in cases {
            let err = LatencyHistogram::decode(text).unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
        let many = format!(
            "{{\"v\":1,\"unit\":\"us\",\"buckets\":[{}]}}",
            vec!["[5,1]"; MAX_ENCODED_BUCKETS + 1].join(",")
        );
        assert!(LatencyHistogram::decode(&many).is_err());
    }
}

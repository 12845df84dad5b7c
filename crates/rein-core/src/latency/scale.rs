//! [`LatencyScale`]: which argument-scale bucket a tool call falls in, so
//! its latency is measured and planned with calls of its own size.
//!
//! # Why
//!
//! "Profiles must be computed separately per tool and per parameter
//! scale" (seed 000): a `search` for 10 rows and one for 10,000 differ by
//! an order of magnitude, and a p99 over the mixture gives the small call
//! a huge allowance and cuts the large one off. A crude stratification by
//! one argument's size is still far better than one profile for all.
//!
//! # The size of an argument
//!
//! | value at `arg` | size |
//! | --- | --- |
//! | a number | its value (a negative one 0, a fraction rounded up) |
//! | an array | its length |
//! | a string | its length in bytes |
//! | an object | its number of keys |
//! | `true` / `false` | 1 / 0 |
//! | missing or `null` | 0: bucket 0 (a call that does not say is taken as small) |
//!
//! A size falls in the first bucket whose upper bound is at least it; a
//! size above the last bound falls in the overflow bucket.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::registry::ResourceKey;

/// The most buckets a tool may declare: each is its own histogram, stored
/// row, `rein latency` row and metric label value, so the count is bounded.
pub const MAX_SCALE_BUCKETS: usize = 16;

/// A tool's argument-scale stratification: the argument measured and the
/// ascending upper bounds of its buckets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyScale {
    /// The path below `args`.
    path: Vec<String>,
    /// Strictly ascending, at least one, at most [`MAX_SCALE_BUCKETS`].
    bounds: Vec<u64>,
}

/// Why a scale was refused: the field below `latency.scale`, and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {reason}")]
pub struct ScaleError {
    /// `arg` or `buckets`.
    pub field: &'static str,
    /// What is wrong.
    pub reason: String,
}

impl LatencyScale {
    /// The scale measuring `arg` (`args.<path>`, the syntax of
    /// `resource_key`) into buckets up to each of `bounds`.
    ///
    /// # Errors
    ///
    /// `arg` that is not `args.<dotted path>`; `bounds` empty, longer than
    /// [`MAX_SCALE_BUCKETS`] or not strictly ascending.
    pub fn new(arg: &str, bounds: Vec<u64>) -> Result<LatencyScale, ScaleError> {
        let path = ResourceKey::parse(arg)
            .map_err(|reason| ScaleError {
                field: "arg",
                reason,
            })?
            .path()
            .to_vec();
        let refuse = |reason: String| ScaleError {
            field: "buckets",
            reason,
        };
        if bounds.is_empty() {
            return Err(refuse(
                "must list at least one upper bound, e.g. [100, 1000, 10000]".to_owned(),
            ));
        }
        if bounds.len() > MAX_SCALE_BUCKETS {
            return Err(refuse(format!(
                "may list at most {MAX_SCALE_BUCKETS} upper bounds, but it lists {}",
                bounds.len()
            )));
        }
        if let Some(pair) = bounds.windows(2).find(|w| w[0] >= w[1]) {
            return Err(refuse(format!(
                "must be strictly ascending upper bounds, but {} is followed by {}",
                pair[0], pair[1]
            )));
        }
        Ok(LatencyScale { path, bounds })
    }

    /// The argument measured, as written (`args.<path>`).
    pub fn arg(&self) -> String {
        format!("args.{}", self.path.join("."))
    }

    /// The first segment of the path: the argument the schema must have.
    pub fn argument(&self) -> &str {
        self.path.first().map_or("", String::as_str)
    }

    /// The declared upper bounds.
    pub fn bounds(&self) -> &[u64] {
        &self.bounds
    }

    /// Every bucket, in order, the overflow bucket last.
    pub fn buckets(&self) -> Vec<ScaleBucket> {
        (0..=self.bounds.len()).map(|i| self.bucket(i)).collect()
    }

    /// The bucket a call with `args` falls in (see the module docs).
    pub fn bucket_of(&self, args: &Value) -> ScaleBucket {
        let size = self
            .path
            .iter()
            .try_fold(args, |v, segment| v.get(segment.as_str()))
            .map_or(0, size_of);
        let index = self.bounds.partition_point(|&bound| bound < size);
        self.bucket(index)
    }

    /// The bucket at `index` (0..=bounds.len(); the last is the overflow).
    fn bucket(&self, index: usize) -> ScaleBucket {
        let low = match index.checked_sub(1) {
            Some(prev) => self.bounds[prev].saturating_add(1),
            None => 0,
        };
        ScaleBucket {
            low,
            high: self.bounds.get(index).copied(),
        }
    }
}

/// The size of one argument value (see the module docs).
fn size_of(value: &Value) -> u64 {
    match value {
        Value::Null => 0,
        Value::Bool(b) => u64::from(*b),
        Value::Number(n) => n.as_u64().unwrap_or_else(|| match n.as_f64() {
            // `as` saturates: a huge number is the largest size.
            Some(f) if f > 0.0 => f.ceil() as u64,
            _ => 0,
        }),
        Value::String(s) => len(s.len()),
        Value::Array(items) => len(items.len()),
        Value::Object(fields) => len(fields.len()),
    }
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// One argument-scale bucket: the sizes `low..=high`, or `low..` for the
/// overflow bucket. Named by its range (`101-1000`, `10001+`), so a stored
/// profile keeps its meaning when a bound is added above or below it.
///
/// Its wire form (in `tool_call_started`) is the label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ScaleBucket {
    /// The least size in it.
    pub low: u64,
    /// The greatest size in it; `None` for the overflow bucket.
    pub high: Option<u64>,
}

impl ScaleBucket {
    /// The bucket a label names (`0-100`, `10001+`); `None` for another text.
    pub fn parse(label: &str) -> Option<ScaleBucket> {
        if let Some(low) = label.strip_suffix('+') {
            return Some(ScaleBucket {
                low: low.parse().ok()?,
                high: None,
            });
        }
        let (low, high) = label.split_once('-')?;
        let (low, high) = (low.parse().ok()?, high.parse().ok()?);
        (low <= high).then_some(ScaleBucket {
            low,
            high: Some(high),
        })
    }
}

impl From<ScaleBucket> for String {
    fn from(bucket: ScaleBucket) -> String {
        bucket.to_string()
    }
}

impl TryFrom<String> for ScaleBucket {
    type Error = String;

    fn try_from(label: String) -> Result<ScaleBucket, String> {
        ScaleBucket::parse(&label)
            .ok_or_else(|| format!("`{label}` is no argument-scale bucket (`LOW-HIGH` or `LOW+`)"))
    }
}

impl fmt::Display for ScaleBucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.high {
            Some(high) => write!(f, "{}-{high}", self.low),
            None => write!(f, "{}+", self.low),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn scale() -> LatencyScale {
        LatencyScale::new("args.query.limit", vec![100, 1000, 10000]).unwrap()
    }

    fn label(args: Value) -> String {
        scale().bucket_of(&args).to_string()
    }

    #[test]
    fn every_kind_of_value_has_a_size_and_a_bucket() {
        let limit = |v: Value| label(json!({ "query": { "limit": v } }));
        assert_eq!(limit(json!(10)), "0-100");
        assert_eq!(limit(json!(100)), "0-100", "an upper bound is inclusive");
        assert_eq!(limit(json!(101)), "101-1000");
        assert_eq!(limit(json!(100.5)), "101-1000", "a fraction rounds up");
        assert_eq!(limit(json!(-5)), "0-100");
        assert_eq!(limit(json!(10_001)), "10001+");
        assert_eq!(limit(json!(1e300)), "10001+");
        assert_eq!(limit(json!(vec![0; 150])), "101-1000", "an array's length");
        assert_eq!(limit(json!("x".repeat(2000))), "1001-10000", "bytes");
        assert_eq!(limit(json!("é".repeat(60))), "101-1000", "bytes, not chars");
        assert_eq!(limit(json!({"a": 1, "b": 2})), "0-100", "keys");
        assert_eq!(limit(json!(true)), "0-100");
        assert_eq!(limit(Value::Null), "0-100");
        assert_eq!(label(json!({})), "0-100", "missing is bucket 0");
        assert_eq!(label(json!("not an object")), "0-100");
    }

    #[test]
    fn buckets_cover_every_size_once_and_labels_round_trip() {
        let buckets = scale().buckets();
        let labels: Vec<String> = buckets.iter().map(ToString::to_string).collect();
        assert_eq!(labels, ["0-100", "101-1000", "1001-10000", "10001+"]);
        for b in buckets {
            assert_eq!(ScaleBucket::parse(&b.to_string()), Some(b));
        }
        for bad in ["", "+", "5-1", "a-b", "1-", "12"] {
            assert_eq!(ScaleBucket::parse(bad), None, "{bad}");
        }
        let wire = serde_json::to_value(ScaleBucket::parse("101-1000").unwrap()).unwrap();
        assert_eq!(wire, json!("101-1000"));
        assert!(serde_json::from_value::<ScaleBucket>(json!("9-1")).is_err());
    }

    #[test]
    fn a_bad_path_or_bounds_are_refused_by_field() {
        let err = |arg: &str, bounds: Vec<u64>| LatencyScale::new(arg, bounds).unwrap_err();
        assert_eq!(err("limit", vec![1]).field, "arg");
        assert_eq!(err("result.rows", vec![1]).field, "arg");
        assert_eq!(err("args.", vec![1]).field, "arg");
        assert!(err("args.n", vec![]).reason.contains("at least one"));
        assert!(
            err("args.n", vec![10, 10])
                .reason
                .contains("10 is followed by 10")
        );
        assert!(err("args.n", vec![100, 10]).reason.contains("ascending"));
        let many = (1..=MAX_SCALE_BUCKETS as u64 + 1).collect();
        assert!(err("args.n", many).reason.contains("at most"));
        assert_eq!(scale().arg(), "args.query.limit");
        assert_eq!(scale().argument(), "query");
    }
}

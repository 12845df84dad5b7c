//! Observed latency shared across processes: [`LatencyRecord`].
//!
//! # Why the store carries latency histograms
//!
//! `mode = "observe"` plans a tool's allowance from its measured
//! distribution once enough samples exist. Measured in one process only,
//! every `rein run` would start from the fallback again, and each
//! `rein serve` node would learn alone. So each process records its calls
//! in memory and periodically adds what it recorded since the last time
//! (a delta) to the stored histogram of each subject: the stored
//! histogram is the sum of every process's samples, and a new process
//! starts from it.
//!
//! Deltas, not totals: adding a delta inside one transaction is correct
//! whatever the number of processes and however their writes interleave,
//! and the table keeps one row per subject (it cannot grow with the
//! number of processes that ever ran).
//!
//! | operation | effect |
//! | --- | --- |
//! | [`HealthStore::merge_latency`] | adds deltas to their subjects' histograms in one transaction; returns the sums |
//! | [`HealthStore::latency_histograms`] | every stored histogram, with the rows that cannot be read listed apart |
//!
//! # Corruption
//!
//! A row whose histogram does not decode (another version, damaged text)
//! is listed in [`LatencyRows::corrupt`] with the reason, never decoded
//! into a guess and never a panic; reading the others goes on. A merge
//! into such a row replaces it with the delta (the damaged counts are
//! lost, the new ones are not) and reports it the same way.
//!
//! [`HealthStore::merge_latency`]: crate::HealthStore::merge_latency
//! [`HealthStore::latency_histograms`]: crate::HealthStore::latency_histograms

use rein_core::Timestamp;
use rein_core::latency::LatencyHistogram;

use crate::error::StoreError;

/// The longest subject key accepted, in bytes.
pub const MAX_LATENCY_SUBJECT_LEN: usize = 400;

/// One subject's stored histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyRecord {
    /// What it measures (`rein_core::latency::LatencySubject::key`).
    pub subject: String,
    /// Every process's samples, summed.
    pub histogram: LatencyHistogram,
    /// When a delta was last added (ms since the Unix epoch).
    pub updated_at_ms: Timestamp,
}

/// A stored histogram that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CorruptLatency {
    /// Its subject.
    pub subject: String,
    /// Why it could not be read.
    pub reason: String,
}

/// What a read or merge of latency histograms found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyRows {
    /// The histograms read, by subject.
    pub records: Vec<LatencyRecord>,
    /// The rows that could not be read (a merge replaced them).
    pub corrupt: Vec<CorruptLatency>,
}

/// Checks a subject key: 1 to [`MAX_LATENCY_SUBJECT_LEN`] bytes without
/// control characters.
///
/// # Errors
///
/// [`StoreError::Invalid`] otherwise.
pub fn validate_subject(subject: &str) -> Result<(), StoreError> {
    if subject.is_empty()
        || subject.len() > MAX_LATENCY_SUBJECT_LEN
        || subject.chars().any(char::is_control)
    {
        return Err(StoreError::Invalid {
            what: "latency subject",
            expected: format!("1 to {MAX_LATENCY_SUBJECT_LEN} bytes without control characters"),
            found: format!("{subject:?}"),
        });
    }
    Ok(())
}

/// What a merge of `delta` into the `stored` text of `subject` writes:
/// their sum, or the delta alone when the stored text is corrupt (with
/// the report). Shared by backends so they decide alike.
pub fn merged(
    subject: &str,
    stored: Option<&str>,
    delta: &LatencyHistogram,
) -> (LatencyHistogram, Option<CorruptLatency>) {
    let Some(text) = stored else {
        return (delta.clone(), None);
    };
    match LatencyHistogram::decode(text) {
        Ok(mut sum) => {
            sum.merge(delta);
            (sum, None)
        }
        Err(e) => (
            delta.clone(),
            Some(CorruptLatency {
                subject: subject.to_owned(),
                reason: e.to_string(),
            }),
        ),
    }
}

/// Reads one stored row: its record, or the report of why it cannot be
/// read.
pub fn decoded(
    subject: String,
    text: &str,
    updated_at_ms: Timestamp,
) -> Result<LatencyRecord, CorruptLatency> {
    match LatencyHistogram::decode(text) {
        Ok(histogram) => Ok(LatencyRecord {
            subject,
            histogram,
            updated_at_ms,
        }),
        Err(e) => Err(CorruptLatency {
            subject,
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn of(ms: &[u64]) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for &m in ms {
            h.record(Duration::from_millis(m));
        }
        h
    }

    #[test]
    fn merge_adds_to_a_readable_row_and_replaces_a_corrupt_one() {
        let (sum, corrupt) = merged("tool:a", Some(&of(&[1, 2]).encode()), &of(&[3]));
        assert_eq!((sum, corrupt), (of(&[1, 2, 3]), None));
        let (sum, corrupt) = merged("tool:a", None, &of(&[3]));
        assert_eq!((sum, corrupt), (of(&[3]), None));
        let (sum, corrupt) = merged("tool:a", Some("{garbage"), &of(&[3]));
        assert_eq!(sum, of(&[3]));
        assert_eq!(corrupt.unwrap().subject, "tool:a");
    }

    #[test]
    fn subjects_must_be_short_visible_text() {
        assert!(validate_subject("tool:get_order").is_ok());
        for bad in ["", "a\nb", &"x".repeat(MAX_LATENCY_SUBJECT_LEN + 1)] {
            assert!(validate_subject(bad).is_err());
        }
    }
}

//! Retry outcomes shared across processes: [`RetryOutcomes`].
//!
//! # Why the store carries retry outcomes
//!
//! Whether a retry is worth its cost rests on the measured success rate
//! of the retries of its target (`rein_core::retry::worth`). Measured in
//! one process only, every `rein run` would decide its first retries from
//! the prior (½) and a cluster would learn the same failing provider once
//! per node. So each process counts its retries in memory and
//! periodically adds what it counted since the last time (a delta) to the
//! stored counts of each target, and a new process starts from them.
//!
//! # Decay
//!
//! The rate moves with the fault of the moment, so stored counts fade:
//! they are halved once per window of
//! [`RETRY_RATE_HALF_LIFE`](rein_core::retry::RETRY_RATE_HALF_LIFE)
//! passed since they were last written ([`RetryRecord::decayed`], windows
//! aligned on the Unix epoch). A merge decays the stored counts to its
//! `now_ms` before adding the delta; a read decays them to its `now_ms`
//! without writing. Every backend decides with [`merged`] and [`aged`], so
//! they decay alike.
//!
//! | operation | effect |
//! | --- | --- |
//! | [`HealthStore::merge_retry_outcomes`] | decays the stored counts to now and adds deltas, in one transaction; returns the sums |
//! | [`HealthStore::retry_outcomes`] | every target's counts, decayed to now |
//!
//! [`HealthStore::merge_retry_outcomes`]: crate::HealthStore::merge_retry_outcomes
//! [`HealthStore::retry_outcomes`]: crate::HealthStore::retry_outcomes

use rein_core::retry::{RETRY_ORDINALS, RetryRecord};

use crate::error::StoreError;
use rein_core::Timestamp;

/// The longest target key accepted, in bytes.
pub const MAX_RETRY_TARGET_LEN: usize = 400;

/// One target's stored retry outcomes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryOutcomes {
    /// The target (`tool:NAME`, `provider:NAME`,
    /// `fallback:PROVIDER/MODEL`).
    pub target: String,
    /// Every process's counts, decayed to the time of the read or merge.
    pub record: RetryRecord,
    /// When a delta was last added.
    pub updated_at_ms: Timestamp,
}

/// Checks a target key: 1 to [`MAX_RETRY_TARGET_LEN`] bytes without
/// control characters.
///
/// # Errors
///
/// [`StoreError::Invalid`] otherwise.
pub fn validate_target(target: &str) -> Result<(), StoreError> {
    if target.is_empty()
        || target.len() > MAX_RETRY_TARGET_LEN
        || target.chars().any(char::is_control)
    {
        return Err(StoreError::Invalid {
            what: "retry target",
            expected: format!("1 to {MAX_RETRY_TARGET_LEN} bytes without control characters"),
            found: format!("{target:?}"),
        });
    }
    Ok(())
}

/// The record of counts read from a store row, `(tries, successes)` per
/// ordinal as stored.
///
/// # Errors
///
/// [`StoreError::Corrupt`] for a count below zero, above `u32::MAX`, or
/// more successes than tries.
pub fn from_stored(
    table: &'static str,
    counts: [(i64, i64); RETRY_ORDINALS],
) -> Result<RetryRecord, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        table,
        column: "tries",
        reason,
    };
    let mut read = [(0u32, 0u32); RETRY_ORDINALS];
    for (slot, (tries, successes)) in read.iter_mut().zip(counts) {
        let t = u32::try_from(tries).map_err(|_| corrupt(format!("a count of {tries} tries")))?;
        let s = u32::try_from(successes)
            .map_err(|_| corrupt(format!("a count of {successes} successes")))?;
        *slot = (t, s);
    }
    RetryRecord::from_counts(read).map_err(|e| corrupt(e.to_string()))
}

/// The stored counts, written at `stored_at_ms`, as seen at `now_ms`.
pub fn aged(stored: &RetryRecord, stored_at_ms: u64, now_ms: u64) -> RetryRecord {
    stored.decayed(stored_at_ms, now_ms)
}

/// What a merge of `delta` at `now_ms` writes over the `stored` counts
/// (with the time they were written): the stored counts decayed to
/// `now_ms`, plus the delta.
pub fn merged(stored: Option<(RetryRecord, u64)>, delta: &RetryRecord, now_ms: u64) -> RetryRecord {
    let mut sum = stored.map_or_else(RetryRecord::default, |(record, at)| {
        aged(&record, at, now_ms)
    });
    sum.merge(delta);
    sum
}

/// The slot of a stored ordinal (they are 1-based).
///
/// # Errors
///
/// [`StoreError::Corrupt`] for an ordinal outside 1 to
/// [`RETRY_ORDINALS`].
pub fn slot_of(table: &'static str, ordinal: i64) -> Result<usize, StoreError> {
    usize::try_from(ordinal)
        .ok()
        .and_then(|o| o.checked_sub(1))
        .filter(|&s| s < RETRY_ORDINALS)
        .ok_or_else(|| StoreError::Corrupt {
            table,
            column: "ordinal",
            reason: format!("expected 1 to {RETRY_ORDINALS}, found {ordinal}"),
        })
}

/// What a merge of one target's delta does, decided by [`merge_step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RetryMerge {
    /// An empty delta: nothing is written; the stored counts as seen at
    /// the merge, if there are any, are what the merge returns.
    Unchanged(Option<RetryOutcomes>),
    /// Write these counts (the stored ones decayed, plus the delta),
    /// stamped with the merge's time, and return them.
    Write(RetryOutcomes),
}

/// What merging `delta` into `target`'s `stored` counts (with the time
/// they were written) at `at` does.
pub fn merge_step(
    target: &str,
    stored: Option<(RetryRecord, u64)>,
    delta: &RetryRecord,
    at: Timestamp,
) -> RetryMerge {
    let now_ms = at.as_millis();
    if delta.is_empty() {
        return RetryMerge::Unchanged(stored.map(|(record, written)| RetryOutcomes {
            target: target.to_owned(),
            record: aged(&record, written, now_ms),
            updated_at_ms: Timestamp::from_millis(written),
        }));
    }
    RetryMerge::Write(RetryOutcomes {
        target: target.to_owned(),
        record: merged(stored, delta, now_ms),
        updated_at_ms: at,
    })
}

/// What a read at `at` returns of `target`'s `stored` counts (with the
/// time they were written): decayed to `at`, or nothing once they have
/// faded to none.
pub fn seen(target: String, stored: (RetryRecord, u64), at: Timestamp) -> Option<RetryOutcomes> {
    let (record, written) = stored;
    let record = aged(&record, written, at.as_millis());
    (!record.is_empty()).then_some(RetryOutcomes {
        target,
        record,
        updated_at_ms: Timestamp::from_millis(written),
    })
}

#[cfg(test)]
mod tests {
    use rein_core::retry::RETRY_RATE_HALF_LIFE;

    use super::*;

    fn failures(n: usize) -> RetryRecord {
        let mut r = RetryRecord::default();
        for _ in 0..n {
            r.record(2, false);
        }
        r
    }

    #[test]
    fn a_merge_decays_what_was_stored_before_adding() {
        let window = u64::try_from(RETRY_RATE_HALF_LIFE.as_millis()).unwrap();
        let sum = merged(Some((failures(8), window)), &failures(1), 2 * window);
        assert_eq!(sum.rate(2).tries, 5, "8 halved, plus 1");
        assert_eq!(merged(None, &failures(3), 0), failures(3));
    }

    #[test]
    fn an_empty_delta_writes_nothing_and_returns_the_stored_counts_aged() {
        let window = u64::try_from(RETRY_RATE_HALF_LIFE.as_millis()).unwrap();
        let at = Timestamp::from_millis(2 * window);
        let empty = RetryRecord::default();
        assert_eq!(
            merge_step("t", None, &empty, at),
            RetryMerge::Unchanged(None)
        );
        let RetryMerge::Unchanged(Some(kept)) =
            merge_step("t", Some((failures(8), window)), &empty, at)
        else {
            panic!("an empty delta writes nothing");
        };
        assert_eq!(kept.record.rate(2).tries, 4, "8 halved");
        assert_eq!(
            kept.updated_at_ms,
            Timestamp::from_millis(window),
            "unchanged"
        );
        let RetryMerge::Write(sum) = merge_step("t", Some((failures(8), window)), &failures(1), at)
        else {
            panic!("a delta is written");
        };
        assert_eq!((sum.record.rate(2).tries, sum.updated_at_ms), (5, at));
    }

    #[test]
    fn a_read_leaves_out_counts_faded_to_none() {
        let window = u64::try_from(RETRY_RATE_HALF_LIFE.as_millis()).unwrap();
        let fresh = seen("t".into(), (failures(8), 0), Timestamp::from_millis(window));
        assert_eq!(fresh.unwrap().record.rate(2).tries, 4);
        let long_after = Timestamp::from_millis(64 * window);
        assert_eq!(seen("t".into(), (failures(8), 0), long_after), None);
    }

    #[test]
    fn stored_ordinals_are_one_based() {
        assert_eq!(slot_of("t", 1).unwrap(), 0);
        let last = i64::try_from(RETRY_ORDINALS).unwrap();
        assert_eq!(slot_of("t", last).unwrap(), RETRY_ORDINALS - 1);
        for bad in [0, -1, last + 1] {
            assert!(matches!(slot_of("t", bad), Err(StoreError::Corrupt { .. })));
        }
    }

    #[test]
    fn stored_counts_must_be_possible() {
        assert!(from_stored("t", [(2, 1), (0, 0), (0, 0)]).is_ok());
        for bad in [[(1, 2), (0, 0), (0, 0)], [(-1, 0), (0, 0), (0, 0)]] {
            assert!(matches!(
                from_stored("t", bad),
                Err(StoreError::Corrupt { .. })
            ));
        }
    }

    #[test]
    fn targets_must_be_short_visible_text() {
        assert!(validate_target("provider:openai").is_ok());
        for bad in ["", "a\nb", &"x".repeat(MAX_RETRY_TARGET_LEN + 1)] {
            assert!(validate_target(bad).is_err());
        }
    }
}

//! The SQL of the retry outcome operations (schema v16).

use rein_store::Timestamp;
use std::collections::BTreeMap;

use rein_core::retry::{RETRY_ORDINALS, RetryRecord};
use rusqlite::{Connection, params};

use super::codec::{SqlResult, int};
use rein_store::rules::{
    RetryMerge, retry_from_stored, retry_merge_step, retry_seen, retry_slot, validate_retry_target,
};
use rein_store::{RetryOutcomes, StoreError};

const TABLE: &str = "retry_outcomes";

/// The stored counts of `target` and when they were written, if any.
fn stored(conn: &Connection, target: &str) -> Result<Option<(RetryRecord, u64)>, StoreError> {
    let mut statement = conn
        .prepare_cached(
            "SELECT ordinal, tries, successes, updated_at_ms FROM retry_outcomes WHERE target = ?1",
        )
        .sql()?;
    let mut query = statement.query([target]).sql()?;
    let mut counts = [(0i64, 0i64); RETRY_ORDINALS];
    let mut at: Option<i64> = None;
    while let Some(row) = query.next().sql()? {
        let ordinal: i64 = row.get(0).sql()?;
        let slot = retry_slot(TABLE, ordinal)?;
        counts[slot] = (row.get(1).sql()?, row.get(2).sql()?);
        let written: i64 = row.get(3).sql()?;
        at = Some(at.map_or(written, |a| a.max(written)));
    }
    let Some(at) = at else {
        return Ok(None);
    };
    Ok(Some((
        retry_from_stored(TABLE, counts)?,
        u64::try_from(at).unwrap_or(0),
    )))
}

/// Decays and adds each delta to its target's rows (see
/// `HealthStore::merge_retry_outcomes`). The caller provides the
/// transaction: its `IMMEDIATE` write lock makes each read-add-write
/// atomic across processes.
pub fn merge_retry_outcomes(
    conn: &Connection,
    deltas: &[(String, RetryRecord)],
    at: Timestamp,
) -> Result<Vec<RetryOutcomes>, StoreError> {
    for (target, _) in deltas {
        validate_retry_target(target)?;
    }
    let now = int(at.as_millis(), "retry updated_at_ms")?;
    let mut sums: BTreeMap<String, RetryOutcomes> = BTreeMap::new();
    for (target, delta) in deltas {
        let sum = match retry_merge_step(target, stored(conn, target)?, delta, at) {
            RetryMerge::Unchanged(seen) => {
                sums.extend(seen.map(|seen| (target.clone(), seen)));
                continue;
            }
            RetryMerge::Write(sum) => sum,
        };
        for (slot, (tries, successes)) in sum.record.counts().into_iter().enumerate() {
            conn.prepare_cached(
                "INSERT INTO retry_outcomes (target, ordinal, tries, successes, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4, ?5) \
                 ON CONFLICT (target, ordinal) DO UPDATE SET tries = excluded.tries, \
                 successes = excluded.successes, updated_at_ms = excluded.updated_at_ms",
            )
            .sql()?
            .execute(params![target, slot + 1, tries, successes, now])
            .sql()?;
        }
        sums.insert(target.clone(), sum);
    }
    Ok(sums.into_values().collect())
}

/// Every stored target's counts, decayed to `now_ms`.
pub fn retry_outcomes(conn: &Connection, at: Timestamp) -> Result<Vec<RetryOutcomes>, StoreError> {
    let targets: Vec<String> = {
        let mut statement = conn
            .prepare_cached("SELECT DISTINCT target FROM retry_outcomes ORDER BY target")
            .sql()?;
        let rows = statement.query_map([], |row| row.get(0)).sql()?;
        rows.collect::<Result<_, _>>().sql()?
    };
    let mut all = Vec::with_capacity(targets.len());
    for target in targets {
        let Some(found) = stored(conn, &target)? else {
            continue;
        };
        all.extend(retry_seen(target, found, at));
    }
    Ok(all)
}

//! Retry outcomes: each target's stored counts decayed and its delta
//! added under its advisory lock, so concurrent merges of every node all
//! count.

use rein_store::Timestamp;
use std::collections::BTreeMap;

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::retry::{RETRY_ORDINALS, RetryRecord};
use rein_store::rules::{
    RetryMerge, retry_from_stored, retry_merge_step, retry_seen, retry_slot, validate_retry_target,
};
use rein_store::{RetryOutcomes, StoreError};

use super::{LockSpace, execute, lock};
use crate::codec::{PgResult, int};

const TABLE: &str = "retry_outcomes";

/// Folds rows of `(target, ordinal, tries, successes, updated_at_ms)`
/// into each target's counts and the time they were last written.
fn folded(
    rows: &[tokio_postgres::Row],
) -> Result<BTreeMap<String, (RetryRecord, u64)>, StoreError> {
    let mut counts: BTreeMap<String, ([(i64, i64); RETRY_ORDINALS], i64)> = BTreeMap::new();
    for row in rows {
        let target: String = row.try_get(0).pg()?;
        let ordinal: i32 = row.try_get(1).pg()?;
        let slot = retry_slot(TABLE, i64::from(ordinal))?;
        let at: i64 = row.try_get(4).pg()?;
        let entry = counts
            .entry(target)
            .or_insert(([(0, 0); RETRY_ORDINALS], at));
        entry.0[slot] = (row.try_get(2).pg()?, row.try_get(3).pg()?);
        entry.1 = entry.1.max(at);
    }
    counts
        .into_iter()
        .map(|(target, (c, at))| {
            Ok((
                target,
                (retry_from_stored(TABLE, c)?, u64::try_from(at).unwrap_or(0)),
            ))
        })
        .collect()
}

/// Decays and adds each delta to its target's rows (see
/// `Store::merge_retry_outcomes`).
pub(crate) async fn merge_retry_outcomes(
    tx: &Transaction<'_>,
    deltas: &[(String, RetryRecord)],
    at: Timestamp,
) -> Result<Vec<RetryOutcomes>, StoreError> {
    for (target, _) in deltas {
        validate_retry_target(target)?;
    }
    let now = int(at.as_millis(), "retry updated_at_ms")?;
    // Every target's lock first, in one order for every process (as the
    // latency merge does: locked in each caller's order, two nodes
    // deadlock).
    let mut targets: Vec<&str> = deltas.iter().map(|(t, _)| t.as_str()).collect();
    targets.sort_unstable();
    targets.dedup();
    for target in &targets {
        lock(tx, LockSpace::Retry, target).await?;
    }
    let mut sums: BTreeMap<String, RetryOutcomes> = BTreeMap::new();
    for (target, delta) in deltas {
        let rows = tx
            .query(
                "SELECT target, ordinal, tries, successes, updated_at_ms FROM retry_outcomes \
                 WHERE target = $1",
                &[target],
            )
            .await
            .pg()?;
        let found = folded(&rows)?.remove(target);
        let sum = match retry_merge_step(target, found, delta, at) {
            RetryMerge::Unchanged(seen) => {
                sums.extend(seen.map(|seen| (target.clone(), seen)));
                continue;
            }
            RetryMerge::Write(sum) => sum,
        };
        for (slot, (tries, successes)) in sum.record.counts().into_iter().enumerate() {
            let ordinal = i32::try_from(slot + 1).unwrap_or(i32::MAX);
            execute(
                tx,
                "INSERT INTO retry_outcomes (target, ordinal, tries, successes, updated_at_ms) \
                 VALUES ($1, $2, $3, $4, $5) \
                 ON CONFLICT (target, ordinal) DO UPDATE SET tries = excluded.tries, \
                 successes = excluded.successes, updated_at_ms = excluded.updated_at_ms",
                &[
                    target,
                    &ordinal,
                    &i64::from(tries),
                    &i64::from(successes),
                    &now,
                ],
            )
            .await?;
        }
        sums.insert(target.clone(), sum);
    }
    Ok(sums.into_values().collect())
}

/// Every stored target's counts, decayed to `now_ms`.
pub(crate) async fn retry_outcomes(
    client: &impl GenericClient,
    at: Timestamp,
) -> Result<Vec<RetryOutcomes>, StoreError> {
    let rows = client
        .query(
            "SELECT target, ordinal, tries, successes, updated_at_ms FROM retry_outcomes \
             ORDER BY target",
            &[],
        )
        .await
        .pg()?;
    Ok(folded(&rows)?
        .into_iter()
        .filter_map(|(target, found)| retry_seen(target, found, at))
        .collect())
}

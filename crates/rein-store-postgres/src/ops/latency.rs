//! Observed latency histograms: each subject's delta added under its
//! advisory lock, so concurrent merges of every node all count.

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::latency::LatencyHistogram;
use rein_store::Timestamp;
use rein_store::rules::{latency_decoded, latency_merged, validate_latency_subject};
use rein_store::{LatencyRecord, LatencyRows, StoreError};

use super::{LockSpace, execute, lock};
use crate::codec::{PgResult, int};

/// Adds each delta to its subject's row (see `Store::merge_latency`).
pub(crate) async fn merge_latency(
    tx: &Transaction<'_>,
    deltas: &[(String, LatencyHistogram)],
    now_ms: Timestamp,
) -> Result<LatencyRows, StoreError> {
    for (subject, _) in deltas {
        validate_latency_subject(subject)?;
    }
    let now = int(now_ms, "latency updated_at_ms")?;
    // Every subject's lock first, in one order for every process: locked
    // one by one in each caller's order, two nodes merging overlapping
    // subjects deadlocked (40P01, seen in the three-node load test).
    let mut subjects: Vec<&str> = deltas.iter().map(|(s, _)| s.as_str()).collect();
    subjects.sort_unstable();
    subjects.dedup();
    for subject in subjects {
        lock(tx, LockSpace::Latency, subject).await?;
    }
    let mut rows = LatencyRows::default();
    for (subject, delta) in deltas {
        let stored = tx
            .query_opt(
                "SELECT histogram, updated_at_ms FROM latency_histograms WHERE subject = $1",
                &[subject],
            )
            .await
            .pg()?
            .map(|row| -> Result<(String, i64), StoreError> {
                Ok((row.try_get(0).pg()?, row.try_get(1).pg()?))
            })
            .transpose()?;
        rows.records.retain(|r| r.subject != *subject);
        if delta.is_empty() {
            if let Some((text, at)) = stored {
                match latency_decoded(
                    subject.clone(),
                    &text,
                    Timestamp::from_millis(u64::try_from(at).unwrap_or(0)),
                ) {
                    Ok(record) => rows.records.push(record),
                    Err(corrupt) => rows.corrupt.push(corrupt),
                }
            }
            continue;
        }
        let (sum, corrupt) =
            latency_merged(subject, stored.as_ref().map(|(t, _)| t.as_str()), delta);
        rows.corrupt.extend(corrupt);
        execute(
            tx,
            "INSERT INTO latency_histograms (subject, histogram, samples, updated_at_ms) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (subject) DO UPDATE SET histogram = excluded.histogram, \
             samples = excluded.samples, updated_at_ms = excluded.updated_at_ms",
            &[
                subject,
                &sum.encode(),
                &int(sum.samples(), "latency samples")?,
                &now,
            ],
        )
        .await?;
        rows.records.push(LatencyRecord {
            subject: subject.clone(),
            histogram: sum,
            updated_at_ms: now_ms,
        });
    }
    rows.records.sort_by(|a, b| a.subject.cmp(&b.subject));
    Ok(rows)
}

/// Every stored histogram, the unreadable rows listed apart.
pub(crate) async fn latency_histograms(
    client: &impl GenericClient,
) -> Result<LatencyRows, StoreError> {
    let found = client
        .query(
            "SELECT subject, histogram, updated_at_ms FROM latency_histograms ORDER BY subject",
            &[],
        )
        .await
        .pg()?;
    let mut rows = LatencyRows::default();
    for row in found {
        let subject: String = row.try_get(0).pg()?;
        let text: String = row.try_get(1).pg()?;
        let at: i64 = row.try_get(2).pg()?;
        match latency_decoded(
            subject,
            &text,
            Timestamp::from_millis(u64::try_from(at).unwrap_or(0)),
        ) {
            Ok(record) => rows.records.push(record),
            Err(corrupt) => rows.corrupt.push(corrupt),
        }
    }
    Ok(rows)
}

//! The SQL of the latency histogram operations (schema v11).

use rein_core::latency::LatencyHistogram;
use rein_store::Timestamp;
use rusqlite::{Connection, OptionalExtension, params};

use super::codec::{SqlResult, int};
use rein_store::StoreError;
use rein_store::rules::{
    latency_decoded as decoded, latency_merged as merged,
    validate_latency_subject as validate_subject,
};
use rein_store::{LatencyRecord, LatencyRows};

/// Adds each delta to its subject's row (see [`Store::merge_latency`]).
/// The caller provides the transaction: its `IMMEDIATE` write lock makes
/// each read-add-write atomic across processes.
///
/// [`Store::merge_latency`]: crate::Store::merge_latency
pub fn merge_latency(
    conn: &Connection,
    deltas: &[(String, LatencyHistogram)],
    now_ms: Timestamp,
) -> Result<LatencyRows, StoreError> {
    for (subject, _) in deltas {
        validate_subject(subject)?;
    }
    let now = int(now_ms, "latency updated_at_ms")?;
    let mut rows = LatencyRows::default();
    for (subject, delta) in deltas {
        let stored: Option<(String, i64)> = conn
            .prepare_cached(
                "SELECT histogram, updated_at_ms FROM latency_histograms WHERE subject = ?1",
            )
            .sql()?
            .query_row([subject.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()
            .sql()?;
        if delta.is_empty() {
            // Nothing to add: report the stored sum as it is.
            if let Some((text, at)) = stored {
                rows.records.retain(|r| r.subject != *subject);
                match decoded(
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
        let (sum, corrupt) = merged(subject, stored.as_ref().map(|(t, _)| t.as_str()), delta);
        rows.corrupt.extend(corrupt);
        conn.prepare_cached(
            "INSERT INTO latency_histograms (subject, histogram, samples, updated_at_ms) \
             VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (subject) DO UPDATE SET histogram = excluded.histogram, \
             samples = excluded.samples, updated_at_ms = excluded.updated_at_ms",
        )
        .sql()?
        .execute(params![
            subject,
            sum.encode(),
            int(sum.samples(), "latency samples")?,
            now
        ])
        .sql()?;
        rows.records.retain(|r| r.subject != *subject);
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
pub fn latency_histograms(conn: &Connection) -> Result<LatencyRows, StoreError> {
    let mut statement = conn
        .prepare_cached(
            "SELECT subject, histogram, updated_at_ms FROM latency_histograms ORDER BY subject",
        )
        .sql()?;
    let mut query = statement.query([]).sql()?;
    let mut rows = LatencyRows::default();
    while let Some(row) = query.next().sql()? {
        let subject: String = row.get(0).sql()?;
        let text: String = row.get(1).sql()?;
        let at: i64 = row.get(2).sql()?;
        match decoded(
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

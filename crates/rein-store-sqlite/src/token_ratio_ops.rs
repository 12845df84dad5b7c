//! The SQL of the learned token ratios (schema v20).

use rein_core::token_ratio::TokenRatio;
use rein_store::Timestamp;
use rein_store::rules::validate_latency_subject as validate_model;
use rein_store::{StoreError, StoredRatio, TokenRatioRecord};
use rusqlite::{Connection, params};

use super::codec::{SqlResult, int};

/// Adds each delta to its model's row (see [`Store::merge_token_ratios`]).
/// The caller provides the transaction: its `IMMEDIATE` write lock makes
/// each read-add-write atomic across processes.
///
/// [`Store::merge_token_ratios`]: crate::Store::merge_token_ratios
pub fn merge(
    conn: &Connection,
    deltas: &[(String, TokenRatio)],
    now_ms: Timestamp,
) -> Result<Vec<TokenRatioRecord>, StoreError> {
    for (model, _) in deltas {
        validate_model(model)?;
    }
    let now = int(now_ms, "token ratio updated_at_ms")?;
    let mut out: Vec<TokenRatioRecord> = Vec::new();
    for (model, delta) in deltas {
        let stored = read(conn, model)?;
        let record = if delta.samples() == 0 {
            match stored {
                Some(record) => record,
                None => continue,
            }
        } else {
            let mut sum = stored.map_or_else(TokenRatio::new, |r| r.stored.ratio);
            sum.merge(delta);
            conn.prepare_cached(
                "INSERT INTO token_ratios (model, samples, least, updated_at_ms) \
                 VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (model) DO UPDATE SET samples = excluded.samples, \
                 least = excluded.least, updated_at_ms = excluded.updated_at_ms",
            )
            .sql()?
            .execute(params![
                model,
                int(sum.samples(), "token ratio samples")?,
                sum.least(),
                now
            ])
            .sql()?;
            TokenRatioRecord {
                model: model.clone(),
                stored: StoredRatio {
                    ratio: sum,
                    updated_at_ms: now_ms,
                },
            }
        };
        out.retain(|r| r.model != *model);
        out.push(record);
    }
    out.sort_by(|a, b| a.model.cmp(&b.model));
    Ok(out)
}

/// Every stored ratio, by model.
pub fn all(conn: &Connection) -> Result<Vec<TokenRatioRecord>, StoreError> {
    let mut statement = conn
        .prepare_cached(
            "SELECT model, samples, least, updated_at_ms FROM token_ratios ORDER BY model",
        )
        .sql()?;
    let mut query = statement.query([]).sql()?;
    let mut out = Vec::new();
    while let Some(row) = query.next().sql()? {
        out.push(decode(row)?);
    }
    Ok(out)
}

fn read(conn: &Connection, model: &str) -> Result<Option<TokenRatioRecord>, StoreError> {
    let mut statement = conn
        .prepare_cached(
            "SELECT model, samples, least, updated_at_ms FROM token_ratios WHERE model = ?1",
        )
        .sql()?;
    let mut query = statement.query([model]).sql()?;
    match query.next().sql()? {
        Some(row) => Ok(Some(decode(row)?)),
        None => Ok(None),
    }
}

/// A row as a record; a count or time out of range reads as none (the
/// ratio then starts again at one token per byte, the bound that always
/// holds), never a guess.
fn decode(row: &rusqlite::Row<'_>) -> Result<TokenRatioRecord, StoreError> {
    let model: String = row.get(0).sql()?;
    let samples: i64 = row.get(1).sql()?;
    let least: f64 = row.get(2).sql()?;
    let at: i64 = row.get(3).sql()?;
    Ok(TokenRatioRecord {
        model,
        stored: StoredRatio {
            ratio: TokenRatio::from_parts(u64::try_from(samples).unwrap_or(0), least),
            updated_at_ms: Timestamp::from_millis(u64::try_from(at).unwrap_or(0)),
        },
    })
}

//! Learned token ratios: each model's delta added under its advisory
//! lock, so concurrent merges of every node all count.

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::token_ratio::TokenRatio;
use rein_store::Timestamp;
use rein_store::rules::validate_latency_subject as validate_model;
use rein_store::{StoreError, StoredRatio, TokenRatioRecord};
use tokio_postgres::Row;

use super::{LockSpace, execute, lock};
use crate::codec::{PgResult, int};

/// Adds each delta to its model's row (see `Store::merge_token_ratios`).
pub(crate) async fn merge_token_ratios(
    tx: &Transaction<'_>,
    deltas: &[(String, TokenRatio)],
    now_ms: Timestamp,
) -> Result<Vec<TokenRatioRecord>, StoreError> {
    for (model, _) in deltas {
        validate_model(model)?;
    }
    let now = int(now_ms, "token ratio updated_at_ms")?;
    // Every model's lock first, in one order for every process (as the
    // latency merge does, for the same deadlock).
    let mut models: Vec<&str> = deltas.iter().map(|(m, _)| m.as_str()).collect();
    models.sort_unstable();
    models.dedup();
    for model in models {
        lock(tx, LockSpace::TokenRatio, model).await?;
    }
    let mut out: Vec<TokenRatioRecord> = Vec::new();
    for (model, delta) in deltas {
        let stored = tx
            .query_opt(
                "SELECT model, samples, least, updated_at_ms FROM token_ratios WHERE model = $1",
                &[model],
            )
            .await
            .pg()?
            .map(|row| decode(&row))
            .transpose()?;
        let record = if delta.samples() == 0 {
            match stored {
                Some(record) => record,
                None => continue,
            }
        } else {
            let mut sum = stored.map_or_else(TokenRatio::new, |r| r.stored.ratio);
            sum.merge(delta);
            execute(
                tx,
                "INSERT INTO token_ratios (model, samples, least, updated_at_ms) \
                 VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (model) DO UPDATE SET samples = excluded.samples, \
                 least = excluded.least, updated_at_ms = excluded.updated_at_ms",
                &[
                    model,
                    &int(sum.samples(), "token ratio samples")?,
                    &sum.least(),
                    &now,
                ],
            )
            .await?;
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
pub(crate) async fn token_ratios(
    client: &impl GenericClient,
) -> Result<Vec<TokenRatioRecord>, StoreError> {
    client
        .query(
            "SELECT model, samples, least, updated_at_ms FROM token_ratios ORDER BY model",
            &[],
        )
        .await
        .pg()?
        .iter()
        .map(decode)
        .collect()
}

/// A row as a record; a count or time out of range reads as none (the
/// ratio then starts again at one token per byte, the bound that always
/// holds), never a guess.
fn decode(row: &Row) -> Result<TokenRatioRecord, StoreError> {
    let samples: i64 = row.try_get(1).pg()?;
    let least: f64 = row.try_get(2).pg()?;
    let at: i64 = row.try_get(3).pg()?;
    Ok(TokenRatioRecord {
        model: row.try_get(0).pg()?,
        stored: StoredRatio {
            ratio: TokenRatio::from_parts(u64::try_from(samples).unwrap_or(0), least),
            updated_at_ms: Timestamp::from_millis(u64::try_from(at).unwrap_or(0)),
        },
    })
}

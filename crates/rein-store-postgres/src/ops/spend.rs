//! API keys' spend: each delta added to its row by one upsert.

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::TenantId;
use rein_store::rules::validate_spend;
use rein_store::{SpendDelta, SpendQuery, SpendRow, StoreError};

use super::execute;
use crate::codec::{PgResult, int};

/// Adds each delta to its row (see `SpendStore::add_spend`), in one order
/// for every process, so two nodes adding to the same rows never deadlock.
pub(crate) async fn add_spend(
    tx: &Transaction<'_>,
    deltas: &[SpendDelta],
) -> Result<(), StoreError> {
    for delta in deltas {
        validate_spend(delta)?;
    }
    let mut ordered: Vec<&SpendDelta> = deltas.iter().collect();
    ordered.sort_by(|a, b| {
        (a.tenant.as_str(), &a.key, a.day, &a.model).cmp(&(
            b.tenant.as_str(),
            &b.key,
            b.day,
            &b.model,
        ))
    });
    for d in ordered {
        execute(
            tx,
            "INSERT INTO spend (tenant, key, model, day, tokens, cost_micros) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (tenant, key, day, model) DO UPDATE SET \
             tokens = spend.tokens + excluded.tokens, \
             cost_micros = spend.cost_micros + excluded.cost_micros",
            &[
                &d.tenant.as_str(),
                &d.key,
                &d.model,
                &i32::try_from(d.day).map_err(|_| StoreError::Invalid {
                    what: "spend day",
                    expected: format!("at most {}", i32::MAX),
                    found: d.day.to_string(),
                })?,
                &int(d.tokens, "spend tokens")?,
                &int(d.cost_micros, "spend cost_micros")?,
            ],
        )
        .await?;
    }
    Ok(())
}

/// The rows `query` selects, by day, tenant, key and model.
pub(crate) async fn spend(
    client: &impl GenericClient,
    query: &SpendQuery,
) -> Result<Vec<SpendRow>, StoreError> {
    let day = |d: u32| i32::try_from(d).unwrap_or(i32::MAX);
    let rows = client
        .query(
            "SELECT tenant, key, model, day, tokens, cost_micros FROM spend \
             WHERE day >= $1 AND day < $2 AND ($3::text IS NULL OR tenant = $3) \
             AND ($4::text IS NULL OR key = $4) \
             ORDER BY day, tenant, key, model",
            &[
                &day(query.from_day),
                &day(query.until_day),
                &query.tenant.as_ref().map(TenantId::as_str),
                &query.key,
            ],
        )
        .await
        .pg()?;
    rows.iter()
        .map(|row| {
            let corrupt = |column: &'static str, reason: String| StoreError::Corrupt {
                table: "spend",
                column,
                reason,
            };
            let count = |column: &'static str, n: i64| {
                u64::try_from(n)
                    .map_err(|_| corrupt(column, format!("expected a count, found {n}")))
            };
            let tenant: String = row.try_get(0).pg()?;
            let day: i32 = row.try_get(3).pg()?;
            Ok(SpendRow {
                tenant: TenantId::new(tenant).map_err(|e| corrupt("tenant", e.to_string()))?,
                key: row.try_get(1).pg()?,
                model: row.try_get(2).pg()?,
                day: u32::try_from(day)
                    .map_err(|_| corrupt("day", format!("expected a day from 0, found {day}")))?,
                tokens: count("tokens", row.try_get(4).pg()?)?,
                cost_micros: count("cost_micros", row.try_get(5).pg()?)?,
            })
        })
        .collect()
}

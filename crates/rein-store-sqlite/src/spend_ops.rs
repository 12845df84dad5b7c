//! The SQL of API keys' spend (schema v22).

use rein_core::TenantId;
use rein_store::rules::validate_spend;
use rein_store::{SpendDelta, SpendQuery, SpendRow, StoreError};
use rusqlite::{Connection, params};

use super::codec::{SqlResult, int};

/// Adds each delta to its row. The caller provides the transaction: its
/// `IMMEDIATE` write lock makes the additions atomic across processes.
pub fn add(conn: &Connection, deltas: &[SpendDelta]) -> Result<(), StoreError> {
    for delta in deltas {
        validate_spend(delta)?;
    }
    let mut statement = conn
        .prepare_cached(
            "INSERT INTO spend (tenant, key, model, day, tokens, cost_micros) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
             ON CONFLICT (tenant, key, day, model) DO UPDATE SET \
             tokens = tokens + excluded.tokens, cost_micros = cost_micros + excluded.cost_micros",
        )
        .sql()?;
    for d in deltas {
        statement
            .execute(params![
                d.tenant.as_str(),
                d.key,
                d.model,
                d.day,
                int(d.tokens, "spend tokens")?,
                int(d.cost_micros, "spend cost_micros")?,
            ])
            .sql()?;
    }
    Ok(())
}

/// The rows `query` selects, by day, tenant, key and model.
pub fn read(conn: &Connection, query: &SpendQuery) -> Result<Vec<SpendRow>, StoreError> {
    let mut statement = conn
        .prepare_cached(
            "SELECT tenant, key, model, day, tokens, cost_micros FROM spend \
             WHERE day >= ?1 AND day < ?2 AND (?3 IS NULL OR tenant = ?3) \
             AND (?4 IS NULL OR key = ?4) \
             ORDER BY day, tenant, key, model",
        )
        .sql()?;
    let mut rows = statement
        .query(params![
            query.from_day,
            query.until_day,
            query.tenant.as_ref().map(TenantId::as_str),
            query.key,
        ])
        .sql()?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().sql()? {
        let tenant: String = row.get(0).sql()?;
        let corrupt = |column: &'static str, reason: String| StoreError::Corrupt {
            table: "spend",
            column,
            reason,
        };
        let count = |column: &'static str, n: i64| {
            u64::try_from(n).map_err(|_| corrupt(column, format!("expected a count, found {n}")))
        };
        let day: i64 = row.get(3).sql()?;
        out.push(SpendRow {
            tenant: TenantId::new(tenant).map_err(|e| corrupt("tenant", e.to_string()))?,
            key: row.get(1).sql()?,
            model: row.get(2).sql()?,
            day: u32::try_from(day)
                .map_err(|_| corrupt("day", format!("expected a day from 0, found {day}")))?,
            tokens: count("tokens", row.get(4).sql()?)?,
            cost_micros: count("cost_micros", row.get(5).sql()?)?,
        });
    }
    Ok(out)
}

//! The SQL of [`Store::run_stats`](crate::Store::run_stats) (schema v12).
//!
//! Three grouped queries over the runs of the window, each served by
//! `runs_by_tenant_created` (or `runs_by_created_id` for every tenant):
//! statuses with the report's tokens and cost read by `json_extract`,
//! models by `json_each` over the report's `models`, and guardrails by a
//! join on `events_by_guardrail`. Each returns a row per group, never a
//! row per run.

use rusqlite::Connection;
use rusqlite::types::Value as Sql;

use super::codec::{SqlResult, int};
use rein_store::StoreError;
use rein_store::rules::{stored_count, stored_guardrail, stored_status};
use rein_store::{GuardrailCount, ModelCount, RunStats, StatsQuery, StatusCount};

/// The runs' `WHERE` for `query` (on the alias `r`) and its parameters:
/// only the conditions it sets, so the planner picks the index serving
/// them.
fn window(query: &StatsQuery) -> Result<(String, Vec<Sql>), StoreError> {
    let mut conditions = vec!["r.created_at_ms >= ?", "r.created_at_ms < ?"];
    let mut values = vec![
        Sql::Integer(int(query.since_ms, "stats since_ms")?),
        Sql::Integer(int(query.until_ms, "stats until_ms")?),
    ];
    if let Some(tenant) = &query.tenant {
        conditions.push("r.tenant = ?");
        values.push(Sql::Text(tenant.as_str().to_owned()));
    }
    if let Some(agent) = &query.agent {
        conditions.push("r.agent = ?");
        values.push(Sql::Text(agent.clone()));
    }
    Ok((conditions.join(" AND "), values))
}

/// The counts of the runs `query` selects.
pub fn run_stats(conn: &Connection, query: &StatsQuery) -> Result<RunStats, StoreError> {
    let (filter, values) = window(query)?;
    let mut stats = RunStats::default();
    // Prepared uncached: four shapes of each, read rarely. A report holds
    // its cost as `cost_usd` dollars, or, written before event schema 2,
    // as `cost` micro-dollars; the sum is in micro-dollars.
    let mut statement = conn
        .prepare(&format!(
            "SELECT r.agent, r.status, COUNT(*), \
             COALESCE(SUM(json_extract(r.report, '$.consumed.tokens')), 0), \
             COALESCE(SUM(COALESCE(\
               CAST(ROUND(json_extract(r.report, '$.consumed.cost_usd') * 1000000) AS INTEGER), \
               json_extract(r.report, '$.consumed.cost'))), 0) \
             FROM runs r WHERE {filter} GROUP BY r.agent, r.status"
        ))
        .sql()?;
    let mut rows = statement
        .query(rusqlite::params_from_iter(values.iter()))
        .sql()?;
    while let Some(row) = rows.next().sql()? {
        let status: String = row.get(1).sql()?;
        stats.statuses.push(StatusCount {
            agent: row.get(0).sql()?,
            status: stored_status(&status)?,
            runs: stored_count(row.get(2).sql()?, "run count")?,
            tokens: stored_count(row.get(3).sql()?, "report consumed.tokens")?,
            cost_micros: stored_count(row.get(4).sql()?, "report consumed.cost")?,
        });
    }
    let mut statement = conn
        .prepare(&format!(
            "SELECT m.value, r.status, COUNT(*), \
             COALESCE(SUM(json_extract(r.report, '$.consumed.tokens')), 0), \
             COALESCE(SUM(COALESCE(\
               CAST(ROUND(json_extract(r.report, '$.consumed.cost_usd') * 1000000) AS INTEGER), \
               json_extract(r.report, '$.consumed.cost'))), 0) \
             FROM runs r, json_each(r.report, '$.models') m \
             WHERE {filter} AND r.report IS NOT NULL GROUP BY m.value, r.status"
        ))
        .sql()?;
    let mut rows = statement
        .query(rusqlite::params_from_iter(values.iter()))
        .sql()?;
    while let Some(row) = rows.next().sql()? {
        let status: String = row.get(1).sql()?;
        stats.models.push(ModelCount {
            model: row.get(0).sql()?,
            status: stored_status(&status)?,
            runs: stored_count(row.get(2).sql()?, "run count")?,
            tokens: stored_count(row.get(3).sql()?, "report consumed.tokens")?,
            cost_micros: stored_count(row.get(4).sql()?, "report consumed.cost")?,
        });
    }
    let mut statement = conn
        .prepare(&format!(
            "SELECT r.agent, e.guardrail, COUNT(*), COUNT(DISTINCT r.run_id) \
             FROM runs r JOIN events e ON e.run_id = r.run_id AND e.guardrail IS NOT NULL \
             WHERE {filter} GROUP BY r.agent, e.guardrail"
        ))
        .sql()?;
    let mut rows = statement
        .query(rusqlite::params_from_iter(values.iter()))
        .sql()?;
    while let Some(row) = rows.next().sql()? {
        let guardrail: String = row.get(1).sql()?;
        stats.guardrails.push(GuardrailCount {
            agent: row.get(0).sql()?,
            guardrail: stored_guardrail(&guardrail)?,
            fired: stored_count(row.get(2).sql()?, "guardrail count")?,
            runs: stored_count(row.get(3).sql()?, "guardrail run count")?,
        });
    }
    Ok(stats)
}

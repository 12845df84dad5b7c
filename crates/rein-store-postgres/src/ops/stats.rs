//! The SQL of [`Store::run_stats`](rein_store::Store::run_stats)
//! (migration `0003_guardrails.sql`): three grouped queries over the runs
//! of the window on `runs_by_tenant_created` (or `runs_by_created_id` for
//! every tenant), as SQLite's: statuses with the report's tokens and cost,
//! models from the report's `models`, guardrails by a join on
//! `events_by_guardrail`. A row per group, never a row per run.

use deadpool_postgres::GenericClient;
use rein_store::rules::{stored_count, stored_guardrail, stored_status};
use rein_store::{GuardrailCount, ModelCount, RunStats, StatsQuery, StatusCount, StoreError};
use tokio_postgres::types::ToSql;

use crate::codec::{PgResult, int};

/// The runs' `WHERE` for `query` (on the alias `r`) and its parameters:
/// only the conditions it sets, so the planner picks the index serving
/// them.
fn window(query: &StatsQuery) -> Result<(String, Vec<Box<dyn ToSql + Sync + Send>>), StoreError> {
    let mut conditions = vec![
        "r.created_at_ms >= $1".to_owned(),
        "r.created_at_ms < $2".to_owned(),
    ];
    let mut values: Vec<Box<dyn ToSql + Sync + Send>> = vec![
        Box::new(int(query.since_ms, "stats since_ms")?),
        Box::new(int(query.until_ms, "stats until_ms")?),
    ];
    if let Some(tenant) = &query.tenant {
        values.push(Box::new(tenant.as_str().to_owned()));
        conditions.push(format!("r.tenant = ${}", values.len()));
    }
    if let Some(agent) = &query.agent {
        values.push(Box::new(agent.clone()));
        conditions.push(format!("r.agent = ${}", values.len()));
    }
    Ok((conditions.join(" AND "), values))
}

/// Tokens and cost (in micro-dollars) of the report, summed (`SUM` of
/// `bigint` is `numeric`). A report holds its cost as `cost_usd` dollars,
/// or, written before event schema 2, as `cost` micro-dollars.
const CONSUMED: &str = "COALESCE(SUM((r.report::jsonb #>> '{consumed,tokens}')::bigint), 0)::bigint, \
     COALESCE(SUM(COALESCE(\
       ROUND((r.report::jsonb #>> '{consumed,cost_usd}')::numeric * 1000000)::bigint, \
       (r.report::jsonb #>> '{consumed,cost}')::bigint)), 0)::bigint";

/// The counts of the runs `query` selects.
pub(crate) async fn run_stats(
    client: &impl GenericClient,
    query: &StatsQuery,
) -> Result<RunStats, StoreError> {
    let (filter, values) = window(query)?;
    let params: Vec<&(dyn ToSql + Sync)> = values
        .iter()
        .map(|value| value.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let mut stats = RunStats::default();
    let sql = format!(
        "SELECT r.agent, r.status, COUNT(*), {CONSUMED} \
         FROM runs r WHERE {filter} GROUP BY r.agent, r.status"
    );
    for row in client.query(&sql, &params).await.pg()? {
        let status: String = row.try_get(1).pg()?;
        stats.statuses.push(StatusCount {
            agent: row.try_get(0).pg()?,
            status: stored_status(&status)?,
            runs: stored_count(row.try_get(2).pg()?, "run count")?,
            tokens: stored_count(row.try_get(3).pg()?, "report consumed.tokens")?,
            cost_micros: stored_count(row.try_get(4).pg()?, "report consumed.cost")?,
        });
    }
    let sql = format!(
        "SELECT m.model, r.status, COUNT(*), {CONSUMED} \
         FROM runs r CROSS JOIN LATERAL jsonb_array_elements_text(r.report::jsonb -> 'models') \
         AS m(model) WHERE {filter} AND r.report IS NOT NULL GROUP BY m.model, r.status"
    );
    for row in client.query(&sql, &params).await.pg()? {
        let status: String = row.try_get(1).pg()?;
        stats.models.push(ModelCount {
            model: row.try_get(0).pg()?,
            status: stored_status(&status)?,
            runs: stored_count(row.try_get(2).pg()?, "run count")?,
            tokens: stored_count(row.try_get(3).pg()?, "report consumed.tokens")?,
            cost_micros: stored_count(row.try_get(4).pg()?, "report consumed.cost")?,
        });
    }
    let sql = format!(
        "SELECT r.agent, e.guardrail, COUNT(*), COUNT(DISTINCT r.run_id) \
         FROM runs r JOIN events e ON e.run_id = r.run_id AND e.guardrail IS NOT NULL \
         WHERE {filter} GROUP BY r.agent, e.guardrail"
    );
    for row in client.query(&sql, &params).await.pg()? {
        let guardrail: String = row.try_get(1).pg()?;
        stats.guardrails.push(GuardrailCount {
            agent: row.try_get(0).pg()?,
            guardrail: stored_guardrail(&guardrail)?,
            fired: stored_count(row.try_get(2).pg()?, "guardrail count")?,
            runs: stored_count(row.try_get(3).pg()?, "guardrail run count")?,
        });
    }
    Ok(stats)
}

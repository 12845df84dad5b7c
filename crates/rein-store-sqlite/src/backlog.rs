//! The SQL of [`Store::tenant_backlogs`](crate::Store::tenant_backlogs).

use rein_core::TenantId;
use rusqlite::{Connection, params};

use super::codec::{RUN_COLUMNS, SqlResult, decode_run};
use rein_store::StoreError;
use rein_store::{QueueHead, TenantBacklog};

/// Each tenant's queued and running root runs counted (`?1`: one tenant,
/// or NULL for all). Its WHERE is `runs_root_backlog`'s, term for term, so
/// SQLite reads that partial index, and only it.
const BACKLOG_COUNTS: &str = "SELECT tenant, SUM(status = 'queued'), SUM(status = 'running') \
     FROM runs WHERE status IN ('queued', 'running') AND parent_run_id IS NULL \
     AND (?1 IS NULL OR tenant = ?1) GROUP BY tenant ORDER BY tenant";

/// The tenants with queued root runs, in order, by a loose index scan of
/// `runs_root_backlog`: each next one is the first index entry past the
/// last one found (the WHERE repeats the index's, term for term).
const QUEUED_TENANTS: &str = "WITH RECURSIVE queued(tenant) AS ( \
       SELECT MIN(tenant) FROM runs WHERE status IN ('queued', 'running') \
         AND parent_run_id IS NULL AND status = 'queued' \
       UNION ALL \
       SELECT (SELECT MIN(tenant) FROM runs WHERE status IN ('queued', 'running') \
         AND parent_run_id IS NULL AND status = 'queued' AND tenant > queued.tenant) \
       FROM queued WHERE queued.tenant IS NOT NULL \
     ) SELECT tenant FROM queued WHERE tenant IS NOT NULL";

/// Every tenant with queued or running root runs (only `tenant`'s when
/// given), tenant id order, each with up to `oldest` of its oldest queued
/// root runs.
///
/// The counts are one grouped scan of the partial index of queued and
/// running root runs (`runs_root_backlog`: its WHERE is this query's, term
/// for term, so SQLite uses it, and it covers the columns read); each
/// tenant's oldest runs one walk of `runs_by_tenant_status` in its order.
pub fn tenant_backlogs(
    conn: &Connection,
    tenant: Option<&TenantId>,
    oldest: usize,
) -> Result<Vec<TenantBacklog>, StoreError> {
    let mut counts = conn.prepare_cached(BACKLOG_COUNTS).sql()?;
    let mut rows = counts.query(params![tenant.map(TenantId::as_str)]).sql()?;
    let mut found = Vec::new();
    while let Some(row) = rows.next().sql()? {
        let name: String = row.get(0).sql()?;
        let queued: i64 = row.get(1).sql()?;
        let running: i64 = row.get(2).sql()?;
        let tenant = TenantId::new(&name)
            .map_err(|e| StoreError::Backend(format!("runs.tenant `{name}`: {e}")))?;
        found.push((
            tenant,
            u64::try_from(queued).unwrap_or(0),
            u64::try_from(running).unwrap_or(0),
        ));
    }
    let mut out = Vec::with_capacity(found.len());
    for (tenant, queued, running) in found {
        let runs = if queued > 0 {
            oldest_queued(conn, &tenant, oldest)?
        } else {
            Vec::new()
        };
        out.push(TenantBacklog::new(tenant, queued, running, runs));
    }
    Ok(out)
}

/// Every tenant with queued root runs, tenant id order, each with its
/// running root runs counted and up to `oldest` of its oldest queued ones.
///
/// Nothing here walks the queue: the tenants come from a loose index scan
/// of `runs_root_backlog` (one seek per tenant, for the first tenant past
/// the last one found with a queued run: its WHERE repeats the index's,
/// term for term), and each tenant's running count and oldest runs from
/// `runs_by_tenant_status`, one seek each.
pub fn queue_heads(conn: &Connection, oldest: usize) -> Result<Vec<QueueHead>, StoreError> {
    let mut tenants = conn.prepare_cached(QUEUED_TENANTS).sql()?;
    let names: Vec<String> = tenants
        .query_map([], |row| row.get(0))
        .sql()?
        .collect::<Result<_, _>>()
        .sql()?;
    let mut running = conn
        .prepare_cached(
            "SELECT COUNT(*) FROM runs WHERE tenant = ?1 AND status = 'running' \
             AND parent_run_id IS NULL",
        )
        .sql()?;
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let tenant = TenantId::new(&name)
            .map_err(|e| StoreError::Backend(format!("runs.tenant `{name}`: {e}")))?;
        let count: i64 = running.query_row(params![name], |row| row.get(0)).sql()?;
        let runs = oldest_queued(conn, &tenant, oldest)?;
        out.push(QueueHead::new(
            tenant,
            u64::try_from(count).unwrap_or(0),
            runs,
        ));
    }
    Ok(out)
}

/// Up to `oldest` of `tenant`'s oldest queued root runs, one walk of
/// `runs_by_tenant_status` in its order.
fn oldest_queued(
    conn: &Connection,
    tenant: &TenantId,
    oldest: usize,
) -> Result<Vec<rein_store::RunRecord>, StoreError> {
    if oldest == 0 {
        return Ok(Vec::new());
    }
    let mut heads = conn
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE tenant = ?1 AND status = 'queued' \
             AND parent_run_id IS NULL ORDER BY created_at_ms, run_id LIMIT ?2"
        ))
        .sql()?;
    let take = i64::try_from(oldest).unwrap_or(i64::MAX);
    let mut rows = heads.query(params![tenant.as_str(), take]).sql()?;
    let mut runs = Vec::new();
    while let Some(row) = rows.next().sql()? {
        runs.push(decode_run(row)?);
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How SQLite runs `sql` (its one parameter NULL, if it has one), in
    /// `EXPLAIN QUERY PLAN`'s words.
    fn plan(conn: &Connection, sql: &str) -> String {
        let mut explain = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let params = vec![None::<&str>; explain.parameter_count()];
        explain
            .query_map(rusqlite::params_from_iter(params), |row| {
                row.get::<_, String>(3)
            })
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
            .join("; ")
    }

    #[test]
    fn the_queue_heads_seek_once_per_tenant() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::schema::migrate(&mut conn).unwrap();
        conn.execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3000) \
             INSERT INTO runs (run_id, tenant, agent, input, budget, status, created_at_ms, \
             updated_at_ms) SELECT 'r-' || i, CASE WHEN i % 1000 = 0 THEN 'quiet' ELSE 'noisy' \
             END, 'a', '', '{}', CASE WHEN i % 7 = 0 THEN 'running' ELSE 'queued' END, i, i \
             FROM n; ANALYZE;",
        )
        .unwrap();
        let plan = plan(&conn, QUEUED_TENANTS);
        assert!(
            plan.contains("COVERING INDEX runs_root_backlog (tenant>?)"),
            "each next tenant is one seek: {plan}"
        );
        let heads = queue_heads(&conn, 2).unwrap();
        let seen: Vec<(&str, u64, usize)> = heads
            .iter()
            .map(|h| (h.tenant.as_str(), h.running, h.oldest.len()))
            .collect();
        // Every 7th run runs: 428 of 3000, none of them quiet's (1000,
        // 2000 and 3000 are not multiples of 7).
        assert_eq!(seen, [("noisy", 428, 2), ("quiet", 0, 2)]);
    }

    #[test]
    fn the_grouped_count_reads_only_the_backlog_index() {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::schema::migrate(&mut conn).unwrap();
        // Ended runs outnumbering the backlog, as in any store that has
        // served a while, and statistics that say so.
        conn.execute_batch(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2000) \
             INSERT INTO runs (run_id, tenant, agent, input, budget, status, created_at_ms, \
             updated_at_ms) SELECT 'r-' || i, 't' || (i % 3), 'a', '', '{}', \
             CASE WHEN i % 100 = 0 THEN 'queued' ELSE 'succeeded' END, i, i FROM n; ANALYZE;",
        )
        .unwrap();
        let plan = plan(&conn, BACKLOG_COUNTS);
        assert!(
            plan.contains("COVERING INDEX runs_root_backlog"),
            "the count walks more than the backlog: {plan}"
        );
        // And it counts what it did before.
        let backlogs = tenant_backlogs(&conn, None, 1).unwrap();
        let queued: u64 = backlogs.iter().map(|b| b.queued).sum();
        assert_eq!(queued, 20);
    }
}

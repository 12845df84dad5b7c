//! The SQL of [`Store::tenant_backlogs`](crate::Store::tenant_backlogs).

use rein_core::TenantId;
use rusqlite::{Connection, params};

use super::codec::{RUN_COLUMNS, SqlResult, decode_run};
use rein_store::StoreError;
use rein_store::TenantBacklog;

/// Every tenant with queued or running root runs (only `tenant`'s when
/// given), tenant id order, each with up to `oldest` of its oldest queued
/// root runs.
///
/// The counts are one grouped scan of the queued and running rows (the
/// `runs_by_status` index); each tenant's oldest runs one walk of
/// `runs_by_tenant_status` in its order.
pub fn tenant_backlogs(
    conn: &Connection,
    tenant: Option<&TenantId>,
    oldest: usize,
) -> Result<Vec<TenantBacklog>, StoreError> {
    let mut counts = conn
        .prepare_cached(
            "SELECT tenant, SUM(status = 'queued'), SUM(status = 'running') FROM runs \
             WHERE status IN ('queued', 'running') AND parent_run_id IS NULL \
             AND (?1 IS NULL OR tenant = ?1) GROUP BY tenant ORDER BY tenant",
        )
        .sql()?;
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
    let mut heads = conn
        .prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE tenant = ?1 AND status = 'queued' \
             AND parent_run_id IS NULL ORDER BY created_at_ms, run_id LIMIT ?2"
        ))
        .sql()?;
    let take = i64::try_from(oldest).unwrap_or(i64::MAX);
    let mut out = Vec::with_capacity(found.len());
    for (tenant, queued, running) in found {
        let mut runs = Vec::new();
        if queued > 0 && oldest > 0 {
            let mut rows = heads.query(params![tenant.as_str(), take]).sql()?;
            while let Some(row) = rows.next().sql()? {
                runs.push(decode_run(row)?);
            }
        }
        out.push(TenantBacklog::new(tenant, queued, running, runs));
    }
    Ok(out)
}

//! Runs and what hangs off them: creating and reading runs, listing them,
//! and the reads of events, intents, the ledger and checkpoints.

use deadpool_postgres::GenericClient;
use rein_core::{Event, LedgerRecord, RunId, TenantId};
use rein_store::{
    Checkpoint, NewRun, PlannedIntent, QueueHead, RunCursor, RunFilter, RunPage, RunRecord,
    RunStatus, StoreError, TenantBacklog,
};
use tokio_postgres::types::ToSql;

use super::{execute, query_all, query_opt, require_run};
use crate::codec::{
    CHECKPOINT_COLUMNS, CHECKPOINT_DELTA_COLUMNS, EVENT_COLUMNS, INTENT_COLUMNS, LEDGER_COLUMNS,
    PgResult, RUN_COLUMNS, decode_checkpoint, decode_checkpoint_delta, decode_event, decode_intent,
    decode_ledger, decode_run, int, json_text, limit,
};

/// Inserts a new run; `Conflict` when its id is taken.
pub(crate) async fn create_run(
    client: &impl GenericClient,
    run: NewRun,
) -> Result<RunRecord, StoreError> {
    let record = RunRecord::new(run);
    let inserted = execute(
        client,
        "INSERT INTO runs (run_id, tenant, agent, input, parent_run_id, budget, status, report, \
         created_at_ms, updated_at_ms, trace_parent) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, NULL, $8, $9, $10) \
         ON CONFLICT (run_id) DO NOTHING",
        &[
            &record.run_id.as_str(),
            &record.tenant.as_str(),
            &record.agent,
            &record.input,
            &record.parent_run_id.as_ref().map(RunId::as_str),
            &json_text(&record.budget, "run budget")?,
            &record.status.as_str(),
            &int(record.created_at_ms, "run created_at_ms")?,
            &int(record.updated_at_ms, "run updated_at_ms")?,
            &record
                .trace_parent
                .as_ref()
                .map(rein_store::SpanRef::to_traceparent),
        ],
    )
    .await?;
    if inserted == 0 {
        return Err(StoreError::Conflict {
            what: "run",
            id: record.run_id.to_string(),
        });
    }
    Ok(record)
}

pub(crate) async fn get_run(
    client: &impl GenericClient,
    run_id: &RunId,
) -> Result<Option<RunRecord>, StoreError> {
    query_opt(
        client,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = $1"),
        &[&run_id.as_str()],
        decode_run,
    )
    .await
}

pub(crate) async fn list_runs(
    client: &impl GenericClient,
    max: usize,
) -> Result<Vec<RunRecord>, StoreError> {
    // Ties on created_at_ms go to the later insert.
    query_all(
        client,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at_ms DESC, inserted DESC LIMIT $1"
        ),
        &[&limit(max)],
        decode_run,
    )
    .await
}

pub(crate) async fn runs_with_status_after(
    client: &impl GenericClient,
    status: RunStatus,
    after: Option<&RunCursor>,
    max: usize,
) -> Result<Vec<RunRecord>, StoreError> {
    // Served by `runs_by_status`: a row-value range in its own order.
    let (after_ms, after_id) = match after {
        Some(cursor) => (
            int(cursor.created_at_ms, "cursor created_at_ms")?,
            cursor.run_id.as_str(),
        ),
        None => (-1, ""),
    };
    query_all(
        client,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status = $1 \
             AND (created_at_ms, run_id) > ($2, $3) \
             ORDER BY created_at_ms, run_id LIMIT $4"
        ),
        &[&status.as_str(), &after_ms, &after_id, &limit(max)],
        decode_run,
    )
    .await
}

pub(crate) async fn count_runs_with_status(
    client: &impl GenericClient,
    status: RunStatus,
) -> Result<u64, StoreError> {
    let statement = client
        .prepare_cached("SELECT COUNT(*) FROM runs WHERE status = $1")
        .await
        .pg()?;
    let count: i64 = client
        .query_one(&statement, &[&status.as_str()])
        .await
        .pg()?
        .try_get(0)
        .pg()?;
    Ok(u64::try_from(count).unwrap_or(0))
}

pub(crate) async fn children_of(
    client: &impl GenericClient,
    parent: &RunId,
) -> Result<Vec<RunRecord>, StoreError> {
    query_all(
        client,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = $1 \
             ORDER BY created_at_ms, run_id"
        ),
        &[&parent.as_str()],
        decode_run,
    )
    .await
}

/// One page of the runs `filter` selects after `after`, newest first. The
/// SQL holds only the conditions the filter sets, so the planner picks the
/// index that serves them (as SQLite's does).
pub(crate) async fn list_runs_page(
    client: &impl GenericClient,
    filter: &RunFilter,
    after: Option<&RunCursor>,
    max: usize,
) -> Result<RunPage, StoreError> {
    let mut query = Conditions::default();
    if let Some(tenant) = &filter.tenant {
        query.push("tenant = ?", vec![Box::new(tenant.as_str().to_owned())]);
    }
    if let Some(status) = filter.status {
        query.push("status = ?", vec![Box::new(status.as_str().to_owned())]);
    }
    if let Some(agent) = &filter.agent {
        query.push("agent = ?", vec![Box::new(agent.clone())]);
    }
    if let Some(ms) = filter.created_after_ms {
        let ms = int(ms, "filter created_after_ms")?;
        query.push("created_at_ms > ?", vec![Box::new(ms)]);
    }
    if let Some(ms) = filter.created_before_ms {
        let ms = int(ms, "filter created_before_ms")?;
        query.push("created_at_ms < ?", vec![Box::new(ms)]);
    }
    if let Some(cursor) = after {
        let ms = int(cursor.created_at_ms, "cursor created_at_ms")?;
        let id = cursor.run_id.as_str().to_owned();
        query.push(
            "(created_at_ms, run_id) < (?, ?)",
            vec![Box::new(ms), Box::new(id)],
        );
    }
    let Conditions {
        conditions,
        mut values,
    } = query;
    let filter_sql = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    // One row beyond the page says whether another follows.
    values.push(Box::new(limit(max.saturating_add(1))));
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs {filter_sql} \
         ORDER BY created_at_ms DESC, run_id DESC LIMIT ${}",
        values.len()
    );
    let params: Vec<&(dyn ToSql + Sync)> = values
        .iter()
        .map(|value| value.as_ref() as &(dyn ToSql + Sync))
        .collect();
    let rows = client.query(&sql, &params).await.pg()?;
    let runs = rows.iter().map(decode_run).collect::<Result<_, _>>()?;
    Ok(RunPage::of(runs, max))
}

pub(crate) async fn events(
    client: &impl GenericClient,
    run_id: &RunId,
    after_seq: u64,
) -> Result<Vec<Event>, StoreError> {
    require_run(client, run_id).await?;
    // A cursor beyond i64::MAX cannot have anything after it.
    let Ok(after) = i64::try_from(after_seq) else {
        return Ok(Vec::new());
    };
    query_all(
        client,
        &format!("SELECT {EVENT_COLUMNS} FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq"),
        &[&run_id.as_str(), &after],
        decode_event,
    )
    .await
}

pub(crate) async fn intents(
    client: &impl GenericClient,
    run_id: &RunId,
) -> Result<Vec<(u32, PlannedIntent)>, StoreError> {
    require_run(client, run_id).await?;
    query_all(
        client,
        &format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE run_id = $1 \
             ORDER BY step, ordinal, intent_id"
        ),
        &[&run_id.as_str()],
        decode_intent,
    )
    .await
}

pub(crate) async fn ledger(
    client: &impl GenericClient,
    run_id: &RunId,
) -> Result<Vec<LedgerRecord>, StoreError> {
    require_run(client, run_id).await?;
    query_all(
        client,
        &format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE run_id = $1 ORDER BY seq"),
        &[&run_id.as_str()],
        decode_ledger,
    )
    .await
}

pub(crate) async fn pending_ledger(
    client: &impl GenericClient,
    max: usize,
) -> Result<Vec<LedgerRecord>, StoreError> {
    query_all(
        client,
        &format!(
            "SELECT {LEDGER_COLUMNS} FROM ledger WHERE status = 'pending' \
             ORDER BY created_at_ms, run_id, seq LIMIT $1"
        ),
        &[&limit(max)],
        decode_ledger,
    )
    .await
}

/// The run's latest whole checkpoint with the deltas after it applied.
pub(crate) async fn latest_checkpoint(
    client: &impl GenericClient,
    run_id: &RunId,
) -> Result<Option<Checkpoint>, StoreError> {
    require_run(client, run_id).await?;
    let base = query_opt(
        client,
        &format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = $1 \
             ORDER BY step DESC LIMIT 1"
        ),
        &[&run_id.as_str()],
        decode_checkpoint,
    )
    .await?;
    let after = i64::from(base.as_ref().map_or(0, |c| c.step));
    let deltas = query_all(
        client,
        &format!(
            "SELECT {CHECKPOINT_DELTA_COLUMNS} FROM checkpoint_deltas \
             WHERE run_id = $1 AND step > $2 ORDER BY step"
        ),
        &[&run_id.as_str(), &after],
        decode_checkpoint_delta,
    )
    .await?;
    Checkpoint::rebuild(run_id, base, deltas)
}

/// A parameter of a statement built at run time.
type Value = Box<dyn ToSql + Sync + Send>;

/// The `WHERE` conditions of a listing and their parameters, numbered in
/// order.
#[derive(Default)]
struct Conditions {
    conditions: Vec<String>,
    values: Vec<Value>,
}

impl Conditions {
    /// Adds `condition`, each `?` in it bound to the next of `values`.
    fn push(&mut self, condition: &str, values: Vec<Value>) {
        let mut numbered = String::new();
        let mut values = values.into_iter();
        for part in condition.split_inclusive('?') {
            let head = part.strip_suffix('?');
            match head.zip(head.and_then(|_| values.next())) {
                Some((head, value)) => {
                    self.values.push(value);
                    numbered.push_str(&format!("{head}${}", self.values.len()));
                }
                None => numbered.push_str(part),
            }
        }
        self.conditions.push(numbered);
    }
}

/// Up to `oldest` of `tenant`'s oldest queued root runs, one walk of
/// `runs_by_tenant_status` in its order.
async fn oldest_queued(
    client: &impl GenericClient,
    tenant: &TenantId,
    oldest: usize,
) -> Result<Vec<RunRecord>, StoreError> {
    query_all(
        client,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE tenant = $1 AND status = 'queued' \
             AND parent_run_id IS NULL ORDER BY created_at_ms, run_id LIMIT $2"
        ),
        &[&tenant.as_str(), &limit(oldest)],
        decode_run,
    )
    .await
}

/// Every tenant with queued root runs, tenant id order, each with its
/// running root runs counted and up to `oldest` of its oldest queued ones,
/// without walking the queue: a loose index scan of `runs_by_tenant_status`
/// finds each next tenant with a queued root in one seek (as SQLite's
/// backend does through its partial index).
pub(crate) async fn queue_heads(
    client: &impl GenericClient,
    oldest: usize,
) -> Result<Vec<QueueHead>, StoreError> {
    let statement = client
        .prepare_cached(
            "WITH RECURSIVE queued(tenant) AS ( \
               SELECT MIN(tenant) FROM runs WHERE status = 'queued' AND parent_run_id IS NULL \
               UNION ALL \
               SELECT (SELECT MIN(tenant) FROM runs WHERE status = 'queued' \
                 AND parent_run_id IS NULL AND tenant > queued.tenant) \
               FROM queued WHERE queued.tenant IS NOT NULL \
             ) SELECT tenant, (SELECT COUNT(*) FROM runs r WHERE r.tenant = queued.tenant \
                 AND r.status = 'running' AND r.parent_run_id IS NULL) \
             FROM queued WHERE tenant IS NOT NULL ORDER BY tenant",
        )
        .await
        .pg()?;
    let rows = client.query(&statement, &[]).await.pg()?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let r = crate::codec::reader(row, "runs", &[0]);
        let tenant: TenantId = r.id(0, "tenant")?;
        let running = r.u64(1, "status")?;
        let heads = if oldest > 0 {
            oldest_queued(client, &tenant, oldest).await?
        } else {
            Vec::new()
        };
        out.push(QueueHead::new(tenant, running, heads));
    }
    Ok(out)
}

/// Every tenant with queued or running root runs (only `tenant`'s when
/// given), tenant id order, each with up to `oldest` of its oldest queued
/// root runs: one grouped count, then one walk of `runs_by_tenant_status`
/// per tenant with queued runs (as SQLite's backend does).
pub(crate) async fn tenant_backlogs(
    client: &impl GenericClient,
    tenant: Option<&TenantId>,
    oldest: usize,
) -> Result<Vec<TenantBacklog>, StoreError> {
    let statement = client
        .prepare_cached(
            "SELECT tenant, COUNT(*) FILTER (WHERE status = 'queued'), \
             COUNT(*) FILTER (WHERE status = 'running') FROM runs \
             WHERE status IN ('queued', 'running') AND parent_run_id IS NULL \
             AND ($1::text IS NULL OR tenant = $1) GROUP BY tenant ORDER BY tenant",
        )
        .await
        .pg()?;
    let rows = client
        .query(&statement, &[&tenant.map(TenantId::as_str)])
        .await
        .pg()?;
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        let r = crate::codec::reader(row, "runs", &[0]);
        let tenant: TenantId = r.id(0, "tenant")?;
        let (queued, running) = (r.u64(1, "status")?, r.u64(2, "status")?);
        let heads = if queued > 0 && oldest > 0 {
            oldest_queued(client, &tenant, oldest).await?
        } else {
            Vec::new()
        };
        out.push(TenantBacklog::new(tenant, queued, running, heads));
    }
    Ok(out)
}

//! The SQL of each store operation, on a borrowed connection.
//!
//! Write operations run inside the transaction (and savepoint) the worker
//! opened for them, so each may read, check and write without racing
//! another writer: the `IMMEDIATE` transaction holds SQLite's write lock.

use rein_core::event::Guardrail;
use rein_core::{Event, IntentId, LedgerRecord, LedgerStatus, RunId, RunReport, TenantId};
use rein_store::Timestamp;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::codec::{
    BREAKER_OPENING_COLUMNS, CHECKPOINT_COLUMNS, CHECKPOINT_DELTA_COLUMNS, EVENT_COLUMNS,
    IDEMPOTENCY_COLUMNS, INTENT_COLUMNS, LEASE_COLUMNS, LEDGER_COLUMNS, RUN_COLUMNS,
    SINGLETON_COLUMNS, SqlResult, decode_breaker_opening, decode_checkpoint,
    decode_checkpoint_delta, decode_event, decode_idempotency, decode_intent, decode_lease,
    decode_ledger, decode_run, decode_singleton, event_data_text, headers_text, int, json_text,
    serde_name,
};
use rein_store::BreakerOpening;
use rein_store::LedgerMark;
use rein_store::PlannedIntent;
use rein_store::SingletonLease;
use rein_store::SpanRef;
use rein_store::StoreError;
use rein_store::rules::validate_owner;
use rein_store::rules::{claimed, validate_claim, validate_singleton_text};
use rein_store::rules::{
    marked, next_seq as seq_after, reopened_outcome, same_run, stamp_revision as stamp,
    validate_delta_step, validate_reopen, validate_revised_report, validate_status_change,
};
use rein_store::rules::{published, validate_breaker_text, validate_opening};
use rein_store::rules::{record_not_found, validate_reservation};
use rein_store::{Checkpoint, CheckpointDelta};
use rein_store::{ClaimFence, Committed, StepCommit};
use rein_store::{
    IdempotencyRecord, IdempotencySettled, IdempotencySettlement, IdempotencyState, NewReservation,
    Reservation, ReservationFence, StoredResponse,
};
use rein_store::{Lease, LeaseChange, LeaseFilter};
use rein_store::{NewRun, RunCursor, RunFilter, RunPage, RunRecord, RunStatus, StatusChange};

/// Runs a cached statement and decodes every row.
fn query_all<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: fn(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let mut statement = conn.prepare_cached(sql).sql()?;
    let mut rows = statement.query(params).sql()?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().sql()? {
        out.push(decode(row)?);
    }
    Ok(out)
}

/// Runs a cached statement and decodes the first row, if any.
fn query_one<T>(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
    decode: fn(&Row<'_>) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let mut statement = conn.prepare_cached(sql).sql()?;
    let mut rows = statement.query(params).sql()?;
    match rows.next().sql()? {
        Some(row) => decode(row).map(Some),
        None => Ok(None),
    }
}

fn limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The run's status, or `NotFound`.
pub(crate) fn run_status(conn: &Connection, run_id: &RunId) -> Result<RunStatus, StoreError> {
    let status: Option<String> = conn
        .prepare_cached("SELECT status FROM runs WHERE run_id = ?1")
        .sql()?
        .query_row([run_id.as_str()], |row| row.get(0))
        .optional()
        .sql()?;
    let status = status.ok_or_else(|| StoreError::run_not_found(run_id))?;
    RunStatus::parse(&status).ok_or_else(|| StoreError::Corrupt {
        table: "runs",
        column: "status",
        reason: format!("expected a known name, found {status:?} (row run_id={run_id})"),
    })
}

fn require_run(conn: &Connection, run_id: &RunId) -> Result<(), StoreError> {
    let found: Option<i64> = conn
        .prepare_cached("SELECT 1 FROM runs WHERE run_id = ?1")
        .sql()?
        .query_row([run_id.as_str()], |row| row.get(0))
        .optional()
        .sql()?;
    found
        .map(drop)
        .ok_or_else(|| StoreError::run_not_found(run_id))
}

pub fn create_run(conn: &Connection, run: NewRun) -> Result<RunRecord, StoreError> {
    if get_run(conn, &run.run_id)?.is_some() {
        return Err(StoreError::Conflict {
            what: "run",
            id: run.run_id.to_string(),
        });
    }
    let record = RunRecord::new(run);
    conn.prepare_cached(
        "INSERT INTO runs (run_id, tenant, agent, input, parent_run_id, budget, status, report, \
         created_at_ms, updated_at_ms, trace_parent) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, NULL, ?8, ?9, ?10)",
    )
    .sql()?
    .execute(params![
        record.run_id.as_str(),
        record.tenant.as_str(),
        record.agent,
        record.input,
        record.parent_run_id.as_ref().map(RunId::as_str),
        json_text(&record.budget, "run budget")?,
        record.status.as_str(),
        int(record.created_at_ms, "run created_at_ms")?,
        int(record.updated_at_ms, "run updated_at_ms")?,
        record.trace_parent.as_ref().map(SpanRef::to_traceparent),
    ])
    .sql()?;
    Ok(record)
}

/// Creates `run` (fenced on its reservation when `fence` is set) and
/// acquires `claim` on it (see [`Store::create_run_claimed`]). The caller
/// provides the transaction: a claim refused rolls the run back with it.
///
/// [`Store::create_run_claimed`]: crate::Store::create_run_claimed
pub fn create_run_claimed(
    conn: &Connection,
    run: NewRun,
    claim: Lease,
    fence: Option<&ReservationFence>,
) -> Result<RunRecord, StoreError> {
    same_run("run claim", &run.run_id, &claim.run_id)?;
    claim.validate()?;
    let record = match fence {
        Some(fence) => create_run_held(conn, run, fence)?,
        None => create_run(conn, run)?,
    };
    change_lease(conn, LeaseChange::Acquire(claim))?;
    Ok(record)
}

pub fn get_run(conn: &Connection, run_id: &RunId) -> Result<Option<RunRecord>, StoreError> {
    query_one(
        conn,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?1"),
        [run_id.as_str()],
        decode_run,
    )
}

pub fn list_runs(conn: &Connection, max: usize) -> Result<Vec<RunRecord>, StoreError> {
    // Ties on created_at_ms go to the later insert.
    query_all(
        conn,
        &format!("SELECT {RUN_COLUMNS} FROM runs ORDER BY created_at_ms DESC, rowid DESC LIMIT ?1"),
        [limit(max)],
        decode_run,
    )
}

/// Up to `max` runs with `status`, oldest first.
pub fn runs_with_status(
    conn: &Connection,
    status: RunStatus,
    max: usize,
) -> Result<Vec<RunRecord>, StoreError> {
    // Served by the `runs_by_status` index (schema v5), in its order.
    query_all(
        conn,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status = ?1 \
             ORDER BY created_at_ms, run_id LIMIT ?2"
        ),
        params![status.as_str(), limit(max)],
        decode_run,
    )
}

/// Up to `max` runs with `status` after `after`, oldest first.
pub fn runs_with_status_after(
    conn: &Connection,
    status: RunStatus,
    after: Option<&RunCursor>,
    max: usize,
) -> Result<Vec<RunRecord>, StoreError> {
    let Some(after) = after else {
        return runs_with_status(conn, status, max);
    };
    // Served by the `runs_by_status` index (schema v5): a row-value range
    // in its own order.
    query_all(
        conn,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE status = ?1 \
             AND (created_at_ms, run_id) > (?2, ?3) \
             ORDER BY created_at_ms, run_id LIMIT ?4"
        ),
        params![
            status.as_str(),
            int(after.created_at_ms, "cursor created_at_ms")?,
            after.run_id.as_str(),
            limit(max)
        ],
        decode_run,
    )
}

/// How many runs have `status`.
pub fn count_runs_with_status(conn: &Connection, status: RunStatus) -> Result<u64, StoreError> {
    let count: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM runs WHERE status = ?1")
        .sql()?
        .query_row([status.as_str()], |row| row.get(0))
        .sql()?;
    Ok(u64::try_from(count).unwrap_or(0))
}

/// One page of the runs `filter` selects after `after`, newest first.
///
/// The SQL holds only the conditions the filter sets, so that SQLite picks
/// the index that serves them (schema v9: `runs_by_tenant_status` with a
/// tenant and a status, `runs_by_tenant_created` with a tenant,
/// `runs_by_status` with a status, `runs_by_created_id` otherwise), walked
/// backwards from the cursor in its own order: no sort, and a page costs
/// its rows (plus those the agent and time filters pass over), however
/// deep it is.
///
/// Prepared uncached: its up to 64 shapes would evict the statements of
/// the hot path from the cache.
pub fn list_runs_page(
    conn: &Connection,
    filter: &RunFilter,
    after: Option<&RunCursor>,
    max: usize,
) -> Result<RunPage, StoreError> {
    let (sql, values) = list_runs_sql(filter, after, max)?;
    let mut statement = conn.prepare(&sql).sql()?;
    let mut rows = statement.query(rusqlite::params_from_iter(values)).sql()?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().sql()? {
        out.push(decode_run(row)?);
    }
    Ok(RunPage::of(out, max))
}

/// The statement of [`list_runs_page`] and its parameters.
fn list_runs_sql(
    filter: &RunFilter,
    after: Option<&RunCursor>,
    max: usize,
) -> Result<(String, Vec<rusqlite::types::Value>), StoreError> {
    use rusqlite::types::Value as Sql;
    let mut conditions: Vec<&str> = Vec::new();
    let mut values: Vec<Sql> = Vec::new();
    if let Some(tenant) = &filter.tenant {
        conditions.push("tenant = ?");
        values.push(Sql::Text(tenant.as_str().to_owned()));
    }
    if let Some(status) = filter.status {
        conditions.push("status = ?");
        values.push(Sql::Text(status.as_str().to_owned()));
    }
    if let Some(agent) = &filter.agent {
        conditions.push("agent = ?");
        values.push(Sql::Text(agent.clone()));
    }
    if let Some(ms) = filter.created_after_ms {
        conditions.push("created_at_ms > ?");
        values.push(Sql::Integer(int(ms, "filter created_after_ms")?));
    }
    if let Some(ms) = filter.created_before_ms {
        conditions.push("created_at_ms < ?");
        values.push(Sql::Integer(int(ms, "filter created_before_ms")?));
    }
    if let Some(cursor) = after {
        conditions.push("(created_at_ms, run_id) < (?, ?)");
        values.push(Sql::Integer(int(
            cursor.created_at_ms,
            "cursor created_at_ms",
        )?));
        values.push(Sql::Text(cursor.run_id.as_str().to_owned()));
    }
    let filter_sql = if conditions.is_empty() {
        String::new()
    } else {
        format!("WHERE {}", conditions.join(" AND "))
    };
    // One row beyond the page says whether another follows.
    values.push(Sql::Integer(limit(max.saturating_add(1))));
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs {filter_sql} \
         ORDER BY created_at_ms DESC, run_id DESC LIMIT ?"
    );
    Ok((sql, values))
}

/// The runs whose parent is `parent`, oldest first.
pub fn children_of(conn: &Connection, parent: &RunId) -> Result<Vec<RunRecord>, StoreError> {
    // Served by the `runs_by_parent_created` index (schema v5).
    query_all(
        conn,
        &format!(
            "SELECT {RUN_COLUMNS} FROM runs WHERE parent_run_id = ?1 \
             ORDER BY created_at_ms, run_id"
        ),
        [parent.as_str()],
        decode_run,
    )
}

pub fn events(conn: &Connection, run_id: &RunId, after_seq: u64) -> Result<Vec<Event>, StoreError> {
    require_run(conn, run_id)?;
    // A cursor beyond i64::MAX cannot have anything after it.
    let Ok(after) = i64::try_from(after_seq) else {
        return Ok(Vec::new());
    };
    query_all(
        conn,
        &format!("SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ?1 AND seq > ?2 ORDER BY seq"),
        params![run_id.as_str(), after],
        decode_event,
    )
}

pub fn intents(conn: &Connection, run_id: &RunId) -> Result<Vec<(u32, PlannedIntent)>, StoreError> {
    require_run(conn, run_id)?;
    query_all(
        conn,
        &format!(
            "SELECT {INTENT_COLUMNS} FROM intents WHERE run_id = ?1 \
             ORDER BY step, ordinal, intent_id"
        ),
        [run_id.as_str()],
        decode_intent,
    )
}

pub fn ledger(conn: &Connection, run_id: &RunId) -> Result<Vec<LedgerRecord>, StoreError> {
    require_run(conn, run_id)?;
    query_all(
        conn,
        &format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE run_id = ?1 ORDER BY seq"),
        [run_id.as_str()],
        decode_ledger,
    )
}

pub fn pending_ledger(conn: &Connection, max: usize) -> Result<Vec<LedgerRecord>, StoreError> {
    query_all(
        conn,
        &format!(
            "SELECT {LEDGER_COLUMNS} FROM ledger WHERE status = 'pending' \
             ORDER BY created_at_ms, run_id, seq LIMIT ?1"
        ),
        [limit(max)],
        decode_ledger,
    )
}

/// The run's latest whole checkpoint with the deltas after it applied
/// (see [`CheckpointDelta`]).
pub fn latest_checkpoint(
    conn: &Connection,
    run_id: &RunId,
) -> Result<Option<Checkpoint>, StoreError> {
    require_run(conn, run_id)?;
    let base = query_one(
        conn,
        &format!(
            "SELECT {CHECKPOINT_COLUMNS} FROM checkpoints WHERE run_id = ?1 \
             ORDER BY step DESC LIMIT 1"
        ),
        [run_id.as_str()],
        decode_checkpoint,
    )?;
    let after = base.as_ref().map_or(0, |c| c.step);
    let deltas = query_all(
        conn,
        &format!(
            "SELECT {CHECKPOINT_DELTA_COLUMNS} FROM checkpoint_deltas \
             WHERE run_id = ?1 AND step > ?2 ORDER BY step"
        ),
        params![run_id.as_str(), after],
        decode_checkpoint_delta,
    )?;
    Checkpoint::rebuild(run_id, base, deltas)
}

/// The step of the run's latest checkpoint (`0`: none), and whether it is
/// a delta (rather than a whole checkpoint).
fn latest_checkpoint_step(conn: &Connection, run_id: &RunId) -> Result<(u32, bool), StoreError> {
    let whole: Option<u32> = conn
        .prepare_cached("SELECT MAX(step) FROM checkpoints WHERE run_id = ?1")
        .sql()?
        .query_row([run_id.as_str()], |row| row.get(0))
        .sql()?;
    let whole = whole.unwrap_or(0);
    let delta: Option<u32> = conn
        .prepare_cached("SELECT MAX(step) FROM checkpoint_deltas WHERE run_id = ?1 AND step > ?2")
        .sql()?
        .query_row(params![run_id.as_str(), whole], |row| row.get(0))
        .sql()?;
    Ok(delta.map_or((whole, false), |step| (step, true)))
}

fn ledger_record(
    conn: &Connection,
    run_id: &RunId,
    intent_id: &IntentId,
) -> Result<Option<LedgerRecord>, StoreError> {
    query_one(
        conn,
        &format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE run_id = ?1 AND intent_id = ?2"),
        [run_id.as_str(), intent_id.as_str()],
        decode_ledger,
    )
}

/// The next `seq` of `table` (`events` or `ledger`) in the run.
fn next_seq(conn: &Connection, table: &'static str, run_id: &RunId) -> Result<u64, StoreError> {
    let sql = match table {
        "events" => "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = ?1",
        _ => "SELECT COALESCE(MAX(seq), 0) FROM ledger WHERE run_id = ?1",
    };
    let max: i64 = conn
        .prepare_cached(sql)
        .sql()?
        .query_row([run_id.as_str()], |row| row.get(0))
        .sql()?;
    seq_after(table, run_id, max)
}

/// Applies a [`StepCommit`] in the order it documents. The caller provides
/// the transaction.
pub fn commit_step(
    conn: &Connection,
    run_id: &RunId,
    commit: StepCommit,
) -> Result<Committed, StoreError> {
    let mut status = run_status(conn, run_id)?;
    // First, before any part is applied: the worker's `IMMEDIATE`
    // transaction holds the write lock from this read to the commit, so no
    // other writer (of any process) changes the status in between.
    if let Some(expected) = commit.expect_status
        && expected != status
    {
        return Err(StoreError::StatusChanged {
            run_id: run_id.to_string(),
        });
    }
    if let Some(fence) = &commit.expect_claim
        && !holds_claim(conn, fence)?
    {
        return Err(StoreError::ClaimLost {
            run_id: run_id.to_string(),
        });
    }
    if let Some(expected) = commit.expect_ledger_revision
        && expected != ledger_revision(conn, run_id)?
    {
        return Err(StoreError::LedgerChanged {
            run_id: run_id.to_string(),
        });
    }
    if commit.reopen {
        reopen(conn, run_id, status)?;
        status = RunStatus::Running;
    }
    if let Some(span) = &commit.first_span {
        // Set once: the first drive's span stays what later drives link to.
        conn.prepare_cached(
            "UPDATE runs SET first_span = COALESCE(first_span, ?2) WHERE run_id = ?1",
        )
        .sql()?
        .execute(params![run_id.as_str(), span.to_traceparent()])
        .sql()?;
    }
    let ledger_written = !commit.declares.is_empty() || !commit.marks.is_empty();
    let mut committed = Committed::default();
    for (step, intent) in &commit.intents {
        save_intent(conn, run_id, *step, intent)?;
    }
    super::approval_ops::request(conn, run_id, &commit.approvals)?;
    for record in commit.declares {
        same_run("ledger record run id", run_id, &record.run_id)?;
        committed.declared.push(declare(conn, record)?);
    }
    for (intent_id, mark) in commit.marks {
        committed
            .marked
            .push(apply_mark(conn, run_id, &intent_id, mark)?);
    }
    if let Some(checkpoint) = &commit.checkpoint {
        same_run("checkpoint run id", run_id, &checkpoint.run_id)?;
        write_checkpoint(conn, checkpoint)?;
    }
    if let Some(delta) = &commit.checkpoint_delta {
        same_run("checkpoint delta run id", run_id, &delta.run_id)?;
        write_checkpoint_delta(conn, delta)?;
    }
    if !commit.events.is_empty() {
        committed.events = append_events(conn, run_id, commit.events)?;
    }
    if ledger_written {
        bump_ledger_revision(conn, run_id)?;
    }
    if let Some(mut change) = commit.status {
        if let Some(report) = change.report.as_mut() {
            stamp_revision(conn, run_id, report)?;
        }
        let run = set_status(conn, run_id, status, change)?;
        status = run.status;
        committed.run = Some(run);
    }
    if let Some(mut report) = commit.revised_report {
        stamp_revision(conn, run_id, &mut report)?;
        committed.run = Some(revise_report(conn, run_id, status, &report)?);
    }
    Ok(committed)
}

/// The run's ledger revision (see [`RunRecord::ledger_revision`]).
fn ledger_revision(conn: &Connection, run_id: &RunId) -> Result<u64, StoreError> {
    let revision: Option<i64> = conn
        .prepare_cached("SELECT ledger_revision FROM runs WHERE run_id = ?1")
        .sql()?
        .query_row([run_id.as_str()], |row| row.get(0))
        .optional()
        .sql()?;
    let revision = revision.ok_or_else(|| StoreError::run_not_found(run_id))?;
    u64::try_from(revision).map_err(|_| StoreError::Corrupt {
        table: "runs",
        column: "ledger_revision",
        reason: format!("expected a non-negative integer, found {revision}"),
    })
}

/// How many runs above a run its ledger revision reaches: the depth bound
/// of agent trees many times over, so that a damaged store (a parent
/// cycle) cannot loop.
const MAX_TREE_DEPTH: i64 = 64;

/// Bumps the ledger revision of `run_id` and of every run above it: their
/// reports list (or package) this run's records too.
fn bump_ledger_revision(conn: &Connection, run_id: &RunId) -> Result<(), StoreError> {
    conn.prepare_cached(
        "WITH RECURSIVE up (id, depth) AS ( \
             SELECT ?1, 0 \
             UNION SELECT runs.parent_run_id, up.depth + 1 FROM runs JOIN up ON runs.run_id = up.id \
             WHERE runs.parent_run_id IS NOT NULL AND up.depth < ?2) \
         UPDATE runs SET ledger_revision = ledger_revision + 1 \
         WHERE run_id IN (SELECT id FROM up)",
    )
    .sql()?
    .execute(params![run_id.as_str(), MAX_TREE_DEPTH])
    .sql()?;
    Ok(())
}

/// Records in `report`'s basis (when it has one) the ledger revision it
/// reflects: the run's, as this commit leaves it.
fn stamp_revision(
    conn: &Connection,
    run_id: &RunId,
    report: &mut RunReport,
) -> Result<(), StoreError> {
    if report.basis.is_some() {
        stamp(Some(report), ledger_revision(conn, run_id)?);
    }
    Ok(())
}

/// Replaces a finished run's report with `report`, of the same outcome
/// (see [`StepCommit::revised_report`]).
fn revise_report(
    conn: &Connection,
    run_id: &RunId,
    current: RunStatus,
    report: &RunReport,
) -> Result<RunRecord, StoreError> {
    validate_revised_report(current, report)?;
    // The status follows the report: the same outcome, or the one a
    // handed-off run is closed with once nothing awaits a human.
    conn.prepare_cached("UPDATE runs SET report = ?2, status = ?3 WHERE run_id = ?1")
        .sql()?
        .execute(params![
            run_id.as_str(),
            json_text(report, "run report")?,
            RunStatus::Finished(report.outcome).as_str(),
        ])
        .sql()?;
    get_run(conn, run_id)?.ok_or_else(|| StoreError::run_not_found(run_id))
}

/// Whether the lease of `fence` exists and is owned by its owner (expiry
/// is not checked).
fn holds_claim(conn: &Connection, fence: &ClaimFence) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM leases WHERE lease_id = ?1 AND owner = ?2)")
        .sql()?
        .query_row([fence.lease_id.as_str(), fence.owner.as_str()], |row| {
            row.get(0)
        })
        .sql()
}

fn save_intent(
    conn: &Connection,
    run_id: &RunId,
    step: u32,
    intent: &PlannedIntent,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO intents (run_id, intent_id, step, ordinal, call_id, tool, args) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (run_id, intent_id) DO NOTHING",
    )
    .sql()?
    .execute(params![
        run_id.as_str(),
        intent.intent_id.as_str(),
        step,
        intent.ordinal,
        intent.call_id,
        intent.tool,
        json_text(&intent.args, "intent args")?,
    ])
    .sql()?;
    Ok(())
}

fn declare(conn: &Connection, mut record: LedgerRecord) -> Result<LedgerRecord, StoreError> {
    if let Some(existing) = ledger_record(conn, &record.run_id, &record.intent_id)? {
        return Ok(existing);
    }
    record.seq = next_seq(conn, "ledger", &record.run_id)?;
    record.status = LedgerStatus::Pending;
    conn.prepare_cached(
        "INSERT INTO ledger (run_id, intent_id, seq, step, tool, class, idempotency_key, args, \
         status, result, failure, attempts, created_at_ms, updated_at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
    )
    .sql()?
    .execute(params![
        record.run_id.as_str(),
        record.intent_id.as_str(),
        int(record.seq, "ledger seq")?,
        record.step,
        record.tool,
        serde_name(&record.class, "ledger class")?,
        record.idempotency_key.as_ref().map(|key| key.as_str()),
        json_text(&record.args, "ledger args")?,
        record.status.as_str(),
        record
            .result
            .as_ref()
            .map(|result| json_text(result, "ledger result"))
            .transpose()?,
        record
            .failure
            .as_ref()
            .map(|failure| json_text(failure, "ledger failure"))
            .transpose()?,
        record.attempts,
        int(record.created_at_ms, "ledger created_at_ms")?,
        int(record.updated_at_ms, "ledger updated_at_ms")?,
    ])
    .sql()?;
    Ok(record)
}

fn apply_mark(
    conn: &Connection,
    run_id: &RunId,
    intent_id: &IntentId,
    mark: LedgerMark,
) -> Result<LedgerRecord, StoreError> {
    let record = ledger_record(conn, run_id, intent_id)?.ok_or_else(|| StoreError::NotFound {
        what: "ledger record",
        id: format!("{run_id}/{intent_id}"),
    })?;
    let record = marked(record, mark)?;
    conn.prepare_cached(
        "UPDATE ledger SET status = ?3, result = ?4, failure = ?5, attempts = ?6, \
         updated_at_ms = ?7 WHERE run_id = ?1 AND intent_id = ?2",
    )
    .sql()?
    .execute(params![
        run_id.as_str(),
        intent_id.as_str(),
        record.status.as_str(),
        record
            .result
            .as_ref()
            .map(|result| json_text(result, "ledger result"))
            .transpose()?,
        record
            .failure
            .as_ref()
            .map(|failure| json_text(failure, "ledger failure"))
            .transpose()?,
        record.attempts,
        int(record.updated_at_ms, "ledger mark at_ms")?,
    ])
    .sql()?;
    Ok(record)
}

fn write_checkpoint(conn: &Connection, checkpoint: &Checkpoint) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO checkpoints (run_id, step, messages, completed_intents, consumed_steps, \
         consumed_tokens, consumed_cost_micros, elapsed_ms, state, at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
         ON CONFLICT (run_id, step) DO UPDATE SET messages = excluded.messages, \
         completed_intents = excluded.completed_intents, \
         consumed_steps = excluded.consumed_steps, consumed_tokens = excluded.consumed_tokens, \
         consumed_cost_micros = excluded.consumed_cost_micros, \
         elapsed_ms = excluded.elapsed_ms, state = excluded.state, at_ms = excluded.at_ms",
    )
    .sql()?
    .execute(params![
        checkpoint.run_id.as_str(),
        checkpoint.step,
        json_text(&checkpoint.messages, "checkpoint messages")?,
        json_text(
            &checkpoint.completed_intents,
            "checkpoint completed_intents"
        )?,
        checkpoint.consumed.steps,
        int(checkpoint.consumed.tokens, "checkpoint consumed tokens")?,
        int(
            checkpoint.consumed.cost.micros(),
            "checkpoint consumed cost"
        )?,
        int(checkpoint.elapsed_ms, "checkpoint elapsed_ms")?,
        json_text(&checkpoint.state, "checkpoint state")?,
        int(checkpoint.at_ms, "checkpoint at_ms")?,
    ])
    .sql()?;
    // A whole checkpoint holds what the deltas up to its step added: they
    // are never read again (a compaction point).
    conn.prepare_cached("DELETE FROM checkpoint_deltas WHERE run_id = ?1 AND step <= ?2")
        .sql()?
        .execute(params![checkpoint.run_id.as_str(), checkpoint.step])
        .sql()?;
    Ok(())
}

/// Appends `delta` after the run's latest checkpoint, or replaces the
/// delta of that step; refuses any other step (see [`CheckpointDelta`]).
fn write_checkpoint_delta(conn: &Connection, delta: &CheckpointDelta) -> Result<(), StoreError> {
    let (latest, is_delta) = latest_checkpoint_step(conn, &delta.run_id)?;
    validate_delta_step(latest, is_delta, delta.step)?;
    conn.prepare_cached(
        "INSERT INTO checkpoint_deltas (run_id, step, messages, completed_intents, appended, \
         state, consumed_steps, consumed_tokens, consumed_cost_micros, elapsed_ms, at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
         ON CONFLICT (run_id, step) DO UPDATE SET messages = excluded.messages, \
         completed_intents = excluded.completed_intents, appended = excluded.appended, \
         state = excluded.state, consumed_steps = excluded.consumed_steps, \
         consumed_tokens = excluded.consumed_tokens, \
         consumed_cost_micros = excluded.consumed_cost_micros, \
         elapsed_ms = excluded.elapsed_ms, at_ms = excluded.at_ms",
    )
    .sql()?
    .execute(params![
        delta.run_id.as_str(),
        delta.step,
        json_text(&delta.messages, "checkpoint delta messages")?,
        json_text(
            &delta.completed_intents,
            "checkpoint delta completed_intents"
        )?,
        json_text(&delta.appended, "checkpoint delta appended")?,
        json_text(&delta.state, "checkpoint delta state")?,
        delta.consumed.steps,
        int(delta.consumed.tokens, "checkpoint delta consumed tokens")?,
        int(
            delta.consumed.cost.micros(),
            "checkpoint delta consumed cost"
        )?,
        int(delta.elapsed_ms, "checkpoint delta elapsed_ms")?,
        int(delta.at_ms, "checkpoint delta at_ms")?,
    ])
    .sql()?;
    Ok(())
}

fn append_events(
    conn: &Connection,
    run_id: &RunId,
    mut events: Vec<Event>,
) -> Result<Vec<Event>, StoreError> {
    let first = next_seq(conn, "events", run_id)?;
    let mut statement = conn
        .prepare_cached(
            "INSERT INTO events (run_id, seq, step, intent_id, attempt_id, idempotency_key, \
             at_ms, kind, data, guardrail) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        )
        .sql()?;
    for (seq, event) in (first..).zip(events.iter_mut()) {
        same_run("event run id", run_id, &event.run_id)?;
        event.seq = seq;
        statement
            .execute(params![
                run_id.as_str(),
                int(seq, "event seq")?,
                event.step,
                event.intent_id.as_ref().map(IntentId::as_str),
                event.attempt_id.as_ref().map(|id| id.as_str()),
                event.idempotency_key.as_ref().map(|key| key.as_str()),
                int(event.at_ms, "event at_ms")?,
                event.kind().as_str(),
                event_data_text(event)?,
                event.data.guardrail().map(Guardrail::as_str),
            ])
            .sql()?;
        // The outbox row goes with its event, in this transaction: see
        // `rein_store::webhook`.
        super::webhook_ops::record(conn, event)?;
    }
    Ok(events)
}

/// Reopens a finished, recoverable run (see [`StepCommit::reopen`]).
fn reopen(conn: &Connection, run_id: &RunId, current: RunStatus) -> Result<(), StoreError> {
    let outcome = reopened_outcome(current)?;
    let report: Option<String> = conn
        .prepare_cached("SELECT report FROM runs WHERE run_id = ?1")
        .sql()?
        .query_row(params![run_id.as_str()], |row| row.get(0))
        .sql()?;
    validate_reopen(run_id, outcome, report.as_deref())?;
    conn.prepare_cached("UPDATE runs SET status = 'running', report = NULL WHERE run_id = ?1")
        .sql()?
        .execute(params![run_id.as_str()])
        .sql()?;
    Ok(())
}

fn set_status(
    conn: &Connection,
    run_id: &RunId,
    current: RunStatus,
    change: StatusChange,
) -> Result<RunRecord, StoreError> {
    validate_status_change(run_id, current, &change)?;
    conn.prepare_cached(
        "UPDATE runs SET status = ?2, report = ?3, updated_at_ms = ?4 WHERE run_id = ?1",
    )
    .sql()?
    .execute(params![
        run_id.as_str(),
        change.status.as_str(),
        change
            .report
            .as_ref()
            .map(|report| json_text(report, "run report"))
            .transpose()?,
        int(change.at_ms, "run status at_ms")?,
    ])
    .sql()?;
    get_run(conn, run_id)?.ok_or_else(|| StoreError::run_not_found(run_id))
}

fn lease(conn: &Connection, lease_id: &str) -> Result<Option<Lease>, StoreError> {
    query_one(
        conn,
        &format!("SELECT {LEASE_COLUMNS} FROM leases WHERE lease_id = ?1"),
        [lease_id],
        decode_lease,
    )
}

fn lease_not_found(lease_id: &str) -> StoreError {
    StoreError::NotFound {
        what: "lease",
        id: lease_id.to_owned(),
    }
}

/// Inserts a validated lease whose id is free.
fn insert_lease(conn: &Connection, new: &Lease) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO leases (lease_id, run_id, intent_id, kind, pgid, path, owner, \
         acquired_at_ms, expires_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )
    .sql()?
    .execute(params![
        new.lease_id,
        new.run_id.as_str(),
        new.intent_id.as_ref().map(IntentId::as_str),
        new.kind.as_str(),
        new.pgid,
        new.path.as_deref().and_then(std::path::Path::to_str),
        new.owner,
        int(new.acquired_at_ms, "lease acquired_at_ms")?,
        int(new.expires_at_ms, "lease expires_at_ms")?,
    ])
    .sql()?;
    Ok(())
}

fn delete_lease(conn: &Connection, lease_id: &str) -> Result<(), StoreError> {
    conn.prepare_cached("DELETE FROM leases WHERE lease_id = ?1")
        .sql()?
        .execute([lease_id])
        .sql()?;
    Ok(())
}

/// The lease `lease_id` if `owner` holds it.
fn lease_of(conn: &Connection, lease_id: &str, owner: &str) -> Result<Option<Lease>, StoreError> {
    validate_owner(owner)?;
    Ok(lease(conn, lease_id)?.filter(|held| held.owner == owner))
}

/// Renews `lease_id` if `owner` holds it (see [`Store::renew_lease_of`]).
/// The caller provides the transaction, so the check and the renewal are
/// one atomic step.
///
/// [`Store::renew_lease_of`]: crate::Store::renew_lease_of
pub fn renew_lease_of(
    conn: &Connection,
    lease_id: &str,
    owner: &str,
    expires_at_ms: Timestamp,
) -> Result<bool, StoreError> {
    if lease_of(conn, lease_id, owner)?.is_none() {
        return Ok(false);
    }
    let change = LeaseChange::Renew {
        lease_id: lease_id.to_owned(),
        expires_at_ms,
    };
    Ok(change_lease(conn, change)?.is_some())
}

/// Releases `lease_id` if `owner` holds it (see
/// [`Store::release_lease_of`]). The caller provides the transaction.
///
/// [`Store::release_lease_of`]: crate::Store::release_lease_of
pub fn release_lease_of(
    conn: &Connection,
    lease_id: &str,
    owner: &str,
) -> Result<bool, StoreError> {
    if lease_of(conn, lease_id, owner)?.is_none() {
        return Ok(false);
    }
    delete_lease(conn, lease_id)?;
    Ok(true)
}

/// Replaces an absent or expired lease with `new` (see
/// [`Store::take_over_lease`]). The caller provides the transaction: its
/// write lock makes the check and the replacement one atomic step, so of
/// concurrent take-overs at most one finds the lease expired.
///
/// [`Store::take_over_lease`]: crate::Store::take_over_lease
pub fn take_over_lease(
    conn: &Connection,
    new: &Lease,
    now_ms: Timestamp,
) -> Result<bool, StoreError> {
    new.validate()?;
    require_run(conn, &new.run_id)?;
    if let Some(held) = lease(conn, &new.lease_id)? {
        if !held.is_expired(now_ms) {
            return Ok(false);
        }
        delete_lease(conn, &held.lease_id)?;
    }
    insert_lease(conn, new)?;
    Ok(true)
}

/// Applies one [`LeaseChange`]. The caller provides the transaction.
pub fn change_lease(conn: &Connection, change: LeaseChange) -> Result<Option<Lease>, StoreError> {
    match change {
        LeaseChange::Acquire(new) => {
            new.validate()?;
            require_run(conn, &new.run_id)?;
            if lease(conn, &new.lease_id)?.is_some() {
                return Err(StoreError::Conflict {
                    what: "lease",
                    id: new.lease_id,
                });
            }
            insert_lease(conn, &new)?;
            Ok(Some(new))
        }
        LeaseChange::Renew {
            lease_id,
            expires_at_ms,
        } => {
            let mut held = lease(conn, &lease_id)?.ok_or_else(|| lease_not_found(&lease_id))?;
            if expires_at_ms < held.acquired_at_ms {
                return Err(StoreError::Invalid {
                    what: "lease expires_at_ms",
                    expected: format!("at least acquired_at_ms ({})", held.acquired_at_ms),
                    found: expires_at_ms.to_string(),
                });
            }
            conn.prepare_cached("UPDATE leases SET expires_at_ms = ?2 WHERE lease_id = ?1")
                .sql()?
                .execute(params![
                    lease_id,
                    int(expires_at_ms, "lease expires_at_ms")?
                ])
                .sql()?;
            held.expires_at_ms = expires_at_ms;
            Ok(Some(held))
        }
        LeaseChange::Release { lease_id } => {
            let Some(held) = lease(conn, &lease_id)? else {
                return Ok(None);
            };
            delete_lease(conn, &lease_id)?;
            Ok(Some(held))
        }
        // `LeaseChange` is `#[non_exhaustive]` outside rein-store.
        other => Err(StoreError::Invalid {
            what: "lease change",
            expected: "an acquire, a renewal or a release".to_owned(),
            found: format!("{other:?}"),
        }),
    }
}

/// The held leases `filter` selects.
pub fn leases(conn: &Connection, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
    if let Some(run_id) = &filter.run_id {
        require_run(conn, run_id)?;
    }
    // An expiry cursor beyond i64::MAX selects every lease.
    let expired_at = filter.expired_at_ms.map(at_most_max);
    query_all(
        conn,
        &format!(
            "SELECT {LEASE_COLUMNS} FROM leases \
             WHERE (?1 IS NULL OR run_id = ?1) AND (?2 IS NULL OR expires_at_ms <= ?2) \
             ORDER BY expires_at_ms, lease_id LIMIT ?3"
        ),
        params![
            filter.run_id.as_ref().map(RunId::as_str),
            expired_at,
            filter.limit.map_or(i64::MAX, limit),
        ],
        decode_lease,
    )
}

/// A time as SQLite's integer for comparisons: beyond `i64::MAX` compares
/// as `i64::MAX`, after every storable time.
fn at_most_max(at: Timestamp) -> i64 {
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

fn idempotency_record(
    conn: &Connection,
    tenant: &TenantId,
    key: &str,
) -> Result<Option<IdempotencyRecord>, StoreError> {
    query_one(
        conn,
        &format!(
            "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency \
             WHERE tenant = ?1 AND idempotency_key = ?2"
        ),
        [tenant.as_str(), key],
        decode_idempotency,
    )
}

/// Reserves an idempotency key for `holder`, if any (see
/// [`Store::reserve_idempotency_as`]). The caller provides the transaction:
/// its `IMMEDIATE` write lock is what keeps the read and the insert atomic
/// across processes.
///
/// [`Store::reserve_idempotency_as`]: crate::Store::reserve_idempotency_as
pub fn reserve_idempotency(
    conn: &Connection,
    reservation: &NewReservation,
) -> Result<Reservation, StoreError> {
    let NewReservation {
        tenant,
        key,
        fingerprint,
        holder,
        now_ms,
        expires_at_ms,
    } = reservation;
    validate_reservation(key, fingerprint, *now_ms, *expires_at_ms)?;
    if let Some(holder) = holder {
        validate_owner(&holder.owner)?;
    }
    if let Some(record) = idempotency_record(conn, tenant, key)?
        && !record.is_expired(*now_ms)
    {
        return Ok(if &record.fingerprint != fingerprint {
            Reservation::Mismatch(record)
        } else {
            match record.state {
                IdempotencyState::Completed => Reservation::Replay(record),
                IdempotencyState::InProgress => Reservation::InProgress(record),
            }
        });
    }
    // Absent or expired: an expired record is replaced whole.
    // NOTE: every column of the record is set here; a column added later
    // must be too (see `IdempotencyRecord::holder_is_trusted` for what an
    // older rein that does not know it leaves behind).
    conn.prepare_cached(
        "INSERT INTO idempotency (tenant, idempotency_key, fingerprint, state, status, \
         content_type, location, body, created_at_ms, updated_at_ms, expires_at_ms, owner, \
         run_id, holder_since_ms, holder_until_ms, headers) \
         VALUES (?1, ?2, ?3, ?4, NULL, NULL, NULL, NULL, ?5, ?5, ?6, ?7, ?8, ?9, ?10, NULL) \
         ON CONFLICT (tenant, idempotency_key) DO UPDATE SET \
         fingerprint = excluded.fingerprint, state = excluded.state, status = NULL, \
         content_type = NULL, location = NULL, body = NULL, headers = NULL, \
         created_at_ms = excluded.created_at_ms, updated_at_ms = excluded.updated_at_ms, \
         expires_at_ms = excluded.expires_at_ms, owner = excluded.owner, \
         run_id = excluded.run_id, holder_since_ms = excluded.holder_since_ms, \
         holder_until_ms = excluded.holder_until_ms",
    )
    .sql()?
    .execute(params![
        tenant.as_str(),
        key,
        fingerprint,
        IdempotencyState::InProgress.as_str(),
        int(*now_ms, "idempotency now_ms")?,
        int(*expires_at_ms, "idempotency expires_at_ms")?,
        holder.as_ref().map(|h| h.owner.as_str()),
        holder
            .as_ref()
            .and_then(|h| h.run_id.as_ref())
            .map(RunId::as_str),
        holder
            .as_ref()
            .map(|_| int(*now_ms, "idempotency now_ms"))
            .transpose()?,
        holder
            .as_ref()
            .map(|h| int(h.until_ms, "idempotency holder until_ms"))
            .transpose()?,
    ])
    .sql()?;
    Ok(Reservation::Reserved)
}

/// Reserves a key, creates the queued run and completes the record with
/// `response`, in the caller's transaction (see [`Store::submit_queued`]).
///
/// [`Store::submit_queued`]: crate::Store::submit_queued
pub fn submit_queued(
    conn: &Connection,
    mut reservation: NewReservation,
    run: NewRun,
    response: StoredResponse,
) -> Result<Reservation, StoreError> {
    response.validate()?;
    if let Some(holder) = reservation.holder.as_mut() {
        holder.run_id = Some(run.run_id.clone());
    }
    let now_ms = reservation.now_ms;
    let (tenant, key) = (reservation.tenant.clone(), reservation.key.clone());
    // Checked before the reservation writes anything: a run id that is
    // taken is refused whole.
    if get_run(conn, &run.run_id)?.is_some() {
        return Err(StoreError::Conflict {
            what: "run",
            id: run.run_id.to_string(),
        });
    }
    // The reservation records the run's id (set in its holder above).
    match reserve_idempotency(conn, &reservation)? {
        Reservation::Reserved => {}
        other => return Ok(other),
    }
    create_run(conn, run)?;
    complete_idempotency(conn, &tenant, &key, response, now_ms)?;
    Ok(Reservation::Reserved)
}

/// Creates `run` while the record of `key` is `owner`'s reservation in
/// progress (see [`Store::create_run_held`]).
///
/// [`Store::create_run_held`]: crate::Store::create_run_held
pub fn create_run_held(
    conn: &Connection,
    run: NewRun,
    fence: &ReservationFence,
) -> Result<RunRecord, StoreError> {
    let ReservationFence { tenant, key, owner } = fence;
    let held = idempotency_record(conn, tenant, key)?.is_some_and(|record| {
        record.state == IdempotencyState::InProgress
            && record.owner.as_deref() == Some(owner.as_str())
    });
    if !held {
        return Err(StoreError::ReservationLost {
            key: format!("{tenant}/{key}"),
        });
    }
    create_run(conn, run)
}

/// The heartbeat of `owner`'s reservation of `key` (see
/// [`Store::renew_idempotency`]); whether it applied.
///
/// [`Store::renew_idempotency`]: crate::Store::renew_idempotency
pub fn renew_idempotency(
    conn: &Connection,
    tenant: &TenantId,
    key: &str,
    owner: &str,
    until_ms: Timestamp,
) -> Result<bool, StoreError> {
    let renewed = conn
        .prepare_cached(
            "UPDATE idempotency SET holder_until_ms = ?4 \
             WHERE tenant = ?1 AND idempotency_key = ?2 AND state = ?3 AND owner = ?5",
        )
        .sql()?
        .execute(params![
            tenant.as_str(),
            key,
            IdempotencyState::InProgress.as_str(),
            int(until_ms, "idempotency holder until_ms")?,
            owner,
        ])
        .sql()?;
    Ok(renewed > 0)
}

/// Resolves an in-progress record held by `owner` (see
/// [`Store::settle_idempotency`]); whether it did.
///
/// [`Store::settle_idempotency`]: crate::Store::settle_idempotency
pub fn settle_idempotency(
    conn: &Connection,
    tenant: &TenantId,
    key: &str,
    owner: &str,
    settlement: IdempotencySettlement,
    now_ms: Timestamp,
) -> Result<IdempotencySettled, StoreError> {
    let Some(record) = idempotency_record(conn, tenant, key)? else {
        return Ok(IdempotencySettled::Superseded);
    };
    if record.state != IdempotencyState::InProgress || record.owner.as_deref() != Some(owner) {
        return Ok(IdempotencySettled::Superseded);
    }
    match settlement {
        IdempotencySettlement::Complete(response) => {
            complete_idempotency(conn, tenant, key, response, now_ms)?;
        }
        IdempotencySettlement::Release => {
            // In this write: a holder judged dead may have created its run
            // a moment ago.
            if let Some(run_id) = &record.run_id
                && get_run(conn, run_id)?.is_some()
            {
                return Ok(IdempotencySettled::RunExists);
            }
            release_idempotency(conn, tenant, key)?;
        }
    }
    Ok(IdempotencySettled::Applied)
}

/// Completes an in-progress idempotency record. The caller provides the
/// transaction.
pub fn complete_idempotency(
    conn: &Connection,
    tenant: &TenantId,
    key: &str,
    response: StoredResponse,
    now_ms: Timestamp,
) -> Result<(), StoreError> {
    response.validate()?;
    let record =
        idempotency_record(conn, tenant, key)?.ok_or_else(|| record_not_found(tenant, key))?;
    if record.state != IdempotencyState::InProgress {
        return Err(StoreError::Invalid {
            what: "idempotency record state",
            expected: format!("{} to complete it", IdempotencyState::InProgress),
            found: format!("{} (record {tenant}/{key})", record.state),
        });
    }
    conn.prepare_cached(
        "UPDATE idempotency SET state = ?3, status = ?4, content_type = ?5, location = ?6, \
         body = ?7, updated_at_ms = ?8, headers = ?9 WHERE tenant = ?1 AND idempotency_key = ?2",
    )
    .sql()?
    .execute(params![
        tenant.as_str(),
        key,
        IdempotencyState::Completed.as_str(),
        response.status,
        response.content_type,
        response.location,
        response.body,
        int(now_ms, "idempotency now_ms")?,
        headers_text(&response.headers),
    ])
    .sql()?;
    Ok(())
}

/// Deletes an in-progress idempotency record; whether one was deleted.
pub fn release_idempotency(
    conn: &Connection,
    tenant: &TenantId,
    key: &str,
) -> Result<bool, StoreError> {
    let deleted = conn
        .prepare_cached(
            "DELETE FROM idempotency WHERE tenant = ?1 AND idempotency_key = ?2 AND state = ?3",
        )
        .sql()?
        .execute(params![
            tenant.as_str(),
            key,
            IdempotencyState::InProgress.as_str()
        ])
        .sql()?;
    Ok(deleted > 0)
}

/// Deletes an idempotency record in any state; whether there was one.
pub fn clear_idempotency(
    conn: &Connection,
    tenant: &TenantId,
    key: &str,
) -> Result<bool, StoreError> {
    let deleted = conn
        .prepare_cached("DELETE FROM idempotency WHERE tenant = ?1 AND idempotency_key = ?2")
        .sql()?
        .execute([tenant.as_str(), key])
        .sql()?;
    Ok(deleted > 0)
}

/// Deletes up to `max` idempotency records expired at `now_ms`, soonest
/// expiry first; how many.
pub fn sweep_idempotency(
    conn: &Connection,
    now_ms: Timestamp,
    max: usize,
) -> Result<usize, StoreError> {
    conn.prepare_cached(
        "DELETE FROM idempotency WHERE rowid IN (SELECT rowid FROM idempotency \
         WHERE expires_at_ms <= ?1 ORDER BY expires_at_ms LIMIT ?2)",
    )
    .sql()?
    .execute(params![at_most_max(now_ms), limit(max)])
    .sql()
}

/// Stored idempotency records, oldest first.
pub fn idempotency_records(
    conn: &Connection,
    tenant: Option<&TenantId>,
    state: Option<IdempotencyState>,
    max: usize,
) -> Result<Vec<IdempotencyRecord>, StoreError> {
    query_all(
        conn,
        &format!(
            "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency \
             WHERE (?1 IS NULL OR tenant = ?1) AND (?2 IS NULL OR state = ?2) \
             ORDER BY created_at_ms, tenant, idempotency_key LIMIT ?3"
        ),
        params![
            tenant.map(TenantId::as_str),
            state.map(IdempotencyState::as_str),
            limit(max),
        ],
        decode_idempotency,
    )
}

/// The singleton lease `name`, expired or not.
pub fn singleton(conn: &Connection, name: &str) -> Result<Option<SingletonLease>, StoreError> {
    validate_singleton_text("singleton name", name)?;
    query_one(
        conn,
        &format!("SELECT {SINGLETON_COLUMNS} FROM singletons WHERE name = ?1"),
        [name],
        decode_singleton,
    )
}

/// Takes or renews a singleton lease (see [`Store::claim_singleton`]). The
/// caller provides the transaction: its `IMMEDIATE` write lock is what
/// keeps the read and the write atomic across processes.
///
/// [`Store::claim_singleton`]: crate::Store::claim_singleton
pub fn claim_singleton(
    conn: &Connection,
    name: &str,
    owner: &str,
    now_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> Result<Option<SingletonLease>, StoreError> {
    validate_claim(name, owner, now_ms, expires_at_ms)?;
    let Some(lease) = claimed(singleton(conn, name)?, name, owner, now_ms, expires_at_ms) else {
        return Ok(None);
    };
    conn.prepare_cached(
        "INSERT INTO singletons (name, owner, acquired_at_ms, expires_at_ms) \
         VALUES (?1, ?2, ?3, ?4) \
         ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, \
         acquired_at_ms = excluded.acquired_at_ms, expires_at_ms = excluded.expires_at_ms",
    )
    .sql()?
    .execute(params![
        lease.name,
        lease.owner,
        int(lease.acquired_at_ms, "singleton acquired_at_ms")?,
        int(lease.expires_at_ms, "singleton expires_at_ms")?,
    ])
    .sql()?;
    Ok(Some(lease))
}

/// Deletes the singleton lease `name` if `owner` holds it; whether it did.
pub fn release_singleton(conn: &Connection, name: &str, owner: &str) -> Result<bool, StoreError> {
    validate_singleton_text("singleton name", name)?;
    validate_singleton_text("singleton owner", owner)?;
    let deleted = conn
        .prepare_cached("DELETE FROM singletons WHERE name = ?1 AND owner = ?2")
        .sql()?
        .execute([name, owner])
        .sql()?;
    Ok(deleted > 0)
}

/// Publishes a breaker opening (see [`Store::publish_breaker_open`]); the
/// later `open_until_ms` wins. The caller provides the transaction: its
/// `IMMEDIATE` write lock keeps the read and the write atomic across
/// processes.
///
/// [`Store::publish_breaker_open`]: crate::Store::publish_breaker_open
pub fn publish_breaker_open(
    conn: &Connection,
    opening: &BreakerOpening,
) -> Result<BreakerOpening, StoreError> {
    let opening = validate_opening(opening)?;
    let current = query_one(
        conn,
        &format!("SELECT {BREAKER_OPENING_COLUMNS} FROM breaker_openings WHERE arm = ?1"),
        [opening.arm.as_str()],
        decode_breaker_opening,
    )?;
    let (kept, write) = published(current, opening);
    if write {
        conn.prepare_cached(
            "INSERT INTO breaker_openings (arm, open_until_ms, opened_by, reason, updated_at_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (arm) DO UPDATE SET open_until_ms = excluded.open_until_ms, \
             opened_by = excluded.opened_by, reason = excluded.reason, \
             updated_at_ms = excluded.updated_at_ms",
        )
        .sql()?
        .execute(params![
            kept.arm,
            int(kept.open_until_ms, "breaker open_until_ms")?,
            kept.opened_by,
            kept.reason,
            int(kept.updated_at_ms, "breaker updated_at_ms")?,
        ])
        .sql()?;
    }
    Ok(kept)
}

/// The breaker openings in force at `now_ms`, by arm.
pub fn breaker_openings(
    conn: &Connection,
    now_ms: Timestamp,
) -> Result<Vec<BreakerOpening>, StoreError> {
    // An instant past i64::MAX ends every opening.
    let now = at_most_max(now_ms);
    query_all(
        conn,
        &format!(
            "SELECT {BREAKER_OPENING_COLUMNS} FROM breaker_openings \
             WHERE open_until_ms > ?1 ORDER BY arm"
        ),
        [now],
        decode_breaker_opening,
    )
}

/// Deletes `arm`'s breaker opening if `opened_by` published it; whether it
/// did.
pub fn clear_breaker_open(
    conn: &Connection,
    arm: &str,
    opened_by: &str,
) -> Result<bool, StoreError> {
    validate_breaker_text("breaker arm", arm)?;
    validate_breaker_text("breaker opened_by", opened_by)?;
    let deleted = conn
        .prepare_cached("DELETE FROM breaker_openings WHERE arm = ?1 AND opened_by = ?2")
        .sql()?
        .execute([arm, opened_by])
        .sql()?;
    Ok(deleted > 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// SQLite's plan of the listing for `filter` (with a cursor), one
    /// detail line per step.
    fn plan(filter: &RunFilter) -> String {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        let cursor = RunCursor {
            created_at_ms: Timestamp::from_millis(10),
            run_id: RunId::new("r").unwrap(),
        };
        let (sql, values) = list_runs_sql(filter, Some(&cursor), 50).unwrap();
        let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let details: Vec<String> = statement
            .query_map(rusqlite::params_from_iter(values), |row| row.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        details.join("\n")
    }

    #[test]
    fn every_listing_walks_an_index_in_order_without_sorting() {
        let tenant = || TenantId::new("acme").unwrap();
        for (filter, index) in [
            (
                RunFilter::all()
                    .of_tenant(tenant())
                    .with_status(RunStatus::Running),
                "runs_by_tenant_status",
            ),
            (
                RunFilter::all()
                    .of_tenant(tenant())
                    .of_agent("a")
                    .created_after(Timestamp::from_millis(1))
                    .created_before(Timestamp::from_millis(99)),
                "runs_by_tenant_created",
            ),
            (
                RunFilter::all().with_status(RunStatus::Queued),
                "runs_by_status",
            ),
            (RunFilter::all().of_agent("a"), "runs_by_created_id"),
            (RunFilter::all(), "runs_by_created_id"),
        ] {
            let plan = plan(&filter);
            assert!(
                plan.contains(index),
                "{filter:?} should use {index}:\n{plan}"
            );
            assert!(!plan.contains("TEMP B-TREE"), "{filter:?} sorts:\n{plan}");
        }
    }
}

//! The SQL of approvals (schema v18): the requests a pausing step writes,
//! the one decision, listings and expiry. See `rein_store::approval`.

use rein_core::approval::{Approval, ApprovalRequest, Decision};
use rein_core::{IntentId, RunId};
use rusqlite::{Connection, params};

use super::codec::{APPROVAL_COLUMNS, SqlResult, decode_approval, int, json_text};
use rein_store::approval::{
    ApprovalFilter, Decided, MAX_APPROVALS_PAGE, decidable, decision_to_record, lapsed,
    validate_request,
};
use rein_store::{RunStatus, StoreError, Timestamp};

/// Writes the requests of a pausing step; a request already stored is
/// kept as it is. Part of the step commit's transaction.
pub fn request(
    conn: &Connection,
    run_id: &RunId,
    requests: &[ApprovalRequest],
) -> Result<(), StoreError> {
    for r in requests {
        validate_request(run_id, r)?;
        conn.prepare_cached(
            "INSERT INTO approvals (run_id, intent_id, tenant, step, tool, args, args_digest, why, \
             requested_at_ms, expires_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
             ON CONFLICT (run_id, intent_id) DO NOTHING",
        )
        .sql()?
        .execute(params![
            r.run_id.as_str(),
            r.intent_id.as_str(),
            r.tenant.as_str(),
            r.step,
            r.tool,
            json_text(&r.args, "approval args")?,
            r.args_digest.as_str(),
            r.why,
            int(r.requested_at_ms, "approval requested_at_ms")?,
            int(r.expires_at_ms, "approval expires_at_ms")?,
        ])
        .sql()?;
    }
    Ok(())
}

fn approval(
    conn: &Connection,
    run_id: &RunId,
    intent_id: &IntentId,
) -> Result<Option<Approval>, StoreError> {
    let mut statement = conn
        .prepare_cached(&format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = ?1 AND intent_id = ?2"
        ))
        .sql()?;
    let mut rows = statement
        .query([run_id.as_str(), intent_id.as_str()])
        .sql()?;
    match rows.next().sql()? {
        Some(row) => decode_approval(row).map(Some),
        None => Ok(None),
    }
}

fn record(
    conn: &Connection,
    stored: &Approval,
    decision: &Decision,
) -> Result<Approval, StoreError> {
    let r = &stored.request;
    let changed = conn
        .prepare_cached(
            "UPDATE approvals SET verdict = ?3, decided_by = ?4, decided_at_ms = ?5, reason = ?6 \
             WHERE run_id = ?1 AND intent_id = ?2 AND verdict IS NULL",
        )
        .sql()?
        .execute(params![
            r.run_id.as_str(),
            r.intent_id.as_str(),
            decision.verdict.as_str(),
            decision.by,
            int(decision.at_ms, "approval decided_at_ms")?,
            decision.reason,
        ])
        .sql()?;
    // Read undecided in this transaction, so written here: anything else
    // is a store that does not hold what it said.
    if changed != 1 {
        return Err(StoreError::Backend(format!(
            "the approval {}/{} read undecided was not updated",
            r.run_id, r.intent_id
        )));
    }
    Ok(Approval {
        request: stored.request.clone(),
        decision: Some(decision.clone()),
    })
}

/// Moves `run_id` from `awaiting_approval` back to `running` when none of
/// its calls waits any more. Whether it did.
fn continue_run(conn: &Connection, run_id: &RunId, at: Timestamp) -> Result<bool, StoreError> {
    let waiting: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM approvals WHERE run_id = ?1 AND verdict IS NULL")
        .sql()?
        .query_row([run_id.as_str()], |row| row.get(0))
        .sql()?;
    if waiting > 0 {
        return Ok(false);
    }
    let moved = conn
        .prepare_cached(
            "UPDATE runs SET status = ?2, updated_at_ms = ?3 WHERE run_id = ?1 AND status = ?4",
        )
        .sql()?
        .execute(params![
            run_id.as_str(),
            RunStatus::Running.as_str(),
            int(at, "run status at_ms")?,
            RunStatus::AwaitingApproval.as_str(),
        ])
        .sql()?;
    Ok(moved == 1)
}

/// See [`RunStore::decide_approval`](rein_store::RunStore::decide_approval).
/// The caller provides the transaction, and commits what this returns:
/// a decision that came after the window closed records the expiry (and
/// the run continues with it), then the caller refuses the late decision
/// with it ([`Late`]).
pub fn decide(
    conn: &Connection,
    run_id: &RunId,
    intent_id: &IntentId,
    decision: Decision,
) -> Result<Late<Decided>, StoreError> {
    decidable(run_id, super::ops::run_status(conn, run_id)?)?;
    let stored = approval(conn, run_id, intent_id)?.ok_or_else(|| StoreError::NotFound {
        what: "approval",
        id: format!("{run_id}/{intent_id}"),
    })?;
    let at = decision.at_ms;
    let asked = decision.verdict;
    let recorded = decision_to_record(&stored, decision)?;
    let late = recorded.verdict != asked;
    let approval = record(conn, &stored, &recorded)?;
    let continues = continue_run(conn, run_id, at)?;
    Ok(Late {
        value: Decided {
            approval,
            continues,
        },
        late,
    })
}

/// What a write returns when part of it must be committed and then
/// refused: a decision that came too late.
pub struct Late<T> {
    /// What was recorded.
    pub value: T,
    /// Whether the caller's decision came after the window closed.
    pub late: bool,
}

impl Late<Decided> {
    /// The caller's answer, once the transaction committed.
    pub fn into_result(self) -> Result<Decided, StoreError> {
        if self.late {
            Err(StoreError::AlreadyDecided {
                approval: Box::new(self.value.approval),
            })
        } else {
            Ok(self.value)
        }
    }
}

/// See [`RunStore::approvals`](rein_store::RunStore::approvals).
pub fn list(conn: &Connection, filter: &ApprovalFilter) -> Result<Vec<Approval>, StoreError> {
    let mut sql = format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE 1 = 1");
    let mut values: Vec<String> = Vec::new();
    if let Some(run_id) = &filter.run_id {
        values.push(run_id.to_string());
        sql.push_str(&format!(" AND run_id = ?{}", values.len()));
    }
    if let Some(tenant) = &filter.tenant {
        values.push(tenant.to_string());
        sql.push_str(&format!(" AND tenant = ?{}", values.len()));
    }
    if let Some(intent_id) = &filter.intent_id {
        values.push(intent_id.to_string());
        sql.push_str(&format!(" AND intent_id = ?{}", values.len()));
    }
    if let Some(step) = filter.step {
        values.push(step.to_string());
        sql.push_str(&format!(" AND step = CAST(?{} AS INTEGER)", values.len()));
    }
    if filter.pending {
        // A run paused for the decision, or one whose caller's loop waits
        // for it (`RunHandle::call`), still running.
        values.push(RunStatus::AwaitingApproval.as_str().to_owned());
        values.push(RunStatus::Running.as_str().to_owned());
        sql.push_str(&format!(
            " AND verdict IS NULL AND run_id IN (SELECT run_id FROM runs WHERE status IN (?{}, ?{}))",
            values.len() - 1,
            values.len()
        ));
    }
    let cap = filter.limit.clamp(1, MAX_APPROVALS_PAGE);
    sql.push_str(&format!(
        " ORDER BY requested_at_ms, run_id, intent_id LIMIT {cap}"
    ));
    let mut statement = conn.prepare_cached(&sql).sql()?;
    let mut rows = statement
        .query(rusqlite::params_from_iter(values.iter()))
        .sql()?;
    let mut out = Vec::new();
    while let Some(row) = rows.next().sql()? {
        out.push(decode_approval(row)?);
    }
    Ok(out)
}

/// See [`RunStore::expire_approvals`](rein_store::RunStore::expire_approvals).
/// The caller provides the transaction.
pub fn expire(
    conn: &Connection,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Approval>, StoreError> {
    let cap = limit.clamp(1, MAX_APPROVALS_PAGE);
    let due: Vec<Approval> = {
        let mut statement = conn
            .prepare_cached(&format!(
                "SELECT {APPROVAL_COLUMNS} FROM approvals \
                 WHERE verdict IS NULL AND expires_at_ms <= ?1 \
                 ORDER BY expires_at_ms, run_id, intent_id LIMIT ?2"
            ))
            .sql()?;
        let mut rows = statement
            .query(params![
                int(now, "now")?,
                i64::try_from(cap).unwrap_or(i64::MAX)
            ])
            .sql()?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().sql()? {
            out.push(decode_approval(row)?);
        }
        out
    };
    let mut expired = Vec::with_capacity(due.len());
    for stored in due {
        let Some(decision) = lapsed(&stored, now) else {
            continue;
        };
        let approval = record(conn, &stored, &decision)?;
        continue_run(conn, &stored.request.run_id, now)?;
        expired.push(approval);
    }
    Ok(expired)
}

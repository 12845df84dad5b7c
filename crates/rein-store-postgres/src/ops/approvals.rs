//! The SQL of approvals (migration 0008): the requests a pausing step
//! writes, the one decision, listings and expiry. See `rein_store::approval`.
//!
//! A decision and an expiry lock the run's row first, as a step commit
//! does: the decision that completes a turn and the commit that pauses it
//! exclude each other, and the run's status moves once.

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::approval::{Approval, ApprovalRequest, Decision};
use rein_core::{IntentId, RunId};
use rein_store::approval::{
    ApprovalFilter, Decided, MAX_APPROVALS_PAGE, decidable, decision_to_record, lapsed,
    validate_request,
};
use rein_store::{RunStatus, StoreError, Timestamp};
use tokio_postgres::types::ToSql;

use super::commit::lock_run;
use super::{execute, query_all, query_opt};
use crate::codec::{APPROVAL_COLUMNS, decode_approval, int, json_text};

/// Writes the requests of a pausing step; a request already stored is
/// kept as it is. Part of the step commit's transaction (the run is locked).
pub(crate) async fn request(
    tx: &Transaction<'_>,
    run_id: &RunId,
    requests: &[ApprovalRequest],
) -> Result<(), StoreError> {
    for r in requests {
        validate_request(run_id, r)?;
        execute(
            tx,
            "INSERT INTO approvals (run_id, intent_id, tenant, step, tool, args, args_digest, \
             why, requested_at_ms, expires_at_ms) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
             ON CONFLICT (run_id, intent_id) DO NOTHING",
            &[
                &r.run_id.as_str(),
                &r.intent_id.as_str(),
                &r.tenant.as_str(),
                &i64::from(r.step),
                &r.tool,
                &json_text(&r.args, "approval args")?,
                &r.args_digest.as_str(),
                &r.why,
                &int(r.requested_at_ms, "approval requested_at_ms")?,
                &int(r.expires_at_ms, "approval expires_at_ms")?,
            ],
        )
        .await?;
    }
    Ok(())
}

async fn approval(
    client: &impl GenericClient,
    run_id: &RunId,
    intent_id: &IntentId,
) -> Result<Option<Approval>, StoreError> {
    query_opt(
        client,
        &format!("SELECT {APPROVAL_COLUMNS} FROM approvals WHERE run_id = $1 AND intent_id = $2"),
        &[&run_id.as_str(), &intent_id.as_str()],
        decode_approval,
    )
    .await
}

async fn record(
    tx: &Transaction<'_>,
    stored: &Approval,
    decision: &Decision,
) -> Result<Approval, StoreError> {
    let r = &stored.request;
    let changed = execute(
        tx,
        "UPDATE approvals SET verdict = $3, decided_by = $4, decided_at_ms = $5, reason = $6 \
         WHERE run_id = $1 AND intent_id = $2 AND verdict IS NULL",
        &[
            &r.run_id.as_str(),
            &r.intent_id.as_str(),
            &decision.verdict.as_str(),
            &decision.by,
            &int(decision.at_ms, "approval decided_at_ms")?,
            &decision.reason,
        ],
    )
    .await?;
    // Read undecided under the run's lock, so written here: anything else
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

/// Moves `run_id` (locked by the caller) from `awaiting_approval` back to
/// `running` when none of its calls waits any more. Whether it did.
async fn continue_run(
    tx: &Transaction<'_>,
    run_id: &RunId,
    at: Timestamp,
) -> Result<bool, StoreError> {
    let waiting = query_opt(
        tx,
        "SELECT 1 FROM approvals WHERE run_id = $1 AND verdict IS NULL LIMIT 1",
        &[&run_id.as_str()],
        |_| Ok(()),
    )
    .await?;
    if waiting.is_some() {
        return Ok(false);
    }
    let moved = execute(
        tx,
        "UPDATE runs SET status = $2, updated_at_ms = $3 WHERE run_id = $1 AND status = $4",
        &[
            &run_id.as_str(),
            &RunStatus::Running.as_str(),
            &int(at, "run status at_ms")?,
            &RunStatus::AwaitingApproval.as_str(),
        ],
    )
    .await?;
    Ok(moved == 1)
}

/// What [`decide`] recorded, and whether the caller's decision came after
/// the window closed: then the expiry is committed and the decision
/// refused with it ([`DecideOutcome::into_result`]).
pub(crate) struct DecideOutcome {
    decided: Decided,
    late: bool,
}

impl DecideOutcome {
    /// The caller's answer, once the transaction committed.
    pub(crate) fn into_result(self) -> Result<Decided, StoreError> {
        if self.late {
            Err(StoreError::AlreadyDecided {
                approval: Box::new(self.decided.approval),
            })
        } else {
            Ok(self.decided)
        }
    }
}

/// See `RunStore::decide_approval`.
pub(crate) async fn decide(
    tx: &Transaction<'_>,
    run_id: &RunId,
    intent_id: &IntentId,
    decision: Decision,
) -> Result<DecideOutcome, StoreError> {
    let (status, _) = lock_run(tx, run_id).await?;
    decidable(run_id, status)?;
    let stored = approval(tx, run_id, intent_id)
        .await?
        .ok_or_else(|| StoreError::NotFound {
            what: "approval",
            id: format!("{run_id}/{intent_id}"),
        })?;
    let at = decision.at_ms;
    let asked = decision.verdict;
    let recorded = decision_to_record(&stored, decision)?;
    let late = recorded.verdict != asked;
    let approval = record(tx, &stored, &recorded).await?;
    let continues = continue_run(tx, run_id, at).await?;
    Ok(DecideOutcome {
        decided: Decided {
            approval,
            continues,
        },
        late,
    })
}

/// See `RunStore::approvals`.
pub(crate) async fn list(
    client: &impl GenericClient,
    filter: &ApprovalFilter,
) -> Result<Vec<Approval>, StoreError> {
    let run_id = filter.run_id.as_ref().map(|id| id.as_str().to_owned());
    let tenant = filter.tenant.as_ref().map(|t| t.as_str().to_owned());
    let cap = i64::try_from(filter.limit.clamp(1, MAX_APPROVALS_PAGE)).unwrap_or(1);
    let step = filter.step.map(i64::from);
    let intent_id = filter.intent_id.as_ref().map(|id| id.as_str().to_owned());
    // A run paused for the decision, or one whose caller's loop waits
    // for it (`RunHandle::call`), still running.
    let waiting = RunStatus::AwaitingApproval.as_str();
    let running = RunStatus::Running.as_str();
    let params: [&(dyn ToSql + Sync); 8] = [
        &run_id,
        &tenant,
        &filter.pending,
        &cap,
        &step,
        &waiting,
        &running,
        &intent_id,
    ];
    query_all(
        client,
        &format!(
            "SELECT {APPROVAL_COLUMNS} FROM approvals \
             WHERE ($1::TEXT IS NULL OR run_id = $1) AND ($2::TEXT IS NULL OR tenant = $2) \
             AND ($5::BIGINT IS NULL OR step = $5) AND ($8::TEXT IS NULL OR intent_id = $8) \
             AND (NOT $3 OR (verdict IS NULL AND run_id IN \
                 (SELECT run_id FROM runs WHERE status IN ($6, $7)))) \
             ORDER BY requested_at_ms, run_id, intent_id LIMIT $4"
        ),
        &params,
        decode_approval,
    )
    .await
}

/// See `RunStore::expire_approvals`: each run is locked before its
/// approvals are read again, so a decision racing the sweep wins or loses
/// whole.
pub(crate) async fn expire(
    tx: &Transaction<'_>,
    now: Timestamp,
    limit: usize,
) -> Result<Vec<Approval>, StoreError> {
    let cap = i64::try_from(limit.clamp(1, MAX_APPROVALS_PAGE)).unwrap_or(1);
    let now_ms = int(now, "now")?;
    let due = query_all(
        tx,
        "SELECT run_id, intent_id FROM approvals WHERE verdict IS NULL AND expires_at_ms <= $1 \
         ORDER BY run_id, intent_id LIMIT $2",
        &[&now_ms, &cap],
        |row| {
            let run_id: String = crate::codec::PgResult::pg(row.try_get(0))?;
            let intent_id: String = crate::codec::PgResult::pg(row.try_get(1))?;
            Ok((run_id, intent_id))
        },
    )
    .await?;
    let mut expired = Vec::with_capacity(due.len());
    let mut locked: Option<String> = None;
    for (run_id, intent_id) in due {
        let corrupt = |column: &'static str, reason: String| StoreError::Corrupt {
            table: "approvals",
            column,
            reason,
        };
        let run = RunId::new(run_id.clone()).map_err(|e| corrupt("run_id", e.to_string()))?;
        let intent =
            IntentId::new(intent_id.clone()).map_err(|e| corrupt("intent_id", e.to_string()))?;
        // Ordered by run: each run is locked once, in one order for every
        // sweeper, so two sweeps cannot deadlock.
        if locked.as_deref() != Some(run_id.as_str()) {
            lock_run(tx, &run).await?;
            locked = Some(run_id);
        }
        let Some(stored) = approval(tx, &run, &intent).await? else {
            continue;
        };
        let Some(decision) = lapsed(&stored, now) else {
            continue;
        };
        expired.push(record(tx, &stored, &decision).await?);
        continue_run(tx, &run, now).await?;
    }
    Ok(expired)
}

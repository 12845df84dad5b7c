//! [`StepCommit`]: one transaction per step, in the order it documents,
//! mirroring the SQLite backend statement for statement. Where statements
//! do not depend on one another's answers they are sent together and
//! pipelined: each round trip to the server is most of a commit's time
//! on loopback, and the server runs them in the order sent all the same.

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::event::Guardrail;
use rein_core::{Event, IntentId, LedgerRecord, LedgerStatus, RunId, RunReport};
use rein_store::{
    Checkpoint, CheckpointDelta, ClaimFence, Committed, LedgerMark, PlannedIntent, RunRecord,
    RunStatus, StatusChange, StepCommit, StoreError,
};

use rein_store::rules::{
    marked, next_seq as seq_after, reopened_outcome, same_run, stamp_revision, validate_delta_step,
    validate_reopen, validate_revised_report, validate_status_change,
};

use super::runs::get_run;
use super::{LockSpace, execute, lock, query_opt};
use crate::codec::{
    LEDGER_COLUMNS, PgResult, decode_ledger, event_data_text, int, json_text, opt_json_text,
    serde_name,
};

/// How many runs above a run its ledger revision reaches: the depth bound
/// of agent trees many times over, so a damaged store (a parent cycle)
/// cannot loop.
const MAX_TREE_DEPTH: i64 = 64;

/// The run's status and ledger revision, its row locked until the
/// transaction ends: every commit of the run waits for this one.
pub(crate) async fn lock_run(
    tx: &Transaction<'_>,
    run_id: &RunId,
) -> Result<(RunStatus, u64), StoreError> {
    let statement = tx
        .prepare_cached(
            "SELECT status, ledger_revision FROM runs WHERE run_id = $1 FOR NO KEY UPDATE",
        )
        .await
        .pg()?;
    let row = tx
        .query_opt(&statement, &[&run_id.as_str()])
        .await
        .pg()?
        .ok_or_else(|| StoreError::run_not_found(run_id))?;
    let corrupt = |column: &'static str, reason: String| StoreError::Corrupt {
        table: "runs",
        column,
        reason: format!("{reason} (row run_id={run_id})"),
    };
    let status: String = row.try_get(0).pg()?;
    let status = RunStatus::parse(&status)
        .ok_or_else(|| corrupt("status", format!("expected a known name, found {status:?}")))?;
    let revision: i64 = row.try_get(1).pg()?;
    let revision = u64::try_from(revision).map_err(|_| {
        corrupt(
            "ledger_revision",
            format!("expected a non-negative integer, found {revision}"),
        )
    })?;
    Ok((status, revision))
}

/// Applies a [`StepCommit`] in the order it documents, in `tx`; announces
/// it on [`EVENTS_CHANNEL`] when `notify` (`PostgresOptions::notify`).
pub(crate) async fn commit_step(
    tx: &Transaction<'_>,
    run_id: &RunId,
    commit: StepCommit,
    notify: bool,
) -> Result<Committed, StoreError> {
    let (mut status, revision) = lock_run(tx, run_id).await?;
    if let Some(expected) = commit.expect_status
        && expected != status
    {
        return Err(StoreError::StatusChanged {
            run_id: run_id.to_string(),
        });
    }
    if let Some(fence) = &commit.expect_claim
        && !holds_claim(tx, fence).await?
    {
        return Err(StoreError::ClaimLost {
            run_id: run_id.to_string(),
        });
    }
    if let Some(expected) = commit.expect_ledger_revision
        && expected != revision
    {
        return Err(StoreError::LedgerChanged {
            run_id: run_id.to_string(),
        });
    }
    if commit.reopen {
        reopen(tx, run_id, status).await?;
        status = RunStatus::Running;
    }
    if let Some(span) = &commit.first_span {
        // Set once: the first drive's span stays what later drives link to.
        execute(
            tx,
            "UPDATE runs SET first_span = COALESCE(first_span, $2) WHERE run_id = $1",
            &[&run_id.as_str(), &span.to_traceparent()],
        )
        .await?;
    }
    let ledger_written = !commit.declares.is_empty() || !commit.marks.is_empty();
    let mut committed = Committed::default();
    for (step, intent) in &commit.intents {
        save_intent(tx, run_id, *step, intent).await?;
    }
    super::approvals::request(tx, run_id, &commit.approvals).await?;
    for record in commit.declares {
        same_run("ledger record run id", run_id, &record.run_id)?;
        committed.declared.push(declare(tx, record).await?);
    }
    for (intent_id, mark) in commit.marks {
        committed
            .marked
            .push(apply_mark(tx, run_id, &intent_id, mark).await?);
    }
    if let Some(checkpoint) = &commit.checkpoint {
        same_run("checkpoint run id", run_id, &checkpoint.run_id)?;
    }
    if let Some(delta) = &commit.checkpoint_delta {
        same_run("checkpoint delta run id", run_id, &delta.run_id)?;
    }
    // From here the commit's writes are independent of one another, but
    // for the events' first sequence number and a delta that follows a
    // checkpoint of the same commit: the independent ones are sent at
    // once, and tokio-postgres pipelines the queries of futures polled
    // together on one connection. The server runs them one after another
    // in the transaction, so the outcome is that of awaiting each in
    // turn, in a fraction of the round trips.
    let delta_after = commit.checkpoint.is_some();
    let checkpoint = async {
        match &commit.checkpoint {
            Some(checkpoint) => write_checkpoint(tx, checkpoint).await,
            None => Ok(()),
        }
    };
    let delta = async {
        match &commit.checkpoint_delta {
            Some(delta) if !delta_after => write_checkpoint_delta(tx, delta).await,
            _ => Ok(()),
        }
    };
    let first_event = async {
        if commit.events.is_empty() {
            Ok(0)
        } else {
            next_seq(tx, "events", run_id).await
        }
    };
    let bump = async {
        if ledger_written {
            bump_ledger_revision(tx, run_id).await
        } else {
            Ok(())
        }
    };
    let ((), (), first_event, ()) = tokio::try_join!(checkpoint, delta, first_event, bump)?;
    if let (true, Some(delta)) = (delta_after, &commit.checkpoint_delta) {
        write_checkpoint_delta(tx, delta).await?;
    }
    let revision = if ledger_written {
        revision.saturating_add(1)
    } else {
        revision
    };
    // Announced with the events when nothing else of the run changes.
    let announce_now = notify && commit.status.is_none() && commit.revised_report.is_none();
    if !commit.events.is_empty() {
        let announce = async {
            if announce_now {
                announce(tx, run_id).await
            } else {
                Ok(())
            }
        };
        let events = append_events(tx, run_id, first_event, commit.events);
        let (events, ()) = tokio::try_join!(events, announce)?;
        committed.events = events;
    }
    if let Some(mut change) = commit.status {
        stamp_revision(change.report.as_mut(), revision);
        let run = set_status(tx, run_id, status, change).await?;
        status = run.status;
        committed.run = Some(run);
    }
    if let Some(mut report) = commit.revised_report {
        stamp_revision(Some(&mut report), revision);
        committed.run = Some(revise_report(tx, run_id, status, &report).await?);
    }
    if notify && !announce_now && (!committed.events.is_empty() || committed.run.is_some()) {
        announce(tx, run_id).await?;
    }
    Ok(committed)
}

/// Announces that `run_id` changed on [`EVENTS_CHANNEL`]: delivered at
/// commit (never for a rolled-back commit), so that live event streams of
/// every node read the run again.
async fn announce(tx: &Transaction<'_>, run_id: &RunId) -> Result<(), StoreError> {
    execute(
        tx,
        "SELECT pg_notify($1, $2)",
        &[&EVENTS_CHANNEL, &run_id.as_str()],
    )
    .await?;
    Ok(())
}

/// The `NOTIFY` channel a commit that added events to a run, or changed
/// its status, is announced on; the payload is the run id.
pub const EVENTS_CHANNEL: &str = "rein_events";

/// Whether the lease of `fence` exists with its owner (expiry is not
/// checked), under the lease's lock: a take-over waits for this commit, or
/// this commit sees the take-over.
async fn holds_claim(tx: &Transaction<'_>, fence: &ClaimFence) -> Result<bool, StoreError> {
    lock(tx, LockSpace::Lease, &fence.lease_id).await?;
    let found = query_opt(
        tx,
        "SELECT 1 FROM leases WHERE lease_id = $1 AND owner = $2",
        &[&fence.lease_id, &fence.owner],
        |_| Ok(()),
    )
    .await?;
    Ok(found.is_some())
}

/// Bumps the ledger revision of `run_id` and of every run above it.
async fn bump_ledger_revision(tx: &Transaction<'_>, run_id: &RunId) -> Result<(), StoreError> {
    execute(
        tx,
        "WITH RECURSIVE up (id, depth) AS ( \
             SELECT $1::text COLLATE \"C\", 0::bigint \
             UNION SELECT runs.parent_run_id, up.depth + 1 FROM runs JOIN up ON runs.run_id = up.id \
             WHERE runs.parent_run_id IS NOT NULL AND up.depth < $2) \
         UPDATE runs SET ledger_revision = ledger_revision + 1 \
         WHERE run_id IN (SELECT id FROM up)",
        &[&run_id.as_str(), &MAX_TREE_DEPTH],
    )
    .await?;
    Ok(())
}

async fn run_after(tx: &Transaction<'_>, run_id: &RunId) -> Result<RunRecord, StoreError> {
    get_run(tx, run_id)
        .await?
        .ok_or_else(|| StoreError::run_not_found(run_id))
}

async fn revise_report(
    tx: &Transaction<'_>,
    run_id: &RunId,
    current: RunStatus,
    report: &RunReport,
) -> Result<RunRecord, StoreError> {
    validate_revised_report(current, report)?;
    // The status follows the report: the same outcome, or the one a
    // handed-off run is closed with once nothing awaits a human.
    execute(
        tx,
        "UPDATE runs SET report = $2, status = $3 WHERE run_id = $1",
        &[
            &run_id.as_str(),
            &json_text(report, "run report")?,
            &RunStatus::Finished(report.outcome).as_str(),
        ],
    )
    .await?;
    run_after(tx, run_id).await
}

async fn save_intent(
    tx: &Transaction<'_>,
    run_id: &RunId,
    step: u32,
    intent: &PlannedIntent,
) -> Result<(), StoreError> {
    execute(
        tx,
        "INSERT INTO intents (run_id, intent_id, step, ordinal, call_id, tool, args) \
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (run_id, intent_id) DO NOTHING",
        &[
            &run_id.as_str(),
            &intent.intent_id.as_str(),
            &i64::from(step),
            &i64::from(intent.ordinal),
            &intent.call_id,
            &intent.tool,
            &json_text(&intent.args, "intent args")?,
        ],
    )
    .await?;
    Ok(())
}

async fn ledger_record(
    client: &impl GenericClient,
    run_id: &RunId,
    intent_id: &IntentId,
) -> Result<Option<LedgerRecord>, StoreError> {
    query_opt(
        client,
        &format!("SELECT {LEDGER_COLUMNS} FROM ledger WHERE run_id = $1 AND intent_id = $2"),
        &[&run_id.as_str(), &intent_id.as_str()],
        decode_ledger,
    )
    .await
}

/// The next `seq` of `table` (`events` or `ledger`) in the run; the run's
/// row lock makes it ours until the commit.
async fn next_seq(
    tx: &Transaction<'_>,
    table: &'static str,
    run_id: &RunId,
) -> Result<u64, StoreError> {
    let sql = match table {
        "events" => "SELECT COALESCE(MAX(seq), 0) FROM events WHERE run_id = $1",
        _ => "SELECT COALESCE(MAX(seq), 0) FROM ledger WHERE run_id = $1",
    };
    let statement = tx.prepare_cached(sql).await.pg()?;
    let max: i64 = tx
        .query_one(&statement, &[&run_id.as_str()])
        .await
        .pg()?
        .try_get(0)
        .pg()?;
    seq_after(table, run_id, max)
}

async fn declare(
    tx: &Transaction<'_>,
    mut record: LedgerRecord,
) -> Result<LedgerRecord, StoreError> {
    // Both reads at once (pipelined): the sequence number is used only
    // when the intent has no record yet.
    let (existing, seq) = tokio::try_join!(
        ledger_record(tx, &record.run_id, &record.intent_id),
        next_seq(tx, "ledger", &record.run_id),
    )?;
    if let Some(existing) = existing {
        return Ok(existing);
    }
    record.seq = seq;
    record.status = LedgerStatus::Pending;
    execute(
        tx,
        "INSERT INTO ledger (run_id, intent_id, seq, step, tool, class, idempotency_key, args, \
         status, result, failure, attempts, created_at_ms, updated_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)",
        &[
            &record.run_id.as_str(),
            &record.intent_id.as_str(),
            &int(record.seq, "ledger seq")?,
            &i64::from(record.step),
            &record.tool,
            &serde_name(&record.class, "ledger class")?,
            &record.idempotency_key.as_ref().map(|key| key.as_str()),
            &json_text(&record.args, "ledger args")?,
            &record.status.as_str(),
            &opt_json_text(record.result.as_ref(), "ledger result")?,
            &opt_json_text(record.failure.as_ref(), "ledger failure")?,
            &i64::from(record.attempts),
            &int(record.created_at_ms, "ledger created_at_ms")?,
            &int(record.updated_at_ms, "ledger updated_at_ms")?,
        ],
    )
    .await?;
    Ok(record)
}

async fn apply_mark(
    tx: &Transaction<'_>,
    run_id: &RunId,
    intent_id: &IntentId,
    mark: LedgerMark,
) -> Result<LedgerRecord, StoreError> {
    let record =
        ledger_record(tx, run_id, intent_id)
            .await?
            .ok_or_else(|| StoreError::NotFound {
                what: "ledger record",
                id: format!("{run_id}/{intent_id}"),
            })?;
    let record = marked(record, mark)?;
    execute(
        tx,
        "UPDATE ledger SET status = $3, result = $4, failure = $5, attempts = $6, \
         updated_at_ms = $7 WHERE run_id = $1 AND intent_id = $2",
        &[
            &run_id.as_str(),
            &intent_id.as_str(),
            &record.status.as_str(),
            &opt_json_text(record.result.as_ref(), "ledger result")?,
            &opt_json_text(record.failure.as_ref(), "ledger failure")?,
            &i64::from(record.attempts),
            &int(record.updated_at_ms, "ledger mark at_ms")?,
        ],
    )
    .await?;
    Ok(record)
}

async fn write_checkpoint(tx: &Transaction<'_>, checkpoint: &Checkpoint) -> Result<(), StoreError> {
    execute(
        tx,
        "INSERT INTO checkpoints (run_id, step, messages, completed_intents, consumed_steps, \
         consumed_tokens, consumed_cost_micros, elapsed_ms, state, at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) \
         ON CONFLICT (run_id, step) DO UPDATE SET messages = excluded.messages, \
         completed_intents = excluded.completed_intents, \
         consumed_steps = excluded.consumed_steps, consumed_tokens = excluded.consumed_tokens, \
         consumed_cost_micros = excluded.consumed_cost_micros, \
         elapsed_ms = excluded.elapsed_ms, state = excluded.state, at_ms = excluded.at_ms",
        &[
            &checkpoint.run_id.as_str(),
            &i64::from(checkpoint.step),
            &json_text(&checkpoint.messages, "checkpoint messages")?,
            &json_text(
                &checkpoint.completed_intents,
                "checkpoint completed_intents",
            )?,
            &i64::from(checkpoint.consumed.steps),
            &int(checkpoint.consumed.tokens, "checkpoint consumed tokens")?,
            &int(
                checkpoint.consumed.cost.micros(),
                "checkpoint consumed cost",
            )?,
            &int(checkpoint.elapsed_ms, "checkpoint elapsed_ms")?,
            &json_text(&checkpoint.state, "checkpoint state")?,
            &int(checkpoint.at_ms, "checkpoint at_ms")?,
        ],
    )
    .await?;
    // A whole checkpoint holds what the deltas up to its step added.
    execute(
        tx,
        "DELETE FROM checkpoint_deltas WHERE run_id = $1 AND step <= $2",
        &[&checkpoint.run_id.as_str(), &i64::from(checkpoint.step)],
    )
    .await?;
    Ok(())
}

/// The step of the run's latest checkpoint (`0`: none), and whether it is
/// a delta.
async fn latest_checkpoint_step(
    tx: &Transaction<'_>,
    run_id: &RunId,
) -> Result<(u32, bool), StoreError> {
    let max = |sql: &'static str, after: i64| async move {
        let statement = tx.prepare_cached(sql).await.pg()?;
        let max: Option<i64> = tx
            .query_one(&statement, &[&run_id.as_str(), &after])
            .await
            .pg()?
            .try_get(0)
            .pg()?;
        max.map(|step| {
            u32::try_from(step).map_err(|_| StoreError::Corrupt {
                table: "checkpoints",
                column: "step",
                reason: format!(
                    "expected a step in 0..={}, found {step} (run {run_id})",
                    u32::MAX
                ),
            })
        })
        .transpose()
    };
    let whole = max(
        "SELECT MAX(step) FROM checkpoints WHERE run_id = $1 AND step > $2",
        -1,
    )
    .await?
    .unwrap_or(0);
    let delta = max(
        "SELECT MAX(step) FROM checkpoint_deltas WHERE run_id = $1 AND step > $2",
        i64::from(whole),
    )
    .await?;
    Ok(delta.map_or((whole, false), |step| (step, true)))
}

/// Appends `delta` after the run's latest checkpoint, or replaces the
/// delta of that step; refuses any other step.
async fn write_checkpoint_delta(
    tx: &Transaction<'_>,
    delta: &CheckpointDelta,
) -> Result<(), StoreError> {
    let (latest, is_delta) = latest_checkpoint_step(tx, &delta.run_id).await?;
    validate_delta_step(latest, is_delta, delta.step)?;
    execute(
        tx,
        "INSERT INTO checkpoint_deltas (run_id, step, messages, completed_intents, appended, \
         state, consumed_steps, consumed_tokens, consumed_cost_micros, elapsed_ms, at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) \
         ON CONFLICT (run_id, step) DO UPDATE SET messages = excluded.messages, \
         completed_intents = excluded.completed_intents, appended = excluded.appended, \
         state = excluded.state, consumed_steps = excluded.consumed_steps, \
         consumed_tokens = excluded.consumed_tokens, \
         consumed_cost_micros = excluded.consumed_cost_micros, \
         elapsed_ms = excluded.elapsed_ms, at_ms = excluded.at_ms",
        &[
            &delta.run_id.as_str(),
            &i64::from(delta.step),
            &json_text(&delta.messages, "checkpoint delta messages")?,
            &json_text(
                &delta.completed_intents,
                "checkpoint delta completed_intents",
            )?,
            &json_text(&delta.appended, "checkpoint delta appended")?,
            &json_text(&delta.state, "checkpoint delta state")?,
            &i64::from(delta.consumed.steps),
            &int(delta.consumed.tokens, "checkpoint delta consumed tokens")?,
            &int(
                delta.consumed.cost.micros(),
                "checkpoint delta consumed cost",
            )?,
            &int(delta.elapsed_ms, "checkpoint delta elapsed_ms")?,
            &int(delta.at_ms, "checkpoint delta at_ms")?,
        ],
    )
    .await?;
    Ok(())
}

async fn append_events(
    tx: &Transaction<'_>,
    run_id: &RunId,
    first: u64,
    mut events: Vec<Event>,
) -> Result<Vec<Event>, StoreError> {
    let statement = tx
        .prepare_cached(
            "INSERT INTO events (run_id, seq, step, intent_id, attempt_id, idempotency_key, \
             at_ms, kind, data, guardrail) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        )
        .await
        .pg()?;
    for (seq, event) in (first..).zip(events.iter_mut()) {
        same_run("event run id", run_id, &event.run_id)?;
        event.seq = seq;
    }
    // Each event's row is independent of the others' (its sequence number
    // is set above): all are sent at once, pipelined.
    let inserts = events.iter().map(|event| {
        let statement = &statement;
        async move {
            let data = event_data_text(event)?;
            tx.execute(
                statement,
                &[
                    &run_id.as_str(),
                    &int(event.seq, "event seq")?,
                    &i64::from(event.step),
                    &event.intent_id.as_ref().map(IntentId::as_str),
                    &event.attempt_id.as_ref().map(|id| id.as_str()),
                    &event.idempotency_key.as_ref().map(|key| key.as_str()),
                    &int(event.at_ms, "event at_ms")?,
                    &event.kind().as_str(),
                    &data,
                    &event.data.guardrail().map(Guardrail::as_str),
                ],
            )
            .await
            .pg()?;
            // The outbox row goes with its event, in this transaction:
            // see `rein_store::webhook`.
            super::webhooks::record(tx, event).await
        }
    });
    futures_util::future::try_join_all(inserts).await?;
    Ok(events)
}

/// Reopens a finished, recoverable run (see [`StepCommit::reopen`]).
async fn reopen(
    tx: &Transaction<'_>,
    run_id: &RunId,
    current: RunStatus,
) -> Result<(), StoreError> {
    let outcome = reopened_outcome(current)?;
    let report = query_opt(
        tx,
        "SELECT report FROM runs WHERE run_id = $1",
        &[&run_id.as_str()],
        |row| row.try_get::<_, Option<String>>(0).pg(),
    )
    .await?
    .flatten();
    validate_reopen(run_id, outcome, report.as_deref())?;
    execute(
        tx,
        "UPDATE runs SET status = 'running', report = NULL WHERE run_id = $1",
        &[&run_id.as_str()],
    )
    .await?;
    Ok(())
}

async fn set_status(
    tx: &Transaction<'_>,
    run_id: &RunId,
    current: RunStatus,
    change: StatusChange,
) -> Result<RunRecord, StoreError> {
    validate_status_change(run_id, current, &change)?;
    execute(
        tx,
        "UPDATE runs SET status = $2, report = $3, updated_at_ms = $4 WHERE run_id = $1",
        &[
            &run_id.as_str(),
            &change.status.as_str(),
            &opt_json_text(change.report.as_ref(), "run report")?,
            &int(change.at_ms, "run status at_ms")?,
        ],
    )
    .await?;
    run_after(tx, run_id).await
}

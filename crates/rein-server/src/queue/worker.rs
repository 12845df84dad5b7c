//! Queue workers: drive runs accepted with `mode: queued`.
//!
//! # Why the store decides who drives
//!
//! Any `rein serve` process sharing the database may pick a queued run.
//! Starting it goes through the engine's claim (a lease in the store), so
//! two workers racing for one run cannot both drive it; the loser moves on.
//! Which run a worker tries next is the fair pick's ([`crate::queue::fair`]):
//! deficit round robin between the tenants with queued runs, passing over
//! a tenant at its `max_running`, and a tenant already running here when
//! only the tenant floor is free ([`crate::queue::floor`]: `queue.workers` +
//! [`FLOOR`](crate::queue::floor::FLOOR) workers loop, the floor kept for a
//! tenant with nothing running).

use std::sync::Arc;
use std::time::Duration;

use rein_core::TenantId;
use rein_core::governor::Class;
use rein_engine::lease::Owner;
use rein_engine::recovery::{DEAD_LETTER, Standing};
use rein_engine::run::{EngineError, HandOn, RunOutput, RunRequest};
use rein_store::{RunCursor, RunRecord, RunStatus};

use crate::http::state::AppState;
use crate::queue::fair::Started;

/// How often an idle worker looks for queued work without being woken.
pub const IDLE_POLL: Duration = Duration::from_millis(500);

/// How many running runs one takeover look reads: the next look goes on
/// after them.
pub const TAKEOVER_PAGE: usize = 16;

/// How many picks one round of a worker tries before it looks for
/// abandoned work: a pick another process claimed first is passed over.
pub const PICK_TRIES: usize = 8;

/// The next queued run in fair order between tenants ([`crate::queue::fair`]),
/// counted against its tenant's `max_running` and seated in the tenant
/// floor ([`crate::queue::floor`]) while it is driven.
async fn next_queued(state: &AppState) -> Option<(RunRecord, Started)> {
    let heads = match state
        .store
        .queue_heads(crate::queue::fair::PICK_WINDOW)
        .await
    {
        Ok(heads) => heads,
        Err(e) => {
            tracing::warn!("queue worker: cannot list queued runs: {e}");
            return None;
        }
    };
    let now = state.engine.clock().now();
    state.fair.next(
        &heads,
        &state.settings.quotas,
        &state.quotas,
        &state.floor,
        now,
    )
}

/// The tenant a worker's batch slot is asked under: which tenant's run it
/// then starts is the fair pick's choice, made once the slot is held.
fn workers_tenant() -> Option<TenantId> {
    TenantId::new("queue-worker").ok()
}

/// Drives one queued run to its end; false when another worker has it.
async fn drive(state: &Arc<AppState>, record: RunRecord) -> bool {
    // Sabotage (inert unless `REIN_PANIC_AT=queue_worker[@agent]` is set in
    // a build with crash points): a panic outside the run's boundary, which
    // ends this worker, so `/readyz` must say so.
    rein_engine::crash::panic_point("queue_worker", &record.agent);
    let agent = match state.bind(&record.agent) {
        Ok(a) => a,
        Err(p) => {
            tracing::error!(run = %record.run_id, "queued run cannot be bound: {}", p.detail);
            return false;
        }
    };
    let run_id = record.run_id.clone();
    let request = RunRequest {
        run_id: Some(record.run_id.clone()),
        tenant: Some(record.tenant.clone()),
        input: record.input.clone(),
        observer: None,
        enqueued: true,
        cancel: None,
        reservation: None,
        // Accepted earlier, maybe by another process: its own trace.
        trace_parent: None,
        // Just read by the pick: the start claims it without a read.
        picked: Some(record),
    };
    match state.engine.run(&agent, &state.schemas, request).await {
        Ok(out) => {
            log_end(&out, "queued run");
            true
        }
        Err(EngineError::NotResumable { .. }) => false,
        Err(e) => {
            tracing::warn!(run = %run_id, "queued run did not start: {e}");
            false
        }
    }
}

/// Says how a run this worker drove stopped: its outcome, or that it was
/// handed on (its report is then provisional, not an outcome).
fn log_end(out: &RunOutput, what: &str) {
    if out.interrupted {
        tracing::info!(run = %out.run_id, "{what} handed on unfinished at a safe point (this process is stopping, or the run store stayed unavailable): {}", out.report.summary);
    } else {
        tracing::info!(run = %out.run_id, outcome = out.report.outcome.as_str(), "{what} ended");
    }
}

/// Whether the store still shows `run_id` as `running` (false when it
/// cannot be read: taking over is never the safe default).
async fn still_running(state: &AppState, run_id: &rein_core::RunId) -> bool {
    match state.store.get_run(run_id).await {
        Ok(Some(run)) => run.status == RunStatus::Running,
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(run = %run_id, "queue worker: cannot read the run's status: {e}");
            false
        }
    }
}

/// Whether this server may continue `record`, from what recovery knows of
/// it: a run a draining server handed on to any worker (a root; a child
/// continues with its root), or queued work whose last process did not
/// stop it on purpose. A run stopped for its caller (a Ctrl-C'd `rein
/// run`) is the caller's.
fn ours(record: &RunRecord, standing: &Standing) -> bool {
    match standing.interrupted {
        Some(HandOn::AnyWorker) => record.parent_run_id.is_none(),
        Some(_) => false,
        None => standing.enqueued,
    }
}

/// Takes over work whose owner is gone: queued work whose owner stopped
/// renewing its claim or is provably gone, and any root run a draining
/// server handed on (sync runs included). Resumes it from its checkpoint,
/// or dead-letters it after `max_attempts`. False when there was none (or
/// another worker won it).
///
/// Each call looks at one page of [`TAKEOVER_PAGE`] running runs after
/// `cursor`, which it moves on (back to the start after the last page):
/// however many running runs are not this server's to take (children,
/// runs stopped for their caller, runs of live owners), every one is
/// looked at in turn.
async fn take_over(state: &Arc<AppState>, cursor: &mut Option<RunCursor>) -> bool {
    let now = crate::lifecycle::recovery::now_ms();
    let max_attempts = state.settings.queue.max_attempts.get();
    let page = match state
        .store
        .runs_with_status_after(RunStatus::Running, cursor.as_ref(), TAKEOVER_PAGE)
        .await
    {
        Ok(page) => page,
        Err(e) => {
            tracing::warn!("queue worker: cannot list running runs: {e}");
            return false;
        }
    };
    *cursor = if page.len() < TAKEOVER_PAGE {
        None
    } else {
        page.last().map(RunCursor::after)
    };
    for record in page {
        if state.engine.is_live(&record.run_id) || state.drain.is_draining() {
            continue;
        }
        let Some(standing) = crate::lifecycle::recovery::standing(state, &record.run_id).await
        else {
            continue;
        };
        // Without waiting for the lease when its owner provably stopped: a
        // drain released the claim (none left), or the owner is a process
        // of this machine that is gone. The engine's claim checks again,
        // atomically.
        let abandoned = standing
            .claim
            .as_ref()
            .is_none_or(|c| c.expires_at_ms <= now || Owner::is_gone_id(&c.owner));
        if !ours(&record, &standing) || !abandoned {
            continue;
        }
        // NOTE: relies on the engine recording a run's end before it
        // releases the claim (`Engine::drive`). The listing above is older
        // than the claim just read: a run that ended in between has no
        // claim any more, yet it is not abandoned. Read its status again,
        // after the claim: only a run still `running` is taken over. A
        // resume of an ended run would reopen a recoverable outcome and
        // drive its last step a second time (issue 6's load test: ~3% of
        // 1,000 runs on two servers finished twice).
        if !still_running(state, &record.run_id).await {
            continue;
        }
        // A run stopped at a safe point (a drain handed it on, or it
        // paused for a human) did not die: continuing it is no delivery
        // that could be one too many.
        if standing.interrupted.is_none()
            && let Some(dead) = standing.dead_letter(max_attempts)
        {
            match state.engine.close_dead_letter(&record, &dead).await {
                Ok(_) => {
                    tracing::warn!(run = %record.run_id, error_type = DEAD_LETTER, "{}", dead.reason())
                }
                Err(e) => {
                    tracing::warn!(run = %record.run_id, "cannot close the run as {DEAD_LETTER}: {e}");
                }
            }
            continue;
        }
        let attempts = standing.resumes.saturating_add(1);
        let agent = match state.bind(&record.agent) {
            Ok(a) => a,
            Err(p) => {
                tracing::error!(run = %record.run_id, "cannot take over: {}", p.detail);
                continue;
            }
        };
        // Work like any other: a drain that begins now waits for it.
        let Some(_admission) = state.drain.admit() else {
            return false;
        };
        // It holds this worker: counted, never refused by the floor.
        let _seat = state.floor.seat_anyway(&record.tenant);
        // Every live node may find the same abandoned run: each one asks,
        // the engine's claim lets one win, and the others log "not taken
        // over" below. So this line says it asks (info), not that it took
        // the run over; the winner's end is logged as a "taken-over run".
        let why = if standing.interrupted.is_some() {
            "claiming a run a draining server handed on"
        } else {
            "claiming a run whose worker stopped"
        };
        tracing::info!(run = %record.run_id, attempt = attempts + 1, "{why}");
        match state
            .engine
            .resume_cancellable(&agent, &state.schemas, &record.run_id, None, None)
            .await
        {
            Ok(out) => {
                log_end(&out, "taken-over run");
                // The next look starts after this run: the rest of the page
                // is not skipped.
                *cursor = Some(RunCursor::after(&record));
                return true;
            }
            Err(EngineError::NotResumable { reason, .. }) => {
                tracing::info!(run = %record.run_id, "not taken over: {reason}");
            }
            Err(e) => tracing::warn!(run = %record.run_id, "take-over failed: {e}"),
        }
    }
    false
}

/// One worker: holds a batch run slot ([`crate::queue::slots`]), takes the next
/// queued run in fair order between tenants, drives it, repeats; takes
/// over abandoned work; sleeps until woken or [`IDLE_POLL`] when there is
/// none. Returns once the server drains: nothing new is picked, queued
/// work stays queued for another server. What it drives holds an
/// admission, so a drain that begins meanwhile waits for it (and hands it
/// on).
pub async fn work(state: Arc<AppState>) {
    // Counted as alive until this loop ends, however it ends (`/readyz`).
    let _alive = state.health.worker_started();
    let Some(tenant) = workers_tenant() else {
        return;
    };
    let mut cursor = None;
    loop {
        let mut drove = false;
        let now = state.engine.clock().now();
        let slot = tokio::select! {
            slot = state.slots.acquire(&tenant, Class::Batch, now) => slot,
            () = state.drain.started() => return,
        };
        for _ in 0..PICK_TRIES {
            let Some((record, _started)) = next_queued(&state).await else {
                break;
            };
            // Taken, then checked: a drain that began in between refuses.
            let Some(_admission) = state.drain.admit() else {
                return;
            };
            if drive(&state, record).await {
                drove = true;
                break;
            }
        }
        if state.drain.is_draining() {
            return;
        }
        if !drove {
            drove = take_over(&state, &mut cursor).await;
        }
        drop(slot);
        if !drove {
            tokio::select! {
                () = state.queue.notified() => {}
                () = state.engine.clock().sleep(IDLE_POLL) => {}
                () = state.drain.started() => return,
            }
        }
    }
}

//! Queue workers: drive runs accepted with `mode: queued`.
//!
//! # Why the store decides who drives
//!
//! Any `rein serve` process sharing the database may pick a queued run.
//! Starting it goes through the engine's claim (a lease in the store), so
//! two workers racing for one run cannot both drive it; the loser moves on.

use std::sync::Arc;
use std::time::Duration;

use rein_engine::run::{EngineError, RunRequest};
use rein_store::{RunRecord, RunStatus};

use crate::state::AppState;

/// How often an idle worker looks for queued work without being woken.
pub const IDLE_POLL: Duration = Duration::from_millis(500);

/// The oldest queued runs, at most `limit`.
async fn queued(state: &AppState, limit: usize) -> Vec<RunRecord> {
    match state.store.list_runs(limit * 20).await {
        Ok(runs) => {
            let mut q: Vec<RunRecord> = runs
                .into_iter()
                .filter(|r| r.status == RunStatus::Queued)
                .collect();
            q.sort_by_key(|r| r.created_at_ms);
            q.truncate(limit);
            q
        }
        Err(e) => {
            tracing::warn!("queue worker: cannot list runs: {e}");
            Vec::new()
        }
    }
}

/// Drives one queued run to its end; false when another worker has it.
async fn drive(state: &Arc<AppState>, record: RunRecord) -> bool {
    let agent = match state.bind(&record.agent) {
        Ok(a) => a,
        Err(p) => {
            tracing::error!(run = %record.run_id, "queued run cannot be bound: {}", p.detail);
            return false;
        }
    };
    let live = state.live.register(&record.run_id);
    let request = RunRequest {
        run_id: Some(record.run_id.clone()),
        tenant: Some(record.tenant.clone()),
        input: record.input.clone(),
        observer: None,
        enqueued: true,
        cancel: Some(live.token.clone()),
    };
    match state.engine.run(&agent, &state.schemas, request).await {
        Ok(out) => {
            tracing::info!(run = %out.run_id, outcome = out.report.outcome.as_str(), "queued run ended");
            true
        }
        Err(EngineError::NotResumable { .. }) => false,
        Err(e) => {
            tracing::warn!(run = %record.run_id, "queued run did not start: {e}");
            false
        }
    }
}

/// One worker: takes the oldest queued run, drives it, repeats; sleeps
/// until woken or [`IDLE_POLL`] when there is none.
pub async fn work(state: Arc<AppState>) {
    loop {
        let mut drove = false;
        for record in queued(&state, 8).await {
            if drive(&state, record).await {
                drove = true;
                break;
            }
        }
        if !drove {
            tokio::select! {
                () = state.queue.notified() => {}
                () = tokio::time::sleep(IDLE_POLL) => {}
            }
        }
    }
}

//! What happens to runs whose process died: queued work is taken over by
//! another worker once its claim lease ran out (and dead-lettered after
//! too many attempts); a direct run is closed as `orphaned` once nobody
//! renewed its claim for the orphan threshold.
//!
//! # Why two answers
//!
//! Work accepted with `mode: queued` was promised to be done: a worker
//! resumes it from its checkpoint, and idempotency keys keep every effect
//! single. A direct (sync) run belonged to a caller who is gone with the
//! process: it is reported failed, honestly, and its ledger is left to the
//! ledger reconciler.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rein_core::{EventData, EventKind, Outcome, RunId};
use rein_engine::run::{Closing, End, HandOn};
use rein_store::{Lease, LeaseKind, RunCursor, RunRecord, RunStatus};

use crate::state::AppState;

/// Unix milliseconds now.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Up to `limit` runs recorded `running` after `cursor`, oldest first;
/// moves `cursor` on past them, back to the start after the last page.
/// A scan that passes over many runs (handed on, queued work, live) so
/// still looks at every one in turn.
pub async fn running(
    state: &AppState,
    cursor: &mut Option<RunCursor>,
    limit: usize,
) -> Vec<RunRecord> {
    match state
        .store
        .runs_with_status_after(RunStatus::Running, cursor.as_ref(), limit)
        .await
    {
        Ok(runs) => {
            *cursor = if runs.len() < limit {
                None
            } else {
                runs.last().map(RunCursor::after)
            };
            runs
        }
        Err(e) => {
            tracing::warn!("recovery: cannot list running runs: {e}");
            Vec::new()
        }
    }
}

/// What recovery knows of a running run.
pub struct Standing {
    /// Whether it was accepted as queued work.
    pub enqueued: bool,
    /// Whether its last process stopped it at a safe point
    /// (`run_interrupted` after its last start or resume), and who may
    /// continue it: it waits to be resumed, not to be closed.
    pub interrupted: Option<HandOn>,
    /// Its claim, if any.
    pub claim: Option<Lease>,
    /// How many times it was resumed after its process died (resumes of a
    /// run a drain handed on do not count).
    pub resumes: u32,
}

/// Reads a run's origin, claim and resume count.
pub async fn standing(state: &AppState, run_id: &RunId) -> Option<Standing> {
    let events = state.store.events(run_id, 0).await.ok()?;
    let enqueued = events
        .iter()
        .find_map(|e| match &e.data {
            EventData::RunStarted(started) => Some(started.enqueued),
            _ => None,
        })
        .unwrap_or(false);
    let interrupted = events
        .iter()
        .rev()
        .find(|e| {
            matches!(
                e.kind(),
                EventKind::RunStarted | EventKind::RunResumed | EventKind::RunInterrupted
            )
        })
        .and_then(|e| match &e.data {
            // An interruption that names nobody: the caller's, the safe
            // reading (nobody takes it over, nobody closes it).
            EventData::RunInterrupted(i) => Some(i.hand_on().unwrap_or(HandOn::Caller)),
            _ => None,
        });
    // A resume after a drain handed the run on is not a death of its
    // worker: rolling restarts must not dead-letter work.
    let mut resumes = 0u32;
    let mut after_hand_on = false;
    for e in &events {
        match e.kind() {
            EventKind::RunInterrupted => after_hand_on = true,
            EventKind::RunResumed => {
                if !after_hand_on {
                    resumes = resumes.saturating_add(1);
                }
                after_hand_on = false;
            }
            _ => {}
        }
    }
    let claim = state
        .store
        .leases_of_run(run_id)
        .await
        .ok()?
        .into_iter()
        .find(|l| l.kind == LeaseKind::Run);
    Some(Standing {
        enqueued,
        interrupted,
        claim,
        resumes,
    })
}

/// Ends `record` from outside (never started, or its owner is gone) with
/// `closing`: its report derived from its ledger as it stands, its events
/// and the terminal `run_finished` every stream waits for, in one commit
/// (see [`rein_engine::run::close_run`]).
///
/// # Errors
///
/// The store's refusal, e.g. `StatusChanged` when `closing.expect` no
/// longer holds.
pub async fn close(
    state: &AppState,
    record: &RunRecord,
    closing: Closing,
) -> Result<rein_core::RunReport, rein_store::StoreError> {
    rein_engine::run::close_run(state.store.as_ref(), record, closing, now_ms()).await
}

/// Ends a running run from outside with `error_type` (`orphaned`,
/// `dead_letter`), `failed`; its report lists what its ledger says it did.
pub async fn fail(state: &AppState, record: &RunRecord, error_type: &str, why: String) -> bool {
    let closing = Closing {
        outcome: Outcome::Failed,
        end: End::Closed {
            error_type: Some(error_type.to_owned()),
            reason: why.clone(),
        },
        events: Vec::new(),
        expect: Some(RunStatus::Running),
    };
    match close(state, record, closing).await {
        Ok(_) => {
            tracing::warn!(run = %record.run_id, error_type, "{why}");
            true
        }
        Err(e) => {
            tracing::warn!(run = %record.run_id, "cannot close the run as {error_type}: {e}");
            false
        }
    }
}

/// One orphan scan of up to `max_runs_per_scan` running runs after
/// `cursor`: closes direct runs whose claim nobody renewed for the orphan
/// threshold. Returns how many it closed.
pub async fn scan_orphans(state: &Arc<AppState>, cursor: &mut Option<RunCursor>) -> usize {
    let settings = &state.settings.reconciliation;
    let threshold = millis(settings.orphan_threshold);
    let lease = millis(state.settings.queue.lease);
    let now = now_ms();
    let limit = usize::try_from(settings.max_runs_per_scan.get()).unwrap_or(100);
    let mut closed = 0;
    for record in running(state, cursor, limit).await {
        let Some(standing) = standing(state, &record.run_id).await else {
            continue;
        };
        // Stopped at a safe point: resumed (by a worker, or by whoever
        // stopped it), never closed as orphaned.
        if standing.enqueued
            || standing.interrupted.is_some()
            || state.engine.is_live(&record.run_id)
        {
            continue;
        }
        // The last heartbeat: when the claim was last renewed (its expiry
        // minus one lease), or the run's last change without a claim.
        let last_beat = standing.claim.as_ref().map_or(record.updated_at_ms, |c| {
            c.expires_at_ms.saturating_sub(lease)
        });
        if now.saturating_sub(last_beat) >= threshold
            && fail(
                state,
                &record,
                "orphaned",
                format!(
                    "its process stopped signalling {} s ago (threshold {} s)",
                    now.saturating_sub(last_beat) / 1000,
                    threshold / 1000
                ),
            )
            .await
        {
            closed += 1;
        }
    }
    closed
}

/// Scans for orphans every `scan_interval`, forever (while this process
/// holds the run-reconciliation singleton, when elections are in use).
pub async fn orphans_forever(state: Arc<AppState>) {
    let every = state.settings.reconciliation.scan_interval;
    let mut cursor = None;
    loop {
        state.engine.clock().sleep(every).await;
        if !crate::singleton::holds(&state, crate::singleton::RUN_RECONCILIATION, every).await {
            continue;
        }
        let closed = scan_orphans(&state, &mut cursor).await;
        if closed > 0 {
            tracing::info!(closed, "orphaned runs closed");
        }
    }
}

/// Sweeps the ledger every 30 s, forever, while this process holds the
/// ledger-reconciliation singleton: records left in doubt by a run that
/// ended or died are decided from the tools' own state, or handed off.
pub async fn ledger_forever(state: Arc<AppState>) {
    use rein_engine::reconcile::{ReconcileConfig, Reconciler, SweepClasses};
    let config = ReconcileConfig::default();
    let every = config.idempotent_every;
    let (tools, compensations) = match (
        rein_engine::bind::bind_tools(&state.registry),
        rein_engine::bind::bind_compensations(&state.registry),
    ) {
        (Ok(t), Ok(c)) => (t, c),
        (Err(e), _) | (_, Err(e)) => {
            tracing::error!("ledger reconciliation disabled: {e}");
            return;
        }
    };
    let reconciler = Reconciler::new(
        state.store.clone(),
        state.engine.clock().clone(),
        state.client.clone(),
        tools,
        compensations,
        config,
    );
    loop {
        state.engine.clock().sleep(every).await;
        if !crate::singleton::holds(&state, crate::singleton::LEDGER_RECONCILIATION, every).await {
            continue;
        }
        match reconciler.sweep(SweepClasses::ALL).await {
            Ok(report) if !report.fixed.is_empty() || !report.handed_off.is_empty() => {
                tracing::info!(
                    fixed = report.fixed.len(),
                    handed_off = report.handed_off.len(),
                    "ledger reconciled"
                );
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("ledger reconciliation failed: {e}"),
        }
    }
}

//! When this server looks for runs whose process died, and under which
//! singleton: the orphan scan every `scan_interval` and the ledger sweep.
//! What counts as an orphan or as dead-lettered work, and closing it, is
//! the engine's ([`rein_engine::recovery`]): an embedder without this
//! server closes its orphans with the same report.

use std::sync::Arc;
use std::time::SystemTime;

use rein_core::RunId;
use rein_engine::recovery::{OrphanScan, Standing};
use rein_store::{RunCursor, Timestamp};

use crate::http::state::AppState;

/// The wall-clock time now, as the store records it.
pub fn now_ms() -> Timestamp {
    Timestamp::from_system_time(SystemTime::now())
}

/// Reads what the store says of `run_id` for deciding about it (see
/// [`Standing::read`]); `None`, logged, when it cannot be read.
pub async fn standing(state: &AppState, run_id: &RunId) -> Option<Standing> {
    Standing::read(state.store.as_ref(), run_id)
        .await
        .inspect_err(|e| tracing::warn!(run = %run_id, "recovery: cannot read the run: {e}"))
        .ok()
}

/// The orphan scan `[server.reconciliation]` configures, over claims of
/// `server.queue.lease` (the engine's claim lease).
pub fn orphan_scan(state: &AppState) -> OrphanScan {
    OrphanScan::new(&state.settings.reconciliation, state.settings.queue.lease)
}

/// One orphan scan (see [`rein_engine::run::Engine::scan_orphans`]):
/// closes direct runs whose claim nobody renewed for the orphan threshold.
/// Returns how many it closed.
pub async fn scan_orphans(state: &Arc<AppState>, cursor: &mut Option<RunCursor>) -> usize {
    state.engine.scan_orphans(&orphan_scan(state), cursor).await
}

/// Scans for orphans every `scan_interval`, forever (while this process
/// holds the run-reconciliation singleton, when elections are in use).
pub async fn orphans_forever(state: Arc<AppState>) {
    let every = state.settings.reconciliation.scan_interval;
    let mut cursor = None;
    loop {
        state.engine.clock().sleep(every).await;
        if !crate::lifecycle::singleton::holds(
            &state,
            crate::lifecycle::singleton::RUN_RECONCILIATION,
            every,
        )
        .await
        {
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
        if !crate::lifecycle::singleton::holds(
            &state,
            crate::lifecycle::singleton::LEDGER_RECONCILIATION,
            every,
        )
        .await
        {
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

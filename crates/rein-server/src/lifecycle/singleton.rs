//! One owner per periodic service across every `rein serve` sharing the
//! database: a lease in the store, claimed (or renewed) before each pass.
//! A process that cannot claim it skips the pass; it acts again once it
//! wins the lease. Coordination, not a guarantee of exactly-once.
//!
//! A process claims under its engine's opaque node id, the one its run
//! claims and answers name (`rein serve` logs it beside the PID and host).

use std::time::Duration;

use crate::http::state::AppState;
use crate::lifecycle::recovery::now_ms;

/// The run-reconciliation (orphan scan) service.
pub const RUN_RECONCILIATION: &str = "run-reconciliation";
/// The ledger reconciler.
pub const LEDGER_RECONCILIATION: &str = "ledger-reconciliation";
/// The idempotency sweeper.
pub const IDEMPOTENCY_SWEEP: &str = "idempotency-sweep";

/// A won election holds for this many of the service's pass intervals
/// without renewal (each pass renews it): a holder that dies is replaced
/// within three passes.
pub const LEASE_PASSES: u32 = 3;

/// Whether this process holds (and has just renewed) the lease `name` of
/// a service that runs a pass every `every`.
pub async fn holds(state: &AppState, name: &str, every: Duration) -> bool {
    let now = now_ms();
    let lease = every.saturating_mul(LEASE_PASSES);
    let until = now.saturating_add(lease.max(Duration::from_millis(1)));
    match state
        .store
        .claim_singleton(name, state.engine.node(), now, until)
        .await
    {
        Ok(Some(_)) => true,
        Ok(None) => false,
        Err(e) => {
            tracing::warn!(
                service = name,
                "cannot claim the singleton lease: {e}; skipping this pass"
            );
            false
        }
    }
}

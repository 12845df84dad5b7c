//! Admitting a submission past its tenant's quotas ([`crate::queue::quota`]) and
//! into a run slot ([`crate::queue::slots`]): the checks `runs.rs` makes before a
//! run is queued or started.
//!
//! They run in the part of a submission an `Idempotency-Key` guards, so a
//! retry that replays a stored answer is never refused by a quota.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use rein_core::TenantId;
use rein_core::governor::Class;

use crate::http::problem::Problem;
use crate::http::state::AppState;
use crate::queue::quota::Running;
use crate::queue::slots::Slot;

/// What a sync run holds while it executes: its count against
/// `max_running` and its run slot.
pub struct Admitted {
    _running: Running,
    _slot: Slot,
}

/// The store's counts of `tenant`'s queued and running root runs.
async fn counts(state: &AppState, tenant: &TenantId) -> Result<(u64, u64), Problem> {
    let backlogs = state.store.tenant_backlogs(Some(tenant), 0).await?;
    Ok(backlogs
        .iter()
        .find(|b| &b.tenant == tenant)
        .map_or((0, 0), |b| (b.queued, b.running)))
}

/// Whether `tenant` may submit now (its submission rate).
///
/// # Errors
///
/// 429 with `Retry-After`.
pub fn rate(state: &AppState, tenant: &TenantId) -> Result<(), Problem> {
    let now = state.engine.clock().now();
    state
        .quotas
        .submit(&state.settings.quotas, tenant, now)
        .map_err(|e| e.problem())
}

/// Whether `tenant` may queue one more run: its rate and `max_queued`.
///
/// # Errors
///
/// 429 with `Retry-After`; the store's problem when it cannot count.
pub async fn queued(state: &AppState, tenant: &TenantId) -> Result<(), Problem> {
    rate(state, tenant)?;
    let quota = state.settings.quotas.of(tenant);
    if quota.max_queued.is_none() {
        return Ok(());
    }
    let (queued, _) = counts(state, tenant).await?;
    state
        .quotas
        .enqueue(quota, tenant, queued)
        .map_err(|e| e.problem())
}

/// Admits a sync run of `tenant`: its rate, `max_running`, then an
/// interactive run slot, waited for at most `wait` (the run's wall clock:
/// a slot that comes later than the run could last is no use).
///
/// # Errors
///
/// 429 with `Retry-After` over a quota; 503 `run-slots-busy` when no slot
/// came within `wait`.
pub async fn sync(
    state: &Arc<AppState>,
    tenant: &TenantId,
    wait: Duration,
) -> Result<Admitted, Problem> {
    rate(state, tenant)?;
    let quota = state.settings.quotas.of(tenant);
    let running = if quota.max_running.is_some() {
        let (_, running) = counts(state, tenant).await?;
        state.quotas.start(quota, tenant, running)
    } else {
        state.quotas.start(quota, tenant, 0)
    }
    .map_err(|e| e.problem())?;
    let clock = state.engine.clock().clone();
    let acquire = state.slots.acquire(tenant, Class::Interactive, clock.now());
    let slot = clock.timeout(wait, acquire).await.map_err(|_| {
        let mut problem = Problem::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "run-slots-busy",
            "No run slot free",
            format!(
                "every run slot of this server (server.quotas.run_slots) stayed busy for {} ms, the run's wall clock",
                wait.as_millis()
            ),
        );
        problem.retry_after = Some(1);
        problem
    })?;
    Ok(Admitted {
        _running: running,
        _slot: slot,
    })
}

//! `GET /v1/live`: the work in flight now and the capacity it uses — the
//! real-time and capacity layers of seed 000's dashboard (the trend layer
//! is [`crate::api::stats`]) — and the gateway's calls, fallbacks and
//! stream recoveries since this process started.
//!
//! # What is whose
//!
//! | member | scope | source |
//! | --- | --- | --- |
//! | `tenant` | the caller's runs, every process on the store | [`rein_store::RunStore::tenant_backlogs`], `[server.quotas]` |
//! | `process` | this process: runs it drives, run slots, queue workers, connections | the engine and the server's counters |
//! | `groups` | this process's governors: limit against use, waiters | [`rein_engine::run::Engine::group_uses`] |
//! | `gateway.calls` | the caller's gateway calls, by model and outcome, this process | `rein_model_calls_total{agent="none"}` |
//! | `gateway.fallbacks`, `gateway.recoveries` | every caller's, this process | `rein_model_fallbacks_total`, `rein_model_stream_recoveries_total` |
//!
//! # Why any tenant's key may read the process's figures
//!
//! As with [`crate::api::breakers`]: slots, governors, fallbacks and
//! recoveries are the process's health and capacity, counts with no
//! tenant's data in them (no run, input or key). What is a tenant's (its
//! runs, its gateway calls) is the caller's only. A tenant whose calls are
//! not counted under a label of its own (`[server.metrics_labels]` counts
//! it as `other` with other tenants) reads no calls, and
//! `gateway.tenant_label` is `null`: the `other` counts are several
//! tenants'. Reading never admits a label value a tenant's calls need.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rein_core::TenantId;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::auth::Tenant;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// What `GET /v1/live` answers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Live {
    /// The node answering (the one whose `process`, `groups` and `gateway`
    /// these are).
    pub node: String,
    /// When this was read, Unix milliseconds.
    pub at_ms: u64,
    /// The caller's runs on every process sharing the store.
    pub tenant: TenantLoad,
    /// This process's work and capacity.
    pub process: ProcessLoad,
    /// This process's concurrency governors (resource groups first, then
    /// providers, then models), each by name; one no call reached yet is
    /// not listed.
    pub groups: Vec<GroupLoad>,
    /// The gateway's counters in this process since it started.
    pub gateway: GatewayCounts,
}

/// The caller's runs, store-wide, against its quotas.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TenantLoad {
    /// Root runs running now.
    pub running: u64,
    /// Root runs queued now.
    pub queued: u64,
    /// When the oldest queued run was submitted, Unix milliseconds
    /// (`null` with none queued): how long the queue's head has waited.
    pub oldest_queued_ms: Option<u64>,
    /// `[server.quotas] max_running` for the tenant (`null`: no cap).
    pub max_running: Option<u32>,
    /// `[server.quotas] max_queued` for the tenant (`null`: no cap).
    pub max_queued: Option<u32>,
}

/// This process's work in flight against its capacity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProcessLoad {
    /// Runs this process drives now (roots and children, every tenant).
    pub runs_in_flight: u64,
    /// `[server.quotas] run_slots` (`null`: sync runs are not held back).
    pub run_slots: Option<u32>,
    /// Slots held by interactive (sync) runs.
    pub interactive_held: u32,
    /// Slots held by batch (queued) runs.
    pub batch_held: u32,
    /// Slots batch work never takes.
    pub interactive_reserve: u32,
    /// Queue workers started.
    pub workers: u32,
    /// Queue workers still looping (fewer than `workers`: `/readyz` fails).
    pub workers_alive: u32,
    /// Connections open now.
    pub connections: u64,
    /// `[server.limits] max_connections`.
    pub max_connections: u32,
    /// Whether the process is draining (refusing new work before it exits).
    pub draining: bool,
}

/// One concurrency governor: its limit against its use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct GroupLoad {
    /// `resource_group`, `provider` or `model` (one model's own gate,
    /// which holds its calls after a 429).
    pub kind: String,
    /// The group or provider name, or the model as `provider/model`.
    pub name: String,
    /// The concurrency limit now, where adaptive concurrency stands
    /// (`null`: no `max_concurrency`).
    pub limit: Option<u32>,
    /// This process's ceiling (its part of `max_concurrency` when shared
    /// with other nodes; `null`: none).
    pub ceiling: Option<u32>,
    /// Calls holding a slot now.
    pub in_flight: u32,
    /// Calls waiting for a slot or for the group's rate now.
    pub queued: u64,
}

/// The gateway's counters, this process, since it started.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GatewayCounts {
    /// The metric label value the caller's calls are counted under: its
    /// tenant; `null` when they are not counted apart (none yet, or
    /// `[server.metrics_labels]` counts the tenant as `other`), and then
    /// `calls` is empty.
    pub tenant_label: Option<String>,
    /// The caller's model attempts through the gateway, by model and
    /// outcome.
    pub calls: Vec<CallCount>,
    /// Calls answered by another link than their chain's first, every
    /// caller's (runs' included).
    pub fallbacks: Vec<FallbackCount>,
    /// Cut streams and what their recovery came to, every caller's.
    pub recoveries: Vec<RecoveryCount>,
}

/// Model attempts of one model with one outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CallCount {
    /// The provider.
    pub provider: String,
    /// The model.
    pub model: String,
    /// `ok`, or the failure category.
    pub outcome: String,
    /// Attempts.
    pub count: u64,
}

/// Calls whose answer came from another link than the chain's first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct FallbackCount {
    /// The chain's first link (`provider/model`).
    pub primary: String,
    /// The link that answered.
    pub answered: String,
    /// Calls.
    pub count: u64,
}

/// Cut streams of one provider with one recovery outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RecoveryCount {
    /// The provider whose stream was cut.
    pub provider: String,
    /// What the recovery came to.
    pub outcome: String,
    /// Streams.
    pub count: u64,
}

/// The work in flight now, the capacity it uses, and the gateway's
/// counters.
#[utoipa::path(
    get, path = "/v1/live", tag = "runs",
    responses((status = 200, description = "The caller's runs in flight and queued, this process's capacity and its use, and the gateway's counters", body = Live),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 503, description = "the store could not be read", body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_live(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
) -> Result<Json<Live>, Problem> {
    Ok(Json(read(&state, &tenant).await?))
}

/// What `GET /v1/live` answers `tenant`.
///
/// # Errors
///
/// When the store cannot be read.
pub async fn read(state: &AppState, tenant: &TenantId) -> Result<Live, Problem> {
    use rein_core::Clock as _;
    let engine = &state.engine;
    let backlog = state
        .store
        .tenant_backlogs(Some(tenant), 1)
        .await?
        .into_iter()
        .find(|b| &b.tenant == tenant);
    let quota = state.settings.quotas.of(tenant);
    let tenant_load = TenantLoad {
        running: backlog.as_ref().map_or(0, |b| b.running),
        queued: backlog.as_ref().map_or(0, |b| b.queued),
        oldest_queued_ms: backlog
            .as_ref()
            .and_then(|b| b.oldest.first())
            .map(|run| run.created_at_ms.as_millis()),
        max_running: quota.max_running.map(|n| n.get()),
        max_queued: quota.max_queued.map(|n| n.get()),
    };
    let slots = state.settings.quotas.run_slots;
    let (interactive_held, batch_held) = state.slots.held();
    let runs_in_flight = *engine.live_count().borrow();
    let process = ProcessLoad {
        runs_in_flight: u64::try_from(runs_in_flight).unwrap_or(u64::MAX),
        run_slots: slots.map(|s| s.total.get()),
        interactive_held,
        batch_held,
        interactive_reserve: slots.map_or(0, |s| s.interactive_reserve),
        workers: u32::try_from(crate::queue::floor::loops(state.workers)).unwrap_or(u32::MAX),
        workers_alive: u32::try_from(state.health.workers_alive()).unwrap_or(u32::MAX),
        connections: state.connections.open(),
        max_connections: state.settings.limits.max_connections.get(),
        draining: state.drain.is_draining(),
    };
    let groups = engine
        .group_uses()
        .into_iter()
        .map(|g| GroupLoad {
            kind: g.kind.as_str().to_owned(),
            name: g.name,
            limit: g.limit,
            ceiling: g.ceiling,
            in_flight: g.in_flight,
            queued: u64::try_from(g.queued).unwrap_or(u64::MAX),
        })
        .collect();
    Ok(Live {
        node: engine.node().to_owned(),
        at_ms: engine.clock().timestamp().as_millis(),
        tenant: tenant_load,
        process,
        groups,
        gateway: gateway_counts(engine.metrics(), tenant),
    })
}

/// The gateway's counters of `metrics` for `tenant`.
fn gateway_counts(metrics: &rein_engine::metrics::Metrics, tenant: &TenantId) -> GatewayCounts {
    use rein_engine::metrics::NONE;
    let tenant_label = metrics.own_tenant_label(tenant.as_str());
    let own = match &tenant_label {
        Some(label) => metrics.samples(
            "rein_model_calls_total",
            &[("tenant", label), ("agent", NONE)],
        ),
        None => Vec::new(),
    };
    let mut calls: Vec<CallCount> = own
        .into_iter()
        .map(|s| CallCount {
            provider: s.label("provider").to_owned(),
            model: s.label("model").to_owned(),
            outcome: s.label("outcome").to_owned(),
            count: s.count(),
        })
        .filter(|c| c.count > 0)
        .collect();
    calls.sort_by(|a, b| {
        (&a.provider, &a.model, &a.outcome).cmp(&(&b.provider, &b.model, &b.outcome))
    });
    let mut fallbacks: Vec<FallbackCount> = metrics
        .samples("rein_model_fallbacks_total", &[])
        .into_iter()
        .map(|s| FallbackCount {
            primary: s.label("primary").to_owned(),
            answered: s.label("answered").to_owned(),
            count: s.count(),
        })
        .filter(|c| c.count > 0)
        .collect();
    fallbacks.sort_by(|a, b| (&a.primary, &a.answered).cmp(&(&b.primary, &b.answered)));
    let mut recoveries: Vec<RecoveryCount> = metrics
        .samples("rein_model_stream_recoveries_total", &[])
        .into_iter()
        .map(|s| RecoveryCount {
            provider: s.label("provider").to_owned(),
            outcome: s.label("outcome").to_owned(),
            count: s.count(),
        })
        .filter(|c| c.count > 0)
        .collect();
    recoveries.sort_by(|a, b| (&a.provider, &a.outcome).cmp(&(&b.provider, &b.outcome)));
    GatewayCounts {
        tenant_label,
        calls,
        fallbacks,
        recoveries,
    }
}

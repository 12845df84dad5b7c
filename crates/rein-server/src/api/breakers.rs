//! `GET /v1/breakers`: the breaker arms this process knows and the openings
//! shared through the store.
//!
//! # Why both
//!
//! A process refuses a call when its own arm is open *or* when another
//! process sharing the database published an opening of that arm
//! ([`rein_store::BreakerOpening`]). An operator asking "why is this
//! provider not called" needs both: the local arms (state, since when,
//! failures counted so far, how long an open arm still refuses) and the
//! shared openings still in force, with the node that published each.
//!
//! # Why any tenant's key may read it
//!
//! Arms are process-wide health memory of providers, tools and groups the
//! config names, not any tenant's data: a run of one tenant opening a
//! provider's arm refuses the calls of all. So the route needs a valid key,
//! like every `/v1` route, and answers every tenant the same.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rein_core::Clock as _;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::auth::Tenant;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// One breaker arm of this process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ArmState {
    /// `provider`, `tool`, `resource_group` or `cost`.
    pub kind: String,
    /// The provider, tool, group or account it guards.
    pub name: String,
    /// `closed`, `open` or `half_open`.
    pub state: String,
    /// When it opened or half-opened, Unix milliseconds (`null` while
    /// closed).
    pub since_ms: Option<u64>,
    /// How long an open arm still refuses calls, in milliseconds (`null`
    /// unless open; 0 when the next call will probe).
    pub retry_after_ms: Option<u64>,
    /// Counted consecutive failures of a closed arm (`null` unless closed).
    pub consecutive_failures: Option<u32>,
}

/// An opening another process (or this one) published through the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SharedOpening {
    /// The arm (`provider.openai`).
    pub arm: String,
    /// Calls are refused until this time, Unix milliseconds (exclusive).
    pub open_until_ms: u64,
    /// The node that published it.
    pub opened_by: String,
    /// Why it opened, for humans.
    pub reason: String,
    /// When it was published, Unix milliseconds.
    pub updated_at_ms: u64,
}

/// What `GET /v1/breakers` answers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BreakerList {
    /// This process's node id (the `opened_by` of its own openings).
    pub node: String,
    /// Its arms, by kind then name; an arm no call reached is not listed.
    pub arms: Vec<ArmState>,
    /// The shared openings still in force, by arm.
    pub shared: Vec<SharedOpening>,
}

/// The breaker arms of this process and the shared openings in force.
#[utoipa::path(
    get, path = "/v1/breakers", tag = "runs",
    responses((status = 200, description = "This process's breaker arms and the shared openings in force", body = BreakerList),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 503, description = "the store could not be read", body = Problem)),
    security(("bearer" = []))
)]
pub async fn list_breakers(
    State(state): State<Arc<AppState>>,
    Tenant(_tenant): Tenant,
) -> Result<Json<BreakerList>, Problem> {
    let engine = &state.engine;
    let arms = engine
        .breaker_arms()
        .into_iter()
        .map(|arm| ArmState {
            kind: arm.kind.to_owned(),
            name: arm.name,
            state: arm.state.as_str().to_owned(),
            since_ms: arm.since_ms,
            retry_after_ms: arm.retry_after_ms,
            consecutive_failures: arm.consecutive_failures,
        })
        .collect();
    let now_ms = engine.clock().timestamp();
    let shared = state
        .store
        .breaker_openings(now_ms)
        .await?
        .into_iter()
        .map(|o| SharedOpening {
            arm: o.arm,
            open_until_ms: o.open_until_ms.as_millis(),
            opened_by: o.opened_by,
            reason: o.reason,
            updated_at_ms: o.updated_at_ms.as_millis(),
        })
        .collect();
    Ok(Json(BreakerList {
        node: engine.node().to_owned(),
        arms,
        shared,
    }))
}

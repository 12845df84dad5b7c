//! Webhooks over HTTP: the configured webhooks (`GET /v1/webhooks`), each
//! one's delivery log (`GET /v1/webhooks/{name}/deliveries`), and the
//! dispatcher loop that sends the outbox (see `rein_engine::webhook`).
//!
//! # Why one dispatcher per store
//!
//! Every node shares the outbox; the loop passes only while this process
//! holds the [`WEBHOOK_DISPATCH`] singleton, so deliveries are not sent
//! by several nodes racing on their claims (the claims still keep a node
//! that lost the singleton mid-send from sending one twice at once). Each
//! delivery is sent on a task of its own, up to [`MAX_IN_FLIGHT`], so a
//! receiver that hangs holds its deliveries until their timeout and
//! nothing else: not the other webhooks, not the loop, never a run.
//!
//! # Why a tenant sees only its runs' deliveries
//!
//! Webhooks are the operator's (the config's), but each delivery is of one
//! run's event: a key of one tenant is not told another tenant's run ids.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use rein_core::registry::WebhookSpec;
use rein_engine::webhook::Dispatcher;
use rein_store::WebhookDelivery;
use rein_store::webhook::MAX_WEBHOOK_PAGE;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use utoipa::ToSchema;

use crate::http::auth::Tenant;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// The singleton of the dispatcher.
pub const WEBHOOK_DISPATCH: &str = "webhook-dispatch";

/// How often the dispatcher looks for new events and due deliveries.
pub const DISPATCH_EVERY: Duration = Duration::from_secs(1);

/// Deliveries in flight at once, across webhooks.
pub const MAX_IN_FLIGHT: usize = 64;

/// Passes between two prunes of the outbox (about a minute).
pub const PRUNE_EVERY_PASSES: u32 = 60;

/// Deliveries per listing when `limit` is not given.
pub const DEFAULT_LIMIT: usize = 100;

/// Routes new outbox events and sends due deliveries every
/// [`DISPATCH_EVERY`] while this process holds [`WEBHOOK_DISPATCH`].
pub async fn dispatch_forever(state: Arc<AppState>, dispatcher: Dispatcher) {
    let mut in_flight: JoinSet<()> = JoinSet::new();
    let mut passes: u32 = 0;
    loop {
        state.engine.clock().sleep(DISPATCH_EVERY).await;
        while in_flight.try_join_next().is_some() {}
        if !crate::lifecycle::singleton::holds(&state, WEBHOOK_DISPATCH, DISPATCH_EVERY).await {
            continue;
        }
        passes = passes.wrapping_add(1);
        if passes % PRUNE_EVERY_PASSES == 0
            && let Err(e) = dispatcher.prune(MAX_WEBHOOK_PAGE).await
        {
            tracing::warn!("webhooks: cannot prune the outbox: {e}");
        }
        if let Err(e) = dispatcher.route(MAX_WEBHOOK_PAGE).await {
            tracing::warn!("webhooks: cannot route new events: {e}");
        }
        let room = MAX_IN_FLIGHT.saturating_sub(in_flight.len());
        match dispatcher.claim(room).await {
            Ok(due) => {
                for delivery in due {
                    let dispatcher = dispatcher.clone();
                    in_flight.spawn(async move {
                        let (webhook, event) = (
                            delivery.delivery.webhook.clone(),
                            delivery.delivery.event_id.clone(),
                        );
                        if let Err(e) = dispatcher.deliver(delivery).await {
                            tracing::warn!(%webhook, %event, "webhooks: cannot record an attempt (it is sent again once its claim runs out): {e}");
                        }
                    });
                }
            }
            Err(e) => tracing::warn!("webhooks: cannot claim due deliveries: {e}"),
        }
    }
}

/// A configured webhook, as listed (its secret never: only the variable
/// that holds it).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WebhookView {
    /// Its name.
    pub name: String,
    /// Where it is POSTed, without its query string (which may hold a
    /// token).
    pub url: String,
    /// The events sent.
    pub events: Vec<String>,
    /// `run_finished` only for these outcomes; absent for all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcomes: Option<Vec<String>>,
    /// The variable holding the signing secret.
    pub secret_env: String,
    /// How long an event may still be delivered, ms.
    pub max_age_ms: u64,
    /// How long one POST may take, ms.
    pub timeout_ms: u64,
}

impl WebhookView {
    /// The view of `spec`.
    pub fn of(spec: &WebhookSpec) -> WebhookView {
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        WebhookView {
            name: spec.name.clone(),
            url: spec
                .url
                .split(['?', '#'])
                .next()
                .unwrap_or_default()
                .to_owned(),
            events: spec.topics.iter().map(|t| t.as_str().to_owned()).collect(),
            outcomes: spec
                .outcomes
                .as_ref()
                .map(|only| only.iter().map(|o| o.as_str().to_owned()).collect()),
            secret_env: spec.secret_env.clone(),
            max_age_ms: millis(spec.max_age),
            timeout_ms: millis(spec.timeout),
        }
    }
}

/// What `GET /v1/webhooks` answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct WebhookList {
    /// The configured webhooks, by name.
    pub webhooks: Vec<WebhookView>,
}

/// What `GET /v1/webhooks/{name}/deliveries` answers.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DeliveryList {
    /// The webhook.
    pub webhook: String,
    /// Its deliveries, newest event first: `event_id`, `topic`, `run_id`,
    /// `state` (`pending`, `delivered`, `given_up`), `attempts`,
    /// `created_at_ms`, `next_attempt_at_ms`, `last_attempt_at_ms`,
    /// `last_status`, `last_error`.
    #[schema(value_type = Vec<Object>)]
    pub deliveries: Vec<WebhookDelivery>,
}

/// The configured webhooks.
#[utoipa::path(
    get, path = "/v1/webhooks", tag = "webhooks",
    responses((status = 200, description = "The configured webhooks, by name", body = WebhookList),
              (status = 401, description = "missing or invalid API key", body = Problem)),
    security(("bearer" = []))
)]
pub async fn list_webhooks(
    State(state): State<Arc<AppState>>,
    Tenant(_tenant): Tenant,
) -> Json<WebhookList> {
    Json(WebhookList {
        webhooks: state
            .registry
            .webhooks()
            .values()
            .map(WebhookView::of)
            .collect(),
    })
}

/// The query of `GET /v1/webhooks/{name}/deliveries`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryQuery {
    /// At most this many (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// A webhook's delivery log: the deliveries of the caller's tenant's runs.
#[utoipa::path(
    get, path = "/v1/webhooks/{name}/deliveries", tag = "webhooks",
    params(("name" = String, Path, description = "The webhook"), DeliveryQuery),
    responses((status = 200, description = "Its deliveries, newest event first", body = DeliveryList),
              (status = 400, description = "a parameter unknown, repeated or out of range (`parameter` names it)", body = Problem),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 404, description = "no webhook of that name is configured", body = Problem),
              (status = 503, description = "the store could not be read", body = Problem)),
    security(("bearer" = []))
)]
pub async fn list_deliveries(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(name): Path<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Result<Json<DeliveryList>, Problem> {
    let Query(pairs) = query.map_err(|e| Problem::bad_request(format!("invalid query: {e}")))?;
    let limit = parse_limit(&pairs)?;
    if !state.registry.webhooks().contains_key(&name) {
        return Err(Problem::not_found(format!(
            "no webhook `{name}` is configured"
        )));
    }
    let listed = state.store.webhook_deliveries(&name, limit).await?;
    // Each run's tenant, read once per run.
    let mut ours = BTreeSet::new();
    let mut theirs = BTreeSet::new();
    let mut deliveries = Vec::with_capacity(listed.len());
    for delivery in listed {
        let mine = if ours.contains(&delivery.run_id) {
            true
        } else if theirs.contains(&delivery.run_id) {
            false
        } else {
            let run = state.store.get_run(&delivery.run_id).await?;
            let mine = run.is_some_and(|run| run.tenant == tenant);
            if mine {
                ours.insert(delivery.run_id.clone());
            } else {
                theirs.insert(delivery.run_id.clone());
            }
            mine
        };
        if mine {
            deliveries.push(delivery);
        }
    }
    Ok(Json(DeliveryList {
        webhook: name,
        deliveries,
    }))
}

fn parse_limit(pairs: &[(String, String)]) -> Result<usize, Problem> {
    crate::http::query::once(pairs)?;
    let mut limit = DEFAULT_LIMIT;
    for (name, value) in pairs {
        match name.as_str() {
            "limit" => limit = crate::http::query::limit(value, MAX_WEBHOOK_PAGE)?,
            other => return Err(crate::http::query::unknown(other, "limit")),
        }
    }
    Ok(limit)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rein_core::webhook::Topic;

    #[test]
    fn a_listed_webhook_shows_the_variable_not_the_secret_and_no_query_string() {
        let spec = WebhookSpec::new(
            "ops",
            "https://hooks.example.com/rein?token=abc",
            [Topic::RunFinished],
            "HOOK_SECRET",
        );
        let view = WebhookView::of(&spec);
        assert_eq!(view.url, "https://hooks.example.com/rein");
        assert_eq!(view.secret_env, "HOOK_SECRET");
        assert_eq!(view.events, ["run_finished"]);
    }

    #[test]
    fn the_limit_is_checked() {
        let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
            v.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect()
        };
        assert_eq!(parse_limit(&[]).unwrap(), DEFAULT_LIMIT);
        assert_eq!(parse_limit(&pairs(&[("limit", "5")])).unwrap(), 5);
        assert!(parse_limit(&pairs(&[("limit", "0")])).is_err());
        assert!(parse_limit(&pairs(&[("since", "1")])).is_err());
    }
}

//! Per-key budgets at the gateway's door ([`admit`]), and the spend each
//! answered call adds to its key ([`Spender`]).
//!
//! # Why at the door
//!
//! A key over its budget is refused before any model is asked: 429 with
//! `Retry-After` until its period ends (the next UTC midnight, or the first
//! of next month), in the wire format's error shape. The limits are
//! summed from the store ([`rein_store::SpendStore`]), so every process
//! serving it refuses the same key at the same spend.
//!
//! # What is charged
//!
//! Each attempt's `model_call_finished` says what the provider reported (or
//! what a failed attempt received): its tokens and their cost at the
//! configured price are added to the key, the model that answered and the
//! day. A whole answer is charged before it is returned, so the next call
//! with the key sees it; a stream when it ends.

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use rein_core::deadline::Cost;
use rein_core::registry::{Spent, day_of, month_start};
use rein_core::{EventData, TenantId};
use rein_engine::run::Observer;
use rein_store::{SpendDelta, SpendQuery, Store};
use serde_json::json;

use crate::auth::Caller;
use crate::problem::Problem;
use crate::recovery::now_ms;
use crate::state::AppState;

/// Refuses `caller` when its key has reached a limit of its budget; else
/// what records its spend (`None` without keys: the loopback mode has no
/// key to charge).
///
/// # Errors
///
/// The 429 problem of a reached limit; the store's error when the spend
/// cannot be read (a budget that cannot be checked is not waved through).
pub async fn admit(state: &AppState, caller: &Caller) -> Result<Option<Spender>, Problem> {
    let Some((key, budget)) = caller.key.clone().zip(caller.budget) else {
        return Ok(None);
    };
    let now = now_ms().as_millis();
    let today = day_of(now);
    if budget.is_limited() {
        let spent = spent(state.store.as_ref(), &caller.tenant, &key, today).await?;
        if let Some(reached) = budget.reached(&spent, today) {
            let resets_ms = u64::from(reached.resets_on).saturating_mul(86_400_000);
            let retry = u32::try_from(resets_ms.saturating_sub(now).div_ceil(1000))
                .unwrap_or(u32::MAX)
                .max(1);
            tracing::warn!(
                tenant = %caller.tenant,
                key = %key,
                period = reached.period.as_str(),
                dimension = reached.dimension,
                limit = %reached.limit,
                spent = %reached.spent,
                retry_after_s = retry,
                "key_budget_exceeded"
            );
            let message = format!(
                "key `{key}` has spent {} of its {} per {}; it may spend again in {retry} s \
                 (the {} ends at UTC midnight{})",
                reached.spent,
                reached.limit,
                reached.period.as_str(),
                reached.period.as_str(),
                match reached.period {
                    rein_core::registry::Period::Day => "",
                    rein_core::registry::Period::Month => " of its last day",
                }
            );
            let mut problem = Problem::new(
                StatusCode::TOO_MANY_REQUESTS,
                "key-budget-exceeded",
                "Key budget exceeded",
                message.clone(),
            )
            .with(json!({
                "key": key,
                "period": reached.period.as_str(),
                "dimension": reached.dimension,
                "limit": reached.limit,
                "spent": reached.spent,
                "retry_after_s": retry,
                "error": {"message": message, "type": "insufficient_quota",
                          "param": null, "code": "key_budget_exceeded"},
            }));
            problem.retry_after = Some(retry);
            return Err(problem);
        }
    }
    Ok(Some(Spender {
        store: state.store.clone(),
        tenant: caller.tenant.clone(),
        key,
        pending: Arc::default(),
    }))
}

/// What `key` spent today and this month, from the store.
async fn spent(
    store: &dyn Store,
    tenant: &TenantId,
    key: &str,
    today: u32,
) -> Result<Spent, Problem> {
    let rows = store
        .spend(&SpendQuery {
            tenant: Some(tenant.clone()),
            key: Some(key.to_owned()),
            from_day: month_start(today),
            until_day: today.saturating_add(1),
        })
        .await?;
    let mut spent = Spent::default();
    for row in rows {
        let cost = Cost::from_micros(row.cost_micros);
        spent.month_tokens = spent.month_tokens.saturating_add(row.tokens);
        spent.month_cost = spent.month_cost.saturating_add(cost);
        if row.day == today {
            spent.day_tokens = spent.day_tokens.saturating_add(row.tokens);
            spent.day_cost = spent.day_cost.saturating_add(cost);
        }
    }
    Ok(spent)
}

/// Charges one gateway call's attempts to its key.
pub struct Spender {
    store: Arc<dyn Store>,
    tenant: TenantId,
    key: String,
    /// Spend seen but not yet written (a whole answer's, written by
    /// [`Spender::flush`] before it is returned).
    pending: Arc<Mutex<Vec<SpendDelta>>>,
}

impl Spender {
    /// The observer of the call's events that charges each finished
    /// attempt: kept for [`Spender::flush`], or for a `streamed` answer
    /// (whose last attempt ends after the response began) written at once
    /// in the background.
    pub fn observer(&self, streamed: bool) -> Observer {
        let (store, tenant, key) = (self.store.clone(), self.tenant.clone(), self.key.clone());
        let pending = self.pending.clone();
        Arc::new(move |event| {
            let EventData::ModelCallFinished(finished) = &event.data else {
                return;
            };
            let tokens = finished.tokens();
            let cost = finished.cost.unwrap_or_default().micros();
            if tokens == 0 && cost == 0 {
                return;
            }
            let delta = SpendDelta {
                tenant: tenant.clone(),
                key: key.clone(),
                model: format!("{}/{}", finished.provider, finished.model),
                day: day_of(event.at_ms.as_millis()),
                tokens,
                cost_micros: cost,
            };
            if streamed {
                let store = store.clone();
                tokio::spawn(async move { write(store.as_ref(), vec![delta]).await });
            } else {
                pending
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push(delta);
            }
        })
    }

    /// Writes what the call's attempts spent.
    pub async fn flush(&self) {
        let deltas = std::mem::take(
            &mut *self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        write(self.store.as_ref(), deltas).await;
    }
}

/// Adds `deltas`; a failure is logged, not the caller's (the answer is
/// already theirs), and the key's next check reads what was written.
async fn write(store: &dyn Store, deltas: Vec<SpendDelta>) {
    if deltas.is_empty() {
        return;
    }
    if let Err(e) = store.add_spend(&deltas).await {
        tracing::warn!(
            key = %deltas[0].key,
            "cannot record the spend of a gateway call: {e}"
        );
    }
}

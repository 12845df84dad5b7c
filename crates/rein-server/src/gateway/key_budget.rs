//! Per-key and per-tenant budgets at the gateway's door ([`admit`]), and
//! the spend each answered call adds to its key ([`Spender`]).
//!
//! # Why at the door
//!
//! A key over its budget (`[server.api_keys.budget]`), or a key of a
//! tenant whose keys together are over the tenant's
//! (`[server.quotas.budget]`, `[server.quotas.tenants.ID.budget]`), is
//! refused before any model is asked: 429 with
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
//! day. A budgeted key's whole answer is charged before it is returned, so
//! the next call with the key sees it on any process; a stream when it
//! ends. A key that no budget limits (nor its tenant's) is charged the
//! same amounts, written behind ([`crate::gateway::spend_book`]): nothing waits on
//! the store for spend that no limit reads.

use std::sync::{Arc, Mutex};

use axum::http::StatusCode;
use rein_core::deadline::Cost;
use rein_core::registry::{Reached, Spent, day_of, month_start};
use rein_core::{EventData, TenantId};
use rein_engine::run::Observer;
use rein_store::{SpendDelta, SpendQuery, SpendRow, Store};
use serde_json::json;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::http::auth::Caller;
use crate::http::problem::Problem;
use crate::http::state::AppState;
use crate::lifecycle::recovery::now_ms;

/// The key label spend is recorded under in the keyless loopback mode.
pub const KEYLESS_KEY: &str = "loopback";

/// A key's labels: its tenant and its configured name (a bounded set: the
/// keys of `[[server.api_keys]]`, and [`KEYLESS_KEY`]).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KeyLabels {
    tenant: String,
    key: String,
}

/// A refusal's labels: whose budget (`key` or `tenant`), which period.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RefusalLabels {
    tenant: String,
    key: String,
    scope: String,
    period: String,
}

/// What the gateway's keys spent and how often a budget refused them, on
/// `/metrics`: the store's spend answers "how much this month", these
/// answer "how fast, right now" and alert on refusals.
#[derive(Debug, Clone)]
pub struct BudgetMetrics {
    tokens: Family<KeyLabels, Counter>,
    cost: Family<KeyLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    refusals: Family<RefusalLabels, Counter>,
}

impl BudgetMetrics {
    /// Registers them in `metrics` (once per process).
    pub fn register(metrics: &rein_engine::metrics::Metrics) -> Self {
        let this = BudgetMetrics {
            tokens: Family::default(),
            cost: Family::default(),
            refusals: Family::default(),
        };
        metrics.register(
            "rein_gateway_key_tokens",
            "Tokens the gateway's calls spent, by tenant and API key (as charged to the key's budget: what the provider reported, or what a failed attempt received)",
            this.tokens.clone(),
        );
        metrics.register(
            "rein_gateway_key_cost_usd",
            "What the gateway's calls cost at the configured prices, in US dollars, by tenant and API key",
            this.cost.clone(),
        );
        metrics.register(
            "rein_gateway_budget_refusals",
            "Gateway calls refused with 429 because a budget was spent, by tenant, key, whose budget (key or tenant) and period (day or month)",
            this.refusals.clone(),
        );
        this
    }

    /// Counts `delta` under the key's `labels`.
    fn spent(&self, labels: &KeyLabels, delta: &SpendDelta) {
        self.tokens.get_or_create(labels).inc_by(delta.tokens);
        self.cost
            .get_or_create(labels)
            .inc_by(Cost::from_micros(delta.cost_micros).usd());
    }

    fn refused(&self, tenant: &str, key: &str, scope: Scope, reached: &Reached) {
        self.refusals
            .get_or_create(&RefusalLabels {
                tenant: tenant.to_owned(),
                key: key.to_owned(),
                scope: scope.as_str().to_owned(),
                period: reached.period.as_str().to_owned(),
            })
            .inc();
    }
}

/// Refuses `caller` when its key, or its tenant's keys together, have
/// reached a limit of their budget (`[server.api_keys.budget]`,
/// `[server.quotas.budget]`); else what records its spend.
///
/// # Errors
///
/// The 429 problem of a reached limit; the store's error when the spend
/// cannot be read (a budget that cannot be checked is not waved through).
pub async fn admit(state: &AppState, caller: &Caller) -> Result<Spender, Problem> {
    let key = caller.key.clone().unwrap_or_else(|| KEYLESS_KEY.to_owned());
    let tenant_label = state
        .engine
        .metrics()
        .scope(caller.tenant.as_str(), rein_engine::metrics::NONE)
        .tenant;
    // A tenant its bounds fold into `other` keeps its keys' names off
    // `/metrics` too.
    let key_label = if tenant_label == rein_engine::metrics::OTHER {
        rein_engine::metrics::OTHER.to_owned()
    } else {
        key.clone()
    };
    let key_budget = caller.budget.unwrap_or_default();
    let tenant_budget = state.settings.quotas.of(&caller.tenant).budget;
    if key_budget.is_limited() || tenant_budget.is_limited() {
        let now = now_ms().as_millis();
        let today = day_of(now);
        let rows = state
            .store
            .spend(&SpendQuery {
                tenant: Some(caller.tenant.clone()),
                key: (!tenant_budget.is_limited()).then(|| key.clone()),
                from_day: month_start(today),
                until_day: today.saturating_add(1),
            })
            .await?;
        let of_key = spent(rows.iter().filter(|r| r.key == key), today);
        let of_tenant = spent(rows.iter(), today);
        let reached = key_budget
            .reached(&of_key, today)
            .map(|r| (Scope::Key, r))
            .or_else(|| {
                tenant_budget
                    .reached(&of_tenant, today)
                    .map(|r| (Scope::Tenant, r))
            });
        if let Some((scope, reached)) = reached {
            state
                .budgets
                .refused(&tenant_label, &key_label, scope, &reached);
            return Err(refusal(caller, &key, scope, &reached, now));
        }
    }
    // Spend no limit reads is written behind (crate::gateway::spend_book), where
    // the server runs the book's flusher.
    let book =
        (!key_budget.is_limited() && !tenant_budget.is_limited() && state.spend.is_flushed())
            .then(|| state.spend.clone());
    Ok(Spender {
        store: state.store.clone(),
        book,
        metrics: state.budgets.clone(),
        labels: KeyLabels {
            tenant: tenant_label,
            key: key_label,
        },
        tenant: caller.tenant.clone(),
        key,
        pending: Arc::default(),
    })
}

/// Whose budget a refusal is of.
#[derive(Debug, Clone, Copy)]
enum Scope {
    Key,
    Tenant,
}

impl Scope {
    fn as_str(self) -> &'static str {
        match self {
            Scope::Key => "key",
            Scope::Tenant => "tenant",
        }
    }
}

/// The 429 of a reached limit, in words and members.
fn refusal(caller: &Caller, key: &str, scope: Scope, reached: &Reached, now: u64) -> Problem {
    let resets_ms = u64::from(reached.resets_on).saturating_mul(86_400_000);
    let retry = u32::try_from(resets_ms.saturating_sub(now).div_ceil(1000))
        .unwrap_or(u32::MAX)
        .max(1);
    let (whose, code) = match scope {
        Scope::Key => (format!("key `{key}`"), "key_budget_exceeded"),
        Scope::Tenant => (
            format!("tenant `{}` (all its keys)", caller.tenant),
            "tenant_budget_exceeded",
        ),
    };
    tracing::warn!(
        tenant = %caller.tenant,
        key = %key,
        budget = code,
        period = reached.period.as_str(),
        dimension = reached.dimension,
        limit = %reached.limit,
        spent = %reached.spent,
        retry_after_s = retry,
        "budget_exceeded"
    );
    let message = format!(
        "{whose} has spent {} of its {} per {} through the gateway; it may spend again in \
         {retry} s, when the {} ends (UTC)",
        reached.spent,
        reached.limit,
        reached.period.as_str(),
        reached.period.as_str(),
    );
    let mut problem = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        &code.replace('_', "-"),
        "Budget exceeded",
        message.clone(),
    )
    .with(json!({
        "key": key,
        "tenant": caller.tenant.as_str(),
        "period": reached.period.as_str(),
        "dimension": reached.dimension,
        "limit": reached.limit,
        "spent": reached.spent,
        "retry_after_s": retry,
        "error": {"message": message, "type": "insufficient_quota",
                  "param": null, "code": code},
    }));
    problem.retry_after = Some(retry);
    problem
}

/// What `rows` (one tenant's, of this month) spent today and this month.
fn spent<'r>(rows: impl Iterator<Item = &'r SpendRow>, today: u32) -> Spent {
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
    spent
}

/// Charges one gateway call's attempts to its key.
pub struct Spender {
    store: Arc<dyn Store>,
    metrics: BudgetMetrics,
    /// The key's labels on `/metrics` (its tenant bounded by
    /// `[server.metrics_labels]`; `other` beyond, its key too).
    labels: KeyLabels,
    tenant: TenantId,
    key: String,
    /// Spend seen but not yet written (a whole answer's, written by
    /// [`Spender::flush`] before it is returned).
    pending: Arc<Mutex<Vec<SpendDelta>>>,
    /// Where the spend goes when no budget limits the key or its tenant:
    /// written behind, not before the answer.
    book: Option<Arc<crate::gateway::spend_book::SpendBook>>,
}

impl Spender {
    /// The observer of the call's events that charges each finished
    /// attempt: kept for [`Spender::flush`], or for a `streamed` answer
    /// (whose last attempt ends after the response began) written at once
    /// in the background.
    pub fn observer(&self, streamed: bool) -> Observer {
        let (store, tenant, key) = (self.store.clone(), self.tenant.clone(), self.key.clone());
        let (pending, metrics) = (self.pending.clone(), self.metrics.clone());
        let labels = self.labels.clone();
        let book = self.book.clone();
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
            metrics.spent(&labels, &delta);
            if let Some(book) = &book {
                book.charge([delta]);
            } else if streamed {
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
        match &self.book {
            Some(book) => book.charge(deltas),
            None => write(self.store.as_ref(), deltas).await,
        }
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

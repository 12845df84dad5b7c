//! Where `rein runs` and `rein stats` read: a store file directly, or a `rein serve`.
//!
//! # Why both
//!
//! A killed `rein run` leaves its run in the file it wrote, with no server
//! anywhere; an operator of a shared deployment has a server and an API
//! key, not the database. Both answer the same four questions, in the
//! same types, so every command renders one way whatever it read.

use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use rein_core::approval::{Approval, Decision};
use rein_core::{Event, LedgerRecord, RunId, RunReport, TenantId};
use rein_server::api::approvals::ApprovalList;
use rein_server::api::listing::{RunList, RunSummary};
use rein_server::api::stats::Stats;
use rein_store::{RunCursor, RunFilter, Store};
use rein_store_sqlite::SqliteStore;
use serde_json::Value;

/// A run as `rein runs show` prints it.
#[derive(Debug, Clone)]
pub struct RunDetail {
    /// Its summary (the listing's row).
    pub summary: RunSummary,
    /// Its child runs.
    pub children: Vec<String>,
    /// Its report, once it ended.
    pub report: Option<RunReport>,
    /// The budget it runs under, when it is known.
    pub limits: Option<rein_core::deadline::BudgetLimits>,
    /// The digest of what its model was shown at its start (system prompt
    /// and tool definitions), from its `run_started`.
    pub contract: Option<String>,
    /// The config it recorded when it started (an absolute path), from its
    /// `run_started`: what `rein resume RUN` resumes it with.
    pub config: Option<String>,
}

/// A source of runs.
pub enum Source {
    /// The store file, read directly: every tenant's runs.
    Store {
        /// The store.
        store: Arc<dyn Store>,
        /// Its path, for messages.
        path: String,
    },
    /// A `rein serve`: the runs of the API key's tenant.
    Server {
        /// One client for every request.
        client: reqwest::Client,
        /// The server's base URL, without a trailing slash.
        base: String,
        /// The bearer key, if any (never printed).
        key: Option<String>,
    },
}

impl Source {
    /// The store at `path`.
    ///
    /// # Errors
    ///
    /// When there is no file at `path` (reading must not create an empty
    /// store where a path was mistyped), or it is not a store.
    pub fn open_store(path: &std::path::Path) -> Result<Source> {
        if let crate::store::Data::Postgres(_) = crate::store::Data::parse(path)? {
            return Ok(Source::Store {
                store: crate::store::open_existing(path)?,
                path: crate::store::shown(path),
            });
        }
        if !path.is_file() {
            bail!(
                "no run store at {} (pass the file `rein run` or `rein serve` wrote with --data, or a server with --server)",
                path.display()
            );
        }
        let store = SqliteStore::open(path)
            .with_context(|| format!("cannot open the run store {}", path.display()))?;
        Ok(Source::Store {
            store: Arc::new(store),
            path: path.display().to_string(),
        })
    }

    /// The server at `base`, with `key`.
    pub fn server(base: &str, key: Option<String>) -> Result<Source> {
        let client = rein_engine::run::http_client().context("cannot build the HTTP client")?;
        let base = base.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!("--server must be an http:// or https:// URL, but it is {base:?}");
        }
        Ok(Source::Server { client, base, key })
    }

    /// GETs `path` (with its query) from the server and reads its JSON,
    /// or says what the server answered.
    async fn get(
        client: &reqwest::Client,
        base: &str,
        key: Option<&str>,
        path: &str,
    ) -> Result<Value> {
        Source::send(client.get(format!("{base}{path}")), base, key).await
    }

    /// Sends `request` to the server at `base` with `key` and reads its
    /// JSON, or says what the server answered (a problem's `detail`).
    pub(crate) async fn send(
        mut request: reqwest::RequestBuilder,
        base: &str,
        key: Option<&str>,
    ) -> Result<Value> {
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("cannot reach {base}"))?;
        let status = response.status();
        let body = response
            .bytes()
            .await
            .with_context(|| format!("{base} did not finish its answer"))?;
        let value: Value = serde_json::from_slice(&body)
            .with_context(|| format!("{base} answered {status} with a body that is not JSON"))?;
        if status.is_success() {
            return Ok(value);
        }
        let detail = value["detail"].as_str().unwrap_or("no detail");
        let hint = if status == reqwest::StatusCode::UNAUTHORIZED {
            " (pass --api-key or set REIN_API_KEY)"
        } else {
            ""
        };
        Err(anyhow!("{base} answered {status}: {detail}{hint}"))
    }

    fn run_id(id: &str) -> Result<RunId> {
        RunId::new(id.to_owned()).context("invalid RUN_ID")
    }

    /// One page of runs.
    pub async fn list(
        &self,
        filter: &RunFilter,
        cursor: Option<&str>,
        limit: usize,
    ) -> Result<RunList> {
        match self {
            Source::Store { store, .. } => {
                let cursor = cursor
                    .map(RunCursor::from_token)
                    .transpose()
                    .context("invalid --cursor: pass a next cursor a listing printed")?;
                let page = store.list_runs_page(filter, cursor.as_ref(), limit).await?;
                Ok(RunList {
                    runs: page.runs.iter().map(RunSummary::of).collect(),
                    next_cursor: page.next.as_ref().map(RunCursor::to_token),
                })
            }
            Source::Server { client, base, key } => {
                let mut query = vec![format!("limit={limit}")];
                if let Some(status) = filter.status {
                    query.push(format!("status={status}"));
                }
                if let Some(agent) = &filter.agent {
                    query.push(format!("agent={}", encode(agent)));
                }
                if let Some(ms) = filter.created_after_ms {
                    query.push(format!("created_after={ms}"));
                }
                if let Some(ms) = filter.created_before_ms {
                    query.push(format!("created_before={ms}"));
                }
                if let Some(cursor) = cursor {
                    query.push(format!("cursor={}", encode(cursor)));
                }
                let path = format!("/v1/runs?{}", query.join("&"));
                let value = Source::get(client, base, key.as_deref(), &path).await?;
                serde_json::from_value(value)
                    .with_context(|| format!("{base} answered a listing rein cannot read"))
            }
        }
    }

    /// The run `id`.
    pub async fn show(&self, id: &str) -> Result<RunDetail> {
        let mut detail = self.detail(id).await?;
        let started = self
            .events(id, 0)
            .await?
            .into_iter()
            .find_map(|e| match e.data {
                rein_core::EventData::RunStarted(started) => Some(started),
                _ => None,
            });
        if let Some(started) = started {
            detail.contract = started.contract;
            detail.config = started.config;
        }
        Ok(detail)
    }

    async fn detail(&self, id: &str) -> Result<RunDetail> {
        let run_id = Source::run_id(id)?;
        match self {
            Source::Store { store, path } => {
                let record = store
                    .get_run(&run_id)
                    .await?
                    .ok_or_else(|| anyhow!("no run {run_id} in {path}"))?;
                let children = store
                    .children_of(&run_id)
                    .await?
                    .iter()
                    .map(|child| child.run_id.to_string())
                    .collect();
                Ok(RunDetail {
                    summary: RunSummary::of(&record),
                    children,
                    limits: serde_json::from_value(record.budget.clone()).ok(),
                    report: record.report,
                    contract: None,
                    config: None,
                })
            }
            Source::Server { client, base, key } => {
                let view = Source::get(
                    client,
                    base,
                    key.as_deref(),
                    &format!("/v1/runs/{}", encode(id)),
                )
                .await?;
                // The server's own type: a member it cannot read is an
                // error naming the server, never a silent default.
                let view: rein_server::api::runs::RunView = serde_json::from_value(view)
                    .with_context(|| format!("{base} answered a run rein cannot read"))?;
                let summary = RunSummary {
                    run_id: view.run_id,
                    // The API shows a run to its own tenant only.
                    tenant: "(the API key's)".to_owned(),
                    agent: view.agent,
                    outcome: rein_core::Outcome::parse(&view.status).map(|o| o.as_str().to_owned()),
                    status: view.status,
                    parent_run_id: view.parent_run_id,
                    created_at_ms: view.created_at_ms,
                    updated_at_ms: view.updated_at_ms,
                };
                let (children, report) = (view.children, view.report);
                Ok(RunDetail {
                    summary,
                    children,
                    report,
                    limits: view.budget,
                    contract: None,
                    config: None,
                })
            }
        }
    }

    /// The run's events after `after` (`0`: all).
    pub async fn events(&self, id: &str, after: u64) -> Result<Vec<Event>> {
        let run_id = Source::run_id(id)?;
        match self {
            Source::Store { store, .. } => Ok(store.events(&run_id, after).await?),
            Source::Server { client, base, key } => {
                let path = format!("/v1/runs/{}/events?after={after}", encode(id));
                let value = Source::get(client, base, key.as_deref(), &path).await?;
                let list: rein_server::api::events::EventList = serde_json::from_value(value)
                    .with_context(|| format!("{base} answered events rein cannot read"))?;
                Ok(list.events)
            }
        }
    }

    /// The run's ledger, in execution order.
    pub async fn ledger(&self, id: &str) -> Result<Vec<LedgerRecord>> {
        let run_id = Source::run_id(id)?;
        match self {
            Source::Store { store, path } => {
                if store.get_run(&run_id).await?.is_none() {
                    bail!("no run {run_id} in {path}");
                }
                Ok(store.ledger(&run_id).await?)
            }
            Source::Server { client, base, key } => {
                let path = format!("/v1/runs/{}/ledger", encode(id));
                let value = Source::get(client, base, key.as_deref(), &path).await?;
                let list: rein_server::api::runs::LedgerList = serde_json::from_value(value)
                    .with_context(|| format!("{base} answered a ledger rein cannot read"))?;
                Ok(list.records)
            }
        }
    }

    /// The stats of `window` (`GET /v1/stats`, or the store's own
    /// aggregate for a file: `tenant`'s runs, or every tenant's).
    pub async fn stats(
        &self,
        window: &rein_server::api::stats::Window,
        tenant: Option<TenantId>,
    ) -> Result<Stats> {
        match self {
            Source::Store { store, .. } => {
                Ok(rein_server::api::stats::compute(store.as_ref(), tenant, window).await?)
            }
            Source::Server { client, base, key } => {
                if tenant.is_some() {
                    bail!("--tenant reads a file; a server shows its API key's tenant only");
                }
                let mut query = vec![
                    format!("since={}", window.since_ms),
                    format!("until={}", window.until_ms),
                ];
                if let Some(agent) = &window.agent {
                    query.push(format!("agent={}", encode(agent)));
                }
                let path = format!("/v1/stats?{}", query.join("&"));
                let value = Source::get(client, base, key.as_deref(), &path).await?;
                serde_json::from_value(value)
                    .with_context(|| format!("{base} answered stats rein cannot read"))
            }
        }
    }

    /// The run `id` as a listing shows it (for `list --follow`).
    pub async fn summary(&self, id: &str) -> Result<RunSummary> {
        match self {
            Source::Store { store, path } => {
                let run_id = Source::run_id(id)?;
                let record = store
                    .get_run(&run_id)
                    .await?
                    .ok_or_else(|| anyhow!("no run {run_id} in {path}"))?;
                Ok(RunSummary::of(&record))
            }
            Source::Server { .. } => Ok(self.show(id).await?.summary),
        }
    }

    /// The store's change notifications, when it has them (PostgreSQL):
    /// a hint to read again sooner, never instead of reading.
    pub fn notifications(
        &self,
    ) -> Option<tokio::sync::broadcast::Receiver<rein_store::Notification>> {
        match self {
            Source::Store { store, .. } => store.notifications(),
            Source::Server { .. } => None,
        }
    }

    /// Whether `error` says the server is gone (it refused the connection,
    /// or broke off its answer): the end of what a follower reads, not a
    /// failure of it. Never for a store.
    pub fn is_gone(&self, error: &anyhow::Error) -> bool {
        matches!(self, Source::Server { .. })
            && error.chain().any(|cause| {
                cause
                    .downcast_ref::<reqwest::Error>()
                    .is_some_and(|e| e.is_connect() || e.is_body())
            })
    }

    /// The approvals of the run `run` (or every run's), pending unless
    /// `all`, of `tenant` (a file holds every tenant's; a server shows its
    /// key's tenant only).
    pub async fn approvals(
        &self,
        run: Option<&str>,
        all: bool,
        tenant: Option<TenantId>,
        limit: usize,
    ) -> Result<Vec<Approval>> {
        match self {
            Source::Store { store, .. } => {
                let filter = rein_store::ApprovalFilter {
                    run_id: run.map(Source::run_id).transpose()?,
                    tenant,
                    step: None,
                    intent_id: None,
                    pending: !all,
                    limit,
                };
                Ok(store.approvals(&filter).await?)
            }
            Source::Server { client, base, key } => {
                if tenant.is_some() {
                    bail!("--tenant reads a file; a server shows its API key's tenant only");
                }
                let mut path = format!("/v1/approvals?pending={}&limit={limit}", !all);
                if let Some(run) = run {
                    path.push_str(&format!("&run_id={}", encode(run)));
                }
                let value = Source::get(client, base, key.as_deref(), &path).await?;
                let list: ApprovalList = serde_json::from_value(value)
                    .with_context(|| format!("{base} answered a listing rein cannot read"))?;
                Ok(list.approvals)
            }
        }
    }

    /// The delivery log of the webhook `name`, newest event first: every
    /// tenant's from a file, the API key's tenant's from a server.
    pub async fn webhook_deliveries(
        &self,
        name: &str,
        limit: usize,
    ) -> Result<Vec<rein_store::WebhookDelivery>> {
        match self {
            Source::Store { store, .. } => Ok(store.webhook_deliveries(name, limit).await?),
            Source::Server { client, base, key } => {
                let path = format!("/v1/webhooks/{}/deliveries?limit={limit}", encode(name));
                let value = Source::get(client, base, key.as_deref(), &path).await?;
                let list: rein_server::api::webhooks::DeliveryList = serde_json::from_value(value)
                    .with_context(|| format!("{base} answered a listing rein cannot read"))?;
                Ok(list.deliveries)
            }
        }
    }

    /// The webhooks a server is configured with.
    pub async fn webhooks(&self) -> Result<Vec<rein_server::api::webhooks::WebhookView>> {
        match self {
            Source::Store { .. } => {
                bail!("a store file holds no webhooks: pass --config or --server")
            }
            Source::Server { client, base, key } => {
                let value = Source::get(client, base, key.as_deref(), "/v1/webhooks").await?;
                let list: rein_server::api::webhooks::WebhookList =
                    serde_json::from_value(value)
                        .with_context(|| format!("{base} answered a listing rein cannot read"))?;
                Ok(list.webhooks)
            }
        }
    }

    /// Records `decision` (its `by` only where no key names the decider:
    /// a file, or a keyless server) on the call `intent` of `run`.
    /// Returns the approval decided, and whether the run continues.
    ///
    /// # Errors
    ///
    /// A call decided before is refused, naming the decision that stands.
    pub async fn decide(
        &self,
        run: &str,
        intent: &str,
        decision: Decision,
    ) -> Result<(Approval, bool)> {
        match self {
            Source::Store { store, path } => {
                let run_id = Source::run_id(run)?;
                let intent_id =
                    rein_core::IntentId::new(intent.to_owned()).context("invalid INTENT")?;
                match store.decide_approval(&run_id, &intent_id, decision).await {
                    Ok(decided) => Ok((decided.approval, decided.continues)),
                    Err(rein_store::StoreError::AlreadyDecided { approval }) => {
                        Err(anyhow!("{}", already_decided(&approval)))
                    }
                    Err(rein_store::StoreError::NotFound { .. }) => Err(anyhow!(
                        "run {run} has no call {intent} waiting for approval in {path}"
                    )),
                    Err(e) => Err(e.into()),
                }
            }
            Source::Server { client, base, key } => {
                use rein_server::api::approvals::{DecisionBody, HumanVerdict};
                let body = DecisionBody {
                    decision: match decision.verdict {
                        rein_core::approval::Verdict::Approved => HumanVerdict::Approved,
                        rein_core::approval::Verdict::Rejected => HumanVerdict::Rejected,
                        // `expired` is rein's to record, never a human's.
                        rein_core::approval::Verdict::Expired => {
                            bail!("a human approves or rejects; `expired` is rein's to record")
                        }
                    },
                    reason: decision.reason,
                    by: key.is_none().then_some(decision.by),
                };
                let url = format!(
                    "{base}/v1/runs/{}/approvals/{}",
                    encode(run),
                    encode(intent)
                );
                let value =
                    Source::send(client.post(url).json(&body), base, key.as_deref()).await?;
                let decided: rein_server::api::approvals::Decided =
                    serde_json::from_value(value)
                        .with_context(|| format!("{base} answered a decision rein cannot read"))?;
                Ok((decided.approval, decided.continues))
            }
        }
    }

    /// Whether the run `id` has ended (for `events --follow`).
    pub async fn is_finished(&self, id: &str) -> Result<bool> {
        let detail = self.show(id).await?;
        Ok(rein_store::RunStatus::parse(&detail.summary.status).is_some_and(|s| s.is_finished()))
    }
}

/// What a refused second decision says: the decision that stands.
pub fn already_decided(approval: &Approval) -> String {
    let r = &approval.request;
    match &approval.decision {
        Some(d) => format!(
            "call {} ({}) of run {} was decided already: {} by {} at {}{}",
            r.intent_id,
            r.tool,
            r.run_id,
            d.verdict.as_str(),
            d.by,
            d.at_ms,
            d.reason
                .as_ref()
                .map_or(String::new(), |reason| format!(" ({reason})"))
        ),
        None => format!(
            "call {} ({}) of run {} cannot be decided now",
            r.intent_id, r.tool, r.run_id
        ),
    }
}

/// `text` percent-encoded for a URL's path segment or query value: every
/// byte but the unreserved ones (RFC 3986).
pub(crate) fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoding_keeps_unreserved_bytes_only() {
        assert_eq!(encode("order_desk-1.x~"), "order_desk-1.x~");
        assert_eq!(encode("a b/c?d&é"), "a%20b%2Fc%3Fd%26%C3%A9");
    }
}

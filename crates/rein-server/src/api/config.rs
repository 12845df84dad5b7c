//! `GET /v1/config`: the configuration this server runs with, as rein
//! applies it (rein's defaults filled in and marked), redacted.
//!
//! # What an operator sees, and what never leaves the process
//!
//! The config as loaded is what decides every limit, retry and approval,
//! and a file on someone's disk is not it: an environment variable
//! interpolated, a default left out, a second file merged. This answer is
//! built from the loaded registry. It names what a value comes from, never
//! a secret:
//!
//! | part | shown | never |
//! | --- | --- | --- |
//! | providers | kind, base URL, the *name* of the key's variable, limits | the key |
//! | tools | adapter kind, URL or program, header and env *names*, class, group, tier, approval, what rein chose | header and env values, arguments |
//! | API keys | name (an unnamed key: `sha256:` and its digest's first 8 digits, as the access log names it), tenant, budget | the key or its whole digest |
//! | webhooks | URL, topics, the *name* of the secret's variable | the secret |
//! | store | the SQLite path or PostgreSQL URL the server opened | userinfo, query |
//!
//! Every URL is shown without its userinfo and query, and with each path
//! segment that looks like a token (a webhook's secret, a `/bot<token>/`)
//! replaced ([`rein_core::redact::shown_url`]); every text passes
//! [`rein_core::redact::text`] too, which replaces the process's known
//! secrets wherever a config interpolated them.
//!
//! # Who may read it
//!
//! The config is the whole process's, not a tenant's (it names every
//! tenant and key), so only an operator reads it: a tenant
//! `server.metrics_tenants` lists, or anyone in the keyless loopback mode
//! ([`crate::http::auth::operator`]). Unlike `/metrics`,
//! `server.metrics = "open"` does not open it.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use rein_core::registry::{AdapterSpec, ProviderKind, Registry, StoreUrl, ToolSpec};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::http::auth::Tenant;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// What `GET /v1/config` answers.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ConfigView {
    /// The config files it was loaded from.
    pub files: Vec<String>,
    /// Agents, by name, with every limit their runs get.
    pub agents: Vec<AgentView>,
    /// Tools, by name.
    pub tools: Vec<ToolView>,
    /// Model providers, by name.
    pub providers: Vec<ProviderView>,
    /// The gateway's model bindings (`[models.*]`), by name.
    pub models: Vec<BindingView>,
    /// Resource groups, by name.
    pub resource_groups: Vec<GroupView>,
    /// `[server]`.
    pub server: ServerView,
    /// The run store the server opened (`--data`, else `[store]`, else
    /// the default), without credentials; `null` when neither the
    /// embedding program nor the config named it.
    pub store: Option<String>,
    /// Webhooks, by name.
    pub webhooks: Vec<WebhookView>,
}

/// An agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AgentView {
    /// Its name.
    pub name: String,
    /// Its primary model (`provider/model`).
    pub model: String,
    /// Tried in order when the model in use is unavailable.
    pub fallbacks: Vec<String>,
    /// The tools offered to the model.
    pub tools: Vec<String>,
    /// Every limit its runs get, one line each, rein's defaults marked (as
    /// `rein check --explain` prints them).
    pub limits: Vec<String>,
}

/// A tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ToolView {
    /// Its name.
    pub name: String,
    /// `http`, `command`, `agent` or `mcp`.
    pub adapter: String,
    /// What it calls: the method and URL, the program, the agent, or the
    /// MCP server and tool.
    pub target: String,
    /// The names of the headers (or environment variables) it sets; their
    /// values are never shown.
    pub sets: Vec<String>,
    /// Its retryability class.
    pub class: String,
    /// The resource group it draws on.
    pub resource_group: String,
    /// How visible its effect is.
    pub side_effect_tier: String,
    /// Whether its calls wait for a human of their own: `never`,
    /// `required` or `when` (arguments match a rule).
    pub approval: String,
    /// The settings its config left out, which rein chose.
    pub defaulted: Vec<String>,
}

/// A model provider.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProviderView {
    /// Its name.
    pub name: String,
    /// `openai`, `anthropic` or `scripted`.
    pub kind: String,
    /// The base URL, or the script file.
    pub endpoint: String,
    /// The environment variable holding its key (never the key).
    pub api_key_env: Option<String>,
    /// Calls in flight at once (`null`: unlimited).
    pub max_concurrency: Option<u32>,
    /// Tokens per minute (`null`: unlimited).
    pub tokens_per_minute: Option<u64>,
    /// Per-request timeout, milliseconds (`null`: not over the network).
    pub timeout_ms: Option<u64>,
    /// Whether every call streams.
    pub streams: bool,
}

/// A gateway model binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BindingView {
    /// The name clients ask for.
    pub name: String,
    /// The primary, then the fallbacks (`provider/model`).
    pub chain: Vec<String>,
    /// A call's deadline without `Rein-Deadline-Ms`, milliseconds.
    pub deadline_ms: u64,
    /// Whether a cut stream is recovered.
    pub recover_streams: bool,
}

/// A resource group.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GroupView {
    /// Its name.
    pub name: String,
    /// Calls in flight at once (`null`: unlimited).
    pub max_concurrency: Option<u32>,
    /// Calls per second (`null`: not rate limited).
    pub rate_per_sec: Option<f64>,
}

/// `[server]`, as applied.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ServerView {
    /// The listen address configured (`--listen` may override it).
    pub listen: String,
    /// The API keys: their names and tenants, never the keys (an unnamed
    /// key is named by its digest's first 8 digits).
    pub api_keys: Vec<KeyView>,
    /// Hosts besides loopback the API answers.
    pub allowed_hosts: Vec<String>,
    /// Browser origins CORS admits.
    pub cors_origins: Vec<String>,
    /// The largest request body, bytes.
    pub body_limit_bytes: u64,
    /// Connections open at once.
    pub max_connections: u32,
    /// Queue workers per process.
    pub queue_workers: u32,
    /// Run slots (`null`: sync runs are not held back).
    pub run_slots: Option<u32>,
    /// `/metrics` access: `protected` or `open`.
    pub metrics: String,
    /// Tenants that may read the process's figures.
    pub metrics_tenants: Vec<String>,
    /// How long a drain may take, milliseconds.
    pub shutdown_grace_ms: u64,
}

/// An API key, without the key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyView {
    /// Its name, or `sha256:` and the first digits of its digest.
    pub name: String,
    /// The tenant it acts for.
    pub tenant: String,
    /// Whether it has a gateway budget of its own.
    pub budgeted: bool,
}

/// A webhook.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WebhookView {
    /// Its name.
    pub name: String,
    /// Where it posts.
    pub url: String,
    /// What it posts.
    pub topics: Vec<String>,
    /// The environment variable holding its signing secret (never the
    /// secret).
    pub secret_env: String,
}

/// The configuration this server runs with, redacted.
#[utoipa::path(
    get, path = "/v1/config", tag = "server",
    responses((status = 200, description = "The configuration as applied, rein's defaults filled in, secrets never shown", body = ConfigView),
              (status = 401, description = "missing or invalid API key", body = Problem),
              (status = 403, description = "the key's tenant is not in server.metrics_tenants", body = Problem)),
    security(("bearer" = []))
)]
pub async fn get_config(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
) -> Result<Json<ConfigView>, Problem> {
    crate::http::auth::operator(&state.settings, &tenant, "the config")?;
    Ok(Json(view(
        &state.registry,
        &state.settings,
        state.store_shown.as_deref(),
    )))
}

/// `text` as it may be shown: without the process's secrets, URL queries
/// or userinfo.
fn shown(text: &str) -> String {
    rein_core::redact::text(text).into_owned()
}

/// A URL as it may be shown: [`shown`], and without the path segments that
/// look like tokens.
fn shown_url(url: &str) -> String {
    shown(&rein_core::redact::shown_url(url))
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The view of `registry` as a server with `settings` applies it, over the
/// store named `store` at start (`None`: the config's `[store]`).
pub fn view(
    registry: &Registry,
    settings: &rein_core::registry::ServerSpec,
    store: Option<&str>,
) -> ConfigView {
    use rein_core::registry::explain;
    let mut files: Vec<String> = registry
        .agents()
        .values()
        .map(|a| a.source.display().to_string())
        .chain(
            registry
                .tools()
                .values()
                .map(|t| t.source.display().to_string()),
        )
        .chain(
            registry
                .providers()
                .values()
                .map(|p| p.source.display().to_string()),
        )
        .chain(settings.source.iter().map(|s| s.display().to_string()))
        .collect();
    files.sort();
    files.dedup();
    let agents = registry
        .agents()
        .values()
        .map(|agent| AgentView {
            name: agent.name.clone(),
            model: agent.primary().to_string(),
            fallbacks: agent.fallbacks.iter().map(ToString::to_string).collect(),
            tools: agent.tools.clone(),
            limits: explain::explain(registry, agent)
                .into_iter()
                .skip(1)
                .map(|line| line.trim_start().to_owned())
                .collect(),
        })
        .collect();
    let tools = registry.tools().values().map(tool_view).collect();
    let providers = registry
        .providers()
        .values()
        .map(|p| {
            let (kind, endpoint, key) = match &p.kind {
                ProviderKind::OpenAi {
                    base_url,
                    api_key_env,
                    ..
                } => ("openai", shown_url(base_url), api_key_env.clone()),
                ProviderKind::Anthropic {
                    base_url,
                    api_key_env,
                    ..
                } => ("anthropic", shown_url(base_url), api_key_env.clone()),
                ProviderKind::Scripted { script } => {
                    ("scripted", shown(&script.display().to_string()), None)
                }
                // A kind added later: named, its endpoint not shown until
                // this view learns it.
                _ => ("other", String::new(), None),
            };
            ProviderView {
                name: p.name.clone(),
                kind: kind.to_owned(),
                endpoint,
                api_key_env: key,
                max_concurrency: p.max_concurrency.map(|n| n.get()),
                tokens_per_minute: p.tokens.map(|t| t.per_minute.get()),
                timeout_ms: p.kind.timeout().map(millis),
                streams: p.stream.is_some(),
            }
        })
        .collect();
    let models = registry
        .models()
        .values()
        .map(|m| BindingView {
            name: m.name.clone(),
            chain: std::iter::once(&m.primary)
                .chain(&m.fallbacks)
                .map(ToString::to_string)
                .collect(),
            deadline_ms: millis(m.deadline),
            recover_streams: m.recover_streams,
        })
        .collect();
    let resource_groups = registry
        .resource_groups()
        .values()
        .map(|g| GroupView {
            name: g.name.clone(),
            max_concurrency: g.max_concurrency.map(|n| n.get()),
            rate_per_sec: g.rate.map(|r| r.per_sec),
        })
        .collect();
    let server = ServerView {
        listen: settings.listen.to_string(),
        api_keys: settings
            .api_keys
            .iter()
            .map(|k| KeyView {
                name: k.label(),
                tenant: k.tenant.as_str().to_owned(),
                budgeted: k.budget.is_limited(),
            })
            .collect(),
        allowed_hosts: settings
            .allowed_hosts
            .iter()
            .map(ToString::to_string)
            .collect(),
        cors_origins: settings
            .cors
            .iter()
            .flat_map(|c| c.allowed_origins.iter().map(ToString::to_string))
            .collect(),
        body_limit_bytes: u64::try_from(settings.body_limit).unwrap_or(u64::MAX),
        max_connections: settings.limits.max_connections.get(),
        queue_workers: settings.queue.workers.get(),
        run_slots: settings.quotas.run_slots.map(|s| s.total.get()),
        metrics: match settings.metrics {
            rein_core::registry::MetricsAccess::Open => "open",
            _ => "protected",
        }
        .to_owned(),
        metrics_tenants: settings
            .metrics_tenants
            .iter()
            .map(|t| t.as_str().to_owned())
            .collect(),
        shutdown_grace_ms: millis(settings.shutdown_grace),
    };
    let store = match store {
        Some(store) => Some(shown_url(store)),
        None => registry.store().map(|spec| match &spec.url {
            StoreUrl::Sqlite(path) => shown(&path.display().to_string()),
            StoreUrl::Postgres(url) => shown_url(url),
            _ => "another backend".to_owned(),
        }),
    };
    let webhooks = registry
        .webhooks()
        .values()
        .map(|w| WebhookView {
            name: w.name.clone(),
            url: shown_url(&w.url),
            topics: w.topics.iter().map(ToString::to_string).collect(),
            secret_env: w.secret_env.clone(),
        })
        .collect();
    ConfigView {
        files,
        agents,
        tools,
        providers,
        models,
        resource_groups,
        server,
        store,
        webhooks,
    }
}

fn tool_view(tool: &ToolSpec) -> ToolView {
    let (adapter, target, sets) = match &tool.adapter {
        AdapterSpec::Http {
            url,
            method,
            headers,
            ..
        } => (
            "http",
            format!("{method} {}", shown_url(url)),
            headers.keys().cloned().collect(),
        ),
        AdapterSpec::Command { program, env, .. } => (
            "command",
            shown(&program.display().to_string()),
            env.keys().cloned().collect(),
        ),
        AdapterSpec::Agent { agent, .. } => ("agent", agent.clone(), Vec::new()),
        AdapterSpec::Mcp { server, tool, .. } => {
            ("mcp", format!("{} / {tool}", server.name), Vec::new())
        }
        // A kind added later: named by its kind, its target not shown
        // until this view learns it.
        other => (other.kind().name(), String::new(), Vec::new()),
    };
    ToolView {
        name: tool.name.clone(),
        adapter: adapter.to_owned(),
        target,
        sets,
        class: tool.class.as_str().to_owned(),
        resource_group: tool.resource_group.clone(),
        side_effect_tier: tool.side_effect_tier.to_string(),
        approval: match tool.approval {
            rein_core::registry::ToolApproval::Never => "never",
            rein_core::registry::ToolApproval::Required => "required",
            rein_core::registry::ToolApproval::When(_) => "when",
            _ => "other",
        }
        .to_owned(),
        defaulted: tool.defaulted.iter().map(|f| (*f).to_owned()).collect(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A config whose every credential is written where a careless view
    /// would show it: header and env values, URL userinfo, queries and
    /// path tokens, a webhook's secret.
    const CONFIG: &str = r#"
[providers.openai]
kind = "openai"
base_url = "https://proxyuser:proxypass1234@llm.example.com/v1?key=querysecret123"
api_key_env = "OPENAI_API_KEY"

[tools.lookup]
description = "Look up one order by its id."
class = "read"
side_effect_tier = "none"
owner = "orders-team"
latency = { mode = "observe", fallback_p99 = "2s" }
schema = { type = "object", properties = { id = { type = "string", description = "The order id" } }, required = ["id"] }
adapter = { kind = "http", url = "https://api.example.com/bot9f8e7d6c5b4a39281706AbCdEf/orders?token=qs-secret-456", headers = { Authorization = "Bearer header-secret-789" } }

[tools.script]
description = "Run the order script for one order."
class = "read"
side_effect_tier = "none"
owner = "orders-team"
latency = { mode = "observe", fallback_p99 = "2s" }
schema = { type = "object", properties = { id = { type = "string", description = "The order id" } }, required = ["id"] }
adapter = { kind = "command", program = "/usr/bin/env", args = ["--token", "arg-secret-0123456789"], env = { DB_PASSWORD = "env-secret-0123456789" } }

[agents.desk]
provider = "openai"
model = "gpt-4o-mini"
system_prompt = "You are the order desk."
tools = ["lookup", "script"]

[webhooks.ops]
url = "https://hooks.example.com/services/T0001/B0002/xY7kQ2mN9pR4sT6vW8zA1bC3"
events = ["run_finished"]
secret_env = "HOOK_SECRET"
"#;

    #[test]
    fn the_view_names_where_secrets_come_from_and_shows_none() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("rein.toml"), CONFIG).unwrap();
        let registry = rein_engine::config::Loader::with_env(|k| match k {
            "HOOK_SECRET" => Some("hook-secret-value-0123456789".to_owned()),
            _ => None,
        })
        .load(&dir.path().join("rein.toml"))
        .unwrap();
        let view = view(
            &registry,
            registry.server(),
            Some("postgres://rein:dbpass-0123@db.example.com/rein?sslpassword=x1y2z3"),
        );
        let text = serde_json::to_string(&view).unwrap();
        for secret in [
            "proxypass1234",
            "querysecret123",
            "9f8e7d6c5b4a39281706AbCdEf",
            "qs-secret-456",
            "header-secret-789",
            "arg-secret-0123456789",
            "env-secret-0123456789",
            "xY7kQ2mN9pR4sT6vW8zA1bC3",
            "hook-secret-value",
            "dbpass-0123",
            "x1y2z3",
        ] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
        // Where each comes from is named, and the rest is as applied.
        let lookup = view.tools.iter().find(|t| t.name == "lookup").unwrap();
        assert_eq!(lookup.sets, ["Authorization"]);
        assert!(
            lookup
                .target
                .ends_with(" https://api.example.com/[redacted]/orders?[redacted]"),
            "{}",
            lookup.target
        );
        let script = view.tools.iter().find(|t| t.name == "script").unwrap();
        assert_eq!(script.sets, ["DB_PASSWORD"]);
        assert_eq!(script.target, "/usr/bin/env");
        assert_eq!(
            view.providers[0].api_key_env.as_deref(),
            Some("OPENAI_API_KEY")
        );
        assert!(view.providers[0].endpoint.contains("llm.example.com/v1"));
        assert_eq!(view.webhooks[0].secret_env, "HOOK_SECRET");
        assert!(
            view.webhooks[0]
                .url
                .starts_with("https://hooks.example.com/services/T0001/B0002/")
        );
        assert_eq!(
            view.store.as_deref(),
            Some("postgres://[redacted]@db.example.com/rein?[redacted]")
        );
        let desk = &view.agents[0];
        assert_eq!(desk.model, "openai/gpt-4o-mini");
        assert!(desk.limits[0].starts_with("budget: "), "{:?}", desk.limits);
    }
}

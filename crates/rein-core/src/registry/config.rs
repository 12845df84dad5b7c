//! The registry as an operator writes it: one [`ConfigFile`] per file.
//!
//! Every table refuses unknown fields, so a misspelt setting is an error
//! rather than a default silently left in place. Fields the integrity check
//! requires are `Option` here, so that a missing one is reported by
//! [`check`](super::check) together with every other problem instead of
//! stopping deserialization at the first.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use serde_json::Value;

use super::compensation::CompensationGrade;
use super::spec::SideEffectTier;
use crate::breaker::BreakersConfig;
use crate::deadline::BudgetConfig;
use crate::loop_guard::LoopGuardConfig;
use crate::outcome::FailurePolicy;
use crate::retry::RetryConfig;
use crate::tool::ToolClass;

/// One config file: any subset of the registry's sections. A directory of
/// files is merged by [`check`](super::check), which refuses a name defined
/// twice.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ConfigFile {
    /// Model providers by name.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Model bindings by alias (`[models.ALIAS]`): a primary model and the
    /// models to fall back to, which agents name instead of a provider.
    pub models: BTreeMap<String, ModelBindingConfig>,
    /// Resource groups (tools sharing a backend and its limits) by name.
    pub resource_groups: BTreeMap<String, ResourceGroupConfig>,
    /// Tools by name: the name the model calls them by.
    pub tools: BTreeMap<String, ToolConfig>,
    /// Agents by name.
    pub agents: BTreeMap<String, AgentConfig>,
    /// Circuit breaker settings; at most one file may hold them.
    pub breakers: Option<BreakersConfig>,
    /// `rein serve` settings; at most one file may hold them.
    pub server: Option<ServerConfig>,
    /// Traces (`[telemetry]`); at most one file may hold them.
    pub telemetry: Option<super::telemetry::TelemetryConfig>,
    /// The run store (`[store]`); at most one file may hold it.
    pub store: Option<super::store::StoreConfig>,
    /// Webhooks by name (`[webhooks.NAME]`).
    pub webhooks: BTreeMap<String, super::webhooks::WebhookConfig>,
    /// MCP servers by name (`[mcp_servers.NAME]`), whose tools `mcp`
    /// adapters call.
    pub mcp_servers: BTreeMap<String, super::mcp::McpServerConfig>,
}

/// A parsed file and where it came from.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConfigSource {
    /// The file, as problems should name it; relative paths in the file
    /// (a scripted provider's `script`) resolve against its directory.
    pub path: PathBuf,
    /// Its content.
    pub config: ConfigFile,
    /// Entries (`tools.NAME`, …) present in the file that failed to
    /// deserialize and were already reported. They count as defined, so one
    /// typo in a tool does not also make every reference to it "unknown".
    pub broken: BTreeSet<String>,
}

impl ConfigSource {
    /// `config`, read from `path`.
    pub fn new(path: impl Into<PathBuf>, config: ConfigFile) -> ConfigSource {
        ConfigSource {
            path: path.into(),
            config,
            broken: BTreeSet::new(),
        }
    }

    /// Marks `entry` (`section.name`) as present but already reported.
    pub fn with_broken(mut self, entry: impl Into<String>) -> ConfigSource {
        self.broken.insert(entry.into());
        self
    }
}

/// Which kind of provider a `[providers.NAME]` table configures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ProviderKindName {
    /// An OpenAI-compatible Chat Completions endpoint.
    Openai,
    /// An Anthropic Messages API endpoint.
    Anthropic,
    /// A file of recorded model turns, replayed in order.
    Scripted,
}

/// A model provider as written in config (`[providers.NAME]`).
///
/// `base_url`, `api_key_env`, `timeout` and `stream` belong to `openai` and
/// `anthropic`; `output_tokens_field` and `continuation` to `openai`; `script` to `scripted`;
/// `prices`, `max_output_tokens` and `max_concurrency` to every kind.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ProviderConfig {
    /// `openai`, `anthropic` or `scripted`; required.
    pub kind: Option<ProviderKindName>,
    /// Base URL of the API, up to and including `/v1`; `${ENV}` is
    /// interpolated by the loader.
    pub base_url: Option<String>,
    /// The environment variable holding the API key; no auth header when
    /// absent.
    pub api_key_env: Option<String>,
    /// Per-request timeout of a non-streamed call; a stream is bounded by
    /// its `[stream]` limits and the caller's deadline instead.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub timeout: Option<Duration>,
    /// The script file, relative to the config file that names it.
    pub script: Option<PathBuf>,
    /// Prices by model name.
    pub prices: BTreeMap<String, PriceConfig>,
    /// The most output tokens each model may produce in one answer, by
    /// model name (`[providers.NAME.max_output_tokens]`); a model not
    /// named here takes its cap from rein's table of well-known models.
    pub max_output_tokens: BTreeMap<String, u32>,
    /// The request member each model takes its output ceiling in
    /// (`max_tokens` or `max_completion_tokens`), by model name
    /// (`[providers.NAME.output_tokens_field]`); `openai` providers only.
    /// A model not named here takes the field of rein's table of
    /// well-known models ([`output_field`](crate::output_field)).
    pub output_tokens_field: BTreeMap<String, crate::output_field::OutputField>,
    /// How the server continues an assistant prefix (`prefix` or
    /// `continue_final_message`), which rein asks for to recover a stream
    /// cut after its first token; `openai` providers only (the Messages API
    /// continues one natively). Unset: the server is never asked to
    /// continue one ([`Continuation`](crate::continuation::Continuation)).
    pub continuation: Option<crate::continuation::Continuation>,
    /// Calls to this provider in flight at once, across every agent bound
    /// to it; unlimited if unset.
    pub max_concurrency: Option<u32>,
    /// Model tokens per minute across every caller of this provider: each
    /// call is charged its prompt estimate plus its reserved output before
    /// it is sent, and settled with the usage the provider counted;
    /// unlimited if unset.
    pub tokens_per_minute: Option<u64>,
    /// The token bucket's size; `tokens_per_minute` if unset. Needs
    /// `tokens_per_minute`.
    pub token_burst: Option<u64>,
    /// Stream every call, with these limits (`[providers.NAME.stream]`);
    /// calls are not streamed when absent.
    pub stream: Option<StreamConfig>,
}

/// `[providers.NAME.stream]` as written in config: its presence makes every
/// call to the provider stream, and its timeouts bound the stream.
///
/// Unset fields take
/// [`DEFAULT_STREAM_FIRST_BYTE_TIMEOUT`](super::DEFAULT_STREAM_FIRST_BYTE_TIMEOUT)
/// and [`DEFAULT_STREAM_IDLE_TIMEOUT`](super::DEFAULT_STREAM_IDLE_TIMEOUT).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct StreamConfig {
    /// The longest wait for the first byte of the response.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub first_byte_timeout: Option<Duration>,
    /// The longest gap between two bytes once the first has arrived.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub idle_timeout: Option<Duration>,
}

/// One model of a fallback list as written in config:
/// `{ provider = "anthropic_main", model = "claude-sonnet" }`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ModelLinkConfig {
    /// The provider's name; required.
    pub provider: Option<String>,
    /// The model, as the provider names it; required.
    pub model: Option<String>,
}

/// A model binding as written in config (`[models.ALIAS]`): the model an
/// agent uses, and the models tried instead when it fails.
///
/// ```toml
/// [models.smart]
/// provider = "openai_main"
/// model = "gpt-4o-mini"
/// fallbacks = [{ provider = "anthropic_main", model = "claude-sonnet" }]
/// context_fallbacks = [{ provider = "openai_main", model = "gpt-4o-128k" }]
/// ```
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ModelBindingConfig {
    /// `chat` (the default): turns, for agents and the chat routes; or
    /// `embedding`: vectors, for `POST /v1/embeddings` only (its models
    /// need no output cap).
    pub kind: Option<BindingKind>,
    /// The primary model's provider; required.
    pub provider: Option<String>,
    /// The primary model, as its provider names it; required.
    pub model: Option<String>,
    /// Models tried in order when the primary is unavailable.
    pub fallbacks: Vec<ModelLinkConfig>,
    /// Models tried in order when the prompt does not fit the primary's
    /// context window.
    pub context_fallbacks: Vec<ModelLinkConfig>,
    /// Same-model retries of a link before the chain falls back (a single
    /// 5xx, a reset, a short `Retry-After`); 0 falls back at once. Default
    /// [`DEFAULT_RETRY_BEFORE_FALLBACK`](crate::retry::DEFAULT_RETRY_BEFORE_FALLBACK).
    pub retry_before_fallback: Option<u32>,
    /// The longest `Retry-After` (of a 429 or 503) waited out on the same
    /// model before falling back. Default
    /// [`DEFAULT_RETRY_AFTER_MAX`](crate::retry::DEFAULT_RETRY_AFTER_MAX).
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub retry_after_max: Option<Duration>,
    /// Whether a timed-out call is sent again to the same model: off by
    /// default, since the provider may be generating (and billing) it.
    pub retry_timeouts: Option<bool>,
    /// How long a gateway call of the binding may take, fallbacks and
    /// retries included, when the client sends no `Rein-Deadline-Ms`.
    /// Default [`DEFAULT_GATEWAY_DEADLINE`](crate::registry::DEFAULT_GATEWAY_DEADLINE).
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub deadline: Option<Duration>,
    /// Whether a gateway stream cut after its first token is recovered:
    /// continued from the text already sent (on a link that continues an
    /// assistant prefix), else regenerated and forwarded only when it
    /// extends that text. On by default.
    pub recover_streams: Option<bool>,
}

/// What a model binding's models answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum BindingKind {
    /// Turns: agents, `/v1/chat/completions`, `/v1/responses`,
    /// `/v1/messages`.
    #[default]
    Chat,
    /// Vectors: `/v1/embeddings`.
    Embedding,
}

impl BindingKind {
    /// As config spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            BindingKind::Chat => "chat",
            BindingKind::Embedding => "embedding",
        }
    }
}

/// A model's price, in dollars per million tokens.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PriceConfig {
    /// Dollars per million input (prompt) tokens.
    pub input_per_mtok_usd: f64,
    /// Dollars per million output (completion) tokens.
    pub output_per_mtok_usd: f64,
}

/// A resource group as written in config (`[resource_groups.NAME]`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ResourceGroupConfig {
    /// Sustained calls per second (token bucket refill); unlimited if unset.
    pub rate_per_sec: Option<f64>,
    /// Bucket size; defaults to `rate_per_sec` rounded up.
    pub burst: Option<u32>,
    /// Calls in flight at once; unlimited if unset.
    pub max_concurrency: Option<u32>,
}

/// A tool as written in config (`[tools.NAME]`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolConfig {
    /// What the tool does, for the model; required.
    pub description: Option<String>,
    /// `read`, `idempotent_write` or `irreversible`; required.
    pub class: Option<ToolClass>,
    /// JSON Schema of the arguments; required.
    pub schema: Option<Value>,
    /// The resource group it draws on; required.
    pub resource_group: Option<String>,
    /// How visible its effect is outside; required.
    pub side_effect_tier: Option<SideEffectTier>,
    /// Who to call when it breaks; required.
    pub owner: Option<String>,
    /// Tell the model to avoid the tool unless necessary; required `true`
    /// for an irreversible tool without compensation.
    pub avoid_at_plan_time: bool,
    /// Failures the model may try to fix itself before rein disables the
    /// tool for the run; overrides the agent loop guard's allowance.
    pub self_heal_allowance: Option<u32>,
    /// The idempotency key recipe.
    pub idempotency: IdempotencyConfig,
    /// How to undo the tool's effect.
    pub compensation: Option<CompensationConfig>,
    /// Its latency profile; required.
    pub latency: Option<LatencyConfig>,
    /// How to call it; required.
    pub adapter: Option<super::adapter::AdapterTable>,
    /// The argument naming the resource a write changes
    /// (`"args.order_id"`): writes of one turn to the same value run one
    /// at a time. Writes only.
    pub resource_key: Option<String>,
    /// Whether a call waits for a human's approval: `"required"`,
    /// `"never"` (the default) or `{ when = { "args.PATH" = { gt = N } } }`.
    pub approval: super::approval::ToolApprovalConfig,
    /// Lint rules silenced for this tool, each with its reason
    /// (`[tools.NAME.lint] allow = [{ rule, reason }]`).
    pub lint: super::lint_allow::ToolLintConfig,
}

/// The idempotency key recipe as written in config. Unset fields take
/// [`NormalizerConfig`](crate::idempotency::NormalizerConfig)'s defaults and
/// [`DEFAULT_IDEMPOTENCY_HEADER`](super::DEFAULT_IDEMPOTENCY_HEADER).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct IdempotencyConfig {
    /// Argument fields dropped before the key is derived.
    pub volatile_fields: Option<Vec<String>>,
    /// Argument fields compared without case.
    pub case_insensitive_fields: Option<Vec<String>>,
    /// The HTTP header the key travels in.
    pub header: Option<String>,
}

/// A compensation as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CompensationConfig {
    /// The tool that undoes this one; required unless the grade is `none`.
    pub tool: Option<String>,
    /// `strong`, `weak` or `none`; required.
    pub grade: Option<CompensationGrade>,
    /// How long after the forward call the compensation still works.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub window: Option<Duration>,
    /// Compensation argument → `args.<path>` or `result.<path>` of the
    /// forward call.
    pub args: BTreeMap<String, String>,
}

/// How a tool's latency profile is known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LatencyMode {
    /// Quantiles written in config (`p50`, `p95`, `p99`, `samples`).
    #[default]
    Declared,
    /// Measured at run time; `fallback_p99` until `min_samples` exist.
    Observe,
}

/// A latency profile as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LatencyConfig {
    /// `declared` (the default) or `observe`.
    pub mode: LatencyMode,
    /// Declared median.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub p50: Option<Duration>,
    /// Declared 95th percentile.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub p95: Option<Duration>,
    /// Declared 99th percentile.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub p99: Option<Duration>,
    /// How many observations the declared quantiles rest on.
    pub samples: Option<u64>,
    /// Observe mode: the p99 assumed until enough samples exist.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub fallback_p99: Option<Duration>,
    /// Observe mode: the samples needed before measurements are trusted.
    pub min_samples: Option<u64>,
    /// One attempt's allowance is p99 × this, in [1, 10]; default 2.
    /// Either mode.
    pub allowance_factor: Option<f64>,
    /// Observe mode: a profile per argument-scale bucket instead of one
    /// for every call (`[tools.NAME.latency.scale]`).
    pub scale: Option<LatencyScaleConfig>,
}

/// `[tools.NAME.latency.scale]` as written in config: the argument whose
/// size picks the call's bucket, and the buckets' ascending upper bounds
/// (see [`LatencyScale`](crate::latency::LatencyScale)).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct LatencyScaleConfig {
    /// `args.<path>`, as `resource_key` writes it.
    pub arg: Option<String>,
    /// Ascending upper bounds, e.g. `[100, 1000, 10000]`; a size above
    /// the last falls in an overflow bucket.
    pub buckets: Option<Vec<u64>>,
}

/// An agent as written in config (`[agents.NAME]`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The provider's name; required unless `model` names a
    /// `[models.ALIAS]` binding.
    pub provider: Option<String>,
    /// The model, as the provider names it; or, without `provider`, the
    /// alias of a `[models.ALIAS]` binding. Required.
    pub model: Option<String>,
    /// Models tried in order when the model is unavailable; only with
    /// `provider` (a binding holds its own).
    pub fallbacks: Vec<ModelLinkConfig>,
    /// Models tried in order when the prompt does not fit the model's
    /// context window; only with `provider` (a binding holds its own).
    pub context_fallbacks: Vec<ModelLinkConfig>,
    /// The system prompt.
    pub system_prompt: Option<String>,
    /// The tools the model is offered, by name.
    pub tools: Vec<String>,
    /// The run's budget.
    pub budget: BudgetConfig,
    /// Retry settings.
    pub retry: RetryConfig,
    /// Loop guard settings.
    pub loop_guard: LoopGuardConfig,
    /// What to do with effects already caused when a later step fails:
    /// `compensate` (default), `continue` or `handoff`.
    pub on_failure: FailurePolicy,
    /// The share of the wall clock reserved for compensation, in [0, 0.9];
    /// default 0.2.
    pub compensation_reserve: Option<f64>,
    /// The run's own ceiling on model retries (`[agents.NAME.model_retry]`).
    pub model_retry: ModelRetryConfig,
    /// The median latency assumed for a model call (its p95 is 4 ×, its
    /// p99 10 ×): whether one more turn fits the deadline, and model
    /// retries. Default 500 ms; at most 10 min.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub model_latency: Option<Duration>,
    /// How many calls one turn may propose (`[agents.NAME.fan_out]`).
    pub fan_out: super::fan_out::FanOutConfig,
    /// A gate on calls by their tool's tier, the approval window and what
    /// an expiry does (`[agents.NAME.approval]`).
    pub approval: super::approval::ApprovalConfig,
    /// What the planner is told of its budget, and the last
    /// minimal-output turn (`[agents.NAME.planner]`).
    pub planner: super::planner::PlannerConfig,
    /// What one successful run of the agent is worth, in dollars: a retry
    /// or fallback whose expected value (its measured success rate × this)
    /// is below its expected cost is not made. Unset: retries are decided
    /// without it.
    pub value_of_success_usd: Option<f64>,
}

/// `[agents.NAME.model_retry]`: what one run may spend retrying model
/// calls in total, apart from each call's policy and from tool retries.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ModelRetryConfig {
    /// Retries of model calls in the whole run; default 8 (0: never).
    pub max_retries: Option<u32>,
    /// Time waiting between model retries in the whole run; default 60 s.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub max_wait: Option<Duration>,
    /// Tokens failed model calls may consume before no model call is
    /// retried; default: only the run's token budget.
    pub max_wasted_tokens: Option<u64>,
}

/// The `[server]` table as written in config: how `rein serve` listens,
/// whom it admits and how it runs work.
///
/// Every field is optional; [`check`](super::check) fills in the defaults
/// listed on [`ServerSpec`](super::ServerSpec) and reports each value out of
/// range under its dotted field (`server.queue.lease`).
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerConfig {
    /// The socket address to bind, `IP:PORT`; kept as text so a bad one is
    /// reported by the check with its field rather than as a type error.
    pub listen: Option<String>,
    /// The largest request body accepted: bytes, or a size like `"1MiB"`.
    pub body_limit: Option<ByteSizeConfig>,
    /// Idempotent submissions.
    pub idempotency: ServerIdempotencyConfig,
    /// The background run queue.
    pub queue: QueueConfig,
    /// Closing runs left `running` by a process that died.
    pub reconciliation: ReconciliationConfig,
    /// Limits shared by a root run and its child-agent tree.
    pub agent_graph: AgentGraphConfig,
    /// The bearer keys admitted, each bound to a tenant (`[[server.api_keys]]`).
    pub api_keys: Vec<ApiKeyConfig>,
    /// Connection limits: how slow and idle clients are cut off.
    pub limits: ServerLimitsConfig,
    /// How long in-flight work may finish after SIGTERM or SIGINT.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub shutdown_grace: Option<Duration>,

    // ----- exposure: who may reach the API (allowed_hosts, cors, metrics) --
    /// Host names (or `host:port`) the API answers for besides loopback.
    pub allowed_hosts: Vec<String>,
    /// Browser origins other than the server's own that may call the API;
    /// absent: none.
    pub cors: Option<CorsConfig>,
    /// Who may read `/metrics`: `protected` (default) or `open`.
    pub metrics: Option<super::exposure::MetricsAccess>,
    /// The tenants whose keys may read a protected `/metrics`.
    pub metrics_tenants: Vec<String>,
    /// Which tenants and agents get a label value of their own.
    pub metrics_labels: super::metrics_labels::MetricsLabelsConfig,

    // ----- quotas: per-tenant limits, fair queue, run slots ------------
    /// Per-tenant submission rate and run caps, fair queue weights and the
    /// run slots (`[server.quotas]`).
    pub quotas: super::quotas::ServerQuotasConfig,
}

/// `[server.limits]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerLimitsConfig {
    /// Time to send a complete request head.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub header_timeout: Option<Duration>,
    /// The longest pause while a request body is received.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub body_timeout: Option<Duration>,
    /// How long a kept-alive connection may wait for its next request.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub idle_timeout: Option<Duration>,
    /// Connections served at once.
    pub max_connections: Option<u32>,
}

/// `[server.cors]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct CorsConfig {
    /// The origins admitted, `scheme://host[:port]`; required, non-empty.
    pub allowed_origins: Vec<String>,
    /// The methods they may use (`GET`, `POST`); default both.
    pub allowed_methods: Option<Vec<String>>,
    /// The request headers they may send; default the ones the API reads.
    pub allowed_headers: Option<Vec<String>>,
}

/// A size as written in config: an integer of bytes (`1048576`) or a number
/// with a binary unit (`"1MiB"`, `"512 KiB"`).
///
/// Kept raw so that the check, not the parser, reports an unparsable or
/// out-of-range size next to every other problem.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ByteSizeConfig {
    /// An integer, as TOML reads it (so possibly negative).
    Bytes(i64),
    /// Text, parsed by the check.
    Text(String),
}

impl JsonSchema for ByteSizeConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ByteSize".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A size: an integer of bytes (1048576) or a number with a binary unit (\"1MiB\", \"512 KiB\").",
            "oneOf": [
                { "type": "integer", "minimum": 0 },
                { "type": "string", "pattern": "^\\s*[0-9]+\\s*([KMG]i?B|B)?\\s*$" }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for ByteSizeConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SizeVisitor;

        impl Visitor<'_> for SizeVisitor {
            type Value = ByteSizeConfig;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an integer of bytes or a size like \"1MiB\"")
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ByteSizeConfig, E> {
                Ok(ByteSizeConfig::Bytes(v))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ByteSizeConfig, E> {
                Ok(ByteSizeConfig::Bytes(i64::try_from(v).unwrap_or(i64::MAX)))
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteSizeConfig, E> {
                Ok(ByteSizeConfig::Text(v.to_owned()))
            }
        }

        deserializer.deserialize_any(SizeVisitor)
    }
}

/// `[server.idempotency]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ServerIdempotencyConfig {
    /// Honour `Idempotency-Key` on submissions.
    pub enabled: Option<bool>,
    /// The longest key accepted, in bytes.
    pub max_key_length: Option<u32>,
    /// How long a completed submission is remembered for replay.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub retention: Option<Duration>,
}

/// `[server.queue]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct QueueConfig {
    /// How long a worker owns a queued run before another may take it.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub lease: Option<Duration>,
    /// Deliveries of one queued run before it is dead-lettered.
    pub max_attempts: Option<u32>,
    /// Runs executed at once.
    pub workers: Option<u32>,
}

/// `[server.reconciliation]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ReconciliationConfig {
    /// How often a live run records that it is alive.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub heartbeat_interval: Option<Duration>,
    /// Silence after which a `running` run counts as orphaned.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub orphan_threshold: Option<Duration>,
    /// How often the scan for orphans runs.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub scan_interval: Option<Duration>,
    /// Runs closed by one scan at most.
    pub max_runs_per_scan: Option<u32>,
}

/// `[server.agent_graph]` as written in config; `0` removes a total limit.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AgentGraphConfig {
    /// The deepest child below a root run (the root is depth 0).
    pub max_depth: Option<u32>,
    /// Tokens the whole tree may use; `0` for no limit.
    pub max_total_tokens: Option<u64>,
    /// Child runs the whole tree may start; `0` for no limit.
    pub max_total_runs: Option<u32>,
}

/// One `[[server.api_keys]]` entry as written in config.
///
/// Only the key's SHA-256 is written down, never the key, so a leaked
/// config file admits nobody.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ApiKeyConfig {
    /// The tenant the key acts for; required.
    pub tenant: Option<String>,
    /// The hex SHA-256 of the bearer key (64 hex digits); required.
    pub sha256: Option<String>,
    /// A label shown in logs instead of the key.
    pub name: Option<String>,
    /// What the key may spend on models through the gateway
    /// (`[server.api_keys.budget]`); none: unlimited.
    pub budget: Option<super::key_budget::KeyBudgetConfig>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_config_refuses_unknown_fields() {
        let err = toml::from_str::<ToolConfig>("clas = \"read\"").unwrap_err();
        assert!(err.message().contains("unknown field `clas`"), "{err}");
    }

    #[test]
    fn latency_config_reads_humantime_and_mode() {
        let c: LatencyConfig =
            toml::from_str("mode = \"observe\"\nfallback_p99 = \"5s\"\nmin_samples = 9").unwrap();
        assert_eq!(c.mode, LatencyMode::Observe);
        assert_eq!(c.fallback_p99, Some(Duration::from_secs(5)));
        assert_eq!(c.min_samples, Some(9));
    }

    #[test]
    fn byte_size_config_reads_integers_and_text_and_refuses_others() {
        let c: ServerConfig = toml::from_str("body_limit = 2048").unwrap();
        assert_eq!(c.body_limit, Some(ByteSizeConfig::Bytes(2048)));
        let c: ServerConfig = toml::from_str("body_limit = \"1MiB\"").unwrap();
        assert_eq!(c.body_limit, Some(ByteSizeConfig::Text("1MiB".into())));
        let err = toml::from_str::<ServerConfig>("body_limit = 1.5").unwrap_err();
        assert!(
            err.message().contains("an integer of bytes or a size"),
            "{err}"
        );
    }

    #[test]
    fn provider_config_reads_stream_and_concurrency_and_refuses_unknown_stream_fields() {
        let c: ProviderConfig = toml::from_str(
            "kind = \"anthropic\"\nmax_concurrency = 3\n[stream]\nfirst_byte_timeout = \"15s\"",
        )
        .unwrap();
        assert_eq!(c.kind, Some(ProviderKindName::Anthropic));
        assert_eq!(c.max_concurrency, Some(3));
        let stream = c.stream.unwrap();
        assert_eq!(stream.first_byte_timeout, Some(Duration::from_secs(15)));
        assert_eq!(stream.idle_timeout, None);
        let err = toml::from_str::<ProviderConfig>("[stream]\nidle = \"1s\"").unwrap_err();
        assert!(err.message().contains("unknown field `idle`"), "{err}");
    }

    #[test]
    fn model_binding_config_reads_links_and_refuses_unknown_fields() {
        let c: ModelBindingConfig = toml::from_str(
            "provider = \"p\"\nmodel = \"m\"\nfallbacks = [{ provider = \"q\", model = \"n\" }]",
        )
        .unwrap();
        assert_eq!(c.fallbacks.len(), 1);
        assert_eq!(c.fallbacks[0].provider.as_deref(), Some("q"));
        assert!(c.context_fallbacks.is_empty());
        let err = toml::from_str::<ModelBindingConfig>(
            "fallbacks = [{ provider = \"q\", modle = \"n\" }]",
        )
        .unwrap_err();
        assert!(err.message().contains("unknown field `modle`"), "{err}");
        let err = toml::from_str::<ModelBindingConfig>("fallback = []").unwrap_err();
        assert!(err.message().contains("unknown field `fallback`"), "{err}");
    }

    #[test]
    fn server_config_refuses_unknown_fields() {
        let err = toml::from_str::<ServerConfig>(
            "[queue]
worker = 2",
        )
        .unwrap_err();
        assert!(err.message().contains("unknown field `worker`"), "{err}");
    }
}

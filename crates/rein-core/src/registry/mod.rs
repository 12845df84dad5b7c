//! The registry: one entry per tool, agent, model provider, model binding
//! and resource group, checked for consistency before anything runs.
//!
//! # Why
//!
//! Retries, idempotency keys, compensation, budgets and rate limits all read
//! the same few facts about a tool — its class, key recipe, compensation,
//! latency profile, resource group. Scattered over code, config and prompt
//! text, a missing or contradicting fact silently disables the mechanism that
//! needs it (seed 000, "The Tool Registry"). So every fact lives here once,
//! the model-facing tool definitions are generated from it (never written by
//! hand), and an integrity check refuses an inconsistent registry at load,
//! naming the file and the field to fix.
//!
//! # Two layers
//!
//! As every policy in rein-core (STYLE.md), the registry has a plain serde
//! layer an operator writes — [`ConfigFile`] and its `*Config` entries — and
//! a validated layer built from it: [`Registry`] with [`ToolSpec`],
//! [`AgentSpec`], [`ProviderSpec`], [`ModelBindingSpec`],
//! [`ResourceGroupSpec`] and [`ServerSpec`]. [`check`] turns the first into the second and returns
//! **every** problem it finds, each a [`ConfigProblem`]
//! (`FILE: FIELD: MESSAGE`), not just the first.
//!
//! This module is pure: reading files, interpolating `${ENV}` values and
//! compiling JSON Schemas are the engine's job (`rein_engine::config`), which
//! hands [`check`] parsed files and a schema compiler as a [`SchemaCheck`].
//!
//! # What the check refuses
//!
//! | rule | field |
//! | --- | --- |
//! | a required field is missing or empty | the field |
//! | a name is defined in two files | `tools.NAME`, `models.NAME`, … (in the later file) |
//! | an agent names an unknown tool or provider; a tool an unknown resource group | the reference |
//! | a provider field of another kind (`script` on `openai`/`anthropic`; `base_url`, `api_key_env`, `timeout` or `[stream]` on `scripted`); an `api_key_env` that is not a variable name; a zero `timeout` | `providers.NAME.*` |
//! | a provider `max_concurrency` of 0 | `providers.NAME.max_concurrency` |
//! | a provider `tokens_per_minute` or `token_burst` of 0 or above 10^12; a `token_burst` without `tokens_per_minute` | `providers.NAME.tokens_per_minute`, `providers.NAME.token_burst` |
//! | a `[stream]` timeout of zero, or longer than the provider's `timeout` (default included), which bounds the whole call | `providers.NAME.stream.first_byte_timeout`, `….idle_timeout` |
//! | a model binding without `provider` or `model`, or naming an unknown provider | `models.NAME.provider`, `models.NAME.model` |
//! | a fallback without `provider` or `model`, or naming an unknown provider (of a binding or an agent) | `models.NAME.fallbacks[N].provider`, `agents.NAME.context_fallbacks[N].model`, … |
//! | a fallback or context fallback equal to the primary (it would retry the model that just failed), or repeating an earlier one of its list | `models.NAME.fallbacks[N]`, `agents.NAME.context_fallbacks[N]`, … |
//! | an agent without `provider` whose `model` names no `[models.*]` binding | `agents.NAME.provider` |
//! | inline `fallbacks`/`context_fallbacks` on an agent without `provider` (a binding holds its own) | `agents.NAME.fallbacks`, `agents.NAME.context_fallbacks` |
//! | a `budget.max_cost_usd` on an agent one of whose models (primary, fallbacks, context fallbacks; its own or its binding's) has no price | `agents.NAME.budget.max_cost_usd` |
//! | `model_retry.max_wasted_tokens = 0` (leave it out to rely on the token budget) | `agents.NAME.model_retry.max_wasted_tokens` |
//! | a `value_of_success_usd` that is not a positive number | `agents.NAME.value_of_success_usd` |
//! | an irreversible tool has no compensation and is not `avoid_at_plan_time` | `tools.NAME.compensation` |
//! | a compensation on a read tool; grade `none` with a tool, `strong`/`weak` without | `tools.NAME.compensation.*` |
//! | a compensation tool that is unknown, `read`, irreversible under grade `strong`, or the tool itself | `tools.NAME.compensation.tool` |
//! | an argument mapping that is not `args.<path>`/`result.<path>`, names an argument the forward schema lacks, or does not fill the compensation's required arguments | `tools.NAME.compensation.args.*` |
//! | an adapter `kind` missing or unknown, a field of another kind (`url` on a `command`, `program` on an `http`, `agent` on either) or of none, a value of the wrong type; each at its own field, beside the tool's other problems | `tools.NAME.adapter.*` |
//! | a `command` adapter with an empty `program`, a `status_url` (a command has no lookup by key), an `env` name that is not a variable name or starts with `REIN_`, a NUL byte in `program`, `args` or `env` | `tools.NAME.adapter.*` |
//! | an `agent` adapter naming no agent or an unknown one, a `budget_ratio` outside (0, 1], a zero cap (`max_tokens`, `max_steps`, `wall_clock`, `max_cost_usd`), or a `status_url` | `tools.NAME.adapter.*` |
//! | an `mcp` adapter naming no server or an unknown one, an empty `tool`, or a `status_url` (MCP has no lookup by key) | `tools.NAME.adapter.*` |
//! | an MCP server with neither or both of `command` and `url`, a setting of the other transport, an `env` name that is not a variable name, a NUL byte, a `url` that is not absolute `http`/`https`, or a `connect_timeout` out of (0, 5 min] | `mcp_servers.NAME.<field>` |
//! | a schema whose top-level type is not `object`, a property without a description, or one the schema compiler refuses | `tools.NAME.schema.*` |
//! | a `lint.allow` entry without `rule` or `reason` (blank counts as missing), naming an unknown rule, or silencing one a second time | `tools.NAME.lint.allow[N].*` |
//! | any value refused by rein-core's own config types (budget, retry, loop guard, breakers, latency) | their field, under the table path |
//! | any duration longer than [`MAX_DURATION`](crate::config::MAX_DURATION) (366 d): deadlines and lease expiries would overflow | the field (with its line) |
//! | `[breakers]` or `[server]` in two files | `breakers` / `server` (in the later file) |
//! | a `listen` that is not `IP:PORT`; a `body_limit` unparsable or outside 1 KiB..=64 MiB | `server.listen`, `server.body_limit` |
//! | a server count or duration out of range; `orphan_threshold` below `heartbeat_interval` | `server.<table>.<field>` |
//! | a webhook without `url`, `events` or `secret_env`; a URL that is not absolute `http`/`https` or holds credentials; an unknown or repeated event; `outcomes` without `run_finished` or naming an unknown outcome; `max_age` or `timeout` out of range | `webhooks.NAME.<field>` |
//! | an API key without a valid tenant; a `sha256` that is not 64 hex digits, hashes the empty key, or repeats an earlier entry's | `server.api_keys[N].<field>` |
//! | an `allowed_hosts` entry with a scheme, a path, a wildcard other than a leading `*.`, or that is no host | `server.allowed_hosts[N]` |
//! | a `[server.cors]` without origins, or with `*`, `null`, an origin with a path, a method other than GET and POST, or a header that is no header name | `server.cors.<field>[N]` |
//! | an `allowed_hosts` entry whose last label is a number (`127.1`, `10.0.0.05`): the message names the canonical address | `server.allowed_hosts[N]` |
//! | a `metrics_tenants` entry that is no tenant of an `api_keys` entry; any with `metrics = "open"` | `server.metrics_tenants[N]`, `server.metrics_tenants` |
//! | a `metrics_labels.tenants` entry no request can act for, a `metrics_labels.agents` entry that is no agent, either listed twice or more than `max_values`; a `max_values` outside 1..=1000 | `server.metrics_labels.<field>[N]`, `server.metrics_labels.<field>` |
//!
//! # Defaults
//!
//! | setting | default |
//! | --- | --- |
//! | `tools.*.idempotency.header` | [`DEFAULT_IDEMPOTENCY_HEADER`] (`Idempotency-Key`) |
//! | `tools.*.idempotency.volatile_fields` | `["trace_id", "request_id"]` |
//! | `tools.*.adapter.method` | `POST` |
//! | `tools.*.adapter.max_result_bytes` | [`DEFAULT_MAX_RESULT_BYTES`] (16 KiB) |
//! | `tools.*.adapter.max_output_bytes` (command) | [`DEFAULT_MAX_OUTPUT_BYTES`] (64 KiB) |
//! | `tools.*.adapter.tool` (mcp) | the tool's registry name |
//! | `mcp_servers.*.connect_timeout` | [`DEFAULT_MCP_CONNECT_TIMEOUT`] (30 s) |
//! | `mcp_servers.*.refresh` | [`DEFAULT_MCP_REFRESH`] (10 min) |
//! | `tools.*.adapter.budget_ratio` (agent) | [`DEFAULT_AGENT_BUDGET_RATIO`] (0.5) |
//! | `tools.*.latency` (agent adapter) | [`DEFAULT_AGENT_TOOL_LATENCY`] (5 s / 20 s / 60 s), each at most the adapter's `wall_clock` |
//! | `tools.*.latency` (any other adapter) | observed: planned at [`DEFAULT_TOOL_FALLBACK_P99`] (5 s) until [`DEFAULT_OBSERVE_MIN_SAMPLES`] calls are measured |
//! | `tools.*.resource_group` | the tool's own group, named after it: ungoverned unless `[resource_groups.<tool>]` sets limits |
//! | `tools.*.side_effect_tier` | implied by `class`: `none` for a read, `medium` for an idempotent write, `high` for an irreversible call |
//! | `tools.*.owner` | [`DEFAULT_TOOL_OWNER`] (`unassigned`) |
//! | `tools.*.latency.min_samples` (observe mode) | [`DEFAULT_OBSERVE_MIN_SAMPLES`] (50) |
//! | `tools.*.latency.scale` (observe mode only) | none: one profile for every call of the tool |
//! | `tools.*.latency.allowance_factor` (either mode, in [1, 10]) | [`DEFAULT_ALLOWANCE_FACTOR`](crate::latency::DEFAULT_ALLOWANCE_FACTOR) (2) |
//! | `agents.*.model_latency` (more than 0, at most [`MAX_MODEL_LATENCY`], 10 min) | [`DEFAULT_MODEL_LATENCY`] (500 ms; p95 4 ×, p99 10 ×) |
//! | `providers.*.timeout` (openai, anthropic) | [`DEFAULT_PROVIDER_TIMEOUT`] (60 s) |
//! | `providers.*.max_concurrency` | unlimited |
//! | `providers.*.tokens_per_minute` | unlimited (no token bucket) |
//! | `providers.*.token_burst` | `tokens_per_minute` |
//! | `providers.*.stream` | absent: calls are not streamed |
//! | `providers.*.stream.first_byte_timeout` | [`DEFAULT_STREAM_FIRST_BYTE_TIMEOUT`] (20 s) |
//! | `providers.*.stream.idle_timeout` | [`DEFAULT_STREAM_IDLE_TIMEOUT`] (10 s) |
//! | `models.*.fallbacks`, `.context_fallbacks`; the same on agents | empty: no fallback |
//! | `models.*.deadline` (a gateway call without `Rein-Deadline-Ms`) | [`DEFAULT_GATEWAY_DEADLINE`] (600 s) |
//! | `models.*.retry_before_fallback` | [`DEFAULT_RETRY_BEFORE_FALLBACK`](crate::retry::DEFAULT_RETRY_BEFORE_FALLBACK) (1) |
//! | `models.*.retry_after_max` | [`DEFAULT_RETRY_AFTER_MAX`](crate::retry::DEFAULT_RETRY_AFTER_MAX) (5 s) |
//! | `models.*.retry_timeouts` | `false` |
//! | `resource_groups.*.burst` | `rate_per_sec` rounded up |
//! | `agents.*.budget`, `.retry`, `.loop_guard`, `breakers` | their types' defaults |
//! | `agents.*.model_retry` | [`DEFAULT_MAX_MODEL_RETRIES`] retries, [`DEFAULT_MAX_MODEL_RETRY_WAIT`] of waits, no token ceiling of its own |
//! | `agents.*.planner` | `show_budget = true`, `final_turn = true` (see [`PlannerSettings`]); no `value_of_success_usd` |
//! | `server` (each field, and the whole table when absent) | the table on [`ServerSpec`] |
//!
//! ```
//! # use rein_core::registry::{self, ConfigFile, ConfigSource};
//! let text = r#"
//! [resource_groups.orders]
//! [tools.get_order]
//! description = "Look up one order by its id."
//! class = "read"
//! resource_group = "orders"
//! side_effect_tier = "none"
//! owner = "orders-team"
//! latency = { mode = "observe", fallback_p99 = "2s" }
//! adapter = { kind = "http", url = "http://127.0.0.1:8080/tools/get_order" }
//! schema = { type = "object", properties = { order_id = { type = "string", description = "Order id, e.g. A-1001" } }, required = ["order_id"] }
//! "#;
//! # let file: ConfigFile = toml::from_str(text)?;
//! let registry = registry::check(&[ConfigSource::new("rein.toml", file)], &|_| Vec::new())
//!     .map_err(|problems| problems[0].to_string())?;
//! let tool = &registry.tools()["get_order"];
//! assert_eq!(tool.model_description(), "[read-only] Look up one order by its id.");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod adapter;
mod approval;
mod check;
mod compensation;
mod config;
mod constants;
pub mod explain;
mod exposure;
mod fan_out;
mod json_schema;
mod key_budget;
mod lint_allow;
mod mcp;
mod metrics_labels;
mod model_tools;
mod planner;
mod problem;
mod quotas;
mod server;
mod source_map;
mod spec;
mod store;
mod telemetry;
mod webhooks;

pub use adapter::{
    AdapterConfig, AdapterKind, AdapterProblem, AdapterTable, AgentAdapterConfig,
    CommandAdapterConfig, HttpAdapterConfig, McpAdapterConfig,
};
pub use approval::{
    ApprovalConfig, ApprovalSettings, Comparison, DEFAULT_WINDOW as DEFAULT_APPROVAL_WINDOW,
    MAX_WINDOW as MAX_APPROVAL_WINDOW, OnExpiry, Rule, ToolApproval, ToolApprovalConfig,
};
pub use check::{SchemaCheck, check};
pub use compensation::{
    ArgSource, ArgSourceError, CompensationGrade, CompensationSpec, UnresolvedArg,
};
pub use config::{
    AgentConfig, AgentGraphConfig, ApiKeyConfig, BindingKind, ByteSizeConfig, CompensationConfig,
    ConfigFile, ConfigSource, CorsConfig, IdempotencyConfig, LatencyConfig, LatencyMode,
    LatencyScaleConfig, ModelBindingConfig, ModelLinkConfig, ModelRetryConfig, PriceConfig,
    ProviderConfig, ProviderKindName, QueueConfig, ReconciliationConfig, ResourceGroupConfig,
    ServerConfig, ServerIdempotencyConfig, ServerLimitsConfig, StreamConfig, ToolConfig,
};
pub use constants::{
    DEFAULT_AGENT_BUDGET_RATIO, DEFAULT_AGENT_GRAPH_MAX_DEPTH, DEFAULT_AGENT_GRAPH_MAX_TOTAL_RUNS,
    DEFAULT_AGENT_GRAPH_MAX_TOTAL_TOKENS, DEFAULT_AGENT_TOOL_LATENCY, DEFAULT_BODY_LIMIT,
    DEFAULT_BODY_TIMEOUT, DEFAULT_COMPENSATION_RESERVE, DEFAULT_CORS_ALLOWED_HEADERS,
    DEFAULT_CORS_ALLOWED_METHODS, DEFAULT_GATEWAY_DEADLINE, DEFAULT_HEADER_TIMEOUT,
    DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_IDEMPOTENCY_HEADER, DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_KEY_LENGTH,
    DEFAULT_MAX_MODEL_RETRIES, DEFAULT_MAX_MODEL_RETRY_WAIT, DEFAULT_MAX_OUTPUT_BYTES,
    DEFAULT_MAX_RESULT_BYTES, DEFAULT_MAX_RUNS_PER_SCAN, DEFAULT_MODEL_LATENCY,
    DEFAULT_OBSERVE_MIN_SAMPLES, DEFAULT_ORPHAN_THRESHOLD, DEFAULT_PROVIDER_TIMEOUT,
    DEFAULT_QUEUE_LEASE, DEFAULT_QUEUE_MAX_ATTEMPTS, DEFAULT_QUEUE_WORKERS, DEFAULT_SCAN_INTERVAL,
    DEFAULT_SHUTDOWN_GRACE, DEFAULT_STREAM_FIRST_BYTE_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT,
    DEFAULT_TOOL_FALLBACK_P99, DEFAULT_TOOL_OWNER, MAX_BODY_LIMIT, MAX_COMPENSATION_RESERVE,
    MAX_CONNECTION_TIMEOUT, MAX_KEY_LENGTH, MAX_MAX_CONNECTIONS, MAX_MODEL_LATENCY,
    MAX_QUEUE_WORKERS, MAX_SHUTDOWN_GRACE, MIN_BODY_LIMIT, MIN_CONNECTION_TIMEOUT,
    MIN_IDEMPOTENCY_RETENTION, MIN_QUEUE_LEASE, RESERVED_ENV_PREFIX, RESERVED_HEADERS,
};
pub use exposure::{
    AllowedHost, Authority, CorsSpec, HostName, HostPattern, MetricsAccess, Origin, Scheme,
    host_is_allowed,
};
pub use fan_out::{
    DEFAULT_MAX_CALLS_PER_TURN, FanOutConfig, FanOutLimits, MAX_CALLS_PER_TURN, ResourceKey,
};
pub use json_schema::config_json_schema;
pub use key_budget::{
    KeyBudget, KeyBudgetConfig, Period, Reached, Spent, day_of, month_start, next_month_start,
};
pub use lint_allow::{AllowConfig, ToolLintConfig};
pub use mcp::{
    DEFAULT_MCP_CONNECT_TIMEOUT, DEFAULT_MCP_REFRESH, MAX_MCP_CONNECT_TIMEOUT, MAX_MCP_REFRESH,
    MIN_MCP_REFRESH, McpServerConfig, McpServerSpec, McpTransport,
};
pub use metrics_labels::{
    DEFAULT_METRICS_LABEL_VALUES, MAX_METRICS_LABEL_VALUES, MetricsLabels, MetricsLabelsConfig,
};
pub use planner::{PlannerConfig, PlannerSettings};
pub use problem::{ConfigProblem, Position, SchemaIssue};
pub use quotas::{
    DEFAULT_INTERACTIVE_RESERVE, KEYLESS_TENANT, RunSlots, ServerQuotas, ServerQuotasConfig,
    SubmissionRate, TenantQuota, TenantQuotaConfig,
};
pub use server::{
    AgentGraphLimits, ApiKeySpec, ConnectionLimits, IdempotencySettings, QueueSettings,
    ReconciliationSettings, ServerSpec,
};
pub use source_map::SourceMap;
pub use spec::{
    AdapterSpec, AgentSpec, HttpMethod, IdempotencySpec, LatencySpec, ModelBindingSpec, ModelLink,
    ModelRetryLimits, Price, ProviderKind, ProviderSpec, RateLimit, Registry, ResourceGroupSpec,
    SideEffectTier, StreamSpec, TokenLimit, ToolSpec,
};

pub use store::{
    DEFAULT_BUSY_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_POOL_SIZE, MAX_BUSY_TIMEOUT,
    MAX_CONNECT_TIMEOUT, MAX_POOL_SIZE, StoreConfig, StoreSpec, StoreUrl, Synchronous,
};
pub use telemetry::{DEFAULT_SERVICE_NAME, OTLP_TRACES_PATH, TelemetryConfig, TelemetrySpec};
pub use webhooks::{MAX_WEBHOOK_AGE, MAX_WEBHOOK_TIMEOUT, WebhookConfig, WebhookSpec};

#[cfg(test)]
mod tests;

//! The integrity check: parsed config files in, a [`Registry`] or every
//! problem out.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::{Path, PathBuf};
use std::time::Duration;

use humantime_serde::re::humantime::format_duration;
use serde_json::{Map, Value};

use super::compensation::{ArgSource, CompensationGrade, CompensationSpec};
use super::config::CorsConfig;
use super::config::{
    AdapterConfig, AdapterKind, AgentConfig, ByteSizeConfig, CompensationConfig, ConfigSource,
    IdempotencyConfig, LatencyConfig, LatencyMode, ModelBindingConfig, ModelLinkConfig,
    ProviderConfig, ProviderKindName, ResourceGroupConfig, ServerConfig, StreamConfig, ToolConfig,
};
use super::constants::{
    DEFAULT_AGENT_BUDGET_RATIO, DEFAULT_AGENT_TOOL_LATENCY, DEFAULT_COMPENSATION_RESERVE,
    DEFAULT_MAX_MODEL_RETRIES, DEFAULT_MAX_MODEL_RETRY_WAIT, DEFAULT_MODEL_LATENCY,
    DEFAULT_STREAM_FIRST_BYTE_TIMEOUT, DEFAULT_STREAM_IDLE_TIMEOUT, MAX_COMPENSATION_RESERVE,
    MAX_MODEL_LATENCY,
};
use super::constants::{DEFAULT_CORS_ALLOWED_HEADERS, DEFAULT_CORS_ALLOWED_METHODS};
use super::constants::{
    DEFAULT_IDEMPOTENCY_HEADER, DEFAULT_MAX_OUTPUT_BYTES, DEFAULT_MAX_RESULT_BYTES,
    DEFAULT_OBSERVE_MIN_SAMPLES, DEFAULT_PROVIDER_TIMEOUT, RESERVED_ENV_PREFIX, RESERVED_HEADERS,
};
use super::constants::{DEFAULT_TOOL_FALLBACK_P99, DEFAULT_TOOL_OWNER};
use super::constants::{
    MAX_BODY_LIMIT, MAX_KEY_LENGTH, MAX_QUEUE_WORKERS, MIN_BODY_LIMIT, MIN_IDEMPOTENCY_RETENTION,
    MIN_QUEUE_LEASE,
};
use super::exposure::{AllowedHost, CorsSpec, MetricsAccess, Origin};
// Connection limits and drain (`[server.limits]`, `server.shutdown_grace`).
use super::config::ServerLimitsConfig;
use super::constants::{
    MAX_CONNECTION_TIMEOUT, MAX_MAX_CONNECTIONS, MAX_SHUTDOWN_GRACE, MIN_CONNECTION_TIMEOUT,
};
use super::problem::{ConfigProblem, SchemaIssue};

mod output_caps;
mod output_fields;
use super::server::ConnectionLimits;
use super::server::{ApiKeySpec, ServerSpec, empty_key_digest, parse_byte_size, parse_sha256_hex};
use super::spec::{
    AdapterSpec, AgentSpec, IdempotencySpec, LatencySpec, ModelBindingSpec, ModelLink,
    ModelRetryLimits, Price, ProviderKind, ProviderSpec, RateLimit, Registry, ResourceGroupSpec,
    StreamSpec, TokenLimit, ToolSpec,
};
use super::telemetry::{DEFAULT_SERVICE_NAME, TelemetryConfig, TelemetrySpec};
use crate::breaker::{Breakers, BreakersConfig};
use crate::config::{ConfigError, Ratio};
use crate::deadline::{BudgetLimits, ChildCaps, Cost};
use crate::idempotency::NormalizerConfig;
use crate::ids::TenantId;
use crate::latency::{AllowanceFactor, LatencyScale, MAX_ALLOWANCE_FACTOR, MIN_ALLOWANCE_FACTOR};
use crate::loop_guard::LoopGuard;
use crate::retry::{
    DEFAULT_RETRY_AFTER_MAX, DEFAULT_RETRY_BEFORE_FALLBACK, MAX_RETRY_AFTER_MAX,
    MAX_RETRY_BEFORE_FALLBACK, RetryPolicy, SameModelRetry,
};
use crate::tool::{LatencyProfile, ToolClass};

/// A JSON Schema compiler the check hands each tool's schema to, once the
/// schema has passed the check's own structural rules.
///
/// rein-core stays free of a schema library; the engine passes one that
/// compiles the schema and reports what its compiler refuses. Pass
/// `&|_| Vec::new()` to skip that step.
pub type SchemaCheck<'a> = dyn Fn(&Value) -> Vec<SchemaIssue> + 'a;

/// Checks the parsed files `sources` for consistency and builds the
/// [`Registry`] they describe.
///
/// Files are merged in the order given; a name defined twice is reported at
/// its later definition. Every rule in the [module table](super) is
/// checked, and every violation is collected.
///
/// # Errors
///
/// Every [`ConfigProblem`] found, grouped by file in the order of
/// `sources`, each naming its file and dotted field.
pub fn check(
    sources: &[ConfigSource],
    schema_check: &SchemaCheck<'_>,
) -> Result<Registry, Vec<ConfigProblem>> {
    let mut checker = Checker::new(sources, schema_check);
    let registry = checker.run();
    let mut problems = checker.problems;
    if problems.is_empty() {
        return Ok(registry);
    }
    let order: BTreeMap<&Path, usize> = sources
        .iter()
        .enumerate()
        .rev()
        .map(|(i, s)| (s.path.as_path(), i))
        .collect();
    problems.sort_by_key(|p| order.get(p.file.as_path()).copied().unwrap_or(usize::MAX));
    Err(problems)
}

/// One named entry of a section, with the file it came from.
struct Entry<'a, T> {
    file: &'a Path,
    config: &'a T,
}

/// All files' sections merged by name, first definition wins.
struct Merged<'a> {
    providers: BTreeMap<&'a str, Entry<'a, ProviderConfig>>,
    models: BTreeMap<&'a str, Entry<'a, ModelBindingConfig>>,
    resource_groups: BTreeMap<&'a str, Entry<'a, ResourceGroupConfig>>,
    tools: BTreeMap<&'a str, Entry<'a, ToolConfig>>,
    agents: BTreeMap<&'a str, Entry<'a, AgentConfig>>,
    breakers: Option<Entry<'a, BreakersConfig>>,
    server: Option<Entry<'a, ServerConfig>>,
    telemetry: Option<Entry<'a, TelemetryConfig>>,
    store: Option<Entry<'a, super::store::StoreConfig>>,
    webhooks: BTreeMap<&'a str, Entry<'a, super::webhooks::WebhookConfig>>,
    mcp_servers: BTreeMap<&'a str, Entry<'a, super::mcp::McpServerConfig>>,
    /// `section.name` of entries that failed to parse (already reported).
    broken: BTreeSet<&'a str>,
}

struct Checker<'a> {
    sources: &'a [ConfigSource],
    schema_check: &'a SchemaCheck<'a>,
    problems: Vec<ConfigProblem>,
}

impl<'a> Checker<'a> {
    fn new(sources: &'a [ConfigSource], schema_check: &'a SchemaCheck<'a>) -> Self {
        Checker {
            sources,
            schema_check,
            problems: Vec::new(),
        }
    }

    fn report(&mut self, file: &Path, field: impl Into<String>, message: impl Into<String>) {
        self.problems
            .push(ConfigProblem::new(file, field.into(), message.into()));
    }

    /// Reports a rein-core [`ConfigError`] under `prefix` (the table path):
    /// `budget.max_steps` of agent `a` becomes `agents.a.budget.max_steps`.
    fn config_error(&mut self, file: &Path, prefix: &str, err: &ConfigError) {
        let own = err.field();
        let field = if let Some(rest) = own.strip_prefix("breaker.") {
            // NOTE: breaker errors say `breaker.<kind>`; the table is `[breakers]`.
            format!("breakers.{rest}")
        } else if prefix.is_empty() {
            own.to_owned()
        } else {
            format!("{prefix}.{own}")
        };
        let text = err.to_string();
        // The error's text starts with its own field name, which the problem
        // already shows; keep the text whole when what follows is not a
        // sentence on its own ("X or Y must be set").
        let message = match text.strip_prefix(own).map(str::trim_start) {
            Some(rest) if !rest.is_empty() && !rest.starts_with("or ") => rest.to_owned(),
            _ => text,
        };
        self.report(file, field, message);
    }

    fn run(&mut self) -> Registry {
        let merged = self.merge();
        let providers = self.providers(&merged);
        let models = self.models(&merged);
        let resource_groups = self.resource_groups(&merged);
        let tools = self.tools(&merged);
        let agents = self.agents(&merged, &models);
        let breakers = match &merged.breakers {
            Some(entry) => {
                if let Err(err) = Breakers::new(entry.config.clone()) {
                    self.config_error(entry.file, "", &err);
                }
                entry.config.clone()
            }
            None => BreakersConfig::default(),
        };
        let server = match &merged.server {
            Some(entry) => {
                let mut spec = self.server(entry.file, entry.config);
                spec.metrics_labels = self.metrics_labels(entry.file, entry.config, &spec, &agents);
                spec
            }
            None => ServerSpec::default(),
        };
        let telemetry = merged
            .telemetry
            .as_ref()
            .and_then(|entry| self.telemetry(entry.file, entry.config));
        let store = merged.store.as_ref().and_then(|entry| {
            super::store::check_store(entry.file, entry.config)
                .map_err(|problems| {
                    for (field, message) in problems {
                        self.report(entry.file, field, message);
                    }
                })
                .ok()
        });
        let mut webhooks = BTreeMap::new();
        for (name, entry) in &merged.webhooks {
            match super::webhooks::check_webhook(name, entry.config) {
                Ok(spec) => {
                    webhooks.insert((*name).to_owned(), spec);
                }
                Err(problems) => {
                    for (field, message) in problems {
                        self.report(entry.file, field, message);
                    }
                }
            }
        }
        let mcp_servers = self.checked_mcp_servers(&merged);
        Registry {
            providers,
            models,
            resource_groups,
            tools,
            agents,
            breakers,
            server,
            telemetry,
            store,
            webhooks,
            mcp_servers,
        }
    }

    /// `[mcp_servers.NAME]`, checked; a server with problems is left out
    /// (its problems are reported once, here, not by each tool naming it).
    fn checked_mcp_servers(
        &mut self,
        merged: &Merged<'a>,
    ) -> BTreeMap<String, super::mcp::McpServerSpec> {
        let mut servers = BTreeMap::new();
        for (name, entry) in &merged.mcp_servers {
            match super::mcp::check_mcp_server(entry.file, name, entry.config) {
                Ok(spec) => {
                    servers.insert((*name).to_owned(), spec);
                }
                Err(problems) => {
                    for (field, message) in problems {
                        self.report(entry.file, field, message);
                    }
                }
            }
        }
        servers
    }

    /// Merges the files, reporting names defined in more than one.
    fn merge(&mut self) -> Merged<'a> {
        let mut merged = Merged {
            providers: BTreeMap::new(),
            models: BTreeMap::new(),
            resource_groups: BTreeMap::new(),
            tools: BTreeMap::new(),
            agents: BTreeMap::new(),
            breakers: None,
            server: None,
            telemetry: None,
            store: None,
            webhooks: BTreeMap::new(),
            mcp_servers: BTreeMap::new(),
            broken: BTreeSet::new(),
        };
        let mut first: BTreeMap<String, &'a Path> = BTreeMap::new();
        let sources = self.sources;
        for source in sources {
            let file = source.path.as_path();
            let c = &source.config;
            let mut defined: Vec<String> = Vec::new();
            defined.extend(c.providers.keys().map(|n| format!("providers.{n}")));
            defined.extend(c.models.keys().map(|n| format!("models.{n}")));
            defined.extend(
                c.resource_groups
                    .keys()
                    .map(|n| format!("resource_groups.{n}")),
            );
            defined.extend(c.tools.keys().map(|n| format!("tools.{n}")));
            defined.extend(c.agents.keys().map(|n| format!("agents.{n}")));
            defined.extend(c.webhooks.keys().map(|n| format!("webhooks.{n}")));
            defined.extend(c.mcp_servers.keys().map(|n| format!("mcp_servers.{n}")));
            if c.breakers.is_some() {
                defined.push("breakers".to_owned());
            }
            if c.server.is_some() {
                defined.push("server".to_owned());
            }
            if c.telemetry.is_some() {
                defined.push("telemetry".to_owned());
            }
            if c.store.is_some() {
                defined.push("store".to_owned());
            }
            defined.extend(source.broken.iter().cloned());
            let mut fresh: BTreeSet<String> = BTreeSet::new();
            for entry in defined {
                if let Some(earlier) = first.get(&entry) {
                    let rule = if entry.contains('.') {
                        "each name may be defined once across all files".to_owned()
                    } else {
                        format!("only one file may hold [{entry}]")
                    };
                    self.report(
                        file,
                        entry.clone(),
                        format!("is also defined in {}; {rule}", earlier.display()),
                    );
                } else {
                    first.insert(entry.clone(), file);
                    fresh.insert(entry);
                }
            }
            let is_fresh = |section: &str, name: &str| fresh.contains(&format!("{section}.{name}"));
            for (name, config) in &c.providers {
                if is_fresh("providers", name) {
                    merged.providers.insert(name, Entry { file, config });
                }
            }
            for (name, config) in &c.models {
                if is_fresh("models", name) {
                    merged.models.insert(name, Entry { file, config });
                }
            }
            for (name, config) in &c.resource_groups {
                if is_fresh("resource_groups", name) {
                    merged.resource_groups.insert(name, Entry { file, config });
                }
            }
            for (name, config) in &c.tools {
                if is_fresh("tools", name) {
                    merged.tools.insert(name, Entry { file, config });
                }
            }
            for (name, config) in &c.agents {
                if is_fresh("agents", name) {
                    merged.agents.insert(name, Entry { file, config });
                }
            }
            for (name, config) in &c.webhooks {
                if is_fresh("webhooks", name) {
                    merged.webhooks.insert(name, Entry { file, config });
                }
            }
            for (name, config) in &c.mcp_servers {
                if is_fresh("mcp_servers", name) {
                    merged.mcp_servers.insert(name, Entry { file, config });
                }
            }
            if let (Some(config), true) = (&c.breakers, fresh.contains("breakers")) {
                merged.breakers = Some(Entry { file, config });
            }
            if let (Some(config), true) = (&c.server, fresh.contains("server")) {
                merged.server = Some(Entry { file, config });
            }
            if let (Some(config), true) = (&c.telemetry, fresh.contains("telemetry")) {
                merged.telemetry = Some(Entry { file, config });
            }
            if let (Some(config), true) = (&c.store, fresh.contains("store")) {
                merged.store = Some(Entry { file, config });
            }
            merged
                .broken
                .extend(source.broken.iter().map(String::as_str));
        }
        merged
    }

    // ----- providers -----------------------------------------------------

    fn providers(&mut self, merged: &Merged<'a>) -> BTreeMap<String, ProviderSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.providers {
            if let Some(spec) = self.provider(entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    fn provider(&mut self, file: &Path, name: &str, c: &ProviderConfig) -> Option<ProviderSpec> {
        let p = format!("providers.{name}");
        self.name(file, &p, name);
        let kind = match c.kind {
            None => {
                self.report(
                    file,
                    format!("{p}.kind"),
                    "is required: openai, anthropic or scripted",
                );
                None
            }
            Some(ProviderKindName::Openai) => self
                .network_provider(file, &p, "openai", "https://api.openai.com/v1", c)
                .map(|(base_url, api_key_env, timeout)| ProviderKind::OpenAi {
                    base_url,
                    api_key_env,
                    timeout,
                }),
            Some(ProviderKindName::Anthropic) => self
                .network_provider(file, &p, "anthropic", "https://api.anthropic.com/v1", c)
                .map(|(base_url, api_key_env, timeout)| ProviderKind::Anthropic {
                    base_url,
                    api_key_env,
                    timeout,
                }),
            Some(ProviderKindName::Scripted) => {
                for (present, field) in [
                    (c.base_url.is_some(), "base_url"),
                    (c.api_key_env.is_some(), "api_key_env"),
                    (c.timeout.is_some(), "timeout"),
                ] {
                    if present {
                        self.report(
                            file,
                            format!("{p}.{field}"),
                            format!("is only for openai and anthropic providers; remove {field}"),
                        );
                    }
                }
                if c.stream.is_some() {
                    self.report(
                        file,
                        format!("{p}.stream"),
                        "is only for openai and anthropic providers: a scripted provider replays \
                         recorded turns and has no stream to time; remove [stream]",
                    );
                }
                match &c.script {
                    Some(script) if !script.as_os_str().is_empty() => {
                        Some(ProviderKind::Scripted {
                            script: resolve_relative(file, script),
                        })
                    }
                    _ => {
                        self.report(
                            file,
                            format!("{p}.script"),
                            "is required for a scripted provider: a path relative to this file",
                        );
                        None
                    }
                }
            }
        };
        // Allowed on every kind, scripted included: the limit is rein's own,
        // not the transport's, so a scripted config can rehearse the limits
        // its production twin will run under.
        let max_concurrency = match c.max_concurrency {
            None => None,
            Some(n) => {
                let limit = NonZeroU32::new(n);
                if limit.is_none() {
                    self.report(
                        file,
                        format!("{p}.max_concurrency"),
                        "must be greater than zero; leave it out for no limit",
                    );
                }
                limit
            }
        };
        let tokens = self.provider_tokens(file, &p, c, max_concurrency);
        let stream = match (&c.stream, kind.as_ref().and_then(ProviderKind::timeout)) {
            // An HTTP provider (one with a timeout) streams.
            (Some(stream), Some(_)) => self.stream(file, &p, stream),
            _ => None,
        };
        let mut prices = BTreeMap::new();
        for (model, price) in &c.prices {
            let prefix = format!("{p}.prices.{model}");
            let input = Cost::from_usd("input_per_mtok_usd", price.input_per_mtok_usd);
            let output = Cost::from_usd("output_per_mtok_usd", price.output_per_mtok_usd);
            match (input, output) {
                (Ok(input_per_mtok), Ok(output_per_mtok)) => {
                    prices.insert(
                        model.clone(),
                        Price {
                            input_per_mtok,
                            output_per_mtok,
                        },
                    );
                }
                (input, output) => {
                    for err in [input.err(), output.err()].into_iter().flatten() {
                        self.config_error(file, &prefix, &err);
                    }
                }
            }
        }
        let mut output_caps = BTreeMap::new();
        for (model, cap) in &c.max_output_tokens {
            match NonZeroU32::new(*cap) {
                Some(cap) => {
                    output_caps.insert(model.clone(), cap);
                }
                None => self.report(
                    file,
                    format!("{p}.max_output_tokens.{model}"),
                    "must be at least 1: the most output tokens the model may produce in one answer",
                ),
            }
        }
        if !c.output_tokens_field.is_empty()
            && !matches!(c.kind, Some(ProviderKindName::Openai) | None)
        {
            self.report(
                file,
                format!("{p}.output_tokens_field"),
                "is only for openai providers: the Anthropic Messages API takes its output \
                 ceiling in max_tokens alone, and a scripted provider sends nothing; remove \
                 output_tokens_field",
            );
        }
        Some(ProviderSpec {
            name: name.to_owned(),
            kind: kind?,
            prices,
            output_caps,
            output_fields: c.output_tokens_field.clone(),
            max_concurrency,
            tokens,
            stream,
            source: file.to_path_buf(),
        })
    }

    /// A provider's token bucket (`tokens_per_minute`, `token_burst`),
    /// refused where the provider's governor would refuse it.
    fn provider_tokens(
        &mut self,
        file: &Path,
        p: &str,
        c: &ProviderConfig,
        max_concurrency: Option<NonZeroU32>,
    ) -> Option<TokenLimit> {
        let per_minute = match (c.tokens_per_minute, c.token_burst) {
            (None, None) => return None,
            (None, Some(_)) => {
                self.report(
                    file,
                    format!("{p}.token_burst"),
                    "has no effect without tokens_per_minute: set both, or leave both out",
                );
                return None;
            }
            (Some(tpm), _) => match NonZeroU64::new(tpm) {
                Some(tpm) => tpm,
                None => {
                    self.report(
                        file,
                        format!("{p}.tokens_per_minute"),
                        "must be greater than zero; leave it out for no token bucket",
                    );
                    return None;
                }
            },
        };
        let burst = match c.token_burst.map(NonZeroU64::new) {
            None => per_minute,
            Some(Some(burst)) => burst,
            Some(None) => {
                self.report(
                    file,
                    format!("{p}.token_burst"),
                    "must be greater than zero; leave it out for a bucket of tokens_per_minute",
                );
                return None;
            }
        };
        let tokens = TokenLimit::new(per_minute, burst);
        let config = crate::governor::GovernorConfig::provider(max_concurrency, Some(tokens));
        if let Err(e) = crate::governor::Governor::new(config) {
            let field = if e.field().contains("token_burst") {
                "token_burst"
            } else {
                "tokens_per_minute"
            };
            self.report(file, format!("{p}.{field}"), e.to_string());
            return None;
        }
        Some(tokens)
    }

    /// The settings shared by providers that call an HTTP API (`openai`,
    /// `anthropic`): `(base_url, api_key_env, timeout)` when they pass.
    fn network_provider(
        &mut self,
        file: &Path,
        p: &str,
        kind: &str,
        example_url: &str,
        c: &ProviderConfig,
    ) -> Option<(String, Option<String>, Duration)> {
        if c.script.is_some() {
            self.report(
                file,
                format!("{p}.script"),
                "is only for scripted providers; remove script",
            );
        }
        let base_url = match &c.base_url {
            None => {
                self.report(
                    file,
                    format!("{p}.base_url"),
                    format!("is required for an {kind} provider, e.g. \"{example_url}\""),
                );
                None
            }
            Some(url) => self.url(file, &format!("{p}.base_url"), url),
        };
        if let Some(var) = c.api_key_env.as_deref().filter(|v| !is_env_name(v)) {
            self.report(
                file,
                format!("{p}.api_key_env"),
                format!(
                    "must be the name of an environment variable (letters, digits, _), but it is `{var}`"
                ),
            );
        }
        let timeout = c.timeout.unwrap_or(DEFAULT_PROVIDER_TIMEOUT);
        if timeout.is_zero() {
            self.report(file, format!("{p}.timeout"), "must be greater than zero");
        }
        base_url.map(|base_url| (base_url, c.api_key_env.clone(), timeout))
    }

    /// `[providers.NAME.stream]`: each timeout positive. Neither is
    /// bounded by the provider's `timeout`: that bounds a non-streamed
    /// call, while a stream is bounded by its progress (these limits) and
    /// the caller's deadline, so a long healthy answer is not cut
    /// (issue 35, item 2).
    fn stream(&mut self, file: &Path, p: &str, c: &StreamConfig) -> Option<StreamSpec> {
        let mut ok = true;
        let mut limit = |value: Option<Duration>, default: Duration, field: &str| {
            let f = format!("{p}.stream.{field}");
            let d = value.unwrap_or(default);
            if d.is_zero() {
                self.report(file, f, "must be greater than zero");
                ok = false;
            }
            d
        };
        let first_byte_timeout = limit(
            c.first_byte_timeout,
            DEFAULT_STREAM_FIRST_BYTE_TIMEOUT,
            "first_byte_timeout",
        );
        let idle_timeout = limit(c.idle_timeout, DEFAULT_STREAM_IDLE_TIMEOUT, "idle_timeout");
        ok.then_some(StreamSpec {
            first_byte_timeout,
            idle_timeout,
        })
    }

    // ----- model bindings --------------------------------------------------

    fn models(&mut self, merged: &Merged<'a>) -> BTreeMap<String, ModelBindingSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.models {
            if let Some(spec) = self.model_binding(merged, entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    fn model_binding(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        name: &str,
        c: &ModelBindingConfig,
    ) -> Option<ModelBindingSpec> {
        let p = format!("models.{name}");
        self.name(file, &p, name);
        let provider = match c.provider.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{p}.provider"),
                    "is required: the provider of the primary model",
                );
                None
            }
            Some(provider) => self.provider_ref(merged, file, &format!("{p}.provider"), provider),
        };
        let model = self.required_text(file, &p, "model", c.model.as_deref());
        let primary = provider.zip(model).map(|(p, m)| ModelLink::new(p, m));
        let (fallbacks, context_fallbacks) = self.fallback_lists(
            merged,
            file,
            &p,
            primary.as_ref(),
            &c.fallbacks,
            &c.context_fallbacks,
        );
        self.output_caps(
            merged,
            file,
            &p,
            [
                ("model", primary.iter().collect()),
                ("fallbacks", fallbacks.iter().flatten().collect()),
                (
                    "context_fallbacks",
                    context_fallbacks.iter().flatten().collect(),
                ),
            ],
        );
        let deadline = self.positive(
            file,
            &format!("{p}.deadline"),
            c.deadline,
            super::DEFAULT_GATEWAY_DEADLINE,
        );
        let same_model = self.same_model_retry(file, &p, c)?;
        Some(ModelBindingSpec {
            name: name.to_owned(),
            primary: primary?,
            fallbacks: fallbacks?,
            context_fallbacks: context_fallbacks?,
            same_model,
            deadline,
            source: file.to_path_buf(),
        })
    }

    /// A binding's same-model retries before fallback (`p` is its table
    /// path), each field in range or reported.
    fn same_model_retry(
        &mut self,
        file: &Path,
        p: &str,
        c: &ModelBindingConfig,
    ) -> Option<SameModelRetry> {
        let mut ok = true;
        let retries = c
            .retry_before_fallback
            .unwrap_or(DEFAULT_RETRY_BEFORE_FALLBACK);
        if retries > MAX_RETRY_BEFORE_FALLBACK {
            self.report(
                file,
                format!("{p}.retry_before_fallback"),
                format!(
                    "must be at most {MAX_RETRY_BEFORE_FALLBACK} (more turns a fallback chain into \
                     a retry loop), but it is {retries}"
                ),
            );
            ok = false;
        }
        let retry_after_max = c.retry_after_max.unwrap_or(DEFAULT_RETRY_AFTER_MAX);
        if retry_after_max > MAX_RETRY_AFTER_MAX {
            self.report(
                file,
                format!("{p}.retry_after_max"),
                format!(
                    "must be at most {} (a longer wait is better spent on the fallback), but it \
                     is {}",
                    format_duration(MAX_RETRY_AFTER_MAX),
                    format_duration(retry_after_max)
                ),
            );
            ok = false;
        }
        ok.then_some(SameModelRetry {
            retries,
            retry_after_max,
            retry_timeouts: c.retry_timeouts.unwrap_or(false),
        })
    }

    /// The `fallbacks` and `context_fallbacks` of a binding or an agent
    /// (`p` is its table path), checked against its `primary` when that
    /// passed.
    fn fallback_lists(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        primary: Option<&ModelLink>,
        fallbacks: &[ModelLinkConfig],
        context_fallbacks: &[ModelLinkConfig],
    ) -> (Option<Vec<ModelLink>>, Option<Vec<ModelLink>>) {
        let fallbacks = self.links(
            merged,
            file,
            &format!("{p}.fallbacks"),
            primary,
            fallbacks,
            "a fallback must be another model, or it would only retry the one that just failed \
             (retries are the retry policy's job)",
        );
        let context_fallbacks = self.links(
            merged,
            file,
            &format!("{p}.context_fallbacks"),
            primary,
            context_fallbacks,
            "on context_overflow the same model is never retried: the prompt would not fit again; \
             name a model with a larger context window",
        );
        (fallbacks, context_fallbacks)
    }

    /// One list of links under `f` (`models.smart.fallbacks`), each
    /// reported at `f[i]`: its provider and model required and the provider
    /// known; no link equal to `primary` (`why` says why not) or to an
    /// earlier link of the list.
    fn links(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        f: &str,
        primary: Option<&ModelLink>,
        links: &[ModelLinkConfig],
        why: &str,
    ) -> Option<Vec<ModelLink>> {
        let mut ok = true;
        // Each link that passed, with its index in the list as written.
        let mut out: Vec<(usize, ModelLink)> = Vec::with_capacity(links.len());
        for (i, link) in links.iter().enumerate() {
            let at = format!("{f}[{i}]");
            let provider = match link.provider.as_deref() {
                None => {
                    self.report(
                        file,
                        format!("{at}.provider"),
                        "is required: the provider of this model",
                    );
                    None
                }
                Some(provider) => {
                    self.provider_ref(merged, file, &format!("{at}.provider"), provider)
                }
            };
            let model = self.required_text(file, &at, "model", link.model.as_deref());
            let Some(link) = provider.zip(model).map(|(p, m)| ModelLink::new(p, m)) else {
                ok = false;
                continue;
            };
            if primary == Some(&link) {
                self.report(
                    file,
                    at,
                    format!(
                        "is the primary model (`{}` of provider `{}`); {why}",
                        link.model, link.provider
                    ),
                );
                ok = false;
            } else if let Some((j, _)) = out.iter().find(|(_, earlier)| *earlier == link) {
                self.report(
                    file,
                    at,
                    format!(
                        "repeats {f}[{j}] (`{}` of provider `{}`); the same model would be tried twice",
                        link.model, link.provider
                    ),
                );
                ok = false;
            }
            out.push((i, link));
        }
        ok.then(|| out.into_iter().map(|(_, link)| link).collect())
    }

    /// A reference to a provider at `field`, if the provider is defined.
    fn provider_ref(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        field: &str,
        provider: &str,
    ) -> Option<String> {
        if merged.has("providers", provider) {
            return Some(provider.to_owned());
        }
        self.report(
            file,
            field,
            format!("names `{provider}`, which is not a provider; define [providers.{provider}]"),
        );
        None
    }

    // ----- resource groups -------------------------------------------------

    fn resource_groups(&mut self, merged: &Merged<'a>) -> BTreeMap<String, ResourceGroupSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.resource_groups {
            if let Some(spec) = self.resource_group(entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    fn resource_group(
        &mut self,
        file: &Path,
        name: &str,
        c: &ResourceGroupConfig,
    ) -> Option<ResourceGroupSpec> {
        let p = format!("resource_groups.{name}");
        self.name(file, &p, name);
        let mut ok = true;
        let rate = match c.rate_per_sec {
            None => {
                if c.burst.is_some() {
                    self.report(
                        file,
                        format!("{p}.burst"),
                        "needs rate_per_sec: a bucket that never refills limits nothing useful",
                    );
                    ok = false;
                }
                None
            }
            Some(per_sec) if !(per_sec.is_finite() && per_sec > 0.0) => {
                self.report(
                    file,
                    format!("{p}.rate_per_sec"),
                    format!("must be a finite number greater than zero, but it is {per_sec}"),
                );
                ok = false;
                None
            }
            Some(per_sec) => {
                // The default bucket holds one second's worth of calls.
                let default_burst = per_sec.ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
                match c.burst {
                    Some(0) => {
                        self.report(file, format!("{p}.burst"), "must be greater than zero");
                        ok = false;
                        None
                    }
                    burst => Some(RateLimit {
                        per_sec,
                        burst: burst.unwrap_or(default_burst),
                    }),
                }
            }
        };
        let max_concurrency = match c.max_concurrency {
            None => None,
            Some(n) => {
                let limit = NonZeroU32::new(n);
                if limit.is_none() {
                    self.report(
                        file,
                        format!("{p}.max_concurrency"),
                        "must be greater than zero; leave it out for no limit",
                    );
                    ok = false;
                }
                limit
            }
        };
        // What the engine's governor of this group would refuse (a rate
        // beyond its range, a ceiling above its maximum) is refused here,
        // so a group rein check accepts is governed as written.
        if ok {
            let config = crate::governor::GovernorConfig::tool_group(rate, max_concurrency);
            if let Err(e) = crate::governor::Governor::new(config) {
                let field = match e.field() {
                    f if f.contains("burst") => "burst",
                    f if f.contains("rate_per_sec") => "rate_per_sec",
                    _ => "max_concurrency",
                };
                self.report(file, format!("{p}.{field}"), e.to_string());
                ok = false;
            }
        }
        ok.then(|| ResourceGroupSpec {
            name: name.to_owned(),
            rate,
            max_concurrency,
            source: file.to_path_buf(),
        })
    }

    // ----- tools -----------------------------------------------------------

    fn tools(&mut self, merged: &Merged<'a>) -> BTreeMap<String, ToolSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.tools {
            if let Some(spec) = self.tool(merged, entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    fn tool(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        name: &str,
        c: &ToolConfig,
    ) -> Option<ToolSpec> {
        let p = format!("tools.{name}");
        if !is_tool_name(name) {
            self.report(
                file,
                p.clone(),
                "tool names must be 1 to 64 ASCII letters, digits, `_` or `-`, as model APIs require",
            );
        }
        let description = self.required_text(file, &p, "description", c.description.as_deref());
        let class = c.class;
        if class.is_none() {
            self.report(
                file,
                format!("{p}.class"),
                "is required: read, idempotent_write or irreversible",
            );
        }
        let schema = match &c.schema {
            None => {
                self.report(
                    file,
                    format!("{p}.schema"),
                    "is required: a JSON Schema of type object describing every argument",
                );
                None
            }
            Some(schema) => self.schema(file, &p, schema).then(|| schema.clone()),
        };
        // What a minimal tool leaves out, rein decides, and names
        // (`defaulted`) so that `rein check --explain` shows it.
        let mut defaulted = Vec::new();
        let resource_group = match c.resource_group.as_deref() {
            // Its own group: ungoverned unless [resource_groups.<name>]
            // says otherwise.
            None => {
                defaulted.push("resource_group");
                Some(name.to_owned())
            }
            Some(group) if !merged.has("resource_groups", group) => {
                self.report(
                    file,
                    format!("{p}.resource_group"),
                    format!("names `{group}`, which is not a resource group; define [resource_groups.{group}]"),
                );
                None
            }
            Some(group) => Some(group.to_owned()),
        };
        let side_effect_tier = match (c.side_effect_tier, class) {
            (Some(tier), _) => Some(tier),
            (None, Some(class)) => {
                defaulted.push("side_effect_tier");
                Some(super::spec::SideEffectTier::implied_by(class))
            }
            // The missing class is reported already.
            (None, None) => None,
        };
        let owner = match c.owner.as_deref() {
            None => {
                defaulted.push("owner");
                Some(DEFAULT_TOOL_OWNER.to_owned())
            }
            Some(owner) => self.required_text(file, &p, "owner", Some(owner)),
        };
        let agent_adapter = c
            .adapter
            .as_ref()
            .filter(|a| a.kind == Some(AdapterKind::Agent));
        let latency = match (&c.latency, agent_adapter) {
            (None, Some(adapter)) => Some(default_agent_latency(adapter.wall_clock)),
            // Observed, planned for a slow p99 until measured.
            (None, None) => {
                defaulted.push("latency");
                LatencyProfile::new(
                    DEFAULT_TOOL_FALLBACK_P99,
                    DEFAULT_TOOL_FALLBACK_P99,
                    DEFAULT_TOOL_FALLBACK_P99,
                    0,
                )
                .ok()
                .map(|fallback| LatencySpec::Observe {
                    fallback,
                    min_samples: DEFAULT_OBSERVE_MIN_SAMPLES,
                })
            }
            (Some(latency), _) => self.latency(file, &p, latency),
        };
        let allowance_factor = self.allowance_factor(file, &p, c.latency.as_ref());
        let latency_scale = self.latency_scale(file, &p, c);
        let idempotency = self.idempotency(file, &p, &c.idempotency);
        let adapter = match &c.adapter {
            None => {
                self.report(
                    file,
                    format!("{p}.adapter"),
                    "is required: { kind = \"http\", url = \"…\" }, { kind = \"command\", program = \"…\" } or { kind = \"agent\", agent = \"…\" }",
                );
                None
            }
            Some(adapter) => self.adapter(merged, file, &p, class, idempotency.as_ref(), adapter),
        };
        let compensation = self.compensation(merged, file, name, c);
        let resource_key = match c.resource_key.as_deref() {
            None => Some(None),
            Some(text) => {
                let props = c.schema.as_ref().and_then(properties);
                match super::fan_out::check_resource_key(text, class, props) {
                    Ok(key) => Some(Some(key)),
                    Err((field, message)) => {
                        self.report(file, format!("{p}.{field}"), message);
                        None
                    }
                }
            }
        };
        let approval = {
            let props = c.schema.as_ref().and_then(properties);
            match super::approval::check_tool_approval(&c.approval, props) {
                Ok(approval) => Some(approval),
                Err((field, message)) => {
                    self.report(file, format!("{p}.{field}"), message);
                    None
                }
            }
        };
        let lint_allow = match super::lint_allow::check_lint(&c.lint) {
            Ok(allowed) => Some(allowed),
            Err(problems) => {
                for (field, message) in problems {
                    self.report(file, format!("{p}.{field}"), message);
                }
                None
            }
        };
        Some(ToolSpec {
            name: name.to_owned(),
            description: description?,
            schema: schema?,
            class: class?,
            idempotency: idempotency?,
            compensation: compensation?,
            latency: latency?,
            allowance_factor: allowance_factor?,
            latency_scale: latency_scale?,
            resource_group: resource_group?,
            side_effect_tier: side_effect_tier?,
            owner: owner?,
            defaulted,
            avoid_at_plan_time: c.avoid_at_plan_time,
            self_heal_allowance: c.self_heal_allowance,
            adapter: adapter?,
            resource_key: resource_key?,
            approval: approval?,
            lint_allow: lint_allow?,
            source: file.to_path_buf(),
        })
    }

    /// Structural rules for a tool schema, then the injected compiler.
    /// Returns whether the schema is acceptable.
    fn schema(&mut self, file: &Path, p: &str, schema: &Value) -> bool {
        let f = format!("{p}.schema");
        let Value::Object(map) = schema else {
            self.report(file, f, "must be a JSON Schema table");
            return false;
        };
        let before = self.problems.len();
        match map.get("type") {
            Some(Value::String(t)) if t == "object" => {}
            Some(other) => self.report(
                file,
                format!("{f}.type"),
                format!(
                    "must be \"object\": model APIs pass arguments as one object, but it is {other}"
                ),
            ),
            None => self.report(
                file,
                format!("{f}.type"),
                "is required and must be \"object\"",
            ),
        }
        let empty = Map::new();
        let properties = match map.get("properties") {
            None => &empty,
            Some(Value::Object(props)) => props,
            Some(_) => {
                self.report(
                    file,
                    format!("{f}.properties"),
                    "must be a table of argument schemas",
                );
                &empty
            }
        };
        for (arg, arg_schema) in properties {
            let described = arg_schema
                .get("description")
                .and_then(Value::as_str)
                .is_some_and(|d| !d.trim().is_empty());
            if !described {
                self.report(
                    file,
                    format!("{f}.properties.{arg}.description"),
                    "is required: the model fills each argument from its description",
                );
            }
        }
        match map.get("required") {
            None => {}
            Some(Value::Array(items)) => {
                for item in items {
                    match item.as_str() {
                        Some(req) if properties.contains_key(req) => {}
                        Some(req) => self.report(
                            file,
                            format!("{f}.required"),
                            format!("names `{req}`, which is not in properties"),
                        ),
                        None => self.report(
                            file,
                            format!("{f}.required"),
                            format!("must list property names, but holds {item}"),
                        ),
                    }
                }
            }
            Some(_) => self.report(
                file,
                format!("{f}.required"),
                "must be a list of property names",
            ),
        }
        if self.problems.len() > before {
            return false;
        }
        let issues = (self.schema_check)(schema);
        let ok = issues.is_empty();
        for issue in issues {
            let field = if issue.path.is_empty() {
                f.clone()
            } else {
                format!("{f}.{}", issue.path)
            };
            self.report(file, field, issue.message);
        }
        ok
    }

    /// `latency.allowance_factor`, in [1, 10] (default 2).
    fn allowance_factor(
        &mut self,
        file: &Path,
        p: &str,
        c: Option<&LatencyConfig>,
    ) -> Option<AllowanceFactor> {
        let Some(factor) = c.and_then(|c| c.allowance_factor) else {
            return Some(AllowanceFactor::default());
        };
        match AllowanceFactor::new(factor) {
            Ok(factor) => Some(factor),
            Err(_) => {
                self.report(
                    file,
                    format!("{p}.latency.allowance_factor"),
                    format!(
                        "must be a number in [{MIN_ALLOWANCE_FACTOR}, {MAX_ALLOWANCE_FACTOR}] (one attempt's allowance is p99 × it), but it is {factor}"
                    ),
                );
                None
            }
        }
    }

    /// `latency.scale`: observe mode only (a declared profile is one
    /// profile whatever the size, so buckets would change nothing), its
    /// `arg` a path to an argument of the schema, its `buckets` ascending.
    /// `Some(None)` when there is none.
    fn latency_scale(
        &mut self,
        file: &Path,
        p: &str,
        c: &ToolConfig,
    ) -> Option<Option<LatencyScale>> {
        let Some(latency) = &c.latency else {
            return Some(None);
        };
        let Some(scale) = &latency.scale else {
            return Some(None);
        };
        let f = format!("{p}.latency.scale");
        if latency.mode != LatencyMode::Observe {
            self.report(
                file,
                f,
                "is only for mode = \"observe\": a declared profile is one profile for every call, so buckets would change nothing",
            );
            return None;
        }
        let (Some(arg), Some(buckets)) = (&scale.arg, &scale.buckets) else {
            for (missing, field, what) in [
                (
                    scale.arg.is_none(),
                    "arg",
                    "the argument whose size picks a call's bucket, e.g. \"args.limit\"",
                ),
                (
                    scale.buckets.is_none(),
                    "buckets",
                    "ascending upper bounds, e.g. [100, 1000, 10000]",
                ),
            ] {
                if missing {
                    self.report(file, format!("{f}.{field}"), format!("is required: {what}"));
                }
            }
            return None;
        };
        let scale = match LatencyScale::new(arg, buckets.clone()) {
            Ok(scale) => scale,
            Err(e) => {
                self.report(file, format!("{f}.{}", e.field), e.reason);
                return None;
            }
        };
        if let Some(props) = c.schema.as_ref().and_then(properties)
            && !props.contains_key(scale.argument())
        {
            self.report(
                file,
                format!("{f}.arg"),
                format!(
                    "reads `{}`, but the tool's schema has no argument `{}`",
                    scale.arg(),
                    scale.argument()
                ),
            );
            return None;
        }
        Some(Some(scale))
    }

    fn latency(&mut self, file: &Path, p: &str, c: &LatencyConfig) -> Option<LatencySpec> {
        let f = format!("{p}.latency");
        match c.mode {
            LatencyMode::Declared => {
                for (present, field) in [
                    (c.fallback_p99.is_some(), "fallback_p99"),
                    (c.min_samples.is_some(), "min_samples"),
                ] {
                    if present {
                        self.report(
                            file,
                            format!("{f}.{field}"),
                            "is only for mode = \"observe\"",
                        );
                    }
                }
                let mut quantile = |q: Option<Duration>, field: &str| {
                    if q.is_none() {
                        self.report(
                            file,
                            format!("{f}.{field}"),
                            "is required for a declared profile (or set mode = \"observe\")",
                        );
                    }
                    q
                };
                let (p50, p95, p99) = (
                    quantile(c.p50, "p50"),
                    quantile(c.p95, "p95"),
                    quantile(c.p99, "p99"),
                );
                match LatencyProfile::new(p50?, p95?, p99?, c.samples.unwrap_or(0)) {
                    Ok(profile) => Some(LatencySpec::Declared(profile)),
                    Err(err) => {
                        self.config_error(file, p, &err);
                        None
                    }
                }
            }
            LatencyMode::Observe => {
                for (present, field) in [
                    (c.p50.is_some(), "p50"),
                    (c.p95.is_some(), "p95"),
                    (c.p99.is_some(), "p99"),
                    (c.samples.is_some(), "samples"),
                ] {
                    if present {
                        self.report(
                            file,
                            format!("{f}.{field}"),
                            "is only for a declared profile; observe mode measures it",
                        );
                    }
                }
                let min_samples = c.min_samples.unwrap_or(DEFAULT_OBSERVE_MIN_SAMPLES);
                if min_samples == 0 {
                    self.report(
                        file,
                        format!("{f}.min_samples"),
                        "must be greater than zero",
                    );
                }
                let Some(fallback) = c.fallback_p99 else {
                    self.report(
                        file,
                        format!("{f}.fallback_p99"),
                        "is required in observe mode: the p99 assumed until enough samples exist",
                    );
                    return None;
                };
                // Every quantile is the fallback p99: until measured, plan for
                // the slow case.
                match LatencyProfile::new(fallback, fallback, fallback, 0) {
                    Ok(fallback) if min_samples > 0 => Some(LatencySpec::Observe {
                        fallback,
                        min_samples,
                    }),
                    Ok(_) => None,
                    Err(_) => {
                        self.report(
                            file,
                            format!("{f}.fallback_p99"),
                            "must be greater than zero",
                        );
                        None
                    }
                }
            }
        }
    }

    fn idempotency(
        &mut self,
        file: &Path,
        p: &str,
        c: &IdempotencyConfig,
    ) -> Option<IdempotencySpec> {
        let header = c
            .header
            .clone()
            .unwrap_or_else(|| DEFAULT_IDEMPOTENCY_HEADER.to_owned());
        let field = format!("{p}.idempotency.header");
        if !is_header_name(&header) {
            self.report(
                file,
                field,
                format!("must be a valid HTTP header name, but it is `{header}`"),
            );
            return None;
        }
        if is_reserved_header(&header) {
            self.report(
                file,
                field,
                format!("`{header}` is set by rein itself; choose another header"),
            );
            return None;
        }
        let mut normalizer = NormalizerConfig::default();
        if let Some(volatile) = &c.volatile_fields {
            normalizer.volatile_fields = volatile.clone();
        }
        if let Some(folded) = &c.case_insensitive_fields {
            normalizer.case_insensitive_fields = folded.clone();
        }
        Some(IdempotencySpec { normalizer, header })
    }

    fn adapter(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        class: Option<ToolClass>,
        idempotency: Option<&IdempotencySpec>,
        c: &AdapterConfig,
    ) -> Option<AdapterSpec> {
        let f = format!("{p}.adapter");
        match c.kind {
            Some(AdapterKind::Http) => self.http_adapter(file, &f, class, idempotency, c),
            Some(AdapterKind::Command) => self.command_adapter(file, &f, c),
            Some(AdapterKind::Agent) => self.agent_adapter(merged, file, &f, c),
            Some(AdapterKind::Mcp) => self.mcp_adapter(merged, file, p, &f, class, c),
            None => {
                self.report(
                    file,
                    format!("{f}.kind"),
                    "is required: http, command, agent or mcp",
                );
                None
            }
        }
    }

    /// A byte cap (`max_result_bytes`, `max_output_bytes`): `default` when
    /// unset, `None` (reported) when zero.
    fn byte_cap(
        &mut self,
        file: &Path,
        field: &str,
        value: Option<u64>,
        default: usize,
    ) -> Option<usize> {
        match value {
            None => Some(default),
            Some(0) => {
                self.report(file, field, "must be greater than zero");
                None
            }
            Some(n) => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        }
    }

    /// Reports every field of `groups` that is set, as not a setting of a
    /// `kind` adapter. Returns whether none was.
    fn foreign_fields(
        &mut self,
        file: &Path,
        f: &str,
        kind: &str,
        groups: &[&[(bool, &str)]],
    ) -> bool {
        let mut ok = true;
        for (set, field) in groups.iter().flat_map(|group| group.iter()) {
            if *set {
                self.report(
                    file,
                    format!("{f}.{field}"),
                    format!("is not a setting of a {kind} adapter; remove it"),
                );
                ok = false;
            }
        }
        ok
    }

    fn http_adapter(
        &mut self,
        file: &Path,
        f: &str,
        class: Option<ToolClass>,
        idempotency: Option<&IdempotencySpec>,
        c: &AdapterConfig,
    ) -> Option<AdapterSpec> {
        let mut ok = self.foreign_fields(
            file,
            f,
            "http",
            &[&command_fields(c), &agent_fields(c), &mcp_fields(c)],
        );
        let url = match &c.url {
            None => {
                self.report(file, format!("{f}.url"), "is required");
                None
            }
            Some(url) => self.url(file, &format!("{f}.url"), url),
        };
        for (name, value) in &c.headers {
            let field = format!("{f}.headers.{name}");
            if !is_header_name(name) {
                self.report(file, field, "is not a valid HTTP header name");
                ok = false;
            } else if is_reserved_header(name)
                || idempotency.is_some_and(|i| i.header.eq_ignore_ascii_case(name))
            {
                self.report(
                    file,
                    field,
                    "is set by rein on every call and cannot be overridden",
                );
                ok = false;
            } else if value.contains(['\r', '\n']) {
                self.report(file, field, "must not contain line breaks");
                ok = false;
            }
        }
        let status_url = match &c.status_url {
            None => None,
            Some(_) if class == Some(ToolClass::Irreversible) => {
                self.report(
                    file,
                    format!("{f}.status_url"),
                    "is not allowed on an irreversible tool: it has no idempotency key to look a call up by",
                );
                ok = false;
                None
            }
            Some(url) => {
                let checked = self.url(file, &format!("{f}.status_url"), url);
                ok &= checked.is_some();
                checked
            }
        };
        let max_result_bytes = self.byte_cap(
            file,
            &format!("{f}.max_result_bytes"),
            c.max_result_bytes,
            DEFAULT_MAX_RESULT_BYTES,
        );
        ok &= max_result_bytes.is_some();
        let max_result_bytes = max_result_bytes.unwrap_or(0);
        let url = url?;
        ok.then(|| AdapterSpec::Http {
            url,
            method: c.method.unwrap_or_default(),
            headers: c.headers.clone(),
            status_url,
            max_result_bytes,
        })
    }

    fn command_adapter(&mut self, file: &Path, f: &str, c: &AdapterConfig) -> Option<AdapterSpec> {
        let mut ok = self.foreign_fields(
            file,
            f,
            "command",
            &[
                &http_fields(c),
                &result_fields(c),
                &agent_fields(c),
                &mcp_fields(c),
            ],
        );
        if c.status_url.is_some() {
            self.report(
                file,
                format!("{f}.status_url"),
                "is not allowed on a command adapter: a command has no endpoint to look a call up by key",
            );
            ok = false;
        }
        let program = match c.program.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{f}.program"),
                    "is required for a command adapter: a program name or a path relative to this file",
                );
                None
            }
            Some(program) if program.trim().is_empty() => {
                self.report(file, format!("{f}.program"), "must not be empty");
                None
            }
            Some(program) if program.contains('\0') => {
                self.report(file, format!("{f}.program"), "must not contain a NUL byte");
                None
            }
            // A bare name is looked up on PATH when called; a path is the
            // config file's, wherever rein is started.
            Some(program) if program.contains('/') => {
                Some(resolve_relative(file, Path::new(program)))
            }
            Some(program) => Some(PathBuf::from(program)),
        };
        for (i, arg) in c.args.iter().enumerate() {
            if arg.contains('\0') {
                self.report(file, format!("{f}.args.{i}"), "must not contain a NUL byte");
                ok = false;
            }
        }
        let working_dir = match &c.working_dir {
            None => None,
            Some(dir) if dir.as_os_str().is_empty() => {
                self.report(
                    file,
                    format!("{f}.working_dir"),
                    "must not be empty; leave it out to keep rein's own",
                );
                ok = false;
                None
            }
            Some(dir) => Some(resolve_relative(file, dir)),
        };
        for (name, value) in &c.env {
            let field = format!("{f}.env.{name}");
            if !is_env_name(name) {
                self.report(
                    file,
                    field,
                    "must be the name of an environment variable (letters, digits, _)",
                );
                ok = false;
            } else if name.to_ascii_uppercase().starts_with(RESERVED_ENV_PREFIX) {
                self.report(
                    file,
                    field,
                    format!("is set by rein on every call ({RESERVED_ENV_PREFIX}*) and cannot be overridden"),
                );
                ok = false;
            } else if value.contains('\0') {
                self.report(file, field, "must not contain a NUL byte");
                ok = false;
            }
        }
        let max_output_bytes = self.byte_cap(
            file,
            &format!("{f}.max_output_bytes"),
            c.max_output_bytes,
            DEFAULT_MAX_OUTPUT_BYTES,
        );
        ok &= max_output_bytes.is_some();
        let max_output_bytes = max_output_bytes.unwrap_or(0);
        let program = program?;
        ok.then(|| AdapterSpec::Command {
            program,
            args: c.args.clone(),
            working_dir,
            env: c.env.clone(),
            max_output_bytes,
        })
    }

    /// `kind = "mcp"`: a tool of `[mcp_servers.NAME]`, called by its
    /// name there (`tool`, or the registry's name).
    fn mcp_adapter(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        f: &str,
        class: Option<ToolClass>,
        c: &AdapterConfig,
    ) -> Option<AdapterSpec> {
        let mut ok = self.foreign_fields(
            file,
            f,
            "mcp",
            &[&http_fields(c), &command_fields(c), &agent_fields(c)],
        );
        if c.status_url.is_some() {
            let why = if class == Some(ToolClass::Irreversible) {
                "is not allowed on an mcp adapter: MCP has no lookup by idempotency key (and an irreversible tool has no key)"
            } else {
                "is not allowed on an mcp adapter: MCP has no lookup by idempotency key"
            };
            self.report(file, format!("{f}.status_url"), why);
            ok = false;
        }
        let server = match c.server.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{f}.server"),
                    "is required for an mcp adapter: the name of an [mcp_servers.NAME] table",
                );
                None
            }
            Some(name) => match merged.mcp_servers.get(name) {
                // A server with problems is reported by its own check.
                Some(entry) => super::mcp::check_mcp_server(entry.file, name, entry.config).ok(),
                None if merged
                    .broken
                    .contains(format!("mcp_servers.{name}").as_str()) =>
                {
                    None
                }
                None => {
                    self.report(
                        file,
                        format!("{f}.server"),
                        format!("names `{name}`, which is not an MCP server; define [mcp_servers.{name}]"),
                    );
                    None
                }
            },
        };
        let tool = match c.tool.as_deref() {
            Some(tool) if tool.trim().is_empty() => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    "must not be empty; leave it out to call the tool by its registry name",
                );
                ok = false;
                String::new()
            }
            Some(tool) => tool.to_owned(),
            None => p.strip_prefix("tools.").unwrap_or(p).to_owned(),
        };
        let max_result_bytes = self.byte_cap(
            file,
            &format!("{f}.max_result_bytes"),
            c.max_result_bytes,
            DEFAULT_MAX_RESULT_BYTES,
        );
        ok &= max_result_bytes.is_some();
        let max_result_bytes = max_result_bytes.unwrap_or(0);
        let pin = match c.pin.as_deref() {
            None => None,
            Some(pin) if is_digest(pin) => Some(pin.to_owned()),
            Some(pin) => {
                self.report(
                    file,
                    format!("{f}.pin"),
                    format!("must be `sha256:` and 64 hex digits, as `rein mcp import` writes it, but it is `{pin}`"),
                );
                ok = false;
                None
            }
        };
        let server = server?;
        ok.then_some(AdapterSpec::Mcp {
            server,
            tool,
            max_result_bytes,
            pin,
        })
    }

    fn agent_adapter(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        f: &str,
        c: &AdapterConfig,
    ) -> Option<AdapterSpec> {
        let mut ok = self.foreign_fields(
            file,
            f,
            "agent",
            &[
                &http_fields(c),
                &result_fields(c),
                &command_fields(c),
                &mcp_fields(c),
            ],
        );
        if c.status_url.is_some() {
            self.report(
                file,
                format!("{f}.status_url"),
                "is not allowed on an agent adapter: a child run has no endpoint to look a call up by key",
            );
            ok = false;
        }
        // An agent tool may name the agent that offers it: the depth and
        // size of the tree are bounded at run time (`server.agent_graph`).
        let agent = match c.agent.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{f}.agent"),
                    "is required for an agent adapter: the name of an agent in the config",
                );
                None
            }
            Some(agent) if !merged.has("agents", agent) => {
                self.report(
                    file,
                    format!("{f}.agent"),
                    format!("names `{agent}`, which is not an agent; define [agents.{agent}]"),
                );
                None
            }
            Some(agent) => Some(agent.to_owned()),
        };
        let ratio = c.budget_ratio.unwrap_or(DEFAULT_AGENT_BUDGET_RATIO);
        let budget_ratio = Ratio::new_positive("budget_ratio", ratio).ok();
        if budget_ratio.is_none() {
            self.report(
                file,
                format!("{f}.budget_ratio"),
                format!(
                    "must be a number in (0, 1]: the share of the caller's remaining budget, but it is {ratio}"
                ),
            );
        }
        let zero = "must be greater than zero; leave it out for no cap beyond the budget_ratio";
        let mut positive = |set: bool, is_zero: bool, field: &str| {
            if set && is_zero {
                self.report(file, format!("{f}.{field}"), zero);
                false
            } else {
                true
            }
        };
        ok &= positive(
            c.max_tokens.is_some(),
            c.max_tokens == Some(0),
            "max_tokens",
        );
        ok &= positive(c.max_steps.is_some(), c.max_steps == Some(0), "max_steps");
        ok &= positive(
            c.wall_clock.is_some(),
            c.wall_clock.is_some_and(|d| d.is_zero()),
            "wall_clock",
        );
        let cost = match c
            .max_cost_usd
            .map(|usd| Cost::from_usd("max_cost_usd", usd))
        {
            None => None,
            Some(Ok(cost)) => {
                ok &= positive(true, cost == Cost::ZERO, "max_cost_usd");
                Some(cost)
            }
            Some(Err(err)) => {
                self.config_error(file, f, &err);
                ok = false;
                None
            }
        };
        let caps = ChildCaps {
            wall_clock: c.wall_clock,
            steps: c.max_steps,
            tokens: c.max_tokens,
            cost,
        };
        let (agent, budget_ratio) = (agent?, budget_ratio?);
        ok.then_some(AdapterSpec::Agent {
            agent,
            budget_ratio,
            caps,
        })
    }

    /// The compensation rules; `Some(None)` is "no compensation, and that is
    /// fine", `None` a reported problem.
    fn compensation(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        name: &str,
        c: &ToolConfig,
    ) -> Option<Option<CompensationSpec>> {
        let p = format!("tools.{name}");
        let f = format!("{p}.compensation");
        let irreversible_unguarded =
            c.class == Some(ToolClass::Irreversible) && !c.avoid_at_plan_time;
        let needs_comp = "is required for an irreversible tool unless avoid_at_plan_time = true: \
                          name a compensation, or declare grade = \"none\" and set avoid_at_plan_time";
        let Some(comp) = &c.compensation else {
            if irreversible_unguarded {
                self.report(file, f, needs_comp);
                return None;
            }
            return Some(None);
        };
        if c.class == Some(ToolClass::Read) {
            self.report(
                file,
                f,
                "is not allowed on a read tool: a read has no effect to undo",
            );
            return None;
        }
        let Some(grade) = comp.grade else {
            self.report(
                file,
                format!("{f}.grade"),
                "is required: strong, weak or none",
            );
            return None;
        };
        if grade == CompensationGrade::None {
            return self.no_compensation(file, &f, comp, irreversible_unguarded);
        }
        let mut ok = true;
        let target = match comp.tool.as_deref() {
            None => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    format!("is required when grade is {grade}"),
                );
                return None;
            }
            Some(target) if target == name => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    "must name another tool: a tool cannot undo itself",
                );
                return None;
            }
            Some(target) => target,
        };
        let target_config = merged.tools.get(target).map(|e| e.config);
        if target_config.is_none() && !merged.has("tools", target) {
            self.report(
                file,
                format!("{f}.tool"),
                format!("names `{target}`, which is not a tool; define [tools.{target}]"),
            );
            ok = false;
        }
        match (target_config.and_then(|t| t.class), grade) {
            (Some(ToolClass::Read), _) => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    format!("names `{target}`, a read tool: a read changes nothing, so it cannot compensate"),
                );
                ok = false;
            }
            (Some(ToolClass::Irreversible), CompensationGrade::Strong) => {
                self.report(
                    file,
                    format!("{f}.tool"),
                    format!(
                        "names `{target}`, an irreversible tool, but a strong compensation must be \
                         safe to repeat (idempotent_write); use grade = \"weak\" or an idempotent tool"
                    ),
                );
                ok = false;
            }
            _ => {}
        }
        if comp.window.is_some_and(|w| w.is_zero()) {
            self.report(file, format!("{f}.window"), "must be greater than zero");
            ok = false;
        }
        let forward_props = c.schema.as_ref().and_then(properties);
        let target_schema = target_config.and_then(|t| t.schema.as_ref());
        let target_props = target_schema.and_then(properties);
        let mut args = BTreeMap::new();
        for (arg, text) in &comp.args {
            let field = format!("{f}.args.{arg}");
            let source = match text.parse::<ArgSource>() {
                Ok(source) => source,
                Err(err) => {
                    self.report(file, field, err.to_string());
                    ok = false;
                    continue;
                }
            };
            let missing_arg = match (&source, forward_props) {
                (ArgSource::Args(path), Some(props)) => path
                    .first()
                    .filter(|first| !props.contains_key(first.as_str())),
                _ => None,
            };
            if let Some(first) = missing_arg {
                self.report(
                    file,
                    field.clone(),
                    format!(
                        "reads `{source}`, but the schema of `{name}` has no argument `{first}`"
                    ),
                );
                ok = false;
            }
            if target_props.is_some_and(|props| !props.contains_key(arg)) {
                self.report(file, field, format!("is not an argument of `{target}`"));
                ok = false;
            }
            args.insert(arg.clone(), source);
        }
        for req in target_schema.map(required).unwrap_or_default() {
            if !comp.args.contains_key(req) {
                self.report(
                    file,
                    format!("{f}.args"),
                    format!("does not fill `{req}`, which `{target}` requires"),
                );
                ok = false;
            }
        }
        ok.then(|| {
            Some(CompensationSpec {
                tool: target.to_owned(),
                grade,
                window: comp.window,
                args,
            })
        })
    }

    /// `grade = "none"`: nothing else may be set, and an irreversible tool
    /// must then be avoided at plan time.
    fn no_compensation(
        &mut self,
        file: &Path,
        f: &str,
        comp: &CompensationConfig,
        irreversible_unguarded: bool,
    ) -> Option<Option<CompensationSpec>> {
        let mut ok = true;
        for (present, field) in [
            (comp.tool.is_some(), "tool"),
            (comp.window.is_some(), "window"),
            (!comp.args.is_empty(), "args"),
        ] {
            if present {
                self.report(
                    file,
                    format!("{f}.{field}"),
                    "must not be set when grade is none",
                );
                ok = false;
            }
        }
        if irreversible_unguarded {
            self.report(
                file,
                format!("{f}.grade"),
                "is none on an irreversible tool, which then needs avoid_at_plan_time = true",
            );
            ok = false;
        }
        ok.then_some(None)
    }

    // ----- agents ----------------------------------------------------------

    fn agents(
        &mut self,
        merged: &Merged<'a>,
        models: &BTreeMap<String, ModelBindingSpec>,
    ) -> BTreeMap<String, AgentSpec> {
        let mut out = BTreeMap::new();
        for (name, entry) in &merged.agents {
            if let Some(spec) = self.agent(merged, models, entry.file, name, entry.config) {
                out.insert((*name).to_owned(), spec);
            }
        }
        out
    }

    fn agent(
        &mut self,
        merged: &Merged<'a>,
        models: &BTreeMap<String, ModelBindingSpec>,
        file: &Path,
        name: &str,
        c: &AgentConfig,
    ) -> Option<AgentSpec> {
        let p = format!("agents.{name}");
        self.name(file, &p, name);
        let mut ok = true;
        let chain = self.agent_models(merged, models, file, &p, c);
        let mut seen = BTreeSet::new();
        for tool in &c.tools {
            if !seen.insert(tool.as_str()) {
                self.report(file, format!("{p}.tools"), format!("lists `{tool}` twice"));
                ok = false;
            } else if !merged.has("tools", tool) {
                self.report(
                    file,
                    format!("{p}.tools"),
                    format!("names `{tool}`, which is not a tool; define [tools.{tool}]"),
                );
                ok = false;
            }
        }
        let budget = match BudgetLimits::try_from(c.budget.clone()) {
            Ok(budget) => Some(budget),
            Err(err) => {
                self.config_error(file, &p, &err);
                None
            }
        };
        if c.budget.max_cost_usd.is_some() {
            ok &= self.agent_prices(merged, file, &p, &chain);
        }
        // A binding's links are checked with the binding.
        if chain.binding.is_none() {
            self.output_caps(
                merged,
                file,
                &p,
                [
                    ("model", chain.primary.iter().collect()),
                    ("fallbacks", chain.fallbacks.iter().flatten().collect()),
                    (
                        "context_fallbacks",
                        chain.context_fallbacks.iter().flatten().collect(),
                    ),
                ],
            );
        }
        let retry = match RetryPolicy::try_from(c.retry.clone()) {
            Ok(retry) => Some(retry),
            Err(err) => {
                self.config_error(file, &p, &err);
                None
            }
        };
        let mut loop_guard = c.loop_guard.clone();
        for tool in c.loop_guard.self_heal_overrides.keys() {
            if !seen.contains(tool.as_str()) {
                self.report(
                    file,
                    format!("{p}.loop_guard.self_heal_overrides.{tool}"),
                    format!("names `{tool}`, which is not one of the agent's tools"),
                );
                ok = false;
            }
        }
        // A tool's own allowance is the default for that tool; the agent's
        // explicit override, being more specific, wins.
        for tool in &c.tools {
            if let Some(allowance) = merged
                .tools
                .get(tool.as_str())
                .and_then(|t| t.config.self_heal_allowance)
            {
                loop_guard
                    .self_heal_overrides
                    .entry(tool.clone())
                    .or_insert(allowance);
            }
        }
        let loop_guard = match LoopGuard::new(loop_guard.clone()) {
            Ok(_) => Some(loop_guard),
            Err(err) => {
                self.config_error(file, &p, &err);
                None
            }
        };
        let reserve = c
            .compensation_reserve
            .unwrap_or(DEFAULT_COMPENSATION_RESERVE);
        let compensation_reserve = if reserve.is_finite()
            && (0.0..=MAX_COMPENSATION_RESERVE).contains(&reserve)
        {
            Ratio::new("compensation_reserve", reserve).ok()
        } else {
            self.report(
                file,
                format!("{p}.compensation_reserve"),
                format!("must be a number in [0, {MAX_COMPENSATION_RESERVE}], but it is {reserve}"),
            );
            None
        };
        let model_retry = match c.model_retry.max_wasted_tokens {
            Some(0) => {
                self.report(
                    file,
                    format!("{p}.model_retry.max_wasted_tokens"),
                    "must be at least 1 (leave it out to rely on the run's token budget alone)",
                );
                None
            }
            wasted => Some(ModelRetryLimits {
                max_retries: c
                    .model_retry
                    .max_retries
                    .unwrap_or(DEFAULT_MAX_MODEL_RETRIES),
                max_wait: c
                    .model_retry
                    .max_wait
                    .unwrap_or(DEFAULT_MAX_MODEL_RETRY_WAIT),
                max_wasted_tokens: wasted,
            }),
        };
        let model_latency = match c.model_latency {
            None => Some(DEFAULT_MODEL_LATENCY),
            Some(l) if !l.is_zero() && l <= MAX_MODEL_LATENCY => Some(l),
            Some(l) => {
                self.report(
                    file,
                    format!("{p}.model_latency"),
                    format!(
                        "must be more than 0 and at most {} (the median assumed for a model call), but it is {}",
                        format_duration(MAX_MODEL_LATENCY),
                        format_duration(l)
                    ),
                );
                None
            }
        };
        let approval = match super::approval::check_approval(&c.approval) {
            Ok(settings) => Some(settings),
            Err((field, message)) => {
                self.report(file, format!("{p}.{field}"), message);
                None
            }
        };
        let fan_out = match super::fan_out::check_fan_out(&c.fan_out) {
            Ok(limits) => Some(limits),
            Err((field, message)) => {
                self.report(file, format!("{p}.{field}"), message);
                None
            }
        };
        let planner = match super::planner::check_planner(&c.planner, c.value_of_success_usd) {
            Ok(settings) => Some(settings),
            Err((field, message)) => {
                self.report(file, format!("{p}.{field}"), message);
                None
            }
        };
        if !ok {
            return None;
        }
        let primary = chain.primary?;
        Some(AgentSpec {
            name: name.to_owned(),
            provider: primary.provider,
            model: primary.model,
            fallbacks: chain.fallbacks?,
            context_fallbacks: chain.context_fallbacks?,
            model_binding: chain.binding,
            system_prompt: c.system_prompt.clone().unwrap_or_default(),
            tools: c.tools.clone(),
            budget: budget?,
            retry: retry?,
            loop_guard: loop_guard?,
            on_failure: c.on_failure,
            compensation_reserve: compensation_reserve?,
            model_retry: model_retry?,
            model_latency: model_latency?,
            fan_out: fan_out?,
            planner: planner?,
            approval: approval?,
            source: file.to_path_buf(),
        })
    }

    /// The models an agent uses: its own `provider` and `model` with any
    /// inline fallbacks, or, without `provider`, the binding its `model`
    /// names. Each part is `None` when it did not pass.
    fn agent_models(
        &mut self,
        merged: &Merged<'a>,
        models: &BTreeMap<String, ModelBindingSpec>,
        file: &Path,
        p: &str,
        c: &AgentConfig,
    ) -> AgentModels {
        if let Some(provider) = c.provider.as_deref() {
            let provider = self.provider_ref(merged, file, &format!("{p}.provider"), provider);
            let model = self.required_text(file, p, "model", c.model.as_deref());
            let primary = provider.zip(model).map(|(p, m)| ModelLink::new(p, m));
            let (fallbacks, context_fallbacks) = self.fallback_lists(
                merged,
                file,
                p,
                primary.as_ref(),
                &c.fallbacks,
                &c.context_fallbacks,
            );
            return AgentModels {
                primary,
                fallbacks,
                context_fallbacks,
                binding: None,
            };
        }
        let unresolved = AgentModels {
            primary: None,
            fallbacks: None,
            context_fallbacks: None,
            binding: None,
        };
        let alias = c.model.as_deref().filter(|m| !m.trim().is_empty());
        match alias {
            Some(alias) if merged.has("models", alias) => {}
            Some(alias) => {
                let known: Vec<&str> = merged.models.keys().copied().collect();
                let known = if known.is_empty() {
                    "no [models.*] binding is defined".to_owned()
                } else {
                    format!("known bindings: {}", known.join(", "))
                };
                self.report(
                    file,
                    format!("{p}.provider"),
                    format!(
                        "is required unless `model` names a [models.*] binding, and `{alias}` names none; {known}"
                    ),
                );
            }
            None => {
                self.report(
                    file,
                    format!("{p}.provider"),
                    "is required unless `model` names a [models.*] binding",
                );
                self.required_text(file, p, "model", c.model.as_deref());
            }
        }
        let mut inline_ok = true;
        for (set, field) in [
            (!c.fallbacks.is_empty(), "fallbacks"),
            (!c.context_fallbacks.is_empty(), "context_fallbacks"),
        ] {
            if set {
                self.report(
                    file,
                    format!("{p}.{field}"),
                    format!(
                        "needs `provider`: an agent lists its own {field} only with its own provider and model; \
                         one that names a [models.*] binding uses the binding's, so list them there"
                    ),
                );
                inline_ok = false;
            }
        }
        // A binding that is defined but did not pass has been reported
        // under its own fields already.
        match alias.and_then(|alias| models.get(alias)) {
            Some(binding) if inline_ok => AgentModels {
                primary: Some(binding.primary.clone()),
                fallbacks: Some(binding.fallbacks.clone()),
                context_fallbacks: Some(binding.context_fallbacks.clone()),
                binding: Some(binding.name.clone()),
            },
            _ => unresolved,
        }
    }

    /// With a cost ceiling, every model the agent can call needs a price,
    /// or its calls would count no cost and the ceiling would never be
    /// reached. Returns whether every one has a price.
    fn agent_prices(
        &mut self,
        merged: &Merged<'a>,
        file: &Path,
        p: &str,
        chain: &AgentModels,
    ) -> bool {
        let roles = [
            ("model", chain.primary.iter().collect::<Vec<_>>()),
            ("fallback model", chain.fallbacks.iter().flatten().collect()),
            (
                "context fallback model",
                chain.context_fallbacks.iter().flatten().collect(),
            ),
        ];
        let via = match &chain.binding {
            Some(alias) => format!(" (used through [models.{alias}])"),
            None => String::new(),
        };
        let mut ok = true;
        let mut seen = BTreeSet::new();
        for (role, links) in roles {
            for link in links {
                if !seen.insert(link) {
                    continue;
                }
                let Some(entry) = merged.providers.get(link.provider.as_str()) else {
                    continue;
                };
                if entry.config.prices.contains_key(&link.model) {
                    continue;
                }
                self.report(
                    file,
                    format!("{p}.budget.max_cost_usd"),
                    format!(
                        "needs a price for {role} `{}` in [providers.{}.prices]{via}: without one no cost is counted",
                        link.model, link.provider
                    ),
                );
                ok = false;
            }
        }
        ok
    }

    // ----- server ----------------------------------------------------------

    /// The `[server]` table of `file`. Every value out of range is reported
    /// and replaced by its default, so the rest is still checked (the
    /// registry is refused anyway once anything was reported).
    fn server(&mut self, file: &Path, c: &ServerConfig) -> ServerSpec {
        let mut spec = ServerSpec {
            source: Some(file.to_path_buf()),
            ..ServerSpec::default()
        };
        if let Some(text) = &c.listen {
            match text.trim().parse::<SocketAddr>() {
                Ok(addr) => spec.listen = addr,
                Err(_) => self.report(
                    file,
                    "server.listen",
                    format!(
                        "must be an IP address and port like \"127.0.0.1:8787\" or \"[::1]:8787\", but it is `{text}`"
                    ),
                ),
            }
        }
        if let Some(limit) = &c.body_limit {
            if let Some(bytes) = self.body_limit(file, limit) {
                spec.body_limit = bytes;
            }
        }

        let idem = &c.idempotency;
        let d = spec.idempotency;
        spec.idempotency.enabled = idem.enabled.unwrap_or(d.enabled);
        if let Some(n) = idem.max_key_length {
            match usize::try_from(n) {
                Ok(n) if (1..=MAX_KEY_LENGTH).contains(&n) => spec.idempotency.max_key_length = n,
                _ => self.report(
                    file,
                    "server.idempotency.max_key_length",
                    format!("must be between 1 and {MAX_KEY_LENGTH} bytes, but it is {n}"),
                ),
            }
        }
        spec.idempotency.retention = match idem.retention {
            Some(r) if r < MIN_IDEMPOTENCY_RETENTION => {
                self.report(
                    file,
                    "server.idempotency.retention",
                    format!(
                        "must be at least {} (expiries are kept in milliseconds), but it is {}",
                        format_duration(MIN_IDEMPOTENCY_RETENTION),
                        format_duration(r)
                    ),
                );
                d.retention
            }
            Some(r) => r,
            None => d.retention,
        };

        let queue = &c.queue;
        match queue.lease {
            Some(lease) if lease < MIN_QUEUE_LEASE => self.report(
                file,
                "server.queue.lease",
                format!(
                    "must be at least {}: it is renewed at a third of its length, but it is {}",
                    format_duration(MIN_QUEUE_LEASE),
                    format_duration(lease)
                ),
            ),
            Some(lease) => spec.queue.lease = lease,
            None => {}
        }
        if let Some(n) = queue.max_attempts {
            match NonZeroU32::new(n) {
                Some(n) => spec.queue.max_attempts = n,
                None => self.report(
                    file,
                    "server.queue.max_attempts",
                    "must be at least 1, but it is 0",
                ),
            }
        }
        if let Some(n) = queue.workers {
            match NonZeroU32::new(n).filter(|n| n.get() <= MAX_QUEUE_WORKERS) {
                Some(n) => spec.queue.workers = n,
                None => self.report(
                    file,
                    "server.queue.workers",
                    format!("must be between 1 and {MAX_QUEUE_WORKERS}, but it is {n}"),
                ),
            }
        }

        let rec = &c.reconciliation;
        let d = spec.reconciliation;
        let p = "server.reconciliation";
        let heartbeat = self.positive(
            file,
            &format!("{p}.heartbeat_interval"),
            rec.heartbeat_interval,
            d.heartbeat_interval,
        );
        let orphan = self.positive(
            file,
            &format!("{p}.orphan_threshold"),
            rec.orphan_threshold,
            d.orphan_threshold,
        );
        let positive = |d: Option<Duration>| d.is_none_or(|d| !d.is_zero());
        if positive(rec.heartbeat_interval) && positive(rec.orphan_threshold) && orphan < heartbeat
        {
            let which = if rec.orphan_threshold.is_none() {
                " (the default)"
            } else {
                ""
            };
            self.report(
                file,
                format!("{p}.orphan_threshold"),
                format!(
                    "must not be less than heartbeat_interval ({}), or a live run could be closed between two heartbeats, but it is {}{which}",
                    format_duration(heartbeat),
                    format_duration(orphan)
                ),
            );
        }
        spec.reconciliation.heartbeat_interval = heartbeat;
        spec.reconciliation.orphan_threshold = orphan;
        spec.reconciliation.scan_interval = self.positive(
            file,
            &format!("{p}.scan_interval"),
            rec.scan_interval,
            d.scan_interval,
        );
        if let Some(n) = rec.max_runs_per_scan {
            match NonZeroU32::new(n) {
                Some(n) => spec.reconciliation.max_runs_per_scan = n,
                None => self.report(
                    file,
                    format!("{p}.max_runs_per_scan"),
                    "must be at least 1, but it is 0",
                ),
            }
        }

        let graph = &c.agent_graph;
        if let Some(depth) = graph.max_depth {
            spec.agent_graph.max_depth = depth;
        }
        if let Some(tokens) = graph.max_total_tokens {
            spec.agent_graph.max_total_tokens = NonZeroU64::new(tokens);
        }
        if let Some(runs) = graph.max_total_runs {
            spec.agent_graph.max_total_runs = NonZeroU32::new(runs);
        }

        self.connection_limits(file, &c.limits, &mut spec.limits);
        if let Some(grace) = c.shutdown_grace {
            if grace > MAX_SHUTDOWN_GRACE {
                self.report(
                    file,
                    "server.shutdown_grace",
                    format!(
                        "must be at most {}, but it is {}",
                        format_duration(MAX_SHUTDOWN_GRACE),
                        format_duration(grace)
                    ),
                );
            } else {
                spec.shutdown_grace = grace;
            }
        }

        spec.api_keys = self.api_keys(file, c);

        // ----- exposure: allowed_hosts, cors, metrics ---------------------
        spec.allowed_hosts = self.allowed_hosts(file, &c.allowed_hosts);
        spec.cors = c.cors.as_ref().and_then(|cors| self.cors(file, cors));
        spec.metrics = c.metrics.unwrap_or_default();
        spec.metrics_tenants = self.metrics_tenants(file, c, &spec);

        // ----- quotas (`[server.quotas]`, its own module) -----------------
        let (quotas, mut refused) = super::quotas::validate(&c.quotas);
        let key_tenants: Vec<&TenantId> = spec.api_keys.iter().map(|k| &k.tenant).collect();
        refused.extend(super::quotas::unreachable_tenants(&quotas, &key_tenants));
        for (field, message) in refused {
            self.report(file, field, message);
        }
        spec.quotas = quotas;
        spec
    }

    /// `[server.metrics_labels]`: tenants a request can act for, agents of
    /// this config, each list within `max_values`.
    fn metrics_labels(
        &mut self,
        file: &Path,
        c: &ServerConfig,
        spec: &ServerSpec,
        agents: &BTreeMap<String, AgentSpec>,
    ) -> super::MetricsLabels {
        let known = super::metrics_labels::Known {
            key_tenants: spec.api_keys.iter().map(|k| &k.tenant).collect(),
            agents: agents.keys().map(String::as_str).collect(),
        };
        let (labels, problems) = super::metrics_labels::check(&c.metrics_labels, &known);
        for (field, message) in problems {
            self.report(file, field, message);
        }
        labels
    }

    /// `server.metrics_tenants`: tenants that have a key, and only where
    /// `/metrics` is protected (with `open` the list would do nothing).
    fn metrics_tenants(
        &mut self,
        file: &Path,
        c: &ServerConfig,
        spec: &ServerSpec,
    ) -> Vec<TenantId> {
        if spec.metrics == MetricsAccess::Open && !c.metrics_tenants.is_empty() {
            self.report(
                file,
                "server.metrics_tenants",
                "has no effect with server.metrics = \"open\" (anyone who reaches the server reads /metrics): remove it, or set server.metrics = \"protected\"",
            );
            return Vec::new();
        }
        let mut out = Vec::new();
        for (i, text) in c.metrics_tenants.iter().enumerate() {
            let field = format!("server.metrics_tenants[{i}]");
            match TenantId::new(text.trim()) {
                Err(err) => self.report(file, field, err.to_string()),
                Ok(tenant) if !spec.api_keys.iter().any(|k| k.tenant == tenant) => {
                    let known: Vec<&str> =
                        spec.api_keys.iter().map(|k| k.tenant.as_str()).collect();
                    self.report(
                        file,
                        field,
                        format!(
                            "must be the tenant of a [[server.api_keys]] entry (the scraper sends that key), but `{tenant}` has none; keys exist for: {}",
                            if known.is_empty() { "no tenant".to_owned() } else { known.join(", ") }
                        ),
                    );
                }
                Ok(tenant) => out.push(tenant),
            }
        }
        out
    }

    /// `server.allowed_hosts`, reporting each entry that is not a host.
    fn allowed_hosts(&mut self, file: &Path, entries: &[String]) -> Vec<AllowedHost> {
        let mut out = Vec::new();
        for (i, text) in entries.iter().enumerate() {
            match AllowedHost::parse(text.trim()) {
                Ok(host) => out.push(host),
                Err(message) => self.report(file, format!("server.allowed_hosts[{i}]"), message),
            }
        }
        out
    }

    /// `[server.cors]`, if every part of it is valid.
    fn cors(&mut self, file: &Path, c: &CorsConfig) -> Option<CorsSpec> {
        let before = self.problems.len();
        if c.allowed_origins.is_empty() {
            self.report(
                file,
                "server.cors.allowed_origins",
                "must list at least one origin like \"http://localhost:3000\"; remove [server.cors] to admit none",
            );
        }
        let mut origins = Vec::new();
        for (i, text) in c.allowed_origins.iter().enumerate() {
            let field = format!("server.cors.allowed_origins[{i}]");
            let text = text.trim();
            match text {
                "*" => self.report(
                    file,
                    field,
                    "must name one origin: `*` would let every web page drive the API with the operator's side effects",
                ),
                "null" => self.report(
                    file,
                    field,
                    "must not be `null`: every sandboxed frame and file:// page shares that origin",
                ),
                _ => match Origin::parse(text) {
                    Some(origin) => origins.push(origin),
                    None => self.report(
                        file,
                        field,
                        format!(
                            "must be an origin `http(s)://host[:port]` with no path or trailing slash, like \"http://localhost:3000\", but it is `{text}`"
                        ),
                    ),
                },
            }
        }
        let methods = match &c.allowed_methods {
            None => DEFAULT_CORS_ALLOWED_METHODS.map(str::to_owned).to_vec(),
            Some(methods) => {
                if methods.is_empty() {
                    self.report(
                        file,
                        "server.cors.allowed_methods",
                        "must list at least one of GET, POST (or be left out for both)",
                    );
                }
                let mut out = Vec::new();
                for (i, method) in methods.iter().enumerate() {
                    let upper = method.trim().to_ascii_uppercase();
                    if DEFAULT_CORS_ALLOWED_METHODS.contains(&upper.as_str()) {
                        out.push(upper);
                    } else {
                        self.report(
                            file,
                            format!("server.cors.allowed_methods[{i}]"),
                            format!("must be GET or POST (the methods the API has), but it is `{method}`"),
                        );
                    }
                }
                out
            }
        };
        let headers = match &c.allowed_headers {
            None => DEFAULT_CORS_ALLOWED_HEADERS.map(str::to_owned).to_vec(),
            Some(headers) => {
                let mut out = Vec::new();
                for (i, header) in headers.iter().enumerate() {
                    let name = header.trim().to_ascii_lowercase();
                    // An RFC 9110 token; `*` would admit any header.
                    let token = !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'+-.^_`|~".contains(&b));
                    if token {
                        out.push(name);
                    } else {
                        self.report(
                            file,
                            format!("server.cors.allowed_headers[{i}]"),
                            format!("must be a header name like \"idempotency-key\" (no `*`), but it is `{header}`"),
                        );
                    }
                }
                out
            }
        };
        (self.problems.len() == before).then_some(CorsSpec {
            allowed_origins: origins,
            allowed_methods: methods,
            allowed_headers: headers,
        })
    }

    /// `[server.limits]`: each timeout within
    /// [`MIN_CONNECTION_TIMEOUT`]..=[`MAX_CONNECTION_TIMEOUT`], the
    /// connection count within 1..=[`MAX_MAX_CONNECTIONS`].
    fn connection_limits(
        &mut self,
        file: &Path,
        c: &ServerLimitsConfig,
        limits: &mut ConnectionLimits,
    ) {
        let timeouts = [
            (
                "header_timeout",
                c.header_timeout,
                &mut limits.header_timeout,
            ),
            ("body_timeout", c.body_timeout, &mut limits.body_timeout),
            ("idle_timeout", c.idle_timeout, &mut limits.idle_timeout),
        ];
        for (name, value, slot) in timeouts {
            let Some(value) = value else { continue };
            if (MIN_CONNECTION_TIMEOUT..=MAX_CONNECTION_TIMEOUT).contains(&value) {
                *slot = value;
            } else {
                self.report(
                    file,
                    format!("server.limits.{name}"),
                    format!(
                        "must be between {} and {}, but it is {}",
                        format_duration(MIN_CONNECTION_TIMEOUT),
                        format_duration(MAX_CONNECTION_TIMEOUT),
                        format_duration(value)
                    ),
                );
            }
        }
        if let Some(n) = c.max_connections {
            match NonZeroU32::new(n).filter(|n| n.get() <= MAX_MAX_CONNECTIONS) {
                Some(n) => limits.max_connections = n,
                None => self.report(
                    file,
                    "server.limits.max_connections",
                    format!("must be between 1 and {MAX_MAX_CONNECTIONS}, but it is {n}"),
                ),
            }
        }
    }

    /// `server.body_limit` in bytes, if parsable and in range.
    fn body_limit(&mut self, file: &Path, limit: &ByteSizeConfig) -> Option<usize> {
        let field = "server.body_limit";
        let bytes = match limit {
            ByteSizeConfig::Bytes(n) => i128::from(*n),
            ByteSizeConfig::Text(text) => match parse_byte_size(text) {
                Some(n) => i128::from(n),
                None => {
                    self.report(
                        file,
                        field,
                        format!(
                            "must be an integer of bytes or a size like \"1MiB\" (units B, KiB, MiB, GiB), but it is `{text}`"
                        ),
                    );
                    return None;
                }
            },
        };
        let range = MIN_BODY_LIMIT as i128..=MAX_BODY_LIMIT as i128;
        if !range.contains(&bytes) {
            self.report(
                file,
                field,
                format!(
                    "must be between 1KiB and 64MiB ({MIN_BODY_LIMIT}..={MAX_BODY_LIMIT} bytes), but it is {bytes} bytes"
                ),
            );
            return None;
        }
        usize::try_from(bytes).ok()
    }

    /// `value`, or `default` when unset; a zero value is reported and
    /// replaced by `default`.
    fn positive(
        &mut self,
        file: &Path,
        field: &str,
        value: Option<Duration>,
        default: Duration,
    ) -> Duration {
        match value {
            Some(d) if d.is_zero() => {
                self.report(file, field, "must be greater than zero");
                default
            }
            Some(d) => d,
            None => default,
        }
    }

    /// The `[[server.api_keys]]` entries that pass, reporting each that
    /// does not.
    fn api_keys(&mut self, file: &Path, c: &ServerConfig) -> Vec<ApiKeySpec> {
        let empty = empty_key_digest();
        let mut seen: BTreeMap<[u8; 32], usize> = BTreeMap::new();
        let mut out = Vec::new();
        for (i, key) in c.api_keys.iter().enumerate() {
            let p = format!("server.api_keys[{i}]");
            let tenant = match key.tenant.as_deref() {
                None => {
                    self.report(file, format!("{p}.tenant"), "is required");
                    None
                }
                Some(tenant) => match TenantId::new(tenant) {
                    Ok(tenant) => Some(tenant),
                    Err(err) => {
                        self.report(file, format!("{p}.tenant"), err.to_string());
                        None
                    }
                },
            };
            let field = format!("{p}.sha256");
            let sha256 = match key.sha256.as_deref() {
                None => {
                    self.report(
                        file,
                        field,
                        "is required: the hex SHA-256 of the key, e.g. from `printf %s KEY | sha256sum`",
                    );
                    None
                }
                Some(text) => match parse_sha256_hex(text.trim()) {
                    None => {
                        self.report(
                            file,
                            field,
                            format!(
                                "must be 64 hex digits (the SHA-256 of the key, never the key), but it is {} characters{}",
                                text.chars().count(),
                                if text.len() == 64 { " with a non-hex one" } else { "" }
                            ),
                        );
                        None
                    }
                    Some(digest) if digest == empty => {
                        self.report(
                            file,
                            field,
                            "is the SHA-256 of an empty key, which would admit a request with an empty bearer token",
                        );
                        None
                    }
                    Some(digest) => match seen.get(&digest) {
                        Some(earlier) => {
                            self.report(
                                file,
                                field,
                                format!(
                                    "is also the digest of server.api_keys[{earlier}]; each key may be listed once, for one tenant"
                                ),
                            );
                            None
                        }
                        None => {
                            seen.insert(digest, i);
                            Some(digest)
                        }
                    },
                },
            };
            let name = match key.name.as_deref() {
                Some(name) if name.trim().is_empty() => {
                    self.report(file, format!("{p}.name"), "must not be empty when set");
                    None
                }
                Some(name) if name.chars().any(char::is_control) => {
                    self.report(
                        file,
                        format!("{p}.name"),
                        format!("must not contain control characters (it is shown in logs), but {name:?} does"),
                    );
                    None
                }
                name => Some(name.map(str::to_owned)),
            };
            if let (Some(tenant), Some(sha256), Some(name)) = (tenant, sha256, name) {
                out.push(ApiKeySpec {
                    tenant,
                    sha256,
                    name,
                });
            }
        }
        out
    }

    // ----- shared rules ----------------------------------------------------

    /// Names are table keys, so any string is syntactically possible; an
    /// empty or blank one is always a mistake.
    fn name(&mut self, file: &Path, p: &str, name: &str) {
        if name.trim().is_empty() {
            self.report(file, p, "names must not be empty");
        }
    }

    fn required_text(
        &mut self,
        file: &Path,
        p: &str,
        field: &str,
        value: Option<&str>,
    ) -> Option<String> {
        match value {
            Some(text) if !text.trim().is_empty() => Some(text.to_owned()),
            Some(_) => {
                self.report(file, format!("{p}.{field}"), "must not be empty");
                None
            }
            None => {
                self.report(file, format!("{p}.{field}"), "is required");
                None
            }
        }
    }

    /// `[telemetry]`: `None` (and reported) when a field is wrong.
    fn telemetry(&mut self, file: &Path, c: &TelemetryConfig) -> Option<TelemetrySpec> {
        let url = match &c.otlp_endpoint {
            None => {
                self.report(
                    file,
                    "telemetry.otlp_endpoint",
                    "is required: the OTLP/HTTP collector traces are sent to, e.g. \"http://127.0.0.1:4318\"",
                );
                None
            }
            Some(url) => self.url(file, "telemetry.otlp_endpoint", url),
        };
        let service_name = match &c.service_name {
            None => Some(DEFAULT_SERVICE_NAME.to_owned()),
            Some(name) if name.trim().is_empty() => {
                self.report(file, "telemetry.service_name", "must not be empty");
                None
            }
            Some(name) => Some(name.clone()),
        };
        let sample_ratio = match c.sample_ratio {
            None => Some(Ratio::ONE),
            Some(r) => match Ratio::new("sample_ratio", r) {
                Ok(r) => Some(r),
                Err(err) => {
                    self.config_error(file, "telemetry", &err);
                    None
                }
            },
        };
        Some(TelemetrySpec {
            traces_url: super::telemetry::traces_url(&url?),
            service_name: service_name?,
            sample_ratio: sample_ratio?,
        })
    }

    /// An absolute `http`/`https` URL with a host.
    fn url(&mut self, file: &Path, field: &str, url: &str) -> Option<String> {
        let host = url
            .strip_prefix("http://")
            .or_else(|| url.strip_prefix("https://"));
        match host {
            Some(rest)
                if !rest.is_empty()
                    && !rest.starts_with('/')
                    && !url.contains(char::is_whitespace) =>
            {
                Some(url.to_owned())
            }
            _ => {
                self.report(
                    file,
                    field,
                    format!("must be an absolute http or https URL, but it is `{url}`"),
                );
                None
            }
        }
    }
}

impl Merged<'_> {
    /// Whether `section.name` is defined, counting entries that failed to
    /// parse (already reported), so one typo does not cascade.
    fn has(&self, section: &str, name: &str) -> bool {
        let parsed = match section {
            "providers" => self.providers.contains_key(name),
            "models" => self.models.contains_key(name),
            "resource_groups" => self.resource_groups.contains_key(name),
            "tools" => self.tools.contains_key(name),
            "agents" => self.agents.contains_key(name),
            _ => false,
        };
        parsed || self.broken.contains(format!("{section}.{name}").as_str())
    }
}

/// An agent's models as far as they passed the check; see
/// [`Checker::agent_models`].
struct AgentModels {
    primary: Option<ModelLink>,
    fallbacks: Option<Vec<ModelLink>>,
    context_fallbacks: Option<Vec<ModelLink>>,
    /// The binding's alias, when the agent names one.
    binding: Option<String>,
}

/// The agent adapter's settings of `c`, each with whether it is set, to
/// report on an adapter of another kind.
/// The settings only an http adapter takes (`status_url` is refused
/// with its own reason by the others).
fn http_fields(c: &AdapterConfig) -> [(bool, &'static str); 3] {
    [
        (c.url.is_some(), "url"),
        (c.method.is_some(), "method"),
        (!c.headers.is_empty(), "headers"),
    ]
}

/// The result cap the http and mcp adapters take.
fn result_fields(c: &AdapterConfig) -> [(bool, &'static str); 1] {
    [(c.max_result_bytes.is_some(), "max_result_bytes")]
}

/// The settings only a command adapter takes.
fn command_fields(c: &AdapterConfig) -> [(bool, &'static str); 5] {
    [
        (c.program.is_some(), "program"),
        (!c.args.is_empty(), "args"),
        (c.working_dir.is_some(), "working_dir"),
        (!c.env.is_empty(), "env"),
        (c.max_output_bytes.is_some(), "max_output_bytes"),
    ]
}

/// `sha256:` and 64 lowercase hex digits.
fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

fn mcp_fields(c: &AdapterConfig) -> [(bool, &'static str); 3] {
    [
        (c.server.is_some(), "server"),
        (c.tool.is_some(), "tool"),
        (c.pin.is_some(), "pin"),
    ]
}

fn agent_fields(c: &AdapterConfig) -> [(bool, &'static str); 6] {
    [
        (c.agent.is_some(), "agent"),
        (c.budget_ratio.is_some(), "budget_ratio"),
        (c.max_tokens.is_some(), "max_tokens"),
        (c.max_steps.is_some(), "max_steps"),
        (c.wall_clock.is_some(), "wall_clock"),
        (c.max_cost_usd.is_some(), "max_cost_usd"),
    ]
}

/// The latency profile of an agent tool that declares none:
/// [`DEFAULT_AGENT_TOOL_LATENCY`], each quantile at most the child's
/// `wall_clock` cap (a zero cap is reported elsewhere and ignored here).
fn default_agent_latency(wall_clock: Option<Duration>) -> LatencySpec {
    let (p50, p95, p99) = DEFAULT_AGENT_TOOL_LATENCY;
    let cap = wall_clock.filter(|d| !d.is_zero()).unwrap_or(Duration::MAX);
    let profile = LatencyProfile::new(p50.min(cap), p95.min(cap), p99.min(cap), 0)
        .unwrap_or_else(|_| unreachable!("capped default quantiles stay positive and ordered"));
    LatencySpec::Declared(profile)
}

/// The `properties` table of a schema, if it has one.
fn properties(schema: &Value) -> Option<&Map<String, Value>> {
    schema.get("properties").and_then(Value::as_object)
}

/// The names in a schema's `required` list.
fn required(schema: &Value) -> Vec<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// `path` as written in `file`: absolute paths stay, relative ones resolve
/// against the file's directory.
pub(super) fn resolve_relative(file: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.to_path_buf();
    }
    match file.parent() {
        Some(dir) => dir.join(path),
        None => path.to_path_buf(),
    }
}

/// What OpenAI and Anthropic accept as a function name.
fn is_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A portable environment variable name.
pub(super) fn is_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// An RFC 9110 token.
pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn is_reserved_header(name: &str) -> bool {
    RESERVED_HEADERS
        .iter()
        .any(|reserved| reserved.eq_ignore_ascii_case(name))
}

//! The integrity check: parsed config files in, a [`Registry`] or every
//! problem out.
//!
//! One module per section, each a block of the [`Checker`]'s methods that
//! reads its tables and reports what is wrong under each dotted field:
//! `provider`, `model` (bindings), `resource_group`, `tool`, `adapter`,
//! `agent` (with `output_caps` and `output_fields`), `server`,
//! `telemetry`. This module merges the files, runs the sections in the
//! order their references need (a tool names a resource group, an agent
//! its tools and models), and holds the rules they share.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use super::config::{
    AgentConfig, ConfigSource, ModelBindingConfig, ProviderConfig, ResourceGroupConfig,
    ServerConfig, ToolConfig,
};
use super::constants::DEFAULT_AGENT_TOOL_LATENCY;
use super::constants::RESERVED_HEADERS;
use super::problem::{ConfigProblem, SchemaIssue};
use super::server::ServerSpec;
use super::spec::{LatencySpec, ModelLink, Registry};
use super::telemetry::TelemetryConfig;
use crate::breaker::{Breakers, BreakersConfig};
use crate::config::ConfigError;
use crate::tool::LatencyProfile;

mod adapter;
mod agent;
mod model;
mod output_caps;
mod output_fields;
mod provider;
mod resource_group;
mod server;
mod telemetry;
mod tool;

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

/// `sha256:` and 64 lowercase hex digits.
fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
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

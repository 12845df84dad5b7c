//! `[server]`: how `rein serve` listens, whom it admits and how it runs work.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::Path;
use std::time::Duration;

use humantime_serde::re::humantime::format_duration;

use super::Checker;
use crate::ids::TenantId;
use crate::registry::config::CorsConfig;
use crate::registry::config::ServerLimitsConfig;
use crate::registry::config::{ByteSizeConfig, ServerConfig};
use crate::registry::constants::{DEFAULT_CORS_ALLOWED_HEADERS, DEFAULT_CORS_ALLOWED_METHODS};
use crate::registry::constants::{
    MAX_BODY_LIMIT, MAX_KEY_LENGTH, MAX_QUEUE_WORKERS, MIN_BODY_LIMIT, MIN_IDEMPOTENCY_RETENTION,
    MIN_QUEUE_LEASE,
};
use crate::registry::constants::{
    MAX_CONNECTION_TIMEOUT, MAX_MAX_CONNECTIONS, MAX_SHUTDOWN_GRACE, MIN_CONNECTION_TIMEOUT,
};
use crate::registry::exposure::{AllowedHost, CorsSpec, MetricsAccess, Origin};
use crate::registry::key_budget::{KeyBudget, KeyBudgetConfig};
use crate::registry::server::ConnectionLimits;
use crate::registry::server::{
    ApiKeySpec, ServerSpec, empty_key_digest, parse_byte_size, parse_sha256_hex,
};
use crate::registry::spec::AgentSpec;

impl<'a> Checker<'a> {
    /// The `[server]` table of `file`. Every value out of range is reported
    /// and replaced by its default, so the rest is still checked (the
    /// registry is refused anyway once anything was reported).
    pub(super) fn server(&mut self, file: &Path, c: &ServerConfig) -> ServerSpec {
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
        let (quotas, mut refused) = crate::registry::quotas::validate(&c.quotas);
        let key_tenants: Vec<&TenantId> = spec.api_keys.iter().map(|k| &k.tenant).collect();
        refused.extend(crate::registry::quotas::unreachable_tenants(
            &quotas,
            &key_tenants,
        ));
        for (field, message) in refused {
            self.report(file, field, message);
        }
        spec.quotas = quotas;
        spec
    }

    /// `[server.metrics_labels]`: tenants a request can act for, agents of
    /// this config, each list within `max_values`.
    pub(super) fn metrics_labels(
        &mut self,
        file: &Path,
        c: &ServerConfig,
        spec: &ServerSpec,
        agents: &BTreeMap<String, AgentSpec>,
    ) -> crate::registry::MetricsLabels {
        let known = crate::registry::metrics_labels::Known {
            key_tenants: spec.api_keys.iter().map(|k| &k.tenant).collect(),
            agents: agents.keys().map(String::as_str).collect(),
        };
        let (labels, problems) = crate::registry::metrics_labels::check(&c.metrics_labels, &known);
        for (field, message) in problems {
            self.report(file, field, message);
        }
        labels
    }

    /// `server.metrics_tenants`: tenants that have a key, and only where
    /// `/metrics` is protected (with `open` the list would do nothing).
    pub(super) fn metrics_tenants(
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
    pub(super) fn allowed_hosts(&mut self, file: &Path, entries: &[String]) -> Vec<AllowedHost> {
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
    pub(super) fn cors(&mut self, file: &Path, c: &CorsConfig) -> Option<CorsSpec> {
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
    pub(super) fn connection_limits(
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
    pub(super) fn body_limit(&mut self, file: &Path, limit: &ByteSizeConfig) -> Option<usize> {
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
    pub(super) fn positive(
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
    pub(super) fn api_keys(&mut self, file: &Path, c: &ServerConfig) -> Vec<ApiKeySpec> {
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
            let budget = self.key_budget(file, &p, key.budget.as_ref());
            if let (Some(tenant), Some(sha256), Some(name), Some(budget)) =
                (tenant, sha256, name, budget)
            {
                out.push(ApiKeySpec {
                    tenant,
                    sha256,
                    name,
                    budget,
                });
            }
        }
        out
    }

    /// `[server.api_keys.budget]`: each limit positive, money finite.
    fn key_budget(
        &mut self,
        file: &Path,
        p: &str,
        c: Option<&KeyBudgetConfig>,
    ) -> Option<KeyBudget> {
        let Some(c) = c else {
            return Some(KeyBudget::default());
        };
        match c.validate(&format!("{p}.budget"), KeyBudget::default()) {
            Ok(budget) => Some(budget),
            Err(refused) => {
                for (field, problem) in refused {
                    self.report(file, field, problem);
                }
                None
            }
        }
    }
}

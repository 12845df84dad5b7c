//! The validated `[server]` section: [`ServerSpec`] and its parts, what
//! `rein serve` reads to listen, admit callers and run work.
//!
//! # Why in the registry
//!
//! The server's limits interact with the rest of the registry (a queued
//! run's lease must outlast a heartbeat, an agent tree's token limit sits
//! above every agent's own budget), and an operator fixes all of them in the
//! same files. Checking them in the same pass means one `rein check` names
//! every problem, server settings included, before anything listens.

use std::fmt;
use std::net::SocketAddr;
use std::num::{NonZeroU32, NonZeroU64};
use std::path::PathBuf;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use super::constants::{
    DEFAULT_AGENT_GRAPH_MAX_DEPTH, DEFAULT_AGENT_GRAPH_MAX_TOTAL_RUNS,
    DEFAULT_AGENT_GRAPH_MAX_TOTAL_TOKENS, DEFAULT_BODY_LIMIT, DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_IDEMPOTENCY_RETENTION,
    DEFAULT_IDLE_TIMEOUT, DEFAULT_LISTEN, DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_KEY_LENGTH,
    DEFAULT_MAX_RUNS_PER_SCAN, DEFAULT_ORPHAN_THRESHOLD, DEFAULT_QUEUE_LEASE,
    DEFAULT_QUEUE_MAX_ATTEMPTS, DEFAULT_QUEUE_WORKERS, DEFAULT_SCAN_INTERVAL,
    DEFAULT_SHUTDOWN_GRACE,
};
use super::exposure::{AllowedHost, CorsSpec, MetricsAccess};
use crate::ids::TenantId;

/// How `rein serve` listens, whom it admits and how it runs work; the
/// defaults below when no file has a `[server]` table.
///
/// # Defaults and limits
///
/// Every duration is also at most [`MAX_DURATION`](crate::config::MAX_DURATION)
/// (366 d), refused with its field by the config loader; a new duration
/// setting gets that by deserializing with `crate::config::duration`.
///
/// | setting | default | accepted |
/// | --- | --- | --- |
/// | `listen` | [`DEFAULT_LISTEN`] (`127.0.0.1:8787`) | `IP:PORT` |
/// | `body_limit` | [`DEFAULT_BODY_LIMIT`] (1 MiB) | [`MIN_BODY_LIMIT`](super::MIN_BODY_LIMIT)..=[`MAX_BODY_LIMIT`](super::MAX_BODY_LIMIT) (1 KiB..=64 MiB) |
/// | `idempotency.enabled` | `true` | |
/// | `idempotency.max_key_length` | [`DEFAULT_MAX_KEY_LENGTH`] (255) | 1..=[`MAX_KEY_LENGTH`](super::MAX_KEY_LENGTH) (1024) |
/// | `idempotency.retention` | [`DEFAULT_IDEMPOTENCY_RETENTION`] (24 h) | ≥ [`MIN_IDEMPOTENCY_RETENTION`](super::MIN_IDEMPOTENCY_RETENTION) (1 ms) |
/// | `queue.lease` | [`DEFAULT_QUEUE_LEASE`] (60 s) | ≥ [`MIN_QUEUE_LEASE`](super::MIN_QUEUE_LEASE) (3 s); also an idempotency holder's lease |
/// | `queue.max_attempts` | [`DEFAULT_QUEUE_MAX_ATTEMPTS`] (3) | ≥ 1 |
/// | `queue.workers` | [`DEFAULT_QUEUE_WORKERS`] (2) | 1..=[`MAX_QUEUE_WORKERS`](super::MAX_QUEUE_WORKERS) (64) |
/// | `reconciliation.heartbeat_interval` | [`DEFAULT_HEARTBEAT_INTERVAL`] (30 s) | > 0 |
/// | `reconciliation.orphan_threshold` | [`DEFAULT_ORPHAN_THRESHOLD`] (5 min) | ≥ `heartbeat_interval` |
/// | `reconciliation.scan_interval` | [`DEFAULT_SCAN_INTERVAL`] (1 min) | > 0 |
/// | `reconciliation.max_runs_per_scan` | [`DEFAULT_MAX_RUNS_PER_SCAN`] (100) | ≥ 1 |
/// | `agent_graph.max_depth` | [`DEFAULT_AGENT_GRAPH_MAX_DEPTH`] (3) | any; 0 allows no children |
/// | `agent_graph.max_total_tokens` | [`DEFAULT_AGENT_GRAPH_MAX_TOTAL_TOKENS`] (200 000) | 0 = unlimited |
/// | `agent_graph.max_total_runs` | [`DEFAULT_AGENT_GRAPH_MAX_TOTAL_RUNS`] (25) | 0 = unlimited |
/// | `api_keys` | none: no bearer key is admitted | distinct SHA-256 digests |
/// | `allowed_hosts` | none: loopback names and addresses only | host names, IP addresses, `*.domain`, each with an optional `:port`; no scheme, no path (see [`AllowedHost`](super::AllowedHost)) |
/// | `cors` | off: no origin but the server's own | `allowed_origins` (required, `http(s)://host[:port]`, no `*`, no `null`) |
/// | `cors.allowed_methods` | [`DEFAULT_CORS_ALLOWED_METHODS`](super::DEFAULT_CORS_ALLOWED_METHODS) (`GET`, `POST`) | a non-empty subset of them |
/// | `cors.allowed_headers` | [`DEFAULT_CORS_ALLOWED_HEADERS`](super::DEFAULT_CORS_ALLOWED_HEADERS) (`authorization`, `content-type`, `idempotency-key`, `last-event-id`, `rein-deadline-ms`, `request-id`) | header names, no `*` |
/// | `metrics` | `protected`: with keys configured, `/metrics` needs the key of a tenant in `metrics_tenants` | `protected`, `open` (anyone who reaches the server) |
/// | `metrics_tenants` | none: with keys and `protected`, no key reads `/metrics` | tenants of `[[server.api_keys]]` entries; only with `metrics = "protected"` |
/// | `metrics_labels.tenants` | none: the first `max_values` tenants seen keep their label value, the rest are `other` | tenants of `[[server.api_keys]]` entries (without keys: `default`), at most `max_values` |
/// | `metrics_labels.agents` | none: the first `max_values` agents seen keep their label value, the rest are `other` | `[agents.*]` names, at most `max_values` |
/// | `metrics_labels.max_values` | [`DEFAULT_METRICS_LABEL_VALUES`](super::DEFAULT_METRICS_LABEL_VALUES) (50) | 1..=[`MAX_METRICS_LABEL_VALUES`](super::MAX_METRICS_LABEL_VALUES) (1000) |
/// | `limits.header_timeout` | [`DEFAULT_HEADER_TIMEOUT`] (10 s) | [`MIN_CONNECTION_TIMEOUT`](super::MIN_CONNECTION_TIMEOUT)..=[`MAX_CONNECTION_TIMEOUT`](super::MAX_CONNECTION_TIMEOUT) (100 ms..=1 h) |
/// | `limits.body_timeout` | [`DEFAULT_BODY_TIMEOUT`] (30 s) | 100 ms..=1 h |
/// | `limits.idle_timeout` | [`DEFAULT_IDLE_TIMEOUT`] (60 s) | 100 ms..=1 h |
/// | `limits.max_connections` | [`DEFAULT_MAX_CONNECTIONS`] (1024) | 1..=[`MAX_MAX_CONNECTIONS`](super::MAX_MAX_CONNECTIONS) (65 536) |
/// | `shutdown_grace` | [`DEFAULT_SHUTDOWN_GRACE`] (25 s) | 0..=[`MAX_SHUTDOWN_GRACE`](super::MAX_SHUTDOWN_GRACE) (1 h): the whole drain, signal to exit; the last 7 s hand on and close, so under 7 s hands on at once (and exits within 1.5 s at the least) |
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ServerSpec {
    /// The address to bind.
    pub listen: SocketAddr,
    /// The largest request body accepted, in bytes; within
    /// [`MIN_BODY_LIMIT`](super::MIN_BODY_LIMIT)..=[`MAX_BODY_LIMIT`](super::MAX_BODY_LIMIT).
    pub body_limit: usize,
    /// Idempotent submissions.
    pub idempotency: IdempotencySettings,
    /// The background run queue.
    pub queue: QueueSettings,
    /// Closing runs orphaned by a process that died.
    pub reconciliation: ReconciliationSettings,
    /// Limits shared by a root run and its child-agent tree.
    pub agent_graph: AgentGraphLimits,
    /// The bearer keys admitted, in config order; no two share a digest.
    pub api_keys: Vec<ApiKeySpec>,
    /// How slow and idle clients are cut off, and how many connections are
    /// served at once.
    pub limits: ConnectionLimits,
    /// The whole time from SIGTERM or SIGINT to the exit: in-flight runs
    /// and requests may finish until 7 s before its end, then what is left
    /// is interrupted and handed on, then connections close.
    pub shutdown_grace: Duration,
    /// The config file the `[server]` table was in; `None` for the
    /// defaults.
    pub source: Option<PathBuf>,

    // ----- exposure: who may reach the API (allowed_hosts, cors, metrics) --
    /// Hosts the API answers for besides loopback.
    pub allowed_hosts: Vec<AllowedHost>,
    /// Browser origins other than the server's own; `None`: off.
    pub cors: Option<CorsSpec>,
    /// Who may read `/metrics`.
    pub metrics: MetricsAccess,
    /// The tenants whose keys may read `/metrics` when it is protected
    /// (each the tenant of an `api_keys` entry).
    pub metrics_tenants: Vec<TenantId>,
    /// Which tenants and agents get a label value of their own in
    /// `/metrics` (`[server.metrics_labels]`).
    pub metrics_labels: super::metrics_labels::MetricsLabels,

    // ----- quotas: per-tenant limits, fair queue, run slots --------------
    /// `[server.quotas]` (see [`super::ServerQuotas`] for the defaults).
    pub quotas: super::quotas::ServerQuotas,
}

impl Default for ServerSpec {
    fn default() -> Self {
        ServerSpec {
            listen: DEFAULT_LISTEN,
            body_limit: DEFAULT_BODY_LIMIT,
            idempotency: IdempotencySettings::default(),
            queue: QueueSettings::default(),
            reconciliation: ReconciliationSettings::default(),
            agent_graph: AgentGraphLimits::default(),
            api_keys: Vec::new(),
            limits: ConnectionLimits::default(),
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            source: None,
            allowed_hosts: Vec::new(),
            cors: None,
            metrics: MetricsAccess::default(),
            metrics_tenants: Vec::new(),
            metrics_labels: Default::default(),
            quotas: super::quotas::ServerQuotas::default(),
        }
    }
}

impl ServerSpec {
    /// The configured key whose digest is the SHA-256 of `presented_key`
    /// (the bearer token of a request), if any.
    ///
    /// # Why hash and compare every byte
    ///
    /// Config holds only digests, so a leaked config admits nobody. The
    /// presented key is hashed and compared with every configured digest,
    /// each in full without an early exit, so the time taken does not
    /// reveal how many leading bytes matched or which entry did.
    ///
    /// ```
    /// # use rein_core::registry::{self, ConfigFile, ConfigSource};
    /// // sha256("test")
    /// let text = r#"
    /// [[server.api_keys]]
    /// tenant = "acme"
    /// sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
    /// name = "ci"
    /// "#;
    /// # let file: ConfigFile = toml::from_str(text)?;
    /// let registry = registry::check(&[ConfigSource::new("rein.toml", file)], &|_| Vec::new())
    ///     .map_err(|problems| problems[0].to_string())?;
    /// let key = registry.server().tenant_for("test").ok_or("no match")?;
    /// assert_eq!(key.tenant.as_str(), "acme");
    /// assert!(registry.server().tenant_for("nope").is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn tenant_for(&self, presented_key: &str) -> Option<&ApiKeySpec> {
        if presented_key.is_empty() {
            return None;
        }
        let digest: [u8; 32] = Sha256::digest(presented_key.as_bytes()).into();
        let mut found = None;
        for key in &self.api_keys {
            // Every entry is compared, even after a match.
            if digests_equal(&key.sha256, &digest) && found.is_none() {
                found = Some(key);
            }
        }
        found
    }
}

/// Whether `a` and `b` are equal, looking at every byte whatever the
/// earlier ones held.
fn digests_equal(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // Keeps the optimizer from turning the fold back into an early exit.
    std::hint::black_box(diff) == 0
}

/// Idempotent submissions: a repeated `Idempotency-Key` replays the first
/// answer instead of starting a second run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct IdempotencySettings {
    /// Whether the header is honoured; when `false`, a request carrying one
    /// is refused rather than run without the guarantee it asked for.
    pub enabled: bool,
    /// The longest key accepted, in bytes; 1..=[`MAX_KEY_LENGTH`](super::MAX_KEY_LENGTH).
    pub max_key_length: usize,
    /// How long a completed submission is remembered for replay; > 0.
    pub retention: Duration,
}

impl Default for IdempotencySettings {
    fn default() -> Self {
        IdempotencySettings {
            enabled: true,
            max_key_length: DEFAULT_MAX_KEY_LENGTH,
            retention: DEFAULT_IDEMPOTENCY_RETENTION,
        }
    }
}

/// The background run queue: leases, redelivery and concurrency.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueueSettings {
    /// How long a worker owns a queued run before another may take it
    /// over; at least [`MIN_QUEUE_LEASE`](super::MIN_QUEUE_LEASE), renewed
    /// at a third of its length. Also the lease of an `Idempotency-Key`
    /// reservation's holder: renewed the same way while the request
    /// executes, and taken for dead by a retry a lease after its last
    /// renewal.
    pub lease: Duration,
    /// Deliveries of one queued run; after the last it is dead-lettered.
    pub max_attempts: NonZeroU32,
    /// Runs executed at once; 1..=[`MAX_QUEUE_WORKERS`](super::MAX_QUEUE_WORKERS).
    pub workers: NonZeroU32,
}

impl Default for QueueSettings {
    fn default() -> Self {
        QueueSettings {
            lease: DEFAULT_QUEUE_LEASE,
            max_attempts: NonZeroU32::new(DEFAULT_QUEUE_MAX_ATTEMPTS).unwrap_or(NonZeroU32::MIN),
            workers: NonZeroU32::new(DEFAULT_QUEUE_WORKERS).unwrap_or(NonZeroU32::MIN),
        }
    }
}

/// Closing runs left `running` by a process that died: live runs write a
/// heartbeat, and a periodic scan fails runs silent for too long.
///
/// Invariant: `orphan_threshold >= heartbeat_interval`, or a live run
/// could be closed between two of its own heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReconciliationSettings {
    /// How often a live run records that it is alive; > 0.
    pub heartbeat_interval: Duration,
    /// Heartbeat silence after which a run counts as orphaned.
    pub orphan_threshold: Duration,
    /// How often the scan runs; > 0.
    pub scan_interval: Duration,
    /// Runs one scan closes at most.
    pub max_runs_per_scan: NonZeroU32,
}

impl Default for ReconciliationSettings {
    fn default() -> Self {
        ReconciliationSettings {
            heartbeat_interval: DEFAULT_HEARTBEAT_INTERVAL,
            orphan_threshold: DEFAULT_ORPHAN_THRESHOLD,
            scan_interval: DEFAULT_SCAN_INTERVAL,
            max_runs_per_scan: NonZeroU32::new(DEFAULT_MAX_RUNS_PER_SCAN)
                .unwrap_or(NonZeroU32::MIN),
        }
    }
}

/// How `rein serve` protects itself from slow and idle clients: every
/// phase of a connection in which the client, not the server, is expected
/// to act has a deadline, and the number of connections is bounded.
///
/// # Why no deadline on a response
///
/// A sync run answers when the run ends (bounded by its own deadline), and
/// an event stream lasts as long as its run: no request-wide timeout could
/// tell those from a stuck client. What is bounded is the client's part —
/// sending its head and body, coming back with its next request, reading
/// what it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConnectionLimits {
    /// From a connection's opening (or the first byte of a further request
    /// on a kept-alive one) to its complete request head.
    pub header_timeout: Duration,
    /// The longest pause while a request body is received.
    pub body_timeout: Duration,
    /// How long a kept-alive connection may wait for its next request, and
    /// a response for a client that stopped reading it.
    pub idle_timeout: Duration,
    /// Connections served at once; beyond it new ones are refused at once.
    pub max_connections: NonZeroU32,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            max_connections: NonZeroU32::new(DEFAULT_MAX_CONNECTIONS).unwrap_or(NonZeroU32::MIN),
        }
    }
}

/// Limits shared by a root run and every child run below it
/// (`[server.agent_graph]`; the engine bounds every agent tree by them).
///
/// They stop a new child from starting once reached; work in progress is
/// not interrupted, so concurrent children may overshoot the token limit by
/// what they use before their next model call returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentGraphLimits {
    /// The deepest child allowed; the root is depth 0, so 0 allows none.
    pub max_depth: u32,
    /// Tokens the whole tree may use; `None` for no limit (`0` in config).
    pub max_total_tokens: Option<NonZeroU64>,
    /// Child runs the tree may start; `None` for no limit (`0` in config).
    pub max_total_runs: Option<NonZeroU32>,
}

impl Default for AgentGraphLimits {
    fn default() -> Self {
        AgentGraphLimits {
            max_depth: DEFAULT_AGENT_GRAPH_MAX_DEPTH,
            max_total_tokens: NonZeroU64::new(DEFAULT_AGENT_GRAPH_MAX_TOTAL_TOKENS),
            max_total_runs: NonZeroU32::new(DEFAULT_AGENT_GRAPH_MAX_TOTAL_RUNS),
        }
    }
}

impl AgentGraphLimits {
    /// These limits with children at most `max` deep (0 allows none).
    #[must_use]
    pub fn with_max_depth(mut self, max: u32) -> Self {
        self.max_depth = max;
        self
    }

    /// These limits with at most `max` tokens for the whole tree (`None`:
    /// unlimited).
    #[must_use]
    pub fn with_max_total_tokens(mut self, max: Option<NonZeroU64>) -> Self {
        self.max_total_tokens = max;
        self
    }

    /// These limits with at most `max` child runs in the tree (`None`:
    /// unlimited).
    #[must_use]
    pub fn with_max_total_runs(mut self, max: Option<NonZeroU32>) -> Self {
        self.max_total_runs = max;
        self
    }
}

/// One admitted bearer key: the tenant it acts for and its SHA-256.
///
/// The key itself is never in config or in memory beyond the request that
/// presents it; [`ServerSpec::tenant_for`] finds the entry for a presented
/// key.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApiKeySpec {
    /// The tenant every request with this key acts for.
    pub tenant: TenantId,
    /// The SHA-256 of the key.
    pub sha256: [u8; 32],
    /// A label for logs; non-blank, no control characters.
    pub name: Option<String>,
    /// What it may spend on models through the gateway (unlimited when no
    /// limit is set).
    pub budget: super::key_budget::KeyBudget,
}

impl ApiKeySpec {
    /// What logs call the key: its `name`, or `sha256:` and the first 8 hex
    /// digits of its digest, never the key.
    pub fn label(&self) -> String {
        match &self.name {
            Some(name) => name.clone(),
            None => format!("sha256:{}", hex(&self.sha256[..4])),
        }
    }
}

impl fmt::Debug for ApiKeySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApiKeySpec")
            .field("tenant", &self.tenant)
            .field("sha256", &hex(&self.sha256))
            .field("name", &self.name)
            .finish()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `text` as 32 bytes, if it is exactly 64 hex digits (either case).
pub(super) fn parse_sha256_hex(text: &str) -> Option<[u8; 32]> {
    // Checked up front: `from_str_radix` alone would take a sign (`+f`).
    if text.len() != 64 || !text.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 32];
    for (byte, pair) in out.iter_mut().zip(text.as_bytes().chunks_exact(2)) {
        let pair = std::str::from_utf8(pair).ok()?;
        *byte = u8::from_str_radix(pair, 16).ok()?;
    }
    Some(out)
}

/// The SHA-256 of the empty string: a config listing it would admit a
/// request with an empty bearer token.
pub(super) fn empty_key_digest() -> [u8; 32] {
    Sha256::digest(b"").into()
}

/// A size in bytes from `text`: digits, then optionally spaces and a unit
/// `B`, `KiB`, `MiB` or `GiB` (any case). Decimal units (`MB`) are refused:
/// whether they mean 10⁶ or 2²⁰ bytes is exactly the ambiguity a limit
/// should not have.
pub(super) fn parse_byte_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.bytes().take_while(u8::is_ascii_digit).count();
    let number: u64 = text[..digits].parse().ok()?;
    let unit = text[digits..].trim_start();
    let scale: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return None,
    };
    number.checked_mul(scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_byte_size_reads_binary_units_in_any_case() {
        assert_eq!(parse_byte_size("1MiB"), Some(1 << 20));
        assert_eq!(parse_byte_size(" 512 kib "), Some(512 << 10));
        assert_eq!(parse_byte_size("2048"), Some(2048));
        assert_eq!(parse_byte_size("7B"), Some(7));
        assert_eq!(parse_byte_size("1GiB"), Some(1 << 30));
    }

    #[test]
    fn parse_byte_size_refuses_decimal_units_fractions_and_overflow() {
        for bad in [
            "1MB",
            "1.5MiB",
            "MiB",
            "",
            "-1KiB",
            "99999999999999999999",
            "1 MiB x",
        ] {
            assert_eq!(parse_byte_size(bad), None, "{bad}");
        }
        assert_eq!(parse_byte_size("18446744073709551615GiB"), None);
    }

    #[test]
    fn parse_sha256_hex_needs_exactly_64_hex_digits() {
        let lower = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
        let digest = parse_sha256_hex(lower).unwrap();
        assert_eq!(digest[0], 0x9f);
        assert_eq!(parse_sha256_hex(&lower.to_uppercase()), Some(digest));
        assert_eq!(parse_sha256_hex(&lower[..62]), None);
        assert_eq!(parse_sha256_hex(&format!("{}zz", &lower[..62])), None);
        assert_eq!(parse_sha256_hex(&format!("{}+f", &lower[..62])), None);
        assert_eq!(parse_sha256_hex(&format!("{}é", &lower[..62])), None);
    }

    #[test]
    fn digests_equal_compares_every_byte() {
        let a = [7u8; 32];
        let mut b = a;
        assert!(digests_equal(&a, &b));
        b[31] ^= 1;
        assert!(!digests_equal(&a, &b));
    }

    #[test]
    fn label_is_the_name_or_a_digest_prefix() {
        let mut key = ApiKeySpec {
            tenant: TenantId::new("acme").unwrap(),
            sha256: [0xab; 32],
            name: None,
            budget: Default::default(),
        };
        assert_eq!(key.label(), "sha256:abababab");
        key.name = Some("ci".into());
        assert_eq!(key.label(), "ci");
        assert!(format!("{key:?}").contains(&"ab".repeat(32)));
    }

    #[test]
    fn defaults_match_the_named_constants() {
        let spec = ServerSpec::default();
        assert_eq!(spec.listen.to_string(), "127.0.0.1:8787");
        assert_eq!(spec.body_limit, 1 << 20);
        assert_eq!(spec.queue.max_attempts.get(), 3);
        assert_eq!(spec.queue.workers.get(), 2);
        assert_eq!(spec.reconciliation.max_runs_per_scan.get(), 100);
        assert_eq!(spec.limits.header_timeout, Duration::from_secs(10));
        assert_eq!(spec.limits.body_timeout, Duration::from_secs(30));
        assert_eq!(spec.limits.idle_timeout, Duration::from_secs(60));
        assert_eq!(spec.limits.max_connections.get(), 1024);
        assert_eq!(spec.shutdown_grace, Duration::from_secs(25));
        assert_eq!(
            spec.agent_graph.max_total_tokens.map(NonZeroU64::get),
            Some(200_000)
        );
        assert_eq!(
            spec.agent_graph.max_total_runs.map(NonZeroU32::get),
            Some(25)
        );
    }
}

//! The registry's named defaults.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use crate::header::{
    ATTEMPT_HEADER, ATTEMPT_ID_HEADER, DEADLINE_HEADER, IDEMPOTENCY_KEY_HEADER, INTENT_ID_HEADER,
    RUN_ID_HEADER, TRACEPARENT_HEADER,
};

/// The header an idempotency key travels in unless a tool names another.
pub const DEFAULT_IDEMPOTENCY_HEADER: &str = IDEMPOTENCY_KEY_HEADER;

/// How much of a tool's result body rein keeps before truncating it with an
/// explicit note: 16 KiB, enough for a structured answer, small enough that
/// one tool cannot flood the model's context.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 16 * 1024;

/// How much of a command tool's stdout (and, separately, stderr) rein keeps
/// before truncating it with an explicit note: 64 KiB. Larger than
/// [`DEFAULT_MAX_RESULT_BYTES`] because a program's output is often text
/// (logs, listings) rather than a structured answer.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// The prefix of environment variables rein sets for a command tool
/// (`REIN_RUN_ID`, `REIN_DEADLINE_MS`, ...); a tool's `env` may not set
/// them, or it could forge the deadline or the correlation ids.
pub const RESERVED_ENV_PREFIX: &str = "REIN_";

/// How long an `openai` or `anthropic` provider may take for one request
/// when its config names no `timeout`; the run's deadline still applies on
/// top.
pub const DEFAULT_PROVIDER_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a streamed model call may wait for its first byte when
/// `[providers.NAME.stream]` names no `first_byte_timeout`: 20 s.
///
/// The first byte comes only after the provider has queued the request and
/// read the whole prompt, which for a long context takes seconds; 20 s
/// leaves room for that while still giving up on a provider that accepted
/// the connection and went silent well before [`DEFAULT_PROVIDER_TIMEOUT`]
/// would, leaving time to try a fallback.
pub const DEFAULT_STREAM_FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(20);

/// How long a gateway call may take, fallbacks and retries included, when
/// the client sends no `Rein-Deadline-Ms` and its binding names no
/// `deadline`.
///
/// # Why 600 s
///
/// The official SDKs wait 600 s by default and send no deadline: a shorter
/// one cuts long healthy answers (a reasoning model thinking before its
/// first token, a long generation) that the client was willing to wait
/// for, and blames the provider for it (issue 35).
pub const DEFAULT_GATEWAY_DEADLINE: Duration = Duration::from_secs(600);

/// How long a streamed model call may go without a byte once the first
/// has arrived, when `[providers.NAME.stream]` names no `idle_timeout`:
/// 10 s.
///
/// Once tokens flow, gaps between chunks are well under a second; a gap of
/// 10 s is a stalled stream, not a slow model, and waiting for the whole
/// request timeout would spend the run's deadline on nothing.
pub const DEFAULT_STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(10);

/// Observations a tool in `observe` latency mode needs before its measured
/// profile replaces the conservative fallback: fewer make a p99 noise.
pub const DEFAULT_OBSERVE_MIN_SAMPLES: u64 = 50;

/// The p99 a tool that declares no `latency` is planned with until
/// [`DEFAULT_OBSERVE_MIN_SAMPLES`] calls are measured: its latency is
/// observed. Long on purpose: an allowance that is too short turns a slow
/// answer into a timeout and a retry, one that is too long only waits.
pub const DEFAULT_TOOL_FALLBACK_P99: Duration = Duration::from_secs(5);

/// The `owner` of a tool that names none: what a handoff package shows
/// beside its effects, so that a missing owner is visible, not silent.
pub const DEFAULT_TOOL_OWNER: &str = "unassigned";

/// Headers rein sets on every tool call ([`crate::header`]); an adapter may
/// not set them itself, or it could forge the deadline or the correlation
/// ids. Compared without case, as HTTP does. The tool's idempotency header is reserved as well.
pub const RESERVED_HEADERS: [&str; 6] = [
    DEADLINE_HEADER,
    TRACEPARENT_HEADER,
    RUN_ID_HEADER,
    INTENT_ID_HEADER,
    ATTEMPT_HEADER,
    ATTEMPT_ID_HEADER,
];

/// The share of the caller's remaining budget an agent tool's child run
/// gets when its adapter names no `budget_ratio`: half, so the caller keeps
/// enough to use the answer.
pub const DEFAULT_AGENT_BUDGET_RATIO: f64 = 0.5;

/// The latency profile assumed for an agent tool that declares none, as
/// (p50, p95, p99): a child run is several model turns and tool calls, so
/// seconds to a minute. Each quantile is lowered to the adapter's
/// `wall_clock` cap when that is shorter, since the child cannot run longer.
pub const DEFAULT_AGENT_TOOL_LATENCY: (Duration, Duration, Duration) = (
    Duration::from_secs(5),
    Duration::from_secs(20),
    Duration::from_secs(60),
);

/// The share of an agent's wall clock reserved for compensation by default.
pub const DEFAULT_COMPENSATION_RESERVE: f64 = 0.2;

/// The largest share that may be reserved for compensation: the forward
/// path must keep some time.
pub const MAX_COMPENSATION_RESERVE: f64 = 0.9;

// ----- [server] ------------------------------------------------------------
// NOTE: the defaults table on `ServerSpec` (server.rs) and in `mod.rs` list
// these values; change them together.

/// Where `rein serve` listens unless `server.listen` says otherwise: the
/// loopback interface, so a fresh install is not reachable from the network
/// until an operator decides it should be.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 8787));

/// The largest request body accepted by default: 1 MiB, ample for a run
/// submission (a message and a few arguments).
pub const DEFAULT_BODY_LIMIT: usize = 1024 * 1024;

/// The smallest `server.body_limit` accepted: 1 KiB. Below it even a
/// minimal submission would be refused.
pub const MIN_BODY_LIMIT: usize = 1024;

/// The largest `server.body_limit` accepted: 64 MiB. Idempotent submissions
/// are buffered whole, so the limit bounds memory per request.
pub const MAX_BODY_LIMIT: usize = 64 * 1024 * 1024;

/// The longest `Idempotency-Key` accepted by default, in bytes (seed 004).
pub const DEFAULT_MAX_KEY_LENGTH: usize = 255;

/// The largest `server.idempotency.max_key_length` accepted: keys are
/// stored and indexed, so they stay short.
pub const MAX_KEY_LENGTH: usize = 1024;

/// How long a completed idempotent submission is remembered for replay by
/// default: one day, longer than any sane client retry loop (seed 004).
pub const DEFAULT_IDEMPOTENCY_RETENTION: Duration = Duration::from_secs(24 * 3600);

/// The shortest `server.idempotency.retention` accepted: a record's expiry
/// is stored in milliseconds, and a shorter retention would expire it at
/// the instant it is written (the store refuses that record, and the
/// submission failed with a 500).
pub const MIN_IDEMPOTENCY_RETENTION: Duration = Duration::from_millis(1);

/// How long a worker owns a queued run by default before another worker
/// may take it over (seed 004).
pub const DEFAULT_QUEUE_LEASE: Duration = Duration::from_secs(60);

/// The shortest `server.queue.lease` accepted: the lease is renewed at a
/// third of its length, and renewals under a second apart would be mostly
/// store traffic and scheduling noise.
pub const MIN_QUEUE_LEASE: Duration = Duration::from_secs(3);

/// Deliveries of one queued run by default before it is dead-lettered.
pub const DEFAULT_QUEUE_MAX_ATTEMPTS: u32 = 3;

/// Runs a server executes at once by default.
pub const DEFAULT_QUEUE_WORKERS: u32 = 2;

/// The most `server.queue.workers` accepted; each worker holds a run's
/// model and tool calls in flight, so more belongs on another process.
pub const MAX_QUEUE_WORKERS: u32 = 64;

/// How often a live run records a heartbeat by default (seed 004).
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);

/// Heartbeat silence after which a `running` run is orphaned by default:
/// ten missed heartbeats, above a database pause or a deployment handoff
/// (seed 004).
pub const DEFAULT_ORPHAN_THRESHOLD: Duration = Duration::from_secs(5 * 60);

/// How often the orphan scan runs by default (seed 004).
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(60);

/// Runs one orphan scan closes at most by default, so a scan after a long
/// outage is a bounded pass, not one huge transaction (seed 004).
pub const DEFAULT_MAX_RUNS_PER_SCAN: u32 = 100;

/// The deepest child run below a root by default; the root is depth 0
/// (seed 004).
pub const DEFAULT_AGENT_GRAPH_MAX_DEPTH: u32 = 3;

/// Tokens a root run and all its children may use together by default
/// (seed 004).
pub const DEFAULT_AGENT_GRAPH_MAX_TOTAL_TOKENS: u64 = 200_000;

/// Child runs a root run's tree may start by default (seed 004).
pub const DEFAULT_AGENT_GRAPH_MAX_TOTAL_RUNS: u32 = 25;

/// Model retries one run may make by default.
pub const DEFAULT_MAX_MODEL_RETRIES: u32 = 8;

/// Time one run may spend waiting to retry model calls, by default.
pub const DEFAULT_MAX_MODEL_RETRY_WAIT: Duration = Duration::from_secs(60);

// ----- [server] exposure: allowed_hosts, cors, metrics ----------------------
// NOTE: the defaults table on `ServerSpec` (server.rs) lists these values.

/// The methods a `[server.cors]` origin may use unless `allowed_methods`
/// says otherwise: every method the API has.
pub const DEFAULT_CORS_ALLOWED_METHODS: [&str; 2] = ["GET", "POST"];

/// The request headers a `[server.cors]` origin may send unless
/// `allowed_headers` says otherwise: the ones the API reads.
///
/// NOTE: one entry per request header `rein-server` reads (its constants
/// `IDEMPOTENCY_KEY`, `REQUEST_ID`, `LAST_EVENT_ID`, rein-core's
/// `DEADLINE_HEADER`, `TRACEPARENT_HEADER`); a test in `rein-server`'s
/// `exposure` fails when one is missing.
pub const DEFAULT_CORS_ALLOWED_HEADERS: [&str; 7] = [
    "authorization",
    "content-type",
    "idempotency-key",
    "last-event-id",
    "rein-deadline-ms",
    "request-id",
    "traceparent",
];
// ----- server connection limits and drain (`[server.limits]`,
// `server.shutdown_grace`) ---------------------------------------------------

/// How long a client has by default to send a complete request head once
/// its connection is open (or once it sent the first byte of a further
/// request on a kept-alive connection): long enough for any real client on
/// a slow link, short enough that half-sent heads cannot pile up.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest pause by default while a request body is being received
/// (from the head to the first piece, and between pieces).
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a kept-alive connection may wait for its next request by
/// default, and how long a response may wait for a client that stopped
/// reading it.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The shortest `server.limits.*_timeout` accepted: below it a loaded
/// machine's scheduling noise would cut honest clients.
pub const MIN_CONNECTION_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest `server.limits.*_timeout` accepted: a timeout of hours
/// protects nothing.
pub const MAX_CONNECTION_TIMEOUT: Duration = Duration::from_secs(3600);

/// Connections served at once by default; beyond it new connections are
/// refused at once (a file-descriptor budget well under common limits).
pub const DEFAULT_MAX_CONNECTIONS: u32 = 1024;

/// The most `server.limits.max_connections` accepted.
pub const MAX_MAX_CONNECTIONS: u32 = 65_536;

/// The whole time `rein serve` takes by default from SIGTERM or SIGINT to
/// its exit: the work in flight gets all but the last 7 s to finish, then
/// what is left is interrupted and handed on (5 s), then connections close
/// (2 s). 25 s fits inside Kubernetes' default 30 s termination grace with
/// 5 s to spare, so its SIGKILL never lands mid-hand-on.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(25);

/// The longest `server.shutdown_grace` accepted.
pub const MAX_SHUTDOWN_GRACE: Duration = Duration::from_secs(3600);

/// The median latency assumed for a model call unless an agent sets
/// `model_latency`; its p95 is 4 × and its p99 10 × this.
pub const DEFAULT_MODEL_LATENCY: Duration = Duration::from_millis(500);

/// The longest `model_latency` accepted.
pub const MAX_MODEL_LATENCY: Duration = Duration::from_secs(600);

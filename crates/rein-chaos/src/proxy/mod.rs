//! A programmable fault-injecting HTTP/1.1 proxy for loopback tests.
//!
//! # Why
//!
//! rein's promises (an idempotent write applies once, a lost response is
//! looked up rather than blindly retried, a stalled stream is cut at its
//! deadline) are about what happens *on the wire* when things break. The
//! [`FaultProxy`] sits on loopback between rein and a tool or model service
//! and breaks exactly the request a scenario names, in the way it names:
//! a reset before or after the upstream applied the call, a truncated body,
//! headers followed by silence, an injected status. Its [`TraceRecord`]s
//! are the ground truth an invariant checker compares rein's ledger with.
//!
//! It is hand-written on a tokio `TcpListener` rather than on a server
//! framework, because those faults need byte-level control of the client's
//! socket.
//!
//! # Protocol
//!
//! One request per connection: every answer carries `Connection: close`.
//! Request bodies must be delimited by `Content-Length` (a chunked request
//! is answered 501, a malformed one 400). Answers with an upstream
//! `Content-Length` are relayed with it; others are re-chunked and each
//! chunk is written as soon as it arrives, so server-sent events stream
//! through. An unreachable upstream is answered 502 with the default error
//! body ([`ClientSaw::BadGateway`]).
//!
//! # Faults
//!
//! [`Rule`]s pair a [`Match`] with an [`Injection`] and a window of
//! matching requests (`skip`, `times`); see [`Rule`] for how they are
//! evaluated. Injected error answers without a body carry
//! [`default_error_body`]:
//! `{"error": {"message": "injected by rein-chaos proxy: HTTP <code>", "type": "chaos_injected"}}`.
//!
//! # Limits
//!
//! | constant | value |
//! | --- | --- |
//! | [`MAX_HEAD_BYTES`] | 64 KiB (431 beyond) |
//! | [`MAX_HEADERS`] | 100 (400 beyond) |
//! | [`MAX_REQUEST_BODY_BYTES`] | 16 MiB (413 beyond) |
//! | [`MAX_BUFFERED_RESPONSE_BYTES`] | 16 MiB |
//! | [`TRACE_BODY_CAP`] | 64 KiB |
//! | [`REQUEST_READ_TIMEOUT`] | 30 s |
//! | [`UPSTREAM_CONNECT_TIMEOUT`] | 10 s |
//! | [`CLOSE_DRAIN_TIMEOUT`] | 1 s |
//!
//! # Example
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use rein_chaos::proxy::{FaultProxy, Injection, Match, Rule};
//!
//! let proxy = FaultProxy::start("http://127.0.0.1:4321").await?;
//! // The second attempt of every update is applied, but its answer is lost.
//! proxy.add_rule(
//!     Rule::new(Match::tool("update_delivery_time").attempt(2), Injection::ResetAfterForward)
//!         .always(),
//! );
//! let tool_url = proxy.url("/tools/update_delivery_time");
//! # let _ = tool_url;
//! # Ok(())
//! # }
//! ```

mod conn;
mod constants;
mod error;
mod rule;
mod trace;
mod wire;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, warn};

pub use constants::{
    ATTEMPT_HEADER, CLOSE_DRAIN_TIMEOUT, IDEMPOTENCY_KEY_HEADER, INTENT_ID_HEADER,
    MAX_BUFFERED_RESPONSE_BYTES, MAX_HEAD_BYTES, MAX_HEADERS, MAX_REQUEST_BODY_BYTES,
    REQUEST_READ_TIMEOUT, RUN_ID_HEADER, TRACE_BODY_CAP, UPSTREAM_CONNECT_TIMEOUT,
};
pub use error::ProxyError;
pub use rule::{Injection, Match, Rule};
pub use trace::{ClientSaw, TraceRecord};
pub use wire::default_error_body;

use rule::{RequestFacts, RuleBook};
use trace::InFlight;

/// A running fault proxy on `127.0.0.1`, forwarding to one upstream.
///
/// # Why
///
/// Point rein's tool (or model) base URL at [`base_url`](Self::base_url)
/// instead of the service, program faults with [`add_rule`](Self::add_rule),
/// run the scenario, then read what really happened with
/// [`trace`](Self::trace). See the [module docs](self) for the protocol.
///
/// Dropping it stops accepting and aborts the connections in progress.
pub struct FaultProxy {
    base_url: String,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl fmt::Debug for FaultProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultProxy")
            .field("base_url", &self.base_url)
            .field("upstream", &self.shared.upstream)
            .finish_non_exhaustive()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port, forwarding to `upstream`
    /// (a base URL such as `http://127.0.0.1:4321`, to which each request
    /// target is appended).
    ///
    /// Must be called within a tokio runtime; the proxy runs as a task of
    /// it.
    ///
    /// # Errors
    ///
    /// [`ProxyError::InvalidUpstream`] when `upstream` is not an absolute
    /// `http`/`https` URL without query or fragment;
    /// [`ProxyError::Bind`] or [`ProxyError::LocalAddr`] when no loopback
    /// port can be had; [`ProxyError::Client`] when the HTTP client cannot
    /// be built.
    pub async fn start(upstream: &str) -> Result<FaultProxy, ProxyError> {
        let upstream = validate_upstream(upstream)?;
        let client = reqwest::Client::builder()
            // Loopback only: a proxy from the environment would reroute it.
            .no_proxy()
            .tcp_nodelay(true)
            // Redirects and encodings are the client's business: relay them
            // as they are.
            .redirect(reqwest::redirect::Policy::none())
            .no_gzip()
            .no_brotli()
            .no_deflate()
            .no_zstd()
            // A fresh upstream connection per request, like the client side:
            // a pooled connection the upstream closed meanwhile would turn
            // into a spurious 502.
            .pool_max_idle_per_host(0)
            .connect_timeout(UPSTREAM_CONNECT_TIMEOUT)
            .build()
            .map_err(ProxyError::Client)?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .map_err(ProxyError::Bind)?;
        let addr = listener.local_addr().map_err(ProxyError::LocalAddr)?;
        let shared = Arc::new(Shared {
            upstream,
            client,
            rules: Mutex::new(RuleBook::default()),
            trace: Mutex::new(Vec::new()),
            next_seq: AtomicU64::new(0),
            in_flight: Arc::new(InFlight::default()),
        });
        let task = tokio::spawn(accept_loop(listener, Arc::clone(&shared)));
        debug!(%addr, upstream = %shared.upstream, "fault proxy started");
        Ok(FaultProxy {
            base_url: format!("http://{addr}"),
            shared,
            task,
        })
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The proxy URL of `path` (which starts with `/`).
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base_url)
    }

    /// Appends a rule, with a fresh count of matching requests.
    pub fn add_rule(&self, rule: Rule) {
        self.shared.rules().add(rule);
    }

    /// Replaces every rule; counts start afresh.
    pub fn set_rules(&self, rules: Vec<Rule>) {
        self.shared.rules().set(rules);
    }

    /// Removes every rule: requests pass untouched.
    pub fn clear_rules(&self) {
        self.shared.rules().set(Vec::new());
    }

    /// The records of the requests done so far, in the order they were
    /// done (`seq` is the order they arrived).
    pub fn trace(&self) -> Vec<TraceRecord> {
        self.shared.trace_lock().clone()
    }

    /// The most requests ever in flight at once.
    pub fn peak_in_flight(&self) -> usize {
        self.shared.in_flight.peak()
    }

    /// The most tool calls ever in flight at once, status lookups
    /// (`/tools/{name}/status`) excluded: what a resource group's ceiling
    /// bounds when every tool behind the proxy is in that group.
    pub fn peak_calls_in_flight(&self) -> usize {
        self.shared.in_flight.peak_calls()
    }

    /// Waits until no request is in flight, at most `limit`; whether it got
    /// there. A scenario's evidence is read only once the wire is quiet, so
    /// a late-delivered request is in it.
    pub async fn wait_idle(&self, limit: std::time::Duration) -> bool {
        let give_up = tokio::time::Instant::now() + limit;
        loop {
            if self.shared.in_flight.now() == 0 {
                return true;
            }
            if tokio::time::Instant::now() >= give_up {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    /// The most calls of `tool` (as [`tool_of`] names it) ever in flight at
    /// once.
    pub fn peak_in_flight_of(&self, tool: &str) -> usize {
        self.shared.in_flight.peak_of(tool)
    }
}

/// The tool a request target calls: `/tools/{name}` is `name`,
/// `/tools/{name}/status…` is `name/status`, anything else none.
///
/// # Why
///
/// Rules and peaks are per tool, and rein's HTTP tool adapter calls a tool
/// at `/tools/{name}` and looks up a lost result at `/tools/{name}/status`;
/// the order desk names its status faults the same way.
///
/// ```
/// use rein_chaos::proxy::tool_of;
/// assert_eq!(tool_of("/tools/get_order").as_deref(), Some("get_order"));
/// assert_eq!(tool_of("/tools/send_email/status?key=k").as_deref(), Some("send_email/status"));
/// assert_eq!(tool_of("/health"), None);
/// ```
pub fn tool_of(target: &str) -> Option<String> {
    let path = target.split(['?', '#']).next().unwrap_or_default();
    let rest = path.strip_prefix("/tools/")?;
    let mut segments = rest.split('/');
    let name = segments.next().filter(|n| !n.is_empty())?;
    match segments.next() {
        None => Some(name.to_owned()),
        Some("status") => Some(format!("{name}/status")),
        Some(_) => None,
    }
}

/// State shared by the accept loop, the connections and the handle.
pub(crate) struct Shared {
    /// The upstream base URL, without a trailing slash.
    upstream: String,
    client: reqwest::Client,
    rules: Mutex<RuleBook>,
    trace: Mutex<Vec<TraceRecord>>,
    next_seq: AtomicU64,
    in_flight: Arc<InFlight>,
}

impl Shared {
    // A panic while holding one of these locks leaves consistent data (each
    // critical section is a single push or count), so poisoning is ignored.
    fn rules(&self) -> std::sync::MutexGuard<'_, RuleBook> {
        self.rules.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn trace_lock(&self) -> std::sync::MutexGuard<'_, Vec<TraceRecord>> {
        self.trace.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn next_seq(&self) -> u64 {
        self.next_seq.fetch_add(1, Ordering::Relaxed)
    }

    fn select(&self, facts: &RequestFacts<'_>) -> Option<Injection> {
        self.rules().select(facts)
    }

    fn push_trace(&self, record: TraceRecord) {
        self.trace_lock().push(record);
    }

    fn amend_trace(&self, seq: u64, saw: ClientSaw) {
        if let Some(record) = self.trace_lock().iter_mut().rev().find(|r| r.seq == seq) {
            record.client_saw = saw;
        }
    }
}

/// Accepts connections until aborted; aborting drops the `JoinSet`, which
/// aborts the connections in progress.
async fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    connections.spawn(conn::serve(Arc::clone(&shared), stream));
                }
                Err(err) => {
                    // Typically out of file descriptors: back off rather than
                    // spin.
                    warn!(%err, "fault proxy cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            },
            Some(joined) = connections.join_next(), if !connections.is_empty() => {
                if let Err(err) = joined {
                    if err.is_panic() {
                        warn!(%err, "a fault proxy connection task panicked");
                    }
                }
            }
        }
    }
}

/// The upstream base URL without its trailing slash, once checked.
fn validate_upstream(upstream: &str) -> Result<String, ProxyError> {
    let invalid = |reason: &str| ProxyError::InvalidUpstream {
        url: upstream.to_owned(),
        reason: reason.to_owned(),
    };
    let url = reqwest::Url::parse(upstream).map_err(|err| invalid(&err.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(&format!(
            "the scheme must be http or https, not {:?}",
            url.scheme()
        )));
    }
    if url.host().is_none() {
        return Err(invalid("it has no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(invalid("it must not have a query or fragment"));
    }
    Ok(upstream.trim_end_matches('/').to_owned())
}

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_of_names_tools_and_status_lookups_only() {
        assert_eq!(tool_of("/tools/a").as_deref(), Some("a"));
        assert_eq!(tool_of("/tools/a?x=1").as_deref(), Some("a"));
        assert_eq!(tool_of("/tools/a/status").as_deref(), Some("a/status"));
        assert_eq!(
            tool_of("/tools/a/status/more?key=k").as_deref(),
            Some("a/status")
        );
        assert_eq!(tool_of("/tools/a/other"), None);
        assert_eq!(tool_of("/tools/"), None);
        assert_eq!(tool_of("/tools"), None);
        assert_eq!(tool_of("/_log"), None);
    }

    #[test]
    fn validate_upstream_accepts_http_and_trims_slash() {
        assert_eq!(
            validate_upstream("http://127.0.0.1:1/").unwrap(),
            "http://127.0.0.1:1"
        );
        assert_eq!(
            validate_upstream("http://127.0.0.1:1/api").unwrap(),
            "http://127.0.0.1:1/api"
        );
        for bad in ["127.0.0.1:1", "ftp://h/", "http://h/?q=1", "not a url"] {
            assert!(
                matches!(
                    validate_upstream(bad),
                    Err(ProxyError::InvalidUpstream { .. })
                ),
                "{bad}"
            );
        }
    }
}

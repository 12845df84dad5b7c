//! Connections: `rein serve`'s accept loop, the connection limit, and the
//! deadlines that cut off slow and idle clients.
//!
//! # Why an accept loop of our own
//!
//! `axum::serve` has no knobs: a client that opens a connection and sends
//! half a request head (or nothing, or half a body) holds a descriptor and
//! a task for as long as it likes, and enough of them starve the process
//! of descriptors until `/healthz` stops answering. Here every phase in
//! which the *client* is expected to act has a deadline, and connections
//! beyond `server.limits.max_connections` are refused at once:
//!
//! ```text
//!            accept ──(over the limit)──> 503, closed, counted, logged (rate-limited)
//!              │                           (what the client sent is read for up to
//!              │                            REFUSAL_LINGER so the 503 is not reset away)
//!              │
//!              v
//!   ┌──> Head (header_timeout from accept, or from the first byte of a
//!   │      │    further request)
//!   │      v
//!   │    Busy: the request is served. No deadline: a sync run is bounded
//!   │      │   by its own deadline and an event stream lasts as long as its
//!   │      │   run. Its body: body_timeout per pause (`RequestBodyTimeout`).
//!   │      v
//!   └── Idle (idle_timeout until the next request's first byte)
//!
//!   In any phase, a write the client does not read for idle_timeout cuts
//!   the connection: a response is never held for a client that left.
//! ```
//!
//! Every accepted socket gets `TCP_NODELAY`: Nagle plus delayed ACK would
//! stall every streamed event by ~40 ms.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use rein_core::registry::ConnectionLimits;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::http::state::AppState;

/// How often at most refused connections are logged: one line, then one
/// per interval with the count since, never one per connection in a flood.
pub const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// The pause after `accept` fails for lack of descriptors or memory, so a
/// process at its limit does not spin on the error.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(50);

/// How long a refused connection is read (and what it sends thrown away)
/// after its 503 and the end of the server's side: closing a socket with
/// unread bytes resets it, and a reset can destroy the 503 before the
/// client reads it.
pub const REFUSAL_LINGER: Duration = Duration::from_millis(250);

/// How many refused connections linger at once; beyond, a refused socket
/// is closed at once (its 503 may then be lost to a reset). Each holds a
/// descriptor for at most [`REFUSAL_LINGER`].
pub const MAX_LINGERING_REFUSALS: usize = 1024;

/// What a refused connection is told, if it listens: written without
/// waiting (`try_write`); then the server's side is shut down and the
/// connection lingers ([`REFUSAL_LINGER`]) before it is closed.
const REFUSAL: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/problem+json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: 203\r\n\r\n{\"type\":\"https://rein.dev/problems/too-many-connections\",\"title\":\"Too many connections\",\"status\":503,\"detail\":\"every connection this server admits (server.limits.max_connections) is open; retry shortly\"}";

/// Why the server closed a connection itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// The request head did not arrive within `header_timeout`.
    HeaderTimeout,
    /// A kept-alive connection sent no new request within `idle_timeout`.
    IdleTimeout,
    /// The client did not read what it was sent for `idle_timeout`.
    WriteTimeout,
}

impl Cut {
    /// Its name in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Cut::HeaderTimeout => "header_timeout",
            Cut::IdleTimeout => "idle_timeout",
            Cut::WriteTimeout => "write_timeout",
        }
    }
}

/// The counters of this process's connections, for `/metrics`.
#[derive(Debug, Default)]
pub struct Connections {
    open: AtomicU64,
    accepted: AtomicU64,
    refused: AtomicU64,
    cut_header: AtomicU64,
    cut_idle: AtomicU64,
    cut_write: AtomicU64,
    body_timeouts: AtomicU64,
    refusals: Mutex<RefusalLog>,
}

/// When refusals were last logged, and how many since.
#[derive(Debug, Default)]
struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    /// Counts one refusal at `now`; the number to log when a line is due.
    fn on_refusal(&mut self, now: Instant, every: Duration) -> Option<u64> {
        self.unlogged += 1;
        self.due(now, every)
    }

    /// The refusals not logged yet, when a line is due at `now` (one
    /// interval after the last): a flood that stopped is still told.
    fn on_tick(&mut self, now: Instant, every: Duration) -> Option<u64> {
        if self.unlogged == 0 {
            return None;
        }
        self.due(now, every)
    }

    /// The refusals not logged yet, whenever (at shutdown).
    fn flush(&mut self) -> Option<u64> {
        (self.unlogged > 0).then(|| std::mem::take(&mut self.unlogged))
    }

    fn due(&mut self, now: Instant, every: Duration) -> Option<u64> {
        let due = self
            .last
            .is_none_or(|last| now.duration_since(last) >= every);
        if !due {
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }
}

impl Connections {
    /// Connections open now.
    pub fn open(&self) -> u64 {
        self.open.load(Ordering::Acquire)
    }

    /// Connections refused over the limit so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Acquire)
    }

    /// Connections the server closed itself for `cut` so far.
    pub fn cut(&self, cut: Cut) -> u64 {
        self.counter(cut).load(Ordering::Acquire)
    }

    fn counter(&self, cut: Cut) -> &AtomicU64 {
        match cut {
            Cut::HeaderTimeout => &self.cut_header,
            Cut::IdleTimeout => &self.cut_idle,
            Cut::WriteTimeout => &self.cut_write,
        }
    }

    /// Counts a request whose body stopped arriving (`body_timeout`).
    pub fn on_body_timeout(&self) {
        self.body_timeouts.fetch_add(1, Ordering::AcqRel);
    }

    fn on_refusal(&self, limit: u32) {
        self.refused.fetch_add(1, Ordering::AcqRel);
        let due = self
            .refusals()
            .on_refusal(Instant::now(), REFUSAL_LOG_EVERY);
        if let Some(count) = due {
            self.log_refusals(count, limit);
        }
    }

    fn refusals(&self) -> std::sync::MutexGuard<'_, RefusalLog> {
        self.refusals.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn log_refusals(&self, count: u64, limit: u32) {
        tracing::warn!(
            refused = count,
            total = self.refused(),
            max_connections = limit,
            "connections refused: {limit} open already (server.limits.max_connections)"
        );
    }

    /// Logs the refusals not logged yet, if any (at shutdown).
    pub fn flush_refusals(&self, limit: u32) {
        let unlogged = self.refusals().flush();
        if let Some(count) = unlogged {
            self.log_refusals(count, limit);
        }
    }
}

/// Accepts connections on `listener` and serves `app` on each, within
/// `state.settings.limits`, until `stop` resolves. Every connection is
/// watched by `graceful`, so a drain can close them in order.
pub(crate) async fn accept(
    state: &Arc<AppState>,
    listener: &TcpListener,
    app: &Router,
    graceful: &GracefulShutdown,
    stop: impl Future<Output = ()>,
) {
    let limits = state.settings.limits;
    let slots = Arc::new(Semaphore::new(
        usize::try_from(limits.max_connections.get()).unwrap_or(usize::MAX),
    ));
    let mut failures = RefusalLog::default();
    let lingering = Arc::new(Semaphore::new(MAX_LINGERING_REFUSALS));
    // Refusals of a flood that stopped within an interval are logged on
    // the next tick, not only with the next refusal.
    let mut tick = tokio::time::interval(REFUSAL_LOG_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => return,
            accepted = listener.accept() => accepted,
            _ = tick.tick() => {
                let unlogged = state
                    .connections
                    .refusals()
                    .on_tick(Instant::now(), REFUSAL_LOG_EVERY);
                if let Some(count) = unlogged {
                    state
                        .connections
                        .log_refusals(count, limits.max_connections.get());
                }
                continue;
            }
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of descriptors (EMFILE) or memory: say so, rate-
                // limited, and give the open connections time to end.
                if let Some(count) = failures.on_refusal(Instant::now(), REFUSAL_LOG_EVERY) {
                    tracing::error!(failures = count, "cannot accept connections: {e}");
                }
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::warn!("cannot set TCP_NODELAY: {e}");
        }
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            refuse(tcp, &lingering);
            state.connections.on_refusal(limits.max_connections.get());
            continue;
        };
        state.connections.accepted.fetch_add(1, Ordering::AcqRel);
        let watched = graceful.watcher();
        let (state, app) = (state.clone(), app.clone());
        tokio::spawn(async move {
            serve_connection(&state, (tcp, peer), app, limits, slot, watched).await;
        });
    }
}

/// Answers a connection over the limit with [`REFUSAL`], without waiting
/// for it: then, while fewer than [`MAX_LINGERING_REFUSALS`] do, it
/// lingers in a task of its own — the server's side shut down (the client
/// reads the 503, then the end), what the client sends read and dropped
/// for at most [`REFUSAL_LINGER`] — and is closed.
fn refuse(tcp: TcpStream, lingering: &Arc<Semaphore>) {
    let _ = tcp.try_write(REFUSAL);
    let Ok(permit) = lingering.clone().try_acquire_owned() else {
        return;
    };
    tokio::spawn(async move {
        let _permit = permit;
        let mut tcp = tcp;
        let _ = tokio::time::timeout(REFUSAL_LINGER, async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let _ = tcp.shutdown().await;
            let mut sink = [0u8; 1024];
            while let Ok(n) = tcp.read(&mut sink).await {
                if n == 0 {
                    break;
                }
            }
        })
        .await;
    });
}

/// Errors of one connection that never became one (the peer gave up
/// between SYN and accept): nothing to pause for.
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Keeps the open-connections gauge right however a connection ends.
struct OpenGuard<'a>(&'a Connections);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Serves one connection until it ends or a deadline cuts it. Each request
/// carries the peer's address as axum's `ConnectInfo` (for the access line
/// and failed logins).
async fn serve_connection(
    state: &AppState,
    (tcp, peer): (TcpStream, std::net::SocketAddr),
    app: Router,
    limits: ConnectionLimits,
    _slot: OwnedSemaphorePermit,
    graceful: hyper_util::server::graceful::Watcher,
) {
    state.connections.open.fetch_add(1, Ordering::AcqRel);
    let _open = OpenGuard(&state.connections);
    let activity = Arc::new(Activity::new(Instant::now()));
    let io = TokioIo::new(Watched {
        inner: tcp,
        activity: activity.clone(),
    });
    let app = TowerToHyperService::new(app);
    let on_request = activity.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<_>| {
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(peer));
        on_request.busy();
        let done = IdleOnDrop(on_request.clone());
        let response = hyper::service::Service::call(&app, request);
        async move {
            let response = response.await?;
            Ok::<_, Infallible>(
                response.map(|body| axum::body::Body::new(Tracked { body, _done: done })),
            )
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    // The head deadline is ours (`Activity`): hyper's starts when the
    // connection is ready for a request, so it would also cut kept-alive
    // connections at the header timeout instead of the idle timeout.
    http.timer(TokioTimer::new())
        .header_read_timeout(None)
        .keep_alive(true);
    let connection = graceful.watch(http.serve_connection(io, service));
    tokio::select! {
        served = connection => {
            if let Err(e) = served {
                tracing::debug!("connection ended: {e}");
            }
        }
        cut = activity.expired(limits) => {
            state.connections.counter(cut).fetch_add(1, Ordering::AcqRel);
            tracing::debug!(reason = cut.as_str(), "connection closed");
        }
    }
}

/// Where a connection is in its life, as its deadlines see it.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// Waiting for a complete request head since `since`.
    Head { since: Instant },
    /// A request is being served.
    Busy,
    /// Kept alive after a response, since `since`.
    Idle { since: Instant },
}

/// A connection's phase and whether a write is stuck, shared by its IO,
/// its service and its watchdog.
#[derive(Debug)]
struct Activity {
    state: Mutex<ActivityState>,
    changed: Notify,
}

#[derive(Debug, Clone, Copy)]
struct ActivityState {
    phase: Phase,
    /// Since when a write has been waiting for the client to read.
    write_blocked_since: Option<Instant>,
}

impl ActivityState {
    /// The next deadline, and what it cuts. While a write waits for the
    /// client to read, that is the only deadline, in any phase: the
    /// connection is neither idle nor waiting for a head then, but for a
    /// client that stopped reading (hyper may still be flushing the last
    /// answer when the service already counts it done).
    fn deadline(self, limits: ConnectionLimits) -> Option<(Instant, Cut)> {
        if let Some(since) = self.write_blocked_since {
            return Some((since + limits.idle_timeout, Cut::WriteTimeout));
        }
        match self.phase {
            Phase::Head { since } => Some((since + limits.header_timeout, Cut::HeaderTimeout)),
            Phase::Busy => None,
            Phase::Idle { since } => Some((since + limits.idle_timeout, Cut::IdleTimeout)),
        }
    }
}

impl Activity {
    fn new(now: Instant) -> Activity {
        Activity {
            state: Mutex::new(ActivityState {
                phase: Phase::Head { since: now },
                write_blocked_since: None,
            }),
            changed: Notify::new(),
        }
    }

    fn update(&self, change: impl FnOnce(&mut ActivityState) -> bool) {
        let changed = change(&mut self.state.lock().unwrap_or_else(PoisonError::into_inner));
        if changed {
            self.changed.notify_one();
        }
    }

    /// Bytes arrived: the first of a further request starts its head
    /// deadline.
    fn on_read(&self) {
        self.update(|s| match s.phase {
            Phase::Idle { .. } => {
                s.phase = Phase::Head {
                    since: Instant::now(),
                };
                true
            }
            _ => false,
        });
    }

    fn on_write(&self, blocked: bool) {
        self.update(|s| match (blocked, s.write_blocked_since) {
            (true, None) => {
                s.write_blocked_since = Some(Instant::now());
                true
            }
            (false, Some(_)) => {
                s.write_blocked_since = None;
                false
            }
            _ => false,
        });
    }

    fn busy(&self) {
        self.update(|s| {
            s.phase = Phase::Busy;
            true
        });
    }

    fn idle(&self) {
        self.update(|s| {
            s.phase = Phase::Idle {
                since: Instant::now(),
            };
            true
        });
    }

    /// Resolves when a deadline of `limits` passed, with what it cuts.
    async fn expired(&self, limits: ConnectionLimits) -> Cut {
        loop {
            let changed = self.changed.notified();
            let state = *self.state.lock().unwrap_or_else(PoisonError::into_inner);
            match state.deadline(limits) {
                Some((at, cut)) if at <= Instant::now() => return cut,
                Some((at, _)) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = changed => {}
                    }
                }
                None => changed.await,
            }
        }
    }
}

/// Marks the connection idle when the response body is done with (sent,
/// or dropped with the connection).
struct IdleOnDrop(Arc<Activity>);

impl Drop for IdleOnDrop {
    fn drop(&mut self) {
        self.0.idle();
    }
}

/// A response body that marks its connection idle once it is done.
struct Tracked {
    body: axum::body::Body,
    _done: IdleOnDrop,
}

impl http_body::Body for Tracked {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A socket whose reads and stuck writes its connection's deadlines see.
struct Watched {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.on_read();
        }
        polled
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.activity.on_write(polled.is_pending());
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.activity.on_write(polled.is_pending());
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// The reason label of `rein_connections_closed_total`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct CutLabel {
    reason: &'static str,
}

impl prometheus_client::collector::Collector for Connections {
    /// The counters, read at each scrape.
    fn encode(
        &self,
        mut encoder: prometheus_client::encoding::DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use crate::http::request_metrics::{counter, encode_one, gauge};
        use prometheus_client::encoding::EncodeMetric;
        let get = |c: &AtomicU64| c.load(Ordering::Acquire);
        encode_one(
            &mut encoder,
            "rein_connections_open",
            "HTTP connections open now",
            &gauge(get(&self.open)),
        )?;
        encode_one(
            &mut encoder,
            "rein_connections_accepted",
            "HTTP connections accepted and served",
            &counter(get(&self.accepted)),
        )?;
        encode_one(
            &mut encoder,
            "rein_connections_refused",
            "HTTP connections refused at once because server.limits.max_connections were open",
            &counter(get(&self.refused)),
        )?;
        let mut family = encoder.encode_descriptor(
            "rein_connections_closed",
            "HTTP connections the server closed for a client's slowness, by reason",
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (reason, value) in [
            (Cut::HeaderTimeout, get(&self.cut_header)),
            (Cut::IdleTimeout, get(&self.cut_idle)),
            (Cut::WriteTimeout, get(&self.cut_write)),
        ] {
            let labels = CutLabel {
                reason: reason.as_str(),
            };
            counter(value).encode(family.encode_family(&labels)?)?;
        }
        encode_one(
            &mut encoder,
            "rein_request_body_timeouts",
            "Requests answered 408 because their body stopped arriving for server.limits.body_timeout",
            &counter(get(&self.body_timeouts)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> ConnectionLimits {
        let mut limits = ConnectionLimits::default();
        limits.header_timeout = Duration::from_secs(1);
        limits.idle_timeout = Duration::from_secs(5);
        limits
    }

    #[test]
    fn the_refusal_is_a_whole_problem_response() {
        let text = std::str::from_utf8(REFUSAL).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let problem: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(problem["status"], 503);
    }

    #[test]
    fn refusals_are_logged_once_per_interval_with_the_count_since() {
        let mut log = RefusalLog::default();
        let start = Instant::now();
        let every = Duration::from_secs(10);
        assert_eq!(log.on_refusal(start, every), Some(1));
        for i in 1..300 {
            assert_eq!(
                log.on_refusal(start + Duration::from_millis(i), every),
                None
            );
        }
        assert_eq!(log.on_refusal(start + every, every), Some(300));
    }

    #[test]
    fn a_flood_that_stops_is_logged_on_the_next_tick_and_at_shutdown() {
        let mut log = RefusalLog::default();
        let start = Instant::now();
        let every = Duration::from_secs(10);
        assert_eq!(log.on_refusal(start, every), Some(1));
        for i in 1..=5 {
            assert_eq!(log.on_refusal(start + Duration::from_secs(i), every), None);
        }
        assert_eq!(log.on_tick(start + Duration::from_secs(9), every), None);
        assert_eq!(
            log.on_tick(start + every, every),
            Some(5),
            "the rest of the flood"
        );
        assert_eq!(log.on_tick(start + every * 3, every), None, "nothing new");
        assert_eq!(log.on_refusal(start + every * 3, every), Some(1));
        assert_eq!(log.on_refusal(start + every * 3, every), None);
        assert_eq!(log.flush(), Some(1), "at shutdown");
        assert_eq!(log.flush(), None);
    }

    #[test]
    fn the_counters_render_as_prometheus_families() {
        let connections = std::sync::Arc::new(Connections::default());
        connections.cut_write.fetch_add(2, Ordering::AcqRel);
        let metrics = rein_engine::metrics::Metrics::default();
        metrics.register_collector(Box::new(connections.clone()));
        let text = metrics.render();
        assert!(
            text.contains("# TYPE rein_connections_open gauge\nrein_connections_open 0\n"),
            "{text}"
        );
        assert!(
            text.contains("# TYPE rein_connections_refused_total counter\n"),
            "{text}"
        );
        assert!(
            text.contains("rein_connections_closed_total{reason=\"write_timeout\"} 2\n"),
            "{text}"
        );
    }

    #[test]
    fn a_fresh_connection_has_the_header_deadline_and_a_busy_one_none() {
        let now = Instant::now();
        let mut state = ActivityState {
            phase: Phase::Head { since: now },
            write_blocked_since: None,
        };
        assert_eq!(
            state.deadline(limits()),
            Some((now + Duration::from_secs(1), Cut::HeaderTimeout))
        );
        state.phase = Phase::Busy;
        assert_eq!(state.deadline(limits()), None, "a response is never cut");
        state.phase = Phase::Idle { since: now };
        assert_eq!(
            state.deadline(limits()),
            Some((now + Duration::from_secs(5), Cut::IdleTimeout))
        );
    }

    #[test]
    fn a_stuck_write_is_cut_after_the_idle_timeout_even_while_busy() {
        let now = Instant::now();
        let mut state = ActivityState {
            phase: Phase::Busy,
            write_blocked_since: Some(now),
        };
        assert_eq!(
            state.deadline(limits()),
            Some((now + Duration::from_secs(5), Cut::WriteTimeout))
        );
        // The last answer still being flushed after the service is done
        // with it: a client that does not read, not an idle one.
        state.phase = Phase::Idle {
            since: now - Duration::from_secs(1),
        };
        assert_eq!(
            state.deadline(limits()),
            Some((now + Duration::from_secs(5), Cut::WriteTimeout))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_byte_of_a_further_request_starts_its_header_deadline() {
        let activity = Activity::new(Instant::now());
        activity.busy();
        activity.idle();
        tokio::time::advance(Duration::from_secs(3)).await;
        activity.on_read();
        let started = Instant::now();
        let cut = activity.expired(limits()).await;
        assert_eq!(cut, Cut::HeaderTimeout);
        assert_eq!(Instant::now() - started, Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_connection_waits_for_ever_until_it_is_idle_again() {
        let activity = Arc::new(Activity::new(Instant::now()));
        activity.busy();
        let watchdog = tokio::spawn({
            let activity = activity.clone();
            async move { activity.expired(limits()).await }
        });
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(!watchdog.is_finished(), "nothing cuts a response");
        activity.idle();
        let idle_at = Instant::now();
        assert_eq!(watchdog.await.unwrap(), Cut::IdleTimeout);
        assert_eq!(Instant::now() - idle_at, Duration::from_secs(5));
    }
}

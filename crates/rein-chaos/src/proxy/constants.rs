//! Limits and header names of the proxy.

use std::time::Duration;

/// The most request-body bytes kept in a [`TraceRecord`](super::TraceRecord).
pub const TRACE_BODY_CAP: usize = 64 * 1024;

/// The largest request head (request line and headers) accepted; a larger
/// one is answered 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// The most headers a request may carry; more is a malformed request.
pub const MAX_HEADERS: usize = 100;

/// The largest request body accepted; a larger one is answered 413.
pub const MAX_REQUEST_BODY_BYTES: usize = 16 * 1024 * 1024;

/// The largest upstream body read whole, where a fault needs it whole
/// (`TruncateBody`, `ResetAfterForward`, `ExecutedThenStatus`).
pub const MAX_BUFFERED_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// How long a client may take to send its whole request before the proxy
/// drops the connection, so an idle client cannot hold a task forever.
pub const REQUEST_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the proxy waits to connect to the upstream.
pub const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// After its answer, how long the proxy reads (and drops) what the client
/// still sends, waiting for its close, so unread bytes do not turn the
/// close into a reset that could destroy the answer.
pub const CLOSE_DRAIN_TIMEOUT: Duration = Duration::from_secs(1);

// NOTE: these header names must match what rein's HTTP tool adapter sends
// (and the testkit's order desk reads).
/// The header carrying the idempotency key.
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// The header carrying rein's run id.
pub const RUN_ID_HEADER: &str = "rein-run-id";
/// The header carrying the intent id of the call.
pub const INTENT_ID_HEADER: &str = "rein-intent-id";
/// The header carrying the attempt number of the call (1 for the first).
pub const ATTEMPT_HEADER: &str = "rein-attempt";

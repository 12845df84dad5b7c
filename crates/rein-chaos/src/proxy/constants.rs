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

// The header names rein's HTTP tool adapter sends, defined once in
// rein-core (the proxy compares them without case).
pub use rein_core::header::{
    ATTEMPT_HEADER, IDEMPOTENCY_KEY_HEADER, INTENT_ID_HEADER, RUN_ID_HEADER,
};

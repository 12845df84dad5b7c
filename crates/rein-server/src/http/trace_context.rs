//! The caller's `traceparent`, read from a request.
//!
//! # Why an invalid one is ignored, not refused
//!
//! W3C Trace Context asks a receiver that cannot parse `traceparent` to
//! start a new trace rather than fail the request: a tracing header a
//! proxy mangled must not cost the caller its run. So a bad value is
//! logged (its first characters) and the run's trace starts fresh.

use axum::http::HeaderMap;
use rein_core::header::TRACEPARENT_HEADER;
use rein_engine::telemetry::TraceParent;

/// The request's `traceparent`, when it sent a valid one.
pub(crate) fn from_headers(headers: &HeaderMap) -> Option<TraceParent> {
    let value = headers.get(TRACEPARENT_HEADER)?;
    let Ok(text) = value.to_str() else {
        tracing::warn!("ignoring a traceparent header that is not text; the trace starts here");
        return None;
    };
    match TraceParent::parse(text) {
        Ok(parent) => Some(parent),
        Err(e) => {
            tracing::warn!("ignoring it: {e}; the trace starts here");
            None
        }
    }
}

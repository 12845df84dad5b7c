//! The operator's view of each request: a request id, echoed or made, and
//! one access line per request.
//!
//! # Why
//!
//! A client quoting a `Request-Id` lets the operator find the request's
//! line, and that line says what the server did: method, route template
//! (`/v1/runs/{id}`, never the raw path: bounded cardinality, and no client
//! text in the log), status, latency, tenant and peer.
//!
//! | request | `Request-Id` answered | in the access line |
//! | --- | --- | --- |
//! | `Request-Id` of 1..=[`MAX_REQUEST_ID_LENGTH`] visible ASCII characters | the same | the same |
//! | none, empty, too long, or with spaces or control characters | a fresh UUIDv7 | the fresh one |
//!
//! An invalid id is replaced, not refused: it is an aid to finding the
//! request, and the answer's header says which id it got.
//!
//! The line is a `tracing` event (target `rein::access`, level `info`) with
//! the fields `method`, `route` (the template, or [`UNMATCHED`]),
//! `status`, `latency_ms` (until the answer's head; a stream goes on after
//! it), `tenant` (once authenticated), `peer` and `request_id`. The other
//! lines about a request (refusals, failed authentication) name it by the
//! same [`route`], never by its raw path. The same latency, by route
//! template, method and status class, is the
//! `rein_http_request_duration_seconds` histogram
//! ([`crate::http::request_metrics`]).
//!
//! Answers hyper gives by itself, before the router sees a request (a
//! malformed request line, a head over the size limit, a head that took
//! longer than `server.limits.header_timeout`), carry no `Request-Id` and
//! write no access line: there is no request to name.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use axum::extract::{ConnectInfo, MatchedPath, Request};
use axum::http::{Extensions, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use rein_core::TenantId;

/// The request and response header.
///
/// NOTE: `DEFAULT_CORS_ALLOWED_HEADERS` (rein-core) lists it.
pub const REQUEST_ID: &str = "Request-Id";

/// The same id as OpenAI's SDKs read it, on the gateway's answers
/// ([`crate::gateway::dialect`]) beside [`REQUEST_ID`].
pub const X_REQUEST_ID: &str = "x-request-id";

/// The longest `Request-Id` echoed.
pub const MAX_REQUEST_ID_LENGTH: usize = 128;

/// The id of the request being answered.
#[derive(Debug, Clone)]
pub struct RequestId(pub Arc<str>);

/// Where the tenant of a request is recorded once its key is checked, for
/// the access line.
#[derive(Debug, Clone, Default)]
pub struct TenantSlot(Arc<OnceLock<TenantId>>);

impl TenantSlot {
    /// Records the request's tenant (the first one recorded stays).
    pub fn set(&self, tenant: &TenantId) {
        let _ = self.0.set(tenant.clone());
    }
}

/// `value` as a request id, if it is one to echo.
pub fn valid_request_id(value: &HeaderValue) -> Option<&str> {
    let text = value.to_str().ok()?;
    let ok = (1..=MAX_REQUEST_ID_LENGTH).contains(&text.len())
        && text.bytes().all(|b| b.is_ascii_graphic());
    ok.then_some(text)
}

/// The request id in `extensions`, or `-` outside [`record`].
pub fn request_id(extensions: &Extensions) -> Arc<str> {
    extensions
        .get::<RequestId>()
        .map_or_else(|| Arc::from("-"), |id| id.0.clone())
}

/// What the log names a request that matched no route by.
pub const UNMATCHED: &str = "unmatched";

/// The route template the request of `extensions` matched
/// (`/v1/runs/{id}`), or [`UNMATCHED`]: what logs name a request by, so
/// that no client text reaches them.
pub fn route(extensions: &Extensions) -> &str {
    extensions
        .get::<MatchedPath>()
        .map_or(UNMATCHED, MatchedPath::as_str)
}

/// The peer address in `extensions`, or `-` when the server was not
/// started with connect info.
pub fn peer(extensions: &Extensions) -> String {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or_else(|| "-".to_owned(), |ConnectInfo(addr)| addr.to_string())
}

/// The middleware: assigns the request id, answers it in `Request-Id`,
/// and writes the access line once the answer's head is ready.
pub async fn record(
    axum::extract::State(state): axum::extract::State<Arc<crate::AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let id: Arc<str> = match request.headers().get(REQUEST_ID).and_then(valid_request_id) {
        Some(id) => Arc::from(id),
        None => Arc::from(uuid::Uuid::now_v7().to_string()),
    };
    let tenant = TenantSlot::default();
    let method = request.method().clone();
    let route = route(request.extensions()).to_owned();
    let peer = peer(request.extensions());
    // OpenAI's SDKs read the id from `x-request-id`, Anthropic's from
    // `request-id`: a gateway answer carries both.
    let gateway =
        crate::gateway::dialect::Dialect::of(request.uri().path(), request.headers()).is_some();
    request.extensions_mut().insert(RequestId(id.clone()));
    request.extensions_mut().insert(tenant.clone());
    let mut response = next.run(request).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        if gateway {
            response.headers_mut().insert(X_REQUEST_ID, value.clone());
        }
        response.headers_mut().insert(REQUEST_ID, value);
    }
    let elapsed = started.elapsed();
    state
        .requests
        .observe(&route, &method, response.status(), elapsed);
    let latency_ms = elapsed.as_secs_f64() * 1000.0;
    let tenant = tenant.0.get().map_or("-", TenantId::as_str);
    tracing::info!(
        target: "rein::access",
        method = %method,
        route = %route,
        status = response.status().as_u16(),
        latency_ms = format_args!("{latency_ms:.1}"),
        tenant = %tenant,
        peer = %peer,
        request_id = %id,
        "request"
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_ids_are_echoed_only_when_visible_ascii_and_bounded() {
        let ok = HeaderValue::from_static("client-7f3a:retry=2");
        assert_eq!(valid_request_id(&ok), Some("client-7f3a:retry=2"));
        for bad in ["", "has space", "tab\there"] {
            let value = HeaderValue::from_str(bad).unwrap();
            assert_eq!(valid_request_id(&value), None, "{bad:?}");
        }
        let long = HeaderValue::from_str(&"x".repeat(MAX_REQUEST_ID_LENGTH + 1)).unwrap();
        assert_eq!(valid_request_id(&long), None);
        let longest = HeaderValue::from_str(&"x".repeat(MAX_REQUEST_ID_LENGTH)).unwrap();
        assert!(valid_request_id(&longest).is_some());
        let binary = HeaderValue::from_bytes(b"caf\xc3\xa9").unwrap();
        assert_eq!(valid_request_id(&binary), None);
    }
}

//! Who may reach the API: every request's `Host` is loopback or listed in
//! `server.allowed_hosts`, and a present `Origin` is the server's own or
//! one `[server.cors]` lists. Otherwise nothing runs.
//!
//! # Why
//!
//! Open mode is loopback only, but loopback is where the operator's browser
//! is. A page on any site can POST to `http://127.0.0.1:8787` without a
//! preflight (`fetch` in `no-cors` mode, a form with `text/plain`), and with
//! DNS rebinding (`evil.example` re-pointed at 127.0.0.1) it can read the
//! answers too. A browser always sends the name it connected to in `Host`
//! and the page's origin in `Origin` on a POST, and a page cannot change
//! either; so this guard looks at both before any handler runs.
//!
//! | request | answer |
//! | --- | --- |
//! | no `Host` (and no absolute-form target), or two `Host` headers | 400 `host-missing` (RFC 9112 §3.2) |
//! | `Host` (or an absolute-form target's authority) not loopback nor listed | 421 `host-not-allowed`: this server does not answer for that name |
//! | `Origin` present and neither this server's own origin nor listed in `server.cors.allowed_origins`; `Origin: null`; two `Origin` headers | 403 `origin-not-allowed` |
//! | a listed CORS origin with a method `server.cors.allowed_methods` leaves out | 403 `origin-not-allowed` |
//!
//! # Why 421 and 403
//!
//! A foreign `Host` says the request was meant for another server (a
//! rebinding page, or a proxy forwarding a name the operator did not list):
//! RFC 9110's 421 Misdirected Request is exactly "this server is not
//! configured to answer for that authority", and its problem names the
//! setting that fixes it. A foreign `Origin` reached the right server from
//! a page the operator did not admit: 403 Forbidden.
//!
//! # Edge cases
//!
//! - An absolute-form target (`POST http://evil.example/v1/... HTTP/1.1`)
//!   is answered for its own authority, which RFC 9112 says wins over
//!   `Host`; so both must be allowed.
//! - HTTP/1.0 without `Host` is refused like HTTP/1.1 without it: rein's
//!   clients all send it, and a missing name cannot be checked.
//! - IPv6 literals (`[::1]:8787`), trailing dots (`localhost.`) and case are
//!   normalized by [`Authority`] before comparing.
//! - `Origin: null` (sandboxed frames, `file://` pages, some redirects) is
//!   shared by every such page, so it is never admitted.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rein_core::registry::{AllowedHost, Authority, CorsSpec, Origin, host_is_allowed};
use serde_json::json;

use crate::problem::Problem;
use crate::state::AppState;

/// Why a request is refused before any handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No name to check, or two.
    HostMissing,
    /// A name this server does not answer for (as sent, for the answer).
    HostNotAllowed(String),
    /// An origin that is not this server's and not listed.
    OriginNotAllowed(String),
    /// A listed origin using a method it is not allowed.
    MethodNotAllowed {
        /// The origin.
        origin: String,
        /// The method.
        method: String,
    },
}

/// What is shown of a header value: visible ASCII, at most 100 characters.
fn shown(value: &HeaderValue) -> String {
    const SHOWN: usize = 100;
    match value.to_str() {
        Ok(text) => text.chars().take(SHOWN).collect(),
        Err(_) => "<not visible ASCII>".to_owned(),
    }
}

/// Whether a request with `method`, `uri` and `headers` may be answered.
///
/// # Errors
///
/// The [`Refusal`], per the module table.
pub fn admit(
    allowed: &[AllowedHost],
    cors: Option<&CorsSpec>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal::HostMissing);
    }
    let host_authority = match host {
        Some(value) => Some(
            value
                .to_str()
                .ok()
                .and_then(Authority::parse)
                .filter(|a| host_is_allowed(allowed, a))
                .ok_or_else(|| Refusal::HostNotAllowed(shown(value)))?,
        ),
        None => None,
    };
    // RFC 9112 §3.2.2: an absolute-form target's authority wins.
    let target = match uri.authority() {
        Some(authority) => Some(
            Authority::parse(authority.as_str())
                .filter(|a| host_is_allowed(allowed, a))
                .ok_or_else(|| Refusal::HostNotAllowed(authority.as_str().to_owned()))?,
        ),
        None => None,
    };
    let Some(authority) = target.or(host_authority) else {
        return Err(Refusal::HostMissing);
    };
    let mut origins = headers.get_all(header::ORIGIN).iter();
    let Some(value) = origins.next() else {
        // No browser page sent this (they send Origin on every POST, and
        // a GET they send without it cannot read the answer cross-origin).
        return Ok(());
    };
    let refused = || Refusal::OriginNotAllowed(shown(value));
    if origins.next().is_some() {
        return Err(refused());
    }
    let origin = value
        .to_str()
        .ok()
        .and_then(Origin::parse)
        .ok_or_else(refused)?;
    if origin.is_same_as(&authority) {
        return Ok(());
    }
    match cors {
        Some(cors) if cors.admits(&origin) => {
            if cors.allows_method(method.as_str()) {
                Ok(())
            } else {
                Err(Refusal::MethodNotAllowed {
                    origin: origin.to_string(),
                    method: method.to_string(),
                })
            }
        }
        _ => Err(refused()),
    }
}

impl Refusal {
    /// The problem a refused request is answered with.
    pub fn problem(&self) -> Problem {
        match self {
            Refusal::HostMissing => Problem::new(
                StatusCode::BAD_REQUEST,
                "host-missing",
                "Host header missing",
                "send exactly one Host header naming the server (HTTP/1.1 requires it)",
            ),
            Refusal::HostNotAllowed(host) => Problem::new(
                StatusCode::MISDIRECTED_REQUEST,
                "host-not-allowed",
                "Host not allowed",
                format!(
                    "this server does not answer for the host `{host}`: it answers for loopback names and addresses and for server.allowed_hosts; list the name there if clients reach rein by it"
                ),
            )
            .with(json!({"host": host})),
            Refusal::OriginNotAllowed(origin) => Problem::new(
                StatusCode::FORBIDDEN,
                "origin-not-allowed",
                "Origin not allowed",
                format!(
                    "requests from the web origin `{origin}` are refused: only the server's own origin and server.cors.allowed_origins may call the API from a browser"
                ),
            )
            .with(json!({"origin": origin})),
            Refusal::MethodNotAllowed { origin, method } => Problem::new(
                StatusCode::FORBIDDEN,
                "origin-not-allowed",
                "Origin not allowed",
                format!(
                    "the origin `{origin}` may not send {method}: server.cors.allowed_methods leaves it out"
                ),
            )
            .with(json!({"origin": origin, "method": method})),
        }
    }
}

/// The middleware: refuses per [`admit`], logging each refusal, before any
/// handler (or CORS preflight) runs.
pub async fn guard(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let settings = &state.settings;
    match admit(
        &settings.allowed_hosts,
        settings.cors.as_ref(),
        request.method(),
        request.uri(),
        request.headers(),
    ) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let peer = crate::access::peer(request.extensions());
            let request_id = crate::access::request_id(request.extensions());
            tracing::warn!(
                method = %request.method(),
                path = %request.uri().path(),
                peer = %peer,
                request_id = %request_id,
                refusal = ?refusal,
                "request refused before any handler: host or origin not allowed"
            );
            refusal.problem().into_response()
        }
    }
}

/// The CORS layer for `[server.cors]`: answers preflights of the listed
/// origins and adds the `Access-Control-*` headers to their answers.
/// [`guard`] runs first, so an origin reaching it is one the config lists.
pub fn cors_layer(cors: &CorsSpec) -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let origins: Vec<HeaderValue> = cors
        .allowed_origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(&o.to_string()).ok())
        .collect();
    let methods: Vec<Method> = cors
        .allowed_methods
        .iter()
        .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
        .collect();
    let headers: Vec<header::HeaderName> = cors
        .allowed_headers
        .iter()
        .filter_map(|h| header::HeaderName::from_bytes(h.as_bytes()).ok())
        .collect();
    // What a browser client needs to read: where a run is, which model
    // answered, whether a response was replayed, when to retry, the id to
    // quote.
    let exposed = [
        header::LOCATION,
        header::RETRY_AFTER,
        header::HeaderName::from_static("request-id"),
        header::HeaderName::from_static("rein-model"),
        header::HeaderName::from_static("rein-fallback"),
        header::HeaderName::from_static("idempotency-replayed"),
    ];
    CorsLayer::new()
        .allow_origin(AllowOrigin::list(origins))
        .allow_methods(methods)
        .allow_headers(headers)
        .expose_headers(exposed)
        .max_age(CORS_MAX_AGE)
}

/// How long a browser may cache a preflight answer.
pub const CORS_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(600);

#[cfg(test)]
mod tests {
    use super::*;

    fn request(host: Option<&str>, origin: Option<&str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(host) = host {
            headers.insert(header::HOST, HeaderValue::from_str(host).unwrap());
        }
        if let Some(origin) = origin {
            headers.insert(header::ORIGIN, HeaderValue::from_str(origin).unwrap());
        }
        headers
    }

    fn cors() -> CorsSpec {
        let file: rein_core::registry::ConfigFile = toml::from_str(
            "[server.cors]\nallowed_origins = [\"http://app.example\"]\nallowed_methods = [\"GET\"]\n",
        )
        .unwrap();
        let registry = rein_core::registry::check(
            &[rein_core::registry::ConfigSource::new("rein.toml", file)],
            &|_| Vec::new(),
        )
        .unwrap();
        registry.server().cors.clone().unwrap()
    }

    #[test]
    fn hosts_and_origins_are_admitted_or_refused_as_the_table_says() {
        let allowed = vec![AllowedHost::parse("rein.internal").unwrap()];
        let cors = cors();
        let get = Method::GET;
        let post = Method::POST;
        let root: Uri = "/v1/runs/x".parse().unwrap();
        let host_refused = |h: &str| Err(Refusal::HostNotAllowed(h.to_owned()));
        let origin_refused = |o: &str| Err(Refusal::OriginNotAllowed(o.to_owned()));
        /// Method, `Host`, `Origin`, what [`admit`] says.
        type Case<'a> = (
            Method,
            Option<&'a str>,
            Option<&'a str>,
            Result<(), Refusal>,
        );
        let table: Vec<Case> = vec![
            (post.clone(), Some("127.0.0.1:8787"), None, Ok(())),
            (post.clone(), Some("localhost."), None, Ok(())),
            (post.clone(), Some("[::1]:8787"), None, Ok(())),
            (post.clone(), Some("rein.internal:8787"), None, Ok(())),
            (
                post.clone(),
                Some("evil.example"),
                None,
                host_refused("evil.example"),
            ),
            (
                post.clone(),
                Some("evil.example:8787"),
                None,
                host_refused("evil.example:8787"),
            ),
            (
                post.clone(),
                Some("127.0.0.1.evil.example"),
                None,
                host_refused("127.0.0.1.evil.example"),
            ),
            (post.clone(), None, None, Err(Refusal::HostMissing)),
            // Same origin: the page was served by this server.
            (
                post.clone(),
                Some("127.0.0.1:8787"),
                Some("http://127.0.0.1:8787"),
                Ok(()),
            ),
            (
                post.clone(),
                Some("rein.internal"),
                Some("https://rein.internal"),
                Ok(()),
            ),
            // Another port is another origin.
            (
                post.clone(),
                Some("127.0.0.1:8787"),
                Some("http://127.0.0.1:9999"),
                origin_refused("http://127.0.0.1:9999"),
            ),
            (
                post.clone(),
                Some("127.0.0.1:8787"),
                Some("http://evil.example"),
                origin_refused("http://evil.example"),
            ),
            (
                post.clone(),
                Some("127.0.0.1:8787"),
                Some("null"),
                origin_refused("null"),
            ),
            // A listed CORS origin, with its methods only.
            (
                get.clone(),
                Some("127.0.0.1:8787"),
                Some("http://app.example"),
                Ok(()),
            ),
            (
                Method::OPTIONS,
                Some("127.0.0.1:8787"),
                Some("http://app.example"),
                Ok(()),
            ),
            (
                post.clone(),
                Some("127.0.0.1:8787"),
                Some("http://app.example"),
                Err(Refusal::MethodNotAllowed {
                    origin: "http://app.example".into(),
                    method: "POST".into(),
                }),
            ),
        ];
        for (method, host, origin, expected) in table {
            let headers = request(host, origin);
            assert_eq!(
                admit(&allowed, Some(&cors), &method, &root, &headers),
                expected,
                "{method} Host {host:?} Origin {origin:?}"
            );
        }
    }

    #[test]
    fn an_absolute_form_target_is_checked_and_wins_over_host() {
        let headers = request(Some("127.0.0.1:8787"), Some("http://evil.example"));
        let absolute: Uri = "http://evil.example/v1/agents/a/runs".parse().unwrap();
        assert_eq!(
            admit(&[], None, &Method::POST, &absolute, &headers),
            Err(Refusal::HostNotAllowed("evil.example".into()))
        );
        // The target's authority is what the origin is compared with.
        let headers = request(Some("127.0.0.1:8787"), Some("http://localhost:8787"));
        let absolute: Uri = "http://localhost:8787/healthz".parse().unwrap();
        assert_eq!(admit(&[], None, &Method::POST, &absolute, &headers), Ok(()));
        // HTTP/1.0 style: no Host, but an absolute target.
        assert_eq!(
            admit(&[], None, &Method::GET, &absolute, &HeaderMap::new()),
            Ok(())
        );
    }

    #[test]
    fn two_host_or_origin_headers_are_refused() {
        let mut headers = request(Some("127.0.0.1"), None);
        headers.append(header::HOST, HeaderValue::from_static("evil.example"));
        let uri: Uri = "/".parse().unwrap();
        assert_eq!(
            admit(&[], None, &Method::GET, &uri, &headers),
            Err(Refusal::HostMissing)
        );
        let mut headers = request(Some("127.0.0.1"), Some("http://127.0.0.1"));
        headers.append(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(matches!(
            admit(&[], None, &Method::POST, &uri, &headers),
            Err(Refusal::OriginNotAllowed(_))
        ));
    }

    #[test]
    fn refusals_are_problems_naming_the_fix() {
        let p = Refusal::HostNotAllowed("evil.example".into()).problem();
        assert_eq!(p.status, 421);
        assert!(p.detail.contains("server.allowed_hosts"), "{}", p.detail);
        let p = Refusal::OriginNotAllowed("http://evil.example".into()).problem();
        assert_eq!(p.status, 403);
        assert!(p.kind.ends_with("/origin-not-allowed"));
        assert_eq!(Refusal::HostMissing.problem().status, 400);
    }
}

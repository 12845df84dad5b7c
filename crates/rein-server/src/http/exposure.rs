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
//! | no `Host` (and no absolute-form target) | 400 `host-missing` (RFC 9112 §3.2) |
//! | two `Host` headers | 400 `host-repeated` |
//! | `Host` (or an absolute-form target's authority) not loopback nor listed | 421 `host-not-allowed`: this server does not answer for that name |
//! | `Origin` present and neither this server's own origin nor listed in `server.cors.allowed_origins`; `Origin: null`; two `Origin` headers | 403 `origin-not-allowed` |
//! | a listed CORS origin with a method `server.cors.allowed_methods` leaves out (`HEAD` counts as `GET`) | 403 `origin-not-allowed` |
//! | `GET`/`HEAD` of a probe ([`PROBES`]) with a missing or foreign `Host` | answered: no Host check; a present `Origin` must be listed in `[server.cors]` |
//!
//! # Why probes skip the Host check
//!
//! A load balancer or Kubernetes probes `http://<pod-ip>:8787/healthz` and
//! sends that address in `Host`, which is neither loopback nor (with a
//! wildcard `listen`) anything rein could list for it: a 421 there keeps
//! the pod from ever becoming ready. `/healthz` and `/readyz` change
//! nothing and say nothing secret (`/readyz` does not repeat the store's
//! error), so a rebinding page gains nothing from reading them. They keep
//! the `Origin` check: with no trusted `Host` to be the same origin as, a
//! page's `Origin` must be one `[server.cors]` lists.
//!
//! `rein serve` also answers for the specific address it listens on
//! ([`listen_hosts`]) and warns at start when it listens off loopback with
//! no `server.allowed_hosts` ([`start_warnings`]).
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

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rein_core::registry::{
    AllowedHost, Authority, CorsSpec, MetricsAccess, Origin, ServerSpec, host_is_allowed,
};
use serde_json::json;

use crate::http::problem::Problem;
use crate::http::state::AppState;

/// Why a request is refused before any handler runs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refusal {
    /// No name to check.
    HostMissing,
    /// Two `Host` headers: which one the request meant is unknowable.
    HostRepeated,
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

/// How many characters of a client's header value an answer shows.
pub const SHOWN: usize = 100;

/// The routes a load balancer probes: answered whatever the `Host`.
///
/// NOTE: `crate::router` routes `healthz` and `readyz` under these paths.
pub const PROBES: [&str; 2] = ["/healthz", "/readyz"];

/// What an answer shows of a client's header value: visible ASCII, at most
/// [`SHOWN`] characters.
pub(crate) fn shown(value: &HeaderValue) -> String {
    match value.to_str() {
        Ok(text) => text.chars().take(SHOWN).collect(),
        Err(_) => "<not visible ASCII>".to_owned(),
    }
}

/// Whether a request to `route` (its template, see
/// [`crate::http::access::route`]) with `method`, `uri` and `headers` may be
/// answered.
///
/// # Errors
///
/// The [`Refusal`], per the module table.
pub fn admit(
    allowed: &[AllowedHost],
    cors: Option<&CorsSpec>,
    route: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
) -> Result<(), Refusal> {
    let mut hosts = headers.get_all(header::HOST).iter();
    let host = hosts.next();
    if hosts.next().is_some() {
        return Err(Refusal::HostRepeated);
    }
    let authority = allowed_authority(allowed, uri, host);
    let is_probe = matches!(*method, Method::GET | Method::HEAD) && PROBES.contains(&route);
    let authority = match authority {
        Ok(authority) => Some(authority),
        // No Host check for a probe; no same-origin page either.
        Err(_) if is_probe => None,
        Err(refusal) => return Err(refusal),
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
    if authority.is_some_and(|a| origin.is_same_as(&a)) {
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

/// The allowed authority a request was sent to: its absolute-form
/// target's, which RFC 9112 §3.2.2 says wins, or its `Host`.
fn allowed_authority(
    allowed: &[AllowedHost],
    uri: &Uri,
    host: Option<&HeaderValue>,
) -> Result<Authority, Refusal> {
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
    let target = match uri.authority() {
        Some(authority) => Some(
            Authority::parse(authority.as_str())
                .filter(|a| host_is_allowed(allowed, a))
                .ok_or_else(|| {
                    Refusal::HostNotAllowed(authority.as_str().chars().take(SHOWN).collect())
                })?,
        ),
        None => None,
    };
    target.or(host_authority).ok_or(Refusal::HostMissing)
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
            Refusal::HostRepeated => Problem::new(
                StatusCode::BAD_REQUEST,
                "host-repeated",
                "More than one Host header",
                "send exactly one Host header naming the server: with two, which server the request is for cannot be told",
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
    let route = crate::http::access::route(request.extensions());
    match admit(
        &settings.allowed_hosts,
        settings.cors.as_ref(),
        route,
        request.method(),
        request.uri(),
        request.headers(),
    ) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let peer = crate::http::access::peer(request.extensions());
            let request_id = crate::http::access::request_id(request.extensions());
            tracing::warn!(
                method = %request.method(),
                route = %route,
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
///
/// # Why a predicate
///
/// The guard compares origins normalized ([`Origin::parse`]: case, a
/// trailing dot, IPv6 spellings); a byte-for-byte list would not, and an
/// origin the guard admitted (`http://[::ffff:7f00:1]:3000` for a listed
/// `http://[::ffff:127.0.0.1]:3000`) would get its answer without
/// `Access-Control-Allow-Origin`, unreadable. One matcher decides both.
pub fn cors_layer(cors: &CorsSpec) -> tower_http::cors::CorsLayer {
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let listed = cors.clone();
    let origins = AllowOrigin::predicate(move |origin: &HeaderValue, _| {
        origin
            .to_str()
            .ok()
            .and_then(Origin::parse)
            .is_some_and(|o| listed.admits(&o))
    });
    let methods: Vec<Method> = cors
        .allowed_methods
        .iter()
        .filter_map(|m| Method::from_bytes(m.as_bytes()).ok())
        .collect();
    let headers: Vec<HeaderName> = cors
        .allowed_headers
        .iter()
        .filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok())
        .collect();
    CorsLayer::new()
        .allow_origin(origins)
        .allow_methods(methods)
        .allow_headers(headers)
        .expose_headers(exposed_headers())
        .max_age(CORS_MAX_AGE)
}

/// What a browser client needs to read of an answer: where a run is,
/// when to retry, the id to quote (under both names: OpenAI's SDK reads
/// `x-request-id`), which model answered and whether it was a fallback,
/// what the gateway lowered or did not honour, how a prompt was counted,
/// whether a response was replayed.
fn exposed_headers() -> Vec<HeaderName> {
    [
        header::LOCATION.as_str(),
        header::RETRY_AFTER.as_str(),
        crate::http::access::REQUEST_ID,
        crate::http::access::X_REQUEST_ID,
        crate::gateway::MODEL_HEADER,
        crate::gateway::FALLBACK_HEADER,
        crate::gateway::MAX_TOKENS_HEADER,
        crate::gateway::IGNORED_HEADER,
        crate::gateway::count_tokens::COUNT_HEADER,
        crate::api::idempotency::REPLAYED,
    ]
    .into_iter()
    .filter_map(|name| HeaderName::from_bytes(name.as_bytes()).ok())
    .collect()
}

/// The hosts `rein serve` answers for when it listens on `listen`: the
/// configured `allowed`, and the address itself when it is a specific one
/// (not `0.0.0.0` or `::`, not loopback, which is always answered): a
/// client or probe reaching it by that address names it in `Host`.
pub fn listen_hosts(allowed: &[AllowedHost], listen: SocketAddr) -> Vec<AllowedHost> {
    let mut hosts = allowed.to_vec();
    let ip = listen.ip();
    if !ip.is_unspecified() && !ip.is_loopback() {
        hosts.push(AllowedHost::for_address(ip));
    }
    hosts
}

/// What `rein serve` warns about at start for `settings` listening on
/// `listen`: a server off loopback that answers no name (every client
/// reaching it by one gets 421), and a protected `/metrics` no key may
/// read.
pub fn start_warnings(settings: &ServerSpec, listen: SocketAddr) -> Vec<String> {
    let mut warnings = Vec::new();
    let ip = listen.ip();
    if !ip.is_loopback() && settings.allowed_hosts.is_empty() {
        let answered = if ip.is_unspecified() {
            "loopback names and addresses".to_owned()
        } else {
            format!("loopback and {ip}")
        };
        warnings.push(format!(
            "listening on {listen} with no server.allowed_hosts: requests naming this server by any Host but {answered} are refused with 421 (probes of /healthz and /readyz are answered whatever the Host); list the names clients use in server.allowed_hosts"
        ));
    }
    if !settings.api_keys.is_empty()
        && settings.metrics == MetricsAccess::Protected
        && settings.metrics_tenants.is_empty()
    {
        warnings.push(
            "no key may read /metrics: list the scraper's tenant in server.metrics_tenants, or set server.metrics = \"open\"".to_owned(),
        );
    }
    warnings
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

    /// A route of the API (not a probe).
    const ROUTE: &str = "/v1/runs/{id}";

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
            // HEAD is GET without the body.
            (
                Method::HEAD,
                Some("127.0.0.1:8787"),
                Some("http://app.example"),
                Ok(()),
            ),
            (
                Method::DELETE,
                Some("127.0.0.1:8787"),
                Some("http://app.example"),
                Err(Refusal::MethodNotAllowed {
                    origin: "http://app.example".into(),
                    method: "DELETE".into(),
                }),
            ),
            // The listed origin normalized: case and a trailing dot.
            (
                get.clone(),
                Some("127.0.0.1:8787"),
                Some("http://App.Example."),
                Ok(()),
            ),
        ];
        for (method, host, origin, expected) in table {
            let headers = request(host, origin);
            assert_eq!(
                admit(&allowed, Some(&cors), ROUTE, &method, &root, &headers),
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
            admit(&[], None, ROUTE, &Method::POST, &absolute, &headers),
            Err(Refusal::HostNotAllowed("evil.example".into()))
        );
        // The target's authority is what the origin is compared with.
        let headers = request(Some("127.0.0.1:8787"), Some("http://localhost:8787"));
        let absolute: Uri = "http://localhost:8787/healthz".parse().unwrap();
        assert_eq!(
            admit(&[], None, ROUTE, &Method::POST, &absolute, &headers),
            Ok(())
        );
        // HTTP/1.0 style: no Host, but an absolute target.
        assert_eq!(
            admit(&[], None, ROUTE, &Method::GET, &absolute, &HeaderMap::new()),
            Ok(())
        );
    }

    #[test]
    fn two_host_or_origin_headers_are_refused() {
        let mut headers = request(Some("127.0.0.1"), None);
        headers.append(header::HOST, HeaderValue::from_static("evil.example"));
        let uri: Uri = "/".parse().unwrap();
        assert_eq!(
            admit(&[], None, ROUTE, &Method::GET, &uri, &headers),
            Err(Refusal::HostRepeated)
        );
        assert_eq!(Refusal::HostRepeated.problem().status, 400);
        assert!(
            Refusal::HostRepeated
                .problem()
                .kind
                .ends_with("/host-repeated")
        );
        let mut headers = request(Some("127.0.0.1"), Some("http://127.0.0.1"));
        headers.append(
            header::ORIGIN,
            HeaderValue::from_static("http://evil.example"),
        );
        assert!(matches!(
            admit(&[], None, ROUTE, &Method::POST, &uri, &headers),
            Err(Refusal::OriginNotAllowed(_))
        ));
    }

    #[test]
    fn probes_are_answered_whatever_the_host_and_keep_the_origin_check() {
        let cors = cors();
        let pod = request(Some("10.1.2.3:8787"), None);
        for route in PROBES {
            for method in [Method::GET, Method::HEAD] {
                assert_eq!(
                    admit(&[], None, route, &method, &"/".parse().unwrap(), &pod),
                    Ok(()),
                    "{method} {route}"
                );
            }
            assert_eq!(
                admit(
                    &[],
                    None,
                    route,
                    &Method::GET,
                    &"/".parse().unwrap(),
                    &HeaderMap::new()
                ),
                Ok(()),
                "an HTTP/1.0 probe without Host"
            );
            // Not a probe: another method, or a page's origin.
            assert_eq!(
                admit(&[], None, route, &Method::POST, &"/".parse().unwrap(), &pod),
                Err(Refusal::HostNotAllowed("10.1.2.3:8787".into()))
            );
            let page = request(Some("10.1.2.3:8787"), Some("http://10.1.2.3:8787"));
            assert_eq!(
                admit(
                    &[],
                    Some(&cors),
                    route,
                    &Method::GET,
                    &"/".parse().unwrap(),
                    &page
                ),
                Err(Refusal::OriginNotAllowed("http://10.1.2.3:8787".into())),
                "no trusted Host to be the same origin as"
            );
            let listed = request(Some("10.1.2.3:8787"), Some("http://app.example"));
            assert_eq!(
                admit(
                    &[],
                    Some(&cors),
                    route,
                    &Method::GET,
                    &"/".parse().unwrap(),
                    &listed
                ),
                Ok(())
            );
            // A probe on a trusted Host keeps its same-origin pages.
            let own = request(Some("127.0.0.1:8787"), Some("http://127.0.0.1:8787"));
            assert_eq!(
                admit(&[], None, route, &Method::GET, &"/".parse().unwrap(), &own),
                Ok(())
            );
        }
        // Any other route is checked.
        assert_eq!(
            admit(&[], None, ROUTE, &Method::GET, &"/".parse().unwrap(), &pod),
            Err(Refusal::HostNotAllowed("10.1.2.3:8787".into()))
        );
        assert_eq!(
            admit(
                &[],
                None,
                crate::http::access::UNMATCHED,
                &Method::GET,
                &"/".parse().unwrap(),
                &pod
            ),
            Err(Refusal::HostNotAllowed("10.1.2.3:8787".into()))
        );
    }

    #[test]
    fn a_specific_listen_address_is_answered_and_a_wildcard_one_warns() {
        let pod: SocketAddr = "10.1.2.3:8787".parse().unwrap();
        let hosts = listen_hosts(&[], pod);
        let by_address = request(Some("10.1.2.3:8787"), None);
        assert_eq!(
            admit(
                &hosts,
                None,
                ROUTE,
                &Method::POST,
                &"/".parse().unwrap(),
                &by_address
            ),
            Ok(())
        );
        for wildcard in ["0.0.0.0:8787", "[::]:8787", "127.0.0.1:8787"] {
            let listen: SocketAddr = wildcard.parse().unwrap();
            assert!(listen_hosts(&[], listen).is_empty(), "{wildcard}");
        }
        let settings = ServerSpec::default();
        for (listen, warns) in [
            ("0.0.0.0:8787", true),
            ("10.1.2.3:8787", true),
            ("127.0.0.1:8787", false),
            ("[::1]:8787", false),
        ] {
            let warnings = start_warnings(&settings, listen.parse().unwrap());
            assert_eq!(warnings.len(), usize::from(warns), "{listen}: {warnings:?}");
            if warns {
                assert!(warnings[0].contains("server.allowed_hosts"), "{warnings:?}");
            }
        }
        let mut listed = ServerSpec::default();
        listed.allowed_hosts = vec![AllowedHost::parse("rein.internal").unwrap()];
        assert!(start_warnings(&listed, "0.0.0.0:8787".parse().unwrap()).is_empty());
    }

    #[test]
    fn the_default_cors_headers_are_the_request_headers_the_api_reads() {
        use rein_core::registry::DEFAULT_CORS_ALLOWED_HEADERS;
        for read in [
            header::AUTHORIZATION.as_str(),
            header::CONTENT_TYPE.as_str(),
            crate::api::idempotency::IDEMPOTENCY_KEY,
            crate::http::access::REQUEST_ID,
            crate::api::events::LAST_EVENT_ID,
            rein_core::deadline::DEADLINE_HEADER,
            rein_core::header::TRACEPARENT_HEADER,
        ] {
            assert!(
                DEFAULT_CORS_ALLOWED_HEADERS.contains(&read.to_ascii_lowercase().as_str()),
                "{read} is read by the API but not a default CORS header"
            );
        }
        let exposed: Vec<String> = exposed_headers().iter().map(ToString::to_string).collect();
        assert_eq!(
            exposed,
            [
                "location",
                "retry-after",
                "request-id",
                "x-request-id",
                "rein-model",
                "rein-fallback",
                "rein-max-tokens",
                "rein-ignored",
                "rein-token-count",
                "idempotency-replayed"
            ]
        );
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

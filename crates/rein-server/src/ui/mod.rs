//! The operator's dashboard at `/ui`: runs, one run's live timeline,
//! ledger and report, the approvals and handoffs waiting for a human with
//! their decision buttons, the breakers, the work in flight against the
//! capacity it uses (refreshed in place), outcomes and spend over a window
//! (runs by agent and model, guardrails, gateway spend per key), the
//! gateway's calls, fallbacks and recoveries, and the configuration as
//! applied (for operators).
//!
//! # Why server-rendered, in the binary
//!
//! An operator opens it on the server they already run: nothing to build,
//! nothing fetched from another host. Pages are HTML written by the
//! handlers (module `html`), the stylesheet and the one small script are
//! embedded with `include_str!`, and every page works without the script;
//! the script only shows times in the viewer's zone, follows a running
//! run's events (an `EventSource` on the run's event stream), and reads a
//! live page's figures again in place (`data-refresh`).
//!
//! # Security
//!
//! | measure | where |
//! | --- | --- |
//! | sign-in with an API key, which becomes an opaque session id in an `HttpOnly; SameSite=Strict; Path=/ui` cookie (`Secure` behind TLS); the key is never stored | `session` |
//! | without `[[server.api_keys]]`, open as the API is (loopback only) | `login` |
//! | a per-session CSRF token in every form, and `Origin`/`Sec-Fetch-Site` checked, on every POST | `csrf` |
//! | `Content-Security-Policy: default-src 'self'` (no inline script or style), `frame-ancestors 'none'`, `X-Frame-Options: DENY`, `nosniff`, `no-store` | [`router`] |
//! | every text from a run or a request escaped | `html` |
//! | a decision goes through the API's own handler ([`crate::api::approvals::decide`], [`crate::api::handoff::decide`]), recorded as the signed-in key's name | `pages` |
//!
//! The API's layers ([`crate::http::exposure`]'s `Host`/`Origin` guard, the
//! access log, the drain) are around these routes too.

mod csrf;
mod html;
mod pages;
mod session;

use std::sync::Arc;
use std::time::Instant;

use axum::Router;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use crate::http::auth::Caller;
use crate::http::state::AppState;
use html::pct;
use session::{Session, Sessions};

/// The dashboard's content security policy: everything from this server,
/// nothing inline, never in a frame, forms only to this server.
const CSP: &str = "default-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'";

/// What every dashboard handler shares: the server's state and the
/// sessions.
#[derive(Clone)]
pub(crate) struct Ui {
    app: Arc<AppState>,
    sessions: Arc<Sessions>,
}

/// A request of a signed-in session.
#[derive(Debug, Clone)]
pub(crate) struct Signed {
    /// The session.
    session: Session,
    /// Who it acts as.
    caller: Caller,
}

impl Ui {
    /// Whether the API has keys (else the dashboard is open, as the API is).
    fn keyed(&self) -> bool {
        !self.app.settings.api_keys.is_empty()
    }

    /// The session of `headers`' cookie, whoever it is (a sign-in form's
    /// too), with its id.
    fn session(&self, headers: &HeaderMap) -> Option<(String, Session)> {
        let id = session::cookie(headers)?;
        let found = self.sessions.get(id, Instant::now())?;
        Some((id.to_owned(), found))
    }

    /// The signed-in session of a request to `uri`, or the redirect to the
    /// sign-in page, which comes back to `uri`.
    /// (Boxed: an answer is large, and the signed-in path is the common
    /// one.)
    fn signed_in(&self, headers: &HeaderMap, uri: &Uri) -> Result<Signed, Box<Response>> {
        match self.session(headers) {
            Some((_, session)) => match session.who.clone() {
                Some(caller) => Ok(Signed { session, caller }),
                None => Err(Box::new(to_sign_in(uri))),
            },
            None => Err(Box::new(to_sign_in(uri))),
        }
    }
}

fn to_sign_in(uri: &Uri) -> Response {
    let next = uri.path_and_query().map_or("/ui/runs", |p| p.as_str());
    sign_in_then(next)
}

/// The redirect to the sign-in page, which then goes to `next`.
fn sign_in_then(next: &str) -> Response {
    see_other(&format!("/ui/login?next={}", pct(next)))
}

/// A 303 to `location` (a path of this server).
fn see_other(location: &str) -> Response {
    match HeaderValue::from_str(location) {
        Ok(value) => (StatusCode::SEE_OTHER, [(header::LOCATION, value)]).into_response(),
        Err(_) => (
            StatusCode::SEE_OTHER,
            [(header::LOCATION, HeaderValue::from_static("/ui/runs"))],
        )
            .into_response(),
    }
}

/// Where a form may send the browser back to: a dashboard path, never
/// another host (`//evil.example`) nor a header injection.
fn back_to(back: Option<&str>) -> &str {
    match back {
        Some(path)
            if path.starts_with("/ui/")
                // Never the sign-in page itself: a signed-in browser sent
                // there would be sent on to it again.
                && !path.starts_with("/ui/login")
                && !path.contains("//")
                && !path.contains('\\')
                && path.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            path
        }
        _ => "/ui/runs",
    }
}

/// The dashboard's routes, to merge into [`crate::router`] (inside its
/// layers).
pub fn router(app: Arc<AppState>) -> Router<Arc<AppState>> {
    let ui = Ui {
        app,
        sessions: Arc::new(Sessions::default()),
    };
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route(
            "/ui/login",
            get(pages::login::form).post(pages::login::sign_in),
        )
        .route("/ui/logout", post(pages::login::sign_out))
        .route("/ui/runs", get(pages::runs::list))
        .route("/ui/runs/{id}", get(pages::run::show))
        .route("/ui/runs/{id}/events", get(pages::run::events))
        .route(
            "/ui/runs/{id}/approvals/{intent_id}",
            post(pages::approvals::decide),
        )
        .route("/ui/runs/{id}/handoff", post(pages::handoffs::decide))
        .route("/ui/approvals", get(pages::approvals::list))
        .route("/ui/handoffs", get(pages::handoffs::list))
        .route("/ui/breakers", get(pages::breakers::list))
        .route("/ui/stats", get(pages::stats::show))
        .route("/ui/live", get(pages::live::show))
        .route("/ui/gateway", get(pages::gateway::show))
        .route("/ui/config", get(pages::config::show))
        .route("/ui/assets/{name}", get(asset))
        .layer(axum::middleware::map_response(security_headers))
        .layer(axum::middleware::from_fn_with_state(
            ui.clone(),
            record_tenant,
        ))
        .with_state(ui)
}

/// Names the signed-in session's tenant in the request's access line, as
/// [`crate::http::auth`] does for a key.
async fn record_tenant(
    axum::extract::State(ui): axum::extract::State<Ui>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    if let Some(slot) = request
        .extensions()
        .get::<crate::http::access::TenantSlot>()
        && let Some((_, session)) = ui.session(request.headers())
        && let Some(who) = &session.who
    {
        slot.set(&who.tenant);
    }
    next.run(request).await
}

async fn index() -> Response {
    see_other("/ui/runs")
}

/// The headers every dashboard answer carries.
async fn security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

/// The stylesheet.
const CSS: &str = include_str!("assets/app.css");
/// The script: local times and the live timeline.
const JS: &str = include_str!("assets/app.js");
/// The tab's icon.
const ICON: &str = include_str!("assets/favicon.svg");

/// An embedded asset. Their URLs carry the crate's version
/// ([`pages::ASSET_VERSION`]), so an upgrade is fetched at once.
async fn asset(crate::http::extract::Segment(name): crate::http::extract::Segment) -> Response {
    let (body, content_type) = match name.as_str() {
        "app.css" => (CSS, "text/css; charset=utf-8"),
        "app.js" => (JS, "text/javascript; charset=utf-8"),
        "favicon.svg" => (ICON, "image/svg+xml"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "public, max-age=86400"),
        ],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_form_sends_back_only_to_a_dashboard_path() {
        assert_eq!(back_to(Some("/ui/runs/r-1")), "/ui/runs/r-1");
        for bad in [
            None,
            Some("https://evil.example/"),
            Some("//evil.example/ui/"),
            Some("/ui//evil"),
            Some("/ui/\\evil"),
            Some("/ui/a\r\nSet-Cookie: x"),
            Some("/v1/runs"),
            Some("/ui/login?next=/ui/login"),
        ] {
            assert_eq!(back_to(bad), "/ui/runs", "{bad:?}");
        }
    }
}

//! Signing in with an API key, and out.
//!
//! The form's POST is checked like every other (origin and the token of
//! the sign-in form's own session), so another site cannot sign a browser
//! in under its key either. A successful sign-in replaces that session
//! with a new id: an id seen before sign-in is never a signed-in one.

use std::time::Instant;

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::{Nav, page, respond};
use crate::http::auth::Caller;
use crate::http::problem::Problem;
use crate::ui::csrf::{self, Forgery};
use crate::ui::html::Html;
use crate::ui::session::{self, Session};
use crate::ui::{Ui, back_to, see_other};

/// The sign-in page's query.
#[derive(Debug, Deserialize)]
pub(crate) struct Next {
    next: Option<String>,
}

/// The sign-in form, as sent.
#[derive(Debug, Deserialize)]
pub(crate) struct SignIn {
    csrf: Option<String>,
    key: Option<String>,
    next: Option<String>,
}

/// The sign-out form, as sent.
#[derive(Debug, Deserialize)]
pub(crate) struct SignOut {
    csrf: Option<String>,
}

/// `response` with the cookie of session `id`.
fn with_cookie(mut response: Response, value: &str) -> Response {
    if let Ok(value) = HeaderValue::from_str(value) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    response
}

fn unavailable(e: &impl std::fmt::Display) -> Response {
    tracing::error!("dashboard: cannot open a session: {e}");
    Problem::unavailable("cannot open a session (the server log says why)").into_response()
}

/// `GET /ui/login`: the form; in the open mode (no keys), a session at
/// once.
pub(crate) async fn form(
    State(ui): State<Ui>,
    headers: HeaderMap,
    query: Result<Query<Next>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let next = query.ok().and_then(|Query(q)| q.next);
    let next = back_to(next.as_deref()).to_owned();
    let tls = session::over_tls(&headers);
    if !ui.keyed() {
        let tenant = match rein_core::TenantId::new(rein_core::registry::KEYLESS_TENANT) {
            Ok(tenant) => tenant,
            Err(e) => return unavailable(&e),
        };
        let who = Caller {
            tenant,
            key: None,
            budget: None,
        };
        return match ui.sessions.open(Some(who), Instant::now()) {
            Ok((id, _)) => with_cookie(see_other(&next), &session::set_cookie(&id, tls)),
            Err(e) => unavailable(&e),
        };
    }
    match ui.session(&headers) {
        Some((_, found)) if found.who.is_some() => see_other(&next),
        Some((_, found)) => respond(StatusCode::OK, sign_in_page(&found, &next, None)),
        None => match ui.sessions.open(None, Instant::now()) {
            Ok((id, opened)) => with_cookie(
                respond(StatusCode::OK, sign_in_page(&opened, &next, None)),
                &session::set_cookie(&id, tls),
            ),
            Err(e) => unavailable(&e),
        },
    }
}

fn sign_in_page(form: &Session, next: &str, error: Option<&str>) -> Html {
    let mut body = Html::new();
    if let Some(error) = error {
        body.raw("<p class=\"error\" role=\"alert\" id=\"sign-in-error\">")
            .text(error)
            .raw("</p>");
    }
    body.raw("<form method=\"post\" action=\"/ui/login\" class=\"card narrow\">")
        .raw("<input type=\"hidden\" name=\"csrf\" value=\"")
        .text(&form.csrf)
        .raw("\"><input type=\"hidden\" name=\"next\" value=\"")
        .text(next)
        .raw("\"><label for=\"key\">API key</label>")
        .raw("<input id=\"key\" name=\"key\" type=\"password\" autocomplete=\"current-password\" required autofocus")
        .raw(" aria-describedby=\"key-help\">")
        .raw("<p id=\"key-help\" class=\"help\">One of the keys in <code>[[server.api_keys]]</code>. The dashboard acts as that key's tenant, and records your decisions under the key's name. The key is not kept: the browser gets a session that ends when you sign out, after 12 hours unused, or when the server restarts.</p>")
        .raw("<button type=\"submit\">Sign in</button></form>");
    page("Sign in", None, Nav::None, body)
}

/// `POST /ui/login`: a valid key becomes a new session.
pub(crate) async fn sign_in(
    State(ui): State<Ui>,
    headers: HeaderMap,
    form: Result<Form<SignIn>, FormRejection>,
) -> Response {
    let tls = session::over_tls(&headers);
    let refused = |forgery: Forgery| {
        tracing::warn!(reason = ?forgery, "dashboard: sign-in form refused");
        let problem = Problem::new(
            StatusCode::FORBIDDEN,
            "form-refused",
            "Form refused",
            forgery.detail(),
        );
        super::problem_page(&ui, None, &problem, "/ui/login")
    };
    if let Err(forgery) = csrf::same_origin(&headers) {
        return refused(forgery);
    }
    let Ok(Form(sent)) = form else {
        return refused(Forgery::Token);
    };
    let next = back_to(sent.next.as_deref()).to_owned();
    let Some((old_id, old)) = ui.session(&headers) else {
        // The form's session ended (or cookies are off): a fresh form.
        return match ui.sessions.open(None, Instant::now()) {
            Ok((id, opened)) => with_cookie(
                respond(
                    StatusCode::FORBIDDEN,
                    sign_in_page(
                        &opened,
                        &next,
                        Some(
                            "This sign-in form expired, or the browser does not keep cookies for this site: sign in again.",
                        ),
                    ),
                ),
                &session::set_cookie(&id, tls),
            ),
            Err(e) => unavailable(&e),
        };
    };
    if !csrf::token_matches(&old.csrf, sent.csrf.as_deref()) {
        return refused(Forgery::Token);
    }
    let key = sent.key.as_deref().map(str::trim).unwrap_or_default();
    let Some(spec) = ui.app.settings.tenant_for(key) else {
        // Never the key: why, and that it happened.
        tracing::warn!("dashboard: sign-in failed: the key matches no configured key");
        return respond(
            StatusCode::UNAUTHORIZED,
            sign_in_page(
                &old,
                &next,
                Some("That key is not one of this server's API keys."),
            ),
        );
    };
    let who = Caller {
        tenant: spec.tenant.clone(),
        key: Some(spec.label()),
        budget: Some(spec.budget),
    };
    ui.sessions.close(&old_id);
    match ui.sessions.open(Some(who), Instant::now()) {
        Ok((id, _)) => {
            tracing::info!(key = %spec.label(), tenant = %spec.tenant, "dashboard: signed in");
            with_cookie(see_other(&next), &session::set_cookie(&id, tls))
        }
        Err(e) => unavailable(&e),
    }
}

/// `POST /ui/logout`: the session ends.
pub(crate) async fn sign_out(
    State(ui): State<Ui>,
    headers: HeaderMap,
    form: Result<Form<SignOut>, FormRejection>,
) -> Response {
    let tls = session::over_tls(&headers);
    let sent = form.ok().and_then(|Form(f)| f.csrf);
    if csrf::same_origin(&headers).is_err() {
        return see_other("/ui/runs");
    }
    if let Some((id, found)) = ui.session(&headers)
        && csrf::token_matches(&found.csrf, sent.as_deref())
    {
        ui.sessions.close(&id);
        return with_cookie(see_other("/ui/login"), &session::clear_cookie(tls));
    }
    see_other("/ui/runs")
}

//! The dashboard's pages: each module reads through the API's own
//! functions and writes HTML with [`Html`].

pub(crate) mod approvals;
pub(crate) mod breakers;
pub(crate) mod config;
pub(crate) mod gateway;
pub(crate) mod handoffs;
pub(crate) mod live;
pub(crate) mod login;
pub(crate) mod run;
pub(crate) mod runs;
pub(crate) mod stats;

use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::csrf::{self, Forgery};
use super::html::{Html, pct};
use super::{Signed, Ui};
use crate::http::problem::Problem;

/// The version in the assets' URLs.
pub(crate) const ASSET_VERSION: &str = env!("CARGO_PKG_VERSION");

/// The navigation's entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Runs,
    Approvals,
    Handoffs,
    Breakers,
    Live,
    Stats,
    Gateway,
    Config,
    None,
}

/// A whole page: `title`, the navigation (and the sign-out form) for a
/// signed-in `signed`, and `body`.
pub(crate) fn page(title: &str, signed: Option<(&Ui, &Signed)>, nav: Nav, body: Html) -> Html {
    let mut h = Html::new();
    h.raw("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">")
        .raw("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">")
        .raw("<title>")
        .text(title)
        .raw(" · rein</title><link rel=\"stylesheet\" href=\"/ui/assets/app.css?v=")
        .text(ASSET_VERSION)
        .raw("\"><script src=\"/ui/assets/app.js?v=")
        .text(ASSET_VERSION)
        .raw("\" defer></script><link rel=\"icon\" href=\"/ui/assets/favicon.svg\"></head><body>")
        .raw("<a class=\"skip\" href=\"#main\">Skip to content</a><header class=\"top\"><span class=\"brand\">rein</span>");
    if let Some((ui, signed)) = signed {
        h.raw("<nav aria-label=\"Dashboard\"><ul>");
        for (entry, href, label) in [
            (Nav::Runs, "/ui/runs", "Runs"),
            (Nav::Approvals, "/ui/approvals", "Approvals waiting"),
            (Nav::Handoffs, "/ui/handoffs", "Handoffs waiting"),
            (Nav::Breakers, "/ui/breakers", "Breakers"),
            (Nav::Live, "/ui/live", "In flight"),
            (Nav::Stats, "/ui/stats", "Outcomes and spend"),
            (Nav::Gateway, "/ui/gateway", "Gateway"),
            (Nav::Config, "/ui/config", "Config"),
        ] {
            h.raw("<li><a href=\"").raw(href).raw("\"");
            if entry == nav {
                h.raw(" aria-current=\"page\"");
            }
            h.raw(">").raw(label).raw("</a></li>");
        }
        h.raw("</ul></nav><div class=\"who\">");
        match &signed.caller.key {
            Some(key) => {
                h.raw("Signed in as <strong>")
                    .text(key)
                    .raw("</strong> (tenant ")
                    .text(signed.caller.tenant.as_str())
                    .raw(")");
            }
            None => {
                h.raw("Open mode: no API keys configured (tenant ")
                    .text(signed.caller.tenant.as_str())
                    .raw(")");
            }
        }
        if ui.keyed() {
            h.raw("<form method=\"post\" action=\"/ui/logout\" class=\"inline\">")
                .html(csrf_field(signed))
                .raw("<button type=\"submit\">Sign out</button></form>");
        }
        h.raw("</div>");
    }
    h.raw("</header><main id=\"main\" tabindex=\"-1\"><h1>")
        .text(title)
        .raw("</h1>")
        .html(body)
        .raw("</main></body></html>\n");
    h
}

/// The hidden field with the session's CSRF token.
pub(crate) fn csrf_field(signed: &Signed) -> Html {
    let mut h = Html::new();
    h.raw("<input type=\"hidden\" name=\"csrf\" value=\"")
        .text(&signed.session.csrf)
        .raw("\">");
    h
}

/// An HTML answer.
pub(crate) fn respond(status: StatusCode, page: Html) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        page.into_string(),
    )
        .into_response()
}

/// The page of a refused or failed request: what the API said, and the
/// way back.
pub(crate) fn problem_page(
    ui: &Ui,
    signed: Option<&Signed>,
    problem: &Problem,
    back: &str,
) -> Response {
    let status = StatusCode::from_u16(problem.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut body = Html::new();
    body.raw("<p class=\"error\" role=\"alert\">")
        .text(&problem.detail)
        .raw("</p><p><a href=\"")
        .text(back)
        .raw("\">Back</a></p>");
    respond(
        status,
        page(&problem.title, signed.map(|s| (ui, s)), Nav::None, body),
    )
}

/// Checks a form POST of a signed-in session: sent from this dashboard's
/// pages, with the session's token. The refusal page otherwise, logged
/// (never the token).
pub(crate) fn check_post(
    ui: &Ui,
    headers: &HeaderMap,
    uri: &axum::http::Uri,
    sent_token: Option<&str>,
) -> Result<Signed, Box<Response>> {
    let refuse = |signed: Option<&Signed>, forgery: Forgery| {
        tracing::warn!(path = %uri.path(), reason = ?forgery, "dashboard: form refused, nothing changed");
        let problem = Problem::new(
            StatusCode::FORBIDDEN,
            "form-refused",
            "Form refused",
            forgery.detail(),
        );
        Box::new(problem_page(ui, signed, &problem, "/ui/runs"))
    };
    if let Err(forgery) = csrf::same_origin(headers) {
        return Err(refuse(None, forgery));
    }
    // Signed out (the session expired while the page was open): sign in
    // again, then back to the runs, not to this POST's address.
    let Ok(signed) = ui.signed_in(headers, uri) else {
        return Err(Box::new(super::sign_in_then("/ui/runs")));
    };
    if !csrf::token_matches(&signed.session.csrf, sent_token) {
        return Err(refuse(Some(&signed), Forgery::Token));
    }
    Ok(signed)
}

/// The value of query parameter `name`, when given and not empty: a form's
/// empty field (a select's "any") is no filter.
pub(crate) fn query_value(pairs: &[(String, String)], name: &str) -> Option<String> {
    pairs
        .iter()
        .find(|(n, v)| n == name && !v.is_empty())
        .map(|(_, v)| v.clone())
}

/// The labelled `agent` select of a filter form: "any", then the
/// registry's agents, `chosen` selected.
pub(crate) fn agent_select(ui: &Ui, chosen: Option<&str>) -> Html {
    let mut h = Html::new();
    h.raw("<label for=\"agent\">Agent</label><select id=\"agent\" name=\"agent\"><option value=\"\">any</option>");
    for name in ui.app.registry.agents().keys() {
        h.raw("<option value=\"").text(name).raw("\"");
        if chosen == Some(name.as_str()) {
            h.raw(" selected");
        }
        h.raw(">").text(name).raw("</option>");
    }
    h.raw("</select>");
    h
}

/// A link to run `id`'s page.
pub(crate) fn run_link(id: &str) -> Html {
    let mut h = Html::new();
    h.raw("<a class=\"mono\" href=\"/ui/runs/")
        .text(&pct(id))
        .raw("\">")
        .text(id)
        .raw("</a>");
    h
}

/// A run status as a badge (its text is the status: colour is not the
/// only cue).
pub(crate) fn status_badge(status: &str) -> Html {
    let class = match status {
        "succeeded" => "ok",
        "partial_success" | "budget_exhausted" | "awaiting_approval" => "warn",
        "failed" | "cancelled" | "handed_off" => "bad",
        _ => "live",
    };
    let mut h = Html::new();
    h.raw("<span class=\"badge ")
        .raw(class)
        .raw("\">")
        .text(status)
        .raw("</span>");
    h
}

/// The name a value serializes to (a serde `snake_case` enum).
pub(crate) fn name_of<T: serde::Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// JSON for a `<pre>`: pretty, cut at `max` characters.
pub(crate) fn json_block(value: &serde_json::Value, max: usize) -> Html {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    let mut h = Html::new();
    h.raw("<pre class=\"json\">");
    if text.chars().count() > max {
        let cut: String = text.chars().take(max).collect();
        h.text(&cut).raw("\n…");
    } else {
        h.text(&text);
    }
    h.raw("</pre>");
    h
}

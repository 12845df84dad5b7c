//! `GET /ui/breakers`: this process's breaker arms and the openings shared
//! through the store, as `GET /v1/breakers` answers them
//! ([`crate::api::breakers::list_breakers`]).

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use super::{Nav, page, problem_page, respond};
use crate::http::auth::Tenant;
use crate::ui::Ui;
use crate::ui::html::{Html, duration};

/// The page.
pub(crate) async fn list(State(ui): State<Ui>, headers: HeaderMap, uri: Uri) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        Err(to_sign_in) => return *to_sign_in,
    };
    let listed = match crate::api::breakers::list_breakers(
        State(ui.app.clone()),
        Tenant(signed.caller.tenant.clone()),
    )
    .await
    {
        Ok(axum::Json(listed)) => listed,
        Err(problem) => return problem_page(&ui, Some(&signed), &problem, "/ui/runs"),
    };
    let mut body = Html::new();
    body.raw("<p>Breakers are per process: these are the arms of node <code>")
        .text(&listed.node)
        .raw("</code> (the one answering), and the openings any node published through the store.</p>")
        .raw("<section aria-labelledby=\"arms-h\"><h2 id=\"arms-h\">Arms of this process</h2>");
    if listed.arms.is_empty() {
        body.raw("<p class=\"empty\">No arm yet: an arm appears with the first call this process makes to a provider, tool or resource group. Run an agent to see them.</p>");
    } else {
        body.raw("<table id=\"arms\"><thead><tr><th scope=\"col\">Kind</th><th scope=\"col\">Name</th><th scope=\"col\">State</th>")
            .raw("<th scope=\"col\">Since</th><th scope=\"col\">Next probe</th><th scope=\"col\" class=\"n\">Consecutive failures</th></tr></thead><tbody>");
        for arm in &listed.arms {
            body.raw("<tr><td>")
                .text(&arm.kind)
                .raw("</td><td><code>")
                .text(&arm.name)
                .raw("</code></td><td><span class=\"badge ")
                .raw(match arm.state.as_str() {
                    "closed" => "ok",
                    "half_open" => "warn",
                    _ => "bad",
                })
                .raw("\">")
                .text(&arm.state)
                .raw("</span></td><td>");
            match arm.since_ms {
                Some(since) => {
                    body.time(since);
                }
                None => {
                    body.raw("<span class=\"muted\">closed: no opening</span>");
                }
            }
            body.raw("</td><td>");
            match arm.retry_after_ms {
                Some(0) => {
                    body.raw("the next call probes");
                }
                Some(ms) => {
                    body.raw("in ").text(&duration(ms));
                }
                None => {
                    body.raw("<span class=\"muted\">not open</span>");
                }
            }
            body.raw("</td><td class=\"n\">");
            match arm.consecutive_failures {
                Some(n) => {
                    body.num(n);
                }
                None => {
                    body.raw("<span class=\"muted\">not counted while open</span>");
                }
            }
            body.raw("</td></tr>");
        }
        body.raw("</tbody></table>");
    }
    body.raw("</section><section aria-labelledby=\"shared-h\"><h2 id=\"shared-h\">Openings shared through the store</h2>");
    if listed.shared.is_empty() {
        body.raw("<p class=\"empty\">None in force: no node has a provider's arm open.</p>");
    } else {
        body.raw("<table id=\"shared\"><thead><tr><th scope=\"col\">Arm</th><th scope=\"col\">Refused until</th>")
            .raw("<th scope=\"col\">Opened by node</th><th scope=\"col\">Why</th><th scope=\"col\">Published</th></tr></thead><tbody>");
        for opening in &listed.shared {
            body.raw("<tr><td><code>")
                .text(&opening.arm)
                .raw("</code></td><td>")
                .time(opening.open_until_ms)
                .raw("</td><td><code>")
                .text(&opening.opened_by)
                .raw("</code></td><td>")
                .text(&opening.reason)
                .raw("</td><td>")
                .time(opening.updated_at_ms)
                .raw("</td></tr>");
        }
        body.raw("</tbody></table>");
    }
    body.raw("</section>");
    respond(
        StatusCode::OK,
        page("Breakers", Some((&ui, &signed)), Nav::Breakers, body),
    )
}

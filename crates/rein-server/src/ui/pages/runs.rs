//! `GET /ui/runs`: the signed-in tenant's runs, newest first, filtered by
//! status and agent, a cursor page at a time, as `GET /v1/runs` pages
//! them ([`crate::listing::parse`] reads the same parameters).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use rein_store::{RunCursor, RunRecord};

use super::{Nav, page, problem_page, respond, run_link, status_badge};
use crate::problem::Problem;
use crate::ui::html::{Html, duration, pct};
use crate::ui::{Ui, see_other};

/// The statuses a listing filters by, in the order a run passes them.
const STATUSES: [&str; 9] = [
    "queued",
    "running",
    "awaiting_approval",
    "succeeded",
    "partial_success",
    "failed",
    "budget_exhausted",
    "cancelled",
    "handed_off",
];

/// The page.
pub(crate) async fn list(
    State(ui): State<Ui>,
    headers: HeaderMap,
    uri: Uri,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        Err(to_sign_in) => return *to_sign_in,
    };
    let pairs = query.map(|Query(p)| p).unwrap_or_default();
    let value = |name: &str| {
        pairs
            .iter()
            .find(|(n, v)| n == name && !v.is_empty())
            .map(|(_, v)| v.clone())
    };
    let tenant = signed.caller.tenant.clone();
    let mut notice = None;
    if let Some(id) = value("id") {
        let id = id.trim().to_owned();
        match crate::runs::owned(&ui.app, &tenant, &id).await {
            Ok(_) => return see_other(&format!("/ui/runs/{}", pct(&id))),
            Err(_) => notice = Some(id),
        }
    }
    // The API's parameters, as a form sends them (an empty select is "any").
    let api: Vec<(String, String)> = pairs
        .iter()
        .filter(|(n, v)| matches!(n.as_str(), "status" | "agent" | "cursor") && !v.is_empty())
        .cloned()
        .collect();
    let listing = match crate::listing::parse(&api) {
        Ok(listing) => listing,
        Err(problem) => return problem_page(&ui, Some(&signed), &problem, "/ui/runs"),
    };
    let filter = listing.filter.of_tenant(tenant);
    let runs = match ui
        .app
        .store
        .list_runs_page(&filter, listing.cursor.as_ref(), listing.limit)
        .await
    {
        Ok(runs) => runs,
        Err(e) => {
            return problem_page(&ui, Some(&signed), &Problem::from(e), "/ui/runs");
        }
    };
    let (status, agent) = (value("status"), value("agent"));
    let mut body = Html::new();
    if let Some(id) = &notice {
        body.raw("<p class=\"error\" role=\"alert\">There is no run <code>")
            .text(id)
            .raw("</code> for your tenant. Check the id (the API's <code>run_id</code>).</p>");
    }
    body.html(filters(&ui, status.as_deref(), agent.as_deref()));
    if runs.runs.is_empty() {
        body.raw("<p class=\"empty\">");
        if status.is_some() || agent.is_some() || listing.cursor.is_some() {
            body.raw("No runs match these filters. <a href=\"/ui/runs\">Show all runs</a>.");
        } else {
            body.raw("No runs yet. Start one with <code>POST /v1/agents/&lt;agent&gt;/runs</code> (see <a href=\"/openapi.json\">/openapi.json</a>), or <code>rein run</code>; it will be listed here.");
        }
        body.raw("</p>");
    } else {
        body.html(table(&runs.runs));
    }
    body.raw("<nav class=\"pager\" aria-label=\"Pages\">");
    if listing.cursor.is_some() {
        body.raw("<a href=\"")
            .text(&href(status.as_deref(), agent.as_deref(), None))
            .raw("\">Newest runs</a>");
    }
    if let Some(next) = runs.next.as_ref().map(RunCursor::to_token) {
        body.raw("<a rel=\"next\" href=\"")
            .text(&href(status.as_deref(), agent.as_deref(), Some(&next)))
            .raw("\">Older runs →</a>");
    }
    body.raw("</nav>");
    respond(
        StatusCode::OK,
        page("Runs", Some((&ui, &signed)), Nav::Runs, body),
    )
}

fn href(status: Option<&str>, agent: Option<&str>, cursor: Option<&str>) -> String {
    let mut query = Vec::new();
    for (name, value) in [("status", status), ("agent", agent), ("cursor", cursor)] {
        if let Some(value) = value {
            query.push(format!("{name}={}", pct(value)));
        }
    }
    if query.is_empty() {
        "/ui/runs".to_owned()
    } else {
        format!("/ui/runs?{}", query.join("&"))
    }
}

fn filters(ui: &Ui, status: Option<&str>, agent: Option<&str>) -> Html {
    let mut h = Html::new();
    h.raw("<div class=\"toolbar\"><form method=\"get\" action=\"/ui/runs\" class=\"filters\">")
        .raw("<label for=\"status\">Status</label><select id=\"status\" name=\"status\"><option value=\"\">any</option>");
    for name in STATUSES {
        h.raw("<option value=\"").raw(name).raw("\"");
        if status == Some(name) {
            h.raw(" selected");
        }
        h.raw(">").raw(name).raw("</option>");
    }
    h.raw("</select><label for=\"agent\">Agent</label><select id=\"agent\" name=\"agent\"><option value=\"\">any</option>");
    for name in ui.app.registry.agents().keys() {
        h.raw("<option value=\"").text(name).raw("\"");
        if agent == Some(name.as_str()) {
            h.raw(" selected");
        }
        h.raw(">").text(name).raw("</option>");
    }
    h.raw("</select><button type=\"submit\">Filter</button></form>")
        .raw("<form method=\"get\" action=\"/ui/runs\" class=\"search\" role=\"search\">")
        .raw("<label for=\"run-id\">Run id</label><input id=\"run-id\" name=\"id\" type=\"search\" placeholder=\"0190…\" required>")
        .raw("<button type=\"submit\">Open run</button></form></div>");
    h
}

fn table(runs: &[RunRecord]) -> Html {
    let mut h = Html::new();
    h.raw("<table class=\"runs\"><caption class=\"sr-only\">Runs, newest first</caption><thead><tr>")
        .raw("<th scope=\"col\">Run</th><th scope=\"col\">Agent</th><th scope=\"col\">Status</th>")
        .raw("<th scope=\"col\">Created</th><th scope=\"col\" class=\"n\">Duration</th><th scope=\"col\" class=\"n\">Steps</th>")
        .raw("<th scope=\"col\" class=\"n\">Tokens</th><th scope=\"col\" class=\"n\">Cost (USD)</th></tr></thead><tbody>");
    for run in runs {
        let id = run.run_id.to_string();
        h.raw("<tr data-run=\"")
            .text(&id)
            .raw("\"><td>")
            .html(run_link(&id))
            .raw("</td><td>")
            .text(&run.agent)
            .raw("</td><td>")
            .html(status_badge(run.status.as_str()))
            .raw("</td><td>")
            .time(run.created_at_ms.as_millis())
            .raw("</td>");
        match &run.report {
            Some(report) => {
                h.raw("<td class=\"n\">")
                    .text(&duration(report.elapsed_ms))
                    .raw("</td><td class=\"n\">")
                    .num(report.steps)
                    .raw("</td><td class=\"n\">")
                    .num(report.consumed.tokens)
                    .raw("</td><td class=\"n\">")
                    .text(&report.consumed.cost.to_string())
                    .raw("</td>");
            }
            None => {
                h.raw("<td class=\"n\" colspan=\"4\"><span class=\"muted\">not ended: no report yet</span></td>");
            }
        }
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
    h
}

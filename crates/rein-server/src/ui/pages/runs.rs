//! `GET /ui/runs`: the signed-in tenant's runs, newest first, filtered by
//! status and agent, a cursor page at a time, as `GET /v1/runs` pages
//! them ([`crate::api::listing::parse`] reads the same parameters).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use rein_store::{RunCursor, RunRecord};

use super::{Nav, agent_select, page, problem_page, query_value, respond, run_link, status_badge};
use crate::http::problem::Problem;
use crate::ui::html::{Html, duration, pct, utc_day_ms};
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
    let value = |name: &str| query_value(&pairs, name);
    let tenant = signed.caller.tenant.clone();
    let mut notice = None;
    if let Some(id) = value("id") {
        let id = id.trim().to_owned();
        match crate::api::runs::owned(&ui.app, &tenant, &id).await {
            Ok(_) => return see_other(&format!("/ui/runs/{}", pct(&id))),
            Err(_) => notice = Some(id),
        }
    }
    // The API's parameters, as a form sends them (an empty select is "any").
    let mut api: Vec<(String, String)> = pairs
        .iter()
        .filter(|(n, v)| matches!(n.as_str(), "status" | "agent" | "cursor") && !v.is_empty())
        .cloned()
        .collect();
    // Whole UTC days, both included, as the API's exclusive milliseconds.
    let (from, to) = (value("from"), value("to"));
    for (date, name, shift) in [(&from, "created_after", 0), (&to, "created_before", 1)] {
        let Some(date) = date else { continue };
        let Some(day) = utc_day_ms(date) else {
            let problem = Problem::bad_request(format!(
                "{date:?} is not a date: write it YYYY-MM-DD (a UTC day, from 1970-01-01)"
            ));
            return problem_page(&ui, Some(&signed), &problem, "/ui/runs");
        };
        // The last day the API can name ends at its bound.
        let ms = if shift == 0 {
            day.saturating_sub(1)
        } else {
            day.saturating_add(86_400_000)
        }
        .min(crate::api::listing::MAX_CREATED_MS);
        api.push((name.to_owned(), ms.to_string()));
    }
    let listing = match crate::api::listing::parse(&api) {
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
    let filter_by = Filters {
        status: value("status"),
        agent: value("agent"),
        from,
        to,
    };
    let mut body = Html::new();
    if let Some(id) = &notice {
        body.raw("<p class=\"error\" role=\"alert\">There is no run <code>")
            .text(id)
            .raw("</code> for your tenant. Check the id (the API's <code>run_id</code>).</p>");
    }
    body.html(filters(&ui, &filter_by));
    if runs.runs.is_empty() {
        body.raw("<p class=\"empty\">");
        if filter_by.any() || listing.cursor.is_some() {
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
            .text(&filter_by.href(None))
            .raw("\">Newest runs</a>");
    }
    if let Some(next) = runs.next.as_ref().map(RunCursor::to_token) {
        body.raw("<a rel=\"next\" href=\"")
            .text(&filter_by.href(Some(&next)))
            .raw("\">Older runs →</a>");
    }
    body.raw("</nav>");
    respond(
        StatusCode::OK,
        page("Runs", Some((&ui, &signed)), Nav::Runs, body),
    )
}

/// The filters a page was asked for, as the form names them.
struct Filters {
    status: Option<String>,
    agent: Option<String>,
    from: Option<String>,
    to: Option<String>,
}

impl Filters {
    fn any(&self) -> bool {
        self.status.is_some() || self.agent.is_some() || self.from.is_some() || self.to.is_some()
    }

    /// This listing's address, from `cursor` on.
    fn href(&self, cursor: Option<&str>) -> String {
        let mut query = Vec::new();
        for (name, value) in [
            ("status", self.status.as_deref()),
            ("agent", self.agent.as_deref()),
            ("from", self.from.as_deref()),
            ("to", self.to.as_deref()),
            ("cursor", cursor),
        ] {
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
}

fn filters(ui: &Ui, asked: &Filters) -> Html {
    let (status, agent) = (asked.status.as_deref(), asked.agent.as_deref());
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
    h.raw("</select>")
        .html(agent_select(ui, agent))
        .raw("<label for=\"from\">Created from (UTC day)</label><input id=\"from\" name=\"from\" type=\"date\" value=\"")
        .text(asked.from.as_deref().unwrap_or_default())
        .raw("\"><label for=\"to\">to (UTC day, included)</label><input id=\"to\" name=\"to\" type=\"date\" value=\"")
        .text(asked.to.as_deref().unwrap_or_default())
        .raw("\"><button type=\"submit\">Filter</button></form>")
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

//! `GET /ui/runs/{id}`: one run — what it is, the calls waiting for a
//! decision, its handoff package, report, ledger and timeline — and
//! `GET /ui/runs/{id}/events`, the run's event stream for the page's
//! script.

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use rein_core::{Event, LedgerRecord, RunReport};
use rein_store::{ApprovalFilter, RunRecord};

use super::approvals::approval_card;
use super::handoffs::package;
use super::{Nav, name_of, page, problem_page, respond, run_link, status_badge};
use crate::http::auth::Tenant;
use crate::http::extract::Segment;
use crate::http::problem::Problem;
use crate::ui::html::{Html, duration, pct};
use crate::ui::{Signed, Ui};

/// The most events the page lists (the newest); the API pages the rest.
const MAX_EVENTS_SHOWN: usize = 1000;

/// The page.
pub(crate) async fn show(
    State(ui): State<Ui>,
    headers: HeaderMap,
    uri: Uri,
    Segment(id): Segment,
) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        Err(to_sign_in) => return *to_sign_in,
    };
    match read(&ui, &signed, &id).await {
        Ok(body) => respond(
            StatusCode::OK,
            page(&format!("Run {id}"), Some((&ui, &signed)), Nav::Runs, body),
        ),
        Err(problem) => problem_page(&ui, Some(&signed), &problem, "/ui/runs"),
    }
}

async fn read(ui: &Ui, signed: &Signed, id: &str) -> Result<Html, Problem> {
    let app = &ui.app;
    let tenant = &signed.caller.tenant;
    let record = crate::api::runs::owned(app, tenant, id).await?;
    let run_id = record.run_id.clone();
    let children = app.store.children_of(&run_id).await?;
    let ledger = app.store.ledger(&run_id).await?;
    let events = app.store.events(&run_id, 0).await?;
    let approvals = app
        .store
        .approvals(&ApprovalFilter {
            run_id: Some(run_id.clone()),
            tenant: Some(tenant.clone()),
            pending: true,
            limit: rein_store::approval::MAX_APPROVALS_PAGE,
            ..ApprovalFilter::default()
        })
        .await?;
    // The API's own answer: the package as the ledger stands now.
    let handoff = match crate::api::runs::get_handoff(
        State(app.clone()),
        Tenant(tenant.clone()),
        Segment(id.to_owned()),
    )
    .await
    {
        Ok(axum::Json(package)) => Some(package),
        Err(_) => None,
    };
    let back = format!("/ui/runs/{}", pct(id));
    let mut h = Html::new();
    h.html(summary(&record, &children));
    h.raw("<section aria-labelledby=\"approvals-h\"><h2 id=\"approvals-h\">Calls waiting for approval</h2>");
    if approvals.is_empty() {
        h.raw("<p class=\"empty\">None: no call of this run waits for a human's approval.</p>");
    } else {
        for approval in &approvals {
            h.html(approval_card(signed, approval, &back, false));
        }
    }
    h.raw("</section>");
    if let Some(handoff) = handoff.filter(|p| !p.awaiting_decision.is_empty()) {
        h.html(package(signed, &handoff, &back));
    }
    if let Some(report) = &record.report {
        h.html(report_section(report));
    }
    h.html(ledger_section(&ledger));
    h.html(timeline(&record, &events));
    Ok(h)
}

fn summary(record: &RunRecord, children: &[RunRecord]) -> Html {
    let mut h = Html::new();
    h.raw("<dl class=\"facts\"><dt>Status</dt><dd id=\"run-status\">")
        .html(status_badge(record.status.as_str()))
        .raw("</dd><dt>Agent</dt><dd>")
        .text(&record.agent)
        .raw("</dd><dt>Created</dt><dd>")
        .time(record.created_at_ms.as_millis())
        .raw("</dd><dt>Last change</dt><dd>")
        .time(record.updated_at_ms.as_millis())
        .raw("</dd>");
    if let Some(parent) = &record.parent_run_id {
        h.raw("<dt>Parent run</dt><dd>")
            .html(run_link(parent.as_str()))
            .raw("</dd>");
    }
    if !children.is_empty() {
        h.raw("<dt>Child runs</dt><dd><ul class=\"plain\">");
        for child in children {
            h.raw("<li>")
                .html(run_link(child.run_id.as_str()))
                .raw(" ")
                .html(status_badge(child.status.as_str()))
                .raw("</li>");
        }
        h.raw("</ul></dd>");
    }
    // The trace its spans are in: its first drive's, or the caller's it
    // was created under (none when traces are off and no caller sent one).
    if let Some(span) = record.first_span.as_ref().or(record.trace_parent.as_ref()) {
        h.raw("<dt>Trace id</dt><dd><code id=\"trace-id\">")
            .text(span.trace_id())
            .raw("</code></dd>");
    }
    h.raw("<dt>Task</dt><dd class=\"task\">")
        .text(&record.input)
        .raw("</dd></dl>");
    h
}

fn report_section(report: &RunReport) -> Html {
    let mut h = Html::new();
    h.raw(
        "<section aria-labelledby=\"report-h\"><h2 id=\"report-h\">Report</h2><dl class=\"facts\">",
    )
    .raw("<dt>Outcome</dt><dd>")
    .html(status_badge(report.outcome.as_str()))
    .raw("</dd><dt>Summary</dt><dd>")
    .text(&report.summary)
    .raw("</dd><dt>Recommendation</dt><dd>")
    .text(&report.recommendation)
    .raw("</dd>");
    if let Some(answer) = &report.answer {
        h.raw("<dt>Answer</dt><dd class=\"task\">")
            .text(answer)
            .raw("</dd>");
    }
    h.raw("<dt>Duration</dt><dd>")
        .text(&duration(report.elapsed_ms))
        .raw("</dd><dt>Steps</dt><dd>")
        .num(report.steps)
        .raw(" model turns</dd><dt>Tokens</dt><dd>")
        .num(report.consumed.tokens)
        .raw(" tokens</dd><dt>Cost</dt><dd>")
        .text(&report.consumed.cost.to_string())
        .raw(" (USD)</dd><dt>Recoverable</dt><dd>")
        .raw(if report.recoverable { "yes" } else { "no" })
        .raw("</dd>");
    if !report.models.is_empty() {
        h.raw("<dt>Models</dt><dd>")
            .text(&report.models.join(", "))
            .raw("</dd>");
    }
    h.raw("</dl>");
    if !report.completed.is_empty() {
        h.raw("<h3>Completed</h3><ul>");
        for done in &report.completed {
            h.raw("<li><code>")
                .text(&done.tool)
                .raw("</code> <span class=\"mono muted\">")
                .text(done.intent_id.as_str())
                .raw("</span></li>");
        }
        h.raw("</ul>");
    }
    if !report.incomplete.is_empty() {
        h.raw("<h3>Not completed</h3><ul>");
        for missed in &report.incomplete {
            h.raw("<li><code>")
                .text(&missed.tool)
                .raw("</code> (")
                .text(&name_of(&missed.category))
                .raw("): ")
                .text(&missed.reason)
                .raw(if missed.maybe_applied {
                    " <strong>may have been applied</strong>"
                } else {
                    ""
                })
                .raw("</li>");
        }
        h.raw("</ul>");
    }
    h.raw("</section>");
    h
}

fn ledger_section(ledger: &[LedgerRecord]) -> Html {
    let mut h = Html::new();
    h.raw("<section aria-labelledby=\"ledger-h\"><h2 id=\"ledger-h\">Side-effect ledger</h2>");
    if ledger.is_empty() {
        h.raw("<p class=\"empty\">No tool call recorded yet: the ledger lists each call the run plans, with its status, as it happens.</p></section>");
        return h;
    }
    h.raw("<table id=\"ledger\"><thead><tr><th scope=\"col\" class=\"n\">#</th><th scope=\"col\">Step</th><th scope=\"col\">Tool</th>")
        .raw("<th scope=\"col\">Class</th><th scope=\"col\">Status</th><th scope=\"col\" class=\"n\">Attempts</th>")
        .raw("<th scope=\"col\">Updated</th><th scope=\"col\">Intent</th></tr></thead><tbody>");
    for record in ledger {
        let status = record.status.as_str();
        h.raw("<tr data-status=\"")
            .text(status)
            .raw("\"><td class=\"n\">")
            .num(record.seq)
            .raw("</td><td>")
            .num(record.step)
            .raw("</td><td><code>")
            .text(&record.tool)
            .raw("</code></td><td>")
            .text(&name_of(&record.class))
            .raw("</td><td><span class=\"status\">")
            .text(status)
            .raw("</span>");
        if let Some(failure) = &record.failure {
            h.raw("<div class=\"muted\">")
                .text(failure.human_message())
                .raw("</div>");
        }
        h.raw("</td><td class=\"n\">")
            .num(record.attempts)
            .raw("</td><td>")
            .time(record.updated_at_ms.as_millis())
            .raw("</td><td class=\"mono\">")
            .text(record.intent_id.as_str())
            .raw("</td></tr>");
    }
    h.raw("</tbody></table></section>");
    h
}

/// One timeline row; NOTE: `assets/app.js` (`row`) writes the same cells
/// for a live event.
fn event_row(event: &Event) -> Html {
    let data = serde_json::to_value(event)
        .ok()
        .and_then(|mut v| v.get_mut("data").map(serde_json::Value::take))
        .unwrap_or_default();
    let mut detail = data.to_string();
    if detail.chars().count() > 240 {
        detail = detail.chars().take(240).collect::<String>() + "…";
    }
    let kind = event.kind().as_str();
    let mut h = Html::new();
    h.raw("<li data-seq=\"")
        .num(event.seq)
        .raw("\" data-kind=\"")
        .raw(kind)
        .raw("\"><span class=\"seq\">")
        .num(event.seq)
        .raw("</span> ")
        .time(event.at_ms.as_millis())
        .raw(" <strong class=\"kind\">")
        .raw(kind)
        .raw("</strong> <span class=\"muted\">step ")
        .num(event.step)
        .raw("</span> <code class=\"detail\">")
        .text(&detail)
        .raw("</code></li>");
    h
}

fn timeline(record: &RunRecord, events: &[Event]) -> Html {
    let last = events.last().map_or(0, |e| e.seq);
    let finished = record.status.is_finished();
    let mut h = Html::new();
    h.raw("<section aria-labelledby=\"timeline-h\"><h2 id=\"timeline-h\">Timeline</h2>");
    if finished {
        h.raw("<p class=\"muted\">The run ended; these are all its events.</p>");
    } else {
        h.raw("<p class=\"muted\" id=\"live-note\" aria-live=\"polite\">The run has not ended: with scripts on, new events appear here as they happen; otherwise reload the page.</p>");
    }
    h.raw("<ol id=\"timeline\" class=\"timeline\" data-after=\"")
        .num(last)
        .raw("\"");
    if !finished {
        h.raw(" data-live=\"/ui/runs/")
            .text(&pct(record.run_id.as_str()))
            .raw("/events\"");
    }
    h.raw(">");
    let skip = events.len().saturating_sub(MAX_EVENTS_SHOWN);
    for event in &events[skip..] {
        h.html(event_row(event));
    }
    h.raw("</ol>");
    if events.is_empty() {
        h.raw(
            "<p class=\"empty\">No events yet: the run is queued and no worker has started it.</p>",
        );
    }
    h.raw("</section>");
    h
}

/// `GET /ui/runs/{id}/events`: the API's live stream of the run's events
/// ([`crate::api::events::get_events`]) for the session's tenant, each as an
/// unnamed message.
///
/// # Why unnamed
///
/// The API names each message after its event's kind, and a browser's
/// `EventSource` has no listener for every name: the script would have to
/// list every kind rein has, and miss the next one added. Each message's
/// data carries its `kind` anyway, so the `event:` lines are dropped.
pub(crate) async fn events(
    State(ui): State<Ui>,
    mut headers: HeaderMap,
    uri: Uri,
    Segment(id): Segment,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        // An `EventSource` stops on a status other than 200.
        Err(_) => return (StatusCode::UNAUTHORIZED, "signed out").into_response(),
    };
    let after = query.ok().and_then(|Query(pairs)| {
        pairs
            .into_iter()
            .find(|(n, _)| n == "after")
            .and_then(|(_, v)| v.parse::<u64>().ok())
    });
    headers.insert(
        header::ACCEPT,
        HeaderValue::from_static("text/event-stream"),
    );
    let answer = crate::api::events::get_events(
        State(ui.app.clone()),
        Tenant(signed.caller.tenant.clone()),
        Segment(id),
        Ok(Query(crate::api::events::EventsQuery { after })),
        headers,
    )
    .await;
    match answer {
        Ok(response) => response.map(|body| {
            Body::from_stream(body.into_data_stream().scan(Vec::new(), |carry, chunk| {
                futures_util::future::ready(Some(chunk.map(|bytes| unnamed(carry, &bytes))))
            }))
        }),
        Err(problem) => problem.into_response(),
    }
}

/// The complete lines of `carry` plus `bytes`, without `event:` lines; an
/// incomplete last line stays in `carry` for the next chunk.
fn unnamed(carry: &mut Vec<u8>, bytes: &[u8]) -> Bytes {
    carry.extend_from_slice(bytes);
    let Some(end) = carry.iter().rposition(|b| *b == b'\n') else {
        return Bytes::new();
    };
    let rest = carry.split_off(end + 1);
    let complete = std::mem::replace(carry, rest);
    let mut out = Vec::with_capacity(complete.len());
    for line in complete.split_inclusive(|b| *b == b'\n') {
        if !line.starts_with(b"event:") {
            out.extend_from_slice(line);
        }
    }
    Bytes::from(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_are_dropped_across_chunk_boundaries() {
        let mut carry = Vec::new();
        let a = unnamed(&mut carry, b"event: run_started\nid: 1\nda");
        let b = unnamed(&mut carry, b"ta: {}\n\n:\n\nevent: x\ndata: 2\n\n");
        let joined = [a.as_ref(), b.as_ref()].concat();
        assert_eq!(
            String::from_utf8(joined).unwrap_or_default(),
            "id: 1\ndata: {}\n\n:\n\ndata: 2\n\n"
        );
        assert!(carry.is_empty());
    }
}

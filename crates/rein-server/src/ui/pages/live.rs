//! `GET /ui/live`: the real-time and capacity layers of the dashboard, as
//! `GET /v1/live` reads them ([`crate::api::live::read`]): the caller's
//! runs running and queued (and how long the queue's head has waited)
//! against its quotas, and this process's run slots, queue workers,
//! connections and concurrency governors, each as its use against its
//! limit.
//!
//! The page's script reads it again every few seconds and replaces the
//! figures in place (`data-refresh`); without the script it is a page to
//! reload.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use super::{Nav, page, problem_page, respond};
use crate::api::live::{GroupLoad, Live};
use crate::ui::Ui;
use crate::ui::html::{Html, duration};

/// How often the page's script reads the figures again, milliseconds.
const REFRESH_MS: &str = "5000";

/// The page.
pub(crate) async fn show(State(ui): State<Ui>, headers: HeaderMap, uri: Uri) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        Err(to_sign_in) => return *to_sign_in,
    };
    let live = match crate::api::live::read(&ui.app, &signed.caller.tenant).await {
        Ok(live) => live,
        Err(problem) => return problem_page(&ui, Some(&signed), &problem, "/ui/runs"),
    };
    respond(
        StatusCode::OK,
        page(
            "In flight and capacity",
            Some((&ui, &signed)),
            Nav::Live,
            render(&live),
        ),
    )
}

/// `used` of `limit` as a labelled `<meter>` and its figures: `3 of 8`.
/// `high` marks the last quarter, so a meter near its limit shows it.
fn meter(label: &'static str, used: u64, limit: Option<u64>) -> Html {
    let mut h = Html::new();
    match limit {
        Some(limit) => {
            let high = limit - limit / 4;
            h.raw("<meter min=\"0\" max=\"")
                .num(limit)
                .raw("\" high=\"")
                .num(high)
                .raw("\" value=\"")
                .num(used.min(limit))
                .raw("\" aria-label=\"")
                .raw(label)
                .raw("\"></meter> ")
                .num(used)
                .raw(" of ")
                .num(limit);
        }
        None => {
            h.num(used).raw(" <span class=\"muted\">(no limit)</span>");
        }
    }
    h
}

/// A row of the capacity table.
fn row(h: &mut Html, what: &'static str, id: &'static str, figures: Html, note: Html) {
    h.raw("<tr data-row=\"")
        .raw(id)
        .raw("\"><th scope=\"row\">")
        .raw(what)
        .raw("</th><td>")
        .html(figures)
        .raw("</td><td class=\"muted\">")
        .html(note)
        .raw("</td></tr>");
}

/// A fragment of static text.
fn note(text: &'static str) -> Html {
    let mut h = Html::new();
    h.raw(text);
    h
}

/// The page's figures.
pub(crate) fn render(live: &Live) -> Html {
    let mut h = Html::new();
    h.raw("<div id=\"live\" data-refresh=\"")
        .raw(REFRESH_MS)
        .raw("\"><p>Read at ")
        .time(live.at_ms)
        .raw(" from node <code>")
        .text(&live.node)
        .raw("</code>. <span id=\"refresh-note\" class=\"muted\">Reload for newer figures.</span></p>");
    if live.process.draining {
        h.raw("<p class=\"error\" role=\"status\">This process is draining: it refuses new work and hands on what it cannot finish.</p>");
    }
    // Real time: the tenant's runs, every process on the store.
    let t = &live.tenant;
    h.raw("<section aria-labelledby=\"now-h\"><h2 id=\"now-h\">Your runs now</h2><table id=\"tenant\"><tbody>");
    row(
        &mut h,
        "Running",
        "running",
        meter("running runs", t.running, t.max_running.map(u64::from)),
        note(
            "root runs of your tenant on every process sharing the store; the limit is [server.quotas] max_running",
        ),
    );
    let mut waited = Html::new();
    match t.oldest_queued_ms {
        Some(ms) => {
            waited
                .raw("the oldest was submitted ")
                .time(ms)
                .raw(", ")
                .text(&duration(live.at_ms.saturating_sub(ms)))
                .raw(" ago");
        }
        None => {
            waited.raw("nothing waits for a queue worker");
        }
    }
    row(
        &mut h,
        "Queued",
        "queued",
        meter("queued runs", t.queued, t.max_queued.map(u64::from)),
        waited,
    );
    h.raw("</tbody></table></section>");
    // Capacity: this process.
    let p = &live.process;
    h.raw("<section aria-labelledby=\"process-h\"><h2 id=\"process-h\">This process</h2><table id=\"process\"><tbody>");
    row(
        &mut h,
        "Runs in flight",
        "in-flight",
        {
            let mut f = Html::new();
            f.num(p.runs_in_flight);
            f
        },
        note("every tenant's runs this process drives, children included"),
    );
    let held = u64::from(p.interactive_held) + u64::from(p.batch_held);
    let mut split = Html::new();
    split
        .num(p.interactive_held)
        .raw(" interactive (sync), ")
        .num(p.batch_held)
        .raw(" batch (queued); ");
    if p.run_slots.is_some() {
        split
            .num(p.interactive_reserve)
            .raw(" kept for interactive runs");
    } else {
        split.raw("set [server.quotas] run_slots to bound them");
    }
    row(
        &mut h,
        "Run slots",
        "slots",
        meter("run slots held", held, p.run_slots.map(u64::from)),
        split,
    );
    let mut workers = Html::new();
    if p.workers_alive < p.workers {
        workers.raw(
            "<span class=\"error\">a queue worker ended: /readyz fails; restart the process</span>",
        );
    } else {
        workers.raw("queue workers looping, of [server.queue] workers");
    }
    row(
        &mut h,
        "Queue workers",
        "workers",
        meter(
            "queue workers alive",
            u64::from(p.workers_alive),
            Some(u64::from(p.workers)),
        ),
        workers,
    );
    row(
        &mut h,
        "Connections",
        "connections",
        meter(
            "connections open",
            p.connections,
            Some(u64::from(p.max_connections)),
        ),
        note("open now, of [server.limits] max_connections"),
    );
    h.raw("</tbody></table></section>")
        .raw("<section aria-labelledby=\"groups-h\"><h2 id=\"groups-h\">Concurrency limits against use</h2>");
    if live.groups.is_empty() {
        h.raw("<p class=\"empty\">No call went through a resource group or provider of this process yet. Run an agent or call the gateway to see them.</p>");
    } else {
        h.raw("<table id=\"groups\"><thead><tr><th scope=\"col\">Kind</th><th scope=\"col\">Name</th>")
            .raw("<th scope=\"col\">In flight, of the limit now</th><th scope=\"col\" class=\"n\">Ceiling</th><th scope=\"col\" class=\"n\">Waiting</th></tr></thead><tbody>");
        for group in &live.groups {
            group_row(&mut h, group);
        }
        h.raw("</tbody></table><p class=\"muted\">Adaptive concurrency moves a group's limit between 1 and its ceiling with the latency and overload it sees; a ceiling shared with other nodes is this node's part.</p>");
    }
    h.raw("</section></div>");
    h
}

fn group_row(h: &mut Html, group: &GroupLoad) {
    h.raw("<tr data-group=\"")
        .text(&group.name)
        .raw("\"><td>")
        .text(&group.kind)
        .raw("</td><td><code>")
        .text(&group.name)
        .raw("</code></td><td>")
        .html(meter(
            "calls in flight",
            u64::from(group.in_flight),
            group.limit.map(u64::from),
        ))
        .raw("</td><td class=\"n\">");
    match group.ceiling {
        Some(ceiling) => {
            h.num(ceiling);
        }
        None => {
            h.raw("<span class=\"muted\">none</span>");
        }
    }
    h.raw("</td><td class=\"n\">")
        .num(group.queued)
        .raw("</td></tr>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::live::{GatewayCounts, ProcessLoad, TenantLoad};

    fn live() -> Live {
        Live {
            node: "n1".into(),
            at_ms: 120_000,
            tenant: TenantLoad {
                running: 3,
                queued: 2,
                oldest_queued_ms: Some(60_000),
                max_running: Some(4),
                max_queued: None,
            },
            process: ProcessLoad {
                runs_in_flight: 5,
                run_slots: Some(8),
                interactive_held: 2,
                batch_held: 3,
                interactive_reserve: 1,
                workers: 4,
                workers_alive: 4,
                connections: 7,
                max_connections: 1024,
                draining: false,
            },
            groups: vec![GroupLoad {
                kind: "resource_group".into(),
                name: "<orders>".into(),
                limit: Some(6),
                ceiling: Some(10),
                in_flight: 6,
                queued: 9,
            }],
            gateway: GatewayCounts::default(),
        }
    }

    #[test]
    fn use_is_shown_against_its_limit_with_how_long_the_queue_waited() {
        let html = render(&live()).into_string();
        assert!(html.contains("max=\"4\" high=\"3\" value=\"3\""), "{html}");
        assert!(html.contains("3 of 4"), "{html}");
        assert!(html.contains("1 min 00 s ago"), "{html}");
        assert!(html.contains("5 of 8"), "slots held: {html}");
        assert!(html.contains("&lt;orders&gt;"), "escaped: {html}");
        assert!(html.contains("6 of 6"), "{html}");
        assert!(html.contains("<td class=\"n\">9</td>"), "{html}");
        assert!(!html.contains("draining"), "{html}");
    }

    #[test]
    fn nothing_called_yet_says_what_to_do_and_no_limit_says_so() {
        let mut live = live();
        live.groups.clear();
        live.tenant.max_running = None;
        live.tenant.oldest_queued_ms = None;
        live.process.draining = true;
        let html = render(&live).into_string();
        assert!(html.contains("No call went through"), "{html}");
        assert!(
            html.contains("3 <span class=\"muted\">(no limit)</span>"),
            "{html}"
        );
        assert!(html.contains("nothing waits"), "{html}");
        assert!(html.contains("This process is draining"), "{html}");
    }
}

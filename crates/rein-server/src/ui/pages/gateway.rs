//! `GET /ui/gateway`: the model gateway at a glance — the caller's calls
//! by model and outcome, the fallbacks and stream recoveries this process
//! made (from `GET /v1/live`'s `gateway`, [`crate::api::live`]), and what
//! each of the tenant's keys spent today by model (from `GET /v1/stats`,
//! [`crate::api::stats::compute`], over today's UTC day).
//!
//! # Why two sources
//!
//! Spend is in the store (every process's, per key, model and day, what a
//! budget is charged against); attempts, fallbacks and recoveries are
//! counters of the process answering, like its breakers. The page says
//! which is which.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use super::stats::spend_table;
use super::{Nav, page, problem_page, respond};
use crate::api::live::GatewayCounts;
use crate::api::stats::Stats;
use crate::http::problem::Problem;
use crate::ui::Ui;
use crate::ui::html::Html;

/// One day, milliseconds.
const DAY_MS: u64 = 24 * 3_600_000;

/// The page.
pub(crate) async fn show(State(ui): State<Ui>, headers: HeaderMap, uri: Uri) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        Err(to_sign_in) => return *to_sign_in,
    };
    let tenant = signed.caller.tenant.clone();
    let live = match crate::api::live::read(&ui.app, &tenant).await {
        Ok(live) => live,
        Err(problem) => return problem_page(&ui, Some(&signed), &problem, "/ui/runs"),
    };
    let now = crate::lifecycle::recovery::now_ms().as_millis();
    let today = vec![
        ("since".to_owned(), (now - now % DAY_MS).to_string()),
        ("until".to_owned(), (now + 1).to_string()),
    ];
    let stats = match crate::api::stats::parse(&today, now) {
        Ok(window) => {
            ui.app.spend.before_read().await;
            crate::api::stats::compute(ui.app.store.as_ref(), Some(tenant), &window)
                .await
                .map_err(Problem::from)
        }
        Err(problem) => Err(problem),
    };
    let stats = match stats {
        Ok(stats) => stats,
        Err(problem) => return problem_page(&ui, Some(&signed), &problem, "/ui/runs"),
    };
    respond(
        StatusCode::OK,
        page(
            "Gateway",
            Some((&ui, &signed)),
            Nav::Gateway,
            render(&live.node, &live.gateway, &stats),
        ),
    )
}

/// The page's sections.
pub(crate) fn render(node: &str, counts: &GatewayCounts, today: &Stats) -> Html {
    let mut h = Html::new();
    h.raw("<section aria-labelledby=\"spend-h\"><h2 id=\"spend-h\">Spend today by API key and model</h2>");
    if today.keys.is_empty() {
        h.raw("<p class=\"empty\">None of your keys spent anything through the gateway today (UTC). Point an OpenAI or Anthropic client at this server's <code>/v1</code> to see it here.</p>");
    } else {
        h.html(spend_table(&today.keys)).raw(
            "<p class=\"muted\">Every process's spend, as budgets are charged: since 00:00 UTC.</p>",
        );
    }
    h.raw("</section><p>The figures below are counters of node <code>")
        .text(node)
        .raw("</code> (the one answering) since it started.</p>")
        .raw("<section aria-labelledby=\"calls-h\"><h2 id=\"calls-h\">Your calls by model and outcome</h2>");
    if counts.calls.is_empty() {
        h.raw("<p class=\"empty\">No gateway call of your tenant reached a model on this process yet.</p>");
        if counts.tenant_label.is_none() {
            h.raw("<p class=\"muted\">A tenant's calls are counted apart once it makes one, up to [server.metrics_labels] max_values tenants (or the tenants it names); past that they count with other tenants' as <code>other</code>, which this page does not show you.</p>");
        }
    } else {
        h.raw("<table id=\"calls\"><thead><tr><th scope=\"col\">Provider</th><th scope=\"col\">Model</th>")
            .raw("<th scope=\"col\">Outcome</th><th scope=\"col\" class=\"n\">Attempts</th></tr></thead><tbody>");
        for call in &counts.calls {
            h.raw("<tr><td>")
                .text(&call.provider)
                .raw("</td><td><code>")
                .text(&call.model)
                .raw("</code></td><td><span class=\"badge ")
                .raw(if call.outcome == "ok" { "ok" } else { "bad" })
                .raw("\">")
                .text(&call.outcome)
                .raw("</span></td><td class=\"n\">")
                .num(call.count)
                .raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    h.raw(
        "</section><section aria-labelledby=\"fallbacks-h\"><h2 id=\"fallbacks-h\">Fallbacks</h2>",
    );
    if counts.fallbacks.is_empty() {
        h.raw("<p class=\"empty\">Every call was answered by its chain's first model.</p>");
    } else {
        h.raw("<table id=\"fallbacks\"><thead><tr><th scope=\"col\">First model</th><th scope=\"col\">Answered by</th>")
            .raw("<th scope=\"col\" class=\"n\">Calls</th></tr></thead><tbody>");
        for fallback in &counts.fallbacks {
            h.raw("<tr><td><code>")
                .text(&fallback.primary)
                .raw("</code></td><td><code>")
                .text(&fallback.answered)
                .raw("</code></td><td class=\"n\">")
                .num(fallback.count)
                .raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    h.raw("</section><section aria-labelledby=\"recoveries-h\"><h2 id=\"recoveries-h\">Stream recoveries</h2>");
    if counts.recoveries.is_empty() {
        h.raw("<p class=\"empty\">No stream was cut.</p>");
    } else {
        h.raw("<table id=\"recoveries\"><thead><tr><th scope=\"col\">Provider</th><th scope=\"col\">Outcome</th>")
            .raw("<th scope=\"col\" class=\"n\">Streams</th></tr></thead><tbody>");
        for recovery in &counts.recoveries {
            h.raw("<tr><td>")
                .text(&recovery.provider)
                .raw("</td><td>")
                .text(&recovery.outcome)
                .raw("</td><td class=\"n\">")
                .num(recovery.count)
                .raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    h.raw("<p class=\"muted\">Fallbacks and recoveries count every caller's calls, runs' included: they are the providers' health, not a tenant's data.</p></section>");
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::live::{CallCount, FallbackCount};
    use crate::api::stats::{KeySpend, Tally};

    fn today() -> Stats {
        Stats {
            since_ms: 0,
            until_ms: DAY_MS,
            clamped: false,
            total: Tally::default(),
            by_agent: Default::default(),
            by_model: Default::default(),
            guardrails: Default::default(),
            keys: Default::default(),
            series: Vec::new(),
            tool_latency: Default::default(),
        }
    }

    #[test]
    fn calls_fallbacks_and_spend_are_listed() {
        let counts = GatewayCounts {
            tenant_label: Some("acme".into()),
            calls: vec![CallCount {
                provider: "openai".into(),
                model: "gpt-4o-mini".into(),
                outcome: "rate_limited".into(),
                count: 3,
            }],
            fallbacks: vec![FallbackCount {
                primary: "openai/gpt-4o-mini".into(),
                answered: "anthropic/claude".into(),
                count: 2,
            }],
            recoveries: vec![],
        };
        let mut stats = today();
        stats.keys.insert(
            "team-a".into(),
            KeySpend {
                tokens: 40,
                cost_micros: 12,
                by_model: Default::default(),
            },
        );
        let html = render("n1", &counts, &stats).into_string();
        assert!(html.contains("badge bad\">rate_limited"), "{html}");
        assert!(html.contains("anthropic/claude"), "{html}");
        assert!(html.contains("<tr data-key=\"team-a\">"), "{html}");
        assert!(html.contains("No stream was cut"), "{html}");
        assert!(!html.contains("<code>other</code>"), "{html}");
    }

    #[test]
    fn nothing_yet_says_what_to_do() {
        let counts = GatewayCounts::default();
        let html = render("n1", &counts, &today()).into_string();
        assert!(
            html.contains("Point an OpenAI or Anthropic client"),
            "{html}"
        );
        assert!(html.contains("No gateway call of your tenant"), "{html}");
        assert!(
            html.contains("answered by its chain's first model"),
            "{html}"
        );
    }
}

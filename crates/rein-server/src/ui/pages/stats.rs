//! `GET /ui/stats`: the trend layer of the dashboard, as `GET /v1/stats`
//! counts it ([`crate::api::stats::compute`]): outcomes and what a success
//! costs, by agent and by model; which guardrails fired; and what each API
//! key spent through the gateway, by model.
//!
//! # Windows, not dates
//!
//! An operator asks "how did the last hour go" or "this week", not "from
//! this millisecond": the page offers the last hour, day, week and 31 days
//! (the API's longest window), ending now, and one agent or all. The API
//! keeps spend per UTC day, so the spend of a window shorter than a day
//! is that of the whole days it touches; the page says so.

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use rein_core::Outcome;

use super::{Nav, agent_select, page, problem_page, query_value, respond};
use crate::api::stats::{KeySpend, Stats, Tally};
use crate::http::problem::Problem;
use crate::ui::Ui;
use crate::ui::html::Html;

/// The windows offered: the query's name, its label, its length, and the
/// slices of its chart (5 minutes, an hour, 6 hours, a day).
const WINDOWS: [(&str, &str, u64, u32); 4] = [
    ("1h", "the last hour", 3_600_000, 12),
    ("24h", "the last 24 hours", 24 * 3_600_000, 24),
    ("7d", "the last 7 days", 7 * 24 * 3_600_000, 28),
    (
        "31d",
        "the last 31 days",
        crate::api::stats::MAX_WINDOW_MS,
        31,
    ),
];

/// The window when the query names none.
const DEFAULT_WINDOW: &str = "24h";

/// The outcomes in the order the tables show them.
const OUTCOMES: [Outcome; 6] = [
    Outcome::Succeeded,
    Outcome::PartialSuccess,
    Outcome::Failed,
    Outcome::BudgetExhausted,
    Outcome::Cancelled,
    Outcome::HandedOff,
];

/// The page.
pub(crate) async fn show(
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
    let window = value("window").unwrap_or_else(|| DEFAULT_WINDOW.to_owned());
    let Some(&(_, label, length, buckets)) = WINDOWS.iter().find(|(name, ..)| *name == window)
    else {
        let problem = Problem::bad_request(format!(
            "{window:?} is not a window this page offers: one of 1h, 24h, 7d or 31d"
        ));
        return problem_page(&ui, Some(&signed), &problem, "/ui/stats");
    };
    let agent = value("agent");
    let now = crate::lifecycle::recovery::now_ms().as_millis();
    let mut api = vec![
        ("since".to_owned(), now.saturating_sub(length).to_string()),
        ("buckets".to_owned(), buckets.to_string()),
    ];
    api.extend(agent.iter().map(|a| ("agent".to_owned(), a.clone())));
    let stats = match crate::api::stats::parse(&api, now) {
        Ok(window) => {
            ui.app.spend.before_read().await;
            crate::api::stats::compute(
                ui.app.store.as_ref(),
                Some(signed.caller.tenant.clone()),
                &window,
            )
            .await
        }
        Err(problem) => return problem_page(&ui, Some(&signed), &problem, "/ui/stats"),
    };
    let stats = match stats {
        Ok(stats) => stats,
        Err(e) => return problem_page(&ui, Some(&signed), &Problem::from(e), "/ui/runs"),
    };
    let mut body = Html::new();
    body.html(filters(&ui, &window, agent.as_deref()))
        .html(render(&stats, label));
    respond(
        StatusCode::OK,
        page("Outcomes and spend", Some((&ui, &signed)), Nav::Stats, body),
    )
}

/// The window and agent form.
fn filters(ui: &Ui, window: &str, agent: Option<&str>) -> Html {
    let mut h = Html::new();
    h.raw("<div class=\"toolbar\"><form method=\"get\" action=\"/ui/stats\" class=\"filters\">")
        .raw("<label for=\"window\">Window</label><select id=\"window\" name=\"window\">");
    for (name, label, ..) in WINDOWS {
        h.raw("<option value=\"").raw(name).raw("\"");
        if name == window {
            h.raw(" selected");
        }
        h.raw(">").raw(label).raw("</option>");
    }
    h.raw("</select>")
        .html(agent_select(ui, agent))
        .raw("<button type=\"submit\">Show</button></form></div>");
    h
}

/// The page's sections for `stats`, counted over the window `label` names.
fn render(stats: &Stats, label: &str) -> Html {
    let mut h = Html::new();
    h.raw("<p>Runs created in ")
        .text(label)
        .raw(", from ")
        .time(stats.since_ms)
        .raw(" to ")
        .time(stats.until_ms)
        .raw(".</p>")
        .raw(
            "<section aria-labelledby=\"outcomes-h\"><h2 id=\"outcomes-h\">Outcomes by agent</h2>",
        );
    if stats.total.runs == 0 {
        h.raw("<p class=\"empty\">No run was created in this window. Start one with <code>POST /v1/agents/&lt;agent&gt;/runs</code> or <code>rein run</code>, or choose a longer window.</p>");
    } else {
        let rows = std::iter::once(("every agent", &stats.total))
            .chain(stats.by_agent.iter().map(|(name, t)| (name.as_str(), t)));
        h.html(tally_table("by-agent", "Agent", rows));
    }
    h.raw("</section>");
    if stats.total.runs > 0 && !stats.series.is_empty() {
        h.raw("<section aria-labelledby=\"series-h\"><h2 id=\"series-h\">Outcomes over time</h2>")
            .html(series_chart(&stats.series))
            .raw("</section>");
    }
    h.raw("<section aria-labelledby=\"models-h\"><h2 id=\"models-h\">Outcomes by model</h2>");
    if stats.by_model.is_empty() {
        h.raw("<p class=\"empty\">No ended run called a model in this window.</p>");
    } else {
        let rows = stats.by_model.iter().map(|(name, t)| (name.as_str(), t));
        h.html(tally_table("by-model", "Model", rows));
        h.raw("<p class=\"muted\">A run that used several models counts under each.</p>");
    }
    h.raw("</section><section aria-labelledby=\"guardrails-h\"><h2 id=\"guardrails-h\">Guardrails that fired</h2>");
    if stats.guardrails.is_empty() {
        h.raw("<p class=\"empty\">None fired in this window: no budget, deadline, loop or breaker stopped a call.</p>");
    } else {
        h.raw("<table id=\"guardrails\"><thead><tr><th scope=\"col\">Guardrail</th>")
            .raw("<th scope=\"col\" class=\"n\">Times fired</th><th scope=\"col\" class=\"n\">In runs</th>")
            .raw("<th scope=\"col\">By agent</th></tr></thead><tbody>");
        for (name, tally) in &stats.guardrails {
            h.raw("<tr><td><code>")
                .text(name)
                .raw("</code></td><td class=\"n\">")
                .num(tally.fired)
                .raw("</td><td class=\"n\">")
                .num(tally.runs)
                .raw("</td><td>");
            let agents: Vec<String> = tally
                .by_agent
                .iter()
                .map(|(agent, fired)| format!("{agent}: {}", fired.fired))
                .collect();
            h.text(&agents.join(", ")).raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    h.raw(
        "</section><section aria-labelledby=\"latency-h\"><h2 id=\"latency-h\">Tool latency</h2>",
    );
    if stats.tool_latency.is_empty() {
        h.raw("<p class=\"empty\">No tool attempt measured yet: tools in observe mode (<code>latency = { mode = \"observe\" }</code>) record every attempt's time here.</p>");
    } else {
        h.raw("<table id=\"latency\"><thead><tr><th scope=\"col\">Tool</th><th scope=\"col\" class=\"n\">p50</th>")
            .raw("<th scope=\"col\" class=\"n\">p95</th><th scope=\"col\" class=\"n\">p99</th><th scope=\"col\" class=\"n\">Attempts measured</th></tr></thead><tbody>");
        for (tool, latency) in &stats.tool_latency {
            h.raw("<tr data-tool=\"")
                .text(tool)
                .raw("\"><th scope=\"row\"><code>")
                .text(tool)
                .raw("</code></th><td class=\"n\">")
                .text(&millis(latency.p50_ms))
                .raw("</td><td class=\"n\">")
                .text(&millis(latency.p95_ms))
                .raw("</td><td class=\"n\">")
                .text(&millis(latency.p99_ms))
                .raw("</td><td class=\"n\">")
                .num(latency.samples)
                .raw("</td></tr>");
        }
        h.raw("</tbody></table><p class=\"muted\">Every process's attempts since they were first measured, whichever tenant's runs made them: a tool's latency is its backend's.</p>");
    }
    h.raw("</section><section aria-labelledby=\"spend-h\"><h2 id=\"spend-h\">Gateway spend by API key</h2>");
    if stats.keys.is_empty() {
        h.raw("<p class=\"empty\">No API key spent anything through the gateway (<code>/v1/chat/completions</code>, <code>/v1/messages</code>, <code>/v1/responses</code>) on the days of this window.</p>");
    } else {
        h.html(spend_table(&stats.keys))
            .raw("<p class=\"muted\">Spend is kept per UTC day: these are the whole days the window touches.</p>");
    }
    h.raw("</section>");
    h
}

/// What each key spent through the gateway, in total and by model.
pub(super) fn spend_table(keys: &BTreeMap<String, KeySpend>) -> Html {
    let mut h = Html::new();
    h.raw("<table id=\"spend\"><thead><tr><th scope=\"col\">Key</th><th scope=\"col\">Model</th>")
        .raw("<th scope=\"col\" class=\"n\">Tokens</th><th scope=\"col\" class=\"n\">Cost (USD)</th></tr></thead><tbody>");
    for (key, spend) in keys {
        h.raw("<tr data-key=\"")
            .text(key)
            .raw("\"><th scope=\"row\">")
            .text(key)
            .raw("</th><td><span class=\"muted\">every model</span></td><td class=\"n\">")
            .num(spend.tokens)
            .raw("</td><td class=\"n\">")
            .text(&usd(spend.cost_micros))
            .raw("</td></tr>");
        for (model, by) in &spend.by_model {
            h.raw("<tr><td></td><td><code>")
                .text(model)
                .raw("</code></td><td class=\"n\">")
                .num(by.tokens)
                .raw("</td><td class=\"n\">")
                .text(&usd(by.cost_micros))
                .raw("</td></tr>");
        }
    }
    h.raw("</tbody></table>");
    h
}

/// A table of tallies, one row per `(name, tally)`, headed `what`.
fn tally_table<'a>(
    id: &'static str,
    what: &'static str,
    rows: impl Iterator<Item = (&'a str, &'a Tally)>,
) -> Html {
    let mut h = Html::new();
    h.raw("<table id=\"")
        .raw(id)
        .raw("\"><thead><tr><th scope=\"col\">")
        .raw(what)
        .raw("</th><th scope=\"col\" class=\"n\">Runs</th><th scope=\"col\" class=\"n\">Not ended</th>");
    for outcome in OUTCOMES {
        h.raw("<th scope=\"col\" class=\"n\">")
            .text(outcome.as_str())
            .raw("</th>");
    }
    h.raw("<th scope=\"col\" class=\"n\">Success rate</th><th scope=\"col\" class=\"n\">Tokens</th>")
        .raw("<th scope=\"col\" class=\"n\">Cost (USD)</th><th scope=\"col\" class=\"n\">Cost per success (USD)</th></tr></thead><tbody>");
    for (name, tally) in rows {
        h.raw("<tr data-name=\"")
            .text(name)
            .raw("\"><th scope=\"row\">")
            .text(name)
            .raw("</th><td class=\"n\">")
            .num(tally.runs)
            .raw("</td><td class=\"n\">")
            .num(tally.unfinished)
            .raw("</td>");
        for outcome in OUTCOMES {
            let n = tally.outcomes.get(outcome.as_str()).copied().unwrap_or(0);
            h.raw("<td class=\"n\" data-outcome=\"")
                .text(outcome.as_str())
                .raw("\">")
                .num(n)
                .raw("</td>");
        }
        h.raw("<td class=\"n\">");
        match tally.success_rate {
            Some(rate) => {
                h.text(&format!("{:.1} %", rate * 100.0));
            }
            None => {
                h.raw("<span class=\"muted\">none ended</span>");
            }
        }
        h.raw("</td><td class=\"n\">")
            .num(tally.tokens)
            .raw("</td><td class=\"n\">")
            .text(&usd(tally.cost_micros))
            .raw("</td><td class=\"n\">");
        match tally.cost_per_success_micros {
            Some(micros) => {
                h.text(&usd(micros));
            }
            None => {
                h.raw("<span class=\"muted\">no success</span>");
            }
        }
        h.raw("</td></tr>");
    }
    h.raw("</tbody></table>");
    h
}

/// Milliseconds with a precision a reader uses: `0.42 ms`, `38 ms`,
/// `1.2 s`.
fn millis(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 1_000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1_000.0)
    }
}

/// The outcome classes a chart stacks, bottom up, with their CSS class:
/// succeeded; partial or out of budget; failed, cancelled or handed off;
/// not ended.
const STACK: [(&str, &str); 4] = [
    ("ok", "succeeded"),
    ("warn", "partial or out of budget"),
    ("bad", "failed, cancelled or handed off"),
    ("live", "not ended"),
];

/// A slice's runs in the chart's classes ([`STACK`]'s order).
fn stacked(tally: &Tally) -> [u64; 4] {
    let n = |outcome: Outcome| tally.outcomes.get(outcome.as_str()).copied().unwrap_or(0);
    [
        n(Outcome::Succeeded),
        n(Outcome::PartialSuccess) + n(Outcome::BudgetExhausted),
        n(Outcome::Failed) + n(Outcome::Cancelled) + n(Outcome::HandedOff),
        tally.unfinished,
    ]
}

/// Stacked bars of the runs created in each slice, by outcome class: SVG
/// written here (no script, nothing inline the CSP refuses: colours come
/// from the stylesheet's classes), each bar titled with its counts, and
/// the same figures as a table for a screen reader.
fn series_chart(series: &[crate::api::stats::Slice]) -> Html {
    const WIDTH: u64 = 960;
    const HEIGHT: u64 = 160;
    let most = series
        .iter()
        .map(|s| s.tally.runs)
        .max()
        .unwrap_or(0)
        .max(1);
    let slot = WIDTH / series.len().max(1) as u64;
    let bar = slot.saturating_sub(2).max(1);
    let mut h = Html::new();
    h.raw("<figure class=\"chart\"><svg id=\"series\" viewBox=\"0 0 960 160\" role=\"img\" aria-labelledby=\"series-caption\" preserveAspectRatio=\"none\">");
    for (i, slice) in series.iter().enumerate() {
        let x = i as u64 * slot;
        let mut y = HEIGHT;
        let counts = stacked(&slice.tally);
        for ((class, label), count) in STACK.iter().zip(counts) {
            if count == 0 {
                continue;
            }
            let height = (count * HEIGHT).div_ceil(most).min(y);
            y -= height;
            h.raw("<rect class=\"")
                .raw(class)
                .raw("\" x=\"")
                .num(x)
                .raw("\" y=\"")
                .num(y)
                .raw("\" width=\"")
                .num(bar)
                .raw("\" height=\"")
                .num(height)
                .raw("\"><title>")
                .num(count)
                .raw(" ")
                .raw(label)
                .raw(" from ")
                .text(&crate::ui::html::iso_utc(slice.since_ms))
                .raw("</title></rect>");
        }
    }
    h.raw("</svg><figcaption id=\"series-caption\">Runs created per slice of the window, by outcome: ");
    for (i, (class, label)) in STACK.iter().enumerate() {
        if i > 0 {
            h.raw(", ");
        }
        h.raw("<span class=\"key ")
            .raw(class)
            .raw("\">")
            .raw(label)
            .raw("</span>");
    }
    h.raw(". The tallest bar is ")
        .num(most)
        .raw(if most == 1 { " run." } else { " runs." })
        .raw("</figcaption></figure><table class=\"sr-only\"><caption>Runs per slice</caption><thead><tr><th scope=\"col\">From</th>");
    for (_, label) in STACK {
        h.raw("<th scope=\"col\">").raw(label).raw("</th>");
    }
    h.raw("</tr></thead><tbody>");
    for slice in series {
        h.raw("<tr><td>").time(slice.since_ms).raw("</td>");
        for count in stacked(&slice.tally) {
            h.raw("<td>").num(count).raw("</td>");
        }
        h.raw("</tr>");
    }
    h.raw("</tbody></table>");
    h
}

/// Micro-dollars as the runs page shows a cost: `$0.001250`.
pub(super) fn usd(micros: u64) -> String {
    rein_core::deadline::Cost::from_micros(micros).to_string()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::api::stats::ModelSpend;

    fn stats() -> Stats {
        let mut total = Tally {
            runs: 4,
            unfinished: 1,
            tokens: 1_500,
            cost_micros: 2_500,
            success_rate: Some(2.0 / 3.0),
            cost_per_success_micros: Some(1_250),
            ..Tally::default()
        };
        total.outcomes.insert("succeeded".into(), 2);
        total.outcomes.insert("handed_off".into(), 1);
        let mut stats = Stats {
            since_ms: 0,
            until_ms: 86_400_000,
            clamped: false,
            total: total.clone(),
            by_agent: [("order_desk".to_owned(), total)].into(),
            by_model: Default::default(),
            guardrails: Default::default(),
            keys: Default::default(),
            series: Vec::new(),
            tool_latency: Default::default(),
        };
        stats.keys.insert(
            "team-a".into(),
            KeySpend {
                tokens: 120,
                cost_micros: 63,
                by_model: [(
                    "openai/gpt-4o-mini".to_owned(),
                    ModelSpend {
                        tokens: 120,
                        cost_micros: 63,
                    },
                )]
                .into(),
            },
        );
        stats
    }

    #[test]
    fn outcomes_rates_and_spend_are_shown_with_units() {
        let html = render(&stats(), "the last 24 hours").into_string();
        assert!(html.contains("<tr data-name=\"order_desk\">"), "{html}");
        assert!(
            html.contains("data-outcome=\"handed_off\">1</td>"),
            "{html}"
        );
        assert!(html.contains("66.7 %"), "{html}");
        assert!(
            html.contains("$0.001250"),
            "cost per success in dollars: {html}"
        );
        assert!(html.contains("<tr data-key=\"team-a\">"), "{html}");
        assert!(html.contains("openai/gpt-4o-mini"), "{html}");
        assert!(html.contains("$0.000063"), "{html}");
        assert!(html.contains("No ended run called a model"), "{html}");
    }

    #[test]
    fn the_chart_stacks_each_slice_by_outcome_and_says_it_in_a_table() {
        let slice = |since_ms: u64, succeeded: u64, failed: u64, unfinished: u64| {
            let mut tally = Tally {
                runs: succeeded + failed + unfinished,
                unfinished,
                ..Tally::default()
            };
            tally.outcomes.insert("succeeded".into(), succeeded);
            tally.outcomes.insert("failed".into(), failed);
            crate::api::stats::Slice {
                since_ms,
                until_ms: since_ms + 1_000,
                tally,
            }
        };
        let html = series_chart(&[slice(0, 3, 1, 0), slice(1_000, 1, 0, 1)]).into_string();
        // The first slice holds the most runs (4): its bars fill the height.
        assert!(
            html.contains("<rect class=\"ok\" x=\"0\" y=\"40\" width=\"478\" height=\"120\">"),
            "{html}"
        );
        assert!(
            html.contains("<rect class=\"bad\" x=\"0\" y=\"0\" width=\"478\" height=\"40\">"),
            "{html}"
        );
        assert!(
            html.contains("<title>1 not ended from 1970-01-01T00:00:01.000Z</title>"),
            "{html}"
        );
        assert!(html.contains("The tallest bar is 4 runs."), "{html}");
        assert!(html.contains("<table class=\"sr-only\">"), "{html}");
        assert!(
            !html.contains("warn\" x="),
            "no partial run, no bar: {html}"
        );
    }

    #[test]
    fn an_empty_window_says_what_to_do() {
        let empty = Stats {
            total: Tally::default(),
            by_agent: Default::default(),
            keys: Default::default(),
            ..stats()
        };
        let html = render(&empty, "the last hour").into_string();
        assert!(html.contains("No run was created in this window"), "{html}");
        assert!(html.contains("No API key spent anything"), "{html}");
        assert!(!html.contains("<table id=\"by-agent\""), "{html}");
    }
}

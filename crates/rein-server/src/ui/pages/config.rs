//! `GET /ui/config`: the configuration this server runs with, as
//! `GET /v1/config` answers it ([`crate::api::config::view`]): rein's
//! defaults filled in and marked, secrets never shown. For operators only
//! (a tenant `server.metrics_tenants` lists, or anyone without keys), as
//! the API is.

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;

use super::{Nav, page, problem_page, respond};
use crate::api::config::ConfigView;
use crate::ui::Ui;
use crate::ui::html::{Html, bytes, duration};

/// The page.
pub(crate) async fn show(State(ui): State<Ui>, headers: HeaderMap, uri: Uri) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        Err(to_sign_in) => return *to_sign_in,
    };
    if let Err(problem) =
        crate::http::auth::operator(&ui.app.settings, &signed.caller.tenant, "the config")
    {
        return problem_page(&ui, Some(&signed), &problem, "/ui/runs");
    }
    let view = crate::api::config::view(
        &ui.app.registry,
        &ui.app.settings,
        ui.app.store_shown.as_deref(),
    );
    respond(
        StatusCode::OK,
        page("Config", Some((&ui, &signed)), Nav::Config, render(&view)),
    )
}

/// A comma-separated list of `items`, or `none` greyed.
fn list(items: &[String]) -> Html {
    let mut h = Html::new();
    if items.is_empty() {
        h.raw("<span class=\"muted\">none</span>");
    } else {
        h.text(&items.join(", "));
    }
    h
}

/// A number, or `unlimited` greyed.
fn limit(n: Option<impl Into<u64>>) -> Html {
    let mut h = Html::new();
    match n {
        Some(n) => {
            h.num(n.into());
        }
        None => {
            h.raw("<span class=\"muted\">unlimited</span>");
        }
    }
    h
}

/// The page's sections.
pub(crate) fn render(view: &ConfigView) -> Html {
    let mut h = Html::new();
    h.raw("<p>As this server applies it: rein's defaults filled in and marked. Keys, header and environment values, URL credentials and queries are never shown. Loaded from ")
        .html(list(&view.files))
        .raw(".</p>");
    // Agents, with every limit their runs get.
    h.raw("<section aria-labelledby=\"agents-h\"><h2 id=\"agents-h\">Agents</h2>");
    if view.agents.is_empty() {
        h.raw("<p class=\"empty\">No agent: add an <code>[agents.NAME]</code> table (<code>rein init</code> writes one).</p>");
    }
    for agent in &view.agents {
        h.raw("<div class=\"card\" data-agent=\"")
            .text(&agent.name)
            .raw("\"><h3>")
            .text(&agent.name)
            .raw("</h3><dl class=\"facts\"><dt>Model</dt><dd><code>")
            .text(&agent.model)
            .raw("</code></dd><dt>Fallbacks</dt><dd>")
            .html(list(&agent.fallbacks))
            .raw("</dd><dt>Tools</dt><dd>")
            .html(list(&agent.tools))
            .raw("</dd></dl><ul class=\"plain\">");
        for line in &agent.limits {
            h.raw("<li>").text(line).raw("</li>");
        }
        h.raw("</ul></div>");
    }
    h.raw("</section><section aria-labelledby=\"tools-h\"><h2 id=\"tools-h\">Tools</h2>");
    if view.tools.is_empty() {
        h.raw("<p class=\"empty\">No tool.</p>");
    } else {
        h.raw("<table id=\"tools\"><thead><tr><th scope=\"col\">Tool</th><th scope=\"col\">Calls</th><th scope=\"col\">Sets</th>")
            .raw("<th scope=\"col\">Class</th><th scope=\"col\">Group</th><th scope=\"col\">Tier</th><th scope=\"col\">Approval</th><th scope=\"col\">Chosen by rein</th></tr></thead><tbody>");
        for tool in &view.tools {
            h.raw("<tr><th scope=\"row\"><code>")
                .text(&tool.name)
                .raw("</code></th><td>")
                .text(&tool.adapter)
                .raw(": <code>")
                .text(&tool.target)
                .raw("</code></td><td>")
                .html(list(&tool.sets))
                .raw("</td><td>")
                .text(&tool.class)
                .raw("</td><td>")
                .text(&tool.resource_group)
                .raw("</td><td>")
                .text(&tool.side_effect_tier)
                .raw("</td><td>")
                .text(&tool.approval)
                .raw("</td><td>")
                .html(list(&tool.defaulted))
                .raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    h.raw("</section><section aria-labelledby=\"providers-h\"><h2 id=\"providers-h\">Providers and models</h2>");
    if view.providers.is_empty() {
        h.raw("<p class=\"empty\">No provider.</p>");
    } else {
        h.raw("<table id=\"providers\"><thead><tr><th scope=\"col\">Provider</th><th scope=\"col\">Kind</th><th scope=\"col\">Endpoint</th>")
            .raw("<th scope=\"col\">Key from</th><th scope=\"col\" class=\"n\">Concurrency</th><th scope=\"col\" class=\"n\">Tokens/min</th><th scope=\"col\" class=\"n\">Timeout</th></tr></thead><tbody>");
        for p in &view.providers {
            h.raw("<tr><th scope=\"row\">")
                .text(&p.name)
                .raw("</th><td>")
                .text(&p.kind)
                .raw(if p.streams { " (streams)" } else { "" })
                .raw("</td><td><code>")
                .text(&p.endpoint)
                .raw("</code></td><td>");
            match &p.api_key_env {
                Some(var) => {
                    h.raw("<code>$").text(var).raw("</code>");
                }
                None => {
                    h.raw("<span class=\"muted\">no key</span>");
                }
            }
            h.raw("</td><td class=\"n\">")
                .html(limit(p.max_concurrency))
                .raw("</td><td class=\"n\">")
                .html(limit(p.tokens_per_minute))
                .raw("</td><td class=\"n\">");
            match p.timeout_ms {
                Some(ms) => {
                    h.text(&duration(ms));
                }
                None => {
                    h.raw("<span class=\"muted\">local</span>");
                }
            }
            h.raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    if !view.models.is_empty() {
        h.raw("<table id=\"models\"><thead><tr><th scope=\"col\">Gateway model</th><th scope=\"col\">Chain</th>")
            .raw("<th scope=\"col\" class=\"n\">Deadline</th><th scope=\"col\">Cut streams</th></tr></thead><tbody>");
        for m in &view.models {
            h.raw("<tr><th scope=\"row\"><code>")
                .text(&m.name)
                .raw("</code></th><td>")
                .text(&m.chain.join(" → "))
                .raw("</td><td class=\"n\">")
                .text(&duration(m.deadline_ms))
                .raw("</td><td>")
                .raw(if m.recover_streams {
                    "recovered"
                } else {
                    "ended"
                })
                .raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    if !view.resource_groups.is_empty() {
        h.raw("<h2 id=\"groups-h\">Resource groups</h2><table id=\"groups\"><thead><tr><th scope=\"col\">Group</th>")
            .raw("<th scope=\"col\" class=\"n\">Concurrency</th><th scope=\"col\" class=\"n\">Calls per second</th></tr></thead><tbody>");
        for g in &view.resource_groups {
            h.raw("<tr><th scope=\"row\">")
                .text(&g.name)
                .raw("</th><td class=\"n\">")
                .html(limit(g.max_concurrency))
                .raw("</td><td class=\"n\">");
            match g.rate_per_sec {
                Some(rate) => {
                    h.text(&format!("{rate}/s"));
                }
                None => {
                    h.raw("<span class=\"muted\">unlimited</span>");
                }
            }
            h.raw("</td></tr>");
        }
        h.raw("</tbody></table>");
    }
    let s = &view.server;
    h.raw("</section><section aria-labelledby=\"server-h\"><h2 id=\"server-h\">Server</h2><dl class=\"facts\" id=\"server\">")
        .raw("<dt>Listen</dt><dd><code>")
        .text(&s.listen)
        .raw("</code></dd><dt>API keys</dt><dd>");
    if s.api_keys.is_empty() {
        h.raw("none: open on loopback, tenant <code>default</code>");
    } else {
        let keys: Vec<String> = s
            .api_keys
            .iter()
            .map(|k| {
                format!(
                    "{} (tenant {}{})",
                    k.name,
                    k.tenant,
                    if k.budgeted { ", budgeted" } else { "" }
                )
            })
            .collect();
        h.text(&keys.join(", "));
    }
    h.raw("</dd><dt>Allowed hosts</dt><dd>")
        .html(list(&s.allowed_hosts))
        .raw("</dd><dt>CORS origins</dt><dd>")
        .html(list(&s.cors_origins))
        .raw("</dd><dt>Body limit</dt><dd>")
        .text(&bytes(s.body_limit_bytes))
        .raw("</dd><dt>Connections</dt><dd>")
        .num(s.max_connections)
        .raw(" at once</dd><dt>Queue workers</dt><dd>")
        .num(s.queue_workers)
        .raw("</dd><dt>Run slots</dt><dd>")
        .html(limit(s.run_slots))
        .raw("</dd><dt>/metrics</dt><dd>")
        .text(&s.metrics)
        .raw(", operators: ")
        .html(list(&s.metrics_tenants))
        .raw("</dd><dt>Shutdown grace</dt><dd>")
        .text(&duration(s.shutdown_grace_ms))
        .raw("</dd><dt>Store</dt><dd><code>");
    match &view.store {
        Some(store) => {
            h.text(store);
        }
        None => {
            h.raw("not named (the embedding program opened it)");
        }
    }
    h.raw("</code></dd></dl></section>");
    if !view.webhooks.is_empty() {
        h.raw("<section aria-labelledby=\"webhooks-h\"><h2 id=\"webhooks-h\">Webhooks</h2><table id=\"webhooks\"><thead><tr>")
            .raw("<th scope=\"col\">Webhook</th><th scope=\"col\">URL</th><th scope=\"col\">Topics</th><th scope=\"col\">Secret from</th></tr></thead><tbody>");
        for w in &view.webhooks {
            h.raw("<tr><th scope=\"row\">")
                .text(&w.name)
                .raw("</th><td><code>")
                .text(&w.url)
                .raw("</code></td><td>")
                .html(list(&w.topics))
                .raw("</td><td><code>$")
                .text(&w.secret_env)
                .raw("</code></td></tr>");
        }
        h.raw("</tbody></table></section>");
    }
    h
}

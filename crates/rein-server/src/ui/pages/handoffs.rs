//! `GET /ui/handoffs`: the signed-in tenant's handed-off runs whose
//! records await a human; `POST /ui/runs/{id}/handoff`: a decision on one
//! record, made by [`crate::api::handoff::decide`] itself.

use axum::body::Bytes;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use rein_core::handoff::HandoffPackage;
use rein_store::{RunFilter, RunStatus};
use serde::Deserialize;
use serde_json::json;

use super::{Nav, check_post, csrf_field, name_of, page, problem_page, respond, run_link};
use crate::http::auth::Tenant;
use crate::http::extract::Segment;
use crate::http::problem::Problem;
use crate::ui::html::{Html, pct};
use crate::ui::{Signed, Ui, back_to, see_other};

/// The handed-off runs the page looks at (the newest).
const LOOKED_AT: usize = crate::api::listing::DEFAULT_LIMIT;

/// What each decision means, for its button's description.
const DECISIONS: [(&str, &str, &str); 4] = [
    ("accepted", "Accept", "the effect stands as it is"),
    ("undone", "Undone by hand", "you undid the effect yourself"),
    (
        "compensate",
        "Compensate",
        "rein runs the tool's registered compensation now",
    ),
    (
        "retry",
        "Retry",
        "rein sends the idempotent write again under its original key",
    ),
];

/// The page.
pub(crate) async fn list(State(ui): State<Ui>, headers: HeaderMap, uri: Uri) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        Err(to_sign_in) => return *to_sign_in,
    };
    let tenant = signed.caller.tenant.clone();
    let filter = RunFilter::all()
        .with_status(RunStatus::Finished(rein_core::Outcome::HandedOff))
        .of_tenant(tenant.clone());
    let runs = match ui.app.store.list_runs_page(&filter, None, LOOKED_AT).await {
        Ok(page) => page.runs,
        Err(e) => return problem_page(&ui, Some(&signed), &Problem::from(e), "/ui/runs"),
    };
    let mut body = Html::new();
    let mut waiting = 0usize;
    for run in &runs {
        let id = run.run_id.to_string();
        let Ok(axum::Json(package)) = crate::api::runs::get_handoff(
            State(ui.app.clone()),
            Tenant(tenant.clone()),
            Segment(id.clone()),
        )
        .await
        else {
            continue;
        };
        if package.awaiting_decision.is_empty() {
            continue;
        }
        waiting += 1;
        body.raw("<article class=\"card\"><h2>")
            .html(run_link(&id))
            .raw("</h2><p>")
            .text(&package.reason)
            .raw("</p><p>")
            .text(&rein_core::plural::count(
                package.awaiting_decision.len(),
                "record",
            ))
            .raw(if package.awaiting_decision.len() == 1 {
                " awaits a decision: "
            } else {
                " await a decision: "
            });
        for (i, effect) in package.awaiting_decision.iter().enumerate() {
            if i > 0 {
                body.raw(", ");
            }
            body.raw("<code>").text(&effect.tool).raw("</code>");
        }
        body.raw(". <a href=\"/ui/runs/")
            .text(&pct(&id))
            .raw("#handoff-h\">Decide on the run's page</a></p></article>");
    }
    if waiting == 0 {
        body.raw("<p class=\"empty\">No handoff is waiting. A run that cannot settle its side effects by itself ends <code>handed_off</code> and lists here each record a human must decide on.</p>");
    }
    respond(
        StatusCode::OK,
        page(
            "Handoffs waiting",
            Some((&ui, &signed)),
            Nav::Handoffs,
            body,
        ),
    )
}

/// A run's handoff package, with the decision buttons of each record that
/// awaits one.
pub(crate) fn package(signed: &Signed, package: &HandoffPackage, back: &str) -> Html {
    let run = package.run_id.as_str();
    let mut h = Html::new();
    h.raw("<section aria-labelledby=\"handoff-h\"><h2 id=\"handoff-h\">Handoff: records awaiting your decision</h2><p>")
        .text(&package.reason)
        .raw("</p>");
    for effect in &package.awaiting_decision {
        let intent = effect.intent_id.as_str();
        h.raw("<article class=\"card handoff\" data-intent=\"")
            .text(intent)
            .raw("\"><h3><code>")
            .text(&effect.tool)
            .raw("</code> — ")
            .text(&name_of(&effect.status))
            .raw("</h3><p>")
            .text(&effect.note)
            .raw("</p>");
        if let Some(owner) = &effect.owner {
            h.raw("<p>Owner: ").text(owner).raw("</p>");
        }
        h.raw("<form method=\"post\" class=\"decision\" action=\"/ui/runs/")
            .text(&pct(run))
            .raw("/handoff\">")
            .html(csrf_field(signed))
            .raw("<input type=\"hidden\" name=\"back\" value=\"")
            .text(back)
            .raw("\"><input type=\"hidden\" name=\"intent_id\" value=\"")
            .text(intent)
            .raw("\"><label for=\"handoff-reason-")
            .text(intent)
            .raw("\">Reason (what you found or did)</label><input type=\"text\" maxlength=\"2000\" name=\"reason\" id=\"handoff-reason-")
            .text(intent)
            .raw("\"><div class=\"buttons\">");
        for (value, label, meaning) in DECISIONS {
            h.raw("<button type=\"submit\" name=\"decision\" value=\"")
                .raw(value)
                .raw("\" title=\"")
                .raw(meaning)
                .raw("\">")
                .raw(label)
                .raw("</button>");
        }
        h.raw("</div><ul class=\"help\">");
        for (_, label, meaning) in DECISIONS {
            h.raw("<li><strong>")
                .raw(label)
                .raw("</strong>: ")
                .raw(meaning)
                .raw("</li>");
        }
        h.raw("</ul></form></article>");
    }
    if !package.uncertain.is_empty() {
        h.raw("<h3>Effects whose state is unknown</h3><ul>");
        for effect in &package.uncertain {
            h.raw("<li><code>")
                .text(&effect.tool)
                .raw("</code>: ")
                .text(&effect.note)
                .raw("</li>");
        }
        h.raw("</ul>");
    }
    h.raw("</section>");
    h
}

/// A handoff decision, as the form sends it.
#[derive(Debug, Deserialize)]
pub(crate) struct HandoffForm {
    csrf: Option<String>,
    intent_id: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
    back: Option<String>,
}

/// `POST /ui/runs/{id}/handoff`: checked like every form, then decided by
/// the API's handler as the signed-in key.
pub(crate) async fn decide(
    State(ui): State<Ui>,
    headers: HeaderMap,
    uri: Uri,
    segment: Segment,
    form: Result<Form<HandoffForm>, FormRejection>,
) -> Response {
    let sent = form.ok().map(|Form(f)| f);
    let token = sent.as_ref().and_then(|f| f.csrf.as_deref());
    let signed = match check_post(&ui, &headers, &uri, token) {
        Ok(signed) => signed,
        Err(refused) => return *refused,
    };
    let Some(sent) = sent else {
        let problem = Problem::bad_request("the form was not a decision: reload the page");
        return problem_page(&ui, Some(&signed), &problem, "/ui/handoffs");
    };
    let back = back_to(sent.back.as_deref()).to_owned();
    let mut body = json!({"intent_id": sent.intent_id, "decision": sent.decision});
    if let Some(reason) = sent.reason.filter(|r| !r.trim().is_empty()) {
        body["reason"] = json!(reason);
    }
    let answer = crate::api::handoff::decide(
        State(ui.app.clone()),
        signed.caller.clone(),
        segment,
        Ok(Bytes::from(body.to_string())),
    )
    .await;
    match answer {
        Ok(_) => see_other(&back),
        Err(problem) => problem_page(&ui, Some(&signed), &problem, &back),
    }
}

//! `GET /ui/approvals`: the calls of the signed-in tenant's runs waiting
//! for a human; `POST /ui/runs/{id}/approvals/{intent_id}`: a decision on
//! one, made by [`crate::api::approvals::decide`] itself.

use axum::body::Bytes;
use axum::extract::rejection::FormRejection;
use axum::extract::{Form, State};
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::Response;
use rein_core::approval::Approval;
use rein_store::ApprovalFilter;
use serde::Deserialize;
use serde_json::json;

use super::{Nav, check_post, csrf_field, json_block, page, problem_page, respond, run_link};
use crate::http::extract::Segments;
use crate::http::problem::Problem;
use crate::ui::html::{Html, pct};
use crate::ui::{Signed, Ui, back_to, see_other};

/// The approvals the page lists (the API's page size).
const LISTED: usize = crate::api::approvals::DEFAULT_LIMIT;

/// The page.
pub(crate) async fn list(State(ui): State<Ui>, headers: HeaderMap, uri: Uri) -> Response {
    let signed = match ui.signed_in(&headers, &uri) {
        Ok(signed) => signed,
        Err(to_sign_in) => return *to_sign_in,
    };
    let filter = ApprovalFilter {
        tenant: Some(signed.caller.tenant.clone()),
        pending: true,
        limit: LISTED,
        ..ApprovalFilter::default()
    };
    let approvals = match ui.app.store.approvals(&filter).await {
        Ok(approvals) => approvals,
        Err(e) => return problem_page(&ui, Some(&signed), &Problem::from(e), "/ui/runs"),
    };
    let mut body = Html::new();
    if approvals.is_empty() {
        body.raw("<p class=\"empty\">No call is waiting for approval. Calls of a tool at or above an agent's <code>approval.from_tier</code> wait here, oldest first, until someone approves or rejects them or their window closes.</p>");
    } else {
        body.raw("<p>Oldest request first. Approving sends the call with exactly the arguments shown; a rejection's reason is told to the model.</p>");
        for approval in &approvals {
            body.html(approval_card(&signed, approval, "/ui/approvals", true));
        }
    }
    respond(
        StatusCode::OK,
        page(
            "Approvals waiting",
            Some((&ui, &signed)),
            Nav::Approvals,
            body,
        ),
    )
}

/// One waiting call with its approve and reject buttons; `with_run` names
/// its run (on the approvals page).
pub(crate) fn approval_card(
    signed: &Signed,
    approval: &Approval,
    back: &str,
    with_run: bool,
) -> Html {
    let request = &approval.request;
    let run = request.run_id.as_str();
    let intent = request.intent_id.as_str();
    let mut h = Html::new();
    h.raw("<article class=\"card approval\" data-intent=\"")
        .text(intent)
        .raw("\"><h3><code>")
        .text(&request.tool)
        .raw("</code> waits for approval</h3><dl class=\"facts\">");
    if with_run {
        h.raw("<dt>Run</dt><dd>").html(run_link(run)).raw("</dd>");
    }
    h.raw("<dt>Why</dt><dd>")
        .text(&request.why)
        .raw("</dd><dt>Step</dt><dd>")
        .num(request.step)
        .raw("</dd><dt>Requested</dt><dd>")
        .time(request.requested_at_ms.as_millis())
        .raw("</dd><dt>Expires</dt><dd>")
        .time(request.expires_at_ms.as_millis())
        .raw("</dd><dt>Arguments</dt><dd>")
        .html(json_block(&request.args, 4000))
        .raw("</dd></dl><form method=\"post\" class=\"decision\" action=\"/ui/runs/")
        .text(&pct(run))
        .raw("/approvals/")
        .text(&pct(intent))
        .raw("\">")
        .html(csrf_field(signed))
        .raw("<input type=\"hidden\" name=\"back\" value=\"")
        .text(back)
        .raw("\"><label for=\"reason-")
        .text(intent)
        .raw("\">Reason (optional; told to the model on a rejection)</label><input type=\"text\" maxlength=\"2000\" name=\"reason\" id=\"reason-")
        .text(intent)
        .raw("\"><div class=\"buttons\"><button type=\"submit\" name=\"decision\" value=\"approved\" class=\"approve\">Approve <code>")
        .text(&request.tool)
        .raw("</code></button><button type=\"submit\" name=\"decision\" value=\"rejected\" class=\"reject\">Reject</button></div></form></article>");
    h
}

/// A decision, as the form sends it.
#[derive(Debug, Deserialize)]
pub(crate) struct DecisionForm {
    csrf: Option<String>,
    decision: Option<String>,
    reason: Option<String>,
    back: Option<String>,
}

/// `POST /ui/runs/{id}/approvals/{intent_id}`: checked like every form,
/// then decided by the API's handler as the signed-in key.
pub(crate) async fn decide(
    State(ui): State<Ui>,
    headers: HeaderMap,
    uri: Uri,
    segments: Segments,
    form: Result<Form<DecisionForm>, FormRejection>,
) -> Response {
    let sent = form.ok().map(|Form(f)| f);
    let token = sent.as_ref().and_then(|f| f.csrf.as_deref());
    let signed = match check_post(&ui, &headers, &uri, token) {
        Ok(signed) => signed,
        Err(refused) => return *refused,
    };
    let Some(sent) = sent else {
        let problem = Problem::bad_request("the form was not a decision: reload the page");
        return problem_page(&ui, Some(&signed), &problem, "/ui/approvals");
    };
    let back = back_to(sent.back.as_deref()).to_owned();
    let mut body = json!({"decision": sent.decision});
    if let Some(reason) = sent.reason.filter(|r| !r.trim().is_empty()) {
        body["reason"] = json!(reason);
    }
    let answer = crate::api::approvals::decide(
        State(ui.app.clone()),
        signed.caller.clone(),
        segments,
        Ok(Bytes::from(body.to_string())),
    )
    .await;
    match answer {
        Ok(_) => see_other(&back),
        Err(problem) => problem_page(&ui, Some(&signed), &problem, &back),
    }
}

//! Approvals asked of an MCP client's user, through elicitation.
//!
//! # Why through the client
//!
//! A call of `rein mcp serve` that needs a human's approval waits for a
//! decision (see `rein_engine::run::Approver`). The person at a desktop
//! assistant or an IDE is often that human, and the client can ask them:
//! a form with the tool, its arguments and why rein asks. Their answer is
//! recorded as any decision is, under the client's name, so the record
//! says who approved through what. An approver who must be someone else
//! than the client's user is kept so with `--approve-via api`: the call
//! then waits for `rein approve`, the API or the dashboard.
//!
//! A dismissed form is no decision: the call goes on waiting for one made
//! through rein until the approval's window closes. A client that did not
//! declare elicitation is never asked.
//!
//! # Two ways of asking
//!
//! Up to protocol `2025-11-25` the server sends the client an
//! `elicitation/create` request while the call waits ([`ClientApprover`]).
//! From `2026-07-28` a server may not send requests: the call answers
//! `input_required` with the same form ([`input_required`], once rein
//! has recorded the approval request), and the client calls again with
//! the user's answer ([`answered`]), which rein records as the decision
//! before the call goes on.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rein_core::Timestamp;
use rein_core::approval::{ApprovalRequest, Decision, Verdict};
use rein_engine::run::Approver;
use std::sync::Mutex;

use rmcp::model::{
    ClientCapabilities, ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction,
    ElicitationSchema, Implementation, InputRequest, InputRequests, InputRequiredResult,
    InputResponses,
};
use rmcp::service::{Peer, RoleServer};
use serde_json::{Value, json};
use tokio::sync::oneshot;

/// The key of rein's approval form among a call's input requests.
pub const APPROVAL_INPUT: &str = "rein/approval";

/// Whether a client with `capabilities` can show rein's form.
pub fn form_supported(capabilities: Option<&ClientCapabilities>) -> bool {
    capabilities
        .and_then(|c| c.elicitation.as_ref())
        .is_some_and(|e| e.form.is_some() || e.url.is_none())
}

/// Who decides through the client `info`, as recorded: `mcp:` and its
/// name.
pub fn decider(info: Option<&Implementation>) -> String {
    let client = info
        .map(|info| info.name.trim())
        .filter(|name| !name.is_empty())
        .unwrap_or("client");
    format!("mcp:{client}").chars().take(100).collect()
}

/// Asks the MCP client's user with an `elicitation/create` request
/// (protocols before `2026-07-28`); see the module docs.
pub struct ClientApprover {
    peer: Peer<RoleServer>,
    by: String,
}

impl ClientApprover {
    /// The approver for the client behind `peer`, deciding as `by`.
    pub fn new(peer: Peer<RoleServer>, by: String) -> ClientApprover {
        ClientApprover { peer, by }
    }
}

impl Approver for ClientApprover {
    fn ask<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> Pin<Box<dyn Future<Output = Option<Decision>> + Send + 'a>> {
        Box::pin(async move {
            let params = form_request(request)?;
            let now = Timestamp::from_system_time(std::time::SystemTime::now());
            let open = request.expires_at_ms.saturating_duration_since(now);
            let answer = match self
                .peer
                .create_elicitation_with_timeout(params, Some(open.max(Duration::from_secs(1))))
                .await
            {
                Ok(answer) => answer,
                Err(e) => {
                    tracing::debug!("the MCP client was not asked for an approval: {e}");
                    return None;
                }
            };
            decision(
                answer.action,
                answer.content.as_ref(),
                &self.by,
                Timestamp::from_system_time(std::time::SystemTime::now()),
            )
        })
    }
}

/// Tells the call's handler that the call waits for an approval, so that
/// it answers `input_required` (protocols from `2026-07-28`): asked once,
/// it never answers itself.
pub struct InputSignal(Mutex<Option<oneshot::Sender<ApprovalRequest>>>);

impl InputSignal {
    /// A signal, and where it is received.
    pub fn new() -> (InputSignal, oneshot::Receiver<ApprovalRequest>) {
        let (tx, rx) = oneshot::channel();
        (InputSignal(Mutex::new(Some(tx))), rx)
    }
}

impl Approver for InputSignal {
    fn ask<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> Pin<Box<dyn Future<Output = Option<Decision>> + Send + 'a>> {
        if let Some(tx) = self.0.lock().ok().and_then(|mut tx| tx.take()) {
            let _ = tx.send(request.clone());
        }
        Box::pin(std::future::pending())
    }
}

/// The `input_required` answer asking for `request`'s decision; its
/// state, echoed back with the answer, is the call's intent, so that an
/// answer is taken for the call it was asked for only.
pub fn input_required(request: &ApprovalRequest) -> Option<InputRequiredResult> {
    let form = ElicitRequest::new(form_request(request)?);
    let mut inputs = InputRequests::new();
    inputs.insert(APPROVAL_INPUT.to_owned(), InputRequest::Elicitation(form));
    Some(InputRequiredResult::new(
        Some(inputs),
        Some(request.intent_id.to_string()),
    ))
}

/// The decision a call's `responses` carry for rein's form, deciding as
/// `by`: `None` when the form is not among them, `Some(None)` when it is
/// but says nothing usable (dismissed).
pub fn answered(responses: &InputResponses, by: &str) -> Option<Option<Decision>> {
    let answer = responses.get(APPROVAL_INPUT)?;
    let Ok(answer) = serde_json::from_value::<ElicitResult>(answer.clone()) else {
        return Some(None);
    };
    Some(decision(
        answer.action,
        answer.content.as_ref(),
        by,
        Timestamp::from_system_time(std::time::SystemTime::now()),
    ))
}

/// The form asking for `request`'s decision.
fn form_request(request: &ApprovalRequest) -> Option<ElicitRequestParams> {
    Some(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(request),
        requested_schema: ElicitationSchema::from_json_schema(form()).ok()?,
    })
}

/// The form: a choice and a reason.
fn form() -> serde_json::Map<String, Value> {
    let form = json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "enum": ["approve", "reject"],
            },
            "reason": {
                "type": "string",
                "title": "Reason",
                "description": "Why; a rejection's reason is what the agent is told.",
            },
        },
        "required": ["decision"],
    });
    match form {
        Value::Object(map) => map,
        _ => serde_json::Map::new(),
    }
}

/// What the user is shown.
fn message(request: &ApprovalRequest) -> String {
    format!(
        "rein: approve the call of `{}` with {}? It needs approval because {}. Nothing is sent until you decide.",
        request.tool, request.args, request.why
    )
}

/// The decision the user's answer is: `None` for a dismissed form or one
/// that says nothing usable.
fn decision(
    action: ElicitationAction,
    content: Option<&Value>,
    by: &str,
    at_ms: Timestamp,
) -> Option<Decision> {
    let reason = content
        .and_then(|c| c.get("reason"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| r.chars().take(1_000).collect::<String>());
    let verdict = match action {
        ElicitationAction::Accept => {
            match content
                .and_then(|c| c.get("decision"))
                .and_then(Value::as_str)
            {
                Some("approve") => Verdict::Approved,
                Some("reject") => Verdict::Rejected,
                _ => return None,
            }
        }
        ElicitationAction::Decline => Verdict::Rejected,
        // A dismissal, or an action of a later protocol: no decision.
        _ => return None,
    };
    let reason = match verdict {
        Verdict::Rejected => reason.or_else(|| Some("declined in the MCP client".to_owned())),
        _ => reason,
    };
    Some(Decision {
        verdict,
        by: by.to_owned(),
        at_ms,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at() -> Timestamp {
        Timestamp::from_system_time(std::time::UNIX_EPOCH + Duration::from_secs(1_000))
    }

    #[test]
    fn the_form_is_an_elicitation_schema() {
        let schema = ElicitationSchema::from_json_schema(form());
        assert!(schema.is_ok(), "{schema:?}");
    }

    #[test]
    fn an_answer_carried_by_a_retried_call_is_read_back() {
        let request = ApprovalRequest {
            run_id: rein_core::RunId::new("run-1").unwrap(),
            tenant: rein_core::TenantId::new("t").unwrap(),
            intent_id: rein_core::IntentId::new("i").unwrap(),
            step: 1,
            tool: "send_email".into(),
            args: json!({"to": "x"}),
            args_digest: rein_core::approval::ArgsDigest::of(&json!({"to": "x"})),
            why: "it is irreversible".into(),
            requested_at_ms: at(),
            expires_at_ms: at(),
        };
        let asked = input_required(&request).unwrap();
        assert!(asked.input_requests.unwrap().contains_key(APPROVAL_INPUT));

        let mut responses = InputResponses::new();
        assert_eq!(answered(&responses, "mcp:x"), None, "not asked");
        responses.insert(
            APPROVAL_INPUT.into(),
            json!({"action": "accept", "content": {"decision": "approve"}}),
        );
        let decided = answered(&responses, "mcp:x").unwrap().unwrap();
        assert_eq!(decided.verdict, Verdict::Approved);
        responses.insert(APPROVAL_INPUT.into(), json!({"action": "cancel"}));
        assert_eq!(answered(&responses, "mcp:x"), Some(None), "dismissed");
        responses.insert(APPROVAL_INPUT.into(), json!("nonsense"));
        assert_eq!(answered(&responses, "mcp:x"), Some(None));
    }

    #[test]
    fn an_answer_is_a_decision_and_a_dismissal_is_none() {
        let approve = json!({"decision": "approve"});
        let yes = decision(ElicitationAction::Accept, Some(&approve), "mcp:x", at());
        assert_eq!(
            yes.map(|d| (d.verdict, d.by)),
            Some((Verdict::Approved, "mcp:x".into()))
        );

        let reject = json!({"decision": "reject", "reason": " too much "});
        let no = decision(ElicitationAction::Accept, Some(&reject), "mcp:x", at());
        assert_eq!(
            no.map(|d| (d.verdict, d.reason)),
            Some((Verdict::Rejected, Some("too much".into())))
        );

        let declined = decision(ElicitationAction::Decline, None, "mcp:x", at());
        assert_eq!(declined.map(|d| d.verdict), Some(Verdict::Rejected));

        assert_eq!(
            decision(ElicitationAction::Cancel, None, "mcp:x", at()),
            None
        );
        let odd = json!({"decision": "maybe"});
        assert_eq!(
            decision(ElicitationAction::Accept, Some(&odd), "mcp:x", at()),
            None
        );
        assert_eq!(
            decision(ElicitationAction::Accept, None, "mcp:x", at()),
            None
        );
    }
}

//! Approvals in the run loop (issue 33, item 1): a call a human must
//! approve pauses its run durably before anything of its turn is sent;
//! the decision, read from the store, sends exactly the approved
//! arguments once, or tells the model it was declined or expired.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use rein_core::approval::{ArgsDigest, Decision, EXPIRED_BY, Verdict};
use rein_core::registry::{SideEffectTier, ToolApproval};
use rein_core::{EventKind, Outcome, Timestamp};
use rein_engine::run::{AcceptAll, AgentBinding, EngineError, RunOutput};
use rein_store::{RunStatus, StoreExt as _};
use rein_testkit::order_desk::{Faults, SEND_EMAIL, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};

fn email() -> Value {
    json!({"to": "buyer@example.com", "subject": "New date", "body": "8 January"})
}

/// An agent whose `send_email` requires approval, scripted to send
/// [`email`] and then answer.
fn gated(h: &Harness) -> AgentBinding {
    let mut a = agent(
        &h.desk,
        script(json!([call(SEND_EMAIL, email()), answer("told the buyer")])),
        false,
    );
    a.tools.get_mut(SEND_EMAIL).unwrap().declared.approval = ToolApproval::Required;
    a
}

fn now() -> Timestamp {
    Timestamp::from_system_time(std::time::SystemTime::now())
}

async fn status(h: &Harness, out: &RunOutput) -> RunStatus {
    h.store.get_run(&out.run_id).await.unwrap().unwrap().status
}

async fn decide(h: &Harness, out: &RunOutput, verdict: Verdict, reason: Option<&str>) -> bool {
    let request = &out.awaiting_approval[0];
    h.store
        .decide_approval(
            &out.run_id,
            &request.intent_id,
            Decision {
                verdict,
                by: "alice".into(),
                at_ms: now(),
                reason: reason.map(str::to_owned),
            },
        )
        .await
        .unwrap()
        .continues
}

async fn resume(h: &Harness, a: &AgentBinding, out: &RunOutput) -> RunOutput {
    h.engine
        .resume(a, &AcceptAll, &out.run_id, None)
        .await
        .unwrap()
}

fn of_kind(events: &[(EventKind, Value)], kind: EventKind) -> Vec<Value> {
    events
        .iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, v)| v.clone())
        .collect()
}

#[tokio::test]
async fn a_required_call_waits_for_its_approval_and_sends_the_approved_args_once() {
    let h = harness(Faults::none()).await;
    let mut a = gated(&h);
    a.approval.window = Duration::from_secs(2 * 3600);
    let paused = run(&h, &a).await;

    assert!(!paused.interrupted);
    assert_eq!(paused.awaiting_approval.len(), 1, "{:?}", paused.report);
    let request = &paused.awaiting_approval[0];
    assert_eq!(
        (request.tool.as_str(), &request.args),
        (SEND_EMAIL, &email())
    );
    assert_eq!(request.args_digest, ArgsDigest::of(&email()));
    assert_eq!(
        request
            .expires_at_ms
            .saturating_duration_since(request.requested_at_ms),
        Duration::from_secs(2 * 3600),
        "the agent's window"
    );
    assert_eq!(status(&h, &paused).await, RunStatus::AwaitingApproval);
    assert_eq!(
        h.desk.applied_count(SEND_EMAIL),
        0,
        "nothing sent while it waits"
    );
    assert!(
        h.store
            .leases_of_run(&paused.run_id)
            .await
            .unwrap()
            .is_empty(),
        "a waiting run holds no claim"
    );

    // Nobody continues it before the decision.
    let early = h
        .engine
        .resume(&a, &AcceptAll, &paused.run_id, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&early, EngineError::NotResumable { reason, .. } if reason.contains("rein approve")),
        "{early:?}"
    );

    assert!(
        decide(&h, &paused, Verdict::Approved, None).await,
        "the last decision"
    );
    assert_eq!(status(&h, &paused).await, RunStatus::Running);
    let done = resume(&h, &a, &paused).await;
    assert_eq!(done.report.outcome, Outcome::Succeeded, "{:?}", done.report);
    let sent = h.desk.applied(SEND_EMAIL);
    assert_eq!(sent.len(), 1, "exactly one email");
    assert_eq!(sent[0].args, email(), "with the approved arguments");

    let events = kinds(&h, &done).await;
    let requested = of_kind(&events, EventKind::ApprovalRequested);
    assert_eq!(requested.len(), 1);
    assert_eq!(
        requested[0]["args_digest"],
        json!(request.args_digest.as_str())
    );
    let decided = of_kind(&events, EventKind::ApprovalDecided);
    assert_eq!(decided.len(), 1);
    assert_eq!(
        (decided[0]["verdict"].as_str(), decided[0]["by"].as_str()),
        (Some("approved"), Some("alice"))
    );
}

#[tokio::test]
async fn a_rejected_call_is_never_sent_and_the_model_is_told_why() {
    let h = harness(Faults::none()).await;
    let a = gated(&h);
    let paused = run(&h, &a).await;
    assert!(decide(&h, &paused, Verdict::Rejected, Some("wrong buyer")).await);
    let done = resume(&h, &a, &paused).await;

    assert_eq!(
        h.desk.applied_count(SEND_EMAIL),
        0,
        "a rejected call is never sent"
    );
    let replies = tool_messages(&h, &done).await;
    let reply = replies.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_owned();
    let reply: Value = serde_json::from_str(&reply).unwrap();
    assert_eq!(reply["error"], "declined_by_human");
    assert!(
        reply["message"].as_str().unwrap().contains("wrong buyer"),
        "{reply}"
    );
    assert_ne!(done.report.outcome, Outcome::Succeeded, "{:?}", done.report);
    assert!(
        done.report
            .incomplete
            .iter()
            .any(|i| format!("{i:?}").contains("a human declined it: wrong buyer")),
        "the report says what was not done and why: {:?}",
        done.report.incomplete
    );
}

#[tokio::test]
async fn a_call_at_or_above_the_agents_tier_waits_for_approval() {
    let h = harness(Faults::none()).await;
    let mut a = agent(
        &h.desk,
        script(json!([
            update("A-1001", "2026-12-24T10:00:00Z"),
            call(SEND_EMAIL, email()),
            answer("moved and told"),
        ])),
        false,
    );
    a.tools
        .get_mut(UPDATE_DELIVERY_TIME)
        .unwrap()
        .declared
        .side_effect_tier = Some(SideEffectTier::Low);
    a.tools
        .get_mut(SEND_EMAIL)
        .unwrap()
        .declared
        .side_effect_tier = Some(SideEffectTier::High);
    a.approval.from_tier = Some(SideEffectTier::High);
    let paused = run(&h, &a).await;

    assert_eq!(
        h.desk.applied_count(UPDATE_DELIVERY_TIME),
        1,
        "below the tier: no wait"
    );
    assert_eq!(paused.awaiting_approval.len(), 1);
    assert_eq!(paused.awaiting_approval[0].tool, SEND_EMAIL);
    assert!(
        paused.awaiting_approval[0].why.contains("tier"),
        "{}",
        paused.awaiting_approval[0].why
    );
    assert!(decide(&h, &paused, Verdict::Approved, None).await);
    let done = resume(&h, &a, &paused).await;
    assert_eq!(done.report.outcome, Outcome::Succeeded, "{:?}", done.report);
    assert_eq!(
        h.desk.applied_count(UPDATE_DELIVERY_TIME),
        1,
        "not repeated"
    );
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 1);
}

#[tokio::test]
async fn an_expired_approval_is_recorded_by_rein_and_told_to_the_model() {
    let h = harness(Faults::none()).await;
    let a = gated(&h);
    let paused = run(&h, &a).await;
    let closes = paused.awaiting_approval[0].expires_at_ms;

    let expired = h.store.expire_approvals(closes, 100).await.unwrap();
    let ours: Vec<_> = expired
        .iter()
        .filter(|e| e.request.run_id == paused.run_id)
        .collect();
    assert_eq!(ours.len(), 1);
    let decision = ours[0].decision.clone().unwrap();
    assert_eq!(
        (decision.verdict, decision.by.as_str()),
        (Verdict::Expired, EXPIRED_BY)
    );
    assert_eq!(
        status(&h, &paused).await,
        RunStatus::Running,
        "the sweep continues it"
    );

    let done = resume(&h, &a, &paused).await;
    assert_eq!(
        h.desk.applied_count(SEND_EMAIL),
        0,
        "an expired call is never sent"
    );
    let replies = tool_messages(&h, &done).await;
    let reply: Value =
        serde_json::from_str(replies.last().unwrap()["content"].as_str().unwrap()).unwrap();
    assert_eq!(reply["error"], "approval_expired");
    let events = kinds(&h, &done).await;
    let decided = of_kind(&events, EventKind::ApprovalDecided);
    assert_eq!(decided[0]["verdict"], "expired");
    assert_eq!(decided[0]["by"], EXPIRED_BY);
}

#[tokio::test]
async fn a_decision_holds_on_resume_even_when_the_config_no_longer_asks_for_approval() {
    let h = harness(Faults::none()).await;
    let gated = gated(&h);
    let paused = run(&h, &gated).await;
    assert!(decide(&h, &paused, Verdict::Rejected, Some("not to this buyer")).await);

    // Resumed under a config whose email needs no approval any more.
    let mut ungated = gated.clone();
    ungated.tools.get_mut(SEND_EMAIL).unwrap().declared.approval = ToolApproval::Never;
    let done = resume(&h, &ungated, &paused).await;
    assert_eq!(
        h.desk.applied_count(SEND_EMAIL),
        0,
        "a \"no\" stays a \"no\""
    );
    let replies = tool_messages(&h, &done).await;
    let reply: Value =
        serde_json::from_str(replies.last().unwrap()["content"].as_str().unwrap()).unwrap();
    assert_eq!(reply["error"], "declined_by_human", "{reply}");
}

#[tokio::test]
async fn a_resume_records_the_windows_that_closed_when_no_server_swept_them() {
    let clock = rein_core::ManualClock::new();
    let engine_clock = clock.clone();
    let h = harness_with(Faults::none(), move |b| b.clock(Arc::new(engine_clock))).await;
    let mut a = gated(&h);
    a.approval.window = Duration::from_secs(3600);
    let paused = run(&h, &a).await;
    assert_eq!(status(&h, &paused).await, RunStatus::AwaitingApproval);

    // Before the window closes, nothing is continued; after, the resume
    // records the expiry itself and the model is told.
    assert!(
        h.engine
            .resume(&a, &AcceptAll, &paused.run_id, None)
            .await
            .is_err()
    );
    clock.advance(Duration::from_secs(2 * 3600));
    let done = resume(&h, &a, &paused).await;
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 0);
    let decided = of_kind(&kinds(&h, &done).await, EventKind::ApprovalDecided);
    assert_eq!(decided[0]["verdict"], "expired", "{decided:?}");
    assert_eq!(decided[0]["by"], EXPIRED_BY);
}

#[tokio::test]
async fn a_cancel_taken_after_the_approval_stops_the_approved_call_before_it_is_sent() {
    let h = harness(Faults::none()).await;
    let a = gated(&h);
    let paused = run(&h, &a).await;
    assert!(decide(&h, &paused, Verdict::Approved, None).await);
    // Taken by another node between the decision and the continuation.
    h.store
        .request_cancel(rein_store::CancelRequest {
            run_id: paused.run_id.clone(),
            requested_by: "node-b".into(),
            requested_at_ms: now(),
        })
        .await
        .unwrap();
    let done = resume(&h, &a, &paused).await;
    assert_eq!(done.report.outcome, Outcome::Cancelled, "{:?}", done.report);
    assert_eq!(
        h.desk.applied_count(SEND_EMAIL),
        0,
        "nothing sent after the cancel"
    );
}

//! The public guard API: a run whose loop is the caller's ([`RunHandle`]),
//! each of its calls the engine's one guarded call, its end the engine's
//! one conclusion. Real parts on loopback: the order desk, SQLite; paused
//! time. The agent's scripted provider is never asked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{agent, harness, restore, script};
use rein_core::approval::{ApprovalRequest, Decision, Verdict};
use rein_core::registry::{CompensationGrade, ToolApproval};
use rein_core::{Category, Effect, EventKind, LedgerStatus, Outcome, Timestamp};
use rein_engine::run::{AcceptAll, Approver, Engine, RunRequest};
use rein_store::{
    ApprovalFilter, Committed, Intercept, Intercepted, RunStatus, StepCommit, Store, StoreError,
};
use rein_testkit::RetryAfter;
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, RESTORE_DELIVERY_TIME, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::json;

fn request() -> RunRequest {
    RunRequest {
        input: "Move order A-1001 to Christmas Eve and tell the buyer.".into(),
        ..RunRequest::default()
    }
}

fn move_order() -> serde_json::Value {
    json!({"order_id": "A-1001", "delivery_date": "2026-12-24"})
}

#[tokio::test(start_paused = true)]
async fn a_callers_loop_gets_the_guarded_call_and_an_honest_end() {
    let h = harness(Faults::none()).await;
    // The provider would fail if asked: the loop is the caller's.
    let a = agent(&h.desk, script(json!([])), true);
    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();

    let order = run
        .call(GET_ORDER, json!({"order_id": "A-1001"}), "read-order")
        .await;
    assert_eq!(order.outcome.as_ref().unwrap()["order_id"], "A-1001");
    let moved = run
        .call(UPDATE_DELIVERY_TIME, move_order(), "move-order")
        .await;
    assert!(moved.outcome.is_ok(), "{:?}", moved.outcome);
    assert_eq!(moved.ledger, Some(LedgerStatus::Succeeded));
    let run_id = run.run_id().clone();
    let out = run.finish(Some("moved".into())).await.unwrap();

    assert_eq!(out.run_id, run_id);
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let record = h.store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Finished(Outcome::Succeeded));
    let ledger = h.store.ledger(&run_id).await.unwrap();
    assert_eq!(ledger.len(), 1, "the write, recorded ahead");
    assert_eq!(ledger[0].status, LedgerStatus::Succeeded);
    assert_eq!(ledger[0].intent_id.as_str(), "move-order");
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    // Its intents were durable before the calls ran, and the run's events
    // read like any run's.
    let intents = h.store.intents(&run_id).await.unwrap();
    assert_eq!(intents.len(), 2);
    let kinds: Vec<EventKind> = h
        .store
        .events(&run_id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.data.kind())
        .collect();
    for kind in [
        EventKind::RunStarted,
        EventKind::PlanCreated,
        EventKind::LedgerRecorded,
        EventKind::RunFinished,
    ] {
        assert!(kinds.contains(&kind), "{kind:?} in {kinds:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn the_same_intent_twice_is_one_action() {
    let h = harness(Faults::none()).await;
    let a = agent(&h.desk, script(json!([])), true);
    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();
    let first = run
        .call(UPDATE_DELIVERY_TIME, move_order(), "move-order")
        .await;
    let again = run
        .call(UPDATE_DELIVERY_TIME, move_order(), "move-order")
        .await;
    assert_eq!(first.outcome, again.outcome, "the recorded result");
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(
        h.desk.request_count(UPDATE_DELIVERY_TIME),
        1,
        "not sent again"
    );
    run.finish(Some("moved".into())).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_refused_call_leaves_no_record_and_an_abandoned_run_is_compensated() {
    let h = harness(Faults::none()).await;
    let mut a = agent(&h.desk, script(json!([])), true);
    a.compensations.insert(
        UPDATE_DELIVERY_TIME.to_owned(),
        restore(&h.desk, CompensationGrade::Strong),
    );
    h.desk
        .push_fault(SEND_EMAIL, Fault::rate_limited(RetryAfter::Seconds(3600)))
        .unwrap();
    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();

    let unknown = run.call("delete_everything", json!({}), "oops").await;
    let failure = unknown.outcome.unwrap_err();
    assert_eq!(failure.category(), Category::InvalidArguments);
    assert!(
        run.call(UPDATE_DELIVERY_TIME, move_order(), "move")
            .await
            .outcome
            .is_ok()
    );
    let email = json!({"to": "buyer@example.com", "subject": "Moved", "body": "Christmas Eve"});
    let mail = run.call(SEND_EMAIL, email, "tell-buyer").await;
    assert_eq!(mail.outcome.unwrap_err().category(), Category::RateLimited);
    assert_eq!(mail.attempts, 1, "irreversible: never repeated");
    let run_id = run.run_id().clone();
    let out = run.abandon("the buyer could not be told").await.unwrap();

    assert_ne!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let ledger = h.store.ledger(&run_id).await.unwrap();
    let statuses: Vec<(String, LedgerStatus)> =
        ledger.iter().map(|r| (r.tool.clone(), r.status)).collect();
    assert!(
        statuses.contains(&(UPDATE_DELIVERY_TIME.to_owned(), LedgerStatus::Compensated)),
        "{statuses:?}"
    );
    assert!(
        !statuses.iter().any(|(t, _)| t == "delete_everything"),
        "a refused call has no record"
    );
    assert_eq!(
        h.desk.applied_count(RESTORE_DELIVERY_TIME),
        1,
        "undone once"
    );
}

/// Refuses every commit that declares a ledger record while `away`.
struct Away(Arc<AtomicBool>);

#[async_trait::async_trait]
impl Intercept for Away {
    async fn commit_step(
        &self,
        inner: &dyn Store,
        run_id: &rein_core::RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        if self.0.load(Ordering::SeqCst) && !commit.declares.is_empty() {
            return Err(StoreError::Unavailable(
                "injected: the database is away".into(),
            ));
        }
        inner.commit_step(run_id, commit).await
    }
}

#[tokio::test(start_paused = true)]
async fn a_store_that_stays_away_hands_the_run_on_and_rejoin_finishes_it() {
    let mut h = harness(Faults::none()).await;
    let away = Arc::new(AtomicBool::new(true));
    let store: Arc<dyn Store> = Arc::new(Intercepted::new(h.store.clone(), Away(away.clone())));
    h.engine = Engine::builder(store)
        .store_patience(Duration::from_secs(2))
        .build()
        .unwrap();
    let a = agent(&h.desk, script(json!([])), true);
    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();
    let run_id = run.run_id().clone();

    let moved = run.call(UPDATE_DELIVERY_TIME, move_order(), "move").await;
    assert!(
        moved.outcome.is_err(),
        "not made: its record could not be declared"
    );
    let out = run.finish(Some("moved".into())).await.unwrap();
    assert!(
        out.interrupted,
        "handed on, never failed: {:#?}",
        out.report
    );
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 0);
    let record = h.store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Running);

    away.store(false, Ordering::SeqCst);
    let mut run = h.engine.rejoin(&a, &AcceptAll, &run_id).await.unwrap();
    assert!(
        run.call(UPDATE_DELIVERY_TIME, move_order(), "move")
            .await
            .outcome
            .is_ok()
    );
    let out = run.finish(Some("moved".into())).await.unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

/// An approver of the caller's own: answers with `verdict` (or nothing),
/// and keeps what it was asked.
struct Asked {
    verdict: Option<Verdict>,
    asked: std::sync::Mutex<Vec<ApprovalRequest>>,
}

impl Asked {
    fn answering(verdict: Option<Verdict>) -> Arc<Asked> {
        Arc::new(Asked {
            verdict,
            asked: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn asked(&self) -> Vec<ApprovalRequest> {
        self.asked.lock().unwrap().clone()
    }
}

impl Approver for Asked {
    fn ask<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<Decision>> + Send + 'a>> {
        self.asked.lock().unwrap().push(request.clone());
        Box::pin(async move {
            self.verdict.map(|verdict| Decision {
                verdict,
                by: "mcp:desk-app".into(),
                at_ms: Timestamp::from_system_time(std::time::SystemTime::now()),
                reason: (verdict == Verdict::Rejected).then(|| "not today".into()),
            })
        })
    }
}

fn email() -> serde_json::Value {
    json!({"to": "buyer@example.com", "subject": "Moved", "body": "Christmas Eve"})
}

/// An agent whose `send_email` needs a human's approval.
fn gated(h: &common::Harness) -> rein_engine::run::AgentBinding {
    let mut a = agent(&h.desk, script(json!([])), true);
    a.tools.get_mut(SEND_EMAIL).unwrap().declared.approval = ToolApproval::Required;
    a
}

#[tokio::test(start_paused = true)]
async fn a_call_that_needs_approval_is_sent_once_a_human_approves_it_through_rein() {
    let h = harness(Faults::none()).await;
    let a = gated(&h);
    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();
    let run_id = run.run_id().clone();

    // A human, elsewhere, finds the call among the pending approvals (the
    // run is still running: its caller holds it) and approves it.
    let store = h.store.clone();
    let human = tokio::spawn(async move {
        let waiting = pending(&store).await;
        assert_eq!(waiting.request.tool, SEND_EMAIL);
        store
            .decide_approval(
                &waiting.request.run_id,
                &waiting.request.intent_id,
                Decision {
                    verdict: Verdict::Approved,
                    by: "alice".into(),
                    at_ms: Timestamp::from_system_time(std::time::SystemTime::now()),
                    reason: None,
                },
            )
            .await
            .unwrap()
    });
    let mail = run.call(SEND_EMAIL, email(), "tell-buyer").await;
    // Bounded in paused time: without a gate the call is sent at once and
    // the human never finds it waiting.
    let decided = tokio::time::timeout(Duration::from_secs(3_600), human)
        .await
        .expect("the call waited, pending, for the human's decision")
        .unwrap();
    assert!(!decided.continues, "the run was never paused");
    assert!(mail.outcome.is_ok(), "{:?}", mail.outcome);
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 1);
    let out = run.finish(Some("told".into())).await.unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);

    let kinds: Vec<EventKind> = h
        .store
        .events(&run_id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.data.kind())
        .collect();
    let requested = kinds
        .iter()
        .position(|k| *k == EventKind::ApprovalRequested);
    let decided = kinds.iter().position(|k| *k == EventKind::ApprovalDecided);
    let recorded = kinds.iter().position(|k| *k == EventKind::LedgerRecorded);
    assert!(
        requested < decided && decided < recorded && requested.is_some(),
        "asked, decided, then sent: {kinds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn an_approvers_answer_is_recorded_and_a_no_is_never_sent() {
    let h = harness(Faults::none()).await;
    let a = gated(&h);

    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();
    let yes = Asked::answering(Some(Verdict::Approved));
    run.ask_approvals_of(Some(yes.clone()));
    let mail = run.call(SEND_EMAIL, email(), "tell-buyer").await;
    assert!(mail.outcome.is_ok(), "{:?}", mail.outcome);
    assert_eq!(yes.asked().len(), 1);
    assert_eq!(yes.asked()[0].args, email());
    let approvals = h
        .store
        .approvals(&ApprovalFilter {
            run_id: Some(run.run_id().clone()),
            limit: 10,
            ..ApprovalFilter::default()
        })
        .await
        .unwrap();
    let decision = approvals[0].decision.clone().unwrap();
    assert_eq!(
        (decision.verdict, decision.by.as_str()),
        (Verdict::Approved, "mcp:desk-app")
    );
    // A read needs no approval: the approver is not asked.
    run.call(GET_ORDER, json!({"order_id": "A-1001"}), "read")
        .await;
    assert_eq!(yes.asked().len(), 1);
    run.finish(Some("told".into())).await.unwrap();
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 1);

    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();
    run.ask_approvals_of(Some(Asked::answering(Some(Verdict::Rejected))));
    let mail = run.call(SEND_EMAIL, email(), "tell-buyer").await;
    let failure = mail.outcome.unwrap_err();
    assert_eq!(failure.category(), Category::Forbidden);
    assert_eq!(failure.effect(), Effect::NotApplied);
    assert!(!failure.retryable());
    assert!(
        failure
            .human_message()
            .contains("a human declined it: not today"),
        "the reason is kept: {}",
        failure.human_message()
    );
    assert!(h.store.ledger(run.run_id()).await.unwrap().is_empty());
    run.finish(None).await.unwrap();
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 1, "the no was never sent");
}

#[tokio::test(start_paused = true)]
async fn a_call_with_no_decision_by_the_runs_deadline_is_not_sent() {
    let h = harness(Faults::none()).await;
    let a = gated(&h);
    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();
    // An approver with nothing to say: the call waits for a human.
    let silent = Asked::answering(None);
    run.ask_approvals_of(Some(silent.clone()));
    let mail = run.call(SEND_EMAIL, email(), "tell-buyer").await;
    let failure = mail.outcome.unwrap_err();
    assert_eq!(failure.category(), Category::BudgetExhausted);
    assert_eq!(failure.effect(), Effect::NotApplied);
    assert_eq!(silent.asked().len(), 1, "asked once");
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 0);
    let out = run.finish(Some("told".into())).await.unwrap();
    assert_ne!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let pending = h
        .store
        .approvals(&ApprovalFilter {
            pending: true,
            limit: 10,
            ..ApprovalFilter::default()
        })
        .await
        .unwrap();
    assert!(
        pending.is_empty(),
        "the ended run waits for nothing: {pending:?}"
    );
}

/// Waits (in paused time) until a call of the store is pending approval,
/// and returns it.
async fn pending(store: &Arc<dyn Store>) -> rein_core::approval::Approval {
    loop {
        let pending = store
            .approvals(&ApprovalFilter {
                pending: true,
                limit: 10,
                ..ApprovalFilter::default()
            })
            .await
            .unwrap();
        if let Some(waiting) = pending.into_iter().next() {
            return waiting;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_expired_approval_with_handoff_stops_every_later_call() {
    let h = harness(Faults::none()).await;
    let mut a = gated(&h);
    a.approval.on_expiry = rein_core::registry::OnExpiry::Handoff;
    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();
    // The window closes with nobody deciding: the sweep records it.
    let store = h.store.clone();
    let sweeper = tokio::spawn(async move {
        let waiting = pending(&store).await;
        let after = waiting.request.expires_at_ms + Duration::from_secs(1);
        store.expire_approvals(after, 10).await.unwrap()
    });
    let mail = run.call(SEND_EMAIL, email(), "tell-buyer").await;
    assert_eq!(sweeper.await.unwrap().len(), 1);
    assert_eq!(mail.outcome.unwrap_err().category(), Category::Forbidden);
    // The run goes to a human: nothing more goes out, not even a write
    // that needs no approval.
    let moved = run.call(UPDATE_DELIVERY_TIME, move_order(), "move").await;
    assert_eq!(moved.outcome.unwrap_err().category(), Category::Forbidden);
    assert_eq!(h.desk.request_count(UPDATE_DELIVERY_TIME), 0);
    assert_eq!(h.desk.request_count(SEND_EMAIL), 0);
    let out = run.finish(Some("told".into())).await.unwrap();
    assert_eq!(out.report.outcome, Outcome::HandedOff, "{:#?}", out.report);
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_stops_waiting_sends_nothing_and_the_run_goes_on() {
    let h = harness(Faults::none()).await;
    let a = gated(&h);
    let mut run = h.engine.begin(&a, &AcceptAll, request()).await.unwrap();
    let gone = tokio_util::sync::CancellationToken::new();
    run.end_waits_with(Some(gone.clone()));
    let store = h.store.clone();
    let client = tokio::spawn(async move {
        pending(&store).await;
        gone.cancel();
    });
    let mail = run.call(SEND_EMAIL, email(), "tell-buyer").await;
    client.await.unwrap();
    let failure = mail.outcome.unwrap_err();
    assert_eq!(failure.category(), Category::Cancelled);
    assert_eq!(failure.effect(), Effect::NotApplied);
    assert_eq!(h.desk.request_count(SEND_EMAIL), 0);
    let order = run
        .call(GET_ORDER, json!({"order_id": "A-1001"}), "read-order")
        .await;
    assert!(
        order.outcome.is_ok(),
        "the run goes on: {:?}",
        order.outcome
    );
    run.finish(Some("read".into())).await.unwrap();
}

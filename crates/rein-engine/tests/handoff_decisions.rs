//! Handoff decisions (issue 33, item 2): a run handed off with effects it
//! could not settle is resolved record by record against the real order
//! desk; each decision is durable and attributed, the report follows the
//! ledger, the last decision closes the run with what stands, and the
//! reconciler leaves decided records alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;

use common::*;
use rein_core::handoff::Decision;
use rein_core::{EventData, IntentId, LedgerRecord, LedgerStatus, Outcome, ReportNote, RunId};
use rein_engine::handoff::{DecisionRequest, ResolveError, Resolver};
use rein_engine::reconcile::{ReconcileConfig, Reconciler, SweepClasses};
use rein_engine::run::AgentBinding;
use rein_store::RunStatus;
use rein_testkit::order_desk::{
    Fault, Faults, RESTORE_DELIVERY_TIME, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::json;

fn resolver(h: &Harness, a: &AgentBinding) -> Resolver {
    Resolver::new(
        h.store.clone(),
        Arc::new(rein_engine::SystemClock::new()),
        reqwest::Client::new(),
        a.tools.clone(),
        a.compensations.clone(),
    )
}

fn ask(intent: &IntentId, decision: Decision) -> DecisionRequest {
    DecisionRequest {
        intent_id: intent.clone(),
        decision,
        by: "alice".into(),
        reason: Some(format!("{decision} after checking the desk")),
    }
}

async fn ledger(h: &Harness, run: &RunId) -> Vec<LedgerRecord> {
    let mut records = h.store.ledger(run).await.unwrap();
    records.sort_by_key(|r| r.seq);
    records
}

async fn decided_events(h: &Harness, run: &RunId) -> Vec<rein_core::event::HandoffDecided> {
    h.store
        .events(run, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.data {
            EventData::HandoffDecided(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// Two updates kept `manual` (their strong compensation failed against a
/// desk that refuses restores): one is compensated on a human's word once
/// the desk works again, the other retried under its key (the desk
/// collapses it), and the run closes with what stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_run_is_resolved_record_by_record_and_closes_with_what_stands() {
    let h = harness(Faults::none().always(RESTORE_DELIVERY_TIME, Fault::status(503))).await;
    conflict_on_update(&h.desk, 3);
    let a = agent(&h.desk, script(three_updates()), true);
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::HandedOff, "{:#?}", out.report);
    let records = ledger(&h, &out.run_id).await;
    let manual: Vec<&LedgerRecord> = records
        .iter()
        .filter(|r| r.status == LedgerStatus::Manual)
        .collect();
    assert_eq!(manual.len(), 2, "{records:#?}");
    let (first, second) = (manual[0].intent_id.clone(), manual[1].intent_id.clone());
    let resolver = resolver(&h, &a);

    // The compensation is asked for while the desk still refuses it: the
    // attempt is recorded, the record still awaits a decision.
    let refused = resolver
        .resolve(&out.run_id, &ask(&first, Decision::Compensate))
        .await;
    assert!(
        matches!(refused, Err(ResolveError::ActionFailed { .. })),
        "{refused:?}"
    );
    assert_eq!(
        ledger(&h, &out.run_id).await[0].status,
        LedgerStatus::Manual
    );
    let attempts = decided_events(&h, &out.run_id).await;
    assert_eq!(attempts.len(), 1);
    assert!(attempts[0].failed.is_some(), "{attempts:?}");
    assert_eq!(attempts[0].status, LedgerStatus::Manual);

    // Once the desk works, it undoes the first update.
    h.desk.clear_faults();
    let restores_before = h.desk.applied_count(RESTORE_DELIVERY_TIME);
    let compensated = resolver
        .resolve(&out.run_id, &ask(&first, Decision::Compensate))
        .await
        .unwrap();
    assert_eq!(compensated.from, LedgerStatus::Manual);
    assert_eq!(compensated.status, LedgerStatus::Compensated);
    assert_eq!(compensated.still_awaiting, 1);
    assert_eq!(compensated.closed, None, "one record still awaits");
    assert_eq!(
        compensated.run_status,
        RunStatus::Finished(Outcome::HandedOff)
    );
    assert_eq!(
        h.desk.applied_count(RESTORE_DELIVERY_TIME),
        restores_before + 1
    );
    // The stored report follows the ledger.
    let stored = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    let package = stored.report.unwrap().handoff.expect("one record awaits");
    assert_eq!(package.awaiting_decision.len(), 1);
    assert_eq!(package.awaiting_decision[0].intent_id, second);

    // The same decision again changes nothing; another one is refused,
    // naming the one that stands.
    let again = resolver
        .resolve(&out.run_id, &ask(&first, Decision::Compensate))
        .await
        .unwrap();
    assert!(again.repeated);
    assert_eq!(
        h.desk.applied_count(RESTORE_DELIVERY_TIME),
        restores_before + 1,
        "a repeated decision sends nothing"
    );
    match resolver
        .resolve(&out.run_id, &ask(&first, Decision::Accepted))
        .await
    {
        Err(ResolveError::AlreadyDecided {
            decision,
            by,
            status,
            ..
        }) => {
            assert_eq!(decision, Decision::Compensate);
            assert_eq!(by, "alice");
            assert_eq!(status, LedgerStatus::Compensated);
        }
        other => panic!("a conflicting decision is refused: {other:?}"),
    }

    // The second update is retried under its original key: the desk
    // replays it, nothing is applied twice.
    let applied = h.desk.applied_count(UPDATE_DELIVERY_TIME);
    let replayed = h.desk.replayed_count(UPDATE_DELIVERY_TIME);
    let retried = resolver
        .resolve(&out.run_id, &ask(&second, Decision::Retry))
        .await
        .unwrap();
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), applied);
    assert_eq!(h.desk.replayed_count(UPDATE_DELIVERY_TIME), replayed + 1);
    assert_eq!(retried.status, LedgerStatus::Accepted);
    assert!(retried.result.is_some());
    assert_eq!(retried.still_awaiting, 0);
    // The last decision closes the run: the second update stands, so the
    // run ends as its work did, not handed off.
    let closed = retried.closed.expect("nothing awaits any more: closed");
    assert_ne!(closed, Outcome::HandedOff);
    assert_eq!(retried.run_status, RunStatus::Finished(closed));
    let stored = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Finished(closed));
    let report = stored.report.unwrap();
    assert_eq!(report.outcome, closed);
    assert!(report.handoff.is_none(), "{report:#?}");
    assert!(
        report
            .notes
            .iter()
            .any(|n| matches!(n, ReportNote::ClosedByHuman { decisions: 2, .. })),
        "{:?}",
        report.notes
    );
    assert!(
        report.summary.contains("closed once a human had decided"),
        "{}",
        report.summary
    );

    let decided = decided_events(&h, &out.run_id).await;
    assert_eq!(
        decided.len(),
        3,
        "one failed attempt, two decisions: {decided:?}"
    );
    assert!(decided.iter().all(|d| d.by == "alice"));
    assert_eq!(decided[2].closed, Some(closed));

    // The reconciler, with a desk that would now take the restore, leaves
    // the decided records alone.
    let before = ledger(&h, &out.run_id).await;
    let reconciler = Reconciler::new(
        h.store.clone(),
        Arc::new(rein_engine::SystemClock::new()),
        reqwest::Client::new(),
        a.tools.clone(),
        a.compensations.clone(),
        ReconcileConfig::default(),
    );
    let swept = reconciler.sweep(SweepClasses::ALL).await.unwrap();
    assert!(
        swept.fixed.is_empty() && swept.handed_off.is_empty(),
        "{swept:?}"
    );
    assert_eq!(ledger(&h, &out.run_id).await, before);
}

/// The email went out and cannot be undone: it can be neither retried nor
/// compensated, only accepted, and then the run closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_irreversible_effect_is_only_accepted_or_undone_by_hand() {
    let h = harness(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::status(409))).await;
    let email = json!({"to": "buyer@example.com", "subject": "s", "body": "b"});
    let a = agent(
        &h.desk,
        script(json!([
            call(SEND_EMAIL, email),
            update("A-1001", "2026-02-01T10:00:00Z"),
            answer("stuck"),
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::HandedOff, "{:#?}", out.report);
    let email = ledger(&h, &out.run_id).await[0].clone();
    assert_eq!(email.status, LedgerStatus::Uncompensatable);
    let resolver = resolver(&h, &a);
    for decision in [Decision::Retry, Decision::Compensate] {
        let refused = resolver
            .resolve(&out.run_id, &ask(&email.intent_id, decision))
            .await;
        assert!(
            matches!(refused, Err(ResolveError::NotApplicable { .. })),
            "{decision}: {refused:?}"
        );
    }
    assert_eq!(
        h.desk.applied_count(SEND_EMAIL),
        1,
        "nothing was sent again"
    );
    assert!(decided_events(&h, &out.run_id).await.is_empty());

    let accepted = resolver
        .resolve(&out.run_id, &ask(&email.intent_id, Decision::Accepted))
        .await
        .unwrap();
    assert_eq!(accepted.status, LedgerStatus::Accepted);
    let closed = accepted.closed.expect("the email was all that awaited");
    assert_ne!(closed, Outcome::HandedOff);
    let stored = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Finished(closed));
}

/// Records that await nothing, and records that do not exist, are refused
/// with what stands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_record_that_awaits_a_human_can_be_decided() {
    let h = harness(Faults::none()).await;
    let a = agent(
        &h.desk,
        script(json!([
            update("A-1001", "2026-02-01T10:00:00Z"),
            answer("done"),
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded);
    let update = ledger(&h, &out.run_id).await[0].clone();
    let resolver = resolver(&h, &a);
    match resolver
        .resolve(&out.run_id, &ask(&update.intent_id, Decision::Undone))
        .await
    {
        Err(ResolveError::NotAwaiting { status, .. }) => {
            assert_eq!(status, LedgerStatus::Succeeded)
        }
        other => panic!("{other:?}"),
    }
    let nothing = IntentId::new("no-such-intent").unwrap();
    assert!(matches!(
        resolver
            .resolve(&out.run_id, &ask(&nothing, Decision::Accepted))
            .await,
        Err(ResolveError::NoRecord { .. })
    ));
    let ghost = RunId::new("no-such-run").unwrap();
    assert!(matches!(
        resolver
            .resolve(&ghost, &ask(&nothing, Decision::Accepted))
            .await,
        Err(ResolveError::RunNotFound(_))
    ));
    assert_eq!(
        h.store.get_run(&out.run_id).await.unwrap().unwrap().status,
        RunStatus::Finished(Outcome::Succeeded)
    );
}

/// `approval.on_expiry = "handoff"`: the email's approval expires, nothing
/// of its turn is sent, and the run goes to a human with the update it
/// made; a human has it undone, and the run closes `failed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_approval_under_on_expiry_handoff_hands_the_run_to_a_human() {
    use rein_core::registry::{OnExpiry, ToolApproval};
    let h = harness(Faults::none()).await;
    let email = json!({"to": "buyer@example.com", "subject": "New date", "body": "8 January"});
    let mut a = agent(
        &h.desk,
        script(json!([
            update("A-1001", "2026-02-01T10:00:00Z"),
            call(SEND_EMAIL, email),
            answer("told the buyer"),
        ])),
        true,
    );
    a.tools.get_mut(SEND_EMAIL).unwrap().declared.approval = ToolApproval::Required;
    a.approval.on_expiry = OnExpiry::Handoff;
    let paused = run(&h, &a).await;
    assert_eq!(paused.awaiting_approval.len(), 1, "{:#?}", paused.report);
    let closes = paused.awaiting_approval[0].expires_at_ms;
    h.store.expire_approvals(closes, 100).await.unwrap();

    let done = h
        .engine
        .resume(&a, &rein_engine::run::AcceptAll, &paused.run_id, None)
        .await
        .unwrap();
    assert_eq!(
        done.report.outcome,
        Outcome::HandedOff,
        "{:#?}",
        done.report
    );
    assert_eq!(
        h.desk.applied_count(SEND_EMAIL),
        0,
        "the expired email is never sent"
    );
    let package = done.report.handoff.clone().expect("a package");
    assert!(
        package.reason.contains("approval.on_expiry is handoff"),
        "{}",
        package.reason
    );
    let update = ledger(&h, &done.run_id).await[0].clone();
    assert_eq!(update.tool, UPDATE_DELIVERY_TIME);
    assert_eq!(
        update.status,
        LedgerStatus::Manual,
        "kept for a human, untouched"
    );
    assert_eq!(h.desk.applied_count(RESTORE_DELIVERY_TIME), 0);

    let undone = resolver(&h, &a)
        .resolve(&done.run_id, &ask(&update.intent_id, Decision::Compensate))
        .await
        .unwrap();
    assert_eq!(h.desk.applied_count(RESTORE_DELIVERY_TIME), 1);
    assert_eq!(
        undone.closed,
        Some(Outcome::Failed),
        "the world is as before"
    );
}

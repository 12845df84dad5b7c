//! Reports tell the truth from the ledger (issue 13, item 3): however a
//! run ends, its report lists each effect with the status its ledger
//! record has now, its summary names the outcome it carries, and a
//! handoff package is there whenever a record awaits a human — also after
//! the reconciler changed a record of a run that ended long before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use rein_core::report::awaits_human;
use rein_core::{LedgerStatus, Outcome, RunReport};
use rein_engine::reconcile::{ReconcileConfig, Reconciler, SweepClasses};
use rein_engine::run::RunOutput;
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, RESTORE_DELIVERY_TIME, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::json;

/// The report agrees with the run's ledger and with itself: every record
/// is listed once with its status now, and the summary opens with the
/// outcome.
async fn assert_truthful(h: &Harness, out: &RunOutput) -> RunReport {
    let stored = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    let report = stored.report.expect("a finished run has a report");
    assert_eq!(
        stored.status.outcome(),
        Some(report.outcome),
        "status and report agree"
    );
    assert!(
        report
            .summary
            .starts_with(&format!("The run ended {}", report.outcome)),
        "the summary names the outcome {}: {}",
        report.outcome,
        report.summary
    );
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    let listed: BTreeMap<String, Option<LedgerStatus>> = report
        .completed
        .iter()
        .map(|a| (a.intent_id.to_string(), a.ledger))
        .chain(
            report
                .incomplete
                .iter()
                .map(|a| (a.intent_id.to_string(), a.ledger)),
        )
        .collect();
    for record in &ledger {
        assert_eq!(
            listed.get(record.intent_id.as_str()),
            Some(&Some(record.status)),
            "{} is listed with its ledger status {}: {report:#?}",
            record.tool,
            record.status
        );
    }
    assert_eq!(
        report.handoff.is_some(),
        ledger.iter().any(awaits_human) || report.outcome == Outcome::HandedOff,
        "a package exactly when a record awaits a human: {report:#?}"
    );
    report
}

fn demo_script() -> serde_json::Value {
    json!([
        call(GET_ORDER, json!({"order_id": "A-1001"})),
        update("A-1001", "2026-01-08T14:00:00Z"),
        call(
            SEND_EMAIL,
            json!({"to": "buyer@example.com", "subject": "New date", "body": "8 January"})
        ),
        answer("done"),
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successful_run_lists_its_effects_succeeded() {
    let h = harness(Faults::none()).await;
    let out = run(&h, &agent(&h.desk, script(demo_script()), true)).await;
    let report = assert_truthful(&h, &out).await;
    assert_eq!(report.outcome, Outcome::Succeeded);
    assert_eq!(report.completed.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_keeps_its_update_and_says_the_email_did_not_go() {
    // The update's answer is lost (found by its key), the email is rate
    // limited past the run's budget: the update stays, the run is partial.
    let h = harness(Faults::demo()).await;
    let out = run(&h, &agent(&h.desk, script(demo_script()), true)).await;
    let report = assert_truthful(&h, &out).await;
    assert_eq!(report.outcome, Outcome::PartialSuccess, "{report:#?}");
    assert!(
        report
            .summary
            .contains("Completed: get_order, update_delivery_time.")
    );
    assert!(report.recoverable);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_run_lists_its_undone_effects_compensated() {
    let h = harness(Faults::none()).await;
    conflict_on_update(&h.desk, 3);
    let out = run(&h, &agent(&h.desk, script(three_updates()), true)).await;
    let report = assert_truthful(&h, &out).await;
    assert_eq!(report.outcome, Outcome::Failed, "{report:#?}");
    let undone: Vec<Option<LedgerStatus>> = report.completed.iter().map(|a| a.ledger).collect();
    assert_eq!(
        undone,
        [
            Some(LedgerStatus::Compensated),
            Some(LedgerStatus::Compensated)
        ],
        "each update is listed undone, not with the status its call ended with"
    );
    assert!(report.summary.contains("undone in reverse order"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_run_lists_what_it_could_not_undo_and_says_handed_off() {
    let h = harness(Faults::none().always(RESTORE_DELIVERY_TIME, Fault::status(503))).await;
    conflict_on_update(&h.desk, 3);
    let mut a = agent(&h.desk, script(three_updates()), true);
    a.budget = rein_core::deadline::BudgetLimits::new(ms(3_000))
        .unwrap()
        .with_steps(10)
        .unwrap();
    let out = run(&h, &a).await;
    let report = assert_truthful(&h, &out).await;
    assert_eq!(report.outcome, Outcome::HandedOff, "{report:#?}");
    assert!(
        report
            .completed
            .iter()
            .all(|a| a.ledger == Some(LedgerStatus::Manual)),
        "{report:#?}"
    );
    assert!(report.summary.contains("Handed off:"), "{}", report.summary);
    assert!(
        !report.summary.contains("partial_success"),
        "no contradiction: {}",
        report.summary
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_run_lists_its_update_undone() {
    let h = harness(Faults::none().then(GET_ORDER, Fault::Delay(ms(5_000)))).await;
    let a = agent(
        &h.desk,
        script(json!([
            update("A-1001", "2026-02-01T10:00:00Z"),
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            answer("done"),
        ])),
        true,
    );
    let cancel = rein_engine::run::CancellationToken::new();
    let watch = async {
        while h.desk.request_count(GET_ORDER) == 0 {
            tokio::time::sleep(ms(5)).await;
        }
        cancel.cancel();
    };
    let run = h.engine.run(
        &a,
        &rein_engine::run::AcceptAll,
        rein_engine::run::RunRequest {
            input: "Move order A-1001.".into(),
            cancel: Some(cancel.clone()),
            ..rein_engine::run::RunRequest::default()
        },
    );
    let (out, ()) = tokio::join!(run, watch);
    let out = out.unwrap();
    let report = assert_truthful(&h, &out).await;
    assert_eq!(report.outcome, Outcome::Cancelled);
    assert_eq!(report.completed[0].ledger, Some(LedgerStatus::Compensated));
}

/// A record the reconciler hands to a human after the run ended changes
/// the run's report with it: same outcome, the record listed `manual`, a
/// handoff package, a summary that says a record awaits a human.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reconciler_revises_the_report_of_a_run_whose_record_it_hands_off() {
    let h = harness(Faults::demo()).await;
    let mut a = agent(&h.desk, script(demo_script()), true);
    // Past its window as soon as it is kept: the reconciler hands it off.
    let mut restore = restore(&h.desk, rein_core::registry::CompensationGrade::Strong);
    restore.spec = rein_core::registry::CompensationSpec::new(
        RESTORE_DELIVERY_TIME,
        rein_core::registry::CompensationGrade::Strong,
        Some(ms(1)),
        restore.spec.args.clone(),
    );
    a.compensations
        .insert(UPDATE_DELIVERY_TIME.to_owned(), restore.clone());
    let out = run(&h, &a).await;
    let before = assert_truthful(&h, &out).await;
    assert_eq!(before.outcome, Outcome::PartialSuccess, "{before:#?}");
    assert!(before.handoff.is_none());
    tokio::time::sleep(ms(5)).await;

    let reconciler = Reconciler::new(
        h.store.clone(),
        Arc::new(rein_engine::SystemClock::new()),
        reqwest::Client::new(),
        a.tools.clone(),
        [(UPDATE_DELIVERY_TIME.to_owned(), restore)]
            .into_iter()
            .collect(),
        ReconcileConfig::default(),
    );
    let swept = reconciler.sweep(SweepClasses::ALL).await.unwrap();
    assert_eq!(swept.handed_off.len(), 1, "{swept:?}");
    let after = assert_truthful(&h, &out).await;
    assert_eq!(after.outcome, Outcome::PartialSuccess, "outcomes are final");
    let update = after
        .completed
        .iter()
        .find(|c| c.tool == UPDATE_DELIVERY_TIME)
        .unwrap();
    assert_eq!(update.ledger, Some(LedgerStatus::Manual));
    assert!(
        after.summary.contains("1 record(s) await a human decision"),
        "{}",
        after.summary
    );
    let package = after.handoff.expect("the record awaits a human");
    assert_eq!(package.awaiting_decision.len(), 1);
    assert!(!after.recoverable);
}

//! Reports tell the truth from the ledger (issue 13, item 3): however a
//! run ends, its report lists each effect with the status its ledger
//! record has now, its summary names the outcome it carries, and a
//! handoff package is there whenever a record awaits a human — also after
//! the reconciler changed a record of a run that ended long before.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rein_core::Timestamp;
use std::collections::BTreeMap;
use std::sync::Arc;

use common::*;
use rein_core::RunId;
use rein_core::report::awaits_human;
use rein_core::{LedgerStatus, Outcome, RunReport};
use rein_engine::reconcile::{ReconcileConfig, Reconciler, SweepClasses};
use rein_engine::run::RunOutput;
use rein_store::{
    Intercept, Intercepted, NewRun, RunStatus, StepCommit, Store, StoreError, StoreExt,
};
use rein_store_sqlite::SqliteStore;
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
    // Cancelled on the event that starts the (slow) read: after the update
    // took effect, while a call is in flight.
    let cancel = rein_engine::run::CancellationToken::new();
    let on_read = cancel.clone();
    let observer: rein_engine::run::Observer = Arc::new(move |e: &rein_core::Event| {
        if matches!(&e.data, rein_core::EventData::ToolCallStarted(s) if s.tool == GET_ORDER) {
            on_read.cancel();
        }
    });
    let out = h
        .engine
        .run(
            &a,
            &rein_engine::run::AcceptAll,
            rein_engine::run::RunRequest {
                input: "Move order A-1001.".into(),
                cancel: Some(cancel.clone()),
                observer: Some(observer),
                ..rein_engine::run::RunRequest::default()
            },
        )
        .await
        .unwrap();
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

    // A reconciler whose clock reads a second later: the 1 ms window has
    // passed (no real wait), the 5 min pending timeout has not.
    let later = std::time::SystemTime::now() + ms(1_000);
    let reconciler = Reconciler::new(
        h.store.clone(),
        Arc::new(rein_core::ManualClock::with_wall_origin(later)),
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
        after.summary.contains("1 record awaits a human decision"),
        "{}",
        after.summary
    );
    let package = after.handoff.expect("the record awaits a human");
    assert_eq!(package.awaiting_decision.len(), 1);
    assert!(!after.recoverable);
}

/// A store that meddles at chosen moments: a ledger that cannot be read,
/// or another writer's mark landing just before a run's end is committed.
/// Everything else goes to the real SQLite store.
struct Meddling {
    unreadable_ledger: std::sync::atomic::AtomicBool,
    mark_before_end: std::sync::Mutex<Option<(rein_core::IntentId, rein_store::LedgerMark)>>,
}

impl Meddling {
    fn new(inner: Arc<dyn Store>) -> Intercepted<Meddling> {
        Intercepted::new(
            inner,
            Meddling {
                unreadable_ledger: std::sync::atomic::AtomicBool::new(false),
                mark_before_end: std::sync::Mutex::new(None),
            },
        )
    }
}

#[async_trait::async_trait]
impl Intercept for Meddling {
    async fn ledger(
        &self,
        inner: &dyn Store,
        id: &RunId,
    ) -> Result<Vec<rein_core::LedgerRecord>, StoreError> {
        if self
            .unreadable_ledger
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            return Err(StoreError::Backend(
                "injected: the ledger cannot be read".into(),
            ));
        }
        inner.ledger(id).await
    }

    async fn commit_step(
        &self,
        inner: &dyn Store,
        id: &RunId,
        commit: StepCommit,
    ) -> Result<rein_store::Committed, StoreError> {
        let ends = commit
            .status
            .as_ref()
            .is_some_and(|s| s.status.is_finished());
        let meddle = if ends {
            self.mark_before_end.lock().unwrap().take()
        } else {
            None
        };
        if let Some((intent, mark)) = meddle {
            // Another writer (a reconciler) marks the record after the
            // closer read the ledger, before its commit lands.
            inner
                .commit_step(
                    id,
                    StepCommit {
                        marks: vec![(intent, mark)],
                        ..StepCommit::default()
                    },
                )
                .await
                .unwrap();
        }
        inner.commit_step(id, commit).await
    }
}

/// A run closed from outside while a reconciler marks one of its records:
/// the closed report is derived again from the ledger with the mark, never
/// stored stale (issue 13 review: a report write must not miss a ledger
/// write that landed after its read).
#[tokio::test]
async fn a_record_marked_while_the_run_is_closed_is_in_its_closed_report() {
    let dir = tempfile::tempdir().unwrap();
    let inner: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let store = Meddling::new(inner.clone());
    let run = NewRun {
        run_id: RunId::new("r-closed").unwrap(),
        tenant: rein_core::TenantId::new("acme").unwrap(),
        agent: "desk".into(),
        input: "Move order A-1001.".into(),
        parent_run_id: None,
        budget: json!({}),
        created_at_ms: Timestamp::from_millis(1_000),
        trace_parent: None,
    };
    let run_id = inner.create_run(run).await.unwrap().run_id;
    let intent = rein_core::IntentId::new("i-update").unwrap();
    inner
        .commit_step(
            &run_id,
            StepCommit {
                status: Some(rein_store::StatusChange {
                    status: RunStatus::Running,
                    report: None,
                    at_ms: Timestamp::from_millis(1_001),
                }),
                declares: vec![rein_core::LedgerRecord {
                    run_id: run_id.clone(),
                    intent_id: intent.clone(),
                    seq: 0,
                    step: 1,
                    tool: UPDATE_DELIVERY_TIME.into(),
                    class: rein_core::ToolClass::IdempotentWrite,
                    idempotency_key: None,
                    args: json!({"order_id": "A-1001"}),
                    status: LedgerStatus::Pending,
                    result: None,
                    failure: None,
                    attempts: 1,
                    created_at_ms: Timestamp::from_millis(1_001),
                    updated_at_ms: Timestamp::from_millis(1_001),
                }],
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();
    // The reconciler finds the update by its key meanwhile: it took effect.
    *store.hooks().mark_before_end.lock().unwrap() = Some((
        intent,
        rein_store::LedgerMark {
            status: LedgerStatus::Succeeded,
            result: Some(json!({"order_id": "A-1001"})),
            failure: None,
            attempts: 0,
            at_ms: Timestamp::from_millis(1_500),
        },
    ));
    let record = inner.get_run(&run_id).await.unwrap().unwrap();
    let closing = rein_engine::run::Closing {
        outcome: Outcome::Failed,
        end: rein_engine::run::End::Closed {
            error_type: Some("orphaned".into()),
            reason: "its process died".into(),
        },
        events: Vec::new(),
        expect: Some(RunStatus::Running),
    };
    let report =
        rein_engine::run::close_run(&store, &record, closing, Timestamp::from_millis(2_000))
            .await
            .unwrap();
    assert_eq!(
        report.completed[0].ledger,
        Some(LedgerStatus::Succeeded),
        "{report:#?}"
    );
    assert!(report.handoff.is_none(), "nothing awaits a human now");
    let stored = inner.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(stored.report.as_ref(), Some(&report));
    assert_eq!(
        report.basis.as_ref().and_then(|b| b.ledger_revision),
        Some(stored.ledger_revision),
        "the report reflects the ledger as it stands"
    );
}

/// A run whose ledger cannot be read when it ends does not end with a
/// report that ignores its ledger: the run fails to finish with the store's
/// error, stays `running` with its claim released, and is recovered like a
/// run whose process died.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_ledger_cannot_be_read_at_its_end_is_not_recorded_as_ended() {
    let mut h = harness(Faults::none()).await;
    let meddling = Arc::new(Meddling::new(h.store.clone()));
    let store: Arc<dyn Store> = meddling.clone();
    h.engine = rein_engine::run::Engine::builder(store)
        .rng_seed(7)
        .build()
        .unwrap();
    let on_answer = meddling.clone();
    let observer: rein_engine::run::Observer = Arc::new(move |e: &rein_core::Event| {
        // The model answered: from here on the ledger is unreadable.
        if let rein_core::EventData::ModelCallFinished(f) = &e.data
            && let rein_core::event::ModelCallResult::Answered(a) = &f.result
            && a.tool_calls.is_empty()
        {
            on_answer
                .hooks()
                .unreadable_ledger
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    });
    let a = agent(
        &h.desk,
        script(json!([
            update("A-1001", "2026-01-08T14:00:00Z"),
            answer("done")
        ])),
        true,
    );
    let ended = h
        .engine
        .run(
            &a,
            &rein_engine::run::AcceptAll,
            rein_engine::run::RunRequest {
                run_id: Some(RunId::new("r-unreadable").unwrap()),
                input: "Move order A-1001.".into(),
                observer: Some(observer),
                ..rein_engine::run::RunRequest::default()
            },
        )
        .await;
    assert!(
        matches!(
            ended,
            Err(rein_engine::run::EngineError::Store(StoreError::Backend(_)))
        ),
        "{ended:?}"
    );
    let run = h
        .store
        .get_run(&RunId::new("r-unreadable").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(run.status, RunStatus::Running, "its end is not recorded");
    assert!(run.report.is_none());
    assert!(
        h.store.leases_of_run(&run.run_id).await.unwrap().is_empty(),
        "its claim is released for recovery"
    );
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

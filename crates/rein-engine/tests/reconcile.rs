//! The reconciler learns what a record's compensation did before it hands
//! the record to a human.
//!
//! A run's settlement compensates an update; the store blinks at the
//! update's marks (a lost write between "compensate" and "mark"), so the
//! ledger never learns the outcome. A later reconciler — over the same
//! SQLite file, its clock past the pending timeout — asks the compensating
//! tool by the compensation's own key (the key the settlement used,
//! derived by the same recipe), or reads the run's events, instead of
//! handing the record off blind. Everything real: the order desk on
//! loopback, SQLite on disk; paused time and an injected clock, no sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::*;
use rein_core::registry::{ArgSource, CompensationGrade, CompensationSpec};
use rein_core::{EventData, IntentId, LedgerRecord, LedgerStatus, ManualClock, RunId, ToolClass};
use rein_engine::reconcile::{ReconcileConfig, ReconcileReport, Reconciler, SweepClasses};
use rein_engine::run::{AgentBinding, CompensationBinding, Engine, RunOutput};
use rein_store::{Intercept, Intercepted, StepCommit, Store, StoreError};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{
    EffectKind, Fault, OrderDesk, RESTORE_DELIVERY_TIME, UPDATE_DELIVERY_TIME,
};
use serde_json::json;

/// The order whose update's marks are lost.
const BLINKED: &str = "A-1001";

/// A store that blinks at chosen marks of the update of [`BLINKED`]: every
/// commit carrying one fails, as a store briefly away would fail it.
/// Everything else goes to the real SQLite store.
struct Blink {
    statuses: Vec<LedgerStatus>,
    intent: Mutex<Option<IntentId>>,
}

#[async_trait::async_trait]
impl Intercept for Blink {
    async fn commit_step(
        &self,
        inner: &dyn Store,
        id: &RunId,
        commit: StepCommit,
    ) -> Result<rein_store::Committed, StoreError> {
        if let Some(declared) = commit
            .declares
            .iter()
            .find(|r| r.tool == UPDATE_DELIVERY_TIME && r.args["order_id"] == BLINKED)
        {
            *self.intent.lock().unwrap() = Some(declared.intent_id.clone());
        }
        let blinked = self.intent.lock().unwrap().clone();
        let lost = commit.marks.iter().any(|(intent, mark)| {
            Some(intent) == blinked.as_ref() && self.statuses.contains(&mark.status)
        });
        if lost {
            return Err(StoreError::Backend("injected: the store blinked".into()));
        }
        inner.commit_step(id, commit).await
    }
}

struct Setup {
    desk: OrderDesk,
    /// The SQLite file, as a later process (the reconciler) opens it.
    store: Arc<dyn Store>,
    /// The run's engine, over the blinking store.
    engine: Engine,
    _dir: tempfile::TempDir,
}

/// A desk, a SQLite file, and an engine whose store loses the update of
/// [`BLINKED`]'s marks with any of `statuses`.
async fn setup(statuses: &[LedgerStatus]) -> Setup {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let store: Arc<dyn Store> = Arc::new(pause_safe(sqlite));
    let blinking: Arc<dyn Store> = Arc::new(Intercepted::new(
        store.clone(),
        Blink {
            statuses: statuses.to_vec(),
            intent: Mutex::new(None),
        },
    ));
    let engine = Engine::builder(blinking).rng_seed(7).build().unwrap();
    Setup {
        desk,
        store,
        engine,
        _dir: dir,
    }
}

/// `restore_delivery_time` of `grade` as the update's compensation, built
/// from the update's own arguments alone (as a cancellation by id is), so
/// that it can run for a record whose result the ledger never got; with a
/// status lookup by key when `lookup`.
fn restore_from_args(
    desk: &OrderDesk,
    grade: CompensationGrade,
    lookup: bool,
) -> CompensationBinding {
    let args = [
        ("order_id", "args.order_id"),
        ("delivery_date", "args.delivery_date"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.parse::<ArgSource>().unwrap()))
    .collect();
    CompensationBinding {
        spec: CompensationSpec::new(RESTORE_DELIVERY_TIME, grade, None, args),
        tool: tool(
            desk,
            RESTORE_DELIVERY_TIME,
            ToolClass::IdempotentWrite,
            lookup,
        ),
    }
}

/// The agent: it moves [`BLINKED`], then A-1002, which the desk refuses
/// (409): the run fails and its settlement compensates the first move.
/// The update has a status lookup when `update_lookup`; `compensation`
/// undoes it.
fn agent_with(
    desk: &OrderDesk,
    update_lookup: bool,
    compensation: CompensationBinding,
) -> AgentBinding {
    conflict_on_update(desk, 2);
    let mut a = agent(
        desk,
        script(json!([
            update(BLINKED, "2026-02-01T10:00:00Z"),
            update("A-1002", "2026-02-02T10:00:00Z"),
            answer("could not finish"),
        ])),
        update_lookup,
    );
    a.compensations
        .insert(UPDATE_DELIVERY_TIME.to_owned(), compensation);
    a
}

/// A reconciler over the SQLite file (the store is back) whose clock reads
/// ten minutes on: past the 5 min pending timeout, no real wait.
fn reconciler(s: &Setup, a: &AgentBinding) -> Reconciler {
    let later = SystemTime::now() + Duration::from_secs(600);
    Reconciler::new(
        s.store.clone(),
        Arc::new(ManualClock::with_wall_origin(later)),
        reqwest::Client::new(),
        a.tools.clone(),
        a.compensations.clone(),
        ReconcileConfig::default(),
    )
}

/// The run's update of [`BLINKED`], as its ledger has it.
async fn blinked_record(s: &Setup, out: &RunOutput) -> LedgerRecord {
    s.store
        .ledger(&out.run_id)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.tool == UPDATE_DELIVERY_TIME && r.args["order_id"] == BLINKED)
        .unwrap()
}

/// The key the settlement's `compensation_started` for `record` carries:
/// the key it called the compensation with.
async fn started_key(s: &Setup, record: &LedgerRecord) -> String {
    let events = s.store.events(&record.run_id, 0).await.unwrap();
    let keys: Vec<String> = events
        .iter()
        .filter(|e| e.intent_id.as_ref() == Some(&record.intent_id))
        .filter(|e| matches!(e.data, EventData::CompensationStarted(_)))
        .map(|e| e.idempotency_key.as_ref().unwrap().as_str().to_owned())
        .collect();
    assert_eq!(keys.len(), 1, "one compensation started: {keys:?}");
    keys[0].clone()
}

/// The keys the desk was asked to look up for the restore, in order.
fn restore_lookups(desk: &OrderDesk) -> Vec<String> {
    desk.requests()
        .into_iter()
        .filter(|r| r.tool == format!("{RESTORE_DELIVERY_TIME}/status"))
        .map(|r| r.args["key"].as_str().unwrap().to_owned())
        .collect()
}

/// The keys the restore of [`BLINKED`] was applied with, in order.
fn restores_applied(desk: &OrderDesk) -> Vec<String> {
    desk.side_effects()
        .into_iter()
        .filter(|e| e.tool == RESTORE_DELIVERY_TIME && e.effect == EffectKind::Applied)
        .filter(|e| e.args["order_id"] == BLINKED)
        .map(|e| e.idempotency_key.unwrap())
        .collect()
}

/// `report`'s records as (from, to).
fn moves(report: &ReconcileReport) -> (Vec<(LedgerStatus, LedgerStatus)>, usize) {
    (
        report.fixed.iter().map(|r| (r.from, r.to)).collect(),
        report.handed_off.len(),
    )
}

/// The settlement compensated the update but neither the update's result
/// nor its compensation reached the ledger: the record is `pending`, and
/// the update has no status lookup. The restore's lookup, asked by the
/// key the settlement called it with, says it ran: `compensated`, not
/// `manual`, and the restore is not repeated.
#[tokio::test(start_paused = true)]
async fn a_pending_record_whose_compensation_ran_is_compensated_not_handed_off() {
    let s = setup(&[LedgerStatus::Succeeded]).await;
    let a = agent_with(
        &s.desk,
        false,
        restore_from_args(&s.desk, CompensationGrade::Strong, true),
    );
    let out = run_on(&s.engine, &a).await;
    let record = blinked_record(&s, &out).await;
    assert_eq!(record.status, LedgerStatus::Pending, "{record:?}");
    let used = started_key(&s, &record).await;
    assert_eq!(
        restores_applied(&s.desk),
        std::slice::from_ref(&used),
        "it ran, once"
    );

    let swept = reconciler(&s, &a).sweep(SweepClasses::ALL).await.unwrap();

    assert_eq!(
        moves(&swept),
        (vec![(LedgerStatus::Pending, LedgerStatus::Compensated)], 0),
        "{swept:#?}"
    );
    assert!(
        swept.fixed[0].reason.contains("found by its key"),
        "{}",
        swept.fixed[0].reason
    );
    assert_eq!(
        restore_lookups(&s.desk),
        std::slice::from_ref(&used),
        "asked by the key the settlement used"
    );
    assert_eq!(restores_applied(&s.desk), [used], "not repeated");
    let record = blinked_record(&s, &out).await;
    assert_eq!(record.status, LedgerStatus::Compensated);
    let report = s.store.get_run(&out.run_id).await.unwrap().unwrap().report;
    let listed = report
        .unwrap()
        .completed
        .iter()
        .find(|c| c.intent_id == record.intent_id)
        .map(|c| c.ledger);
    assert_eq!(
        listed,
        Some(Some(LedgerStatus::Compensated)),
        "the report follows"
    );
}

/// As above, but the restore has no status lookup: the run's events say
/// the compensating call succeeded (its attempt's events became durable
/// with a later commit; the mark, and the `compensation_finished` stored
/// only with it, did not), so the record is `compensated`.
#[tokio::test(start_paused = true)]
async fn a_pending_record_whose_compensation_the_events_record_is_compensated() {
    let s = setup(&[LedgerStatus::Succeeded]).await;
    let a = agent_with(
        &s.desk,
        false,
        restore_from_args(&s.desk, CompensationGrade::Strong, false),
    );
    let out = run_on(&s.engine, &a).await;
    assert_eq!(blinked_record(&s, &out).await.status, LedgerStatus::Pending);

    let swept = reconciler(&s, &a).sweep(SweepClasses::ALL).await.unwrap();

    assert_eq!(
        moves(&swept),
        (vec![(LedgerStatus::Pending, LedgerStatus::Compensated)], 0),
        "{swept:#?}"
    );
    assert!(
        swept.fixed[0].reason.contains("events"),
        "{}",
        swept.fixed[0].reason
    );
    assert!(restore_lookups(&s.desk).is_empty(), "nothing to ask");
    assert_eq!(restores_applied(&s.desk).len(), 1, "not repeated");
}

/// The settlement started the strong restore, but the desk refused it
/// (nothing applied) and the ledger lost every mark of the update: it is
/// `pending`. The restore's lookup says it never ran; being strong and
/// keyed it is run again with the settlement's key, and the record is
/// `compensated`.
#[tokio::test(start_paused = true)]
async fn a_pending_record_whose_strong_compensation_never_ran_is_compensated_again() {
    let s = setup(&[LedgerStatus::Succeeded, LedgerStatus::Manual]).await;
    let a = agent_with(
        &s.desk,
        false,
        restore_from_args(&s.desk, CompensationGrade::Strong, true),
    );
    s.desk
        .push_fault(RESTORE_DELIVERY_TIME, Fault::status(400))
        .unwrap();
    let out = run_on(&s.engine, &a).await;
    let record = blinked_record(&s, &out).await;
    assert_eq!(record.status, LedgerStatus::Pending, "{record:?}");
    let used = started_key(&s, &record).await;
    assert!(restores_applied(&s.desk).is_empty(), "refused: never ran");

    let swept = reconciler(&s, &a).sweep(SweepClasses::ALL).await.unwrap();

    assert_eq!(
        moves(&swept),
        (vec![(LedgerStatus::Pending, LedgerStatus::Compensated)], 0),
        "{swept:#?}"
    );
    assert!(
        swept.fixed[0]
            .reason
            .contains("run again with the same key"),
        "{}",
        swept.fixed[0].reason
    );
    assert_eq!(restore_lookups(&s.desk), std::slice::from_ref(&used));
    assert_eq!(restores_applied(&s.desk), [used], "run with the same key");
    assert_eq!(
        blinked_record(&s, &out).await.status,
        LedgerStatus::Compensated
    );
}

/// As above with a weak restore: it never ran, and a weak compensation is
/// not repeated by the reconciler, so the record goes to a human as
/// before, the reason saying what was learned.
#[tokio::test(start_paused = true)]
async fn a_pending_record_whose_weak_compensation_never_ran_is_handed_off() {
    let s = setup(&[LedgerStatus::Succeeded, LedgerStatus::Manual]).await;
    let a = agent_with(
        &s.desk,
        false,
        restore_from_args(&s.desk, CompensationGrade::Weak, true),
    );
    s.desk
        .push_fault(RESTORE_DELIVERY_TIME, Fault::status(400))
        .unwrap();
    let out = run_on(&s.engine, &a).await;
    let record = blinked_record(&s, &out).await;
    assert_eq!(record.status, LedgerStatus::Pending, "{record:?}");
    let used = started_key(&s, &record).await;

    let swept = reconciler(&s, &a).sweep(SweepClasses::ALL).await.unwrap();

    assert_eq!(moves(&swept), (vec![], 1), "{swept:#?}");
    let reason = &swept.handed_off[0].reason;
    assert!(
        reason.contains("in doubt and the tool has no status lookup")
            && reason.contains("weak compensation by restore_delivery_time never ran"),
        "{reason}"
    );
    assert_eq!(restore_lookups(&s.desk), [used]);
    assert!(restores_applied(&s.desk).is_empty(), "not run");
    assert_eq!(blinked_record(&s, &out).await.status, LedgerStatus::Manual);
}

/// The update's result is in the ledger but the restore's `compensated`
/// mark was lost: the record is `succeeded` in a run that ended `failed`.
/// Instead of "never concluded, a human decides", the restore's lookup by
/// the settlement's key settles it `compensated`.
#[tokio::test(start_paused = true)]
async fn a_succeeded_record_whose_compensated_mark_was_lost_is_compensated() {
    let s = setup(&[LedgerStatus::Compensated]).await;
    let restore = restore(&s.desk, CompensationGrade::Strong);
    let a = agent_with(&s.desk, true, restore);
    let out = run_on(&s.engine, &a).await;
    let record = blinked_record(&s, &out).await;
    assert_eq!(record.status, LedgerStatus::Succeeded, "{record:?}");
    let used = started_key(&s, &record).await;

    let swept = reconciler(&s, &a).sweep(SweepClasses::ALL).await.unwrap();

    assert_eq!(
        moves(&swept),
        (
            vec![(LedgerStatus::Succeeded, LedgerStatus::Compensated)],
            0
        ),
        "{swept:#?}"
    );
    assert_eq!(restore_lookups(&s.desk), std::slice::from_ref(&used));
    assert_eq!(restores_applied(&s.desk), [used]);
}

/// Runs `a` on `engine` to its end.
async fn run_on(engine: &Engine, a: &AgentBinding) -> RunOutput {
    engine
        .run(
            a,
            &rein_engine::run::AcceptAll,
            rein_engine::run::RunRequest {
                input: "Move orders A-1001 and A-1002.".into(),
                ..rein_engine::run::RunRequest::default()
            },
        )
        .await
        .unwrap()
}

//! Closing runs whose process died, as an embedder does it: the engine
//! alone over a SQLite file, no server. The orphan scan decides on the
//! engine's clock and closes with the report `rein serve`'s scan writes
//! (the server's scan is this one: `rein_server::lifecycle::recovery::scan_orphans`
//! calls [`Engine::scan_orphans`]).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::Timestamp;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rein_core::deadline::{BudgetLimits, Usage};
use rein_core::event::{EventData, RunStarted};
use rein_core::{
    EventKind, IntentId, LedgerRecord, LedgerStatus, ManualClock, Outcome, ReportNote, RunId,
    TenantId, ToolClass,
};
use rein_engine::Timer;
use rein_engine::recovery::{OrphanScan, Standing};
use rein_engine::run::Engine;
use rein_store::{
    Checkpoint, Lease, LeaseKind, LedgerMark, NewRun, RunStatus, StatusChange, StepCommit, Store,
    StoreExt,
};
use rein_store_sqlite::SqliteStore;
use serde_json::{Value, json};

const SCAN: OrphanScan = OrphanScan {
    threshold: Duration::from_secs(30),
    lease: Duration::from_secs(60),
    page: NonZeroU32::new(16).unwrap(),
};

fn unix_ms(t: SystemTime) -> u64 {
    u64::try_from(t.duration_since(UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn declared(run_id: &RunId, intent: &str, seq: u64, tool: &str, at_ms: u64) -> LedgerRecord {
    LedgerRecord {
        run_id: run_id.clone(),
        intent_id: IntentId::new(intent).unwrap(),
        seq,
        step: 1,
        tool: tool.into(),
        class: ToolClass::IdempotentWrite,
        idempotency_key: None,
        args: json!({"order_id": "A-1001"}),
        status: LedgerStatus::Pending,
        result: None,
        failure: None,
        attempts: 1,
        created_at_ms: Timestamp::from_millis(at_ms),
        updated_at_ms: Timestamp::from_millis(at_ms),
    }
}

/// A direct run that started at `t0`, updated an order (succeeded), sent
/// an email whose answer was lost (pending), checkpointed its first step
/// with `calls` as its recorded calls, and whose claim was last renewed at
/// `t0` (a lease of [`SCAN`]`.lease`). Its process is gone.
async fn abandoned_run(store: &Arc<dyn Store>, id: &str, t0: u64, calls: Value) -> RunId {
    let run_id = store
        .create_run(NewRun {
            run_id: RunId::new(id).unwrap(),
            tenant: TenantId::new("acme").unwrap(),
            agent: "desk".into(),
            input: "Move order A-1001 and tell the buyer.".into(),
            parent_run_id: None,
            budget: json!({}),
            created_at_ms: Timestamp::from_millis(t0),
            trace_parent: None,
        })
        .await
        .unwrap()
        .run_id;
    let update = IntentId::new(format!("{id}-update")).unwrap();
    store
        .commit_step(
            &run_id,
            StepCommit {
                status: Some(StatusChange {
                    status: RunStatus::Running,
                    report: None,
                    at_ms: Timestamp::from_millis(t0),
                }),
                declares: vec![
                    declared(&run_id, update.as_str(), 0, "update_delivery_time", t0),
                    declared(&run_id, &format!("{id}-email"), 1, "send_email", t0),
                ],
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();
    store
        .commit_step(
            &run_id,
            StepCommit {
                marks: vec![(
                    update.clone(),
                    LedgerMark {
                        status: LedgerStatus::Succeeded,
                        result: Some(json!({"order_id": "A-1001", "delivery": "friday"})),
                        failure: None,
                        attempts: 1,
                        at_ms: Timestamp::from_millis(t0 + 1),
                    },
                )],
                checkpoint: Some(Checkpoint {
                    run_id: run_id.clone(),
                    step: 1,
                    messages: json!([]),
                    completed_intents: vec![update],
                    consumed: Usage {
                        steps: 1,
                        tokens: 120,
                        ..Usage::default()
                    },
                    elapsed_ms: 1,
                    state: json!({"calls": calls, "facts": [], "tools_tried": [],
                                  "provider_calls": 1}),
                    at_ms: Timestamp::from_millis(t0 + 1),
                }),
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();
    store
        .acquire_lease(Lease {
            lease_id: format!("run:{run_id}"),
            run_id: run_id.clone(),
            intent_id: None,
            kind: LeaseKind::Run,
            pgid: None,
            path: None,
            owner: "gone#pid:999999@elsewhere".into(),
            acquired_at_ms: Timestamp::from_millis(t0),
            expires_at_ms: Timestamp::from_millis(t0 + 60_000),
        })
        .await
        .unwrap();
    run_id
}

struct Embedder {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: ManualClock,
    engine: Engine,
}

fn embedder() -> Embedder {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let clock = ManualClock::new();
    let engine = Engine::builder(store.clone())
        .clock(Arc::new(clock.clone()) as Arc<dyn Timer>)
        .build()
        .unwrap();
    Embedder {
        _dir: dir,
        store,
        clock,
        engine,
    }
}

/// An embedder's orphan scan leaves a run alone until its claim has been
/// silent for the threshold on the engine's clock, then closes it
/// `failed`, `orphaned`, with the report the server would write: the
/// update it made (succeeded), the email in doubt, and a handoff package
/// for the human who must decide about it.
#[tokio::test]
async fn an_embedder_closes_an_orphaned_run_with_its_effects_in_the_report() {
    let e = embedder();
    let now = unix_ms(rein_core::Clock::system_now(&e.clock));
    // Last renewed 20 s ago: not yet an orphan.
    let run_id = abandoned_run(&e.store, "r-orphan", now - 20_000, json!([])).await;
    // Its process started the email with the tool's owner and tier, as
    // every `tool_call_started` records them.
    let started = EventData::decode(
        EventKind::ToolCallStarted,
        json!({"tool": "send_email", "attempt": 1, "class": "irreversible",
               "allowance_ms": 1000, "remaining_ms": 1000, "queue_wait_ms": 0,
               "owner": "messaging-team", "side_effect_tier": "high"}),
    )
    .unwrap();
    e.store
        .append_events(
            &run_id,
            vec![rein_core::Event {
                run_id: run_id.clone(),
                seq: 0,
                step: 1,
                intent_id: None,
                attempt_id: None,
                idempotency_key: None,
                at_ms: Timestamp::from_millis(now - 20_000),
                data: started,
            }],
        )
        .await
        .unwrap();
    let handoffs = |engine: &Engine| {
        engine
            .metrics()
            .render()
            .lines()
            .find(|l| l.starts_with("rein_handoffs_total{"))
            .map(str::to_owned)
    };
    assert_eq!(handoffs(&e.engine), None, "no handoff counted yet");
    let mut cursor = None;
    assert_eq!(e.engine.scan_orphans(&SCAN, &mut cursor).await, 0);
    assert_eq!(
        e.store.get_run(&run_id).await.unwrap().unwrap().status,
        RunStatus::Running
    );

    e.clock.advance(Duration::from_secs(10));
    assert_eq!(e.engine.scan_orphans(&SCAN, &mut cursor).await, 1);

    let stored = e.store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(stored.status, RunStatus::Finished(Outcome::Failed));
    let report = stored.report.unwrap();
    assert_eq!(report.outcome, Outcome::Failed);
    assert_eq!(report.completed.len(), 1, "{report:#?}");
    assert_eq!(report.completed[0].tool, "update_delivery_time");
    assert_eq!(report.completed[0].ledger, Some(LedgerStatus::Succeeded));
    assert_eq!(report.incomplete.len(), 1, "{report:#?}");
    assert_eq!(report.incomplete[0].tool, "send_email");
    assert!(report.incomplete[0].maybe_applied);
    let package = report.handoff.as_ref().expect("the email awaits a human");
    let email = package
        .uncertain
        .iter()
        .chain(&package.awaiting_decision)
        .find(|effect| effect.tool == "send_email")
        .expect("the email is in the package");
    assert_eq!(
        email.owner.as_deref(),
        Some("messaging-team"),
        "{package:#?}"
    );
    assert_eq!(
        email.side_effect_tier,
        Some(rein_core::registry::SideEffectTier::High)
    );
    // The reconciler's handoff is counted as a run's own is.
    let counted = handoffs(&e.engine).expect("rein_handoffs counts the close");
    assert!(
        counted.contains("tenant=\"acme\"") && counted.ends_with(" 1"),
        "{counted}"
    );
    assert!(!report.recoverable);
    assert!(
        report
            .summary
            .contains("(orphaned: its process stopped signalling 30 s ago (threshold 30 s))"),
        "{}",
        report.summary
    );
    assert_eq!(report.consumed.tokens, 120, "from its checkpoint");
    assert!(report.notes.is_empty(), "its checkpoint was read");

    // After the `tool_call_started` its process wrote.
    let events = e.store.events(&run_id, 1).await.unwrap();
    let kinds: Vec<EventKind> = events.iter().map(rein_core::Event::kind).collect();
    assert_eq!(
        kinds,
        [
            EventKind::RunFailed,
            EventKind::HandoffCreated,
            EventKind::RunFinished
        ]
    );
    match &events[0].data {
        EventData::RunFailed(failed) => assert_eq!(failed.error_type, "orphaned"),
        other => panic!("expected run_failed, got {other:?}"),
    }

    // Closed once: the next scan finds nothing to close.
    assert_eq!(e.engine.scan_orphans(&SCAN, &mut None).await, 0);
}

/// Queued work and a run stopped at a safe point wait to be resumed: the
/// orphan scan never closes them, however long their claim is silent.
#[tokio::test]
async fn an_orphan_scan_leaves_queued_work_to_its_workers() {
    let e = embedder();
    let now = unix_ms(rein_core::Clock::system_now(&e.clock));
    let run_id = abandoned_run(&e.store, "r-queued", now - 600_000, json!([])).await;
    e.store
        .append_events(
            &run_id,
            vec![rein_core::Event {
                run_id: run_id.clone(),
                seq: 0,
                step: 0,
                intent_id: None,
                attempt_id: None,
                idempotency_key: None,
                at_ms: Timestamp::from_millis(now - 600_000),
                data: RunStarted {
                    contract: None,
                    config: None,
                    agent: "desk".into(),
                    model: "m".into(),
                    provider: "p".into(),
                    budget: BudgetLimits::new(Duration::from_secs(60)).unwrap(),
                    tools: Vec::new(),
                    input: "x".into(),
                    enqueued: true,
                }
                .into(),
            }],
        )
        .await
        .unwrap();
    let standing = Standing::read(e.store.as_ref(), &run_id).await.unwrap();
    assert!(standing.enqueued);
    assert_eq!(e.engine.scan_orphans(&SCAN, &mut None).await, 0);
    assert_eq!(
        e.store.get_run(&run_id).await.unwrap().unwrap().status,
        RunStatus::Running
    );
}

/// A run closed from outside whose last checkpoint cannot be decoded is
/// still closed (closing must close), and its report says what it could
/// not read instead of listing its calls as none: a structured note, and
/// the same in its summary. The ledger's writes are all still listed.
#[tokio::test]
async fn a_run_whose_checkpoint_cannot_be_read_closes_with_a_note_saying_so() {
    let e = embedder();
    let now = unix_ms(rein_core::Clock::system_now(&e.clock));
    let run_id = abandoned_run(
        &e.store,
        "r-unreadable",
        now - 120_000,
        json!([{"planned": "not a planned call"}]),
    )
    .await;
    assert_eq!(e.engine.scan_orphans(&SCAN, &mut None).await, 1);

    let report = e
        .store
        .get_run(&run_id)
        .await
        .unwrap()
        .unwrap()
        .report
        .unwrap();
    assert_eq!(report.outcome, Outcome::Failed);
    match report.notes.as_slice() {
        [ReportNote::CheckpointUnreadable { step, reason }] => {
            assert_eq!(*step, 1);
            assert!(reason.contains("`state.calls` does not decode"), "{reason}");
        }
        other => panic!("expected one unreadable-checkpoint note, got {other:?}"),
    }
    assert!(
        report
            .summary
            .contains("its checkpoint of step 1 could not be read"),
        "{}",
        report.summary
    );
    assert_eq!(report.completed.len(), 1, "the ledger's update is listed");
    assert_eq!(report.incomplete.len(), 1, "the ledger's email is listed");
    // The note survives the report's JSON, as API clients read it.
    let wire = serde_json::to_value(&report).unwrap();
    assert_eq!(wire["notes"][0]["kind"], "checkpoint_unreadable");
}

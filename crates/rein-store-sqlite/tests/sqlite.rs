//! The SQLite backend on real files: the conformance suite, durability
//! across reopen, corrupt rows, several handles on one file (idempotency
//! reservations and singleton elections included), schema versions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::Timestamp;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rein_core::deadline::{Cost, Usage};
use rein_core::failure::Category;
use rein_core::idempotency::IdempotencyKey;
use rein_core::{
    AttemptId, Event, EventData, EventKind, Failure, IntentId, LedgerRecord, LedgerStatus, Outcome,
    RunId, TenantId, ToolClass,
};
use rein_store::{
    Checkpoint, CheckpointDelta, HealthStore, IdempotencyState, IdempotencyStore, Lease, LeaseKind,
    LeaseStore, LedgerMark, NewRun, PlannedIntent, Reservation, RunStatus, RunStore,
    SingletonLease, SingletonStore, StepCommit, Store, StoreError, StoreExt, StoredResponse,
    conformance,
};
use rein_store_sqlite::{SCHEMA_VERSION, SqliteOptions, SqliteStore};
use serde_json::json;

fn run_id(id: &str) -> RunId {
    RunId::new(id).unwrap()
}

fn new_run(id: &str, created_at_ms: u64) -> NewRun {
    NewRun {
        run_id: run_id(id),
        tenant: TenantId::new("acme").unwrap(),
        agent: "order-desk".to_owned(),
        input: "move order 42 to Friday".to_owned(),
        parent_run_id: None,
        budget: json!({ "max_steps": 8 }),
        created_at_ms: Timestamp::from_millis(created_at_ms),
        trace_parent: None,
    }
}

fn event(run: &RunId, kind: EventKind, step: u32) -> Event {
    Event {
        run_id: run.clone(),
        seq: 0,
        step,
        intent_id: Some(IntentId::new("i-1").unwrap()),
        attempt_id: Some(AttemptId::new("i-1/1").unwrap()),
        idempotency_key: Some(IdempotencyKey::parse("k-1").unwrap()),
        at_ms: Timestamp::from_millis(1_000 + u64::from(step)),
        data: payload(kind, step),
    }
}

/// A payload of `kind` in its stored form, numbered by `step`.
fn payload(kind: EventKind, step: u32) -> EventData {
    let data = match kind {
        EventKind::RunStarted => json!({
            "agent": "a", "model": "m", "provider": "p", "tools": [], "input": "x",
            "enqueued": false,
            "budget": {"wall_clock": {"secs": 30, "nanos": 0}, "steps": null, "tokens": null,
                       "cost": null},
        }),
        EventKind::PlanCreated => json!({"intents": [], "rejected": step}),
        EventKind::BudgetAllocated => json!({
            "shape": "parallel", "branches": step, "each_ms": null, "remaining_ms": 1200,
        }),
        EventKind::ToolCallStarted => json!({
            "tool": "t", "attempt": step, "class": "read", "allowance_ms": 1200,
            "remaining_ms": 1200, "queue_wait_ms": 0,
        }),
        EventKind::ToolCallFinished => json!({
            "tool": "t", "attempt": step, "ok": true, "replayed": false, "truncated": false,
            "elapsed_ms": 5,
        }),
        EventKind::RetryScheduled => json!({
            "tool": "t", "next_attempt": step, "reason": "rate_limited", "delay_ms": 2000,
            "from_server": true, "backoff_ceiling_ms": 0, "clamped": false, "remaining_ms": 1200,
        }),
        EventKind::RunFinished => json!({
            "outcome": "succeeded", "steps": step, "consumed": {"steps": step, "tokens": 0,
            "cost": 0}, "elapsed_ms": 5, "recoverable": false,
        }),
        other => panic!("no sample payload for {other}"),
    };
    EventData::decode(kind, data).unwrap()
}

fn declaration(run: &RunId, intent: &str) -> LedgerRecord {
    LedgerRecord {
        run_id: run.clone(),
        intent_id: IntentId::new(intent).unwrap(),
        seq: 0,
        step: 1,
        tool: "update_delivery_time".to_owned(),
        class: ToolClass::IdempotentWrite,
        idempotency_key: Some(IdempotencyKey::parse("k-1").unwrap()),
        args: json!({ "order_id": 42, "delivery": "friday" }),
        status: LedgerStatus::Pending,
        result: None,
        failure: None,
        attempts: 0,
        created_at_ms: Timestamp::from_millis(1_000),
        updated_at_ms: Timestamp::from_millis(1_000),
    }
}

fn checkpoint(run: &RunId, step: u32) -> Checkpoint {
    Checkpoint {
        run_id: run.clone(),
        step,
        messages: json!([{ "role": "assistant", "content": "done" }]),
        completed_intents: vec![IntentId::new("i-1").unwrap()],
        consumed: Usage {
            steps: step,
            tokens: 321,
            cost: Cost::from_micros(42),
        },
        elapsed_ms: 900,
        state: json!({ "loop_guard": [1, 2] }),
        at_ms: Timestamp::from_millis(2_000),
    }
}

fn raw(path: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(path).unwrap()
}

/// Every conformance check as its own test, each on a fresh file opened
/// twice (two handles stand for two processes sharing it).
mod conformance_checks {
    use std::sync::Arc;

    use rein_store::conformance::Subject;
    use rein_store_sqlite::SqliteStore;

    async fn subject() -> Option<Subject> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("rein.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let other = Arc::new(SqliteStore::open(&path).unwrap());
        Some(Subject::new(store, other).with_teardown(async move { drop(dir) }))
    }

    rein_store::conformance_tests!(subject());
}

#[tokio::test]
async fn conformance_suite_passes_with_synchronous_full() {
    let dir = tempfile::tempdir().unwrap();
    let options = SqliteOptions::default()
        .with_synchronous_full(true)
        .with_busy_timeout(Duration::from_millis(500));
    let store = SqliteStore::open_with(dir.path().join("rein.db"), options).unwrap();
    let store: Arc<dyn Store> = Arc::new(store);
    conformance::run_all(store.as_ref()).await;
}

#[tokio::test]
async fn open_creates_parent_directories_and_switches_to_wal() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a/b/c/rein.db");
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.path(), path);
    assert!(path.is_file());
    let mode: String = raw(&path)
        .query_row("PRAGMA journal_mode", [], |row| row.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    let version: i64 = raw(&path)
        .query_row("SELECT MAX(version) FROM rein_schema", [], |row| row.get(0))
        .unwrap();
    assert_eq!(version, i64::from(SCHEMA_VERSION));
}

#[tokio::test]
async fn schema_version_3_adds_the_idempotency_table_and_its_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = raw(&path);
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM rein_schema ORDER BY version")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        versions,
        (1..=i64::from(SCHEMA_VERSION)).collect::<Vec<_>>()
    );
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'idempotency'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(sql.contains("STRICT"), "{sql}");
    assert!(
        sql.contains("PRIMARY KEY (tenant, idempotency_key)"),
        "{sql}"
    );
    let indexes: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'idempotency' \
             AND sql IS NOT NULL ORDER BY name",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(indexes, ["idempotency_by_expiry", "idempotency_by_state"]);
}

#[tokio::test]
async fn schema_version_4_adds_the_singletons_table() {
    const { assert!(SCHEMA_VERSION >= 4) };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = raw(&path);
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM rein_schema ORDER BY version")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(&versions[..4], [1, 2, 3, 4]);
    let sql: String = conn
        .query_row(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'singletons'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert!(sql.contains("STRICT"), "{sql}");
    assert!(sql.contains("name           TEXT PRIMARY KEY"), "{sql}");
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('singletons') ORDER BY cid")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        columns,
        ["name", "owner", "acquired_at_ms", "expires_at_ms"]
    );
}

#[tokio::test]
async fn schema_version_6_has_the_breaker_openings_table() {
    const { assert!(SCHEMA_VERSION >= 6) };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = raw(&path);
    let columns: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('breaker_openings') ORDER BY cid")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        columns,
        [
            "arm",
            "open_until_ms",
            "opened_by",
            "reason",
            "updated_at_ms"
        ]
    );
}

#[tokio::test]
async fn schema_version_5_indexes_runs_by_status_and_by_parent() {
    const { assert!(SCHEMA_VERSION >= 5) };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    drop(SqliteStore::open(&path).unwrap());
    let conn = raw(&path);
    let versions: Vec<i64> = conn
        .prepare("SELECT version FROM rein_schema ORDER BY version")
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        versions,
        (1..=i64::from(SCHEMA_VERSION)).collect::<Vec<_>>()
    );
    let indexes: Vec<String> = conn
        .prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' \
             AND sql IS NOT NULL ORDER BY name",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        indexes,
        [
            "runs_by_created",
            "runs_by_created_id",
            "runs_by_parent_created",
            "runs_by_status",
            "runs_by_tenant_created",
            "runs_by_tenant_status",
            "runs_root_backlog"
        ],
        "version 9 adds the listing's indexes, 17 the backlog's (checked in the store's own tests)"
    );
    // The queries use them: no scan of the table, no sort.
    for (sql, index) in [
        (
            "SELECT run_id FROM runs WHERE status = 'queued' \
             ORDER BY created_at_ms, run_id LIMIT 10",
            "runs_by_status",
        ),
        (
            "SELECT run_id FROM runs WHERE parent_run_id = 'p' ORDER BY created_at_ms, run_id",
            "runs_by_parent_created",
        ),
    ] {
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map([], |row| row.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let plan = plan.join("; ");
        assert!(plan.contains(index), "{sql}: {plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{sql} sorts: {plan}");
    }
}

#[tokio::test]
async fn reopened_file_reads_everything_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let run = run_id("run-durable");
    let (record, events, ledger) = {
        let store = SqliteStore::open(&path).unwrap();
        store
            .create_run(new_run("run-durable", 1_000))
            .await
            .unwrap();
        store
            .save_intents(
                &run,
                1,
                vec![PlannedIntent {
                    intent_id: IntentId::new("i-1").unwrap(),
                    ordinal: 0,
                    call_id: "call_1".to_owned(),
                    tool: "update_delivery_time".to_owned(),
                    args: json!({ "order_id": 42 }),
                }],
            )
            .await
            .unwrap();
        store.declare(declaration(&run, "i-1")).await.unwrap();
        store.declare(declaration(&run, "i-2")).await.unwrap();
        store
            .mark(
                &run,
                &IntentId::new("i-2").unwrap(),
                LedgerMark {
                    status: LedgerStatus::Failed,
                    result: None,
                    failure: Some(
                        Failure::new("update_delivery_time", Category::Timeout)
                            .with_retry_after(Duration::from_millis(1500)),
                    ),
                    attempts: 3,
                    at_ms: Timestamp::from_millis(1_500),
                },
            )
            .await
            .unwrap();
        store.write_checkpoint(checkpoint(&run, 1)).await.unwrap();
        let events = store
            .append_events(
                &run,
                vec![
                    event(&run, EventKind::RunStarted, 0),
                    event(&run, EventKind::PlanCreated, 1),
                ],
            )
            .await
            .unwrap();
        let record = store
            .set_run_status(
                &run,
                RunStatus::Finished(Outcome::Failed),
                None,
                Timestamp::from_millis(3_000),
            )
            .await
            .unwrap();
        let ledger = store.ledger(&run).await.unwrap();
        (record, events, ledger)
    };

    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(store.get_run(&run).await.unwrap(), Some(record));
    assert_eq!(store.events(&run, 0).await.unwrap(), events);
    assert_eq!(store.ledger(&run).await.unwrap(), ledger);
    assert_eq!(ledger[1].status, LedgerStatus::Failed);
    assert_eq!(store.intents(&run).await.unwrap().len(), 1);
    assert_eq!(
        store.latest_checkpoint(&run).await.unwrap(),
        Some(checkpoint(&run, 1))
    );
    let pending = store.pending_ledger(10).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].intent_id.as_str(), "i-1");
    // Sequences continue after a reopen.
    let next = store
        .append_events(&run, vec![event(&run, EventKind::RunFinished, 2)])
        .await
        .unwrap();
    assert_eq!(next[0].seq, 3);
}

#[tokio::test]
async fn second_handle_on_the_same_file_sees_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let first = SqliteStore::open(&path).unwrap();
    let second = SqliteStore::open(&path).unwrap();
    let run = run_id("run-shared");
    first
        .create_run(new_run("run-shared", 1_000))
        .await
        .unwrap();
    assert!(second.get_run(&run).await.unwrap().is_some());

    // Interleaved writers through both handles keep one gap-free stream.
    for round in 0..5 {
        let writer = if round % 2 == 0 { &first } else { &second };
        writer
            .append_events(&run, vec![event(&run, EventKind::BudgetAllocated, round)])
            .await
            .unwrap();
    }
    let seqs: Vec<u64> = first
        .events(&run, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    match second.create_run(new_run("run-shared", 2_000)).await {
        Err(StoreError::Conflict { .. }) => {}
        other => panic!("expected a conflict across handles, found {other:?}"),
    }
}

#[tokio::test]
async fn concurrent_appends_share_commits_and_stay_gap_free() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let runs: Vec<RunId> = (0..4).map(|n| run_id(&format!("run-{n}"))).collect();
    for (n, run) in runs.iter().enumerate() {
        store
            .create_run(new_run(run.as_str(), n as u64))
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for task in 0..40u32 {
        let store = Arc::clone(&store);
        let run = runs[task as usize % runs.len()].clone();
        tasks.push(tokio::spawn(async move {
            store
                .append_events(
                    &run,
                    vec![
                        event(&run, EventKind::ToolCallStarted, task),
                        event(&run, EventKind::ToolCallFinished, task),
                    ],
                )
                .await
                .unwrap()
        }));
    }
    for task in tasks {
        let appended = task.await.unwrap();
        assert_eq!(
            appended[1].seq,
            appended[0].seq + 1,
            "a batch is contiguous"
        );
    }
    for run in &runs {
        let seqs: Vec<u64> = store
            .events(run, 0)
            .await
            .unwrap()
            .iter()
            .map(|e| e.seq)
            .collect();
        assert_eq!(seqs, (1..=20).collect::<Vec<u64>>(), "run {run}");
    }
}

#[tokio::test]
async fn corrupt_json_column_is_reported_not_panicked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let store = SqliteStore::open(&path).unwrap();
    let run = run_id("run-corrupt");
    store
        .create_run(new_run("run-corrupt", 1_000))
        .await
        .unwrap();
    store.declare(declaration(&run, "i-1")).await.unwrap();
    store
        .append_events(&run, vec![event(&run, EventKind::RunStarted, 0)])
        .await
        .unwrap();
    store.write_checkpoint(checkpoint(&run, 1)).await.unwrap();

    let db = raw(&path);
    db.execute(
        "UPDATE ledger SET args = '{\"order_id\": 4' WHERE run_id = 'run-corrupt'",
        [],
    )
    .unwrap();
    db.execute(
        "UPDATE events SET data = 'not json' WHERE run_id = 'run-corrupt'",
        [],
    )
    .unwrap();
    db.execute(
        "UPDATE checkpoints SET completed_intents = '[\"\"]' WHERE run_id = 'run-corrupt'",
        [],
    )
    .unwrap();
    db.execute(
        "UPDATE runs SET status = 'paused' WHERE run_id = 'run-corrupt'",
        [],
    )
    .unwrap();

    let expect_corrupt =
        |result: Result<String, StoreError>, table: &str, column: &str| match result {
            Err(StoreError::Corrupt {
                table: found_table,
                column: found_column,
                reason,
            }) => {
                assert_eq!((found_table, found_column), (table, column), "{reason}");
                assert!(
                    reason.contains("run-corrupt"),
                    "the reason names the row: {reason}"
                );
            }
            other => panic!("expected corrupt {table}.{column}, found {other:?}"),
        };
    expect_corrupt(
        store.ledger(&run).await.map(|r| format!("{r:?}")),
        "ledger",
        "args",
    );
    expect_corrupt(
        store.pending_ledger(10).await.map(|r| format!("{r:?}")),
        "ledger",
        "args",
    );
    expect_corrupt(
        store.events(&run, 0).await.map(|r| format!("{r:?}")),
        "events",
        "data",
    );
    let err = store.get_run(&run).await.unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::Corrupt {
                table: "runs",
                column: "status",
                ..
            }
        ),
        "{err}"
    );
    assert!(
        err.to_string()
            .starts_with("stored runs.status is corrupt: "),
        "{err}"
    );
    // The status is read before any write, so a write to the run is refused too.
    let err = store
        .append_events(&run, vec![event(&run, EventKind::RunFinished, 1)])
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Corrupt { table: "runs", .. }),
        "{err}"
    );

    db.execute(
        "UPDATE runs SET status = 'running' WHERE run_id = 'run-corrupt'",
        [],
    )
    .unwrap();
    expect_corrupt(
        store
            .latest_checkpoint(&run)
            .await
            .map(|r| format!("{r:?}")),
        "checkpoints",
        "completed_intents",
    );
    // The store still works after every refusal.
    let more = store
        .append_events(&run, vec![event(&run, EventKind::RunFinished, 1)])
        .await
        .unwrap();
    assert_eq!(more[0].seq, 2);
}

fn delta(run: &RunId, step: u32) -> CheckpointDelta {
    CheckpointDelta {
        run_id: run.clone(),
        step,
        messages: vec![json!({ "role": "tool", "content": format!("step {step}") })],
        completed_intents: vec![],
        appended: [("calls".to_owned(), vec![json!(step)])]
            .into_iter()
            .collect(),
        state: Default::default(),
        consumed: Usage {
            steps: step,
            ..Usage::default()
        },
        elapsed_ms: 10,
        at_ms: Timestamp::from_millis(2_000),
    }
}

/// A delta row edited by hand, or one missing between two others, makes the
/// checkpoint corrupt (naming the row or the step), never a checkpoint
/// rebuilt without it.
#[tokio::test]
async fn a_corrupt_or_missing_checkpoint_delta_is_corrupt_not_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let store = SqliteStore::open(&path).unwrap();
    let run = run_id("run-delta");
    store.create_run(new_run("run-delta", 1_000)).await.unwrap();
    for step in 1..=3 {
        store.append_checkpoint(delta(&run, step)).await.unwrap();
    }
    let db = raw(&path);
    db.execute(
        "UPDATE checkpoint_deltas SET appended = '{\"calls\": 7}' WHERE step = 2",
        [],
    )
    .unwrap();
    match store.latest_checkpoint(&run).await {
        Err(StoreError::Corrupt {
            table: "checkpoint_deltas",
            column: "appended",
            reason,
        }) => assert!(
            reason.contains("run-delta") && reason.contains("step=2"),
            "{reason}"
        ),
        other => panic!("expected corrupt checkpoint_deltas.appended, found {other:?}"),
    }
    db.execute("DELETE FROM checkpoint_deltas WHERE step = 2", [])
        .unwrap();
    match store.latest_checkpoint(&run).await {
        Err(StoreError::Corrupt {
            table: "checkpoints",
            column: "step",
            reason,
        }) => assert!(
            reason.contains("of step 1") && reason.contains("delta of step 3"),
            "{reason}"
        ),
        other => panic!("expected a corrupt step sequence, found {other:?}"),
    }
}

#[tokio::test]
async fn out_of_range_integers_are_corrupt_not_wrapped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let store = SqliteStore::open(&path).unwrap();
    let run = run_id("run-range");
    store.create_run(new_run("run-range", 1_000)).await.unwrap();
    store
        .append_events(&run, vec![event(&run, EventKind::RunStarted, 0)])
        .await
        .unwrap();
    raw(&path)
        .execute("UPDATE events SET step = -1, at_ms = -5", [])
        .unwrap();
    match store.events(&run, 0).await {
        Err(StoreError::Corrupt {
            table: "events",
            column: "step",
            reason,
        }) => {
            assert!(reason.contains("-1"), "{reason}");
        }
        other => panic!("expected corrupt events.step, found {other:?}"),
    }
}

#[tokio::test]
async fn leases_survive_reopen_and_a_bad_lease_row_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let run = run_id("run-lease");
    let lease = Lease {
        lease_id: "lease-1".to_owned(),
        run_id: run.clone(),
        intent_id: Some(IntentId::new("i-1").unwrap()),
        kind: LeaseKind::ProcessGroup,
        pgid: Some(4321),
        path: None,
        owner: "pid:77@host-a".to_owned(),
        acquired_at_ms: Timestamp::from_millis(1_000),
        expires_at_ms: Timestamp::from_millis(2_000),
    };
    {
        let store = SqliteStore::open(&path).unwrap();
        store.create_run(new_run("run-lease", 1_000)).await.unwrap();
        store.acquire_lease(lease.clone()).await.unwrap();
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store.leases_of_run(&run).await.unwrap(),
        vec![lease.clone()]
    );
    assert_eq!(
        store
            .expired_leases(Timestamp::from_millis(2_000), 10)
            .await
            .unwrap(),
        vec![lease.clone()]
    );
    raw(&path)
        .execute("UPDATE leases SET pgid = 99999999999", [])
        .unwrap();
    match store.leases_of_run(&run).await {
        Err(StoreError::Corrupt {
            table: "leases",
            column: "pgid",
            reason,
        }) => assert!(reason.contains("lease_id=lease-1"), "{reason}"),
        other => panic!("expected corrupt leases.pgid, found {other:?}"),
    }
    raw(&path)
        .execute("UPDATE leases SET pgid = 4321, kind = 'socket'", [])
        .unwrap();
    assert!(matches!(
        store
            .expired_leases(Timestamp::from_millis(u64::MAX), 10)
            .await,
        Err(StoreError::Corrupt { column: "kind", .. })
    ));
}

#[tokio::test]
async fn newer_schema_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    drop(SqliteStore::open(&path).unwrap());
    raw(&path)
        .execute(
            "INSERT INTO rein_schema (version, applied_at_ms) VALUES (?1, 0)",
            [i64::from(SCHEMA_VERSION) + 1],
        )
        .unwrap();
    let err = SqliteStore::open(&path).unwrap_err();
    assert_eq!(
        err,
        StoreError::SchemaTooNew {
            supported: SCHEMA_VERSION,
            found: i64::from(SCHEMA_VERSION) + 1,
        }
    );
    assert!(!err.is_transient());
    assert_eq!(
        err.to_string(),
        format!(
            "database schema version must be at most {SCHEMA_VERSION}, but it is {}; \
             upgrade rein or point the store path at another file",
            SCHEMA_VERSION + 1
        )
    );
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    std::fs::write(&path, vec![b'x'; 4096]).unwrap();
    match SqliteStore::open(&path) {
        Err(StoreError::Backend(message)) => {
            assert!(message.contains("rein.db"), "{message}");
        }
        other => panic!("expected a backend error, found {other:?}"),
    }
}

#[tokio::test]
async fn a_held_write_lock_past_the_busy_timeout_is_transient() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let options = SqliteOptions::default().with_busy_timeout(Duration::from_millis(50));
    let store = SqliteStore::open_with(&path, options).unwrap();
    let locker = raw(&path);
    locker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let err = store.create_run(new_run("run-busy", 1)).await.unwrap_err();
    assert!(err.is_transient(), "{err}");
    locker.execute_batch("ROLLBACK").unwrap();
    store.create_run(new_run("run-busy", 1)).await.unwrap();
}

#[tokio::test]
async fn a_refused_write_does_not_undo_others_in_the_same_group_commit() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let run = run_id("run-group");
    store.create_run(new_run("run-group", 1)).await.unwrap();
    let mut tasks = Vec::new();
    for task in 0..30u32 {
        let store = Arc::clone(&store);
        // Every third write targets a run that does not exist.
        let target = if task % 3 == 0 {
            run_id("run-missing")
        } else {
            run.clone()
        };
        tasks.push(tokio::spawn(async move {
            store
                .append_events(
                    &target,
                    vec![event(&target, EventKind::RetryScheduled, task)],
                )
                .await
        }));
    }
    let mut refused = 0;
    for task in tasks {
        match task.await.unwrap() {
            Ok(_) => {}
            Err(StoreError::NotFound { what: "run", .. }) => refused += 1,
            Err(other) => panic!("unexpected error {other}"),
        }
    }
    assert_eq!(refused, 10);
    let seqs: Vec<u64> = store
        .events(&run, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=20).collect::<Vec<u64>>());
}

fn tenant(name: &str) -> TenantId {
    TenantId::new(name).unwrap()
}

#[tokio::test]
async fn two_handles_on_one_file_never_both_reserve_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    // Two handles stand for two processes: each has its own connection
    // and thread, and only SQLite's file lock orders them.
    let handles = [
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ];
    let fingerprint = conformance::fingerprint(1);
    for round in 0..10 {
        let key = format!("key-{round}");
        let mut tasks = Vec::new();
        for caller in 0..16u64 {
            let store = Arc::clone(&handles[caller as usize % 2]);
            let (key, fingerprint) = (key.clone(), fingerprint.clone());
            tasks.push(tokio::spawn(async move {
                store
                    .reserve_idempotency(
                        &tenant("acme"),
                        &key,
                        &fingerprint,
                        Timestamp::from_millis(1_000 + caller),
                        Timestamp::from_millis(9_000),
                    )
                    .await
                    .unwrap()
            }));
        }
        let mut reserved = 0;
        for task in tasks {
            match task.await.unwrap() {
                Reservation::Reserved => reserved += 1,
                Reservation::InProgress(_) => {}
                other => panic!("expected Reserved or InProgress, found {other:?}"),
            }
        }
        assert_eq!(reserved, 1, "round {round}: exactly one handle reserves");
    }
    // Each handle sees the other's completion.
    handles[0]
        .complete_idempotency(
            &tenant("acme"),
            "key-0",
            StoredResponse {
                status: 201,
                content_type: Some("application/json".to_owned()),
                location: Some("/v1/runs/r-1".to_owned()),
                headers: Vec::new(),
                body: b"{}".to_vec(),
            },
            Timestamp::from_millis(2_000),
        )
        .await
        .unwrap();
    assert!(matches!(
        handles[1]
            .reserve_idempotency(
                &tenant("acme"),
                "key-0",
                &fingerprint,
                Timestamp::from_millis(2_001),
                Timestamp::from_millis(9_000)
            )
            .await
            .unwrap(),
        Reservation::Replay(_)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_handles_racing_on_a_multi_threaded_runtime_admit_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let first = Arc::new(SqliteStore::open(&path).unwrap());
    let second = Arc::new(SqliteStore::open(&path).unwrap());
    let fingerprint = conformance::fingerprint(2);
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = Vec::new();
    for caller in 0..32u64 {
        let store = Arc::clone(if caller % 2 == 0 { &first } else { &second });
        let (fingerprint, barrier) = (fingerprint.clone(), Arc::clone(&barrier));
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .reserve_idempotency(
                    &tenant("acme"),
                    "race",
                    &fingerprint,
                    Timestamp::from_millis(1_000),
                    Timestamp::from_millis(9_000),
                )
                .await
                .unwrap()
        }));
    }
    let mut reserved = 0;
    for task in tasks {
        if task.await.unwrap() == Reservation::Reserved {
            reserved += 1;
        }
    }
    assert_eq!(reserved, 1);
}

#[tokio::test]
async fn a_reservation_left_by_a_crash_is_listed_and_cleared_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let fingerprint = conformance::fingerprint(3);
    {
        let store = SqliteStore::open(&path).unwrap();
        assert_eq!(
            store
                .reserve_idempotency(
                    &tenant("acme"),
                    "order-42",
                    &fingerprint,
                    Timestamp::from_millis(1_000),
                    Timestamp::from_millis(90_000)
                )
                .await
                .unwrap(),
            Reservation::Reserved
        );
        // The process dies before completing or releasing.
    }
    let store = SqliteStore::open(&path).unwrap();
    assert!(matches!(
        store
            .reserve_idempotency(
                &tenant("acme"),
                "order-42",
                &fingerprint,
                Timestamp::from_millis(2_000),
                Timestamp::from_millis(92_000)
            )
            .await
            .unwrap(),
        Reservation::InProgress(_)
    ));
    let stuck = store
        .idempotency_records(None, Some(IdempotencyState::InProgress), 10)
        .await
        .unwrap();
    assert_eq!(stuck.len(), 1);
    assert_eq!(stuck[0].tenant, tenant("acme"));
    assert_eq!(stuck[0].key, "order-42");
    assert_eq!(stuck[0].created_at_ms, Timestamp::from_millis(1_000));
    assert!(
        store
            .clear_idempotency(&tenant("acme"), "order-42")
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .reserve_idempotency(
                &tenant("acme"),
                "order-42",
                &fingerprint,
                Timestamp::from_millis(3_000),
                Timestamp::from_millis(93_000)
            )
            .await
            .unwrap(),
        Reservation::Reserved,
        "the retry executes once the operator cleared the key"
    );
}

#[tokio::test]
async fn a_bad_idempotency_row_is_corrupt_not_panicked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let store = SqliteStore::open(&path).unwrap();
    let fingerprint = conformance::fingerprint(4);
    store
        .reserve_idempotency(
            &tenant("acme"),
            "k-1",
            &fingerprint,
            Timestamp::from_millis(1_000),
            Timestamp::from_millis(9_000),
        )
        .await
        .unwrap();
    let corrupt = |sql: &str| raw(&path).execute(sql, []).unwrap();
    corrupt("UPDATE idempotency SET state = 'done'");
    match store.idempotency_records(None, None, 10).await {
        Err(StoreError::Corrupt {
            table: "idempotency",
            column: "state",
            reason,
        }) => assert!(reason.contains("idempotency_key=k-1"), "{reason}"),
        other => panic!("expected corrupt idempotency.state, found {other:?}"),
    }
    corrupt("UPDATE idempotency SET state = 'completed'");
    match store
        .reserve_idempotency(
            &tenant("acme"),
            "k-1",
            &fingerprint,
            Timestamp::from_millis(1_001),
            Timestamp::from_millis(9_000),
        )
        .await
    {
        Err(StoreError::Corrupt {
            column: "status", ..
        }) => {}
        other => panic!("a completed record without a status: expected Corrupt, found {other:?}"),
    }
    corrupt("UPDATE idempotency SET status = 500, body = X''");
    assert!(matches!(
        store.idempotency_records(None, None, 10).await,
        Err(StoreError::Corrupt {
            column: "status",
            ..
        })
    ));
    corrupt("UPDATE idempotency SET status = 200, body = X'7b7d'");
    match store
        .reserve_idempotency(
            &tenant("acme"),
            "k-1",
            &fingerprint,
            Timestamp::from_millis(1_002),
            Timestamp::from_millis(9_000),
        )
        .await
        .unwrap()
    {
        Reservation::Replay(record) => {
            let response = record.response.unwrap();
            assert_eq!((response.status, response.body), (200, b"{}".to_vec()));
        }
        other => panic!("expected Replay, found {other:?}"),
    }
    // An operator can always clear a record, corrupt or not.
    corrupt("UPDATE idempotency SET state = 'done'");
    assert!(
        store
            .clear_idempotency(&tenant("acme"), "k-1")
            .await
            .unwrap()
    );
    assert_eq!(
        store.idempotency_records(None, None, 10).await.unwrap(),
        Vec::new()
    );
}

#[tokio::test]
async fn two_handles_on_one_file_never_both_hold_a_singleton() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    // Two handles stand for two `rein serve` processes sharing the file.
    let handles = [
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ];
    for round in 0..10u64 {
        let name = format!("ledger-reconciler-{round}");
        let mut tasks = Vec::new();
        for caller in 0..16u64 {
            let store = Arc::clone(&handles[caller as usize % 2]);
            let name = name.clone();
            tasks.push(tokio::spawn(async move {
                store
                    .claim_singleton(
                        &name,
                        &format!("pid:{caller}@h"),
                        Timestamp::from_millis(1_000),
                        Timestamp::from_millis(61_000),
                    )
                    .await
                    .unwrap()
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            winners.extend(task.await.unwrap());
        }
        assert_eq!(winners.len(), 1, "round {round}: exactly one owner wins");
        for handle in &handles {
            assert_eq!(
                handle.singleton(&name).await.unwrap().as_ref(),
                Some(&winners[0]),
                "round {round}: both handles see the winner"
            );
        }
    }

    // The holder renews through one handle; the other process is refused
    // while it lives and takes over once it lapses.
    let name = "idempotency-sweeper";
    let first = handles[0]
        .claim_singleton(
            name,
            "pid:1@a",
            Timestamp::from_millis(1_000),
            Timestamp::from_millis(61_000),
        )
        .await
        .unwrap();
    assert_eq!(
        first,
        Some(SingletonLease {
            name: name.to_owned(),
            owner: "pid:1@a".to_owned(),
            acquired_at_ms: Timestamp::from_millis(1_000),
            expires_at_ms: Timestamp::from_millis(61_000),
        })
    );
    assert_eq!(
        handles[1]
            .claim_singleton(
                name,
                "pid:2@b",
                Timestamp::from_millis(20_000),
                Timestamp::from_millis(80_000)
            )
            .await
            .unwrap(),
        None
    );
    let renewed = handles[0]
        .claim_singleton(
            name,
            "pid:1@a",
            Timestamp::from_millis(21_000),
            Timestamp::from_millis(81_000),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (
            renewed.acquired_at_ms.as_millis(),
            renewed.expires_at_ms.as_millis()
        ),
        (1_000, 81_000)
    );
    assert_eq!(
        handles[1]
            .claim_singleton(
                name,
                "pid:2@b",
                Timestamp::from_millis(80_999),
                Timestamp::from_millis(140_999)
            )
            .await
            .unwrap(),
        None,
        "the renewal counts across handles"
    );
    let taken = handles[1]
        .claim_singleton(
            name,
            "pid:2@b",
            Timestamp::from_millis(81_000),
            Timestamp::from_millis(141_000),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (taken.owner.as_str(), taken.acquired_at_ms.as_millis()),
        ("pid:2@b", 81_000)
    );
    assert!(!handles[0].release_singleton(name, "pid:1@a").await.unwrap());
    assert!(handles[0].release_singleton(name, "pid:2@b").await.unwrap());
    assert_eq!(handles[1].singleton(name).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn singleton_claims_racing_on_a_multi_threaded_runtime_elect_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let first = Arc::new(SqliteStore::open(&path).unwrap());
    let second = Arc::new(SqliteStore::open(&path).unwrap());
    // A lapsed lease: everyone races to take it over.
    first
        .claim_singleton(
            "run-reconciler",
            "pid:0@gone",
            Timestamp::from_millis(0),
            Timestamp::from_millis(500),
        )
        .await
        .unwrap()
        .unwrap();
    let barrier = Arc::new(tokio::sync::Barrier::new(32));
    let mut tasks = Vec::new();
    for caller in 0..32u64 {
        let store = Arc::clone(if caller % 2 == 0 { &first } else { &second });
        let barrier = Arc::clone(&barrier);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            store
                .claim_singleton(
                    "run-reconciler",
                    &format!("pid:{caller}@h"),
                    Timestamp::from_millis(1_000),
                    Timestamp::from_millis(61_000),
                )
                .await
                .unwrap()
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        winners.extend(task.await.unwrap());
    }
    assert_eq!(winners.len(), 1, "{winners:?}");
    assert_eq!(winners[0].acquired_at_ms, Timestamp::from_millis(1_000));
    assert_eq!(
        second.singleton("run-reconciler").await.unwrap().as_ref(),
        Some(&winners[0])
    );
}

#[tokio::test]
async fn singletons_survive_reopen_and_a_bad_row_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    {
        let store = SqliteStore::open(&path).unwrap();
        store
            .claim_singleton(
                "ledger-reconciler",
                "pid:1@a",
                Timestamp::from_millis(1_000),
                Timestamp::from_millis(61_000),
            )
            .await
            .unwrap()
            .unwrap();
        // The process dies without releasing.
    }
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(
        store
            .claim_singleton(
                "ledger-reconciler",
                "pid:2@b",
                Timestamp::from_millis(2_000),
                Timestamp::from_millis(62_000)
            )
            .await
            .unwrap(),
        None,
        "a lease outlives its process until it expires"
    );
    raw(&path)
        .execute("UPDATE singletons SET expires_at_ms = -1", [])
        .unwrap();
    match store.singleton("ledger-reconciler").await {
        Err(StoreError::Corrupt {
            table: "singletons",
            column: "expires_at_ms",
            reason,
        }) => assert!(reason.contains("name=ledger-reconciler"), "{reason}"),
        other => panic!("expected corrupt singletons.expires_at_ms, found {other:?}"),
    }
    assert!(matches!(
        store
            .claim_singleton(
                "ledger-reconciler",
                "pid:2@b",
                Timestamp::from_millis(2_000),
                Timestamp::from_millis(62_000)
            )
            .await,
        Err(StoreError::Corrupt { .. })
    ));
}

#[tokio::test]
async fn singleton_expiry_beyond_sqlite_integers_is_invalid() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("rein.db")).unwrap();
    assert!(matches!(
        store
            .claim_singleton(
                "sweeper",
                "pid:1@a",
                Timestamp::from_millis(1_000),
                Timestamp::from_millis(u64::MAX)
            )
            .await,
        Err(StoreError::Invalid {
            what: "singleton expires_at_ms",
            ..
        })
    ));
    assert_eq!(store.singleton("sweeper").await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_handles_racing_to_change_a_queued_run_admit_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    // Two handles stand for two `rein serve` processes: a cancel and a
    // worker start race for each queued run.
    let handles = [
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ];
    for round in 0..10u64 {
        let run = run_id(&format!("run-race-{round}"));
        handles[0]
            .create_run(new_run(run.as_str(), 1_000 + round))
            .await
            .unwrap();
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let mut tasks = Vec::new();
        for caller in 0..16u64 {
            let store = Arc::clone(&handles[caller as usize % 2]);
            let (run, barrier) = (run.clone(), Arc::clone(&barrier));
            tasks.push(tokio::spawn(async move {
                let status = if caller % 2 == 0 {
                    RunStatus::Running
                } else {
                    RunStatus::Finished(Outcome::Cancelled)
                };
                let commit = StepCommit {
                    expect_status: Some(RunStatus::Queued),
                    events: vec![event(&run, EventKind::RunStarted, caller as u32)],
                    status: Some(rein_store::StatusChange {
                        status,
                        report: None,
                        at_ms: Timestamp::from_millis(2_000 + caller),
                    }),
                    ..StepCommit::default()
                };
                barrier.wait().await;
                store.commit_step(&run, commit).await.map(|_| status)
            }));
        }
        let mut won = Vec::new();
        for task in tasks {
            match task.await.unwrap() {
                Ok(status) => won.push(status),
                Err(StoreError::StatusChanged { run_id }) => assert_eq!(run_id, run.as_str()),
                Err(other) => panic!("expected a status conflict, found {other:?}"),
            }
        }
        assert_eq!(won.len(), 1, "round {round}: exactly one change wins");
        let read = handles[1].get_run(&run).await.unwrap().unwrap();
        assert_eq!(read.status, won[0]);
        assert_eq!(handles[1].events(&run, 0).await.unwrap().len(), 1);
    }
    let queued = handles[1]
        .runs_with_status(RunStatus::Queued, 100)
        .await
        .unwrap();
    assert!(queued.is_empty(), "no run is left queued: {queued:?}");
}

fn run_lease(run: &RunId, lease_id: &str, owner: &str, acquired_at_ms: u64, ttl_ms: u64) -> Lease {
    Lease {
        lease_id: lease_id.to_owned(),
        run_id: run.clone(),
        intent_id: None,
        kind: LeaseKind::Run,
        pgid: None,
        path: None,
        owner: owner.to_owned(),
        acquired_at_ms: Timestamp::from_millis(acquired_at_ms),
        expires_at_ms: Timestamp::from_millis(acquired_at_ms + ttl_ms),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_handles_racing_to_take_over_a_run_claim_admit_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    // Two handles stand for two processes taking over the claim of a run
    // whose owner stalled.
    let handles = [
        Arc::new(SqliteStore::open(&path).unwrap()),
        Arc::new(SqliteStore::open(&path).unwrap()),
    ];
    let run = run_id("run-claimed");
    handles[0]
        .create_run(new_run(run.as_str(), 1_000))
        .await
        .unwrap();
    let lease_id = "run-claim:run-claimed";
    handles[0]
        .acquire_lease(run_lease(&run, lease_id, "pid:0@stalled", 1_000, 100))
        .await
        .unwrap();
    let mut holder = "pid:0@stalled".to_owned();
    for round in 0..10u64 {
        // The holder's lease expired at `now`.
        let now = 1_100 + round * 100;
        let barrier = Arc::new(tokio::sync::Barrier::new(16));
        let mut tasks = Vec::new();
        for taker in 0..16u64 {
            let store = Arc::clone(&handles[taker as usize % 2]);
            let barrier = Arc::clone(&barrier);
            let (run, owner) = (run.clone(), format!("pid:{taker}@round-{round}"));
            tasks.push(tokio::spawn(async move {
                let lease = run_lease(&run, lease_id, &owner, now, 100);
                barrier.wait().await;
                let won = store
                    .take_over_lease(lease, Timestamp::from_millis(now))
                    .await
                    .unwrap();
                (owner, won)
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            let (owner, won) = task.await.unwrap();
            if won {
                winners.push(owner);
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one take-over wins"
        );
        let held = handles[1].leases_of_run(&run).await.unwrap();
        assert_eq!(held.len(), 1);
        assert_eq!(held[0].owner, winners[0]);
        assert_eq!(held[0].expires_at_ms, Timestamp::from_millis(now + 100));
        // The stalled former holder is fenced off through either handle.
        for handle in &handles {
            assert!(
                !handle
                    .renew_lease_of(lease_id, &holder, Timestamp::from_millis(now + 10_000))
                    .await
                    .unwrap()
            );
            assert!(!handle.release_lease_of(lease_id, &holder).await.unwrap());
        }
        // The winner renews through the other handle; nobody takes over a
        // live lease.
        assert!(
            handles[round as usize % 2]
                .renew_lease_of(lease_id, &winners[0], Timestamp::from_millis(now + 100))
                .await
                .unwrap()
        );
        let live = run_lease(&run, lease_id, "pid:99@late", now + 50, 100);
        assert!(
            !handles[0]
                .take_over_lease(live, Timestamp::from_millis(now + 50))
                .await
                .unwrap()
        );
        holder = winners.pop().unwrap();
    }
    assert!(
        handles[1]
            .release_lease_of(lease_id, &holder)
            .await
            .unwrap()
    );
    assert!(handles[0].leases_of_run(&run).await.unwrap().is_empty());
}

/// An event whose data is JSON but not its kind's shape (a field renamed
/// by hand, or by a release that forgot a migration) is refused naming the
/// row, the column and the kind — never read as an event with fields
/// defaulted.
#[tokio::test]
async fn event_data_of_another_shape_is_corrupt_naming_the_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let store = SqliteStore::open(&path).unwrap();
    let run = run_id("run-renamed");
    store
        .create_run(new_run("run-renamed", 1_000))
        .await
        .unwrap();
    store
        .append_events(&run, vec![event(&run, EventKind::ToolCallFinished, 1)])
        .await
        .unwrap();
    assert_eq!(store.events(&run, 0).await.unwrap().len(), 1);
    raw(&path)
        .execute(
            "UPDATE events SET data = replace(data, '\"elapsed_ms\"', '\"elapsed\"') \
             WHERE run_id = 'run-renamed'",
            [],
        )
        .unwrap();
    match store.events(&run, 0).await {
        Err(StoreError::Corrupt {
            table,
            column,
            reason,
        }) => {
            assert_eq!((table, column), ("events", "data"), "{reason}");
            assert!(reason.contains("run-renamed"), "names the row: {reason}");
            assert!(
                reason.contains("tool_call_finished"),
                "names the kind: {reason}"
            );
        }
        other => panic!("expected corrupt events.data, found {other:?}"),
    }
}

/// A latency row damaged on disk (another version's text, garbage) is
/// reported by name, never decoded into a guess, never a panic, and does
/// not poison the others: reading lists the rest, and a merge into it
/// replaces it with the delta. Two handles stand for two processes: a
/// delta each, the sum seen by both.
#[tokio::test]
async fn a_corrupt_latency_row_is_reported_and_never_poisons_the_merge() {
    use rein_core::latency::LatencyHistogram;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let (one, two) = (
        SqliteStore::open(&path).unwrap(),
        SqliteStore::open(&path).unwrap(),
    );
    let sample = |ms: u64| {
        let mut h = LatencyHistogram::new();
        h.record(Duration::from_millis(ms));
        h
    };
    one.merge_latency(
        &[("tool:a".into(), sample(10)), ("tool:b".into(), sample(20))],
        Timestamp::from_millis(1),
    )
    .await
    .unwrap();
    two.merge_latency(&[("tool:a".into(), sample(30))], Timestamp::from_millis(2))
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    for (subject, text) in [
        ("tool:b", "{\"v\":9,\"unit\":\"us\",\"buckets\":[]}"),
        ("tool:c", "\u{0}not json"),
    ] {
        conn.execute(
            "INSERT INTO latency_histograms VALUES (?1, ?2, 1, 3) \
             ON CONFLICT (subject) DO UPDATE SET histogram = excluded.histogram",
            [subject, text],
        )
        .unwrap();
    }
    let rows = one.latency_histograms().await.unwrap();
    let a = rows.records.iter().find(|r| r.subject == "tool:a").unwrap();
    assert_eq!(a.histogram.samples(), 2, "both processes' samples");
    let corrupt: Vec<&str> = rows.corrupt.iter().map(|c| c.subject.as_str()).collect();
    assert_eq!(corrupt, ["tool:b", "tool:c"]);
    assert!(
        rows.corrupt[0].reason.contains("version 9"),
        "{:?}",
        rows.corrupt[0]
    );
    let merged = two
        .merge_latency(
            &[("tool:b".into(), sample(40)), ("tool:a".into(), sample(50))],
            Timestamp::from_millis(4),
        )
        .await
        .unwrap();
    assert_eq!(merged.corrupt.len(), 1, "the replaced row is reported");
    assert_eq!(merged.corrupt[0].subject, "tool:b");
    let after = one.latency_histograms().await.unwrap();
    let samples = |s: &str| {
        after
            .records
            .iter()
            .find(|r| r.subject == s)
            .map(|r| r.histogram.samples())
    };
    assert_eq!((samples("tool:a"), samples("tool:b")), (Some(3), Some(1)));
    assert_eq!(after.corrupt.len(), 1, "only tool:c is still unreadable");
}

/// Reports written before event schema 2 hold their cost as `cost`
/// micro-dollars, later ones as `cost_usd` dollars: the stats sum both, in
/// micro-dollars, exactly.
#[tokio::test]
async fn stats_sum_the_cost_of_reports_of_either_schema() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.db");
    let store = SqliteStore::open(&path).unwrap();
    for (id, report) in [
        (
            "old",
            json!({"consumed": {"steps": 1, "tokens": 10, "cost": 2000}}),
        ),
        (
            "new",
            json!({"consumed": {"steps": 1, "tokens": 20, "cost_usd": 0.0015}}),
        ),
    ] {
        let run = store.create_run(new_run(id, 1_000)).await.unwrap().run_id;
        store
            .set_run_status(
                &run,
                RunStatus::Finished(Outcome::Failed),
                None,
                Timestamp::from_millis(2_000),
            )
            .await
            .unwrap();
        raw(&path)
            .execute(
                "UPDATE runs SET report = ?1 WHERE run_id = ?2",
                rusqlite::params![report.to_string(), run.as_str()],
            )
            .unwrap();
    }
    let stats = store
        .run_stats(&rein_store::StatsQuery {
            tenant: None,
            agent: None,
            since_ms: Timestamp::from_millis(0),
            until_ms: Timestamp::from_millis(10_000),
        })
        .await
        .unwrap();
    let (tokens, cost) = stats
        .statuses
        .iter()
        .fold((0, 0), |(t, c), s| (t + s.tokens, c + s.cost_micros));
    assert_eq!((tokens, cost), (30, 3_500), "{stats:?}");
}

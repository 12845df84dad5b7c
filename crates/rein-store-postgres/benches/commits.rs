//! Durable step commits per second, SQLite against PostgreSQL: one writer,
//! and eight writers on eight runs at once (the shape of a node's
//! workers). Each commit is what a step of a run writes: a ledger
//! declaration, two events and a checkpoint, in one transaction.
//!
//! ```sh
//! cargo bench -p rein-store-postgres --bench commits
//! ```
//!
//! Prints the median of five rounds for each backend and shape. PostgreSQL
//! is the machine's (`REIN_TEST_POSTGRES_URL`, a scratch database); without
//! one only SQLite is measured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::Timestamp;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rein_core::deadline::{Cost, Usage};
use rein_core::{
    Event, EventData, EventKind, IntentId, LedgerRecord, LedgerStatus, RunId, TenantId, ToolClass,
};
use rein_store::{Checkpoint, NewRun, StepCommit, Store};
use rein_store_postgres::scratch::ScratchDatabase;
use rein_store_postgres::{PostgresOptions, PostgresStore};
use rein_store_sqlite::SqliteStore;
use serde_json::json;

/// Commits per writer per round.
const COMMITS: u32 = 200;
const ROUNDS: usize = 5;

fn run_id(round: usize, writer: usize) -> RunId {
    RunId::new(format!("bench-{round}-{writer}-{}", std::process::id())).unwrap()
}

fn commit(run: &RunId, step: u32) -> StepCommit {
    let event = |kind: EventKind, data: serde_json::Value| Event {
        run_id: run.clone(),
        seq: 0,
        step,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms: Timestamp::from_millis(1_000 + u64::from(step)),
        data: EventData::decode(kind, data).unwrap(),
    };
    let finished = json!({"tool": "t", "attempt": 1, "ok": true, "replayed": false,
                          "truncated": false, "elapsed_ms": 5});
    StepCommit {
        declares: vec![LedgerRecord {
            run_id: run.clone(),
            intent_id: IntentId::new(format!("i-{step}")).unwrap(),
            seq: 0,
            step,
            tool: "update_delivery_time".to_owned(),
            class: ToolClass::IdempotentWrite,
            idempotency_key: None,
            args: json!({"order_id": 42, "delivery": "friday"}),
            status: LedgerStatus::Pending,
            result: None,
            failure: None,
            attempts: 0,
            created_at_ms: Timestamp::from_millis(1_000),
            updated_at_ms: Timestamp::from_millis(1_000),
        }],
        events: vec![
            event(EventKind::ToolCallFinished, finished.clone()),
            event(EventKind::ToolCallFinished, finished),
        ],
        checkpoint: Some(Checkpoint {
            run_id: run.clone(),
            step,
            messages: json!([{"role": "assistant", "content": "moved to friday"}]),
            completed_intents: vec![],
            consumed: Usage {
                steps: step,
                tokens: 300,
                cost: Cost::from_micros(42),
            },
            elapsed_ms: 900,
            state: json!({}),
            at_ms: Timestamp::from_millis(2_000),
        }),
        ..StepCommit::default()
    }
}

/// One round: `writers` tasks, each committing [`COMMITS`] steps of its
/// own run; commits per second.
async fn round(store: Arc<dyn Store>, round: usize, writers: usize) -> f64 {
    for writer in 0..writers {
        store
            .create_run(NewRun {
                run_id: run_id(round, writer),
                tenant: TenantId::new("bench").unwrap(),
                agent: "a".to_owned(),
                input: "x".to_owned(),
                parent_run_id: None,
                budget: json!({}),
                created_at_ms: Timestamp::from_millis(1),
                trace_parent: None,
            })
            .await
            .unwrap();
    }
    let started = Instant::now();
    let tasks: Vec<_> = (0..writers)
        .map(|writer| {
            let store = store.clone();
            tokio::spawn(async move {
                let run = run_id(round, writer);
                for step in 1..=COMMITS {
                    store.commit_step(&run, commit(&run, step)).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed().max(Duration::from_micros(1));
    f64::from(COMMITS) * writers as f64 / elapsed.as_secs_f64()
}

async fn measure(name: &str, store: Arc<dyn Store>, base: usize) {
    for writers in [1, 8] {
        let mut rates = Vec::new();
        for n in 0..ROUNDS {
            rates.push(round(store.clone(), base + n * 10 + writers, writers).await);
        }
        rates.sort_by(f64::total_cmp);
        println!(
            "{name:<10} writers={writers}  median {:>7.0} commits/s  (min {:.0}, max {:.0}; {ROUNDS} rounds of {} commits)",
            rates[ROUNDS / 2],
            rates[0],
            rates[ROUNDS - 1],
            COMMITS as usize * writers
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    measure("sqlite", sqlite, 0).await;
    match ScratchDatabase::create("bench_commits").await {
        Some(database) => {
            let store = PostgresStore::connect_with(database.url(), PostgresOptions::default())
                .await
                .unwrap();
            measure("postgres", Arc::new(store.clone()), 1_000).await;
            store.close();
            database.drop_database().await;
        }
        None => println!("postgres   skipped: no server"),
    }
}

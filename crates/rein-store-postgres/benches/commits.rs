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

use std::sync::Arc;
use std::time::{Duration, Instant};

use rein_core::RunId;
use rein_store::Store;
use rein_store::conformance::{workload_run, workload_step};
use rein_store_postgres::scratch::ScratchDatabase;
use rein_store_postgres::{PostgresOptions, PostgresStore};
use rein_store_sqlite::SqliteStore;

/// Commits per writer per round.
const COMMITS: u32 = 200;
const ROUNDS: usize = 5;

fn run_id(round: usize, writer: usize) -> RunId {
    RunId::new(format!("bench-{round}-{writer}-{}", std::process::id())).unwrap()
}

/// One round: `writers` tasks, each committing [`COMMITS`] steps of its
/// own run; commits per second.
async fn round(store: Arc<dyn Store>, round: usize, writers: usize) -> f64 {
    for writer in 0..writers {
        store
            .create_run(workload_run(run_id(round, writer)))
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
                    store
                        .commit_step(&run, workload_step(&run, step))
                        .await
                        .unwrap();
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

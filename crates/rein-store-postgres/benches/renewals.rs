//! One heartbeat of a node driving many runs, SQLite and PostgreSQL: the
//! claims of 1,000 runs renewed as one batch (`renew_leases_of`, what the
//! engine's heartbeat does) against each renewed by its own task at the
//! same moment (`renew_lease_of` per run, what a heartbeat task per run
//! did).
//!
//! ```sh
//! cargo bench -p rein-store-postgres --bench renewals
//! ```
//!
//! Prints the median time of a beat over interleaved rounds, each way, and
//! their ratio. PostgreSQL is the machine's (`REIN_TEST_POSTGRES_URL`, a
//! scratch database); without one only SQLite is measured.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use rein_store::conformance::new_run;
use rein_store::{Lease, LeaseKind, Store, Timestamp};
use rein_store_postgres::scratch::ScratchDatabase;
use rein_store_postgres::{PostgresOptions, PostgresStore};
use rein_store_sqlite::SqliteStore;

/// Runs driven by the node.
const RUNS: usize = 1_000;
const ROUNDS: usize = 5;
const OWNER: &str = "pid:1@bench#node.0";

fn now_ms() -> Timestamp {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    Timestamp::from_millis(u64::try_from(since.as_millis()).unwrap())
}

/// Creates [`RUNS`] runs, each claimed by [`OWNER`]; their claims.
async fn claimed(store: &dyn Store) -> Vec<(String, String)> {
    let now = now_ms();
    let mut held = Vec::with_capacity(RUNS);
    for n in 0..RUNS {
        let run = new_run(&format!("beat-{n}"), now);
        let run_id = run.run_id.clone();
        let lease_id = format!("run:{run_id}");
        let claim = Lease {
            lease_id: lease_id.clone(),
            run_id,
            intent_id: None,
            kind: LeaseKind::Run,
            pgid: None,
            path: None,
            owner: OWNER.into(),
            acquired_at_ms: now,
            expires_at_ms: now.saturating_add(Duration::from_secs(60)),
        };
        store.create_run_claimed(run, claim, None).await.unwrap();
        held.push((lease_id, OWNER.to_owned()));
    }
    held
}

/// A beat of a task per run: every claim renewed by its own call, all at
/// once.
async fn one_by_one(store: &Arc<dyn Store>, held: &[(String, String)], until: Timestamp) {
    let tasks: Vec<_> = held
        .iter()
        .cloned()
        .map(|(lease_id, owner)| {
            let store = store.clone();
            tokio::spawn(async move {
                assert!(
                    store
                        .renew_lease_of(&lease_id, &owner, until)
                        .await
                        .unwrap()
                );
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
}

/// A beat of the node's one heartbeat: every claim in one write.
async fn batched(store: &Arc<dyn Store>, held: &[(String, String)], until: Timestamp) {
    let renewed = store.renew_leases_of(held, until).await.unwrap();
    assert!(renewed.into_iter().all(|r| r));
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

async fn measure(name: &str, store: Arc<dyn Store>) {
    let held = claimed(store.as_ref()).await;
    let (mut each, mut together) = (Vec::new(), Vec::new());
    for round in 0..ROUNDS {
        // Interleaved, and each way first in turn: the machine's noise
        // falls on both.
        let until = |n: u64| now_ms().saturating_add(Duration::from_secs(120 + n));
        for way in [round % 2, 1 - round % 2] {
            let started = Instant::now();
            if way == 0 {
                one_by_one(&store, &held, until(round as u64)).await;
                each.push(started.elapsed());
            } else {
                batched(&store, &held, until(round as u64)).await;
                together.push(started.elapsed());
            }
        }
    }
    let (each, together) = (median(each), median(together));
    println!(
        "{name:<10} {RUNS} claims  a task each {:>9.2?}  one batch {:>9.2?}  ({:.1}x; medians of {ROUNDS} interleaved rounds)",
        each,
        together,
        each.as_secs_f64() / together.as_secs_f64().max(1e-9)
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    measure("sqlite", sqlite).await;
    match ScratchDatabase::create("bench_renewals").await {
        Some(database) => {
            let store = PostgresStore::connect_with(database.url(), PostgresOptions::default())
                .await
                .unwrap();
            measure("postgres", Arc::new(store.clone())).await;
            store.close();
            database.drop_database().await;
        }
        None => println!("postgres   skipped: no server"),
    }
}

//! The chaos suite's submission layer on PostgreSQL (issue 17): `rein
//! chaos --store postgres://…` runs every scenario that submits through
//! `rein serve` on a database of its own, created on the machine's server
//! and dropped after; every invariant holds and every expected mechanism
//! fires, as on SQLite (`tests/chaos.rs`).
//!
//! The scenarios run with `--keep`, so the test can open each scenario's
//! database and see that the runs the suite judged are the ones
//! PostgreSQL holds; it drops them, and its scratch database, at the end.
//! Without a PostgreSQL server it skips; under CI it fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use rein_store::RunStore as _;
use rein_store_postgres::PostgresStore;
use rein_store_postgres::scratch::ScratchDatabase;
use serde_json::Value;
use tokio_postgres::NoTls;

/// The catalog's submission-layer scenarios, as `C068`.
fn submission_scenarios() -> Vec<String> {
    rein_chaos::catalog()
        .into_iter()
        .filter(|s| s.plan.submission.is_some())
        .map(|s| s.label())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_submission_layer_holds_every_invariant_on_postgres() {
    let Some(database) = ScratchDatabase::create("cli_chaos").await else {
        return;
    };
    let labels = submission_scenarios();
    assert!(labels.len() >= 3, "the submission layer: {labels:?}");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
    cmd.args(["chaos", "--json", "--keep", "--store"])
        .arg(database.url_text())
        .env_remove("REIN_CRASH_AT");
    for label in &labels {
        cmd.args(["--scenario", label]);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("rein chaos runs"))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "--json prints JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });

    // Whatever the verdict, the kept databases and directories go.
    let scenarios = doc["scenarios"].as_array().unwrap().clone();
    let (admin, connection) = database
        .url_text()
        .parse::<tokio_postgres::Config>()
        .unwrap()
        .connect(NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut held = Vec::new();
    for s in &scenarios {
        let name = s["database"].as_str().map(str::to_owned);
        if let Some(name) = &name {
            let store = PostgresStore::connect_with(
                &database.url().with_database(name).unwrap(),
                rein_store_postgres::PostgresOptions {
                    migrate: false,
                    ..Default::default()
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{}: its database {name} is kept: {e}", s["label"]));
            held.push((s.clone(), store.list_runs(100).await.unwrap()));
            store.close();
            admin
                .batch_execute(&format!("DROP DATABASE {name} WITH (FORCE)"))
                .await
                .unwrap();
        }
        if let Some(dir) = s["dir"].as_str() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    database.drop_database().await;

    let summary = &doc["summary"];
    let violations: Vec<&Value> = scenarios
        .iter()
        .flat_map(|s| s["violations"].as_array().unwrap())
        .collect();
    assert!(
        violations.is_empty(),
        "invariant violations: {violations:#?}"
    );
    assert_eq!(summary["errors"], 0, "harness errors: {stdout}");
    assert_eq!(summary["ran"], labels.len(), "{stdout}");
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(held.len(), labels.len(), "every scenario had a database");
    for (s, runs) in held {
        assert_eq!(s["store"], "postgres", "{s}");
        assert_eq!(
            s["missing"].as_array().unwrap().len(),
            0,
            "{} expects mechanisms that did not fire: {}",
            s["label"],
            s["missing"]
        );
        // One submission, one run, ended: the key held on PostgreSQL.
        assert_eq!(runs.len(), 1, "{}: {runs:?}", s["label"]);
        assert!(runs[0].status.is_finished(), "{}: {runs:?}", s["label"]);
        assert_eq!(
            s["outcomes"].as_array().unwrap().len(),
            1,
            "{}: the suite judged the run PostgreSQL holds",
            s["label"]
        );
        assert_eq!(
            s["outcomes"][0],
            runs[0].status.as_str(),
            "{}: the outcome judged is the stored one",
            s["label"]
        );
    }
}

#[test]
fn a_chaos_store_that_is_neither_sqlite_nor_postgres_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["chaos", "--scenario", "C068", "--store", "mysql://db/rein"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("sqlite") && stderr.contains("postgres://"),
        "{stderr}"
    );
}

//! The PostgreSQL backend on the machine's server: the conformance suite
//! check by check, each on a fresh database with two pools standing for
//! two nodes; and migrations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::RunStore;
use std::sync::Arc;

use rein_store::StoreError;
use rein_store::conformance::Subject;
use rein_store_postgres::scratch::ScratchDatabase;
use rein_store_postgres::{PostgresOptions, PostgresStore, SCHEMA_VERSION};

/// Two stores (two pools, like two nodes) on a new database, dropped after
/// the check.
async fn subject() -> Option<Subject> {
    let database = ScratchDatabase::create("conformance").await?;
    let store = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    let other = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    let (first, second) = (store.clone(), other.clone());
    Some(
        Subject::new(Arc::new(store), Arc::new(other)).with_teardown(async move {
            first.close();
            second.close();
            database.drop_database().await;
        }),
    )
}

mod conformance {
    use super::subject;

    rein_store::conformance_tests!(subject());
}

#[tokio::test]
async fn migrations_apply_once_and_a_newer_schema_is_refused() {
    let Some(database) = ScratchDatabase::create("migrate").await else {
        return;
    };
    let fresh = PostgresStore::schema_state(database.url()).await.unwrap();
    assert_eq!((fresh.found, fresh.supported), (0, SCHEMA_VERSION));
    let unmigrated = PostgresOptions {
        migrate: false,
        ..PostgresOptions::default()
    };
    let refused = PostgresStore::connect_with(database.url(), unmigrated.clone()).await;
    assert!(
        matches!(&refused, Err(StoreError::Backend(message)) if message.contains("rein migrate")),
        "a node that does not migrate refuses an old schema: {refused:?}"
    );
    // Several nodes starting at once migrate exactly once.
    let (a, b) = tokio::join!(
        PostgresStore::connect_with(database.url(), PostgresOptions::default()),
        PostgresStore::connect_with(database.url(), PostgresOptions::default()),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let state = PostgresStore::schema_state(database.url()).await.unwrap();
    assert_eq!(state.found, SCHEMA_VERSION);
    assert_eq!(state.pending(), 0);
    let store = PostgresStore::connect_with(database.url(), unmigrated)
        .await
        .unwrap();
    assert!(store.list_runs(1).await.unwrap().is_empty());
    // A newer rein's migration: this one refuses to write there.
    let (client, connection) = tokio_postgres::connect(&database.url_text(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .execute(
            "INSERT INTO rein_schema (version, applied_at_ms) VALUES ($1, 0)",
            &[&i64::from(SCHEMA_VERSION + 1)],
        )
        .await
        .unwrap();
    let newer = PostgresStore::connect_with(database.url(), PostgresOptions::default()).await;
    assert!(
        matches!(newer, Err(StoreError::SchemaTooNew { found, .. }) if found == i64::from(SCHEMA_VERSION + 1)),
        "a newer schema is refused"
    );
    for store in [a, b, store] {
        store.close();
    }
    drop(client);
    database.drop_database().await;
}

#[tokio::test]
async fn an_unreachable_database_is_unavailable_and_its_password_is_not_shown() {
    // Port 9 (discard) on loopback: nothing listens there.
    let url = "postgres://rein:pw-never-shown-1@127.0.0.1:9/rein?connect_timeout=2";
    let error = PostgresStore::connect(url).await.unwrap_err();
    assert!(
        error.is_transient(),
        "a database that is not there is transient: {error}"
    );
    let shown = error.to_string();
    assert!(!shown.contains("pw-never-shown-1"), "{shown}");
    assert!(
        shown.contains("127.0.0.1:9"),
        "the error names the database: {shown}"
    );
}

#[tokio::test]
async fn a_row_another_writer_damaged_is_corrupt_not_a_panic() {
    let Some(database) = ScratchDatabase::create("corrupt").await else {
        return;
    };
    let store = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    let run = rein_store::conformance::new_run("corrupt", 1_000);
    let run_id = run.run_id.clone();
    store.create_run(run).await.unwrap();
    let (client, connection) = tokio_postgres::connect(&database.url_text(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .execute(
            "UPDATE runs SET status = 'exploded', budget = '{not json' WHERE run_id = $1",
            &[&run_id.as_str()],
        )
        .await
        .unwrap();
    let read = store.get_run(&run_id).await;
    assert!(
        matches!(&read, Err(StoreError::Corrupt { table: "runs", .. })),
        "{read:?}"
    );
    let shown = read.unwrap_err().to_string();
    assert!(
        shown.contains(run_id.as_str()),
        "the error names the row: {shown}"
    );
    let commit = store
        .commit_step(&run_id, rein_store::StepCommit::default())
        .await;
    assert!(
        matches!(
            &commit,
            Err(StoreError::Corrupt {
                column: "status",
                ..
            })
        ),
        "a commit refuses a run whose status it cannot read: {commit:?}"
    );
    store.close();
    drop(client);
    database.drop_database().await;
}

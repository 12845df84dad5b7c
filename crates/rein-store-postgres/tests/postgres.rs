//! The PostgreSQL backend on the machine's server: the conformance suite
//! check by check, each on a fresh database with two pools standing for
//! two nodes; and migrations.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::RunStore;
use rein_store::Timestamp;
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

/// Issue 17: a database that does not exist is a permanent error naming
/// it, not a transient one retried forever.
#[tokio::test]
async fn a_missing_database_is_a_permanent_error_naming_it() {
    let Some(database) = ScratchDatabase::create("missing").await else {
        return;
    };
    let missing = database
        .url_text()
        .rsplit_once('/')
        .map(|(server, _)| format!("{server}/rein_no_such_database_17"));
    database.drop_database().await;
    let url = rein_store_postgres::PostgresUrl::parse(&missing.unwrap()).unwrap();
    let err = PostgresStore::connect_with(&url, PostgresOptions::default())
        .await
        .unwrap_err();
    assert!(
        !err.is_transient(),
        "a missing database is permanent: {err:?}"
    );
    let text = err.to_string();
    assert!(text.contains("rein_no_such_database_17"), "{text}");
    assert!(text.contains("createdb"), "{text}");
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
    let run = rein_store::conformance::new_run("corrupt", Timestamp::from_millis(1_000));
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

/// Migration `0003_guardrails.sql` backfills each stored event's
/// `guardrail` as `Guardrail::of` names it: every event shape of the wire
/// fixture, stored without one (as before the migration), then the
/// migration's own `UPDATE` run on them.
#[tokio::test]
async fn the_guardrail_backfill_names_what_guardrail_of_names() {
    let Some(database) = ScratchDatabase::create("backfill").await else {
        return;
    };
    let store = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    let (client, connection) = tokio_postgres::connect(&database.url_text(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    client
        .batch_execute(
            "INSERT INTO runs (run_id, tenant, agent, input, budget, status, created_at_ms, \
             updated_at_ms) VALUES ('r-1', 't', 'a', 'in', '{}', 'running', 1, 1)",
        )
        .await
        .unwrap();
    let fixture = include_str!("../../rein-core/tests/fixtures/events-v1.jsonl");
    for (seq, line) in fixture.lines().enumerate() {
        let event: serde_json::Value = serde_json::from_str(line).unwrap();
        client
            .execute(
                "INSERT INTO events (run_id, seq, step, at_ms, kind, data) \
                 VALUES ('r-1', $1, 0, 0, $2, $3)",
                &[
                    &(i64::try_from(seq).unwrap() + 1),
                    &event["kind"].as_str().unwrap(),
                    &event["data"].to_string(),
                ],
            )
            .await
            .unwrap();
    }
    // The migration's UPDATE, as released.
    let migration = include_str!("../migrations/0003_guardrails.sql");
    let start = migration.find("UPDATE events").unwrap();
    let end = start + migration[start..].find(';').unwrap();
    client.batch_execute(&migration[start..=end]).await.unwrap();
    let mut fired = 0;
    for row in client
        .query("SELECT kind, data, guardrail FROM events ORDER BY seq", &[])
        .await
        .unwrap()
    {
        let (kind, data, guardrail): (String, String, Option<String>) =
            (row.get(0), row.get(1), row.get(2));
        let parsed: rein_core::EventKind =
            serde_json::from_value(serde_json::Value::String(kind.clone())).unwrap();
        let decoded =
            rein_core::EventData::decode(parsed, serde_json::from_str(&data).unwrap()).unwrap();
        let expected = decoded.guardrail().map(|g| g.as_str().to_owned());
        assert_eq!(guardrail, expected, "the backfill of {kind} {data}");
        fired += usize::from(expected.is_some());
    }
    assert!(fired >= 5, "the fixture holds guardrail events: {fired}");
    drop(client);
    connection.await.unwrap().unwrap();
    store.close();
    database.drop_database().await;
}

/// Issue 17: with `PostgresOptions::notify` off a step commit is not
/// announced, with it on (the default) it is. Notifications arrive in
/// commit order, so the first one after the listener is up, once a quiet
/// commit and then a loud one are made, must be the loud one's.
#[tokio::test]
async fn a_store_without_notify_announces_no_step_commit() {
    use rein_store::{NewRun, RunStatus, StatusChange, StepCommit};
    let Some(database) = ScratchDatabase::create("notify").await else {
        return;
    };
    let loud = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    let quiet = PostgresStore::connect_with(
        database.url(),
        PostgresOptions {
            notify: false,
            ..PostgresOptions::default()
        },
    )
    .await
    .unwrap();
    let mut notified = loud.notifications().unwrap();
    // The listener announces that it listens with a resync.
    let first = notified.recv().await.unwrap();
    assert_eq!(first, rein_store::Notification::Resync);
    let start = |store: &PostgresStore, id: &'static str| {
        let store = store.clone();
        async move {
            let run_id = rein_core::RunId::new(id).unwrap();
            store
                .create_run(NewRun {
                    run_id: run_id.clone(),
                    tenant: rein_core::TenantId::new("t").unwrap(),
                    agent: "a".to_owned(),
                    input: "x".to_owned(),
                    parent_run_id: None,
                    budget: serde_json::json!({}),
                    created_at_ms: Timestamp::from_millis(1),
                    trace_parent: None,
                })
                .await
                .unwrap();
            let commit = StepCommit {
                status: Some(StatusChange {
                    status: RunStatus::Running,
                    report: None,
                    at_ms: Timestamp::from_millis(2),
                }),
                ..StepCommit::default()
            };
            store.commit_step(&run_id, commit).await.unwrap();
            run_id
        }
    };
    start(&quiet, "quiet").await;
    let announced = start(&loud, "loud").await;
    let next = notified.recv().await.unwrap();
    assert_eq!(next, rein_store::Notification::RunChanged(announced));
    loud.close();
    quiet.close();
    database.drop_database().await;
}

/// Reports written before event schema 2 hold their cost as `cost`
/// micro-dollars, later ones as `cost_usd` dollars: the stats sum both, in
/// micro-dollars, exactly.
#[tokio::test]
async fn stats_sum_the_cost_of_reports_of_either_schema() {
    let Some(database) = ScratchDatabase::create("report_cost").await else {
        return;
    };
    let store = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    let (client, connection) = tokio_postgres::connect(&database.url_text(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    for (id, report) in [
        (
            "old",
            r#"{"consumed": {"steps": 1, "tokens": 10, "cost": 2000}}"#,
        ),
        (
            "new",
            r#"{"consumed": {"steps": 1, "tokens": 20, "cost_usd": 0.0015}}"#,
        ),
    ] {
        client
            .execute(
                "INSERT INTO runs (run_id, tenant, agent, input, budget, status, report, \
                 created_at_ms, updated_at_ms) VALUES ($1, 't', 'a', 'in', '{}', 'failed', $2, 1, 2)",
                &[&id, &report],
            )
            .await
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
    drop(client);
    connection.await.unwrap().unwrap();
    store.close();
    database.drop_database().await;
}

/// A beat of more claims than one transaction renews (each holds its
/// advisory lock until the transaction ends, and the server's lock table
/// is bounded) renews every one, answered in the order given across the
/// transactions.
#[tokio::test]
async fn more_claims_than_one_transaction_holds_are_all_renewed() {
    use rein_store::{Lease, LeaseKind, LeaseStore, StoreExt};
    let Some(database) = ScratchDatabase::create("renewals").await else {
        return;
    };
    let store = PostgresStore::connect_with(database.url(), PostgresOptions::default())
        .await
        .unwrap();
    let run = rein_store::conformance::new_run("renewals", Timestamp::from_millis(1));
    let run_id = run.run_id.clone();
    store.create_run(run).await.unwrap();
    let owner = "pid:1@renewals#node.0";
    let mut held = Vec::new();
    for n in 0..600 {
        let lease_id = format!("renewals-{n}");
        store
            .acquire_lease(Lease {
                lease_id: lease_id.clone(),
                run_id: run_id.clone(),
                intent_id: None,
                kind: LeaseKind::TempPath,
                pgid: None,
                path: Some(std::path::PathBuf::from(format!("/tmp/{lease_id}"))),
                owner: owner.to_owned(),
                acquired_at_ms: Timestamp::from_millis(1),
                expires_at_ms: Timestamp::from_millis(100),
            })
            .await
            .unwrap();
        held.push((lease_id, owner.to_owned()));
    }
    // One another owner holds nothing of, in the second chunk.
    held.insert(550, ("renewals-3".to_owned(), "pid:2@elsewhere".to_owned()));
    let renewed = store
        .renew_leases_of(&held, Timestamp::from_millis(900))
        .await
        .unwrap();
    assert_eq!(renewed.len(), 601);
    assert!(!renewed[550], "another owner's renewal is refused");
    assert_eq!(renewed.iter().filter(|r| **r).count(), 600);
    let leases = store.leases_of_run(&run_id).await.unwrap();
    assert!(
        leases
            .iter()
            .all(|l| l.expires_at_ms == Timestamp::from_millis(900)),
        "every lease renewed"
    );
    store.close();
    database.drop_database().await;
}

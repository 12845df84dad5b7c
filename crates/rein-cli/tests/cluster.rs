//! Two real `rein serve` processes on one store behave as one service.
//!
//! - A cancel sent to a node that does not drive the run reaches the one
//!   that does, through the store (one SQLite file; one PostgreSQL
//!   database, by claim renewal and by notification alone). The run is
//!   mid-call at the driving node; the other node answers 202 and the run
//!   ends `cancelled` at the driving node, which stays up.
//! - On PostgreSQL, a live event stream at the node that does not drive
//!   the run follows it by notification, and loses nothing when the
//!   nodes' `LISTEN` connections are cut mid-run.
//!
//! Without a PostgreSQL server the PostgreSQL cases skip; under CI they
//! fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::{RunStore as _, StoreExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rein_store::Store;
use rein_store_postgres::scratch::ScratchDatabase;
use rein_testkit::order_desk::{Fault, Faults, OrderDesk, OrderDeskConfig, UPDATE_DELIVERY_TIME};

mod common;
use common::{Server, example_config};

/// A heartbeat of 1 s: the driving node reads cancel requests at each.
const FAST_HEARTBEAT: &str = "[server.queue]\nlease = \"3s\"\nworkers = 1\n\
     [server.reconciliation]\nheartbeat_interval = \"1s\"\norphan_threshold = \"4s\"\nscan_interval = \"1s\"\n";

/// A heartbeat of 5 min, far beyond the run's 24 s budget: a cancel that
/// arrives in time came by notification, not by a claim renewal.
const SLOW_HEARTBEAT: &str = "[server.queue]\nlease = \"900s\"\nworkers = 1\n\
     [server.reconciliation]\nheartbeat_interval = \"300s\"\norphan_threshold = \"900s\"\n";

async fn until_ended(client: &reqwest::Client, url: &str) -> serde_json::Value {
    for _ in 0..1200 {
        if let Ok(r) = client.get(url).send().await
            && let Ok(run) = r.json::<serde_json::Value>().await
            && !matches!(run["status"].as_str(), Some("queued" | "running") | None)
        {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} did not end");
}

/// The pid in a run claim's owner (`pid:PID+…`).
fn claim_pid(owner: &str) -> Option<u32> {
    owner
        .strip_prefix("pid:")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|pid| pid.parse().ok())
}

/// Runs the scenario on `data` (a SQLite path or a PostgreSQL URL), with
/// `store` opened on the same data to find the driving node; the driving
/// node's log must show `delivered` (how the cancel reached it).
async fn cancel_at_the_other_node(
    data: &Path,
    store: Arc<dyn Store>,
    server: &str,
    delivered: &str,
) {
    // Every update hangs at the desk: the run is mid-call when cancelled.
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(
        Faults::none().always(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::from_secs(60))),
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(dir.path(), server);
    // The update's first-byte limit (twice its p99) far beyond any
    // delivery of the cancel, so the call in flight ends by the cancel and
    // never by its own limit: the example's 400 ms p99 gives 800 ms, which
    // a claim renewal every second can miss on a loaded machine.
    let text = std::fs::read_to_string(&config).unwrap().replacen(
        "p99 = \"400ms\"\nsamples = 1000\n[tools.update_delivery_time.adapter]",
        "p99 = \"5s\"\nsamples = 1000\n[tools.update_delivery_time.adapter]",
        1,
    );
    assert!(
        text.contains("p99 = \"5s\""),
        "the update's latency profile"
    );
    std::fs::write(&config, text).unwrap();
    let client = reqwest::Client::new();
    let first = Server::start_async(&config, data, desk.base_url()).await;
    let second = Server::start_async(&config, data, desk.base_url()).await;

    let accepted = client
        .post(first.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    for _ in 0..1200 {
        if desk.request_count(UPDATE_DELIVERY_TIME) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        desk.request_count(UPDATE_DELIVERY_TIME) >= 1,
        "the run is mid-call"
    );

    let run_id = rein_core::RunId::new(location.rsplit('/').next().unwrap()).unwrap();
    let leases = store.leases_of_run(&run_id).await.unwrap();
    let claim = leases
        .iter()
        .find(|lease| lease.kind == rein_store::LeaseKind::Run)
        .unwrap_or_else(|| panic!("the run is claimed: {leases:?}"));
    let driver = claim_pid(&claim.owner).unwrap_or_else(|| panic!("{claim:?}"));
    let (mut driving, other) = if first.child.id() == driver {
        (first, second)
    } else {
        assert_eq!(second.child.id(), driver, "one of the nodes drives the run");
        (second, first)
    };

    let cancelled = client
        .post(other.url(&format!("{location}/cancel")))
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(
        cancelled.status(),
        202,
        "a cancel at the other node is taken"
    );
    let body: serde_json::Value = cancelled.json().await.unwrap();
    assert_eq!(body["status"], "cancelling", "{body}");
    assert_eq!(body["delivery"], "store", "{body}");
    let run = until_ended(&client, &other.url(&location)).await;
    let alive = driving.is_running();
    let logs = driving.log_lines().join("\n");
    driving.kill_async().await;
    other.kill_async().await;

    assert_eq!(run["status"], "cancelled", "{run}\n{logs}");
    assert!(alive, "the driving node cancelled the run and stayed up");
    assert!(
        logs.contains(delivered),
        "the driving node saw the request: {logs}"
    );
    // The call in flight was aborted by the cancel, not left to time out.
    let incomplete = run["report"]["incomplete"].to_string();
    assert!(
        incomplete.contains("update_delivery_time") && incomplete.contains("the run was cancelled"),
        "{run}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_at_another_node_reaches_the_driving_node_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let store: Arc<dyn Store> = Arc::new(rein_store_sqlite::SqliteStore::open(&db).unwrap());
    cancel_at_the_other_node(
        &db,
        store,
        FAST_HEARTBEAT,
        "cancel requested through the store",
    )
    .await;
}

/// On PostgreSQL with both deliveries: the claim renewal (fast heartbeat)
/// and the notification alone (a heartbeat too slow to matter).
async fn on_postgres(server: &str, delivered: &str) {
    let Some(database) = ScratchDatabase::create("cli_cancel").await else {
        return;
    };
    let store = rein_store_postgres::PostgresStore::connect_with(
        database.url(),
        rein_store_postgres::PostgresOptions::default(),
    )
    .await
    .unwrap();
    let store = Arc::new(store);
    cancel_at_the_other_node(
        &PathBuf::from(database.url_text()),
        store.clone(),
        server,
        delivered,
    )
    .await;
    store.close();
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_at_another_node_reaches_the_driving_node_on_postgres() {
    on_postgres(FAST_HEARTBEAT, "cancel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_at_another_node_is_notified_at_once_on_postgres() {
    on_postgres(SLOW_HEARTBEAT, "cancel notified through the store").await;
}

/// The `id:` of every SSE event in `text`, in order, and whether the
/// stream reached `run_finished`.
fn sse_ids(text: &str) -> (Vec<u64>, bool) {
    let ids = text
        .lines()
        .filter_map(|l| l.strip_prefix("id:"))
        .filter_map(|id| id.trim().parse().ok())
        .collect();
    (ids, text.contains("event: run_finished"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_stream_at_another_node_follows_by_notification_across_a_cut_listener() {
    let Some(database) = ScratchDatabase::create("cli_sse").await else {
        return;
    };
    // Each update takes a while: the run outlives the cut below.
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(
        Faults::none().always(
            UPDATE_DELIVERY_TIME,
            Fault::Delay(Duration::from_millis(500)),
        ),
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(dir.path(), SLOW_HEARTBEAT);
    let data = PathBuf::from(database.url_text());
    let client = reqwest::Client::new();
    let first = Server::start_async(&config, &data, desk.base_url()).await;
    let second = Server::start_async(&config, &data, desk.base_url()).await;

    let accepted = client
        .post(first.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    let run_id = rein_core::RunId::new(location.rsplit('/').next().unwrap()).unwrap();
    // The stream is watched at the node that does not drive the run.
    let store = rein_store_postgres::PostgresStore::connect_with(
        database.url(),
        rein_store_postgres::PostgresOptions::default(),
    )
    .await
    .unwrap();
    let mut driver = None;
    for _ in 0..1200 {
        let leases = store.leases_of_run(&run_id).await.unwrap();
        driver = leases
            .iter()
            .find(|lease| lease.kind == rein_store::LeaseKind::Run)
            .and_then(|claim| claim_pid(&claim.owner));
        if driver.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let driver = driver.expect("the run is claimed");
    let (driving, watching) = if first.child.id() == driver {
        (first, second)
    } else {
        (second, first)
    };
    let mut stream = client
        .get(watching.url(&format!("{location}/events")))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status(), 200);

    let (sql, connection) = tokio_postgres::connect(&database.url_text(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let mut text = String::new();
    let mut cut = 0;
    let read = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(chunk) = stream.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
            // After the first event: cut every LISTEN connection, as a
            // database restart would, while the run goes on.
            if cut == 0 && text.contains("event: ") {
                let rows = sql
                    .query(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
                        &[],
                    )
                    .await
                    .unwrap();
                cut = rows.len();
            }
            if sse_ids(&text).1 {
                break;
            }
        }
    })
    .await;
    let logs = watching.log_lines().join("\n");
    driving.kill_async().await;
    watching.kill_async().await;
    drop(sql);
    let stored = store.events(&run_id, 0).await.unwrap();
    store.close();
    database.drop_database().await;

    assert!(
        read.is_ok(),
        "the stream did not reach the run's end: {text}\n{logs}"
    );
    assert!(cut >= 2, "both nodes' LISTEN connections were cut ({cut})");
    let (ids, finished) = sse_ids(&text);
    assert!(finished, "{text}");
    let expected: Vec<u64> = stored.iter().map(|e| e.seq).collect();
    assert_eq!(
        ids, expected,
        "every event once, in order, none lost: {text}"
    );
    assert!(
        logs.contains("postgres listener connection lost"),
        "the watching node reconnected its listener: {logs}"
    );
}

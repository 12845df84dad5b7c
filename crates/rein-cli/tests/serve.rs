//! `rein serve` as a real process: it announces its address, answers, and
//! refuses to expose an unauthenticated API beyond loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::Timestamp;
use std::path::PathBuf;
use std::process::Command;

use rein_testkit::order_desk::{
    Fault, Faults, OrderDesk, OrderDeskConfig, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};

mod common;
use common::{Server, example_config, example_dir};
use rein_store::{IdempotencyStore, RunStore};

fn rein() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
    cmd.env("ORDER_DESK_URL", "http://127.0.0.1:1")
        .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
        .env_remove("REIN_CRASH_AT");
    cmd
}

#[test]
fn serve_announces_its_address_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(
        &example_dir(),
        &dir.path().join("data/rein.db"),
        "http://127.0.0.1:1",
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (health, openapi) = runtime.block_on(async {
        let health = reqwest::get(server.url("/healthz")).await.unwrap().status();
        let doc: serde_json::Value = reqwest::get(server.url("/openapi.json"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (health, doc)
    });
    server.kill();
    assert_eq!(health, 200);
    assert!(openapi["paths"]["/v1/agents/{name}/runs"].is_object());
    assert!(
        dir.path().join("data/rein.db").exists(),
        "the store is created on first start"
    );
}

#[test]
fn serve_refuses_an_open_api_off_loopback() {
    let dir = tempfile::tempdir().unwrap();
    let out = rein()
        .args(["serve", "--config"])
        .arg(example_dir())
        .args(["--listen", "0.0.0.0:0", "--data"])
        .arg(dir.path().join("rein.db"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("api_keys") && stderr.contains("loopback"),
        "{stderr}"
    );
}

/// The example config with short leases and thresholds, so takeover and
/// orphan detection happen within a test.
fn fast_config(dir: &std::path::Path) -> PathBuf {
    example_config(
        dir,
        "[server.queue]\nlease = \"3s\"\nworkers = 1\n\
         [server.reconciliation]\nheartbeat_interval = \"1s\"\norphan_threshold = \"4s\"\nscan_interval = \"1s\"\n",
    )
}

/// An order desk whose first update hangs for `secs`: the first owner
/// dies, or stalls, with it in flight.
async fn desk_with_hanging_update(secs: u64) -> OrderDesk {
    OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::none().then(
        UPDATE_DELIVERY_TIME,
        Fault::Delay(std::time::Duration::from_secs(secs)),
    )))
    .await
    .unwrap()
}

/// Waits until the desk has received an update request.
async fn update_reached(desk: &OrderDesk) {
    for _ in 0..600 {
        if desk.request_count(UPDATE_DELIVERY_TIME) > 0 {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the update never reached the desk");
}

/// Submits a queued run to `server`; its `Location`.
async fn submit_queued(client: &reqwest::Client, server: &Server) -> String {
    let accepted = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    accepted.headers()["location"].to_str().unwrap().to_owned()
}

async fn until_ended(client: &reqwest::Client, url: &str) -> serde_json::Value {
    for _ in 0..600 {
        if let Ok(r) = client.get(url).send().await
            && let Ok(run) = r.json::<serde_json::Value>().await
            && !matches!(run["status"].as_str(), Some("queued" | "running") | None)
        {
            return run;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{url} did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_servers_queued_run_is_taken_over_without_duplicate_effects() {
    // The first update hangs at the desk, so the first server dies with it
    // in flight.
    let desk = desk_with_hanging_update(30).await;
    let dir = tempfile::tempdir().unwrap();
    let config = fast_config(dir.path());
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let first = Server::start(&config, &db, desk.base_url());
    let location = submit_queued(&client, &first).await;
    update_reached(&desk).await;
    assert_eq!(
        desk.request_count(UPDATE_DELIVERY_TIME),
        1,
        "the first worker reached the update"
    );
    first.kill();

    // The survivor takes the run over once its claim expires.
    let second = Server::start(&config, &db, desk.base_url());
    let run = until_ended(&client, &second.url(&location)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        run["report"]["resume"].is_object(),
        "resumed from its checkpoint: {run}"
    );
    assert_eq!(
        desk.applied_count(UPDATE_DELIVERY_TIME),
        1,
        "one update, not two"
    );
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_servers_direct_run_is_closed_as_orphaned() {
    let desk = desk_with_hanging_update(30).await;
    let dir = tempfile::tempdir().unwrap();
    let config = fast_config(dir.path());
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let first = Server::start(&config, &db, desk.base_url());
    let url = first.url("/v1/agents/order_desk/runs");
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .body(r#"{"input": "Move order A-1001."}"#)
                .send()
                .await
        }
    });
    update_reached(&desk).await;
    first.kill();
    assert!(
        pending.await.unwrap().is_err(),
        "the caller lost its connection"
    );

    let second = Server::start(&config, &db, desk.base_url());
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();

    let run_id = store.list_runs(1).await.unwrap()[0].run_id.clone();
    let run = until_ended(&client, &second.url(&format!("/v1/runs/{run_id}"))).await;
    assert_eq!(run["status"], "failed", "{run}");
    assert!(
        run["report"]["summary"]
            .as_str()
            .unwrap()
            .contains("orphaned"),
        "{run}"
    );
    let events: serde_json::Value = client
        .get(second.url(&format!("/v1/runs/{run_id}/events")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let failed = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "run_failed")
        .expect("a run_failed event");
    assert_eq!(failed["data"]["error_type"], "orphaned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_records_are_listed_and_cleared_by_the_operator() {
    use rein_store::Reservation;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    {
        let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
        let tenant = rein_core::TenantId::new("acme").unwrap();
        let fingerprint = "0".repeat(64);
        // A crash after the reservation leaves it in progress.
        let r = store
            .reserve_idempotency(
                &tenant,
                "order-7",
                &fingerprint,
                Timestamp::from_millis(1_000),
                Timestamp::from_millis(u64::MAX / 2),
            )
            .await
            .unwrap();
        assert!(matches!(r, Reservation::Reserved));
    }
    let list = |extra: &[&str]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
        cmd.args(["idempotency", "list", "--in-progress", "--json", "--data"])
            .arg(&db)
            .args(extra);
        cmd.output().unwrap()
    };
    let out = list(&[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let records: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(records[0]["key"], "order-7");
    assert_eq!(records[0]["state"], "in_progress");
    let cleared = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "idempotency",
            "clear",
            "--tenant",
            "acme",
            "order-7",
            "--data",
        ])
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        cleared.status.success(),
        "{}",
        String::from_utf8_lossy(&cleared.stderr)
    );
    let after: serde_json::Value = serde_json::from_slice(&list(&[]).stdout).unwrap();
    assert_eq!(after.as_array().unwrap().len(), 0);
    let again = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "idempotency",
            "clear",
            "--tenant",
            "acme",
            "order-7",
            "--json",
            "--data",
        ])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(1), "nothing left to clear");
    let said: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    assert_eq!(
        said,
        serde_json::json!({"tenant": "acme", "key": "order-7", "cleared": false})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_owner_that_wakes_up_after_a_takeover_writes_nothing() {
    let signal = |pid: u32, sig: &str| {
        let status = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    };
    // The first owner's update hangs at the desk while it is stopped.
    let desk = desk_with_hanging_update(6).await;
    let dir = tempfile::tempdir().unwrap();
    let config = fast_config(dir.path());
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let first = Server::start(&config, &db, desk.base_url());
    let location = submit_queued(&client, &first).await;
    update_reached(&desk).await;
    let stalled = first.child.id();
    signal(stalled, "-STOP");

    let second = Server::start(&config, &db, desk.base_url());
    let run = until_ended(&client, &second.url(&location)).await;
    assert_eq!(run["status"], "succeeded", "{run}");

    // The stalled owner wakes up: its claim is gone, so it must neither
    // call a tool nor write to the run.
    signal(stalled, "-CONT");
    let events_before: serde_json::Value = client
        .get(second.url(&format!("{location}/events")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // Past the first owner's heartbeat and its delayed update's answer.
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    let events_after: serde_json::Value = client
        .get(second.url(&format!("{location}/events")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        events_before["events"].as_array().unwrap().len(),
        events_after["events"].as_array().unwrap().len(),
        "nothing was written after the run ended: {events_after}"
    );
    assert_eq!(
        events_after["events"].as_array().unwrap().last().unwrap()["kind"],
        "run_finished"
    );
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1, "one update");
    assert_eq!(desk.applied_count(SEND_EMAIL), 1, "one email");
    drop(first);
}

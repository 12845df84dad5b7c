//! `rein serve`, `rein migrate` and `rein runs` as real processes on the
//! machine's PostgreSQL: two nodes share one database (a run submitted to
//! one is read, replayed and, after the first node dies mid-call, taken
//! over and finished by the other, with one side effect), and no output
//! shows the URL's password. Each test makes its own database and drops
//! it; without a server they skip, under CI they fail.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use rein_store_postgres::scratch::ScratchDatabase;
use rein_testkit::order_desk::{
    Fault, Faults, OrderDesk, OrderDeskConfig, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};

mod common;
use common::{Server, example_config};
use rein_store::StoreExt;

/// A password the test server ignores (trust auth) and no output may show.
const PASSWORD: &str = "pg-pass-never-shown-7";

/// The scratch database's URL with [`PASSWORD`] in it.
fn url_with_password(database: &ScratchDatabase) -> String {
    database
        .url_text()
        .replacen("://root@", &format!("://root:{PASSWORD}@"), 1)
        .replacen("://postgres@", &format!("://postgres:{PASSWORD}@"), 1)
}

fn rein(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(args)
        .env_remove("REIN_CRASH_AT")
        .output()
        .unwrap()
}

/// Short leases, so a dead node's run is taken over within the test.
fn fast_config(dir: &std::path::Path) -> std::path::PathBuf {
    example_config(
        dir,
        "[server.queue]\nlease = \"3s\"\nworkers = 1\n\
         [server.reconciliation]\nheartbeat_interval = \"1s\"\norphan_threshold = \"4s\"\nscan_interval = \"1s\"\n",
    )
}

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

#[test]
fn migrate_checks_and_applies_without_showing_the_password() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(database) = runtime.block_on(ScratchDatabase::create("cli_migrate")) else {
        return;
    };
    let url = url_with_password(&database);
    let pending = rein(&["migrate", "--check", "--data", &url]);
    let applied = rein(&["migrate", "--data", &url]);
    let current = rein(&["migrate", "--check", "--json", "--data", &url]);
    let listed = rein(&["runs", "list", "--json", "--data", &url]);
    runtime.block_on(database.drop_database());
    assert_eq!(
        pending.status.code(),
        Some(1),
        "a fresh database has migrations pending"
    );
    assert_eq!(
        applied.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert_eq!(current.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&current.stdout).unwrap();
    assert_eq!(doc["pending"], 0);
    assert_eq!(doc["found"], doc["supported"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    for out in [&pending, &applied, &current, &listed] {
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!text.contains(PASSWORD), "the password is shown: {text}");
    }
    assert!(String::from_utf8_lossy(&pending.stdout).contains("[redacted]@"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_share_runs_and_keys_and_the_survivor_takes_a_dead_nodes_run_over() {
    let Some(database) = ScratchDatabase::create("cli_cluster").await else {
        return;
    };
    // The first update hangs at the desk: the first node dies with it in
    // flight.
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(
        Faults::none().then(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::from_secs(30))),
    ))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = fast_config(dir.path());
    let data = std::path::PathBuf::from(url_with_password(&database));
    let client = reqwest::Client::new();
    let first = Server::start_async(&config, &data, desk.base_url()).await;
    let second = Server::start_async(&config, &data, desk.base_url()).await;

    let submit = |server: &Server| {
        client
            .post(server.url("/v1/agents/order_desk/runs"))
            .header("content-type", "application/json")
            .header("idempotency-key", "move-a-1001")
            .body(r#"{"input": "Move order A-1001.", "mode": "queued"}"#)
            .send()
    };
    let accepted = submit(&first).await.unwrap();
    assert_eq!(accepted.status(), 202);
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    // The same key at the other node: the same run, not a second one.
    let replayed = submit(&second).await.unwrap();
    assert_eq!(replayed.status(), 202);
    assert_eq!(replayed.headers()["location"].to_str().unwrap(), location);
    for _ in 0..1200 {
        if desk.request_count(UPDATE_DELIVERY_TIME) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        desk.request_count(UPDATE_DELIVERY_TIME),
        1,
        "one node reached the update"
    );
    // Whichever node claimed it (its run lease names the process): kill
    // that one, the other finishes it.
    let run_id = rein_core::RunId::new(location.rsplit('/').next().unwrap()).unwrap();
    let store = rein_store_postgres::PostgresStore::connect_with(
        database.url(),
        rein_store_postgres::PostgresOptions::default(),
    )
    .await
    .unwrap();
    let leases = store.leases_of_run(&run_id).await.unwrap();
    let claim = leases
        .iter()
        .find(|lease| lease.kind == rein_store::LeaseKind::Run)
        .unwrap_or_else(|| panic!("the run is claimed: {leases:?}"));
    let driver = claim
        .owner
        .strip_prefix("pid:")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|pid| pid.parse::<u32>().ok())
        .unwrap_or_else(|| panic!("a process owns the claim: {claim:?}"));
    store.close();
    let (dead, survivor) = if first.child.id() == driver {
        (first, second)
    } else {
        assert_eq!(second.child.id(), driver, "one of the nodes drives the run");
        (second, first)
    };
    let mut logs = dead.log_lines().join("\n");
    dead.kill_async().await;
    let run = until_ended(&client, &survivor.url(&location)).await;
    logs.push_str(&survivor.log_lines().join("\n"));
    survivor.kill_async().await;
    database.drop_database().await;

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
    assert!(!logs.contains(PASSWORD), "the password is shown: {logs}");
}

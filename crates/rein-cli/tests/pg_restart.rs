//! Issue 17's cluster survives its database: three `rein serve` processes
//! on one PostgreSQL database, a few hundred queued runs with 10% of tool
//! calls faulted, one node SIGKILLed mid-run and started again, and
//! PostgreSQL itself restarted once mid-run (`pg_ctl restart -m fast`:
//! every session is cut, commits in flight fail). Afterwards every run is
//! terminal, none lost, none executed twice (the order desk's own log),
//! every submission key resolved, no effect left pending, no node crashed;
//! and a cancel sent to the node that does not drive a run, after the
//! database restarted under both nodes, is taken (202) and the run ends
//! `cancelled`.
//!
//! # Why a private server
//!
//! The machine's PostgreSQL is shared by every other test; restarting it
//! would fail theirs. This test makes its own ([`PrivatePostgres`], shared
//! with `pg_tls.rs`). Without the binaries the test skips with a message,
//! except under `CI=true`, where it fails.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use rein_store::{LeaseKind, StoreExt as _};
use rein_testkit::order_desk::{Fault, Faults, OrderDesk, OrderDeskConfig, UPDATE_DELIVERY_TIME};

#[path = "load/mod.rs"]
mod load;

mod common;
use common::{Server, example_config};

#[path = "common/postgres.rs"]
mod private_postgres;
use private_postgres::PrivatePostgres;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_survive_a_node_kill_and_a_database_restart() {
    let Some(postgres) = PrivatePostgres::start("the database restart test") else {
        return;
    };
    let postgres = Arc::new(postgres);
    postgres.create_database("rein").await;
    let runs = 200;
    let restarting = Arc::clone(&postgres);
    let config = load::LoadConfig {
        runs,
        servers: 3,
        workers: 3,
        client_concurrency: 8,
        timeout: Duration::from_secs(240),
        postgres: Some(postgres.url("rein")),
        kill_first_after: Some(runs / 4),
        restart_database: Some(load::DatabaseRestart {
            after: runs / 2,
            restart: Arc::new(move || restarting.pg_ctl("restart")),
        }),
        idempotency_keys: true,
        ..load::LoadConfig::default()
    };
    let report = load::run(config)
        .await
        .unwrap_or_else(|e| panic!("{e:#}\nPostgreSQL's log:\n{}", postgres.log_tail()));
    println!("{report}");
    assert_eq!(report.accepted, runs, "{report}");
    assert_eq!(report.lost, 0, "{report}");
    assert_eq!(report.stored_runs, runs, "{report}");
    assert_eq!(report.duplicated(), 0, "{report}");
    assert!(report.desk.faults_injected > 0, "{report}");
    // A write whose outcome commit fell into the restart may stay pending
    // (in doubt) in a run that then ends handed_off, its package holding
    // the record for a human and the reconciler: counted apart
    // (`handed_off_in_doubt`). Pending anywhere else is a dangling effect.
    assert_eq!(report.pending_effects, 0, "{report}");
    assert_eq!(report.unresolved_keys, 0, "{report}");
    assert!(
        report.database_restarted_after.is_some_and(|n| n < runs),
        "the database restarted mid-run: {report}"
    );
    assert!(
        report.servers.iter().all(|s| s.exited.is_none()),
        "no node exited on its own: {report}"
    );
    assert!(report.is_clean(), "{report}");

    cancel_after_a_restart(&postgres).await.unwrap();
}

/// The run's driving node's pid, from its claim (`pid:PID+…`).
async fn driver_of(store: &dyn rein_store::Store, run_id: &rein_core::RunId) -> Option<u32> {
    let leases = store.leases_of_run(run_id).await.ok()?;
    let claim = leases.iter().find(|lease| lease.kind == LeaseKind::Run)?;
    claim
        .owner
        .strip_prefix("pid:")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|pid| pid.parse().ok())
}

/// Two nodes on the database; a run hangs mid-call at the desk on one of
/// them; the database restarts under both; then a cancel sent to the other
/// node is taken (202) and the run ends `cancelled`.
async fn cancel_after_a_restart(postgres: &Arc<PrivatePostgres>) -> Result<()> {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(
        Faults::none().always(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::from_secs(60))),
    ))
    .await?;
    let dir = tempfile::tempdir()?;
    // The store from the config's `[store]` table, not `--data`.
    let config = example_config(
        dir.path(),
        &format!(
            "[store]\nurl = \"{}\"\npool_size = 4\nconnect_timeout = \"5s\"\n",
            postgres.url("rein")
        ),
    );
    let serve = || {
        let mut command = Command::new(env!("CARGO_BIN_EXE_rein"));
        command
            .env("ORDER_DESK_URL", desk.base_url())
            .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
            .env_remove("REIN_CRASH_AT")
            .args(["serve", "--config"])
            .arg(&config)
            .args(["--listen", "127.0.0.1:0"]);
        Server::spawn_async(command)
    };
    let first = serve().await;
    let second = serve().await;
    let client = reqwest::Client::new();
    let accepted = client
        .post(first.url("/v1/agents/order_desk/runs"))
        .json(&serde_json::json!({"input": "Move order A-1001.", "mode": "queued"}))
        .send()
        .await?;
    ensure!(accepted.status() == 202, "{}", accepted.status());
    let location = accepted.headers()["location"].to_str()?.to_owned();
    let run_id = rein_core::RunId::new(location.rsplit('/').next().unwrap_or_default())?;
    for _ in 0..1200 {
        if desk.request_count(UPDATE_DELIVERY_TIME) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ensure!(
        desk.request_count(UPDATE_DELIVERY_TIME) > 0,
        "the run is mid-call"
    );
    let store = rein_store_postgres::PostgresStore::connect(&postgres.url("rein")).await?;
    // Found in the database `[store] url` names: the nodes record there.
    let driver = driver_of(&store, &run_id)
        .await
        .context("the run is claimed in the database [store] url names")?;
    store.close();
    let (mut driving, mut other) = if first.child.id() == driver {
        (first, second)
    } else {
        ensure!(
            second.child.id() == driver,
            "one of the nodes drives the run"
        );
        (second, first)
    };

    let restarting = Arc::clone(postgres);
    tokio::task::spawn_blocking(move || restarting.pg_ctl("restart")).await??;

    // The other node's pool finds its connections cut: the first answer
    // may be a 503 (the store unavailable), never anything else.
    let mut cancelled = None;
    for _ in 0..100 {
        let response = client
            .post(other.url(&format!("{location}/cancel")))
            .header("content-type", "application/json")
            .send()
            .await?;
        match response.status().as_u16() {
            202 => {
                cancelled = Some(response.json::<serde_json::Value>().await?);
                break;
            }
            503 => tokio::time::sleep(Duration::from_millis(100)).await,
            status => bail!("the cancel answered {status}: {}", response.text().await?),
        }
    }
    let body = cancelled.context("the cancel was never taken")?;
    ensure!(body["status"] == "cancelling", "{body}");
    let mut run = serde_json::Value::Null;
    for _ in 0..1200 {
        if let Ok(r) = client.get(other.url(&location)).send().await
            && let Ok(view) = r.json::<serde_json::Value>().await
            && !matches!(view["status"].as_str(), Some("queued" | "running") | None)
        {
            run = view;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let alive = driving.is_running() && other.is_running();
    let logs = driving.log_lines().join("\n");
    driving.kill_async().await;
    other.kill_async().await;
    ensure!(run["status"] == "cancelled", "{run}\n{logs}");
    ensure!(alive, "both nodes stayed up across the restart\n{logs}");
    Ok(())
}

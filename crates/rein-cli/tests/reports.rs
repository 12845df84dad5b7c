//! Reports tell the truth from the ledger for runs that end because a
//! process died (issue 13, item 3): a direct run closed as orphaned, a
//! queued run dead-lettered, a run killed mid-compensation. Each report
//! lists every effect with its ledger status as it stands, its summary
//! names its outcome, and a handoff package (also from
//! `GET /v1/runs/{id}/handoff`) is there whenever a record awaits a human.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use rein_testkit::order_desk::{
    Fault, Faults, OrderDesk, OrderDeskConfig, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::Value;

mod common;
use common::{Server, example_config};
use rein_store::RunStore;

/// The report agrees with the ledger and with itself.
fn assert_truthful(report: &Value, ledger: &[Value]) {
    let outcome = report["outcome"].as_str().unwrap();
    let summary = report["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(&format!("The run ended {outcome}")),
        "the summary names the outcome {outcome}: {summary}"
    );
    let listed: BTreeMap<&str, &Value> = report["completed"]
        .as_array()
        .unwrap()
        .iter()
        .chain(report["incomplete"].as_array().unwrap())
        .map(|a| (a["intent_id"].as_str().unwrap(), &a["ledger"]))
        .collect();
    for record in ledger {
        let intent = record["intent_id"].as_str().unwrap();
        assert_eq!(
            listed.get(intent).copied(),
            Some(&record["status"]),
            "{} is listed with its ledger status {}: {report:#}",
            record["tool"],
            record["status"]
        );
    }
    let awaiting = ledger.iter().any(|r| {
        matches!(
            r["status"].as_str(),
            Some("pending" | "manual" | "uncompensatable")
        )
    });
    assert_eq!(
        report["handoff"].is_object(),
        awaiting || outcome == "handed_off",
        "a package exactly when a record awaits a human: {report:#}"
    );
}

fn fast_config(dir: &Path, extra: &str) -> std::path::PathBuf {
    example_config(
        dir,
        &format!(
            "[server.queue]\nlease = \"3s\"\nworkers = 1\n{extra}\n\
             [server.reconciliation]\nheartbeat_interval = \"1s\"\norphan_threshold = \"3s\"\nscan_interval = \"1s\"\n"
        ),
    )
}

/// A desk whose email hangs: the run has updated the order and is
/// sending the email when its process dies.
async fn desk_with_hanging_email() -> OrderDesk {
    OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().then(SEND_EMAIL, Fault::Delay(Duration::from_secs(30)))),
    )
    .await
    .unwrap()
}

async fn email_reached(desk: &OrderDesk) {
    for _ in 0..600 {
        if desk.request_count(SEND_EMAIL) > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the email never reached the desk");
}

async fn get(client: &reqwest::Client, url: String) -> (u16, Value) {
    let r = client.get(url).send().await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn until_ended(client: &reqwest::Client, server: &Server, run: &str) -> Value {
    for _ in 0..600 {
        let (_, view) = get(client, server.url(&format!("/v1/runs/{run}"))).await;
        if !matches!(view["status"].as_str(), Some("queued" | "running") | None) {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run} did not end");
}

/// The run's report, its ledger and its handoff answer, once it ended,
/// read so that they agree: the ledger is read before and after the view
/// and the handoff, and they are taken only when it did not change in
/// between (the server's reconciler may settle a record at any moment;
/// its mark lands with the report it revises, in one commit).
async fn ended(client: &reqwest::Client, server: &Server, run: &str) -> (Value, Vec<Value>, u16) {
    until_ended(client, server, run).await;
    let ledger_url = server.url(&format!("/v1/runs/{run}/ledger"));
    loop {
        let (_, before) = get(client, ledger_url.clone()).await;
        let (_, view) = get(client, server.url(&format!("/v1/runs/{run}"))).await;
        let (handoff, _) = get(client, server.url(&format!("/v1/runs/{run}/handoff"))).await;
        let (_, after) = get(client, ledger_url.clone()).await;
        if before == after {
            return (
                view["report"].clone(),
                after["records"].as_array().unwrap().clone(),
                handoff,
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphaned_run_reports_the_update_it_made_and_the_email_in_doubt() {
    let desk = desk_with_hanging_email().await;
    let dir = tempfile::tempdir().unwrap();
    let config = fast_config(dir.path(), "");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();
    let first = Server::start_async(&config, &db, desk.base_url()).await;
    let url = first.url("/v1/agents/order_desk/runs");
    let pending = tokio::spawn({
        let client = client.clone();
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .body(r#"{"input": "Move order A-1001 and tell the buyer."}"#)
                .send()
                .await
        }
    });
    email_reached(&desk).await;
    first.kill_async().await;
    assert!(
        pending.await.unwrap().is_err(),
        "the caller lost its answer"
    );

    let second = Server::start_async(&config, &db, desk.base_url()).await;
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();

    let run = store.list_runs(1).await.unwrap()[0].run_id.to_string();
    let (report, ledger, handoff) = ended(&client, &second, &run).await;
    assert_eq!(report["outcome"], "failed", "{report:#}");
    assert!(
        report["summary"].as_str().unwrap().contains("(orphaned: "),
        "{report:#}"
    );
    assert_truthful(&report, &ledger);
    let tools: Vec<(&str, &str)> = ledger
        .iter()
        .map(|r| (r["tool"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tools,
        [(UPDATE_DELIVERY_TIME, "succeeded"), (SEND_EMAIL, "pending")],
        "what the process did before it died"
    );
    assert_eq!(handoff, 200, "the email in doubt awaits a human");
    assert!(
        !report["recommendation"]
            .as_str()
            .unwrap()
            .contains("submit the task again if needed"),
        "{report:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_lettered_run_reports_the_update_it_made_and_the_email_in_doubt() {
    let desk = desk_with_hanging_email().await;
    let dir = tempfile::tempdir().unwrap();
    // One delivery: the first owner's death dead-letters the run.
    let config = fast_config(dir.path(), "max_attempts = 1");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();
    let first = Server::start_async(&config, &db, desk.base_url()).await;
    let accepted = client
        .post(first.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001 and tell the buyer.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let view: Value = accepted.json().await.unwrap();
    let run = view["run_id"].as_str().unwrap().to_owned();
    email_reached(&desk).await;
    first.kill_async().await;

    let second = Server::start_async(&config, &db, desk.base_url()).await;
    let (report, ledger, handoff) = ended(&client, &second, &run).await;
    assert_eq!(report["outcome"], "failed", "{report:#}");
    assert!(
        report["summary"]
            .as_str()
            .unwrap()
            .contains("(dead_letter: "),
        "{report:#}"
    );
    assert_truthful(&report, &ledger);
    assert_eq!(
        report["completed"][1]["tool"], UPDATE_DELIVERY_TIME,
        "{report:#}"
    );
    assert_eq!(report["completed"][1]["ledger"], "succeeded");
    assert_eq!(report["incomplete"][0]["tool"], SEND_EMAIL, "{report:#}");
    assert_eq!(report["incomplete"][0]["maybe_applied"], true);
    assert_eq!(handoff, 200);
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

const COMPENSATION_SCRIPT: &str = r#"{"turns": [
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1001", "delivery_date": "2026-02-01T10:00:00Z"}}]},
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1002", "delivery_date": "2026-02-02T10:00:00Z"}}]},
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1003", "delivery_date": "2026-02-03T10:00:00Z"}}]},
  {"text": "The third order cannot be moved."}
]}"#;

fn rein(args: &[&str], env: &[(&str, &str)], crash_at: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
    cmd.args(args).env_remove("REIN_CRASH_AT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    if let Some(point) = crash_at {
        cmd.env("REIN_CRASH_AT", point);
    }
    cmd.output().unwrap()
}

/// A run killed between two compensations, then resumed into its
/// settlement: with a strong compensation both updates end `compensated`
/// and the run `failed`; with a weak one the compensation that may have
/// run is not repeated, its update is left `manual`, and the run is
/// handed off. Either way the report says what the ledger says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_killed_mid_compensation_reports_each_update_as_the_ledger_has_it() {
    for (grade, outcome, first_update) in [
        ("strong", "failed", "compensated"),
        ("weak", "handed_off", "manual"),
    ] {
        let desk = OrderDesk::start().await.unwrap();
        for fault in [
            Fault::Delay(Duration::ZERO),
            Fault::Delay(Duration::ZERO),
            Fault::status(409),
        ] {
            desk.push_fault(UPDATE_DELIVERY_TIME, fault).unwrap();
        }
        let dir = tempfile::tempdir().unwrap();
        let config = example_config(dir.path(), "");
        std::fs::write(dir.path().join("demo.script.json"), COMPENSATION_SCRIPT).unwrap();
        let text = std::fs::read_to_string(&config).unwrap();
        std::fs::write(
            &config,
            text.replacen("grade = \"strong\"", &format!("grade = \"{grade}\""), 1),
        )
        .unwrap();
        let db = dir.path().join("rein.db");
        let (config, db) = (config.display().to_string(), db.display().to_string());
        let env = [
            ("ORDER_DESK_URL", desk.base_url()),
            ("MOCK_MODEL_URL", "http://127.0.0.1:9"),
        ];
        // The second compensation (of A-1001) has started when it dies.
        let crashed = tokio::task::block_in_place(|| {
            rein(
                &[
                    "run",
                    "--config",
                    &config,
                    "--data",
                    &db,
                    "--agent",
                    "order_desk",
                    "--input",
                    "x",
                    "--run-id",
                    "r1",
                    "--json",
                ],
                &env,
                Some("mid_compensation:2"),
            )
        });
        assert_eq!(crashed.status.signal(), Some(6), "{grade}: it aborted");
        let resumed = tokio::task::block_in_place(|| {
            rein(
                &["resume", "r1", "--config", &config, "--data", &db, "--json"],
                &env,
                None,
            )
        });
        let doc: Value = serde_json::from_slice(&resumed.stdout)
            .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&resumed.stderr)));
        let report = &doc["report"];
        let ledger = doc["ledger"].as_array().unwrap();
        assert_eq!(report["outcome"], outcome, "{grade}: {report:#}");
        assert_truthful(report, ledger);
        let statuses: Vec<&str> = ledger
            .iter()
            .map(|r| r["status"].as_str().unwrap())
            .collect();
        assert_eq!(
            statuses,
            [first_update, "compensated", "failed"],
            "{grade}: A-1001, A-1002, A-1003"
        );
    }
}

//! Handoff decisions through the CLI and the API (issue 33, item 2): a
//! run of `rein run` is handed off with two updates whose compensation
//! failed; one is decided with `rein handoff resolve` on the store file, a
//! conflicting second decision is refused naming the first, and the other
//! is compensated through a `rein serve` on the same store once the desk
//! works again, which closes the run with what then stands.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use rein_testkit::order_desk::{
    Fault, Faults, OrderDesk, OrderDeskConfig, RESTORE_DELIVERY_TIME, UPDATE_DELIVERY_TIME,
};
use serde_json::{Value, json};

mod common;
use common::{Server, example_config};

const THREE_UPDATES: &str = r#"{"turns": [
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1001", "delivery_date": "2026-02-01T10:00:00Z"}}]},
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1002", "delivery_date": "2026-02-02T10:00:00Z"}}]},
  {"tool_calls": [{"name": "update_delivery_time", "arguments": {"order_id": "A-1003", "delivery_date": "2026-02-03T10:00:00Z"}}]},
  {"text": "The third order cannot be moved."}
]}"#;

fn rein(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
    cmd.args(args).env_remove("REIN_CRASH_AT");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_off_run_is_resolved_through_the_cli_and_the_api_and_closes() {
    // The third update conflicts; every restore is refused, so the strong
    // compensation of the first two fails and the run is handed off.
    let faults = Faults::none()
        .then(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::ZERO))
        .then(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::ZERO))
        .then(UPDATE_DELIVERY_TIME, Fault::status(409))
        .always(RESTORE_DELIVERY_TIME, Fault::status(503));
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(dir.path(), "");
    std::fs::write(dir.path().join("demo.script.json"), THREE_UPDATES).unwrap();
    let db = dir.path().join("rein.db");
    let (config_s, db_s) = (config.display().to_string(), db.display().to_string());
    let env = [
        ("ORDER_DESK_URL", desk.base_url()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:9"),
    ];

    let ran = tokio::task::block_in_place(|| {
        rein(
            &[
                "run",
                "--config",
                &config_s,
                "--data",
                &db_s,
                "--agent",
                "order_desk",
                "--input",
                "x",
                "--run-id",
                "r1",
                "--json",
            ],
            &env,
        )
    });
    let doc: Value =
        serde_json::from_slice(&ran.stdout).unwrap_or_else(|_| panic!("{}", text(&ran.stderr)));
    assert_eq!(doc["report"]["outcome"], "handed_off", "{doc:#}");
    let ledger = doc["ledger"].as_array().unwrap();
    let statuses: Vec<&str> = ledger
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["manual", "manual", "failed"], "{doc:#}");
    let first = ledger[0]["intent_id"].as_str().unwrap().to_owned();
    let second = ledger[1]["intent_id"].as_str().unwrap().to_owned();

    // The package lists both; the first is decided on the file.
    let shown = tokio::task::block_in_place(|| rein(&["handoff", "r1", "--data", &db_s], &env));
    assert!(shown.status.success(), "{}", text(&shown.stderr));
    let shown = text(&shown.stdout);
    assert!(shown.contains(&first) && shown.contains(&second), "{shown}");
    assert!(
        shown.contains(&format!("rein handoff resolve r1 {first}")),
        "the package says how to decide: {shown}"
    );
    let undone = tokio::task::block_in_place(|| {
        rein(
            &[
                "handoff",
                "resolve",
                "r1",
                &first,
                "--undone",
                "--reason",
                "restored by hand",
                "--by",
                "alice",
                "--data",
                &db_s,
            ],
            &env,
        )
    });
    assert!(undone.status.success(), "{}", text(&undone.stderr));
    let said = text(&undone.stdout);
    assert!(said.contains("manual → compensated by alice"), "{said}");
    assert!(said.contains("1 record still awaits a decision"), "{said}");

    // A conflicting decision is refused, naming the one that stands.
    let conflicting = tokio::task::block_in_place(|| {
        rein(
            &[
                "handoff",
                "resolve",
                "r1",
                &first,
                "--accepted",
                "--by",
                "bob",
                "--data",
                &db_s,
            ],
            &env,
        )
    });
    assert_eq!(
        conflicting.status.code(),
        Some(1),
        "{}",
        text(&conflicting.stderr)
    );
    assert!(
        text(&conflicting.stderr).contains("already decided undone by alice"),
        "{}",
        text(&conflicting.stderr)
    );
    // A compensation on a file needs the config that knows the tool.
    let without_config = tokio::task::block_in_place(|| {
        rein(
            &[
                "handoff",
                "resolve",
                "r1",
                &second,
                "--compensate",
                "--data",
                &db_s,
            ],
            &env,
        )
    });
    assert_eq!(without_config.status.code(), Some(2));
    assert!(text(&without_config.stderr).contains("--config"));

    // The second, through a server on the same store, once the desk takes
    // restores again: compensated, and the run is closed.
    desk.clear_faults();
    let server = Server::start_async(&config, &db, desk.base_url()).await;
    let base = server.url("");
    // The package through the server reads as from the file: one record
    // still awaits a decision.
    let package =
        tokio::task::block_in_place(|| rein(&["handoff", "r1", "--server", &base, "--json"], &env));
    assert!(package.status.success(), "{}", text(&package.stderr));
    let package: Value = serde_json::from_slice(&package.stdout).unwrap();
    let awaiting: Vec<&str> = package["awaiting_decision"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["intent_id"].as_str().unwrap())
        .collect();
    assert_eq!(awaiting, [second.as_str()], "{package}");
    let client = reqwest::Client::new();
    let url = server.url("/v1/runs/r1/handoff/decisions");
    let answer = client
        .post(&url)
        .json(&json!({"intent_id": second, "decision": "compensate", "by": "carol"}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let resolution: Value = answer.json().await.unwrap();
    assert_eq!(resolution["status"], "compensated", "{resolution}");
    assert_eq!(resolution["by"], "carol");
    assert_eq!(resolution["still_awaiting"], 0);
    // Both updates undone: the world is as before, the run failed.
    assert_eq!(resolution["closed"], "failed", "{resolution}");
    assert_eq!(desk.applied_count(RESTORE_DELIVERY_TIME), 1);

    let view: Value = client
        .get(server.url("/v1/runs/r1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(view["status"], "failed", "{view}");
    assert!(view["report"]["handoff"].is_null(), "{view}");
    let handoff = client
        .get(server.url("/v1/runs/r1/handoff"))
        .send()
        .await
        .unwrap();
    assert_eq!(handoff.status(), 404, "nothing awaits a human any more");
    let none = tokio::task::block_in_place(|| rein(&["handoff", "r1", "--server", &base], &env));
    assert_eq!(none.status.code(), Some(1), "{}", text(&none.stderr));
    assert!(
        text(&none.stderr).contains("none of run r1's records awaits a human"),
        "{}",
        text(&none.stderr)
    );

    let again = client
        .post(&url)
        .json(&json!({"intent_id": second, "decision": "retry"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 409);
    let again: Value = again.json().await.unwrap();
    assert!(
        again["type"]
            .as_str()
            .unwrap()
            .ends_with("/already-decided"),
        "{again}"
    );
    assert_eq!(again["decision"], "compensate", "{again}");
    let missing = client
        .post(&url)
        .json(&json!({"intent_id": "no-such", "decision": "accepted"}))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    let events: Value = client
        .get(server.url("/v1/runs/r1/events"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let decided: Vec<(&str, &str)> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "handoff_decided")
        .map(|e| {
            (
                e["data"]["decision"].as_str().unwrap(),
                e["data"]["by"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(decided, [("undone", "alice"), ("compensate", "carol")]);
    server.kill_async().await;
}

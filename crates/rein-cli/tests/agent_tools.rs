//! Agent tools under `rein run` and `rein resume` (issue 14, item 7): a
//! coordinator on the testkit's mock model calls a tool of kind `agent`,
//! whose child run drives the order desk from its script. Both commands
//! bind the child agent as `rein serve` does, so a config `rein check`
//! accepts runs under every command.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Output};

use rein_core::{LedgerStatus, Outcome, RunId};
use rein_store::{RunRecord, RunStatus, RunStore};
use rein_store_sqlite::SqliteStore;
use rein_testkit::mock_model::{MockModel, Reply};
use rein_testkit::order_desk::{OrderDesk, SEND_EMAIL, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};

/// The coordinator and its agent tool, appended to the example config:
/// `ask_desk` starts a child run of `order_desk` (the scripted order desk).
const COORDINATOR: &str = r#"
[resource_groups.agents]
max_concurrency = 2

[tools.ask_desk]
description = "Ask the order desk agent to carry out a task on an order; answers with its report."
class = "idempotent_write"
resource_group = "agents"
side_effect_tier = "medium"
owner = "orders-team"
schema = { type = "object", properties = { task = { type = "string", description = "What the order desk should do." } }, required = ["task"], additionalProperties = false }
[tools.ask_desk.adapter]
kind = "agent"
agent = "order_desk"
budget_ratio = 0.8
wall_clock = "20s"

[agents.coordinator]
provider = "mock"
model = "gpt-4o-mini"
system_prompt = "You coordinate. Hand order work to the order desk."
tools = ["ask_desk"]
[agents.coordinator.budget]
wall_clock = "60s"
max_steps = 10
max_tokens = 50000
"#;

const TASK: &str = "Move A-1001 to 8 January and tell the buyer.";

/// Runs the binary off the async runtime, so the services on it keep
/// answering while the child process talks to them.
async fn rein(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
        cmd.args(&args)
            .env_remove("OPENAI_API_KEY")
            .env_remove("REIN_CRASH_AT");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("the rein binary runs")
    })
    .await
    .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The mock model's two coordinator turns: delegate, then answer.
async fn coordinator_model() -> MockModel {
    MockModel::start([
        Reply::tool_call("ask_desk", &json!({"task": TASK})),
        Reply::text("The order desk moved A-1001 and told the buyer."),
    ])
    .await
    .unwrap()
}

fn services_env(desk: &OrderDesk, model: &MockModel) -> Vec<(&'static str, String)> {
    vec![
        ("ORDER_DESK_URL", desk.base_url().to_owned()),
        ("MOCK_MODEL_URL", model.base_url().to_owned()),
    ]
}

fn run_args(config: &Path, db: &Path, run_id: &str) -> Vec<String> {
    [
        "run",
        "--config",
        &config.display().to_string(),
        "--data",
        &db.display().to_string(),
        "--agent",
        "coordinator",
        "--input",
        TASK,
        "--run-id",
        run_id,
        "--json",
    ]
    .map(str::to_owned)
    .to_vec()
}

/// The JSON document a command printed, or a panic with what it said.
fn document(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not one JSON document ({e}): {:?}\n{}\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        )
    })
}

/// The coordinator's one agent call succeeded, and the child run it
/// started (of `order_desk`, below the coordinator in the store) succeeded
/// with both of its effects in its ledger.
async fn assert_one_child_succeeded(doc: &Value, db: &Path) {
    let ledger = doc["ledger"].as_array().unwrap();
    let ask: Vec<&Value> = ledger.iter().filter(|r| r["tool"] == "ask_desk").collect();
    assert_eq!(ask.len(), 1, "one agent call in the ledger: {ledger:?}");
    assert_eq!(ask[0]["status"], "succeeded", "{ledger:?}");

    let parent = RunId::new(doc["run_id"].as_str().unwrap()).unwrap();
    let store = SqliteStore::open(db).unwrap();
    let children: Vec<RunRecord> = store
        .list_runs(100)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.parent_run_id.as_ref() == Some(&parent))
        .collect();
    assert_eq!(children.len(), 1, "one child run: {children:?}");
    let child = &children[0];
    assert_eq!(child.agent, "order_desk");
    assert_eq!(
        child.status,
        RunStatus::Finished(Outcome::Succeeded),
        "{:#?}",
        child.report
    );
    let effects: Vec<(String, LedgerStatus)> = store
        .ledger(&child.run_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.tool != "get_order")
        .map(|r| (r.tool, r.status))
        .collect();
    assert_eq!(
        effects,
        vec![
            (UPDATE_DELIVERY_TIME.to_owned(), LedgerStatus::Succeeded),
            (SEND_EMAIL.to_owned(), LedgerStatus::Succeeded),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_binds_an_agent_tool_and_its_child_run_does_the_work() {
    let desk = OrderDesk::start().await.unwrap();
    let model = coordinator_model().await;
    let dir = tempfile::tempdir().unwrap();
    let config = common::example_config(dir.path(), COORDINATOR);
    let db = dir.path().join("rein.db");

    let out = rein(
        run_args(&config, &db, "coordinated"),
        services_env(&desk, &model),
    )
    .await;
    let doc = document(&out);
    assert_eq!(doc["report"]["outcome"], "succeeded", "{doc:#}");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(
        doc["report"]["answer"],
        "The order desk moved A-1001 and told the buyer."
    );
    assert!(
        !text(&out.stderr).contains("cannot be bound here"),
        "{}",
        text(&out.stderr)
    );
    assert_one_child_succeeded(&doc, &db).await;
    // The child's effects happened, each once: the work was really done by
    // the child agent, not refused.
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
    assert_eq!(model.request_count(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_binds_the_agent_tool_and_finishes_an_interrupted_child_run() {
    let desk = OrderDesk::start().await.unwrap();
    let model = coordinator_model().await;
    let dir = tempfile::tempdir().unwrap();
    let config = common::example_config(dir.path(), COORDINATOR);
    let db = dir.path().join("rein.db");
    let env = services_env(&desk, &model);

    // The first process dies inside the child run: the coordinator's
    // `ask_desk` record is the first pending one, the child's
    // `update_delivery_time` the second, and the process aborts once that
    // one is durable, before the order desk is called.
    let mut crash_env = env.clone();
    crash_env.push(("REIN_CRASH_AT", "after_pending:2".to_owned()));
    let first = rein(run_args(&config, &db, "interrupted"), crash_env).await;
    assert_eq!(
        first.status.signal(),
        Some(6),
        "the run aborted at the crash point: {:?}\n{}",
        first.status,
        text(&first.stderr)
    );
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 0);

    let resumed = rein(
        [
            "resume",
            "interrupted",
            "--config",
            &config.display().to_string(),
            "--data",
            &db.display().to_string(),
            "--json",
        ]
        .map(str::to_owned)
        .to_vec(),
        env,
    )
    .await;
    let doc = document(&resumed);
    assert_eq!(doc["report"]["outcome"], "succeeded", "{doc:#}");
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed.stderr));
    assert_one_child_succeeded(&doc, &db).await;
    // The resumed child finished the work exactly once, and the coordinator
    // was not asked again for the step it had planned before the crash.
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
    assert_eq!(model.request_count(), 2);
}

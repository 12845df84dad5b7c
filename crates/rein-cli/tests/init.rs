//! `rein init` (issue 37, item 2): the config it writes passes `rein check`
//! and `rein lint`, and runs as written against `rein dev`; the tool
//! service it writes beside it serves the HTTP contract rein calls.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use rein_testkit::mock_model::{MockModel, Reply};
use serde_json::{Value, json};

const TASK: &str = "Move order A-1001 to 2026-01-08T14:00:00Z";
const NEW_DATE: &str = "2026-01-08T14:00:00Z";

/// Runs the built `rein` with `args` and `env`, off the async runtime.
async fn rein(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(&args)
            .envs(env)
            .env_remove("REIN_CRASH_AT")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| (*a).to_owned()).collect()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn assert_success(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
}

/// A child process's first stdout line, read off the async runtime.
async fn first_line(child: &mut Child) -> String {
    let stdout = child.stdout.take().unwrap();
    tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap()
}

/// `rein init --yes` into `dir`, exit 0, and its config's path.
async fn init(dir: &Path) -> String {
    let out = rein(
        strings(&["init", &dir.display().to_string(), "--yes", "--json"]),
        vec![],
    )
    .await;
    assert_success(&out, "rein init");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["agent"], "assistant", "{doc}");
    doc["files"][0].as_str().unwrap().to_owned()
}

/// Checks, lints and runs the config at `config` against a model and a
/// tool service at `env`'s URLs; the run's JSON document.
async fn check_lint_and_run(config: &str, data: &Path, env: &[(&'static str, String)]) -> Value {
    let out = rein(strings(&["check", config]), env.to_vec()).await;
    assert_success(&out, "rein check");
    let out = rein(strings(&["lint", "--config", config]), env.to_vec()).await;
    assert_success(&out, "rein lint");
    let out = rein(
        strings(&[
            "run",
            "--config",
            config,
            "--data",
            &data.display().to_string(),
            "--agent",
            "assistant",
            "--input",
            TASK,
            "--json",
        ]),
        env.to_vec(),
    )
    .await;
    assert_success(&out, "rein run");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The model's turns for the task: look the order up, move it, answer.
fn script() -> Value {
    json!({"replies": [
        {"kind": "tool_call", "name": "get_order", "arguments": {"order_id": "A-1001"}},
        {"kind": "tool_call", "name": "update_delivery_time",
         "arguments": {"order_id": "A-1001", "delivery_date": NEW_DATE}},
        {"kind": "text", "text": "A-1001 now arrives on 2026-01-08 at 14:00 UTC."},
    ]})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_writes_a_config_that_checks_lints_and_runs_against_rein_dev() {
    let dir = tempfile::tempdir().unwrap();
    let config = init(dir.path()).await;

    let mut dev = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["dev", "--desk-port", "0", "--model-port", "0", "--json"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let urls: Value = serde_json::from_str(&first_line(&mut dev).await).unwrap();
    let desk = urls["order_desk_url"].as_str().unwrap().to_owned();
    let model = urls["mock_model_url"].as_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let queued = client
        .post(format!("{model}/_script"))
        .json(&script())
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 200);

    let env = vec![("TOOLS_URL", desk.clone()), ("MOCK_MODEL_URL", model)];
    let doc = check_lint_and_run(&config, &dir.path().join("rein.db"), &env).await;
    assert_eq!(doc["report"]["outcome"], "succeeded", "{doc:#}");

    // The desk's own log: one update applied, to the asked date.
    let log: Value = client
        .get(format!("{desk}/_log"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let applied: Vec<&Value> = log["side_effects"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["tool"] == "update_delivery_time" && e["effect"] == "applied")
        .collect();
    assert_eq!(applied.len(), 1, "{log:#}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(dev.id()).unwrap()),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || dev.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "rein dev: {status:?}");
}

/// The written `tool_service.py` is a tool service rein can run against:
/// the read answers, the write is applied once under rein's key and can
/// be looked up by it, and the order changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tool_service_init_writes_serves_the_contract_rein_calls() {
    let python = match common::python_with("json") {
        Ok(python) => python,
        Err(why) => return common::missing_part(&why),
    };
    let dir = tempfile::tempdir().unwrap();
    let config = init(dir.path()).await;
    let mut service = Command::new(python)
        .arg(dir.path().join("tool_service.py"))
        .arg("0")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let line = first_line(&mut service).await;
    let url = line
        .trim()
        .strip_prefix("tool service at ")
        .unwrap_or_else(|| panic!("{line:?}"))
        .to_owned();

    let script: Vec<Reply> = vec![
        Reply::tool_call("get_order", &json!({"order_id": "A-1001"})),
        Reply::tool_call(
            "update_delivery_time",
            &json!({"order_id": "A-1001", "delivery_date": NEW_DATE}),
        ),
        Reply::text("Moved."),
    ];
    let model = MockModel::start(script).await.unwrap();
    let env = vec![
        ("TOOLS_URL", url.clone()),
        ("MOCK_MODEL_URL", model.base_url().to_owned()),
    ];
    let doc = check_lint_and_run(&config, &dir.path().join("rein.db"), &env).await;
    service.kill().unwrap();
    let _ = service.wait();
    assert_eq!(doc["report"]["outcome"], "succeeded", "{doc:#}");
    let update = doc["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tool"] == "update_delivery_time")
        .cloned()
        .unwrap_or_else(|| panic!("{doc:#}"));
    assert_eq!(update["status"], "succeeded", "{update:#}");
    assert_eq!(
        update["result"]["previous_delivery_date"], "2026-01-05T14:00:00Z",
        "{update:#}"
    );
}

#[tokio::test]
async fn init_never_overwrites_a_file_without_force() {
    let dir = tempfile::tempdir().unwrap();
    init(dir.path()).await;
    let config = dir.path().join("rein.toml");
    std::fs::write(&config, "# mine\n").unwrap();
    let out = rein(
        strings(&["init", &dir.path().display().to_string(), "--yes"]),
        vec![],
    )
    .await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("--force"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), "# mine\n");

    let out = rein(
        strings(&[
            "init",
            &dir.path().display().to_string(),
            "--yes",
            "--force",
        ]),
        vec![],
    )
    .await;
    assert_success(&out, "rein init --force");
    assert!(
        std::fs::read_to_string(&config)
            .unwrap()
            .contains("[agents.assistant]")
    );
}

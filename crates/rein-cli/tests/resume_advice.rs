//! Resume does what the report recommends (issue 37, item 5): the
//! commands rein prints are run as printed, as real processes, against the
//! real order desk (`rein dev`'s, or the testkit's on loopback) and real
//! SQLite files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use rein_store::RunStore;
use rein_testkit::mock_model::{MockModel, Reply};
use rein_testkit::order_desk::{DeskLog, EffectKind, Faults, OrderDesk, OrderDeskConfig};
use serde_json::{Value, json};

mod common;

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The directory of the `rein` binary under test, first on `PATH`: a
/// printed `rein …` command runs as printed.
fn path_with_rein() -> String {
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_rein"));
    let dir = bin.parent().unwrap().display().to_string();
    match std::env::var("PATH") {
        Ok(path) => format!("{dir}:{path}"),
        Err(_) => dir,
    }
}

/// Runs `line` through `sh`, exactly as printed, off the async runtime.
async fn shell(line: &str, env: Vec<(&'static str, String)>) -> Output {
    let line = line.to_owned();
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(&line)
            .env("PATH", path_with_rein())
            .env_remove("OPENAI_API_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("sh runs")
    })
    .await
    .unwrap()
}

/// Runs the binary with `args`, off the async runtime.
async fn rein(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
        cmd.args(&args).env_remove("OPENAI_API_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("the rein binary runs")
    })
    .await
    .unwrap()
}

/// `rein run` of `agent` from `config` on the task every test here gives,
/// recorded in `db` (as `run_id`, when given).
async fn run_agent(
    config: &Path,
    agent: &str,
    db: &Path,
    run_id: Option<&str>,
    env: Vec<(&'static str, String)>,
) -> Output {
    let mut args: Vec<String> = vec![
        "run".into(),
        "--config".into(),
        config.display().to_string(),
        "--agent".into(),
        agent.into(),
        "--input".into(),
        "Move A-1001 to 8 January and tell the buyer.".into(),
        "--data".into(),
        db.display().to_string(),
    ];
    if let Some(id) = run_id {
        args.extend(["--run-id".into(), id.to_owned()]);
    }
    rein(args, env).await
}

/// Starts `rein dev` (the demo's faults, any free ports) and reads the
/// line that says where its services are.
async fn start_dev() -> (Dev, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "dev",
            "--faults",
            "demo",
            "--desk-port",
            "0",
            "--model-port",
            "0",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let urls: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    (
        Dev(child),
        urls["order_desk_url"].as_str().unwrap().to_owned(),
    )
}

/// A `rein dev` process, stopped when the test ends however it ends.
struct Dev(std::process::Child);

impl Drop for Dev {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The desk's own side-effect log.
async fn desk_log(desk: &str) -> DeskLog {
    reqwest::get(format!("{desk}/_log"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

fn applied(log: &DeskLog, tool: &str) -> usize {
    log.side_effects
        .iter()
        .filter(|e| e.tool == tool && e.effect == EffectKind::Applied)
        .count()
}

/// The line after the one containing `heading` in `stdout`, trimmed.
fn line_after(stdout: &str, heading: &str) -> String {
    let mut lines = stdout.lines();
    lines
        .by_ref()
        .find(|l| l.contains(heading))
        .unwrap_or_else(|| panic!("no {heading:?} in:\n{stdout}"));
    lines.next().unwrap().trim().to_owned()
}

/// The demo's recommendation, followed literally: `rein demo` against a
/// desk that outlives it prints the resume commands; the one for "once the
/// wait is over" says how long is left and sends nothing; the one for "now"
/// sends the refused email once, under its original intent, before the
/// model is asked anything new, and the run ends `succeeded`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demos_recommendation_followed_literally_ends_succeeded_with_one_email() {
    let (_dev, desk) = start_dev().await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let out = rein(
        vec![
            "demo".into(),
            "--desk".into(),
            desk.clone(),
            "--data".into(),
            db.display().to_string(),
        ],
        vec![],
    )
    .await;
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("outcome: partial_success"), "{stdout}");
    assert!(stdout.contains("recoverable: yes"), "{stdout}");
    assert!(stdout.contains("retry send_email after 1h"), "{stdout}");
    let later = line_after(&stdout, "once the wait it names is over:");
    let now = line_after(&stdout, "or now, before the wait ends:");
    assert!(later.starts_with("rein resume "), "{later}");
    assert!(
        !later.contains("--config"),
        "the run recorded its config: {later}"
    );
    assert_eq!(now, format!("{later} --now"));
    assert_eq!(applied(&desk_log(&desk).await, "send_email"), 0);

    // Before the hour is over: how long is left, exit 75, nothing sent.
    let early = shell(&later, vec![]).await;
    let stderr = text(&early.stderr);
    assert_eq!(
        early.status.code(),
        Some(75),
        "{}\n{stderr}",
        text(&early.stdout)
    );
    assert!(
        stderr.contains("send_email was refused for a time"),
        "{stderr}"
    );
    assert!(stderr.contains("--now"), "{stderr}");
    assert_eq!(applied(&desk_log(&desk).await, "send_email"), 0);

    // Now, as printed.
    let resumed = shell(&now, vec![]).await;
    let stdout = text(&resumed.stdout);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&resumed.stderr)
    );
    assert!(stdout.contains("outcome: succeeded"), "{stdout}");
    let log = desk_log(&desk).await;
    assert_eq!(applied(&log, "send_email"), 1, "{:#?}", log.side_effects);
    assert_eq!(applied(&log, "update_delivery_time"), 1);

    // Under its original intent: one email record, succeeded, and the
    // resume says it retried exactly that intent before the model's turn.
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
    let runs = store.list_runs(10).await.unwrap();
    assert_eq!(runs.len(), 1);
    let run_id = runs[0].run_id.clone();
    assert_eq!(runs[0].status.as_str(), "succeeded");
    let ledger = store.ledger(&run_id).await.unwrap();
    let emails: Vec<_> = ledger.iter().filter(|r| r.tool == "send_email").collect();
    assert_eq!(emails.len(), 1, "{ledger:#?}");
    assert_eq!(emails[0].status.as_str(), "succeeded");
    let events = store.events(&run_id, 0).await.unwrap();
    let resumed_at = events
        .iter()
        .position(|e| matches!(&e.data, rein_core::EventData::RunResumed(r) if r.marker.retried == vec![emails[0].intent_id.clone()] && r.marker.retried_early))
        .unwrap_or_else(|| panic!("no run_resumed retrying the email: {events:#?}"));
    let after: Vec<&str> = events[resumed_at..]
        .iter()
        .map(|e| e.kind().as_str())
        .collect();
    let email_sent = events[resumed_at..]
        .iter()
        .position(|e| {
            e.kind().as_str() == "tool_call_started"
                && e.intent_id.as_ref() == Some(&emails[0].intent_id)
        })
        .unwrap_or_else(|| panic!("the email was not sent again: {after:?}"));
    let model_asked = events[resumed_at..]
        .iter()
        .position(|e| e.kind().as_str() == "model_call_started")
        .unwrap_or_else(|| panic!("the model was not asked after the retry: {after:?}"));
    assert!(email_sent < model_asked, "{after:?}");
}

/// A run started by `rein run` recorded its config: `rein resume RUN`
/// finds it without `--config`; once the file is gone, it says which file
/// and what to pass instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_without_config_uses_the_recorded_one_and_names_it_when_gone() {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::demo()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config_dir = dir.path().join("desk");
    std::fs::create_dir_all(&config_dir).unwrap();
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk");
    for file in ["rein.toml", "demo.script.json"] {
        std::fs::copy(example.join(file), config_dir.join(file)).unwrap();
    }
    let config = config_dir.join("rein.toml");
    let db = dir.path().join("rein.db");
    let env = || {
        vec![
            ("ORDER_DESK_URL", desk.base_url().to_owned()),
            ("MOCK_MODEL_URL", "http://127.0.0.1:9".to_owned()),
        ]
    };
    let out = run_agent(&config, "order_desk", &db, Some("order-a-1001"), env()).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("outcome: partial_success"));
    let resume = |extra: &[&str]| {
        let mut args: Vec<String> = vec![
            "resume".into(),
            "order-a-1001".into(),
            "--data".into(),
            db.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| (*s).to_owned()));
        args
    };

    // Without --config: the recorded one. The email's hour is not over.
    let early = rein(resume(&[]), env()).await;
    assert_eq!(early.status.code(), Some(75), "{}", text(&early.stderr));
    let resumed = rein(resume(&["--now"]), env()).await;
    let stdout = text(&resumed.stdout);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&resumed.stderr)
    );
    assert!(stdout.contains("outcome: succeeded"), "{stdout}");
    assert_eq!(desk.applied_count("send_email"), 1);

    // The file gone: named, with what to do.
    std::fs::remove_file(&config).unwrap();
    let gone = rein(resume(&["--now"]), env()).await;
    let stderr = text(&gone.stderr);
    assert_ne!(gone.status.code(), Some(0), "{stderr}");
    let absolute = std::path::absolute(&config).unwrap();
    assert!(
        stderr.contains(&absolute.display().to_string()) && stderr.contains("no longer there"),
        "{stderr}"
    );
    assert!(stderr.contains("--config"), "{stderr}");
    assert_eq!(desk.applied_count("send_email"), 1, "nothing sent again");
}

/// Over HTTP as on the command line: `POST /v1/runs/{id}/resume` before
/// the refusal's time is a 409 that says how long is left, and sends
/// nothing; `{"now": true}` sends the email at once and the run succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_resume_waits_for_the_refusals_time_unless_asked_now() {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::demo()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk/rein.toml");
    let db = dir.path().join("rein.db");
    let env = vec![
        ("ORDER_DESK_URL", desk.base_url().to_owned()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:9".to_owned()),
    ];
    let out = run_agent(&config, "order_desk", &db, Some("order-a-1001"), env).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("outcome: partial_success"));

    let server = common::Server::start_async(&config, &db, desk.base_url()).await;
    let client = reqwest::Client::new();
    let url = server.url("/v1/runs/order-a-1001/resume");
    let early = client.post(&url).json(&json!({})).send().await.unwrap();
    assert_eq!(early.status(), 409);
    let early: Value = early.json().await.unwrap();
    let detail = early["detail"].as_str().unwrap();
    assert!(detail.contains("send_email"), "{early}");
    assert_eq!(desk.applied_count("send_email"), 0, "nothing sent early");

    let wrong = client
        .post(&url)
        .json(&json!({"now": "yes"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 400);
    let wrong: Value = wrong.json().await.unwrap();
    assert!(wrong.to_string().contains("now"), "{wrong}");

    let now = client
        .post(&url)
        .json(&json!({"now": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(now.status(), 200);
    let view: Value = now.json().await.unwrap();
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(desk.applied_count("send_email"), 1);

    // A run the server starts records the config it serves, as `rein run`
    // does: `rein resume RUN` needs no --config for it either.
    let submitted = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .json(&json!({"input": "Move order A-1002 to 2026-01-09T10:00:00Z"}))
        .send()
        .await
        .unwrap();
    assert!(submitted.status().is_success(), "{}", submitted.status());
    let submitted: Value = submitted.json().await.unwrap();
    let id = submitted["run_id"].as_str().unwrap();
    let events: Value = client
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let started = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "run_started")
        .unwrap_or_else(|| panic!("no run_started: {events}"));
    let absolute = std::path::absolute(&config).unwrap();
    assert_eq!(
        started["data"]["config"],
        json!(absolute.display().to_string())
    );
    server.kill_async().await;
}

/// `rein runs show` on a run whose process died prints a resume command
/// that runs as printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_show_prints_a_resume_command_that_runs_as_printed() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let config =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk/rein.toml");
    let env = vec![
        ("ORDER_DESK_URL", desk.base_url().to_owned()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:9".to_owned()),
    ];
    // A run whose process dies mid-way: the crash point aborts it while
    // its first step's checkpoint is written.
    let out = run_agent(&config, "order_desk", &db, Some("killed"), {
        let mut env = env.clone();
        env.push(("REIN_CRASH_AT", "during_checkpoint".to_owned()));
        env
    })
    .await;
    assert_ne!(out.status.code(), Some(0), "the crash point aborts it");
    let shown = rein(
        vec![
            "runs".into(),
            "show".into(),
            "killed".into(),
            "--data".into(),
            db.display().to_string(),
        ],
        vec![],
    )
    .await;
    let stdout = text(&shown.stdout);
    let command = stdout
        .split('`')
        .find(|part| part.starts_with("rein resume "))
        .unwrap_or_else(|| panic!("no resume command in:\n{stdout}"))
        .to_owned();
    assert!(!command.contains("<"), "{command}");
    let resumed = shell(&command, env).await;
    let out = text(&resumed.stdout);
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{out}\n{}",
        text(&resumed.stderr)
    );
    assert!(out.contains("outcome: succeeded"), "{out}");
    assert_eq!(desk.applied_count("send_email"), 1);
}

/// A model that refuses the request as invalid (400) ends the run
/// `recoverable: no`: retrying it unchanged fails again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_400_is_reported_not_recoverable() {
    let desk = OrderDesk::start().await.unwrap();
    let model = MockModel::start([Reply::bad_request("unknown parameter: frobnicate")])
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db: &Path = &dir.path().join("rein.db");
    let config =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk/rein.toml");
    let out = run_agent(
        &config,
        "order_desk_live",
        db,
        None,
        vec![
            ("ORDER_DESK_URL", desk.base_url().to_owned()),
            ("MOCK_MODEL_URL", model.base_url().to_owned()),
        ],
    )
    .await;
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("recoverable: no"), "{stdout}");
    assert!(!stdout.contains("resuming is safe"), "{stdout}");
}

//! Issue 18, item 4: `rein runs list|show|events|ledger` find a run whose
//! `rein run` was SIGKILLed mid-way, reading the store file it wrote; and
//! read a `rein serve` the same way, with the API key from the
//! environment, never printing it. Real processes, a real kill, the order
//! desk holding the call in flight until the process is dead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, OrderDesk, OrderDeskConfig, UPDATE_DELIVERY_TIME};
use serde_json::Value;

mod common;
use common::{Server, example_config};

/// A bound that fails a test rather than measures it.
const GENEROUS: Duration = Duration::from_secs(30);

/// The example config where a read or an update may take up to 5 s (p99),
/// so rein gives the call the desk holds 10 s instead of timing it out:
/// the held call is genuinely in flight when the process dies.
fn patient_config(dir: &Path, extra: &str) -> PathBuf {
    let path = example_config(dir, extra);
    let mut text = std::fs::read_to_string(&path).unwrap();
    let patient = "p50 = \"1s\"\np95 = \"3s\"\np99 = \"5s\"";
    for fast in [
        "p50 = \"20ms\"\np95 = \"60ms\"\np99 = \"120ms\"",
        "p50 = \"80ms\"\np95 = \"200ms\"\np99 = \"400ms\"",
    ] {
        assert!(text.contains(fast), "the example's latencies changed");
        text = text.replacen(fast, patient, 1);
    }
    std::fs::write(&path, text).unwrap();
    path
}

/// `rein runs ARGS` with `env`; its output, after checking it succeeded.
fn runs(args: &[&str], env: &[(&str, &str)]) -> Output {
    let output = Command::new(env!("CARGO_BIN_EXE_rein"))
        .arg("runs")
        .args(args)
        .env_remove("REIN_API_KEY")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "rein runs {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(output)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkilled_rein_run_is_found_running_with_its_events_and_pending_ledger() {
    // The update is held at the desk: declared pending, sent, never
    // answered before the kill.
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::Hold)),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(dir.path(), "");
    let db = dir.path().join("rein.db");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "run",
            "--agent",
            "order_desk",
            "--input",
            "Move order A-1001.",
        ])
        .arg("--config")
        .arg(&config)
        .arg("--data")
        .arg(&db)
        .env("ORDER_DESK_URL", desk.base_url())
        .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
        .env_remove("REIN_CRASH_AT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let started = stderr
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("started"))
        .expect("the run announces itself");
    let run_id = started
        .strip_prefix("rein run: run ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id in {started:?}"))
        .to_owned();
    assert!(
        desk.until_held(1, GENEROUS).await,
        "the update never reached the desk"
    );
    child.kill().unwrap(); // SIGKILL: no safe point, no last write.
    child.wait().unwrap();
    let db = db.to_str().unwrap();

    // The table: found, running, its agent, a duration with its unit.
    let listed = stdout(&runs(&["list", "--db", db], &[]));
    let row = listed
        .lines()
        .find(|l| l.starts_with(&run_id))
        .unwrap_or_else(|| panic!("{run_id} not listed:\n{listed}"));
    assert!(listed.starts_with("RUN "), "a header first:\n{listed}");
    for cell in ["default", "order_desk", "running", "so far"] {
        assert!(row.contains(cell), "{cell:?} missing from {row:?}");
    }
    let page = json(&runs(
        &["list", "--db", db, "--status", "running", "--json"],
        &[],
    ));
    assert_eq!(page["runs"][0]["run_id"], run_id.as_str(), "{page}");
    assert_eq!(page["runs"][0]["status"], "running");
    assert!(page["runs"][0]["outcome"].is_null());
    assert_eq!(page["next_cursor"], Value::Null);
    let none = json(&runs(
        &["list", "--db", db, "--status", "succeeded", "--json"],
        &[],
    ));
    assert_eq!(
        none["runs"],
        serde_json::json!([]),
        "the status filter holds"
    );
    let other = json(&runs(
        &["list", "--db", db, "--agent", "order_desk_live", "--json"],
        &[],
    ));
    assert_eq!(
        other["runs"],
        serde_json::json!([]),
        "the agent filter holds"
    );

    let shown = stdout(&runs(&["show", &run_id, "--data", db], &[]));
    assert!(shown.contains("status    running"), "{shown}");
    assert!(shown.contains(&format!("rein resume {run_id}")), "{shown}");

    let events = json(&runs(&["events", &run_id, "--data", db, "--json"], &[]));
    let kinds: Vec<&str> = events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds.first(), Some(&"run_started"), "{kinds:?}");
    assert!(kinds.contains(&"tool_call_started"), "{kinds:?}");
    assert!(
        !kinds.contains(&"run_finished"),
        "killed before its end: {kinds:?}"
    );
    let table = stdout(&runs(&["events", &run_id, "--data", db], &[]));
    assert!(table.starts_with("SEQ "), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.contains("run_started") && l.contains('{')),
        "each event with its data as stored:\n{table}"
    );

    let ledger = json(&runs(&["ledger", &run_id, "--data", db, "--json"], &[]));
    let update = ledger
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["tool"] == UPDATE_DELIVERY_TIME)
        .unwrap_or_else(|| panic!("no update in {ledger}"));
    assert_eq!(
        update["status"], "pending",
        "declared before the call: {update}"
    );
    let table = stdout(&runs(&["ledger", &run_id, "--data", db], &[]));
    assert!(
        table
            .lines()
            .any(|l| l.contains(UPDATE_DELIVERY_TIME) && l.contains("pending")),
        "{table}"
    );
    desk.release_held();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_is_read_with_the_key_from_the_environment_never_printed() {
    use sha2::Digest as _;
    let key = "rein-runs-acme";
    let sha: String = sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(
        dir.path(),
        &format!("[[server.api_keys]]\ntenant = \"acme\"\nsha256 = \"{sha}\"\n"),
    );
    let server = Server::start_async(&config, &dir.path().join("rein.db"), desk.base_url()).await;
    let client = reqwest::Client::new();
    let submitted = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001."}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(submitted.status(), 200);
    let run: Value = serde_json::from_slice(&submitted.bytes().await.unwrap()).unwrap();
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    let url = server.url("");
    let env = [("REIN_API_KEY", key)];

    let (url, run_id2) = (url.clone(), run_id.clone());
    tokio::task::spawn_blocking(move || {
        let run_id = run_id2;
        let page = json(&runs(&["list", "--server", &url, "--json"], &env));
        assert_eq!(page["runs"][0]["run_id"], run_id.as_str(), "{page}");
        assert_eq!(page["runs"][0]["tenant"], "acme");
        let listed = stdout(&runs(&["list", "--server", &url], &env));
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with(&run_id) && l.contains("succeeded")),
            "{listed}"
        );
        let shown = stdout(&runs(&["show", &run_id, "--server", &url], &env));
        assert!(shown.contains("status    succeeded"), "{shown}");
        let events = json(&runs(
            &["events", &run_id, "--server", &url, "--json"],
            &env,
        ));
        let kinds: Vec<&str> = events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds.last(), Some(&"run_finished"), "{kinds:?}");
        // --follow on an ended run prints what there is and ends.
        let followed = stdout(&runs(
            &["events", &run_id, "--server", &url, "--follow"],
            &env,
        ));
        assert!(followed.contains("run_finished"), "{followed}");
        let ledger = json(&runs(
            &["ledger", &run_id, "--server", &url, "--json"],
            &env,
        ));
        assert!(
            ledger
                .as_array()
                .unwrap()
                .iter()
                .any(|r| r["tool"] == UPDATE_DELIVERY_TIME && r["status"] == "succeeded"),
            "{ledger}"
        );

        // A wrong key: a clear refusal that never echoes it.
        let refused = Command::new(env!("CARGO_BIN_EXE_rein"))
            .args([
                "runs",
                "list",
                "--server",
                &url,
                "--api-key",
                "not-the-key-123",
            ])
            .env_remove("REIN_API_KEY")
            .output()
            .unwrap();
        assert_eq!(refused.status.code(), Some(2));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&refused.stdout),
            String::from_utf8_lossy(&refused.stderr)
        );
        assert!(text.contains("401"), "{text}");
        assert!(
            !text.contains("not-the-key-123"),
            "the key is never printed: {text}"
        );
        let help = Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(["runs", "--help"])
            .env("REIN_API_KEY", key)
            .output()
            .unwrap();
        assert!(!String::from_utf8_lossy(&help.stdout).contains(key));
    })
    .await
    .unwrap();
    drop(server);
}

//! `rein serve` as a real process: it announces its address, answers, and
//! refuses to expose an unauthenticated API beyond loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk")
}

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
    let mut child = rein()
        .args(["serve", "--config"])
        .arg(example_dir())
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("data/rein.db"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let (health, openapi) = runtime.block_on(async {
        let health = reqwest::get(format!("http://{addr}/healthz"))
            .await
            .unwrap()
            .status();
        let doc: serde_json::Value = reqwest::get(format!("http://{addr}/openapi.json"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        (health, doc)
    });
    child.kill().unwrap();
    child.wait().unwrap();
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

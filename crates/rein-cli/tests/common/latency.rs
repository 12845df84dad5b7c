//! What the observed-latency tests through the binary (`latency.rs`,
//! `latency_scale.rs`) do alike: write a config and the script of its
//! lookups, run `rein` with the tools at the order desk, and read
//! `rein latency --json`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use rein_testkit::order_desk::GET_ORDER;
use serde_json::{Value, json};

/// Writes `config` as `rein.toml` into `dir`, beside the `script.json` its
/// scripted provider reads: `turns`, then the answer; the config's path.
pub fn write_config(dir: &Path, config: &str, mut turns: Vec<Value>) -> PathBuf {
    turns.push(json!({"text": "Looked them up."}));
    std::fs::write(
        dir.join("script.json"),
        json!({ "turns": turns }).to_string(),
    )
    .unwrap();
    let path = dir.join("rein.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// A turn that looks up one order of `get_order` with `args`.
pub fn lookup(args: Value) -> Value {
    json!({"tool_calls": [{"name": GET_ORDER, "arguments": args}]})
}

/// Runs the binary with `args`, its tools at `desk_url`, off the async
/// runtime, so the desk keeps answering.
pub async fn rein(args: &[&str], desk_url: &str) -> Output {
    let args: Vec<String> = args.iter().map(|s| (*s).to_owned()).collect();
    let url = desk_url.to_owned();
    tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(&args)
            .env("ORDER_DESK_URL", url)
            .output()
            .expect("the rein binary runs")
    })
    .await
    .unwrap()
}

/// `rein latency --json` on the store `db` with the config `config`; the
/// document (the command must succeed).
pub async fn latency_json(db: &str, config: &str, desk_url: &str) -> Value {
    let out = rein(
        &["latency", "--data", db, "--config", config, "--json"],
        desk_url,
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The row of `subject` in a `rein latency --json` document.
pub fn subject(doc: &Value, subject: &str) -> Value {
    doc["subjects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["subject"] == subject)
        .cloned()
        .unwrap_or_else(|| panic!("no {subject} in {doc:#}"))
}

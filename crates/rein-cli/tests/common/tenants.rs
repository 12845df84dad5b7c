//! The served rein the queue and tenant tests (`fairness.rs`,
//! `tenant_floor.rs`, `quotas.rs`, `classes.rs`) start alike: the example
//! config edited so the governor does not set the pace, a bearer key per
//! tenant, their `[server]` tables, and a `rein serve` with its tools at
//! the order desk and a sabotage switch.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rein_testkit::order_desk::OrderDesk;
use serde_json::{Value, json};

use super::{Server, example_dir, serve_command};

/// The order API's limits in the example config, for an edit to replace.
pub const EXAMPLE_LIMITS: &str = "rate_per_sec = 20.0\nburst = 40\nmax_concurrency = 8";

/// The edits that let the desk hold `get_order` for longer than a test
/// waits: its latency profile and the run's wall clock bound its timeout,
/// so a held call outlasts the test's patience and nothing ends or frees
/// a slot unless the test releases it.
pub const HOLDABLE: [(&str, &str); 2] = [
    (
        "p50 = \"20ms\"\np95 = \"60ms\"\np99 = \"120ms\"",
        "p50 = \"20ms\"\np95 = \"60ms\"\np99 = \"100s\"",
    ),
    ("wall_clock = \"30s\"", "wall_clock = \"300s\""),
];

/// The example config with `edits` made (each `from` must still be in
/// it), a `[[server.api_keys]]` entry per `(tenant, key)` of `tenants`
/// (the key's SHA-256), and `extra` TOML appended, written into `dir`
/// beside a copy of its script; its path.
pub fn tenant_config(
    dir: &Path,
    tenants: &[(&str, &str)],
    edits: &[(&str, &str)],
    extra: &str,
) -> PathBuf {
    use sha2::Digest as _;
    let mut text = std::fs::read_to_string(example_dir().join("rein.toml")).unwrap();
    for (from, to) in edits {
        assert!(text.contains(from), "the example config still has {from:?}");
        text = text.replace(from, to);
    }
    for (tenant, key) in tenants {
        let sha: String = sha2::Sha256::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        text.push_str(&format!(
            "\n[[server.api_keys]]\ntenant = \"{tenant}\"\nsha256 = \"{sha}\"\n"
        ));
    }
    text.push('\n');
    text.push_str(extra);
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    std::fs::copy(
        example_dir().join("demo.script.json"),
        dir.join("demo.script.json"),
    )
    .unwrap();
    dir.join("rein.toml")
}

/// `rein serve` of `config` on `db`, its tools at `desk`, its model at a
/// dead address, and `REIN_SABOTAGE` set to `sabotage` (empty: none).
pub async fn serve(config: &Path, db: &Path, desk: &OrderDesk, sabotage: &str) -> Server {
    let command = serve_command(
        std::process::Command::new(env!("CARGO_BIN_EXE_rein")),
        config,
        db,
        &[
            ("ORDER_DESK_URL", desk.base_url()),
            ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
            ("REIN_SABOTAGE", sabotage),
        ],
    );
    Server::spawn_async(command).await
}

/// A client that gives up after `patience`: a request a broken mechanism
/// leaves hanging fails the test instead of hanging it.
pub fn patient_client(patience: Duration) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(patience)
        .build()
        .unwrap()
}

/// Queues a run of `order_desk` as the tenant of bearer `key`; its id.
pub async fn submit_queued(client: &reqwest::Client, server: &Server, key: &str) -> String {
    let response = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .bearer_auth(key)
        .json(&json!({"input": "Move order A-1001.", "mode": "queued"}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let body: Value = response.json().await.unwrap();
    body["run_id"].as_str().unwrap().to_owned()
}

/// `GET path` as the tenant of bearer `key`; the JSON answer.
pub async fn get_as(client: &reqwest::Client, server: &Server, key: &str, path: &str) -> Value {
    client
        .get(server.url(path))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Polls `check` until it holds, at most `patience` (a bound that fails
/// the test, not a measurement).
pub async fn until<F: std::future::Future<Output = bool>>(
    patience: Duration,
    what: &str,
    mut check: impl FnMut() -> F,
) {
    let end = tokio::time::Instant::now() + patience;
    while !check().await {
        assert!(tokio::time::Instant::now() < end, "never: {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

//! A provider's `max_concurrency` holds for the cluster, not per process
//! (issue 15): two real `rein serve` processes on one SQLite file each run
//! six model calls at once against one mock model behind a provider with
//! `max_concurrency = 2`, and the mock's own count of requests in flight
//! never passes 2 — the provider's ceiling is divided between the two
//! processes through the same share leases the resource groups use (lease
//! `provider:primary`).
//!
//! The test shows it can fail: the same load on a test build with
//! `REIN_SABOTAGE=whole_limit_per_node` (each process takes the whole
//! ceiling) puts more than 2 calls in flight at the mock. The processes are
//! synchronized on their own log ("divided among the nodes" with
//! `nodes=2`), never on sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use rein_testkit::mock_model::{MockModel, MockModelConfig};

mod common;
use common::{Server, serve_command};

/// The provider's ceiling, for the cluster.
const MAX_CONCURRENCY: usize = 2;
/// Runs (one model call each) per server, all at once.
const RUNS_PER_SERVER: usize = 6;

fn config(model_url: &str) -> String {
    format!(
        r#"
[providers.primary]
kind = "openai"
base_url = "{model_url}"
max_output_tokens = {{ "mock-model" = 256 }}
max_concurrency = {MAX_CONCURRENCY}

[agents.chat]
provider = "primary"
model = "mock-model"
system_prompt = "Answer in one line."
tools = []
[agents.chat.budget]
wall_clock = "120s"
max_steps = 3
"#
    )
}

async fn serve(dir: &Path, data: &Path, sabotage: &str) -> Server {
    let command = serve_command(
        std::process::Command::new(env!("CARGO_BIN_EXE_rein")),
        &dir.join("rein.toml"),
        data,
        &[("REIN_SABOTAGE", sabotage), ("RUST_LOG", "info")],
    );
    Server::spawn_async(command).await
}

/// One synchronous run of the chat agent on `server`: its status, or the
/// whole answer when it did not succeed.
async fn run(client: reqwest::Client, server: String) -> String {
    common::limits::sync_run(client, server, "chat", "Say hello.").await
}

/// Two servers on one SQLite file, the whole load at once; the most model
/// requests the mock served at once during it.
async fn peak_at_the_model(sabotage: &str) -> usize {
    // Each answer takes 300 ms, so calls that are let through together
    // overlap at the mock.
    let mock = MockModel::start_with(
        MockModelConfig::default()
            .with_fallback_text("hello")
            .with_latency(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rein.toml"),
        config(&mock.openai_base_url()),
    )
    .unwrap();
    let data = dir.path().join("rein.db");
    let one = serve(dir.path(), &data, sabotage).await;
    let two = serve(dir.path(), &data, sabotage).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    common::limits::warm_up(&client, &one, "chat", "Say hello.").await;
    common::limits::warm_up(&client, &two, "chat", "Say hello.").await;
    if sabotage.is_empty() {
        common::limits::divided_among(&one, "primary", 2);
        common::limits::divided_among(&two, "primary", 2);
    }
    // The load's peak is what counts, and its requests: the warm-ups went
    // one after the other, each driven by the server it was sent to.
    let warm_requests = mock.request_count();
    mock.reset_peak_in_flight();
    let runs: Vec<_> = [&one, &two]
        .into_iter()
        .flat_map(|s| std::iter::repeat_n(s.url(""), RUNS_PER_SERVER))
        .map(|url| tokio::spawn(run(client.clone(), url)))
        .collect();
    for r in runs {
        assert_eq!(r.await.unwrap(), "succeeded");
    }
    assert_eq!(mock.request_count(), warm_requests + 2 * RUNS_PER_SERVER);
    one.kill_async().await;
    two.kill_async().await;
    let peak = mock.peak_in_flight();
    eprintln!("peak in flight at the model: {peak} (sabotage: {sabotage:?})");
    peak
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_store_hold_the_providers_max_concurrency_together() {
    let peak = peak_at_the_model("").await;
    assert!(
        peak <= MAX_CONCURRENCY,
        "{peak} calls in flight at the model; the provider's max_concurrency is {MAX_CONCURRENCY}"
    );
    assert_eq!(peak, MAX_CONCURRENCY, "the ceiling is used, not starved");
}

/// The sabotage switch exists only in `crash-points` builds, which the
/// tests of this crate use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_each_server_taking_the_whole_ceiling_it_is_exceeded() {
    let peak = peak_at_the_model("whole_limit_per_node").await;
    assert!(
        peak > MAX_CONCURRENCY,
        "each server at the whole ceiling must exceed it together: {peak}"
    );
}

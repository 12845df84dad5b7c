//! What the tests of limits shared across `rein serve` processes
//! (`group_limits.rs`, `provider_limits.rs`) do alike: sync runs, the
//! warm-up that joins a server to a share, and waiting for the division.

use serde_json::{Value, json};

use super::Server;

/// One synchronous run of `agent` with `input` on the server at `url`:
/// `"succeeded"`, or the whole answer when it did not succeed.
pub async fn sync_run(
    client: reqwest::Client,
    url: String,
    agent: &'static str,
    input: &'static str,
) -> String {
    let answer: Value = client
        .post(format!("{url}/v1/agents/{agent}/runs"))
        .json(&json!({ "input": input }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    match answer["status"].as_str() {
        Some("succeeded") => "succeeded".to_owned(),
        _ => answer.to_string(),
    }
}

/// The first run of `agent` on `server`, which joins it to a share.
/// Retried on a `409 not-resumable`: a run submitted while the *other*
/// server's start-up scan looks for orphaned runs is sometimes refused
/// that way (a race of `rein serve`'s takeover scan with a new sync run,
/// not of the governor; seen in 2 of about 10 runs of `group_limits.rs`).
/// The load itself is never retried.
pub async fn warm_up(
    client: &reqwest::Client,
    server: &Server,
    agent: &'static str,
    input: &'static str,
) {
    let mut last = String::new();
    for _ in 0..5 {
        last = sync_run(client.clone(), server.url(""), agent, input).await;
        if !last.contains("not-resumable") {
            break;
        }
    }
    assert_eq!(last, "succeeded");
}

/// Waits until `server` logged that it divides `group`'s limits among
/// `nodes`.
pub fn divided_among(server: &Server, group: &str, nodes: u32) {
    let group = format!("group={group}");
    let nodes = format!("nodes={nodes}");
    tokio::task::block_in_place(|| {
        server.wait_for_line(|line| {
            line.contains("divided among the nodes")
                && line.contains(&group)
                && line.contains(&nodes)
        })
    });
}

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

/// The first run of `agent` on `server`, which joins it to a share. Never
/// retried: a sync run is created with its claim, so no queue worker (of
/// either server) can take it and answer its caller `409 not-resumable`.
pub async fn warm_up(
    client: &reqwest::Client,
    server: &Server,
    agent: &'static str,
    input: &'static str,
) {
    let answer = sync_run(client.clone(), server.url(""), agent, input).await;
    assert_eq!(answer, "succeeded");
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

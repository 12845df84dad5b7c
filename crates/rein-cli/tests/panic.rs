//! Panic containment in a real `rein serve` (issue 13, item 4): a run that
//! panics inside rein ends `failed` (`error_type` `internal`) with its
//! effects settled and a report from its ledger, the queue workers live on
//! and drive every healthy run, and `/readyz` tells the truth — ready while
//! the workers loop, not ready once one has ended.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rein_testkit::order_desk::{
    OrderDesk, RESTORE_DELIVERY_TIME, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::Value;

mod common;
use common::{Server, example_config};

/// The first call of agent `bad`: an update, undone after a failure.
const UPDATE: &str = r#"{"name": "update_delivery_time", "arguments": {"order_id": "A-1002", "delivery_date": "2026-03-01T10:00:00Z"}}"#;

/// The example config plus agent `bad`, whose first step makes `first_call`,
/// on `workers` queue workers.
fn config(
    dir: &std::path::Path,
    workers: u32,
    first_call: &str,
    max_steps: u32,
) -> std::path::PathBuf {
    std::fs::write(
        dir.join("bad.script.json"),
        format!(r#"{{"turns": [{{"tool_calls": [{first_call}]}}, {{"text": "moved"}}]}}"#),
    )
    .unwrap();
    example_config(
        dir,
        &format!(
            r#"
[providers.replay_bad]
kind = "scripted"
script = "bad.script.json"

[agents.bad]
provider = "replay_bad"
model = "gpt-4o-mini"
system_prompt = "You move orders."
tools = ["get_order", "update_delivery_time", "send_email"]
[agents.bad.budget]
wall_clock = "30s"
max_steps = {max_steps}

[server.queue]
lease = "3s"
workers = {workers}
"#
        ),
    )
}

/// A server whose runs panic at `panic_at`; started off the runtime's
/// workers (it waits for the process's address).
async fn start(dir: &std::path::Path, desk: &OrderDesk, workers: u32, panic_at: &str) -> Server {
    start_calling(dir, desk, workers, panic_at, UPDATE, 10).await
}

/// [`start`] with agent `bad` making `first_call`, with `max_steps`.
async fn start_calling(
    dir: &std::path::Path,
    desk: &OrderDesk,
    workers: u32,
    panic_at: &str,
    first_call: &str,
    max_steps: u32,
) -> Server {
    let (config, db) = (
        config(dir, workers, first_call, max_steps),
        dir.join("rein.db"),
    );
    let (desk, panic_at) = (desk.base_url().to_owned(), panic_at.to_owned());
    tokio::task::spawn_blocking(move || {
        Server::start_with_env(
            &config,
            &db,
            &[
                ("ORDER_DESK_URL", &desk),
                ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
                ("REIN_PANIC_AT", &panic_at),
            ],
        )
    })
    .await
    .unwrap()
}

async fn submit(client: &reqwest::Client, server: &Server, agent: &str) -> String {
    let accepted = client
        .post(server.url(&format!("/v1/agents/{agent}/runs")))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move the order.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    accepted.headers()["location"].to_str().unwrap().to_owned()
}

async fn until_ended(client: &reqwest::Client, url: &str) -> Value {
    for _ in 0..600 {
        if let Ok(r) = client.get(url).send().await
            && let Ok(run) = r.json::<Value>().await
            && !matches!(run["status"].as_str(), Some("queued" | "running") | None)
        {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} did not end");
}

async fn ready(client: &reqwest::Client, server: &Server) -> u16 {
    client
        .get(server.url("/readyz"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_run_fails_alone_and_the_healthy_queue_finishes() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Every run of `bad` panics before its first checkpoint, after its
    // update took effect: three of them, on two workers.
    let server = start(dir.path(), &desk, 2, "during_checkpoint@bad").await;
    let client = reqwest::Client::new();
    let mut bad = Vec::new();
    let mut healthy = Vec::new();
    for _ in 0..3 {
        bad.push(submit(&client, &server, "bad").await);
        healthy.push(submit(&client, &server, "order_desk").await);
    }
    for location in &healthy {
        let run = until_ended(&client, &server.url(location)).await;
        assert_eq!(run["status"], "succeeded", "{run}");
        assert_eq!(ready(&client, &server).await, 200, "the workers live on");
    }
    for location in &bad {
        let run = until_ended(&client, &server.url(location)).await;
        let report = &run["report"];
        assert_eq!(run["status"], "failed", "{run}");
        let summary = report["summary"].as_str().unwrap();
        assert!(
            summary.starts_with("The run ended failed (internal: "),
            "{summary}"
        );
        // Its update took effect before the panic and was undone after it:
        // the report lists it with the ledger's status now.
        assert_eq!(
            report["completed"][0]["tool"], UPDATE_DELIVERY_TIME,
            "{report}"
        );
        assert_eq!(report["completed"][0]["ledger"], "compensated", "{report}");
        let events: Value = client
            .get(server.url(&format!("{location}/events")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let failed: Vec<&Value> = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["kind"] == "run_failed")
            .collect();
        assert_eq!(failed.len(), 1, "{events}");
        assert_eq!(failed[0]["data"]["error_type"], "internal");
    }
    assert_eq!(ready(&client, &server).await, 200);
    // Three healthy runs did their work once each; three bad updates were
    // each undone once.
    assert_eq!(desk.applied_count(SEND_EMAIL), 3);
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 6);
    assert_eq!(desk.applied_count(RESTORE_DELIVERY_TIME), 3);
    server.wait_for_line(|l| l.contains("the run panicked"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_says_not_ready_once_a_queue_worker_ended() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The worker itself panics (outside any run's boundary) when it takes
    // a run of `bad`: the one worker of this server ends, and so does the
    // tenant floor's (the run is still queued when the first one ends).
    let server = start(dir.path(), &desk, 1, "queue_worker@bad").await;
    let client = reqwest::Client::new();
    assert_eq!(ready(&client, &server).await, 200);
    submit(&client, &server, "bad").await;
    let mut status = 200;
    for _ in 0..200 {
        status = ready(&client, &server).await;
        if status == 503 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(status, 503, "a server with a worker ended is not ready");
    let mut body = Value::Null;
    for _ in 0..200 {
        body = client
            .get(server.url("/readyz"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if body["workers_alive"] == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(body["workers_alive"], 0, "{body}");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("queue workers ended"),
        "{body}"
    );
}

/// Regression (issue 18, item 3): a run whose settlement panicked, and
/// panicked again when the contained run settled, is closed as it stands;
/// the email it sent awaits a human (a handoff package). That handoff is
/// counted in `rein_handoffs_total` like any other: the close is written
/// past the run's emitter, which used to be the only one that counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_after_a_panic_is_counted() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let email = r#"{"name": "send_email", "arguments": {"to": "buyer-a1002@example.com", "subject": "Moved", "body": "Your order A-1002 moved."}}"#;
    // One step: the email, then the budget ends the run and it settles.
    let server = start_calling(dir.path(), &desk, 1, "after_settlement@bad", email, 1).await;
    let client = reqwest::Client::new();
    let location = submit(&client, &server, "bad").await;
    let run = until_ended(&client, &server.url(&location)).await;
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
    let summary = run["report"]["summary"].as_str().unwrap();
    assert!(summary.contains("settling it failed too"), "{run}");
    assert!(
        run["report"]["handoff"].is_object(),
        "a human has the email: {run}"
    );
    let metrics = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let handoffs: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("rein_handoffs_total{") && l.contains("agent=\"bad\""))
        .collect();
    assert_eq!(handoffs.len(), 1, "{metrics}");
    assert!(handoffs[0].ends_with(" 1"), "{}", handoffs[0]);
    let stats: Value = client
        .get(server.url("/v1/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let outcome = run["status"].as_str().unwrap();
    assert_eq!(stats["by_agent"]["bad"]["outcomes"][outcome], 1, "{stats}");
}

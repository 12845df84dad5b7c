//! Signed webhooks through a real `rein serve` (issue 33, item 3): a
//! loopback receiver fails the first deliveries, then hangs (up to 30 s)
//! on every request until the test has seen runs finish meanwhile. Every
//! `run_finished` arrives, each request's `Rein-Signature` verifies with
//! the HMAC-SHA256 written out below (RFC 2104, independently of rein's),
//! repeats carry the same `Rein-Event-Id` and body, and no run waited for
//! the receiver.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use rein_testkit::order_desk::OrderDesk;
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

mod common;
use common::{Server, example_config};

const SECRET: &str = "whsec-test-0f1e2d3c4b5a";

/// Requests answered 500 before the receiver starts hanging.
const FAILURES: usize = 2;

/// The longest a hung request is held when the test does not release it.
const HANG: Duration = Duration::from_secs(30);

/// HMAC-SHA256 (RFC 2104) written out over SHA-256, hex.
fn reference_hmac(key: &[u8], message: &[u8]) -> String {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|b| b ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    let outer = Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize();
    outer.iter().map(|b| format!("{b:02x}")).collect()
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
struct Received {
    event_id: String,
    signature: String,
    body: Bytes,
    answered: StatusCode,
}

#[derive(Default)]
struct Receiver {
    requests: Mutex<Vec<Received>>,
    /// Requests seen so far (the first [`FAILURES`] are refused).
    seen: Mutex<usize>,
    /// Requests hanging now.
    hanging: Mutex<usize>,
    /// Hung requests that were answered (released or timed out).
    hangs_answered: Mutex<usize>,
    hang_started: Notify,
    released: Mutex<bool>,
    release: Notify,
}

async fn hook(State(rx): State<Arc<Receiver>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let n = {
        let mut seen = rx.seen.lock().unwrap();
        *seen += 1;
        *seen
    };
    let answered = if n <= FAILURES {
        StatusCode::INTERNAL_SERVER_ERROR
    } else {
        let released = rx.release.notified();
        if !*rx.released.lock().unwrap() {
            *rx.hanging.lock().unwrap() += 1;
            rx.hang_started.notify_waiters();
            let _ = tokio::time::timeout(HANG, released).await;
            *rx.hanging.lock().unwrap() -= 1;
            *rx.hangs_answered.lock().unwrap() += 1;
        }
        StatusCode::NO_CONTENT
    };
    rx.requests.lock().unwrap().push(Received {
        event_id: header("rein-event-id"),
        signature: header("rein-signature"),
        body,
        answered,
    });
    answered
}

async fn receiver() -> (Arc<Receiver>, String) {
    let rx = Arc::new(Receiver::default());
    let app = Router::new()
        .route("/hook", post(hook))
        .with_state(rx.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (rx, url)
}

/// Submits a sync run and returns its id once it has finished.
async fn finished_run(client: &reqwest::Client, server: &Server) -> String {
    let answer = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001 to 8 January and tell the buyer."}"#)
        .send()
        .await
        .unwrap();
    let status = answer.status();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "succeeded", "{body}");
    body["run_id"].as_str().unwrap().to_owned()
}

/// The `Rein-Event-Id` of `run`'s `run_finished`, from its event stream.
async fn finished_event_id(client: &reqwest::Client, server: &Server, run: &str) -> String {
    let body: Value = client
        .get(server.url(&format!("/v1/runs/{run}/events")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let events = body["events"].as_array().unwrap();
    let finished: Vec<&Value> = events
        .iter()
        .filter(|e| e["kind"] == "run_finished")
        .collect();
    assert_eq!(finished.len(), 1, "{body}");
    format!("{run}:{}", finished[0]["seq"])
}

/// Checks `received`'s signature with the reference HMAC.
fn verify(received: &Received) {
    let (t, v1) = received
        .signature
        .split_once(',')
        .and_then(|(t, v1)| Some((t.strip_prefix("t=")?, v1.strip_prefix("v1=")?)))
        .unwrap_or_else(|| panic!("malformed Rein-Signature {:?}", received.signature));
    assert!(t.parse::<u64>().is_ok(), "t is unix seconds: {t}");
    let mut message = format!("{t}.").into_bytes();
    message.extend_from_slice(&received.body);
    assert_eq!(
        v1,
        reference_hmac(SECRET.as_bytes(), &message),
        "the signature of {} does not verify",
        received.event_id
    );
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    // A liveness bound only: the test waits on the receiver's events.
    for _ in 0..1_200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what} did not happen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_signed_and_deduplicable_and_no_run_waits_for_a_hanging_receiver() {
    let desk = OrderDesk::start().await.unwrap();
    let (rx, url) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(
        dir.path(),
        &format!(
            "[webhooks.ops]\nurl = \"{url}\"\nevents = [\"run_finished\"]\n\
             outcomes = [\"succeeded\", \"partial_success\", \"failed\"]\n\
             secret_env = \"HOOK_SECRET\"\ntimeout = \"1m\"\nmax_age = \"10m\"\n"
        ),
    );
    let db = dir.path().join("rein.db");
    let server = Server::spawn(common::serve_command(
        std::process::Command::new(env!("CARGO_BIN_EXE_rein")),
        &config,
        &db,
        &[
            ("ORDER_DESK_URL", desk.base_url()),
            ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
            ("HOOK_SECRET", SECRET),
        ],
    ));
    let client = reqwest::Client::new();

    // The first run's delivery is refused twice, then hangs.
    let hung = rx.hang_started.notified();
    let first = finished_run(&client, &server).await;
    tokio::time::timeout(Duration::from_secs(60), hung)
        .await
        .expect("the receiver was never reached past its failures");

    // While it hangs, two more runs start and finish: their answers come
    // back while the receiver still holds its requests unanswered.
    let second = finished_run(&client, &server).await;
    let third = finished_run(&client, &server).await;
    assert!(*rx.hanging.lock().unwrap() >= 1, "the receiver is hanging");
    assert_eq!(
        *rx.hangs_answered.lock().unwrap(),
        0,
        "every run finished while the receiver hung, none after it"
    );

    // Released, the receiver takes every delivery.
    *rx.released.lock().unwrap() = true;
    rx.release.notify_waiters();
    let mut expected = BTreeSet::new();
    for run in [&first, &second, &third] {
        expected.insert(finished_event_id(&client, &server, run).await);
    }
    until("every event delivered", || {
        let delivered: BTreeSet<String> = rx
            .requests
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.answered.is_success())
            .map(|r| r.event_id.clone())
            .collect();
        expected.is_subset(&delivered)
    })
    .await;

    let requests = rx.requests.lock().unwrap().clone();
    let mut by_id: BTreeMap<&str, Vec<&Received>> = BTreeMap::new();
    for r in &requests {
        verify(r);
        by_id.entry(&r.event_id).or_default().push(r);
    }
    let ids: BTreeSet<String> = by_id.keys().map(|id| (*id).to_owned()).collect();
    assert_eq!(ids, expected, "exactly the three run_finished events");
    for (id, copies) in &by_id {
        // Every attempt of one event is the same body: a receiver that
        // keeps the first of each Rein-Event-Id loses nothing.
        assert!(copies.iter().all(|c| c.body == copies[0].body), "{id}");
        let body: Value = serde_json::from_slice(&copies[0].body).unwrap();
        assert_eq!(body["id"], *id);
        assert_eq!(body["type"], "run_finished");
    }
    let first_id = format!("{first}:");
    let first_attempts = requests
        .iter()
        .filter(|r| r.event_id.starts_with(&first_id))
        .count();
    assert!(
        first_attempts > FAILURES,
        "the first run's event was retried past its failures: {first_attempts}"
    );

    // The delivery log says the same, through the API and the CLI.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["webhooks", "deliveries", "ops", "--json", "--server"])
        .arg(format!("http://{}", server.addr))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(log.len(), 3, "{log:?}");
    assert!(log.iter().all(|d| d["state"] == "delivered"), "{log:?}");
    let first_log = log.iter().find(|d| d["run_id"] == first.as_str()).unwrap();
    assert!(
        first_log["attempts"].as_u64().unwrap() > FAILURES as u64,
        "{first_log}"
    );
    let listed: Value = client
        .get(server.url("/v1/webhooks"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["webhooks"][0]["secret_env"], "HOOK_SECRET");
    assert!(
        !listed.to_string().contains(SECRET),
        "the secret is never shown"
    );
    assert!(
        !server.log_tail().contains(SECRET),
        "the secret is never logged"
    );
}

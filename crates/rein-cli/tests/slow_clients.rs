//! Issue 12, item 2: slow and idle clients cannot exhaust `rein serve`.
//! A real server with a small connection limit and short timeouts, real
//! sockets that stall in every phase of a request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, OrderDesk, OrderDeskConfig, UPDATE_DELIVERY_TIME};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
use common::{Server, example_config};

/// A bound that fails a test rather than measures it.
const GENEROUS: Duration = Duration::from_secs(10);

/// One second for every client phase, sixteen connections.
const LIMITS: &str = "[server.limits]\nheader_timeout = \"1s\"\nbody_timeout = \"1s\"\nidle_timeout = \"1s\"\nmax_connections = 16\n";

/// Reads until the server closes `socket` (EOF or a reset), at most
/// [`GENEROUS`]; what it sent before.
async fn closed_by_server(socket: &mut TcpStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(GENEROUS, async {
        loop {
            match socket.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        read.is_ok(),
        "the server kept the connection open past its timeouts; it sent {:?}",
        String::from_utf8_lossy(&seen)
    );
    seen
}

/// The value of a metric line (`name` with its labels) in `/metrics`.
fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// `/healthz`, retried while the server refuses the connection (it is at
/// its limit until the stalled ones time out).
async fn healthz(server: &Server) -> u16 {
    let client = reqwest::Client::builder()
        .timeout(GENEROUS)
        .build()
        .unwrap();
    let until = tokio::time::Instant::now() + GENEROUS;
    loop {
        match client.get(server.url("/healthz")).send().await {
            Ok(r) if r.status() == 200 => return 200,
            _ if tokio::time::Instant::now() < until => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(r) => return r.status().as_u16(),
            Err(e) => panic!("/healthz never answered: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_stalled_connections_neither_stop_healthz_nor_outlive_their_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(dir.path(), LIMITS);
    let server = Server::start(&config, &dir.path().join("rein.db"), "http://127.0.0.1:1");
    let addr = server.addr.clone();

    // Half send half a request head, half send nothing at all.
    let mut stalled = Vec::new();
    for i in 0..300 {
        let mut socket = TcpStream::connect(&addr).await.unwrap();
        if i % 2 == 0 {
            // A refused socket may already be closed: a failed write is fine.
            let _ = socket
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-slow: ")
                .await;
        }
        stalled.push(socket);
    }
    assert_eq!(healthz(&server).await, 200);
    for socket in &mut stalled {
        let sent = closed_by_server(socket).await;
        let text = String::from_utf8_lossy(&sent);
        assert!(
            sent.is_empty() || text.starts_with("HTTP/1.1 503"),
            "a stalled client gets nothing but a refusal: {text}"
        );
    }

    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let refused = metric(&metrics, "rein_connections_refused_total");
    let timed_out = metric(
        &metrics,
        "rein_connections_closed_total{reason=\"header_timeout\"}",
    );
    assert!(refused >= 200, "most of the flood was refused: {refused}");
    assert!(timed_out >= 16, "the admitted ones timed out: {timed_out}");
    // Logged, but not one line per refused connection.
    let lines = server
        .log_tail()
        .lines()
        .filter(|l| l.contains("connections refused"))
        .count();
    assert!(
        (1..=3).contains(&lines),
        "{lines} refusal lines for {refused} refusals"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_and_a_half_sent_body_are_cut() {
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(dir.path(), LIMITS);
    let server = Server::start(&config, &dir.path().join("rein.db"), "http://127.0.0.1:1");

    // Kept alive after one answer, then idle: closed after idle_timeout.
    let mut idle = TcpStream::connect(&server.addr).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\n\r\n")
        .await
        .unwrap();
    let answered = String::from_utf8_lossy(&closed_by_server(&mut idle).await).into_owned();
    assert!(answered.starts_with("HTTP/1.1 200"), "{answered}");

    // A body that stops arriving: 408 problem, then closed.
    let mut slow = TcpStream::connect(&server.addr).await.unwrap();
    slow.write_all(
        b"POST /v1/agents/order_desk/runs HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"input\": ",
    )
    .await
    .unwrap();
    let cut = String::from_utf8_lossy(&closed_by_server(&mut slow).await).into_owned();
    assert!(cut.starts_with("HTTP/1.1 408"), "{cut}");
    assert!(cut.contains("server.limits.body_timeout"), "{cut}");

    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metric(
            &metrics,
            "rein_connections_closed_total{reason=\"idle_timeout\"}"
        ) >= 1
    );
    assert_eq!(metric(&metrics, "rein_request_body_timeouts_total"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_run_and_an_event_stream_outlast_every_timeout() {
    // Each update takes 3 s, three times every client timeout.
    let slow = Fault::Delay(Duration::from_secs(3));
    let faults = Faults::none()
        .then(UPDATE_DELIVERY_TIME, slow.clone())
        .then(UPDATE_DELIVERY_TIME, slow);
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut text = LIMITS.to_owned();
    // Rein waits for a 3 s update instead of timing it out.
    let config = example_config(dir.path(), &text);
    text = std::fs::read_to_string(&config).unwrap().replace(
        "p50 = \"80ms\"\np95 = \"200ms\"\np99 = \"400ms\"",
        "p50 = \"1s\"\np95 = \"3s\"\np99 = \"5s\"",
    );
    std::fs::write(&config, text).unwrap();
    let server = Server::start(&config, &dir.path().join("rein.db"), desk.base_url());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();

    let queued: Value = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = queued["run_id"].as_str().unwrap().to_owned();
    let stream = tokio::spawn({
        let (client, url) = (
            client.clone(),
            server.url(&format!("/v1/runs/{run_id}/events")),
        );
        async move {
            client
                .get(url)
                .header("accept", "text/event-stream")
                .send()
                .await
                .unwrap()
                .text()
                .await
        }
    });
    let sync = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001."}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(sync.status(), 200);
    let run: Value = sync.json().await.unwrap();
    assert_eq!(run["status"], "succeeded", "{run}");
    let events = stream.await.unwrap().expect("the stream was not cut");
    assert!(
        events.contains("event: run_finished"),
        "the stream ran to the run's end: {events}"
    );
}

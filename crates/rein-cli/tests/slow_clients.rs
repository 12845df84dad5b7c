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

/// One `/healthz`, with a generous client timeout: its status.
async fn healthz(server: &Server) -> u16 {
    let client = reqwest::Client::builder()
        .timeout(GENEROUS)
        .build()
        .unwrap();
    let answer = client.get(server.url("/healthz")).send().await;
    answer.expect("/healthz answers").status().as_u16()
}

/// Opens `n` connections to `addr` that stall: every other one sends half
/// a request head, the others nothing at all.
async fn stalled(addr: &str, n: usize) -> Vec<TcpStream> {
    let mut sockets = Vec::new();
    for i in 0..n {
        let mut socket = TcpStream::connect(addr).await.unwrap();
        if i % 2 == 0 {
            // A refused socket may already be closed: a failed write is fine.
            let _ = socket
                .write_all(b"GET /healthz HTTP/1.1\r\nhost: localhost\r\nx-slow: ")
                .await;
        }
        sockets.push(socket);
    }
    sockets
}

async fn metrics(server: &Server) -> String {
    reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Review T2: while 300 stalled connections are open, the *first*
/// `/healthz` answers 200; each stalled one is cut by its header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_stalled_connections_neither_stop_healthz_nor_outlive_their_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let limits = "[server.limits]\nheader_timeout = \"1s\"\nmax_connections = 400\n";
    let config = example_config(dir.path(), limits);
    let server = Server::start(&config, &dir.path().join("rein.db"), "http://127.0.0.1:1");
    let mut sockets = stalled(&server.addr, 300).await;

    // The first attempt, while all 300 are open.
    assert_eq!(healthz(&server).await, 200);
    for socket in &mut sockets {
        let sent = closed_by_server(socket).await;
        assert!(
            sent.is_empty(),
            "a stalled client is sent nothing: {}",
            String::from_utf8_lossy(&sent)
        );
    }
    let metrics = metrics(&server).await;
    assert_eq!(metric(&metrics, "rein_connections_refused_total"), 0);
    assert!(
        metric(
            &metrics,
            "rein_connections_closed_total{reason=\"header_timeout\"}"
        ) >= 300,
        "each was cut by its header timeout"
    );
}

/// Review T2: over `max_connections`, every refused connection receives
/// the whole 503 problem — none loses it to a reset, also when it had sent
/// half a head the server never read — and each refusal is counted; the
/// flood is logged, but not once per connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_limit_each_get_a_whole_503_and_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough that no admitted connection times out during the test.
    let limits = "[server.limits]\nheader_timeout = \"1h\"\nmax_connections = 16\n";
    let config = example_config(dir.path(), limits);
    let server = Server::start(&config, &dir.path().join("rein.db"), "http://127.0.0.1:1");
    let admitted = stalled(&server.addr, 16).await;
    let mut refused = stalled(&server.addr, 100).await;
    for socket in &mut refused {
        let sent = String::from_utf8_lossy(&closed_by_server(socket).await).into_owned();
        assert!(sent.starts_with("HTTP/1.1 503"), "a refusal: {sent:?}");
        let (_, body) = sent.split_once("\r\n\r\n").unwrap();
        let problem: Value = serde_json::from_str(body).unwrap();
        assert!(
            problem["type"]
                .as_str()
                .unwrap()
                .ends_with("/too-many-connections"),
            "{problem}"
        );
    }
    // The admitted ones leave: their slots are free again.
    drop(admitted);
    let client = reqwest::Client::builder()
        .timeout(GENEROUS)
        .build()
        .unwrap();
    let until = tokio::time::Instant::now() + GENEROUS;
    let metrics = loop {
        if let Ok(r) = client.get(server.url("/metrics")).send().await
            && r.status() == 200
        {
            break r.text().await.unwrap();
        }
        assert!(
            tokio::time::Instant::now() < until,
            "/metrics never answered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let counted = metric(&metrics, "rein_connections_refused_total");
    // The metrics requests may have been refused too while the admitted
    // ones were still leaving: those are refusals as well.
    assert!(
        (100..=110).contains(&counted),
        "every refusal counted: {counted}"
    );
    let lines = server
        .log_tail()
        .lines()
        .filter(|l| l.contains("connections refused"))
        .count();
    assert!(
        (1..=3).contains(&lines),
        "{lines} refusal lines for {counted} refusals"
    );
}

/// Review T2: a client that stops reading a large answer (many pipelined
/// requests for the OpenAPI document into a tiny receive buffer) is cut
/// once a write has waited `idle_timeout`: a response is never held for a
/// client that left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_is_cut_after_the_idle_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let config = example_config(dir.path(), LIMITS);
    let server = Server::start(&config, &dir.path().join("rein.db"), "http://127.0.0.1:1");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut reader = socket.connect(server.addr.parse().unwrap()).await.unwrap();
    let requests = format!(
        "GET /openapi.json HTTP/1.1\r\nhost: {}\r\n\r\n",
        server.addr
    )
    .repeat(400);
    reader.write_all(requests.as_bytes()).await.unwrap();

    // It reads nothing; another connection watches the server give up.
    let until = tokio::time::Instant::now() + GENEROUS;
    loop {
        let cut = metric(
            &metrics(&server).await,
            "rein_connections_closed_total{reason=\"write_timeout\"}",
        );
        if cut == 1 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "the stuck write was never cut: {}",
            metrics(&server).await
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // What was sent before the cut is there, then the end.
    let sent = closed_by_server(&mut reader).await;
    assert!(sent.starts_with(b"HTTP/1.1 200"), "{} bytes", sent.len());
    let answers = sent.windows(15).filter(|w| w == b"HTTP/1.1 200 OK").count();
    assert!(answers < 400, "not every answer was written: {answers}");
    assert_eq!(healthz(&server).await, 200);
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

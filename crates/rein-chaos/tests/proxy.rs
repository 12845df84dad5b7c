//! The fault proxy against the testkit's real order desk (and, for framing
//! details, tiny hand-written upstreams): every injection, rule windows,
//! matching, the trace and the in-flight peaks.
//!
//! Ordering is always synchronized on results (answers, channels, the
//! trace), never on sleeps. Every test runs under paused tokio time, the
//! desk, the proxy and the client on one runtime: an injected delay is
//! asserted at its exact length, and a client timeout fires in order with
//! the delay it races, whatever the machine's load.

use std::error::Error;
use std::time::Duration;

use rein_chaos::proxy::{
    ClientSaw, FaultProxy, Injection, Match, Rule, TraceRecord, default_error_body,
};
use rein_testkit::order_desk::OrderDesk;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::time::{Instant, timeout};

type TestResult = Result<(), Box<dyn Error>>;

const GET_ORDER: &str = "get_order";
const UPDATE: &str = "update_delivery_time";
/// A bound on every wait, so a broken proxy fails a test instead of hanging
/// it. Never used for ordering.
const PATIENCE: Duration = Duration::from_secs(10);

fn order_args() -> Value {
    json!({"order_id": "A-1001"})
}

fn update_args() -> Value {
    json!({"order_id": "A-1001", "delivery_date": "2026-12-24"})
}

fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder().no_proxy().build()
}

async fn start() -> Result<(OrderDesk, FaultProxy), Box<dyn Error>> {
    let desk = OrderDesk::start().await?;
    let proxy = FaultProxy::start(desk.base_url()).await?;
    Ok((desk, proxy))
}

async fn get_order(
    client: &reqwest::Client,
    proxy: &FaultProxy,
) -> Result<reqwest::Response, reqwest::Error> {
    client
        .post(proxy.url("/tools/get_order"))
        .json(&order_args())
        .send()
        .await
}

async fn update(
    client: &reqwest::Client,
    proxy: &FaultProxy,
    key: &str,
) -> Result<reqwest::Response, reqwest::Error> {
    client
        .post(proxy.url("/tools/update_delivery_time"))
        .header("Idempotency-Key", key)
        .json(&update_args())
        .send()
        .await
}

/// The trace once it holds `n` records (a request's record can land just
/// after its client gave up on it).
async fn trace_of(proxy: &FaultProxy, n: usize) -> Result<Vec<TraceRecord>, Box<dyn Error>> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let trace = proxy.trace();
        if trace.len() >= n {
            return Ok(trace);
        }
        if Instant::now() > deadline {
            return Err(format!("trace has {} records, expected {n}", trace.len()).into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn status(code: u16) -> Injection {
    Injection::Status {
        code,
        retry_after_s: None,
        body: None,
    }
}

fn addr_of(proxy: &FaultProxy) -> &str {
    proxy.base_url().trim_start_matches("http://")
}

/// Sends raw bytes to the proxy and reads its whole answer.
async fn raw_exchange(proxy: &FaultProxy, request: &[u8]) -> Result<String, Box<dyn Error>> {
    let mut stream = TcpStream::connect(addr_of(proxy)).await?;
    stream.write_all(request).await?;
    let mut answer = Vec::new();
    timeout(PATIENCE, stream.read_to_end(&mut answer)).await??;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

/// Reads one request head (no body) from a test upstream's connection.
async fn read_request_head(stream: &mut TcpStream) -> Result<String, Box<dyn Error>> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await? == 0 {
            return Err("upstream: client closed before the head ended".into());
        }
        head.push(byte[0]);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

fn chunk(data: &[u8]) -> Vec<u8> {
    [format!("{:x}\r\n", data.len()).as_bytes(), data, b"\r\n"].concat()
}

#[tokio::test(start_paused = true)]
async fn pass_through_answers_like_a_direct_call() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;

    let direct = client
        .post(desk.tool_url(GET_ORDER))
        .json(&order_args())
        .send()
        .await?;
    let via = get_order(&client, &proxy).await?;
    assert_eq!(via.status(), direct.status());
    assert_eq!(
        via.headers().get("content-type"),
        direct.headers().get("content-type")
    );
    assert_eq!(
        via.headers().get("connection").map(|v| v.as_bytes()),
        Some(b"close".as_slice())
    );
    assert_eq!(via.json::<Value>().await?, direct.json::<Value>().await?);

    // A keyed write and its status lookup (a GET with a query) pass too.
    assert_eq!(update(&client, &proxy, "k-pass").await?.status(), 200);
    let lookup = client
        .get(proxy.url("/tools/update_delivery_time/status?key=k-pass"))
        .send()
        .await?;
    assert_eq!(lookup.status(), 200);
    assert_eq!(lookup.json::<Value>().await?["delivery_date"], "2026-12-24");
    assert_eq!(desk.applied_count(UPDATE), 1);

    let trace = trace_of(&proxy, 3).await?;
    assert_eq!(trace.len(), 3);
    let first = &trace[0];
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/tools/get_order");
    assert_eq!(first.tool.as_deref(), Some(GET_ORDER));
    assert_eq!(
        serde_json::from_str::<Value>(&first.request_body)?,
        order_args()
    );
    assert_eq!(first.injected, None);
    assert!(first.forwarded);
    assert_eq!(first.upstream_status, Some(200));
    assert_eq!(first.client_saw, ClientSaw::Response { status: 200 });
    assert_eq!(trace[2].method, "GET");
    assert_eq!(
        trace[2].tool.as_deref(),
        Some("update_delivery_time/status")
    );
    assert_eq!(
        trace[2].path,
        "/tools/update_delivery_time/status?key=k-pass"
    );
    // One request at a time: a finished request never overlaps the next.
    assert_eq!(proxy.peak_in_flight(), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn delay_waits_then_forwards() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    proxy.add_rule(Rule::new(
        Match::tool(GET_ORDER),
        Injection::Delay { ms: 200 },
    ));

    let started = Instant::now();
    let resp = get_order(&client, &proxy).await?;
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await?["order_id"], "A-1001");
    assert_eq!(desk.request_count(GET_ORDER), 1);

    let trace = trace_of(&proxy, 1).await?;
    assert_eq!(trace[0].injected, Some(Injection::Delay { ms: 200 }));
    assert!(trace[0].forwarded);
    assert_eq!(trace[0].client_saw, ClientSaw::Response { status: 200 });
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn delay_when_client_gives_up_is_never_forwarded() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    proxy.add_rule(Rule::new(
        Match::tool(GET_ORDER),
        Injection::Delay { ms: 300 },
    ));

    let result = client
        .post(proxy.url("/tools/get_order"))
        .json(&order_args())
        .timeout(Duration::from_millis(50))
        .send()
        .await;
    assert!(result.is_err_and(|e| e.is_timeout()));

    let trace = trace_of(&proxy, 1).await?;
    assert_eq!(trace[0].client_saw, ClientSaw::ClientGone);
    assert!(!trace[0].forwarded);
    assert_eq!(desk.request_count(GET_ORDER), 0);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn stall_first_byte_applies_upstream_then_answers_late() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    proxy.add_rule(Rule::new(
        Match::tool(UPDATE),
        Injection::StallFirstByte { ms: 200 },
    ));

    let started = Instant::now();
    let resp = update(&client, &proxy, "k-stall").await?;
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.json::<Value>().await?["delivery_date"], "2026-12-24");
    assert_eq!(desk.applied_count(UPDATE), 1);

    let trace = trace_of(&proxy, 1).await?;
    assert_eq!(
        trace[0].injected,
        Some(Injection::StallFirstByte { ms: 200 })
    );
    assert!(trace[0].forwarded);
    assert_eq!(trace[0].upstream_status, Some(200));
    assert_eq!(trace[0].client_saw, ClientSaw::Response { status: 200 });
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn idle_stream_sends_headers_then_nothing() -> TestResult {
    let (desk, proxy) = start().await?;
    let impatient = reqwest::Client::builder()
        .no_proxy()
        .read_timeout(Duration::from_millis(100))
        .build()?;
    proxy.add_rule(Rule::new(
        Match::tool(GET_ORDER),
        Injection::IdleStream { ms: 300 },
    ));

    let resp = get_order(&impatient, &proxy).await?;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), None);
    let body = resp.bytes().await;
    assert!(body.is_err(), "the body must never complete: {body:?}");
    assert_eq!(desk.request_count(GET_ORDER), 1);

    let trace = trace_of(&proxy, 1).await?;
    assert_eq!(trace[0].injected, Some(Injection::IdleStream { ms: 300 }));
    assert!(trace[0].forwarded);
    assert_eq!(trace[0].client_saw, ClientSaw::Idle { status: 200 });
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn reset_before_forward_never_reaches_upstream() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    proxy.add_rule(Rule::new(
        Match::tool(UPDATE),
        Injection::ResetBeforeForward,
    ));

    let result = update(&client, &proxy, "k-rbf").await;
    assert!(result.is_err(), "expected a connection error: {result:?}");
    assert_eq!(desk.applied_count(UPDATE), 0);
    assert_eq!(desk.request_count(UPDATE), 0);

    let trace = trace_of(&proxy, 1).await?;
    assert_eq!(trace[0].injected, Some(Injection::ResetBeforeForward));
    assert!(!trace[0].forwarded);
    assert_eq!(trace[0].upstream_status, None);
    assert_eq!(trace[0].client_saw, ClientSaw::Reset);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn reset_after_forward_applies_but_loses_the_answer() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    proxy.add_rule(Rule::new(Match::tool(UPDATE), Injection::ResetAfterForward));

    let result = update(&client, &proxy, "k-raf").await;
    assert!(result.is_err(), "expected a connection error: {result:?}");
    assert_eq!(desk.applied_count(UPDATE), 1);

    let trace = trace_of(&proxy, 1).await?;
    assert!(trace[0].forwarded);
    assert_eq!(trace[0].upstream_status, Some(200));
    assert_eq!(trace[0].client_saw, ClientSaw::Reset);

    // The rule fired once: the retry with the same key gets the stored result.
    let retry = update(&client, &proxy, "k-raf").await?;
    assert_eq!(retry.status(), 200);
    assert_eq!(
        retry
            .headers()
            .get("idempotent-replayed")
            .map(|v| v.as_bytes()),
        Some(b"true".as_slice())
    );
    assert_eq!(desk.applied_count(UPDATE), 1);
    assert_eq!(desk.replayed_count(UPDATE), 1);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn truncate_body_announces_full_length_and_sends_less() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    let full = client
        .post(desk.tool_url(GET_ORDER))
        .json(&order_args())
        .send()
        .await?
        .bytes()
        .await?;
    proxy.add_rule(Rule::new(
        Match::tool(GET_ORDER),
        Injection::TruncateBody { keep: 10 },
    ));

    let resp = get_order(&client, &proxy).await?;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), Some(full.len() as u64));
    let body = resp.bytes().await;
    assert!(body.is_err(), "the body read must fail: {body:?}");

    let trace = trace_of(&proxy, 1).await?;
    assert!(trace[0].forwarded);
    assert_eq!(
        trace[0].client_saw,
        ClientSaw::Truncated {
            status: 200,
            bytes: 10
        }
    );
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn status_429_answers_without_forwarding() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    proxy.add_rule(Rule::new(
        Match::tool(GET_ORDER),
        Injection::Status {
            code: 429,
            retry_after_s: Some(7),
            body: None,
        },
    ));

    let resp = get_order(&client, &proxy).await?;
    assert_eq!(resp.status(), 429);
    assert_eq!(
        resp.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(b"7".as_slice())
    );
    assert_eq!(
        resp.headers().get("content-type").map(|v| v.as_bytes()),
        Some(b"application/json".as_slice())
    );
    let body: Value = resp.json().await?;
    assert_eq!(
        body,
        json!({"error": {"message": "injected by rein-chaos proxy: HTTP 429", "type": "chaos_injected"}})
    );
    assert_eq!(
        body,
        serde_json::from_str::<Value>(&default_error_body(429))?
    );
    assert_eq!(desk.request_count(GET_ORDER), 0);

    // A rule may give its own body.
    proxy.add_rule(Rule::new(
        Match::tool(GET_ORDER),
        Injection::Status {
            code: 503,
            retry_after_s: None,
            body: Some(r#"{"error": "down"}"#.to_owned()),
        },
    ));
    let resp = get_order(&client, &proxy).await?;
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().get("retry-after").is_none());
    assert_eq!(resp.json::<Value>().await?, json!({"error": "down"}));

    let trace = trace_of(&proxy, 2).await?;
    assert!(trace.iter().all(|r| !r.forwarded));
    assert_eq!(trace[0].client_saw, ClientSaw::Response { status: 429 });
    assert_eq!(trace[1].client_saw, ClientSaw::Response { status: 503 });
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn executed_then_status_applies_but_reports_failure() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    proxy.add_rule(Rule::new(
        Match::tool(UPDATE),
        Injection::ExecutedThenStatus {
            code: 500,
            body: None,
        },
    ));

    let resp = update(&client, &proxy, "k-ets").await?;
    assert_eq!(resp.status(), 500);
    assert_eq!(
        resp.json::<Value>().await?,
        serde_json::from_str::<Value>(&default_error_body(500))?
    );
    assert_eq!(desk.applied_count(UPDATE), 1);

    let trace = trace_of(&proxy, 1).await?;
    assert!(trace[0].forwarded);
    assert_eq!(trace[0].upstream_status, Some(200));
    assert_eq!(trace[0].client_saw, ClientSaw::Response { status: 500 });
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn rule_windows_skip_times_and_always() -> TestResult {
    let (_desk, proxy) = start().await?;
    let client = client()?;
    let log_url = proxy.url("/_log");

    // Requests 2 and 3 of get_order; other targets are not counted.
    proxy.add_rule(
        Rule::new(Match::tool(GET_ORDER), status(503))
            .skip(1)
            .times(2),
    );
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(get_order(&client, &proxy).await?.status().as_u16());
        assert_eq!(client.get(&log_url).send().await?.status(), 200);
    }
    assert_eq!(seen, vec![200, 503, 503, 200, 200]);

    // Replacing the rules restarts the counts.
    proxy.set_rules(vec![
        Rule::new(Match::tool(GET_ORDER), status(500))
            .skip(2)
            .always(),
    ]);
    let mut seen = Vec::new();
    for _ in 0..5 {
        seen.push(get_order(&client, &proxy).await?.status().as_u16());
    }
    assert_eq!(seen, vec![200, 200, 500, 500, 500]);

    // First rule that matches *and* fires wins; a skipping rule still counts.
    proxy.set_rules(vec![
        Rule::new(Match::tool(GET_ORDER), status(500)).skip(1),
        Rule::new(Match::any(), status(429)).always(),
    ]);
    let mut seen = Vec::new();
    for _ in 0..3 {
        seen.push(get_order(&client, &proxy).await?.status().as_u16());
    }
    assert_eq!(seen, vec![429, 500, 429]);

    proxy.clear_rules();
    assert_eq!(get_order(&client, &proxy).await?.status(), 200);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn match_by_attempt_hits_only_that_attempt() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    proxy.add_rule(Rule::new(Match::tool(UPDATE).attempt(2), status(503)).always());

    let attempt = |n: Option<u32>| {
        let mut request = client
            .post(proxy.url("/tools/update_delivery_time"))
            .header("Idempotency-Key", "k-attempt")
            .json(&update_args());
        if let Some(n) = n {
            request = request.header("Rein-Attempt", n.to_string());
        }
        request.send()
    };
    assert_eq!(attempt(Some(1)).await?.status(), 200);
    assert_eq!(attempt(Some(2)).await?.status(), 503);
    assert_eq!(attempt(Some(3)).await?.status(), 200);
    assert_eq!(attempt(None).await?.status(), 200);
    assert_eq!(attempt(Some(2)).await?.status(), 503);
    assert_eq!(desk.applied_count(UPDATE), 1);
    assert_eq!(desk.request_count(UPDATE), 3);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn trace_records_rein_headers_fault_and_outcome() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;
    let injected = Injection::ExecutedThenStatus {
        code: 502,
        body: None,
    };
    proxy.add_rule(Rule::new(Match::tool(UPDATE).attempt(1), injected.clone()));

    for n in 1..=2 {
        let resp = client
            .post(proxy.url("/tools/update_delivery_time"))
            .header("Idempotency-Key", "key-trace-1")
            .header("Rein-Run-Id", "run-7")
            .header("Rein-Intent-Id", "intent-3")
            .header("Rein-Attempt", n.to_string())
            .json(&update_args())
            .send()
            .await?;
        assert_eq!(resp.status(), if n == 1 { 502 } else { 200 });
        // Read the whole answer: a client that leaves early is ClientGone.
        resp.bytes().await?;
    }
    assert_eq!(desk.applied_count(UPDATE), 1);
    assert_eq!(desk.replayed_count(UPDATE), 1);

    let mut trace = trace_of(&proxy, 2).await?;
    trace.sort_by_key(|r| r.seq);
    for (i, record) in trace.iter().enumerate() {
        assert_eq!(record.seq, i as u64);
        assert_eq!(record.method, "POST");
        assert_eq!(record.path, "/tools/update_delivery_time");
        assert_eq!(record.tool.as_deref(), Some(UPDATE));
        assert_eq!(record.idempotency_key.as_deref(), Some("key-trace-1"));
        assert_eq!(record.run_id.as_deref(), Some("run-7"));
        assert_eq!(record.intent_id.as_deref(), Some("intent-3"));
        assert_eq!(record.attempt, Some(i as u32 + 1));
        assert_eq!(
            serde_json::from_str::<Value>(&record.request_body)?,
            update_args()
        );
        assert!(record.forwarded);
        assert_eq!(record.upstream_status, Some(200));
        assert_eq!(record.upstream_error, None);
        assert!(record.at_ms > 0 && record.at_ms <= record.finished_ms);
    }
    assert_eq!(trace[0].injected, Some(injected));
    assert_eq!(trace[0].client_saw, ClientSaw::Response { status: 502 });
    assert_eq!(trace[1].injected, None);
    assert_eq!(trace[1].client_saw, ClientSaw::Response { status: 200 });
    assert!(trace[0].finished_ms <= trace[1].at_ms);

    // The trace is plain data: it survives JSON.
    let json = serde_json::to_string(&trace)?;
    assert_eq!(serde_json::from_str::<Vec<TraceRecord>>(&json)?, trace);
    Ok(())
}

/// An upstream that answers nobody until `n` requests are in, so the proxy
/// holds exactly `n` requests at once.
async fn barrier_upstream(
    n: usize,
) -> Result<(String, tokio::task::JoinHandle<Result<(), String>>), Box<dyn Error>> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while held.len() < n {
            let (mut stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
            read_request_head(&mut stream)
                .await
                .map_err(|e| e.to_string())?;
            held.push(stream);
        }
        for mut stream in held {
            stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok")
                .await
                .map_err(|e| e.to_string())?;
            stream.shutdown().await.map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    Ok((url, task))
}

#[tokio::test(start_paused = true)]
async fn peak_in_flight_counts_concurrent_requests_per_tool() -> TestResult {
    let (upstream, barrier) = barrier_upstream(4).await?;
    let proxy = FaultProxy::start(&upstream).await?;
    let client = client()?;
    // A short delay on every request on top: the peak is the same, since
    // the barrier holds them all.
    proxy.add_rule(Rule::new(Match::any(), Injection::Delay { ms: 50 }).always());

    let send = |tool: &str| client.get(proxy.url(&format!("/tools/{tool}"))).send();
    let (a, b, c, d) = tokio::join!(send("alpha"), send("alpha"), send("alpha"), send("beta"));
    for resp in [a?, b?, c?, d?] {
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await?, "ok");
    }
    barrier.await??;

    assert_eq!(proxy.peak_in_flight(), 4);
    assert_eq!(proxy.peak_in_flight_of("alpha"), 3);
    assert_eq!(proxy.peak_in_flight_of("beta"), 1);
    assert_eq!(proxy.peak_in_flight_of("gamma"), 0);
    assert_eq!(trace_of(&proxy, 4).await?.len(), 4);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn bad_requests_get_4xx_5xx_and_the_proxy_keeps_serving() -> TestResult {
    let (desk, proxy) = start().await?;
    let client = client()?;

    let garbage = raw_exchange(&proxy, b"hello\x01world\r\n\r\n").await?;
    assert!(garbage.starts_with("HTTP/1.1 400 "), "{garbage}");

    let chunked = raw_exchange(
        &proxy,
        b"POST /tools/get_order HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    )
    .await?;
    assert!(chunked.starts_with("HTTP/1.1 501 "), "{chunked}");

    let bad_length = raw_exchange(
        &proxy,
        b"POST /tools/get_order HTTP/1.1\r\nHost: x\r\nContent-Length: lots\r\n\r\n",
    )
    .await?;
    assert!(bad_length.starts_with("HTTP/1.1 400 "), "{bad_length}");

    // A client that leaves mid-head is simply dropped.
    let mut quitter = TcpStream::connect(addr_of(&proxy)).await?;
    quitter.write_all(b"GET /tools/get_order HT").await?;
    drop(quitter);

    let resp = get_order(&client, &proxy).await?;
    assert_eq!(resp.status(), 200);
    assert_eq!(desk.request_count(GET_ORDER), 1);

    // Unparsable heads leave no record; rejected framings do.
    let trace = trace_of(&proxy, 3).await?;
    let saw: Vec<_> = trace.iter().map(|r| r.client_saw.clone()).collect();
    assert_eq!(
        saw,
        vec![
            ClientSaw::Response { status: 501 },
            ClientSaw::Response { status: 400 },
            ClientSaw::Response { status: 200 },
        ]
    );
    assert!(!trace[0].forwarded && !trace[1].forwarded);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn unreachable_upstream_is_a_502() -> TestResult {
    let closed = TcpListener::bind("127.0.0.1:0").await?;
    let upstream = format!("http://{}", closed.local_addr()?);
    drop(closed);
    let proxy = FaultProxy::start(&upstream).await?;
    let client = client()?;

    let resp = get_order(&client, &proxy).await?;
    assert_eq!(resp.status(), 502);
    assert_eq!(
        resp.json::<Value>().await?,
        serde_json::from_str::<Value>(&default_error_body(502))?
    );
    let trace = trace_of(&proxy, 1).await?;
    assert_eq!(trace[0].client_saw, ClientSaw::BadGateway);
    assert!(!trace[0].forwarded);
    assert!(trace[0].upstream_error.is_some());
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn start_rejects_a_bad_upstream_url() {
    let err = FaultProxy::start("localhost:80").await;
    assert!(err.is_err());
    let err = FaultProxy::start("ftp://127.0.0.1/").await;
    assert!(err.is_err());
}

#[tokio::test(start_paused = true)]
async fn chunked_answers_stream_through_chunk_by_chunk() -> TestResult {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let upstream = format!("http://{}", listener.local_addr()?);
    let (go_on, go_on_rx) = oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        read_request_head(&mut stream)
            .await
            .map_err(|e| e.to_string())?;
        let first = [
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                .as_slice(),
            &chunk(b"data: one\n\n"),
        ]
        .concat();
        stream.write_all(&first).await.map_err(|e| e.to_string())?;
        // The second event is sent only once the client holds the first.
        go_on_rx.await.map_err(|e| e.to_string())?;
        let rest = [chunk(b"data: two\n\n").as_slice(), b"0\r\n\r\n"].concat();
        stream.write_all(&rest).await.map_err(|e| e.to_string())?;
        stream.shutdown().await.map_err(|e| e.to_string())
    });
    let proxy = FaultProxy::start(&upstream).await?;
    let client = client()?;

    let mut resp = timeout(PATIENCE, client.get(proxy.url("/v1/events")).send()).await??;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), None);
    assert_eq!(
        resp.headers().get("content-type").map(|v| v.as_bytes()),
        Some(b"text/event-stream".as_slice())
    );
    let mut got = Vec::new();
    while got.len() < b"data: one\n\n".len() {
        let Some(bytes) = timeout(PATIENCE, resp.chunk()).await?? else {
            return Err("stream ended before the first event".into());
        };
        got.extend_from_slice(&bytes);
    }
    assert_eq!(got, b"data: one\n\n");
    go_on.send(()).map_err(|()| "upstream gone")?;
    while let Some(bytes) = timeout(PATIENCE, resp.chunk()).await?? {
        got.extend_from_slice(&bytes);
    }
    assert_eq!(got, b"data: one\n\ndata: two\n\n");
    server.await??;

    let trace = trace_of(&proxy, 1).await?;
    assert_eq!(trace[0].tool, None);
    assert_eq!(trace[0].client_saw, ClientSaw::Response { status: 200 });
    Ok(())
}

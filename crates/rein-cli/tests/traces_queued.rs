//! Issue 18, items 1 and 2: a queued run keeps its caller's `traceparent`
//! in the store, and whichever process drives it later parents its run
//! span by it; a run driven again (`rein resume` after its server was
//! SIGKILLed mid-call) links its new run span to the run span of its first
//! drive, stored with the run. A real `rein serve` and a real `rein
//! resume`, exporting to an OTLP/HTTP receiver on loopback (decoded with
//! `opentelemetry-proto`); the batch delay is beyond the test, so only the
//! flush at the end of each process can have sent the spans.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use rein_store::{RunStore as _, StoreExt as _};
use rein_testkit::order_desk::{Fault, Faults, OrderDesk, OrderDeskConfig, UPDATE_DELIVERY_TIME};
use serde_json::Value;

mod common;
mod otlp;
use common::Server;
use otlp::{Span, attr, hex, receiver};

const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const QUEUED_PARENT: &str = "b7ad6b7169203331";
const HELD_PARENT: &str = "d7ad6b7169203334";

/// A bound that fails a test rather than measures it.
const GENEROUS: Duration = Duration::from_secs(60);

/// The example config exporting traces to `otlp`, where an update may take
/// up to 5 s (p99): a call the desk holds stays in flight, not timed out.
fn config(dir: &Path, otlp: &str) -> std::path::PathBuf {
    let path = common::example_config(
        dir,
        &format!("[telemetry]\notlp_endpoint = \"{otlp}\"\nservice_name = \"rein-queued-test\"\n"),
    );
    let mut text = std::fs::read_to_string(&path).unwrap();
    let patient = "p50 = \"1s\"\np95 = \"3s\"\np99 = \"5s\"";
    for fast in [
        "p50 = \"20ms\"\np95 = \"60ms\"\np99 = \"120ms\"",
        "p50 = \"80ms\"\np95 = \"200ms\"\np99 = \"400ms\"",
    ] {
        assert!(text.contains(fast), "the example's latencies changed");
        text = text.replacen(fast, patient, 1);
    }
    std::fs::write(&path, text).unwrap();
    path
}

async fn start(config: &Path, db: &Path, desk: &OrderDesk) -> Server {
    let (config, db, desk) = (config.to_owned(), db.to_owned(), desk.base_url().to_owned());
    tokio::task::spawn_blocking(move || {
        Server::start_with_env(
            &config,
            &db,
            &[
                ("ORDER_DESK_URL", &desk),
                ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
                // Nothing is exported on the batch timer during the test.
                ("OTEL_BSP_SCHEDULE_DELAY", "3600000"),
            ],
        )
    })
    .await
    .unwrap()
}

/// Submits a queued run with the client's span `parent`; its id.
async fn submit(client: &reqwest::Client, server: &Server, parent: &str) -> String {
    let accepted = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{TRACE}-{parent}-01"))
        .body(r#"{"input": "Move order A-1001.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    location.rsplit('/').next().unwrap().to_owned()
}

async fn until_ended(client: &reqwest::Client, server: &Server, run_id: &str) -> Value {
    let url = server.url(&format!("/v1/runs/{run_id}"));
    for _ in 0..1200 {
        if let Ok(r) = client.get(&url).send().await
            && let Ok(run) = r.json::<Value>().await
            && !matches!(run["status"].as_str(), Some("queued" | "running") | None)
        {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{url} did not end");
}

/// The run span of `run_id` among `spans`.
fn run_span<'a>(spans: &'a [Span], run_id: &str) -> &'a Span {
    spans
        .iter()
        .find(|s| s.name == "run order_desk" && attr(s, "rein.run_id").as_deref() == Some(run_id))
        .unwrap_or_else(|| {
            let names: Vec<String> = spans
                .iter()
                .map(|s| format!("{} {:?}", s.name, attr(s, "rein.run_id")))
                .collect();
            panic!("no run span of {run_id}: {names:#?}")
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_run_is_parented_by_the_traceparent_it_was_submitted_with() {
    let (otlp, spans) = receiver().await;
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::none()))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &otlp);
    let db = dir.path().join("rein.db");
    let mut server = start(&config, &db, &desk).await;
    let client = reqwest::Client::new();
    let run_id = submit(&client, &server, QUEUED_PARENT).await;
    let run = until_ended(&client, &server, &run_id).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    // Stored with the run, as the worker found it.
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
    let record = store
        .get_run(&rein_core::RunId::new(run_id.clone()).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        record.trace_parent.as_ref().map(|s| s.to_traceparent()),
        Some(format!("00-{TRACE}-{QUEUED_PARENT}-01"))
    );

    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = tokio::task::spawn_blocking(move || server.wait_exit(GENEROUS))
        .await
        .unwrap();
    assert!(status.success());
    let spans = spans.lock().unwrap();
    let span = run_span(&spans, &run_id);
    assert_eq!(hex(&span.trace_id), TRACE);
    assert_eq!(hex(&span.parent_span_id), QUEUED_PARENT);
    assert!(span.links.is_empty(), "a first drive links nowhere");
    let first = record.first_span.expect("the first drive's span is stored");
    assert_eq!(
        first.span_id(),
        hex(&span.span_id),
        "the stored first span is the run span"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_resumed_after_its_server_died_links_to_its_first_run_span() {
    let (otlp, spans) = receiver().await;
    // The first update is held: the run is mid-call when its server dies.
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::Hold)),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &otlp);
    let db = dir.path().join("rein.db");
    let server = start(&config, &db, &desk).await;
    let client = reqwest::Client::new();
    let run_id = submit(&client, &server, HELD_PARENT).await;
    assert!(
        desk.until_held(1, GENEROUS).await,
        "the update is in flight"
    );
    server.kill_async().await;
    assert!(
        spans.lock().unwrap().is_empty(),
        "a SIGKILLed server exported nothing"
    );

    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
    let id = rein_core::RunId::new(run_id.clone()).unwrap();
    let record = store.get_run(&id).await.unwrap().unwrap();
    assert_eq!(record.status.as_str(), "running");
    let first = record
        .first_span
        .clone()
        .expect("the first drive's span is stored");
    assert_eq!(
        first.trace_id(),
        TRACE,
        "the first run span was the client's child"
    );
    // The dead server's claim goes, as its lease would expire.
    for lease in store.leases_of_run(&id).await.unwrap() {
        store.release_lease(&lease.lease_id).await.unwrap();
    }
    desk.release_held();

    let resumed = tokio::process::Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["resume", &run_id, "--json", "--config"])
        .arg(&config)
        .arg("--data")
        .arg(&db)
        .env("ORDER_DESK_URL", desk.base_url())
        .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
        .env("OTEL_BSP_SCHEDULE_DELAY", "3600000")
        .env_remove("REIN_CRASH_AT")
        .output()
        .await
        .unwrap();
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let spans = spans.lock().unwrap().clone();
    let span = run_span(&spans, &run_id);
    // The stored caller's context is the parent after the takeover too.
    assert_eq!(hex(&span.trace_id), TRACE);
    assert_eq!(hex(&span.parent_span_id), HELD_PARENT);
    assert_ne!(hex(&span.span_id), first.span_id(), "a new run span");
    let links: Vec<(String, String)> = span
        .links
        .iter()
        .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
        .collect();
    assert_eq!(
        links,
        vec![(first.trace_id().to_owned(), first.span_id().to_owned())],
        "the resumed run span links to the first run span"
    );
    // Its first span stays the first drive's.
    let after = store.get_run(&id).await.unwrap().unwrap();
    assert_eq!(after.first_span, Some(first));
}

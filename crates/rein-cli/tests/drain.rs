//! Issue 13 (items 1 and 6) and its review: SIGTERM drains `rein serve`
//! within `server.shutdown_grace`, SIGINT stops `rein run` at a safe point
//! for the user's `rein resume`, and a dead server's runs are taken over
//! without waiting for their leases (a live or stopped one's never). Real
//! processes, real signals, the order desk's own log as the witness of
//! every side effect; calls in flight are held by the desk until the test
//! releases them, never timed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use rein_core::{EventKind, RunId};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::Value;
use tokio::io::AsyncWriteExt;

mod common;
use common::{Server, example_config_with};
use rein_store::{LeaseKind, RunStatus, RunStore, StoreExt};

/// A bound that fails a test rather than measures it.
const GENEROUS: Duration = Duration::from_secs(30);

/// An order desk whose first requests to each of `held` are held until
/// the test releases them.
async fn desk_holding(held: &[&str]) -> OrderDesk {
    let faults = held.iter().fold(Faults::none(), |faults, tool| {
        faults.then(tool, Fault::Hold)
    });
    OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap()
}

/// The example config (with `server_keys` in its `[server]` table and
/// `extra` appended) where a read or an update may take up to 5 s (p99),
/// so rein gives a call the desk holds 10 s instead of timing it out: the
/// held call is genuinely in flight.
fn patient_config(dir: &Path, server_keys: &str, extra: &str) -> PathBuf {
    let path = example_config_with(dir, server_keys, extra);
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

/// Waits until the desk holds `n` requests.
async fn held(desk: &OrderDesk, n: usize) {
    assert!(
        desk.until_held(n, GENEROUS).await,
        "{n} requests never reached the desk; it holds {}",
        desk.held_count()
    );
}

/// Polls `url` until the run it names has ended.
async fn until_ended(client: &reqwest::Client, url: &str) -> Value {
    let until = tokio::time::Instant::now() + GENEROUS;
    loop {
        if let Ok(r) = client.get(url).send().await
            && let Ok(run) = r.json::<Value>().await
            && !matches!(run["status"].as_str(), Some("queued" | "running") | None)
        {
            return run;
        }
        assert!(tokio::time::Instant::now() < until, "{url} did not end");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn submit(client: &reqwest::Client, server: &Server, mode: &str) -> reqwest::Response {
    client
        .post(server.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"input": "Move order A-1001.", "mode": "{mode}"}}"#
        ))
        .send()
        .await
        .unwrap()
}

/// A sync submission in a task of its own.
fn submit_sync(
    client: &reqwest::Client,
    server: &Server,
) -> tokio::task::JoinHandle<reqwest::Result<reqwest::Response>> {
    let (client, url) = (client.clone(), server.url("/v1/agents/order_desk/runs"));
    tokio::spawn(async move {
        client
            .post(url)
            .header("content-type", "application/json")
            .body(r#"{"input": "Move order A-1001."}"#)
            .send()
            .await
    })
}

fn run_id_of(location: &str) -> RunId {
    RunId::new(location.rsplit('/').next().unwrap().to_owned()).unwrap()
}

async fn kinds(store: &SqliteStore, run_id: &RunId) -> Vec<EventKind> {
    store
        .events(run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind())
        .collect()
}

async fn claimed(store: &SqliteStore, run_id: &RunId) -> bool {
    store
        .leases_of_run(run_id)
        .await
        .unwrap()
        .iter()
        .any(|l| l.kind == LeaseKind::Run)
}

/// The data of the run's last `run_interrupted`.
async fn interruption(store: &SqliteStore, run_id: &RunId) -> Value {
    store
        .events(run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .rev()
        .find(|e| e.kind() == EventKind::RunInterrupted)
        .map(|e| e.data.to_value().unwrap())
        .unwrap_or_else(|| panic!("{run_id} was not interrupted"))
}

/// `shutdown_grace = 0` (review T3): the runs in flight are interrupted at
/// once — their reads, held at the desk, are aborted — handed on, and the
/// next server on the store finishes them and the queued runs, each effect
/// once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_no_grace_hands_sync_and_queued_runs_on_to_the_next_server() {
    let desk = desk_holding(&[GET_ORDER, GET_ORDER]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(
        dir.path(),
        "shutdown_grace = \"0s\"",
        "[server.queue]\nworkers = 1\n",
    );
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let mut first = Server::start(&config, &db, desk.base_url());
    let mut queued = Vec::new();
    for _ in 0..3 {
        let accepted = submit(&client, &first, "queued").await;
        assert_eq!(accepted.status(), 202);
        queued.push(accepted.headers()["location"].to_str().unwrap().to_owned());
    }
    held(&desk, 1).await;
    let sync = submit_sync(&client, &first);
    held(&desk, 2).await;

    first.signal(Signal::SIGTERM);
    // The sync caller is answered, not dropped: 202 and where to follow it.
    let answer = sync
        .await
        .unwrap()
        .expect("the caller keeps its connection");
    assert_eq!(answer.status(), 202, "{:?}", answer.text().await);
    let sync_location = answer.headers()["location"].to_str().unwrap().to_owned();
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["status"], "running", "{body}");
    assert!(body["handed_on"].is_object(), "{body}");

    let status = first.wait_exit(GENEROUS);
    assert_eq!(status.code(), Some(0), "{}", first.log_tail());
    let line = first.wait_for_log("drained in", Duration::from_secs(5));
    assert!(line.contains("finished 0 runs"), "{line}");
    assert!(line.contains("handed on 2 runs"), "{line}");
    assert!(!line.contains("cut"), "{line}");
    assert!(line.contains("2 queued runs left queued"), "{line}");
    let sync_id = run_id_of(&sync_location);
    assert!(
        line.contains(sync_id.as_str()),
        "the line names the runs: {line}"
    );

    // Handed on: still running, resumable, no claim left to wait for, and
    // for any worker to continue.
    let store = SqliteStore::open(&db).unwrap();
    let record = store.get_run(&sync_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Running);
    assert!(!claimed(&store, &sync_id).await, "the claim was released");
    let events = kinds(&store, &sync_id).await;
    assert_eq!(
        events.last(),
        Some(&EventKind::RunInterrupted),
        "{events:?}"
    );
    assert!(!events.contains(&EventKind::RunCancelled), "{events:?}");
    assert_eq!(
        interruption(&store, &sync_id).await["continue_with"],
        "any_worker"
    );

    // The next server on the same store finishes everything.
    let second = Server::start(&config, &db, desk.base_url());
    for location in queued.iter().chain([&sync_location]) {
        let run = until_ended(&client, &second.url(location)).await;
        assert_eq!(run["status"], "succeeded", "{location}: {run}");
    }
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 4);
    assert_eq!(desk.applied_count(SEND_EMAIL), 4);
    drop(second);
}

/// Review item 4 and T3 (the second signal): a sync run whose update is
/// in flight goes on while the server drains; a second SIGTERM interrupts
/// it at once, but the update already sent is not aborted — it finishes
/// (the desk lets it go only now) and is recorded — and the run is handed
/// on after that step. The next server sends only the email.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_sigterm_hands_on_at_once_and_the_write_in_flight_still_finishes() {
    let desk = desk_holding(&[UPDATE_DELIVERY_TIME]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(dir.path(), "shutdown_grace = \"60s\"", "");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let mut server = Server::start(&config, &db, desk.base_url());
    let sync = submit_sync(&client, &server);
    held(&desk, 1).await;
    server.signal(Signal::SIGTERM);
    server.wait_for_log("draining", GENEROUS);
    // While it drains, a load balancer sees it unready and new work is
    // refused with the problem the API documents.
    let ready = client.get(server.url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let refused = submit(&client, &server, "queued").await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let problem: Value = refused.json().await.unwrap();
    assert!(
        problem["type"].as_str().unwrap().ends_with("/draining"),
        "{problem}"
    );

    server.signal(Signal::SIGTERM);
    server.wait_for_log("handing the runs in flight on now", GENEROUS);
    desk.release_held();
    let answer = sync.await.unwrap().unwrap();
    assert_eq!(answer.status(), 202, "handed on");
    let location = answer.headers()["location"].to_str().unwrap().to_owned();
    let status = server.wait_exit(GENEROUS);
    assert_eq!(status.code(), Some(0), "{}", server.log_tail());
    let line = server.wait_for_log("drained in", Duration::from_secs(5));
    assert!(line.contains("handed on 1 run"), "{line}");

    let store = SqliteStore::open(&db).unwrap();
    let run_id = run_id_of(&location);
    let ledger = store.ledger(&run_id).await.unwrap();
    let update = ledger
        .iter()
        .find(|r| r.tool == UPDATE_DELIVERY_TIME)
        .unwrap();
    assert_eq!(
        update.status,
        rein_core::LedgerStatus::Succeeded,
        "the sent update finished and was recorded: {ledger:?}"
    );
    let next = Server::start(&config, &db, desk.base_url());
    let run = until_ended(&client, &next.url(&location)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        desk.request_count(UPDATE_DELIVERY_TIME),
        1,
        "the update was not sent again"
    );
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}

/// Review T3 (the third signal): a third SIGTERM quits at once, like
/// `rein run`'s second Ctrl-C, even with a write held in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_third_sigterm_quits_at_once() {
    let desk = desk_holding(&[UPDATE_DELIVERY_TIME]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(dir.path(), "shutdown_grace = \"60s\"", "");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let mut server = Server::start(&config, &db, desk.base_url());
    let _sync = submit_sync(&client, &server);
    held(&desk, 1).await;
    server.signal(Signal::SIGTERM);
    server.wait_for_log("draining", GENEROUS);
    server.signal(Signal::SIGTERM);
    server.wait_for_log("handing the runs in flight on now", GENEROUS);
    server.signal(Signal::SIGTERM);
    let status = server.wait_exit(GENEROUS);
    assert_eq!(status.code(), Some(143), "{}", server.log_tail());
    // The log is read by a thread of its own: wait for the last line the
    // process wrote before it exited.
    server.wait_for_log("quitting at once", GENEROUS);
    assert!(!server.log_tail().contains("drained in"));
    desk.release_held();
}

/// A long grace lets the run in flight finish in the draining process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_long_grace_lets_the_sync_run_finish_in_the_draining_process() {
    let desk = desk_holding(&[UPDATE_DELIVERY_TIME]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(dir.path(), "shutdown_grace = \"60s\"", "");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let mut server = Server::start(&config, &db, desk.base_url());
    let sync = submit_sync(&client, &server);
    held(&desk, 1).await;
    server.signal(Signal::SIGTERM);
    server.wait_for_log("draining", GENEROUS);
    desk.release_held();

    let answer = sync.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    let run: Value = answer.json().await.unwrap();
    assert_eq!(run["status"], "succeeded", "{run}");
    let status = server.wait_exit(GENEROUS);
    assert_eq!(status.code(), Some(0));
    let line = server.wait_for_log("drained in", Duration::from_secs(5));
    assert!(
        line.contains("finished 1 run") && line.contains(run["run_id"].as_str().unwrap()),
        "{line}"
    );
    assert!(line.contains("handed on 0 runs"), "{line}");
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}

/// Opens a submission and sends all of it but the last byte of its body:
/// admitted (past the drain's door), not yet a run.
async fn half_submitted(server: &Server) -> tokio::net::TcpStream {
    let body = r#"{"input": "Move order A-1001."}"#;
    let mut socket = tokio::net::TcpStream::connect(&server.addr).await.unwrap();
    let head = format!(
        "POST /v1/agents/order_desk/runs HTTP/1.1\r\nhost: {}\r\ncontent-type: application/json\r\nconnection: close\r\ncontent-length: {}\r\n\r\n",
        server.addr,
        body.len()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    socket
        .write_all(&body.as_bytes()[..body.len() - 1])
        .await
        .unwrap();
    socket
}

/// A log line without its terminal colours.
fn plain(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // An escape sequence ends with a letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Waits until the server counts `n` pieces of admitted work.
async fn admitted(server: &Server, n: u64) {
    let until = tokio::time::Instant::now() + GENEROUS;
    loop {
        let metrics = reqwest::get(server.url("/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let now = metrics
            .lines()
            .find_map(|l| l.strip_prefix("rein_work_admitted ")?.parse::<u64>().ok())
            .expect("the admitted work is a metric");
        if now == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "admitted {now}, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The rest of [`half_submitted`]'s body, and the whole answer.
async fn finish_submission(mut socket: tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    socket.write_all(b"}").await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(GENEROUS, socket.read_to_string(&mut answer))
        .await
        .expect("answered")
        .unwrap();
    answer
}

/// Review item 1 (T3, the admission race): a submission admitted before
/// the signal but still sending its body is waited for; it runs to its end
/// in the draining process and the summary counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_admitted_before_the_drain_is_waited_for_and_finishes() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(dir.path(), "shutdown_grace = \"60s\"", "");
    let db = dir.path().join("rein.db");
    let mut server = Server::start(&config, &db, desk.base_url());

    let socket = half_submitted(&server).await;
    admitted(&server, 1).await;
    server.signal(Signal::SIGTERM);
    let draining = plain(&server.wait_for_log("new work is refused", GENEROUS));
    assert!(draining.contains("admitted=1"), "{draining}");
    let answer = finish_submission(socket).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains(r#""status":"succeeded""#), "{answer}");
    let status = server.wait_exit(GENEROUS);
    assert_eq!(status.code(), Some(0));
    let line = server.wait_for_log("drained in", Duration::from_secs(5));
    assert!(line.contains("finished 1 run"), "{line}");
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}

/// Review item 1: a submission admitted before the drain that becomes a
/// run only after the interrupt (its body completed late) is handed on at
/// once — 202 — instead of running on into the exit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_submission_that_starts_after_the_interrupt_is_handed_on_at_once() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    // The finish phase ends 1 s after the signal, then 5 s to hand on.
    let config = patient_config(dir.path(), "shutdown_grace = \"8s\"", "");
    let db = dir.path().join("rein.db");
    let mut server = Server::start(&config, &db, desk.base_url());

    let socket = half_submitted(&server).await;
    admitted(&server, 1).await;
    server.signal(Signal::SIGTERM);
    server.wait_for_log("interrupting the work still in flight", GENEROUS);
    let answer = finish_submission(socket).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    assert!(answer.contains("handed_on"), "{answer}");
    let status = server.wait_exit(GENEROUS);
    assert_eq!(status.code(), Some(0));
    let line = server.wait_for_log("drained in", Duration::from_secs(5));
    assert!(line.contains("handed on 1 run"), "{line}");
    assert_eq!(desk.request_count(GET_ORDER), 0, "nothing ran here");
}

/// Review item 6: a run still in flight when the hand-on time is over (its
/// update held at the desk) is named as cut, not as handed on; its process
/// is gone, so the next server takes the queued run over at once and
/// finishes it, the update once under its key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_still_in_flight_at_exit_is_reported_cut_and_taken_over_next() {
    let desk = desk_holding(&[UPDATE_DELIVERY_TIME]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(
        dir.path(),
        "shutdown_grace = \"0s\"",
        "[server.queue]\nlease = \"60s\"\n",
    );
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let mut first = Server::start(&config, &db, desk.base_url());
    let accepted = submit(&client, &first, "queued").await;
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    held(&desk, 1).await;
    first.signal(Signal::SIGTERM);
    let status = first.wait_exit(GENEROUS);
    assert_eq!(status.code(), Some(0));
    let line = first.wait_for_log("drained in", Duration::from_secs(5));
    let run_id = run_id_of(&location);
    assert!(line.contains("handed on 0 runs"), "{line}");
    assert!(
        line.contains(&format!("cut 1 run at exit [{run_id}]")),
        "{line}"
    );
    desk.release_held();

    let store = SqliteStore::open(&db).unwrap();
    assert!(claimed(&store, &run_id).await, "a cut run keeps its claim");
    let second = Server::start(&config, &db, desk.base_url());
    let run = until_ended(&client, &second.url(&location)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1, "once, by key");
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_servers_queued_run_is_taken_over_before_its_lease_expires() {
    let desk = desk_holding(&[UPDATE_DELIVERY_TIME]).await;
    let dir = tempfile::tempdir().unwrap();
    // A long lease: waiting for it would take a minute.
    let config = patient_config(
        dir.path(),
        "",
        "[server.queue]\nlease = \"60s\"\nworkers = 1\n",
    );
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let first = Server::start(&config, &db, desk.base_url());
    let accepted = submit(&client, &first, "queued").await;
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    held(&desk, 1).await;
    let store = SqliteStore::open(&db).unwrap();
    let run_id = run_id_of(&location);
    let claim = store
        .leases_of_run(&run_id)
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.kind == LeaseKind::Run)
        .expect("the first server holds the run's claim");
    first.kill();
    desk.release_held();

    let second = Server::start(&config, &db, desk.base_url());
    let run = until_ended(&client, &second.url(&location)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let resumed = store
        .events(&run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.kind() == EventKind::RunResumed)
        .expect("the second server resumed it");
    assert!(
        resumed.at_ms < claim.expires_at_ms,
        "taken over at {} although the dead owner's lease ran to {}",
        resumed.at_ms,
        claim.expires_at_ms
    );
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    drop(second);
}

/// Review item 3 (T3): the queued run of a server stopped with SIGSTOP —
/// alive, silent, its lease running — is not taken over early, while the
/// queued run of a SIGKILLed server on the same machine, newer, is: the
/// next server looked at both (oldest first) and took only the dead one's.
/// Continued, the stopped server finishes its own run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_servers_run_is_not_taken_over_but_a_killed_ones_is() {
    let desk = desk_holding(&[UPDATE_DELIVERY_TIME, UPDATE_DELIVERY_TIME]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(
        dir.path(),
        "",
        "[server.queue]\nlease = \"60s\"\nworkers = 1\n",
    );
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let mut stopped = Server::start(&config, &db, desk.base_url());
    let older = submit(&client, &stopped, "queued").await;
    let older = older.headers()["location"].to_str().unwrap().to_owned();
    held(&desk, 1).await;
    let killed = Server::start(&config, &db, desk.base_url());
    let newer = submit(&client, &killed, "queued").await;
    let newer = newer.headers()["location"].to_str().unwrap().to_owned();
    held(&desk, 2).await;
    stopped.signal(Signal::SIGSTOP);
    killed.kill();

    let next = Server::start(&config, &db, desk.base_url());
    let run = until_ended(&client, &next.url(&newer)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let store = SqliteStore::open(&db).unwrap();
    let older_id = run_id_of(&older);
    let events = kinds(&store, &older_id).await;
    assert!(
        !events.contains(&EventKind::RunResumed),
        "the stopped server's run was not taken over: {events:?}"
    );
    assert!(claimed(&store, &older_id).await);

    stopped.signal(Signal::SIGCONT);
    desk.release_held();
    let run = until_ended(&client, &next.url(&older)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    assert!(
        !kinds(&store, &older_id)
            .await
            .contains(&EventKind::RunResumed),
        "its own server finished it"
    );
    assert!(stopped.is_running());
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 2, "one per run");
    assert_eq!(desk.applied_count(SEND_EMAIL), 2);
}

/// Runs a printed shell command with the `rein` under test first on PATH.
fn run_printed(command: &str, env: &[(&str, &str)]) -> std::process::Output {
    let bin = Path::new(env!("CARGO_BIN_EXE_rein")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .args(["-c", command])
        .env("PATH", path)
        .envs(env.iter().copied())
        .env_remove("REIN_CRASH_AT")
        .output()
        .unwrap()
}

/// SIGINT on `rein run --json` (review items 5 and 9): the run stops at a
/// safe point (its read, held at the desk, aborted), stdout still carries
/// one JSON document — interrupted, the run id and the resume command —
/// and the run is kept for the user: a `rein serve` on the same store,
/// which takes over a run a draining server handed on (newer, so looked at
/// after it), neither resumes nor closes it. The printed command finishes
/// it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_on_rein_run_keeps_the_run_for_its_resume_command_not_for_a_server() {
    let desk = desk_holding(&[GET_ORDER, GET_ORDER]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(
        dir.path(),
        "shutdown_grace = \"0s\"",
        "[server.queue]\nworkers = 1\n",
    );
    let db = dir.path().join("rein.db");
    let env = [
        ("ORDER_DESK_URL", desk.base_url()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "run",
            "--json",
            "--agent",
            "order_desk",
            "--input",
            "Move order A-1001.",
        ])
        .arg("--config")
        .arg(&config)
        .arg("--data")
        .arg(&db)
        .envs(env)
        .env_remove("REIN_CRASH_AT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The id is on stderr as the run starts.
    let mut stderr = BufReader::new(child.stderr.take().unwrap()).lines();
    let started = stderr
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("started"))
        .expect("the run announces itself");
    let run_id = started
        .strip_prefix("rein run: run ")
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no run id in {started:?}"))
        .to_owned();
    held(&desk, 1).await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, Signal::SIGINT).unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let (rest, document) = tokio::task::spawn_blocking(move || {
        let rest: Vec<String> = stderr.map_while(Result::ok).collect();
        let mut document = String::new();
        stdout.read_to_string(&mut document).unwrap();
        (rest, document)
    })
    .await
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{rest:?}");
    let command = rest
        .iter()
        .map(|l| l.trim())
        .find(|l| l.starts_with("rein resume "))
        .unwrap_or_else(|| panic!("no resume command in {rest:?}"))
        .to_owned();
    assert!(command.contains(&run_id), "{command}");
    let document: Value = serde_json::from_str(&document)
        .unwrap_or_else(|e| panic!("stdout is not one JSON document ({e}): {document:?}"));
    assert_eq!(document["run_id"], run_id.as_str());
    assert_eq!(document["status"], "interrupted");
    assert_eq!(document["interrupted"]["signal"], "SIGINT");
    assert_eq!(document["resume"], command.as_str());

    // Recorded as interrupted for its caller, not cancelled.
    let store = SqliteStore::open(&db).unwrap();
    let id = RunId::new(run_id.clone()).unwrap();
    let record = store.get_run(&id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Running);
    assert_eq!(
        kinds(&store, &id).await.last(),
        Some(&EventKind::RunInterrupted)
    );
    assert_eq!(interruption(&store, &id).await["continue_with"], "caller");

    // A draining server's handed-on run, newer than the user's.
    let client = reqwest::Client::new();
    let mut draining = Server::start(&config, &db, desk.base_url());
    let accepted = submit(&client, &draining, "queued").await;
    let handed = accepted.headers()["location"].to_str().unwrap().to_owned();
    held(&desk, 1).await;
    draining.signal(Signal::SIGTERM);
    assert_eq!(draining.wait_exit(GENEROUS).code(), Some(0));
    let next = Server::start(&config, &db, desk.base_url());
    let run = until_ended(&client, &next.url(&handed)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let events = kinds(&store, &id).await;
    assert_eq!(
        events.last(),
        Some(&EventKind::RunInterrupted),
        "the server left the user's run alone: {events:?}"
    );
    assert!(!claimed(&store, &id).await);

    let resumed = tokio::task::spawn_blocking({
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move || {
            let env: Vec<(&str, &str)> =
                env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            run_printed(&command, &env)
        }
    })
    .await
    .unwrap();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let record = store.get_run(&id).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        RunStatus::Finished(rein_core::Outcome::Succeeded)
    );
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 2, "one per run");
    assert_eq!(desk.applied_count(SEND_EMAIL), 2);
    drop(next);
}

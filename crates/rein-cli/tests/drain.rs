//! Issue 13 (items 1 and 6): SIGTERM drains `rein serve`, SIGINT stops
//! `rein run` at a safe point, and a dead server's runs are taken over
//! without waiting for their leases. Real processes, real signals, the
//! order desk's own log as the witness of every side effect.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;
use rein_core::EventKind;
use rein_store::{LeaseKind, SqliteStore, Store};
use rein_testkit::order_desk::{
    Fault, Faults, OrderDesk, OrderDeskConfig, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::Value;

mod common;
use common::{Server, example_config_with};

/// A bound that fails a test rather than measures it.
const GENEROUS: Duration = Duration::from_secs(30);

/// An order desk whose next `slow.len()` updates each sleep that long.
async fn desk_with_slow_updates(slow: &[Duration]) -> OrderDesk {
    let faults = slow.iter().fold(Faults::none(), |faults, d| {
        faults.then(UPDATE_DELIVERY_TIME, Fault::Delay(*d))
    });
    OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap()
}

/// The example config (with `server_keys` in its `[server]` table and
/// `extra` appended) where an update may take up to 5 s (p99), so rein
/// gives a slow update 10 s instead of timing it out and retrying: the
/// desk's delay is then a tool genuinely in flight.
fn slow_update_config(dir: &Path, server_keys: &str, extra: &str) -> std::path::PathBuf {
    let path = example_config_with(dir, server_keys, extra);
    let text = std::fs::read_to_string(&path).unwrap();
    let fast =
        "[tools.update_delivery_time.latency]\np50 = \"80ms\"\np95 = \"200ms\"\np99 = \"400ms\"";
    assert!(text.contains(fast), "the example's update latency changed");
    let slow = "[tools.update_delivery_time.latency]\np50 = \"1s\"\np95 = \"3s\"\np99 = \"5s\"";
    std::fs::write(&path, text.replace(fast, slow)).unwrap();
    path
}

/// Waits until the desk has received `n` update requests.
async fn updates_reached(desk: &OrderDesk, n: usize) {
    let until = tokio::time::Instant::now() + GENEROUS;
    while desk.request_count(UPDATE_DELIVERY_TIME) < n {
        assert!(
            tokio::time::Instant::now() < until,
            "{n} updates never reached the desk"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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

async fn kinds(store: &SqliteStore, run_id: &rein_core::RunId) -> Vec<EventKind> {
    store
        .events(run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_short_grace_hands_sync_and_queued_runs_on_to_the_next_server() {
    // The first two updates (the queued run's and the sync run's) outlast
    // the grace, so both runs are interrupted mid-call.
    let slow = Duration::from_secs(6);
    let desk = desk_with_slow_updates(&[slow, slow]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = slow_update_config(
        dir.path(),
        "shutdown_grace = \"1s\"",
        "[server.queue]\nworkers = 1\n",
    );
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let mut first = Server::start(&config, &db, desk.base_url());
    let queued: Vec<String> = {
        let mut locations = Vec::new();
        for _ in 0..3 {
            let accepted = submit(&client, &first, "queued").await;
            assert_eq!(accepted.status(), 202);
            locations.push(accepted.headers()["location"].to_str().unwrap().to_owned());
        }
        locations
    };
    updates_reached(&desk, 1).await;
    let sync = tokio::spawn({
        let (client, url) = (client.clone(), first.url("/v1/agents/order_desk/runs"));
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .body(r#"{"input": "Move order A-1001."}"#)
                .send()
                .await
        }
    });
    updates_reached(&desk, 2).await;

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
    assert!(line.contains("finished 0 run(s)"), "{line}");
    assert!(line.contains("handed on 2 run(s)"), "{line}");
    assert!(line.contains("2 queued run(s) left queued"), "{line}");
    let sync_id = sync_location.rsplit('/').next().unwrap().to_owned();
    assert!(line.contains(&sync_id), "the line names the runs: {line}");

    // Handed on: still running, resumable, no claim left to wait for.
    let store = SqliteStore::open(&db).unwrap();
    let run_id = rein_core::RunId::new(sync_id).unwrap();
    let record = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.status, rein_store::RunStatus::Running);
    assert!(
        store
            .leases_of_run(&run_id)
            .await
            .unwrap()
            .iter()
            .all(|l| l.kind != LeaseKind::Run),
        "the claim was released"
    );
    let events = kinds(&store, &run_id).await;
    assert_eq!(
        events.last(),
        Some(&EventKind::RunInterrupted),
        "{events:?}"
    );
    assert!(!events.contains(&EventKind::RunCancelled), "{events:?}");

    // The next server on the same store finishes everything.
    let second = Server::start(&config, &db, desk.base_url());
    for location in queued.iter().chain([&sync_location]) {
        let run = until_ended(&client, &second.url(location)).await;
        assert_eq!(run["status"], "succeeded", "{location}: {run}");
    }
    // One update and one email per run, never two: the interrupted calls
    // were repeated only under their idempotency keys.
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 4);
    assert_eq!(desk.applied_count(SEND_EMAIL), 4);
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_long_grace_lets_the_sync_run_finish_in_the_draining_process() {
    let desk = desk_with_slow_updates(&[Duration::from_secs(2)]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = slow_update_config(dir.path(), "shutdown_grace = \"30s\"", "");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let mut server = Server::start(&config, &db, desk.base_url());
    let sync = tokio::spawn({
        let (client, url) = (client.clone(), server.url("/v1/agents/order_desk/runs"));
        async move {
            client
                .post(url)
                .header("content-type", "application/json")
                .body(r#"{"input": "Move order A-1001."}"#)
                .send()
                .await
        }
    });
    updates_reached(&desk, 1).await;
    server.signal(Signal::SIGTERM);

    // While it drains, a load balancer sees it unready and new work is
    // refused; the run in flight goes on.
    let until = tokio::time::Instant::now() + GENEROUS;
    loop {
        let ready = client.get(server.url("/readyz")).send().await.unwrap();
        if ready.status() == 503 {
            let problem: Value = ready.json().await.unwrap();
            assert!(problem["type"].as_str().unwrap().ends_with("/draining"));
            break;
        }
        assert!(
            tokio::time::Instant::now() < until,
            "/readyz never said 503"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = submit(&client, &server, "queued").await;
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));

    let answer = sync.await.unwrap().unwrap();
    assert_eq!(answer.status(), 200);
    let run: Value = answer.json().await.unwrap();
    assert_eq!(run["status"], "succeeded", "{run}");
    let status = server.wait_exit(GENEROUS);
    assert_eq!(status.code(), Some(0));
    let line = server.wait_for_log("drained in", Duration::from_secs(5));
    assert!(
        line.contains("finished 1 run(s)") && line.contains(run["run_id"].as_str().unwrap()),
        "{line}"
    );
    assert!(line.contains("handed on 0 run(s)"), "{line}");
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_servers_queued_run_is_taken_over_before_its_lease_expires() {
    let desk = desk_with_slow_updates(&[Duration::from_secs(8)]).await;
    let dir = tempfile::tempdir().unwrap();
    // A long lease: waiting for it would take a minute.
    let config = slow_update_config(
        dir.path(),
        "",
        "[server.queue]\nlease = \"60s\"\nworkers = 1\n",
    );
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();

    let first = Server::start(&config, &db, desk.base_url());
    let accepted = submit(&client, &first, "queued").await;
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    updates_reached(&desk, 1).await;
    let store = SqliteStore::open(&db).unwrap();
    let run_id = rein_core::RunId::new(location.rsplit('/').next().unwrap().to_owned()).unwrap();
    let claim = store
        .leases_of_run(&run_id)
        .await
        .unwrap()
        .into_iter()
        .find(|l| l.kind == LeaseKind::Run)
        .expect("the first server holds the run's claim");
    first.kill();

    let second = Server::start(&config, &db, desk.base_url());
    let run = until_ended(&client, &second.url(&location)).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let resumed = store
        .events(&run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .find(|e| e.kind == EventKind::RunResumed)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_on_rein_run_leaves_it_resumable_and_the_printed_command_finishes_it() {
    let desk = desk_with_slow_updates(&[Duration::from_secs(5)]).await;
    let dir = tempfile::tempdir().unwrap();
    let config = slow_update_config(dir.path(), "", "");
    let db = dir.path().join("rein.db");
    let env = [
        ("ORDER_DESK_URL", desk.base_url()),
        ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "run",
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
        .stdout(Stdio::null())
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
    updates_reached(&desk, 1).await;
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, Signal::SIGINT).unwrap();
    let rest: Vec<String> =
        tokio::task::spawn_blocking(move || stderr.map_while(Result::ok).collect())
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

    // Recorded as interrupted and resumable, not cancelled.
    let store = SqliteStore::open(&db).unwrap();
    let id = rein_core::RunId::new(run_id.clone()).unwrap();
    let record = store.get_run(&id).await.unwrap().unwrap();
    assert_eq!(record.status, rein_store::RunStatus::Running);
    assert_eq!(
        kinds(&store, &id).await.last(),
        Some(&EventKind::RunInterrupted)
    );

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
        rein_store::RunStatus::Finished(rein_core::Outcome::Succeeded)
    );
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1, "no duplicate");
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}

//! Issue 18, item 4: `rein runs list --follow` keeps the listing live, from
//! a `rein serve` (a table) and from the store file it writes (one JSON
//! object per line): a queued run appears, its status changes appear as
//! they happen (held `running` at the desk, then `succeeded` once
//! released), a later run appears too, and Ctrl-C ends the follower with
//! status 0. Real processes; every wait is on an output line or on the
//! desk holding the call, never on a sleep.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, OrderDesk, OrderDeskConfig, UPDATE_DELIVERY_TIME};
use serde_json::Value;

mod common;
use common::{Server, example_config};

/// A bound that fails a test rather than measures it.
const GENEROUS: Duration = Duration::from_secs(60);

/// The example config where an update may take up to 5 s (p99), so rein
/// gives the call the desk holds 10 s instead of timing it out: the run
/// stays `running` until the test releases it.
fn patient_config(dir: &Path) -> std::path::PathBuf {
    let path = example_config(dir, "");
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

/// A running follower: its process and the lines of its stdout.
struct Follower {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Follower {
    fn start(args: &[&str]) -> Follower {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(["runs", "list", "--follow"])
            .args(args)
            .env_remove("REIN_API_KEY")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (send, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Follower {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one satisfies `found`; that line.
    fn until(&mut self, what: &str, found: impl Fn(&str) -> bool) -> String {
        let deadline = std::time::Instant::now() + GENEROUS;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if found(&line) {
                        return line;
                    }
                }
                Err(e) => panic!("no line with {what} ({e}); lines: {:#?}", self.seen),
            }
        }
    }

    /// Ctrl-C: the follower ends with status 0.
    fn interrupt(mut self) {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap()),
            nix::sys::signal::Signal::SIGINT,
        )
        .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "Ctrl-C ends the follow cleanly: {status}");
    }
}

/// A table row of `run` with `status`.
fn row(run: &str, status: &str) -> impl Fn(&str) -> bool {
    let (run, status) = (run.to_owned(), status.to_owned());
    move |line: &str| {
        let cells: Vec<&str> = line.split_whitespace().collect();
        cells.first() == Some(&run.as_str()) && cells.get(3) == Some(&status.as_str())
    }
}

/// A JSON line of `run` with `status`.
fn object(run: &str, status: &str) -> impl Fn(&str) -> bool {
    let (run, status) = (run.to_owned(), status.to_owned());
    move |line: &str| {
        let value: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not one JSON object per line ({e}): {line}"));
        value["run_id"] == run.as_str() && value["status"] == status.as_str()
    }
}

async fn submit(client: &reqwest::Client, server: &Server) -> String {
    let accepted = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001.", "mode": "queued"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(accepted.status(), 202);
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    location.rsplit('/').next().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_their_status_changes_appear_live_from_a_server_and_a_store_file() {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::Hold)),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = patient_config(dir.path());
    let db = dir.path().join("rein.db");
    let server = Server::start_async(&config, &db, desk.base_url()).await;
    let client = reqwest::Client::new();
    // One run before the followers start: it is in the first listing.
    let before = submit(&client, &server).await;
    assert!(
        desk.until_held(1, GENEROUS).await,
        "the first update is held"
    );

    let url = server.url("");
    let db_arg = db.display().to_string();
    let held = before.clone();
    let (mut table, mut lines) = tokio::task::spawn_blocking(move || {
        let mut table = Follower::start(&["--server", &url]);
        let mut lines = Follower::start(&["--json", "--data", &db_arg]);
        let header = table.until("the header", |l| l.starts_with("RUN "));
        assert!(header.contains("STATUS"), "{header}");
        // Held at the desk: running, in both.
        table.until("the held run running", row(&held, "running"));
        lines.until("the held run running", object(&held, "running"));
        (table, lines)
    })
    .await
    .unwrap();

    // Released: its change to succeeded appears as it happens.
    desk.release_held();
    let after = submit(&client, &server).await;
    let (before2, after2) = (before.clone(), after.clone());
    tokio::task::spawn_blocking(move || {
        table.until("the released run succeeded", row(&before2, "succeeded"));
        lines.until("the released run succeeded", object(&before2, "succeeded"));
        // A run created after the followers started appears and ends.
        table.until("the later run succeeded", row(&after2, "succeeded"));
        lines.until("the later run succeeded", object(&after2, "succeeded"));
        // Each run is shown once per status it had: no repeated line.
        for (follower, run) in [(&table, &before2), (&lines, &after2)] {
            let mut shown: Vec<&String> = follower
                .seen
                .iter()
                .filter(|l| l.contains(run.as_str()))
                .collect();
            let all = shown.len();
            shown.dedup();
            assert_eq!(shown.len(), all, "{:#?}", follower.seen);
        }
        table.interrupt();
        lines.interrupt();
    })
    .await
    .unwrap();
    assert_ne!(before, after);
    server.kill_async().await;
}

//! The embedding example (`examples/embed_own_loop.rs`), killed mid-run
//! for real and resumed: the order desk holds the example's move (so the
//! kill lands while the write is in flight, synchronised on the desk
//! having it, not on a sleep), the process is SIGKILLed, the held move is
//! then applied without anyone to answer, and the example started again
//! with `--resume` finishes the run. The desk's own log shows one move and
//! one email.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use rein_core::{LedgerStatus, Outcome, RunId};
use rein_store::{RunStatus, RunStore};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{Fault, OrderDesk, SEND_EMAIL, UPDATE_DELIVERY_TIME};

/// The example's binary, built if this test runs alone (`cargo test
/// --workspace` builds examples).
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let debug = exe.parent().unwrap().parent().unwrap();
    let path = debug.join("examples").join("embed_own_loop");
    if !path.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let built = Command::new(cargo)
            .args(["build", "-p", "rein-engine", "--example", "embed_own_loop"])
            .status()
            .unwrap();
        assert!(built.success(), "the example builds");
    }
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_mid_write_and_resumed_the_example_moves_once_and_emails_once() {
    let desk = OrderDesk::start().await.unwrap();
    desk.push_fault(UPDATE_DELIVERY_TIME, Fault::Hold).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("embed.db");
    let bin = example();

    let mut first = Command::new(&bin)
        .args(["--desk", desk.base_url(), "--data"])
        .arg(&data)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    let run_id = lines
        .next()
        .unwrap()
        .unwrap()
        .strip_prefix("run: ")
        .expect("the example names its run first")
        .to_owned();
    assert!(
        desk.until_held(1, Duration::from_secs(60)).await,
        "the move reached the desk"
    );
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    // The write lands now, with nobody to answer: in doubt for rein.
    desk.release_held();

    let second = Command::new(&bin)
        .args(["--desk", desk.base_url(), "--data"])
        .arg(&data)
        .args(["--resume", &run_id])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&second.stdout);
    assert!(second.status.success(), "{said}");
    assert!(said.contains("ended: succeeded"), "{said}");

    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1, "moved once");
    assert_eq!(desk.applied_count(SEND_EMAIL), 1, "emailed once");
    let store = SqliteStore::open(&data).unwrap();
    let run_id = RunId::new(run_id).unwrap();
    let record = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Finished(Outcome::Succeeded));
    let ledger = store.ledger(&run_id).await.unwrap();
    assert_eq!(ledger.len(), 2);
    assert!(
        ledger.iter().all(|r| r.status == LedgerStatus::Succeeded),
        "{ledger:?}"
    );
    let report = record.report.unwrap();
    assert!(report.resume.is_some(), "the report says it was taken back");
}

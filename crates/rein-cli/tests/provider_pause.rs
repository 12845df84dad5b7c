//! A provider's 429 pause holds for every process on the store, not just
//! the one that got it (issue 15 item 2, issue 16 item 4): two real
//! `rein serve` processes on one store and one mock model that answers
//! its first request 429 with `Retry-After` and holds it (a request
//! inside the window is answered 429 again and counted as hammering).
//! After the first server got the 429 and published its pause, a run on
//! the second sends nothing to the provider until the pause ends: the
//! mock counts no request inside the window.
//!
//! The test shows it can fail: with `REIN_SABOTAGE=unshared_provider_pause`
//! (a test build only) the pause stays the first server's, and the second
//! calls into it. The processes are synchronized on the first server's
//! log (the pause published), never on sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use rein_store_postgres::scratch::ScratchDatabase;
use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};

mod common;
use common::{Server, serve_command};

/// The provider's `Retry-After`, in seconds: long enough that the second
/// server's run starts inside it on a loaded machine.
const PAUSE_SECS: u64 = 5;

fn config(model_url: &str) -> String {
    format!(
        r#"
[providers.primary]
kind = "openai"
base_url = "{model_url}"
max_output_tokens = {{ "mock-model" = 256 }}

[agents.chat]
provider = "primary"
model = "mock-model"
system_prompt = "Answer in one line."
tools = []
[agents.chat.budget]
wall_clock = "120s"
max_steps = 3
"#
    )
}

async fn serve(dir: &Path, data: &Path, sabotage: &str) -> Server {
    let command = serve_command(
        std::process::Command::new(env!("CARGO_BIN_EXE_rein")),
        &dir.join("rein.toml"),
        data,
        &[("REIN_SABOTAGE", sabotage), ("RUST_LOG", "info")],
    );
    Server::spawn_async(command).await
}

/// One sync run of the chat agent on each server, the second started once
/// the first server got its 429 (and published the pause, unless
/// sabotaged); the requests the mock got inside the pause window.
async fn hammered_during_the_pause(data: &Path, sabotage: &str) -> usize {
    let mock = MockModel::start_with(
        MockModelConfig::new([Reply::rate_limited(Some(RetryAfter::Seconds(PAUSE_SECS)))])
            .with_fallback_text("hello")
            .with_enforced_retry_after(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rein.toml"),
        config(&mock.openai_base_url()),
    )
    .unwrap();
    let one = serve(dir.path(), data, sabotage).await;
    let two = serve(dir.path(), data, sabotage).await;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let first = tokio::spawn(common::limits::sync_run(
        client.clone(),
        one.url(""),
        "chat",
        "Say hello.",
    ));
    // The first server got the 429: its pause is in its gate, and (unless
    // sabotaged) in the store before its run goes on.
    let told = if sabotage.is_empty() {
        "published a provider's 429 pause"
    } else {
        "provider answered 429"
    };
    tokio::task::block_in_place(|| one.wait_for_line(|line| line.contains(told)));
    assert_eq!(
        mock.request_count(),
        1,
        "only the first server's call so far"
    );
    let second = common::limits::sync_run(client.clone(), two.url(""), "chat", "Say hello.").await;
    assert_eq!(second, "succeeded");
    assert_eq!(first.await.unwrap(), "succeeded");
    let arrivals = mock.arrivals();
    let hammered = mock.hammered();
    eprintln!(
        "requests at the model: {} (hammered {hammered}, sabotage {sabotage:?}), arrivals after the 429: {:?}",
        arrivals.len(),
        arrivals
            .iter()
            .map(|a| a.saturating_duration_since(arrivals[0]))
            .collect::<Vec<_>>()
    );
    one.kill_async().await;
    two.kill_async().await;
    if sabotage.is_empty() {
        // By request time too: nothing between the 429 and its end.
        let window = Duration::from_secs(PAUSE_SECS);
        assert!(
            arrivals[1..]
                .iter()
                .all(|a| a.saturating_duration_since(arrivals[0]) >= window),
            "a request inside the pause: {arrivals:?}"
        );
        assert_eq!(arrivals.len(), 3, "the 429, the retry, the second run");
    }
    hammered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_one_server_was_told_holds_the_other_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let hammered = hammered_during_the_pause(&dir.path().join("rein.db"), "").await;
    assert_eq!(hammered, 0, "a server called the provider inside its pause");
}

/// The sabotage switch exists only in `crash-points` builds, which the
/// tests of this crate use.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_pause_unshared_the_other_server_calls_into_it() {
    let dir = tempfile::tempdir().unwrap();
    let hammered =
        hammered_during_the_pause(&dir.path().join("rein.db"), "unshared_provider_pause").await;
    assert!(
        hammered >= 1,
        "the second server must call inside the pause"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pause_one_server_was_told_holds_the_other_on_postgres() {
    let Some(database) = ScratchDatabase::create("cli_pause").await else {
        return;
    };
    let data = std::path::PathBuf::from(database.url_text());
    let hammered = hammered_during_the_pause(&data, "").await;
    database.drop_database().await;
    assert_eq!(hammered, 0, "a server called the provider inside its pause");
}

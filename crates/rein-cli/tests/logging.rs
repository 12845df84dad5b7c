//! Issue 12 item 4 (logging): `RUST_LOG` and `--log-level` decide what a
//! real `rein` process logs, `--log-format json` writes lines a shipper
//! parses, stderr off a terminal has no colour codes, and a breaker
//! opening is logged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// An agent whose one tool refuses connections, with a breaker that opens
/// on the first failure.
fn config(dir: &Path) -> std::path::PathBuf {
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [
  {"text": "", "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"id": "A-1"}}],
   "usage": {"input": 10, "output": 5}},
  {"text": "Could not look it up.", "usage": {"input": 20, "output": 5}}
]}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("rein.toml"),
        r#"
[providers.script]
kind = "scripted"
script = "script.json"

# Never called; its key is too short to be redacted, which `rein run`
# warns about (a line of the rein binary, not of rein_engine).
[providers.unused]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "LOGGING_SHORT_KEY"

[resource_groups.api]

[tools.lookup]
description = "Look a thing up."
class = "read"
resource_group = "api"
side_effect_tier = "none"
owner = "ops"
latency = { mode = "observe", fallback_p99 = "1s" }
schema = { type = "object", properties = { id = { type = "string", description = "the id" } } }
adapter = { kind = "http", url = "http://127.0.0.1:1/tools/lookup" }

[agents.a]
provider = "script"
model = "m"
tools = ["lookup"]
[agents.a.retry]
max_attempts = 1

[breakers.tool]
consecutive_failures = 1
"#,
    )
    .unwrap();
    dir.join("rein.toml")
}

/// `rein [flags] run` of the agent, with `rust_log` as `RUST_LOG`.
fn run(dir: &Path, flags: &[&str], rust_log: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
    cmd.args(flags)
        .args(["run", "-c"])
        .arg(config(dir))
        .args(["-a", "a", "-i", "look up A-1", "--json", "--data"])
        .arg(dir.join("rein.db"))
        .env("LOGGING_SHORT_KEY", "abc");
    match rust_log {
        Some(filter) => cmd.env("RUST_LOG", filter),
        None => cmd.env_remove("RUST_LOG"),
    };
    cmd.output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_breaker_opening_is_logged_at_the_default_level_without_colour() {
    let dir = tempfile::tempdir().unwrap();
    let log = stderr(&run(dir.path(), &[], None));
    assert!(
        log.contains("circuit breaker opened") && log.contains("lookup"),
        "{log}"
    );
    assert!(
        !log.contains('\u{1b}'),
        "no ANSI codes off a terminal: {log:?}"
    );
    assert!(!log.contains(" event "), "no debug lines by default: {log}");
}

#[test]
fn rust_log_debug_adds_every_event() {
    let dir = tempfile::tempdir().unwrap();
    let log = stderr(&run(dir.path(), &[], Some("rein_engine=debug")));
    assert!(log.contains("kind=\"run_started\""), "{log}");
    assert!(log.contains("kind=\"tool_call_finished\""), "{log}");
}

#[test]
fn log_level_is_the_default_and_rust_log_wins_where_it_speaks() {
    let dir = tempfile::tempdir().unwrap();
    let quiet = stderr(&run(dir.path(), &["--log-level", "error"], None));
    assert!(!quiet.contains("circuit breaker opened"), "{quiet}");
    let dir = tempfile::tempdir().unwrap();
    let loud = stderr(&run(dir.path(), &["--log-level", "error"], Some("warn")));
    assert!(loud.contains("circuit breaker opened"), "{loud}");
    let dir = tempfile::tempdir().unwrap();
    let debug = stderr(&run(dir.path(), &["--log-level", "debug"], None));
    assert!(debug.contains("kind=\"run_started\""), "{debug}");
}

/// Issue 12 (review): `RUST_LOG=rein_engine=debug` replaced `--log-level`
/// instead of layering on it, silencing every other target; and
/// `RUST_LOG=hyper=warn` (the README's example) silenced rein entirely.
#[test]
fn rust_log_for_one_target_layers_on_the_level_of_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let log = stderr(&run(dir.path(), &[], Some("rein_engine=debug")));
    assert!(log.contains("kind=\"run_started\""), "{log}");
    assert!(
        log.contains("providers.unused.api_key_env") && log.contains("not redacted"),
        "the CLI's warning stays at the default level: {log}"
    );
    let dir = tempfile::tempdir().unwrap();
    let log = stderr(&run(
        dir.path(),
        &["--log-level", "info"],
        Some("hyper=warn"),
    ));
    assert!(log.contains("circuit breaker opened"), "{log}");
    assert!(log.contains("providers.unused.api_key_env"), "{log}");
    let dir = tempfile::tempdir().unwrap();
    let log = stderr(&run(
        dir.path(),
        &["--log-level", "error"],
        Some("rein_engine=warn"),
    ));
    assert!(log.contains("circuit breaker opened"), "{log}");
    assert!(
        !log.contains("providers.unused.api_key_env"),
        "--log-level error still holds for the rest: {log}"
    );
}

#[test]
fn json_log_lines_parse_with_their_structured_fields() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["--log-format", "json"], Some("debug"));
    let log = stderr(&out);
    // Every line on stderr is a JSON object: the CLI's own notes too.
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let note = lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("rein run: run "))
        })
        .unwrap_or_else(|| panic!("no note of the run in {log}"));
    assert_eq!(note["target"], "rein::cli");
    let opened = lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("circuit breaker opened"))
        })
        .unwrap_or_else(|| panic!("no breaker line in {log}"));
    assert_eq!(opened["level"], "WARN");
    assert_eq!(opened["fields"]["arm"], "tool");
    assert_eq!(opened["fields"]["name"], "lookup");
    assert!(
        opened["fields"]["run"]
            .as_str()
            .is_some_and(|r| !r.is_empty())
    );
}

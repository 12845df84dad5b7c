//! The `rein` binary, run as a real process.
#![allow(clippy::expect_used)]

use std::process::Command;

fn rein(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(args)
        .output()
        .expect("the rein binary runs")
}

#[test]
fn version_prints_the_crate_version() {
    let out = rein(&["--version"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("rein {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn help_lists_the_commands() {
    let out = rein(&["--help"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Usage: rein"), "{text}");
    assert!(text.contains("key"), "{text}");
}

/// The key printed by the CLI is the pinned layout-v1 key (see
/// `rein_core::idempotency`), whatever the argument order and whitespace.
#[test]
fn key_prints_the_pinned_v1_key() {
    let out = rein(&[
        "key",
        "--tenant",
        "acme",
        "--intent",
        "intent-7",
        "--tool",
        "refund_order",
        r#"{ "trace_id": "t-2", "order_id": " A-1001 ", "amount": 25 }"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "484238a6a5d40e2fda10429b85386f675e039b947dec6dee56d80f5104bf4e86"
    );
}

#[test]
fn key_with_bad_json_fails_with_a_clear_message() {
    let out = rein(&[
        "key",
        "--tenant",
        "t",
        "--intent",
        "i",
        "--tool",
        "x",
        "{not json",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ARGS must be a JSON value"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn key_for_an_irreversible_tool_explains_why_there_is_none() {
    let out = rein(&[
        "key",
        "--tenant",
        "t",
        "--intent",
        "i",
        "--tool",
        "send_email",
        "--class",
        "irreversible",
        "{}",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("never retried"));
}

/// Completions come from the same definitions as `--help`: every command
/// is in them, `handoff resolve` included.
#[test]
fn completions_name_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let out = rein(&["completions", shell]);
        assert!(out.status.success(), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        for command in ["handoff", "resolve", "dev", "approvals", "serve"] {
            assert!(script.contains(command), "{shell} lacks {command}");
        }
    }
    let out = rein(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is refused");
}

/// A reader that stops reading (`rein … | head -1`) ends the command
/// quietly with 0: the pipe is closed before rein writes, so its first
/// write fails with EPIPE.
#[test]
fn a_closed_stdout_ends_the_command_quietly() {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["completions", "bash"])
        .stdout(writer)
        .output()
        .expect("the rein binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A range is checked where it is parsed: a sample of no scenario is
/// refused, naming the flag.
#[test]
fn chaos_refuses_a_sample_of_zero() {
    let out = rein(&["chaos", "--sample", "0"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--sample") && stderr.contains("at least 1"),
        "{stderr}"
    );
}

/// No command that reads (or decides what) a store holds creates one: a
/// mistyped `--data` is an error naming the path, not a new empty store.
#[test]
fn no_reading_command_creates_a_store() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let missing = dir.path().join("typo").join("rein.db");
    let data = missing.to_str().expect("a UTF-8 path");
    for command in [
        &["runs", "list"][..],
        &["runs", "show", "r1"],
        &["runs", "events", "r1"],
        &["stats"],
        &["handoff", "r1"],
        &["handoff", "resolve", "r1", "i1", "--accepted"],
        &["approvals", "list"],
        &["approve", "r1", "i1"],
        &["webhooks", "deliveries", "ops"],
        &["latency"],
        &["idempotency", "list"],
        &["migrate", "--check"],
    ] {
        let mut args = command.to_vec();
        args.extend(["--data", data]);
        let out = rein(&args);
        assert!(!out.status.success(), "{command:?} on a missing store");
        assert!(
            !dir.path().join("typo").exists(),
            "{command:?} created {}",
            missing.display()
        );
    }
}

/// `-h` and `--help` open with the same sentence about rein.
#[test]
fn short_help_opens_as_the_long_help_does() {
    let short = String::from_utf8_lossy(&rein(&["-h"]).stdout).into_owned();
    let long = String::from_utf8_lossy(&rein(&["--help"]).stdout).into_owned();
    // clap drops the period of the one-line form.
    let first = |text: &str| {
        text.lines()
            .next()
            .unwrap_or_default()
            .trim_end_matches('.')
            .to_owned()
    };
    assert_eq!(first(&short), first(&long));
    assert!(first(&short).starts_with("rein — a runtime"), "{short}");
}

/// Values are spelled as config and JSON spell them, and `check` takes
/// `-c/--config` as every other command does.
#[test]
fn flags_take_the_spellings_config_uses() {
    let snake = rein(&[
        "key",
        "--tenant",
        "t",
        "--intent",
        "i",
        "--tool",
        "x",
        "--class",
        "idempotent_write",
        "{}",
    ]);
    let kebab = rein(&[
        "key",
        "--tenant",
        "t",
        "--intent",
        "i",
        "--tool",
        "x",
        "--class",
        "idempotent-write",
        "{}",
    ]);
    assert!(
        snake.status.success(),
        "{}",
        String::from_utf8_lossy(&snake.stderr)
    );
    assert_eq!(snake.stdout, kebab.stdout);

    let dir = tempfile::tempdir().expect("a temp dir");
    let config = dir.path().join("rein.toml");
    std::fs::write(&config, "[tools.t]\ndescripton = \"x\"\n").expect("written");
    let path = config.to_str().expect("utf-8");
    let positional = rein(&["check", path, "--json"]);
    let flag = rein(&["check", "-c", path, "--json"]);
    assert_eq!(positional.status.code(), Some(1));
    assert_eq!(positional.stdout, flag.stdout);
    assert!(String::from_utf8_lossy(&flag.stdout).contains("descripton"));
}

/// `migrate --check` of a file that is not there says so, and leaves it
/// not there.
#[test]
fn migrate_check_of_a_missing_store_refuses_and_creates_nothing() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let typo = dir.path().join("typo.db");
    let out = rein(&[
        "migrate",
        "--check",
        "--data",
        typo.to_str().expect("utf-8"),
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no run store at"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!typo.exists());
}

/// `rein latency --config` reads profiles and calls nothing: the URLs the
/// example reads from the environment need not be set.
#[test]
fn latency_reads_a_config_whose_url_variables_are_unset() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/order-desk");
    let dir = tempfile::tempdir().expect("a temp dir");
    let data = dir.path().join("none.db");
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "latency",
            "-c",
            example,
            "--data",
            data.to_str().expect("utf-8"),
        ])
        .env_remove("ORDER_DESK_URL")
        .env_remove("MOCK_MODEL_URL")
        .output()
        .expect("the rein binary runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    // Past the config: what stops it is the missing store.
    assert!(!stderr.contains("environment variable"), "{stderr}");
    assert!(stderr.contains("none.db"), "{stderr}");
}

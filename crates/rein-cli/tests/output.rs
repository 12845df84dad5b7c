//! The human output of the commands a newcomer meets first, pinned with
//! insta (issue 37): `rein demo`, `rein check` on a config with problems
//! in every section, and `rein runs show`. A wording, a plural or a unit
//! that changes shows up as a snapshot diff to review.
//!
//! What varies between runs is replaced before the comparison: run ids,
//! loopback ports, dates, temporary paths and measured durations (the
//! timeline's offsets, `in 5 ms`). Counts, steps, tokens, outcomes and
//! every sentence stay.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn rein(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(args)
        .current_dir(dir)
        .env_remove("REIN_CRASH_AT")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The replacements that make one run's output the next one's.
fn settings(dir: &Path) -> insta::Settings {
    let mut settings = insta::Settings::clone_current();
    settings.add_filter(&regex_escape(&dir.display().to_string()), "[DIR]");
    settings.add_filter(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}",
        "[RUN_ID]",
    );
    settings.add_filter(r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]");
    settings.add_filter(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", "[DATE]");
    settings.add_filter(r"sha256:[0-9a-f]{64}", "sha256:[DIGEST]");
    // The timeline's offset column, then every measured duration.
    settings.add_filter(r"(?m)^\s*\d+\.\d{3}s  ", "  [T]  ");
    settings.add_filter(r"\b\d+(\.\d+)? (ms|s)\b", "[DUR]");
    settings
}

fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let special = "\\.+*?()|[]{}^$#&-~".contains(c);
            special.then_some('\\').into_iter().chain([c])
        })
        .collect()
}

#[test]
fn demo_and_runs_show_read_as_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let demo = rein(&["demo", "--data", "rein.db"], dir.path());
    assert!(
        demo.status.success(),
        "{}",
        String::from_utf8_lossy(&demo.stderr)
    );
    let text = stdout(&demo);
    let run_id = text
        .lines()
        .find_map(|l| l.strip_prefix("run "))
        .expect("the demo names its run")
        .trim()
        .to_owned();
    let show = rein(&["runs", "show", &run_id, "--data", "rein.db"], dir.path());
    assert!(
        show.status.success(),
        "{}",
        String::from_utf8_lossy(&show.stderr)
    );
    settings(dir.path()).bind(|| {
        insta::assert_snapshot!("demo", text);
        insta::assert_snapshot!("runs_show", stdout(&show));
    });
}

#[test]
fn check_on_a_bad_config_reads_as_pinned() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("rein.toml"),
        r#"[providers.openai]
kind = "openai"
base_url = "not a url"

[resource_groups.desk]
rate_per_sec = -1

[tools.lookup]
descripton = "Looks an order up."

[tools.move_order]
description = "Moves an order's delivery date."
class = "idempotent_write"
schema = { type = "object", properties = { order_id = { type = "string" } } }
adapter = { kind = "http", url = "http://127.0.0.1:9/move", program = "./move.sh" }
compensation = { tool = "nothing" }

[agents.assistant]
provider = "openai"
model = "gpt-4o-mini"
tools = ["move_order", "unknown_tool"]
budget = { max_steps = 0, wall_clock = "400d" }
"#,
    )
    .unwrap();
    let out = rein(&["check", "rein.toml"], dir.path());
    assert_eq!(out.status.code(), Some(1));
    let text = format!("{}{}", stdout(&out), String::from_utf8_lossy(&out.stderr));
    settings(dir.path()).bind(|| insta::assert_snapshot!("check_bad_config", text));
}

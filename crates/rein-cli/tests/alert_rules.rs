//! The shipped Prometheus rules (`deploy/prometheus/rein-alerts.yml`) are
//! valid (`promtool check rules`) and behave as their unit tests say
//! (`promtool test rules`: each alert fires where it should and stays
//! silent where it should not), and every rein series they read is
//! documented in README.md's metrics table.
//!
//! `promtool` comes from Debian's `prometheus` package (`.ci/run` installs
//! it); without it this test is skipped outside CI and fails under
//! `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::process::Command;

mod common;

fn rules_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy/prometheus")
}

/// Runs `promtool ARGS` in the rules' folder: its output, or `None` (the
/// test then skipped) when promtool is missing.
fn promtool(args: &[&str]) -> Option<(bool, String)> {
    match Command::new("promtool")
        .args(args)
        .current_dir(rules_dir())
        .output()
    {
        Ok(out) => Some((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )),
        Err(e) => {
            common::missing_part(&format!(
                "promtool not found ({e}): `apt-get install prometheus` (.ci/run does)"
            ));
            None
        }
    }
}

#[test]
fn the_shipped_rules_are_valid_and_their_unit_tests_pass() {
    let Some((ok, out)) = promtool(&["check", "rules", "rein-alerts.yml"]) else {
        return;
    };
    assert!(ok, "promtool check rules:\n{out}");
    let Some((ok, out)) = promtool(&["test", "rules", "rein-alerts.test.yml"]) else {
        return;
    };
    assert!(ok, "promtool test rules:\n{out}");
    assert!(out.contains("SUCCESS"), "{out}");
}

#[test]
fn every_series_the_rules_read_is_in_the_readmes_metrics_table() {
    let rules = std::fs::read_to_string(rules_dir().join("rein-alerts.yml")).unwrap();
    // The families rein registers, by the names the README documents.
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let mut read = Vec::new();
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')) {
        if word.starts_with("rein_") {
            // A histogram is read through its buckets.
            let family = word.strip_suffix("_bucket").unwrap_or(word);
            read.push(family.to_owned());
        }
    }
    assert!(!read.is_empty());
    for family in read {
        assert!(
            readme.contains(&format!("`{family}`")),
            "the rules read {family}, which README.md's metrics table does not list"
        );
    }
}

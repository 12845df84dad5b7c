//! `rein chaos --all` as CI runs it: the real binary, every scenario not
//! marked long (crash scenarios abort real worker processes), zero
//! invariant violations, and every mechanism the issue lists activated.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use serde_json::Value;

fn rein(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(args)
        .env_remove("REIN_CRASH_AT")
        .output()
        .expect("the rein binary runs")
}

#[test]
fn the_whole_suite_holds_every_invariant_and_fires_every_mechanism() {
    let out = rein(&["chaos", "--all", "--json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let doc: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "--json prints JSON ({e}): {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let summary = &doc["summary"];
    let scenarios = doc["scenarios"].as_array().unwrap();
    let violations: Vec<&Value> = scenarios
        .iter()
        .flat_map(|s| s["violations"].as_array().unwrap())
        .collect();
    assert!(
        violations.is_empty(),
        "invariant violations: {violations:#?}"
    );
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    assert_eq!(summary["errors"], 0, "harness errors: {stdout}");
    assert_eq!(summary["skipped"], 0);
    assert!(summary["ran"].as_u64().unwrap() >= 40);
    assert_eq!(
        summary["never_fired"].as_array().unwrap().len(),
        0,
        "every required mechanism fires: {}",
        summary["never_fired"]
    );
    for s in scenarios {
        assert_eq!(
            s["missing"].as_array().unwrap().len(),
            0,
            "{} expects mechanisms that did not fire: {}",
            s["label"],
            s["missing"]
        );
        assert_eq!(s["long"], false, "CI never runs long scenarios");
    }
}

#[test]
fn the_catalog_lists_scenarios_by_layer() {
    let out = rein(&["chaos", "--list", "--json"]);
    assert!(out.status.success());
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let list = list.as_array().unwrap();
    assert!(list.len() >= 43);
    assert!(list.iter().any(|s| s["long"] == true));
    for layer in ["network", "tool_adapter", "model_gateway", "orchestration"] {
        assert!(list.iter().any(|s| s["layer"] == layer), "{layer}");
    }
}

#[test]
fn an_unknown_scenario_is_a_clear_error() {
    let out = rein(&["chaos", "--scenario", "C999"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("C999") && stderr.contains("--list"),
        "{stderr}"
    );
}

#[test]
fn a_selection_is_required() {
    let out = rein(&["chaos"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--all"));
}

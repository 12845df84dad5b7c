//! Observed latency across real processes: two `rein run` processes on one
//! store file against the order desk with an injected delay; the second
//! plans its first call with what the first observed, and `rein latency`
//! shows the sum of both.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};
use serde_json::{Value, json};

mod common;
use common::latency::{self, latency_json, lookup, rein, subject};

/// Calls per run; also `min_samples`.
const LOOKUPS: usize = 3;
/// The desk's delay of every lookup.
const DELAY: Duration = Duration::from_millis(40);

const CONFIG: &str = r#"
[providers.replay]
kind = "scripted"
script = "script.json"

[resource_groups.order_api]
max_concurrency = 8

[tools.get_order]
description = "Look up one order."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
schema = { type = "object", properties = { order_id = { type = "string", description = "The order id." } }, required = ["order_id"] }
latency = { mode = "observe", fallback_p99 = "5s", min_samples = 3, allowance_factor = 3 }
adapter = { kind = "http", url = "${ORDER_DESK_URL}/tools/get_order" }

[agents.desk]
provider = "replay"
model = "m"
system_prompt = "Look orders up."
tools = ["get_order"]
[agents.desk.budget]
wall_clock = "60s"
max_steps = 10
[agents.desk.loop_guard]
max_repeats = 10
no_progress_window = 10
"#;

fn write_config(dir: &Path) -> PathBuf {
    let ids = ["A-1001", "A-1002", "A-1003"];
    let turns = (0..LOOKUPS)
        .map(|n| lookup(json!({"order_id": ids[n]})))
        .collect();
    latency::write_config(dir, CONFIG, turns)
}

/// The allowance of every tool attempt of a `rein run --json` document.
fn allowances(out: &Output) -> Vec<u64> {
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_call_started")
        .map(|e| e["data"]["allowance_ms"].as_u64().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_rein_run_plans_with_what_the_first_observed_and_rein_latency_shows_both() {
    let faults = Faults::none().always(GET_ORDER, Fault::Delay(DELAY));
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let url = desk.base_url();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path()).display().to_string();
    let db = dir.path().join("data/rein.db").display().to_string();
    let run = [
        "run", "--config", &config, "--agent", "desk", "--input", "Look.", "--data", &db, "--json",
    ];
    let fallback_allowance = 3 * 5_000;

    // The first process has fewer than min_samples before each call: the
    // fallback throughout.
    let first = allowances(&rein(&run, url).await);
    assert_eq!(first, vec![fallback_allowance; LOOKUPS]);

    // The second process starts from the stored profile.
    let second = allowances(&rein(&run, url).await);
    assert_eq!(second.len(), LOOKUPS);
    let least = 3 * u64::try_from(DELAY.as_millis()).unwrap();
    assert!(
        second[0] != fallback_allowance && second[0] >= least,
        "the second process's first call is planned on the observed p99 × 3: {second:?}"
    );

    // `rein latency` reads the store: both processes' samples.
    let doc = latency_json(&db, &config, url).await;
    let tool = subject(&doc, "tool:get_order");
    assert_eq!(tool["observed"]["samples"], 2 * LOOKUPS as u64);
    let delay_us = u64::try_from(DELAY.as_micros()).unwrap();
    assert!(
        tool["observed"]["p50_us"].as_u64().unwrap() >= delay_us * 99 / 100,
        "{tool:#}"
    );
    assert_eq!(tool["tool"]["mode"], "observe");
    assert_eq!(tool["tool"]["planned"], "observed");
    assert_eq!(tool["tool"]["declared_p99_us"], 5_000_000);
    assert_eq!(tool["tool"]["allowance_factor"], 3.0);
    let model = subject(&doc, "model:replay/m");
    assert_eq!(model["observed"]["samples"], 2 * (LOOKUPS as u64 + 1));
    assert_eq!(doc["corrupt"], json!([]));

    // The table, in human units.
    let out = rein(&["latency", "--data", &db, "--config", &config], url).await;
    let table = String::from_utf8_lossy(&out.stdout);
    let line = table
        .lines()
        .find(|l| l.starts_with("tool:get_order"))
        .unwrap_or_else(|| panic!("{table}"));
    assert!(
        line.contains("observe") && line.contains("observed") && line.contains("ms"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rein_latency_without_a_store_says_so() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("none.db").display().to_string();
    let out = rein(&["latency", "--data", &db], desk.base_url()).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no run store at"));
    assert!(
        !dir.path().join("none.db").exists(),
        "reading creates no store"
    );
}

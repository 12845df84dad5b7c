//! Argument-scale buckets of observed latency, through the binary: `rein
//! check` refuses a scale that cannot work, naming file and field; real
//! `rein run` processes against the order desk (2 ms per row asked for)
//! fill one bucket per size, and `rein latency` shows a row per bucket
//! with what a call of that size is planned with.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};
use serde_json::{Value, json};

mod common;
use common::latency::{self, latency_json, lookup, rein, subject};

const TOOL: &str = r#"
[resource_groups.order_api]
max_concurrency = 8

[tools.get_order]
description = "Look up one order and its history rows."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
schema = { type = "object", properties = { order_id = { type = "string", description = "The order id." }, rows = { type = "integer", description = "History rows to return." } }, required = ["order_id"] }
adapter = { kind = "http", url = "${ORDER_DESK_URL}/tools/get_order" }
"#;

const AGENT: &str = r#"
[providers.replay]
kind = "scripted"
script = "script.json"

[agents.desk]
provider = "replay"
model = "m"
system_prompt = "Look orders up."
tools = ["get_order"]
[agents.desk.budget]
wall_clock = "60s"
max_steps = 20
[agents.desk.loop_guard]
max_repeats = 20
no_progress_window = 20
"#;

const SCALED: &str = r#"
[tools.get_order.latency]
mode = "observe"
fallback_p99 = "5s"
min_samples = 3
[tools.get_order.latency.scale]
arg = "args.rows"
buckets = [100, 1000]
"#;

/// Writes `rein.toml` (the tool with `latency`, the agent) and a script
/// looking up one order per entry of `rows`.
fn write_config(dir: &Path, latency: &str, rows: &[u64]) -> String {
    let turns = rows
        .iter()
        .map(|n| lookup(json!({"order_id": "A-1001", "rows": n})))
        .collect();
    latency::write_config(dir, &format!("{TOOL}{latency}{AGENT}"), turns)
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rein_check_refuses_a_scale_that_cannot_work_naming_file_and_field() {
    let field = "tools.get_order.latency.scale";
    let cases = [
        (
            SCALED.replace("[100, 1000]", "[1000, 100]"),
            format!(
                "{field}.buckets: must be strictly ascending upper bounds, but 1000 is followed by 100"
            ),
        ),
        (
            SCALED.replace("[100, 1000]", "[]"),
            format!("{field}.buckets: must list at least one upper bound"),
        ),
        (
            SCALED.replace("\"args.rows\"", "\"rows\""),
            format!("{field}.arg: must be `args.<path>`"),
        ),
        (
            SCALED.replace("\"args.rows\"", "\"args.limit\""),
            format!(
                "{field}.arg: reads `args.limit`, but the tool's schema has no argument `limit`"
            ),
        ),
        (
            SCALED.replace("arg = \"args.rows\"\n", ""),
            format!("{field}.arg: is required"),
        ),
        (
            "[tools.get_order.latency]\np50 = \"10ms\"\np95 = \"20ms\"\np99 = \"30ms\"\n\
             [tools.get_order.latency.scale]\narg = \"args.rows\"\nbuckets = [100]\n"
                .to_owned(),
            format!("{field}: is only for mode = \"observe\""),
        ),
    ];
    for (latency, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(dir.path(), &latency, &[1]);
        let out = rein(&["check", &config], "http://127.0.0.1:9").await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{latency}\n{stderr}");
        // `FILE:LINE:COL: field: message`: every refusal is placed.
        assert!(
            stderr
                .lines()
                .any(|l| placed(l, &config).is_some_and(|m| m.starts_with(&want))),
            "{stderr}\n  has no line starting with\n{config}:LINE:COL: {want}"
        );
    }
    // The same tool with a sound scale passes.
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), SCALED, &[1]);
    let out = rein(&["check", &config], "http://127.0.0.1:9").await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rein_latency_shows_a_row_per_bucket_with_its_own_plan() {
    let faults = Faults::none().always(
        GET_ORDER,
        Fault::DelayPerUnit {
            arg: "rows".into(),
            per_unit: Duration::from_millis(2),
        },
    );
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let url = desk.base_url();
    let dir = tempfile::tempdir().unwrap();
    // Two small calls (20 ms at the desk) and a large one (400 ms) per
    // process, three processes.
    let config = write_config(dir.path(), SCALED, &[10, 200, 10]);
    let db = dir.path().join("data/rein.db").display().to_string();
    let run = [
        "run", "--config", &config, "--agent", "desk", "--input", "Look.", "--data", &db, "--json",
    ];
    for _ in 0..2 {
        let out = rein(&run, url).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Each call's event names its bucket.
    let out = rein(&run, url).await;
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    let buckets: Vec<&str> = doc["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "tool_call_started")
        .map(|e| e["data"]["latency_bucket"].as_str().unwrap_or("none"))
        .collect();
    assert_eq!(buckets, ["0-100", "101-1000", "0-100"]);

    let doc = latency_json(&db, &config, url).await;
    // Six small calls: the small bucket is observed (2 × ~20 ms).
    let small = subject(&doc, "tool_scale:get_order/0-100");
    assert_eq!(small["observed"]["samples"], 6, "{small:#}");
    assert_eq!(small["tool"]["planned"], "observed", "{small:#}");
    assert_eq!(small["tool"]["scale"]["bucket"], "0-100");
    let small_allowance = small["tool"]["allowance_us"].as_u64().unwrap();
    assert!(small_allowance >= 40_000, "{small:#}");
    // Three large calls: observed too, with its own, larger, profile.
    let large = subject(&doc, "tool_scale:get_order/101-1000");
    assert_eq!(large["observed"]["samples"], 3, "{large:#}");
    assert_eq!(large["tool"]["planned"], "observed");
    let large_allowance = large["tool"]["allowance_us"].as_u64().unwrap();
    assert!(large_allowance >= 800_000, "{large:#}");
    assert!(
        small_allowance < large_allowance,
        "a small call is not planned like a large one: {small:#} {large:#}"
    );
    // The overflow bucket was never called: the fallback.
    let overflow = subject(&doc, "tool_scale:get_order/1001+");
    assert!(overflow["observed"].is_null(), "{overflow:#}");
    assert_eq!(overflow["tool"]["planned"], "fallback");
    assert_eq!(overflow["tool"]["allowance_us"], 10_000_000);
    // The tool-wide row sums them and names the scale.
    let tool = subject(&doc, "tool:get_order");
    assert_eq!(tool["observed"]["samples"], 9);
    assert_eq!(tool["tool"]["scale"]["arg"], "args.rows");
    assert_eq!(tool["tool"]["scale"]["buckets"], json!([100, 1000]));
    assert!(tool["tool"]["scale"]["bucket"].is_null());

    // The table: a line per bucket.
    let out = rein(&["latency", "--data", &db, "--config", &config], url).await;
    let table = String::from_utf8_lossy(&out.stdout);
    for (subject, planned) in [
        ("tool_scale:get_order/0-100", "observed"),
        ("tool_scale:get_order/101-1000", "observed"),
        ("tool_scale:get_order/1001+", "fallback (0/3)"),
    ] {
        let line = table
            .lines()
            .find(|l| l.starts_with(subject))
            .unwrap_or_else(|| panic!("no {subject} in\n{table}"));
        assert!(line.contains(planned), "{line}");
    }
}

/// What follows `FILE:LINE:COL: ` in `line`, if it names `file` with a
/// position.
fn placed<'a>(line: &'a str, file: &str) -> Option<&'a str> {
    let rest = line.strip_prefix(file)?.strip_prefix(':')?;
    let (row, rest) = rest.split_once(':')?;
    let (col, rest) = rest.split_once(':')?;
    row.parse::<u32>().ok()?;
    col.parse::<u32>().ok()?;
    rest.strip_prefix(' ')
}

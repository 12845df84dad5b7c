//! Health memory across `rein run` processes (issue 16 item 4): a tool
//! that asked one process to wait (429 with Retry-After) is not called by
//! the next `rein run` on the same store before that time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use rein_testkit::RetryAfter;
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};
use serde_json::{Value, json};

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
latency = { p50 = "20ms", p95 = "60ms", p99 = "120ms" }
adapter = { kind = "http", url = "${ORDER_DESK_URL}/tools/get_order" }

[agents.desk]
provider = "replay"
model = "m"
system_prompt = "Look orders up."
tools = ["get_order"]
[agents.desk.budget]
wall_clock = "60s"
max_steps = 5
"#;

/// One `rein run --json` process; its events.
async fn rein_run(dir: &std::path::Path, desk: &OrderDesk) -> Vec<Value> {
    let (dir, url) = (dir.to_owned(), desk.base_url().to_owned());
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(["run", "--config"])
            .arg(dir.join("rein.toml"))
            .args(["--agent", "desk", "--input", "Look.", "--json", "--data"])
            .arg(dir.join("rein.db"))
            .env("ORDER_DESK_URL", url)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("{}", String::from_utf8_lossy(&out.stderr)));
    doc["events"].as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_rein_run_honours_a_retry_after_the_last_one_was_given() {
    let faults = Faults::none().then(GET_ORDER, Fault::rate_limited(RetryAfter::Seconds(3_600)));
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let turns = json!({"turns": [
        {"tool_calls": [{"name": GET_ORDER, "arguments": {"order_id": "A-1001"}}]},
        {"text": "Done."}
    ]});
    std::fs::write(dir.path().join("script.json"), turns.to_string()).unwrap();
    std::fs::write(dir.path().join("rein.toml"), CONFIG).unwrap();

    rein_run(dir.path(), &desk).await;
    assert_eq!(desk.request_count(GET_ORDER), 1, "told to wait an hour");

    let events = rein_run(dir.path(), &desk).await;
    assert_eq!(
        desk.request_count(GET_ORDER),
        1,
        "the second process did not call it: {events:#?}"
    );
    let refused = events
        .iter()
        .find(|e| e["kind"] == "call_rejected")
        .unwrap();
    assert_eq!(refused["data"]["shared"], true, "{refused:#}");
    assert_eq!(refused["data"]["name"], GET_ORDER);
}

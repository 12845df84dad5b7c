//! Observed latency per argument-scale bucket (issue 16 item 1): a tool
//! whose latency grows with the rows it is asked for (the order desk
//! sleeps 2 ms per row, paused time) is measured and planned per bucket
//! of `args.rows`. After `min_samples` in a bucket, a call's allowance
//! follows its own bucket's profile — a small call's is small, a large
//! call's large — and a second engine on the same SQLite file plans with
//! the persisted buckets from its first call. A slowing of the large calls
//! alone is reported for their bucket.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::call;
use common::configured::{degradations, engine, registry, run, write_config};
use rein_core::event::{BaselineSource, ToolCallStarted};
use rein_core::latency::ScaleBucket;
use rein_core::{Event, EventData, Outcome};
use rein_store::HealthStore;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};
use serde_json::json;

/// Rows of a small call: 20 ms at the desk, bucket `0-100`.
const SMALL: u64 = 10;
/// Rows of a large call: 1 s at the desk, bucket `101-1000`.
const LARGE: u64 = 500;

const CONFIG: &str = r#"
[providers.replay]
kind = "scripted"
script = "script.json"

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

[tools.get_order.latency]
mode = "observe"
fallback_p99 = "5s"
min_samples = 3
allowance_factor = FACTOR

[tools.get_order.latency.scale]
arg = "args.rows"
buckets = [100, 1000]

[agents.desk]
provider = "replay"
model = "m"
system_prompt = "Look orders up."
tools = ["get_order"]
model_latency = "50ms"
[agents.desk.budget]
wall_clock = "600s"
max_steps = 60
[agents.desk.loop_guard]
max_repeats = 100
no_progress_window = 100
"#;

/// A config directory (allowance factor `factor`) whose script looks up
/// one order per entry of `rows`, asking for that many rows, then answers.
fn config(dir: &std::path::Path, factor: u32, rows: &[u64]) -> std::path::PathBuf {
    let turns = rows
        .iter()
        .map(|n| call(GET_ORDER, json!({ "order_id": "A-1001", "rows": n })))
        .collect();
    write_config(dir, &CONFIG.replace("FACTOR", &factor.to_string()), turns)
}

/// A desk that sleeps `per_row` for every row a lookup asks for.
async fn desk(per_row: Duration) -> OrderDesk {
    OrderDesk::start_with(OrderDeskConfig::default().with_faults(slow_by(per_row)))
        .await
        .unwrap()
}

fn slow_by(per_row: Duration) -> Faults {
    Faults::none().always(
        GET_ORDER,
        Fault::DelayPerUnit {
            arg: "rows".into(),
            per_unit: per_row,
        },
    )
}

/// Every tool attempt's allowance and bucket, in order.
fn started(events: &[Event]) -> Vec<(Duration, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::ToolCallStarted(ToolCallStarted {
                allowance,
                latency_bucket,
                ..
            }) => Some((*allowance, latency_bucket.map(|b| b.to_string()))),
            _ => None,
        })
        .collect()
}

fn bucket_of(rows: u64) -> &'static str {
    if rows <= 100 { "0-100" } else { "101-1000" }
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// 2 × the observed p99 of a bucket whose calls all took `latency`
/// (within the histogram's precision and the loopback's own time).
fn learnt(allowance: Duration, latency: Duration) -> bool {
    let exact = latency * 2;
    (exact..=exact + exact * 7 / 100).contains(&allowance)
}

#[tokio::test(start_paused = true)]
async fn each_call_is_planned_with_the_profile_of_its_argument_scale_bucket() {
    let desk = desk(ms(2)).await;
    let (small, large) = (ms(2 * SMALL), ms(2 * LARGE));
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");

    // Process one: small and large calls in turn, four of each. Each
    // bucket is planned with the fallback (5 s × 2) until it has three
    // samples of its own, then with its own p99 × 2.
    let rows = [SMALL, LARGE, SMALL, LARGE, SMALL, LARGE, SMALL, LARGE];
    let path = config(dir.path(), 2, &rows);
    let reg = registry(&path, &desk);
    let one = engine(&db, &reg);
    let (outcome, events) = run(&one, &reg).await;
    assert_eq!(outcome, Outcome::Succeeded, "{events:#?}");
    let seen = started(&events);
    assert_eq!(seen.len(), rows.len(), "{seen:?}");
    for (n, ((allowance, bucket), rows)) in seen.iter().zip(rows).enumerate() {
        assert_eq!(bucket.as_deref(), Some(bucket_of(rows)), "call {n}");
        let of_its_bucket = n / 2;
        if of_its_bucket < 3 {
            assert_eq!(
                *allowance,
                ms(10_000),
                "call {n} ({rows} rows): its bucket has {of_its_bucket} samples, the fallback × 2"
            );
        } else {
            let latency = if rows == SMALL { small } else { large };
            assert!(
                learnt(*allowance, latency),
                "call {n} ({rows} rows): 2 × its own bucket's p99 (~{latency:?}), not {allowance:?}"
            );
        }
    }

    // Process two, a fresh engine on the same file, plans its very first
    // calls with the persisted buckets: the large call first, then the
    // small one.
    let dir_two = tempfile::tempdir().unwrap();
    let path = config(dir_two.path(), 2, &[LARGE, SMALL]);
    let reg = registry(&path, &desk);
    let two = engine(&db, &reg);
    let (outcome, events) = run(&two, &reg).await;
    assert_eq!(outcome, Outcome::Succeeded, "{events:#?}");
    let seen = started(&events);
    assert_eq!(seen[0].1.as_deref(), Some("101-1000"));
    assert!(learnt(seen[0].0, large), "large first: {seen:?}");
    assert_eq!(seen[1].1.as_deref(), Some("0-100"));
    assert!(learnt(seen[1].0, small), "then small: {seen:?}");

    // The store holds each bucket and the tool-wide sum, of both processes.
    let rows = SqliteStore::open(&db)
        .unwrap()
        .latency_histograms()
        .await
        .unwrap();
    let samples = |subject: &str| {
        rows.records
            .iter()
            .find(|r| r.subject == subject)
            .map(|r| r.histogram.samples())
    };
    assert_eq!(samples("tool_scale:get_order/0-100"), Some(5));
    assert_eq!(samples("tool_scale:get_order/101-1000"), Some(5));
    assert_eq!(samples("tool_scale:get_order/1001+"), None, "never called");
    assert_eq!(samples("tool:get_order"), Some(10));
    assert!(ScaleBucket::parse("1001+").is_some());
}

#[tokio::test(start_paused = true)]
async fn a_slowing_of_the_large_calls_alone_is_reported_for_their_bucket() {
    let desk = desk(ms(2)).await;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");

    // Baselines: three calls of each size (1 s and 20 ms).
    let path = config(dir.path(), 4, &[LARGE, LARGE, LARGE, SMALL, SMALL, SMALL]);
    let reg = registry(&path, &desk);
    let engine = engine(&db, &reg);
    let (outcome, _) = run(&engine, &reg).await;
    assert_eq!(outcome, Outcome::Succeeded);

    // The desk slows to 6 ms a row: twenty large calls (3 s each, inside
    // the allowance of 4 × 1 s) close the large bucket's window with a p99
    // three times its baseline; the five small calls slow as much but do
    // not fill their window, and the tool-wide sum is not watched.
    desk.set_faults(slow_by(ms(6))).unwrap();
    let dir_two = tempfile::tempdir().unwrap();
    let mut rows = vec![LARGE; 20];
    rows.extend([SMALL; 5]);
    let path = config(dir_two.path(), 4, &rows);
    let reg = registry(&path, &desk);
    let (outcome, events) = run(&engine, &reg).await;
    assert_eq!(outcome, Outcome::Succeeded, "{events:#?}");
    let degraded = degradations(&events);
    assert_eq!(degraded.len(), 1, "{degraded:?}");
    assert_eq!(degraded[0].subject, "tool_scale:get_order/101-1000");
    assert_eq!(degraded[0].baseline_source, BaselineSource::Observed);
    assert!(
        (ms(1_000)..=ms(1_020)).contains(&degraded[0].baseline),
        "the large bucket's own baseline: {degraded:?}"
    );
    assert!(
        (ms(3_000)..=ms(3_060)).contains(&degraded[0].p99),
        "{degraded:?}"
    );
    let metrics = engine.metrics().render();
    assert!(
        metrics
            .contains("rein_latency_degraded_total{subject=\"tool_scale:get_order/101-1000\"} 1"),
        "{metrics}"
    );
}

//! What a tool declares about itself beyond how it is called reaches the
//! people who need it: `owner` and `side_effect_tier`, read from the
//! shipped example config, appear in every attempt's `tool_call_started`
//! and beside each effect of a handoff package.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::{harness, kinds, script, update};
use rein_core::{EventKind, FailurePolicy, LedgerStatus};
use rein_engine::config::Loader;
use rein_engine::run::{AcceptAll, RunRequest};
use rein_testkit::order_desk::{Faults, UPDATE_DELIVERY_TIME};
use serde_json::json;

fn example() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk/rein.toml")
}

#[tokio::test(start_paused = true)]
async fn owner_and_tier_reach_tool_events_and_the_handoff_package() {
    let h = harness(Faults::none()).await;
    let desk = h.desk.base_url().to_owned();
    let env = move |name: &str| match name {
        "ORDER_DESK_URL" => Some(desk.clone()),
        "MOCK_MODEL_URL" => Some("http://127.0.0.1:9".to_owned()),
        _ => None,
    };
    let registry = Loader::with_env(env.clone()).load(&example()).unwrap();
    let client = reqwest::Client::new();
    let mut agent = rein_engine::bind::bind_agent(&registry, "order_desk", &client, &env).unwrap();
    // A.1001 moves, then an order that does not exist fails the run: the
    // move is left for a human, not undone.
    agent.provider = script(json!([
        update("A-1001", "2026-12-24T10:00:00Z"),
        update("A-9999", "2026-12-24T10:00:00Z"),
        {"text": "could not finish"},
    ]));
    agent.on_failure = FailurePolicy::Handoff;
    let out = h
        .engine
        .run(
            &agent,
            &AcceptAll,
            RunRequest {
                input: "Move two orders.".into(),
                ..RunRequest::default()
            },
        )
        .await
        .unwrap();

    let started: Vec<_> = kinds(&h, &out)
        .await
        .into_iter()
        .filter(|(k, d)| *k == EventKind::ToolCallStarted && d["tool"] == UPDATE_DELIVERY_TIME)
        .map(|(_, d)| (d["owner"].clone(), d["side_effect_tier"].clone()))
        .collect();
    assert!(!started.is_empty());
    for declared in &started {
        assert_eq!(declared, &(json!("orders-team"), json!("medium")));
    }
    let package = out.report.handoff.expect("handed off");
    let moved = package
        .awaiting_decision
        .iter()
        .find(|e| e.tool == UPDATE_DELIVERY_TIME && e.status != LedgerStatus::Failed)
        .unwrap_or_else(|| panic!("{package:#?}"));
    assert_eq!(moved.owner.as_deref(), Some("orders-team"));
    assert_eq!(moved.side_effect_tier.map(|t| t.as_str()), Some("medium"));
}

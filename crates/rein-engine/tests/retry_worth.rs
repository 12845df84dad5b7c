//! A retry is made only when its expected value (measured success rate ×
//! the agent's value of success) covers its expected cost (issue 16, item
//! 6): model retries against the mock OpenAI server, tool retries against
//! the order desk, on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{agent, call, harness, kinds, run, script};
use rein_core::deadline::{BudgetLimits, Cost};
use rein_core::registry::Price;
use rein_core::{EventKind, Outcome};
use rein_engine::provider::OpenAiProvider;
use rein_engine::run::AgentBinding;
use rein_testkit::mock_model::{MockModel, Reply};
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk};
use serde_json::json;

/// The agent asking `model` at $1 / $4 per million tokens, capped at
/// 16,384 output tokens: one retry costs about $0.066.
fn priced(desk: &OrderDesk, model: &MockModel, value_usd: Option<f64>) -> AgentBinding {
    let provider = Arc::new(OpenAiProvider::new(
        "mock",
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ));
    let mut a = agent(desk, provider, true);
    a.price = Some(Price::new(
        Cost::from_micros(1_000_000),
        Cost::from_micros(4_000_000),
    ));
    a.max_output_tokens = Some(16_384);
    a.planner = a
        .planner
        .with_value_of_success(value_usd.map(|v| Cost::from_usd("v", v).unwrap()));
    a
}

#[tokio::test(start_paused = true)]
async fn a_retry_whose_expected_value_is_below_its_cost_is_not_made() {
    // Worth a cent: half a cent expected from a retry that costs 6.6.
    let h = harness(Faults::none()).await;
    let model = MockModel::start([Reply::unavailable(), Reply::text("done")])
        .await
        .unwrap();
    let a = priced(&h.desk, &model, Some(0.01));
    let out = run(&h, &a).await;

    assert_eq!(model.request_count(), 1, "the retry was not made");
    assert_eq!(out.report.outcome, Outcome::Failed, "{:#?}", out.report);
    assert!(
        out.report
            .summary
            .contains("not retried: expected value $0.005000"),
        "{}",
        out.report.summary
    );
    let events = kinds(&h, &out).await;
    let (_, abandoned) = events
        .iter()
        .find(|(k, _)| *k == EventKind::RetryAbandoned)
        .expect("retry_abandoned");
    assert_eq!(abandoned["reason"]["kind"], "not_worth_its_cost");
    let worth = &abandoned["reason"]["worth"];
    assert_eq!(worth["expected_value_micros"], 5_000);
    assert!(worth["expected_cost_micros"].as_u64().unwrap() > 65_000);
    assert_eq!(worth["rate"], json!({"successes": 0, "tries": 0}));
}

#[tokio::test(start_paused = true)]
async fn a_retry_worth_more_than_it_costs_is_made_and_says_why() {
    let h = harness(Faults::none()).await;
    let model = MockModel::start([Reply::unavailable(), Reply::text("done")])
        .await
        .unwrap();
    let a = priced(&h.desk, &model, Some(1_000.0));
    let out = run(&h, &a).await;

    assert_eq!(model.request_count(), 2);
    assert_eq!(out.report.outcome, Outcome::Succeeded);
    let events = kinds(&h, &out).await;
    let (_, scheduled) = events
        .iter()
        .find(|(k, _)| *k == EventKind::RetryScheduled)
        .expect("retry_scheduled");
    assert_eq!(scheduled["worth"]["expected_value_micros"], 500_000_000);

    // Without a value of success, the same retry is made as before, and
    // carries no worth.
    let h = harness(Faults::none()).await;
    let model = MockModel::start([Reply::unavailable(), Reply::text("done")])
        .await
        .unwrap();
    let out = run(&h, &priced(&h.desk, &model, None)).await;
    assert_eq!(model.request_count(), 2);
    let events = kinds(&h, &out).await;
    let (_, scheduled) = events
        .iter()
        .find(|(k, _)| *k == EventKind::RetryScheduled)
        .unwrap();
    assert!(scheduled.get("worth").is_none());
}

#[tokio::test(start_paused = true)]
async fn tool_retries_stop_once_their_measured_success_rate_is_below_their_time() {
    // The lookup always fails transiently. Each run's retries teach the
    // engine that the first retry of `get_order` fails; once its rate
    // falls below the share of the remaining time a retry takes, runs
    // stop retrying it.
    let h = harness(Faults::none().always(GET_ORDER, Fault::status(503))).await;
    let mut given_up_at = None;
    let mut retries_before = 0;
    for n in 1..=40 {
        let mut a = agent(
            &h.desk,
            script(json!([call(GET_ORDER, json!({"order_id": "A-1001"}))])),
            true,
        );
        a.budget = BudgetLimits::new(Duration::from_secs(2)).unwrap();
        a.planner = a
            .planner
            .with_value_of_success(Some(Cost::from_usd("v", 1.0).unwrap()));
        let out = run(&h, &a).await;
        let events = kinds(&h, &out).await;
        let not_worth = events.iter().find(|(k, d)| {
            *k == EventKind::RetryAbandoned && d["reason"]["kind"] == "not_worth_its_cost"
        });
        if let Some((_, d)) = not_worth {
            let rate = &d["reason"]["worth"]["rate"];
            assert_eq!(rate["successes"], 0, "{d}");
            assert!(rate["tries"].as_u64().unwrap() >= 1, "learned from retries");
            assert!(
                out.report.incomplete[0]
                    .reason
                    .contains("not retried: expected value"),
                "{:?}",
                out.report.incomplete
            );
            given_up_at = Some(n);
            break;
        }
        retries_before += events
            .iter()
            .filter(|(k, _)| *k == EventKind::RetryScheduled)
            .count();
    }
    let n = given_up_at.expect("retries were never judged not worth it");
    assert!(n > 1, "the first run retries: nothing is known yet");
    assert!(retries_before > 0);
}

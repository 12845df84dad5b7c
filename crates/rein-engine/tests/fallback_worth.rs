//! A model fallback is tried only when its expected value (the agent's
//! value of success × that arm's measured success rate as a fallback)
//! covers its expected cost at its price (issue 16, item 6): against two
//! mock OpenAI servers on loopback, the primary unavailable.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Harness, agent, harness, kinds, run};
use rein_core::deadline::Cost;
use rein_core::registry::Price;
use rein_core::{EventKind, Outcome};
use rein_engine::provider::{ModelProvider, OpenAiProvider};
use rein_engine::run::{AgentBinding, ModelLink};
use rein_testkit::mock_model::{MockModel, Reply};
use rein_testkit::order_desk::Faults;
use serde_json::json;

fn openai(name: &str, model: &MockModel) -> Arc<dyn ModelProvider> {
    Arc::new(OpenAiProvider::new(
        name,
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ))
}

/// The agent asking `primary`, with `backup` as its one fallback at $18
/// per million output tokens and capped at 16,384 of them: trying it may
/// spend about $0.295. A success is worth `value_usd`.
fn chained(h: &Harness, primary: &MockModel, backup: &MockModel, value_usd: f64) -> AgentBinding {
    let mut a = agent(&h.desk, openai("primary", primary), false);
    a.model = "primary-model".into();
    a.fallbacks = vec![ModelLink {
        provider: openai("backup", backup),
        model: "backup-model".into(),
        price: Some(Price::new(Cost::ZERO, Cost::from_micros(18_000_000))),
        max_output_tokens: Some(16_384),
    }];
    a.planner = a
        .planner
        .with_value_of_success(Some(Cost::from_usd("v", value_usd).unwrap()));
    a
}

#[tokio::test(start_paused = true)]
async fn a_fallback_whose_expected_value_is_below_its_cost_is_not_tried() {
    // Worth 10 cents: 5 expected from a fallback that may cost 29.5.
    let h = harness(Faults::none()).await;
    let primary = MockModel::start([Reply::unavailable()]).await.unwrap();
    let backup = MockModel::start([Reply::text("done")]).await.unwrap();
    let out = run(&h, &chained(&h, &primary, &backup, 0.10)).await;

    assert_eq!(primary.request_count(), 1);
    assert_eq!(backup.request_count(), 0, "the fallback was not tried");
    assert_eq!(out.report.outcome, Outcome::Failed, "{:#?}", out.report);
    assert!(
        out.report
            .summary
            .contains("fallback backup/backup-model not tried: expected value $0.050000"),
        "{}",
        out.report.summary
    );
    let events = kinds(&h, &out).await;
    let (_, abandoned) = events
        .iter()
        .find(|(k, _)| *k == EventKind::RetryAbandoned)
        .expect("retry_abandoned");
    assert_eq!(abandoned["reason"]["kind"], "not_worth_its_cost");
    assert_eq!(abandoned["provider"], "backup", "{abandoned}");
    let worth = &abandoned["reason"]["worth"];
    assert_eq!(worth["expected_value_micros"], 50_000);
    assert!(worth["expected_cost_micros"].as_u64().unwrap() > 294_000);
    assert_eq!(worth["rate"], json!({"successes": 0, "tries": 0}));
    assert!(
        !events
            .iter()
            .any(|(k, _)| *k == EventKind::ModelFallbackUsed)
    );
}

#[tokio::test(start_paused = true)]
async fn a_fallback_worth_more_than_it_costs_is_tried_and_says_why() {
    let h = harness(Faults::none()).await;
    let primary = MockModel::start([Reply::unavailable()]).await.unwrap();
    let backup = MockModel::start([Reply::text("done")]).await.unwrap();
    let out = run(&h, &chained(&h, &primary, &backup, 10.0)).await;

    assert_eq!(backup.request_count(), 1);
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let events = kinds(&h, &out).await;
    let (_, used) = events
        .iter()
        .find(|(k, _)| *k == EventKind::ModelFallbackUsed)
        .expect("model_fallback_used");
    assert_eq!(used["worth"]["expected_value_micros"], 5_000_000, "{used}");
    assert!(used["worth"]["expected_cost_micros"].as_u64().unwrap() < 5_000_000);
}

#[tokio::test(start_paused = true)]
async fn a_fallback_that_keeps_failing_stops_being_tried_once_its_rate_is_below_its_cost() {
    // Worth $1; the backup may cost $0.295 a try. Its rate as a fallback
    // starts at 1/2, then 1/3 after one failure (still worth it), then
    // 1/4 after two (below its cost): the third run does not try it.
    let h = harness(Faults::none()).await;
    let primary = MockModel::start([]).await.unwrap();
    let backup = MockModel::start([]).await.unwrap();
    let a = chained(&h, &primary, &backup, 1.0);
    let mut tried = Vec::new();
    for _ in 0..4 {
        primary.push_reply(Reply::unavailable());
        // Not retryable: one call per try, failed.
        backup.push_reply(Reply::bad_request("the backup refuses"));
        let before = backup.request_count();
        let out = run(&h, &a).await;
        assert_ne!(out.report.outcome, Outcome::Succeeded);
        tried.push(backup.request_count() - before);
    }
    assert_eq!(tried, vec![1, 1, 0, 0]);
}

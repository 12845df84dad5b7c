//! The run loop against real parts on loopback: the testkit's order-desk
//! tool service, the mock OpenAI-compatible model server, and a real SQLite
//! file. Nothing of rein's own is mocked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use rein_core::Timestamp;
use std::sync::Arc;
use std::time::Duration;

use common::{
    Harness, agent, answer, call, conflict_on_update, effect_order, effects, harness, harness_with,
    kinds, ms, restore, run, run_with, script, three_updates, tool_messages, update,
};
use rein_core::deadline::{BudgetLimits, Cost, Dimension};
use rein_core::event::BudgetScope;
use rein_core::idempotency::Normalizer;
use rein_core::loop_guard::LoopGuardConfig;
use rein_core::registry::{CompensationGrade, Price};
use rein_core::{Category, EventData, EventKind, LatencyProfile, LedgerStatus, Outcome, ToolClass};
use rein_engine::provider::OpenAiProvider;
use rein_engine::run::{AgentBinding, ArgValidator, Engine, HandOn, RunOutput, ToolBinding};
use rein_store::{Store, StoreExt};
use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{MockModel, Reply};
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, RESTORE_DELIVERY_TIME, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::{Value, json};

fn update_args() -> Value {
    json!({"order_id": "A-1001", "delivery_date": "2026-12-24"})
}

/// A validator requiring the order desk's fields, standing in for the
/// registry's compiled schemas.
struct Required;

impl ArgValidator for Required {
    fn validate(&self, tool: &str, args: &Value) -> Result<(), Vec<String>> {
        let required: &[&str] = match tool {
            UPDATE_DELIVERY_TIME => &["order_id", "delivery_date"],
            GET_ORDER => &["order_id"],
            _ => &[],
        };
        let missing: Vec<String> = required
            .iter()
            .filter(|f| args.get(**f).and_then(Value::as_str).is_none())
            .map(|f| format!("/{f}: required string is missing"))
            .collect();
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing)
        }
    }
}

#[tokio::test(start_paused = true)]
async fn lost_response_on_idempotent_write_applies_once_via_lookup_by_key() {
    let h = harness(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::LoseResponse)).await;
    let a = agent(
        &h.desk,
        script(json!([
            call(UPDATE_DELIVERY_TIME, update_args()),
            answer("done")
        ])),
        true,
    );
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(
        h.desk.request_count(UPDATE_DELIVERY_TIME),
        1,
        "no re-execution after the lookup"
    );
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::IdempotencyLookup && d["found"] == true)
    );
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, LedgerStatus::Succeeded);
    assert!(ledger[0].idempotency_key.is_some());
}

#[tokio::test(start_paused = true)]
async fn lost_response_without_a_status_endpoint_retries_with_the_same_key() {
    let h = harness(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::LoseResponse)).await;
    let a = agent(
        &h.desk,
        script(json!([
            call(UPDATE_DELIVERY_TIME, update_args()),
            answer("done")
        ])),
        false,
    );
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(
        h.desk.applied_count(UPDATE_DELIVERY_TIME),
        1,
        "exactly one applied effect"
    );
    assert_eq!(
        h.desk.replayed_count(UPDATE_DELIVERY_TIME),
        1,
        "the duplicate was collapsed"
    );
    let keys: Vec<_> = h
        .desk
        .requests()
        .into_iter()
        .filter(|r| r.tool == UPDATE_DELIVERY_TIME)
        .map(|r| {
            (
                r.headers.idempotency_key.clone().unwrap(),
                r.headers.intent_id.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(keys.len(), 2);
    assert_eq!(keys[0], keys[1], "same key and intent on the retry");
    let attempts: Vec<_> = h
        .desk
        .requests()
        .into_iter()
        .map(|r| r.headers.attempt)
        .collect();
    assert_eq!(attempts, vec![Some("1".into()), Some("2".into())]);
}

#[tokio::test(start_paused = true)]
async fn irreversible_tool_is_never_retried() {
    let h = harness(Faults::none().always(SEND_EMAIL, Fault::status(503))).await;
    let email = json!({"to": "buyer@example.com", "subject": "s", "body": "b"});
    let a = agent(
        &h.desk,
        script(json!([call(SEND_EMAIL, email), answer("could not notify")])),
        true,
    );
    let out = run(&h, &a).await;

    assert_eq!(h.desk.request_count(SEND_EMAIL), 1);
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 0);
    assert_eq!(out.report.outcome, Outcome::Failed);
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::RetryAbandoned && d["reason"]["kind"] == "irreversible")
    );
    assert!(!events.iter().any(|(k, _)| *k == EventKind::RetryScheduled));
    // The request carried no idempotency key: irreversible tools have none.
    assert!(h.desk.requests()[0].headers.idempotency_key.is_none());
}

#[tokio::test(start_paused = true)]
async fn bad_request_is_never_retried() {
    let h = harness(Faults::none()).await;
    // The desk refuses a missing field with 400; no validator stops it here.
    let a = agent(
        &h.desk,
        script(json!([
            call(UPDATE_DELIVERY_TIME, json!({"order_id": "A-1001"})),
            answer("gave up")
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(h.desk.request_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(
        out.report.incomplete[0].category,
        Category::InvalidArguments
    );
    assert_eq!(out.report.outcome, Outcome::Failed);
}

#[tokio::test(start_paused = true)]
async fn retry_after_from_the_server_is_honoured() {
    let h =
        harness(Faults::none().then(GET_ORDER, Fault::rate_limited(RetryAfter::Seconds(1)))).await;
    let a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            answer("ok")
        ])),
        true,
    );
    let started = tokio::time::Instant::now();
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.request_count(GET_ORDER), 2);
    let events = kinds(&h, &out).await;
    let retry = events
        .iter()
        .find(|(k, _)| *k == EventKind::RetryScheduled)
        .unwrap();
    assert_eq!(retry.1["from_server"], true);
    assert_eq!(retry.1["delay_ms"], 1000);
    // Paused time: the run's only wait is the server's second.
    assert_eq!(started.elapsed(), Duration::from_secs(1));
}

#[tokio::test(start_paused = true)]
async fn retry_that_cannot_fit_the_deadline_is_not_started() {
    let h = harness(Faults::none().then(GET_ORDER, Fault::rate_limited(RetryAfter::Seconds(3600))))
        .await;
    let a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            answer("later")
        ])),
        true,
    );
    let out = run(&h, &a).await;

    assert_eq!(h.desk.request_count(GET_ORDER), 1);
    let events = kinds(&h, &out).await;
    assert!(events.iter().any(|(k, d)| *k == EventKind::RetryAbandoned
        && d["reason"]["kind"] == "server_wait_beyond_deadline"));
    assert_eq!(out.report.incomplete[0].category, Category::RateLimited);
}

#[tokio::test(start_paused = true)]
async fn step_ceiling_ends_the_run_budget_exhausted_with_its_report() {
    let h = harness(Faults::none()).await;
    let mut a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            call(GET_ORDER, json!({"order_id": "A-1002"})),
            call(GET_ORDER, json!({"order_id": "A-1003"})),
            answer("never reached"),
        ])),
        true,
    );
    a.budget = BudgetLimits::new(Duration::from_secs(20))
        .unwrap()
        .with_steps(2)
        .unwrap();
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::BudgetExhausted);
    assert_eq!(out.report.steps, 2);
    assert_eq!(
        out.report.completed.len(),
        2,
        "the work done is reported, not dropped"
    );
    assert!(
        out.report.recommendation.contains("steps"),
        "{}",
        out.report.recommendation
    );
    assert_eq!(h.desk.request_count(GET_ORDER), 2);
    let run = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(run.report.unwrap().outcome, Outcome::BudgetExhausted);
    // The share of the ceiling used when it stopped the run: all of it.
    let metrics = h.engine.metrics().render();
    assert!(
        metrics.contains(
            "rein_budget_used_ratio_bucket{tenant=\"default\",agent=\"order_desk\",dimension=\"steps\",le=\"0.9\"} 0"
        ) && metrics.contains(
            "rein_budget_used_ratio_bucket{tenant=\"default\",agent=\"order_desk\",dimension=\"steps\",le=\"1\"} 1"
        ),
        "{metrics}"
    );
}

#[tokio::test(start_paused = true)]
async fn token_ceiling_ends_the_run_before_a_call_that_cannot_fit_is_sent() {
    let h = harness(Faults::none()).await;
    let mut turn = call(GET_ORDER, json!({"order_id": "A-1001"}));
    turn["usage"] = json!({"input": 900, "output": 200});
    let mut a = agent(&h.desk, script(json!([turn, answer("x")])), true);
    a.budget = BudgetLimits::new(Duration::from_secs(20))
        .unwrap()
        .with_tokens(1000)
        .unwrap();
    // A task this long cannot be a prompt of fewer than 1000 tokens: the
    // first call does not fit and is never sent.
    let task = "Move order A-1001 to Friday. ".repeat(40);
    let out = h
        .engine
        .run(
            &a,
            &rein_engine::run::AcceptAll,
            rein_engine::run::RunRequest {
                input: task,
                ..rein_engine::run::RunRequest::default()
            },
        )
        .await
        .unwrap();

    assert_eq!(out.report.outcome, Outcome::BudgetExhausted);
    assert_eq!(out.report.consumed.tokens, 0, "nothing was spent");
    assert!(out.report.consumed.tokens <= 1000);
    assert_eq!(h.desk.request_count(GET_ORDER), 0);
    let events = h.store.events(&out.run_id, 0).await.unwrap();
    assert!(
        !events
            .iter()
            .any(|e| e.kind() == EventKind::ModelCallStarted),
        "no model call was made"
    );
    let exhausted = events
        .iter()
        .find_map(|e| match &e.data {
            EventData::BudgetExhausted(b) => Some(b.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(exhausted.scope, BudgetScope::ModelCall);
    assert_eq!(exhausted.exhausted.dimension, Dimension::Tokens);
}

#[tokio::test(start_paused = true)]
async fn cost_ceiling_ends_the_run_before_the_call_it_cannot_pay_for() {
    let h = harness(Faults::none()).await;
    let mut first = call(GET_ORDER, json!({"order_id": "A-1001"}));
    first["usage"] = json!({"input": 1000, "output": 0});
    let mut second = call(GET_ORDER, json!({"order_id": "A-1002"}));
    second["usage"] = json!({"input": 1000, "output": 0});
    let mut a = agent(&h.desk, script(json!([first, second, answer("x")])), true);
    // $1 per million input tokens, $4 per million output tokens: the first
    // turn costs $0.001; the second prompt alone (at least the first's
    // 1000 tokens) would cost more than the $0.0005 left.
    a.price = Some(Price::new(
        Cost::from_micros(1_000_000),
        Cost::from_micros(4_000_000),
    ));
    a.budget = BudgetLimits::new(Duration::from_secs(20))
        .unwrap()
        .with_cost(Cost::from_micros(1_500))
        .unwrap();
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::BudgetExhausted);
    assert_eq!(out.report.consumed.cost, Cost::from_micros(1_000));
    assert!(out.report.consumed.cost <= Cost::from_micros(1_500));
    assert_eq!(
        h.desk.request_count(GET_ORDER),
        1,
        "the second turn was never asked for"
    );
    let events = h.store.events(&out.run_id, 0).await.unwrap();
    let started = events
        .iter()
        .filter(|e| e.kind() == EventKind::ModelCallStarted)
        .count();
    assert_eq!(started, 1, "the second call was not sent");
}

#[tokio::test(start_paused = true)]
async fn wall_clock_ceiling_ends_the_run_budget_exhausted() {
    let h = harness(Faults::none().always(GET_ORDER, Fault::Delay(Duration::from_secs(5)))).await;
    let mut a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            answer("x")
        ])),
        true,
    );
    a.budget = BudgetLimits::new(ms(400)).unwrap();
    let started = tokio::time::Instant::now();
    let out = run(&h, &a).await;

    assert_eq!(
        out.report.outcome,
        Outcome::BudgetExhausted,
        "{:#?}",
        out.report
    );
    // Paused time: the run ends within its wall clock (invariant 2), not
    // when the slow tool would have answered.
    assert!(
        started.elapsed() <= ms(400),
        "the slow tool did not hold the run: {:?}",
        started.elapsed()
    );
    assert_eq!(out.report.incomplete[0].category, Category::Timeout);
}

#[tokio::test(start_paused = true)]
async fn repeated_identical_failure_stops_at_its_threshold() {
    let h = harness(Faults::none()).await;
    let lookups: Vec<Value> = (0..6)
        .map(|_| call(GET_ORDER, json!({"order_id": "A-9999"})))
        .collect();
    let a = agent(&h.desk, script(Value::Array(lookups)), true);
    let out = run(&h, &a).await;

    // Default threshold 2: the third identical failure trips.
    assert_eq!(h.desk.request_count(GET_ORDER), 3);
    let events = kinds(&h, &out).await;
    let trip = events
        .iter()
        .find(|(k, _)| *k == EventKind::LoopDetected)
        .unwrap();
    assert_eq!(trip.1["trip"]["reason"], "repeat_failure");
    assert_eq!(out.report.outcome, Outcome::Failed);
}

#[tokio::test(start_paused = true)]
async fn no_progress_loop_stops_at_its_window() {
    let h = harness(Faults::none()).await;
    let lookups: Vec<Value> = (0..8)
        .map(|i| call(GET_ORDER, json!({"order_id": format!("Z-{i}")})))
        .collect();
    let mut a = agent(&h.desk, script(Value::Array(lookups)), true);
    a.loop_guard = LoopGuardConfig::default()
        .with_no_progress_window(3)
        .with_repeat_failure_threshold(50)
        .with_self_heal_allowance(50);
    let out = run(&h, &a).await;

    assert_eq!(h.desk.request_count(GET_ORDER), 3);
    let events = kinds(&h, &out).await;
    let trip = events
        .iter()
        .find(|(k, _)| *k == EventKind::LoopDetected)
        .unwrap();
    assert_eq!(trip.1["trip"]["reason"], "no_progress");
}

#[tokio::test(start_paused = true)]
async fn unknown_tools_and_invalid_arguments_never_reach_the_tool_service() {
    let h = harness(Faults::none()).await;
    let a = agent(
        &h.desk,
        script(json!([
            call("delete_everything", json!({})),
            call(UPDATE_DELIVERY_TIME, json!({"order_id": 42})),
            {"tool_calls": [{"name": UPDATE_DELIVERY_TIME, "arguments": "{\"order_id\": \"A-1001\", \"delivery_da"}]},
            {"tool_calls": [{"name": GET_ORDER, "arguments": "{not json"}]},
            answer("I could not do it"),
        ])),
        true,
    );
    let out = run_with(&h, &a, &Required).await;

    assert!(h.desk.requests().is_empty(), "{:?}", h.desk.requests());
    let events = kinds(&h, &out).await;
    let rejected = events
        .iter()
        .filter(|(k, d)| *k == EventKind::CallRejected && d.get("category").is_some())
        .count();
    assert_eq!(rejected, 4);
    assert!(events.iter().any(|(k, d)| *k == EventKind::CallRejected
        && d["reason"].as_str().is_some_and(|r| r.contains("cut off"))));
    assert!(h.store.ledger(&out.run_id).await.unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn openai_compatible_model_only_ever_sees_structured_placeholders() {
    let h = harness(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::status(409))).await;
    let model = MockModel::start([
        Reply::tool_call(GET_ORDER, &json!({"order_id": "A-9999"})),
        Reply::tool_call(UPDATE_DELIVERY_TIME, &update_args()),
        Reply::text("I could not finish."),
    ])
    .await
    .unwrap();
    let provider = Arc::new(OpenAiProvider::new(
        "mock",
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ));
    let a = agent(&h.desk, provider, true);
    let out = run(&h, &a).await;

    assert_eq!(model.request_count(), 3);
    let desk_messages: Vec<String> = h
        .desk
        .requests()
        .iter()
        .filter_map(|r| r.status)
        .map(|s| s.to_string())
        .collect();
    assert_eq!(desk_messages, vec!["404", "409"]);
    for request in model.requests() {
        for message in request.body["messages"].as_array().unwrap() {
            if message["role"] == "tool" {
                let content = message["content"].as_str().unwrap();
                assert!(content.starts_with("tool_error target="), "{content}");
                assert!(content.contains("instruction:"), "{content}");
                assert!(
                    !content.contains("A-9999"),
                    "raw error text leaked: {content}"
                );
                assert!(
                    !content.to_lowercase().contains("order a-"),
                    "raw error text leaked: {content}"
                );
            }
        }
    }
    assert_eq!(out.report.answer.as_deref(), Some("I could not finish."));
    assert_eq!(out.report.outcome, Outcome::Failed);
    assert_eq!(
        out.report.consumed.tokens,
        3 * 120,
        "usage from the responses"
    );
}

#[tokio::test(start_paused = true)]
async fn model_rate_limit_is_retried_and_a_fatal_model_error_is_not() {
    let h = harness(Faults::none()).await;
    let model = MockModel::start([
        Reply::rate_limited(Some(RetryAfter::Seconds(0))),
        Reply::text("fine"),
    ])
    .await
    .unwrap();
    let provider = Arc::new(OpenAiProvider::new(
        "mock",
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ));
    let a = agent(&h.desk, provider, true);
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded);
    assert_eq!(model.request_count(), 2);

    let model = MockModel::start([Reply::unauthorized(), Reply::text("never")])
        .await
        .unwrap();
    let provider = Arc::new(OpenAiProvider::new(
        "mock2",
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ));
    let a = agent(&h.desk, provider, true);
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Failed);
    assert_eq!(model.request_count(), 1, "401 is not retried");
}

/// A provider refusing rein's key or request ends the run with advice that
/// names what to fix, and no promise that a retry helps.
#[tokio::test(start_paused = true)]
async fn a_401_or_400_report_is_not_recoverable_and_says_what_to_fix() {
    let h = harness(Faults::none()).await;
    let model = MockModel::start([Reply::unauthorized()]).await.unwrap();
    let provider = Arc::new(
        OpenAiProvider::new(
            "mock",
            &model.openai_base_url(),
            None,
            Duration::from_secs(5),
            rein_engine::run::http_client().unwrap(),
        )
        .with_key_env(Some("ORDER_DESK_MODEL_KEY")),
    );
    let out = run(&h, &agent(&h.desk, provider, true)).await;
    assert_eq!(out.report.outcome, Outcome::Failed);
    assert!(!out.report.recoverable, "{:#?}", out.report);
    assert!(
        out.report
            .recommendation
            .contains("fix the key in env var ORDER_DESK_MODEL_KEY"),
        "{}",
        out.report.recommendation
    );
    assert!(!out.report.recommendation.contains("retry"));
    // The stored report says the same, and derives again the same.
    let stored = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    let basis = stored.report.unwrap().basis.unwrap();
    assert_eq!(basis.hint.key_env.as_deref(), Some("ORDER_DESK_MODEL_KEY"));

    let model = MockModel::start([Reply::bad_request("max_tokens is too large: 50000")])
        .await
        .unwrap();
    let provider = Arc::new(OpenAiProvider::new(
        "mock2",
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ));
    let out = run(&h, &agent(&h.desk, provider, true)).await;
    assert!(!out.report.recoverable, "{:#?}", out.report);
    assert!(
        out.report.recommendation.contains("max_output_tokens"),
        "{}",
        out.report.recommendation
    );
}

#[tokio::test(start_paused = true)]
async fn demo_scenario_ends_in_partial_success_with_one_update_and_no_email() {
    let h = harness(Faults::demo()).await;
    let a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            call(UPDATE_DELIVERY_TIME, update_args()),
            call(
                SEND_EMAIL,
                json!({"to": "buyer@example.com", "subject": "New delivery date", "body": "2026-12-24"})
            ),
            answer("The delivery date is updated; the buyer could not be notified yet."),
        ])),
        false,
    );
    let out = run(&h, &a).await;

    assert_eq!(
        out.report.outcome,
        Outcome::PartialSuccess,
        "{:#?}",
        out.report
    );
    assert!(out.report.recoverable);
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 0);
    assert_eq!(h.desk.request_count(SEND_EMAIL), 1);
    let tools: Vec<&str> = out
        .report
        .completed
        .iter()
        .map(|a| a.tool.as_str())
        .collect();
    assert_eq!(tools, vec![GET_ORDER, UPDATE_DELIVERY_TIME]);
    assert_eq!(out.report.incomplete.len(), 1);
    assert_eq!(out.report.incomplete[0].tool, SEND_EMAIL);
    assert_eq!(out.report.incomplete[0].category, Category::RateLimited);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    let statuses: Vec<(&str, LedgerStatus)> =
        ledger.iter().map(|r| (r.tool.as_str(), r.status)).collect();
    assert_eq!(
        statuses,
        vec![
            (UPDATE_DELIVERY_TIME, LedgerStatus::Succeeded),
            (SEND_EMAIL, LedgerStatus::Failed)
        ]
    );
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, _)| *k == EventKind::PartialSuccessReturned)
    );
    // Every event is durable with gap-free sequence numbers.
    let seqs: Vec<u64> = h
        .store
        .events(&out.run_id, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.seq)
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn truncated_arguments_of_a_read_are_salvaged_and_run() {
    let h = harness(Faults::none()).await;
    let a = agent(
        &h.desk,
        script(json!([
            {"tool_calls": [{"name": GET_ORDER, "arguments": "{\"order_id\": \"A-1001\", \"verbose\": tr"}]},
            answer("ok"),
        ])),
        true,
    );
    let out = run_with(&h, &a, &Required).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.request_count(GET_ORDER), 1);
    assert_eq!(h.desk.requests()[0].args, json!({"order_id": "A-1001"}));
    let events = kinds(&h, &out).await;
    let plan = events
        .iter()
        .find(|(k, _)| *k == EventKind::PlanCreated)
        .unwrap();
    assert_eq!(plan.1["intents"][0]["salvaged"], true);
}

fn turn(calls: Value) -> Value {
    json!({ "tool_calls": calls })
}

async fn harness_with_breakers(
    faults: Faults,
    breakers: rein_core::breaker::BreakersConfig,
) -> Harness {
    harness_with(faults, |b| b.breakers(breakers)).await
}

#[tokio::test(start_paused = true)]
async fn irreversible_call_does_not_run_when_a_sibling_of_its_turn_was_refused() {
    let h = harness(Faults::none()).await;
    let email = json!({"to": "buyer@example.com", "subject": "s", "body": "b"});
    let a = agent(
        &h.desk,
        script(json!([
            turn(json!([
                {"name": UPDATE_DELIVERY_TIME, "arguments": {"order_id": 42}},
                {"name": SEND_EMAIL, "arguments": email},
            ])),
            answer("done"),
        ])),
        true,
    );
    let out = run_with(&h, &a, &Required).await;
    assert_eq!(
        h.desk.request_count(SEND_EMAIL),
        0,
        "the email waits for its siblings"
    );
    assert_ne!(out.report.outcome, Outcome::Succeeded);
    assert_eq!(out.report.incomplete[0].tool, SEND_EMAIL);
}

#[tokio::test(start_paused = true)]
async fn second_irreversible_call_does_not_run_after_the_first_failed() {
    let h = harness(Faults::none().then(SEND_EMAIL, Fault::status(503))).await;
    let email = json!({"to": "buyer@example.com", "subject": "s", "body": "b"});
    let a = agent(
        &h.desk,
        script(json!([
            turn(json!([
                {"name": SEND_EMAIL, "arguments": email},
                {"name": SEND_EMAIL, "arguments": email},
            ])),
            answer("done"),
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(h.desk.request_count(SEND_EMAIL), 1);
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 0);
    assert_eq!(out.report.outcome, Outcome::Failed);
}

#[tokio::test(start_paused = true)]
async fn parallel_calls_share_the_budget_and_replies_follow_positions_even_with_duplicate_ids() {
    let h = harness(Faults::none()).await;
    let a = agent(
        &h.desk,
        script(json!([
            turn(json!([
                {"id": "same", "name": GET_ORDER, "arguments": {"order_id": "A-1001"}},
                {"id": "same", "name": GET_ORDER, "arguments": {"order_id": "A-1002"}},
                {"id": "c3", "name": GET_ORDER, "arguments": {"order_id": "A-1003"}},
                {"id": "c4", "name": UPDATE_DELIVERY_TIME, "arguments": update_args()},
            ])),
            answer("done"),
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(
        out.report.completed.len(),
        4,
        "one productive turn is progress, not a loop"
    );
    let events = kinds(&h, &out).await;
    let allocated = events
        .iter()
        .find(|(k, _)| *k == EventKind::BudgetAllocated)
        .unwrap();
    assert_eq!(allocated.1["branches"], 4);
    assert!(
        allocated.1["each_ms"].as_u64().unwrap()
            <= allocated.1["remaining_ms"].as_u64().unwrap() / 4 + 1
    );
    // The checkpoint's transcript answers each call at its position.
    let tool_messages = tool_messages(&h, &out).await;
    assert_eq!(tool_messages.len(), 4);
    assert!(
        tool_messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("A-1001")
    );
    assert!(
        tool_messages[1]["content"]
            .as_str()
            .unwrap()
            .contains("A-1002")
    );
}

#[tokio::test(start_paused = true)]
async fn open_breaker_refuses_calls_and_tells_the_model_not_to_retry() {
    let mut breakers = rein_core::breaker::BreakersConfig::default();
    breakers.tool.consecutive_failures = Some(1);
    let h = harness_with_breakers(
        Faults::none().always(GET_ORDER, Fault::status(401)),
        breakers,
    )
    .await;
    let a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            call(GET_ORDER, json!({"order_id": "A-1002"})),
            answer("gave up"),
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(
        h.desk.request_count(GET_ORDER),
        1,
        "no call reaches an open arm"
    );
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::BreakerStateChanged
                && d["arm"] == "tool"
                && d["transition"]["transition"] == "opened")
    );
    let tool_messages = tool_messages(&h, &out).await;
    let last_tool = tool_messages.last().unwrap();
    let content = last_tool["content"].as_str().unwrap();
    assert!(
        content.contains("category=circuit_open") && content.contains("do not retry"),
        "{content}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_stops_when_a_sibling_opens_the_breaker_while_it_waits() {
    let mut breakers = rein_core::breaker::BreakersConfig::default();
    breakers.tool.consecutive_failures = Some(1);
    let faults = Faults::none()
        .then(GET_ORDER, Fault::status(401))
        .then(GET_ORDER, Fault::rate_limited(RetryAfter::Seconds(1)));
    let h = harness_with_breakers(faults, breakers).await;
    let a = agent(
        &h.desk,
        script(json!([
            turn(json!([
                {"name": GET_ORDER, "arguments": {"order_id": "A-1001"}},
                {"name": GET_ORDER, "arguments": {"order_id": "A-1002"}},
            ])),
            answer("stopped"),
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(
        h.desk.request_count(GET_ORDER),
        2,
        "the waiting retry never reaches the open target"
    );
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::RetryAbandoned && d["reason"]["kind"] == "circuit_open")
    );
}

#[tokio::test(start_paused = true)]
async fn executed_but_reported_failure_on_an_idempotent_write_is_found_by_key() {
    let h =
        harness(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::ApplyThenStatus { code: 500 }))
            .await;
    let a = agent(
        &h.desk,
        script(json!([
            call(UPDATE_DELIVERY_TIME, update_args()),
            answer("done")
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(h.desk.request_count(UPDATE_DELIVERY_TIME), 1);
}

/// A store that refuses ledger declarations: storage that is down for
/// writes. Everything else goes to the real SQLite store.
struct NoDeclares;

#[async_trait::async_trait]
impl rein_store::Intercept for NoDeclares {
    async fn commit_step(
        &self,
        inner: &dyn Store,
        id: &rein_core::RunId,
        commit: rein_store::StepCommit,
    ) -> Result<rein_store::Committed, rein_store::StoreError> {
        if !commit.declares.is_empty() {
            return Err(rein_store::StoreError::Unavailable(
                "injected: writes refused".into(),
            ));
        }
        inner.commit_step(id, commit).await
    }
}

#[tokio::test(start_paused = true)]
async fn no_call_with_side_effects_is_made_without_a_durable_ledger_record() {
    let mut h = harness(Faults::none()).await;
    let failing: Arc<dyn Store> =
        Arc::new(rein_store::Intercepted::new(h.store.clone(), NoDeclares));
    h.engine = Engine::builder(failing).rng_seed(7).build().unwrap();
    let a = agent(
        &h.desk,
        script(json!([
            call(UPDATE_DELIVERY_TIME, update_args()),
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            answer("done")
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(
        h.desk.request_count(UPDATE_DELIVERY_TIME),
        0,
        "write-ahead: no record, no call"
    );
    // The store stayed away past its patience: the run stopped at the
    // safe point before the write and is handed on, never failed for it.
    assert!(out.interrupted, "{:#?}", out.report);
    assert_eq!(
        h.desk.request_count(GET_ORDER),
        0,
        "nothing after the refused declaration runs"
    );
    assert!(
        out.report
            .summary
            .contains("the run store stayed unavailable"),
        "{}",
        out.report.summary
    );
    let record = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(record.status, rein_store::RunStatus::Running);
}

#[tokio::test(start_paused = true)]
async fn non_retryable_failure_compensates_earlier_writes_in_reverse_order() {
    let h = harness(Faults::none()).await;
    let a = agent(&h.desk, script(three_updates()), true);
    // The third update conflicts: not retryable, so the first two are undone.
    h.desk.set_faults(Faults::none()).unwrap();
    conflict_on_update(&h.desk, 3);
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Failed, "{:#?}", out.report);
    assert_eq!(h.desk.applied_count(RESTORE_DELIVERY_TIME), 2);
    assert_eq!(
        effect_order(&h.desk),
        effects(&[
            (UPDATE_DELIVERY_TIME, "A-1001"),
            (UPDATE_DELIVERY_TIME, "A-1002"),
            (RESTORE_DELIVERY_TIME, "A-1002"),
            (RESTORE_DELIVERY_TIME, "A-1001"),
        ]),
        "strict reverse order"
    );
    assert_eq!(
        h.desk.order("A-1001").unwrap().delivery_date,
        "2026-01-05T14:00:00Z"
    );
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    let statuses: Vec<LedgerStatus> = ledger.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        vec![
            LedgerStatus::Compensated,
            LedgerStatus::Compensated,
            LedgerStatus::Failed
        ]
    );
    let events = kinds(&h, &out).await;
    assert_eq!(
        events
            .iter()
            .filter(|(k, _)| *k == EventKind::CompensationStarted)
            .count(),
        2
    );
    assert_eq!(out.report.compensations.len(), 2);
}

#[tokio::test(start_paused = true)]
async fn failed_weak_compensation_ends_manual_with_a_handoff_package() {
    let h = harness(Faults::none().always(RESTORE_DELIVERY_TIME, Fault::status(503))).await;
    let mut a = agent(
        &h.desk,
        script(json!([
            update("A-1001", "2026-02-01T10:00:00Z"),
            update("A-1002", "2026-02-02T10:00:00Z"),
            answer("stuck"),
        ])),
        true,
    );
    a.compensations.insert(
        UPDATE_DELIVERY_TIME.to_owned(),
        restore(&h.desk, CompensationGrade::Weak),
    );
    conflict_on_update(&h.desk, 2);
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::HandedOff, "{:#?}", out.report);
    assert_eq!(
        h.desk.request_count(RESTORE_DELIVERY_TIME),
        1,
        "a weak compensation runs once"
    );
    let package = out.report.handoff.as_ref().expect("a handoff package");
    assert_eq!(package.awaiting_decision.len(), 1);
    assert_eq!(package.awaiting_decision[0].tool, UPDATE_DELIVERY_TIME);
    assert_eq!(package.awaiting_decision[0].status, LedgerStatus::Manual);
    assert!(package.timeline.iter().all(|t| t.input_digest.len() == 16));
    // Retrievable later by run id.
    let stored = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(stored.report.unwrap().handoff.unwrap(), *package);
}

#[tokio::test(start_paused = true)]
async fn an_effect_without_compensation_is_uncompensatable_and_handed_off() {
    let h = harness(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::status(409))).await;
    let email = json!({"to": "buyer@example.com", "subject": "s", "body": "b"});
    let a = agent(
        &h.desk,
        script(json!([
            call(SEND_EMAIL, email),
            update("A-1001", "2026-02-01T10:00:00Z"),
            answer("stuck"),
        ])),
        true,
    );
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::HandedOff, "{:#?}", out.report);
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 1);
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::CompensationFinished
                && d["status"] == "uncompensatable"
                && d["alert"] == true)
    );
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger[0].status, LedgerStatus::Uncompensatable);
}

#[tokio::test(start_paused = true)]
async fn continue_policy_keeps_effects_and_reports_partial_success() {
    let h = harness(Faults::none()).await;
    let mut a = agent(
        &h.desk,
        script(json!([
            update("A-1001", "2026-02-01T10:00:00Z"),
            update("A-1002", "2026-02-02T10:00:00Z"),
            answer("half done"),
        ])),
        true,
    );
    a.on_failure = rein_core::FailurePolicy::Continue;
    conflict_on_update(&h.desk, 2);
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::PartialSuccess);
    assert_eq!(h.desk.applied_count(RESTORE_DELIVERY_TIME), 0);
}

// Real time: a real process cannot be driven by paused time (tokio would
// advance to the command's deadline while the process starts).
#[tokio::test]
async fn a_command_tool_runs_in_the_loop_with_its_ledger_record_and_lease() {
    use rein_engine::run::ToolTarget;
    use rein_engine::tool_command::CommandTarget;
    let h = harness(Faults::none()).await;
    let mut a = agent(
        &h.desk,
        script(json!([
            call("archive", json!({"order_id": "A-1001"})),
            answer("archived"),
        ])),
        true,
    );
    // A local program: reads its JSON arguments on stdin, answers JSON.
    let target = CommandTarget::new("archive", "/bin/sh").with_args([
        "-c",
        r#"read -r args; printf '{"archived": true, "key": "%s"}' "$REIN_IDEMPOTENCY_KEY""#,
    ]);
    a.tools.insert(
        "archive".into(),
        ToolBinding {
            name: "archive".into(),
            class: ToolClass::IdempotentWrite,
            latency: LatencyProfile::new(ms(10), ms(100), ms(2_000), 0).unwrap(),
            normalizer: Normalizer::default(),
            target: ToolTarget::Command(target),
            resource_group: None,
            self_heal_allowance: None,
            declared: Default::default(),
        },
    );
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let result = &out.report.completed[0].result;
    assert_eq!(result["archived"], true);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger[0].status, LedgerStatus::Succeeded);
    assert_eq!(
        result["key"].as_str().unwrap(),
        ledger[0].idempotency_key.as_ref().unwrap().as_str(),
        "the command got the call's idempotency key"
    );
    assert!(
        h.store.leases_of_run(&out.run_id).await.unwrap().is_empty(),
        "the lease was released"
    );
}

/// Runs `agent` while sampling, every millisecond, how many `tool` requests
/// the desk is handling at once (arrived, not yet answered); returns the
/// run and the highest count seen.
async fn run_measuring_peak(h: &Harness, agent: &AgentBinding, tool: &str) -> (RunOutput, usize) {
    let in_flight = || {
        h.desk
            .requests()
            .iter()
            .filter(|r| r.tool == tool && r.status.is_none())
            .count()
    };
    let run = run(h, agent);
    tokio::pin!(run);
    let mut peak = 0;
    loop {
        tokio::select! {
            out = &mut run => return (out, peak.max(in_flight())),
            () = tokio::time::sleep(ms(1)) => peak = peak.max(in_flight()),
        }
    }
}

/// A turn of four concurrent `get_order` calls, each held 200 ms by the desk.
fn four_slow_reads() -> (Faults, Value) {
    let faults = Faults::none().always(GET_ORDER, Fault::Delay(ms(200)));
    let calls = ["A-1001", "A-1002", "A-1003", "A-1001"]
        .iter()
        .enumerate()
        .map(|(i, order)| json!({"id": format!("c{i}"), "name": GET_ORDER, "arguments": {"order_id": order}}))
        .collect();
    (faults, json!([turn(Value::Array(calls)), answer("looked")]))
}

fn queue_waits(events: &[(EventKind, Value)]) -> Vec<u64> {
    events
        .iter()
        .filter(|(k, _)| *k == EventKind::ToolCallStarted)
        .map(|(_, d)| d["queue_wait_ms"].as_u64().unwrap())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn resource_group_ceiling_bounds_concurrent_attempts_and_the_run_still_succeeds() {
    let (faults, turns) = four_slow_reads();
    let h = harness(faults).await;
    let mut a = agent(&h.desk, script(turns), true);
    a.group_limits
        .insert("order_api".into(), std::num::NonZeroU32::new(2).unwrap());
    let (out, peak) = run_measuring_peak(&h, &a, GET_ORDER).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(out.report.completed.len(), 4);
    assert_eq!(h.desk.request_count(GET_ORDER), 4, "no attempt was lost");
    assert_eq!(
        peak, 2,
        "at most the ceiling in flight, and the ceiling used"
    );
    // Two went at once; the other two queued for a slot, and said so.
    let mut waits = queue_waits(&kinds(&h, &out).await);
    waits.sort_unstable();
    assert_eq!(waits.len(), 4);
    assert_eq!(&waits[..2], &[0, 0], "{waits:?}");
    // Paused time: each queued for exactly the 200 ms a slot was held.
    assert_eq!(&waits[2..], &[200, 200], "{waits:?}");
}

#[tokio::test(start_paused = true)]
async fn without_a_ceiling_every_call_of_a_turn_goes_at_once() {
    let (faults, turns) = four_slow_reads();
    let h = harness(faults).await;
    let a = agent(&h.desk, script(turns), true);
    assert!(a.group_limits.is_empty());
    let (out, peak) = run_measuring_peak(&h, &a, GET_ORDER).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(peak, 4);
    let events = kinds(&h, &out).await;
    assert_eq!(queue_waits(&events), vec![0, 0, 0, 0]);
    assert!(
        !events
            .iter()
            .any(|(k, _)| *k == EventKind::ConcurrencyWaitExpired)
    );
}

#[tokio::test(start_paused = true)]
async fn a_ceiling_is_shared_across_runs_and_a_slot_not_free_before_the_deadline_fails_the_attempt()
{
    // The first `get_order` holds the group's only slot for 1.5 s. Breakers
    // open on the first failure: a call that never reached the tool must
    // not count as one.
    let mut breakers = rein_core::breaker::BreakersConfig::default();
    breakers.tool.consecutive_failures = Some(1);
    breakers.resource_group.consecutive_failures = Some(1);
    let h = harness_with_breakers(
        Faults::none().then(GET_ORDER, Fault::Delay(ms(1_500))),
        breakers,
    )
    .await;
    let one = std::num::NonZeroU32::MIN;
    let read = || call(GET_ORDER, json!({"order_id": "A-1001"}));
    let mut slow = agent(&h.desk, script(json!([read(), answer("read")])), true);
    slow.group_limits.insert("order_api".into(), one);
    slow.tools.get_mut(GET_ORDER).unwrap().latency =
        LatencyProfile::new(ms(10), ms(500), ms(1_000), 100).unwrap();
    // Another run of the same engine, with a one-second wall clock.
    let mut hurried = agent(&h.desk, script(json!([read(), answer("read")])), true);
    hurried.group_limits.insert("order_api".into(), one);
    hurried.budget = BudgetLimits::new(Duration::from_secs(1)).unwrap();

    let second = async {
        while h.desk.request_count(GET_ORDER) == 0 {
            tokio::time::sleep(ms(1)).await;
        }
        run(&h, &hurried).await
    };
    let (first, second) = tokio::join!(run(&h, &slow), second);

    assert_eq!(
        first.report.outcome,
        Outcome::Succeeded,
        "{:#?}",
        first.report
    );
    assert_eq!(
        h.desk.request_count(GET_ORDER),
        1,
        "the second run's call never reached the desk"
    );
    let events = kinds(&h, &second).await;
    assert!(!events.iter().any(|(k, _)| *k == EventKind::ToolCallStarted));
    let shed = events
        .iter()
        .find(|(k, _)| *k == EventKind::CallShed)
        .expect("the wait is recorded");
    assert_eq!(shed.1["resource_group"], "order_api");
    assert_eq!(shed.1["reason"], "wait_expired");
    assert!(shed.1["waited_ms"].as_u64().unwrap() >= 500, "{shed:?}");
    // A structured, not-applied timeout, shed by the governor at step 4
    // (before any attempt, so there is nothing to retry).
    assert!(
        !events
            .iter()
            .any(|(k, _)| matches!(k, EventKind::RetryScheduled | EventKind::ToolCallFinished)),
        "{events:?}"
    );
    let failed = &second.report.incomplete[0];
    assert_eq!(failed.tool, GET_ORDER);
    assert_eq!(failed.category, Category::Timeout);
    assert_ne!(second.report.outcome, Outcome::Succeeded);
    assert!(
        !events
            .iter()
            .any(|(k, _)| *k == EventKind::BreakerStateChanged),
        "the target's health was not charged for rein's own queue"
    );
}

/// Cancelling a run mid-flight aborts the in-flight read at once, and the
/// run still settles: the update it made before is undone (settlement is
/// never cancelled), and it ends `cancelled`.
#[tokio::test(start_paused = true)]
async fn a_cancelled_run_aborts_in_flight_and_still_compensates() {
    let h = harness(Faults::none().then(GET_ORDER, Fault::Delay(ms(5_000)))).await;
    let agent = agent(
        &h.desk,
        script(json!([
            update("A-1001", "2026-02-01T10:00:00Z"),
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            answer("done"),
        ])),
        true,
    );
    let cancel = rein_engine::run::CancellationToken::new();
    // Cancel once the slow read reached the desk.
    let watch = async {
        while h.desk.request_count(GET_ORDER) == 0 {
            tokio::time::sleep(ms(5)).await;
        }
        cancel.cancel();
    };
    let started = tokio::time::Instant::now();
    let run = h.engine.run(
        &agent,
        &rein_engine::run::AcceptAll,
        rein_engine::run::RunRequest {
            input: "Move order A-1001.".into(),
            cancel: Some(cancel.clone()),
            ..rein_engine::run::RunRequest::default()
        },
    );
    let (out, ()) = tokio::join!(run, watch);
    let out = out.unwrap();
    // Paused time: the run ended before the desk would have answered.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the slow read was aborted: {:?}",
        started.elapsed()
    );
    assert_eq!(out.report.outcome, Outcome::Cancelled, "{:?}", out.report);
    assert_eq!(
        effect_order(&h.desk),
        effects(&[
            (UPDATE_DELIVERY_TIME, "A-1001"),
            (RESTORE_DELIVERY_TIME, "A-1001")
        ]),
        "the update was undone after the cancellation"
    );
    let events = kinds(&h, &out).await;
    assert!(events.iter().any(|(k, _)| *k == EventKind::RunCancelled));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_succeeded_run_is_never_reopened_by_a_resume() {
    // A takeover that read `running` just before the owner finished must
    // not drive the run's last step again.
    let h = harness(Faults::none()).await;
    let a = agent(&h.desk, script(json!([answer("done")])), false);
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, rein_core::Outcome::Succeeded);
    assert!(out.report.recoverable, "its report still says recoverable");
    let again = h
        .engine
        .resume(&a, &rein_engine::run::AcceptAll, &out.run_id, None)
        .await;
    let Err(err) = again else {
        panic!("a succeeded run is not resumed");
    };
    assert!(err.to_string().contains("succeeded"), "{err}");
    let events = kinds(&h, &out).await;
    assert_eq!(
        events
            .iter()
            .filter(|(k, _)| *k == rein_core::EventKind::RunFinished)
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_turn_salvages_reads_asks_again_for_writes_and_says_which() {
    let h = harness(Faults::none()).await;
    // Both calls' arguments were cut at the output-token limit.
    let a = agent(
        &h.desk,
        script(json!([
            {"tool_calls": [
                {"name": GET_ORDER, "arguments": "{\"order_id\": \"A-1001\", \"verbose\": tr"},
                {"name": UPDATE_DELIVERY_TIME, "arguments": "{\"order_id\": \"A-1001\", \"delivery_date\": \"2026-12"}
             ], "finish_reason": "length"},
            answer("done"),
        ])),
        false,
    );
    let out = run(&h, &a).await;
    let events = kinds(&h, &out).await;
    let cut: Vec<&Value> = events
        .iter()
        .filter(|(k, _)| *k == EventKind::ModelOutputTruncated)
        .map(|(_, d)| d)
        .collect();
    assert_eq!(cut.len(), 1, "{events:?}");
    assert_eq!(cut[0]["salvaged"], json!([GET_ORDER]));
    assert_eq!(cut[0]["asked_again"], json!([UPDATE_DELIVERY_TIME]));
    assert_eq!(cut[0]["action"], "asked_again");
    // The read ran on its complete fields; the write was never made.
    assert_eq!(h.desk.request_count(GET_ORDER), 1);
    assert_eq!(h.desk.request_count(UPDATE_DELIVERY_TIME), 0);
    assert_eq!(
        h.engine.metrics().get(
            "rein_model_output_truncated_total",
            &[("action", "asked_again")]
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_retries_have_a_ceiling_per_run_apart_from_each_calls_policy() {
    let h = harness(Faults::none()).await;
    let mut a = agent(
        &h.desk,
        script(json!([
            {"error": {"status": 503}},
            {"error": {"status": 503}},
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            {"error": {"status": 503}},
            answer("never reached"),
        ])),
        false,
    );
    a.model_retry.max_retries = 2;
    let out = run(&h, &a).await;
    // The model is down (time may fix it): what was done stands, honestly
    // partial, and the run can be resumed once the provider is back.
    assert_eq!(
        out.report.outcome,
        Outcome::PartialSuccess,
        "{:?}",
        out.report
    );
    assert!(out.report.recoverable);
    assert!(
        out.report
            .summary
            .contains("already retried model calls 2 times"),
        "{}",
        out.report.summary
    );
    let events = kinds(&h, &out).await;
    let abandoned: Vec<&Value> = events
        .iter()
        .filter(|(k, _)| *k == EventKind::RetryAbandoned)
        .map(|(_, d)| d)
        .collect();
    assert_eq!(abandoned.len(), 1);
    assert_eq!(abandoned[0]["reason"], "run_model_retry_budget");
    // Tool retries are not model retries: the tool's call was made.
    assert_eq!(h.desk.request_count(GET_ORDER), 1);
}

/// A bound that fails a test rather than measures it.
const GENEROUS: Duration = Duration::from_secs(30);

/// The order desk agent with writes that may take up to 10 s (p99 5 s):
/// a call the desk holds stays in flight instead of timing out, and a
/// minute of wall clock.
fn patient_agent(h: &Harness, turns: Value) -> AgentBinding {
    let mut a = agent(&h.desk, script(turns), true);
    for tool in [UPDATE_DELIVERY_TIME, SEND_EMAIL] {
        a.tools.get_mut(tool).unwrap().latency =
            LatencyProfile::new(ms(10), ms(100), Duration::from_secs(5), 100).unwrap();
    }
    a.budget = BudgetLimits::new(Duration::from_secs(60))
        .unwrap()
        .with_steps(10)
        .unwrap();
    a
}

fn email_turn() -> Value {
    call(
        SEND_EMAIL,
        json!({"to": "buyer@example.com", "subject": "s", "body": "b"}),
    )
}

fn run_request(run_id: &str) -> rein_engine::run::RunRequest {
    rein_engine::run::RunRequest {
        run_id: Some(rein_core::RunId::new(run_id.to_owned()).unwrap()),
        input: "Move order A-1001.".into(),
        ..rein_engine::run::RunRequest::default()
    }
}

async fn claim_released(h: &Harness, run_id: &rein_core::RunId) -> bool {
    h.store
        .leases_of_run(run_id)
        .await
        .unwrap()
        .iter()
        .all(|l| l.kind != rein_store::LeaseKind::Run)
}

/// Issue 13, review items 4, 8 and T1: `Engine::interrupt` (a draining
/// server, a signal on `rein run`) lets a write already sent finish — the
/// desk holds it until the interrupt has happened — records its result,
/// and stops right after its step, which is not checkpointed; nothing of
/// the interrupt is counted as a failure. The run stays `running` with its
/// claim released, and another engine finishes it without sending the
/// write again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_lets_a_sent_write_finish_and_another_engine_finishes_the_run() {
    let h = harness(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::Hold)).await;
    let turns = json!([update("A-1001", "2026-02-01T10:00:00Z"), answer("done")]);
    let a = patient_agent(&h, turns.clone());
    let act = async {
        assert!(
            h.desk.until_held(1, GENEROUS).await,
            "the write reached the desk"
        );
        h.engine.interrupt(HandOn::AnyWorker);
        h.desk.release_held();
    };
    let run = h
        .engine
        .run(&a, &rein_engine::run::AcceptAll, run_request("r-held"));
    let (out, ()) = tokio::join!(run, act);
    let out = out.unwrap();
    assert!(out.interrupted, "{:?}", out.report);
    let record = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(record.status, rein_store::RunStatus::Running);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(
        ledger[0].status,
        LedgerStatus::Succeeded,
        "the sent write finished and its result is recorded: nothing in doubt"
    );
    assert!(
        h.store
            .latest_checkpoint(&out.run_id)
            .await
            .unwrap()
            .is_none(),
        "the cut step is not checkpointed"
    );
    assert!(
        claim_released(&h, &out.run_id).await,
        "the claim was released"
    );
    let events = kinds(&h, &out).await;
    let (last, data) = events.last().unwrap();
    assert_eq!(*last, EventKind::RunInterrupted, "{events:?}");
    assert_eq!(data["continue_with"], "any_worker");
    assert_eq!(data["completed_steps"], 0, "no step was checkpointed");
    for never in [
        EventKind::RunCancelled,
        EventKind::SettlementStarted,
        EventKind::RunFinished,
        EventKind::ToolDisabled,
    ] {
        assert!(
            !events.iter().any(|(k, _)| *k == never),
            "{never:?} in {events:?}"
        );
    }
    // This engine is stopping: it starts nothing more.
    let refused = h
        .engine
        .resume(&a, &rein_engine::run::AcceptAll, &out.run_id, None)
        .await;
    assert!(refused.is_err(), "an interrupted engine resumes nothing");

    let next = Engine::builder(h.store.clone()).build().unwrap();
    let b = patient_agent(&h, turns);
    let resumed = next
        .resume(&b, &rein_engine::run::AcceptAll, &out.run_id, None)
        .await
        .unwrap();
    assert!(!resumed.interrupted);
    assert_eq!(
        resumed.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        resumed.report
    );
    assert_eq!(
        h.desk.request_count(UPDATE_DELIVERY_TIME),
        1,
        "its recorded result was replayed, not sent again"
    );
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

/// Review item 4: an irreversible call in flight when the interrupt comes
/// is not aborted into a call in doubt (which is never repeated, and so a
/// case for a human): it finishes, and the resumed run succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_never_turns_an_irreversible_call_in_flight_into_a_manual_case() {
    let h = harness(Faults::none().then(SEND_EMAIL, Fault::Hold)).await;
    let turns = json!([email_turn(), answer("notified")]);
    let a = patient_agent(&h, turns.clone());
    let act = async {
        assert!(h.desk.until_held(1, GENEROUS).await);
        h.engine.interrupt(HandOn::AnyWorker);
        h.desk.release_held();
    };
    let run = h
        .engine
        .run(&a, &rein_engine::run::AcceptAll, run_request("r-email"));
    let (out, ()) = tokio::join!(run, act);
    let out = out.unwrap();
    assert!(out.interrupted);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger[0].status, LedgerStatus::Succeeded, "{ledger:?}");

    let next = Engine::builder(h.store.clone()).build().unwrap();
    let resumed = next
        .resume(
            &patient_agent(&h, turns),
            &rein_engine::run::AcceptAll,
            &out.run_id,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        resumed.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        resumed.report
    );
    assert!(resumed.report.handoff.is_none());
    assert_eq!(h.desk.request_count(SEND_EMAIL), 1);
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 1);
}

/// Review item 4, the wait before the send: a run whose irreversible email
/// waits for the resource group's only slot (another run's email holds it,
/// held at the desk) is handed on at once when interrupted, without sending
/// anything. The governor sits at step 4, before the ledger: the waiting
/// email was never declared, so nothing is pending or in doubt, and the
/// resume sends it afresh: one email per run, no human case. The other
/// run's email, already sent, finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_before_the_send_marks_the_call_unsent_and_the_resume_sends_it_once() {
    let h = harness(Faults::none().then(SEND_EMAIL, Fault::Hold)).await;
    let turns = json!([email_turn(), answer("notified")]);
    let one_slot = |mut a: AgentBinding| {
        a.group_limits
            .insert("order_api".into(), std::num::NonZeroU32::MIN);
        a
    };
    let holder = one_slot(patient_agent(&h, turns.clone()));
    let waiter = one_slot(patient_agent(&h, turns.clone()));
    let waiter_id = rein_core::RunId::new("r-waiting".to_owned()).unwrap();
    let first = h.engine.run(
        &holder,
        &rein_engine::run::AcceptAll,
        run_request("r-holding"),
    );
    let second = async {
        assert!(
            h.desk.until_held(1, GENEROUS).await,
            "the first email holds the slot"
        );
        let run = h.engine.run(
            &waiter,
            &rein_engine::run::AcceptAll,
            run_request("r-waiting"),
        );
        tokio::pin!(run);
        // Waiting for the slot, in the governor's queue.
        let queued = async {
            while h.engine.governor_queued("order_api") == 0 {
                tokio::time::sleep(ms(5)).await;
            }
        };
        tokio::select! {
            out = &mut run => panic!("the run ended before its call queued: {out:?}"),
            () = queued => {}
        }
        h.engine.interrupt(HandOn::AnyWorker);
        let out = tokio::time::timeout(GENEROUS, run)
            .await
            .expect("handed on without waiting for the slot")
            .unwrap();
        // Only now does the first email go on.
        h.desk.release_held();
        out
    };
    let (first, second) = tokio::join!(first, second);
    let (first, second) = (first.unwrap(), second);
    assert!(first.interrupted && second.interrupted);
    assert_eq!(
        h.desk.request_count(SEND_EMAIL),
        1,
        "the waiting email was not sent"
    );
    let unsent = h.store.ledger(&second.run_id).await.unwrap();
    assert!(
        unsent.is_empty(),
        "shed before its declaration: nothing pending, nothing in doubt: {unsent:?}"
    );
    assert_eq!(second.run_id, waiter_id);
    assert_eq!(
        h.store.ledger(&first.run_id).await.unwrap()[0].status,
        LedgerStatus::Succeeded,
        "the email in flight finished"
    );

    let next = Engine::builder(h.store.clone()).build().unwrap();
    for out in [&first, &second] {
        let resumed = next
            .resume(
                &patient_agent(&h, turns.clone()),
                &rein_engine::run::AcceptAll,
                &out.run_id,
                None,
            )
            .await
            .unwrap();
        assert_eq!(
            resumed.report.outcome,
            Outcome::Succeeded,
            "{:?}",
            resumed.report
        );
    }
    assert_eq!(
        h.desk.request_count(SEND_EMAIL),
        2,
        "the unsent email went out on resume"
    );
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 2, "one email per run");
    let resent = h.store.ledger(&second.run_id).await.unwrap();
    assert_eq!(resent.len(), 1, "declared once, on resume: {resent:?}");
    assert_eq!(resent[0].status, LedgerStatus::Succeeded);
}

/// A `sleep` process of this machine, killed when dropped.
struct Sleeper(std::process::Child);

impl Sleeper {
    fn start() -> Sleeper {
        Sleeper(
            std::process::Command::new("sleep")
                .arg("600")
                .spawn()
                .unwrap(),
        )
    }

    /// Its owner id, as its claim would record it: this machine's host,
    /// boot id and pid namespace (what follows the `@` of this process's
    /// id), its pid.
    fn owner(&self) -> String {
        let me = rein_engine::lease::Owner::current().to_string();
        format!("pid:{}{}#claim", self.0.id(), &me[me.find('@').unwrap()..])
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.0.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
    }
}

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Review item 3 and T3: a queued run whose claim is held, lease running,
/// by a live process of this machine — or one stopped with SIGSTOP, alive
/// but silent — is never taken over early; once that process is gone, it
/// is taken over at once, without waiting for the lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_of_a_live_or_stopped_process_is_never_taken_early_and_a_dead_ones_is() {
    let h = harness(Faults::none()).await;
    let a = agent(&h.desk, script(json!([answer("done")])), true);
    let tenant = rein_core::TenantId::new("default".to_owned()).unwrap();
    let run_id = h
        .engine
        .enqueue(&a, tenant, "Say done.".into(), None)
        .await
        .unwrap();
    let mut owner = Sleeper::start();
    let lease = rein_store::Lease {
        lease_id: format!("run:{run_id}"),
        run_id: run_id.clone(),
        intent_id: None,
        kind: rein_store::LeaseKind::Run,
        pgid: None,
        path: None,
        owner: owner.owner(),
        acquired_at_ms: Timestamp::from_millis(0),
        expires_at_ms: Timestamp::from_millis(u64::MAX / 2),
    };
    h.store.acquire_lease(lease).await.unwrap();
    let start = || {
        h.engine.run(
            &a,
            &rein_engine::run::AcceptAll,
            rein_engine::run::RunRequest {
                run_id: Some(run_id.clone()),
                enqueued: true,
                ..rein_engine::run::RunRequest::default()
            },
        )
    };
    let refused = start().await.unwrap_err();
    assert!(
        refused.to_string().contains("driven by a live process"),
        "{refused}"
    );
    owner.signal(nix::sys::signal::Signal::SIGSTOP);
    let refused = start().await.unwrap_err();
    assert!(
        refused.to_string().contains("driven by a live process"),
        "a stopped owner is alive: {refused}"
    );
    owner.0.kill().unwrap();
    owner.0.wait().unwrap();
    let out = start().await.unwrap();
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
}

//! The planner sees its budget, and a budget too short for another tool
//! round trip gets one last minimal-output turn (issue 16, item 5), against
//! the testkit's mock OpenAI server and order desk on loopback.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{agent, harness, kinds, ms, run};
use rein_core::budget_view::FINAL_TURN_INSTRUCTION;
use rein_core::deadline::BudgetLimits;
use rein_core::{EventKind, LatencyProfile, Outcome};
use rein_engine::provider::OpenAiProvider;
use rein_engine::run::AgentBinding;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, ToolCall};
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk};
use serde_json::{Value, json};

const ANSWER: &str = "A-1001 ships on 7 January; A-1002 was not checked.";

fn definitions() -> Vec<Value> {
    vec![json!({"type": "function", "function": {
        "name": GET_ORDER, "description": "Look up one order by its id.",
        "parameters": {"type": "object", "properties": {
            "order_id": {"type": "string", "description": "the order"}}}}})]
}

/// The agent asking `model`, its tools offered.
fn asking(desk: &OrderDesk, model: &MockModel) -> AgentBinding {
    let provider = Arc::new(OpenAiProvider::new(
        "mock",
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ));
    let mut a = agent(desk, provider, true);
    a.tool_definitions = definitions();
    a
}

/// The content of a request's last message.
fn last_message(body: &Value) -> String {
    body["messages"].as_array().unwrap().last().unwrap()["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(start_paused = true)]
async fn every_turn_tells_the_model_what_is_left_in_human_units() {
    let h = harness(Faults::none()).await;
    let model = MockModel::start([
        Reply::tool_call(GET_ORDER, &json!({"order_id": "A-1001"})),
        Reply::text("done"),
    ])
    .await
    .unwrap();
    let mut a = asking(&h.desk, &model);
    a.budget = a.budget.with_tokens(50_000).unwrap();
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let notes: Vec<String> = model
        .requests()
        .iter()
        .map(|r| last_message(&r.body))
        .collect();
    assert_eq!(notes.len(), 2);
    // One step charged per turn: 9 then 8 left of 10; 16 s of the forward
    // path (20 s less the 20 % compensation reserve).
    assert!(
        notes[0].starts_with("Budget left for this run: 9 steps, 16 s, 50,000 tokens."),
        "{}",
        notes[0]
    );
    assert!(notes[1].starts_with("Budget left for this run: 8 steps, "));
    // The note is never kept in the transcript: the second request holds
    // one note, the current one.
    let second = model.requests()[1].body["messages"].clone();
    let with_note = second
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| {
            m["content"]
                .as_str()
                .is_some_and(|c| c.starts_with("Budget left"))
        })
        .count();
    assert_eq!(with_note, 1);

    // Off: nothing is added.
    let h = harness(Faults::none()).await;
    let model = MockModel::start([Reply::text("done")]).await.unwrap();
    let mut a = asking(&h.desk, &model);
    a.planner = a.planner.with_show_budget(false);
    run(&h, &a).await;
    assert!(!last_message(&model.requests()[0].body).starts_with("Budget left"));
}

#[tokio::test(start_paused = true)]
async fn time_too_short_for_another_round_trip_gets_one_last_turn_without_tools() {
    // The lookup takes 720 ms of the 800 ms forward path: 80 ms remain,
    // less than a turn (5 ms), the tool's median (100 ms) and the turn
    // reading its result.
    let h = harness(Faults::none().always(GET_ORDER, Fault::Delay(ms(720)))).await;
    let model = MockModel::start([
        Reply::tool_call(GET_ORDER, &json!({"order_id": "A-1001"})),
        Reply::text(ANSWER),
        Reply::tool_call(GET_ORDER, &json!({"order_id": "A-1002"})),
    ])
    .await
    .unwrap();
    let mut a = asking(&h.desk, &model);
    a.budget = BudgetLimits::new(ms(1_000))
        .unwrap()
        .with_steps(10)
        .unwrap();
    for tool in a.tools.values_mut() {
        tool.latency = LatencyProfile::new(ms(100), ms(400), ms(800), 100).unwrap();
    }
    let out = run(&h, &a).await;

    assert_eq!(
        out.report.outcome,
        Outcome::BudgetExhausted,
        "{:#?}",
        out.report
    );
    assert_eq!(out.report.answer.as_deref(), Some(ANSWER));
    assert!(
        out.report
            .summary
            .contains("final answer from what it knew"),
        "{}",
        out.report.summary
    );
    assert_eq!(h.desk.request_count(GET_ORDER), 1, "no tool ran after it");
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "one last turn, then the run ends");
    let last = &requests[1].body;
    assert!(
        last.get("tools")
            .is_none_or(|t| t.as_array().is_some_and(|a| a.is_empty())),
        "{last}"
    );
    assert!(last_message(last).ends_with(FINAL_TURN_INSTRUCTION));
    let events = kinds(&h, &out).await;
    let (_, requested) = events
        .iter()
        .find(|(k, _)| *k == EventKind::FinalTurnRequested)
        .expect("final_turn_requested");
    assert_eq!(requested["short"]["dimension"], "wall_clock");
    assert_eq!(requested["short"]["needed"], "110ms");
    let short: rein_core::deadline::Exhausted =
        serde_json::from_value(requested["short"].clone()).unwrap();
    assert_eq!(short.needed, 110);
    assert!(short.remaining < 110, "{short:?}");
}

#[tokio::test(start_paused = true)]
async fn tokens_too_short_get_a_last_turn_that_fits_the_ceiling_exactly() {
    let h = harness(Faults::none()).await;
    let model = MockModel::start_with(
        MockModelConfig::new([
            // A long first turn of three lookups: what it leaves is too
            // little for another tool call and the turn that reads the
            // three results.
            Reply::tool_calls(
                ["A-1001", "A-1002", "A-1003"]
                    .map(|id| ToolCall::new(GET_ORDER, &json!({"order_id": id}))),
            )
            .with_usage(0, 1_000),
            // Wordier than what is left: the mock cuts it at `max_tokens`.
            Reply::text(ANSWER).with_usage(0, 5_000),
        ])
        .with_output_cap("mock-model", 16_384)
        .with_metered_usage(),
    )
    .await
    .unwrap();
    let mut a = asking(&h.desk, &model);
    a.max_output_tokens = Some(16_384);
    a.budget = a.budget.with_tokens(2_600).unwrap();
    let out = run(&h, &a).await;

    assert_eq!(
        out.report.outcome,
        Outcome::BudgetExhausted,
        "{:#?}",
        out.report
    );
    let events = kinds(&h, &out).await;
    let (_, requested) = events
        .iter()
        .find(|(k, _)| *k == EventKind::FinalTurnRequested)
        .unwrap_or_else(|| panic!("final_turn_requested: {events:#?}"));
    assert_eq!(requested["short"]["dimension"], "tokens");
    assert_eq!(h.desk.request_count(GET_ORDER), 3);
    let usage = model.usage_log();
    assert_eq!(usage.len(), 2);
    let counted: u64 = usage
        .iter()
        .map(|u| u.prompt_tokens + u.completion_tokens)
        .sum();
    assert!(counted <= 2_600, "the model side counted {counted}");
    assert_eq!(out.report.consumed.tokens, counted);
    // The last turn asked for what was left after its prompt, no more.
    let left = 2_600 - (usage[0].prompt_tokens + usage[0].completion_tokens);
    let asked = usage[1].max_tokens.unwrap();
    assert!(
        asked + usage[1].prompt_tokens <= left,
        "{asked} + prompt > {left}"
    );
    assert_eq!(requested["max_tokens"].as_u64(), Some(asked));
    assert!(model.requests()[1].body.get("tools").is_none());
}

#[tokio::test(start_paused = true)]
async fn with_the_final_turn_off_the_model_is_offered_tools_it_has_no_time_for() {
    let h = harness(Faults::none().always(GET_ORDER, Fault::Delay(ms(720)))).await;
    let model = MockModel::start([
        Reply::tool_call(GET_ORDER, &json!({"order_id": "A-1001"})),
        Reply::tool_call(GET_ORDER, &json!({"order_id": "A-1002"})),
        Reply::text(ANSWER),
    ])
    .await
    .unwrap();
    let mut a = asking(&h.desk, &model);
    a.budget = BudgetLimits::new(ms(1_000))
        .unwrap()
        .with_steps(10)
        .unwrap();
    for tool in a.tools.values_mut() {
        tool.latency = LatencyProfile::new(ms(100), ms(400), ms(800), 100).unwrap();
    }
    a.planner = a.planner.with_final_turn(false);
    let out = run(&h, &a).await;

    // Offered tools it has no time for, the model spends a turn proposing
    // a lookup rein refuses, then answers.
    assert_eq!(model.request_count(), 3);
    assert_eq!(h.desk.request_count(GET_ORDER), 1);
    assert!(
        model.requests()[1].body["tools"]
            .as_array()
            .is_some_and(|t| !t.is_empty())
    );
    assert_eq!(
        out.report.outcome,
        Outcome::PartialSuccess,
        "{:#?}",
        out.report
    );
    let events = kinds(&h, &out).await;
    assert!(
        !events
            .iter()
            .any(|(k, _)| *k == EventKind::FinalTurnRequested)
    );
}

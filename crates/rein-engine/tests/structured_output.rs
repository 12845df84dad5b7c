//! Structured output never degrades (issue 36), on real parts: the
//! testkit's mock model over loopback, spoken to by the Anthropic and the
//! OpenAI-compatible providers, and a binding's chain through the engine.
//!
//! - An Anthropic request with a `json_schema` `response_format` is sent
//!   with the answer tool (`input_schema` the schema) forced by
//!   `tool_choice`, and its `tool_use` comes back as the answer's JSON
//!   text with finish `stop`, whole and streamed.
//! - A function tool's `strict` and the `response_format` reach an
//!   OpenAI-compatible provider unchanged.
//! - Prose to a `json_schema` request fails its link: the fallback answers
//!   when there is one, else the call fails, and a streamed answer ends in
//!   that failure, never in `Done`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{harness, ms};
use futures_util::StreamExt;
use rein_core::Category;
use rein_engine::provider::{
    AnthropicProvider, FinishReason, Message, ModelProvider, ModelRequest, OpenAiProvider,
    StreamEvent, StreamLimits,
};
use rein_engine::run::{ModelAsk, ModelBinding, ModelLink, ModelReply};
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use rein_testkit::order_desk::Faults;
use serde_json::{Value, json};

const GENEROUS: Duration = Duration::from_secs(5);

fn schema() -> Value {
    json!({"type": "object",
           "properties": {"order_id": {"type": "string"}, "eta_days": {"type": "integer"}},
           "required": ["order_id", "eta_days"], "additionalProperties": false})
}

fn response_format() -> Value {
    json!({"type": "json_schema",
           "json_schema": {"name": "delivery", "schema": schema(), "strict": true}})
}

/// What the model is asked to fill in.
fn delivery() -> Value {
    json!({"order_id": "A-1001", "eta_days": 3})
}

fn request(tools: Vec<Value>) -> ModelRequest {
    ModelRequest {
        model: "claude-test".into(),
        messages: vec![Message::user("When does A-1001 arrive?")],
        tools,
        max_tokens: None,
        options: [("response_format".to_owned(), response_format())]
            .into_iter()
            .collect(),
        continuation: false,
    }
}

fn anthropic(name: &str, model: &MockModel) -> Arc<dyn ModelProvider> {
    Arc::new(AnthropicProvider::new(
        name,
        &model.openai_base_url(),
        None,
        GENEROUS,
        rein_engine::run::http_client().unwrap(),
    ))
}

fn openai(name: &str, model: &MockModel) -> Arc<dyn ModelProvider> {
    Arc::new(OpenAiProvider::new(
        name,
        &model.openai_base_url(),
        None,
        GENEROUS,
        rein_engine::run::http_client().unwrap(),
    ))
}

async fn mock() -> MockModel {
    MockModel::start_with(MockModelConfig::default().with_fallback_text("Sure! It arrives soon."))
        .await
        .unwrap()
}

/// The answer tool and its forced choice, as the mock received them.
fn assert_forced_answer_tool(body: &Value) {
    let tools = body["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1, "{body}");
    assert_eq!(tools[0]["name"], "delivery");
    assert_eq!(tools[0]["input_schema"], schema());
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "delivery"})
    );
    assert!(body.get("response_format").is_none(), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_json_schema_answer_is_the_forced_tools_input_as_text() {
    let model = mock().await;
    model.push_replies([
        Reply::tool_call("delivery", &delivery()),
        Reply::tool_call("delivery", &delivery()),
    ]);
    let provider = anthropic("claude", &model);

    // Whole.
    let answer = provider
        .complete(&request(Vec::new()), GENEROUS)
        .await
        .unwrap();
    assert_forced_answer_tool(&model.last_request().unwrap().body);
    let text = answer.text.as_deref().unwrap();
    assert_eq!(serde_json::from_str::<Value>(text).unwrap(), delivery());
    assert!(answer.tool_calls.is_empty());
    assert_eq!(answer.finish, FinishReason::Stop);

    // Streamed: the input's pieces arrive as text deltas.
    let limits = StreamLimits {
        allowance: GENEROUS,
        first_byte: GENEROUS,
        idle: GENEROUS,
    };
    let mut stream = provider.stream(&request(Vec::new()), limits).await.unwrap();
    let recorded = model.last_request().unwrap();
    assert!(recorded.stream());
    assert_forced_answer_tool(&recorded.body);
    let (mut streamed, mut deltas, mut done) = (String::new(), 0, None);
    while let Some(item) = stream.next().await {
        match item.unwrap() {
            StreamEvent::Delta(delta) => {
                assert!(delta.tool_calls.is_empty(), "{delta:?}");
                if let Some(text) = delta.text.filter(|t| !t.is_empty()) {
                    streamed.push_str(&text);
                    deltas += 1;
                }
            }
            StreamEvent::Done(response) => done = Some(response),
            StreamEvent::PromptTokens(tokens) => assert!(tokens > 0),
            StreamEvent::Recovered(recovered) => {
                panic!("a provider stream never recovers itself: {recovered:?}")
            }
        }
    }
    assert!(deltas > 1, "the JSON streams in pieces, got {deltas}");
    assert_eq!(
        serde_json::from_str::<Value>(&streamed).unwrap(),
        delivery()
    );
    let done = done.unwrap();
    assert_eq!(done.text.as_deref(), Some(streamed.as_str()));
    assert_eq!(done.finish, FinishReason::Stop);
    assert!(done.tool_calls.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_and_the_response_format_reach_an_openai_provider_unchanged() {
    let model = mock().await;
    model.push_reply(Reply::text(&delivery().to_string()));
    let tool = json!({"type": "function", "function": {
        "name": "get_order", "description": "Reads an order.", "strict": true,
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"], "additionalProperties": false}}});
    let answer = openai("gpt", &model)
        .complete(&request(vec![tool.clone()]), GENEROUS)
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(answer.text.as_deref().unwrap()).unwrap(),
        delivery()
    );
    let body = model.last_request().unwrap().body;
    assert_eq!(body["tools"][0], tool);
    assert_eq!(body["tools"][0]["function"]["strict"], true);
    assert_eq!(body["response_format"], response_format());
}

/// A gateway-style binding: `primary`, then `fallback` when there is one.
fn binding(primary: ModelLink, fallback: Option<ModelLink>) -> ModelBinding {
    ModelBinding {
        name: "structured".into(),
        kind: rein_core::registry::BindingKind::Chat,
        primary,
        fallbacks: fallback.into_iter().collect(),
        context_fallbacks: Vec::new(),
        provider_limits: Default::default(),
        provider_tokens: Default::default(),
        retry: rein_core::retry::RetryPolicy::default(),
        model_latency: rein_core::LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap(),
        stream: rein_engine::provider::StreamSettings::default(),
        same_model: rein_core::retry::SameModelRetry::NONE,
        deadline: rein_core::registry::DEFAULT_GATEWAY_DEADLINE,
        recover_streams: true,
    }
}

fn link(provider: Arc<dyn ModelProvider>, model: &str) -> ModelLink {
    ModelLink {
        provider,
        model: model.into(),
        price: None,
        max_output_tokens: None,
    }
}

fn ask(stream: bool) -> ModelAsk {
    ModelAsk {
        request: request(Vec::new()),
        deadline: Duration::from_secs(20),
        stream,
        cancel: rein_engine::run::CancellationToken::new(),
        observer: None,
        tenant: None,
        trace_parent: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prose_moves_the_chain_on_and_the_anthropic_fallback_answers_json() {
    let h = harness(Faults::none()).await;
    let primary = mock().await;
    let backup = mock().await;
    primary.push_reply(Reply::text("Sure! A-1001 arrives in three days."));
    backup.push_reply(Reply::tool_call("delivery", &delivery()));
    let binding = binding(
        link(openai("gpt", &primary), "gpt-test"),
        Some(link(anthropic("claude", &backup), "claude-test")),
    );
    let answer = h.engine.ask_model(&binding, ask(false)).await.unwrap();
    assert_eq!(
        (answer.provider.as_str(), answer.fell_back),
        ("claude", true)
    );
    let ModelReply::Complete(response) = answer.reply else {
        panic!("a whole answer was asked for");
    };
    assert_eq!(
        serde_json::from_str::<Value>(response.text.as_deref().unwrap()).unwrap(),
        delivery()
    );
    assert_eq!(response.finish, FinishReason::Stop);
    assert_eq!((primary.request_count(), backup.request_count()), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prose_from_the_last_link_is_a_failure_whole_or_streamed() {
    let h = harness(Faults::none()).await;
    let model = mock().await;
    // Fits JSON, not the schema: still not the answer asked for.
    model.push_reply(Reply::text(r#"{"order_id": "A-1001"}"#));
    let binding = binding(link(openai("gpt", &model), "gpt-test"), None);
    let Err(e) = h.engine.ask_model(&binding, ask(false)).await else {
        panic!("prose passed as the answer");
    };
    assert_eq!(e.category, Category::Transient);
    assert!(e.message.contains("delivery"), "{}", e.message);
    assert!(e.message.contains("eta_days"), "{}", e.message);
    assert_eq!(model.request_count(), 1, "not asked again: {}", e.message);

    // Streamed: committed at the first event, failed at the end.
    let answer = h.engine.ask_model(&binding, ask(true)).await.unwrap();
    let ModelReply::Stream(mut stream) = answer.reply else {
        panic!("a stream was asked for");
    };
    let mut last = None;
    while let Some(item) = stream.next().await {
        last = Some(item);
    }
    let failure = last.unwrap().unwrap_err();
    assert!(
        failure.human_message().contains("not JSON"),
        "{}",
        failure.human_message()
    );
}

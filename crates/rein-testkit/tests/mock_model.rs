//! The mock OpenAI-compatible model over real loopback HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{
    DEFAULT_FALLBACK_TEXT, DEFAULT_MODEL, FinishReason, MockModel, MockModelConfig, Reply, ToolCall,
};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

fn request(content: &str) -> Value {
    json!({
        "model": "gpt-test",
        "stream": false,
        "messages": [{"role": "user", "content": content}],
        "tools": [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}],
    })
}

async fn complete(client: &Client, model: &MockModel, body: &Value) -> reqwest::Response {
    client
        .post(model.chat_completions_url())
        .json(body)
        .send()
        .await
        .expect("the mock answers")
}

#[tokio::test]
async fn replays_the_script_in_order_and_records_every_request() {
    let model = MockModel::start([
        Reply::tool_call("get_order", &json!({"order_id": "A-1001"})),
        Reply::text("first answer"),
        Reply::text("second answer"),
    ])
    .await
    .unwrap();
    let client = Client::new();

    let turn1: Value = complete(&client, &model, &request("one"))
        .await
        .json()
        .await
        .unwrap();
    let turn2: Value = complete(&client, &model, &request("two"))
        .await
        .json()
        .await
        .unwrap();
    let turn3: Value = complete(&client, &model, &request("three"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(turn1["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(turn2["choices"][0]["message"]["content"], "first answer");
    assert_eq!(turn3["choices"][0]["message"]["content"], "second answer");
    assert_eq!(model.pending(), 0);

    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let seen: Vec<&Value> = requests
        .iter()
        .map(|r| &r.messages()[0]["content"])
        .collect();
    assert_eq!(seen, ["one", "two", "three"]);
    assert_eq!(requests[0].seq, 1);
    assert_eq!(requests[0].tools()[0]["function"]["name"], "get_order");
    assert_eq!(model.last_request().unwrap().body, request("three"));
    model.shutdown().await.unwrap();
}

#[tokio::test]
async fn tool_calls_have_the_openai_shape() {
    let model = MockModel::start([Reply::tool_calls([
        ToolCall::new("get_order", &json!({"order_id": "A-1001"})),
        ToolCall::raw("send_email", "{\"to\": \"x@exa").with_id("call_custom"),
    ])
    .with_text("Looking it up.")
    .with_usage(1200, 35)])
    .await
    .unwrap();
    let client = Client::new();
    let response = complete(&client, &model, &request("go")).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["id"], "chatcmpl-mock-1");
    assert_eq!(body["model"], "gpt-test");
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["role"], "assistant");
    assert_eq!(choice["message"]["content"], "Looking it up.");
    let calls = choice["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(
        calls[0],
        json!({"id": "call_1_0", "type": "function", "function": {"name": "get_order", "arguments": "{\"order_id\":\"A-1001\"}"}})
    );
    assert_eq!(calls[1]["id"], "call_custom");
    assert_eq!(
        calls[1]["function"]["arguments"], "{\"to\": \"x@exa",
        "sent verbatim, malformed"
    );
    assert_eq!(
        body["usage"],
        json!({"prompt_tokens": 1200, "completion_tokens": 35, "total_tokens": 1235})
    );
}

#[tokio::test]
async fn empty_script_answers_the_fallback_so_runs_end() {
    let model = MockModel::start([]).await.unwrap();
    let client = Client::new();
    for _ in 0..2 {
        let body: Value = complete(&client, &model, &request("anything"))
            .await
            .json()
            .await
            .unwrap();
        let choice = &body["choices"][0];
        assert_eq!(choice["message"]["content"], DEFAULT_FALLBACK_TEXT);
        assert_eq!(choice["finish_reason"], "stop");
        assert!(choice["message"].get("tool_calls").is_none());
    }

    let custom = MockModel::start_with(MockModelConfig::default().with_fallback_text("all set"))
        .await
        .unwrap();
    let body: Value = complete(&client, &custom, &request("x"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "all set");
}

#[tokio::test]
async fn truncated_reply_finishes_with_length() {
    let model = MockModel::start([Reply::truncated("The order is")])
        .await
        .unwrap();
    let body: Value = complete(&Client::new(), &model, &request("x"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        body["choices"][0]["finish_reason"],
        FinishReason::Length.as_str()
    );
}

#[tokio::test]
async fn injected_errors_have_openai_bodies_and_consume_replies_in_order() {
    let model = MockModel::start([
        Reply::rate_limited(Some(RetryAfter::Seconds(7))),
        Reply::server_error(),
        Reply::unavailable(),
        Reply::context_length_exceeded(),
        Reply::bad_request("Invalid 'tools[0].function.name'"),
        Reply::unauthorized(),
        Reply::text("recovered"),
    ])
    .await
    .unwrap();
    let client = Client::new();

    let limited = complete(&client, &model, &request("x")).await;
    assert_eq!(limited.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.headers()["retry-after"], "7");
    let body: Value = limited.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");

    let expected = [
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            Value::Null,
        ),
        (StatusCode::SERVICE_UNAVAILABLE, "server_error", Value::Null),
        (
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            json!("context_length_exceeded"),
        ),
        (
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            Value::Null,
        ),
        (
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            json!("invalid_api_key"),
        ),
    ];
    for (status, error_type, code) in expected {
        let response = complete(&client, &model, &request("x")).await;
        assert_eq!(response.status(), status);
        assert!(response.headers().get("retry-after").is_none());
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], error_type, "{body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty())
        );
    }

    let body: Value = complete(&client, &model, &request("x"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "recovered");
    assert_eq!(model.request_count(), 7);
}

#[tokio::test]
async fn api_key_is_checked_and_refusals_do_not_consume_replies() {
    let model =
        MockModel::start_with(MockModelConfig::new([Reply::text("hello")]).with_api_key("sk-test"))
            .await
            .unwrap();
    let client = Client::new();

    let missing = complete(&client, &model, &request("x")).await;
    assert_eq!(missing.status(), StatusCode::UNAUTHORIZED);
    let wrong = client
        .post(model.chat_completions_url())
        .bearer_auth("sk-wrong")
        .json(&request("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    let body: Value = wrong.json().await.unwrap();
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert_eq!(model.pending(), 1);

    let right = client
        .post(model.chat_completions_url())
        .bearer_auth("sk-test")
        .json(&request("x"))
        .send()
        .await
        .unwrap();
    assert_eq!(right.status(), StatusCode::OK);
    let body: Value = right.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "hello");

    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].authorization, None);
    assert_eq!(requests[2].authorization.as_deref(), Some("Bearer sk-test"));

    let models = client
        .get(format!("{}/models", model.openai_base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn models_endpoint_lists_the_model() {
    let model = MockModel::start([]).await.unwrap();
    let body: Value = Client::new()
        .get(format!("{}/models", model.openai_base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"][0]["id"], DEFAULT_MODEL);
}

#[tokio::test]
async fn malformed_requests_are_400_and_consume_nothing() {
    let model = MockModel::start([Reply::text("kept")]).await.unwrap();
    let client = Client::new();
    let cases = [
        json!({"model": "m", "messages": [], "stream": true}),
        json!({"model": "m"}),
    ];
    for body in cases {
        let response = complete(&client, &model, &body).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error");
    }
    let not_json = client
        .post(model.chat_completions_url())
        .body("{oops")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    assert_eq!(model.pending(), 1);
    assert_eq!(model.requests()[2].body, json!("{oops"));
}

#[tokio::test]
async fn lost_response_errors_the_client() {
    let model = MockModel::start([Reply::lose_response(), Reply::text("after")])
        .await
        .unwrap();
    let client = Client::new();
    let outcome = async {
        client
            .post(model.chat_completions_url())
            .json(&request("x"))
            .send()
            .await?
            .json::<Value>()
            .await
    }
    .await;
    assert!(outcome.is_err(), "{outcome:?}");
    let body: Value = complete(&client, &model, &request("y"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "after");
}

#[tokio::test(start_paused = true)]
async fn delayed_reply_answers_late_in_tokio_time() {
    let model = MockModel::start([Reply::text("slow").delayed(Duration::from_secs(60))])
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let body: Value = complete(&Client::new(), &model, &request("x"))
        .await
        .json()
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_secs(60));
    assert_eq!(body["choices"][0]["message"]["content"], "slow");
}

#[tokio::test]
async fn replies_can_be_pushed_while_running() {
    let model = MockModel::start([]).await.unwrap();
    model.push_reply(Reply::text("pushed"));
    model.push_replies([Reply::text("then this")]);
    let client = Client::new();
    let a: Value = complete(&client, &model, &request("x"))
        .await
        .json()
        .await
        .unwrap();
    let b: Value = complete(&client, &model, &request("x"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a["choices"][0]["message"]["content"], "pushed");
    assert_eq!(b["choices"][0]["message"]["content"], "then this");
}

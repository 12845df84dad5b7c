//! The mock OpenAI-compatible model over real loopback HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{
    DEFAULT_FALLBACK_TEXT, DEFAULT_MODEL, FinishReason, MockModel, MockModelConfig, Reply,
    STREAM_PIECE_CHARS, StreamFault, ToolCall,
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
        json!({"model": "m", "messages": "not an array"}),
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

// ---- streaming and the Messages API ----

/// One server-sent event: its `event:` type, if any, and its `data:`.
#[derive(Debug, Clone, PartialEq)]
struct Event {
    kind: Option<String>,
    data: String,
}

impl Event {
    fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap_or_else(|e| panic!("{e}: {}", self.data))
    }
}

fn events(body: &str) -> Vec<Event> {
    body.split("\n\n")
        .filter(|block| !block.trim().is_empty())
        .map(|block| {
            let mut kind = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(k) = line.strip_prefix("event: ") {
                    kind = Some(k.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data.push_str(d);
                }
            }
            Event { kind, data }
        })
        .collect()
}

fn stream_request(content: &str, include_usage: bool) -> Value {
    let mut body = request(content);
    body["stream"] = json!(true);
    if include_usage {
        body["stream_options"] = json!({"include_usage": true});
    }
    body
}

fn anthropic_request(stream: bool) -> Value {
    json!({
        "model": "claude-test",
        "max_tokens": 1024,
        "stream": stream,
        "messages": [{"role": "user", "content": "hi"}],
    })
}

async fn post_messages(client: &Client, model: &MockModel, body: &Value) -> reqwest::Response {
    client
        .post(model.messages_url())
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .expect("the mock answers")
}

/// Reads a stream until it ends or fails: the text received and whether it
/// ended cleanly.
async fn read_stream(mut response: reqwest::Response) -> (String, bool) {
    let mut text = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => text.extend_from_slice(&bytes),
            Ok(None) => return (String::from_utf8(text).unwrap(), true),
            Err(_) => return (String::from_utf8(text).unwrap(), false),
        }
    }
}

fn tool_call_reply() -> Reply {
    Reply::tool_calls([
        ToolCall::new(
            "get_order",
            &json!({"order_id": "A-1001", "fields": ["eta"]}),
        ),
        ToolCall::raw("send_email", "{\"to\": \"x@exa").with_id("call_custom"),
    ])
    .with_text("Looking it up for you now.")
    .with_usage(1200, 35)
}

#[tokio::test]
async fn openai_stream_sends_text_and_tool_calls_in_pieces_then_usage_and_done() {
    let model = MockModel::start([tool_call_reply()]).await.unwrap();
    let response = complete(&Client::new(), &model, &stream_request("go", true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let (body, clean) = read_stream(response).await;
    assert!(clean);
    let events = events(&body);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1].iter().map(Event::json).collect();
    for chunk in &chunks {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(chunk["id"], "chatcmpl-mock-1");
        assert_eq!(chunk["model"], "gpt-test");
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");

    let content: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|t| !t.is_empty())
        .collect();
    assert!(
        content.len() > 1,
        "text comes in several deltas: {content:?}"
    );
    assert!(
        content
            .iter()
            .all(|p| p.chars().count() <= STREAM_PIECE_CHARS)
    );
    assert_eq!(content.concat(), "Looking it up for you now.");

    let mut ids = vec![String::new(); 2];
    let mut names = vec![String::new(); 2];
    let mut arguments = vec![String::new(); 2];
    let mut argument_deltas = 0;
    for chunk in &chunks {
        for call in chunk["choices"][0]["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let i = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                ids[i] = id.to_owned();
                assert_eq!(call["type"], "function");
            }
            if let Some(name) = call["function"]["name"].as_str() {
                names[i] = name.to_owned();
            }
            if let Some(piece) = call["function"]["arguments"].as_str() {
                if !piece.is_empty() {
                    argument_deltas += 1;
                }
                arguments[i].push_str(piece);
            }
        }
    }
    assert_eq!(ids, ["call_1_0", "call_custom"]);
    assert_eq!(names, ["get_order", "send_email"]);
    assert_eq!(
        arguments,
        [
            r#"{"fields":["eta"],"order_id":"A-1001"}"#,
            "{\"to\": \"x@exa"
        ]
    );
    assert!(argument_deltas > 2, "arguments are split across chunks");

    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(finish["usage"], Value::Null);
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 1200, "completion_tokens": 35, "total_tokens": 1235})
    );
    assert!(model.last_request().unwrap().stream());
}

#[tokio::test]
async fn openai_stream_without_include_usage_sends_no_usage() {
    let model = MockModel::start([Reply::text("hello")]).await.unwrap();
    let response = complete(&Client::new(), &model, &stream_request("go", false)).await;
    let (body, _) = read_stream(response).await;
    let events = events(&body);
    assert_eq!(events.last().unwrap().data, "[DONE]");
    for event in &events[..events.len() - 1] {
        let chunk = event.json();
        assert!(chunk.get("usage").is_none(), "{chunk}");
        assert_eq!(chunk["choices"].as_array().unwrap().len(), 1);
    }
    let last = events[events.len() - 2].json();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn messages_answers_in_anthropic_shape() {
    let model = MockModel::start([tool_call_reply(), Reply::truncated("The order")])
        .await
        .unwrap();
    let client = Client::new();
    let response = post_messages(&client, &model, &anthropic_request(false)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["id"], "msg_mock_1");
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["model"], "claude-test");
    assert_eq!(body["stop_reason"], "tool_use");
    assert_eq!(
        body["content"],
        json!([
            {"type": "text", "text": "Looking it up for you now."},
            {"type": "tool_use", "id": "toolu_mock_1_0", "name": "get_order",
             "input": {"order_id": "A-1001", "fields": ["eta"]}},
            {"type": "tool_use", "id": "call_custom", "name": "send_email",
             "input": "{\"to\": \"x@exa"},
        ])
    );
    assert_eq!(
        body["usage"],
        json!({"input_tokens": 1200, "output_tokens": 35})
    );
    let cut: Value = post_messages(&client, &model, &anthropic_request(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(cut["stop_reason"], "max_tokens");
    let recorded = model.last_request().unwrap();
    assert_eq!(recorded.path, "/v1/messages");
    assert!(!recorded.stream());
}

#[tokio::test]
async fn messages_checks_key_version_and_max_tokens_before_consuming() {
    let model =
        MockModel::start_with(MockModelConfig::new([Reply::text("hello")]).with_api_key("sk-ant"))
            .await
            .unwrap();
    let client = Client::new();
    let send = |key: Option<&str>, version: bool, body: Value| {
        let mut builder = client.post(model.messages_url()).json(&body);
        if let Some(key) = key {
            builder = builder.header("x-api-key", key);
        }
        if version {
            builder = builder.header("anthropic-version", "2023-06-01");
        }
        builder.send()
    };
    let cases = [
        (
            None,
            true,
            anthropic_request(false),
            401,
            "authentication_error",
        ),
        (
            Some("sk-wrong"),
            true,
            anthropic_request(false),
            401,
            "authentication_error",
        ),
        (
            Some("sk-ant"),
            false,
            anthropic_request(false),
            400,
            "invalid_request_error",
        ),
        (
            Some("sk-ant"),
            true,
            json!({"model": "m", "messages": []}),
            400,
            "invalid_request_error",
        ),
        (
            Some("sk-ant"),
            true,
            json!({"model": "m", "max_tokens": 5}),
            400,
            "invalid_request_error",
        ),
    ];
    for (key, version, body, status, error_type) in cases {
        let response = send(key, version, body).await.unwrap();
        assert_eq!(response.status().as_u16(), status);
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], error_type, "{body}");
    }
    assert_eq!(model.pending(), 1);
    let ok: Value = send(Some("sk-ant"), true, anthropic_request(false))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ok["content"][0]["text"], "hello");
    assert_eq!(model.requests()[5].api_key.as_deref(), Some("sk-ant"));
}

#[tokio::test]
async fn messages_errors_are_translated_to_anthropic_types() {
    let model = MockModel::start([
        Reply::rate_limited(Some(RetryAfter::Seconds(3))),
        Reply::unavailable(),
        Reply::context_length_exceeded(),
        Reply::unauthorized(),
        Reply::server_error(),
    ])
    .await
    .unwrap();
    let client = Client::new();
    let expected = [
        (429, "rate_limit_error", Some("3")),
        (529, "overloaded_error", None),
        (400, "invalid_request_error", None),
        (401, "authentication_error", None),
        (500, "api_error", None),
    ];
    for (status, error_type, retry_after) in expected {
        let response = post_messages(&client, &model, &anthropic_request(true)).await;
        assert_eq!(response.status().as_u16(), status);
        assert_eq!(
            response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap()),
            retry_after
        );
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["error"]["type"], error_type, "{body}");
        if status == 400 {
            let message = body["error"]["message"].as_str().unwrap();
            assert!(message.contains("prompt is too long"), "{message}");
        }
    }
}

#[tokio::test]
async fn messages_stream_sends_the_anthropic_event_sequence() {
    let model = MockModel::start([tool_call_reply()]).await.unwrap();
    let response = post_messages(&Client::new(), &model, &anthropic_request(true)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let (body, clean) = read_stream(response).await;
    assert!(clean);
    let events = events(&body);
    for event in &events {
        assert_eq!(event.kind.as_deref(), event.json()["type"].as_str());
    }
    let kinds: Vec<&str> = events.iter().filter_map(|e| e.kind.as_deref()).collect();
    assert_eq!(kinds[..2], ["message_start", "ping"]);
    assert_eq!(kinds[kinds.len() - 2..], ["message_delta", "message_stop"]);
    let start = events[0].json();
    assert_eq!(start["message"]["usage"]["input_tokens"], 1200);

    let mut text = String::new();
    let mut inputs: Vec<(String, String, String)> = Vec::new();
    for event in &events {
        let data = event.json();
        match event.kind.as_deref() {
            Some("content_block_start") if data["content_block"]["type"] == "tool_use" => {
                let block = &data["content_block"];
                inputs.push((
                    block["id"].as_str().unwrap().to_owned(),
                    block["name"].as_str().unwrap().to_owned(),
                    String::new(),
                ));
            }
            Some("content_block_delta") => match data["delta"]["type"].as_str() {
                Some("text_delta") => text.push_str(data["delta"]["text"].as_str().unwrap()),
                Some("input_json_delta") => inputs
                    .last_mut()
                    .unwrap()
                    .2
                    .push_str(data["delta"]["partial_json"].as_str().unwrap()),
                other => panic!("unexpected delta {other:?}"),
            },
            _ => {}
        }
    }
    assert_eq!(text, "Looking it up for you now.");
    assert_eq!(inputs[0].0, "toolu_mock_1_0");
    assert_eq!(inputs[0].1, "get_order");
    assert_eq!(inputs[0].2, r#"{"fields":["eta"],"order_id":"A-1001"}"#);
    assert_eq!(
        inputs[1].2, "{\"to\": \"x@exa",
        "partial_json is sent verbatim"
    );
    let delta = events[events.len() - 2].json();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 35);
}

#[tokio::test]
async fn stream_headers_then_silence_sends_no_event() {
    let model = MockModel::start([
        Reply::text("never").with_stream_fault(StreamFault::silent(Duration::from_secs(5)))
    ])
    .await
    .unwrap();
    let mut response = complete(&Client::new(), &model, &stream_request("x", true)).await;
    assert_eq!(response.status(), StatusCode::OK, "headers arrive");
    let next = tokio::time::timeout(Duration::from_millis(200), response.chunk()).await;
    assert!(next.is_err(), "no byte of body within the wait: {next:?}");
    assert_eq!(model.in_flight(), 1, "the stream is still being served");
}

#[tokio::test]
async fn stream_stall_after_some_events_holds_the_connection_idle() {
    let model = MockModel::start([Reply::text("a long answer that stalls").with_stream_fault(
        StreamFault::Stall {
            after: 3,
            hold: Duration::from_secs(5),
        },
    )])
    .await
    .unwrap();
    let mut response = complete(&Client::new(), &model, &stream_request("x", true)).await;
    let mut received = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_millis(200), response.chunk()).await {
            Ok(Ok(Some(bytes))) => received.extend_from_slice(&bytes),
            Ok(other) => panic!("the stream must stay open, got {other:?}"),
            Err(_) => break,
        }
    }
    let received = events(std::str::from_utf8(&received).unwrap());
    assert_eq!(received.len(), 3);
}

#[tokio::test]
async fn stream_drop_aborts_without_terminator_on_both_routes() {
    let fault = StreamFault::Drop { after: 4 };
    let model = MockModel::start([
        tool_call_reply().with_stream_fault(fault),
        tool_call_reply().with_stream_fault(fault),
        Reply::lose_response(),
    ])
    .await
    .unwrap();
    let client = Client::new();
    let (body, clean) =
        read_stream(complete(&client, &model, &stream_request("x", true)).await).await;
    assert!(!clean, "the body errors, it does not end");
    assert!(!body.contains("[DONE]"));
    assert!(events(&body).len() <= 4);
    let (body, clean) =
        read_stream(post_messages(&client, &model, &anthropic_request(true)).await).await;
    assert!(!clean);
    assert!(!body.contains("message_stop"));
    let (body, clean) =
        read_stream(complete(&client, &model, &stream_request("x", true)).await).await;
    assert!(!clean, "a lost stream is cut too");
    assert!(!body.contains("[DONE]"));
}

#[tokio::test]
async fn stream_malformed_event_is_sent_and_the_stream_goes_on() {
    let fault = StreamFault::Malformed { after: 2 };
    let model = MockModel::start([
        Reply::text("hello there").with_stream_fault(fault),
        Reply::text("hello there").with_stream_fault(fault),
    ])
    .await
    .unwrap();
    let client = Client::new();
    let (body, clean) =
        read_stream(complete(&client, &model, &stream_request("x", true)).await).await;
    assert!(clean);
    let events = events(&body);
    assert!(serde_json::from_str::<Value>(&events[2].data).is_err());
    assert_eq!(events.last().unwrap().data, "[DONE]");
    let (body, clean) =
        read_stream(post_messages(&client, &model, &anthropic_request(true)).await).await;
    assert!(clean);
    let events = self::events(&body);
    assert_eq!(events[2].kind.as_deref(), Some("content_block_delta"));
    assert!(serde_json::from_str::<Value>(&events[2].data).is_err());
    assert_eq!(events.last().unwrap().kind.as_deref(), Some("message_stop"));
}

#[tokio::test]
async fn stream_without_terminator_ends_cleanly_with_usage() {
    let model = MockModel::start([
        Reply::text("hi").with_stream_fault(StreamFault::NoTerminator),
        Reply::text("hi").with_stream_fault(StreamFault::NoTerminator),
    ])
    .await
    .unwrap();
    let client = Client::new();
    let (body, clean) =
        read_stream(complete(&client, &model, &stream_request("x", true)).await).await;
    assert!(clean);
    let events = events(&body);
    assert_ne!(events.last().unwrap().data, "[DONE]");
    let usage = events.last().unwrap().json();
    assert_eq!(usage["usage"]["prompt_tokens"], 100);
    let (body, clean) =
        read_stream(post_messages(&client, &model, &anthropic_request(true)).await).await;
    assert!(clean);
    let events = self::events(&body);
    assert_eq!(
        events.last().unwrap().kind.as_deref(),
        Some("message_delta")
    );
}

#[tokio::test]
async fn delayed_stream_sends_no_headers_while_it_waits() {
    let model = MockModel::start([Reply::text("late").delayed(Duration::from_secs(5))])
        .await
        .unwrap();
    let client = Client::new();
    let sent = tokio::time::timeout(
        Duration::from_millis(200),
        client
            .post(model.chat_completions_url())
            .json(&stream_request("x", true))
            .send(),
    )
    .await;
    assert!(sent.is_err(), "no headers within the wait");
}

#[tokio::test]
async fn non_streamed_request_ignores_stream_faults() {
    let model =
        MockModel::start([Reply::text("whole").with_stream_fault(StreamFault::Drop { after: 0 })])
            .await
            .unwrap();
    let body: Value = complete(&Client::new(), &model, &request("x"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "whole");
}

#[tokio::test]
async fn in_flight_counts_concurrent_requests_and_streams_until_their_end() {
    let model = MockModel::start_with(
        MockModelConfig::default()
            .with_latency(Duration::from_millis(300))
            .with_event_interval(Duration::from_millis(5)),
    )
    .await
    .unwrap();
    let client = Client::new();
    let one = |stream: bool| {
        let client = client.clone();
        let url = model.chat_completions_url();
        let body = if stream {
            stream_request("x", true)
        } else {
            request("x")
        };
        async move {
            let response = client.post(url).json(&body).send().await.unwrap();
            read_stream(response).await
        }
    };
    let answers = tokio::join!(one(true), one(false), one(true), one(false));
    assert!(answers.0.1 && answers.1.1 && answers.2.1 && answers.3.1);
    assert_eq!(model.peak_in_flight(), 4);
    assert_eq!(model.in_flight(), 0);
}

#[tokio::test]
async fn a_reasoning_model_refuses_max_tokens_and_over_cap_asks_name_their_member() {
    let model = MockModel::start_with(
        MockModelConfig::default()
            .with_max_completion_tokens_only("o3-mini")
            .with_output_cap("o3-mini", 100_000),
    )
    .await
    .unwrap();
    let client = Client::new();
    let mut body = request("hi");
    body["model"] = json!("o3-mini");
    body["max_tokens"] = json!(10);
    let refused = complete(&client, &model, &body).await;
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(
        error,
        json!({"error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error", "param": "max_tokens", "code": "unsupported_parameter"}})
    );
    body.as_object_mut().unwrap().remove("max_tokens");
    body["max_completion_tokens"] = json!(100_001);
    let over: Value = complete(&client, &model, &body).await.json().await.unwrap();
    assert_eq!(over["error"]["param"], "max_completion_tokens", "{over}");
    assert_eq!(over["error"]["code"], "invalid_value", "{over}");
    assert!(model.usage_log().is_empty(), "refusals consume nothing");
    body["max_completion_tokens"] = json!(100_000);
    let ok = complete(&client, &model, &body).await;
    assert_eq!(ok.status(), StatusCode::OK);
    let log = model.usage_log();
    assert_eq!(log.len(), 1);
    assert_eq!(
        (log[0].path.as_str(), log[0].max_tokens),
        ("/v1/chat/completions", Some(100_000))
    );
}

#[tokio::test]
async fn the_messages_api_refuses_max_tokens_above_the_cap_and_meters_usage() {
    let model = MockModel::start_with(
        MockModelConfig::new([Reply::text(&"x".repeat(40)).with_usage(10, 500)])
            .with_output_cap("claude-sonnet-4", 64_000)
            .with_metered_usage(),
    )
    .await
    .unwrap();
    let client = Client::new();
    let post = |max_tokens: u64| {
        client
            .post(model.messages_url())
            .header("anthropic-version", "2023-06-01")
            .json(
                &json!({"model": "claude-sonnet-4", "max_tokens": max_tokens,
                          "system": "s".repeat(40),
                          "messages": [{"role": "user", "content": "hi"}]}),
            )
            .send()
    };
    let refused = post(64_001).await.unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    let error: Value = refused.json().await.unwrap();
    assert_eq!(
        error,
        json!({"type": "error", "error": {"type": "invalid_request_error",
            "message": "max_tokens: 64001 > 64000, which is the maximum allowed number of output tokens for claude-sonnet-4"}})
    );
    assert_eq!(model.pending(), 1, "a refusal consumes no reply");
    // Metered: the answer stops at max_tokens, and the system prompt counts.
    let answer: Value = post(100).await.unwrap().json().await.unwrap();
    assert_eq!(answer["stop_reason"], "max_tokens", "{answer}");
    assert_eq!(answer["usage"]["output_tokens"], 100);
    let log = model.usage_log();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].path, "/v1/messages");
    assert_eq!(log[0].max_tokens, Some(100));
    assert_eq!(log[0].completion_tokens, 100);
    assert!(log[0].prompt_tokens >= 10, "{:?}", log[0]);
    assert_eq!(
        answer["usage"]["input_tokens"].as_u64(),
        Some(log[0].prompt_tokens)
    );
}

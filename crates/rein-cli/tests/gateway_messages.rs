//! The Anthropic-compatible gateway, `POST /v1/messages`, driven by the
//! official `anthropic` Python package with only its base URL changed: a
//! message, a streamed one, a tool-use round trip (whole and streamed), a
//! fallback, an ask above the cap, cut streams, a wrong key — through a
//! real `rein serve` whose bindings point at the testkit's mock model over
//! loopback. The wire details the SDK hides (the event sequence, the error
//! shape of every refusal, `x-api-key`, idempotent replays) are checked
//! with plain HTTP.
//!
//! The package comes from `.ci/run`'s venv (`$REIN_PYTHON`); without it the
//! SDK test says how to install it and passes, except under CI
//! (`CI=true`), where a missing package fails it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, StreamFault};
use serde_json::{Value, json};

mod common;
use common::Server;

/// The gateway's key and its SHA-256 (`printf %s KEY | sha256sum`).
const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";

/// The output cap of the `chat` binding's model.
const CAP: u64 = 4096;
/// What the recovered stream says, cut after its first words.
const RECOVERED: &str = "Recovered after the cut, word for word.";

fn config(dir: &std::path::Path, model_url: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[providers.mock]
kind = "openai"
base_url = "{model_url}"
max_output_tokens = {{ "mock-model" = {CAP} }}

# The same mock, spoken to in the Messages API.
[providers.claude]
kind = "anthropic"
base_url = "{model_url}"
max_output_tokens = {{ "mock-claude" = 8192 }}

[providers.dead]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
max_output_tokens = {{ gone = 4096 }}

# Cut streams are not recovered on these two: the SDK is shown raising.
[models.chat]
provider = "mock"
model = "mock-model"
recover_streams = false

[models.sonnet]
provider = "claude"
model = "mock-claude"
recover_streams = false

# A cut stream of the mock is continued by the mock in the Messages API.
[models.recovering]
provider = "mock"
model = "mock-model"
fallbacks = [{{ provider = "claude", model = "mock-claude" }}]

# A primary nobody answers: every call falls back to the mock.
[models.resilient]
provider = "dead"
model = "gone"
fallbacks = [{{ provider = "claude", model = "mock-claude" }}]

[[server.api_keys]]
tenant = "acme"
sha256 = "{KEY_SHA256}"
name = "gateway-test"
"#
    );
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    dir.join("rein.toml")
}

async fn mock() -> MockModel {
    MockModel::start_with(MockModelConfig::default().with_fallback_text("fallback text"))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_anthropic_client_messages_streams_and_uses_tools_through_the_gateway() {
    let python = match common::python_with("anthropic") {
        Ok(p) => p,
        Err(why) => {
            common::missing_part(&why);
            return;
        }
    };
    let model = mock().await;
    model.push_replies([
        Reply::text("Hello from the mock."),
        Reply::text("Streamed hello, in pieces."),
        Reply::tool_call("get_order", &json!({"order_id": "A-1001"})),
        Reply::text("A-1001 has shipped."),
        Reply::tool_call("get_order", &json!({"order_id": "A-1002"})),
        Reply::text("Answered by the fallback."),
        // The connection dies after three events: the first text is out.
        Reply::text("This answer is cut off somewhere in the middle.")
            .with_stream_fault(StreamFault::Drop { after: 3 }),
        // Through the Messages API provider: its in-band overloaded_error
        // after five events (message_start, ping, a block and two deltas).
        Reply::text("This answer overloads somewhere in the middle.")
            .with_stream_fault(StreamFault::Error { after: 5 }),
        // Cut after its first words, then continued in the Messages API
        // (the mock continues a prefill of its own text).
        Reply::text(RECOVERED).with_stream_fault(StreamFault::Drop { after: 3 }),
        Reply::text(RECOVERED),
        Reply::text("Counted by Claude.").with_usage(321, 4),
        Reply::text("Counted at the end.").with_usage(123, 4),
        Reply::text("A single red pixel."),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url());
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gateway_messages_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .env("REIN_GATEWAY_URL", server.url(""))
        .env("REIN_API_KEY", KEY)
        .env("REIN_MODEL", "chat")
        .env("REIN_FALLBACK_MODEL", "resilient")
        .env("REIN_CLAUDE_MODEL", "sonnet")
        .env("REIN_RECOVERING_MODEL", "recovering")
        .env("REIN_CAP", CAP.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the client failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        server.log_tail()
    );
    let checks: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let check = |name: &str| -> &Value {
        checks
            .iter()
            .find(|c| c["check"] == name)
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
    };
    let message = check("message");
    assert_eq!(message["type"], "message");
    assert_eq!(message["text"], "Hello from the mock.");
    assert_eq!(message["model"], "mock-model");
    assert_eq!(message["stop_reason"], "end_turn");
    assert_eq!(message["rein_model"], "mock/mock-model");
    assert_eq!(message["rein_fallback"], "false");
    assert!(message["input_tokens"].as_u64().unwrap() > 0, "{message}");
    assert!(message["output_tokens"].as_u64().unwrap() > 0, "{message}");

    let stream = check("stream");
    assert_eq!(stream["text"], "Streamed hello, in pieces.");
    assert_eq!(stream["final_text"], "Streamed hello, in pieces.");
    assert!(
        stream["pieces"].as_u64().unwrap() > 1,
        "in pieces: {stream}"
    );
    assert_eq!(stream["stop_reason"], "end_turn");
    assert!(stream["output_tokens"].as_u64().unwrap() > 0, "{stream}");
    let streamed = model
        .requests()
        .into_iter()
        .find(|r| r.stream())
        .expect("the provider was asked to stream");
    assert_eq!(
        streamed.messages()[0],
        json!({"role": "system", "content": "Be brief."}),
        "the system prompt reached the model"
    );

    let tool = check("tool_use");
    assert_eq!(tool["name"], "get_order");
    assert_eq!(tool["input"], json!({"order_id": "A-1001"}));
    assert_eq!(tool["stop_reason"], "tool_use");
    let result = check("tool_result");
    assert_eq!(result["text"], "A-1001 has shipped.");
    assert_eq!(result["stop_reason"], "end_turn");
    // The result reached the model as a tool message answering the call.
    let round_trip = model.requests()[3].clone();
    let tool_message = round_trip
        .messages()
        .iter()
        .find(|m| m["role"] == "tool")
        .cloned()
        .unwrap_or_else(|| panic!("{:?}", round_trip.messages()));
    assert_eq!(tool_message["tool_call_id"], tool["id"]);
    assert_eq!(tool_message["content"], r#"{"status": "shipped"}"#);
    assert_eq!(round_trip.tools()[0]["function"]["name"], "get_order");

    let streamed_tool = check("stream_tool_use");
    assert_eq!(streamed_tool["name"], "get_order");
    assert_eq!(streamed_tool["input"], json!({"order_id": "A-1002"}));
    assert_eq!(streamed_tool["stop_reason"], "tool_use");

    let fallback = check("fallback");
    assert_eq!(fallback["text"], "Answered by the fallback.");
    assert_eq!(fallback["rein_model"], "claude/mock-claude");
    assert_eq!(fallback["rein_fallback"], "true");

    let above = check("above_cap");
    assert_eq!(above["raised"], true, "{above}");
    assert_eq!(above["exception"], "BadRequestError", "{above}");
    assert_eq!(above["status"], 400);
    assert_eq!(above["error_type"], "invalid_request_error");
    let words = above["message"].as_str().unwrap();
    assert!(
        words.contains(&CAP.to_string()) && words.contains("max_tokens"),
        "{above}"
    );

    // Cut streams raise in the SDK, after the text that did arrive.
    let cut = check("cut_stream");
    assert_eq!(cut["raised"], true, "a cut stream passed for whole: {cut}");
    assert_eq!(cut["error_type"], "api_error", "{cut}");
    let overloaded = check("overloaded_stream");
    assert_eq!(overloaded["raised"], true, "{overloaded}");
    assert_eq!(overloaded["error_type"], "overloaded_error", "{overloaded}");
    for c in [cut, overloaded] {
        let pieces = c["pieces"].as_str().unwrap();
        assert!(!pieces.is_empty(), "the stream had begun: {c}");
        assert!(!pieces.ends_with("middle."), "only part of the text: {c}");
    }
    // A cut stream recovered by rein reads as one whole message.
    let recovered = check("recovered_stream");
    assert_eq!(recovered["pieces"], RECOVERED, "{recovered}");
    assert_eq!(recovered["text"], RECOVERED, "{recovered}");
    assert_eq!(recovered["stop_reason"], "end_turn", "{recovered}");

    let wrong = check("wrong_key");
    assert_eq!(wrong["exception"], "AuthenticationError", "{wrong}");
    assert_eq!(wrong["status"], 401);
    assert_eq!(wrong["error_type"], "authentication_error");
    let unknown = check("unknown_model");
    assert_eq!(unknown["exception"], "NotFoundError", "{unknown}");
    assert_eq!(unknown["error_type"], "not_found_error");
    assert!(
        unknown["message"].as_str().unwrap().contains("chat"),
        "the error lists the known bindings: {unknown}"
    );
    // `models.list()` and `models.retrieve()` by base URL: the bindings,
    // by id, in Anthropic's shape.
    let models = check("models");
    assert_eq!(
        models["ids"],
        json!(["chat", "recovering", "resilient", "sonnet"]),
        "{models}"
    );
    assert_eq!(models["types"], json!(["model"]));
    assert_eq!(models["display_names"][3], "sonnet (claude/mock-claude)");
    assert_eq!(models["has_more"], false);
    assert_eq!(models["first_id"], "chat");
    assert_eq!(models["last_id"], "sonnet");
    let model_info = check("model");
    assert_eq!(model_info["id"], "chat", "{model_info}");
    assert_eq!(model_info["type"], "model");
    let unknown_info = check("unknown_model_info");
    assert_eq!(unknown_info["exception"], "NotFoundError", "{unknown_info}");
    assert_eq!(unknown_info["error_type"], "not_found_error");
    // The SDK's count, answered by rein's bound: at the ratio learned
    // from the counts of the messages above.
    let count = check("count_tokens");
    assert!(count["input_tokens"].as_u64().unwrap() > 0, "{count}");
    assert_eq!(count["method"], "learned_ratio", "{count}");
    // An endpoint rein does not serve is a 404 the SDK reads.
    let batches = check("batches");
    assert_eq!(batches["exception"], "NotFoundError", "{batches}");
    assert_eq!(batches["error_type"], "not_found_error");
    assert!(
        batches["message"]
            .as_str()
            .unwrap()
            .contains("/v1/messages/batches"),
        "{batches}"
    );
    assert!(batches["request_id"].is_string(), "{batches}");
    // `message_start` says the prompt's tokens: the Messages API
    // upstream's own count; else rein's bound of them, never below what
    // the provider counts at the end.
    let claude = check("start_usage_claude");
    assert_eq!(claude["start_input_tokens"], 321, "{claude}");
    assert_eq!(claude["final_input_tokens"], 321, "{claude}");
    let openai = check("start_usage_openai");
    assert_eq!(openai["final_input_tokens"], 123, "{openai}");
    assert_eq!(
        openai["start_input_tokens"], count["input_tokens"],
        "rein's bound, as count_tokens says it: {openai}"
    );
    // An image block reaches the Messages API upstream as it was sent.
    assert_eq!(check("image")["text"], "A single red pixel.");
    let image = model.last_request().unwrap();
    assert_eq!(image.path, "/v1/messages");
    assert_eq!(image.messages()[0]["content"][0]["type"], "image");
    assert_eq!(
        image.messages()[0]["content"][0]["source"]["media_type"],
        "image/png"
    );
    // Every reply was asked for once; the refusals asked nothing.
    assert_eq!(model.pending(), 0);
    assert_eq!(
        model.request_count(),
        13,
        "the cut stream and its continuation"
    );
}

async fn post(server: &Server, auth: Option<(&str, &str)>, body: &str) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(server.url("/v1/messages"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some((name, value)) = auth {
        request = request.header(name, value);
    }
    request.send().await.unwrap()
}

/// The status, and the body, which must be Anthropic's error shape.
async fn anthropic_error(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert_eq!(
        response.headers()["content-type"],
        "application/json",
        "{status}"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    (status, body)
}

/// The event names of a Messages API stream, in order.
fn event_names(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_of_the_route_is_in_anthropics_shape() {
    let model = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url());
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let key = Some(("x-api-key", KEY));
    let hi =
        r#"{"model": "chat", "max_tokens": 100, "messages": [{"role": "user", "content": "Hi."}]}"#;

    // No key: 401, with the challenge.
    let anonymous = post(&server, None, hi).await;
    assert!(anonymous.headers().contains_key("www-authenticate"));
    let (status, body) = anthropic_error(anonymous).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-api-key"),
        "{body}"
    );
    // A wrong key, in either header.
    for auth in [("x-api-key", "nope"), ("authorization", "Bearer nope")] {
        let (status, body) = anthropic_error(post(&server, Some(auth), hi).await).await;
        assert_eq!(status, 401, "{auth:?}");
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    assert!(
        !server.log_tail().contains("nope"),
        "a presented key is never logged"
    );

    // Anthropic's required max_tokens; a block the engine cannot carry.
    let (status, body) = anthropic_error(
        post(
            &server,
            key,
            r#"{"model": "chat", "messages": [{"role": "user", "content": "Hi."}]}"#,
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"],
        json!({"type": "invalid_request_error", "message": "max_tokens: Field required"})
    );
    let document = json!({"model": "chat", "max_tokens": 100, "messages": [{"role": "user", "content": [
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="}}]}]});
    let (status, body) = anthropic_error(post(&server, key, &document.to_string()).await).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    let words = body["error"]["message"].as_str().unwrap();
    assert!(
        words.contains("document") && words.contains("/messages/0/content/0"),
        "{body}"
    );
    // The router's own refusals too.
    let get = reqwest::Client::new()
        .get(server.url("/v1/messages"))
        .header("x-api-key", KEY)
        .send()
        .await
        .unwrap();
    let (status, body) = anthropic_error(get).await;
    assert_eq!(status, 405);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(model.request_count(), 0, "no refusal asked the model");

    // A bearer key works as well; an idempotent request replays.
    let idempotent = || {
        reqwest::Client::new()
            .post(server.url("/v1/messages"))
            .header("content-type", "application/json")
            .bearer_auth(KEY)
            .header("Idempotency-Key", "message-1")
            .body(hi)
            .send()
    };
    let first = idempotent().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["rein-model"], "mock/mock-model");
    assert_eq!(first.headers()["rein-fallback"], "false");
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["type"], "message");
    assert_eq!(first["content"][0]["text"], "fallback text");
    let again = idempotent().await.unwrap();
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    // The replay says which model answered, as the first answer did.
    assert_eq!(again.headers()["rein-model"], "mock/mock-model");
    assert_eq!(again.headers()["rein-fallback"], "false");
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    assert_eq!(model.request_count(), 1, "the model was asked once");

    // The stream's events, in Anthropic's order.
    model.push_reply(Reply::text("One, two, three."));
    let streamed = post(
        &server,
        key,
        r#"{"model": "chat", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "Count."}]}"#,
    )
    .await;
    assert_eq!(streamed.status(), 200);
    assert_eq!(streamed.headers()["content-type"], "text/event-stream");
    let text = streamed.text().await.unwrap();
    let names = event_names(&text);
    assert_eq!(
        names[..4],
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta"
        ],
        "{text}"
    );
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"],
        "{text}"
    );
    assert!(text.contains(r#""stop_reason":"end_turn""#), "{text}");

    // A cut one ends with an error event, and no message_stop.
    model.push_reply(
        Reply::text("One, two, and then nothing more.")
            .with_stream_fault(StreamFault::Drop { after: 3 }),
    );
    let cut = post(
        &server,
        key,
        r#"{"model": "chat", "max_tokens": 100, "stream": true, "messages": [{"role": "user", "content": "Count."}]}"#,
    )
    .await
    .text()
    .await
    .unwrap();
    let names = event_names(&cut);
    assert_eq!(names.last().map(String::as_str), Some("error"), "{cut}");
    assert!(!names.iter().any(|n| n == "message_stop"), "{cut}");
}

/// The `data` of the stream's `message_delta` event.
fn message_delta(text: &str) -> Value {
    let data = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .find(|d| d.contains(r#""type":"message_delta""#))
        .unwrap_or_else(|| panic!("no message_delta in {text}"));
    serde_json::from_str(data).unwrap()
}

/// A stop sequence the provider names reaches the client as Anthropic's
/// `stop_reason: "stop_sequence"` with the sequence (whole and streamed),
/// and as `finish_reason: "stop"` on Chat Completions; the request's
/// `stop_sequences` reach the provider. Through an OpenAI provider, which
/// does not say which sequence matched, the answer is `end_turn`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_sequence_the_provider_names_is_answered_on_both_wire_formats() {
    let model = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url());
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let key = Some(("x-api-key", KEY));
    let ask = |binding: &str, stream: bool| {
        json!({"model": binding, "max_tokens": 100, "stream": stream,
               "stop_sequences": ["END", "STOP"],
               "messages": [{"role": "user", "content": "Count to three, then say END."}]})
        .to_string()
    };

    // Through the Messages API provider, whole.
    model.push_reply(Reply::text("1, 2, 3").with_stop_sequence("END"));
    let whole = post(&server, key, &ask("sonnet", false)).await;
    assert_eq!(whole.status(), 200);
    let whole: Value = whole.json().await.unwrap();
    assert_eq!(whole["stop_reason"], "stop_sequence", "{whole}");
    assert_eq!(whole["stop_sequence"], "END", "{whole}");
    assert_eq!(whole["content"][0]["text"], "1, 2, 3");
    let sent = model.last_request().unwrap();
    assert_eq!(
        sent.body["stop_sequences"],
        json!(["END", "STOP"]),
        "the request's stop sequences reach the provider: {}",
        sent.body
    );

    // Streamed: the sequence is in the message_delta.
    model.push_reply(Reply::text("1, 2, 3").with_stop_sequence("STOP"));
    let streamed = post(&server, key, &ask("sonnet", true)).await;
    assert_eq!(streamed.status(), 200);
    let text = streamed.text().await.unwrap();
    let delta = message_delta(&text);
    assert_eq!(delta["delta"]["stop_reason"], "stop_sequence", "{text}");
    assert_eq!(delta["delta"]["stop_sequence"], "STOP", "{text}");
    assert_eq!(
        event_names(&text).last().map(String::as_str),
        Some("message_stop")
    );

    // Chat Completions has no reason of its own for it: `stop`.
    model.push_reply(Reply::text("1, 2, 3").with_stop_sequence("END"));
    let chat = reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .json(&json!({"model": "sonnet", "stop": ["END"],
                      "messages": [{"role": "user", "content": "Count."}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    let chat: Value = chat.json().await.unwrap();
    assert_eq!(chat["choices"][0]["finish_reason"], "stop", "{chat}");

    // An OpenAI provider says `stop` for both: never claimed.
    model.push_reply(Reply::text("1, 2, 3").with_stop_sequence("END"));
    let openai: Value = post(&server, key, &ask("chat", false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(openai["stop_reason"], "end_turn", "{openai}");
    assert_eq!(openai["stop_sequence"], Value::Null, "{openai}");
    assert_eq!(
        model.last_request().unwrap().body["stop"],
        json!(["END", "STOP"])
    );
    assert_eq!(model.pending(), 0);
}

/// The `Retry-After` of a 429, in whole seconds.
fn retry_after_secs(response: &reqwest::Response) -> u64 {
    response
        .headers()
        .get("retry-after")
        .unwrap_or_else(|| panic!("a 429 without retry-after: {:?}", response.headers()))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// A provider's 429 that says to come back in an hour, beyond the call's
/// deadline: the gateway answers 429 with that wait in `Retry-After`, and
/// while the provider's pause holds every request of either wire format is
/// answered 429 with what is left of it, without asking the provider.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_429_of_the_gateway_says_when_to_come_back() {
    const HOUR: u64 = 3600;
    let model = mock().await;
    model.push_reply(Reply::rate_limited(Some(
        rein_testkit::RetryAfter::Seconds(HOUR),
    )));
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url());
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let hi = json!({"model": "chat", "max_tokens": 100,
                    "messages": [{"role": "user", "content": "Hi."}]});
    let ask = |path: &str| {
        reqwest::Client::new()
            .post(server.url(path))
            .bearer_auth(KEY)
            .header("Rein-Deadline-Ms", "2000")
            .json(&hi)
            .send()
    };
    // The provider's own 429: its wait is beyond the deadline.
    let told = ask("/v1/messages").await.unwrap();
    assert_eq!(told.status(), 429, "{:?}", told.text().await);
    let wait = retry_after_secs(&told);
    assert!(
        (1..=HOUR).contains(&wait) && wait > HOUR - 600,
        "the provider's wait, not a guess: {wait}"
    );
    let (_, body) = anthropic_error(told).await;
    assert_eq!(body["error"]["type"], "rate_limit_error", "{body}");
    assert_eq!(model.request_count(), 1);

    // The provider is paused: both wire formats answer 429 at once with
    // what is left of the pause.
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let paused = ask(path).await.unwrap();
        assert_eq!(paused.status(), 429, "{path}: {:?}", paused.text().await);
        let left = retry_after_secs(&paused);
        assert!(
            (1..=wait).contains(&left) && left > HOUR - 600,
            "{path}: what is left of the pause: {left}"
        );
    }
    assert_eq!(model.request_count(), 1, "nobody called into the pause");
}

/// `POST /v1/messages/count_tokens` answers rein's bound of the prompt on
/// the binding's primary model, with no model call: with the model's own
/// tokenizer for `gpt-4o-mini`, never below — and close to — what the
/// provider then counts by its own documented rule (the mock's, not
/// rein's code); at a token per byte for a model rein has learned nothing
/// about; and its refusals are in Anthropic's shape, whoever calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn count_tokens_bounds_the_prompt_the_provider_then_counts() {
    let model = MockModel::start_with(
        MockModelConfig::default()
            .with_fallback_text("ok")
            .with_tokenized_usage(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rein.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[providers.mock]
kind = "openai"
base_url = "{url}"
[providers.claude]
kind = "anthropic"
base_url = "{url}"
max_output_tokens = {{ "mock-claude" = 8192 }}
[models.mini]
provider = "mock"
model = "gpt-4o-mini"
[models.sonnet]
provider = "claude"
model = "mock-claude"
"#,
            url = model.openai_base_url()
        ),
    )
    .unwrap();
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let client = reqwest::Client::new();
    let prompt = json!({
        "model": "mini",
        "system": "You adjust orders exactly as asked and never guess an order id.",
        "messages": [
            {"role": "user", "content": "Move order A-1001 to the eighth of January, 14:00 UTC, and tell me what it was before."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"order_id": "A-1001"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "{\"order_id\":\"A-1001\",\"status\":\"confirmed\",\"delivery_date\":\"2026-01-05T14:00:00Z\"}"}]},
        ],
        "tools": [{"name": "get_order", "description": "Look up one order by its id.",
                   "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]}}],
    });
    let count = |body: Value| {
        client
            .post(server.url("/v1/messages/count_tokens"))
            .json(&body)
            .send()
    };

    let counted = count(prompt.clone()).await.unwrap();
    assert_eq!(counted.status(), 200);
    assert_eq!(counted.headers()["rein-token-count"], "o200k_base");
    let counted: Value = counted.json().await.unwrap();
    let bound = counted["input_tokens"].as_u64().unwrap();
    assert_eq!(model.request_count(), 0, "counting calls no model");

    // The same prompt, sent: the provider's own count is within the bound.
    let mut ask = prompt.clone();
    ask["max_tokens"] = json!(50);
    let answer: Value = client
        .post(server.url("/v1/messages"))
        .json(&ask)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let reported = answer["usage"]["input_tokens"].as_u64().unwrap();
    assert!(
        reported > 0 && bound >= reported,
        "bound {bound} < provider's {reported}"
    );
    // Above it by rein's fixed allowances (512 tokens for a provider's
    // tool-use template, 16 per message's) and little else.
    let allowances = 512 + 16 * 4;
    assert!(
        bound - reported <= allowances + reported / 4,
        "bound {bound} is far above the provider's {reported}"
    );

    // A model rein knows nothing about: a token per byte, the safe side.
    let mut unknown = prompt.clone();
    unknown["model"] = json!("sonnet");
    let counted = count(unknown).await.unwrap();
    assert_eq!(counted.headers()["rein-token-count"], "token_per_byte");
    let per_byte: Value = counted.json().await.unwrap();
    assert!(per_byte["input_tokens"].as_u64().unwrap() > bound);

    // Refusals, in Anthropic's shape without any Anthropic header.
    let mut nobody = prompt.clone();
    nobody["model"] = json!("nobody");
    let (status, body) = anthropic_error(count(nobody).await.unwrap()).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("mini"),
        "{body}"
    );
    let (status, body) = anthropic_error(count(json!({"model": "mini"})).await.unwrap()).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(
        model.request_count(),
        1,
        "only the sent prompt reached the model"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_messages_member_is_passed_mapped_or_refused_never_dropped_silently() {
    let model = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("rein.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[providers.mock]
kind = "openai"
base_url = "{url}"
max_output_tokens = {{ "mock-model" = 4096 }}
[providers.claude]
kind = "anthropic"
base_url = "{url}"
max_output_tokens = {{ "mock-claude" = 4096 }}
[models.chat]
provider = "mock"
model = "mock-model"
[models.claude]
provider = "claude"
model = "mock-claude"
"#,
            url = model.openai_base_url()
        ),
    )
    .unwrap();
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let client = reqwest::Client::new();
    let every = |binding: &str| {
        json!({
            "model": binding, "max_tokens": 64, "stream": false,
            "system": "Be brief.",
            "messages": [{"role": "user", "content": "Hi."}],
            "tools": [{"name": "get_order", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "auto"},
            "stop_sequences": ["END"], "temperature": 0.5, "top_p": 0.9, "top_k": 40,
            "metadata": {"user_id": "u-1"},
            "thinking": {"type": "disabled"},
            "output_config": {"effort": "high"},
            "service_tier": null,
        })
    };
    let send = |body: Value| {
        client
            .post(server.url("/v1/messages"))
            .header("anthropic-version", "2023-06-01")
            .json(&body)
            .send()
    };

    // An Anthropic link: each member as the Messages API spells it.
    let answer = send(every("claude")).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(answer.headers().get("rein-ignored").is_none());
    let sent = model.last_request().unwrap().body;
    assert_eq!(sent["top_k"], 40, "{sent}");
    assert_eq!(sent["output_config"], json!({"effort": "high"}), "{sent}");
    assert_eq!(sent["stop_sequences"], json!(["END"]));
    assert_eq!(sent["metadata"], json!({"user_id": "u-1"}));
    assert_eq!(sent["temperature"], 0.5);
    assert!(sent.get("thinking").is_none(), "disabled is the default");

    // An OpenAI-compatible link: mapped, and what it has no member for is
    // named.
    let answer = send(every("chat")).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["rein-ignored"], "top_k");
    let sent = model.last_request().unwrap().body;
    assert_eq!(sent["reasoning_effort"], "high", "{sent}");
    assert_eq!(sent["stop"], json!(["END"]));
    assert_eq!(sent["user"], "u-1");
    for absent in ["top_k", "output_config", "thinking", "metadata"] {
        assert!(sent.get(absent).is_none(), "{absent} sent: {sent}");
    }

    // Refused, each named, before any model is asked.
    let asked = model.request_count();
    for (member, value, says) in [
        ("mcp_servers", json!([]), "MCP connector"),
        (
            "output_format",
            json!({"type": "json_schema", "schema": {}}),
            "output_config.format",
        ),
        ("top_a", json!(1), "Extra inputs are not permitted"),
    ] {
        let mut body = every("claude");
        body[member] = value;
        let refused = send(body).await.unwrap();
        assert_eq!(refused.status(), 400, "{member}");
        let body: Value = refused.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.starts_with(&format!("{member}: ")), "{body}");
        assert!(message.contains(says), "{body}");
    }
    assert_eq!(model.request_count(), asked, "no refusal asked the model");

    // Thinking and a capacity tier: answered, left out, and named.
    let mut body = every("claude");
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    body["service_tier"] = json!("auto");
    let answer = send(body).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["rein-ignored"], "thinking, service_tier");
    let sent = model.last_request().unwrap().body;
    assert!(sent.get("thinking").is_none(), "{sent}");
    assert!(sent.get("service_tier").is_none(), "{sent}");
}

//! OpenAI's Responses API on the gateway, `POST /v1/responses`, driven by
//! the official `openai` Python package and by an `openai-agents` agent,
//! each with only its base URL changed: a response, a streamed one, a
//! function tool round trip, a refused `previous_response_id`, a cut
//! stream, and an agent's whole tool loop with the SDK's default model
//! settings — through a real `rein serve` whose bindings point at the
//! testkit's mock model over loopback. What the SDKs hide (the JSON shape,
//! the event sequence, the error shape of each refusal, what reaches the
//! provider, idempotent replays) is checked with plain HTTP.
//!
//! The packages come from `.ci/run`'s venv (`$REIN_PYTHON`); without them
//! the SDK tests say how to install them and pass, except under CI
//! (`CI=true`), where a missing package fails them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, StreamFault};
use serde_json::{Value, json};

mod common;
use common::Server;

/// The gateway's bearer key and its SHA-256 (`printf %s KEY | sha256sum`).
const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";

/// The output cap of the `chat` binding's model.
const CAP: u64 = 4096;

/// A config whose `chat` binding answers from the mock, whose `resilient`
/// one falls back to it from a dead primary, and, when `agent_model` is
/// given, a binding of that name answering from the mock too.
fn config(dir: &std::path::Path, model_url: &str, agent_model: Option<&str>) -> std::path::PathBuf {
    let agent_binding = agent_model
        .map(|name| {
            format!(
                r#"
# The model the Agents SDK asks for when an agent names none.
[models."{name}"]
provider = "mock"
model = "mock-model"
"#
            )
        })
        .unwrap_or_default();
    let text = format!(
        r#"
[providers.mock]
kind = "openai"
base_url = "{model_url}"
max_output_tokens = {{ "mock-model" = {CAP} }}

[providers.dead]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
max_output_tokens = {{ gone = 4096 }}

# Cut streams are not recovered here: the clients are shown the error
# event (gateway_continuation.rs recovers them through this route).
[models.chat]
provider = "mock"
model = "mock-model"
recover_streams = false

# A primary nobody answers: every call falls back to the mock.
[models.resilient]
provider = "dead"
model = "gone"
fallbacks = [{{ provider = "mock", model = "mock-model" }}]
{agent_binding}
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

/// Runs `script` (beside this file) with `python` against `server`; its
/// JSON lines, by their `check`.
fn run_script(python: &str, script: &str, server: &Server) -> Vec<Value> {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join(script);
    let out = Command::new(python)
        .arg(&script)
        .env("REIN_GATEWAY_URL", server.url("/v1"))
        .env("REIN_API_KEY", KEY)
        .env("REIN_MODEL", "chat")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{} failed:\n{stdout}\n{}\nserver log:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr),
        server.log_tail()
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn check<'a>(checks: &'a [Value], name: &str) -> &'a Value {
    checks
        .iter()
        .find(|c| c["check"] == name)
        .unwrap_or_else(|| panic!("no {name} in {checks:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_openai_client_creates_streams_and_calls_tools_through_responses() {
    let python = match common::python_with("openai") {
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
        Reply::text("One, two, and then nothing more.")
            .with_stream_fault(StreamFault::Drop { after: 3 }),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url(), None);
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let checks = run_script(&python, "gateway_responses_client.py", &server);

    let create = check(&checks, "create");
    assert_eq!(create["text"], "Hello from the mock.", "{create}");
    assert_eq!(create["strict_text"], "Hello from the mock.");
    assert_eq!(create["status"], "completed");
    assert_eq!(create["model"], "mock-model");
    assert_eq!(create["metadata"], json!({"ticket": "T-1"}));
    assert!(create["id"].as_str().unwrap().starts_with("resp_"));
    assert_eq!(create["rein_model"], "mock/mock-model");
    assert_eq!(create["rein_fallback"], "false");
    assert!(create["total_tokens"].as_u64().unwrap() > 0);
    // The instructions reached the model as its system message.
    let first = &model.requests()[0];
    assert_eq!(
        first.messages()[0],
        json!({"role": "system", "content": "Be brief."})
    );
    assert!(first.body.get("metadata").is_none(), "{}", first.body);

    let stream = check(&checks, "stream");
    assert_eq!(stream["text"], "Streamed hello, in pieces.", "{stream}");
    assert_eq!(stream["final_text"], "Streamed hello, in pieces.");
    assert_eq!(stream["final_status"], "completed");
    assert!(stream["total_tokens"].as_u64().unwrap() > 0);
    let types: Vec<&str> = stream["types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    assert_eq!(
        types[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ],
        "{stream}"
    );
    assert_eq!(types.last(), Some(&"response.completed"), "{stream}");
    assert!(
        model.requests()[1].stream(),
        "the provider was asked to stream"
    );

    let tool = check(&checks, "tool_call");
    assert_eq!(tool["name"], "get_order", "{tool}");
    assert_eq!(tool["arguments"], json!({"order_id": "A-1001"}));
    assert_eq!(tool["status"], "completed");
    assert_eq!(tool["strict"], true);
    assert_eq!(check(&checks, "tool_result")["text"], "A-1001 has shipped.");
    // The call and its output reached the model as chat's assistant tool
    // call and tool message, `strict` kept on the function.
    let round_trip = &model.requests()[3];
    let messages = round_trip.messages();
    let call_id = messages[1]["tool_calls"][0]["id"].as_str().unwrap();
    assert_eq!(messages[1]["role"], "assistant", "{messages:?}");
    assert_eq!(
        messages[1]["tool_calls"][0]["function"]["name"],
        "get_order"
    );
    assert_eq!(messages[2]["role"], "tool", "{messages:?}");
    assert_eq!(messages[2]["tool_call_id"], call_id);
    assert_eq!(round_trip.tools()[0]["function"]["strict"], true);

    let chained = check(&checks, "previous_response_id");
    assert_eq!(chained["raised"], true, "{chained}");
    assert_eq!(chained["status"], 400);
    assert_eq!(chained["code"], "unsupported_parameter");
    assert_eq!(chained["param"], "/previous_response_id");
    let words = chained["message"].as_str().unwrap();
    assert!(
        words.contains("keeps no response state") && words.contains("whole conversation"),
        "{chained}"
    );

    let cut = check(&checks, "cut_stream");
    let types = cut["types"].as_array().unwrap();
    assert_eq!(types.last().unwrap(), "error", "{cut}");
    assert!(!types.iter().any(|t| t == "response.completed"), "{cut}");
    assert!(cut["error"]["message"].is_string(), "{cut}");

    // Every reply was asked for once; the refusal asked nothing.
    assert_eq!(model.pending(), 0);
    assert_eq!(model.request_count(), 5);
}

/// The model the Agents SDK asks for when an agent names none.
fn agents_default_model(python: &str) -> String {
    let out = Command::new(python)
        .args([
            "-c",
            "from agents.models.default_models import get_default_model; print(get_default_model())",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openai_agents_agent_runs_its_tool_loop_through_responses() {
    let python = match common::python_with_module("agents", "openai-agents") {
        Ok(p) => p,
        Err(why) => {
            common::missing_part(&why);
            return;
        }
    };
    let default_model = agents_default_model(&python);
    let model = mock().await;
    model.push_replies([
        Reply::tool_call("get_order", &json!({"order_id": "A-1001"})),
        Reply::text("Order A-1001 has shipped."),
        Reply::tool_call("get_order", &json!({"order_id": "A-1002"})),
        Reply::text("Order A-1002 has shipped too."),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url(), Some(&default_model));
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let checks = run_script(&python, "gateway_responses_agent.py", &server);

    let run = check(&checks, "run");
    assert_eq!(run["final_output"], "Order A-1001 has shipped.", "{run}");
    assert_eq!(run["calls"], json!(["A-1001"]), "the tool ran once: {run}");
    assert_eq!(run["responses"], 2, "{run}");
    assert_eq!(
        run["items"],
        json!([
            "tool_call_item",
            "tool_call_output_item",
            "message_output_item"
        ]),
        "{run}"
    );
    let streamed = check(&checks, "run_streamed");
    assert_eq!(
        streamed["final_output"], "Order A-1002 has shipped too.",
        "{streamed}"
    );
    assert_eq!(streamed["deltas"], "Order A-1002 has shipped too.");
    assert_eq!(streamed["calls"], json!(["A-1002"]), "{streamed}");

    // What the SDK sent by default reached the model mapped: its
    // instructions first, its strict function schema, the tool's output
    // after the call; its model-specific hints (`reasoning`,
    // `text.verbosity`) did not.
    let requests = model.requests();
    assert_eq!(requests.len(), 4);
    assert!(requests[2].stream() && requests[3].stream());
    for request in &requests {
        let messages = request.messages();
        assert_eq!(messages[0]["role"], "system", "{messages:?}");
        assert_eq!(request.tools()[0]["function"]["name"], "get_order");
        assert_eq!(request.tools()[0]["function"]["strict"], true);
        for hint in ["reasoning", "reasoning_effort", "verbosity", "text"] {
            assert!(request.body.get(hint).is_none(), "{hint}: {}", request.body);
        }
    }
    let second = requests[1].messages();
    assert_eq!(second.last().unwrap()["role"], "tool", "{second:?}");
    assert!(
        second.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .contains("shipped"),
        "{second:?}"
    );
}

async fn post(server: &Server, key: Option<&str>, body: &str) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(server.url("/v1/responses"))
        .header("content-type", "application/json")
        .body(body.to_owned());
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

/// The status and the body of an error, which must carry OpenAI's `error`.
async fn openai_error(response: reqwest::Response) -> (u16, Value) {
    let status = response.status().as_u16();
    assert!(response.headers().contains_key("x-request-id"), "{status}");
    let body: Value = response.json().await.unwrap();
    assert!(body["error"]["message"].is_string(), "{body}");
    assert!(body["error"]["type"].is_string(), "{body}");
    (status, body)
}

/// The `(event, data)` pairs of a Responses API stream, checking that each
/// event names its type and is numbered in order.
fn stream_events(text: &str) -> Vec<(String, Value)> {
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut name = None;
            let mut data = None;
            for line in e.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = Some(n.to_owned());
                }
                if let Some(d) = line.strip_prefix("data: ") {
                    data = Some(serde_json::from_str::<Value>(d).unwrap());
                }
            }
            (name.unwrap(), data.unwrap())
        })
        .collect();
    for (i, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "{data}");
        assert_eq!(data["sequence_number"], i, "{data}");
    }
    events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_route_answers_openai_s_shapes_refuses_in_its_error_shape_and_replays() {
    let model = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url(), None);
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let key = Some(KEY);

    // The whole answer, through a fallback, stored under its key.
    let body =
        r#"{"model": "resilient", "input": "Hi.", "max_output_tokens": 100, "temperature": 0.3}"#;
    let idempotent = || {
        reqwest::Client::new()
            .post(server.url("/v1/responses"))
            .header("content-type", "application/json")
            .bearer_auth(KEY)
            .header("Idempotency-Key", "response-1")
            .body(body)
            .send()
    };
    let first = idempotent().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["content-type"], "application/json");
    assert_eq!(first.headers()["rein-model"], "mock/mock-model");
    assert_eq!(first.headers()["rein-fallback"], "true");
    let first: Value = first.json().await.unwrap();
    assert!(
        first["id"].as_str().unwrap().starts_with("resp_"),
        "{first}"
    );
    assert_eq!(first["object"], "response");
    assert!(first["created_at"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(first["status"], "completed");
    assert_eq!(first["model"], "mock-model");
    assert_eq!(first["error"], Value::Null);
    assert_eq!(first["incomplete_details"], Value::Null);
    assert_eq!(first["max_output_tokens"], 100);
    assert_eq!(first["temperature"], 0.3);
    assert_eq!(first["tool_choice"], "auto");
    assert_eq!(first["tools"], json!([]));
    assert_eq!(first["parallel_tool_calls"], true);
    assert_eq!(first["text"], json!({"format": {"type": "text"}}));
    assert_eq!(first["store"], false, "rein stores nothing");
    let output = first["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "{first}");
    assert_eq!(output[0]["type"], "message");
    assert!(output[0]["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(output[0]["role"], "assistant");
    assert_eq!(output[0]["status"], "completed");
    assert_eq!(
        output[0]["content"],
        json!([{"type": "output_text", "text": "fallback text", "annotations": []}])
    );
    let usage = &first["usage"];
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap()),
        "{usage}"
    );
    assert_eq!(usage["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(usage["output_tokens_details"]["reasoning_tokens"], 0);
    let again = idempotent().await.unwrap();
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    assert_eq!(again.headers()["rein-model"], "mock/mock-model");
    assert_eq!(again.headers()["rein-fallback"], "true");
    assert_eq!(again.json::<Value>().await.unwrap(), first);
    assert_eq!(model.request_count(), 1, "the model was asked once");
    let sent = model.last_request().unwrap().body;
    assert_eq!(sent["temperature"], 0.3);
    assert_eq!(sent["max_tokens"], 100);

    // Tools, a tool choice, a JSON schema: chat's names reach the provider;
    // a tool call is a function_call item; a cut at the ceiling is
    // `incomplete`.
    model.push_reply(
        Reply::tool_call("get_order", &json!({"order_id": "A-1"}))
            .with_finish_reason(rein_testkit::mock_model::FinishReason::Length),
    );
    let tooled = post(
        &server,
        key,
        r#"{"model": "chat", "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Where is A-1?"}]}],
            "tools": [{"type": "function", "name": "get_order", "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": "required", "parallel_tool_calls": false, "user": "u-1",
            "text": {"format": {"type": "json_schema", "name": "order", "schema": {"type": "object"}}, "verbosity": "low"},
            "reasoning": {"effort": "low"}, "store": true, "include": ["reasoning.encrypted_content"]}"#,
    )
    .await;
    assert_eq!(tooled.status(), 200);
    let tooled: Value = tooled.json().await.unwrap();
    assert_eq!(tooled["status"], "incomplete", "{tooled}");
    assert_eq!(
        tooled["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    let call = &tooled["output"][0];
    assert_eq!(call["type"], "function_call", "{tooled}");
    assert!(call["id"].as_str().unwrap().starts_with("fc_"));
    assert_eq!(call["name"], "get_order");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"order_id": "A-1"})
    );
    assert!(call["call_id"].is_string());
    assert_eq!(tooled["tools"][0]["strict"], true);
    assert_eq!(tooled["tool_choice"], "required");
    assert_eq!(tooled["reasoning"], json!({"effort": "low"}));
    let sent = model.last_request().unwrap().body;
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["parallel_tool_calls"], false);
    assert_eq!(sent["user"], "u-1");
    assert_eq!(
        sent["tools"],
        json!([{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}, "strict": true}}])
    );
    assert_eq!(
        sent["response_format"],
        json!({"type": "json_schema", "json_schema": {"name": "order", "schema": {"type": "object"}}})
    );
    for ignored in [
        "reasoning",
        "reasoning_effort",
        "verbosity",
        "store",
        "include",
        "text",
    ] {
        assert!(sent.get(ignored).is_none(), "{ignored}: {sent}");
    }

    // The stream's events, in the Responses API's order.
    model.push_reply(Reply::text("One, two, three."));
    let streamed = post(
        &server,
        key,
        r#"{"model": "chat", "stream": true, "input": "Count."}"#,
    )
    .await;
    assert_eq!(streamed.status(), 200);
    assert_eq!(streamed.headers()["content-type"], "text/event-stream");
    assert_eq!(streamed.headers()["rein-model"], "mock/mock-model");
    let events = stream_events(&streamed.text().await.unwrap());
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
        ]
    );
    assert_eq!(
        names[names.len() - 5..],
        [
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ],
        "{names:?}"
    );
    let deltas: String = events
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, "One, two, three.");
    let (_, completed) = events.last().unwrap();
    assert_eq!(completed["response"]["status"], "completed");
    assert_eq!(
        completed["response"]["output"][0]["content"][0]["text"],
        "One, two, three."
    );
    assert_eq!(completed["response"]["id"], events[0].1["response"]["id"]);

    // A cut one ends with an error event, and no response.completed.
    model.push_reply(
        Reply::text("One, two, and then nothing more.")
            .with_stream_fault(StreamFault::Drop { after: 3 }),
    );
    let cut = post(
        &server,
        key,
        r#"{"model": "chat", "stream": true, "input": "Count."}"#,
    )
    .await
    .text()
    .await
    .unwrap();
    let events = stream_events(&cut);
    assert_eq!(events.last().unwrap().0, "error", "{cut}");
    assert!(
        !events.iter().any(|(n, _)| n == "response.completed"),
        "{cut}"
    );
    let asked = model.request_count();

    // Every refusal is a problem with OpenAI's `error`, and asks nothing.
    let (status, body) =
        openai_error(post(&server, None, r#"{"model": "chat", "input": "Hi."}"#).await).await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    let (status, body) = openai_error(
        post(
            &server,
            key,
            r#"{"model": "chat", "input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file-1"}]}]}"#,
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    assert_eq!(body["error"]["param"], "/input/0/content/0/type", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be bounded"),
        "{body}"
    );
    let (status, body) = openai_error(
        post(
            &server,
            key,
            r#"{"model": "chat", "input": "Hi.", "previous_response_id": "resp_1"}"#,
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "unsupported_parameter", "{body}");
    assert_eq!(body["error"]["param"], "/previous_response_id");
    let (status, body) = openai_error(
        post(
            &server,
            key,
            r#"{"model": "chat", "input": "Hi.", "tools": [{"type": "web_search"}]}"#,
        )
        .await,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "/tools/0/type", "{body}");
    let over = format!(
        r#"{{"model": "chat", "input": "Hi.", "max_output_tokens": {}}}"#,
        CAP + 1
    );
    let (status, body) = openai_error(post(&server, key, &over).await).await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "invalid_value", "{body}");
    assert_eq!(body["error"]["param"], "max_output_tokens");
    assert_eq!(body["max_output_tokens"], CAP);
    let (status, body) =
        openai_error(post(&server, key, r#"{"model": "nope", "input": "Hi."}"#).await).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "model_not_found", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("chat, resilient"),
        "{body}"
    );
    // The router's own refusal too, even to a caller that looks like
    // Anthropic's SDK: the path says which shape.
    let get = reqwest::Client::new()
        .get(server.url("/v1/responses"))
        .bearer_auth(KEY)
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    let (status, body) = openai_error(get).await;
    assert_eq!(status, 405);
    assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
    // A streamed request cannot be replayed, so it takes no key.
    let keyed_stream = reqwest::Client::new()
        .post(server.url("/v1/responses"))
        .header("content-type", "application/json")
        .bearer_auth(KEY)
        .header("Idempotency-Key", "response-2")
        .body(r#"{"model": "chat", "stream": true, "input": "Hi."}"#)
        .send()
        .await
        .unwrap();
    let (status, _) = openai_error(keyed_stream).await;
    assert_eq!(status, 400);
    assert_eq!(model.request_count(), asked, "no refusal asked the model"); // An image is carried, as a chat completions image part.
    let image = post(
        &server,
        key,
        r#"{"model": "chat", "input": [{"role": "user", "content": [{"type": "input_text", "text": "What is this?"}, {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"}]}]}"#,
    )
    .await;
    assert_eq!(image.status(), 200);
    assert_eq!(
        model.last_request().unwrap().messages()[0]["content"],
        json!([{"type": "text", "text": "What is this?"},
               {"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}}])
    );
}

//! Structured output through the gateway never degrades (issue 36): a
//! real `rein serve`, two mock models over loopback (an OpenAI-compatible
//! primary and an Anthropic fallback), plain HTTP and the official
//! `openai` package.
//!
//! - A `json_schema` request to a binding whose OpenAI primary is down
//!   (503) is answered by its Anthropic fallback with schema-valid JSON
//!   content, whole and streamed: the fallback was sent the schema as a
//!   forced tool, and its `tool_use` comes back as the message's content.
//! - A link that answers prose to a `json_schema` request is an explicit
//!   502 in OpenAI's error shape naming the problem, never a 200 with the
//!   prose; streamed, an in-band error and no `[DONE]`.
//! - A function tool's `strict: true` reaches the OpenAI provider's
//!   request as it was sent.
//! - `client.chat.completions.parse` and `.stream` with a Pydantic model
//!   get the parsed object from the fallback, and an error, not `None`,
//!   from prose.
//!
//! The package comes from `.ci/run`'s venv (`$REIN_PYTHON`); without it the
//! SDK test says how to install it and passes, except under CI
//! (`CI=true`), where a missing package fails it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;
use std::time::Duration;

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use serde_json::{Value, json};

mod common;
use common::Server;

/// The gateway's key and its SHA-256 (`printf %s KEY | sha256sum`).
const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";

/// Prose, as a model that ignores `response_format` writes it.
const PROSE: &str = "Sure! Order A-1001 arrives in three days.";

fn config(dir: &std::path::Path, gpt: &str, claude: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[providers.gpt]
kind = "openai"
base_url = "{gpt}"
max_output_tokens = {{ "gpt-test" = 4096 }}

[providers.claude]
kind = "anthropic"
base_url = "{claude}"
max_output_tokens = {{ "claude-test" = 8192 }}

# An OpenAI primary, an Anthropic fallback; a 503 falls back at once.
[models.structured]
provider = "gpt"
model = "gpt-test"
fallbacks = [{{ provider = "claude", model = "claude-test" }}]
retry_before_fallback = 0

# The OpenAI-compatible link alone.
[models.gpt]
provider = "gpt"
model = "gpt-test"

[[server.api_keys]]
tenant = "acme"
sha256 = "{KEY_SHA256}"
name = "structured-test"
"#
    );
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    dir.join("rein.toml")
}

fn schema() -> Value {
    json!({"type": "object",
           "properties": {"order_id": {"type": "string"}, "eta_days": {"type": "integer"}},
           "required": ["order_id", "eta_days"], "additionalProperties": false})
}

fn delivery() -> Value {
    json!({"order_id": "A-1001", "eta_days": 3})
}

fn chat(model: &str, stream: bool) -> Value {
    json!({
        "model": model,
        "stream": stream,
        "messages": [{"role": "user", "content": "When does A-1001 arrive?"}],
        "response_format": {"type": "json_schema",
                            "json_schema": {"name": "delivery", "schema": schema(), "strict": true}},
    })
}

struct Setup {
    gpt: MockModel,
    claude: MockModel,
    server: Server,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let gpt = MockModel::start_with(MockModelConfig::default().with_fallback_text(PROSE))
        .await
        .unwrap();
    let claude = MockModel::start_with(MockModelConfig::default().with_fallback_text(PROSE))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        dir.path(),
        &gpt.openai_base_url(),
        &claude.openai_base_url(),
    );
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    Setup {
        gpt,
        claude,
        server,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        _dir: dir,
    }
}

impl Setup {
    async fn post(&self, body: &Value) -> reqwest::Response {
        self.client
            .post(self.server.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
    }
}

/// The `data:` payloads of a chat completion stream.
fn events(body: &str) -> Vec<String> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_owned)
        .collect()
}

/// Whether `value` fits [`schema`], checked by hand: the test must not
/// trust the code under test to check it.
fn fits_schema(value: &Value) -> bool {
    let Some(object) = value.as_object() else {
        return false;
    };
    object.len() == 2 && object["order_id"].is_string() && object["eta_days"].is_i64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_the_openai_primary_is_answered_by_the_anthropic_fallback_in_json() {
    let s = setup().await;
    s.gpt
        .push_replies([Reply::unavailable(), Reply::unavailable()]);
    s.claude.push_replies([
        Reply::tool_call("delivery", &delivery()),
        Reply::tool_call("delivery", &delivery()),
    ]);

    // Whole.
    let response = s.post(&chat("structured", false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["rein-fallback"], "true");
    assert_eq!(response.headers()["rein-model"], "claude/claude-test");
    let body: Value = response.json().await.unwrap();
    let message = &body["choices"][0]["message"];
    let content: Value = serde_json::from_str(message["content"].as_str().unwrap()).unwrap();
    assert!(fits_schema(&content), "{content}");
    assert_eq!(content, delivery());
    assert!(message.get("tool_calls").is_none(), "{body}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    // The fallback was sent the schema as the forced answer tool.
    let sent = s.claude.last_request().unwrap();
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(
        sent.body["tools"],
        json!([{"name": "delivery", "input_schema": schema(),
                "description": sent.body["tools"][0]["description"]}])
    );
    assert_eq!(
        sent.body["tool_choice"],
        json!({"type": "tool", "name": "delivery"})
    );
    // The primary was sent the format as it came.
    let primary = s.gpt.last_request().unwrap().body;
    assert_eq!(
        primary["response_format"],
        chat("structured", false)["response_format"]
    );

    // Streamed: the forced tool's input arrives as content deltas.
    let response = s.post(&chat("structured", true)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["rein-fallback"], "true");
    let body = response.text().await.unwrap();
    let events = events(&body);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{body}");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let pieces: Vec<&str> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|p| !p.is_empty())
        .collect();
    assert!(pieces.len() > 1, "streamed in pieces: {body}");
    let content: Value = serde_json::from_str(&pieces.concat()).unwrap();
    assert!(fits_schema(&content), "{content}");
    assert!(
        chunks
            .iter()
            .all(|c| c["choices"][0]["delta"].get("tool_calls").is_none()),
        "{body}"
    );
    let finish = chunks
        .iter()
        .find_map(|c| c["choices"][0]["finish_reason"].as_str());
    assert_eq!(finish, Some("stop"), "{body}");
    assert_eq!((s.gpt.request_count(), s.claude.request_count()), (2, 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prose_to_a_json_schema_request_is_an_explicit_error_never_a_200() {
    let s = setup().await;
    s.gpt.push_replies([Reply::text(PROSE), Reply::text(PROSE)]);

    let response = s.post(&chat("gpt", false)).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("not JSON"), "{body}");
    assert!(message.contains("response_format"), "{body}");
    assert!(message.contains("gpt/gpt-test"), "{body}");
    assert_eq!(body["error"]["type"], "upstream_error", "{body}");
    assert!(
        !body.to_string().contains(PROSE),
        "the prose is not passed on: {body}"
    );

    // Streamed: the prose went out as it came, but the stream ends in an
    // error and no [DONE], so no client takes it for the answer.
    let response = s.post(&chat("gpt", true)).await;
    assert_eq!(response.status(), 200);
    let body = response.text().await.unwrap();
    let events = events(&body);
    assert!(!events.iter().any(|e| e == "[DONE]"), "{body}");
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not JSON"),
        "{body}"
    );
    assert_eq!(s.gpt.request_count(), 2, "each asked once");

    // JSON that does not fit the schema is not the answer either.
    s.gpt.push_reply(Reply::text(r#"{"order_id": "A-1001"}"#));
    let response = s.post(&chat("gpt", false)).await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("`delivery` schema"), "{body}");
    assert!(message.contains("/eta_days is required"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_tool_s_strict_reaches_the_openai_provider() {
    let s = setup().await;
    s.gpt.push_reply(Reply::tool_call(
        "get_order",
        &json!({"order_id": "A-1001"}),
    ));
    let tool = json!({"type": "function", "function": {
        "name": "get_order", "description": "Reads an order.", "strict": true,
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}},
                       "required": ["order_id"], "additionalProperties": false}}});
    let response = s
        .post(&json!({
            "model": "gpt",
            "messages": [{"role": "user", "content": "Where is A-1001?"}],
            "tools": [tool],
        }))
        .await;
    assert_eq!(response.status(), 200);
    let sent = s.gpt.last_request().unwrap().body;
    assert_eq!(sent["tools"], json!([tool]));
    assert_eq!(sent["tools"][0]["function"]["strict"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_sdk_parses_the_fallback_s_answer_and_raises_on_prose() {
    let python = match common::python_with("openai") {
        Ok(p) => p,
        Err(why) => {
            common::missing_part(&why);
            return;
        }
    };
    let s = setup().await;
    s.gpt.push_replies([
        Reply::unavailable(),
        Reply::unavailable(),
        // The prose binding's one answer.
        Reply::text(PROSE),
    ]);
    s.claude.push_replies([
        Reply::tool_call("Delivery", &delivery()),
        Reply::tool_call("Delivery", &delivery()),
    ]);
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gateway_structured_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .env("REIN_GATEWAY_URL", s.server.url("/v1"))
        .env("REIN_API_KEY", KEY)
        .env("REIN_MODEL", "structured")
        .env("REIN_PROSE_MODEL", "gpt")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the client failed:\n{stdout}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.server.log_tail()
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
    let parse = check("parse");
    assert_eq!(parse["parsed"], delivery(), "{parse}");
    assert_eq!(parse["rein_model"], "claude/claude-test");
    assert_eq!(parse["rein_fallback"], "true");
    let stream = check("stream");
    assert_eq!(stream["parsed"], delivery(), "{stream}");
    assert_eq!(stream["finish_reason"], "stop");
    let prose = check("prose");
    assert_eq!(prose["status"], 502, "{prose}");
    assert!(
        prose["message"].as_str().unwrap().contains("not JSON"),
        "{prose}"
    );
    // The SDK's Pydantic schema reached the fallback as its answer tool.
    let sent = s.claude.last_request().unwrap().body;
    assert_eq!(
        sent["tool_choice"],
        json!({"type": "tool", "name": "Delivery"})
    );
    assert_eq!(
        sent["tools"][0]["input_schema"]["required"],
        json!(["order_id", "eta_days"])
    );
}

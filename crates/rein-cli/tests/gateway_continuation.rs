//! A stream cut after its first token reaches the client whole (issue 35,
//! item 1), through a real `rein serve` and mock models over loopback: an
//! OpenAI-compatible primary whose streams are cut, an Anthropic fallback
//! (which continues an assistant prefix natively), a vLLM-style fallback
//! (`continuation = "continue_final_message"`) and a plain one (which
//! continues nothing).
//!
//! - A stream dropped, stalled past its idle limit, or mangled after N
//!   tokens ends as one complete answer equal to the uncut text, continued
//!   on the fallback from the text sent; its last event says so
//!   (`"rein": {"recoveries": …}`) in each wire format.
//! - With no link that continues a prefix, the answer is regenerated and
//!   forwarded only when it begins with the text sent; otherwise the
//!   stream ends with an explicit in-band error and no terminator.
//! - A stream cut inside a tool call is never spliced; a binding with
//!   `recover_streams = false` ends with the error as before.
//! - `/metrics` counts every recovery by outcome.
//!
//! The tests synchronize on the answers and the mocks' request logs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, StreamFault, ToolCall};
use serde_json::{Value, json};

mod common;
use common::Server;

const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";

/// The answer every model would write in full: 44 characters, sent in
/// pieces of 8.
const TEXT: &str = "The quick brown fox jumps over the lazy dog.";

fn config(dir: &std::path::Path, s: &Mocks) -> std::path::PathBuf {
    let (primary, claude, vllm, plain) = (
        s.primary.openai_base_url(),
        s.claude.openai_base_url(),
        s.vllm.openai_base_url(),
        s.plain.openai_base_url(),
    );
    let text = format!(
        r#"
[providers.primary]
kind = "openai"
base_url = "{primary}"
max_output_tokens = {{ "primary-model" = 4096 }}

# The primary again, whose streams stall out after 300 ms without an event.
[providers.primary_idle]
kind = "openai"
base_url = "{primary}"
max_output_tokens = {{ "primary-model" = 4096 }}
[providers.primary_idle.stream]
idle_timeout = "300ms"

[providers.claude]
kind = "anthropic"
base_url = "{claude}"
max_output_tokens = {{ "mock-claude" = 8192 }}

[providers.vllm]
kind = "openai"
base_url = "{vllm}"
continuation = "continue_final_message"
max_output_tokens = {{ "vllm-model" = 4096 }}

[providers.plain]
kind = "openai"
base_url = "{plain}"
max_output_tokens = {{ "plain-model" = 4096 }}

[models.main]
provider = "primary"
model = "primary-model"
fallbacks = [{{ provider = "claude", model = "mock-claude" }}]

[models.stalling]
provider = "primary_idle"
model = "primary-model"
fallbacks = [{{ provider = "claude", model = "mock-claude" }}]

[models.served]
provider = "primary"
model = "primary-model"
fallbacks = [{{ provider = "vllm", model = "vllm-model" }}]

[models.regenerated]
provider = "primary"
model = "primary-model"
fallbacks = [{{ provider = "plain", model = "plain-model" }}]

[models.off]
provider = "primary"
model = "primary-model"
fallbacks = [{{ provider = "claude", model = "mock-claude" }}]
recover_streams = false

[server]
metrics_tenants = ["acme"]

[[server.api_keys]]
tenant = "acme"
sha256 = "{KEY_SHA256}"
name = "continuation-test"
"#
    );
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    dir.join("rein.toml")
}

struct Mocks {
    primary: MockModel,
    claude: MockModel,
    vllm: MockModel,
    plain: MockModel,
}

struct Setup {
    mocks: Mocks,
    server: Server,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn mock() -> MockModel {
    MockModel::start_with(MockModelConfig::default().with_fallback_text(TEXT))
        .await
        .unwrap()
}

async fn setup() -> Setup {
    let mocks = Mocks {
        primary: mock().await,
        claude: mock().await,
        vllm: mock().await,
        plain: mock().await,
    };
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &mocks);
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    Setup {
        mocks,
        server,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap(),
        _dir: dir,
    }
}

/// A reply of [`TEXT`] whose stream fails with `fault`.
fn faulted(fault: StreamFault) -> Reply {
    Reply::text(TEXT).with_stream_fault(fault)
}

/// The `data:` payloads of a server-sent event body that are JSON.
fn events(body: &str) -> Vec<Value> {
    body.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str(d).ok())
        .collect()
}

impl Setup {
    /// Streams `model` on `route` (`/v1/chat/completions`, `/v1/messages`
    /// or `/v1/responses`); the whole body.
    async fn stream(&self, route: &str, model: &str) -> String {
        let body = match route {
            "/v1/responses" => json!({"model": model, "stream": true, "input": "Say it."}),
            "/v1/messages" => json!({"model": model, "stream": true, "max_tokens": 1024,
                                     "messages": [{"role": "user", "content": "Say it."}]}),
            _ => json!({"model": model, "stream": true,
                        "messages": [{"role": "user", "content": "Say it."}]}),
        };
        let response = self
            .client
            .post(self.server.url(route))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .header("anthropic-version", "2023-06-01")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        response.text().await.unwrap()
    }

    async fn metrics(&self) -> String {
        self.client
            .get(self.server.url("/metrics"))
            .bearer_auth(KEY)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// The text a chat completions stream delivered, and its last chunk's
/// recoveries.
fn chat_text(body: &str) -> (String, Vec<Value>) {
    let events = events(body);
    let text = events
        .iter()
        .filter_map(|e| {
            e.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
        })
        .collect();
    let marks = events
        .iter()
        .filter_map(|e| e.pointer("/rein/recoveries").and_then(Value::as_array))
        .flatten()
        .cloned()
        .collect();
    (text, marks)
}

/// The last message the fallback `model` was sent.
fn last_message(model: &MockModel) -> Value {
    let request = model.last_request().expect("the fallback was asked");
    request.messages().last().cloned().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_dropped_after_its_first_tokens_is_continued_on_the_fallback() {
    let s = setup().await;
    s.mocks
        .primary
        .push_reply(faulted(StreamFault::Drop { after: 4 }));
    s.mocks.claude.push_reply(Reply::text(TEXT));
    let body = s.stream("/v1/chat/completions", "main").await;
    let (text, marks) = chat_text(&body);
    assert_eq!(text, TEXT, "{body}");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    assert!(!body.contains("\"error\""), "{body}");
    assert_eq!(marks.len(), 1, "{body}");
    assert_eq!(marks[0]["recovery"], "continued");
    assert_eq!(marks[0]["cut"], "primary/primary-model");
    assert_eq!(marks[0]["answered"], "claude/mock-claude");
    let sent = marks[0]["sent_chars"].as_u64().unwrap();
    assert!(sent > 0 && sent < TEXT.len() as u64, "{sent}");
    // The fallback was asked to continue the text sent, as a prefill.
    let prefill = last_message(&s.mocks.claude);
    assert_eq!(prefill["role"], "assistant");
    let prefix = prefill["content"][0]["text"].as_str().unwrap();
    assert!(TEXT.starts_with(prefix) && !prefix.is_empty(), "{prefill}");
    assert_eq!(prefix, prefix.trim_end(), "no trailing whitespace");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stalled_after_its_first_tokens_is_continued_on_the_fallback() {
    let s = setup().await;
    s.mocks.primary.push_reply(faulted(StreamFault::Stall {
        after: 3,
        hold: Duration::from_secs(20),
    }));
    s.mocks.claude.push_reply(Reply::text(TEXT));
    let body = s.stream("/v1/chat/completions", "stalling").await;
    let (text, marks) = chat_text(&body);
    assert_eq!(text, TEXT, "{body}");
    assert_eq!(marks[0]["category"], "timeout", "{body}");
    assert_eq!(marks[0]["recovery"], "continued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_event_mid_stream_is_recovered_in_the_messages_api_too() {
    let s = setup().await;
    s.mocks
        .primary
        .push_reply(faulted(StreamFault::Malformed { after: 3 }));
    s.mocks.claude.push_reply(Reply::text(TEXT));
    let body = s.stream("/v1/messages", "main").await;
    let events = events(&body);
    let text: String = events
        .iter()
        .filter_map(|e| e.pointer("/delta/text").and_then(Value::as_str))
        .collect();
    assert_eq!(text, TEXT, "{body}");
    assert!(body.contains("event: message_stop"), "{body}");
    let last = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(last["rein"]["recoveries"][0]["recovery"], "continued");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_continues_a_final_message_is_told_so_in_its_own_words() {
    let s = setup().await;
    s.mocks
        .primary
        .push_reply(faulted(StreamFault::Drop { after: 3 }));
    s.mocks.vllm.push_reply(Reply::text(TEXT));
    let body = s.stream("/v1/responses", "served").await;
    let events = events(&body);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .filter_map(|e| e["delta"].as_str())
        .collect();
    assert_eq!(text, TEXT, "{body}");
    let done = events
        .iter()
        .find(|e| e["type"] == "response.completed")
        .unwrap();
    assert_eq!(
        done["response"]["rein"]["recoveries"][0]["answered"],
        "vllm/vllm-model"
    );
    let request = s.mocks.vllm.last_request().unwrap();
    assert_eq!(request.body["continue_final_message"], true);
    assert_eq!(request.body["add_generation_prompt"], false);
    assert_eq!(last_message(&s.mocks.vllm)["role"], "assistant");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_link_that_continues_the_answer_is_regenerated_only_when_it_extends_the_text() {
    let s = setup().await;
    // Regenerated (by the primary, asked again whole): the same text.
    s.mocks
        .primary
        .push_replies([faulted(StreamFault::Drop { after: 4 }), Reply::text(TEXT)]);
    let body = s.stream("/v1/chat/completions", "regenerated").await;
    let (text, marks) = chat_text(&body);
    assert_eq!(text, TEXT, "{body}");
    assert_eq!(marks[0]["recovery"], "regenerated");
    assert!(body.trim_end().ends_with("data: [DONE]"), "{body}");
    let again = s.mocks.primary.last_request().unwrap();
    assert!(!again.stream(), "regenerated whole, not streamed");
    assert_eq!(s.mocks.plain.request_count(), 0, "never asked to continue");

    // A different answer is never spliced on.
    s.mocks.primary.push_replies([
        faulted(StreamFault::Drop { after: 4 }),
        Reply::text("Something else entirely."),
    ]);
    let body = s.stream("/v1/chat/completions", "regenerated").await;
    assert!(!body.trim_end().ends_with("data: [DONE]"), "{body}");
    let error = events(&body)
        .into_iter()
        .find_map(|e| e.get("error").cloned())
        .unwrap();
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("does not begin with the") && message.contains("already sent"),
        "{message}"
    );
    let metrics = s.metrics().await;
    for (outcome, n) in [("regenerated", 1), ("failed", 1)] {
        let series = format!(
            "rein_model_stream_recoveries_total{{provider=\"primary\",outcome=\"{outcome}\"}} {n}"
        );
        assert!(metrics.contains(&series), "{series}\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_inside_a_tool_call_or_on_a_binding_that_says_no_ends_with_its_error() {
    let s = setup().await;
    let call = Reply::tool_calls([ToolCall::new("send_email", &json!({"to": "a@b.c"}))])
        .with_stream_fault(StreamFault::Drop { after: 3 });
    s.mocks.primary.push_reply(call);
    let body = s.stream("/v1/chat/completions", "main").await;
    assert!(body.contains("\"error\""), "{body}");
    assert!(!body.trim_end().ends_with("data: [DONE]"), "{body}");

    s.mocks
        .primary
        .push_reply(faulted(StreamFault::Drop { after: 4 }));
    let body = s.stream("/v1/chat/completions", "off").await;
    assert!(body.contains("\"error\""), "{body}");
    assert!(!body.trim_end().ends_with("data: [DONE]"), "{body}");
    assert_eq!(s.mocks.claude.request_count(), 0, "nothing was continued");
    assert!(
        !s.metrics()
            .await
            .contains("rein_model_stream_recoveries_total{"),
        "no recovery was tried"
    );
}

//! Images and audio through the gateway (issue 36): a real `rein serve`,
//! two mock models over loopback (an OpenAI-compatible one and an
//! Anthropic one), plain HTTP.
//!
//! - An OpenAI `image_url` part reaches an OpenAI-compatible provider as
//!   it was sent, and an Anthropic provider as an image block (a base64
//!   source for a data URL, a URL source for a web URL), the text around
//!   it in order.
//! - An Anthropic `image` block reaches an OpenAI-compatible provider as
//!   an `image_url` part.
//! - Audio, which the Messages API does not take, is refused by the
//!   Anthropic link naming the part and its message, and nothing is sent
//!   to it; a binding with an OpenAI-compatible fallback answers it there.
//! - A `file` part is a 400 that says why, before any provider is asked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, vector_of};
use serde_json::{Value, json};

mod common;
use common::Server;

/// The gateway's key and its SHA-256 (`printf %s KEY | sha256sum`).
const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";

/// A 1×1 PNG.
const PIXEL: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==";

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

[models.gpt]
provider = "gpt"
model = "gpt-test"

[models.claude]
provider = "claude"
model = "claude-test"

# An Anthropic primary with an OpenAI-compatible fallback.
[models.claude_then_gpt]
provider = "claude"
model = "claude-test"
fallbacks = [{{ provider = "gpt", model = "gpt-test" }}]

# An Anthropic primary whose fallback answers nobody.
[providers.dead]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
max_output_tokens = {{ gone = 4096 }}

[models.claude_then_dead]
provider = "claude"
model = "claude-test"
fallbacks = [{{ provider = "dead", model = "gone" }}]

# Embedding models: the Anthropic link has no embeddings API.
[models.embed]
kind = "embedding"
provider = "claude"
model = "claude-test"
fallbacks = [{{ provider = "gpt", model = "text-embedding-3-small" }}]

[[server.api_keys]]
tenant = "acme"
sha256 = "{KEY_SHA256}"
name = "media-test"
"#
    );
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    dir.join("rein.toml")
}

struct Setup {
    gpt: MockModel,
    claude: MockModel,
    server: Server,
    client: reqwest::Client,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let gpt = MockModel::start_with(MockModelConfig::default().with_fallback_text("a pixel"))
        .await
        .unwrap();
    let claude = MockModel::start_with(MockModelConfig::default().with_fallback_text("a pixel"))
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
        client: reqwest::Client::new(),
        _dir: dir,
    }
}

impl Setup {
    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = self
            .client
            .post(self.server.url(path))
            .bearer_auth(KEY)
            .header("anthropic-version", "2023-06-01")
            .json(body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{status}: {text}\n{}", self.server.log_tail()));
        (status, body)
    }
}

fn chat(model: &str, parts: Value) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": parts}]})
}

fn image_parts(url: &str) -> Value {
    json!([
        {"type": "text", "text": "What is in this image?"},
        {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
    ])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_reaches_each_provider_in_its_own_shape() {
    let s = setup().await;
    let data_url = format!("data:image/png;base64,{PIXEL}");

    // OpenAI in, OpenAI-compatible out: the parts as sent.
    s.gpt.push_reply(Reply::text("A red pixel."));
    let (status, body) = s
        .post("/v1/chat/completions", &chat("gpt", image_parts(&data_url)))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "A red pixel.");
    let sent = s.gpt.last_request().unwrap();
    assert_eq!(sent.messages()[0]["content"], image_parts(&data_url));

    // OpenAI in, Anthropic out: image blocks, base64 and by URL.
    s.claude.push_reply(Reply::text("Two pixels."));
    let parts = json!([
        {"type": "text", "text": "Compare"},
        {"type": "image_url", "image_url": {"url": data_url}},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.jpg"}},
    ]);
    let (status, body) = s.post("/v1/chat/completions", &chat("claude", parts)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Two pixels.");
    let sent = s.claude.last_request().unwrap();
    assert_eq!(
        sent.messages()[0]["content"],
        json!([
            {"type": "text", "text": "Compare"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/b.jpg"}},
        ])
    );

    // Anthropic in, OpenAI-compatible out.
    s.gpt.push_reply(Reply::text("One pixel."));
    let messages = json!({"model": "gpt", "max_tokens": 100, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PIXEL}},
        {"type": "text", "text": "What is it?"}]}]});
    let (status, body) = s.post("/v1/messages", &messages).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["content"][0]["text"], "One pixel.");
    let sent = s.gpt.last_request().unwrap();
    assert_eq!(
        sent.messages()[0]["content"],
        json!([
            {"type": "image_url", "image_url": {"url": data_url}},
            {"type": "text", "text": "What is it?"},
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audio_is_refused_by_a_provider_without_it_naming_the_part() {
    let s = setup().await;
    let audio = json!([
        {"type": "text", "text": "Transcribe this."},
        {"type": "input_audio", "input_audio": {"data": "UklGRiQAAABXQVZF", "format": "wav"}},
    ]);

    // The Anthropic link alone: refused, nothing sent.
    let (status, body) = s
        .post("/v1/chat/completions", &chat("claude", audio.clone()))
        .await;
    assert!((400..500).contains(&status), "{status}: {body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("an audio part (wav): the Messages API takes no audio input, in the user message \"Transcribe this.\""),
        "{body}"
    );
    assert_eq!(s.claude.request_count(), 0, "nothing reached the provider");

    // With an OpenAI-compatible fallback: answered there, the audio as sent.
    s.gpt.push_reply(Reply::text("Hello."));
    let (status, body) = s
        .post(
            "/v1/chat/completions",
            &chat("claude_then_gpt", audio.clone()),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello.");
    assert_eq!(s.claude.request_count(), 0);
    assert_eq!(
        s.gpt.last_request().unwrap().messages()[0]["content"],
        audio
    );

    // A link passed over is not the cause when the one that tried failed:
    // the dead fallback's failure is reported, not Anthropic's refusal.
    let (status, body) = s
        .post(
            "/v1/chat/completions",
            &chat("claude_then_dead", audio.clone()),
        )
        .await;
    assert_eq!(status, 502, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("every link failed") && !message.contains("audio"),
        "{body}"
    );

    // A file part: a 400 before any provider is asked.
    let before = s.gpt.request_count();
    let file =
        json!([{"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBERi0="}}]);
    let (status, body) = s.post("/v1/chat/completions", &chat("gpt", file)).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["error"]["param"], "/messages/0/content/0/type",
        "{body}"
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("cannot be bounded"),
        "{body}"
    );
    assert_eq!(s.gpt.request_count(), before);
}

/// Embeddings go through the binding's chain: the Anthropic link, which has
/// no embeddings API, is passed over for the OpenAI-compatible one; a chat
/// binding is not asked for them, nor an embedding binding for a turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embeddings_pass_over_a_link_without_an_embeddings_api() {
    let s = setup().await;
    let (status, body) = s
        .post(
            "/v1/embeddings",
            &json!({"model": "embed", "input": ["first", "second"], "dimensions": 3}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "list");
    assert_eq!(body["model"], "text-embedding-3-small");
    assert_eq!(body["data"][0]["embedding"], json!(vector_of("first", 3)));
    assert_eq!(body["data"][1]["embedding"], json!(vector_of("second", 3)));
    assert_eq!(body["data"][1]["index"], 1);
    // "first" and "second": two tokens each at the mock's four bytes.
    assert_eq!(body["usage"]["prompt_tokens"], 4, "{body}");
    let sent = s.gpt.last_request().unwrap();
    assert_eq!(sent.path, "/v1/embeddings");
    assert_eq!(sent.body["input"], json!(["first", "second"]));
    assert_eq!(sent.body["dimensions"], 3);
    assert_eq!(sent.body["model"], "text-embedding-3-small");
    assert_eq!(s.claude.request_count(), 0, "nothing reached Anthropic");

    // A chat binding is not asked for embeddings, nor an embedding one
    // for a turn.
    let (status, body) = s
        .post("/v1/embeddings", &json!({"model": "claude", "input": "x"}))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`claude` is a chat binding"),
        "{body}"
    );
    let (status, body) = s
        .post("/v1/chat/completions", &chat("embed", json!("Hi.")))
        .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`embed` is an embedding binding"),
        "{body}"
    );
    assert_eq!(
        s.gpt.request_count(),
        1,
        "only the embeddings asked a model"
    );
}

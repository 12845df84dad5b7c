//! The OpenAI-compatible gateway, driven by the official `openai` Python
//! package with only its base URL changed: a chat, a streamed chat and a
//! tool call through a real `rein serve` whose model binding points at the
//! testkit's mock model, over loopback.
//!
//! The package comes from `.ci/run`'s venv (`$REIN_PYTHON`); without it this
//! test says how to install it and passes, except under CI (`CI=true`),
//! where a missing package fails it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, vector_of};
use serde_json::{Value, json};

mod common;
use common::Server;

/// The gateway's bearer key and its SHA-256 (`printf %s KEY | sha256sum`).
const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";

fn config(dir: &std::path::Path, model_url: &str, key_sha256: &str) -> std::path::PathBuf {
    let text = format!(
        r#"
[providers.mock]
kind = "openai"
base_url = "{model_url}"
max_output_tokens = {{ "mock-model" = 4096 }}

[providers.dead]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
max_output_tokens = {{ gone = 4096 }}

[models.chat]
provider = "mock"
model = "mock-model"

[models.embed]
kind = "embedding"
provider = "mock"
model = "text-embedding-3-small"

# A primary nobody answers: every call falls back to the mock.
[models.resilient]
provider = "dead"
model = "gone"
fallbacks = [{{ provider = "mock", model = "mock-model" }}]

# The operator's scraper reads /metrics with this tenant's key.
[server]
metrics_tenants = ["acme"]

[[server.api_keys]]
tenant = "acme"
sha256 = "{key_sha256}"
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
async fn the_official_openai_client_chats_streams_and_calls_tools_through_the_gateway() {
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
        Reply::text("A single red pixel."),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url(), KEY_SHA256);
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/gateway_client.py");
    let out = Command::new(&python)
        .arg(&script)
        .env("REIN_GATEWAY_URL", server.url("/v1"))
        .env("REIN_API_KEY", KEY)
        .env("REIN_MODEL", "chat")
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
    let chat = check("chat");
    assert_eq!(chat["content"], "Hello from the mock.");
    assert_eq!(chat["finish_reason"], "stop");
    assert_eq!(chat["rein_model"], "mock/mock-model");
    assert_eq!(chat["rein_fallback"], "false");
    assert!(chat["total_tokens"].as_u64().unwrap() > 0);

    let stream = check("stream");
    assert_eq!(stream["content"], "Streamed hello, in pieces.");
    assert_eq!(stream["finish_reason"], "stop");
    assert!(stream["total_tokens"].as_u64().unwrap() > 0);
    assert!(
        model.requests().iter().any(|r| r.stream()),
        "the provider was asked to stream"
    );

    let tool = check("tool_call");
    assert_eq!(tool["name"], "get_order");
    assert_eq!(tool["arguments"], json!({"order_id": "A-1001"}));
    assert_eq!(tool["finish_reason"], "tool_calls");
    assert_eq!(check("tool_result")["content"], "A-1001 has shipped.");
    // The tool's result reached the model as a tool message.
    assert!(
        model
            .requests()
            .iter()
            .any(|r| r.messages().iter().any(|m| m["role"] == "tool")),
        "no tool message reached the model"
    );

    let unknown = check("unknown_model");
    assert_eq!(unknown["raised"], true);
    assert_eq!(unknown["status"], 404);
    assert!(
        unknown["message"].as_str().unwrap().contains("chat"),
        "the error lists the known bindings: {unknown}"
    );

    // `models.list()` and `models.retrieve()` by base URL: the bindings,
    // by id, in OpenAI's shape, each owned by its primary's provider.
    let models = check("models");
    assert_eq!(
        models["ids"],
        json!(["chat", "embed", "resilient"]),
        "{models}"
    );
    assert_eq!(models["objects"], json!(["model"]));
    assert_eq!(models["owned_by"], json!(["mock", "mock", "dead"]));
    assert!(models["created"][0].as_u64().unwrap() > 1_700_000_000);
    let info = check("model");
    assert_eq!(info["id"], "chat", "{info}");
    assert_eq!(info["object"], "model");
    assert!(info["request_id"].is_string(), "x-request-id: {info}");
    let unknown_info = check("unknown_model_info");
    assert_eq!(unknown_info["exception"], "NotFoundError", "{unknown_info}");
    assert_eq!(unknown_info["code"], "model_not_found");
    assert!(unknown_info["request_id"].is_string(), "{unknown_info}");
    // An image part reaches the OpenAI-compatible provider as sent.
    assert_eq!(check("image")["content"], "A single red pixel.");
    let seen = model.last_request().unwrap();
    let parts = &seen.messages()[0]["content"];
    assert_eq!(parts[1]["type"], "image_url", "{parts}");
    assert!(
        parts[1]["image_url"]["url"]
            .as_str()
            .unwrap()
            .starts_with("data:image/png;base64,iVBOR"),
        "{parts}"
    );
    // An endpoint rein does not serve is a 404 the SDK reads, naming it.
    let moderations = check("moderations");
    assert_eq!(moderations["exception"], "NotFoundError", "{moderations}");
    assert_eq!(moderations["code"], "no_route");
    assert!(
        moderations["message"]
            .as_str()
            .unwrap()
            .contains("POST /v1/moderations"),
        "{moderations}"
    );
    // Embeddings through the SDK's default base64, decoded by the SDK to
    // the very floats the provider sent.
    let embeddings = check("embeddings");
    assert_eq!(
        embeddings["vectors"],
        json!([vector_of("Hi.", 4), vector_of("Bye.", 4)]),
        "{embeddings}"
    );
    assert_eq!(embeddings["model"], "text-embedding-3-small");
    assert_eq!(embeddings["prompt_tokens"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_says_which_model_answered_and_replays_idempotent_requests() {
    let model = mock().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), &model.openai_base_url(), KEY_SHA256);
    let server = Server::start_with_env(&config, &dir.path().join("rein.db"), &[]);
    let client = reqwest::Client::new();
    let body = r#"{"model": "resilient", "messages": [{"role": "user", "content": "Hi."}]}"#;
    let post = || {
        client
            .post(server.url("/v1/chat/completions"))
            .bearer_auth(KEY)
            .header("content-type", "application/json")
            .header("Idempotency-Key", "chat-1")
            .body(body)
            .send()
    };
    let first = post().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["rein-model"], "mock/mock-model");
    assert_eq!(first.headers()["rein-fallback"], "true");
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["model"], "mock-model");
    assert_eq!(first["choices"][0]["message"]["content"], "fallback text");

    let again = post().await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["idempotency-replayed"], "true");
    // The replay says which model answered, as the first answer did.
    assert_eq!(again.headers()["rein-model"], "mock/mock-model");
    assert_eq!(again.headers()["rein-fallback"], "true");
    assert_eq!(
        again.headers()["x-request-id"],
        again.headers()["request-id"],
        "the id as OpenAI's SDK reads it"
    );
    let again: Value = again.json().await.unwrap();
    assert_eq!(again, first, "the stored answer, byte for byte");
    assert_eq!(model.request_count(), 1, "the model was asked once");

    // The switch is counted, per provider, for an operator's scraper (with
    // the key of a tenant in server.metrics_tenants: keys are configured,
    // and /metrics is protected by default).
    let metrics = client
        .get(server.url("/metrics"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(
            "rein_model_fallbacks_total{primary=\"dead/gone\",answered=\"mock/mock-model\"} 1"
        ),
        "{metrics}"
    );
    // The dead primary twice: its refusal gets one same-model retry
    // before the fallback (issue 35).
    assert!(
        metrics.contains(
            "rein_model_calls_total{tenant=\"acme\",agent=\"none\",provider=\"dead\",model=\"gone\",outcome=\"transient\"} 2"
        ),
        "{metrics}"
    );

    // Sampling options and the tool choice reach the provider (which
    // answers the JSON object asked for: prose would be a 502).
    model.push_reply(Reply::text(r#"{"order_id": "A-1001"}"#));
    let with_options = client
        .post(server.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .bearer_auth(KEY)
        .body(
            r#"{"model": "chat", "messages": [{"role": "user", "content": "Hi."}],
                "temperature": 0.2, "stop": ["END"], "seed": 7,
                "tools": [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}}}],
                "tool_choice": "required", "response_format": {"type": "json_object"}}"#,
        )
        .send()
        .await
        .unwrap();
    assert_eq!(with_options.status(), 200);
    let sent = model.last_request().unwrap().body;
    assert_eq!(sent["temperature"], 0.2);
    assert_eq!(sent["stop"], json!(["END"]));
    assert_eq!(sent["seed"], 7);
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["response_format"], json!({"type": "json_object"}));
    let out_of_range = client
        .post(server.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .bearer_auth(KEY)
        .body(r#"{"model": "chat", "messages": [{"role": "user", "content": "Hi."}], "temperature": 3}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(out_of_range.status(), 400);

    // Without a key: 401. A streaming request with a key: 400.
    let anonymous = client
        .post(server.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    let streamed_with_key = client
        .post(server.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .bearer_auth(KEY)
        .header("Idempotency-Key", "chat-2")
        .body(r#"{"model": "chat", "stream": true, "messages": [{"role": "user", "content": "Hi."}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(streamed_with_key.status(), 400);
}

/// Every member of OpenAI's chat request is passed, mapped, accepted as
/// the value rein answers with, ignored by design and said so, or refused
/// naming it — never dropped silently (the table in `ChatRequest`'s docs
/// and the README): what an OpenAI link receives, what an Anthropic link
/// receives and what `Rein-Ignored` says are checked on the mock's own
/// record of each request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_chat_member_is_passed_mapped_or_refused_never_dropped_silently() {
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
    let every = json!({
        "model": "chat",
        "messages": [{"role": "user", "content": "Hi."}],
        "tools": [{"type": "function", "function": {"name": "get_order", "parameters": {"type": "object"}, "strict": true}}],
        "tool_choice": "auto", "parallel_tool_calls": false,
        "max_completion_tokens": 64, "stream": false,
        "temperature": 0.5, "top_p": 0.9, "stop": ["END"], "seed": 7, "user": "u-1",
        "frequency_penalty": 0.1, "presence_penalty": -0.2, "logit_bias": {"50256": -100},
        "reasoning_effort": "low", "service_tier": "auto",
        "n": 1, "logprobs": false, "modalities": ["text"],
        "store": true, "metadata": {"team": "orders"},
        "functions": null,
    });
    let send = |body: Value| {
        client
            .post(server.url("/v1/chat/completions"))
            .json(&body)
            .send()
    };

    // An OpenAI link: every sampling and tool member reaches it unchanged.
    let answer = send(every.clone()).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(answer.headers()["rein-ignored"], "store, metadata");
    let sent = model.last_request().unwrap().body;
    for member in [
        "tool_choice",
        "parallel_tool_calls",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "user",
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "reasoning_effort",
        "service_tier",
    ] {
        assert_eq!(sent[member], every[member], "{member}: {sent}");
    }
    assert_eq!(sent["tools"][0]["function"]["strict"], true, "{sent}");
    for member in [
        "store",
        "metadata",
        "n",
        "logprobs",
        "modalities",
        "functions",
    ] {
        assert!(
            sent.get(member).is_none(),
            "{member} reached the provider: {sent}"
        );
    }

    // An Anthropic link: mapped where its API has the member, and what it
    // has not is named in Rein-Ignored.
    let mut to_claude = every.clone();
    to_claude["model"] = json!("claude");
    let answer = send(to_claude).await.unwrap();
    assert_eq!(answer.status(), 200);
    let mut ignored: Vec<&str> = answer.headers()["rein-ignored"]
        .to_str()
        .unwrap()
        .split(", ")
        .collect();
    ignored.sort_unstable();
    assert_eq!(
        ignored,
        [
            "frequency_penalty",
            "logit_bias",
            "metadata",
            "presence_penalty",
            "reasoning_effort",
            "seed",
            "service_tier",
            "store",
        ]
    );
    let sent = model.last_request().unwrap().body;
    assert_eq!(sent["temperature"], 0.5, "{sent}");
    assert_eq!(sent["top_p"], 0.9, "{sent}");
    assert_eq!(sent["stop_sequences"], json!(["END"]), "{sent}");
    assert_eq!(sent["metadata"]["user_id"], "u-1", "{sent}");
    assert_eq!(
        sent["tool_choice"]["disable_parallel_tool_use"], true,
        "{sent}"
    );

    // Refused, naming the member, before any call.
    let calls = model.request_count();
    for (member, value, says) in [
        ("n", json!(2), "`n` must be 1"),
        ("logprobs", json!(true), "`logprobs` must be false"),
        ("modalities", json!(["text", "audio"]), "answers text"),
        ("top_logprobs", json!(3), "log probabilities"),
        ("audio", json!({"voice": "alloy"}), "audio output"),
        ("functions", json!([{"name": "f"}]), "send them as `tools`"),
        ("web_search_options", json!({}), "web search"),
        ("frequency_penalty", json!(3), "between -2 and 2"),
        (
            "temperatur",
            json!(1),
            "Unrecognized request argument supplied: temperatur",
        ),
    ] {
        let mut body = every.clone();
        body[member] = value;
        let refused = send(body).await.unwrap();
        assert_eq!(refused.status(), 400, "{member}");
        let problem: Value = refused.json().await.unwrap();
        let message = problem["error"]["message"].as_str().unwrap();
        assert!(message.contains(says), "{member}: {problem}");
        assert_eq!(
            problem["error"]["param"],
            format!("/{member}"),
            "{member}: {problem}"
        );
    }
    assert_eq!(
        model.request_count(),
        calls,
        "no refused request reached a model"
    );
}

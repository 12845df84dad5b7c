//! Output ceilings through a real `rein serve` against mock models that
//! refuse what the real APIs refuse (issue 16): a `max_tokens` above the
//! model's cap (OpenAI's and Anthropic's 400s), and `max_tokens` sent to an
//! OpenAI reasoning model, which takes only `max_completion_tokens`.
//!
//! - The gateway refuses a client's ask above the primary's cap with the
//!   400 the real API sends, before any call, streamed or not.
//! - A ceiling sent lower than asked (a fallback's smaller cap) is said in
//!   `Rein-Max-Tokens` and in the call's `model_call_started` event.
//! - Runs and gateway calls to reasoning models send
//!   `max_completion_tokens` (known models, and one configured in
//!   `output_tokens_field`); Anthropic-protocol models get a `max_tokens`
//!   within their cap, and the Anthropic mock's usage log is what the
//!   report says was consumed.
//! - `rein check` names the field of every OpenAI-compatible model and
//!   refuses a model whose field would be a guess.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use rein_testkit::mock_model::{MockModel, MockModelConfig, RecordedRequest, Reply};
use rein_testkit::order_desk::OrderDesk;
use serde_json::{Value, json};

mod common;
use common::Server;

/// The providers, bindings and agents appended to the example config.
fn extra(openai_url: &str, anthropic_url: &str) -> String {
    format!(
        r#"
[providers.oai]
kind = "openai"
base_url = "{openai_url}"
max_output_tokens = {{ "small-model" = 1000, "local-reasoner" = 8000 }}
output_tokens_field = {{ "local-reasoner" = "max_completion_tokens" }}

[providers.claude]
kind = "anthropic"
base_url = "{anthropic_url}"

[providers.dead]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"

[models.mini]
provider = "oai"
model = "gpt-4o-mini"

[models.sonnet]
provider = "claude"
model = "claude-sonnet-4"

[models.reasoner]
provider = "oai"
model = "o3-mini"

[models.local]
provider = "oai"
model = "local-reasoner"

# A primary nobody answers (gpt-4o-mini's cap: 16,384), falling back to a
# model whose cap is 1,000.
[models.resilient]
provider = "dead"
model = "gpt-4o-mini"
fallbacks = [{{ provider = "oai", model = "small-model" }}]

[agents.desk_on_claude]
provider = "claude"
model = "claude-sonnet-4"
system_prompt = "You are the order desk."
tools = ["get_order"]
[agents.desk_on_claude.budget]
wall_clock = "60s"
max_steps = 5
max_tokens = 100000

# The same, with a token budget far below the cap: the budget sets the
# ceiling of every call.
[agents.desk_on_claude_tight]
provider = "claude"
model = "claude-sonnet-4"
system_prompt = "You are the order desk."
tools = ["get_order"]
[agents.desk_on_claude_tight.budget]
wall_clock = "60s"
max_steps = 5
max_tokens = 4000

[agents.desk_on_o3]
provider = "oai"
model = "o3-mini"
system_prompt = "You are the order desk."
tools = ["get_order"]
[agents.desk_on_o3.budget]
wall_clock = "60s"
max_steps = 5
max_tokens = 150000
"#
    )
}

/// An OpenAI-compatible mock with the documented caps and OpenAI's rule
/// for reasoning models, and an Anthropic one with claude-sonnet-4's cap;
/// both meter usage.
async fn mocks() -> (MockModel, MockModel) {
    let openai = MockModel::start_with(
        MockModelConfig::default()
            .with_output_cap("gpt-4o-mini", 16_384)
            .with_output_cap("small-model", 1_000)
            .with_output_cap("o3-mini", 100_000)
            .with_output_cap("local-reasoner", 8_000)
            .with_max_completion_tokens_only("o3-mini")
            .with_max_completion_tokens_only("local-reasoner")
            .with_metered_usage(),
    )
    .await
    .unwrap();
    let anthropic = MockModel::start_with(
        MockModelConfig::default()
            .with_output_cap("claude-sonnet-4", 64_000)
            .with_metered_usage(),
    )
    .await
    .unwrap();
    (openai, anthropic)
}

struct Setup {
    openai: MockModel,
    anthropic: MockModel,
    desk: OrderDesk,
    server: Server,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let (openai, anthropic) = mocks().await;
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = common::example_config(
        dir.path(),
        &extra(&openai.openai_base_url(), &anthropic.openai_base_url()),
    );
    let server = Server::start(&config, &dir.path().join("rein.db"), desk.base_url());
    Setup {
        openai,
        anthropic,
        desk,
        server,
        _dir: dir,
    }
}

async fn chat(server: &Server, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(server.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap()
}

fn hi(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "Hi."}]})
}

fn with(mut body: Value, key: &str, value: Value) -> Value {
    body[key] = value;
    body
}

/// The output ceiling a recorded request carries, and its member.
fn ceiling(request: &RecordedRequest) -> (Option<u64>, Option<u64>) {
    (
        request.body["max_tokens"].as_u64(),
        request.body["max_completion_tokens"].as_u64(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_refuses_an_ask_above_the_primarys_cap_as_the_api_would() {
    let s = setup().await;
    for stream in [false, true] {
        // gpt-4o-mini on an OpenAI-compatible provider: 16,384.
        let refused = chat(
            &s.server,
            with(
                with(hi("mini"), "max_tokens", json!(50_000)),
                "stream",
                json!(stream),
            ),
        )
        .await;
        assert_eq!(refused.status(), 400, "stream {stream}");
        let problem: Value = refused.json().await.unwrap();
        assert_eq!(
            problem["error"]["type"], "invalid_request_error",
            "{problem}"
        );
        assert_eq!(problem["error"]["code"], "invalid_value", "{problem}");
        assert_eq!(problem["error"]["param"], "max_tokens", "{problem}");
        assert_eq!(problem["max_output_tokens"], 16_384, "{problem}");
        let message = problem["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("at most 16384") && message.contains("50000"),
            "{message}"
        );

        // The newer name is named back; claude-sonnet-4 on an Anthropic
        // provider: 64,000.
        let refused = chat(
            &s.server,
            with(
                with(hi("sonnet"), "max_completion_tokens", json!(64_001)),
                "stream",
                json!(stream),
            ),
        )
        .await;
        assert_eq!(refused.status(), 400, "stream {stream}");
        let problem: Value = refused.json().await.unwrap();
        assert_eq!(
            problem["error"]["param"], "max_completion_tokens",
            "{problem}"
        );
        assert_eq!(problem["max_output_tokens"], 64_000, "{problem}");
    }
    // Refused before any call.
    assert_eq!(s.openai.request_count(), 0);
    assert_eq!(s.anthropic.request_count(), 0);

    // At the cap, both are sent as asked.
    for stream in [false, true] {
        let ok = chat(
            &s.server,
            with(
                with(hi("mini"), "max_tokens", json!(16_384)),
                "stream",
                json!(stream),
            ),
        )
        .await;
        assert_eq!(ok.status(), 200);
        assert!(ok.headers().get("rein-max-tokens").is_none());
        let _ = ok.bytes().await.unwrap();
        assert_eq!(
            ceiling(&s.openai.last_request().unwrap()),
            (Some(16_384), None)
        );
        let ok = chat(
            &s.server,
            with(
                with(hi("sonnet"), "max_tokens", json!(64_000)),
                "stream",
                json!(stream),
            ),
        )
        .await;
        assert_eq!(ok.status(), 200);
        let _ = ok.bytes().await.unwrap();
        assert_eq!(
            s.anthropic.last_request().unwrap().body["max_tokens"],
            64_000
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ceiling_sent_lower_than_asked_is_said_in_rein_max_tokens() {
    let s = setup().await;
    for stream in [false, true] {
        // 2,000 fits the primary (16,384); the fallback that answers
        // takes at most 1,000.
        let lowered = chat(
            &s.server,
            with(
                with(hi("resilient"), "max_tokens", json!(2_000)),
                "stream",
                json!(stream),
            ),
        )
        .await;
        assert_eq!(lowered.status(), 200, "stream {stream}");
        assert_eq!(lowered.headers()["rein-fallback"], "true");
        assert_eq!(lowered.headers()["rein-max-tokens"], "1000; reason=cap");
        let _ = lowered.bytes().await.unwrap();
        assert_eq!(
            ceiling(&s.openai.last_request().unwrap()),
            (Some(1_000), None)
        );

        // Asked within every cap: sent as asked, no header.
        let as_asked = chat(
            &s.server,
            with(
                with(hi("resilient"), "max_tokens", json!(300)),
                "stream",
                json!(stream),
            ),
        )
        .await;
        assert_eq!(as_asked.status(), 200);
        assert!(as_asked.headers().get("rein-max-tokens").is_none());
        let _ = as_asked.bytes().await.unwrap();
        assert_eq!(
            ceiling(&s.openai.last_request().unwrap()),
            (Some(300), None)
        );
    }
    // Every call the mock answered was within its model's cap.
    assert!(s.openai.usage_log().iter().all(|u| {
        u.max_tokens.is_some_and(|m| {
            m <= if u.model == "small-model" {
                1_000
            } else {
                16_384
            }
        })
    }));
}

/// Posts a sync run of `agent`; its view.
async fn run(server: &Server, agent: &str, input: &str) -> Value {
    let response = reqwest::Client::new()
        .post(server.url(&format!("/v1/agents/{agent}/runs")))
        .header("content-type", "application/json")
        .body(json!({"input": input}).to_string())
        .send()
        .await
        .unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    response.json().await.unwrap()
}

/// The `model_call_started` events of run `id`.
async fn calls_started(server: &Server, id: &str) -> Vec<Value> {
    let events: Value = reqwest::Client::new()
        .get(server.url(&format!("/v1/runs/{id}/events")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "model_call_started" || e["type"] == "model_call_started")
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_models_are_sent_max_completion_tokens_in_runs_and_the_gateway() {
    let s = setup().await;
    // A run: the budget (150,000) is above o3-mini's cap (100,000).
    s.openai.push_replies([
        Reply::tool_call("get_order", &json!({"order_id": "A-1002"})),
        Reply::text("A-1002 arrives on 7 January."),
    ]);
    let view = run(&s.server, "desk_on_o3", "When does A-1002 arrive?").await;
    assert_eq!(view["report"]["outcome"], "succeeded", "{view}");
    assert_eq!(s.openai.request_count(), 2);
    for request in s.openai.requests() {
        let (old, new) = ceiling(&request);
        assert_eq!(old, None, "{}", request.body);
        assert!(new.is_some_and(|n| n <= 100_000), "{}", request.body);
    }
    let started = calls_started(&s.server, view["run_id"].as_str().unwrap()).await;
    assert_eq!(started.len(), 2, "{started:?}");
    for event in &started {
        let max = event["data"]["max_tokens"]
            .as_u64()
            .or_else(|| event["max_tokens"].as_u64());
        assert!(max.is_some_and(|m| m <= 100_000), "{event}");
    }
    assert_eq!(s.desk.request_count("get_order"), 1);

    // The gateway, whole and streamed: a known reasoning model and one
    // configured in output_tokens_field; the client's own member does not
    // matter.
    for (binding, cap) in [("reasoner", 100_000), ("local", 8_000)] {
        for stream in [false, true] {
            for member in ["max_tokens", "max_completion_tokens"] {
                let answered = chat(
                    &s.server,
                    with(
                        with(hi(binding), member, json!(500)),
                        "stream",
                        json!(stream),
                    ),
                )
                .await;
                assert_eq!(answered.status(), 200, "{binding} {stream} {member}");
                let _ = answered.bytes().await.unwrap();
                assert_eq!(
                    ceiling(&s.openai.last_request().unwrap()),
                    (None, Some(500))
                );
            }
            // No ceiling asked: the model's cap, in its member.
            let answered = chat(&s.server, with(hi(binding), "stream", json!(stream))).await;
            assert_eq!(answered.status(), 200);
            let _ = answered.bytes().await.unwrap();
            assert_eq!(
                ceiling(&s.openai.last_request().unwrap()),
                (None, Some(cap))
            );
        }
    }
    // Nothing was refused: every request was answered.
    assert_eq!(s.openai.usage_log().len(), s.openai.request_count());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_models_are_asked_within_their_cap_and_metered_by_the_mock() {
    let s = setup().await;
    // A run whose budget (100,000) is above claude-sonnet-4's cap.
    s.anthropic.push_replies([
        Reply::tool_call("get_order", &json!({"order_id": "A-1002"})),
        Reply::text("A-1002 arrives on 7 January."),
    ]);
    let view = run(&s.server, "desk_on_claude", "When does A-1002 arrive?").await;
    assert_eq!(view["report"]["outcome"], "succeeded", "{view}");
    let log = s.anthropic.usage_log();
    assert_eq!(log.len(), 2, "{log:?}");
    assert!(log.iter().all(|u| u.path == "/v1/messages"));
    assert!(
        log.iter()
            .all(|u| u.max_tokens.is_some_and(|m| m <= 64_000))
    );
    // What the Anthropic side counted is what the report says was consumed.
    let counted: u64 = log
        .iter()
        .map(|u| u.prompt_tokens + u.completion_tokens)
        .sum();
    assert!(counted > 0);
    assert_eq!(
        view["report"]["consumed"]["tokens"].as_u64(),
        Some(counted),
        "{view}"
    );

    // The gateway (OpenAI-compatible endpoint, Anthropic provider), whole
    // and streamed, with and without a ceiling.
    for stream in [false, true] {
        for body in [hi("sonnet"), with(hi("sonnet"), "max_tokens", json!(700))] {
            let answered = chat(&s.server, with(body, "stream", json!(stream))).await;
            assert_eq!(answered.status(), 200);
            let _ = answered.bytes().await.unwrap();
        }
    }
    let requests = s.anthropic.requests();
    assert_eq!(requests.len(), 6);
    for request in &requests {
        let max = request.body["max_tokens"].as_u64().unwrap();
        assert!(max <= 64_000, "{}", request.body);
    }
    assert_eq!(requests[4].body["max_tokens"], 64_000, "no ask: the cap");
    assert_eq!(requests[5].body["max_tokens"], 700);
    assert_eq!(s.anthropic.usage_log().len(), 6, "none was refused");

    // Under a budget far below the cap, each call's ceiling is what the
    // budget leaves, and its event says the budget set it.
    s.anthropic.push_replies([
        Reply::tool_call("get_order", &json!({"order_id": "A-1002"})),
        Reply::text("A-1002 arrives on 7 January."),
    ]);
    let view = run(
        &s.server,
        "desk_on_claude_tight",
        "When does A-1002 arrive?",
    )
    .await;
    assert_eq!(view["report"]["outcome"], "succeeded", "{view}");
    let started = calls_started(&s.server, view["run_id"].as_str().unwrap()).await;
    assert_eq!(started.len(), 2, "{started:?}");
    let sent: Vec<u64> = s.anthropic.requests()[6..]
        .iter()
        .map(|r| r.body["max_tokens"].as_u64().unwrap())
        .collect();
    for (event, sent) in started.iter().zip(&sent) {
        assert_eq!(event["data"]["max_tokens_limited_by"], "tokens", "{event}");
        assert_eq!(event["data"]["max_tokens"].as_u64(), Some(*sent), "{event}");
        assert!(*sent < 4_000, "{sent}");
    }
}

/// `rein check --json` on the example config with `extra` appended.
fn check(extra: &str) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let config = common::example_config(dir.path(), extra);
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["check", "--json"])
        .arg(&config)
        .env("ORDER_DESK_URL", "http://127.0.0.1:2")
        .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rein_check_names_each_models_field_and_refuses_a_guess() {
    let doc = check(&extra("http://127.0.0.1:2/v1", "http://127.0.0.1:2/v1"));
    assert_eq!(doc["ok"], true, "{doc}");
    let fields = doc["output_fields"].as_array().unwrap();
    let field = |model: &str| {
        fields
            .iter()
            .find(|f| f["provider"] == "oai" && f["model"] == model)
            .unwrap_or_else(|| panic!("{model} in {fields:?}"))
            .clone()
    };
    assert_eq!(field("o3-mini")["field"], "max_completion_tokens");
    assert_eq!(field("o3-mini")["source"], "known model");
    assert_eq!(field("o3-mini")["max_output_tokens"], 100_000);
    assert_eq!(field("gpt-4o-mini")["field"], "max_tokens");
    assert_eq!(field("local-reasoner")["field"], "max_completion_tokens");
    assert_eq!(field("local-reasoner")["source"], "configured");
    assert_eq!(field("small-model")["field"], "max_tokens");
    assert_eq!(field("small-model")["source"], "default");
    // Anthropic models have one member: not listed.
    assert!(fields.iter().all(|f| f["provider"] != "claude"));

    // A router's name for a reasoning model: which member it takes is a
    // guess, so the config is refused until it says.
    let routed = r#"
[providers.router]
kind = "openai"
base_url = "http://127.0.0.1:2/v1"
max_output_tokens = { "openai/o3" = 100000 }
[models.routed]
provider = "router"
model = "openai/o3"
"#;
    let doc = check(routed);
    assert_eq!(doc["ok"], false, "{doc}");
    let problem = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["field"] == "models.routed.model")
        .unwrap_or_else(|| panic!("{doc}"));
    let message = problem["message"].as_str().unwrap();
    assert!(
        message.contains("[providers.router.output_tokens_field]"),
        "{message}"
    );
    let said = routed.replace(
        "max_output_tokens = { \"openai/o3\" = 100000 }",
        "max_output_tokens = { \"openai/o3\" = 100000 }\noutput_tokens_field = { \"openai/o3\" = \"max_tokens\" }",
    );
    assert_eq!(check(&said)["ok"], true);

    // The field is only for openai providers; a misspelt member is named.
    let doc = check(
        r#"
[providers.claude2]
kind = "anthropic"
output_tokens_field = { "claude-sonnet-4" = "max_completion_tokens" }
"#,
    );
    assert!(
        doc["problems"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["field"] == "providers.claude2.output_tokens_field"),
        "{doc}"
    );
    let doc = check(
        r#"
[providers.typo]
kind = "openai"
output_tokens_field = { "x" = "max_output" }
"#,
    );
    assert_eq!(doc["ok"], false, "{doc}");
}

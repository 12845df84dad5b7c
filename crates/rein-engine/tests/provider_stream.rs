//! Streaming model providers against the testkit's mock model over real
//! loopback HTTP (issue 7): assembly, first-byte and idle limits, cut
//! streams, missing terminators, token charging, and failure
//! classification — for the OpenAI-compatible and the Anthropic provider.
//!
//! Every test runs under paused tokio time, the mock on the same runtime:
//! the providers' limits (on their `SystemClock`, which follows tokio's
//! time) and the mock's delays share one time line that moves only while
//! the runtime is idle, so a limit is asserted at the instant it fires,
//! never against a wall-clock allowance.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use futures_util::StreamExt;
use rein_core::{Category, Failure};
use rein_engine::provider::{
    AnthropicProvider, FinishReason, Message, ModelProvider, ModelRequest, ModelResponse,
    OpenAiProvider, StreamEvent, StreamLimits, StreamSettings, TokenUsage, TurnStream,
};
use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, StreamFault, ToolCall};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Which wire protocol a test case speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    OpenAi,
    Anthropic,
}

const BOTH: [Api; 2] = [Api::OpenAi, Api::Anthropic];

/// Long enough never to be the limit that fires in a test, short enough
/// that a bug does not hang the suite.
const GENEROUS: Duration = Duration::from_secs(5);

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .tcp_nodelay(true)
        .build()
        .unwrap()
}

fn provider(api: Api, model: &MockModel) -> Box<dyn ModelProvider> {
    match api {
        Api::OpenAi => Box::new(OpenAiProvider::new(
            "openai-mock",
            &model.openai_base_url(),
            None,
            GENEROUS,
            client(),
        )),
        Api::Anthropic => Box::new(AnthropicProvider::new(
            "anthropic-mock",
            &model.openai_base_url(),
            None,
            GENEROUS,
            client(),
        )),
    }
}

fn limits(first_byte: Duration, idle: Duration) -> StreamLimits {
    StreamLimits {
        allowance: GENEROUS,
        first_byte,
        idle,
    }
}

fn generous() -> StreamLimits {
    limits(GENEROUS, GENEROUS)
}

fn request() -> ModelRequest {
    ModelRequest {
        model: "test-model".into(),
        messages: vec![
            Message::System {
                content: "You move deliveries.".into(),
            },
            Message::user("Move order A-1001 to Friday and tell the buyer."),
        ],
        tools: vec![json!({"type": "function", "function": {
            "name": "get_order", "description": "Reads an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}})],
        max_tokens: None,
        options: Default::default(),
        continuation: false,
    }
}

/// Everything a stream yielded: the text of its deltas, how many there
/// were, and its terminal item; asserts nothing follows the terminal item.
struct Drained {
    deltas: usize,
    text: String,
    arguments: Vec<String>,
    outcome: Result<ModelResponse, Failure>,
    /// When the last delta arrived (or the stream opened, if none did).
    last_delta: Instant,
    /// The provider's count of the prompt, when it came before any delta.
    prompt: Option<u64>,
}

async fn drain(mut stream: TurnStream) -> Drained {
    let mut drained = Drained {
        deltas: 0,
        text: String::new(),
        arguments: Vec::new(),
        outcome: Err(Failure::new("test", Category::Unknown)),
        last_delta: Instant::now(),
        prompt: None,
    };
    loop {
        match stream.next().await {
            Some(Ok(StreamEvent::PromptTokens(tokens))) => {
                assert_eq!(drained.deltas, 0, "the prompt's count comes first");
                assert!(drained.prompt.is_none(), "at most once");
                drained.prompt = Some(tokens);
            }
            Some(Ok(StreamEvent::Delta(delta))) => {
                drained.deltas += 1;
                drained.last_delta = Instant::now();
                drained.text.push_str(delta.text.as_deref().unwrap_or(""));
                for piece in delta.tool_calls {
                    if drained.arguments.len() <= piece.index {
                        drained.arguments.resize(piece.index + 1, String::new());
                    }
                    drained.arguments[piece.index].push_str(&piece.arguments);
                }
            }
            Some(Ok(StreamEvent::Recovered(r))) => panic!("a provider never recovers: {r:?}"),
            Some(Ok(StreamEvent::Done(response))) => {
                drained.outcome = Ok(response);
                break;
            }
            Some(Err(failure)) => {
                drained.outcome = Err(failure);
                break;
            }
            None => panic!("the stream ended without a terminal item"),
        }
    }
    assert!(
        stream.next().await.is_none(),
        "nothing follows the terminal item"
    );
    drained
}

async fn stream(api: Api, model: &MockModel, limits: StreamLimits) -> Drained {
    let stream = provider(api, model)
        .stream(&request(), limits)
        .await
        .unwrap_or_else(|f| panic!("{api:?}: the stream should open: {f}"));
    drain(stream).await
}

fn tool_call_reply() -> Reply {
    Reply::tool_calls([
        ToolCall::new("get_order", &json!({"order_id": "A-1001"})),
        ToolCall::new(
            "send_email",
            &json!({"to": "buyer@example.com", "body": "Your order arrives on Friday."}),
        )
        .with_id("call_email"),
    ])
    .with_text("Looking it up.")
    .with_usage(1200, 35)
}

#[tokio::test(start_paused = true)]
async fn streamed_text_answer_assembles_from_several_deltas() {
    for api in BOTH {
        let model =
            MockModel::start([Reply::text("The delivery time is updated.").with_usage(900, 12)])
                .await
                .unwrap();
        let drained = stream(api, &model, generous()).await;
        let response = drained.outcome.unwrap();
        assert!(drained.deltas > 1, "{api:?}: {} deltas", drained.deltas);
        assert_eq!(drained.text, "The delivery time is updated.");
        assert_eq!(
            response.text.as_deref(),
            Some("The delivery time is updated.")
        );
        assert!(response.tool_calls.is_empty());
        assert_eq!(response.finish, FinishReason::Stop);
        assert!(!response.is_truncated());
        assert_eq!(
            response.usage,
            TokenUsage {
                input: 900,
                output: 12
            },
            "{api:?}"
        );

        let sent = model.last_request().unwrap();
        assert!(sent.stream(), "{api:?}");
        match api {
            Api::OpenAi => {
                assert_eq!(sent.path, "/v1/chat/completions");
                assert_eq!(sent.body["stream_options"]["include_usage"], true);
                // OpenAI counts the prompt in its last chunk only.
                assert_eq!(drained.prompt, None);
            }
            Api::Anthropic => {
                // Anthropic counts it in `message_start`, before any text.
                assert_eq!(drained.prompt, Some(900));
                assert_eq!(sent.path, "/v1/messages");
                assert_eq!(sent.body["system"], "You move deliveries.");
                assert_eq!(sent.body["max_tokens"], 4096);
                assert_eq!(sent.body["tools"][0]["name"], "get_order");
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn streamed_tool_calls_assemble_their_arguments() {
    for api in BOTH {
        let model = MockModel::start([tool_call_reply()]).await.unwrap();
        let drained = stream(api, &model, generous()).await;
        let response = drained.outcome.unwrap();
        assert_eq!(response.finish, FinishReason::ToolCalls, "{api:?}");
        assert_eq!(response.text.as_deref(), Some("Looking it up."));
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(response.tool_calls[0].name, "get_order");
        let args: Value = serde_json::from_str(&response.tool_calls[0].arguments).unwrap();
        assert_eq!(args, json!({"order_id": "A-1001"}));
        assert_eq!(response.tool_calls[1].id, "call_email");
        let args: Value = serde_json::from_str(&response.tool_calls[1].arguments).unwrap();
        assert_eq!(args["to"], "buyer@example.com");
        assert_eq!(drained.arguments.len(), 2, "{api:?}");
        assert_eq!(drained.arguments[1], response.tool_calls[1].arguments);
        assert_eq!(
            response.usage,
            TokenUsage {
                input: 1200,
                output: 35
            }
        );
    }
}

#[tokio::test(start_paused = true)]
async fn non_streamed_complete_reads_both_apis() {
    for api in BOTH {
        let model = MockModel::start([tool_call_reply(), Reply::truncated("The order is")])
            .await
            .unwrap();
        let p = provider(api, &model);
        let response = p.complete(&request(), GENEROUS).await.unwrap();
        assert_eq!(response.finish, FinishReason::ToolCalls, "{api:?}");
        assert_eq!(response.tool_calls[0].name, "get_order");
        assert_eq!(response.usage.total(), 1235);
        let cut = p.complete(&request(), GENEROUS).await.unwrap();
        assert!(cut.is_truncated(), "{api:?}: {:?}", cut.finish);
        assert!(!model.last_request().unwrap().stream());
    }
}

#[tokio::test(start_paused = true)]
async fn headers_then_silence_is_cut_at_the_first_byte_limit() {
    let limit = Duration::from_millis(300);
    for api in BOTH {
        let model =
            MockModel::start([Reply::text("never")
                .with_stream_fault(StreamFault::silent(Duration::from_secs(10)))])
            .await
            .unwrap();
        let started = Instant::now();
        let drained = stream(api, &model, limits(limit, limit)).await;
        let elapsed = started.elapsed();
        let failure = drained.outcome.unwrap_err();
        assert_eq!(failure.category(), Category::Timeout, "{api:?}: {failure}");
        assert!(failure.retryable());
        assert!(
            failure.human_message().contains("first-byte limit"),
            "{}",
            failure.human_message()
        );
        assert!(failure.human_message().contains("before any content"));
        assert_eq!(
            elapsed, limit,
            "{api:?}: cut at the limit, not before or after"
        );
        assert_eq!(drained.deltas, 0);
        // The provider accepted the request (a 200) but produced nothing:
        // nothing is charged (issue 35, item 5).
        assert_eq!(failure.tokens_spent(), 0, "{api:?}");
        assert!(failure.human_message().contains("0 tokens charged"));
    }
}

#[tokio::test(start_paused = true)]
async fn no_headers_by_the_first_byte_limit_fails_without_charging() {
    let limit = Duration::from_millis(250);
    for api in BOTH {
        let model = MockModel::start([Reply::text("late").delayed(Duration::from_secs(10))])
            .await
            .unwrap();
        let started = Instant::now();
        let failure = match provider(api, &model)
            .stream(&request(), limits(limit, limit))
            .await
        {
            Ok(_) => panic!("{api:?}: no headers came, the stream must not open"),
            Err(failure) => failure,
        };
        assert_eq!(started.elapsed(), limit, "{api:?}");
        assert_eq!(failure.category(), Category::Timeout);
        assert!(failure.human_message().contains("first-byte limit"));
        assert!(failure.human_message().contains("no response headers"));
        assert_eq!(
            failure.tokens_spent(),
            0,
            "no sign the provider accepted it"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn stall_after_some_events_is_cut_at_the_idle_limit() {
    let idle = Duration::from_millis(250);
    for api in BOTH {
        let model = MockModel::start([Reply::text("The delivery time is being updated now.")
            .with_usage(500, 9)
            .with_stream_fault(StreamFault::Stall {
                after: 4,
                hold: Duration::from_secs(10),
            })])
        .await
        .unwrap();
        let drained = stream(api, &model, limits(GENEROUS, idle)).await;
        let stalled_for = drained.last_delta.elapsed();
        let failure = drained.outcome.unwrap_err();
        assert_eq!(failure.category(), Category::Timeout, "{api:?}: {failure}");
        assert!(
            failure.human_message().contains("idle limit"),
            "{}",
            failure.human_message()
        );
        assert!(
            failure
                .human_message()
                .contains("after content was produced")
        );
        assert!(drained.deltas > 0, "{api:?}");
        assert_eq!(
            stalled_for, idle,
            "{api:?}: cut one idle limit after the last event"
        );
        assert!(failure.tokens_spent() > 0);
    }
}

#[tokio::test(start_paused = true)]
async fn the_allowance_caps_a_stream_that_keeps_sending() {
    let model = MockModel::start_with(
        MockModelConfig::new([Reply::text(&"slow words ".repeat(40))])
            .with_event_interval(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    let allowance = Duration::from_millis(300);
    let started = Instant::now();
    let drained = stream(
        Api::OpenAi,
        &model,
        StreamLimits {
            allowance,
            first_byte: GENEROUS,
            idle: GENEROUS,
        },
    )
    .await;
    let failure = drained.outcome.unwrap_err();
    assert_eq!(failure.category(), Category::Timeout);
    assert!(
        failure.human_message().contains("allowance"),
        "{}",
        failure.human_message()
    );
    assert_eq!(started.elapsed(), allowance);
    assert!(drained.deltas > 0, "it was cut while still sending");
}

#[tokio::test(start_paused = true)]
async fn dropped_stream_is_an_error_not_an_answer_and_charges_tokens() {
    for api in BOTH {
        // Four events in, the first tool call's arguments are half sent.
        let model = MockModel::start([Reply::tool_call(
            "get_order",
            &json!({"order_id": "A-1001", "fields": ["eta"]}),
        )
        .with_usage(1500, 20)
        .with_stream_fault(StreamFault::Drop { after: 4 })])
        .await
        .unwrap();
        let drained = stream(api, &model, generous()).await;
        let failure = drained.outcome.unwrap_err();
        assert_eq!(
            failure.category(),
            Category::Transient,
            "{api:?}: {failure}"
        );
        assert!(failure.retryable());
        let human = failure.human_message();
        assert!(human.contains("after content was produced"), "{human}");
        assert!(human.contains("cut-off arguments"), "{human}");
        assert!(human.contains("without"), "{human}");
        assert!(!drained.arguments[0].is_empty());
        assert!(serde_json::from_str::<Value>(&drained.arguments[0]).is_err());
        match api {
            // Anthropic reported the input in `message_start`.
            Api::Anthropic => assert!(failure.tokens_spent() >= 1500, "{}", failure.tokens_spent()),
            // OpenAI reports usage only at the end: an estimate, said so.
            Api::OpenAi => {
                assert!(failure.tokens_spent() > 0);
                assert!(human.contains("estimated"), "{human}");
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_lost_stream_fails_the_streaming_complete_too() {
    for api in BOTH {
        let model = MockModel::start([Reply::lose_response()]).await.unwrap();
        let settings = StreamSettings::new(GENEROUS, GENEROUS).unwrap();
        let p: Box<dyn ModelProvider> = match api {
            Api::OpenAi => Box::new(
                OpenAiProvider::new("o", &model.openai_base_url(), None, GENEROUS, client())
                    .with_streaming(settings),
            ),
            Api::Anthropic => Box::new(
                AnthropicProvider::new("a", &model.openai_base_url(), None, GENEROUS, client())
                    .with_streaming(settings),
            ),
        };
        let failure = p.complete(&request(), GENEROUS).await.unwrap_err();
        assert_eq!(failure.category(), Category::Transient, "{api:?}");
        assert!(failure.tokens_spent() > 0);
        assert!(model.last_request().unwrap().stream());
    }
}

#[tokio::test(start_paused = true)]
async fn malformed_event_fails_the_turn_and_the_provider_recovers() {
    for api in BOTH {
        let model = MockModel::start([
            Reply::text("hello there, buyer")
                .with_stream_fault(StreamFault::Malformed { after: 3 }),
            Reply::text("next answer"),
        ])
        .await
        .unwrap();
        let p = provider(api, &model);
        let first = drain(p.stream(&request(), generous()).await.unwrap()).await;
        let failure = first.outcome.unwrap_err();
        assert_eq!(failure.category(), Category::Transient, "{api:?}");
        assert!(
            failure.human_message().contains("unparseable stream event"),
            "{}",
            failure.human_message()
        );
        assert!(failure.tokens_spent() > 0);
        let second = drain(p.stream(&request(), generous()).await.unwrap()).await;
        assert_eq!(second.outcome.unwrap().text.as_deref(), Some("next answer"));
    }
}

#[tokio::test(start_paused = true)]
async fn missing_terminator_is_finalized_at_once_with_usage() {
    for api in BOTH {
        let model =
            MockModel::start([tool_call_reply().with_stream_fault(StreamFault::NoTerminator)])
                .await
                .unwrap();
        let started = Instant::now();
        // An idle limit far above what the test takes: waiting for the
        // terminator would show.
        let drained = stream(api, &model, limits(GENEROUS, GENEROUS)).await;
        // No time passes: the end of the body finalizes the turn, where
        // waiting for the terminator would take the idle limit.
        assert_eq!(started.elapsed(), Duration::ZERO, "{api:?}");
        let response = drained.outcome.unwrap();
        assert_eq!(response.finish, FinishReason::ToolCalls, "{api:?}");
        assert_eq!(response.tool_calls.len(), 2);
        assert_eq!(
            response.usage,
            TokenUsage {
                input: 1200,
                output: 35
            },
            "{api:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn output_cut_at_the_token_limit_is_truncated_not_complete() {
    for api in BOTH {
        let model = MockModel::start([Reply::tool_calls([ToolCall::raw(
            "send_email",
            "{\"to\": \"buyer@exa",
        )])
        .with_finish_reason(rein_testkit::mock_model::FinishReason::Length)])
        .await
        .unwrap();
        let response = stream(api, &model, generous()).await.outcome.unwrap();
        assert!(response.is_truncated(), "{api:?}: {:?}", response.finish);
        assert_eq!(response.finish, FinishReason::Length);
    }
}

#[tokio::test(start_paused = true)]
async fn error_statuses_are_classified_alike_streamed_or_not() {
    for api in BOTH {
        for streamed in [false, true] {
            let model = MockModel::start([
                Reply::rate_limited(Some(RetryAfter::Seconds(2))),
                Reply::unavailable(),
                Reply::unauthorized(),
                Reply::context_length_exceeded(),
            ])
            .await
            .unwrap();
            let p = provider(api, &model);
            let mut failures = Vec::new();
            for _ in 0..4 {
                let failure = if streamed {
                    match p.stream(&request(), generous()).await {
                        Ok(_) => panic!("{api:?}: an error status must not open a stream"),
                        Err(failure) => failure,
                    }
                } else {
                    p.complete(&request(), GENEROUS).await.unwrap_err()
                };
                assert_eq!(failure.tokens_spent(), 0);
                failures.push(failure);
            }
            let case = format!("{api:?}, streamed: {streamed}");
            assert_eq!(failures[0].category(), Category::RateLimited, "{case}");
            assert_eq!(
                failures[0].retry_after(),
                Some(Duration::from_secs(2)),
                "{case}"
            );
            // The mock answers OpenAI's 503 as Anthropic's 529.
            let overloaded = match api {
                Api::OpenAi => Category::Transient,
                Api::Anthropic => Category::Overloaded,
            };
            assert_eq!(failures[1].category(), overloaded, "{case}");
            assert!(failures[1].retryable());
            assert_eq!(failures[2].category(), Category::Unauthorized, "{case}");
            assert!(!failures[2].retryable());
            assert_eq!(failures[3].category(), Category::ContextOverflow, "{case}");
            assert!(!failures[3].retryable());
        }
    }
}

#[tokio::test(start_paused = true)]
async fn keys_and_versions_are_sent() {
    let model = MockModel::start_with(
        MockModelConfig::new([Reply::text("hi"), Reply::text("again")]).with_api_key("sk-test"),
    )
    .await
    .unwrap();
    let anthropic = AnthropicProvider::new(
        "a",
        &model.openai_base_url(),
        Some("sk-test".into()),
        GENEROUS,
        client(),
    );
    let response = anthropic.complete(&request(), GENEROUS).await.unwrap();
    assert_eq!(response.text.as_deref(), Some("hi"));
    let openai = OpenAiProvider::new(
        "o",
        &model.openai_base_url(),
        Some("sk-test".into()),
        GENEROUS,
        client(),
    );
    let drained = drain(openai.stream(&request(), generous()).await.unwrap()).await;
    assert_eq!(drained.outcome.unwrap().text.as_deref(), Some("again"));
    let requests = model.requests();
    assert_eq!(requests[0].api_key.as_deref(), Some("sk-test"));
    assert_eq!(requests[1].authorization.as_deref(), Some("Bearer sk-test"));
}

#[tokio::test(start_paused = true)]
async fn streaming_complete_gets_the_idle_limit() {
    let model = MockModel::start([
        tool_call_reply(),
        Reply::text("stuck").with_stream_fault(StreamFault::Stall {
            after: 2,
            hold: Duration::from_secs(10),
        }),
    ])
    .await
    .unwrap();
    let idle = Duration::from_millis(250);
    let p = OpenAiProvider::new("o", &model.openai_base_url(), None, GENEROUS, client())
        .with_streaming(StreamSettings::new(GENEROUS, idle).unwrap());
    let response = p.complete(&request(), GENEROUS).await.unwrap();
    assert_eq!(response.tool_calls.len(), 2);
    assert_eq!(response.usage.total(), 1235);
    let started = Instant::now();
    let failure = p.complete(&request(), GENEROUS).await.unwrap_err();
    assert_eq!(failure.category(), Category::Timeout);
    assert_eq!(started.elapsed(), idle);
}

// ---- edge cases the mock does not script: a hand-written server ----

/// A one-shot HTTP/1.1 server on loopback: it reads one request, then
/// writes each part after its delay (sleeping only inside the server, to
/// simulate a slow one), then closes the connection, which ends a body
/// sent without a length cleanly. Returns the base URL (`.../v1`).
async fn raw_server(parts: Vec<(Duration, String)>) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        socket.set_nodelay(true).unwrap();
        let mut request = Vec::new();
        let mut buf = [0u8; 4096];
        // Read the head, then as many body bytes as it announces.
        loop {
            let n = socket.read(&mut buf).await.unwrap();
            request.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&request).to_ascii_lowercase();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if request.len() >= end + 4 + length {
                    break;
                }
            }
            if n == 0 {
                return;
            }
        }
        for (delay, part) in parts {
            tokio::time::sleep(delay).await;
            if socket.write_all(part.as_bytes()).await.is_err() {
                return;
            }
        }
        let _ = socket.shutdown().await;
    });
    format!("http://{addr}/v1")
}

fn sse_head() -> String {
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n".to_owned()
}

fn chunk(delta: Value, finish: Value) -> String {
    let chunk = json!({"object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    format!("data: {chunk}\n\n")
}

fn raw_openai(base_url: &str) -> OpenAiProvider {
    OpenAiProvider::new("raw", base_url, None, GENEROUS, client())
}

#[tokio::test(start_paused = true)]
async fn clean_end_before_any_finish_reason_is_a_cut_answer() {
    let base = raw_server(vec![
        (Duration::ZERO, sse_head()),
        (
            Duration::ZERO,
            chunk(json!({"role": "assistant"}), Value::Null),
        ),
        (
            Duration::ZERO,
            chunk(json!({"content": "The order is"}), Value::Null),
        ),
    ])
    .await;
    let drained = drain(
        raw_openai(&base)
            .stream(&request(), generous())
            .await
            .unwrap(),
    )
    .await;
    let failure = drained.outcome.unwrap_err();
    assert_eq!(failure.category(), Category::Transient, "{failure}");
    assert!(
        failure.human_message().contains("without a finish reason"),
        "{}",
        failure.human_message()
    );
    assert_eq!(drained.text, "The order is");
    assert!(failure.tokens_spent() > 0);
}

#[tokio::test(start_paused = true)]
async fn keep_alive_comments_hold_off_the_idle_limit() {
    let idle = Duration::from_millis(300);
    let beat = idle / 3;
    let mut parts = vec![
        (Duration::ZERO, sse_head()),
        (
            Duration::ZERO,
            chunk(json!({"role": "assistant"}), Value::Null),
        ),
    ];
    // Silent for three idle limits in all, but never for one.
    for _ in 0..9 {
        parts.push((beat, ": keep-alive\n\n".to_owned()));
    }
    parts.push((
        Duration::ZERO,
        chunk(json!({"content": "done"}), json!("stop")),
    ));
    parts.push((Duration::ZERO, "data: [DONE]\n\n".to_owned()));
    let base = raw_server(parts).await;
    let drained = drain(
        raw_openai(&base)
            .stream(&request(), limits(GENEROUS, idle))
            .await
            .unwrap(),
    )
    .await;
    let response = drained.outcome.unwrap();
    assert_eq!(response.text.as_deref(), Some("done"));
    // No usage was reported: the turn is charged an estimate, not zero.
    assert!(response.usage.input > 0);
    assert_eq!(response.usage.output, 1);
}

#[tokio::test(start_paused = true)]
async fn a_server_that_ignores_stream_true_is_read_whole() {
    let body =
        json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"},
        "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 1}})
        .to_string();
    let base = raw_server(vec![(
        Duration::ZERO,
        format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        ),
    )])
    .await;
    let drained = drain(
        raw_openai(&base)
            .stream(&request(), generous())
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(drained.text, "whole");
    let response = drained.outcome.unwrap();
    assert_eq!(
        response.usage,
        TokenUsage {
            input: 5,
            output: 1
        }
    );
}

#[tokio::test(start_paused = true)]
async fn an_error_in_the_stream_is_classified_and_charged() {
    let error = json!({"error": {"message": "The server is overloaded", "type": "server_error"}});
    let base = raw_server(vec![
        (Duration::ZERO, sse_head()),
        (
            Duration::ZERO,
            chunk(json!({"content": "Hel"}), Value::Null),
        ),
        (Duration::ZERO, format!("data: {error}\n\n")),
    ])
    .await;
    let drained = drain(
        raw_openai(&base)
            .stream(&request(), generous())
            .await
            .unwrap(),
    )
    .await;
    let failure = drained.outcome.unwrap_err();
    assert_eq!(failure.category(), Category::Transient, "{failure}");
    assert!(
        failure
            .human_message()
            .contains("after content was produced")
    );
    assert!(failure.tokens_spent() > 0);
}

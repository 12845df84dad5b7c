//! The Anthropic Messages API route: the same script, in Anthropic's shapes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use rein_core::wire::anthropic::{self as wire, Block, BlockDelta, Message, StreamEvent};
use serde_json::{Value, json};

use super::routes::{Answer, call_id, header_text, parse_body, settle, wants_stream};
use super::sse::{self, Frames, Misbehaviour};
use super::{ApiError, Arrival, AssistantMessage, FinishReason, InFlight, Model};
use crate::server::aborting_body;

/// The Messages API route.
pub(crate) const MESSAGES: &str = "/v1/messages";

/// The key header of the Messages API.
const API_KEY: &str = "x-api-key";

/// The version header the Messages API requires.
const VERSION: &str = "anthropic-version";

/// The `stop_reason` of a message.
fn stop_reason(message: &AssistantMessage) -> &'static str {
    match message.finish_reason {
        FinishReason::Stop if message.stop_sequence.is_some() => "stop_sequence",
        FinishReason::Stop => "end_turn",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::Length => "max_tokens",
        FinishReason::ContentFilter => "refusal",
    }
}

/// An Anthropic error answer: `{"type": "error", "error": {"type", "message"}}`.
fn error_body(status: StatusCode, error_type: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": error_type, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// The scripted OpenAI error, translated: see the module table in
/// `mock_model`.
fn error_response(error: &ApiError) -> Response {
    let (status, error_type, message) = match error.status {
        400 if error.code.as_deref() == Some("context_length_exceeded") => (
            400,
            "invalid_request_error",
            "prompt is too long: 9000 tokens > 8192 maximum".to_owned(),
        ),
        400 => (400, "invalid_request_error", error.message.clone()),
        401 => (401, "authentication_error", "invalid x-api-key".to_owned()),
        403 => (403, "permission_error", error.message.clone()),
        404 => (404, "not_found_error", error.message.clone()),
        413 => (413, "request_too_large", error.message.clone()),
        429 => (429, "rate_limit_error", error.message.clone()),
        503 | 529 => (529, "overloaded_error", "Overloaded".to_owned()),
        500..=599 => (error.status, "api_error", error.message.clone()),
        other => (other, "invalid_request_error", error.message.clone()),
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = error_body(status, error_type, &message);
    if let Some(value) = error
        .retry_after
        .and_then(|r| HeaderValue::from_str(&r.header_value()).ok())
    {
        response.headers_mut().insert(RETRY_AFTER, value);
    }
    response
}

fn invalid_request(message: &str) -> Response {
    error_body(StatusCode::BAD_REQUEST, "invalid_request_error", message)
}

/// A tool call's `input`: its arguments as JSON, or as a JSON string when
/// the script made them malformed (the Messages API has no way to send
/// non-JSON input; a string is the closest wrong thing).
fn tool_input(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_owned()))
}

/// The non-streaming answer.
fn message_body(message: &AssistantMessage, number: u64, model: &str) -> Value {
    let mut content = Vec::new();
    if let Some(text) = message.content.as_deref().filter(|t| !t.is_empty()) {
        content.push(Block::Text {
            text: text.to_owned(),
        });
    }
    for (i, call) in message.tool_calls.iter().enumerate() {
        content.push(Block::ToolUse {
            id: Some(call_id(call, "toolu_mock", number, i)),
            name: Some(call.name.clone()),
            input: tool_input(&call.arguments),
        });
    }
    let body = Message {
        content,
        stop_reason: Some(stop_reason(message).to_owned()),
        stop_sequence: message.stop_sequence.clone(),
        usage: wire::Usage::of(message.usage.prompt_tokens, message.usage.completion_tokens),
        ..Message::opened(format!("msg_mock_{number}"), model)
    };
    serde_json::to_value(body).unwrap_or(Value::Null)
}

/// One event, as the stream sends it.
fn event(event: &StreamEvent) -> String {
    event.to_sse()
}

/// The events of the streamed answer.
fn message_frames(
    message: &AssistantMessage,
    number: u64,
    model: &str,
    error_message: &str,
) -> Frames {
    let mut body = vec![
        event(&StreamEvent::MessageStart {
            message: Message {
                usage: wire::Usage::of(message.usage.prompt_tokens, 1),
                ..Message::opened(format!("msg_mock_{number}"), model)
            },
        }),
        event(&StreamEvent::Ping),
    ];
    let mut index = 0u64;
    if let Some(text) = message.content.as_deref().filter(|t| !t.is_empty()) {
        body.push(event(&StreamEvent::ContentBlockStart {
            index,
            content_block: Block::Text {
                text: String::new(),
            },
        }));
        for piece in sse::pieces(text) {
            body.push(event(&StreamEvent::ContentBlockDelta {
                index,
                delta: BlockDelta::TextDelta { text: piece },
            }));
        }
        body.push(event(&StreamEvent::ContentBlockStop { index }));
        index += 1;
    }
    for (i, call) in message.tool_calls.iter().enumerate() {
        body.push(event(&StreamEvent::ContentBlockStart {
            index,
            content_block: Block::ToolUse {
                id: Some(call_id(call, "toolu_mock", number, i)),
                name: Some(call.name.clone()),
                input: json!({}),
            },
        }));
        for piece in sse::pieces(&call.arguments) {
            body.push(event(&StreamEvent::ContentBlockDelta {
                index,
                delta: BlockDelta::InputJsonDelta {
                    partial_json: piece,
                },
            }));
        }
        body.push(event(&StreamEvent::ContentBlockStop { index }));
        index += 1;
    }
    body.push(event(&StreamEvent::MessageDelta {
        delta: wire::MessageDelta {
            stop_reason: Some(stop_reason(message).to_owned()),
            stop_sequence: message.stop_sequence.clone(),
        },
        usage: wire::Usage {
            output_tokens: Some(message.usage.completion_tokens),
            ..wire::Usage::default()
        },
        rein: None,
    }));
    Frames {
        body,
        terminator: vec![event(&StreamEvent::MessageStop)],
        malformed: sse::typed_event(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"#,
        ),
        error: event(&StreamEvent::Error {
            error: wire::ErrorBody {
                kind: "overloaded_error".to_owned(),
                message: error_message.to_owned(),
                code: None,
            },
        }),
    }
}

/// The 401 for a missing or wrong `x-api-key`, or `None` when the key is
/// right or none is configured.
fn check_auth(model: &Model, headers: &HeaderMap) -> Option<Response> {
    let expected = model.api_key.as_deref()?;
    let given = headers.get(API_KEY).and_then(|v| v.to_str().ok());
    if given == Some(expected) {
        return None;
    }
    Some(error_body(
        StatusCode::UNAUTHORIZED,
        "authentication_error",
        "invalid x-api-key",
    ))
}

pub(crate) async fn messages(
    State(model): State<Arc<Model>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let in_flight = InFlight::enter(&model);
    let (parsed, recorded) = parse_body(&body);
    model.record(Arrival {
        path: MESSAGES,
        authorization: header_text(&headers, "authorization"),
        api_key: header_text(&headers, API_KEY),
        traceparent: header_text(&headers, "traceparent"),
        body: recorded,
    });

    if let Some(denied) = check_auth(&model, &headers) {
        return denied;
    }
    if headers.get(VERSION).is_none() {
        return invalid_request("anthropic-version: header is required");
    }
    let request = match parsed {
        Ok(request) => request,
        Err(err) => {
            return invalid_request(&format!("There was an issue with your request body: {err}"));
        }
    };
    if !request.get("messages").is_some_and(Value::is_array) {
        return invalid_request("messages: Field required");
    }
    if !request.get("max_tokens").is_some_and(Value::is_u64) {
        return invalid_request("max_tokens: Field required");
    }
    let stream = wants_stream(&request);
    let model_name = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(&model.model)
        .to_owned();
    if let Some(refused) = model.over_cap(&model_name, &request) {
        return invalid_request(&refused.anthropic_message(&model_name));
    }
    let error_message = sse::error_message(
        headers
            .get(API_KEY)
            .and_then(|v| v.to_str().ok())
            .filter(|_| model.echo_authorization),
    );
    let (number, reply) = model.next_reply();
    match settle(&model, reply).await {
        Answer::Message { message, fault } => {
            let message = super::prefill::continued(
                message,
                super::prefill::prefix(&request, true).as_deref(),
            );
            let message = model.meter((number, MESSAGES), &model_name, &request, message);
            tracing::debug!(
                number,
                stream,
                stop = stop_reason(&message),
                "mock model answers a message"
            );
            if stream {
                let frames = message_frames(&message, number, &model_name, &error_message);
                return sse::response(
                    frames,
                    Answer::misbehaviour(fault),
                    model.event_interval,
                    in_flight,
                );
            }
            axum::Json(message_body(&message, number, &model_name)).into_response()
        }
        Answer::Error(error) => {
            tracing::debug!(number, status = error.status, "mock model answers an error");
            error_response(&error)
        }
        Answer::Lose => {
            tracing::debug!(number, stream, "mock model loses its message");
            let fallback = model.fallback_message();
            if stream {
                let frames = message_frames(&fallback, number, &model_name, &error_message);
                return sse::response(frames, Misbehaviour::Lose, model.event_interval, in_flight);
            }
            let full = message_body(&fallback, number, &model_name).to_string();
            axum::http::Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "application/json")
                .body(aborting_body(full.as_bytes()))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

//! The Anthropic Messages API route: the same script, in Anthropic's shapes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
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
        content.push(json!({"type": "text", "text": text}));
    }
    for (i, call) in message.tool_calls.iter().enumerate() {
        content.push(json!({
            "type": "tool_use",
            "id": call_id(call, "toolu_mock", number, i),
            "name": call.name,
            "input": tool_input(&call.arguments),
        }));
    }
    json!({
        "id": format!("msg_mock_{number}"),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(message),
        "stop_sequence": message.stop_sequence,
        "usage": {
            "input_tokens": message.usage.prompt_tokens,
            "output_tokens": message.usage.completion_tokens,
        },
    })
}

/// The events of the streamed answer.
fn message_frames(
    message: &AssistantMessage,
    number: u64,
    model: &str,
    error_message: &str,
) -> Frames {
    let event = |data: Value| {
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_owned();
        sse::typed_event(&kind, &data.to_string())
    };
    let mut body = vec![
        event(json!({
            "type": "message_start",
            "message": {
                "id": format!("msg_mock_{number}"),
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": null,
                "stop_sequence": null,
                "usage": {"input_tokens": message.usage.prompt_tokens, "output_tokens": 1},
            },
        })),
        event(json!({"type": "ping"})),
    ];
    let mut index = 0usize;
    if let Some(text) = message.content.as_deref().filter(|t| !t.is_empty()) {
        body.push(event(json!({
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        })));
        for piece in sse::pieces(text) {
            body.push(event(json!({
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "text_delta", "text": piece},
            })));
        }
        body.push(event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    for (i, call) in message.tool_calls.iter().enumerate() {
        body.push(event(json!({
            "type": "content_block_start",
            "index": index,
            "content_block": {
                "type": "tool_use",
                "id": call_id(call, "toolu_mock", number, i),
                "name": call.name,
                "input": {},
            },
        })));
        for piece in sse::pieces(&call.arguments) {
            body.push(event(json!({
                "type": "content_block_delta",
                "index": index,
                "delta": {"type": "input_json_delta", "partial_json": piece},
            })));
        }
        body.push(event(json!({"type": "content_block_stop", "index": index})));
        index += 1;
    }
    body.push(event(json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason(message), "stop_sequence": message.stop_sequence},
        "usage": {"output_tokens": message.usage.completion_tokens},
    })));
    Frames {
        body,
        terminator: vec![event(json!({"type": "message_stop"}))],
        malformed: sse::typed_event(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"#,
        ),
        error: sse::typed_event(
            "error",
            &json!({"type": "error",
                    "error": {"type": "overloaded_error", "message": error_message}})
            .to_string(),
        ),
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

//! The mock model's HTTP surface: routing, the Chat Completions route, and
//! what both model routes share.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rein_core::wire::openai;
use serde_json::{Value, json};

use super::sse::{self, Frames, Misbehaviour};
use super::{ApiError, Arrival, AssistantMessage, InFlight, Model, Reply, StreamFault, anthropic};
use crate::server::aborting_body;

/// The `created` timestamp of every answer: fixed, so answers are
/// reproducible (2026-01-01T00:00:00Z).
pub(crate) const CREATED: u64 = 1_767_225_600;

/// The Chat Completions route.
const CHAT_COMPLETIONS: &str = "/v1/chat/completions";

pub(crate) fn router(model: Arc<Model>) -> Router {
    Router::new()
        .route(CHAT_COMPLETIONS, post(chat_completions))
        .route(anthropic::MESSAGES, post(anthropic::messages))
        .route(
            super::embeddings::EMBEDDINGS,
            post(super::embeddings::embeddings),
        )
        .route("/v1/models", get(list_models))
        .route(
            "/_script",
            get(super::switch::pending)
                .post(super::switch::push)
                .delete(super::switch::clear),
        )
        .fallback(no_route)
        .with_state(model)
}

/// A scripted reply with its delays served: what to answer now.
pub(crate) enum Answer {
    /// A 200 with this message; streamed with `fault`, if any.
    Message {
        message: AssistantMessage,
        fault: Option<StreamFault>,
    },
    /// An error answer.
    Error(ApiError),
    /// A body cut mid-way.
    Lose,
}

impl Answer {
    /// How a stream of this answer misbehaves.
    pub(crate) fn misbehaviour(fault: Option<StreamFault>) -> Misbehaviour {
        fault.map_or(Misbehaviour::None, Misbehaviour::Fault)
    }
}

/// Waits out the configured latency and every [`Reply::Delayed`] in
/// `reply`, and unwraps it into what to answer. The outermost stream fault
/// wins when several are nested.
pub(crate) async fn settle(model: &Model, mut reply: Reply) -> Answer {
    if !model.latency.is_zero() {
        tokio::time::sleep(model.latency).await;
    }
    let mut fault = None;
    loop {
        match reply {
            Reply::Delayed {
                delay,
                reply: inner,
            } => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            Reply::Faulted {
                fault: f,
                reply: inner,
            } => {
                fault.get_or_insert(f);
                reply = *inner;
            }
            Reply::Message(message) => return Answer::Message { message, fault },
            Reply::Error(error) => return Answer::Error(error),
            Reply::LoseResponse => return Answer::Lose,
        }
    }
}

/// Reads a request body for recording: the JSON, or a JSON string holding
/// the raw text if it is not JSON.
pub(crate) fn parse_body(body: &Bytes) -> (Result<Value, String>, Value) {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) => (Ok(value.clone()), value),
        Err(err) => (
            Err(err.to_string()),
            Value::String(String::from_utf8_lossy(body).into_owned()),
        ),
    }
}

/// A header as text, if present.
pub(crate) fn header_text(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// Whether the request body asks for a stream.
pub(crate) fn wants_stream(request: &Value) -> bool {
    request.get("stream").and_then(Value::as_bool) == Some(true)
}

/// The call id of tool call `i` of answer `number`, as the script gives it
/// or `<prefix>_<number>_<i>`.
pub(crate) fn call_id(call: &super::ToolCall, prefix: &str, number: u64, i: usize) -> String {
    call.id
        .clone()
        .unwrap_or_else(|| format!("{prefix}_{number}_{i}"))
}

fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = openai::ErrorAnswer {
        error: openai::ErrorBody {
            message: error.message.clone(),
            kind: error.error_type.clone(),
            param: error.param.clone(),
            code: error.code.clone(),
        },
    };
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(value) = error
        .retry_after
        .and_then(|r| HeaderValue::from_str(&r.header_value()).ok())
    {
        response.headers_mut().insert(RETRY_AFTER, value);
    }
    response
}

pub(crate) fn invalid_request(message: &str, param: Option<&str>, code: Option<&str>) -> Response {
    let mut error = ApiError::new(400, "invalid_request_error", message);
    error.param = param.map(str::to_owned);
    error.code = code.map(str::to_owned);
    error_response(&error)
}

/// The 401 for a missing or wrong key, or `None` when the key is right or
/// none is configured.
pub(crate) fn check_auth(model: &Model, headers: &HeaderMap) -> Option<Response> {
    let expected = model.api_key.as_deref()?;
    let given = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let ok = given
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|key| key == expected);
    if ok {
        return None;
    }
    let message = match given {
        Some(header) if model.echo_authorization => {
            format!("Incorrect API key provided: {header}.")
        }
        Some(_) => "Incorrect API key provided.".to_owned(),
        None => "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth.".to_owned(),
    };
    Some(error_response(
        &ApiError::new(401, "invalid_request_error", &message).with_code("invalid_api_key"),
    ))
}

fn completion(message: &AssistantMessage, number: u64, model: &str) -> openai::Completion {
    let tool_calls = message
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            openai::ToolCall::function(
                call_id(call, "call", number, i),
                call.name.clone(),
                call.arguments.clone(),
            )
        })
        .collect();
    let answer = openai::AssistantMessage {
        role: openai::AssistantRole::Assistant,
        content: message.content.clone(),
        tool_calls,
    };
    openai::Completion::of(
        format!("chatcmpl-mock-{number}"),
        CREATED,
        model.to_owned(),
        answer,
        message.finish_reason.as_str(),
        usage(message),
    )
}

fn usage(message: &AssistantMessage) -> openai::Usage {
    openai::Usage::of(message.usage.prompt_tokens, message.usage.completion_tokens)
}

/// The events of a streamed completion of `message`; `include_usage` adds
/// the usage chunk (and `"usage": null` on every other chunk), as
/// `stream_options.include_usage` asks.
fn completion_frames(
    message: &AssistantMessage,
    number: u64,
    model: &str,
    include_usage: bool,
    error_message: &str,
) -> Frames {
    let id = format!("chatcmpl-mock-{number}");
    let event = |delta: openai::Delta<'_>, finish: Option<&str>| {
        let choice = [openai::ChunkChoice::first(delta, finish)];
        let mut chunk = openai::Chunk::new(&id, CREATED, model, &choice);
        chunk.usage = include_usage.then_some(None);
        chunk.to_sse()
    };
    let mut body = vec![event(
        openai::Delta {
            role: Some(openai::AssistantRole::Assistant),
            ..openai::Delta::text("")
        },
        None,
    )];
    for piece in sse::pieces(message.content.as_deref().unwrap_or("")) {
        body.push(event(openai::Delta::text(&piece), None));
    }
    for (i, call) in message.tool_calls.iter().enumerate() {
        let piece = |id: Option<String>, name: Option<&str>, arguments: &str| openai::Delta {
            tool_calls: vec![openai::ToolCallDelta {
                index: Some(i as u64),
                kind: id.as_ref().map(|_| openai::FunctionKind::Function),
                id: id.map(Into::into),
                function: openai::FunctionDelta {
                    name: name.map(|name: &str| name.to_owned().into()),
                    arguments: Some(arguments.to_owned()),
                },
            }],
            ..openai::Delta::default()
        };
        body.push(event(
            piece(Some(call_id(call, "call", number, i)), Some(&call.name), ""),
            None,
        ));
        for arguments in sse::pieces(&call.arguments) {
            body.push(event(piece(None, None, &arguments), None));
        }
    }
    body.push(event(
        openai::Delta::default(),
        Some(message.finish_reason.as_str()),
    ));
    if include_usage {
        let mut last = openai::Chunk::new(&id, CREATED, model, &[]);
        last.usage = Some(Some(usage(message)));
        body.push(last.to_sse());
    }
    let error = openai::ErrorAnswer {
        error: openai::ErrorBody {
            message: error_message.to_owned(),
            kind: "server_error".to_owned(),
            param: None,
            code: None,
        },
    };
    Frames {
        body,
        terminator: vec![sse::data_event("[DONE]")],
        malformed: sse::data_event(&format!(
            r#"{{"id":"{id}","object":"chat.completion.chunk","choices":[{{"index":0,"delta":{{"content":"#
        )),
        error: error.to_sse(),
    }
}

async fn chat_completions(
    State(model): State<Arc<Model>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let in_flight = InFlight::enter(&model);
    let (parsed, recorded) = parse_body(&body);
    model.record(Arrival {
        path: CHAT_COMPLETIONS,
        authorization: header_text(&headers, AUTHORIZATION.as_str()),
        api_key: None,
        traceparent: header_text(&headers, "traceparent"),
        body: recorded,
    });

    if let Some(denied) = check_auth(&model, &headers) {
        return denied;
    }
    let request = match parsed {
        Ok(request) => request,
        Err(err) => {
            return invalid_request(
                &format!("We could not parse the JSON body of your request: {err}"),
                None,
                None,
            );
        }
    };
    if !request.get("messages").is_some_and(Value::is_array) {
        return invalid_request(
            "'messages' is a required property and must be an array",
            Some("messages"),
            None,
        );
    }
    let model_name = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(&model.model)
        .to_owned();
    if let Some(refused) = model.unsupported_field(&model_name, &request) {
        return error_response(&refused);
    }
    if let Some(refused) = model.over_cap(&model_name, &request) {
        return error_response(&refused.openai_error());
    }
    let stream = wants_stream(&request);
    let include_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let error_message = sse::error_message(
        header_text(&headers, AUTHORIZATION.as_str())
            .filter(|_| model.echo_authorization)
            .as_deref(),
    );
    let (number, reply) = model.next_reply();
    match settle(&model, reply).await {
        Answer::Message { message, fault } => {
            let message = super::prefill::continued(
                message,
                super::prefill::prefix(&request, false).as_deref(),
            );
            let message = model.meter((number, CHAT_COMPLETIONS), &model_name, &request, message);
            tracing::debug!(
                number,
                stream,
                finish = message.finish_reason.as_str(),
                "mock model answers"
            );
            if stream {
                let frames =
                    completion_frames(&message, number, &model_name, include_usage, &error_message);
                return sse::response(
                    frames,
                    Answer::misbehaviour(fault),
                    model.event_interval,
                    in_flight,
                );
            }
            axum::Json(completion(&message, number, &model_name)).into_response()
        }
        Answer::Error(error) => {
            tracing::debug!(number, status = error.status, "mock model answers an error");
            error_response(&error)
        }
        Answer::Lose => {
            tracing::debug!(number, stream, "mock model loses its response");
            let fallback = model.fallback_message();
            if stream {
                let frames = completion_frames(
                    &fallback,
                    number,
                    &model_name,
                    include_usage,
                    &error_message,
                );
                return sse::response(frames, Misbehaviour::Lose, model.event_interval, in_flight);
            }
            let full = serde_json::to_string(&completion(&fallback, number, &model_name))
                .unwrap_or_default();
            Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "application/json")
                .body(aborting_body(full.as_bytes()))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
    }
}

async fn list_models(State(model): State<Arc<Model>>, headers: HeaderMap) -> Response {
    if let Some(denied) = check_auth(&model, &headers) {
        return denied;
    }
    axum::Json(json!({
        "object": "list",
        "data": [{
            "id": model.model,
            "object": "model",
            "created": CREATED,
            "owned_by": "rein-testkit",
        }],
    }))
    .into_response()
}

async fn no_route() -> Response {
    error_response(
        &ApiError::new(
            404,
            "invalid_request_error",
            "Unknown request URL; the mock serves POST /v1/chat/completions, POST /v1/messages \
             and GET /v1/models.",
        )
        .with_code("unknown_url"),
    )
}

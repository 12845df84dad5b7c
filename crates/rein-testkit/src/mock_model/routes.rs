//! The mock model's HTTP surface.

use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

use super::{ApiError, AssistantMessage, Model, Reply};
use crate::server::aborting_body;

/// The `created` timestamp of every answer: fixed, so answers are
/// reproducible (2026-01-01T00:00:00Z).
const CREATED: u64 = 1_767_225_600;

pub(crate) fn router(model: Arc<Model>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(list_models))
        .fallback(no_route)
        .with_state(model)
}

fn error_response(error: &ApiError) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = json!({
        "error": {
            "message": error.message,
            "type": error.error_type,
            "param": error.param,
            "code": error.code,
        }
    });
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(value) = error
        .retry_after
        .and_then(|r| HeaderValue::from_str(&r.header_value()).ok())
    {
        response.headers_mut().insert(RETRY_AFTER, value);
    }
    response
}

fn invalid_request(message: &str, param: Option<&str>, code: Option<&str>) -> Response {
    let mut error = ApiError::new(400, "invalid_request_error", message);
    error.param = param.map(str::to_owned);
    error.code = code.map(str::to_owned);
    error_response(&error)
}

/// The 401 for a missing or wrong key, or `None` when the key is right or
/// none is configured.
fn check_auth(model: &Model, headers: &HeaderMap) -> Option<Response> {
    let expected = model.api_key.as_deref()?;
    let given = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let ok = given
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|key| key == expected);
    if ok {
        return None;
    }
    let message = if given.is_some() {
        "Incorrect API key provided."
    } else {
        "You didn't provide an API key. You need to provide your API key in an Authorization header using Bearer auth."
    };
    Some(error_response(
        &ApiError::new(401, "invalid_request_error", message).with_code("invalid_api_key"),
    ))
}

fn completion(message: &AssistantMessage, number: u64, model: &str) -> Value {
    let tool_calls: Vec<Value> = message
        .tool_calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let id = call
                .id
                .clone()
                .unwrap_or_else(|| format!("call_{number}_{i}"));
            json!({
                "id": id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            })
        })
        .collect();
    let mut assistant = json!({"role": "assistant", "content": message.content});
    if !tool_calls.is_empty() {
        assistant["tool_calls"] = Value::Array(tool_calls);
    }
    json!({
        "id": format!("chatcmpl-mock-{number}"),
        "object": "chat.completion",
        "created": CREATED,
        "model": model,
        "choices": [{
            "index": 0,
            "message": assistant,
            "logprobs": null,
            "finish_reason": message.finish_reason.as_str(),
        }],
        "usage": {
            "prompt_tokens": message.usage.prompt_tokens,
            "completion_tokens": message.usage.completion_tokens,
            "total_tokens": message.usage.total_tokens(),
        },
    })
}

async fn chat_completions(
    State(model): State<Arc<Model>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let authorization = headers
        .get(AUTHORIZATION)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let parsed = serde_json::from_slice::<Value>(&body);
    let recorded = match &parsed {
        Ok(value) => value.clone(),
        Err(_) => Value::String(String::from_utf8_lossy(&body).into_owned()),
    };
    model.record(authorization, recorded);

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
    if request.get("stream").and_then(Value::as_bool) == Some(true) {
        return invalid_request(
            "stream: true is not supported by rein-testkit's mock model yet; send stream: false",
            Some("stream"),
            Some("unsupported_value"),
        );
    }
    let model_name = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or(&model.model)
        .to_owned();
    let (number, mut reply) = model.next_reply();
    loop {
        match reply {
            Reply::Delayed {
                delay,
                reply: inner,
            } => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            Reply::Message(message) => {
                tracing::debug!(
                    number,
                    finish = message.finish_reason.as_str(),
                    "mock model answers"
                );
                return axum::Json(completion(&message, number, &model_name)).into_response();
            }
            Reply::Error(error) => {
                tracing::debug!(number, status = error.status, "mock model answers an error");
                return error_response(&error);
            }
            Reply::LoseResponse => {
                tracing::debug!(number, "mock model loses its response");
                let full = completion(&model.fallback_message(), number, &model_name).to_string();
                return Response::builder()
                    .status(StatusCode::OK)
                    .header(CONTENT_TYPE, "application/json")
                    .body(aborting_body(full.as_bytes()))
                    .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response());
            }
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
            "Unknown request URL; the mock serves POST /v1/chat/completions and GET /v1/models.",
        )
        .with_code("unknown_url"),
    )
}

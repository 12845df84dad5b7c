//! `POST /v1/embeddings`, as OpenAI answers it: one vector per input, the
//! same vector for the same text (so a test can tell which input each
//! came from), and the prompt tokens counted as a token per four bytes.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::Model;
use super::routes::{check_auth, header_text, invalid_request, parse_body};

/// The route.
pub(crate) const EMBEDDINGS: &str = "/v1/embeddings";

/// The dimensions of a vector when the request names none.
pub const DEFAULT_DIMENSIONS: usize = 4;

/// The vector the mock answers for `text`: `dimensions` numbers in
/// (-1, 1), a function of the text's bytes.
pub fn vector_of(text: &str, dimensions: usize) -> Vec<f32> {
    (0..dimensions)
        .map(|d| {
            let sum = text.bytes().enumerate().fold(d as u64 + 1, |acc, (i, b)| {
                acc.wrapping_mul(31)
                    .wrapping_add(u64::from(b) * (i as u64 + 1))
            });
            // Exactly representable in f32: a multiple of 1/1024.
            ((sum % 2047) as f32 - 1023.0) / 1024.0
        })
        .collect()
}

pub(crate) async fn embeddings(
    State(model): State<Arc<Model>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (parsed, recorded) = parse_body(&body);
    model.record(super::Arrival {
        path: EMBEDDINGS,
        authorization: header_text(&headers, AUTHORIZATION.as_str()),
        api_key: None,
        traceparent: header_text(&headers, "traceparent"),
        body: recorded,
    });
    if let Some(denied) = check_auth(&model, &headers) {
        return denied;
    }
    let Ok(request) = parsed else {
        return invalid_request(
            "We could not parse the JSON body of your request.",
            None,
            None,
        );
    };
    let inputs: Vec<&str> = match request.get("input") {
        Some(Value::String(text)) => vec![text.as_str()],
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        _ => return invalid_request("'input' is a required property", Some("input"), None),
    };
    let dimensions = request
        .get("dimensions")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_DIMENSIONS, |d| d as usize);
    let tokens: usize = inputs.iter().map(|t| t.len().div_ceil(4)).sum();
    let data: Vec<Value> = inputs
        .iter()
        .enumerate()
        .map(|(index, text)| {
            json!({"object": "embedding", "index": index, "embedding": vector_of(text, dimensions)})
        })
        .collect();
    axum::Json(json!({
        "object": "list",
        "data": data,
        "model": request.get("model").cloned().unwrap_or(Value::Null),
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response()
}

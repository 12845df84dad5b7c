//! `POST /v1/messages/count_tokens`: the tokens of a Messages API prompt on
//! a binding's primary model, counted as rein's budget counts them, with
//! no model call.
//!
//! # Why
//!
//! Anthropic's SDKs (`client.messages.count_tokens`) and the agents built
//! on them count a prompt before sending it, to trim a transcript to a
//! context window or a budget. Pointed at `rein serve`, that call was a
//! 404. The answer is rein's own bound of the prompt
//! ([`rein_engine::run::PromptCount`]): never below what the provider will
//! count, close to it for models rein has a tokenizer for, and the
//! number a turn's budget reserves once the tokenizer is read. [`COUNT_HEADER`] says how it was
//! counted.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderValue;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use super::anthropic::{self, AnthropicError, Ceiling};
use crate::http::auth::Tenant;
use crate::http::state::AppState;
use rein_core::wire::anthropic::request::MessagesRequest;

/// The route.
pub const PATH: &str = "/v1/messages/count_tokens";

/// The response header naming how the count was made: the model's
/// encoding (`o200k_base`, `cl100k_base`), `learned_ratio` or
/// `token_per_byte`.
pub const COUNT_HEADER: &str = "Rein-Token-Count";

/// Anthropic's count answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct TokenCount {
    /// The prompt's tokens (messages, system prompt and tools): an upper
    /// bound of the primary model's count.
    pub input_tokens: u64,
}

/// Counts the tokens of a Messages API request (Anthropic's
/// `count_tokens`).
#[utoipa::path(
    post, path = "/v1/messages/count_tokens", tag = "gateway",
    request_body(content = MessagesRequest, description = "a Messages API request (`max_tokens` not needed); `model` names a [models.*] binding"),
    responses(
        (status = 200, description = "the prompt's tokens on the binding's primary model, as rein's budget bounds them", body = TokenCount,
         headers(("Rein-Token-Count" = String, description = "how it was counted: the model's encoding (`o200k_base`, `cl100k_base`), `learned_ratio` or `token_per_byte`"))),
        (status = 400, description = "invalid request (`invalid_request_error`)", body = AnthropicError),
        (status = 401, description = "missing or invalid API key", body = AnthropicError),
        (status = 404, description = "unknown model binding", body = AnthropicError),
        (status = 413, description = "body over the limit", body = AnthropicError),
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub async fn count_tokens(
    State(state): State<Arc<AppState>>,
    Tenant(_tenant): Tenant,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let body = match crate::api::runs::raw_body(&state, body) {
        Ok(b) => b,
        Err(problem) => return problem.into_response(),
    };
    let call = match anthropic::read(&body, Ceiling::None) {
        Ok(call) => call,
        Err(problem) => return problem.into_response(),
    };
    let Some(binding) = state.models.get(&call.binding) else {
        return super::unknown_binding(&state, &call.binding).into_response();
    };
    let count = state.engine.count_prompt(binding, &call.request).await;
    let mut response = Json(TokenCount {
        input_tokens: count.tokens,
    })
    .into_response();
    response
        .headers_mut()
        .insert(COUNT_HEADER, HeaderValue::from_static(count.method.name()));
    response
}

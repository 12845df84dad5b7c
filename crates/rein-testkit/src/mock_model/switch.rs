//! The mock model's switches over HTTP (`/_script`): what a process that
//! did not start the mock (`rein dev`, a manual test) queues for it to
//! answer next, faults included, as the order desk's `/_faults` does.
//!
//! `POST /_script` with `{"replies": [ … ]}` appends to the script; each
//! entry is one of
//!
//! | `kind` | answer |
//! | --- | --- |
//! | `text` (`text`) | a final answer |
//! | `tool_call` (`name`, `arguments`) | one tool call |
//! | `rate_limited` (`retry_after_s`, optional) | 429 `rate_limit_exceeded` |
//! | `server_error` | 500 |
//! | `unavailable` | 503 |
//! | `bad_request` (`message`) | 400 |
//! | `context_length_exceeded` | 400 `context_length_exceeded` |
//! | `unauthorized` | 401 |
//! | `lose_response` | the body cut mid-way |
//!
//! and any entry may add `delay_ms` (it is answered that much later).
//! `GET /_script` says how many replies are queued; `DELETE /_script`
//! empties the script (the mock then answers its fallback text).

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Model, Reply};
use crate::RetryAfter;

/// A script entry, as posted.
#[derive(Debug, Deserialize)]
struct Entry {
    #[serde(flatten)]
    reply: Kind,
    /// Answer that much later.
    #[serde(default)]
    delay_ms: u64,
}

/// What to answer.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Kind {
    Text { text: String },
    ToolCall { name: String, arguments: Value },
    RateLimited { retry_after_s: Option<u64> },
    ServerError,
    Unavailable,
    BadRequest { message: String },
    ContextLengthExceeded,
    Unauthorized,
    LoseResponse,
}

impl Entry {
    fn into_reply(self) -> Reply {
        let reply = match self.reply {
            Kind::Text { text } => Reply::text(&text),
            Kind::ToolCall { name, arguments } => Reply::tool_call(&name, &arguments),
            Kind::RateLimited { retry_after_s } => {
                Reply::rate_limited(retry_after_s.map(RetryAfter::Seconds))
            }
            Kind::ServerError => Reply::server_error(),
            Kind::Unavailable => Reply::unavailable(),
            Kind::BadRequest { message } => Reply::bad_request(&message),
            Kind::ContextLengthExceeded => Reply::context_length_exceeded(),
            Kind::Unauthorized => Reply::unauthorized(),
            Kind::LoseResponse => Reply::lose_response(),
        };
        if self.delay_ms == 0 {
            reply
        } else {
            reply.delayed(Duration::from_millis(self.delay_ms))
        }
    }
}

/// A posted script.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    replies: Vec<Entry>,
}

/// `POST /_script`: appends the replies; 400 naming what does not read.
pub(crate) async fn push(State(model): State<Arc<Model>>, body: Bytes) -> Response {
    match serde_json::from_slice::<Script>(&body) {
        Ok(script) => {
            let mut state = model.lock();
            state
                .replies
                .extend(script.replies.into_iter().map(Entry::into_reply));
            Json(json!({"queued": state.replies.len()})).into_response()
        }
        Err(err) => (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": format!(
                "POST /_script needs {{\"replies\": [{{\"kind\": \"text\", \"text\": \"…\"}}, {{\"kind\": \"rate_limited\", \"retry_after_s\": 2}}, …]}}: {err}"
            )})),
        )
            .into_response(),
    }
}

/// `GET /_script`: how many replies are queued.
pub(crate) async fn pending(State(model): State<Arc<Model>>) -> Response {
    Json(json!({"queued": model.lock().replies.len()})).into_response()
}

/// `DELETE /_script`: empties the script.
pub(crate) async fn clear(State(model): State<Arc<Model>>) -> StatusCode {
    model.lock().replies.clear();
    StatusCode::NO_CONTENT
}

//! A mock OpenAI-compatible Chat Completions server that replays a script.
//!
//! # Why
//!
//! rein's `openai` provider must be tested over real HTTP against the
//! failures real providers produce — 429 with `Retry-After`, 5xx, a
//! context-length 400, a bad key — and tests must be able to check what the
//! model was shown (invariant 10: failures reach the model only as
//! structured placeholders). The mock answers from a queue of [`Reply`]s and
//! records every request body it receives.
//!
//! # Surface
//!
//! | route | answer |
//! | --- | --- |
//! | `POST /v1/chat/completions` | the next scripted [`Reply`]; once the script is empty, a final answer with the fallback text (default [`DEFAULT_FALLBACK_TEXT`]) so runs terminate |
//! | `GET /v1/models` | `{"object": "list", "data": [{"id": <model>, "object": "model", ...}]}` |
//!
//! A completion is OpenAI's non-streaming shape:
//! `{"id": "chatcmpl-mock-<n>", "object": "chat.completion", "created", "model",
//! "choices": [{"index": 0, "message": {"role": "assistant", "content", "tool_calls"?},
//! "logprobs": null, "finish_reason"}], "usage": {"prompt_tokens",
//! "completion_tokens", "total_tokens"}}`; `<n>` counts scripted answers
//! from 1. Errors are `{"error": {"message", "type", "param", "code"}}`.
//!
//! Requests are checked in this order, and only a request that passes all
//! checks consumes a reply: `Authorization: Bearer <key>` when a key is
//! configured (401 `invalid_api_key`); a JSON body with a `messages` array
//! (400); `stream` not `true` (400 `unsupported_value`; streaming is not
//! mocked yet). Every request is recorded, refused or not.

mod reply;
mod routes;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use reply::{ApiError, AssistantMessage, DEFAULT_USAGE, FinishReason, Reply, ToolCall, Usage};

use crate::TestkitError;
use crate::server::Server;

/// The final answer once the script is empty.
pub const DEFAULT_FALLBACK_TEXT: &str = "done";
/// The model id `GET /v1/models` lists and completions report when the
/// request names none.
pub const DEFAULT_MODEL: &str = "mock-model";

/// How a mock model starts.
///
/// | setting | default |
/// | --- | --- |
/// | `replies` | empty: every request gets the fallback |
/// | `api_key` | none: `Authorization` is not checked |
/// | `fallback_text` | [`DEFAULT_FALLBACK_TEXT`] |
/// | `model` | [`DEFAULT_MODEL`] |
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MockModelConfig {
    /// The script, answered in order.
    pub replies: Vec<Reply>,
    /// The key to require as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// The text of the final answer once the script is empty.
    pub fallback_text: String,
    /// The model id.
    pub model: String,
}

impl Default for MockModelConfig {
    fn default() -> Self {
        MockModelConfig {
            replies: Vec::new(),
            api_key: None,
            fallback_text: DEFAULT_FALLBACK_TEXT.to_owned(),
            model: DEFAULT_MODEL.to_owned(),
        }
    }
}

impl MockModelConfig {
    /// The default config with `replies` as the script.
    pub fn new(replies: impl IntoIterator<Item = Reply>) -> MockModelConfig {
        MockModelConfig {
            replies: replies.into_iter().collect(),
            ..MockModelConfig::default()
        }
    }

    /// Requires `Authorization: Bearer <key>`.
    pub fn with_api_key(mut self, key: &str) -> MockModelConfig {
        self.api_key = Some(key.to_owned());
        self
    }

    /// Sets the final answer once the script is empty.
    pub fn with_fallback_text(mut self, text: &str) -> MockModelConfig {
        self.fallback_text = text.to_owned();
        self
    }

    /// Sets the model id.
    pub fn with_model(mut self, model: &str) -> MockModelConfig {
        self.model = model.to_owned();
        self
    }
}

/// One request the mock received, as it arrived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// Position in arrival order, from 1.
    pub seq: u64,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The JSON body; a JSON string holding the raw text if it was not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// The `messages` array the model was shown (empty if absent).
    pub fn messages(&self) -> &[Value] {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The `tools` array offered to the model (empty if absent).
    pub fn tools(&self) -> &[Value] {
        self.body
            .get("tools")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }
}

#[derive(Debug)]
struct ModelState {
    replies: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    answered: u64,
}

/// The shared state of one mock model.
#[derive(Debug)]
pub(crate) struct Model {
    state: Mutex<ModelState>,
    api_key: Option<String>,
    fallback_text: String,
    model: String,
}

impl Model {
    fn lock(&self) -> MutexGuard<'_, ModelState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, authorization: Option<String>, body: Value) {
        let mut st = self.lock();
        let seq = st.requests.len() as u64 + 1;
        st.requests.push(RecordedRequest {
            seq,
            authorization,
            body,
        });
    }

    /// The next reply and its completion number (from 1).
    fn next_reply(&self) -> (u64, Reply) {
        let mut st = self.lock();
        st.answered += 1;
        let reply = st
            .replies
            .pop_front()
            .unwrap_or_else(|| Reply::Message(self.fallback_message()));
        (st.answered, reply)
    }

    fn fallback_message(&self) -> AssistantMessage {
        AssistantMessage {
            content: Some(self.fallback_text.clone()),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Stop,
            usage: DEFAULT_USAGE,
        }
    }
}

/// A running mock model on `127.0.0.1:<port>`.
///
/// Dropping it stops the service (without waiting); [`shutdown`](Self::shutdown)
/// stops it and waits.
#[derive(Debug)]
pub struct MockModel {
    model: Arc<Model>,
    server: Server,
}

impl MockModel {
    /// Starts a mock with `replies` as its script and default settings.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Bind`] or [`TestkitError::LocalAddr`] when no
    /// loopback port can be had.
    pub async fn start(
        replies: impl IntoIterator<Item = Reply>,
    ) -> Result<MockModel, TestkitError> {
        MockModel::start_with(MockModelConfig::new(replies)).await
    }

    /// Starts a mock as `config` says.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Bind`] or [`TestkitError::LocalAddr`] when no
    /// loopback port can be had.
    pub async fn start_with(config: MockModelConfig) -> Result<MockModel, TestkitError> {
        let model = Arc::new(Model {
            state: Mutex::new(ModelState {
                replies: config.replies.into(),
                requests: Vec::new(),
                answered: 0,
            }),
            api_key: config.api_key,
            fallback_text: config.fallback_text,
            model: config.model,
        });
        let server = Server::start("mock model", routes::router(Arc::clone(&model))).await?;
        Ok(MockModel { model, server })
    }

    /// `http://127.0.0.1:<port>`, without a trailing slash.
    pub fn base_url(&self) -> &str {
        self.server.base_url()
    }

    /// `http://127.0.0.1:<port>/v1`: what OpenAI clients take as their base
    /// URL (they append `/chat/completions`).
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.server.base_url())
    }

    /// The full URL of the Chat Completions endpoint.
    pub fn chat_completions_url(&self) -> String {
        format!("{}/v1/chat/completions", self.server.base_url())
    }

    /// Appends a reply to the script.
    pub fn push_reply(&self, reply: Reply) {
        self.model.lock().replies.push_back(reply);
    }

    /// Appends replies to the script.
    pub fn push_replies(&self, replies: impl IntoIterator<Item = Reply>) {
        self.model.lock().replies.extend(replies);
    }

    /// How many scripted replies are left.
    pub fn pending(&self) -> usize {
        self.model.lock().replies.len()
    }

    /// Every chat-completions request received, in order, refused or not.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.model.lock().requests.clone()
    }

    /// How many chat-completions requests were received.
    pub fn request_count(&self) -> usize {
        self.model.lock().requests.len()
    }

    /// The last chat-completions request received.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        self.model.lock().requests.last().cloned()
    }

    /// Stops accepting connections and waits (bounded) for in-flight
    /// requests.
    ///
    /// # Errors
    ///
    /// [`TestkitError::Serve`] or [`TestkitError::Task`] when the server
    /// loop failed.
    pub async fn shutdown(self) -> Result<(), TestkitError> {
        self.server.shutdown().await
    }
}

//! A mock model server that replays a script: OpenAI-compatible Chat
//! Completions and the Anthropic Messages API, streamed or not.
//!
//! # Why
//!
//! rein's `openai` and `anthropic` providers must be tested over real HTTP
//! against the failures real providers produce — 429 with `Retry-After`,
//! 5xx, a context-length 400, a bad key, and for streams a server that
//! stalls, a connection that drops mid-answer, a mangled event, a missing
//! terminator — and tests must be able to check what the model was shown
//! (invariant 10: failures reach the model only as structured
//! placeholders). The mock answers from one queue of [`Reply`]s, whichever
//! route asks, and records every request body it receives.
//!
//! # Surface
//!
//! | route | answer |
//! | --- | --- |
//! | `POST /v1/chat/completions` | the next scripted [`Reply`] as a Chat Completion; once the script is empty, a final answer with the fallback text (default [`DEFAULT_FALLBACK_TEXT`]) so runs terminate |
//! | `POST /v1/chat/completions` with `"stream": true` | the same, as server-sent `chat.completion.chunk` events ending in `data: [DONE]` |
//! | `POST /v1/messages` | the same reply as an Anthropic Messages API answer; with `"stream": true`, as Messages API stream events ending in `message_stop` |
//! | a request whose last message is an assistant prefix (the Messages API's, or one marked `"prefix": true` or under `"continue_final_message": true`) | the scripted text from where the prefix ends, when it begins with it: a continuation |
//! | `GET /v1/models` | `{"object": "list", "data": [{"id": <model>, "object": "model", ...}]}` |
//!
//! ## Chat Completions
//!
//! Answers are written from `rein_core::wire::openai`'s types, the ones
//! rein's provider reads and its gateway writes. A completion is OpenAI's
//! non-streaming shape:
//! `{"id": "chatcmpl-mock-<n>", "object": "chat.completion", "created", "model",
//! "choices": [{"index": 0, "message": {"role": "assistant", "content", "tool_calls"?},
//! "logprobs": null, "finish_reason"}], "usage": {"prompt_tokens",
//! "completion_tokens", "total_tokens"}}`; `<n>` counts scripted answers
//! from 1 (across both routes). Errors are `{"error": {"message", "type",
//! "param", "code"}}`.
//!
//! A stream (`text/event-stream`) is `data: <chunk>` events, each chunk
//! `{"id", "object": "chat.completion.chunk", "created", "model", "choices":
//! [{"index": 0, "delta", "logprobs": null, "finish_reason": null}]}`: first
//! a delta with `role`, then the text in pieces of at most
//! [`STREAM_PIECE_CHARS`] characters, then per tool call one delta with
//! `index`, `id`, `type` and `function.name` followed by deltas carrying
//! the `function.arguments` text in pieces; then a chunk with an empty delta
//! and the `finish_reason`; then, when `stream_options.include_usage` is
//! true, a chunk with `"choices": []` and the `usage` (every earlier chunk
//! then has `"usage": null`); then `data: [DONE]`.
//!
//! Requests are checked in this order, and only a request that passes all
//! checks consumes a reply: `Authorization: Bearer <key>` when a key is
//! configured (401 `invalid_api_key`); a JSON body with a `messages` array
//! (400); `max_tokens` for a model that takes only `max_completion_tokens`
//! (400 `unsupported_parameter`); an output ceiling above the model's cap
//! (400 `invalid_value`). Every request is recorded, refused or not.
//!
//! ## Messages API
//!
//! An answer is `{"id": "msg_mock_<n>", "type": "message", "role":
//! "assistant", "model", "content": [{"type": "text", "text"} | {"type":
//! "tool_use", "id", "name", "input"}], "stop_reason": "end_turn" |
//! "tool_use" | "max_tokens" | "refusal" | "stop_sequence", "stop_sequence":
//! null or the scripted sequence ([`Reply::with_stop_sequence`]), "usage":
//! {"input_tokens", "output_tokens"}}`. Tool-call arguments that are not
//! JSON (a script testing malformed output) are sent as a JSON string
//! `input`. Errors are `{"type": "error", "error": {"type", "message"}}`,
//! translated from the reply's OpenAI error: 400 `invalid_request_error`
//! (a context-length error says `prompt is too long`), 401
//! `authentication_error`, 403 `permission_error`, 404 `not_found_error`,
//! 413 `request_too_large`, 429 `rate_limit_error`, 503 and 529 both as 529
//! `overloaded_error`, other 5xx `api_error`; `Retry-After` is kept.
//!
//! A stream is `event: <type>` / `data: <json>` pairs: `message_start`
//! (with `usage.input_tokens`), `ping`, then per content block
//! `content_block_start`, `content_block_delta` (`text_delta` pieces, or
//! `input_json_delta` with `partial_json` pieces), `content_block_stop`;
//! then `message_delta` (`stop_reason`, `usage.output_tokens`) and
//! `message_stop`.
//!
//! Requests are checked in this order: `x-api-key: <key>` when a key is
//! configured (401 `authentication_error`); an `anthropic-version` header
//! (400); a JSON body with a `messages` array (400); `max_tokens` (400),
//! at most the model's cap (400 `invalid_request_error`).
//!
//! ## Faults and load
//!
//! | to get | script |
//! | --- | --- |
//! | an error status | [`Reply::rate_limited`], [`Reply::unavailable`], [`Reply::context_length_exceeded`], ... |
//! | a late answer; for a stream, a stall before the first byte | [`Reply::delayed`] |
//! | a body cut mid-way | [`Reply::lose_response`] |
//! | headers then silence, a stall or drop after some events, a malformed event, an in-band error event, no terminator | [`Reply::with_stream_fault`] with a [`StreamFault`] |
//! | every answer slow, to measure concurrency | [`MockModelConfig::with_latency`], [`MockModelConfig::with_event_interval`] |
//!
//! A process that did not start the mock (`rein dev`) queues the same
//! replies over HTTP: `POST /_script` (see the `switch` module for the
//! JSON form), `GET` to count them, `DELETE` to empty the script.
//!
//! [`MockModel::in_flight`] and [`MockModel::peak_in_flight`] count model
//! requests being served: from the handler's entry until its answer is
//! sent, and for a stream until its body ends or is dropped.

mod anthropic;
mod embeddings;
mod meter;
mod prefill;
mod reply;
mod routes;
mod sse;
mod switch;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use embeddings::{DEFAULT_DIMENSIONS, vector_of};
pub use meter::{BYTES_PER_TOKEN, UsageEntry};
pub use reply::{
    ApiError, AssistantMessage, DEFAULT_USAGE, FinishReason, Reply, StreamFault, ToolCall, Usage,
};
pub use sse::STREAM_PIECE_CHARS;

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
/// | `echo_authorization` | `false`: a 401 or an in-band stream error does not quote the key header |
/// | `fallback_text` | [`DEFAULT_FALLBACK_TEXT`] |
/// | `model` | [`DEFAULT_MODEL`] |
/// | `latency` | zero: answers at once |
/// | `event_interval` | zero: a stream's events go out back to back |
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct MockModelConfig {
    /// The script, answered in order.
    pub replies: Vec<Reply>,
    /// The key to require as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// Whether a 401 quotes the `Authorization` header it got, as some
    /// OpenAI-compatible servers do: the fault a redaction test needs.
    pub echo_authorization: bool,
    /// The text of the final answer once the script is empty.
    pub fallback_text: String,
    /// The model id.
    pub model: String,
    /// How long every answer (scripted or fallback) waits before anything
    /// is sent, on top of any [`Reply::delayed`].
    pub latency: Duration,
    /// How long a stream waits between two events.
    pub event_interval: Duration,
    /// The most output tokens each model accepts (Chat Completions): a
    /// `max_tokens` above it is answered 400, as OpenAI does.
    pub output_caps: BTreeMap<String, u64>,
    /// Whether usage is counted from the request and answers stop at
    /// `max_tokens` (`meter`), instead of the script's.
    pub metered: bool,
    /// Whether a metered prompt on Chat Completions is counted as OpenAI
    /// documents for its gpt-4o family (`o200k_base` tokens, see
    /// [`MockModelConfig::with_tokenized_usage`]) instead of by bytes.
    pub tokenized: bool,
    /// Models that refuse `max_tokens` on Chat Completions and take only
    /// `max_completion_tokens`, as OpenAI's reasoning models do.
    pub completion_tokens_only: BTreeSet<String>,
    /// Whether a scripted 429 with `Retry-After: N` (seconds) holds for
    /// the whole account, as a real provider's does: every request that
    /// arrives within those `N` seconds is answered 429 too (with what is
    /// left of the wait), without consuming the script, and counted in
    /// [`MockModel::hammered`].
    pub enforce_retry_after: bool,
    /// The loopback port to listen on; `0` (the default) takes any free
    /// one.
    pub port: u16,
}

impl Default for MockModelConfig {
    fn default() -> Self {
        MockModelConfig {
            replies: Vec::new(),
            api_key: None,
            echo_authorization: false,
            fallback_text: DEFAULT_FALLBACK_TEXT.to_owned(),
            model: DEFAULT_MODEL.to_owned(),
            latency: Duration::ZERO,
            event_interval: Duration::ZERO,
            output_caps: BTreeMap::new(),
            metered: false,
            tokenized: false,
            completion_tokens_only: BTreeSet::new(),
            enforce_retry_after: false,
            port: 0,
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

    /// Makes a 401 quote the `Authorization` header it got.
    pub fn with_echoed_authorization(mut self) -> MockModelConfig {
        self.echo_authorization = true;
        self
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

    /// Makes every answer wait `latency` before anything is sent, so that
    /// concurrent requests overlap and [`MockModel::peak_in_flight`]
    /// measures the client's concurrency.
    pub fn with_latency(mut self, latency: Duration) -> MockModelConfig {
        self.latency = latency;
        self
    }

    /// Answers a request for `model` whose `max_tokens` (or
    /// `max_completion_tokens`) is above `cap` with the provider's 400,
    /// consuming no reply: on Chat Completions OpenAI's (`param` the member
    /// asked in, `code: "invalid_value"`), on the Messages API Anthropic's
    /// `invalid_request_error` (`max_tokens: N > CAP, which is the maximum
    /// allowed number of output tokens for MODEL`).
    pub fn with_output_cap(mut self, model: &str, cap: u64) -> MockModelConfig {
        self.output_caps.insert(model.to_owned(), cap);
        self
    }

    /// Answers a Chat Completions request for `model` that carries
    /// `max_tokens` with OpenAI's 400 for its reasoning models
    /// (`param: "max_tokens"`, `code: "unsupported_parameter"`, "Use
    /// 'max_completion_tokens' instead."), consuming no reply.
    pub fn with_max_completion_tokens_only(mut self, model: &str) -> MockModelConfig {
        self.completion_tokens_only.insert(model.to_owned());
        self
    }

    /// Reports usage as a provider counts it: a prompt token per
    /// [`BYTES_PER_TOKEN`] bytes of the request's `messages` and `tools`,
    /// the script's output tokens but never more than `max_tokens` (an
    /// answer cut there says `length` and loses its tool calls).
    pub fn with_metered_usage(mut self) -> MockModelConfig {
        self.metered = true;
        self
    }

    /// Meters usage (as [`MockModelConfig::with_metered_usage`]) but counts
    /// a Chat Completions prompt as OpenAI's cookbook ("How to count
    /// tokens with tiktoken") does for the gpt-4o family, with the
    /// `o200k_base` encoding: 3 tokens per message plus its role, content,
    /// name (and 1) and each tool call's name and arguments (and 1), 3 to
    /// prime the reply, and the tool definitions by the cookbook's rule
    /// for functions.
    pub fn with_tokenized_usage(mut self) -> MockModelConfig {
        self.metered = true;
        self.tokenized = true;
        self
    }

    /// Holds a scripted 429's `Retry-After` for every request, as a real
    /// provider does (see [`MockModelConfig::enforce_retry_after`]).
    pub fn with_enforced_retry_after(mut self) -> MockModelConfig {
        self.enforce_retry_after = true;
        self
    }

    /// Makes a stream wait `interval` between two events: a slow stream
    /// rather than a late one.
    pub fn with_event_interval(mut self, interval: Duration) -> MockModelConfig {
        self.event_interval = interval;
        self
    }

    /// Listens on `127.0.0.1:port` (`0`: any free port).
    pub fn with_port(mut self, port: u16) -> MockModelConfig {
        self.port = port;
        self
    }
}

/// One request the mock received, as it arrived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// Position in arrival order, from 1.
    pub seq: u64,
    /// The route: `/v1/chat/completions` or `/v1/messages`.
    #[serde(default)]
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `x-api-key` header, if any (the Messages API's key).
    #[serde(default)]
    pub api_key: Option<String>,
    /// The `traceparent` header, if any (the model call's span).
    #[serde(default)]
    pub traceparent: Option<String>,
    /// The JSON body; a JSON string holding the raw text if it was not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// Whether the body asked for a stream (`"stream": true`).
    pub fn stream(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

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
    usage: Vec<UsageEntry>,
    /// Until when a 429's `Retry-After` holds (`enforce_retry_after`).
    paused_until: Option<tokio::time::Instant>,
    /// Requests that arrived while it held.
    hammered: usize,
    /// When each request arrived, on tokio's clock, in arrival order.
    arrivals: Vec<tokio::time::Instant>,
}

/// The shared state of one mock model.
#[derive(Debug)]
pub(crate) struct Model {
    state: Mutex<ModelState>,
    api_key: Option<String>,
    echo_authorization: bool,
    fallback_text: String,
    model: String,
    latency: Duration,
    event_interval: Duration,
    output_caps: BTreeMap<String, u64>,
    metered: bool,
    tokenized: bool,
    completion_tokens_only: BTreeSet<String>,
    enforce_retry_after: bool,
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
}

/// One model request being served; counts in [`Model::in_flight`] until
/// dropped. A stream moves it into its body, so it is dropped when the body
/// ends or the connection goes.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Model>);

impl InFlight {
    pub(crate) fn enter(model: &Arc<Model>) -> InFlight {
        let now = model.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        model.peak_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(Arc::clone(model))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A request as the routes record it.
pub(crate) struct Arrival {
    pub(crate) path: &'static str,
    pub(crate) authorization: Option<String>,
    pub(crate) api_key: Option<String>,
    pub(crate) traceparent: Option<String>,
    pub(crate) body: Value,
}

impl Model {
    fn lock(&self) -> MutexGuard<'_, ModelState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn record(&self, arrival: Arrival) {
        let mut st = self.lock();
        st.arrivals.push(tokio::time::Instant::now());
        let seq = st.requests.len() as u64 + 1;
        st.requests.push(RecordedRequest {
            seq,
            path: arrival.path.to_owned(),
            authorization: arrival.authorization,
            api_key: arrival.api_key,
            traceparent: arrival.traceparent,
            body: arrival.body,
        });
    }

    /// The next reply and its completion number (from 1).
    fn next_reply(&self) -> (u64, Reply) {
        let mut st = self.lock();
        st.answered += 1;
        let now = tokio::time::Instant::now();
        if self.enforce_retry_after
            && let Some(until) = st.paused_until.filter(|u| *u > now)
        {
            st.hammered += 1;
            let left = until.saturating_duration_since(now).as_secs_f64().ceil() as u64;
            return (
                st.answered,
                Reply::rate_limited(Some(crate::RetryAfter::Seconds(left.max(1)))),
            );
        }
        let reply = st
            .replies
            .pop_front()
            .unwrap_or_else(|| Reply::Message(self.fallback_message()));
        if self.enforce_retry_after
            && let Reply::Error(e) = &reply
            && e.status == 429
            && let Some(crate::RetryAfter::Seconds(secs)) = e.retry_after
        {
            st.paused_until = Some(now + Duration::from_secs(secs));
        }
        (st.answered, reply)
    }

    fn fallback_message(&self) -> AssistantMessage {
        AssistantMessage {
            content: Some(self.fallback_text.clone()),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Stop,
            stop_sequence: None,
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
                usage: Vec::new(),
                paused_until: None,
                hammered: 0,
                arrivals: Vec::new(),
            }),
            api_key: config.api_key,
            echo_authorization: config.echo_authorization,
            fallback_text: config.fallback_text,
            model: config.model,
            latency: config.latency,
            event_interval: config.event_interval,
            output_caps: config.output_caps,
            metered: config.metered,
            tokenized: config.tokenized,
            completion_tokens_only: config.completion_tokens_only,
            enforce_retry_after: config.enforce_retry_after,
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
        });
        let server = Server::start(
            "mock model",
            config.port,
            routes::router(Arc::clone(&model)),
        )
        .await?;
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

    /// The full URL of the Messages API endpoint (Anthropic clients take
    /// [`openai_base_url`](Self::openai_base_url), the same `.../v1`, and
    /// append `/messages`).
    pub fn messages_url(&self) -> String {
        format!("{}/v1/messages", self.server.base_url())
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

    /// Every model request received (both routes), in order, refused or
    /// not.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.model.lock().requests.clone()
    }

    /// The usage every answer (both routes) reported, in order: what the
    /// model side counts, for checking budgets against it.
    pub fn usage_log(&self) -> Vec<UsageEntry> {
        self.model.lock().usage.clone()
    }

    /// How many model requests were received.
    pub fn request_count(&self) -> usize {
        self.model.lock().requests.len()
    }

    /// The last model request received.
    pub fn last_request(&self) -> Option<RecordedRequest> {
        self.model.lock().requests.last().cloned()
    }

    /// How many model requests are being served now, streams counted until
    /// their body ends or is dropped.
    pub fn in_flight(&self) -> usize {
        self.model.in_flight.load(Ordering::SeqCst)
    }

    /// Requests that arrived while a 429's `Retry-After` held, answered
    /// 429 again ([`MockModelConfig::with_enforced_retry_after`]): each is
    /// a client that did not wait as it was told.
    pub fn hammered(&self) -> usize {
        self.model.lock().hammered
    }

    /// When each request arrived, on tokio's clock, in arrival order.
    pub fn arrivals(&self) -> Vec<tokio::time::Instant> {
        self.model.lock().arrivals.clone()
    }

    /// The most model requests ever served at once.
    pub fn peak_in_flight(&self) -> usize {
        self.model.peak_in_flight.load(Ordering::SeqCst)
    }

    /// Starts the peak count again from the requests in flight now, so
    /// that a test measures one phase (a load after its warm-up).
    pub fn reset_peak_in_flight(&self) {
        self.model.peak_in_flight.store(
            self.model.in_flight.load(Ordering::SeqCst),
            Ordering::SeqCst,
        );
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

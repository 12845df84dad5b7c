//! The Anthropic provider: the Messages API with tools, streamed or not.

mod body;
mod message;
mod stream;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rein_core::Failure;

use super::endpoint::{Api, Endpoint, KeyHeader};
use super::http::encode;
use super::stream::{StreamSettings, collect_turn};
use super::{ModelProvider, ModelRequest, ModelResponse, StreamLimits, TurnStream};
use crate::Timer;
use message::parse_message;
use stream::EventDecoder;

/// The `anthropic-version` header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `max_tokens` sent when the request sets no output ceiling: the
/// Messages API requires one.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The Anthropic Messages API over HTTP.
///
/// Like [`OpenAiProvider`](super::OpenAiProvider): one `reqwest::Client`
/// per provider, the call's timeout is the run's remainder capped by the
/// provider's own, failures are classified by the same shared code (429
/// with `Retry-After` → `rate_limited`, 529 → `overloaded`, 503 →
/// `transient`, 401/403 → not retryable, "prompt is too long" →
/// `context_overflow`), and streams follow the same rules.
///
/// | setting | default |
/// | --- | --- |
/// | base URL | up to and including `/v1`, e.g. `https://api.anthropic.com/v1` |
/// | `max_tokens` when the request sets none | [`DEFAULT_MAX_TOKENS`] |
/// | `complete` streams | no; see [`with_streaming`](Self::with_streaming) |
///
/// # Conversion
///
/// rein's transcript is OpenAI-shaped; the Messages API differs:
///
/// | rein | Messages API |
/// | --- | --- |
/// | system messages | the top-level `system` text (joined by blank lines) |
/// | user text | a `user` message with a `text` block |
/// | assistant tool calls | `tool_use` blocks (`id`, `name`, `input`) |
/// | tool results | `tool_result` blocks (`tool_use_id`, `content`) in a `user` message |
/// | tools `{"type": "function", "function": {name, description, parameters}}` | `{name, description, input_schema}` |
///
/// Consecutive messages of one role are merged (the API wants turns to
/// alternate, and every result of one assistant turn in the next user
/// message). Tool-call arguments that are not a JSON object — a malformed
/// call rein refused — are sent as `{}`: the API accepts only an object,
/// and the tool result that follows already tells the model its arguments
/// were invalid. A function's `strict` is not sent (see
/// `tool_definition` for why).
///
/// # `response_format`
///
/// The Messages API has no `response_format`, and a model asked for JSON
/// in prose may answer prose, which the client then fails to parse. So a
/// format that asks for JSON is answered through an *answer tool*: a tool
/// whose `input_schema` is the format's schema, which the model is made to
/// call; its `tool_use` input comes back as the answer's text (serialised
/// JSON, streamed as text deltas) with finish `stop`, as an OpenAI model's
/// answer to the same request would.
///
/// | `response_format` | sent |
/// | --- | --- |
/// | none, `text` | nothing |
/// | `json_object` | the answer tool `json_answer`, `input_schema` `{"type": "object"}` |
/// | `json_schema` | the answer tool named after `json_schema.name` (other characters than `[a-zA-Z0-9_-]` as `_`, at most 64, never a caller's tool's name), `input_schema` its `schema`, its `description` after rein's; `strict` is not sent (see `answer_tool`) |
/// | another type, or a malformed one | refused before sending: `invalid_arguments`, not retryable |
///
/// | the caller's `tool_choice` | with the answer tool |
/// | --- | --- |
/// | no tools of the caller's | the answer tool, forced (`{"type": "tool", "name"}`) |
/// | none given, or `auto`, beside the caller's tools | both offered, `{"type": "any"}`: the model calls one of the caller's tools or answers through the answer tool, never in prose |
/// | `none` | the answer tool, forced |
/// | `required`, or a named function | no answer tool: the turn must call the caller's tool, as on OpenAI |
///
/// `parallel_tool_calls: false` is sent as `disable_parallel_tool_use`.
/// Every answer is still checked against the format where the chain
/// receives it ([`ResponseFormat`](crate::provider::ResponseFormat)).
#[derive(Clone)]
pub struct AnthropicProvider {
    endpoint: Endpoint,
    max_tokens: u64,
}

/// The Messages API's path and headers.
const MESSAGES: Api = Api {
    path: "/messages",
    key: KeyHeader::Named("x-api-key"),
    headers: &[("anthropic-version", ANTHROPIC_VERSION)],
};

impl std::fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.endpoint
            .debug_struct(f, "AnthropicProvider")
            .finish_non_exhaustive()
    }
}

impl AnthropicProvider {
    /// A provider named `name` at `base_url` (e.g.
    /// `https://api.anthropic.com/v1`), sending `x-api-key: <api_key>` when
    /// given.
    pub fn new(
        name: &str,
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
        client: reqwest::Client,
    ) -> Self {
        AnthropicProvider {
            endpoint: Endpoint::new(name, base_url, api_key, timeout, client, MESSAGES),
            max_tokens: DEFAULT_MAX_TOKENS,
        }
    }

    /// Sets the `max_tokens` sent when the request sets no ceiling.
    pub fn with_default_max_tokens(mut self, max_tokens: u64) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Times the first-byte, idle and overall limits on `clock` instead of
    /// the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Timer>) -> Self {
        self.endpoint.clock = clock;
        self
    }

    /// Names the environment variable the key came from, for the log
    /// line of a rejected key.
    pub fn with_key_env(mut self, name: Option<&str>) -> Self {
        self.endpoint.key_env = name.map(str::to_owned);
        self
    }

    /// Makes [`complete`](ModelProvider::complete) stream the answer and
    /// assemble it, under `settings`' first-byte and idle limits (see
    /// [`OpenAiProvider::with_streaming`](super::OpenAiProvider::with_streaming)).
    pub fn with_streaming(mut self, settings: StreamSettings) -> Self {
        self.endpoint.streaming = Some(settings);
        self
    }
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.endpoint.name
    }

    fn key_env(&self) -> Option<&str> {
        self.endpoint.key_env.as_deref()
    }

    fn stream_settings(&self) -> Option<StreamSettings> {
        self.endpoint.streaming
    }

    fn carries(&self, request: &ModelRequest) -> Result<(), Failure> {
        self.check_carries(request)
    }

    fn ignored_options(&self, options: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
        body::ignored_options(options)
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        allowance: Duration,
    ) -> Result<ModelResponse, Failure> {
        if let Some(settings) = self.endpoint.streaming {
            let stream = self.stream(request, settings.limits(allowance)).await?;
            return collect_turn(&self.endpoint.name, stream).await;
        }
        let prepared = self.prepare(request, false)?;
        let body = encode(&self.endpoint.name, &prepared.body)?;
        let text = self.endpoint.post_json(body, allowance).await?;
        parse_message(&self.endpoint.name, &text, prepared.answer.as_deref())
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        limits: StreamLimits,
    ) -> Result<TurnStream, Failure> {
        let prepared = self.prepare(request, true)?;
        let body = encode(&self.endpoint.name, &prepared.body)?;
        let decoder = EventDecoder::new(&self.endpoint.name, prepared.answer);
        self.endpoint.open_stream(body, limits, decoder).await
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hand_built_provider_teaches_its_key_and_never_prints_it() {
        const CANARY: &str = "sk-ant-hand-built-canary-17";
        let provider = super::AnthropicProvider::new(
            "p",
            "http://127.0.0.1:9/v1",
            Some(CANARY.into()),
            std::time::Duration::from_secs(1),
            reqwest::Client::new(),
        );
        assert!(!format!("{provider:?}").contains(CANARY));
        assert_eq!(
            rein_core::redact::text(&format!("x-api-key: {CANARY}")),
            "x-api-key: [redacted]"
        );
    }
}

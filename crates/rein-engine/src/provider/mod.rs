//! Model providers behind one trait: `scripted` replays a file of turns,
//! `openai` speaks Chat Completions to any compatible server, `anthropic`
//! speaks the Anthropic Messages API.
//!
//! # Why one trait
//!
//! The run loop must not care where a turn comes from: a test, the demo and
//! a trace replay use the scripted provider, production uses a real one, and
//! both fail through the same error contract ([`Failure`]) so retries,
//! breakers and budgets treat them alike. Provider calls are layered
//! separately from tool calls: they have their own retry budget and breaker
//! arm, because model overload and tool overload mean different things.
//!
//! # Streaming
//!
//! [`ModelProvider::stream`] yields a turn as it is generated, as
//! provider-neutral [`Delta`]s ending in the assembled turn
//! ([`StreamEvent::Done`]), so the engine and the OpenAI-compatible gateway
//! read every provider alike. The HTTP providers enforce, identically:
//!
//! | rule | default |
//! | --- | --- |
//! | time to the first event, headers included ([`StreamLimits::first_byte`]) | [`DEFAULT_STREAM_FIRST_BYTE_TIMEOUT`](rein_core::registry::DEFAULT_STREAM_FIRST_BYTE_TIMEOUT) |
//! | longest gap between events ([`StreamLimits::idle`]) | [`DEFAULT_STREAM_IDLE_TIMEOUT`](rein_core::registry::DEFAULT_STREAM_IDLE_TIMEOUT) |
//! | both capped by the call's allowance | — |
//! | a cut stream (drop, stall, unparseable event) ends in `Err`, never `Done` | — |
//! | a clean end without the terminator, after the finish reason, completes at once | — |
//! | a failure after the provider accepted the call carries [`Failure::tokens_spent`] (reported, else one token per [`BYTES_PER_TOKEN_ESTIMATE`] bytes) | — |
//! | output cut at the token limit says so ([`ModelResponse::is_truncated`]) | — |

mod anthropic;
mod caller;
mod endpoint;
mod format;
mod http;
mod message;
mod openai;
mod scripted;
mod sse;
mod stream;

pub use anthropic::{ANTHROPIC_VERSION, AnthropicProvider, DEFAULT_MAX_TOKENS};
pub use caller::CallerDriven;
pub use format::{FormatError, JsonSchemaFormat, ResponseFormat};
pub use message::{
    AUDIO_BYTES_PER_TOKEN, Embeddings, FinishReason, IMAGE_TOKENS_BOUND, Message, ModelRequest,
    ModelResponse, Part, TokenUsage, ToolCall,
};
pub use openai::OpenAiProvider;
pub use scripted::{ScriptError, ScriptedProvider};
pub use stream::{
    BYTES_PER_TOKEN_ESTIMATE, Delta, StreamEvent, StreamLimits, StreamSettings,
    StreamSettingsError, ToolCallDelta, TurnStream, collect_turn, ready_turn,
};

use async_trait::async_trait;
use std::time::Duration;

use rein_core::Failure;

/// A source of model turns.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// The provider's name, as in config; the target of its failures and
    /// its breaker arm.
    fn name(&self) -> &str;

    /// The environment variable its key is read from (`api_key_env`), if
    /// any: what an operator fixes when the provider rejects the key.
    fn key_env(&self) -> Option<&str> {
        None
    }

    /// Asks for the next assistant turn. `allowance` is what is left of the
    /// run's deadline for this call (the engine reads its clock; providers
    /// need none); the provider must return, with a `timeout` failure, by
    /// then, and sends it on as `Rein-Deadline-Ms`.
    ///
    /// # Errors
    ///
    /// A classified [`Failure`]: 429 and 5xx are retryable; 400, 401, 403
    /// and 422 are not; context-length errors are `context_overflow`.
    async fn complete(
        &self,
        request: &ModelRequest,
        allowance: Duration,
    ) -> Result<ModelResponse, Failure>;

    /// Asks for the next assistant turn as a stream of fragments ending in
    /// the whole turn (see [`TurnStream`] for the contract). The first-byte
    /// and idle limits of `limits` apply to streaming providers; all of
    /// them are capped by `limits.allowance`.
    ///
    /// The default, for providers that cannot stream, is
    /// [`complete`](Self::complete) under the allowance, then its content
    /// as one delta and the turn.
    ///
    /// # Errors
    ///
    /// A classified [`Failure`] when the call fails before it streams
    /// (refused, an error status, no headers by the first-byte limit);
    /// failures during the stream arrive as its last item.
    async fn stream(
        &self,
        request: &ModelRequest,
        limits: StreamLimits,
    ) -> Result<TurnStream, Failure> {
        let response = self.complete(request, limits.allowance).await?;
        Ok(ready_turn(response))
    }

    /// Whether this provider has an embeddings API (OpenAI's
    /// `/embeddings`): a binding's link without one is passed over for an
    /// embedding request.
    fn embeds(&self) -> bool {
        false
    }

    /// The embeddings of `request`'s inputs (the texts of its user
    /// messages, in order) by `request.model`, within `allowance`;
    /// `request.options` may carry `dimensions` and `user`.
    ///
    /// # Errors
    ///
    /// A classified [`Failure`], as [`complete`](Self::complete); the
    /// default, for providers without an embeddings API, refuses.
    async fn embed(
        &self,
        request: &ModelRequest,
        allowance: Duration,
    ) -> Result<Embeddings, Failure> {
        let _ = (request, allowance);
        Err(no_embeddings(self.name()))
    }

    /// Whether this provider's API can carry `request` at all (its
    /// message parts, its `response_format`), checked before anything is
    /// reserved or sent: a link that cannot is passed over for the next
    /// one, as a context overflow is, instead of ending the turn.
    ///
    /// # Errors
    ///
    /// The not-retryable `invalid_arguments` failure naming what it cannot
    /// carry. The default carries every request but a
    /// [`continuation`](ModelRequest::continuation): a provider must say it
    /// continues an assistant prefix, since one that does not would answer
    /// a new turn after it, which rein would splice onto the text sent.
    fn carries(&self, request: &ModelRequest) -> Result<(), Failure> {
        if request.continuation {
            return Err(no_continuation(self.name()));
        }
        Ok(())
    }

    /// The members of `options` (OpenAI's names, from a gateway caller)
    /// this provider's API has no equivalent for and leaves out of the
    /// request; the gateway names them in its answer (`Rein-Ignored`), so
    /// a client learns what did not reach the model. The default, for
    /// providers that pass every option on, is none.
    fn ignored_options(&self, options: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
        let _ = options;
        Vec::new()
    }

    /// The first-byte and idle limits this provider streams under, when it
    /// is configured to stream (`[providers.NAME.stream]`); `None` for the
    /// caller's defaults. A fallback link streams under its own limits, not
    /// the primary's.
    fn stream_settings(&self) -> Option<StreamSettings> {
        None
    }

    /// Tells the provider that a resumed run has already been served
    /// `calls` model calls. Stateless providers ignore it; the scripted
    /// provider moves its cursor, so a replay continues where it stopped.
    fn resume_at(&self, calls: usize) {
        let _ = calls;
    }
}

/// The refusal of a [`continuation`](ModelRequest::continuation) by a
/// provider that does not continue an assistant prefix.
pub fn no_continuation(provider: &str) -> Failure {
    Failure::new(provider, rein_core::Category::InvalidArguments)
        .with_effect(rein_core::Effect::NotApplied)
        .with_human_message(format!(
            "{provider} does not continue an assistant prefix (an OpenAI-compatible provider does when its server does and it says so: continuation = \"prefix\" or \"continue_final_message\")"
        ))
}

/// The refusal of an embedding request by a provider without an
/// embeddings API.
pub fn no_embeddings(provider: &str) -> Failure {
    Failure::new(provider, rein_core::Category::InvalidArguments)
        .with_effect(rein_core::Effect::NotApplied)
        .with_human_message(format!(
            "{provider} has no embeddings API (the Messages API has none): an embedding binding's links must be OpenAI-compatible providers"
        ))
}

//! Model providers behind one trait: `scripted` replays a file of turns,
//! `openai` speaks Chat Completions to any compatible server.
//!
//! # Why one trait
//!
//! The run loop must not care where a turn comes from: a test, the demo and
//! a trace replay use the scripted provider, production uses a real one, and
//! both fail through the same error contract ([`Failure`]) so retries,
//! breakers and budgets treat them alike. Provider calls are layered
//! separately from tool calls: they have their own retry budget and breaker
//! arm, because model overload and tool overload mean different things.

mod message;
mod openai;
mod scripted;

pub use message::{FinishReason, Message, ModelRequest, ModelResponse, TokenUsage, ToolCall};
pub use openai::OpenAiProvider;
pub use scripted::{ScriptError, ScriptedProvider};

use async_trait::async_trait;
use std::time::Duration;

use rein_core::Failure;

/// A source of model turns.
#[async_trait]
pub trait ModelProvider: Send + Sync {
    /// The provider's name, as in config; the target of its failures and
    /// its breaker arm.
    fn name(&self) -> &str;

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

    /// Tells the provider that a resumed run has already been served
    /// `calls` model calls. Stateless providers ignore it; the scripted
    /// provider moves its cursor, so a replay continues where it stopped.
    fn resume_at(&self, calls: usize) {
        let _ = calls;
    }
}

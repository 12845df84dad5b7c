//! The error contract: every failure in rein is a [`Failure`], never a string.
//!
//! # Why
//!
//! Retry, compensation, breakers and the model's next move all depend on a
//! failure having a classifiable shape (seed 000, "Express Failure as a
//! Contract, Not a String"). A failure carries:
//!
//! | field | decides |
//! | --- | --- |
//! | `category` | retry path or degradation path |
//! | `retryable` | whether any automatic retry is allowed |
//! | `retry_after` | the server's requested wait, which beats local backoff |
//! | `effect` | whether it may already have taken effect: lookup by key, compensate |
//! | `model_message` | what the model sees: structured text with an instruction |
//! | `human_message` | what an operator sees: the details |
//! | `attempt_id` | which attempt of the intent failed |
//!
//! The classification happens in two places only — the tool or provider
//! adapter ([`Failure::from_http_status`], [`Failure::from_transport`]) and
//! process boundaries (serde) — and the category is never downgraded to a
//! generic error on the way to the model.

mod category;
mod classify;
mod render;

pub use category::{Category, Effect};
pub use classify::{RetryAfterError, TransportError, TransportPhase, parse_retry_after};

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ids::AttemptId;

/// A classified failure: the error contract shared by tools, providers, the
/// engine and the model feedback.
///
/// Fields are read through accessors so that `model_message` can only be the
/// rendering of the structured fields, never raw error text (invariant 10).
///
/// Deserialization rebuilds the failure from its structured fields through
/// the same constructors, so a failure read from storage or another process
/// cannot carry a forged `model_message` or a retryable rein refusal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "FailureWire")]
pub struct Failure {
    category: Category,
    retryable: bool,
    #[serde(with = "humantime_serde", default)]
    retry_after: Option<Duration>,
    effect: Effect,
    target: String,
    model_message: String,
    human_message: String,
    attempt_id: Option<AttemptId>,
}

/// The serialized form of a [`Failure`]; `model_message` is ignored on the
/// way in and rendered again.
#[derive(Deserialize)]
struct FailureWire {
    category: Category,
    retryable: bool,
    #[serde(with = "humantime_serde", default)]
    retry_after: Option<Duration>,
    effect: Effect,
    target: String,
    #[serde(default)]
    human_message: String,
    #[serde(default)]
    attempt_id: Option<AttemptId>,
}

impl From<FailureWire> for Failure {
    fn from(w: FailureWire) -> Self {
        let mut f = Failure::new(&w.target, w.category)
            .with_effect(w.effect)
            .with_retryable(w.retryable)
            .with_human_message(w.human_message);
        if let Some(wait) = w.retry_after {
            f = f.with_retry_after(wait);
        }
        if let Some(attempt) = w.attempt_id {
            f = f.with_attempt(attempt);
        }
        f
    }
}

impl Failure {
    /// A failure of `target` (a tool, provider or resource name) in
    /// `category`, with the category's default retryability and
    /// [`Effect::NotApplied`].
    pub fn new(target: &str, category: Category) -> Self {
        let mut failure = Failure {
            category,
            retryable: category.is_retryable(),
            retry_after: None,
            effect: Effect::NotApplied,
            target: render::sanitize_target(target),
            model_message: String::new(),
            human_message: String::new(),
            attempt_id: None,
        };
        failure.render();
        failure
    }

    /// Sets whether the effect may have happened.
    pub fn with_effect(mut self, effect: Effect) -> Self {
        self.effect = effect;
        self.render();
        self
    }

    /// Sets the server's requested wait.
    pub fn with_retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = Some(retry_after);
        self.render();
        self
    }

    /// Overrides the category's default retryability. A non-retryable
    /// category cannot be made retryable this way when it would be unsafe:
    /// `cancelled`, `budget_exhausted` and `circuit_open` stay not retryable.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable && self.category.may_be_retried();
        self.render();
        self
    }

    /// Sets the operator-facing explanation; it may hold raw error text
    /// because the model never sees it.
    pub fn with_human_message(mut self, message: impl Into<String>) -> Self {
        self.human_message = message.into();
        self
    }

    /// Sets the attempt that failed.
    pub fn with_attempt(mut self, attempt_id: AttemptId) -> Self {
        self.attempt_id = Some(attempt_id);
        self
    }

    /// A failure for a call refused because a breaker arm is open.
    pub fn circuit_open(target: &str, retry_after: Duration) -> Self {
        Failure::new(target, Category::CircuitOpen)
            .with_retry_after(retry_after)
            .with_human_message(format!(
                "circuit for {target} is open; calls are refused for {retry_after:?}"
            ))
    }

    /// The category.
    pub fn category(&self) -> Category {
        self.category
    }

    /// Whether an automatic retry is allowed at all.
    pub fn retryable(&self) -> bool {
        self.retryable
    }

    /// The wait the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    /// Whether the failed call may have taken effect.
    pub fn effect(&self) -> Effect {
        self.effect
    }

    /// The tool, provider or resource that failed.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The structured text the model sees; never raw error text.
    pub fn model_message(&self) -> &str {
        &self.model_message
    }

    /// The explanation for an operator.
    pub fn human_message(&self) -> &str {
        &self.human_message
    }

    /// The attempt that failed, when known.
    pub fn attempt_id(&self) -> Option<&AttemptId> {
        self.attempt_id.as_ref()
    }

    fn render(&mut self) {
        self.model_message = render::model_message(
            &self.target,
            self.category,
            self.retryable,
            self.retry_after,
            self.effect,
        );
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed: {}", self.target, self.category)?;
        if !self.human_message.is_empty() {
            write!(f, ": {}", self.human_message)?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

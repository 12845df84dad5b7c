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
//! | `tokens_spent` | model tokens a failed model call consumed anyway, so budgets charge them |
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
    /// Stored as `u32` (saturating) so that a `Failure` — the error of
    /// every fallible call in rein — stays within clippy's
    /// `result_large_err` size; no single call spends 4 billion tokens.
    #[serde(default, skip_serializing_if = "is_zero")]
    tokens_spent: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
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
    #[serde(default)]
    tokens_spent: u64,
}

impl From<FailureWire> for Failure {
    fn from(w: FailureWire) -> Self {
        // The human message is taken as stored, not redacted again: it
        // was redacted when the failure was made, and a stored failure
        // must read back the same whatever secrets were registered since.
        let mut f = Failure::new(&w.target, w.category)
            .with_effect(w.effect)
            .with_retryable(w.retryable)
            .with_tokens_spent(w.tokens_spent);
        f.human_message = w.human_message;
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
            tokens_spent: 0,
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
    ///
    /// The text is redacted here ([`crate::redact`]): every upstream body,
    /// transport error and stderr line rein keeps enters through this one
    /// method, so the process's secrets, URL queries and userinfo never
    /// reach a report, an event, the ledger or an API answer.
    pub fn with_human_message(mut self, message: impl Into<String>) -> Self {
        let message = message.into();
        self.human_message = match crate::redact::text(&message) {
            std::borrow::Cow::Borrowed(_) => message,
            std::borrow::Cow::Owned(clean) => clean,
        };
        self
    }

    /// Sets the attempt that failed.
    pub fn with_attempt(mut self, attempt_id: AttemptId) -> Self {
        self.attempt_id = Some(attempt_id);
        self
    }

    /// Sets how many model tokens the failed call consumed before it
    /// failed.
    ///
    /// # Why
    ///
    /// A model stream that dies midway has still been billed for its input
    /// (and whatever output it produced); a budget that charged only
    /// successful calls would be breached silently by a run of failing
    /// ones (invariant 2). Zero, the default, means nothing was consumed
    /// or nothing is known; the count may be an estimate, which the human
    /// message then says. Counts above `u32::MAX` saturate.
    pub fn with_tokens_spent(mut self, tokens: u64) -> Self {
        self.tokens_spent = u32::try_from(tokens).unwrap_or(u32::MAX);
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

    /// Model tokens the failed call consumed anyway; zero when none (or
    /// none are known). See [`with_tokens_spent`](Self::with_tokens_spent).
    pub fn tokens_spent(&self) -> u64 {
        u64::from(self.tokens_spent)
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

#[cfg(test)]
mod tests {
    #[test]
    fn only_transient_provider_failures_fall_back() {
        let falling: Vec<Category> = Category::ALL
            .into_iter()
            .filter(|c| c.falls_back())
            .collect();
        assert_eq!(
            falling,
            vec![
                Category::Transient,
                Category::Timeout,
                Category::RateLimited,
                Category::Overloaded,
                Category::CircuitOpen,
            ]
        );
    }

    use super::*;

    #[test]
    fn tokens_spent_round_trips_and_is_omitted_when_zero() {
        let none = Failure::new("p", Category::Transient);
        let json = serde_json::to_value(&none).unwrap();
        assert!(json.get("tokens_spent").is_none(), "{json}");
        assert_eq!(none.tokens_spent(), 0);

        let spent = Failure::new("p", Category::Timeout).with_tokens_spent(1234);
        let json = serde_json::to_value(&spent).unwrap();
        assert_eq!(json["tokens_spent"], 1234);
        let back: Failure = serde_json::from_value(json).unwrap();
        assert_eq!(back, spent);

        let huge = Failure::new("p", Category::Timeout).with_tokens_spent(u64::MAX);
        assert_eq!(huge.tokens_spent(), u64::from(u32::MAX), "saturates");
    }

    #[test]
    fn failures_serialized_before_tokens_spent_existed_still_read() {
        let old = r#"{"category":"transient","retryable":true,"effect":"not_applied",
            "target":"p","model_message":"x","human_message":"h","attempt_id":null}"#;
        let f: Failure = serde_json::from_str(old).unwrap();
        assert_eq!(f.tokens_spent(), 0);
    }
}

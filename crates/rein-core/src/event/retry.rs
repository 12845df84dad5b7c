//! Payloads of retry decisions, for tool calls and model calls alike.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::breaker::ArmKind;
use crate::failure::Category;
use crate::retry::{GiveUpReason, RetryDecision, SameModelReason, Worth};

/// What is retried: written as `"tool": name` or `"provider": name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RetryTarget {
    /// A tool call.
    Tool(String),
    /// A model call to this provider.
    Provider(String),
}

impl RetryTarget {
    /// The tool's or provider's name.
    pub fn name(&self) -> &str {
        match self {
            RetryTarget::Tool(n) | RetryTarget::Provider(n) => n,
        }
    }
}

/// `retry_scheduled`: a failed attempt will be retried after `delay`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryScheduled {
    /// What is retried.
    #[serde(flatten)]
    pub target: RetryTarget,
    /// The number the next attempt will have.
    pub next_attempt: u32,
    /// The category being retried.
    pub reason: Category,
    /// The wait before it.
    #[serde(rename = "delay_ms", with = "super::millis")]
    pub delay: Duration,
    /// Whether the wait is the server's `Retry-After`.
    pub from_server: bool,
    /// The bound the jitter was drawn from.
    #[serde(rename = "backoff_ceiling_ms", with = "super::millis")]
    pub backoff_ceiling: Duration,
    /// Whether the wait was shortened to fit the deadline.
    pub clamped: bool,
    /// The call's remaining deadline.
    #[serde(rename = "remaining_ms", with = "super::millis")]
    pub remaining: Duration,
    /// For a tool: whether the retry carries the same idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_key: Option<bool>,
    /// Its expected value and cost, when the agent has a
    /// `value_of_success_usd`: the rationale of making it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worth: Option<Worth>,
    /// For a model call with a fallback after it: why the same model is
    /// asked again before the chain falls back (`retry_after`,
    /// `transient`, `timeout`); absent for a retry under the policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_fallback: Option<SameModelReason>,
}

impl RetryScheduled {
    /// The event of a [`RetryDecision::Retry`]; `None` for any other
    /// decision (nothing is scheduled).
    pub fn of(target: RetryTarget, decision: &RetryDecision, remaining: Duration) -> Option<Self> {
        let RetryDecision::Retry {
            delay,
            next_attempt,
            reason,
            from_server,
            backoff_ceiling,
            clamped,
            worth,
        } = decision
        else {
            return None;
        };
        Some(RetryScheduled {
            target,
            next_attempt: *next_attempt,
            reason: *reason,
            delay: *delay,
            from_server: *from_server,
            backoff_ceiling: *backoff_ceiling,
            clamped: *clamped,
            remaining,
            same_key: None,
            worth: *worth,
            before_fallback: None,
        })
    }
}

/// A retry the run stopped rather than the policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopReason {
    /// The run was cancelled between attempts.
    Cancelled,
    /// A breaker arm opened between attempts.
    CircuitOpen {
        /// The arm.
        arm: ArmKind,
        /// Its target.
        name: String,
    },
}

/// The run's own ceiling on model retries: `"run_model_retry_budget"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunModelRetryBudget {
    /// The run spent its model retry allowance (`detail` says which).
    RunModelRetryBudget,
}

/// Why a retry was not made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AbandonReason {
    /// The retry policy gave up.
    GaveUp(GiveUpReason),
    /// The run stopped it.
    Stopped(StopReason),
    /// The run's model retry allowance is spent.
    RunBudget(RunModelRetryBudget),
}

/// `retry_abandoned`: a retry was not made, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetryAbandoned {
    /// What was not retried.
    #[serde(flatten)]
    pub target: RetryTarget,
    /// Attempts made.
    pub attempts: u32,
    /// Why.
    pub reason: AbandonReason,
    /// Which allowance was spent, for [`AbandonReason::RunBudget`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The last failure's category.
    pub category: Category,
}

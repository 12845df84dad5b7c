//! Payloads of tool calls: planned, refused, started, finished, looked up.

use std::num::NonZeroU32;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Flag;
use crate::breaker::ArmKind;
use crate::failure::{Category, Effect};
use crate::ids::IntentId;
use crate::ledger::LedgerStatus;
use crate::tool::ToolClass;

/// One intent of a plan, as `plan_created` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedIntentSummary {
    /// The intent, persisted with the plan.
    pub intent_id: IntentId,
    /// The tool it calls.
    pub tool: String,
    /// The model's id for the call.
    pub call_id: String,
    /// The tool's class; `null` for a tool the agent does not have.
    pub class: Option<ToolClass>,
    /// Whether its arguments were salvaged from a cut output.
    pub salvaged: bool,
}

/// `plan_created`: the model planned a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanCreated {
    /// The proposed calls that became intents.
    pub intents: Vec<PlannedIntentSummary>,
    /// Proposed calls refused before they became intents.
    pub rejected: usize,
}

/// The reason of a call refused by an open breaker: always
/// `"circuit_open"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CircuitOpen {
    /// The breaker arm is open.
    CircuitOpen,
}

/// A call an open breaker refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CircuitRejected {
    /// The arm that is open.
    pub arm: ArmKind,
    /// Its target.
    pub name: String,
    /// `"circuit_open"`.
    pub reason: CircuitOpen,
    /// When the arm admits probes again.
    #[serde(rename = "retry_after_ms", with = "super::millis")]
    pub retry_after: Duration,
    /// Set when another node's opening, shared through the store, refused it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
    /// The node that opened the shared arm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opened_by: Option<String>,
    /// Why it opened there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub open_reason: Option<String>,
}

/// A proposed call refused before it reached the tool: unknown tool,
/// invalid arguments, disabled tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refused {
    /// The tool named.
    pub tool: String,
    /// The model's id for the call, when it was a proposed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    /// The failure's category, when it was a proposed call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
    /// Why, as the model was told.
    pub reason: String,
}

/// `call_rejected`: a call refused before reaching its target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CallRejected {
    /// By an open breaker (has `arm`).
    CircuitOpen(CircuitRejected),
    /// By validation or policy.
    Refused(Refused),
}

/// `tool_call_started`: an attempt of a tool call began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallStarted {
    /// The tool.
    pub tool: String,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// The tool's class.
    pub class: ToolClass,
    /// The time the attempt may take.
    #[serde(rename = "allowance_ms", with = "super::millis")]
    pub allowance: Duration,
    /// The call's remaining deadline.
    #[serde(rename = "remaining_ms", with = "super::millis")]
    pub remaining: Duration,
    /// How long it waited for a slot of its resource group.
    #[serde(rename = "queue_wait_ms", with = "super::millis")]
    pub queue_wait: Duration,
    /// The argument-scale bucket whose profile the allowance follows
    /// (`101-1000`, `10001+`), when the tool declares a `latency.scale`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_bucket: Option<crate::latency::ScaleBucket>,
    /// Who answers for the tool (its `owner`), when it declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// How visible the tool's effect is outside (its `side_effect_tier`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub side_effect_tier: Option<crate::registry::SideEffectTier>,
}

/// A call whose record already had a result: nothing was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallSkipped {
    /// The tool.
    pub tool: String,
    /// Always `true`.
    pub skipped: Flag<true>,
    /// Whether the recorded result is a success.
    pub ok: bool,
    /// The recorded failure's category; `null` for a success.
    pub category: Option<Category>,
    /// The recorded failure's effect; `null` for a success.
    pub effect: Option<Effect>,
    /// The record's status.
    pub ledger: LedgerStatus,
    /// Why nothing was sent.
    pub reason: String,
}

/// A call an interrupt stopped after its declaration, before it was sent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallNotSent {
    /// The tool.
    pub tool: String,
    /// Always `false`.
    pub ok: Flag<false>,
    /// Always `false`.
    pub sent: Flag<false>,
    /// `cancelled`.
    pub category: Category,
    /// `not_applied`.
    pub effect: Effect,
    /// For a human.
    pub reason: String,
}

/// An attempt that succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallSucceeded {
    /// The tool.
    pub tool: String,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// Always `true`.
    pub ok: Flag<true>,
    /// Whether the tool answered from its idempotency record.
    pub replayed: bool,
    /// Whether the result was cut to its size limit.
    pub truncated: bool,
    /// How long the attempt took.
    #[serde(rename = "elapsed_ms", with = "super::millis")]
    pub elapsed: Duration,
}

/// An attempt that failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallFailed {
    /// The tool.
    pub tool: String,
    /// The attempt's number, from 1.
    pub attempt: u32,
    /// Always `false`.
    pub ok: Flag<false>,
    /// The failure's category.
    pub category: Category,
    /// Whether the attempt may have applied.
    pub effect: Effect,
    /// Whether the category is retryable.
    pub retryable: bool,
    /// How long the attempt took.
    #[serde(rename = "elapsed_ms", with = "super::millis")]
    pub elapsed: Duration,
    /// The failure's human message (redacted).
    pub reason: String,
}

/// `tool_call_finished`: an attempt of a tool call ended, or a call ended
/// without one. Shapes are told apart by `skipped`, `sent` and `ok`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ToolCallFinished {
    /// Its record already had a result.
    Skipped(ToolCallSkipped),
    /// Interrupted before it was sent.
    NotSent(ToolCallNotSent),
    /// The attempt succeeded.
    Succeeded(ToolCallSucceeded),
    /// The attempt failed.
    Failed(ToolCallFailed),
}

impl ToolCallFinished {
    /// The tool.
    pub fn tool(&self) -> &str {
        match self {
            ToolCallFinished::Skipped(s) => &s.tool,
            ToolCallFinished::NotSent(s) => &s.tool,
            ToolCallFinished::Succeeded(s) => &s.tool,
            ToolCallFinished::Failed(s) => &s.tool,
        }
    }

    /// Whether the call (or its recorded result) succeeded.
    pub fn ok(&self) -> bool {
        match self {
            ToolCallFinished::Skipped(s) => s.ok,
            ToolCallFinished::Succeeded(_) => true,
            ToolCallFinished::NotSent(_) | ToolCallFinished::Failed(_) => false,
        }
    }

    /// The failure's category, for a call that failed.
    pub fn category(&self) -> Option<Category> {
        match self {
            ToolCallFinished::Skipped(s) => s.category,
            ToolCallFinished::NotSent(s) => Some(s.category),
            ToolCallFinished::Succeeded(_) => None,
            ToolCallFinished::Failed(s) => Some(s.category),
        }
    }
}

/// `concurrency_wait_expired`: an attempt waited for a slot of its
/// resource group until its deadline and was not made.
///
/// No longer written: a call the governor does not let through is a
/// `call_shed` (reason `wait_expired`), whichever attempt it is. Kept so
/// that event logs written by earlier versions still read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConcurrencyWaitExpired {
    /// The tool.
    pub tool: String,
    /// The attempt that was not made.
    pub attempt: u32,
    /// The tool's resource group.
    pub resource_group: String,
    /// The group's ceiling.
    pub max_concurrency: NonZeroU32,
    /// How long it waited.
    #[serde(rename = "queue_wait_ms", with = "super::millis")]
    pub queue_wait: Duration,
}

/// `idempotency_lookup`: a maybe-applied write was looked up by its key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdempotencyLookup {
    /// The tool.
    pub tool: String,
    /// Whether the lost attempt had applied; `null` when the lookup itself
    /// failed.
    pub found: Option<bool>,
    /// Set when the found result is used instead of re-executing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collapsed: Option<bool>,
    /// The lookup's own failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lookup_failure: Option<Category>,
    /// What follows, for a human.
    pub reason: String,
}

//! Payloads of the control layer: budgets, breakers, the loop guard.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::breaker::{ArmKind, Transition};
use crate::deadline::{Exhausted, Usage};
use crate::loop_guard::Trip;

/// How a budget was shared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocationShape {
    /// Calls of one step run side by side and divide the remainder.
    Parallel,
}

/// `budget_allocated`: a share of the budget was given to calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetAllocated {
    /// How it was shared.
    pub shape: AllocationShape,
    /// How many shares.
    pub branches: usize,
    /// Each share's time; `null` when there is none.
    #[serde(rename = "each_ms", with = "super::millis::option")]
    pub each: Option<Duration>,
    /// The remainder that was shared.
    #[serde(rename = "remaining_ms", with = "super::millis")]
    pub remaining: Duration,
}

/// Where a budget ceiling was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BudgetScope {
    /// Between steps.
    Run,
    /// After a model turn was charged.
    ModelTurn,
    /// Before or after one model call.
    ModelCall,
    /// Before one tool call (the call is refused; the run goes on).
    ToolCall,
}

/// `budget_exhausted`: a budget ceiling was reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetExhausted {
    /// Where.
    pub scope: BudgetScope,
    /// Which ceiling, with what was needed and left.
    pub exhausted: Exhausted,
    /// The tool, for [`BudgetScope::ToolCall`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// What the run had used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub used: Option<Usage>,
    /// Calls the model proposed that were not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proposed_calls_not_run: Option<usize>,
    /// Why, when the numbers alone do not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The next prompt's size, at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_at_least: Option<u64>,
    /// The smallest answer rein asks room for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_output_tokens: Option<u64>,
}

/// `final_turn_requested`: the budget was too short for another tool
/// round trip, so the model is asked once more, without tools, for its
/// final answer ([`crate::budget_view`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalTurnRequested {
    /// Which dimension was short, what one more round trip needed and what
    /// was left.
    pub short: Exhausted,
    /// Why, for a human.
    pub reason: String,
    /// What the run had left, in the note the model was given.
    pub note: String,
    /// The most output tokens the last turn may produce (`None`: nothing
    /// but the model's own cap limits it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

impl BudgetExhausted {
    /// A ceiling reached in `scope`, with nothing else to say.
    pub fn new(scope: BudgetScope, exhausted: Exhausted) -> Self {
        BudgetExhausted {
            scope,
            exhausted,
            tool: None,
            used: None,
            proposed_calls_not_run: None,
            reason: None,
            prompt_tokens_at_least: None,
            min_output_tokens: None,
        }
    }
}

/// `breaker_state_changed`: a breaker arm changed state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BreakerStateChanged {
    /// The arm's kind.
    pub arm: ArmKind,
    /// Its target.
    pub name: String,
    /// The change, with the counts that decided it.
    pub transition: Transition,
}

/// `loop_detected`: the loop guard stopped the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoopDetected {
    /// What tripped it.
    pub trip: Trip,
    /// The same, for a human.
    pub message: String,
}

/// `tool_disabled`: a tool used up its self-heal allowance.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDisabled {
    /// The tool.
    pub tool: String,
    /// Its failures in the run.
    pub failures: u32,
    /// The allowance it used up.
    pub allowance: u32,
}

//! Which guardrail an event records firing: the one list of guardrails,
//! their names, and the events that count for each.
//!
//! # Why one list
//!
//! "Which guardrail is firing most, and on what" (seed 002, "agent-stats
//! --group-by guardrail") is answered by counting events. Counting them
//! by kind alone would mix a breaker refusal with a validation refusal
//! (both `call_rejected`) and the four budget dimensions (all
//! `budget_exhausted`), so the rollup, the stores that index it and the
//! CLI all take the name from [`Guardrail::of`], decided here once from
//! the typed payload.
//!
//! | guardrail | counts | event |
//! | --- | --- | --- |
//! | `budget_steps` | the step ceiling reached | `budget_exhausted` (`exhausted.dimension = steps`) |
//! | `budget_tokens` | the token ceiling reached, for the run or one call | `budget_exhausted` (`tokens`) |
//! | `budget_cost` | the cost ceiling reached | `budget_exhausted` (`cost`) |
//! | `budget_wall_clock` | the deadline reached, or too close for a call | `budget_exhausted` (`wall_clock`) |
//! | `repeated_action` | the loop guard: the same action on the same state | `loop_detected` (`trip.reason`) |
//! | `no_progress` | the loop guard: the state digest stood still | `loop_detected` |
//! | `repeat_failure` | the loop guard: the same failure signature again | `loop_detected` |
//! | `validation` | a proposed call refused before the tool: unknown tool, invalid arguments, disabled tool, policy | `call_rejected` without `arm` |
//! | `breaker` | a call refused by an open breaker arm | `call_rejected` with `arm` |
//! | `fan_out` | a turn proposing more calls than `max_calls_per_turn` | `fan_out_refused` |
//! | `call_shed` | the governor shed a call before it was sent | `call_shed` |
//! | `tool_disabled` | a tool used up its self-heal allowance | `tool_disabled` |
//!
//! Quota refusals and admission refusals happen before a run exists and
//! are not run events; they are counted in metrics, not here.
//!
//! NOTE: the stores backfill events written before they indexed this
//! name with the same table in SQL (SQLite schema v12, PostgreSQL
//! migration `0003_guardrails.sql`); a change here needs a new migration
//! there.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{CallRejected, EventData};
use crate::deadline::Dimension;
use crate::loop_guard::Trip;

/// A guardrail: a mechanism that stops or refuses what an agent does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Guardrail {
    /// The step ceiling.
    BudgetSteps,
    /// The token ceiling.
    BudgetTokens,
    /// The cost ceiling.
    BudgetCost,
    /// The deadline.
    BudgetWallClock,
    /// The loop guard's repeated action.
    RepeatedAction,
    /// The loop guard's no-progress window.
    NoProgress,
    /// The loop guard's repeat-failure breaker.
    RepeatFailure,
    /// Validation and policy before the tool.
    Validation,
    /// An open circuit breaker arm.
    Breaker,
    /// The per-turn fan-out cap.
    FanOut,
    /// The governor shedding a call.
    CallShed,
    /// The self-heal allowance used up.
    ToolDisabled,
}

impl Guardrail {
    /// Every guardrail, in the order of the table above.
    pub const ALL: [Guardrail; 12] = [
        Guardrail::BudgetSteps,
        Guardrail::BudgetTokens,
        Guardrail::BudgetCost,
        Guardrail::BudgetWallClock,
        Guardrail::RepeatedAction,
        Guardrail::NoProgress,
        Guardrail::RepeatFailure,
        Guardrail::Validation,
        Guardrail::Breaker,
        Guardrail::FanOut,
        Guardrail::CallShed,
        Guardrail::ToolDisabled,
    ];

    /// The guardrail whose firing `data` records, if any.
    ///
    /// A `loop_detected` for a budget trip counts nowhere: the engine
    /// records a budget trip as `budget_exhausted`, which counts it once.
    pub fn of(data: &EventData) -> Option<Guardrail> {
        Some(match data {
            EventData::BudgetExhausted(e) => match e.exhausted.dimension {
                Dimension::Steps => Guardrail::BudgetSteps,
                Dimension::Tokens => Guardrail::BudgetTokens,
                Dimension::Cost => Guardrail::BudgetCost,
                Dimension::WallClock => Guardrail::BudgetWallClock,
            },
            EventData::LoopDetected(l) => match l.trip {
                Trip::RepeatedAction { .. } => Guardrail::RepeatedAction,
                Trip::NoProgress { .. } => Guardrail::NoProgress,
                Trip::RepeatFailure { .. } => Guardrail::RepeatFailure,
                Trip::Budget(_) => return None,
            },
            EventData::CallRejected(CallRejected::CircuitOpen(_)) => Guardrail::Breaker,
            EventData::CallRejected(CallRejected::Refused(_)) => Guardrail::Validation,
            EventData::FanOutRefused(_) => Guardrail::FanOut,
            EventData::CallShed(_) => Guardrail::CallShed,
            EventData::ToolDisabled(_) => Guardrail::ToolDisabled,
            _ => return None,
        })
    }

    /// The name as stored, shown and accepted.
    pub fn as_str(self) -> &'static str {
        match self {
            Guardrail::BudgetSteps => "budget_steps",
            Guardrail::BudgetTokens => "budget_tokens",
            Guardrail::BudgetCost => "budget_cost",
            Guardrail::BudgetWallClock => "budget_wall_clock",
            Guardrail::RepeatedAction => "repeated_action",
            Guardrail::NoProgress => "no_progress",
            Guardrail::RepeatFailure => "repeat_failure",
            Guardrail::Validation => "validation",
            Guardrail::Breaker => "breaker",
            Guardrail::FanOut => "fan_out",
            Guardrail::CallShed => "call_shed",
            Guardrail::ToolDisabled => "tool_disabled",
        }
    }

    /// The guardrail named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Guardrail> {
        Guardrail::ALL.into_iter().find(|g| g.as_str() == name)
    }
}

impl fmt::Display for Guardrail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl EventData {
    /// The guardrail this event records firing ([`Guardrail::of`]).
    pub fn guardrail(&self) -> Option<Guardrail> {
        Guardrail::of(self)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;
    use crate::EventKind;

    fn of(kind: EventKind, data: serde_json::Value) -> Option<Guardrail> {
        Guardrail::of(&EventData::decode(kind, data).unwrap())
    }

    #[test]
    fn names_round_trip_and_match_serde() {
        for g in Guardrail::ALL {
            assert_eq!(Guardrail::parse(g.as_str()), Some(g));
            assert_eq!(serde_json::to_value(g).unwrap(), json!(g.as_str()));
        }
        assert_eq!(Guardrail::parse("budget"), None);
    }

    #[test]
    fn payloads_name_their_guardrail() {
        let exhausted = |dimension: &str| json!({"scope": "run", "exhausted": {"dimension": dimension, "needed": 1, "remaining": 0}});
        assert_eq!(
            of(EventKind::BudgetExhausted, exhausted("steps")),
            Some(Guardrail::BudgetSteps)
        );
        assert_eq!(
            of(EventKind::BudgetExhausted, exhausted("wall_clock")),
            Some(Guardrail::BudgetWallClock)
        );
        let rejected = json!({"tool": "t", "reason": "arguments invalid"});
        assert_eq!(
            of(EventKind::CallRejected, rejected),
            Some(Guardrail::Validation)
        );
        let open =
            json!({"arm": "tool", "name": "t", "reason": "circuit_open", "retry_after_ms": 5});
        assert_eq!(of(EventKind::CallRejected, open), Some(Guardrail::Breaker));
        let shed = json!({"tool": "t", "resource_group": "g", "reason": "no_time", "waited_ms": 0});
        assert_eq!(of(EventKind::CallShed, shed), Some(Guardrail::CallShed));
        assert_eq!(of(EventKind::CheckpointWritten, json!({})), None);
    }
}

//! The event stream: every decision rein makes, with its rationale.
//!
//! # Why
//!
//! A mechanism that fires invisibly cannot be told apart from one that never
//! fired (seed 000, "Distinguish a mechanism that failed from a mechanism
//! that never fired"). So every decision — a retry scheduled, a breaker
//! opened, a budget exhausted — is an [`Event`] that carries the five
//! correlation fields (run, intent, step, attempt, idempotency key), a
//! timestamp, and the rationale: the counts, remaining budget, jitter or
//! server hint that led to it. The stream is the primary material for
//! post-mortems and the input of the chaos suite's invariant checker.
//!
//! # Typed payloads
//!
//! Each kind's rationale is a struct ([`EventData`], one variant per
//! [`EventKind`]) shared by the engine that writes it and by resume,
//! metrics, the reconciler, the server, the chaos checker and the CLI that
//! read it. A field renamed on one side is a compile error on the other,
//! not a run that quietly reads nothing:
//!
//! ```
//! # use rein_core::event::ModelCallFailed;
//! // What resume charges back for a failed model call.
//! fn spent(failed: &ModelCallFailed) -> u64 {
//!     failed.tokens_spent
//! }
//! ```
//!
//! ```compile_fail,E0609
//! # use rein_core::event::ModelCallFailed;
//! // A misspelled (or renamed) field does not compile.
//! fn spent(failed: &ModelCallFailed) -> u64 {
//!     failed.token_spent
//! }
//! ```
//!
//! The stored names are pinned by `tests/event_wire.rs`, which decodes an
//! event of every kind and shape as stored before the payloads were typed.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::idempotency::IdempotencyKey;
use crate::ids::{AttemptId, IntentId, RunId};
use crate::timestamp::Timestamp;

mod approval;
mod data;
mod effect;
mod flag;
mod governor;
mod guard;
mod guardrail;
mod latency;
mod millis;
mod model;
mod retry;
mod run;
pub mod schema;
mod tool;

pub use approval::{ApprovalDecided, ApprovalRequested};
pub use data::{DecodeError, EventData};
pub use effect::{
    CompensationFinished, CompensationStarted, HandoffCreated, HandoffDecided, HandoffSummary,
    LedgerRecorded, SettlementStarted,
};
pub use flag::Flag;
pub use governor::{CallShed, ConcurrencyAdjusted, FanOutRefused, RateLimited};
pub use guard::{
    AllocationShape, BreakerStateChanged, BudgetAllocated, BudgetExhausted, BudgetScope,
    FinalTurnRequested, LoopDetected, ToolDisabled,
};
pub use guardrail::Guardrail;
pub use latency::{BaselineSource, LatencyDegraded};
pub use model::{
    LinkName, ModelAnswered, ModelCallFailed, ModelCallFinished, ModelCallResult, ModelCallStarted,
    ModelFallbackUsed, ModelOutputTruncated, ModelQueueWaited, MovedOn, Recovery, StreamRecovered,
    TruncationAction,
};
pub use retry::{
    AbandonReason, RetryAbandoned, RetryScheduled, RetryTarget, RunModelRetryBudget, StopReason,
};
pub use run::{
    AbortedWork, CheckpointWritten, HandOn, PartialSuccessReturned, RunCancelled, RunFailed,
    RunFinished, RunInterrupted, RunResumed, RunStarted,
};
pub use schema::EVENT_SCHEMA;
pub use tool::{
    CallRejected, CircuitOpen, CircuitRejected, ConcurrencyWaitExpired, IdempotencyLookup,
    PlanCreated, PlannedIntentSummary, Refused, ToolCallFailed, ToolCallFinished, ToolCallNotSent,
    ToolCallSkipped, ToolCallStarted, ToolCallSucceeded,
};

/// What an event records. Names are stable: they appear in storage, APIs,
/// metrics and the chaos suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A run began, with its budget.
    RunStarted,
    /// The model planned a turn: its proposed calls, each with an intent id.
    PlanCreated,
    /// A share of the budget was given to a call or child.
    BudgetAllocated,
    /// A model call began.
    ModelCallStarted,
    /// A model call ended, with usage or a failure.
    ModelCallFinished,
    /// A proposed call was refused before reaching the tool (unknown tool,
    /// invalid arguments, disabled tool); the model got a clarification.
    CallRejected,
    /// An attempt of a tool call began (after any wait for a concurrency
    /// slot of its resource group: `queue_wait_ms`).
    ToolCallStarted,
    /// An attempt of a tool call ended.
    ToolCallFinished,
    /// A failed attempt will be retried after a delay.
    RetryScheduled,
    /// A retry was not made, and why.
    RetryAbandoned,
    /// The caller cancelled the run; its forward path stopped.
    RunCancelled,
    /// Infrastructure ended the run from outside: its owner vanished
    /// (`orphaned`) or a queued run failed too many attempts
    /// (`dead_letter`); `data.error_type` says which.
    RunFailed,
    /// An attempt waited for a concurrency slot of its tool's resource
    /// group until the call's deadline and was not made; it failed as a
    /// `timeout` that did not apply.
    ConcurrencyWaitExpired,
    /// A call waited for its resource group's request bucket (`bucket`,
    /// `waited_ms`) before it was sent.
    RateLimited,
    /// The governor shed a call before it was sent (`reason`): no time to
    /// wait for its group, or the wait ran out.
    CallShed,
    /// A resource group's adaptive concurrency limit moved (`old`, `new`,
    /// `reason`).
    ConcurrencyAdjusted,
    /// A turn proposed more calls than the agent's `max_calls_per_turn`
    /// (`proposed`, `cap`); none of them ran, and the model was told to
    /// batch or narrow.
    FanOutRefused,
    /// A model call waited for a slot of its provider's `max_concurrency`
    /// (`queue_wait_ms`), or gave up waiting (`expired: true`).
    ModelQueueWaited,
    /// A model turn was answered by a link other than the binding's
    /// primary (`primary`, `answered`, and the failures that moved it on):
    /// a switch is never silent.
    ModelFallbackUsed,
    /// A turn's structured output was cut (at the output-token limit): a
    /// parse failure, not a generation failure. `calls` says, per tool
    /// call, whether rein salvaged its complete fields (a read) or asked
    /// the model again (a call with side effects is never made from
    /// partial arguments).
    ModelOutputTruncated,
    /// A streamed answer failed after its first token (`cut`, `category`,
    /// `reason`, `sent_chars`) and rein `continued` it on a link that
    /// continues an assistant prefix, `regenerated` it (forwarding only
    /// what extends the text sent), or `failed` to (`failure`): a recovery
    /// is never silent.
    StreamRecovered,
    /// A maybe-applied write was looked up by its idempotency key.
    IdempotencyLookup,
    /// A side effect was declared or its record changed status.
    LedgerRecorded,
    /// A breaker arm changed state.
    BreakerStateChanged,
    /// A budget ceiling was reached.
    BudgetExhausted,
    /// The budget was too short for another tool round trip: one last turn
    /// without tools asks the model for its final answer (`short`,
    /// `reason`, the `note` it was given, its `max_tokens`).
    FinalTurnRequested,
    /// The loop guard stopped the run.
    LoopDetected,
    /// A tool used up its self-heal allowance and is unavailable.
    ToolDisabled,
    /// A checkpoint was written.
    CheckpointWritten,
    /// The run's effects are being settled (compensated or handed off);
    /// durable before the first settlement action, so a resume finishes the
    /// settlement instead of continuing the forward path.
    SettlementStarted,
    /// Compensation of one effect began (durable before the call).
    CompensationStarted,
    /// Compensation of one effect ended: compensated, uncompensatable or
    /// manual. `uncompensatable` carries `"alert": true`.
    CompensationFinished,
    /// The run was handed to a human; the package is in its report.
    HandoffCreated,
    /// The run ended in partial success; its report says what did not complete.
    PartialSuccessReturned,
    /// The run ended.
    RunFinished,
    /// A stopped run continued from its last checkpoint.
    RunResumed,
    /// The run's process is stopping (SIGTERM, SIGINT, a drain that ran
    /// out of grace): the run stopped at a safe point, still `running`
    /// and resumable, its claim released. `data.continue_with` says who
    /// continues it: `any_worker` (a draining server: another process, or
    /// the restarted one, takes it over at once; `data.handed_on` is true)
    /// or `caller` (a stopped `rein run`: only an explicit resume does).
    /// `data.completed_steps` is the steps checkpointed so far.
    RunInterrupted,
    /// A target's recent p99 came out above twice its baseline
    /// (`subject`, `p99_ms`, `baseline_ms`, `baseline_source`): the
    /// downstream is degrading, and allowances sized on the baseline will
    /// time out.
    LatencyDegraded,
    /// A planned call waits for a human's approval (`tool`,
    /// `args_digest`, `why`, `tier`, `expires_at_ms`, `continue_with`): the
    /// run paused durably in `awaiting_approval` before its turn ran.
    ApprovalRequested,
    /// A call that waited was decided (`verdict` approved, rejected or
    /// expired, `by`, `decided_at_ms`, `reason`, `waited_ms`), as the run
    /// read it when it continued.
    ApprovalDecided,
    /// A human decided a ledger record that awaited one (`tool`,
    /// `decision` undone, accepted, compensate or retry, `by`, `reason`,
    /// `from`, `status`; `failed` when the compensation or retry it asked
    /// for did not work; `closed` with the run's new outcome when it was
    /// the last decision a handed-off run awaited).
    HandoffDecided,
}

impl EventKind {
    /// The kind's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::RunStarted => "run_started",
            EventKind::PlanCreated => "plan_created",
            EventKind::BudgetAllocated => "budget_allocated",
            EventKind::ModelCallStarted => "model_call_started",
            EventKind::ModelCallFinished => "model_call_finished",
            EventKind::CallRejected => "call_rejected",
            EventKind::ToolCallStarted => "tool_call_started",
            EventKind::ToolCallFinished => "tool_call_finished",
            EventKind::RetryScheduled => "retry_scheduled",
            EventKind::RetryAbandoned => "retry_abandoned",
            EventKind::ConcurrencyWaitExpired => "concurrency_wait_expired",
            EventKind::RateLimited => "rate_limited",
            EventKind::CallShed => "call_shed",
            EventKind::ConcurrencyAdjusted => "concurrency_adjusted",
            EventKind::FanOutRefused => "fan_out_refused",
            EventKind::ModelQueueWaited => "model_queue_waited",
            EventKind::ModelFallbackUsed => "model_fallback_used",
            EventKind::ModelOutputTruncated => "model_output_truncated",
            EventKind::StreamRecovered => "stream_recovered",
            EventKind::RunCancelled => "run_cancelled",
            EventKind::RunFailed => "run_failed",
            EventKind::IdempotencyLookup => "idempotency_lookup",
            EventKind::LedgerRecorded => "ledger_recorded",
            EventKind::BreakerStateChanged => "breaker_state_changed",
            EventKind::BudgetExhausted => "budget_exhausted",
            EventKind::FinalTurnRequested => "final_turn_requested",
            EventKind::LoopDetected => "loop_detected",
            EventKind::ToolDisabled => "tool_disabled",
            EventKind::CheckpointWritten => "checkpoint_written",
            EventKind::SettlementStarted => "settlement_started",
            EventKind::CompensationStarted => "compensation_started",
            EventKind::CompensationFinished => "compensation_finished",
            EventKind::HandoffCreated => "handoff_created",
            EventKind::PartialSuccessReturned => "partial_success_returned",
            EventKind::RunFinished => "run_finished",
            EventKind::RunResumed => "run_resumed",
            EventKind::RunInterrupted => "run_interrupted",
            EventKind::LatencyDegraded => "latency_degraded",
            EventKind::ApprovalRequested => "approval_requested",
            EventKind::ApprovalDecided => "approval_decided",
            EventKind::HandoffDecided => "handoff_decided",
        }
    }
}

impl fmt::Display for EventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One decision or fact of a run.
///
/// The payload is typed ([`EventData`], one variant per [`EventKind`]);
/// the kind is the payload's ([`Event::kind`]), so the two cannot
/// disagree. On the wire and in the store an event is the flat object it
/// always was — `run_id`, `seq`, `step`, `intent_id`, `attempt_id`,
/// `idempotency_key`, `at_ms`, `kind`, `v` (the schema, [`EVENT_SCHEMA`];
/// absent in schema 1) and `data` — with `data` in the shape of its kind
/// and its keys in sorted order ([`EventData::to_value`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The run.
    pub run_id: RunId,
    /// Position in the run's stream, from 1, gap-free; assigned by the store.
    pub seq: u64,
    /// The step (model turn) the event belongs to; 0 before the first.
    pub step: u32,
    /// The planned action, when the event concerns one.
    pub intent_id: Option<IntentId>,
    /// The attempt, when the event concerns one.
    pub attempt_id: Option<AttemptId>,
    /// The idempotency key of the action, when it has one.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Wall-clock time of the event.
    pub at_ms: Timestamp,
    /// What happened, with its rationale: counts, remaining budget,
    /// delays, reasons.
    pub data: EventData,
}

impl Event {
    /// What the event records: its payload's kind.
    pub fn kind(&self) -> EventKind {
        self.data.kind()
    }
}

/// An event as it is written: the payload as its JSON object, marked with
/// the schema it follows.
#[derive(Serialize)]
struct WireRef<'a> {
    run_id: &'a RunId,
    seq: u64,
    step: u32,
    intent_id: &'a Option<IntentId>,
    attempt_id: &'a Option<AttemptId>,
    idempotency_key: &'a Option<IdempotencyKey>,
    at_ms: Timestamp,
    kind: EventKind,
    v: u32,
    data: Value,
}

/// An event as it is read, before its payload is decoded for its kind.
#[derive(Deserialize)]
struct Wire {
    run_id: RunId,
    seq: u64,
    step: u32,
    intent_id: Option<IntentId>,
    attempt_id: Option<AttemptId>,
    idempotency_key: Option<IdempotencyKey>,
    at_ms: Timestamp,
    kind: EventKind,
    /// Absent in schema 1.
    #[serde(default = "schema_1")]
    v: u32,
    data: Value,
}

fn schema_1() -> u32 {
    1
}

impl Serialize for Event {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let data = self.data.to_value().map_err(serde::ser::Error::custom)?;
        WireRef {
            run_id: &self.run_id,
            seq: self.seq,
            step: self.step,
            intent_id: &self.intent_id,
            attempt_id: &self.attempt_id,
            idempotency_key: &self.idempotency_key,
            at_ms: self.at_ms,
            kind: self.kind(),
            v: EVENT_SCHEMA,
            data,
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Event {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let wire = Wire::deserialize(deserializer)?;
        if wire.v > EVENT_SCHEMA {
            return Err(serde::de::Error::custom(format!(
                "event {} of run {} follows event schema {}, newer than this rein's {EVENT_SCHEMA}: \
                 read it with a newer rein",
                wire.seq, wire.run_id, wire.v
            )));
        }
        let data = EventData::decode(wire.kind, wire.data).map_err(serde::de::Error::custom)?;
        Ok(Event {
            run_id: wire.run_id,
            seq: wire.seq,
            step: wire.step,
            intent_id: wire.intent_id,
            attempt_id: wire.attempt_id,
            idempotency_key: wire.idempotency_key,
            at_ms: wire.at_ms,
            data,
        })
    }
}

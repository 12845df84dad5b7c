//! Which reliability mechanisms a scenario activated, read from its events
//! and the desk's log.
//!
//! # Why count activations
//!
//! A mechanism that never fires under fault injection is untested, and a
//! suite that is green because nothing fired is false safety (seed 000,
//! "measuring mechanism activation rates"). Each scenario names the
//! mechanisms it expects; the suite reports the rate of each across runs.

use std::collections::BTreeSet;

use rein_core::breaker::Transition;
use rein_core::event::{AbandonReason, CallRejected, ToolCallFinished};
use rein_core::retry::GiveUpReason;
use rein_core::{Category, EventData, LedgerStatus, Outcome};
use rein_testkit::order_desk::EffectKind;
use serde::Serialize;

use crate::evidence::Evidence;

/// A mechanism whose activation the suite counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mechanism {
    /// A classified retry was scheduled (tool or model).
    RetryScheduled,
    /// A target's retry budget was spent: fail fast instead of retrying.
    RetryBudgetExhausted,
    /// A circuit breaker opened.
    BreakerOpened,
    /// A call was refused at an open breaker without reaching its target.
    CircuitRejected,
    /// A breaker closed again after its probes succeeded: the target took
    /// traffic back.
    BreakerRecovered,
    /// A duplicate was collapsed by its idempotency key: a lookup found the
    /// lost attempt's result, or the tool replayed a stored result.
    DuplicateCollapsed,
    /// A compensation undid an effect.
    CompensationExecuted,
    /// The loop guard stopped a run that repeated itself or made no
    /// progress.
    LoopGuardTripped,
    /// A run-level budget ran out.
    BudgetExhausted,
    /// A run returned partial success.
    PartialSuccess,
    /// A run was handed to a human with a handoff package.
    HandedOff,
    /// A crashed run was resumed from its checkpoint.
    Resumed,
    /// A proposed call was refused before reaching a tool (unknown tool,
    /// schema violation).
    ValidationRejected,
    /// A call waited for a resource group's concurrency slot.
    ConcurrencyQueued,
    /// A retried submission got the stored response of the first
    /// (`Idempotency-Replayed: true`).
    SubmissionReplayed,
    /// A retried submission was told the first is still in progress (409).
    SubmissionInProgress,
    /// A model turn moved on to a fallback link after a transient failure
    /// of an earlier one (`model_fallback_used`).
    ModelFallback,
    /// A model turn moved on to a larger-context link after a context
    /// overflow (`model_fallback_used` after `context_overflow`).
    ContextFallback,
    /// A turn over its agent's `max_calls_per_turn` was refused whole.
    FanOutRefused,
    /// The governor shed a call it could not admit in time (`call_shed`):
    /// never declared, never sent.
    CallShed,
    /// A call waited for a human's approval (`approval_requested`): the run
    /// paused before anything of its turn was sent.
    ApprovalAwaited,
}

impl Mechanism {
    /// Every mechanism, in table order.
    pub const ALL: [Mechanism; 21] = [
        Mechanism::RetryScheduled,
        Mechanism::RetryBudgetExhausted,
        Mechanism::BreakerOpened,
        Mechanism::CircuitRejected,
        Mechanism::BreakerRecovered,
        Mechanism::DuplicateCollapsed,
        Mechanism::CompensationExecuted,
        Mechanism::LoopGuardTripped,
        Mechanism::BudgetExhausted,
        Mechanism::PartialSuccess,
        Mechanism::HandedOff,
        Mechanism::Resumed,
        Mechanism::ValidationRejected,
        Mechanism::ConcurrencyQueued,
        Mechanism::SubmissionReplayed,
        Mechanism::SubmissionInProgress,
        Mechanism::ModelFallback,
        Mechanism::ContextFallback,
        Mechanism::FanOutRefused,
        Mechanism::CallShed,
        Mechanism::ApprovalAwaited,
    ];

    /// The ones issue 5 requires to fire at least once across the suite.
    pub const REQUIRED: [Mechanism; 8] = [
        Mechanism::RetryScheduled,
        Mechanism::RetryBudgetExhausted,
        Mechanism::BreakerOpened,
        Mechanism::DuplicateCollapsed,
        Mechanism::CompensationExecuted,
        Mechanism::LoopGuardTripped,
        Mechanism::BudgetExhausted,
        Mechanism::PartialSuccess,
    ];

    /// Its name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::RetryScheduled => "retry_scheduled",
            Mechanism::RetryBudgetExhausted => "retry_budget_exhausted",
            Mechanism::BreakerOpened => "breaker_opened",
            Mechanism::CircuitRejected => "circuit_rejected",
            Mechanism::BreakerRecovered => "breaker_recovered",
            Mechanism::DuplicateCollapsed => "duplicate_collapsed",
            Mechanism::CompensationExecuted => "compensation_executed",
            Mechanism::LoopGuardTripped => "loop_guard_tripped",
            Mechanism::BudgetExhausted => "budget_exhausted",
            Mechanism::PartialSuccess => "partial_success",
            Mechanism::HandedOff => "handed_off",
            Mechanism::Resumed => "resumed",
            Mechanism::ValidationRejected => "validation_rejected",
            Mechanism::ConcurrencyQueued => "concurrency_queued",
            Mechanism::SubmissionReplayed => "submission_replayed",
            Mechanism::SubmissionInProgress => "submission_in_progress",
            Mechanism::ModelFallback => "model_fallback",
            Mechanism::ContextFallback => "context_fallback",
            Mechanism::FanOutRefused => "fan_out_refused",
            Mechanism::CallShed => "call_shed",
            Mechanism::ApprovalAwaited => "approval_awaited",
        }
    }
}

impl std::fmt::Display for Mechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The mechanisms `evidence` shows activated.
pub fn activated(evidence: &Evidence) -> BTreeSet<Mechanism> {
    let mut set = BTreeSet::new();
    for run in &evidence.runs {
        for e in &run.events {
            let m = match &e.data {
                EventData::RetryScheduled(_) => Some(Mechanism::RetryScheduled),
                EventData::FanOutRefused(_) => Some(Mechanism::FanOutRefused),
                EventData::CallShed(_) => Some(Mechanism::CallShed),
                EventData::ApprovalRequested(_) => Some(Mechanism::ApprovalAwaited),
                EventData::RetryAbandoned(r)
                    if r.reason == AbandonReason::GaveUp(GiveUpReason::RetryBudgetExhausted) =>
                {
                    Some(Mechanism::RetryBudgetExhausted)
                }
                EventData::BreakerStateChanged(b)
                    if matches!(b.transition, Transition::Opened { .. }) =>
                {
                    Some(Mechanism::BreakerOpened)
                }
                EventData::BreakerStateChanged(b)
                    if matches!(b.transition, Transition::Closed { .. }) =>
                {
                    Some(Mechanism::BreakerRecovered)
                }
                EventData::CallRejected(CallRejected::CircuitOpen(_)) => {
                    Some(Mechanism::CircuitRejected)
                }
                // Validation refusals carry the category the model is told
                // (the irreversible-sibling gate does not).
                EventData::CallRejected(CallRejected::Refused(r))
                    if matches!(
                        r.category,
                        Some(Category::InvalidArguments | Category::NotFound)
                    ) =>
                {
                    Some(Mechanism::ValidationRejected)
                }
                EventData::IdempotencyLookup(l) if l.collapsed == Some(true) => {
                    Some(Mechanism::DuplicateCollapsed)
                }
                EventData::ToolCallFinished(ToolCallFinished::Succeeded(f)) if f.replayed => {
                    Some(Mechanism::DuplicateCollapsed)
                }
                EventData::ToolCallStarted(s) if !s.queue_wait.is_zero() => {
                    Some(Mechanism::ConcurrencyQueued)
                }
                EventData::CompensationFinished(c) if c.status == LedgerStatus::Compensated => {
                    Some(Mechanism::CompensationExecuted)
                }
                EventData::LoopDetected(_) => Some(Mechanism::LoopGuardTripped),
                EventData::BudgetExhausted(_) => Some(Mechanism::BudgetExhausted),
                EventData::PartialSuccessReturned(_) => Some(Mechanism::PartialSuccess),
                EventData::HandoffCreated(_) => Some(Mechanism::HandedOff),
                EventData::RunResumed(_) => Some(Mechanism::Resumed),
                // The failure that moved the turn on decides which chain
                // fired: `after` lists each link left, with its category.
                EventData::ModelFallbackUsed(f) => Some(
                    if f.after
                        .iter()
                        .any(|a| a.category == Category::ContextOverflow)
                    {
                        Mechanism::ContextFallback
                    } else {
                        Mechanism::ModelFallback
                    },
                ),
                _ => None,
            };
            set.extend(m);
        }
        if let Some(report) = &run.report {
            match report.outcome {
                Outcome::PartialSuccess => {
                    set.insert(Mechanism::PartialSuccess);
                }
                Outcome::BudgetExhausted => {
                    set.insert(Mechanism::BudgetExhausted);
                }
                Outcome::HandedOff => {
                    set.insert(Mechanism::HandedOff);
                }
                _ => {}
            }
        }
    }
    for attempt in &evidence.submissions {
        if attempt.replayed {
            set.insert(Mechanism::SubmissionReplayed);
        }
        if attempt.status == Some(409) {
            set.insert(Mechanism::SubmissionInProgress);
        }
    }
    // The desk's own log: a retried keyed write it deduplicated.
    if evidence
        .desk
        .side_effects
        .iter()
        .any(|e| e.effect == EffectKind::Replayed)
    {
        set.insert(Mechanism::DuplicateCollapsed);
    }
    set
}

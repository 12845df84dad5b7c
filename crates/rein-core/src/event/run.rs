//! Payloads of a run's lifecycle: started, resumed, interrupted, cancelled,
//! failed from outside, finished.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::deadline::{BudgetLimits, Remaining, Usage};
use crate::outcome::{Outcome, ResumeMarker};

/// `run_started`: the agent, its model and the budget the run began with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunStarted {
    /// The agent's name.
    pub agent: String,
    /// Its model.
    pub model: String,
    /// Its provider's name.
    pub provider: String,
    /// The ceilings the run began with.
    pub budget: BudgetLimits,
    /// The tools it may call.
    pub tools: Vec<String>,
    /// The task.
    pub input: String,
    /// Whether the run was queued before it started (a worker claimed it)
    /// rather than started by its caller.
    pub enqueued: bool,
    /// The digest of what the model was shown (system prompt and tool
    /// definitions), `sha256:…`: a resume compares it with its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contract: Option<String>,
    /// The config file (or directory) the run was started from, as an
    /// absolute path, when its engine was given one: `rein resume RUN`
    /// finds it here, so the command rein prints needs no `--config`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<String>,
}

/// `run_resumed`: a stopped run continued from its last checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResumed {
    /// How it continued: the step, what was skipped and what replayed.
    pub marker: ResumeMarker,
    /// What was left of the budget when it continued.
    pub remaining: Remaining,
    /// Leases of the run's calls taken back from their dead holder.
    pub reclaimed_leases: usize,
    /// Leases still held by another live holder.
    pub leases_left: usize,
}

/// What a cancellation stopped in the middle of, when not a step boundary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AbortedWork {
    /// A model call in flight.
    ModelCall,
}

/// `run_cancelled`: the caller cancelled the run; its forward path stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunCancelled {
    /// Who cancelled, for a human.
    pub reason: String,
    /// Set when the cancellation was seen between steps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_step_boundary: Option<bool>,
    /// What was aborted, when the cancellation cut work short.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aborted: Option<AbortedWork>,
    /// The provider of an aborted model call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
}

/// `run_failed`: infrastructure ended the run from outside.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFailed {
    /// `orphaned`, `dead_letter` or `internal` ([`crate::report`]).
    pub error_type: String,
    /// What happened, for a human.
    pub reason: String,
}

/// Who continues a run its process stopped (`run_interrupted`).
///
/// # Why it is recorded
///
/// A server that resumed the user's Ctrl-C'd `rein run` would continue it
/// with the server's bindings and environment, and the `rein resume` the
/// user was told to type would then fail or find it done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HandOn {
    /// Any process sharing the store continues it at once: a draining
    /// server's runs go to its peers (or to itself, restarted).
    AnyWorker,
    /// Only an explicit resume continues it (`rein resume`, or
    /// `POST /v1/runs/{id}/resume`): a stopped `rein run` stays the user's.
    Caller,
}

impl HandOn {
    /// Its name in `run_interrupted` events.
    pub fn as_str(self) -> &'static str {
        match self {
            HandOn::AnyWorker => "any_worker",
            HandOn::Caller => "caller",
        }
    }
}

/// `run_interrupted`: the run's process is stopping; the run stopped at a
/// safe point, still `running` and resumable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInterrupted {
    /// Why, for a human.
    pub reason: String,
    /// Whether another process takes it over at once.
    pub handed_on: bool,
    /// Who continues it. Absent in events written before it existed
    /// ([`RunInterrupted::hand_on`] reads those).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_with: Option<HandOn>,
    /// Whether it can be resumed (always, today).
    pub resumable: bool,
    /// The steps checkpointed so far.
    pub completed_steps: u32,
}

impl RunInterrupted {
    /// Who continues the run: `continue_with`, or, for events written
    /// before it existed, `handed_on: true` as [`HandOn::AnyWorker`].
    pub fn hand_on(&self) -> Option<HandOn> {
        self.continue_with
            .or(self.handed_on.then_some(HandOn::AnyWorker))
    }
}

/// `partial_success_returned`: the run ended in partial success.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartialSuccessReturned {
    /// Actions that completed.
    pub completed: usize,
    /// Actions that did not.
    pub incomplete: usize,
    /// Whether a resume could still complete them.
    pub recoverable: bool,
}

/// `run_finished`: the run ended, with its outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunFinished {
    /// How it ended.
    pub outcome: Outcome,
    /// Steps it took.
    pub steps: u32,
    /// What it consumed.
    pub consumed: Usage,
    /// How long it ran.
    #[serde(rename = "elapsed_ms", with = "super::millis")]
    pub elapsed: Duration,
    /// Whether a resume could still complete it.
    pub recoverable: bool,
}

/// `checkpoint_written`: a checkpoint was written. Not emitted today (the
/// checkpoint is the step commit itself); kept so the kind decodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CheckpointWritten {}

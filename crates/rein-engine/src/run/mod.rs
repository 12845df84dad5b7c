//! The run loop: model turn → validate → plan (intent ids persisted) →
//! guarded calls → facts or placeholders back to the model → loop guard →
//! checkpoint → … until the model answers or a guard ends the run.
//!
//! # Why this shape
//!
//! The model writes the control flow at run time, so every guarantee has
//! to be enforced here, per step, in code: one deadline and one triple
//! budget checked before each step, validation before any tool sees a call,
//! the ledger written before any side effect, classified retries inside a
//! breaker, and an explicit outcome when anything stops the loop. The loop
//! never returns an unstructured error for something that happened during
//! the run: it ends with a [`RunReport`](rein_core::RunReport).
//!
//! # Where each part of a run lives
//!
//! A run's life, in the order it happens, and the module of each part:
//!
//! ```text
//! engine       Engine, EngineBuilder: what every run of a process shares
//! start        Engine::run: the run's record, its claim, its first state
//! resume       Engine::resume: the records read, the claim, the run reopened
//!   restore      pure: stored records → loop state, or NotResumable(reason)
//! claim        one driver per run: claim, ClaimGuard
//! heartbeat    every claim of the process renewed (and its cancel read)
//!              by one task, in one call per beat
//! ctx          one run's context, shared by its concurrent calls
//! step         the loop: drive → step → handle_boundary, handle_turn,
//!              handle_plan, handle_results, handle_observation
//!   turn         the model turn along the model chain
//!   validate     one proposed call, before any tool sees it
//!   execute      a turn's planned calls on a divided budget (guarded)
//!   checkpoint   what a step makes durable
//! conclude     the end: settlement, report, final record
//!   settle/      partial-failure decision, compensation, handoff package
//! hand_on      an interrupted run handed on, unfinished
//! durable      commits offered again while the store is briefly away;
//!              ledger marks held until it is back
//! health       health memory in the model's view: notes on tools refused now
//! latency      observed latency: recorded per call, planned with, shared
//!              through the store
//! contain      a panic caught at the run's boundary
//! close        closing a run from outside (orphaned, dead-lettered; the
//!              decisions are `crate::recovery`'s)
//! tree         agent trees: live runs, lineage (the agent tool itself is
//!              `crate::tool::agent`)
//! ```

mod approval;
mod approval_wait;
mod args;
mod arm_view;
mod binding;
mod checkpoint;
pub(crate) mod child_stack;
mod claim;
mod close;
mod conclude;
mod concurrency;
mod contain;
mod ctx;
mod durable;
mod emitter;
mod engine;
mod error;
mod event_log;
mod execute;
mod fan_out;
mod final_turn;
#[cfg(test)]
mod fixture;
mod group_use;
mod guarded;
mod hand_on;
mod handle;
mod health;
mod heartbeat;
mod latency;
mod model_chain;
mod permit;
mod progress;
mod report;
mod restore;
mod resume;
mod retry_memory;
mod retry_refused;
mod retry_worth;
mod settle;
mod shared_breakers;
mod start;
mod step;
mod tree;
mod tree_settle;
mod turn;
mod validate;

pub use approval_wait::{Approver, DECISION_POLL};
pub use args::{ParsedArgs, parse_args};
pub use arm_view::ArmView;
pub use binding::{
    AcceptAll, AgentBinding, AgentTarget, ArgValidator, DEFAULT_ALLOWANCE_FACTOR, Declared,
    ModelLink, ToolBinding, ToolTarget,
};
pub use close::{Closing, close_run};
pub use concurrency::{DEFAULT_SHARE_RENEWAL, SHARE_LEASE_TTL_RENEWALS};
pub use durable::STORE_PATIENCE;
pub use emitter::{Correlation, Observer};
pub use engine::{Engine, EngineBuilder, http_client};
pub use error::EngineError;
pub use group_use::{GateKind, GroupUse};
pub use guarded::{CallResult, Planned};
pub use hand_on::HandOn;
pub use handle::RunHandle;
pub use latency::{DEFAULT_LATENCY_FLUSH, ToolLatency};
pub use model_chain::ceiling::{PromptMeter, prompt_estimate};
pub use model_chain::tokenizer::Encoding;
pub use model_chain::{
    CountMethod, Cut, MAX_STREAM_RECOVERIES, ModelAnswer, ModelAsk, ModelBinding, ModelError,
    ModelReply, PromptCount, Resume, Resumed, recovering,
};
pub use report::{
    End, REPORT_WRITE_TRIES, closing, is_revision_conflict, revise, revise_stored, tree_records,
};
pub use retry_memory::DEFAULT_RETRY_FLUSH;
pub use retry_refused::RetryTiming;
pub(crate) use retry_worth::not_worth_it;
pub use settle::{CompensationBinding, CompensationCall, STRONG_COMPENSATION_ATTEMPTS};
pub use shared_breakers::DEFAULT_SHARED_BREAKERS_REFRESH;
pub use start::{RunOutput, RunRequest};
pub use tokio_util::sync::CancellationToken;
pub use tree::AgentResolver;
pub use turn::MIN_OUTPUT_TOKENS;

// The names the run's modules share (`super::…`).
use claim::claim_id;
pub(crate) use ctx::{Lineage, RunCtx};
use ctx::{ModelRetryUse, Tree};
pub(crate) use emitter::unix_ms;
use engine::{new_id, provider_target, tool_target};
use guarded::millis;

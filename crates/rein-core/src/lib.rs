//! rein-core: the pure reliability policies of rein.
//!
//! Every mechanism that decides whether, when, how often and under which key
//! an agent's action runs lives here as a deterministic state machine over an
//! injected [`Clock`] and an injected random source. Nothing in
//! this crate does I/O, spawns tasks or reads the clock: the engine reads
//! the clock once per decision, calls a policy, and applies the decision.
//! That makes every rule testable without sleeps or a network.
//!
//! | module | concept |
//! | --- | --- |
//! | [`clock`] | time as an input: `Clock`, `Instant`, `ManualClock` |
//! | [`timestamp`] | wall-clock points in time as stored: `Timestamp` (ms since the epoch) |
//! | [`config`] | validated settings: `ConfigError`, `Ratio`, `Weight` |
//! | [`ids`] | `TenantId`, `RunId`, `IntentId`, `AttemptId` |
//! | [`tool`] | `ToolClass`, `LatencyProfile` |
//! | [`webhook`] | webhook topics, the `Rein-Signature` HMAC, the delivery retry schedule |
//! | [`deadline`] | one deadline and one triple budget per run, inherited by children |
//! | [`failure`] | the error contract: `Failure`, `Category`, `Effect`, classification |
//! | [`retry`] | the retry decision, full jitter, the retry budget |
//! | [`idempotency`] | keys bound to intent over normalized arguments |
//! | [`breaker`] | multi-arm circuit breakers with hysteresis |
//! | [`governor`] | rate limits per resource group, adaptive concurrency, tenant quotas, the fair queue |
//! | [`loop_guard`] | repeated action, no progress, repeat failure, self-heal allowance |
//! | [`event`] | the event stream: every decision with its rationale, one typed payload per kind |
//! | [`model`] | what a model call leaves behind: `FinishReason`, `TokenUsage` |
//! | [`ledger`] | the side-effect ledger's record and state machine |
//! | [`outcome`] | honest outcomes, the run report, the partial-failure policy |
//! | [`approval`] | a human's yes before a call, bound to the arguments sent |
//! | [`handoff`] | the package for a human when automation stops |
//! | [`header`] | the names of the HTTP headers rein sends and reads |
//! | [`call`] | one guarded call as a run remembers it |
//! | [`report`] | the run report, derived from the ledger as it stands |
//! | [`submission`] | an idempotent submission's record, and resolving one whose holder died |
//! | [`redact`] | secrets never leave rein in clear: known values, URL queries and userinfo |
//! | [`registry`] | tools, agents, providers and resource groups: the integrity check and model-facing tool definitions |
//! | [`lint`] | what the model reads about each tool, checked against named rules: `ToolDefinition`, `Rule`, `Finding` |
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod advice;
pub mod approval;
pub mod breaker;
pub mod budget_view;
pub mod call;
pub mod clock;
pub mod config;
pub mod deadline;
pub mod digest;
pub mod event;
pub mod failure;
pub mod governor;
pub mod handoff;
pub mod header;
pub mod idempotency;
pub mod ids;
pub mod latency;
pub mod ledger;
pub mod lint;
pub mod loop_guard;
pub mod model;
pub mod outcome;
pub mod output_cap;
pub mod output_field;
pub mod redact;
pub mod registry;
pub mod report;
pub mod retry;
pub mod submission;
pub mod timestamp;
pub mod token_ratio;
pub mod tool;
pub mod webhook;

pub use clock::{Clock, Instant, ManualClock};
pub use config::{ConfigError, MAX_DURATION, Ratio, Weight};
pub use event::{Event, EventData, EventKind};
pub use failure::{Category, Effect, Failure};
pub use ids::{AttemptId, IntentId, RunId, TenantId};
pub use ledger::{LedgerRecord, LedgerStatus};
pub use outcome::{FailurePolicy, Outcome, ReportNote, RunReport};
pub use timestamp::Timestamp;
pub use tool::{LatencyProfile, ToolClass};

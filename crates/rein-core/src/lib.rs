//! rein-core: the pure reliability policies of rein.
//!
//! Every mechanism that decides whether, when, how often and under which key
//! an agent's action runs lives here as a deterministic state machine over an
//! injected [`Clock`] and an injected random source. Nothing in
//! this crate does I/O, spawns tasks or reads the clock: the engine reads
//! the clock once per decision, calls a policy, and applies the decision.
//! That makes every rule testable without sleeps or a network.
//!
//! # Which crate to depend on
//!
//! - **This one** when you want the decisions alone: your own loop, your
//!   own I/O, rein's rules (a deadline that never resets, a retry that is
//!   never made for an irreversible tool, a breaker with hysteresis). You
//!   read the clock, call a policy, and do what it says.
//! - **`rein-engine`** when you want the decisions applied for you: the
//!   guarded call, the write-ahead ledger, checkpoints and resume, tool
//!   adapters and model providers, all driven by these policies.
//! - **`rein-tower`** when you want them around a plain `tower::Service`
//!   (an HTTP client) with no run at all.
//!
//! # How the pieces fit
//!
//! A run holds one [`deadline::Budget`] (its deadline plus step, token and
//! cost ceilings). Before each call the engine asks the budget whether the
//! call can still finish ([`deadline::Budget::check`]) and, afterwards,
//! charges what it used ([`deadline::Budget::charge`]). A call that fails
//! is classified into a [`Failure`] (a [`Category`] and an [`Effect`]), and
//! [`retry::RetryPolicy::decide`] turns the failure, the tool's
//! [`ToolClass`] and [`LatencyProfile`] and the *same* deadline into a
//! [`retry::RetryDecision`]. Breakers ([`breaker`]) and the governor
//! ([`governor`]) decide whether a call may start at all; the [`ledger`]
//! records what each side effect became.
//!
//! # Example
//!
//! A budget refusing work it cannot cover, then a retry decision on a
//! [`ManualClock`] and a seeded random source: the same inputs give the
//! same decision, which is what makes these policies testable.
//!
//! ```
//! use std::time::Duration;
//! use rand::SeedableRng;
//! use rein_core::deadline::{Budget, BudgetLimits, Dimension, Need, Usage};
//! use rein_core::retry::{GiveUpReason, RetryBudget, RetryDecision, RetryInput, RetryPolicy};
//! use rein_core::{Category, Clock, Failure, LatencyProfile, ManualClock, ToolClass};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let clock = ManualClock::new();
//!
//! // A run of at most 10 seconds and 2 model turns.
//! let limits = BudgetLimits::new(Duration::from_secs(10))?.with_steps(2)?;
//! let mut budget = Budget::start(limits, clock.now());
//! let next_turn = Need { steps: 1, ..Need::default() };
//! budget.charge(Usage::ONE_STEP, clock.now())?;
//! budget.charge(Usage::ONE_STEP, clock.now())?;
//! // A third turn is refused before it starts, naming the ceiling.
//! let refused = budget.check(&next_turn, clock.now()).map_err(|e| e.dimension);
//! assert_eq!(refused, Err(Dimension::Steps));
//!
//! // A read tool answered 503 after 4 s: retry, with a full-jitter delay
//! // no longer than the first backoff ceiling (250 ms by default).
//! clock.advance(Duration::from_secs(4));
//! let policy = RetryPolicy::default();
//! let mut retry_budget = RetryBudget::new(&policy);
//! let mut rng = rand::rngs::StdRng::seed_from_u64(7);
//! let ms = Duration::from_millis;
//! let latency = LatencyProfile::new(ms(100), ms(300), ms(500), 0)?;
//! let failure = Failure::new("orders", Category::Transient);
//! let mut input = RetryInput {
//!     class: ToolClass::Read,
//!     failure: &failure,
//!     attempt: 1,
//!     deadline: budget.deadline(),
//!     latency,
//!     now: clock.now(),
//!     worth: None,
//! };
//! match policy.decide(&input, &mut retry_budget, &mut rng) {
//!     RetryDecision::Retry { delay, next_attempt, .. } => {
//!         assert!(delay <= policy.backoff_ceiling(1));
//!         assert_eq!(next_attempt, 2);
//!     }
//!     other => return Err(format!("expected a retry, got {other:?}").into()),
//! }
//!
//! // The same failure of an irreversible tool is never retried.
//! input.class = ToolClass::Irreversible;
//! assert_eq!(
//!     policy.decide(&input, &mut retry_budget, &mut rng),
//!     RetryDecision::GiveUp { reason: GiveUpReason::Irreversible },
//! );
//! # Ok(())
//! # }
//! ```
//!
//! # Modules
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
pub mod continuation;
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
pub mod plural;
pub mod redact;
pub mod registry;
pub mod report;
pub mod retry;
pub mod submission;
pub mod timestamp;
pub mod token_ratio;
pub mod tool;
pub mod webhook;
pub mod wire;

pub use clock::{Clock, Instant, ManualClock};
pub use config::{ConfigError, MAX_DURATION, Ratio, Weight};
pub use event::{EVENT_SCHEMA, Event, EventData, EventKind};
pub use failure::{Category, Effect, Failure};
pub use ids::{AttemptId, IntentId, RunId, TenantId};
pub use ledger::{LedgerRecord, LedgerStatus};
pub use outcome::{FailurePolicy, Outcome, ReportNote, RunReport};
pub use timestamp::Timestamp;
pub use tool::{LatencyProfile, ToolClass};

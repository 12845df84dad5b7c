//! The loop guard: repeated action, no progress, repeat failure and the
//! per-tool self-heal allowance.
//!
//! # Why
//!
//! An agent loop fails to converge in three different shapes, and each
//! detection method covers exactly one of them (seed 000, "Loop Stalls and
//! Circuit Breaking"):
//!
//! 1. **Genuine repetition** — the same action with the same arguments, over
//!    and over, usually because a tool returned something the model cannot
//!    digest. Caught by fingerprinting the action:
//!    [`Trip::RepeatedAction`].
//! 2. **No progress** — the actions and the wording change, but nothing new
//!    is learned: the model queries the same page three ways and decides
//!    again that it lacks information. The most expensive shape, since every
//!    step is a real call. Caught by a [`StateDigest`] over what the run
//!    knows — facts obtained, todo list, actions attempted, never the
//!    transcript — standing still: [`Trip::NoProgress`].
//! 3. **Budget exhausted, still not converged** — the loop varies but never
//!    finishes. Only a hard budget stops it; the step, token, cost and
//!    wall-clock ceilings live in [`deadline`](crate::deadline), and their
//!    exhaustion is carried by the run's outcome like a trip here.
//!
//! Two more rules govern failures within a run. The **repeat-failure** rule
//! (seed 002, `RepeatFailureBreaker`) keys on `tool | normalized error`, not
//! on the tool: an agent legitimately calls `run_sql` many times, but must
//! not get the identical lock timeout three times — and "lock timeout on row
//! 4471" and "… 4472" are identical once [`normalize_error`] has collapsed
//! the numbers. The **self-heal allowance** (seed 000, "Inference Retries
//! and Tool Retries Must Be Layered Separately") bounds how many failures of
//! one tool the model may try to fix itself; past it the tool is unavailable
//! for the rest of the run, forcing a degraded path instead of endless
//! probing. It answers "is this call worth another try" within one run; the
//! circuit breaker answers "is this tool broken" across runs.
//!
//! Every trip is a typed [`Trip`] carrying its counts and settings; the
//! engine turns it into an explicit outcome, never a silent truncation.
//!
//! # Rules
//!
//! | rule | counts | trips when |
//! | --- | --- | --- |
//! | repeated action | sightings of `(tool, normalized args, state digest)` | a count exceeds `max_repeats` |
//! | no progress | consecutive observations of one state digest | the streak reaches `no_progress_window` |
//! | repeat failure | sightings of `(tool, normalized error)` | a count exceeds `repeat_failure_threshold` |
//! | self-heal allowance | failures per tool | a tool's failures exceed its allowance: the tool is disabled, the run goes on |
//!
//! The fingerprint includes the state digest, so the same action on a new
//! state starts a new count; returning to an earlier state resumes that
//! state's count (A → B → A with the same action is still a loop).
//!
//! # Defaults
//!
//! | setting | constant | default |
//! | --- | --- | --- |
//! | `max_repeats` | [`DEFAULT_MAX_REPEATS`] | 3 (the 4th identical action trips) |
//! | `no_progress_window` | [`DEFAULT_NO_PROGRESS_WINDOW`] | 4 (the 4th consecutive equal digest trips) |
//! | `repeat_failure_threshold` | [`DEFAULT_REPEAT_FAILURE_THRESHOLD`] | 2 (the 3rd identical failure trips) |
//! | `self_heal_allowance` | [`DEFAULT_SELF_HEAL_ALLOWANCE`] | 2 (the 3rd failure of a tool disables it) |
//! | `self_heal_overrides` | — | none |
//!
//! # Example
//!
//! ```
//! use rein_core::loop_guard::{Action, LoopGuard, LoopGuardConfig, StateDigest, Trip, Verdict};
//! use serde_json::json;
//!
//! let mut guard = LoopGuard::new(LoopGuardConfig::default())?;
//! let args = json!({"url": "https://example.com/prices"});
//! let fetch = Action::new("fetch", &args);
//! // The page never changes, so neither does what the run knows.
//! let state = StateDigest::of(["prices: A-1001 = 25.00"], ["find price of A-1002"], [fetch]);
//! for _ in 0..3 {
//!     assert_eq!(guard.observe(fetch, state), Verdict::Continue);
//! }
//! match guard.observe(fetch, state) {
//!     Verdict::Trip(trip @ Trip::RepeatedAction { .. }) => assert_eq!(trip.as_str(), "repeated_action"),
//!     other => panic!("expected a trip, got {other:?}"),
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod action;
mod config;
mod constants;
mod digest;
mod normalize;
mod state;
mod trip;

pub use action::Action;
pub use config::LoopGuardConfig;
pub use constants::{
    DEFAULT_MAX_REPEATS, DEFAULT_NO_PROGRESS_WINDOW, DEFAULT_REPEAT_FAILURE_THRESHOLD,
    DEFAULT_SELF_HEAL_ALLOWANCE,
};
pub use digest::{FailureSignature, StateDigest, StateDigestBuilder};
pub use normalize::normalize_error;
pub use state::LoopGuard;
pub use trip::{FailureVerdict, Trip, Verdict};

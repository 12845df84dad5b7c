//! The retry decision: whether a failed attempt is tried again, when, or
//! looked up by key first — classified, budgeted, fully jittered, deferring
//! to the server, and never for an irreversible action.
//!
//! # Why
//!
//! A retry is not fault tolerance; it is a guess at a side effect whose
//! outcome is unknown (seed 000, "Retries Presuppose Idempotency"). So the
//! decision reads the tool's class before anything else, and the rules are
//! short-circuits in a fixed order that a refactor cannot scatter:
//!
//! 1. irreversible tool → give up (compensation only; invariant 9);
//! 2. idempotent write whose effect is unknown or applied → look up by key
//!    before any re-execution;
//! 3. non-retryable category → give up;
//! 4. attempt ceiling reached → give up;
//! 5. delay: the server's `Retry-After` if given, else full jitter, uniform on
//!    `[0, min(cap, base · 2^(attempt−1))]` (doubled base for rate limits
//!    without a hint: "no signal" often means too busy to send one);
//! 6. deadline: the same deadline as the first attempt; give up now if the
//!    remainder cannot cover one more median attempt; clamp a local delay so
//!    at least p50 remains; give up if the server's wait does not fit;
//! 7. worth (with a `value_of_success_usd`): give up when the retry's
//!    expected value is below its expected cost ([`worth`](self::Worth));
//! 8. retry budget: retries are at most a share of requests to the target.
//!
//! Backoff time spends budget just like call time does: the clamp in step 6
//! is what keeps "three p99s plus two backoffs" inside the deadline.

mod before_fallback;
mod budget;
mod config;
mod constants;
mod decision;
mod worth;

pub use before_fallback::{
    DEFAULT_RETRY_AFTER_MAX, DEFAULT_RETRY_BEFORE_FALLBACK, MAX_RETRY_AFTER_MAX,
    MAX_RETRY_BEFORE_FALLBACK, SameModel, SameModelReason, SameModelRetry,
};
pub use budget::RetryBudget;
pub use config::{RetryConfig, RetryPolicy};
pub use constants::{
    DEFAULT_BASE_DELAY, DEFAULT_BUDGET_INITIAL, DEFAULT_BUDGET_MAX, DEFAULT_BUDGET_RATIO,
    DEFAULT_MAX_ATTEMPTS, DEFAULT_MAX_DELAY,
};
pub use decision::{GiveUpReason, RetryDecision, RetryInput};
pub use worth::{
    ImpossibleCounts, RETRY_ORDINALS, RETRY_RATE_HALF_LIFE, RetryRecord, SuccessRate, Worth,
    WorthInput,
};

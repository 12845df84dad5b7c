//! The named defaults of the loop guard.
//!
//! NOTE: the defaults table in `mod.rs` and the `Default` impl of
//! `LoopGuardConfig` list these values; change them together.

/// How many times one action fingerprint may be seen before the next sighting
/// trips: the fourth identical action on an identical state is a loop
/// (seed 000, `max_repeat=3`).
pub const DEFAULT_MAX_REPEATS: u32 = 3;

/// How many consecutive observations of one state digest mean no progress
/// (seed 000, `window=4`).
pub const DEFAULT_NO_PROGRESS_WINDOW: u32 = 4;

/// How many times one failure signature may be seen before the next sighting
/// trips: the third identical failure ends the run (seed 002,
/// `threshold=2`).
pub const DEFAULT_REPEAT_FAILURE_THRESHOLD: u32 = 2;

/// How many failures of one tool the model may try to fix itself before the
/// tool is unavailable for the rest of the run (seed 000: "defaulting to one
/// or two").
pub const DEFAULT_SELF_HEAL_ALLOWANCE: u32 = 2;

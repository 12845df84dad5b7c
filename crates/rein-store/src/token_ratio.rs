//! Learned bytes per token, shared across processes: [`TokenRatioRecord`].
//!
//! # Why the store carries them
//!
//! A model's prompt is bounded before the call by the bytes per token its
//! provider was seen to count ([`rein_core::token_ratio`]). Learned in one
//! process only, every `rein run` would start again at one token per byte
//! (about four times what a provider counts) and stop a run at a quarter
//! of its token ceiling. So each process adds what it learned since its
//! last merge (its samples, and the least ratio among them) to the stored
//! ratio of each model, and a new process starts from the sum.
//!
//! A merge adds samples and keeps the least ratio: both are correct
//! however many processes merge and in whatever order, and the table
//! keeps one row per model.

use rein_core::Timestamp;
use rein_core::token_ratio::TokenRatio;

/// One model's stored ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StoredRatio {
    /// Every process's samples, with the least ratio among them.
    pub ratio: TokenRatio,
    /// When a delta was last added (ms since the Unix epoch).
    pub updated_at_ms: Timestamp,
}

/// One model's stored ratio, with its model (`provider/model`).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenRatioRecord {
    /// The model, as `provider/model`.
    pub model: String,
    /// Its ratio.
    pub stored: StoredRatio,
}

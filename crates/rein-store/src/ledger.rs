//! Ledger marks: [`LedgerMark`].

use rein_core::Timestamp;
use rein_core::{Failure, LedgerStatus};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A change to a declared ledger record.
///
/// The store checks `status` against [`LedgerStatus::transition`]; setting
/// the current status again is allowed, so a repeated mark is harmless.
///
/// # Merge rules
///
/// - `result` and `failure` replace the stored value when `Some` and keep it
///   when `None`: marking a succeeded effect `compensated` must not erase
///   the forward result the compensation was computed from.
/// - `attempts` only grows: the stored count becomes the larger of the two,
///   so a late or repeated mark cannot undercount retries.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerMark {
    /// The new status.
    pub status: LedgerStatus,
    /// The tool's result, once succeeded.
    pub result: Option<Value>,
    /// The last failure.
    pub failure: Option<Failure>,
    /// Attempts made so far.
    pub attempts: u32,
    /// When, ms since the Unix epoch.
    pub at_ms: Timestamp,
}

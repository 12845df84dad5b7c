//! What each API key spent on models, per model and UTC day:
//! [`SpendDelta`] added, [`SpendRow`] read back.
//!
//! # Why the store carries it
//!
//! A key's budget (`[[server.api_keys]] budget`) holds for every process
//! serving the store: a team's key that may spend $5 a day spends it once
//! across a cluster, not once per node. So each answered gateway call adds
//! what it consumed to its row — one per tenant, key, model and day — and
//! the check before a call sums the key's rows of the day or month.
//!
//! Rows only grow by addition (`tokens + delta`), so processes adding at
//! once all count, in any order.

use rein_core::TenantId;

use crate::StoreError;

/// Days since the Unix epoch, in UTC: the unit spend is kept in.
pub type Day = u32;

/// The longest key label or model a row holds.
pub const MAX_SPEND_TEXT_LEN: usize = 256;

/// What one call (or several) consumed, to add to its row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendDelta {
    /// The key's tenant.
    pub tenant: TenantId,
    /// The key, by its label (its `name`, or `sha256:` and the first
    /// digits of its digest): never the key.
    pub key: String,
    /// The model that answered, as `provider/model`.
    pub model: String,
    /// The UTC day the call ended on.
    pub day: Day,
    /// Input plus output tokens, as the provider reported them (or, for
    /// an attempt that failed after spending, as received).
    pub tokens: u64,
    /// Their cost, in micro-dollars.
    pub cost_micros: u64,
}

/// One row: a key's spend on one model on one day.
pub type SpendRow = SpendDelta;

/// Which rows [`SpendStore::spend`](crate::SpendStore::spend) reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendQuery {
    /// Only this tenant's keys; `None`: every tenant's.
    pub tenant: Option<TenantId>,
    /// Only this key's rows.
    pub key: Option<String>,
    /// From this day, inclusive.
    pub from_day: Day,
    /// Before this day, exclusive.
    pub until_day: Day,
}

/// Checks a delta before it is written.
///
/// # Errors
///
/// [`StoreError::Invalid`] for an empty or oversized key or model.
pub fn validate_spend(delta: &SpendDelta) -> Result<(), StoreError> {
    for (what, text) in [("spend key", &delta.key), ("spend model", &delta.model)] {
        if text.is_empty() || text.len() > MAX_SPEND_TEXT_LEN {
            return Err(StoreError::Invalid {
                what,
                expected: format!("1 to {MAX_SPEND_TEXT_LEN} bytes"),
                found: format!("{} bytes", text.len()),
            });
        }
    }
    Ok(())
}

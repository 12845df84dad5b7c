//! Shared breaker openings: [`BreakerOpening`].
//!
//! # Why the store carries breaker openings
//!
//! A circuit breaker lives in one process's memory (`rein_core::breaker`).
//! When several `rein serve` processes share one database and call the same
//! provider, each would have to see the outage for itself — five failed
//! calls per node — before it stops calling. Issue 7 asks that breaker
//! state can be shared across nodes through the store: a node whose arm
//! opens publishes the opening, and the others refuse calls to that
//! provider until it ends, without ever having seen a failure.
//!
//! Only the *opening* is shared, not the counts or the half-open probing:
//! each node keeps deciding with its own arm, and a shared opening is an
//! extra "do not call before `open_until_ms`". That keeps the store off the
//! hot path (a node reads the openings at most once per refresh interval)
//! and keeps a store outage from changing what a local breaker decides.
//!
//! | operation | effect |
//! | --- | --- |
//! | [`HealthStore::publish_breaker_open`] | upsert an opening of an arm; the later `open_until_ms` wins |
//! | [`HealthStore::breaker_openings`] | the openings still in force at `now_ms` |
//! | [`HealthStore::clear_breaker_open`] | delete an arm's opening, only by the node that published it |
//!
//! [`HealthStore::publish_breaker_open`]: crate::HealthStore::publish_breaker_open
//! [`HealthStore::breaker_openings`]: crate::HealthStore::breaker_openings
//! [`HealthStore::clear_breaker_open`]: crate::HealthStore::clear_breaker_open

use rein_core::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// The longest arm name or node id accepted, in bytes.
pub const MAX_BREAKER_ARM_LEN: usize = 200;

/// The longest reason kept with an opening, in bytes; a longer one is cut
/// at a character boundary (a reason is for humans, never decided on).
pub const MAX_BREAKER_REASON_LEN: usize = 1_000;

/// One breaker arm's opening, as published by a node.
///
/// # Invariants
///
/// - `arm` and `opened_by` are 1 to [`MAX_BREAKER_ARM_LEN`] bytes without
///   control characters.
/// - `reason` is at most [`MAX_BREAKER_REASON_LEN`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BreakerOpening {
    /// The arm (`provider.openai`: its kind and name).
    pub arm: String,
    /// Until when the arm refuses calls (ms since the Unix epoch,
    /// exclusive: at this time calls may go through again).
    pub open_until_ms: Timestamp,
    /// The node that opened it.
    pub opened_by: String,
    /// Why it opened, for humans (`5 consecutive failures`).
    pub reason: String,
    /// When it was published (ms since the Unix epoch).
    pub updated_at_ms: Timestamp,
}

impl BreakerOpening {
    /// Whether the opening still refuses calls at `now_ms`.
    pub fn is_open(&self, now_ms: Timestamp) -> bool {
        self.open_until_ms > now_ms
    }
}

/// Checks an arm name or node id: 1 to [`MAX_BREAKER_ARM_LEN`] bytes
/// without control characters.
///
/// # Errors
///
/// [`StoreError::Invalid`] naming `what` otherwise.
pub fn validate_breaker_text(what: &'static str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() || value.len() > MAX_BREAKER_ARM_LEN || value.chars().any(char::is_control)
    {
        return Err(StoreError::Invalid {
            what,
            expected: format!("1 to {MAX_BREAKER_ARM_LEN} bytes without control characters"),
            found: format!("{value:?}"),
        });
    }
    Ok(())
}

/// Checks an opening before a backend stores it, and cuts an overlong
/// reason. Every backend calls this on publish.
///
/// # Errors
///
/// [`StoreError::Invalid`] for a malformed arm or node id.
pub fn validate_opening(opening: &BreakerOpening) -> Result<BreakerOpening, StoreError> {
    validate_breaker_text("breaker arm", &opening.arm)?;
    validate_breaker_text("breaker opened_by", &opening.opened_by)?;
    let mut opening = opening.clone();
    if opening.reason.len() > MAX_BREAKER_REASON_LEN {
        let mut end = MAX_BREAKER_REASON_LEN;
        while !opening.reason.is_char_boundary(end) {
            end -= 1;
        }
        opening.reason.truncate(end);
    }
    Ok(opening)
}

/// What a publish does to the `current` opening of its arm: the one that
/// stays open longer is kept whole (its node and reason go with it); a tie
/// goes to the new one. Shared by backends so they decide alike.
pub fn published(current: Option<BreakerOpening>, new: BreakerOpening) -> (BreakerOpening, bool) {
    match current {
        Some(current) if current.open_until_ms > new.open_until_ms => (current, false),
        _ => (new, true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opening(by: &str, until: u64) -> BreakerOpening {
        BreakerOpening {
            arm: "provider.openai".to_owned(),
            open_until_ms: Timestamp::from_millis(until),
            opened_by: by.to_owned(),
            reason: "5 consecutive failures".to_owned(),
            updated_at_ms: Timestamp::from_millis(1),
        }
    }

    #[test]
    fn publish_keeps_the_later_until_whole() {
        let (kept, wrote) = published(Some(opening("a", 100)), opening("b", 90));
        assert_eq!((kept, wrote), (opening("a", 100), false));
        let (kept, wrote) = published(Some(opening("a", 100)), opening("b", 100));
        assert_eq!((kept, wrote), (opening("b", 100), true), "a tie: newest");
        let (kept, wrote) = published(None, opening("b", 90));
        assert_eq!((kept, wrote), (opening("b", 90), true));
    }

    #[test]
    fn validate_opening_wants_sane_names_and_cuts_long_reasons() {
        assert!(validate_opening(&opening("pid:1@h", 1)).is_ok());
        for bad in ["", "a\nb", &"n".repeat(MAX_BREAKER_ARM_LEN + 1)] {
            let mut o = opening(bad, 1);
            assert!(matches!(
                validate_opening(&o),
                Err(StoreError::Invalid {
                    what: "breaker opened_by",
                    ..
                })
            ));
            o.opened_by = "a".to_owned();
            o.arm = bad.to_owned();
            assert!(matches!(
                validate_opening(&o),
                Err(StoreError::Invalid {
                    what: "breaker arm",
                    ..
                })
            ));
        }
        let mut long = opening("a", 1);
        long.reason = "é".repeat(MAX_BREAKER_REASON_LEN);
        let cut = validate_opening(&long).unwrap();
        assert!(cut.reason.len() <= MAX_BREAKER_REASON_LEN);
        assert!(cut.reason.chars().all(|c| c == 'é'));
    }

    #[test]
    fn an_opening_ends_at_its_until() {
        assert!(opening("a", 10).is_open(Timestamp::from_millis(9)));
        assert!(!opening("a", 10).is_open(Timestamp::from_millis(10)));
    }
}

//! Singleton election leases: [`SingletonLease`].
//!
//! # Why singleton leases
//!
//! Several `rein serve` processes may share one database, but some of
//! their work must run in one place only: run reconciliation, ledger
//! reconciliation, idempotency sweeping. Each such periodic service has a
//! name; the process that holds the lease of that name is its owner, until
//! the lease expires (seed 004: leases of 60 s by default, renewed every
//! third of that; a process that fails to renew stops acting as owner
//! until it wins the lease again).
//!
//! These are not the resource [`Lease`](crate::Lease)s of a run: they
//! belong to no run, hold no resource, and nothing reaps them. A lease row
//! simply names the current holder; an expired one is free for anyone to
//! take.
//!
//! | operation | effect |
//! | --- | --- |
//! | [`SingletonStore::claim_singleton`] | take (free or expired) or renew (own, live) the lease; `None` while another owner holds it |
//! | [`SingletonStore::release_singleton`] | give it up, only by its holder |
//! | [`SingletonStore::singleton`] | read the current holder, expired or not |
//!
//! [`SingletonStore::claim_singleton`]: crate::SingletonStore::claim_singleton
//! [`SingletonStore::release_singleton`]: crate::SingletonStore::release_singleton
//! [`SingletonStore::singleton`]: crate::SingletonStore::singleton

use rein_core::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// The longest singleton name or owner accepted, in bytes.
pub const MAX_SINGLETON_LEN: usize = 200;

/// The lease of one singleton service, as stored.
///
/// # Invariants
///
/// - `name` and `owner` are 1 to [`MAX_SINGLETON_LEN`] bytes without
///   control characters.
/// - `acquired_at_ms < expires_at_ms` when written by a claim.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SingletonLease {
    /// The service the lease elects an owner for (`ledger-reconciler`).
    pub name: String,
    /// The process holding it (such as `pid:1234@host`).
    pub owner: String,
    /// When `owner` won the lease (ms since the Unix epoch); renewals keep
    /// it.
    pub acquired_at_ms: Timestamp,
    /// When the lease stops counting: at or after this time anyone may take
    /// it, and its holder must stop acting as owner.
    pub expires_at_ms: Timestamp,
}

impl SingletonLease {
    /// Whether the lease has expired at `now_ms` (expiry is inclusive).
    pub fn is_expired(&self, now_ms: Timestamp) -> bool {
        self.expires_at_ms <= now_ms
    }
}

/// Checks a singleton name or owner: 1 to [`MAX_SINGLETON_LEN`] bytes
/// without control characters.
///
/// # Errors
///
/// [`StoreError::Invalid`] naming `what` otherwise.
pub fn validate_singleton_text(what: &'static str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() || value.len() > MAX_SINGLETON_LEN || value.chars().any(char::is_control) {
        return Err(StoreError::Invalid {
            what,
            expected: format!("1 to {MAX_SINGLETON_LEN} bytes without control characters"),
            found: format!("{value:?}"),
        });
    }
    Ok(())
}

/// Checks the arguments of a claim before any backend stores or looks them
/// up: a sane name and owner, and an expiry after `now_ms`. Every backend
/// calls this on claim.
///
/// # Errors
///
/// [`StoreError::Invalid`] naming the argument that is malformed.
pub fn validate_claim(
    name: &str,
    owner: &str,
    now_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> Result<(), StoreError> {
    validate_singleton_text("singleton name", name)?;
    validate_singleton_text("singleton owner", owner)?;
    if expires_at_ms <= now_ms {
        return Err(StoreError::Invalid {
            what: "singleton expires_at_ms",
            expected: format!("after now_ms ({now_ms})"),
            found: expires_at_ms.to_string(),
        });
    }
    Ok(())
}

/// What a claim does to the `current` lease of its name, if any: `Some`
/// with the lease to store, or `None` when another live owner holds it.
/// Shared by backends so they decide alike.
pub fn claimed(
    current: Option<SingletonLease>,
    name: &str,
    owner: &str,
    now_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> Option<SingletonLease> {
    match current {
        // The holder renews its live lease: its tenure continues.
        Some(lease) if lease.owner == owner && !lease.is_expired(now_ms) => Some(SingletonLease {
            expires_at_ms,
            ..lease
        }),
        Some(lease) if !lease.is_expired(now_ms) => None,
        // Free or expired (even if its own): a new tenure starts now.
        _ => Some(SingletonLease {
            name: name.to_owned(),
            owner: owner.to_owned(),
            acquired_at_ms: now_ms,
            expires_at_ms,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(owner: &str, acquired_at_ms: Timestamp, expires_at_ms: Timestamp) -> SingletonLease {
        SingletonLease {
            name: "sweeper".to_owned(),
            owner: owner.to_owned(),
            acquired_at_ms,
            expires_at_ms,
        }
    }

    #[test]
    fn validate_claim_wants_sane_names_and_a_later_expiry() {
        assert_eq!(
            validate_claim(
                "sweeper",
                "pid:1@h",
                Timestamp::from_millis(10),
                Timestamp::from_millis(11)
            ),
            Ok(())
        );
        let longest = "n".repeat(MAX_SINGLETON_LEN);
        assert_eq!(
            validate_claim(
                &longest,
                &longest,
                Timestamp::from_millis(10),
                Timestamp::from_millis(11)
            ),
            Ok(())
        );
        let too_long = "n".repeat(MAX_SINGLETON_LEN + 1);
        for bad in ["", "a\nb", "tab\there", "\u{7f}", too_long.as_str()] {
            assert!(
                matches!(
                    validate_claim(
                        bad,
                        "pid:1@h",
                        Timestamp::from_millis(10),
                        Timestamp::from_millis(11)
                    ),
                    Err(StoreError::Invalid {
                        what: "singleton name",
                        ..
                    })
                ),
                "{bad:?}"
            );
            assert!(
                matches!(
                    validate_claim(
                        "sweeper",
                        bad,
                        Timestamp::from_millis(10),
                        Timestamp::from_millis(11)
                    ),
                    Err(StoreError::Invalid {
                        what: "singleton owner",
                        ..
                    })
                ),
                "{bad:?}"
            );
        }
        for expires in [0, 9, 10] {
            assert!(matches!(
                validate_claim(
                    "sweeper",
                    "pid:1@h",
                    Timestamp::from_millis(10),
                    Timestamp::from_millis(expires)
                ),
                Err(StoreError::Invalid {
                    what: "singleton expires_at_ms",
                    ..
                })
            ));
        }
    }

    #[test]
    fn claims_take_free_or_expired_leases_and_renew_their_own() {
        assert_eq!(
            claimed(
                None,
                "sweeper",
                "a",
                Timestamp::from_millis(10),
                Timestamp::from_millis(70)
            ),
            Some(lease(
                "a",
                Timestamp::from_millis(10),
                Timestamp::from_millis(70)
            ))
        );
        let held = Some(lease(
            "a",
            Timestamp::from_millis(10),
            Timestamp::from_millis(70),
        ));
        assert_eq!(
            claimed(
                held.clone(),
                "sweeper",
                "a",
                Timestamp::from_millis(30),
                Timestamp::from_millis(90)
            ),
            Some(lease(
                "a",
                Timestamp::from_millis(10),
                Timestamp::from_millis(90)
            )),
            "a renewal keeps acquired_at"
        );
        assert_eq!(
            claimed(
                held.clone(),
                "sweeper",
                "b",
                Timestamp::from_millis(69),
                Timestamp::from_millis(129)
            ),
            None
        );
        assert_eq!(
            claimed(
                held.clone(),
                "sweeper",
                "b",
                Timestamp::from_millis(70),
                Timestamp::from_millis(130)
            ),
            Some(lease(
                "b",
                Timestamp::from_millis(70),
                Timestamp::from_millis(130)
            )),
            "expiry is inclusive"
        );
        assert_eq!(
            claimed(
                held,
                "sweeper",
                "a",
                Timestamp::from_millis(80),
                Timestamp::from_millis(140)
            ),
            Some(lease(
                "a",
                Timestamp::from_millis(80),
                Timestamp::from_millis(140)
            )),
            "an expired lease won again is a new tenure"
        );
    }

    #[test]
    fn expiry_is_inclusive() {
        assert!(
            lease("a", Timestamp::from_millis(1), Timestamp::from_millis(10))
                .is_expired(Timestamp::from_millis(10))
        );
        assert!(
            !lease("a", Timestamp::from_millis(1), Timestamp::from_millis(10))
                .is_expired(Timestamp::from_millis(9))
        );
    }
}

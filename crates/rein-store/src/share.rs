//! Share leases: which nodes currently divide a resource group's limits.
//!
//! # Why share leases
//!
//! A resource group's `rate_per_sec` and `max_concurrency` are what its
//! backend can take, whoever calls. When several `rein serve` or `rein run`
//! processes share a store, each renews a share lease of every group it
//! governs ([`Store::renew_share_lease`]) and runs at its part of the
//! group's limits among the live holders (`rein_core::governor::Members`),
//! so the cluster, not each process, holds the limit. A lease that is not
//! renewed expires: a node that died stops counting after its time to
//! live, and the others take its part back. A node that stops cleanly
//! gives its leases up ([`Store::release_share_lease`]) so the others grow
//! at once.
//!
//! | operation | effect |
//! | --- | --- |
//! | [`Store::renew_share_lease`] | take or renew this node's lease of the group, drop the group's expired ones, and list the live holders — one atomic step |
//! | [`Store::release_share_lease`] | give this node's lease up |
//!
//! These are neither a run's resource [`Lease`](crate::Lease)s nor
//! [`SingletonLease`](crate::SingletonLease)s: many nodes hold one of the
//! same group at once.
//!
//! [`Store::renew_share_lease`]: crate::Store::renew_share_lease
//! [`Store::release_share_lease`]: crate::Store::release_share_lease

use crate::error::StoreError;
use rein_core::Timestamp;

/// The longest group name or node id of a share lease, in bytes.
pub const MAX_SHARE_LEASE_LEN: usize = 200;

/// Checks a group name or node id: 1 to [`MAX_SHARE_LEASE_LEN`] bytes
/// without control characters.
///
/// # Errors
///
/// [`StoreError::Invalid`] naming `what` otherwise.
pub fn validate_share_text(what: &'static str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() || value.len() > MAX_SHARE_LEASE_LEN || value.chars().any(char::is_control)
    {
        return Err(StoreError::Invalid {
            what,
            expected: format!("1 to {MAX_SHARE_LEASE_LEN} bytes without control characters"),
            found: format!("{value:?}"),
        });
    }
    Ok(())
}

/// Checks the arguments of a renewal before any backend stores them.
///
/// # Errors
///
/// [`StoreError::Invalid`] for a malformed group or node, or an expiry not
/// after `now_ms`.
pub fn validate_share_renewal(
    group: &str,
    node: &str,
    now_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> Result<(), StoreError> {
    validate_share_text("share lease group", group)?;
    validate_share_text("share lease node", node)?;
    if expires_at_ms <= now_ms {
        return Err(StoreError::Invalid {
            what: "share lease expires_at_ms",
            expected: format!("a time after now ({now_ms})"),
            found: expires_at_ms.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_refuses_bad_text_and_an_expiry_not_after_now() {
        assert!(
            validate_share_renewal(
                "g",
                "n",
                Timestamp::from_millis(1),
                Timestamp::from_millis(2)
            )
            .is_ok()
        );
        assert!(
            validate_share_renewal(
                "",
                "n",
                Timestamp::from_millis(1),
                Timestamp::from_millis(2)
            )
            .is_err()
        );
        assert!(
            validate_share_renewal(
                "g",
                "a\nb",
                Timestamp::from_millis(1),
                Timestamp::from_millis(2)
            )
            .is_err()
        );
        assert!(
            validate_share_renewal(
                "g",
                &"x".repeat(201),
                Timestamp::from_millis(1),
                Timestamp::from_millis(2)
            )
            .is_err()
        );
        assert!(
            validate_share_renewal(
                "g",
                "n",
                Timestamp::from_millis(2),
                Timestamp::from_millis(2)
            )
            .is_err()
        );
    }
}

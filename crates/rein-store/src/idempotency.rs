//! Durable HTTP idempotency records: [`IdempotencyRecord`],
//! [`IdempotencyState`], [`StoredResponse`] and the [`Reservation`] a
//! request gets.
//!
//! # Why the store keeps them
//!
//! `rein serve` accepts an `Idempotency-Key` header on
//! `POST /v1/agents/{name}/runs` (seed 004): a client that lost the answer
//! may send the same request again and must not start a second run. The
//! answer has to survive a restart of the server and hold across several
//! server processes sharing one store, so the key is reserved durably and
//! atomically before the endpoint runs, and the response is stored when it
//! succeeds.
//!
//! | condition | [`IdempotencyStore::reserve_idempotency`] | the server answers |
//! | --- | --- | --- |
//! | no record, or an expired one (replaced) | [`Reservation::Reserved`] | runs the endpoint |
//! | same fingerprint, [`Completed`] | [`Reservation::Replay`] | the stored status, body, `Content-Type`, `Location` |
//! | same fingerprint, [`InProgress`] | [`Reservation::InProgress`] | 409 |
//! | different fingerprint, any state | [`Reservation::Mismatch`] | 422 |
//!
//! On 2xx the holder completes its record; when the endpoint fails or
//! answers other than 2xx it releases it so a retry can run — unless the
//! run the record names exists, which a release refuses (see below).
//! [`IdempotencyStore::release_idempotency`] and [`IdempotencyStore::complete_idempotency`] do
//! the same without a holder to fence on.
//!
//! # Holders: no key blocked by a process that died
//!
//! A reservation names its [`Holder`] (the process executing the request,
//! for a run the run's id, and until when the holder is taken for alive)
//! in the same write. The holder renews it while it works
//! ([`IdempotencyStore::renew_idempotency`]); a sync submission's run is created only
//! while the reservation is still its holder's ([`IdempotencyStore::create_run_held`]).
//! A process killed between reserving and completing leaves an
//! `in_progress` record whose holder stops renewing; the server resolves
//! it with [`IdempotencyStore::settle_idempotency`], fenced on that holder: completed
//! with an answer from the run when the run exists, released when nothing
//! ran (refused, in the same write, when the run exists after all). A
//! queued submission never leaves one at all: [`IdempotencyStore::submit_queued`]
//! reserves the key, creates the run and stores the answer in one write.
//!
//! ```text
//!   (none | expired) ──reserve──► in_progress ──complete (2xx)──► completed
//!          ▲                          │                               │
//!          └──── release / clear ─────┘        clear / sweep ─────────┘
//! ```
//!
//! # Scope and identity
//!
//! A record is keyed by tenant and key: the same key sent by two tenants
//! names two independent records. The fingerprint is computed by the
//! caller (SHA-256 over method, path and raw body bytes, as lowercase hex)
//! and only compared by the store.
//!
//! # Expiry
//!
//! Each record carries `expires_at_ms`, set at reservation from a retention
//! ([`DEFAULT_IDEMPOTENCY_RETENTION`] unless configured). An expired record
//! (`expires_at_ms <= now`) is treated as absent by a reservation, which
//! replaces it, and is deleted by [`IdempotencyStore::sweep_idempotency`]. A record
//! reserved without a holder that its process left behind blocks its key
//! (409) until it expires, or until an operator finds it with
//! [`IdempotencyStore::idempotency_records`] and deletes it with
//! [`IdempotencyStore::clear_idempotency`].
//!
//! | default | value |
//! | --- | --- |
//! | [`DEFAULT_IDEMPOTENCY_RETENTION`] | 24 h |
//! | [`MAX_IDEMPOTENCY_KEY_LEN`] | 1024 bytes |
//!
//! [`IdempotencyStore::reserve_idempotency`]: crate::IdempotencyStore::reserve_idempotency
//! [`IdempotencyStore::release_idempotency`]: crate::IdempotencyStore::release_idempotency
//! [`IdempotencyStore::complete_idempotency`]: crate::IdempotencyStore::complete_idempotency
//! [`IdempotencyStore::sweep_idempotency`]: crate::IdempotencyStore::sweep_idempotency
//! [`IdempotencyStore::idempotency_records`]: crate::IdempotencyStore::idempotency_records
//! [`IdempotencyStore::clear_idempotency`]: crate::IdempotencyStore::clear_idempotency
//! [`IdempotencyStore::settle_idempotency`]: crate::IdempotencyStore::settle_idempotency
//! [`IdempotencyStore::submit_queued`]: crate::IdempotencyStore::submit_queued
//! [`IdempotencyStore::renew_idempotency`]: crate::IdempotencyStore::renew_idempotency
//! [`IdempotencyStore::create_run_held`]: crate::IdempotencyStore::create_run_held
//! [`Completed`]: IdempotencyState::Completed
//! [`InProgress`]: IdempotencyState::InProgress

use rein_core::Timestamp;
use std::fmt;

use rein_core::{RunId, TenantId};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

// How long a record is kept after its reservation unless configured
// otherwise (24 hours): `server.idempotency.retention`'s default.
pub use rein_core::registry::DEFAULT_IDEMPOTENCY_RETENTION;

/// The longest idempotency key accepted, in bytes: the largest
/// `server.idempotency.max_key_length` a config may set, so that every key
/// the server admits can be stored (a smaller bound here turned keys the
/// config allows into internal errors).
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = rein_core::registry::MAX_KEY_LENGTH;

/// The length of a fingerprint: a SHA-256 digest as hex.
const FINGERPRINT_LEN: usize = 64;

/// Where an idempotency record is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdempotencyState {
    /// Reserved: the endpoint is running (or its process crashed).
    InProgress,
    /// The endpoint answered 2xx and its response is stored.
    Completed,
}

impl IdempotencyState {
    /// The state's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            IdempotencyState::InProgress => "in_progress",
            IdempotencyState::Completed => "completed",
        }
    }

    /// The state named `name`, if any.
    pub fn parse(name: &str) -> Option<IdempotencyState> {
        match name {
            "in_progress" => Some(IdempotencyState::InProgress),
            "completed" => Some(IdempotencyState::Completed),
            _ => None,
        }
    }
}

impl fmt::Display for IdempotencyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The response of a completed request, replayed to a retry of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// The HTTP status; always 2xx (other answers release the key).
    pub status: u16,
    /// The `Content-Type` header, if the response had one.
    pub content_type: Option<String>,
    /// The `Location` header, if the response had one.
    pub location: Option<String>,
    /// The other headers a replay must carry (name, value), in order: the
    /// gateway's `Rein-Model` and `Rein-Fallback`, say. Empty for a record
    /// completed by a rein that did not store them.
    pub headers: Vec<(String, String)>,
    /// The raw body bytes.
    pub body: Vec<u8>,
}

impl StoredResponse {
    /// Checks that the response may be stored: its status is 2xx.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] naming the status otherwise.
    pub fn validate(&self) -> Result<(), StoreError> {
        if (200..300).contains(&self.status) {
            Ok(())
        } else {
            Err(StoreError::Invalid {
                what: "idempotency response status",
                expected: "a 2xx status (other answers release the key)".to_owned(),
                found: self.status.to_string(),
            })
        }
    }
}

/// One idempotency key of one tenant, as stored.
///
/// # Invariants
///
/// - `key` is 1 to [`MAX_IDEMPOTENCY_KEY_LEN`] bytes without control
///   characters; `fingerprint` is 64 lowercase hex digits.
/// - `response` is `Some` exactly when `state` is
///   [`IdempotencyState::Completed`].
/// - `created_at_ms <= updated_at_ms` in normal operation and
///   `created_at_ms < expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyRecord {
    /// The tenant whose key this is.
    pub tenant: TenantId,
    /// The `Idempotency-Key` the client sent.
    pub key: String,
    /// The request's fingerprint (hex SHA-256 over method, path and body).
    pub fingerprint: String,
    /// Whether the request is running or done.
    pub state: IdempotencyState,
    /// The stored response, once completed.
    pub response: Option<StoredResponse>,
    /// When the key was reserved (ms since the Unix epoch).
    pub created_at_ms: Timestamp,
    /// When the record last changed.
    pub updated_at_ms: Timestamp,
    /// When the record stops counting: a reservation at or after this time
    /// replaces it, and the sweeper deletes it.
    pub expires_at_ms: Timestamp,
    /// The process executing the request (a lease owner id, unique per
    /// reservation), when the reservation named one: if it dies, the
    /// record is resolved instead of blocking its key.
    pub owner: Option<String>,
    /// The run the request started (or is about to start), when it starts
    /// one: a replay after its owner died answers from it.
    pub run_id: Option<RunId>,
    /// When the holder reserved the key (the `created_at_ms` of the
    /// reservation that wrote `owner` and `run_id`); `None` in records
    /// written before holders renewed their reservations (schema 7).
    pub holder_since_ms: Option<Timestamp>,
    /// Until when the holder is taken for alive: set at reservation and
    /// pushed forward by [`IdempotencyStore::renew_idempotency`] while it works;
    /// `None` as for `holder_since_ms`.
    ///
    /// [`IdempotencyStore::renew_idempotency`]: crate::IdempotencyStore::renew_idempotency
    pub holder_until_ms: Option<Timestamp>,
}

impl IdempotencyRecord {
    /// Whether the record has expired at `now_ms` (expiry is inclusive).
    pub fn is_expired(&self, now_ms: Timestamp) -> bool {
        self.expires_at_ms <= now_ms
    }

    /// Whether `owner`, `run_id` and `holder_until_ms` belong to this
    /// reservation of the key.
    ///
    /// # Why
    ///
    /// A process of an older rein still running while a newer one
    /// migrated the database replaces an expired record without knowing
    /// the holder columns: the old holder and run would survive on the new
    /// reservation, and a retry would settle it with an unrelated run.
    /// Every reservation of this rein writes `holder_since_ms` equal to its
    /// `created_at_ms`; a record where they differ was reserved by such an
    /// older process, and its holder columns are not believed (it blocks
    /// its key until it expires, as a record without a holder does).
    /// Records written by the previous schema (no `holder_since_ms`) are
    /// believed, as that rein believed them.
    pub fn holder_is_trusted(&self) -> bool {
        self.holder_since_ms
            .is_none_or(|since| since == self.created_at_ms)
    }
}

/// Who holds a reservation: the process executing the request, the run
/// the request starts, and until when the holder is taken for alive,
/// recorded with the reservation in one write so that no moment exists in
/// which the key is reserved by nobody known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The process executing the request: a lease owner id
    /// (`pid:<pid>+<start>@<host>#<token>`), unique per reservation.
    pub owner: String,
    /// The run the request starts, when its id is known before it starts.
    pub run_id: Option<RunId>,
    /// Until when the holder is taken for alive unless it renews
    /// ([`IdempotencyStore::renew_idempotency`]), ms since the Unix epoch.
    ///
    /// [`IdempotencyStore::renew_idempotency`]: crate::IdempotencyStore::renew_idempotency
    pub until_ms: Timestamp,
}

/// The reservation a run's creation is fenced on
/// ([`IdempotencyStore::create_run_held`]): the run is created only while the record
/// of `key` in `tenant` is `owner`'s reservation in progress.
///
/// [`IdempotencyStore::create_run_held`]: crate::IdempotencyStore::create_run_held
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationFence {
    /// The tenant whose key it is.
    pub tenant: TenantId,
    /// The `Idempotency-Key`.
    pub key: String,
    /// The holder the record must still name ([`Holder::owner`]).
    pub owner: String,
}

/// A reservation to make: [`IdempotencyStore::reserve_idempotency_as`] and
/// [`IdempotencyStore::submit_queued`] take it.
///
/// [`IdempotencyStore::reserve_idempotency_as`]: crate::IdempotencyStore::reserve_idempotency_as
/// [`IdempotencyStore::submit_queued`]: crate::IdempotencyStore::submit_queued
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewReservation {
    /// The tenant whose key it is.
    pub tenant: TenantId,
    /// The `Idempotency-Key`.
    pub key: String,
    /// The request's fingerprint (64 lowercase hex digits).
    pub fingerprint: String,
    /// Who holds it, if known.
    pub holder: Option<Holder>,
    /// Now, ms since the Unix epoch.
    pub now_ms: Timestamp,
    /// When the record stops counting; after `now_ms`.
    pub expires_at_ms: Timestamp,
}

/// How an `in_progress` record whose holder is gone is resolved
/// ([`IdempotencyStore::settle_idempotency`](crate::IdempotencyStore::settle_idempotency)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencySettlement {
    /// The request's run exists: store this answer for replays.
    Complete(StoredResponse),
    /// Nothing ran: delete the record, so the key can execute fresh.
    Release,
}

/// What [`IdempotencyStore::settle_idempotency`](crate::IdempotencyStore::settle_idempotency)
/// did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IdempotencySettled {
    /// The settlement applied: the record is completed, or deleted.
    Applied,
    /// Nothing changed: the record is no longer this holder's reservation
    /// in progress (completed, released, or reserved again by another
    /// request meanwhile).
    Superseded,
    /// Nothing changed: a release was refused because the run the record
    /// names exists (it may have made effects; the key must answer from
    /// it, never start a second run).
    RunExists,
}

/// What a reservation of a key found: the decision the server acts on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reservation {
    /// The key was free (or its record expired): it is now reserved
    /// `in_progress` and the caller runs the endpoint.
    Reserved,
    /// The same request completed before: replay its stored response.
    Replay(IdempotencyRecord),
    /// The same request is still running (or its process crashed): 409.
    InProgress(IdempotencyRecord),
    /// The key was used for a different request, in any state: 422.
    Mismatch(IdempotencyRecord),
}

/// Checks the arguments of a reservation before any backend stores or
/// looks them up: the key is 1 to [`MAX_IDEMPOTENCY_KEY_LEN`] bytes without
/// control characters, the fingerprint is 64 lowercase hex digits, and the
/// record expires after `now_ms`. Every backend calls this on reserve.
///
/// # Errors
///
/// [`StoreError::Invalid`] naming the argument that is malformed.
pub fn validate_reservation(
    key: &str,
    fingerprint: &str,
    now_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > MAX_IDEMPOTENCY_KEY_LEN || key.chars().any(char::is_control) {
        return Err(StoreError::Invalid {
            what: "idempotency key",
            expected: format!("1 to {MAX_IDEMPOTENCY_KEY_LEN} bytes without control characters"),
            found: format!("{key:?}"),
        });
    }
    if fingerprint.len() != FINGERPRINT_LEN
        || !fingerprint
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(StoreError::Invalid {
            what: "idempotency fingerprint",
            expected: "64 lowercase hex digits (a SHA-256 digest)".to_owned(),
            found: format!("{fingerprint:?}"),
        });
    }
    if expires_at_ms <= now_ms {
        return Err(StoreError::Invalid {
            what: "idempotency expires_at_ms",
            expected: format!("after now_ms ({now_ms})"),
            found: expires_at_ms.to_string(),
        });
    }
    Ok(())
}

/// A `NotFound` for the record of `key` in `tenant`.
pub fn record_not_found(tenant: &TenantId, key: &str) -> StoreError {
    StoreError::NotFound {
        what: "idempotency record",
        id: format!("{tenant}/{key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn states_round_trip_their_names_and_serde() {
        for state in [IdempotencyState::InProgress, IdempotencyState::Completed] {
            assert_eq!(IdempotencyState::parse(state.as_str()), Some(state));
            assert_eq!(
                serde_json::to_value(state).unwrap(),
                serde_json::Value::String(state.as_str().to_owned())
            );
            assert_eq!(state.to_string(), state.as_str());
        }
        assert_eq!(IdempotencyState::parse("done"), None);
    }

    #[test]
    fn validate_reservation_wants_a_sane_key_a_hex_sha256_and_a_later_expiry() {
        assert_eq!(
            validate_reservation(
                "order-42",
                SHA,
                Timestamp::from_millis(10),
                Timestamp::from_millis(11)
            ),
            Ok(())
        );
        for key in ["", "a\nb", &"k".repeat(MAX_IDEMPOTENCY_KEY_LEN + 1)] {
            assert!(
                matches!(
                    validate_reservation(
                        key,
                        SHA,
                        Timestamp::from_millis(10),
                        Timestamp::from_millis(11)
                    ),
                    Err(StoreError::Invalid {
                        what: "idempotency key",
                        ..
                    })
                ),
                "{key:?}"
            );
        }
        for fingerprint in ["", "abc", &SHA.to_uppercase(), &format!("{}g", &SHA[1..])] {
            assert!(
                matches!(
                    validate_reservation(
                        "k",
                        fingerprint,
                        Timestamp::from_millis(10),
                        Timestamp::from_millis(11)
                    ),
                    Err(StoreError::Invalid {
                        what: "idempotency fingerprint",
                        ..
                    })
                ),
                "{fingerprint:?}"
            );
        }
        assert!(matches!(
            validate_reservation(
                "k",
                SHA,
                Timestamp::from_millis(10),
                Timestamp::from_millis(10)
            ),
            Err(StoreError::Invalid {
                what: "idempotency expires_at_ms",
                ..
            })
        ));
    }

    #[test]
    fn only_2xx_responses_are_stored() {
        let mut response = StoredResponse {
            status: 201,
            content_type: None,
            location: None,
            headers: Vec::new(),
            body: Vec::new(),
        };
        assert_eq!(response.validate(), Ok(()));
        for status in [199, 300, 409, 500] {
            response.status = status;
            assert!(response.validate().is_err(), "{status}");
        }
    }

    #[test]
    fn expiry_is_inclusive() {
        let record = IdempotencyRecord {
            tenant: TenantId::new("acme").unwrap(),
            key: "k".to_owned(),
            fingerprint: SHA.to_owned(),
            state: IdempotencyState::InProgress,
            response: None,
            created_at_ms: Timestamp::from_millis(1),
            updated_at_ms: Timestamp::from_millis(1),
            expires_at_ms: Timestamp::from_millis(10),
            owner: None,
            run_id: None,
            holder_since_ms: None,
            holder_until_ms: None,
        };
        assert!(record.is_expired(Timestamp::from_millis(10)));
        assert!(!record.is_expired(Timestamp::from_millis(9)));
    }

    #[test]
    fn a_holder_written_by_another_reservation_is_not_trusted() {
        let mut record = IdempotencyRecord {
            tenant: TenantId::new("acme").unwrap(),
            key: "k".to_owned(),
            fingerprint: SHA.to_owned(),
            state: IdempotencyState::InProgress,
            response: None,
            created_at_ms: Timestamp::from_millis(5_000),
            updated_at_ms: Timestamp::from_millis(5_000),
            expires_at_ms: Timestamp::from_millis(10_000),
            owner: Some("pid:1@h#t".to_owned()),
            run_id: None,
            holder_since_ms: Some(Timestamp::from_millis(5_000)),
            holder_until_ms: Some(Timestamp::from_millis(6_000)),
        };
        assert!(record.holder_is_trusted());
        // An older rein replaced the expired record, keeping the columns
        // it does not know.
        record.holder_since_ms = Some(Timestamp::from_millis(1_000));
        assert!(!record.holder_is_trusted());
        // Written by schema 7, which had no such column: believed.
        record.holder_since_ms = None;
        assert!(record.holder_is_trusted());
    }
}

//! Cancel requests: [`CancelRequest`], a cancellation that reaches the
//! process driving a run through the store.
//!
//! # Why through the store
//!
//! A run is driven by one process (the holder of its claim), but a cancel
//! may reach any node sharing the store. Recording the request durably
//! lets the driving process see it wherever it runs: at its next claim
//! renewal (every backend), and at once where the backend notifies (a
//! PostgreSQL `NOTIFY`). A request also outlives a driving process that
//! dies: whoever takes the run over sees it at its first renewal.
//!
//! | operation | effect |
//! | --- | --- |
//! | [`Store::request_cancel`] | record the request of a run not finished; the first one is kept |
//! | [`Store::cancel_request`] | read a run's request, if any |
//!
//! [`Store::request_cancel`]: crate::Store::request_cancel
//! [`Store::cancel_request`]: crate::Store::cancel_request

use rein_core::RunId;
use rein_core::Timestamp;
use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::lease::MAX_LEASE_ID_LEN;
use crate::run::RunStatus;

/// The longest `requested_by` accepted, in bytes (a node id).
pub const MAX_CANCEL_REQUESTER_LEN: usize = MAX_LEASE_ID_LEN;

/// A durable request to cancel a run, as stored.
///
/// # Invariants
///
/// - `requested_by` is 1 to [`MAX_CANCEL_REQUESTER_LEN`] bytes without
///   control characters.
/// - At most one per run: a second request keeps the first.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CancelRequest {
    /// The run to cancel.
    pub run_id: RunId,
    /// The node that took the request (its public node id).
    pub requested_by: String,
    /// When it was recorded (ms since the Unix epoch).
    pub requested_at_ms: Timestamp,
}

/// Checks a request before a backend writes it.
///
/// # Errors
///
/// [`StoreError::Invalid`] for an empty `requested_by`, one over
/// [`MAX_CANCEL_REQUESTER_LEN`] bytes or with control characters.
pub fn validate_request(request: &CancelRequest) -> Result<(), StoreError> {
    let by = &request.requested_by;
    if by.is_empty() || by.len() > MAX_CANCEL_REQUESTER_LEN || by.chars().any(char::is_control) {
        return Err(StoreError::Invalid {
            what: "cancel requested_by",
            expected: format!("1 to {MAX_CANCEL_REQUESTER_LEN} bytes without control characters"),
            found: format!("{} bytes", by.len()),
        });
    }
    Ok(())
}

/// What a backend decides from the run's status before recording a
/// request: a finished run refuses it.
///
/// # Errors
///
/// [`StoreError::FinishedRun`] (requested `Finished(Cancelled)`) when the
/// run already ended.
pub fn requestable(run_id: &RunId, status: RunStatus) -> Result<(), StoreError> {
    match status {
        RunStatus::Finished(outcome) => Err(StoreError::FinishedRun {
            run_id: run_id.to_string(),
            outcome,
            requested: RunStatus::Finished(rein_core::Outcome::Cancelled),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn request(by: &str) -> CancelRequest {
        CancelRequest {
            run_id: RunId::new("r-1").unwrap(),
            requested_by: by.into(),
            requested_at_ms: Timestamp::from_millis(1),
        }
    }

    #[test]
    fn requester_must_be_a_short_printable_name() {
        assert!(validate_request(&request("n1")).is_ok());
        assert!(validate_request(&request("")).is_err());
        assert!(validate_request(&request("a\nb")).is_err());
        let long = "x".repeat(MAX_CANCEL_REQUESTER_LEN + 1);
        assert!(validate_request(&request(&long)).is_err());
    }

    #[test]
    fn a_finished_run_refuses_a_request() {
        let id = RunId::new("r-1").unwrap();
        assert!(requestable(&id, RunStatus::Running).is_ok());
        assert!(requestable(&id, RunStatus::Queued).is_ok());
        let err = requestable(&id, RunStatus::Finished(rein_core::Outcome::Failed)).unwrap_err();
        assert!(matches!(err, StoreError::FinishedRun { .. }), "{err}");
    }
}

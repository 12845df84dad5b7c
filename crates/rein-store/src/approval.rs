//! Approvals as stored: the calls paused for a human's decision
//! ([`ApprovalRequest`], written with the step commit that pauses the run),
//! the decision recorded once ([`RunStore::decide_approval`]), listing
//! ([`ApprovalFilter`]) and expiry ([`RunStore::expire_approvals`]).
//!
//! # Why the decision continues the run in the same transaction
//!
//! A run `awaiting_approval` holds no claim and no worker: nothing drives
//! it. The write that records the last missing decision of its turn also
//! moves it back to `running` (claim-free, so any worker of any node takes
//! it over at once), atomically. Two separate writes would let a crash in
//! between leave a decided run that nobody ever continues.
//!
//! | operation | effect |
//! | --- | --- |
//! | [`StepCommit::approvals`] | record the calls a pausing step waits for; a request already stored is kept |
//! | [`RunStore::decide_approval`] | record the first decision; a later one is refused with it ([`StoreError::AlreadyDecided`]) |
//! | [`RunStore::approvals`] | list them, pending or all, by run or tenant |
//! | [`RunStore::expire_approvals`] | record `expired` on those whose window closed |
//!
//! [`RunStore::decide_approval`]: crate::RunStore::decide_approval
//! [`RunStore::approvals`]: crate::RunStore::approvals
//! [`RunStore::expire_approvals`]: crate::RunStore::expire_approvals
//! [`StepCommit::approvals`]: crate::StepCommit::approvals
//! [`StoreError::AlreadyDecided`]: crate::StoreError::AlreadyDecided

use rein_core::approval::{Approval, Decision, Verdict};
use rein_core::{RunId, TenantId, Timestamp};

use crate::error::StoreError;
use crate::run::RunStatus;

pub use rein_core::approval::ApprovalRequest;

/// The most approvals one listing returns.
pub const MAX_APPROVALS_PAGE: usize = 1_000;

/// Which approvals to list: newest request last.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalFilter {
    /// Only this run's.
    pub run_id: Option<RunId>,
    /// Only this tenant's.
    pub tenant: Option<TenantId>,
    /// Only this step's (the calls of one turn).
    pub step: Option<u32>,
    /// Only this call's (with `run_id`: the one approval a call has).
    pub intent_id: Option<rein_core::IntentId>,
    /// Only those without a decision whose run still waits for it, paused
    /// (`awaiting_approval`) or driven by its caller's loop (`running`):
    /// an undecided one whose window closed is listed too (it reads
    /// `expired` until it is recorded so); one of a run that ended while
    /// it waited is not.
    pub pending: bool,
    /// At most this many (capped at [`MAX_APPROVALS_PAGE`]).
    pub limit: usize,
}

/// A decision recorded by [`RunStore::decide_approval`].
///
/// [`RunStore::decide_approval`]: crate::RunStore::decide_approval
#[derive(Debug, Clone, PartialEq)]
pub struct Decided {
    /// The approval, with its decision.
    pub approval: Approval,
    /// Whether this decision was the last its run waited for: the run is
    /// `running` again, claim-free, for a worker to continue.
    pub continues: bool,
}

/// Refuses a decision on a call of a run that ended (cancelled while it
/// waited): nothing of its turn will ever be sent.
///
/// # Errors
///
/// [`StoreError::FinishedRun`] naming its outcome.
pub fn decidable(run_id: &RunId, status: RunStatus) -> Result<(), StoreError> {
    match status.outcome() {
        Some(outcome) => Err(StoreError::FinishedRun {
            run_id: run_id.to_string(),
            outcome,
            requested: RunStatus::Running,
        }),
        None => Ok(()),
    }
}

/// What a backend records for `decision` on `stored` at `now`: the
/// decision, or an expiry when the window closed first (a late "yes" never
/// turns into an approval).
///
/// # Errors
///
/// [`StoreError::AlreadyDecided`] with the stored approval when it already
/// has a decision; [`StoreError::Invalid`] for a decision a human may not
/// record (see [`Decision::validate`]).
pub fn decision_to_record(stored: &Approval, decision: Decision) -> Result<Decision, StoreError> {
    if stored.decision.is_some() {
        return Err(StoreError::AlreadyDecided {
            approval: Box::new(stored.clone()),
        });
    }
    decision.validate().map_err(|why| StoreError::Invalid {
        what: "approval decision",
        expected: "a valid decision".to_owned(),
        found: why,
    })?;
    if decision.verdict != Verdict::Expired && decision.at_ms >= stored.request.expires_at_ms {
        return Ok(Decision::expiry(stored.request.expires_at_ms));
    }
    Ok(decision)
}

/// Checks a request before a backend writes it.
///
/// # Errors
///
/// [`StoreError::Invalid`] when it names another run or its window closes
/// before it opens.
pub fn validate_request(run_id: &RunId, request: &ApprovalRequest) -> Result<(), StoreError> {
    if &request.run_id != run_id {
        return Err(StoreError::Invalid {
            what: "approval request run id",
            expected: run_id.to_string(),
            found: request.run_id.to_string(),
        });
    }
    if request.expires_at_ms <= request.requested_at_ms {
        return Err(StoreError::Invalid {
            what: "approval window",
            expected: "a close after the request".to_owned(),
            found: format!(
                "requested at {} ms, closing at {} ms",
                request.requested_at_ms.as_millis(),
                request.expires_at_ms.as_millis()
            ),
        });
    }
    Ok(())
}

/// The approval `stored` with the expiry of its window recorded, for
/// [`RunStore::expire_approvals`] at `now`; `None` when it is decided or
/// its window is open.
///
/// [`RunStore::expire_approvals`]: crate::RunStore::expire_approvals
pub fn lapsed(stored: &Approval, now: Timestamp) -> Option<Decision> {
    (stored.decision.is_none() && now >= stored.request.expires_at_ms)
        .then(|| Decision::expiry(stored.request.expires_at_ms))
}

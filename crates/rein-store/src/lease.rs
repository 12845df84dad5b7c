//! Resource leases: [`Lease`], [`LeaseKind`], [`LeaseChange`] and
//! [`LeaseFilter`].
//!
//! # Why leases
//!
//! A tool call can leave things behind that outlive it: a subprocess and
//! its children, a temporary directory. Cleaning up at the end of the call
//! does not survive a crash of the process that made the call, so every
//! such resource is registered durably *before* it is created, with an
//! expiry; a reaper (`rein_engine::lease`) later reclaims what an expired
//! lease still holds (seed 000, "Leases and Reclamation").
//!
//! A lease row exists exactly while its resource may exist: releasing
//! deletes it, so the table is the list of resources that may still need
//! reclaiming.

use rein_core::Timestamp;
use std::fmt;
use std::path::PathBuf;

use rein_core::{IntentId, RunId};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// The longest lease id accepted, in bytes (as for rein's other ids).
pub const MAX_LEASE_ID_LEN: usize = 255;

/// What a lease holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum LeaseKind {
    /// A process group (`pgid`): a subprocess and everything it started.
    ProcessGroup,
    /// A temporary file or directory (`path`).
    TempPath,
    /// The claim of a process on a whole run: only one process drives a
    /// run at a time (no `pgid`, no `path`).
    Run,
}

impl LeaseKind {
    /// The kind's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            LeaseKind::ProcessGroup => "process_group",
            LeaseKind::TempPath => "temp_path",
            LeaseKind::Run => "run",
        }
    }

    /// The kind named `name`, if any.
    pub fn parse(name: &str) -> Option<LeaseKind> {
        match name {
            "process_group" => Some(LeaseKind::ProcessGroup),
            "temp_path" => Some(LeaseKind::TempPath),
            "run" => Some(LeaseKind::Run),
            _ => None,
        }
    }
}

impl fmt::Display for LeaseKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One resource held on behalf of a run, until released or reclaimed.
///
/// # Invariants (checked by [`Lease::validate`] on acquire)
///
/// - `lease_id` is 1 to [`MAX_LEASE_ID_LEN`] bytes without control
///   characters; `owner` is not empty.
/// - A `process_group` lease has a `pgid` greater than 1 (never init's or
///   "every process") and no `path`; a `temp_path` lease has an absolute
///   UTF-8 `path` and no `pgid`.
/// - `expires_at_ms >= acquired_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// Unique id of the lease.
    pub lease_id: String,
    /// The run the resource serves; the run must exist.
    pub run_id: RunId,
    /// The intent whose call created the resource, if any.
    pub intent_id: Option<IntentId>,
    /// What is held.
    pub kind: LeaseKind,
    /// The process group, for `process_group` leases.
    pub pgid: Option<i32>,
    /// The path, for `temp_path` leases.
    pub path: Option<PathBuf>,
    /// Who holds it: the process that created the resource, as
    /// `pid:<pid>@<host>` (see `rein_engine::lease::Owner`). The reaper
    /// leaves a lease alone while its owner lives.
    pub owner: String,
    /// When it was acquired (ms since the Unix epoch).
    pub acquired_at_ms: Timestamp,
    /// When it stops protecting its resource from the reaper.
    pub expires_at_ms: Timestamp,
}

impl Lease {
    /// Checks the invariants above; every backend calls this on acquire.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] naming the field that breaks one.
    pub fn validate(&self) -> Result<(), StoreError> {
        let invalid = |what: &'static str, expected: &str, found: String| StoreError::Invalid {
            what,
            expected: expected.to_owned(),
            found,
        };
        if self.lease_id.is_empty()
            || self.lease_id.len() > MAX_LEASE_ID_LEN
            || self.lease_id.chars().any(char::is_control)
        {
            return Err(invalid(
                "lease id",
                "1 to 255 bytes without control characters",
                format!("{:?}", self.lease_id),
            ));
        }
        validate_owner(&self.owner)?;
        match self.kind {
            LeaseKind::ProcessGroup => {
                match self.pgid {
                    Some(pgid) if pgid > 1 => {}
                    other => {
                        return Err(invalid(
                            "lease pgid",
                            "a process group id greater than 1 for a process_group lease",
                            format!("{other:?}"),
                        ));
                    }
                }
                if let Some(path) = &self.path {
                    return Err(invalid(
                        "lease path",
                        "absent for a process_group lease",
                        path.display().to_string(),
                    ));
                }
            }
            LeaseKind::Run => {}
            LeaseKind::TempPath => {
                match &self.path {
                    Some(path) if path.is_absolute() && path.to_str().is_some() => {}
                    other => {
                        return Err(invalid(
                            "lease path",
                            "an absolute UTF-8 path for a temp_path lease",
                            format!("{other:?}"),
                        ));
                    }
                }
                if let Some(pgid) = self.pgid {
                    return Err(invalid(
                        "lease pgid",
                        "absent for a temp_path lease",
                        pgid.to_string(),
                    ));
                }
            }
        }
        if self.kind == LeaseKind::Run && (self.pgid.is_some() || self.path.is_some()) {
            return Err(invalid(
                "lease pgid/path",
                "absent for a run lease",
                format!("{:?} {:?}", self.pgid, self.path),
            ));
        }
        if self.expires_at_ms < self.acquired_at_ms {
            return Err(invalid(
                "lease expires_at_ms",
                &format!("at least acquired_at_ms ({})", self.acquired_at_ms),
                self.expires_at_ms.to_string(),
            ));
        }
        Ok(())
    }

    /// Whether the lease has expired at `now_ms` (expiry is inclusive).
    pub fn is_expired(&self, now_ms: Timestamp) -> bool {
        self.expires_at_ms <= now_ms
    }
}

/// Checks that a lease owner is not empty (as [`Lease::validate`] does).
///
/// # Errors
///
/// [`StoreError::Invalid`] for an empty (or all-whitespace) owner.
pub fn validate_owner(owner: &str) -> Result<(), StoreError> {
    if owner.trim().is_empty() {
        return Err(StoreError::Invalid {
            what: "lease owner",
            expected: "a process id such as pid:1234@host".to_owned(),
            found: "empty".to_owned(),
        });
    }
    Ok(())
}

/// A change to the lease table: the one write path of leases
/// ([`LeaseStore::change_lease`](crate::LeaseStore::change_lease)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseChange {
    /// Registers a new lease; refused with [`StoreError::Conflict`] when its
    /// id is held, [`StoreError::NotFound`] when its run does not exist.
    Acquire(Lease),
    /// Moves a held lease's expiry; [`StoreError::NotFound`] when it is not
    /// held.
    Renew {
        /// The lease.
        lease_id: String,
        /// Its new expiry; not before its acquisition.
        expires_at_ms: Timestamp,
    },
    /// Releases a lease; releasing one that is not held is a no-op.
    Release {
        /// The lease.
        lease_id: String,
    },
}

/// Which held leases to list. The default lists every held lease.
///
/// Results are ordered by `expires_at_ms`, then `lease_id`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseFilter {
    /// Only this run's leases; the run must exist.
    pub run_id: Option<RunId>,
    /// Only leases expired at this time (`expires_at_ms <= t`).
    pub expired_at_ms: Option<Timestamp>,
    /// At most this many.
    pub limit: Option<usize>,
}

impl LeaseFilter {
    /// Every held lease.
    pub fn all() -> LeaseFilter {
        LeaseFilter::default()
    }

    /// Only `run_id`'s leases.
    pub fn of_run(mut self, run_id: RunId) -> LeaseFilter {
        self.run_id = Some(run_id);
        self
    }

    /// Only leases expired at `now_ms`.
    pub fn expired_at(mut self, now_ms: Timestamp) -> LeaseFilter {
        self.expired_at_ms = Some(now_ms);
        self
    }

    /// At most `limit` leases.
    pub fn limit(mut self, limit: usize) -> LeaseFilter {
        self.limit = Some(limit);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(kind: LeaseKind) -> Lease {
        Lease {
            lease_id: "l-1".to_owned(),
            run_id: RunId::new("r-1").unwrap(),
            intent_id: None,
            kind,
            pgid: None,
            path: None,
            owner: "pid:1@host".to_owned(),
            acquired_at_ms: Timestamp::from_millis(10),
            expires_at_ms: Timestamp::from_millis(20),
        }
    }

    #[test]
    fn kinds_round_trip_their_names() {
        for kind in [LeaseKind::ProcessGroup, LeaseKind::TempPath] {
            assert_eq!(LeaseKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(LeaseKind::parse("socket"), None);
    }

    #[test]
    fn validate_refuses_init_and_every_process_pgids() {
        for pgid in [None, Some(-1), Some(0), Some(1)] {
            let mut l = lease(LeaseKind::ProcessGroup);
            l.pgid = pgid;
            assert!(
                matches!(
                    l.validate(),
                    Err(StoreError::Invalid {
                        what: "lease pgid",
                        ..
                    })
                ),
                "{pgid:?}"
            );
        }
        let mut l = lease(LeaseKind::ProcessGroup);
        l.pgid = Some(4242);
        assert_eq!(l.validate(), Ok(()));
    }

    #[test]
    fn validate_wants_an_absolute_path_for_temp_paths() {
        let mut l = lease(LeaseKind::TempPath);
        l.path = Some(PathBuf::from("relative/dir"));
        assert!(l.validate().is_err());
        l.path = Some(PathBuf::from("/tmp/rein-lease-1"));
        assert_eq!(l.validate(), Ok(()));
        l.pgid = Some(99);
        assert!(l.validate().is_err());
    }

    #[test]
    fn validate_refuses_expiry_before_acquisition_and_bad_ids() {
        let mut l = lease(LeaseKind::TempPath);
        l.path = Some(PathBuf::from("/tmp/x"));
        l.expires_at_ms = Timestamp::from_millis(9);
        assert!(l.validate().is_err());
        l.expires_at_ms = Timestamp::from_millis(10);
        assert_eq!(l.validate(), Ok(()));
        assert!(l.is_expired(Timestamp::from_millis(10)));
        assert!(!l.is_expired(Timestamp::from_millis(9)));
        l.lease_id = "a\nb".to_owned();
        assert!(l.validate().is_err());
        l.lease_id = String::new();
        assert!(l.validate().is_err());
    }
}

//! The [`Reaper`]: reclaims what expired leases of dead processes still
//! hold, and reports what it did and what it left alone.

use rein_core::Timestamp;
use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rein_store::{Lease, LeaseKind, Store, StoreError, StoreExt};
use serde::Serialize;

use super::owner::{Owner, local_host};
use super::proc::{carries_marker, group_members, has_proc};
use super::{DEFAULT_KILL_GRACE, DEFAULT_REAP_BATCH, GroupEnd, TEMP_DIR_PREFIX, terminate_group};
use crate::{SystemClock, Timer};

/// What the reaper did with one expired lease it released.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reclamation {
    /// The process group had no running member left.
    GroupAlreadyGone,
    /// The group was ended; `members` were running when it started.
    GroupEnded {
        /// The running members found.
        members: Vec<i32>,
        /// How it ended (`terminated` or `killed`).
        end: GroupEnd,
    },
    /// The temporary path no longer existed.
    PathAlreadyGone,
    /// The temporary path was removed.
    PathRemoved,
    /// A dead process's claim on a run was released, so the run can be
    /// resumed.
    RunClaimReleased,
}

/// Why the reaper left an expired lease in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum SkipReason {
    /// The owner id is not one [`Owner::parse`] understands.
    UnknownOwner,
    /// The lease belongs to another host.
    ForeignHost {
        /// That host.
        host: String,
    },
    /// The owner has this host's name, but not provably this machine's
    /// boot and pid namespace (another container sharing the name, an
    /// older owner id without them, or an identity that cannot be read):
    /// its processes may be invisible from here.
    NotProvablyLocal,
    /// The owner process still runs; it is responsible for the lease.
    OwnerAlive,
    /// No running member of the group carries the lease's marker: the
    /// group id may belong to an unrelated program now.
    NotOurGroup {
        /// The running members found.
        members: Vec<i32>,
    },
    /// The members' environments could not be read to check the marker.
    Unverifiable {
        /// The running members found.
        members: Vec<i32>,
    },
    /// Members were still running after SIGKILL.
    GroupSurvived {
        /// The members still running.
        members: Vec<i32>,
    },
    /// The path is not absolute or not named `rein-lease-*`.
    UnsafePath,
    /// Removing the path or releasing the lease failed.
    Failed {
        /// What failed.
        message: String,
    },
}

/// One lease the reaper released, and how.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reclaimed {
    /// The lease as it was stored.
    pub lease: Lease,
    /// What was done.
    pub action: Reclamation,
}

/// One expired lease the reaper left in place, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Skipped {
    /// The lease as it is stored.
    pub lease: Lease,
    /// Why it was left.
    pub reason: SkipReason,
}

/// What one [`Reaper::reap`] did: for events, `rein reconcile` and the
/// handoff package.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ReapReport {
    /// Leases released, with what was reclaimed.
    pub reclaimed: Vec<Reclaimed>,
    /// Expired leases left in place.
    pub skipped: Vec<Skipped>,
}

/// Reclaims the resources of expired leases held by processes of this
/// host that are gone.
///
/// ```no_run
/// # use std::sync::Arc;
/// # use rein_engine::lease::Reaper;
/// # use rein_store_sqlite::SqliteStore;
/// # async fn demo(now_ms: rein_store::Timestamp) -> Result<(), Box<dyn std::error::Error>> {
/// let store = SqliteStore::open("rein.db")?;
/// let report = Reaper::new().reap(&store, now_ms).await?;
/// for reclaimed in &report.reclaimed {
///     println!("{} {:?}", reclaimed.lease.lease_id, reclaimed.action);
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Reaper {
    kill_grace: Duration,
    batch: usize,
    /// Times the wait for a group to end.
    clock: Arc<dyn Timer>,
}

impl fmt::Debug for Reaper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reaper")
            .field("kill_grace", &self.kill_grace)
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl Default for Reaper {
    fn default() -> Self {
        Reaper::new()
    }
}

impl Reaper {
    /// A reaper with the [defaults](crate::lease#defaults).
    pub fn new() -> Reaper {
        Reaper {
            kill_grace: DEFAULT_KILL_GRACE,
            batch: DEFAULT_REAP_BATCH,
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// Uses `clock` instead of the system clock (the engine's own).
    pub fn with_clock(mut self, clock: Arc<dyn Timer>) -> Reaper {
        self.clock = clock;
        self
    }

    /// Sets the grace between SIGTERM and SIGKILL.
    pub fn with_kill_grace(mut self, grace: Duration) -> Reaper {
        self.kill_grace = grace;
        self
    }

    /// Sets how many expired leases one reap handles (at least 1).
    pub fn with_batch(mut self, batch: usize) -> Reaper {
        self.batch = batch.max(1);
        self
    }

    /// Reclaims the leases of `store` expired at `now_ms`: process groups
    /// first (their processes may still write to the paths), then paths.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the expired leases cannot be listed; a failure
    /// with one lease is reported in [`ReapReport::skipped`] instead.
    pub async fn reap(
        &self,
        store: &dyn Store,
        now_ms: Timestamp,
    ) -> Result<ReapReport, StoreError> {
        let mut expired = store.expired_leases(now_ms, self.batch).await?;
        expired.sort_by_key(|lease| lease.kind != LeaseKind::ProcessGroup);
        let report = self.reclaim_all(store, expired).await;
        for skipped in &report.skipped {
            tracing::warn!(
                lease_id = %skipped.lease.lease_id,
                run_id = %skipped.lease.run_id,
                reason = ?skipped.reason,
                "expired lease left in place"
            );
        }
        Ok(report)
    }

    /// Reclaims the resources a run's dead processes left behind, expired
    /// or not: before a resume replays a step or settles a record, nothing
    /// the crashed process started may still be running. Leases of live
    /// owners (and the run's own claim) are left alone.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the run's leases cannot be listed.
    pub async fn reap_run(
        &self,
        store: &dyn Store,
        run_id: &rein_core::RunId,
    ) -> Result<ReapReport, StoreError> {
        let mut leases: Vec<Lease> = store
            .leases_of_run(run_id)
            .await?
            .into_iter()
            .filter(|l| l.kind != LeaseKind::Run)
            .collect();
        leases.sort_by_key(|lease| lease.kind != LeaseKind::ProcessGroup);
        Ok(self.reclaim_all(store, leases).await)
    }

    /// Reclaims each lease and releases the reclaimed ones.
    async fn reclaim_all(&self, store: &dyn Store, leases: Vec<Lease>) -> ReapReport {
        let mut report = ReapReport::default();
        for lease in leases {
            match self.reclaim(&lease).await {
                Ok(action) => match store.release_lease(&lease.lease_id).await {
                    Ok(_) => report.reclaimed.push(Reclaimed { lease, action }),
                    Err(error) => report.skipped.push(Skipped {
                        lease,
                        reason: SkipReason::Failed {
                            message: format!("reclaimed, but the release failed: {error}"),
                        },
                    }),
                },
                Err(reason) => report.skipped.push(Skipped { lease, reason }),
            }
        }
        report
    }

    async fn reclaim(&self, lease: &Lease) -> Result<Reclamation, SkipReason> {
        let owner = Owner::parse(&lease.owner).ok_or(SkipReason::UnknownOwner)?;
        if owner.host() != local_host() {
            return Err(SkipReason::ForeignHost {
                host: owner.host().to_owned(),
            });
        }
        if !owner.is_local() {
            return Err(SkipReason::NotProvablyLocal);
        }
        match lease.kind {
            LeaseKind::ProcessGroup => {
                let pgid = lease.pgid.filter(|&p| p > 1).ok_or(SkipReason::Failed {
                    message: "process_group lease without a valid pgid".to_owned(),
                })?;
                let members = group_members(pgid);
                if members.is_empty() {
                    return Ok(Reclamation::GroupAlreadyGone);
                }
                if owner.is_alive() {
                    return Err(SkipReason::OwnerAlive);
                }
                if has_proc() {
                    let marks: Vec<Option<bool>> = members
                        .iter()
                        .map(|&pid| carries_marker(pid, &lease.lease_id))
                        .collect();
                    if !marks.contains(&Some(true)) {
                        return Err(if marks.contains(&Some(false)) {
                            SkipReason::NotOurGroup { members }
                        } else {
                            SkipReason::Unverifiable { members }
                        });
                    }
                }
                let end = terminate_group(self.clock.as_ref(), pgid, self.kill_grace, || {}).await;
                if end.is_gone() {
                    Ok(Reclamation::GroupEnded { members, end })
                } else {
                    Err(SkipReason::GroupSurvived {
                        members: group_members(pgid),
                    })
                }
            }
            LeaseKind::TempPath => {
                let path = lease.path.as_deref().ok_or(SkipReason::UnsafePath)?;
                if !is_leased_temp_path(path) {
                    return Err(SkipReason::UnsafePath);
                }
                let Ok(meta) = std::fs::symlink_metadata(path) else {
                    return Ok(Reclamation::PathAlreadyGone);
                };
                if owner.is_alive() {
                    return Err(SkipReason::OwnerAlive);
                }
                let removed = if meta.is_dir() {
                    std::fs::remove_dir_all(path)
                } else {
                    std::fs::remove_file(path)
                };
                match removed {
                    Ok(()) => Ok(Reclamation::PathRemoved),
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                        Ok(Reclamation::PathAlreadyGone)
                    }
                    Err(error) => Err(SkipReason::Failed {
                        message: format!("cannot remove {}: {error}", path.display()),
                    }),
                }
            }
            LeaseKind::Run => {
                if owner.is_alive() {
                    return Err(SkipReason::OwnerAlive);
                }
                Ok(Reclamation::RunClaimReleased)
            }
            #[allow(unreachable_patterns)]
            _ => Err(SkipReason::Failed {
                message: format!("this reaper does not know lease kind {}", lease.kind),
            }),
        }
    }
}

/// Reclaims the leases expired at `now_ms` with a default [`Reaper`].
///
/// # Errors
///
/// See [`Reaper::reap`].
pub async fn reap_expired(store: &dyn Store, now_ms: Timestamp) -> Result<ReapReport, StoreError> {
    Reaper::new().reap(store, now_ms).await
}

/// Whether `path` is one the reaper may delete: absolute, and named
/// `rein-lease-*`.
pub fn is_leased_temp_path(path: &Path) -> bool {
    path.is_absolute()
        && path
            .file_name()
            .and_then(|name| name.to_str())
            .is_some_and(|name| {
                name.starts_with(TEMP_DIR_PREFIX) && name.len() > TEMP_DIR_PREFIX.len()
            })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_absolute_rein_lease_paths_may_be_removed() {
        assert!(is_leased_temp_path(Path::new("/tmp/rein-lease-cmd-1")));
        assert!(!is_leased_temp_path(Path::new("/tmp/rein-lease-")));
        assert!(!is_leased_temp_path(Path::new("tmp/rein-lease-cmd-1")));
        assert!(!is_leased_temp_path(Path::new("/home/user")));
        assert!(!is_leased_temp_path(Path::new("/")));
    }
}

//! Resource leases on this machine: who holds them ([`Owner`]), how a
//! process group is ended ([`terminate_group`]), and the [`Reaper`] that
//! reclaims what an expired lease still holds after a crash.
//!
//! # Why a reaper
//!
//! The command adapter ([`crate::tool::command`]) cleans up after every
//! call, on success, failure, deadline and cancellation. None of that runs
//! when the process making the call dies: its subprocess group keeps
//! running and its temporary directory stays. Because every such resource
//! was leased in the store *before* it was created, a later process can
//! find it: [`Reaper::reap`] lists the expired leases, kills the process
//! groups that are still there, removes the temporary paths and releases
//! the leases, and reports what it did (seed 000, "Leases and
//! Reclamation").
//!
//! # What the reaper will not touch
//!
//! It errs on the side of leaving things alone, and says why in
//! [`SkipReason`]:
//!
//! - a lease held by another host (it cannot see that host's processes);
//! - a lease whose owner process is still alive: the owner is responsible
//!   for it (the owner id carries the process start time on Linux, so a
//!   recycled pid does not look like the owner);
//! - a process group none of whose live members carries the lease's marker
//!   (`REIN_LEASE_ID=<id>` in its initial environment, Linux only): the
//!   group id may have been reused by an unrelated program;
//! - a temporary path that is not absolute or whose name does not start
//!   with [`TEMP_DIR_PREFIX`]: a damaged row must never make it delete an
//!   arbitrary directory.
//!
//! # Residual risk: process group id reuse
//!
//! A process group id cannot be reused while any member of the group is
//! alive, so a group with live members is the one that was leased — unless
//! every member exited and an unrelated process later got the same number
//! as its own group. On Linux the environment marker check refuses such a
//! group. Elsewhere (no `/proc`) only the owner check applies, and a group
//! that was fully replaced between the crash and the reap could be
//! signalled; leases expire shortly after their call's deadline, which keeps
//! that window short.
//!
//! # Defaults
//!
//! | setting | default |
//! | --- | --- |
//! | SIGTERM → SIGKILL grace | [`DEFAULT_KILL_GRACE`] (2 s) |
//! | wait for a killed group to disappear | [`KILL_WAIT_BOUND`] (5 s) |
//! | leases per reap | [`DEFAULT_REAP_BATCH`] (100) |

mod group;
mod owner;
mod proc;
mod reaper;

use std::time::Duration;

pub(crate) use group::kill_group_now;
pub use group::{GroupEnd, terminate_group};
pub use owner::{Owner, local_host};
pub use proc::{group_members, process_running};
pub use reaper::{
    ReapReport, Reaper, Reclaimed, Reclamation, SkipReason, Skipped, is_leased_temp_path,
    reap_expired,
};

/// How long a process group gets between SIGTERM and SIGKILL.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(2);

/// How long, after SIGKILL, to wait for a group's members to disappear
/// before reporting that it survived (a process in uninterruptible sleep).
pub const KILL_WAIT_BOUND: Duration = Duration::from_secs(5);

/// How many expired leases one [`Reaper::reap`] handles.
pub const DEFAULT_REAP_BATCH: usize = 100;

/// The name prefix of every temporary directory rein leases; the reaper
/// removes nothing else.
pub const TEMP_DIR_PREFIX: &str = "rein-lease-";

/// The environment variable every leased process group inherits, holding
/// its lease id: the marker the reaper checks before killing.
pub const LEASE_ID_ENV: &str = "REIN_LEASE_ID";

/// How often a waiting loop looks at the process table again.
const POLL_INTERVAL: Duration = Duration::from_millis(10);

/// The longest public node id: room for a UUID in any spelling, short
/// enough to sit in every claim row and problem.
pub const MAX_NODE_ID_LENGTH: usize = 64;

/// Whether `node` may be a public node id ([`crate::run::EngineBuilder::node`]):
/// 1 to [`MAX_NODE_ID_LENGTH`] visible ASCII characters without `#` or `.`.
pub fn is_node_id(node: &str) -> bool {
    (1..=MAX_NODE_ID_LENGTH).contains(&node.len())
        && node
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'#' && b != b'.')
}

/// The public node id in a run claim's owner (`pid:..@host#node.token`),
/// if it has one (claims written before node ids had only a token).
pub fn claim_node(owner: &str) -> Option<&str> {
    let (_, claim) = owner.split_once('#')?;
    let (node, _token) = claim.split_once('.')?;
    is_node_id(node).then_some(node)
}

#[cfg(test)]
mod tests {
    #[test]
    fn claim_node_reads_the_public_node_and_never_the_process() {
        use super::claim_node;
        assert_eq!(claim_node("pid:42+7@db-host#n0de.t0ken"), Some("n0de"));
        assert_eq!(claim_node("pid:42+7@db-host#t0ken"), None, "an older claim");
        assert_eq!(claim_node("pid:42@db-host"), None);
    }
}

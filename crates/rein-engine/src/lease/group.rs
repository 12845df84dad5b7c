//! Ending a process group: SIGTERM, a grace, SIGKILL, and a bounded wait
//! for it to disappear.

use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Serialize;

use super::proc::group_members;
use super::{KILL_WAIT_BOUND, POLL_INTERVAL};
use crate::Timer;

/// How [`terminate_group`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GroupEnd {
    /// No member was running: nothing was signalled.
    AlreadyGone,
    /// Every member exited within the grace after SIGTERM.
    Terminated,
    /// Members were still running after the grace and were SIGKILLed.
    Killed,
    /// Members were still running [`KILL_WAIT_BOUND`] after SIGKILL.
    Survived,
}

impl GroupEnd {
    /// Whether no member of the group runs any more.
    pub fn is_gone(self) -> bool {
        self != GroupEnd::Survived
    }
}

fn signal_group(pgid: i32, signal: Signal) {
    // Never init's group or "every process" (0, -1): a lease row holding
    // such a value is refused by the store, and checked again here.
    if pgid > 1 {
        // ESRCH: the group is gone, which is what we want.
        let _ = killpg(Pid::from_raw(pgid), signal);
    }
}

/// Waits until `pgid` has no running member, calling `reap` each round (to
/// collect an own child's exit), for at most `bound`. Returns whether the
/// group is gone.
async fn wait_gone(clock: &dyn Timer, pgid: i32, bound: Duration, reap: &mut impl FnMut()) -> bool {
    let until = clock.now() + bound;
    loop {
        reap();
        if group_members(pgid).is_empty() {
            return true;
        }
        if clock.now() >= until {
            return false;
        }
        clock.sleep(POLL_INTERVAL).await;
    }
}

/// Ends process group `pgid`: SIGTERM to the whole group, up to `grace` for
/// it to exit, then SIGKILL, then up to [`KILL_WAIT_BOUND`] for it to
/// disappear. `reap` is called while waiting, so a caller whose own child
/// leads the group can collect it (a zombie does not count as running).
/// The waits are measured on `clock`.
///
/// Signals are sent only while the group has running members: while a
/// member lives the group id cannot have been reused.
pub async fn terminate_group(
    clock: &dyn Timer,
    pgid: i32,
    grace: Duration,
    mut reap: impl FnMut(),
) -> GroupEnd {
    reap();
    if group_members(pgid).is_empty() {
        return GroupEnd::AlreadyGone;
    }
    signal_group(pgid, Signal::SIGTERM);
    if wait_gone(clock, pgid, grace, &mut reap).await {
        return GroupEnd::Terminated;
    }
    signal_group(pgid, Signal::SIGKILL);
    if wait_gone(clock, pgid, KILL_WAIT_BOUND, &mut reap).await {
        GroupEnd::Killed
    } else {
        GroupEnd::Survived
    }
}

/// Kills process group `pgid` at once, without waiting: for `Drop` paths.
pub(crate) fn kill_group_now(pgid: i32) {
    signal_group(pgid, Signal::SIGKILL);
}

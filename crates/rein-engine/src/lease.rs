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

use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use rein_store::{Lease, LeaseKind, Store, StoreError};
use serde::Serialize;

use crate::{SystemClock, Timer};

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

/// The process holding a lease:
/// `pid:<pid>+<start>@<host>;boot=<boot id>;pidns=<pid namespace>`.
///
/// - `<start>`, the process start time in clock ticks since boot (Linux),
///   tells the owner apart from a later process that got the same pid;
/// - `<boot id>` (`/proc/sys/kernel/random/boot_id`) tells this boot of
///   this machine apart from any other machine or boot, whatever its host
///   name;
/// - `<pid namespace>` (the inode of `/proc/self/ns/pid`) tells this
///   container's pids apart from another container's on the same kernel.
///
/// # Why all three
///
/// A lease's owner is judged dead (and its work taken over before the
/// lease expires) only when that is provable: the owner is a process *this*
/// process can see, and it is gone. Host names alone collide — containers
/// with a fixed host name or host networking sharing a volume, two
/// containers whose rein is pid 1, machines sharing a database, the
/// `localhost` fallback when the host name cannot be read — and a live
/// owner would then look dead: two drivers of one run. So an owner is
/// [local](Owner::is_local) only when host, boot id and pid namespace all
/// match this process's, and none of them may be unknown. Older ids
/// (`pid:<pid>@<host>`, `pid:<pid>+<start>@<host>`) still parse, and are
/// never local: their owners are waited for until their leases expire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pid: u32,
    start: Option<u64>,
    host: String,
    boot: Option<String>,
    pid_ns: Option<u64>,
}

impl Owner {
    /// This process.
    pub fn current() -> Owner {
        let pid = std::process::id();
        let here = Machine::get();
        Owner {
            pid,
            start: i32::try_from(pid)
                .ok()
                .and_then(proc_stat)
                .map(|stat| stat.start),
            host: here.host.clone(),
            boot: here.boot.clone(),
            pid_ns: here.pid_ns,
        }
    }

    /// Parses an owner id written by [`Owner`]'s `Display` (or by an older
    /// rein, without boot id and pid namespace).
    pub fn parse(text: &str) -> Option<Owner> {
        // A claim appends `#<token>` to tell two claims of one process
        // apart; the process is what precedes it.
        let text = text.split_once('#').map_or(text, |(owner, _)| owner);
        let rest = text.strip_prefix("pid:")?;
        let (process, place) = rest.split_once('@')?;
        let (pid, start) = match process.split_once('+') {
            Some((pid, start)) => (pid, Some(start.parse().ok()?)),
            None => (process, None),
        };
        let mut parts = place.split(';');
        let host = parts.next().filter(|h| !h.is_empty())?;
        let (mut boot, mut pid_ns) = (None, None);
        for part in parts {
            match part.split_once('=') {
                Some(("boot", id)) if is_boot_id(id) => boot = Some(id.to_owned()),
                Some(("pidns", inode)) => pid_ns = Some(inode.parse().ok()?),
                // A field of a later rein: ignored, never guessed at.
                Some(_) => {}
                None => return None,
            }
        }
        Some(Owner {
            pid: pid.parse().ok()?,
            start,
            host: host.to_owned(),
            boot,
            pid_ns,
        })
    }

    /// The owner's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The owner's host name.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Whether the owner is provably a process this process can see: the
    /// same host name (not the `localhost` fallback), the same boot id and
    /// the same pid namespace, none of them unknown on either side.
    pub fn is_local(&self) -> bool {
        let here = Machine::get();
        !here.fallback_host
            && self.host == here.host
            && self.boot.is_some()
            && self.boot == here.boot
            && self.pid_ns.is_some()
            && self.pid_ns == here.pid_ns
    }

    /// Whether the owner is provably gone: a [local](Owner::is_local)
    /// process that no longer runs. An owner elsewhere, or one whose
    /// identity cannot be checked, is never gone: whoever would take its
    /// work over waits for its lease to expire. A stopped process
    /// (SIGSTOP) is not gone.
    pub fn is_gone(&self) -> bool {
        self.is_local() && !self.is_alive()
    }

    /// [`Owner::is_gone`] of an owner id as stored in a lease; false for an
    /// id that does not parse.
    pub fn is_gone_id(owner: &str) -> bool {
        Owner::parse(owner).is_some_and(|o| o.is_gone())
    }

    /// Whether the owner process is still running on this host (a zombie
    /// is not running; a process with the same pid but another start time
    /// is not the owner).
    pub fn is_alive(&self) -> bool {
        let Ok(pid) = i32::try_from(self.pid) else {
            return false;
        };
        if !self.is_local() || pid <= 0 {
            return false;
        }
        if has_proc() {
            return match proc_stat(pid) {
                Some(stat) => stat.is_running() && self.start.is_none_or(|s| s == stat.start),
                None => false,
            };
        }
        match kill(Pid::from_raw(pid), None) {
            Ok(()) | Err(Errno::EPERM) => true,
            Err(_) => false,
        }
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pid:{}", self.pid)?;
        if let Some(start) = self.start {
            write!(f, "+{start}")?;
        }
        write!(f, "@{}", self.host)?;
        if let Some(boot) = &self.boot {
            write!(f, ";boot={boot}")?;
        }
        if let Some(pid_ns) = self.pid_ns {
            write!(f, ";pidns={pid_ns}")?;
        }
        Ok(())
    }
}

/// What identifies this process's view of the machine, read once.
#[derive(Debug)]
struct Machine {
    host: String,
    /// The host name could not be read (or holds a character an owner id
    /// cannot carry): recorded as `localhost`, and never local.
    fallback_host: bool,
    boot: Option<String>,
    pid_ns: Option<u64>,
}

impl Machine {
    fn get() -> &'static Machine {
        static MACHINE: OnceLock<Machine> = OnceLock::new();
        MACHINE.get_or_init(|| {
            let host = nix::unistd::gethostname()
                .ok()
                .map(OsString::into_string)
                .and_then(Result::ok)
                .filter(|h| !h.is_empty() && !h.contains(['#', '@', ';']));
            Machine {
                fallback_host: host.is_none(),
                host: host.unwrap_or_else(|| "localhost".to_owned()),
                boot: std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
                    .ok()
                    .map(|id| id.trim().to_owned())
                    .filter(|id| is_boot_id(id)),
                pid_ns: std::fs::read_link("/proc/self/ns/pid")
                    .ok()
                    .and_then(|link| pid_namespace(&link.to_string_lossy())),
            }
        })
    }
}

/// Whether `id` looks like a kernel boot id (a UUID: hex digits and dashes).
fn is_boot_id(id: &str) -> bool {
    !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-')
}

/// The inode of a pid namespace link target (`pid:[4026531836]`).
fn pid_namespace(link: &str) -> Option<u64> {
    link.strip_prefix("pid:[")?.strip_suffix(']')?.parse().ok()
}

/// This machine's host name, as owners record it (`localhost` when it
/// cannot be read; such an owner is never [local](Owner::is_local)).
pub fn local_host() -> &'static str {
    &Machine::get().host
}

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy)]
struct ProcStat {
    state: char,
    pgrp: i32,
    start: u64,
}

impl ProcStat {
    /// Not a zombie (`Z`) and not dead (`X`): it still runs code and holds
    /// resources.
    fn is_running(self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

fn has_proc() -> bool {
    static HAS_PROC: OnceLock<bool> = OnceLock::new();
    *HAS_PROC.get_or_init(|| Path::new("/proc/self/stat").exists())
}

/// `/proc/<pid>/stat`, if the process exists and `/proc` is mounted.
fn proc_stat(pid: i32) -> Option<ProcStat> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold anything,
    // so fields are counted from the last `)`: state is field 3.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start: fields.get(19)?.parse().ok()?,
    })
}

/// Whether `pid` is a running process (a zombie is not).
pub fn process_running(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    if has_proc() {
        return proc_stat(pid).is_some_and(ProcStat::is_running);
    }
    match kill(Pid::from_raw(pid), None) {
        Ok(()) | Err(Errno::EPERM) => true,
        Err(_) => false,
    }
}

/// The running (not zombie) members of process group `pgid`. Without
/// `/proc`, `[pgid]` when the group answers a signal-0 probe (zombies
/// included), else nothing.
pub fn group_members(pgid: i32) -> Vec<i32> {
    if pgid <= 1 {
        return Vec::new();
    }
    if !has_proc() {
        return match killpg(Pid::from_raw(pgid), None) {
            Ok(()) | Err(Errno::EPERM) => vec![pgid],
            Err(_) => Vec::new(),
        };
    }
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut members: Vec<i32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|s| s.pgrp == pgid && s.is_running()))
        .collect();
    members.sort_unstable();
    members
}

/// Whether `pid`'s initial environment holds `REIN_LEASE_ID=<lease_id>`:
/// `None` when it cannot be read (gone, another user's, no `/proc`).
fn carries_marker(pid: i32, lease_id: &str) -> Option<bool> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let marker = format!("{LEASE_ID_ENV}={lease_id}");
    Some(
        environ
            .split(|&b| b == 0)
            .any(|entry| entry == marker.as_bytes()),
    )
}

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
/// # use rein_store::SqliteStore;
/// # async fn demo(now_ms: u64) -> Result<(), Box<dyn std::error::Error>> {
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
    /// A reaper with the [defaults](self#defaults).
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
    pub async fn reap(&self, store: &dyn Store, now_ms: u64) -> Result<ReapReport, StoreError> {
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
pub async fn reap_expired(store: &dyn Store, now_ms: u64) -> Result<ReapReport, StoreError> {
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

    use super::*;

    #[test]
    fn owner_round_trips_through_its_id() {
        let me = Owner::current();
        assert_eq!(Owner::parse(&me.to_string()), Some(me.clone()));
        assert_eq!(
            Owner::parse(&format!("{me}#claim-token")),
            Some(me.clone()),
            "a claim's token is not part of the process"
        );
        if has_proc() {
            assert!(me.boot.is_some() && me.pid_ns.is_some(), "{me}");
            assert!(me.is_local());
        }
        assert!(me.is_alive() || !me.is_local());
        assert!(!me.is_gone(), "this process is not gone");
        let plain = Owner::parse("pid:1234@host-a").unwrap();
        assert_eq!((plain.pid(), plain.host()), (1234, "host-a"));
        assert_eq!(plain.to_string(), "pid:1234@host-a");
        let full = "pid:1234+99@host-a;boot=0b1c-2d;pidns=4026531836";
        assert_eq!(Owner::parse(full).unwrap().to_string(), full);
        for bad in [
            "1234@h",
            "pid:x@h",
            "pid:1@",
            "pid:1",
            "pid:1+y@h",
            "pid:1@h;pidns=x",
            "pid:1@h;nonsense",
        ] {
            assert_eq!(Owner::parse(bad), None, "{bad}");
        }
    }

    /// Review item 3: an owner is local only when host, boot id and pid
    /// namespace all match; otherwise it is never gone, whatever its pid.
    #[test]
    fn an_owner_of_another_boot_or_namespace_or_an_old_id_is_not_local() {
        let me = Owner::current();
        if !me.is_local() {
            return; // no /proc: nothing is ever local here
        }
        // A pid that runs nothing, on this machine: provably gone.
        let dead = Owner {
            pid: u32::try_from(i32::MAX - 3).unwrap(),
            start: None,
            ..me.clone()
        };
        assert!(dead.is_local() && dead.is_gone());
        let other_boot = Owner {
            boot: Some("00000000-0000-0000-0000-000000000000".to_owned()),
            ..dead.clone()
        };
        let other_ns = Owner {
            pid_ns: dead.pid_ns.map(|ns| ns + 1),
            ..dead.clone()
        };
        let old_id = Owner::parse(&format!("pid:{}@{}", dead.pid, me.host)).unwrap();
        let no_ns = Owner {
            pid_ns: None,
            ..dead.clone()
        };
        let elsewhere = Owner {
            host: "another-host".to_owned(),
            ..dead.clone()
        };
        for owner in [other_boot, other_ns, old_id, no_ns, elsewhere] {
            assert!(!owner.is_local(), "{owner}");
            assert!(
                !owner.is_gone(),
                "{owner} must be waited for, not taken over"
            );
            assert!(!Owner::is_gone_id(&owner.to_string()), "{owner}");
        }
        assert!(Owner::is_gone_id(&format!("{dead}#token")));
        assert!(!Owner::is_gone_id("not an owner"));
    }

    #[test]
    fn the_pid_namespace_is_read_from_its_link() {
        assert_eq!(pid_namespace("pid:[4026531836]"), Some(4_026_531_836));
        assert_eq!(pid_namespace("net:[4026531836]"), None);
        assert_eq!(pid_namespace("pid:[x]"), None);
        assert!(is_boot_id("2c6f5a5e-7c47-4b1d-9d35-8e6f0f0b9d11"));
        assert!(!is_boot_id("") && !is_boot_id("a;b"));
    }

    #[test]
    fn an_owner_with_another_start_time_is_not_alive() {
        let mut me = Owner::current();
        if me.start.is_some() {
            me.start = me.start.map(|s| s + 1);
            assert!(!me.is_alive(), "a recycled pid is not the owner");
        }
        let elsewhere = Owner::parse(&format!("pid:{}@another-host", std::process::id())).unwrap();
        assert!(!elsewhere.is_local());
        assert!(!elsewhere.is_alive());
    }

    #[test]
    fn only_absolute_rein_lease_paths_may_be_removed() {
        assert!(is_leased_temp_path(Path::new("/tmp/rein-lease-cmd-1")));
        assert!(!is_leased_temp_path(Path::new("/tmp/rein-lease-")));
        assert!(!is_leased_temp_path(Path::new("tmp/rein-lease-cmd-1")));
        assert!(!is_leased_temp_path(Path::new("/home/user")));
        assert!(!is_leased_temp_path(Path::new("/")));
    }

    #[test]
    fn init_and_invalid_groups_have_no_members() {
        assert!(group_members(1).is_empty());
        assert!(group_members(0).is_empty());
        assert!(group_members(-1).is_empty());
    }

    #[test]
    fn this_process_is_running() {
        assert!(process_running(i32::try_from(std::process::id()).unwrap()));
        assert!(!process_running(0));
    }
}

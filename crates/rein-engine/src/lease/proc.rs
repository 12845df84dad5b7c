//! What the process table says: a process's state, start time and group,
//! read from `/proc` where it is mounted, probed with signal 0 elsewhere.

use std::path::Path;
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg};
use nix::unistd::Pid;

use super::LEASE_ID_ENV;

/// What `/proc/<pid>/stat` says about a process.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProcStat {
    state: char,
    pgrp: i32,
    pub(super) start: u64,
}

impl ProcStat {
    /// Not a zombie (`Z`) and not dead (`X`): it still runs code and holds
    /// resources.
    pub(super) fn is_running(self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }
}

pub(super) fn has_proc() -> bool {
    static HAS_PROC: OnceLock<bool> = OnceLock::new();
    *HAS_PROC.get_or_init(|| Path::new("/proc/self/stat").exists())
}

/// `/proc/<pid>/stat`, if the process exists and `/proc` is mounted.
pub(super) fn proc_stat(pid: i32) -> Option<ProcStat> {
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
pub(super) fn carries_marker(pid: i32, lease_id: &str) -> Option<bool> {
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    let marker = format!("{LEASE_ID_ENV}={lease_id}");
    Some(
        environ
            .split(|&b| b == 0)
            .any(|entry| entry == marker.as_bytes()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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

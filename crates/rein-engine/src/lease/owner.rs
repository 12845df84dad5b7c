//! [`Owner`]: the process holding a lease, and whether it is provably gone.

use std::ffi::OsString;
use std::fmt;
use std::sync::OnceLock;

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

use super::proc::{has_proc, proc_stat};

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

#[cfg(test)]
mod tests {
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
}

//! One attempt, in order: lease the temporary directory, spawn the start
//! gate in a new process group, lease the group, say `go`, wait, end the
//! group, release (see the [module docs](super#the-start-gate-no-window-between-spawn-and-lease)).
//! Each step that fails gives back what the steps before it took.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rein_core::{Category, Clock, Failure, Instant};
use rein_store::{Lease, LeaseKind, StoreExt};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWriteExt};
use tokio::process::{Child, ChildStdin, Command};

use super::classify::{Ended, classify, not_started, store_failure};
use super::env::{child_env, resolve_program};
use super::output::{Captured, read_capped};
use super::{
    Attempt, CommandTarget, CommandToolAdapter, GATE_SCRIPT, GATE_SHELL, OUTPUT_DRAIN_BOUND,
    TEMP_DIR_ENV, ToolOutput,
};
use crate::lease::{
    GroupEnd, KILL_WAIT_BOUND, LEASE_ID_ENV, TEMP_DIR_PREFIX, kill_group_now, terminate_group,
};

/// What an attempt needs before anything is leased, checked up front: a
/// refusal here leaves nothing behind.
struct Launch {
    limit: Duration,
    deadline: Instant,
    env: BTreeMap<String, OsString>,
    program: PathBuf,
    input: Vec<u8>,
}

impl Launch {
    /// The attempt's limit, environment, program and input; `not_started`
    /// when there is no time left, no such program, or no JSON input.
    fn new(
        target: &CommandTarget,
        args: &Value,
        attempt: &Attempt<'_>,
        now: Instant,
    ) -> Result<Launch, Failure> {
        let name = target.name.as_str();
        let limit = attempt.total_limit();
        if limit.is_zero() {
            return Err(not_started(
                name,
                Category::Timeout,
                "no time left to start it",
            ));
        }
        let env = child_env(target, attempt, limit);
        let program = resolve_program(
            &target.program,
            target.working_dir.as_deref(),
            env.get("PATH").map(OsString::as_os_str),
        )
        .map_err(|why| not_started(name, Category::Unknown, &why))?;
        let input = serde_json::to_vec(args)
            .map_err(|e| not_started(name, Category::InvalidArguments, &e.to_string()))?;
        Ok(Launch {
            limit,
            deadline: now + limit,
            env,
            program,
            input,
        })
    }
}

/// The attempt's leased temporary directory.
struct TempDir {
    /// The name both of the attempt's leases are derived from.
    base: String,
    lease: Lease,
    path: PathBuf,
}

/// How the program and its group ended, and what it printed.
struct Finished {
    ended: Ended,
    end: GroupEnd,
    out: Captured,
    err: Captured,
}

/// Kills the group and removes the directory if the attempt is dropped
/// before it cleaned up (its future was cancelled by the caller). The
/// leases stay and expire; the reaper then finds nothing and releases them.
#[derive(Default)]
struct Cleanup {
    pgid: Option<i32>,
    dir: Option<PathBuf>,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(pgid) = self.pgid.take() {
            kill_group_now(pgid);
        }
        if let Some(dir) = self.dir.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl CommandToolAdapter {
    pub(super) async fn attempt(
        &self,
        target: &CommandTarget,
        args: &Value,
        attempt: &Attempt<'_>,
        cancelled: impl Future<Output = ()>,
    ) -> Result<ToolOutput, Failure> {
        let name = target.name.as_str();
        let launch = Launch::new(target, args, attempt, self.clock.now())?;
        let mut cleanup = Cleanup::default();

        // 1. The temporary directory: leased, then created.
        let temp = self
            .lease_temp_dir(name, attempt, launch.limit, &mut cleanup)
            .await?;

        // 2. The gate, in a new process group; the program waits in it.
        let group_lease_id = format!("{}-pg", temp.base);
        let spawned = gate_command(target, &launch, &group_lease_id, &temp.path).spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                self.finish_temp(&mut cleanup, &temp.lease.lease_id).await;
                return Err(not_started(
                    name,
                    Category::Unknown,
                    &format!("cannot start {}: {e}", launch.program.display()),
                ));
            }
        };
        let pgid = child
            .id()
            .and_then(|pid| i32::try_from(pid).ok())
            .unwrap_or_default();
        cleanup.pgid = (pgid > 1).then_some(pgid);

        // 3. The group's lease, durable before the program starts.
        let group_lease = Lease {
            lease_id: group_lease_id,
            kind: LeaseKind::ProcessGroup,
            pgid: Some(pgid),
            path: None,
            ..temp.lease.clone()
        };
        if let Err(e) = self.store.acquire_lease(group_lease.clone()).await {
            self.stop_unstarted(&mut child, pgid).await;
            cleanup.pgid = None;
            self.finish_temp(&mut cleanup, &temp.lease.lease_id).await;
            return Err(store_failure(name, "lease its process group", &e));
        }

        // 4. Go: from here on the program may act.
        let Some(stdin) = say_go(&mut child).await else {
            self.stop_unstarted(&mut child, pgid).await;
            cleanup.pgid = None;
            self.release(&group_lease.lease_id).await;
            self.finish_temp(&mut cleanup, &temp.lease.lease_id).await;
            return Err(not_started(
                name,
                Category::Unknown,
                "the start gate exited before the program was started",
            ));
        };
        let io = feed_and_read(
            stdin,
            child.stdout.take(),
            child.stderr.take(),
            launch.input,
            target.max_output_bytes.max(1),
        );

        // 5–6. The exit, the deadline or cancellation; then the group ends.
        let finished = self
            .run_to_end(name, &mut child, io, pgid, launch.deadline, cancelled)
            .await;

        // 7. Release: the group's lease once it is gone; the directory's
        // once it is removed. What cannot be released stays for the reaper.
        if finished.end.is_gone() {
            cleanup.pgid = None;
            self.release(&group_lease.lease_id).await;
        } else {
            tracing::warn!(
                tool = name,
                pgid,
                "process group survived SIGKILL; its lease stays for the reaper"
            );
        }
        self.finish_temp(&mut cleanup, &temp.lease.lease_id).await;
        if finished.end != GroupEnd::AlreadyGone && matches!(finished.ended, Ended::Exited(_)) {
            tracing::warn!(
                tool = name,
                pgid,
                end = ?finished.end,
                "the command left processes behind; they were ended"
            );
        }

        let Finished {
            ended,
            end,
            out,
            err,
        } = finished;
        classify(target, ended, launch.limit, end, &out, &err)
    }

    /// Step 1: leases the attempt's temporary directory, then creates it (a
    /// crash between the two leaves a lease the reaper finds nothing under).
    async fn lease_temp_dir(
        &self,
        name: &str,
        attempt: &Attempt<'_>,
        limit: Duration,
        cleanup: &mut Cleanup,
    ) -> Result<TempDir, Failure> {
        let base = format!("cmd-{}", uuid::Uuid::now_v7());
        let path = self.temp_root.join(format!("{TEMP_DIR_PREFIX}{base}"));
        let now = self.clock.timestamp();
        let expires =
            now.saturating_add(limit + self.kill_grace + KILL_WAIT_BOUND + self.lease_margin);
        let lease = Lease {
            lease_id: format!("{base}-tmp"),
            run_id: attempt.run_id.clone(),
            intent_id: Some(attempt.intent_id.clone()),
            kind: LeaseKind::TempPath,
            pgid: None,
            path: Some(path.clone()),
            owner: self.owner.clone(),
            acquired_at_ms: now,
            expires_at_ms: expires,
        };
        self.store
            .acquire_lease(lease.clone())
            .await
            .map_err(|e| store_failure(name, "lease its temporary directory", &e))?;
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&path) {
            self.release(&lease.lease_id).await;
            return Err(not_started(
                name,
                Category::Unknown,
                &format!("cannot create {}: {e}", path.display()),
            ));
        }
        cleanup.dir = Some(path.clone());
        Ok(TempDir { base, lease, path })
    }

    /// Steps 5 and 6: waits for the exit, the deadline or cancellation,
    /// reading output meanwhile so the program never blocks on a full pipe;
    /// then ends the whole group (what is left after an exit is a leak; at
    /// the deadline or on cancellation, everything goes).
    async fn run_to_end(
        &self,
        name: &str,
        child: &mut Child,
        io: impl Future<Output = (Captured, Captured)>,
        pgid: i32,
        deadline: Instant,
        cancelled: impl Future<Output = ()>,
    ) -> Finished {
        tokio::pin!(io);
        tokio::pin!(cancelled);
        let mut output = None;
        let ended = loop {
            tokio::select! {
                done = &mut io, if output.is_none() => output = Some(done),
                status = child.wait() => break match status {
                    Ok(status) => Ended::Exited(status),
                    Err(e) => Ended::WaitFailed(e),
                },
                () = self.clock.sleep_until(deadline) => break Ended::Deadline,
                () = &mut cancelled => break Ended::Cancelled,
            }
        };
        let end = terminate_group(self.clock.as_ref(), pgid, self.kill_grace, || {
            let _ = child.try_wait();
        })
        .await;
        if !matches!(ended, Ended::Exited(_))
            && self
                .clock
                .timeout(KILL_WAIT_BOUND, child.wait())
                .await
                .is_err()
        {
            tracing::warn!(
                tool = name,
                pgid,
                "the command's process did not exit after SIGKILL"
            );
        }
        let (out, err) = match output {
            Some(done) => done,
            None => self
                .clock
                .timeout(OUTPUT_DRAIN_BOUND, &mut io)
                .await
                .unwrap_or_default(),
        };
        Finished {
            ended,
            end,
            out,
            err,
        }
    }

    /// Ends a gate that was never told to go, and collects it.
    async fn stop_unstarted(&self, child: &mut Child, pgid: i32) {
        kill_group_now(pgid);
        let _ = self.clock.timeout(KILL_WAIT_BOUND, child.wait()).await;
    }

    /// Removes the temporary directory and releases its lease; if removal
    /// fails, the lease stays for the reaper.
    async fn finish_temp(&self, cleanup: &mut Cleanup, lease_id: &str) {
        let removed = match cleanup.dir.take() {
            Some(dir) => match std::fs::remove_dir_all(&dir) {
                Ok(()) => true,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
                Err(e) => {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a leased temporary directory; its lease stays for the reaper");
                    false
                }
            },
            None => true,
        };
        if removed {
            self.release(lease_id).await;
        }
    }

    /// Releases a lease; a failure leaves it to expire and be reaped.
    async fn release(&self, lease_id: &str) {
        if let Err(e) = self.store.release_lease(lease_id).await {
            tracing::warn!(lease_id, error = %e, "cannot release a lease; it will expire and be reaped");
        }
    }
}

/// Step 2: the start gate, `/bin/sh` waiting for `go` in a new process
/// group, with only the child's environment, the group's lease id (the
/// reaper's marker) and the temporary directory.
fn gate_command(
    target: &CommandTarget,
    launch: &Launch,
    group_lease_id: &str,
    dir: &Path,
) -> Command {
    let mut command = Command::new(GATE_SHELL);
    command
        .arg("-c")
        .arg(GATE_SCRIPT)
        .arg("rein-command")
        .arg(&launch.program)
        .args(&target.args)
        .env_clear()
        .envs(&launch.env)
        .env(LEASE_ID_ENV, group_lease_id)
        .env(TEMP_DIR_ENV, dir)
        .env("TMPDIR", dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(working_dir) = &target.working_dir {
        command.current_dir(working_dir);
    }
    command
}

/// Step 4: tells the gate to start the program; `None` when the gate is
/// gone (its stdin closed).
async fn say_go(child: &mut Child) -> Option<ChildStdin> {
    let mut stdin = child.stdin.take()?;
    stdin.write_all(b"go\n").await.ok()?;
    Some(stdin)
}

/// Feeds `input` to the program's stdin and reads its stdout and stderr,
/// each kept up to `max` bytes.
async fn feed_and_read<O, E>(
    mut stdin: ChildStdin,
    stdout: Option<O>,
    stderr: Option<E>,
    input: Vec<u8>,
    max: usize,
) -> (Captured, Captured)
where
    O: AsyncRead + Unpin,
    E: AsyncRead + Unpin,
{
    let feed = async move {
        // A program that does not read its input closes the pipe early;
        // that is its business.
        let _ = stdin.write_all(&input).await;
        let _ = stdin.shutdown().await;
    };
    let ((), out, err) = tokio::join!(feed, read_capped(stdout, max), read_capped(stderr, max));
    (out, err)
}

pub(super) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

//! One attempt, in order: lease the temporary directory, spawn the start
//! gate in a new process group, lease the group, say `go`, wait, end the
//! group, release (see the [module docs](super#the-start-gate-no-window-between-spawn-and-lease)).

use std::ffi::OsString;
use std::future::Future;
use std::os::unix::fs::DirBuilderExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rein_core::{Category, Clock, Failure};
use rein_store::{Lease, LeaseKind};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

use super::classify::{Ended, classify, not_started, store_failure};
use super::env::{child_env, resolve_program};
use super::output::read_capped;
use super::{
    Attempt, CommandTarget, CommandToolAdapter, GATE_SCRIPT, GATE_SHELL, OUTPUT_DRAIN_BOUND,
    TEMP_DIR_ENV, ToolOutput,
};
use crate::lease::{
    GroupEnd, KILL_WAIT_BOUND, LEASE_ID_ENV, TEMP_DIR_PREFIX, kill_group_now, terminate_group,
};

/// Kills the group and removes the directory if the attempt is dropped
/// before it cleaned up (its future was cancelled by the caller). The
/// leases stay and expire; the reaper then finds nothing and releases them.
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
        let limit = attempt.total_limit();
        if limit.is_zero() {
            return Err(not_started(
                name,
                Category::Timeout,
                "no time left to start it",
            ));
        }
        let deadline = self.clock.now() + limit;
        let env = child_env(target, attempt, limit);
        let program = resolve_program(
            &target.program,
            target.working_dir.as_deref(),
            env.get("PATH").map(OsString::as_os_str),
        )
        .map_err(|why| not_started(name, Category::Unknown, &why))?;
        let input = serde_json::to_vec(args)
            .map_err(|e| not_started(name, Category::InvalidArguments, &e.to_string()))?;

        // 1. The temporary directory: leased, then created.
        let base = format!("cmd-{}", uuid::Uuid::now_v7());
        let dir = self.temp_root.join(format!("{TEMP_DIR_PREFIX}{base}"));
        let now = unix_ms(self.clock.system_now());
        let expires = now.saturating_add(duration_ms(
            limit + self.kill_grace + KILL_WAIT_BOUND + self.lease_margin,
        ));
        let temp_lease = Lease {
            lease_id: format!("{base}-tmp"),
            run_id: attempt.run_id.clone(),
            intent_id: Some(attempt.intent_id.clone()),
            kind: LeaseKind::TempPath,
            pgid: None,
            path: Some(dir.clone()),
            owner: self.owner.clone(),
            acquired_at_ms: now,
            expires_at_ms: expires,
        };
        self.store
            .acquire_lease(temp_lease.clone())
            .await
            .map_err(|e| store_failure(name, "lease its temporary directory", &e))?;
        let mut cleanup = Cleanup {
            pgid: None,
            dir: None,
        };
        if let Err(e) = std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            self.release(&temp_lease.lease_id).await;
            return Err(not_started(
                name,
                Category::Unknown,
                &format!("cannot create {}: {e}", dir.display()),
            ));
        }
        cleanup.dir = Some(dir.clone());

        // 2. The gate, in a new process group; the program waits in it.
        let group_lease_id = format!("{base}-pg");
        let mut command = Command::new(GATE_SHELL);
        command
            .arg("-c")
            .arg(GATE_SCRIPT)
            .arg("rein-command")
            .arg(&program)
            .args(&target.args)
            .env_clear()
            .envs(&env)
            .env(LEASE_ID_ENV, &group_lease_id)
            .env(TEMP_DIR_ENV, &dir)
            .env("TMPDIR", &dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        if let Some(working_dir) = &target.working_dir {
            command.current_dir(working_dir);
        }
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => {
                self.finish_temp(&mut cleanup, &temp_lease.lease_id).await;
                return Err(not_started(
                    name,
                    Category::Unknown,
                    &format!("cannot start {}: {e}", program.display()),
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
            ..temp_lease.clone()
        };
        if let Err(e) = self.store.acquire_lease(group_lease.clone()).await {
            self.stop_unstarted(&mut child, pgid).await;
            cleanup.pgid = None;
            self.finish_temp(&mut cleanup, &temp_lease.lease_id).await;
            return Err(store_failure(name, "lease its process group", &e));
        }

        // 4. Go: from here on the program may act.
        let mut stdin = child.stdin.take();
        let opened = match stdin.as_mut() {
            Some(pipe) => pipe.write_all(b"go\n").await.is_ok(),
            None => false,
        };
        if !opened {
            self.stop_unstarted(&mut child, pgid).await;
            cleanup.pgid = None;
            self.release(&group_lease.lease_id).await;
            self.finish_temp(&mut cleanup, &temp_lease.lease_id).await;
            return Err(not_started(
                name,
                Category::Unknown,
                "the start gate exited before the program was started",
            ));
        }
        let max = target.max_output_bytes.max(1);
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let io = async move {
            let feed = async move {
                if let Some(mut pipe) = stdin {
                    // A program that does not read its input closes the
                    // pipe early; that is its business.
                    let _ = pipe.write_all(&input).await;
                    let _ = pipe.shutdown().await;
                }
            };
            let ((), out, err) =
                tokio::join!(feed, read_capped(stdout, max), read_capped(stderr, max));
            (out, err)
        };
        tokio::pin!(io);
        tokio::pin!(cancelled);

        // 5. Wait for the exit, the deadline or cancellation; read output
        // meanwhile so the program never blocks on a full pipe.
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

        // 6. End the whole group: what is left after an exit is a leak; at
        // the deadline or on cancellation, everything goes.
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

        // 7. Release: the group's lease once it is gone; the directory's
        // once it is removed. What cannot be released stays for the reaper.
        if end.is_gone() {
            cleanup.pgid = None;
            self.release(&group_lease.lease_id).await;
        } else {
            tracing::warn!(
                tool = name,
                pgid,
                "process group survived SIGKILL; its lease stays for the reaper"
            );
        }
        self.finish_temp(&mut cleanup, &temp_lease.lease_id).await;
        if end != GroupEnd::AlreadyGone && matches!(ended, Ended::Exited(_)) {
            tracing::warn!(
                tool = name,
                pgid,
                ?end,
                "the command left processes behind; they were ended"
            );
        }

        classify(target, ended, limit, end, &out, &err)
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

fn unix_ms(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, duration_ms)
}

pub(super) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

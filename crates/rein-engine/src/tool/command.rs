//! The command tool adapter: one attempt of a tool call as a local
//! program, in its own process group, under a lease, classified into the
//! error contract.
//!
//! # Why a process group and a lease
//!
//! A command tool that times out and only has its direct child killed
//! leaves its children running; a few loop iterations later the machine is
//! full of them (seed 000, "Resource Failures: Subprocesses, Handles, and
//! Leaks"). So every attempt runs in a new process group and the whole
//! group is ended — SIGTERM, then SIGKILL after a grace — at the deadline,
//! on cancellation, and after the program exits (anything it left in the
//! background is a leak by definition). Its temporary directory and its
//! process group are leased in the [`Store`] before they exist, so that
//! when the process running the adapter crashes, the
//! [`Reaper`](crate::lease::Reaper) of a later process reclaims them.
//!
//! # The start gate: no window between spawn and lease
//!
//! The group's id is only known once the child exists, and a crash between
//! spawning a program and recording its group would leak it. So the child
//! is spawned as a gate — `/bin/sh` waiting for one line on stdin — and the
//! program only starts (`exec`, same process, same group) after the group's
//! lease is durable and the adapter writes `go`. If the adapter dies before
//! that, the gate reads end-of-file and exits without running anything.
//! The order is:
//!
//! ```text
//!   lease temp dir ─► mkdir ─► spawn gate (new group) ─► lease group ─► "go" ─► exec program
//!        │ crash: reaper      │ crash: gate exits       │ crash: gate exits, reaper removes dir
//! ```
//!
//! # Protocol
//!
//! The program gets the call's JSON arguments on stdin and these variables
//! (and no others from rein's own environment but [`INHERITED_ENV`], plus
//! the tool's configured `env`):
//!
//! | variable | value |
//! | --- | --- |
//! | `REIN_RUN_ID`, `REIN_INTENT_ID` | the correlation ids |
//! | `REIN_ATTEMPT`, `REIN_ATTEMPT_ID` | the attempt number (from 1) and id |
//! | `REIN_DEADLINE_MS` | milliseconds until the group is killed |
//! | `REIN_IDEMPOTENCY_KEY` | the key, for classes that have one |
//! | `REIN_LEASE_ID` | the group's lease (the reaper's marker) |
//! | `REIN_TEMP_DIR`, `TMPDIR` | the attempt's leased temporary directory, removed afterwards |
//!
//! Its stdout is the result: JSON if it parses, else `{"text": ...}`;
//! empty is `null`. Exit code 0 is success; any other is a [`Failure`]:
//! `unknown`, not retryable, except 75 (`EX_TEMPFAIL`): `transient`,
//! retryable; the effect is `maybe_applied`. A program that prints a
//! structured error `{"error": {"category": ..., "retryable": ...,
//! "effect": ..., "retry_after_ms": ..., "message": ...}}` on stdout and
//! exits non-zero is classified by it, as the HTTP adapter does. Killed at
//! the deadline: `timeout`, `maybe_applied`; cancelled: `cancelled`,
//! `maybe_applied`; refused before the program started (not found, lease
//! not stored, ...): `not_applied`.
//!
//! Stdout and stderr are each kept up to `max_output_bytes`; the rest is
//! read and discarded (so the program never blocks on a full pipe) and a
//! truncated stdout carries a `_truncated` note. Stderr is for operators:
//! it appears in a failure's human message, never in the model's.
//!
//! # Using it standalone
//!
//! The run loop binds HTTP tools today. To call a registry `command` tool
//! yourself, build a [`CommandTarget`] with [`CommandTarget::from_spec`]
//! and call [`CommandToolAdapter::invoke`] with an [`Attempt`]:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use std::time::Duration;
//! # use rein_core::{AttemptId, IntentId, RunId};
//! # use rein_engine::tool::command::{CommandTarget, CommandToolAdapter};
//! # use rein_engine::tool::Attempt;
//! # use rein_store::{SqliteStore, Store};
//! # async fn demo(run_id: RunId) -> Result<(), Box<dyn std::error::Error>> {
//! let store: Arc<dyn Store> = Arc::new(SqliteStore::open("rein.db")?);
//! let adapter = CommandToolAdapter::new(store);
//! let target = CommandTarget::new("word_count", "wc").with_args(["-c"]);
//! let intent = IntentId::new("intent-1")?;
//! let attempt_id = AttemptId::new("intent-1/1")?;
//! let attempt = Attempt {
//!     run_id: &run_id, // a run that exists in the store
//!     intent_id: &intent,
//!     attempt_id: &attempt_id,
//!     number: 1,
//!     key: None,
//!     remaining: Duration::from_secs(30),
//!     allowance: Duration::from_secs(10),
//! };
//! let output = adapter
//!     .invoke(&target, &serde_json::json!({"text": "hello"}), &attempt)
//!     .await?;
//! println!("{}", output.result);
//! # Ok(())
//! # }
//! ```
//!
//! # Defaults
//!
//! | setting | default |
//! | --- | --- |
//! | time limit | [`Attempt::total_limit`] (2 × allowance, capped by the run's remainder) |
//! | SIGTERM → SIGKILL grace | [`DEFAULT_KILL_GRACE`] (2 s) |
//! | lease expiry | limit + grace + [`DEFAULT_LEASE_MARGIN`] (30 s) |
//! | output kept | `max_output_bytes`, [`DEFAULT_MAX_OUTPUT_BYTES`] (64 KiB) each |
//! | temporary directories | under [`std::env::temp_dir`] |

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::future::Future;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rein_core::registry::AdapterSpec;
pub use rein_core::registry::DEFAULT_MAX_OUTPUT_BYTES;
use rein_core::{Category, Clock, Effect, Failure};
use rein_store::{Lease, LeaseKind, Store, StoreError};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};

use super::{Attempt, ErrorBody, ToolOutput};
pub use crate::lease::DEFAULT_KILL_GRACE;
use crate::lease::{
    GroupEnd, KILL_WAIT_BOUND, LEASE_ID_ENV, Owner, TEMP_DIR_PREFIX, kill_group_now,
    terminate_group,
};
use crate::{SystemClock, Timer};

/// The run id.
pub const RUN_ID_ENV: &str = "REIN_RUN_ID";
/// The intent id.
pub const INTENT_ID_ENV: &str = "REIN_INTENT_ID";
/// The attempt number, from 1.
pub const ATTEMPT_ENV: &str = "REIN_ATTEMPT";
/// The attempt id.
pub const ATTEMPT_ID_ENV: &str = "REIN_ATTEMPT_ID";
/// Milliseconds until the process group is killed.
pub const DEADLINE_ENV: &str = "REIN_DEADLINE_MS";
/// The idempotency key, when the tool's class has one.
pub const IDEMPOTENCY_KEY_ENV: &str = "REIN_IDEMPOTENCY_KEY";
/// The attempt's leased temporary directory (also in `TMPDIR`).
pub const TEMP_DIR_ENV: &str = "REIN_TEMP_DIR";

/// The variables of rein's own environment a command inherits; everything
/// else (API keys, tokens) stays out unless the tool's `env` names it.
pub const INHERITED_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
];

/// The exit code (`EX_TEMPFAIL`, sysexits.h) that says "try again later":
/// a transient, retryable failure.
pub const EX_TEMPFAIL: i32 = 75;

/// How long a lease outlives its call's limit and kill grace: the time a
/// live owner has to release it before the reaper considers it.
pub const DEFAULT_LEASE_MARGIN: Duration = Duration::from_secs(30);

/// How long to keep reading output after the process group is gone: a
/// process that left the group (`setsid`) may hold the pipes open.
const OUTPUT_DRAIN_BOUND: Duration = Duration::from_millis(500);

/// The most stderr characters a failure's human message quotes.
const HUMAN_STDERR_CHARS: usize = 2_000;

/// The shell the start gate runs in.
const GATE_SHELL: &str = "/bin/sh";

/// The start gate: waits for the line `go`, then becomes the program. On
/// end-of-file (the adapter died before the group's lease was stored) it
/// exits with [`GATE_REFUSED`] and the program never runs.
const GATE_SCRIPT: &str = "IFS= read -r rein_gate && [ \"$rein_gate\" = go ] || exit 125; \
                           unset rein_gate; exec \"$@\"";

/// The gate's exit code when it was never told to go.
const GATE_REFUSED: i32 = 125;

/// How to run one command tool.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct CommandTarget {
    /// The tool's name: the target of its failures.
    pub name: String,
    /// The program: a bare name is looked up on `PATH` (the tool's own if
    /// its `env` sets one); a relative path is relative to `working_dir`.
    pub program: PathBuf,
    /// Its arguments (no shell).
    pub args: Vec<String>,
    /// The working directory; the adapter's own when `None`.
    pub working_dir: Option<PathBuf>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Stdout and stderr bytes kept, each.
    pub max_output_bytes: usize,
}

impl std::fmt::Debug for CommandTarget {
    // By hand: credential-named variables are not printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: BTreeMap<&str, &str> = self
            .env
            .iter()
            .map(|(name, value)| {
                let shown = if rein_core::redact::is_credential_name(name) {
                    rein_core::redact::REDACTED
                } else {
                    value.as_str()
                };
                (name.as_str(), shown)
            })
            .collect();
        f.debug_struct("CommandTarget")
            .field("name", &self.name)
            .field("program", &self.program)
            .field("args", &self.args)
            .field("working_dir", &self.working_dir)
            .field("env", &env)
            .field("max_output_bytes", &self.max_output_bytes)
            .finish()
    }
}

impl CommandTarget {
    /// `program` as tool `name`, with no arguments and the defaults.
    pub fn new(name: impl Into<String>, program: impl Into<PathBuf>) -> CommandTarget {
        CommandTarget {
            name: name.into(),
            program: program.into(),
            args: Vec::new(),
            working_dir: None,
            env: BTreeMap::new(),
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }

    /// The target of registry tool `name` whose adapter is `spec`; `None`
    /// when `spec` is not a command adapter.
    pub fn from_spec(name: &str, spec: &AdapterSpec) -> Option<CommandTarget> {
        match spec {
            AdapterSpec::Command {
                program,
                args,
                working_dir,
                env,
                max_output_bytes,
                ..
            } => Some(CommandTarget {
                name: name.to_owned(),
                program: program.clone(),
                args: args.clone(),
                working_dir: working_dir.clone(),
                env: env.clone(),
                max_output_bytes: *max_output_bytes,
            }),
            _ => None,
        }
    }

    /// Sets the arguments.
    pub fn with_args<I, S>(mut self, args: I) -> CommandTarget
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args = args.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the working directory.
    pub fn with_working_dir(mut self, dir: impl Into<PathBuf>) -> CommandTarget {
        self.working_dir = Some(dir.into());
        self
    }

    /// Adds an environment variable.
    pub fn with_env(mut self, name: impl Into<String>, value: impl Into<String>) -> CommandTarget {
        self.env.insert(name.into(), value.into());
        self
    }

    /// Sets the bytes of stdout and of stderr kept (at least 1).
    pub fn with_max_output_bytes(mut self, max: usize) -> CommandTarget {
        self.max_output_bytes = max.max(1);
        self
    }
}

/// Runs command tools, each attempt in its own leased process group.
#[derive(Clone)]
pub struct CommandToolAdapter {
    store: Arc<dyn Store>,
    owner: String,
    temp_root: PathBuf,
    kill_grace: Duration,
    lease_margin: Duration,
    /// Times the deadline and the group's end; dates the leases.
    clock: Arc<dyn Timer>,
}

impl std::fmt::Debug for CommandToolAdapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandToolAdapter")
            .field("owner", &self.owner)
            .field("temp_root", &self.temp_root)
            .field("kill_grace", &self.kill_grace)
            .field("lease_margin", &self.lease_margin)
            .finish_non_exhaustive()
    }
}

/// How the wait for the program ended.
enum Ended {
    Exited(ExitStatus),
    Deadline,
    Cancelled,
    WaitFailed(std::io::Error),
}

/// What was read from one output stream.
#[derive(Debug, Default)]
struct Captured {
    kept: Vec<u8>,
    total: u64,
}

impl Captured {
    fn truncated(&self) -> bool {
        self.total > self.kept.len() as u64
    }
}

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
    /// An adapter that leases in `store`, as this process ([`Owner`]).
    pub fn new(store: Arc<dyn Store>) -> CommandToolAdapter {
        CommandToolAdapter {
            store,
            owner: Owner::current().to_string(),
            temp_root: std::env::temp_dir(),
            kill_grace: DEFAULT_KILL_GRACE,
            lease_margin: DEFAULT_LEASE_MARGIN,
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// Uses `clock` instead of the system clock (the engine's own).
    pub fn with_clock(mut self, clock: Arc<dyn Timer>) -> CommandToolAdapter {
        self.clock = clock;
        self
    }

    /// Makes temporary directories under `root` (an absolute path).
    pub fn with_temp_root(mut self, root: impl Into<PathBuf>) -> CommandToolAdapter {
        self.temp_root = root.into();
        self
    }

    /// Sets the grace between SIGTERM and SIGKILL.
    pub fn with_kill_grace(mut self, grace: Duration) -> CommandToolAdapter {
        self.kill_grace = grace;
        self
    }

    /// Sets how long a lease outlives its call's limit and grace.
    pub fn with_lease_margin(mut self, margin: Duration) -> CommandToolAdapter {
        self.lease_margin = margin;
        self
    }

    /// The owner id its leases carry.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Makes one attempt, killed at [`Attempt::total_limit`].
    ///
    /// # Errors
    ///
    /// A classified [`Failure`] carrying the attempt id (see the
    /// [module docs](self#protocol)).
    pub async fn invoke(
        &self,
        target: &CommandTarget,
        args: &Value,
        attempt: &Attempt<'_>,
    ) -> Result<ToolOutput, Failure> {
        self.invoke_until(target, args, attempt, std::future::pending())
            .await
    }

    /// Makes one attempt that also ends, with the whole process group
    /// killed, when `cancelled` completes (pass a
    /// `CancellationToken::cancelled()`, a channel receive, ...).
    ///
    /// # Errors
    ///
    /// A classified [`Failure`] carrying the attempt id; `cancelled` when
    /// `cancelled` completed first.
    pub async fn invoke_until(
        &self,
        target: &CommandTarget,
        args: &Value,
        attempt: &Attempt<'_>,
        cancelled: impl Future<Output = ()>,
    ) -> Result<ToolOutput, Failure> {
        // Credential-named variables are taught to the redactor before the
        // program can print them.
        crate::secrets::teach(
            target
                .env
                .iter()
                .flat_map(|(name, value)| rein_core::redact::env_secrets(name, value)),
        );
        self.attempt(target, args, attempt, cancelled)
            .await
            .map_err(|f| f.with_attempt(attempt.attempt_id.clone()))
    }

    async fn attempt(
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

/// The environment of the child: the inherited few, the tool's own, and
/// rein's correlation variables (which win).
fn child_env(
    target: &CommandTarget,
    attempt: &Attempt<'_>,
    limit: Duration,
) -> BTreeMap<String, OsString> {
    let mut env: BTreeMap<String, OsString> = INHERITED_ENV
        .iter()
        .filter_map(|name| Some(((*name).to_owned(), std::env::var_os(name)?)))
        .collect();
    for (name, value) in &target.env {
        env.insert(name.clone(), value.into());
    }
    let mut set = |name: &str, value: &str| {
        env.insert(name.to_owned(), value.into());
    };
    set(RUN_ID_ENV, attempt.run_id.as_str());
    set(INTENT_ID_ENV, attempt.intent_id.as_str());
    set(ATTEMPT_ENV, &attempt.number.to_string());
    set(ATTEMPT_ID_ENV, attempt.attempt_id.as_str());
    set(DEADLINE_ENV, &duration_ms(limit).to_string());
    if let Some(key) = attempt.key {
        set(IDEMPOTENCY_KEY_ENV, key.as_str());
    } else {
        env.remove(IDEMPOTENCY_KEY_ENV);
    }
    env
}

/// The absolute path of an executable `program`: a path is taken relative
/// to `working_dir` (or the current directory); a bare name is searched in
/// the absolute directories of `path`.
fn resolve_program(
    program: &Path,
    working_dir: Option<&Path>,
    path: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, String> {
    if program.as_os_str().is_empty() {
        return Err("the program is empty".to_owned());
    }
    let is_bare = program.components().count() == 1 && !program.is_absolute();
    if !is_bare {
        let candidate = if program.is_absolute() {
            program.to_path_buf()
        } else {
            let base = match working_dir {
                Some(dir) if dir.is_absolute() => dir.to_path_buf(),
                Some(dir) => std::env::current_dir()
                    .map_err(|e| format!("cannot read the current directory: {e}"))?
                    .join(dir),
                None => std::env::current_dir()
                    .map_err(|e| format!("cannot read the current directory: {e}"))?,
            };
            base.join(program)
        };
        return if is_executable(&candidate) {
            Ok(candidate)
        } else {
            Err(format!("{} is not an executable file", candidate.display()))
        };
    }
    std::env::split_paths(path.unwrap_or_default())
        .filter(|dir| dir.is_absolute())
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| format!("program `{}` was not found on PATH", program.display()))
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Reads `reader` to its end, keeping the first `max` bytes and counting
/// the rest. A read error ends the stream (what was read is kept).
async fn read_capped<R: AsyncRead + Unpin>(reader: Option<R>, max: usize) -> Captured {
    let mut captured = Captured::default();
    let Some(mut reader) = reader else {
        return captured;
    };
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = max.saturating_sub(captured.kept.len());
                captured.kept.extend_from_slice(&buf[..n.min(room)]);
                captured.total = captured.total.saturating_add(n as u64);
            }
        }
    }
    captured
}

/// `bytes` as text, never longer than `bytes` (a cut multi-byte character
/// becomes U+FFFD).
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The result of a successful run from its stdout.
fn shape_stdout(out: &Captured, max: usize) -> (Value, bool) {
    if out.truncated() {
        let result = json!({
            "text": text(&out.kept),
            "_truncated": {
                "stream": "stdout",
                "original_bytes": out.total,
                "limit_bytes": max,
                "note": "output truncated to the size limit; the rest was discarded",
            },
        });
        return (result, true);
    }
    if out.kept.iter().all(u8::is_ascii_whitespace) {
        return (Value::Null, false);
    }
    let value = serde_json::from_slice::<Value>(&out.kept)
        .unwrap_or_else(|_| json!({ "text": text(&out.kept) }));
    (value, false)
}

/// The end of stderr for an operator, saying when it was cut.
///
/// Redacted before it is cut, both where the capture limit cut it (a
/// fragment of a secret at that edge goes too) and where only its last
/// [`HUMAN_STDERR_CHARS`] are kept: a secret across either cut never
/// leaves a part in clear.
fn stderr_note(err: &Captured) -> String {
    let all = rein_core::redact::cut(&text(&err.kept), false, err.truncated());
    let trimmed = all.trim_end();
    let count = trimmed.chars().count();
    let tail: String = if count > HUMAN_STDERR_CHARS {
        format!("…{}", rein_core::redact::tail(trimmed, HUMAN_STDERR_CHARS))
    } else {
        trimmed.to_owned()
    };
    let mut note = if tail.is_empty() {
        "stderr empty".to_owned()
    } else {
        format!("stderr: {tail}")
    };
    if err.truncated() {
        note.push_str(&format!(
            " (stderr truncated: {} of {} bytes kept)",
            err.kept.len(),
            err.total
        ));
    }
    note
}

fn classify(
    target: &CommandTarget,
    ended: Ended,
    limit: Duration,
    end: GroupEnd,
    out: &Captured,
    err: &Captured,
) -> Result<ToolOutput, Failure> {
    let name = target.name.as_str();
    let group = match end {
        GroupEnd::AlreadyGone | GroupEnd::Terminated => "process group ended",
        GroupEnd::Killed => "process group killed",
        GroupEnd::Survived => "process group survived SIGKILL",
    };
    match ended {
        Ended::Exited(status) if status.success() => {
            let (mut result, truncated) = shape_stdout(out, target.max_output_bytes.max(1));
            // Known secrets go, as for HTTP tools (tool::http).
            rein_core::redact::known_json(&mut result);
            Ok(ToolOutput {
                result,
                truncated,
                replayed: false,
            })
        }
        Ended::Exited(status) => Err(exit_failure(name, status, out, err)),
        Ended::Deadline => Err(Failure::new(name, Category::Timeout)
            .with_effect(Effect::MaybeApplied)
            .with_human_message(format!(
                "{name}: killed at its deadline of {limit:?} ({group}); {}",
                stderr_note(err)
            ))),
        Ended::Cancelled => Err(Failure::new(name, Category::Cancelled)
            .with_effect(Effect::MaybeApplied)
            .with_human_message(format!("{name}: cancelled ({group}); {}", stderr_note(err)))),
        Ended::WaitFailed(e) => Err(Failure::new(name, Category::Unknown)
            .with_effect(Effect::MaybeApplied)
            .with_human_message(format!(
                "{name}: cannot wait for the process: {e} ({group})"
            ))),
    }
}

/// A non-zero exit: the program's structured error if it printed one, else
/// the exit code's classification.
fn exit_failure(name: &str, status: ExitStatus, out: &Captured, err: &Captured) -> Failure {
    use std::os::unix::process::ExitStatusExt;
    let how = match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => "ended abnormally".to_owned(),
    };
    if status.code() == Some(GATE_REFUSED) && out.total == 0 {
        tracing::debug!(
            tool = name,
            "exit code 125: the program may not have started"
        );
    }
    let structured = (!out.truncated())
        .then(|| serde_json::from_slice::<ErrorBody>(&out.kept).ok())
        .flatten();
    if let Some(ErrorBody { error }) = structured {
        let mut f = Failure::new(name, error.category)
            .with_effect(error.effect.unwrap_or(Effect::MaybeApplied));
        if let Some(retryable) = error.retryable {
            f = f.with_retryable(retryable);
        }
        if let Some(ms) = error.retry_after_ms {
            f = f.with_retry_after(Duration::from_millis(ms));
        }
        let message = error.message.unwrap_or_default();
        return f.with_human_message(format!("{name} {how}: {message}; {}", stderr_note(err)));
    }
    let f = if status.code() == Some(EX_TEMPFAIL) {
        Failure::new(name, Category::Transient).with_retryable(true)
    } else {
        Failure::new(name, Category::Unknown).with_retryable(false)
    };
    f.with_effect(Effect::MaybeApplied)
        .with_human_message(format!("{name} {how}; {}", stderr_note(err)))
}

/// A failure before the program started: nothing happened.
fn not_started(name: &str, category: Category, why: &str) -> Failure {
    Failure::new(name, category)
        .with_effect(Effect::NotApplied)
        .with_human_message(format!("{name} was not started: {why}"))
}

/// A store failure before the program started: retryable when the store
/// is only briefly unavailable.
fn store_failure(name: &str, what: &str, e: &StoreError) -> Failure {
    let category = if e.is_transient() {
        Category::Transient
    } else {
        Category::Unknown
    };
    not_started(name, category, &format!("cannot {what}: {e}"))
}

fn unix_ms(now: SystemTime) -> u64 {
    now.duration_since(UNIX_EPOCH).map_or(0, duration_ms)
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;

    use super::*;

    fn captured(bytes: &[u8], total: u64) -> Captured {
        Captured {
            kept: bytes.to_vec(),
            total,
        }
    }

    fn exited(code: i32) -> ExitStatus {
        ExitStatus::from_raw(code << 8)
    }

    #[test]
    fn stdout_json_passes_through_and_text_is_wrapped() {
        let out = captured(br#"{"rows": 3}"#, 11);
        assert_eq!(shape_stdout(&out, 100), (json!({"rows": 3}), false));
        let out = captured(b"plain words\n", 12);
        assert_eq!(
            shape_stdout(&out, 100),
            (json!({"text": "plain words\n"}), false)
        );
        assert_eq!(
            shape_stdout(&captured(b" \n", 2), 100),
            (Value::Null, false)
        );
    }

    #[test]
    fn truncated_stdout_says_so_and_survives_cut_characters() {
        // "é" is two bytes; the cut falls inside it.
        let out = captured(&"aé".as_bytes()[..2], 1_000);
        let (v, truncated) = shape_stdout(&out, 2);
        assert!(truncated);
        assert_eq!(v["_truncated"]["original_bytes"], 1_000);
        assert_eq!(v["_truncated"]["limit_bytes"], 2);
        assert!(v["text"].as_str().unwrap().starts_with('a'));
    }

    #[test]
    fn non_utf8_output_does_not_panic() {
        let out = captured(&[0xff, 0xfe, b'x'], 3);
        let (v, _) = shape_stdout(&out, 10);
        assert!(v["text"].as_str().unwrap().ends_with('x'));
        let f = exit_failure("t", exited(1), &out, &out);
        assert!(f.human_message().contains("stderr:"));
    }

    #[test]
    fn exit_codes_classify_and_tempfail_is_retryable() {
        let none = Captured::default();
        let f = exit_failure("t", exited(2), &none, &none);
        assert_eq!(f.category(), Category::Unknown);
        assert!(!f.retryable());
        assert_eq!(f.effect(), Effect::MaybeApplied);
        let f = exit_failure("t", exited(EX_TEMPFAIL), &none, &none);
        assert_eq!(f.category(), Category::Transient);
        assert!(f.retryable());
        assert_eq!(f.effect(), Effect::MaybeApplied);
        let f = exit_failure("t", ExitStatus::from_raw(9), &none, &none);
        assert!(
            f.human_message().contains("signal 9"),
            "{}",
            f.human_message()
        );
    }

    #[test]
    fn a_structured_error_wins_over_the_exit_code() {
        let body = br#"{"error":{"category":"conflict","effect":"not_applied","message":"order is locked"}}"#;
        let out = captured(body, body.len() as u64);
        let f = exit_failure("t", exited(EX_TEMPFAIL), &out, &Captured::default());
        assert_eq!(f.category(), Category::Conflict);
        assert_eq!(f.effect(), Effect::NotApplied);
        assert!(!f.retryable());
        assert!(f.human_message().contains("order is locked"));
        assert!(!f.model_message().contains("order is locked"));
    }

    #[test]
    fn stderr_note_keeps_the_end_and_says_when_cut() {
        let long = "x".repeat(HUMAN_STDERR_CHARS + 10) + "END";
        let note = stderr_note(&captured(long.as_bytes(), 1_000_000));
        assert!(note.ends_with("kept)"), "{note}");
        assert!(note.contains("END"));
        assert!(note.contains("stderr truncated"));
    }

    /// Issue 12 (review): the last 2000 characters were cut before they
    /// were redacted, so a secret across the cut left its end in clear.
    #[test]
    fn stderr_note_redacts_before_cutting_at_either_edge() {
        const CANARY: &str = "stderr-canary-0c9d1e";
        let mut secrets = rein_core::redact::Secrets::new();
        secrets.insert(CANARY).unwrap();
        rein_core::redact::register(&secrets);
        // The secret straddles the 2000-character cut of the tail.
        let cut = format!("{CANARY}{}", "y".repeat(HUMAN_STDERR_CHARS - 5));
        let note = stderr_note(&captured(cut.as_bytes(), cut.len() as u64));
        assert!(!note.contains("0c9d1e"), "{note}");
        assert!(!note.contains("1e"), "{}", &note[..40]);
        // The capture limit cut the secret: its start is dropped too.
        let head = format!("key {}", &CANARY[..10]);
        let note = stderr_note(&captured(head.as_bytes(), 1_000));
        assert!(!note.contains("stderr-can"), "{note}");
    }

    #[test]
    fn bare_programs_are_found_on_absolute_path_entries_only() {
        let found = resolve_program(
            Path::new("sh"),
            None,
            Some("relative:/bin:/usr/bin".as_ref()),
        );
        assert!(found.unwrap().is_absolute());
        assert!(resolve_program(Path::new("sh"), None, Some("relative".as_ref())).is_err());
        assert!(
            resolve_program(
                Path::new("no-such-program-rein"),
                None,
                Some("/bin".as_ref())
            )
            .is_err()
        );
        assert!(resolve_program(Path::new(""), None, None).is_err());
    }

    #[test]
    fn paths_are_relative_to_the_working_dir() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("tool.sh");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        assert!(resolve_program(Path::new("./tool.sh"), Some(dir.path()), None).is_err());
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(
            resolve_program(Path::new("./tool.sh"), Some(dir.path()), None).unwrap(),
            dir.path().join("./tool.sh")
        );
        assert_eq!(resolve_program(&script, None, None).unwrap(), script);
    }
}

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
//! # use rein_store::Store;
//! # use rein_store_sqlite::SqliteStore;
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

mod attempt;
mod classify;
mod env;
mod output;
mod target;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rein_core::Failure;
pub use rein_core::registry::DEFAULT_MAX_OUTPUT_BYTES;
use rein_store::Store;
use serde_json::Value;

use super::{Attempt, ToolOutput};
pub use crate::lease::DEFAULT_KILL_GRACE;
use crate::lease::Owner;
use crate::{SystemClock, Timer};
pub use target::CommandTarget;

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

pub use super::INHERITED_ENV;

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
}

//! The bounded load test of issue 6: queued runs against two `rein serve`
//! processes sharing one SQLite file, with a fixed rate of injected tool
//! faults; every run must end, none may be lost, none executed twice.
//!
//! Shared by `benches/serve_load.rs` (1,000 runs, the figures) and
//! `tests/serve_load.rs` (a few dozen runs, so CI proves the harness), each
//! of which includes this file with `#[path = …] mod load;`.
//!
//! # Setup
//!
//! - An order desk (rein-testkit, real HTTP on loopback) faults every
//!   [`LoadConfig::fault_every`]-th request of each tool (10% by default),
//!   cycling through [`FAULT_CYCLE`]: a write that lands and then answers
//!   500, a write that lands and loses its response, a refusal (503).
//! - Two `rein serve` processes on one SQLite file, each with
//!   [`LoadConfig::workers`] queue workers, on the example config
//!   (`examples/order-desk`: the scripted model, so no model server is
//!   needed) with the order API's rate and concurrency limits raised so the
//!   governor does not set the pace (see [`EXAMPLE_LIMITS`]).
//! - Submissions: `POST /v1/agents/order_desk/runs` with `mode: queued`,
//!   alternating between the servers, at most
//!   [`LoadConfig::client_concurrency`] in flight; each one's latency is
//!   POST → 202.
//!
//! # What "lost" and "executed twice" are checked against
//!
//! The scripted model always adjusts the same order (`A-1001`), so runs are
//! told apart at the desk by the `Rein-Run-Id` and `Rein-Intent-Id` headers
//! of the request that caused each side effect (the desk's own log, not
//! rein's).
//!
//! - **lost**: a submitted run id that, once the poll ends, the API does
//!   not know (404) or shows still `queued`/`running`; also a store holding
//!   another number of runs than were accepted.
//! - **executed twice**, each counted separately:
//!   - `duplicate_effects`: the desk applied one (run, intent) more than
//!     once, or one idempotency key more than once (invariant 1);
//!   - `unledgered_effects`: the desk applied an effect whose run is not a
//!     submitted one, or whose intent (or `<intent>/compensation`) is not
//!     in that run's ledger — an execution rein did not record;
//!   - `restarted_runs`: a run with more than one `run_started` event;
//!   - `reopened_runs`: a run with more than one `run_finished` event: it
//!     was driven again after it ended (its last step, model call
//!     included, ran twice). This caught a queue worker taking over a run
//!     that had just ended on the other server (see `take_over` in
//!     rein-server's `worker.rs`);
//!   - `repeated_intents`: a run whose ledger holds two intents for one
//!     tool (the script plans each tool once, so a second intent means the
//!     step was planned again).
//!
//! Replays (the desk answering a known key from its store) are not effects
//! and are reported only as a count.
//!
//! Also reported, without failing the test: `failed_but_applied`, ledger
//! records `failed` (which means "certainly did not happen") for an intent
//! the desk applied; and which server finished how many runs, read from
//! each process's log lines.

use rein_store::IdempotencyState;
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::num::{NonZeroU32, NonZeroUsize};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use rein_testkit::order_desk::{
    EffectKind, Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig, RESTORE_DELIVERY_TIME,
    SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde::Serialize;
use serde_json::Value;

/// Set to keep the temporary directory (the store, the config, each
/// server's log `server-N.log`) for inspection.
pub const KEEP_ENV: &str = "REIN_LOAD_KEEP";

/// Words that, in a failed run's report or `run_finished` event, blame
/// the store rather than the run's tools or model. A run whose end a node
/// could not record while the store was away, and whose claim it could
/// not release, is later failed as `orphaned` ("its process stopped
/// signalling"): the store's doing too.
pub const STORE_WORDS: [&str; 9] = [
    "run store",
    "the store",
    "database",
    "postgres",
    "db error",
    "sqlite",
    "connection closed",
    "orphaned",
    "stopped signalling",
];

/// The tools whose calls change the desk (reads leave no side effect).
pub const WRITES: [&str; 2] = [UPDATE_DELIVERY_TIME, SEND_EMAIL];

/// The agent every run is submitted to.
pub const AGENT: &str = "order_desk";

/// The faults injected, in turn, into every n-th request of each tool.
pub fn fault_cycle() -> [Fault; 3] {
    [
        // Executed, then reported as failed: duplicate suppression (lookup
        // by key, or the desk's replay) must keep it to one effect.
        Fault::ApplyThenStatus { code: 500 },
        // Executed, then the response is cut mid-body.
        Fault::LoseResponse,
        // Refused at the door, nothing applied: retried (or, for the
        // irreversible email, given up).
        Fault::status(503),
    ]
}

/// The same list, for docs.
pub const FAULT_CYCLE: &str = "apply_then_status 500, lose_response, status 503";

/// The order API limits of the example config, raised for the load test.
///
/// NOTE: must match `[resource_groups.order_api]` in
/// `examples/order-desk/rein.toml`; the harness refuses to run otherwise.
pub const EXAMPLE_LIMITS: &str = "rate_per_sec = 20.0\nburst = 40\nmax_concurrency = 8";
/// What [`EXAMPLE_LIMITS`] becomes: the governor stays in the call path
/// but does not set the pace.
pub const LOAD_LIMITS: &str = "rate_per_sec = 100000.0\nburst = 100000\nmax_concurrency = 64";

/// How a load test runs.
#[derive(Debug, Clone, Serialize)]
pub struct LoadConfig {
    /// Queued runs submitted.
    pub runs: usize,
    /// `rein serve` processes sharing the store.
    pub servers: usize,
    /// `[server.queue] workers` of each process.
    pub workers: u32,
    /// Submissions in flight at once.
    pub client_concurrency: usize,
    /// Every n-th request of each tool is faulted.
    pub fault_every: NonZeroU32,
    /// How long every run may take to end, from the first submission.
    #[serde(serialize_with = "secs")]
    pub timeout: Duration,
    /// The store the processes share: a SQLite file in the test's temp
    /// dir when `None`, else this PostgreSQL URL (a scratch database).
    #[serde(skip)]
    pub postgres: Option<String>,
    /// SIGKILL the first process once this many runs are terminal, and
    /// start it again on the same store (its runs are taken over).
    pub kill_first_after: Option<usize>,
    /// Restart the database once this many runs are terminal (a private
    /// PostgreSQL server of the test: see `tests/pg_restart.rs`).
    #[serde(skip)]
    pub restart_database: Option<DatabaseRestart>,
    /// Send every submission with an `Idempotency-Key` (`load-N`), and
    /// count the keys the store did not resolve at the end. With keys, a
    /// submission answered 503 or 409, or cut off, is sent again with its
    /// key (counted in [`LoadReport::submit_retries`]), as a client
    /// would: the key makes that safe.
    pub idempotency_keys: bool,
    /// Every n-th submission (the 1st, the n+1-th, …) is a sync run
    /// (`mode: sync`: the POST answers once the run ends, or 202 when it
    /// was handed on) instead of a queued one.
    pub sync_every: Option<NonZeroUsize>,
}

/// When and how [`LoadConfig::restart_database`] restarts the database.
#[derive(Clone)]
pub struct DatabaseRestart {
    /// Restart once this many runs are terminal.
    pub after: usize,
    /// Restarts it; returns when the server accepts connections again.
    pub restart: Arc<dyn Fn() -> Result<()> + Send + Sync>,
}

impl fmt::Debug for DatabaseRestart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DatabaseRestart")
            .field("after", &self.after)
            .finish_non_exhaustive()
    }
}

fn secs<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            runs: 1000,
            servers: 2,
            workers: 8,
            client_concurrency: 16,
            fault_every: NonZeroU32::MIN.saturating_add(9),
            timeout: Duration::from_secs(300),
            postgres: None,
            kill_first_after: None,
            restart_database: None,
            idempotency_keys: false,
            sync_every: None,
        }
    }
}

/// Percentiles of submission latency, in milliseconds.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    /// Median.
    pub p50_ms: f64,
    /// 99th percentile.
    pub p99_ms: f64,
    /// Slowest.
    pub max_ms: f64,
}

impl Latency {
    fn of(mut samples: Vec<Duration>) -> Latency {
        samples.sort_unstable();
        let at = |q: f64| -> f64 {
            if samples.is_empty() {
                return 0.0;
            }
            // Nearest rank.
            let rank = ((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len());
            samples[rank - 1].as_secs_f64() * 1000.0
        };
        Latency {
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// What one `rein serve` process logged.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerTally {
    /// Queued runs it drove to their end.
    pub finished: usize,
    /// Runs it took over from a worker that stopped renewing its claim.
    pub taken_over: usize,
    /// WARN lines.
    pub warnings: usize,
    /// ERROR lines.
    pub errors: usize,
    /// Commits the store refused and the node offered again (`the store
    /// refused a commit; offering it again`).
    pub commits_offered_again: usize,
    /// Runs stopped at a safe point because the store stayed away past
    /// the node's patience.
    pub stopped_for_the_store: usize,
    /// Ledger marks held because the store would not take them.
    pub marks_held: usize,
    /// The last few WARN/ERROR lines.
    pub last_problems: Vec<String>,
    /// How the process ended, if it did before the harness stopped it
    /// (a crash: no process is meant to exit on its own).
    pub exited: Option<String>,
}

/// What the desk saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct DeskTally {
    /// Tool requests (status lookups excluded).
    pub tool_requests: usize,
    /// Status lookups by key.
    pub lookups: usize,
    /// Requests that got an injected fault.
    pub faults_injected: usize,
    /// Effects applied, per tool.
    pub applied: BTreeMap<String, usize>,
    /// Duplicate keys answered from the desk's store, per tool.
    pub replayed: BTreeMap<String, usize>,
}

/// The outcome of a load test.
#[derive(Debug, Clone, Serialize)]
pub struct LoadReport {
    /// The settings.
    pub config: LoadConfig,
    /// Runs accepted (202).
    pub accepted: usize,
    /// From the first submission until the last submission was answered.
    pub submit_secs: f64,
    /// From the first submission until every run was seen terminal.
    pub wall_secs: f64,
    /// `accepted / wall_secs`: end-to-end runs per second.
    pub throughput_runs_per_sec: f64,
    /// Submission latency, POST → 202.
    pub submit_latency: Latency,
    /// Runs by final status.
    pub statuses: BTreeMap<String, usize>,
    /// Submitted runs unknown to the API, or not terminal, at the end.
    pub lost: usize,
    /// Runs the store holds.
    pub stored_runs: usize,
    /// Extra applications of one (run, intent) or one key at the desk.
    pub duplicate_effects: usize,
    /// Desk effects with no run or ledger intent behind them.
    pub unledgered_effects: usize,
    /// Runs started more than once.
    pub restarted_runs: usize,
    /// Runs that finished more than once: driven again after their end.
    pub reopened_runs: usize,
    /// Runs resumed (taken over) at all; no process dies in this test, so
    /// every one is a takeover of a run whose owner was alive.
    pub resumed_runs: usize,
    /// Runs whose ledger planned one tool twice.
    pub repeated_intents: usize,
    /// Ledger records `failed` for an intent the desk applied.
    pub failed_but_applied: usize,
    /// Ledger records by tool and status, over all runs.
    pub ledger: BTreeMap<String, BTreeMap<String, usize>>,
    /// Ledger records still `pending` in a terminal run that did not hand
    /// them to a human: an effect whose fate rein never settled.
    pub pending_effects: usize,
    /// Ledger records still `pending` (in doubt) in a run that ended
    /// `handed_off`: its handoff package holds them for a human, and the
    /// ledger reconciler decides them from the tool's state. A write whose
    /// outcome commit fell into a database restart ends so.
    pub handed_off_in_doubt: usize,
    /// With [`LoadConfig::idempotency_keys`]: submission keys the store
    /// holds `in_progress`, or not at all, at the end.
    pub unresolved_keys: usize,
    /// Status polls that failed while the runs went on (a database
    /// restarting answers 503 for a moment); retried, never fatal.
    pub poll_errors: usize,
    /// Submissions sent again with their key after a 503, a 409 or a
    /// cut connection (only with [`LoadConfig::idempotency_keys`]).
    pub submit_retries: usize,
    /// The most times one submission was sent before it was taken.
    pub max_submit_tries: usize,
    /// That submission: its key, run, and the first answers it got.
    pub most_tried: String,
    /// Sync submissions, by how they were answered: `ended` (200),
    /// `handed_on` (202 with `handed_on`: stopped at a safe point, a
    /// worker continues it), `followed` (202 without: another process
    /// drives it).
    pub sync_answers: BTreeMap<String, usize>,
    /// The `handed_on.reason`s of sync runs answered 202, with counts.
    pub handed_on_reasons: BTreeMap<String, usize>,
    /// Sync runs answered 202 (`run id: answer`), at most 10.
    pub sync_not_ended: Vec<String>,
    /// Runs that ended `failed` and whose report or `run_finished` event
    /// blames the store (the database, a connection): a blink must never
    /// fail a run.
    pub store_failed_runs: usize,
    /// Ledger records whose last `ledger_recorded` event states another
    /// status than the record holds, or that no such event states at all;
    /// and `ledger_recorded` events of an intent with no record.
    pub events_disagree: usize,
    /// `ledger_recorded` events stating one settled status (not
    /// `pending`) of one record again: a mark's commit stored twice. A
    /// settlement restates a record it leaves in doubt (`pending`, with
    /// its note), so `pending` may be stated twice.
    pub repeated_statements: usize,
    /// Ledger records of a write (`update_delivery_time`, `send_email`)
    /// that say the effect happened (`succeeded`, `compensated`,
    /// `uncompensatable`) while the desk never applied it; and
    /// `compensated` records whose compensation the desk never applied.
    pub happened_not_applied: usize,
    /// Ledger marks the nodes still held (`/readyz` `held_ledger_marks`)
    /// when the harness stopped waiting for them to drain; the ledger is
    /// checked after they drained.
    pub held_marks_left: usize,
    /// When the database was restarted: the runs terminal by then.
    pub database_restarted_after: Option<usize>,
    /// The desk's side of the story.
    pub desk: DeskTally,
    /// Each server's log tally, in start order.
    pub servers: Vec<ServerTally>,
    /// A few examples of whatever went wrong.
    pub problems: Vec<String>,
}

impl LoadReport {
    /// Runs executed twice, by any of the measures.
    pub fn duplicated(&self) -> usize {
        self.duplicate_effects
            + self.unledgered_effects
            + self.restarted_runs
            + self.reopened_runs
            + self.repeated_intents
    }

    /// Whether no run was lost or executed twice.
    pub fn is_clean(&self) -> bool {
        self.lost == 0
            && self.duplicated() == 0
            && self.accepted == self.config.runs
            && self.stored_runs == self.accepted
    }
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = &self.config;
        writeln!(
            f,
            "serve load: {} queued runs, {} servers × {} workers, {}, client concurrency {}",
            c.runs,
            c.servers,
            c.workers,
            if c.postgres.is_some() {
                "one PostgreSQL database"
            } else {
                "one SQLite file"
            },
            c.client_concurrency
        )?;
        writeln!(
            f,
            "  faults:      every {}th request of each tool ({FAULT_CYCLE}); {} injected in {} tool requests",
            c.fault_every, self.desk.faults_injected, self.desk.tool_requests
        )?;
        writeln!(
            f,
            "  wall:        {:.2} s until all terminal (submissions took {:.2} s)",
            self.wall_secs, self.submit_secs
        )?;
        writeln!(
            f,
            "  throughput:  {:.1} runs/s end to end",
            self.throughput_runs_per_sec
        )?;
        let l = &self.submit_latency;
        writeln!(
            f,
            "  submit:      p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms (POST → 202)",
            l.p50_ms, l.p99_ms, l.max_ms
        )?;
        let statuses: Vec<String> = self
            .statuses
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect();
        writeln!(f, "  statuses:    {}", statuses.join(", "))?;
        writeln!(
            f,
            "  lost:        {} (accepted {}, in the store {})",
            self.lost, self.accepted, self.stored_runs
        )?;
        writeln!(
            f,
            "  executed twice: {} (duplicate effects {}, unledgered effects {}, restarted runs {}, reopened runs {}, repeated intents {})",
            self.duplicated(),
            self.duplicate_effects,
            self.unledgered_effects,
            self.restarted_runs,
            self.reopened_runs,
            self.repeated_intents
        )?;
        writeln!(
            f,
            "  resumed:     {} runs taken over ({})",
            self.resumed_runs,
            match c.kill_first_after {
                Some(n) => format!("the first process was SIGKILLed after {n} ended"),
                None => "no process dies here".to_owned(),
            }
        )?;
        let applied: Vec<String> = self
            .desk
            .applied
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        let replayed: Vec<String> = self
            .desk
            .replayed
            .iter()
            .map(|(t, n)| format!("{t} {n}"))
            .collect();
        writeln!(
            f,
            "  desk:        applied {}; replayed {}; {} lookups by key",
            applied.join(", "),
            if replayed.is_empty() {
                "none".to_owned()
            } else {
                replayed.join(", ")
            },
            self.desk.lookups
        )?;
        for (tool, by_status) in &self.ledger {
            let s: Vec<String> = by_status.iter().map(|(k, n)| format!("{k} {n}")).collect();
            writeln!(f, "  ledger:      {tool}: {}", s.join(", "))?;
        }
        writeln!(
            f,
            "  failed but applied: {} (ledger `failed`, desk applied)",
            self.failed_but_applied
        )?;
        writeln!(
            f,
            "  unresolved:  {} effects still pending ({} more in doubt, handed off), {} submission keys not completed{}",
            self.pending_effects,
            self.handed_off_in_doubt,
            self.unresolved_keys,
            if c.idempotency_keys {
                ""
            } else {
                " (no keys sent)"
            }
        )?;
        if self.submit_retries > 0 || !self.sync_answers.is_empty() {
            let sync: Vec<String> = self
                .sync_answers
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            writeln!(
                f,
                "  submissions: {} sent again with their key (one of them {} times); sync answers: {}",
                self.submit_retries,
                self.max_submit_tries,
                if sync.is_empty() {
                    "none".to_owned()
                } else {
                    sync.join(", ")
                }
            )?;
            if self.max_submit_tries > 1 {
                writeln!(f, "    sent most often: {}", self.most_tried)?;
            }
            for (reason, n) in &self.handed_on_reasons {
                writeln!(f, "    handed on ({n}): {reason}")?;
            }
            for run in &self.sync_not_ended {
                writeln!(f, "    sync run answered 202: {run}")?;
            }
        }
        writeln!(
            f,
            "  agreement:   {} runs failed because of the store, {} records disagreeing with their events ({} statements repeated), {} records saying an effect the desk never applied, {} ledger marks still held",
            self.store_failed_runs,
            self.events_disagree,
            self.repeated_statements,
            self.happened_not_applied,
            self.held_marks_left
        )?;
        if let Some(after) = self.database_restarted_after {
            writeln!(
                f,
                "  database:    restarted once {after} runs had ended; {} status polls failed meanwhile",
                self.poll_errors
            )?;
        }
        for (i, s) in self.servers.iter().enumerate() {
            writeln!(
                f,
                "  server {}:    finished {} runs, took over {}, {} warnings, {} errors; {} commits offered again, {} runs stopped for the store, {} marks held{}",
                i + 1,
                s.finished,
                s.taken_over,
                s.warnings,
                s.errors,
                s.commits_offered_again,
                s.stopped_for_the_store,
                s.marks_held,
                s.exited
                    .as_ref()
                    .map(|how| format!(", exited on its own: {how}"))
                    .unwrap_or_default()
            )?;
            for line in &s.last_problems {
                writeln!(f, "    {line}")?;
            }
        }
        for p in &self.problems {
            writeln!(f, "  problem:     {p}")?;
        }
        Ok(())
    }
}

/// The example config directory.
fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk")
}

/// The example config with the load limits and `workers` per process;
/// returns the config file.
fn write_config(dir: &Path, workers: u32) -> Result<PathBuf> {
    let example = std::fs::read_to_string(example_dir().join("rein.toml"))
        .context("cannot read examples/order-desk/rein.toml")?;
    ensure!(
        example.contains(EXAMPLE_LIMITS),
        "examples/order-desk/rein.toml no longer has the order_api limits {EXAMPLE_LIMITS:?}; \
         update EXAMPLE_LIMITS in crates/rein-cli/tests/load/mod.rs"
    );
    let mut config = example.replace(EXAMPLE_LIMITS, LOAD_LIMITS);
    config.push_str(&format!("\n[server.queue]\nworkers = {workers}\n"));
    let path = dir.join("rein.toml");
    std::fs::write(&path, config)?;
    std::fs::copy(
        example_dir().join("demo.script.json"),
        dir.join("demo.script.json"),
    )?;
    Ok(path)
}

/// The desk's fault plan: every n-th request of each tool is faulted.
pub fn load_faults(every: NonZeroU32) -> Faults {
    [
        GET_ORDER,
        UPDATE_DELIVERY_TIME,
        RESTORE_DELIVERY_TIME,
        SEND_EMAIL,
    ]
    .into_iter()
    .fold(Faults::none(), |faults, tool| {
        faults.every(tool, every, fault_cycle())
    })
}

/// A `rein serve` process; killed on drop.
struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<ServerTally>>,
}

impl Server {
    /// Starts `rein serve` and waits for it to announce its address.
    fn start(config: &Path, db: &Path, desk: &str, log_file: &Path) -> Result<Server> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
            .env("ORDER_DESK_URL", desk)
            .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
            .env("NO_COLOR", "1")
            .env_remove("REIN_CRASH_AT")
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(db)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("cannot start rein serve")?;
        let stderr = child.stderr.take().context("no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let line = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.contains("listening on http://"));
        let Some(addr) = line.as_deref().and_then(|l| {
            l.split("http://")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
        }) else {
            let _ = child.kill();
            bail!("rein serve exited without announcing its address");
        };
        let base = format!("http://{addr}");
        let log = Arc::new(Mutex::new(ServerTally::default()));
        let tally = Arc::clone(&log);
        let mut file = std::io::BufWriter::new(
            std::fs::File::create(log_file)
                .with_context(|| format!("cannot create {}", log_file.display()))?,
        );
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let _ = writeln!(file, "{line}");
                let mut t = tally.lock().unwrap_or_else(PoisonError::into_inner);
                if line.contains("the store refused a commit; offering it again") {
                    t.commits_offered_again += 1;
                }
                if line.contains("the store stayed unavailable for") {
                    t.stopped_for_the_store += 1;
                }
                if line.contains("holding ledger marks the store would not take") {
                    t.marks_held += 1;
                }
                if line.contains("queued run ended") {
                    t.finished += 1;
                }
                // Counted where the takeover won (several nodes may claim).
                if line.contains("taken-over run ended") {
                    t.finished += 1;
                    t.taken_over += 1;
                }
                let problem = if line.contains(" WARN ") {
                    t.warnings += 1;
                    true
                } else if line.contains(" ERROR ") {
                    t.errors += 1;
                    true
                } else {
                    false
                };
                if problem {
                    if t.last_problems.len() == 5 {
                        t.last_problems.remove(0);
                    }
                    t.last_problems.push(line);
                }
            }
        });
        Ok(Server { child, base, log })
    }

    fn tally(&self) -> ServerTally {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// [`tally`](Self::tally), with how the process ended if it did.
    fn final_tally(&mut self) -> ServerTally {
        let mut tally = self.tally();
        tally.exited = match self.child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot tell: {e}")),
        };
        tally
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How often one submission is sent (the first time included) before
/// its refusal is final.
const SUBMIT_TRIES: usize = 300;

/// One accepted submission.
#[derive(Debug, Clone)]
struct Submitted {
    run_id: String,
    server: usize,
    latency: Duration,
    /// A sync submission's answer (`ended`, `handed_on`, `followed`) and
    /// its `handed_on.reason`.
    sync: Option<(String, Option<String>)>,
    /// How often it was sent.
    tries: usize,
    /// Its place among the submissions (its key is `load-INDEX`).
    index: usize,
    /// The first answers not taken (sent again), for the report.
    refusals: Vec<String>,
}

/// Runs the load test: the desk, the servers, the submissions, the wait,
/// the verification. An `Err` is a harness failure (a refused submission,
/// a run still not terminal at the timeout); lost or duplicated runs are in
/// the report, see [`LoadReport::is_clean`].
///
/// # Errors
///
/// When the setup fails, a submission is not accepted, or the runs do not
/// all end within [`LoadConfig::timeout`].
pub async fn run(config: LoadConfig) -> Result<LoadReport> {
    ensure!(config.runs > 0, "runs must be at least 1");
    ensure!(config.servers > 0, "servers must be at least 1");
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default().with_faults(load_faults(config.fault_every)),
    )
    .await
    .context("cannot start the order desk")?;
    let dir = tempfile::tempdir()?;
    let toml = write_config(dir.path(), config.workers)?;
    let db = match &config.postgres {
        Some(url) => PathBuf::from(url),
        None => dir.path().join("rein.db"),
    };
    let mut servers = Vec::new();
    for n in 1..=config.servers {
        // One at a time: the first creates the store's schema.
        let (toml, db, desk_url) = (toml.clone(), db.clone(), desk.base_url().to_owned());
        let log_file = dir.path().join(format!("server-{n}.log"));
        let server =
            tokio::task::spawn_blocking(move || Server::start(&toml, &db, &desk_url, &log_file))
                .await??;
        servers.push(server);
    }
    let mut bases: Arc<Vec<String>> = Arc::new(servers.iter().map(|s| s.base.clone()).collect());
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()?;

    // Submit.
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let retries = Arc::new(AtomicUsize::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..config.client_concurrency.max(1) {
        let (client, bases, next) = (client.clone(), Arc::clone(&bases), Arc::clone(&next));
        let retries = Arc::clone(&retries);
        let (runs, keys, sync_every) = (config.runs, config.idempotency_keys, config.sync_every);
        tasks.spawn(async move {
            let mut done = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= runs {
                    return Ok::<_, anyhow::Error>(done);
                }
                let server = i % bases.len();
                let sync = sync_every.is_some_and(|n| i % n.get() == 0);
                let body = serde_json::json!({
                    "input": format!("Move order A-1001. (load run {i})"),
                    "mode": if sync { "sync" } else { "queued" },
                });
                let t0 = Instant::now();
                let mut tries = 0usize;
                let mut refusals = Vec::new();
                let (status, body) = loop {
                    tries += 1;
                    // A sync POST answers when its run ends: it may wait
                    // out the store's patience more than once.
                    let mut request = client
                        .post(format!("{}/v1/agents/{AGENT}/runs", bases[server]))
                        .timeout(if sync {
                            Duration::from_secs(180)
                        } else {
                            Duration::from_secs(30)
                        })
                        .json(&body);
                    if keys {
                        request = request.header("idempotency-key", format!("load-{i}"));
                    }
                    let answered = request
                        .send()
                        .await
                        .with_context(|| format!("submission {i} to server {}", server + 1));
                    let retry = match &answered {
                        Err(_) => true,
                        Ok(r) => matches!(r.status().as_u16(), 409 | 503),
                    };
                    // With a key, a refused or cut submission is sent
                    // again, as a client would: the key makes it safe.
                    if keys && retry && tries < SUBMIT_TRIES {
                        retries.fetch_add(1, Ordering::Relaxed);
                        // The first answers that were not taken, for the
                        // report.
                        if refusals.len() < 2 {
                            refusals.push(match answered {
                                Err(e) => format!("{e:#}"),
                                Ok(r) => format!(
                                    "{} {}",
                                    r.status().as_u16(),
                                    r.json::<Value>().await.unwrap_or(Value::Null)["detail"]
                                ),
                            });
                        }
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        continue;
                    }
                    let response = answered?;
                    let status = response.status();
                    let body: Value = response.json().await.unwrap_or(Value::Null);
                    break (status, body);
                };
                let latency = t0.elapsed();
                ensure!(
                    status.as_u16() == 202 || (sync && status.as_u16() == 200),
                    "submission {i} to server {} answered {status}: {body}",
                    server + 1
                );
                let run_id = body["run_id"]
                    .as_str()
                    .with_context(|| format!("submission {i}: no run_id in {body}"))?
                    .to_owned();
                let answer = match (sync, status.as_u16()) {
                    (false, _) => None,
                    (true, 200) => Some(("ended", None)),
                    (true, _) if body["handed_on"].is_object() => Some((
                        "handed_on",
                        body["handed_on"]["reason"].as_str().map(str::to_owned),
                    )),
                    (true, _) => Some(("followed", None)),
                };
                done.push(Submitted {
                    run_id,
                    server,
                    latency,
                    sync: answer.map(|(a, reason)| (a.to_owned(), reason)),
                    tries,
                    index: i,
                    refusals,
                });
            }
        });
    }
    let mut submitted = Vec::with_capacity(config.runs);
    while let Some(joined) = tasks.join_next().await {
        submitted.extend(joined??);
    }
    let submit_secs = started.elapsed().as_secs_f64();

    // Wait: sweep the pending runs oldest first, looking at no more than a
    // window of still-running ones per sweep, so polling does not become
    // the load.
    let mut pending: VecDeque<Submitted> = submitted.iter().cloned().collect();
    let mut killed: Option<ServerTally> = None;
    let mut poll_errors = 0;
    let mut database_restarted_after = None;
    let deadline = started + config.timeout;
    const WINDOW: usize = 32;
    while !pending.is_empty() {
        if Instant::now() > deadline {
            let sample: Vec<String> = pending.iter().take(5).map(|s| s.run_id.clone()).collect();
            let tallies: Vec<ServerTally> = servers.iter().map(Server::tally).collect();
            bail!(
                "{} of {} runs were not terminal after {:?} (e.g. {sample:?}); servers: {tallies:?}",
                pending.len(),
                submitted.len(),
                config.timeout
            );
        }
        let mut still = VecDeque::new();
        let mut running_seen = 0;
        while let Some(s) = pending.pop_front() {
            if running_seen >= WINDOW {
                still.push_back(s);
                continue;
            }
            // A failed poll is retried at the next sweep: while the
            // database restarts, a node answers 503 for a moment.
            match run_status(&client, &bases[s.server], &s.run_id).await {
                Ok(status) if status.as_deref().is_some_and(is_terminal) => continue,
                Ok(_) => {}
                Err(e) => {
                    poll_errors += 1;
                    if poll_errors <= 3 {
                        eprintln!("serve_load: a status poll failed, retried: {e:#}");
                    }
                }
            }
            running_seen += 1;
            still.push_back(s);
        }
        pending = still;
        if let Some(after) = config.kill_first_after
            && submitted.len() - pending.len() >= after
            && killed.is_none()
        {
            // SIGKILL mid-run, then the same node again on the same store.
            let mut first = servers.remove(0);
            let mut tally = first.final_tally();
            first.child.kill()?;
            first.child.wait()?;
            tally.finished = first.tally().finished;
            killed = Some(tally);
            let (toml, db, desk_url) = (toml.clone(), db.clone(), desk.base_url().to_owned());
            let log_file = dir.path().join("server-1-restarted.log");
            let restarted = tokio::task::spawn_blocking(move || {
                Server::start(&toml, &db, &desk_url, &log_file)
            })
            .await??;
            servers.insert(0, restarted);
            bases = Arc::new(servers.iter().map(|s| s.base.clone()).collect());
        }
        if let Some(restart) = &config.restart_database
            && database_restarted_after.is_none()
            && submitted.len() - pending.len() >= restart.after
        {
            let ended = submitted.len() - pending.len();
            let restart = Arc::clone(&restart.restart);
            tokio::task::spawn_blocking(move || restart())
                .await?
                .context("cannot restart the database")?;
            database_restarted_after = Some(ended);
        }
        if !pending.is_empty() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let wall_secs = started.elapsed().as_secs_f64();
    // The ledger is read once every mark a node held while the store was
    // away is written (`/readyz` says how many are held).
    let held_marks_left = held_marks_drained(&client, &bases, deadline).await;

    let mut report = verify(&config, &client, &bases, &submitted, &desk, &db).await?;
    report.submit_secs = submit_secs;
    report.wall_secs = wall_secs;
    report.throughput_runs_per_sec = submitted.len() as f64 / wall_secs;
    report.submit_latency = Latency::of(submitted.iter().map(|s| s.latency).collect());
    report.poll_errors = poll_errors;
    report.submit_retries = retries.load(Ordering::Relaxed);
    report.held_marks_left = held_marks_left;
    if let Some(most) = submitted.iter().max_by_key(|s| s.tries) {
        report.max_submit_tries = most.tries;
        report.most_tried = format!(
            "load-{} (run {}, {}, taken after {:.1} s, first refused with {:?})",
            most.index,
            most.run_id,
            if most.sync.is_some() {
                "sync"
            } else {
                "queued"
            },
            most.latency.as_secs_f64(),
            most.refusals
        );
    }
    for s in &submitted {
        if let Some((answer, reason)) = &s.sync {
            *report.sync_answers.entry(answer.clone()).or_insert(0) += 1;
            if answer != "ended" && report.sync_not_ended.len() < 10 {
                report.sync_not_ended.push(format!(
                    "{}: {answer} (sent {} times, first refused with {:?})",
                    s.run_id, s.tries, s.refusals
                ));
            }
            if let Some(reason) = reason {
                *report.handed_on_reasons.entry(reason.clone()).or_insert(0) += 1;
            }
        }
    }
    report.database_restarted_after = database_restarted_after;
    report.servers = killed
        .into_iter()
        .chain(servers.iter_mut().map(Server::final_tally))
        .collect();
    drop(servers);
    if std::env::var_os(KEEP_ENV).is_some() {
        let kept = dir.keep();
        eprintln!(
            "serve_load: kept the store and server logs in {}",
            kept.display()
        );
    }
    Ok(report)
}

/// Waits until no node holds a ledger mark (`held_ledger_marks` in each
/// node's `/readyz` is 0), or `deadline`; how many were held at the last
/// look (a node that does not answer ready counts as holding one).
async fn held_marks_drained(
    client: &reqwest::Client,
    bases: &[String],
    deadline: Instant,
) -> usize {
    loop {
        let mut held = 0;
        for base in bases {
            let ready = match client.get(format!("{base}/readyz")).send().await {
                Ok(r) if r.status().is_success() => r.json::<Value>().await.ok(),
                _ => None,
            };
            held += ready
                .and_then(|r| r["held_ledger_marks"].as_u64())
                .map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX));
        }
        if held == 0 || Instant::now() > deadline {
            return held;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether a run status is an outcome.
fn is_terminal(status: &str) -> bool {
    !matches!(status, "queued" | "running")
}

/// A run's status through the API; `None` when the API does not know it.
async fn run_status(client: &reqwest::Client, base: &str, run_id: &str) -> Result<Option<String>> {
    Ok(run_view(client, base, run_id)
        .await?
        .and_then(|run| run["status"].as_str().map(str::to_owned)))
}

/// A run's view through the API; `None` when the API does not know it.
async fn run_view(client: &reqwest::Client, base: &str, run_id: &str) -> Result<Option<Value>> {
    let response = client
        .get(format!("{base}/v1/runs/{run_id}"))
        .send()
        .await?;
    if response.status() == 404 {
        return Ok(None);
    }
    ensure!(
        response.status().is_success(),
        "GET /v1/runs/{run_id} answered {}",
        response.status()
    );
    Ok(Some(response.json().await?))
}

/// What the API says about one run once everything ended.
struct Final {
    status: Option<String>,
    /// The run's report (`null` before it ended).
    report: Value,
    /// Its events, in order.
    events: Vec<Value>,
    ledger: Vec<Value>,
    /// `run_started` events.
    started: usize,
    /// `run_finished` events.
    finished: usize,
    /// `run_resumed` events.
    resumed: usize,
}

async fn fetch_final(client: &reqwest::Client, base: &str, run_id: &str) -> Result<Final> {
    let view = run_view(client, base, run_id).await?;
    let status = view
        .as_ref()
        .and_then(|run| run["status"].as_str().map(str::to_owned));
    let report = view.map_or(Value::Null, |mut run| run["report"].take());
    if status.is_none() {
        return Ok(Final {
            status,
            report,
            events: Vec::new(),
            ledger: Vec::new(),
            started: 0,
            finished: 0,
            resumed: 0,
        });
    }
    let ledger: Value = client
        .get(format!("{base}/v1/runs/{run_id}/ledger"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let events: Value = client
        .get(format!("{base}/v1/runs/{run_id}/events"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let count = |kind: &str| {
        events["events"]
            .as_array()
            .map_or(0, |e| e.iter().filter(|e| e["kind"] == kind).count())
    };
    Ok(Final {
        status,
        report,
        events: events["events"].as_array().cloned().unwrap_or_default(),
        ledger: ledger["records"].as_array().cloned().unwrap_or_default(),
        started: count("run_started"),
        finished: count("run_finished"),
        resumed: count("run_resumed"),
    })
}

/// Checks every submitted run against the API, the store and the desk.
async fn verify(
    config: &LoadConfig,
    client: &reqwest::Client,
    bases: &Arc<Vec<String>>,
    submitted: &[Submitted],
    desk: &OrderDesk,
    db: &Path,
) -> Result<LoadReport> {
    // The API's view of every run, a few at a time.
    let next = Arc::new(AtomicUsize::new(0));
    let runs: Arc<Vec<Submitted>> = Arc::new(submitted.to_vec());
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..config.client_concurrency.max(1) {
        let (client, bases, next, runs) = (
            client.clone(),
            Arc::clone(bases),
            Arc::clone(&next),
            Arc::clone(&runs),
        );
        tasks.spawn(async move {
            let mut out = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(s) = runs.get(i) else {
                    return Ok::<_, anyhow::Error>(out);
                };
                out.push((i, fetch_final(&client, &bases[s.server], &s.run_id).await?));
            }
        });
    }
    let mut finals: Vec<Option<Final>> = (0..submitted.len()).map(|_| None).collect();
    while let Some(joined) = tasks.join_next().await {
        for (i, f) in joined?? {
            finals[i] = Some(f);
        }
    }

    let mut problems = Vec::new();
    let mut note = |p: String| {
        if problems.len() < 20 {
            problems.push(p);
        }
    };
    let mut statuses = BTreeMap::new();
    let mut lost = 0;
    let mut restarted_runs = 0;
    let mut reopened_runs = 0;
    let mut resumed_runs = 0;
    let mut repeated_intents = 0;
    let mut pending_effects = 0;
    let mut handed_off_in_doubt = 0;
    let mut store_failed_runs = 0;
    let mut events_disagree = 0;
    let mut repeated_statements = 0;
    let mut ledger_tally: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    // run id → intent id → (tool, ledger status)
    let mut intents: HashMap<String, HashMap<String, (String, String)>> = HashMap::new();
    for (s, f) in submitted.iter().zip(&finals) {
        let Some(f) = f else {
            bail!("no final view of run {}", s.run_id);
        };
        match f.status.as_deref() {
            Some(status) if is_terminal(status) => {
                *statuses.entry(status.to_owned()).or_insert(0) += 1;
            }
            other => {
                lost += 1;
                note(format!("lost: run {} is {other:?}", s.run_id));
                continue;
            }
        }
        if f.started != 1 {
            restarted_runs += usize::from(f.started > 1);
            note(format!(
                "run {} has {} run_started events",
                s.run_id, f.started
            ));
        }
        if f.finished != 1 {
            reopened_runs += usize::from(f.finished > 1);
            note(format!(
                "run {} has {} run_finished events ({} run_resumed)",
                s.run_id, f.finished, f.resumed
            ));
        }
        resumed_runs += usize::from(f.resumed > 0);
        if f.status.as_deref() == Some("failed") {
            let finished: Vec<&Value> = f
                .events
                .iter()
                .filter(|e| e["kind"] == "run_finished")
                .collect();
            let said = format!("{} {finished:?}", f.report).to_lowercase();
            if let Some(word) = STORE_WORDS.iter().find(|w| said.contains(*w)) {
                store_failed_runs += 1;
                note(format!(
                    "run {} failed, its report naming the store ({word:?}): {}",
                    s.run_id, f.report["summary"]
                ));
            }
        }
        // The ledger and the events: each record's last `ledger_recorded`
        // (or `compensation_finished`) event states the record's status,
        // and no such event speaks of an intent the ledger does not hold.
        let mut stated: HashMap<String, String> = HashMap::new();
        let mut statements: HashSet<(String, String)> = HashSet::new();
        for e in f.events.iter().filter(|e| e["kind"] == "ledger_recorded") {
            let intent = e["intent_id"].as_str().unwrap_or("?").to_owned();
            let status = e["data"]["status"].as_str().unwrap_or("?").to_owned();
            if status != "pending" && !statements.insert((intent.clone(), status.clone())) {
                repeated_statements += 1;
                note(format!(
                    "run {} intent {intent}: `ledger_recorded {status}` is stored twice (event {})",
                    s.run_id, e["seq"]
                ));
            }
        }
        for e in f
            .events
            .iter()
            .filter(|e| e["kind"] == "ledger_recorded" || e["kind"] == "compensation_finished")
        {
            let intent = e["intent_id"].as_str().unwrap_or("?");
            let intent = intent
                .strip_suffix("/compensation")
                .unwrap_or(intent)
                .to_owned();
            let status = e["data"]["status"].as_str().unwrap_or("?").to_owned();
            stated.insert(intent, status);
        }
        for record in &f.ledger {
            let intent = record["intent_id"].as_str().unwrap_or("?");
            let status = record["status"].as_str().unwrap_or("?");
            match stated.remove(intent) {
                Some(said) if said == status => {}
                said => {
                    events_disagree += 1;
                    note(format!(
                        "run {} intent {intent}: the ledger holds {status}, its last ledger_recorded event says {said:?}",
                        s.run_id
                    ));
                }
            }
        }
        for (intent, said) in stated {
            events_disagree += 1;
            note(format!(
                "run {} intent {intent}: a ledger_recorded event says {said}, the ledger holds no record",
                s.run_id
            ));
        }
        let mut per_tool: HashMap<String, usize> = HashMap::new();
        for record in &f.ledger {
            if record["status"] == "pending" && f.status.as_deref() == Some("handed_off") {
                handed_off_in_doubt += 1;
            } else if record["status"] == "pending" {
                pending_effects += 1;
                note(format!(
                    "run {} ended with {} still pending",
                    s.run_id, record["intent_id"]
                ));
            }
        }
        let run_intents = intents.entry(s.run_id.clone()).or_default();
        for record in &f.ledger {
            let tool = record["tool"].as_str().unwrap_or("?").to_owned();
            let status = record["status"].as_str().unwrap_or("?").to_owned();
            let intent = record["intent_id"].as_str().unwrap_or("?").to_owned();
            *ledger_tally
                .entry(tool.clone())
                .or_default()
                .entry(status.clone())
                .or_insert(0) += 1;
            *per_tool.entry(tool.clone()).or_insert(0) += 1;
            run_intents.insert(intent, (tool, status));
        }
        if per_tool.values().any(|&n| n > 1) {
            repeated_intents += 1;
            note(format!(
                "run {} planned one tool twice: {per_tool:?}",
                s.run_id
            ));
        }
    }

    // The store: exactly the accepted runs, no more; and every
    // submission key completed.
    let store: Arc<dyn rein_store::Store> = match &config.postgres {
        Some(url) => Arc::new(
            rein_store_postgres::PostgresStore::connect(url)
                .await
                .context("cannot connect to the store")?,
        ),
        None => {
            Arc::new(rein_store_sqlite::SqliteStore::open(db).context("cannot open the store")?)
        }
    };
    let stored_runs = store.list_runs(submitted.len() + 1000).await?.len();
    let unresolved_keys = if config.idempotency_keys {
        let records = store
            .idempotency_records(None, None, submitted.len() + 1000)
            .await?;
        let by_key: HashMap<&str, &rein_store::IdempotencyRecord> =
            records.iter().map(|r| (r.key.as_str(), r)).collect();
        let mut unresolved = 0;
        for (s, f) in submitted.iter().zip(&finals) {
            let key = format!("load-{}", s.index);
            match by_key.get(key.as_str()) {
                Some(r) if r.state == IdempotencyState::Completed => {}
                record => {
                    unresolved += 1;
                    let kinds: Vec<&str> = f
                        .iter()
                        .flat_map(|f| &f.events)
                        .filter_map(|e| e["kind"].as_str())
                        .collect();
                    note(format!(
                        "submission key {key} (run {}, {}, sent {} times, first refused with {:?}; the run ended {:?}, its events {kinds:?}) is not completed in the store: {:?}",
                        s.run_id,
                        s.sync
                            .as_ref()
                            .map_or("queued".to_owned(), |(a, _)| format!("sync, answered {a}")),
                        s.tries,
                        s.refusals,
                        f.as_ref().and_then(|f| f.status.clone()),
                        record.map(|r| (
                            r.state,
                            r.owner.clone(),
                            r.run_id.as_ref().map(ToString::to_string),
                            r.response.as_ref().map(|resp| resp.status),
                            r.updated_at_ms,
                            r.expires_at_ms
                        ))
                    ));
                }
            }
        }
        unresolved
    } else {
        0
    };
    drop(store);

    // The desk's ground truth.
    let log = desk.log();
    let request_of: HashMap<u64, &rein_testkit::order_desk::RequestRecord> =
        log.requests.iter().map(|r| (r.seq, r)).collect();
    let mut desk_tally = DeskTally::default();
    for r in &log.requests {
        if r.tool.ends_with("/status") {
            desk_tally.lookups += 1;
        } else {
            desk_tally.tool_requests += 1;
        }
        desk_tally.faults_injected += usize::from(r.fault.is_some());
    }
    // An applied effect is a duplicate when its (run, intent, tool) or its
    // (tool, key) was applied before.
    let mut seen_intents: HashSet<(String, String, String)> = HashSet::new();
    let mut seen_keys: HashSet<(String, String)> = HashSet::new();
    let mut duplicate_effects = 0;
    let mut unledgered_effects = 0;
    let mut failed_but_applied = 0;
    // (run, intent, tool) applied at the desk.
    let mut applied: HashSet<(String, String, String)> = HashSet::new();
    for effect in &log.side_effects {
        let counts = match effect.effect {
            EffectKind::Applied => &mut desk_tally.applied,
            EffectKind::Replayed => &mut desk_tally.replayed,
        };
        *counts.entry(effect.tool.clone()).or_insert(0) += 1;
        if effect.effect != EffectKind::Applied {
            continue;
        }
        let headers = request_of.get(&effect.request_seq).map(|r| &r.headers);
        let run = headers.and_then(|h| h.run_id.clone()).unwrap_or_default();
        let intent = headers
            .and_then(|h| h.intent_id.clone())
            .unwrap_or_default();
        applied.insert((run.clone(), intent.clone(), effect.tool.clone()));
        let fresh_intent = seen_intents.insert((run.clone(), intent.clone(), effect.tool.clone()));
        let fresh_key = effect
            .idempotency_key
            .as_ref()
            .is_none_or(|k| seen_keys.insert((effect.tool.clone(), k.clone())));
        if !(fresh_intent && fresh_key) {
            duplicate_effects += 1;
            note(format!(
                "desk effect {}: {} applied again for run {run:?} intent {intent:?} key {:?}",
                effect.seq, effect.tool, effect.idempotency_key
            ));
        }
        let forward = intent.strip_suffix("/compensation").unwrap_or(&intent);
        match intents.get(&run).and_then(|i| i.get(forward)) {
            None => {
                unledgered_effects += 1;
                note(format!(
                    "desk effect {} ({}) of run {run:?} intent {intent:?} is in no ledger",
                    effect.seq, effect.tool
                ));
            }
            Some((_, status)) if status == "failed" && forward == intent => {
                failed_but_applied += 1;
                note(format!(
                    "run {run} intent {intent}: ledger `failed`, but the desk applied {} (effect {})",
                    effect.tool, effect.seq
                ));
            }
            Some(_) => {}
        }
    }

    // The ledger's side: a record that says its write happened was applied
    // at the desk, and a compensated one's compensation too.
    let mut happened_not_applied = 0;
    for (run, run_intents) in &intents {
        for (intent, (tool, status)) in run_intents {
            if !WRITES.contains(&tool.as_str()) {
                continue;
            }
            let happened = matches!(
                status.as_str(),
                "succeeded" | "compensated" | "uncompensatable"
            );
            if happened && !applied.contains(&(run.clone(), intent.clone(), tool.clone())) {
                happened_not_applied += 1;
                note(format!(
                    "run {run} intent {intent}: ledger `{status}`, but the desk never applied {tool}"
                ));
            }
            let compensation = (
                run.clone(),
                format!("{intent}/compensation"),
                RESTORE_DELIVERY_TIME.to_owned(),
            );
            if status == "compensated" && !applied.contains(&compensation) {
                happened_not_applied += 1;
                note(format!(
                    "run {run} intent {intent}: ledger `compensated`, but the desk never applied its {RESTORE_DELIVERY_TIME}"
                ));
            }
        }
    }

    Ok(LoadReport {
        config: config.clone(),
        accepted: submitted.len(),
        submit_secs: 0.0,
        wall_secs: 0.0,
        throughput_runs_per_sec: 0.0,
        submit_latency: Latency::default(),
        statuses,
        lost,
        stored_runs,
        duplicate_effects,
        unledgered_effects,
        restarted_runs,
        reopened_runs,
        resumed_runs,
        repeated_intents,
        failed_but_applied,
        ledger: ledger_tally,
        pending_effects,
        handed_off_in_doubt,
        unresolved_keys,
        poll_errors: 0,
        submit_retries: 0,
        max_submit_tries: 0,
        most_tried: String::new(),
        sync_answers: BTreeMap::new(),
        handed_on_reasons: BTreeMap::new(),
        sync_not_ended: Vec::new(),
        store_failed_runs,
        events_disagree,
        repeated_statements,
        happened_not_applied,
        held_marks_left: 0,
        database_restarted_after: None,
        desk: desk_tally,
        servers: Vec::new(),
        problems,
    })
}

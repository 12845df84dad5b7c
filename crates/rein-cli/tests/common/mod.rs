//! What the tests that start a real `rein serve` share: the example config,
//! the process on a free loopback port, and the address it announces.
// Each test binary that declares `mod common;` uses a part of it.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};

pub mod latency;
pub mod limits;
pub mod tenants;

/// The order-desk example: `rein.toml` and its `demo.script.json`.
pub fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk")
}

/// The example config with `extra` TOML appended, written into `dir` beside
/// a copy of the script it refers to; its path.
pub fn example_config(dir: &Path, extra: &str) -> PathBuf {
    example_config_with(dir, "", extra)
}

/// [`example_config`] with `server` lines (keys of the table itself, like
/// `shutdown_grace = "5s"`) added to its `[server]` table.
pub fn example_config_with(dir: &Path, server: &str, extra: &str) -> PathBuf {
    let mut config = std::fs::read_to_string(example_dir().join("rein.toml")).unwrap();
    assert!(
        config.contains("\n[server]\n"),
        "the example has a [server] table"
    );
    config = config.replacen("\n[server]\n", &format!("\n[server]\n{server}\n"), 1);
    config.push('\n');
    config.push_str(extra);
    std::fs::write(dir.join("rein.toml"), config).unwrap();
    std::fs::copy(
        example_dir().join("demo.script.json"),
        dir.join("demo.script.json"),
    )
    .unwrap();
    dir.join("rein.toml")
}

/// A test needs a part outside rein (Python packages, Chromium) that is
/// not installed: outside CI the test is skipped with `why`, so a
/// newcomer's `cargo test` stays green; under CI (`CI=true`, as `.ci/run`
/// runs) a missing part is a failure, never a silent skip.
///
/// # Panics
///
/// Under CI, always.
pub fn missing_part(why: &str) {
    let in_ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    assert!(
        !in_ci,
        "CI=true but a part this test needs is missing: {why}"
    );
    eprintln!("skipped: {why}");
}

/// A Python that can import `package`: `$REIN_PYTHON` (the venv `.ci/run`
/// makes and pins the packages in), else `python3`; otherwise why not, for
/// [`missing_part`].
pub fn python_with(package: &str) -> Result<String, String> {
    python_with_module(package, package)
}

/// [`python_with`] for a package whose module is named otherwise than
/// the package (`openai-agents` is imported as `agents`).
pub fn python_with_module(module: &str, package: &str) -> Result<String, String> {
    let candidates = std::env::var("REIN_PYTHON")
        .ok()
        .into_iter()
        .chain(["python3".to_owned()]);
    for python in candidates {
        let ok = Command::new(&python)
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Ok(python);
        }
    }
    Err(format!(
        "no Python with the `{package}` package: run .ci/run (it installs it into \
         ~/.cache/rein-venv and sets REIN_PYTHON), or `pip install {package}`"
    ))
}

/// The stderr lines a server keeps for a failure message.
const KEPT_LOG_LINES: usize = 200;

/// How long [`Server::wait_for_line`] waits for a line (generous: two
/// loaded cores; reaching it fails the test).
pub const LOG_LINE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The last lines a server wrote to stderr, and a condition variable the
/// reader thread signals after each one.
#[derive(Default)]
pub struct Log {
    lines: Mutex<VecDeque<String>>,
    grew: Condvar,
}

impl Log {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.lines
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn push(&self, line: &str) {
        let line = without_ansi(line);
        let mut lines = self.lock();
        if lines.len() == KEPT_LOG_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
        drop(lines);
        self.grew.notify_all();
    }

    /// The first kept line satisfying `found`, waiting for the reader to
    /// add lines until `bound` has passed.
    fn wait_for(&self, found: impl Fn(&str) -> bool, bound: std::time::Duration) -> Option<String> {
        let until = std::time::Instant::now() + bound;
        let mut lines = self.lock();
        loop {
            if let Some(line) = lines.iter().find(|l| found(l)) {
                return Some(line.clone());
            }
            let left = until.checked_duration_since(std::time::Instant::now())?;
            lines = self
                .grew
                .wait_timeout(lines, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

/// The line where `rein serve` announces its address. The rest of its
/// stderr (logs) is read in the background, so the process never blocks
/// on it, and its last lines are kept in `log`.
pub fn announced(stderr: ChildStderr, log: Arc<Log>) -> String {
    let mut lines = BufReader::new(stderr).lines();
    // What the server logs before it listens is kept too.
    let mut found = String::new();
    for line in lines.by_ref().map_while(Result::ok) {
        if line.contains("listening on http://") {
            found = line;
            break;
        }
        log.push(&line);
    }
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            log.push(&line);
        }
    });
    found
}

/// `command` (the `rein` binary, or a wrapper that execs it) given the
/// arguments and environment of `rein serve` on `config` and `db`.
pub fn serve_command(
    mut command: Command,
    config: &Path,
    db: &Path,
    env: &[(&str, &str)],
) -> Command {
    command
        .envs(env.iter().copied())
        .env_remove("REIN_CRASH_AT")
        .args(["serve", "--config"])
        .arg(config)
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(db);
    command
}

/// `line` without ANSI colour sequences (`ESC [ ... m`), so that tests
/// match `field=value` whatever the log's colouring.
pub fn without_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A `rein serve` process on a free loopback port; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    log: Arc<Log>,
}

impl Server {
    /// Serves `config` on `db`, its tools at `desk` and its model at a
    /// dead address.
    pub fn start(config: &Path, db: &Path, desk: &str) -> Server {
        Server::start_with_env(
            config,
            db,
            &[
                ("ORDER_DESK_URL", desk),
                ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
            ],
        )
    }

    /// Serves `config` on `db` with the environment `env` (the variables
    /// the config refers to).
    pub fn start_with_env(config: &Path, db: &Path, env: &[(&str, &str)]) -> Server {
        Server::spawn(serve_command(
            Command::new(env!("CARGO_BIN_EXE_rein")),
            config,
            db,
            env,
        ))
    }

    /// Starts `command` (made with [`serve_command`]) and waits for its
    /// address.
    pub fn spawn(mut command: Command) -> Server {
        let mut child = command.stderr(Stdio::piped()).spawn().unwrap();
        let log = Arc::new(Log::default());
        let line = announced(child.stderr.take().unwrap(), log.clone());
        let addr = line
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        Server { child, addr, log }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Whether the process is still running (it neither exited nor
    /// crashed).
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until a line of the log satisfies `found` (woken by each line
    /// the reader keeps; at most [`LOG_LINE_TIMEOUT`], then the test
    /// fails); that line.
    pub fn wait_for_line(&self, found: impl Fn(&str) -> bool) -> String {
        self.log
            .wait_for(found, LOG_LINE_TIMEOUT)
            .unwrap_or_else(|| {
                panic!(
                    "no such line in the server log within {LOG_LINE_TIMEOUT:?}:\n{}",
                    self.log_tail()
                )
            })
    }

    /// The lines of the log kept so far.
    pub fn log_lines(&self) -> Vec<String> {
        self.log.lock().iter().cloned().collect()
    }

    /// The last lines the server wrote to stderr.
    pub fn log_tail(&self) -> String {
        self.log
            .lock()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Sends `signal` to the process.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
    }

    /// Waits for the process to exit, at most `bound` (generous: a bound
    /// that fails the test, not a measurement).
    pub fn wait_exit(&mut self, bound: std::time::Duration) -> std::process::ExitStatus {
        let until = std::time::Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < until,
                "the server did not exit within {bound:?}; its log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// The first log line containing `needle`, waiting for it at most
    /// `bound` (lines are collected by a thread, after the process wrote
    /// them; reaching the bound fails the test).
    pub fn wait_for_log(&self, needle: &str, bound: std::time::Duration) -> String {
        self.log
            .wait_for(|l| l.contains(needle), bound)
            .unwrap_or_else(|| {
                panic!(
                    "no log line with {needle:?} within {bound:?}; the log:\n{}",
                    self.log_tail()
                )
            })
    }

    /// SIGKILL: no graceful anything.
    pub fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The same helpers for async tests: starting a server waits for its
/// address on a blocking thread, and a kill waits for the process there,
/// so no runtime worker of the test blocks on a process.
impl Server {
    /// [`Server::start`], off the runtime's workers.
    pub async fn start_async(config: &Path, db: &Path, desk: &str) -> Server {
        let (config, db, desk) = (config.to_owned(), db.to_owned(), desk.to_owned());
        tokio::task::spawn_blocking(move || Server::start(&config, &db, &desk))
            .await
            .unwrap()
    }

    /// [`Server::spawn`], off the runtime's workers.
    pub async fn spawn_async(command: Command) -> Server {
        tokio::task::spawn_blocking(move || Server::spawn(command))
            .await
            .unwrap()
    }

    /// [`Server::kill`], off the runtime's workers.
    pub async fn kill_async(self) {
        tokio::task::spawn_blocking(move || self.kill())
            .await
            .unwrap();
    }

    /// Waits (polling, without blocking the runtime) until the process
    /// exited, at most `bound` (generous: a bound that fails the test).
    pub async fn exited(&mut self, bound: std::time::Duration) -> std::process::ExitStatus {
        let until = tokio::time::Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "the server did not exit within {bound:?}; its log:\n{}",
                self.log_tail()
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}

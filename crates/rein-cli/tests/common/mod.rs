//! What the tests that start a real `rein serve` share: the example config,
//! the process on a free loopback port, and the address it announces.
// Each test binary that declares `mod common;` uses a part of it.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, Command, Stdio};
use std::sync::{Arc, Mutex};

/// The order-desk example: `rein.toml` and its `demo.script.json`.
pub fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk")
}

/// The example config with `extra` TOML appended, written into `dir` beside
/// a copy of the script it refers to; its path.
pub fn example_config(dir: &Path, extra: &str) -> PathBuf {
    let mut config = std::fs::read_to_string(example_dir().join("rein.toml")).unwrap();
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

/// The stderr lines a server keeps for a failure message.
const KEPT_LOG_LINES: usize = 200;

/// The line where `rein serve` announces its address. The rest of its
/// stderr (logs) is drained in the background, so the process never blocks
/// on it, and its last lines are kept in `log`.
pub fn announced(stderr: ChildStderr, log: Arc<Mutex<VecDeque<String>>>) -> String {
    let mut lines = BufReader::new(stderr).lines();
    let found = lines
        .by_ref()
        .map_while(Result::ok)
        .find(|l| l.contains("listening on http://"))
        .unwrap_or_default();
    std::thread::spawn(move || {
        for line in lines.map_while(Result::ok) {
            let mut log = log
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if log.len() == KEPT_LOG_LINES {
                log.pop_front();
            }
            log.push_back(line);
        }
    });
    found
}

/// A `rein serve` process on a free loopback port; killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    log: Arc<Mutex<VecDeque<String>>>,
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
        let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
            .envs(env.iter().copied())
            .env_remove("REIN_CRASH_AT")
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(db)
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = Arc::new(Mutex::new(VecDeque::new()));
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

    /// The last lines the server wrote to stderr.
    pub fn log_tail(&self) -> String {
        let log = self
            .log
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        log.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
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

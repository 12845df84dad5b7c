//! The README, walked (issue 37, item 7): a newcomer's path through it —
//! the demo, `rein dev`, `rein serve`, a submission, the inspection of the
//! run, their own agent with `rein init`, `rein check`, `rein run` and
//! `rein resume` — run command by command, in the README's order, against
//! the built binary. The commands are read from `README.md` at test time,
//! so a README edit that breaks one fails this test.
//!
//! # What is walked
//!
//! Every fenced `sh` block directly under these headings (up to the next
//! heading of any level), every command in it, in order:
//!
//! 1. `## Two commands`: `rein demo` (`cargo test --workspace` is not run:
//!    this test is part of it).
//! 2. `## Serving runs over HTTP`: `rein dev`, the exports, `rein serve`,
//!    the queued submission and its event stream (`curl`).
//! 3. `## Inspecting runs`: its first block (`rein runs list|show|events|
//!    ledger`, `--follow`, `--server`), on the run step 2 submitted; the
//!    blocks after it are the API's reference, not the newcomer's path.
//! 4. `## Your own agent`: `rein init`, `rein dev`, the exports, `rein
//!    check --explain`, `rein run`, `rein resume`.
//!
//! Each command runs through `sh -c` in the walk's working directory (a
//! temporary one per part, holding a copy of `examples/order-desk` where
//! the README's commands name it), with `rein` on `PATH` as the built
//! binary and the `export`s of earlier commands in its environment. It
//! must exit 0 and print what shows it did its job (the demo's
//! `partial_success`, the run's `succeeded`, the listing naming the
//! submitted run, …); a command the walk has no expectation for fails the
//! test, so a new README command is walked, not passed over.
//!
//! # What is rewritten, and why
//!
//! Only what a test must change to run beside other tests, each rewrite
//! named here:
//!
//! - `cargo run [-q] -p rein-cli --` is `rein` (the README says to read
//!   it so), and `rein` is the binary under test.
//! - Fixed ports: `rein dev` gets `--desk-port 0 --model-port 0` and `rein
//!   serve` `--listen 127.0.0.1:0` (each may run while other tests hold
//!   any port); the ports they announce replace the README's `:8080`
//!   (desk), `:8081` (model) and `:8787` (server) in every later command
//!   and export.
//! - `<run_id>` is the run the walk produced: the submitted run, then, for
//!   `rein resume`, the run the walk interrupted.
//! - `[--json]` (an optional flag, in the README's notation) is dropped.
//! - The stand-ins for a production host are the walk's own: the store
//!   file `/var/lib/rein/rein.db` is `rein-data/rein.db`, the server
//!   `https://rein.example.com` is the `rein serve` of step 2.
//! - `rein init`'s comment says how it asks nothing (`--yes`): the walk
//!   adds that flag (stdin is not a terminal either).
//!
//! Long-running commands are started and waited for by what they print,
//! never by time: `rein dev` by the exports it prints, `rein serve` by the
//! address it announces, `rein runs list --follow` by the line naming the
//! submitted run, after which it gets Ctrl-C (SIGINT) and must exit 0, as
//! the README says; `rein dev` and `rein serve` too, at the end of their
//! part.
//!
//! Before the README's `rein run` the walk tells `rein dev`'s mock model
//! (`POST <model>/_script`, as the README documents) to look the order up
//! and move it, so the run reaches the tool service where the exports
//! point (unscripted, the mock only answers a short text, and a wrong
//! `TOOLS_URL` would go unnoticed). `rein resume` needs a run stopped
//! mid-way: the walk runs the README's `rein run` again with the model's
//! next answer held back (`delay_ms`), waits until the model took it
//! (`GET <model>/_script` says none is queued), sends Ctrl-C, and checks
//! that the run says to continue it with `rein resume <its id> --config`,
//! as the README's line does.
//!
//! `curl` is a part outside rein: without it the walk is skipped with a
//! message, and fails under `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// How long a command may take before the walk calls it hung (generous:
/// two loaded cores; reaching it fails the test, it measures nothing).
const HANG: Duration = Duration::from_secs(180);

/// The README, from the workspace root.
fn readme() -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../README.md");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The fenced `sh` blocks directly under `heading` (a whole line, such as
/// `## Two commands`), up to the next heading; each block's commands, a
/// line continued by `\` joined into one, comment lines left out.
fn sh_blocks_under(readme: &str, heading: &str) -> Vec<Vec<String>> {
    let mut lines = readme.lines();
    assert!(
        lines.by_ref().any(|l| l.trim_end() == heading),
        "the README has no heading {heading:?}: the walk follows it"
    );
    let mut blocks = Vec::new();
    let mut block: Option<Vec<String>> = None;
    let mut fenced = false;
    for line in lines {
        if line.starts_with("```") {
            if fenced {
                blocks.extend(block.take());
            } else if line.trim_end() == "```sh" {
                block = Some(Vec::new());
            }
            fenced = !fenced;
            continue;
        }
        if !fenced && line.starts_with('#') {
            break;
        }
        let Some(commands) = block.as_mut() else {
            continue;
        };
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match commands.last_mut() {
            Some(last) if last.ends_with('\\') => {
                last.pop();
                last.push_str(trimmed);
            }
            _ => commands.push(trimmed.to_owned()),
        }
    }
    assert!(
        !blocks.is_empty(),
        "the README has no ```sh block under {heading:?}: the walk runs those"
    );
    blocks
}

/// `line` split into its command and its trailing `# comment` (outside
/// quotes), both trimmed.
fn split_comment(line: &str) -> (String, String) {
    let (mut single, mut double) = (false, false);
    let mut previous = ' ';
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => {
                return (line[..i].trim().to_owned(), line[i + 1..].trim().to_owned());
            }
            _ => {}
        }
        previous = c;
    }
    (line.trim().to_owned(), String::new())
}

/// What a process wrote, line by line, kept as it arrives; waited on
/// through a condition variable, never by time.
#[derive(Default)]
struct Lines {
    lines: Mutex<Vec<String>>,
    grew: Condvar,
}

impl Lines {
    fn push(&self, line: String) {
        self.lines.lock().unwrap().push(line);
        self.grew.notify_all();
    }

    /// Reads `stream` into `self` and `both` on a thread of its own.
    fn collect(
        self: &Arc<Self>,
        both: &Arc<Self>,
        stream: impl Read + Send + 'static,
    ) -> std::thread::JoinHandle<()> {
        let (me, both) = (self.clone(), both.clone());
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(Result::ok) {
                let line = common::without_ansi(&line);
                me.push(line.clone());
                both.push(line);
            }
        })
    }

    fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// The first line satisfying `found`, waiting at most `bound` (which
    /// fails the caller) for the collector to add it.
    fn wait_for(&self, found: impl Fn(&str) -> bool, bound: Duration) -> Option<String> {
        let until = Instant::now() + bound;
        let mut lines = self.lines.lock().unwrap();
        loop {
            if let Some(line) = lines.iter().find(|l| found(l)) {
                return Some(line.clone());
            }
            let left = until.checked_duration_since(Instant::now())?;
            lines = self.grew.wait_timeout(lines, left).unwrap().0;
        }
    }
}

/// A command of the README, started: its process and what it printed.
struct Running {
    what: String,
    child: Child,
    stdout: Arc<Lines>,
    stderr: Arc<Lines>,
    /// Both, as they arrive.
    both: Arc<Lines>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    fn output(&self) -> String {
        format!(
            "--- stdout ---\n{}\n--- stderr ---\n{}",
            self.stdout.text(),
            self.stderr.text()
        )
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).unwrap());
        nix::sys::signal::kill(pid, signal).unwrap();
    }

    /// Waits for the exit (polling `try_wait`; [`HANG`] fails the test),
    /// then for the readers to have everything it wrote.
    fn wait(&mut self) -> ExitStatus {
        let until = Instant::now() + HANG;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > until {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "`{}` did not end within {HANG:?}\n{}",
                    self.what,
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for reader in self.readers.drain(..) {
            reader.join().unwrap();
        }
        status
    }

    /// The first stdout or stderr line with `needle`, waiting for it.
    fn wait_for_line(&self, needle: &str) -> String {
        if let Some(line) = self.both.wait_for(|l| l.contains(needle), HANG) {
            return line;
        }
        panic!(
            "`{}` printed no line with {needle:?} within {HANG:?}\n{}",
            self.what,
            self.output()
        );
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The walk's state: where commands run, their environment, the ports
/// and run the README's placeholders stand for, and what runs in the
/// background.
struct Walk {
    /// The directory holding `rein` (the binary under test), first on
    /// `PATH`.
    bin: tempfile::TempDir,
    /// The current part's working directory.
    dir: tempfile::TempDir,
    /// The `export`s so far.
    env: BTreeMap<String, String>,
    /// README port (`:8080`) → the announced one (`:40123`).
    ports: Vec<(String, String)>,
    /// What `<run_id>` stands for.
    run_id: Option<String>,
    /// The last `rein run` walked, as run.
    last_run: Option<String>,
    /// The URL of the `rein serve` started (for `https://rein.example.com`).
    server: Option<String>,
    /// The mock model of the `rein dev` started last.
    model: Option<String>,
    /// `rein dev` and `rein serve`, until their part ends.
    background: Vec<Running>,
    /// Where the walk is, for failure messages.
    step: String,
    runtime: tokio::runtime::Runtime,
}

impl Walk {
    fn new() -> Walk {
        let bin = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rein"), bin.path().join("rein")).unwrap();
        Walk {
            bin,
            dir: tempfile::tempdir().unwrap(),
            env: BTreeMap::new(),
            ports: Vec::new(),
            run_id: None,
            last_run: None,
            server: None,
            model: None,
            background: Vec::new(),
            step: String::new(),
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
        }
    }

    /// A fresh working directory for the next part, with a copy of
    /// `examples/order-desk`; the background processes of the last part
    /// stopped by Ctrl-C (each must exit 0).
    fn next_part(&mut self, part: &str) {
        self.stop_background();
        self.dir = tempfile::tempdir().unwrap();
        let examples = self.dir.path().join("examples/order-desk");
        std::fs::create_dir_all(&examples).unwrap();
        for entry in std::fs::read_dir(common::example_dir()).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), examples.join(entry.file_name())).unwrap();
        }
        // A part is followed from its own start: its exports and ports.
        self.env.clear();
        self.ports.clear();
        self.model = None;
        self.server = None;
        self.last_run = None;
        eprintln!("== {part} (in {})", self.dir.path().display());
    }

    fn stop_background(&mut self) {
        while let Some(mut process) = self.background.pop() {
            process.signal(nix::sys::signal::Signal::SIGINT);
            let status = process.wait();
            assert!(
                status.success(),
                "{}: `{}` did not exit 0 on Ctrl-C: {status:?}\n{}",
                self.step,
                process.what,
                process.output()
            );
        }
    }

    /// The command `line` of the README as the walk runs it (see the
    /// module docs for each rewrite).
    fn rewrite(&self, line: &str) -> String {
        let (mut command, comment) = split_comment(line);
        for cargo in ["cargo run -q -p rein-cli --", "cargo run -p rein-cli --"] {
            if let Some(rest) = command.strip_prefix(cargo) {
                command = format!("rein{rest}");
            }
        }
        for (from, to) in &self.ports {
            command = command.replace(from.as_str(), to);
        }
        if command.contains("<run_id>") {
            let run_id = self.run_id.as_deref().unwrap_or_else(|| {
                panic!(
                    "{}: `{line}` names <run_id> before the walk made a run",
                    self.step
                )
            });
            command = command.replace("<run_id>", run_id);
        }
        command = command.replace(" [--json]", "");
        command = command.replace("/var/lib/rein/rein.db", "rein-data/rein.db");
        if let Some(server) = &self.server {
            command = command.replace("https://rein.example.com", server);
        }
        if command.starts_with("rein init") && comment.contains("--yes") {
            command.push_str(" --yes");
        }
        command
    }

    /// `sh -c command` in the working directory, with the walk's
    /// environment, started.
    fn start(&self, command: &str) -> Running {
        eprintln!("$ {command}");
        let path = format!(
            "{}:{}",
            self.bin.path().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .current_dir(self.dir.path())
            .env("PATH", path)
            .envs(&self.env)
            .env_remove("REIN_CRASH_AT")
            .env_remove("REIN_PANIC_AT")
            .env_remove("REIN_API_KEY")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("{}: cannot start `{command}`: {e}", self.step));
        let (stdout, stderr) = (Arc::new(Lines::default()), Arc::new(Lines::default()));
        let both = Arc::new(Lines::default());
        let readers = vec![
            stdout.collect(&both, child.stdout.take().unwrap()),
            stderr.collect(&both, child.stderr.take().unwrap()),
        ];
        Running {
            what: command.to_owned(),
            child,
            stdout,
            stderr,
            both,
            readers,
        }
    }

    /// Runs `command` to its end: it must exit 0; its stdout, and the
    /// whole output for messages.
    fn run(&self, line: &str, command: &str) -> (String, String) {
        let mut process = self.start(command);
        let status = process.wait();
        let output = process.output();
        assert!(
            status.success(),
            "{}: the README's `{line}`, run as `{command}`, failed: {status:?}\n{output}",
            self.step
        );
        (process.stdout.text(), output)
    }

    /// Fails the step unless `output` contains each of `needles`.
    fn expect(&self, line: &str, output: &str, needles: &[&str]) {
        for needle in needles {
            assert!(
                output.contains(needle),
                "{}: the README's `{line}` did not print {needle:?}\n{output}",
                self.step
            );
        }
    }

    fn run_id(&self) -> String {
        self.run_id.clone().unwrap()
    }

    /// Walks one README command.
    fn walk(&mut self, line: &str) {
        let command = self.rewrite(line);
        // A command's own `VAR=value` prefix is its environment, not its
        // name.
        let words: Vec<&str> = command
            .split_whitespace()
            .skip_while(|w| {
                w.split_once('=').is_some_and(|(name, _)| {
                    !name.is_empty() && name.chars().all(|c| c.is_ascii_uppercase() || c == '_')
                })
            })
            .collect();
        match words.as_slice() {
            // This test is one of them: running the workspace's tests from
            // inside one would run this walk again, and again.
            ["cargo", "test", "--workspace", ..] => {
                eprintln!("(not run: `{line}` runs this walk too)");
            }
            ["export", assignments @ ..] => {
                eprintln!("$ {command}");
                for assignment in assignments {
                    let (key, value) = assignment.split_once('=').unwrap_or_else(|| {
                        panic!("{}: `{line}`: not an assignment: {assignment}", self.step)
                    });
                    self.env.insert(key.to_owned(), value.to_owned());
                }
            }
            ["rein", "demo", ..] => {
                let (_, output) = self.run(line, &command);
                self.expect(line, &output, &["partial_success"]);
            }
            ["rein", "dev", ..] => self.dev(line, &command),
            ["rein", "serve", ..] => self.serve(line, &command),
            ["curl", rest @ ..] if rest.contains(&"POST") => {
                let (stdout, output) = self.run(line, &command);
                let answer: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
                    panic!("{}: `{line}` answered no JSON ({e})\n{output}", self.step)
                });
                let run_id = answer["run_id"].as_str().unwrap_or_else(|| {
                    panic!("{}: `{line}` answered no run_id\n{output}", self.step)
                });
                self.expect(line, &output, &["queued"]);
                self.run_id = Some(run_id.to_owned());
            }
            ["curl", .., url] if url.ends_with("/events") => {
                // The stream ends when the run does: from its start to
                // its successful end.
                let (_, output) = self.run(line, &command);
                self.expect(
                    line,
                    &output,
                    &[
                        "event: run_started",
                        "event: run_finished",
                        r#""outcome":"succeeded""#,
                    ],
                );
            }
            ["rein", "runs", "list", rest @ ..] if rest.contains(&"--follow") => {
                self.follow(line, &command);
            }
            ["rein", "runs", "list", rest @ ..] if rest.contains(&"--status") => {
                // The run ended: a listing of running runs must not show it.
                let (stdout, output) = self.run(line, &command);
                assert!(
                    !stdout.contains(&self.run_id()),
                    "{}: `{line}` lists an ended run as running\n{output}",
                    self.step
                );
            }
            ["rein", "runs", "list", ..] => {
                let (_, output) = self.run(line, &command);
                self.expect(line, &output, &[&self.run_id()]);
            }
            ["rein", "runs", "show", ..] => {
                let (_, output) = self.run(line, &command);
                self.expect(line, &output, &[&self.run_id(), "succeeded"]);
            }
            ["rein", "runs", "events", ..] => {
                let (_, output) = self.run(line, &command);
                self.expect(line, &output, &["run_started", "run_finished"]);
            }
            ["rein", "runs", "ledger", ..] => {
                let (_, output) = self.run(line, &command);
                self.expect(line, &output, &["update_delivery_time", "send_email"]);
            }
            ["rein", "init", dir, ..] => {
                let (_, output) = self.run(line, &command);
                for file in ["rein.toml", "tool_service.py"] {
                    assert!(
                        self.dir.path().join(dir).join(file).is_file(),
                        "{}: `{line}` wrote no {dir}/{file}\n{output}",
                        self.step
                    );
                }
            }
            ["rein", "check", ..] => {
                let (_, output) = self.run(line, &command);
                self.expect(line, &output, &["ok:", "agent assistant"]);
            }
            ["rein", "run", ..] => {
                // The model looks the order up and moves it, so the run
                // reaches the tools where the exports say they are.
                self.script_model(line, &serde_json::json!([
                    {"kind": "tool_call", "name": "get_order", "arguments": {"order_id": "A-1001"}},
                    {"kind": "tool_call", "name": "update_delivery_time",
                     "arguments": {"order_id": "A-1001", "delivery_date": "2026-01-08T14:00:00Z"}},
                    {"kind": "text", "text": "A-1001 now arrives on 2026-01-08 at 14:00 UTC."},
                ]));
                let (_, output) = self.run(line, &command);
                self.expect(
                    line,
                    &output,
                    &[
                        "outcome: succeeded",
                        "Completed: get_order, update_delivery_time.",
                    ],
                );
                self.last_run = Some(command.clone());
            }
            ["rein", "resume", ..] => {
                // It continues a run stopped mid-way: the last `rein run`
                // again, stopped by Ctrl-C.
                let run = self
                    .last_run
                    .clone()
                    .unwrap_or_else(|| panic!("{}: `{line}` before any `rein run`", self.step));
                self.interrupt(&run);
                let command = self.rewrite(line);
                let (_, output) = self.run(line, &command);
                self.expect(line, &output, &[&self.run_id(), "outcome: succeeded"]);
            }
            _ => panic!(
                "{}: the README's `{line}` is a command the walk does not know: \
                 teach it what the command must print",
                self.step
            ),
        }
    }

    /// `rein dev`, on free ports: waits for the exports it prints and maps
    /// the README's `:8080` and `:8081` to its ports.
    fn dev(&mut self, line: &str, command: &str) {
        let process = self.start(&format!("exec {command} --desk-port 0 --model-port 0"));
        let exports = process.wait_for_line("export ORDER_DESK_URL=");
        let url = |name: &str| {
            exports
                .split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("{}: `{line}` printed no {name}: {exports}", self.step))
                .to_owned()
        };
        let (desk, model) = (url("ORDER_DESK_URL"), url("MOCK_MODEL_URL"));
        let port = |url: &str| format!(":{}", url.rsplit(':').next().unwrap());
        self.ports.push((":8080".to_owned(), port(&desk)));
        self.ports.push((":8081".to_owned(), port(&model)));
        self.model = Some(model);
        self.background.push(process);
    }

    /// `rein serve` on a free port: waits for the address it announces and
    /// maps the README's `:8787` to it.
    fn serve(&mut self, line: &str, command: &str) {
        assert!(
            !command.contains("--listen"),
            "{}: `{line}`: the walk gives serve its own --listen",
            self.step
        );
        let process = self.start(&format!("exec {command} --listen 127.0.0.1:0"));
        let announced = process.wait_for_line("listening on http://");
        let addr = announced
            .split("http://")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{}: no address in {announced:?}", self.step))
            .trim_end_matches('/')
            .to_owned();
        let port = addr.rsplit(':').next().unwrap();
        self.ports.push((":8787".to_owned(), format!(":{port}")));
        self.server = Some(format!("http://{addr}"));
        self.background.push(process);
    }

    /// `rein runs list --follow`: it must show the run, then stop on
    /// Ctrl-C with exit 0.
    fn follow(&mut self, line: &str, command: &str) {
        let mut process = self.start(&format!("exec {command}"));
        process.wait_for_line(&self.run_id());
        process.signal(nix::sys::signal::Signal::SIGINT);
        let status = process.wait();
        assert!(
            status.success(),
            "{}: `{line}` did not exit 0 on Ctrl-C: {status:?}\n{}",
            self.step,
            process.output()
        );
    }

    /// Queues `replies` as the next answers of the `rein dev` model
    /// (`POST <model>/_script`, as the README shows); the model's URL.
    fn script_model(&self, line: &str, replies: &Value) -> String {
        let model = self.model.clone().unwrap_or_else(|| {
            panic!("{}: `{line}` ran without a `rein dev` before it", self.step)
        });
        let queued: Value = self.runtime.block_on(async {
            reqwest::Client::new()
                .post(format!("{model}/_script"))
                .json(&serde_json::json!({ "replies": replies }))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap()
        });
        assert_eq!(
            queued["queued"],
            replies.as_array().unwrap().len(),
            "{queued}"
        );
        model
    }

    /// Runs the README's `rein run` again and stops it mid-way with Ctrl-C,
    /// while the mock model holds its answer back: the run it leaves is
    /// what the README's `rein resume` continues.
    fn interrupt(&mut self, command: &str) {
        let model = self.script_model(
            command,
            &serde_json::json!([{"kind": "text", "text": "late", "delay_ms": 600_000}]),
        );
        let client = reqwest::Client::new();
        let mut process = self.start(&format!("exec {command}"));
        let started = process.wait_for_line("rein run: run ");
        let run_id = started
            .split("rein run: run ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no run id in {started:?}"))
            .to_owned();
        // The model took the held-back answer: the run is mid-way.
        let until = Instant::now() + HANG;
        loop {
            let left: Value = self.runtime.block_on(async {
                client
                    .get(format!("{model}/_script"))
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap()
            });
            if left["queued"] == 0 {
                break;
            }
            assert!(
                Instant::now() < until,
                "{}: the run never asked the model\n{}",
                self.step,
                process.output()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        process.signal(nix::sys::signal::Signal::SIGINT);
        let status = process.wait();
        assert_eq!(
            status.code(),
            Some(130),
            "{}: `{command}` stopped by Ctrl-C\n{}",
            self.step,
            process.output()
        );
        let said = process.output();
        assert!(
            said.contains(&format!("rein resume {run_id} --config ")),
            "{}: the interrupted run does not say how to resume it\n{said}",
            self.step
        );
        self.run_id = Some(run_id);
    }
}

#[test]
fn the_readme_walks_from_the_demo_to_your_own_agent() {
    let curl = Command::new("curl")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !curl {
        return common::missing_part("no `curl`: the README submits a run with it");
    }
    let readme = readme();
    let mut walk = Walk::new();
    let parts = [
        ("## Two commands", None),
        ("## Serving runs over HTTP", None),
        ("## Inspecting runs", Some(1)),
        ("## Your own agent", None),
    ];
    for (heading, first_blocks) in parts {
        let blocks = sh_blocks_under(&readme, heading);
        let blocks = &blocks[..first_blocks.unwrap_or(blocks.len())];
        if heading != "## Inspecting runs" {
            // Inspecting looks at the runs (and the server) of Serving.
            walk.next_part(heading);
        }
        for (i, line) in blocks.iter().flatten().enumerate() {
            walk.step = format!("{heading}, command {}", i + 1);
            walk.walk(line);
        }
    }
    walk.step = "the end".to_owned();
    walk.stop_background();
}

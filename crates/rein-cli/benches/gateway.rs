//! The gateway latency benchmark of issue 7: what `rein serve`'s
//! OpenAI-compatible gateway adds over calling the model directly.
//!
//! One mock model (the testkit's, real HTTP over loopback) and one real
//! `rein serve` whose `[models.bench]` binding points at it. Every scenario
//! sends its requests once straight to the mock (`model: "mock-model"`)
//! and once through the gateway (`model: "bench"`), from one HTTP client
//! with connection reuse and `TCP_NODELAY`, in alternating rounds (direct
//! then gateway, gateway then direct, ...) so that machine noise hits both
//! alike. Each scenario starts with a warm-up of both paths that is not
//! measured.
//!
//! | scenario | what is timed |
//! | --- | --- |
//! | `complete` | request sent until the whole JSON body is read |
//! | `stream TTFT` | request sent until the chunk carrying the first non-empty `delta.content` arrives |
//! | `stream whole` | the same requests, until `[DONE]` is read (a reference row) |
//!
//! Both run at concurrency 1 and 32. The report gives, per scenario, the
//! direct and gateway p50 and p99, the added latency (gateway minus direct)
//! at p50 and p99, and each path's throughput.
//!
//! ```text
//! cargo bench -p rein-cli --bench gateway [-- --requests N] [--warmup N]
//!     [--rounds N] [--concurrency 1,32] [--rein PATH] [--without-recovery]
//!     [--callgrind DIR] [--json]
//! ```
//!
//! | option | default |
//! | --- | --- |
//! | `--requests` | 500 at concurrency 1, 2000 above, per path ([`DEFAULT_REQUESTS_SERIAL`], [`DEFAULT_REQUESTS_CONCURRENT`]); when given, for every scenario |
//! | `--warmup` | 100 unmeasured requests per path and scenario ([`DEFAULT_WARMUP`]) |
//! | `--rounds` | 10 alternating rounds per scenario ([`DEFAULT_ROUNDS`]) |
//! | `--concurrency` | `1,32` |
//! | `--rein` | the `rein` built with this bench; another build's binary compares two commits on one bench |
//! | `--without-recovery` | off: the binding recovers cut streams (`recover_streams`, the default); on, it does not, the baseline of what recovery costs a stream that is never cut |
//! | `--callgrind` | off: `rein serve` runs under valgrind's callgrind, and each scenario reports the instructions the gateway spent per request; each scenario's profile is kept in DIR for `callgrind_annotate` |
//!
//! Besides latency, each scenario reports the CPU time `rein serve` spent
//! per gateway request (its threads' time on a CPU, from
//! `/proc/PID/task/*/schedstat`, over the gateway's rounds only), which
//! holds better than latency when the client, the mock and the gateway
//! share the cores; and the report ends with the gateway's resident memory
//! after the load and at its peak (`VmRSS`, `VmHWM`).
//!
//! # Instructions, not milliseconds
//!
//! On a shared machine the latencies move with whatever else runs; the
//! instructions `rein serve` executes per request do not (the same binary
//! and inputs give the same count within a fraction of a percent). With
//! `--callgrind` the counters are zeroed after each scenario's warm-up and
//! dumped after its rounds, so a count covers exactly the measured
//! requests (and whatever the idle server does meanwhile, which is part of
//! its cost). Latencies measured under valgrind mean nothing and are
//! still printed only to show that every request succeeded.
//!
//! Every answer is checked (status 200, the mock's text, a stream's
//! `[DONE]` and no in-band error). A failed request is counted, never
//! dropped: it ranks above every success in the percentiles (a percentile
//! that lands on a failure is reported as failed) and the bench exits 1.
//! Exits 2 when the harness itself fails.
//!
//! On a small machine the client, the mock and `rein serve` share the
//! cores, so at concurrency 32 the added latency includes the gateway's
//! CPU cost queued behind everything else, not only its own path.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use rein_testkit::mock_model::{MockModel, MockModelConfig};
use serde_json::{Value, json};

/// The requests per path and scenario at concurrency 1.
const DEFAULT_REQUESTS_SERIAL: usize = 500;
/// The requests per path and scenario above concurrency 1.
const DEFAULT_REQUESTS_CONCURRENT: usize = 2000;
/// The unmeasured requests per path before each scenario.
const DEFAULT_WARMUP: usize = 100;
/// The alternating rounds each scenario's requests are split into.
const DEFAULT_ROUNDS: usize = 10;
/// The concurrencies measured.
const DEFAULT_CONCURRENCIES: [usize; 2] = [1, 32];
/// How long one request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// What the mock answers: longer than one stream piece, so a streamed
/// answer comes in several content chunks.
const ANSWER: &str = "The quick brown fox jumps over the lazy dog.";
/// The failure messages kept per scenario and path, for stderr.
const KEPT_FAILURES: usize = 5;
/// The `rein serve` stderr lines kept for diagnostics.
const KEPT_LOG_LINES: usize = 50;

/// The bench's settings, from the arguments after `--`.
struct Options {
    /// The arguments as given, for the report's command line.
    args: Vec<String>,
    requests: Option<usize>,
    warmup: usize,
    rounds: usize,
    concurrencies: Vec<usize>,
    /// The `rein` binary serving the gateway.
    rein: PathBuf,
    /// Whether the binding recovers cut streams.
    recovery: bool,
    /// Where the callgrind profiles go, when `rein serve` runs under it.
    callgrind: Option<PathBuf>,
    json: bool,
}

/// Parses the arguments after `--`; `cargo bench` adds `--bench`, which is
/// ignored.
fn parse(args: Vec<String>) -> Result<Options> {
    let mut options = Options {
        args: args.clone(),
        requests: None,
        warmup: DEFAULT_WARMUP,
        rounds: DEFAULT_ROUNDS,
        concurrencies: DEFAULT_CONCURRENCIES.to_vec(),
        rein: PathBuf::from(env!("CARGO_BIN_EXE_rein")),
        recovery: true,
        callgrind: None,
        json: false,
    };
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = |name: &str| args.next().with_context(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--bench" => {}
            "--json" => options.json = true,
            "--rein" => options.rein = value("--rein")?.into(),
            "--without-recovery" => options.recovery = false,
            "--callgrind" => options.callgrind = Some(value("--callgrind")?.into()),
            "--requests" => {
                let n: usize = value("--requests")?.parse().context("--requests")?;
                if n == 0 {
                    bail!("--requests must be at least 1, but it is 0");
                }
                options.requests = Some(n);
            }
            "--warmup" => options.warmup = value("--warmup")?.parse().context("--warmup")?,
            "--rounds" => {
                options.rounds = value("--rounds")?.parse().context("--rounds")?;
                if options.rounds == 0 {
                    bail!("--rounds must be at least 1, but it is 0");
                }
            }
            "--concurrency" => {
                options.concurrencies = value("--concurrency")?
                    .split(',')
                    .map(|c| c.trim().parse::<usize>())
                    .collect::<Result<_, _>>()
                    .context("--concurrency takes numbers separated by commas, like 1,32")?;
                if options.concurrencies.contains(&0) {
                    bail!("--concurrency must be at least 1, but it includes 0");
                }
            }
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok(options)
}

/// What a scenario asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// A whole completion; timed to the end of the body.
    Complete,
    /// A streamed completion; timed to the first content chunk.
    Stream,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Complete => "complete",
            Mode::Stream => "stream",
        }
    }

    /// The report's rows for this mode: label, JSON key, and which time.
    /// A stream's whole-answer time is reported beside its TTFT, as a
    /// reference (the relay's per-event cost shows there, not in TTFT).
    fn rows(self) -> &'static [(&'static str, &'static str, Measure)] {
        match self {
            Mode::Complete => &[("complete", "complete", Measure::First)],
            Mode::Stream => &[
                ("stream TTFT", "stream_ttft", Measure::First),
                ("stream whole", "stream_whole", Measure::Last),
            ],
        }
    }
}

/// Which of a request's times a figure is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Measure {
    /// [`Timing::first`].
    First,
    /// [`Timing::last`].
    Last,
}

/// Where requests go: the mock itself or the gateway in front of it.
#[derive(Debug)]
struct Target {
    url: String,
    /// The JSON body of a complete and of a streamed request.
    complete_body: String,
    stream_body: String,
}

impl Target {
    fn new(url: String, model: &str) -> Target {
        let body = |stream: bool| {
            json!({
                "model": model,
                "messages": [{"role": "user", "content": "Say something."}],
                "stream": stream,
            })
            .to_string()
        };
        Target {
            url,
            complete_body: body(false),
            stream_body: body(true),
        }
    }

    fn body(&self, mode: Mode) -> String {
        match mode {
            Mode::Complete => self.complete_body.clone(),
            Mode::Stream => self.stream_body.clone(),
        }
    }
}

/// The start of a failure's body, for its message.
fn excerpt(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    text.chars().take(300).collect()
}

/// Sends one request and returns its latency, or why it failed.
/// One request's times from the moment it was sent.
#[derive(Debug, Clone, Copy)]
struct Timing {
    /// The whole body read (`complete`) or the first content chunk
    /// arrived (`stream`): what the scenario reports.
    first: Duration,
    /// The whole answer read, `[DONE]` included.
    last: Duration,
}

/// Sends one request and returns its times, or why it failed.
async fn one(client: &reqwest::Client, target: &Target, mode: Mode) -> Result<Timing, String> {
    let body = target.body(mode);
    let start = Instant::now();
    let mut response = client
        .post(&target.url)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("send: {e}"))?;
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        let bytes = response.bytes().await.unwrap_or_default();
        return Err(format!("status {status}: {}", excerpt(&bytes)));
    }
    match mode {
        Mode::Complete => {
            let bytes = response.bytes().await.map_err(|e| format!("body: {e}"))?;
            let elapsed = start.elapsed();
            let body: Value = serde_json::from_slice(&bytes)
                .map_err(|e| format!("body is not JSON ({e}): {}", excerpt(&bytes)))?;
            let content = &body["choices"][0]["message"]["content"];
            if content != ANSWER {
                return Err(format!("unexpected answer: {}", excerpt(&bytes)));
            }
            Ok(Timing {
                first: elapsed,
                last: elapsed,
            })
        }
        Mode::Stream => {
            let mut pending: Vec<u8> = Vec::new();
            let mut ttft = None;
            let mut text = String::new();
            let mut done = false;
            while let Some(chunk) = response.chunk().await.map_err(|e| format!("stream: {e}"))? {
                // When the chunk came in, before any parsing.
                let arrived = start.elapsed();
                pending.extend_from_slice(&chunk);
                while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
                    let event: Vec<u8> = pending.drain(..end + 2).collect();
                    for line in event.split(|b| *b == b'\n') {
                        let Some(data) = line.strip_prefix(b"data: ") else {
                            continue;
                        };
                        if data == b"[DONE]" {
                            done = true;
                            continue;
                        }
                        let event: Value = serde_json::from_slice(data)
                            .map_err(|e| format!("event is not JSON ({e}): {}", excerpt(data)))?;
                        if event.get("error").is_some() {
                            return Err(format!("in-band error: {}", excerpt(data)));
                        }
                        let piece = event["choices"][0]["delta"]["content"]
                            .as_str()
                            .unwrap_or_default();
                        if !piece.is_empty() {
                            ttft.get_or_insert(arrived);
                            text.push_str(piece);
                        }
                    }
                }
            }
            if !done {
                return Err(format!("the stream ended without [DONE] after {text:?}"));
            }
            if text != ANSWER {
                return Err(format!("unexpected streamed answer {text:?}"));
            }
            let last = start.elapsed();
            let first = ttft.ok_or_else(|| "a stream without content".to_owned())?;
            Ok(Timing { first, last })
        }
    }
}

/// What one path measured in one scenario.
#[derive(Debug, Default)]
struct Samples {
    /// What the scenario reports: [`Timing::first`].
    latencies: Vec<Duration>,
    /// The whole answers: [`Timing::last`].
    totals: Vec<Duration>,
    failed: usize,
    failures: Vec<String>,
    /// Wall time of the measured rounds.
    wall: Duration,
}

impl Samples {
    fn merge(&mut self, other: Samples) {
        self.latencies.extend(other.latencies);
        self.totals.extend(other.totals);
        self.failed += other.failed;
        for f in other.failures {
            if self.failures.len() < KEPT_FAILURES {
                self.failures.push(f);
            }
        }
        self.wall += other.wall;
    }

    fn total(&self) -> usize {
        self.latencies.len() + self.failed
    }

    /// The nearest-rank percentile `p` (in (0, 1]) over every request,
    /// failures ranked above every success; `None` when it lands on a
    /// failure.
    fn percentile(&self, measure: Measure, p: f64) -> Option<Duration> {
        let mut sorted = match measure {
            Measure::First => self.latencies.clone(),
            Measure::Last => self.totals.clone(),
        };
        sorted.sort_unstable();
        let total = self.total();
        if total == 0 {
            return None;
        }
        // Nearest rank: the smallest sample with at least p of all at or
        // below it. `total` is small enough for f64 to be exact.
        #[allow(
            clippy::cast_possible_truncation,
            clippy::cast_sign_loss,
            clippy::cast_precision_loss
        )]
        let rank = ((p * total as f64).ceil() as usize).clamp(1, total);
        sorted.get(rank - 1).copied()
    }

    /// Requests per second over the measured rounds.
    fn throughput(&self) -> f64 {
        let secs = self.wall.as_secs_f64();
        #[allow(clippy::cast_precision_loss)]
        let total = self.total() as f64;
        if secs > 0.0 { total / secs } else { 0.0 }
    }
}

/// Sends `count` requests to `target` with `concurrency` in flight.
async fn round(
    client: &reqwest::Client,
    target: &Arc<Target>,
    mode: Mode,
    concurrency: usize,
    count: usize,
) -> Samples {
    let next = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..concurrency.min(count))
        .map(|_| {
            let client = client.clone();
            let target = Arc::clone(target);
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let mut samples = Samples::default();
                while next.fetch_add(1, Ordering::Relaxed) < count {
                    match one(&client, &target, mode).await {
                        Ok(timing) => {
                            samples.latencies.push(timing.first);
                            samples.totals.push(timing.last);
                        }
                        Err(why) => {
                            samples.failed += 1;
                            if samples.failures.len() < KEPT_FAILURES {
                                samples.failures.push(why);
                            }
                        }
                    }
                }
                samples
            })
        })
        .collect();
    let mut all = Samples::default();
    for task in tasks {
        match task.await {
            Ok(samples) => all.merge(samples),
            Err(e) => {
                all.failed += 1;
                all.failures.push(format!("a client task failed: {e}"));
            }
        }
    }
    all.wall = start.elapsed();
    all
}

/// One scenario's figures.
#[derive(Debug)]
struct Scenario {
    mode: Mode,
    concurrency: usize,
    requests: usize,
    direct: Samples,
    gateway: Samples,
    /// Failures during the warm-up (counted, not timed).
    warmup_failed: usize,
    /// The instructions `rein serve` executed over the measured rounds,
    /// under `--callgrind`.
    instructions: Option<u64>,
    /// The CPU time `rein serve` spent over the gateway's rounds (not
    /// under `--callgrind`).
    cpu_ns: Option<u64>,
}

impl Scenario {
    fn failed(&self) -> usize {
        self.direct.failed + self.gateway.failed + self.warmup_failed
    }

    /// The CPU time per gateway request, in microseconds.
    fn cpu_us_per_request(&self) -> Option<f64> {
        let requests = self.gateway.total();
        #[allow(clippy::cast_precision_loss)]
        self.cpu_ns
            .filter(|_| requests > 0)
            .map(|ns| ns as f64 / 1000.0 / requests as f64)
    }

    /// The instructions per gateway request, under `--callgrind`.
    fn instructions_per_request(&self) -> Option<u64> {
        let requests = u64::try_from(self.gateway.total()).ok()?;
        self.instructions?.checked_div(requests)
    }

    /// Gateway minus direct at `p`, when both are known.
    fn added(&self, measure: Measure, p: f64) -> Option<f64> {
        let gateway = self.gateway.percentile(measure, p)?;
        let direct = self.direct.percentile(measure, p)?;
        Some(ms(gateway) - ms(direct))
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Splits `total` into `rounds` near-equal parts (no empty ones).
fn split(total: usize, rounds: usize) -> Vec<usize> {
    let rounds = rounds.min(total).max(1);
    (0..rounds)
        .map(|i| total / rounds + usize::from(i < total % rounds))
        .collect()
}

async fn scenario(
    client: &reqwest::Client,
    direct: &Arc<Target>,
    gateway: &Arc<Target>,
    server: &Gateway,
    mode: Mode,
    concurrency: usize,
    options: &Options,
) -> Result<Scenario> {
    let profile = server.profile.as_ref();
    let requests = options.requests.unwrap_or(if concurrency == 1 {
        DEFAULT_REQUESTS_SERIAL
    } else {
        DEFAULT_REQUESTS_CONCURRENT
    });
    let mut warmup_failed = 0;
    if options.warmup > 0 {
        for target in [direct, gateway] {
            let w = round(client, target, mode, concurrency, options.warmup).await;
            for f in &w.failures {
                eprintln!("gateway bench: warm-up failure: {f}");
            }
            warmup_failed += w.failed;
        }
    }
    if let Some(profile) = profile {
        profile.zero()?;
    }
    let mut d = Samples::default();
    let mut g = Samples::default();
    // CPU under valgrind is valgrind's: not counted then.
    let pid = profile.is_none().then(|| server.child.id());
    let mut cpu = pid.map(|_| 0u64);
    let mut gateway_round = async |count| {
        let before = pid.and_then(cpu_ns);
        let samples = round(client, gateway, mode, concurrency, count).await;
        let spent = pid
            .and_then(cpu_ns)
            .zip(before)
            .map(|(a, b)| a.saturating_sub(b));
        cpu = cpu.zip(spent).map(|(sum, spent)| sum + spent);
        samples
    };
    for (i, count) in split(requests, options.rounds).into_iter().enumerate() {
        // Alternate which path goes first, so drift hits both alike.
        if i % 2 == 0 {
            d.merge(round(client, direct, mode, concurrency, count).await);
            g.merge(gateway_round(count).await);
        } else {
            g.merge(gateway_round(count).await);
            d.merge(round(client, direct, mode, concurrency, count).await);
        }
    }
    let instructions = match profile {
        Some(profile) => Some(profile.dump(&format!("{}-c{concurrency}", mode.name()))?),
        None => None,
    };
    Ok(Scenario {
        mode,
        concurrency,
        requests,
        direct: d,
        gateway: g,
        warmup_failed,
        instructions,
        cpu_ns: cpu,
    })
}

/// The CPU time `pid`'s threads have spent, in nanoseconds, from the
/// scheduler's own accounting (`/proc/PID/task/*/schedstat`: exact, where
/// `/proc/PID/stat` counts in 10 ms ticks); `None` off Linux. A thread
/// that ends during a round takes its time with it (tokio's blocking
/// threads end after 10 s idle), so a round's figure can be low, never
/// high.
fn cpu_ns(pid: u32) -> Option<u64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let mut total = 0u64;
    for task in tasks.filter_map(Result::ok) {
        // A thread that ended between the listing and the read spent
        // nothing more.
        let Ok(text) = std::fs::read_to_string(task.path().join("schedstat")) else {
            continue;
        };
        let on_cpu: u64 = text.split_whitespace().next()?.parse().ok()?;
        total = total.saturating_add(on_cpu);
    }
    Some(total)
}

/// `VmRSS` and `VmHWM` of `pid`, in KiB; `None` off Linux.
fn memory_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// A `rein serve` process on a free loopback port; killed when dropped.
struct Gateway {
    child: Child,
    addr: String,
    log: Arc<Mutex<VecDeque<String>>>,
    /// Set when it runs under callgrind.
    profile: Option<Profile>,
}

impl Gateway {
    /// Serves `config` on `data` and waits for its announced address; under
    /// callgrind when `callgrind` names a directory for the profiles.
    fn start(rein: &Path, config: &Path, data: &Path, callgrind: Option<&Path>) -> Result<Gateway> {
        let mut command = match callgrind {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .with_context(|| format!("cannot make {}", dir.display()))?;
                let mut command = Command::new("valgrind");
                command
                    .arg("--tool=callgrind")
                    .arg(format!(
                        "--callgrind-out-file={}",
                        dir.join(Profile::OUT).display()
                    ))
                    .arg(rein);
                command
            }
            None => Command::new(rein),
        };
        let mut child = command
            .env_remove("REIN_CRASH_AT")
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {} serve", rein.display()))?;
        let Some(stderr) = child.stderr.take() else {
            bail!("rein serve has no stderr");
        };
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let mut addr = None;
        for line in lines.by_ref().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on http://").nth(1) {
                addr = rest.split_whitespace().next().map(str::to_owned);
                break;
            }
            seen.push(line);
        }
        let Some(addr) = addr else {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "rein serve did not announce its address; it said:\n{}",
                seen.join("\n")
            );
        };
        // Drain its logs so it never blocks on stderr; keep the last lines.
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let mut log = kept.lock().unwrap_or_else(PoisonError::into_inner);
                if log.len() == KEPT_LOG_LINES {
                    log.pop_front();
                }
                log.push_back(line);
            }
        });
        let profile = callgrind.map(|dir| Profile {
            pid: child.id(),
            dir: dir.to_owned(),
        });
        Ok(Gateway {
            child,
            addr,
            log,
            profile,
        })
    }

    fn log_tail(&self) -> String {
        let log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        log.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// A `rein serve` under callgrind, steered by `callgrind_control`.
#[derive(Debug)]
struct Profile {
    pid: u32,
    dir: PathBuf,
}

impl Profile {
    /// The profile's file name; callgrind numbers each dump after it.
    const OUT: &'static str = "callgrind.out";

    fn control(&self, action: &str) -> Result<()> {
        let output = Command::new("callgrind_control")
            .arg(action)
            .arg(self.pid.to_string())
            .output()
            .context("cannot run callgrind_control")?;
        if !output.status.success() {
            bail!(
                "callgrind_control {action} failed: {}",
                String::from_utf8_lossy(&output.stderr)
            );
        }
        Ok(())
    }

    /// Zeroes the counters: what follows is what the next dump counts.
    fn zero(&self) -> Result<()> {
        self.control("--zero")
    }

    /// Dumps the counters since the last zero or dump into `<label>.out`
    /// in the profile directory, and returns the instructions counted.
    fn dump(&self, label: &str) -> Result<u64> {
        self.control("--dump")?;
        let numbered = std::fs::read_dir(&self.dir)
            .with_context(|| format!("cannot read {}", self.dir.display()))?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| {
                path.file_name()
                    .and_then(|name| name.to_str())
                    .and_then(|name| name.strip_prefix(Profile::OUT))
                    .and_then(|rest| rest.strip_prefix('.'))
                    .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
            })
            .with_context(|| format!("callgrind wrote no dump into {}", self.dir.display()))?;
        let kept = self.dir.join(format!("{label}.out"));
        std::fs::rename(&numbered, &kept)
            .with_context(|| format!("cannot keep the dump as {}", kept.display()))?;
        let text = std::fs::read_to_string(&kept)
            .with_context(|| format!("cannot read {}", kept.display()))?;
        text.lines()
            .find_map(|line| {
                line.strip_prefix("summary:")
                    .or_else(|| line.strip_prefix("totals:"))
            })
            .and_then(|n| n.split_whitespace().next())
            .and_then(|n| n.parse().ok())
            .with_context(|| format!("{} has no instruction total", kept.display()))
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The config binding `[models.bench]` to the mock: no fallbacks, no
/// `max_concurrency`, no API keys (open on loopback).
fn config(dir: &Path, mock_base_url: &str, recovery: bool) -> Result<PathBuf> {
    let mut text = format!(
        r#"
[providers.mock]
kind = "openai"
base_url = "{mock_base_url}"
max_output_tokens = {{ "mock-model" = 4096 }}

[models.bench]
provider = "mock"
model = "mock-model"
"#
    );
    if !recovery {
        text.push_str("recover_streams = false\n");
    }
    let path = dir.join("rein.toml");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Every scenario, against `mock` directly and through `gateway`.
async fn measure(mock: &MockModel, gateway: &Gateway, options: &Options) -> Result<Vec<Scenario>> {
    let client = reqwest::Client::builder()
        .tcp_nodelay(true)
        .pool_idle_timeout(Duration::from_secs(90))
        .timeout(REQUEST_TIMEOUT)
        .build()
        .context("cannot build the HTTP client")?;
    let direct = Arc::new(Target::new(mock.chat_completions_url(), "mock-model"));
    let through = Arc::new(Target::new(
        format!("http://{}/v1/chat/completions", gateway.addr),
        "bench",
    ));
    let mut scenarios = Vec::new();
    for mode in [Mode::Complete, Mode::Stream] {
        for &concurrency in &options.concurrencies {
            eprintln!(
                "gateway bench: {} at concurrency {concurrency}...",
                mode.name()
            );
            let s = scenario(
                &client,
                &direct,
                &through,
                gateway,
                mode,
                concurrency,
                options,
            )
            .await?;
            for (path, samples) in [("direct", &s.direct), ("gateway", &s.gateway)] {
                for f in &samples.failures {
                    eprintln!("gateway bench: {path} failure: {f}");
                }
            }
            scenarios.push(s);
        }
    }
    Ok(scenarios)
}

fn cell(d: Option<Duration>) -> String {
    d.map_or_else(|| "failed".to_owned(), |d| format!("{:.3}", ms(d)))
}

fn added_cell(v: Option<f64>) -> String {
    v.map_or_else(|| "failed".to_owned(), |v| format!("{v:+.3}"))
}

fn table(scenarios: &[Scenario], memory: Option<(u64, u64)>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "rein gateway latency over the mock model, loopback, {} CPUs \
         (ms; add = gateway - direct; throughput in req/s)",
        std::thread::available_parallelism().map_or(0, std::num::NonZero::get)
    );
    let _ = writeln!(
        out,
        "{:<13} {:>3} {:>6} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} | {:>7} {:>7} | {:>6}",
        "scenario",
        "c",
        "n",
        "dir p50",
        "dir p99",
        "gw p50",
        "gw p99",
        "add p50",
        "add p99",
        "dir rps",
        "gw rps",
        "failed"
    );
    for s in scenarios {
        for &(label, _, measure) in s.mode.rows() {
            let _ = writeln!(
                out,
                "{:<13} {:>3} {:>6} | {:>8} {:>8} | {:>8} {:>8} | {:>8} {:>8} | {:>7.0} {:>7.0} | {:>6}",
                label,
                s.concurrency,
                s.requests,
                cell(s.direct.percentile(measure, 0.50)),
                cell(s.direct.percentile(measure, 0.99)),
                cell(s.gateway.percentile(measure, 0.50)),
                cell(s.gateway.percentile(measure, 0.99)),
                added_cell(s.added(measure, 0.50)),
                added_cell(s.added(measure, 0.99)),
                s.direct.throughput(),
                s.gateway.throughput(),
                s.failed(),
            );
        }
    }
    if scenarios.iter().any(|s| s.cpu_ns.is_some()) {
        let _ = writeln!(
            out,
            "\nrein serve CPU per gateway request (µs, its threads' time on a CPU over the gateway's rounds)"
        );
        for s in scenarios {
            if let Some(us) = s.cpu_us_per_request() {
                let _ = writeln!(
                    out,
                    "{:<13} {:>3} {:>9.1}",
                    s.mode.name(),
                    s.concurrency,
                    us
                );
            }
        }
    }
    if let Some((rss, peak)) = memory {
        let _ = writeln!(
            out,
            "\nrein serve resident memory after the load: {:.1} MiB (peak {:.1} MiB)",
            kib_to_mib(rss),
            kib_to_mib(peak)
        );
    }
    if scenarios.iter().any(|s| s.instructions.is_some()) {
        let _ = writeln!(
            out,
            "\nrein serve under callgrind: instructions per gateway request \
             (the latencies above are valgrind's, not rein's)"
        );
        for s in scenarios {
            if let Some(per) = s.instructions_per_request() {
                let _ = writeln!(
                    out,
                    "{:<13} {:>3} {:>12}",
                    s.mode.name(),
                    s.concurrency,
                    per
                );
            }
        }
    }
    out
}

/// Milliseconds to the microsecond, for JSON.
fn ms_json(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn path_json(samples: &Samples, measure: Measure) -> Value {
    json!({
        "p50_ms": samples.percentile(measure, 0.50).map(|d| ms_json(ms(d))),
        "p99_ms": samples.percentile(measure, 0.99).map(|d| ms_json(ms(d))),
        "throughput_rps": samples.throughput().round(),
        "requests": samples.total(),
        "failed": samples.failed,
    })
}

#[allow(clippy::cast_precision_loss)]
fn kib_to_mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

fn report_json(scenarios: &[Scenario], args: &[String], memory: Option<(u64, u64)>) -> Value {
    let rows: Vec<Value> = scenarios
        .iter()
        .flat_map(|s| {
            s.mode.rows().iter().map(move |&(_, key, measure)| {
                json!({
                    "scenario": key,
                    "concurrency": s.concurrency,
                    "requests": s.requests,
                    "direct": path_json(&s.direct, measure),
                    "gateway": path_json(&s.gateway, measure),
                    "added_p50_ms": s.added(measure, 0.50).map(ms_json),
                    "added_p99_ms": s.added(measure, 0.99).map(ms_json),
                    "warmup_failed": s.warmup_failed,
                    "instructions_per_request": s.instructions_per_request(),
                    "cpu_us_per_request": s.cpu_us_per_request().map(|us| (us * 10.0).round() / 10.0),
                })
            })
        })
        .collect();
    let mut command = "cargo bench -p rein-cli --bench gateway".to_owned();
    let args: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--bench")
        .collect();
    if !args.is_empty() {
        command.push_str(" -- ");
        command.push_str(&args.join(" "));
    }
    json!({
        "bench": "gateway",
        "command": command,
        "cpus": std::thread::available_parallelism().map_or(0, std::num::NonZero::get),
        "failed": scenarios.iter().map(Scenario::failed).sum::<usize>(),
        "rss_kib": memory.map(|(rss, _)| rss),
        "peak_rss_kib": memory.map(|(_, peak)| peak),
        "scenarios": rows,
    })
}

/// Starts the mock and the gateway, measures, and reports; the number of
/// failed requests.
fn run(options: &Options) -> Result<usize> {
    // The mock gets its own runtime thread, so it answers like a separate
    // server rather than sharing the client's scheduler.
    let mock_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("mock-model")
        .enable_all()
        .build()
        .context("cannot start the mock's runtime")?;
    let mock = mock_runtime
        .block_on(MockModel::start_with(
            MockModelConfig::default().with_fallback_text(ANSWER),
        ))
        .context("cannot start the mock model")?;
    let dir = tempfile::tempdir().context("cannot make a temporary directory")?;
    let config = config(dir.path(), &mock.openai_base_url(), options.recovery)?;
    let gateway = Gateway::start(
        &options.rein,
        &config,
        &dir.path().join("rein.db"),
        options.callgrind.as_deref(),
    )?;
    let client_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("bench-client")
        .enable_all()
        .build()
        .context("cannot start the client's runtime")?;
    let scenarios = client_runtime.block_on(measure(&mock, &gateway, options))?;
    // Valgrind's memory is not rein's.
    let memory = gateway
        .profile
        .is_none()
        .then(|| memory_kib(gateway.child.id()))
        .flatten();
    let failed: usize = scenarios.iter().map(Scenario::failed).sum();
    if options.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report_json(&scenarios, &options.args, memory))
                .context("cannot write the report")?
        );
    } else {
        print!("{}", table(&scenarios, memory));
    }
    if failed > 0 && !gateway.log_tail().is_empty() {
        eprintln!(
            "gateway bench: rein serve's last log lines:\n{}",
            gateway.log_tail()
        );
    }
    drop(gateway);
    let _ = mock_runtime.block_on(mock.shutdown());
    Ok(failed)
}

fn main() -> ExitCode {
    let options = match parse(std::env::args().skip(1).collect()) {
        Ok(options) => options,
        Err(e) => {
            eprintln!("gateway bench: {e:#}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(failed) => {
            eprintln!("gateway bench: {failed} requests failed");
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("gateway bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

//! A quiet tenant's queue wait, alone and behind a noisy tenant's flowing
//! backlog (issue 15: "a tenant submitting 300 runs does not delay another
//! tenant's run by more than a small bound; p99 queue wait of the quiet
//! tenant ≤ 2× its idle value").
//!
//! Shared by `benches/queue_wait.rs` (the figures, on the bench profile's
//! optimised `rein`) and `tests/tenant_floor.rs` (a short run, so CI proves
//! the harness), each of which includes this file with
//! `#[path = …] mod queue_wait;`.
//!
//! # Setup
//!
//! One `rein serve` on a fresh SQLite file, [`QueueWaitConfig::workers`]
//! queue workers (and the tenant floor's one more), the example config
//! with the order API's limits raised so that the governor does not set
//! the pace, a bearer key per tenant, and an order desk (rein-testkit, real
//! HTTP on loopback) answering each request after
//! [`QueueWaitConfig::desk_delay`].
//!
//! 1. Idle: quiet submits [`QueueWaitConfig::quiet_runs`] runs, one at a
//!    time, each once the previous one ended.
//! 2. Loaded: noisy queues [`QueueWaitConfig::backlog`] runs at once; then
//!    quiet submits as many runs again, one at a time, behind it.
//!
//! A run's queue wait is the store's own times: its `created_at_ms` to its
//! `run_started` event. Noisy's backlog must outlast the quiet runs
//! ([`QueueWaitReport::noisy_left`]), else the loaded figures measured
//! nothing.
//!
//! # The two loads
//!
//! With the desk answering at once, two noisy runs flowing through a
//! debug build keep both cores and the SQLite writer saturated, and every
//! store round trip of the quiet run's pick waits for CPU: that measures
//! the machine more than the pick. With the desk answering in 20 ms (the
//! example's declared p50 for `get_order`), noisy runs spend their time
//! waiting on their tools, as agents do, and the figures measure the
//! scheduling: the fair pick and the tenant floor.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use futures_util::StreamExt as _;
use rein_core::event::EventKind;
use rein_core::{RunId, TenantId};
use rein_store::RunStore;
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde::Serialize;
use serde_json::{Value, json};

/// The tenants and their bearer keys.
const TENANTS: [(&str, &str); 2] = [("noisy", "key-noisy"), ("quiet", "key-quiet")];

/// The example's limits on the order API, raised here.
const EXAMPLE_LIMITS: &str = "rate_per_sec = 20.0\nburst = 40\nmax_concurrency = 8";

/// No concurrency limit: an adaptive one shrinks as calls come back late,
/// and the pace would be the governor's.
const RAISED_LIMITS: &str = "rate_per_sec = 100000.0\nburst = 100000";

/// Noisy's submissions in flight at once.
const SUBMITTING: usize = 32;

/// How long one quiet run may take to end before the harness gives up.
const PATIENCE: Duration = Duration::from_secs(120);

/// What to measure.
#[derive(Debug, Clone, Serialize)]
pub struct QueueWaitConfig {
    /// `queue.workers` of the server (it runs one more: the floor).
    pub workers: usize,
    /// Noisy's queued runs.
    pub backlog: usize,
    /// Quiet's runs in each phase.
    pub quiet_runs: usize,
    /// How long the desk takes to answer each request.
    #[serde(serialize_with = "millis")]
    pub desk_delay: Duration,
    /// `REIN_SABOTAGE` for the server (`no_tenant_floor`: the floor lent
    /// like the rest, in a build with crash points); empty for none.
    pub sabotage: String,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Default for QueueWaitConfig {
    fn default() -> Self {
        QueueWaitConfig {
            workers: 2,
            backlog: 900,
            quiet_runs: 100,
            desk_delay: Duration::ZERO,
            sabotage: String::new(),
        }
    }
}

/// The figures of one measurement (milliseconds).
#[derive(Debug, Clone, Serialize)]
pub struct QueueWaitReport {
    /// What was measured.
    pub config: QueueWaitConfig,
    /// Quiet's queue waits alone, sorted.
    pub idle_ms: Vec<u64>,
    /// Quiet's queue waits behind the backlog, sorted.
    pub loaded_ms: Vec<u64>,
    /// For each loaded quiet run, the noisy runs that ended while it was
    /// queued (a wait for a worker would show as at least one).
    pub ends_waited_for: Vec<usize>,
    /// Noisy's runs still queued after quiet's last run.
    pub noisy_left: u64,
}

impl QueueWaitReport {
    /// The wait that at most `pct` % of `waits` exceed.
    pub fn percentile(waits: &[u64], pct: usize) -> u64 {
        if waits.is_empty() {
            return 0;
        }
        let rank = (waits.len() * pct).div_ceil(100).max(1);
        waits[rank - 1]
    }

    /// Loaded p99 over idle p99.
    pub fn p99_ratio(&self) -> f64 {
        let idle = Self::percentile(&self.idle_ms, 99).max(1);
        Self::percentile(&self.loaded_ms, 99) as f64 / idle as f64
    }
}

impl std::fmt::Display for QueueWaitReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let p = Self::percentile;
        write!(
            f,
            "{} quiet runs, desk {} ms{}: idle p50 {} ms p99 {} ms; behind {} noisy runs \
             p50 {} ms p99 {} ms (p99 ratio {:.2}); noisy runs ended during a quiet wait: {} \
             in all, at most {} in one; noisy still queued at the end {}",
            self.config.quiet_runs,
            self.config.desk_delay.as_millis(),
            if self.config.sabotage.is_empty() {
                String::new()
            } else {
                format!(", sabotage {}", self.config.sabotage)
            },
            p(&self.idle_ms, 50),
            p(&self.idle_ms, 99),
            self.config.backlog,
            p(&self.loaded_ms, 50),
            p(&self.loaded_ms, 99),
            self.p99_ratio(),
            self.ends_waited_for.iter().sum::<usize>(),
            self.ends_waited_for.iter().max().unwrap_or(&0),
            self.noisy_left,
        )
    }
}

/// Measures, with `rein` the binary to serve.
///
/// # Errors
///
/// When a part cannot start, a request fails, or a quiet run does not end
/// within [`PATIENCE`].
pub async fn run(rein: &Path, config: QueueWaitConfig) -> Result<QueueWaitReport> {
    let mut faults = Faults::none();
    if !config.desk_delay.is_zero() {
        for tool in [GET_ORDER, UPDATE_DELIVERY_TIME, SEND_EMAIL] {
            faults = faults.always(tool, Fault::Delay(config.desk_delay));
        }
    }
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .context("starting the order desk")?;
    let dir = tempfile::tempdir().context("a temporary directory")?;
    let path = write_config(dir.path(), config.workers)?;
    let db = dir.path().join("rein.db");
    let server = Server::start(rein, &path, &db, desk.base_url(), &config.sabotage)?;
    let client = reqwest::Client::builder()
        .timeout(PATIENCE)
        .build()
        .context("an HTTP client")?;
    let mut idle = Vec::with_capacity(config.quiet_runs);
    for _ in 0..config.quiet_runs {
        idle.push(quiet_run(&client, &server.base).await?);
    }
    // At most [`SUBMITTING`] at once: more open connections than the
    // server admits would be refused, not queued.
    let noisy: Vec<Result<String>> = futures_util::stream::iter(
        (0..config.backlog).map(|_| submit(&client, &server.base, "noisy")),
    )
    .buffer_unordered(SUBMITTING)
    .collect()
    .await;
    for submitted in noisy {
        submitted?;
    }
    let mut loaded = Vec::with_capacity(config.quiet_runs);
    for _ in 0..config.quiet_runs {
        loaded.push(quiet_run(&client, &server.base).await?);
    }
    drop(server);
    let store = rein_store_sqlite::SqliteStore::open(&db).context("reading the store")?;
    let idle_times = times(&store, &idle).await?;
    let loaded_times = times(&store, &loaded).await?;
    let noisy_finished = noisy_finished(&store).await?;
    let noisy_left = store
        .tenant_backlogs(Some(&tenant("noisy")?), 0)
        .await?
        .first()
        .map_or(0, |b| b.queued);
    let waits = |times: &[(u64, u64)]| {
        let mut waits: Vec<u64> = times.iter().map(|(q, s)| s.saturating_sub(*q)).collect();
        waits.sort_unstable();
        waits
    };
    let ends_waited_for = loaded_times
        .iter()
        .map(|&(queued, started)| {
            noisy_finished
                .iter()
                .filter(|&&at| at >= queued && at <= started)
                .count()
        })
        .collect();
    Ok(QueueWaitReport {
        idle_ms: waits(&idle_times),
        loaded_ms: waits(&loaded_times),
        ends_waited_for,
        noisy_left,
        config,
    })
}

fn tenant(name: &str) -> Result<TenantId> {
    TenantId::new(name).map_err(|e| anyhow::anyhow!("tenant {name}: {e}"))
}

fn key_of(tenant: &str) -> &'static str {
    TENANTS
        .iter()
        .find(|(t, _)| *t == tenant)
        .map_or("", |(_, key)| key)
}

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk")
}

/// The example config with the order API's limits raised, a key per
/// tenant and `workers` queue workers.
fn write_config(dir: &Path, workers: usize) -> Result<PathBuf> {
    use sha2::Digest as _;
    let example = example_dir();
    let mut text = std::fs::read_to_string(example.join("rein.toml"))
        .with_context(|| format!("reading {}", example.display()))?;
    ensure!(
        text.contains(EXAMPLE_LIMITS),
        "the example config no longer has {EXAMPLE_LIMITS:?}"
    );
    text = text.replace(EXAMPLE_LIMITS, RAISED_LIMITS);
    for (tenant, key) in TENANTS {
        let sha: String = sha2::Sha256::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        text.push_str(&format!(
            "\n[[server.api_keys]]\ntenant = \"{tenant}\"\nsha256 = \"{sha}\"\n"
        ));
    }
    text.push_str(&format!("\n[server.queue]\nworkers = {workers}\n"));
    std::fs::write(dir.join("rein.toml"), text).context("writing the config")?;
    std::fs::copy(
        example.join("demo.script.json"),
        dir.join("demo.script.json"),
    )
    .context("copying the model script")?;
    Ok(dir.join("rein.toml"))
}

/// A `rein serve` on a free loopback port; killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn start(rein: &Path, config: &Path, db: &Path, desk: &str, sabotage: &str) -> Result<Server> {
        use std::io::BufRead as _;
        let mut child = Command::new(rein)
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(db)
            .env("ORDER_DESK_URL", desk)
            .env("MOCK_MODEL_URL", "http://127.0.0.1:2")
            .env("REIN_SABOTAGE", sabotage)
            .env_remove("REIN_CRASH_AT")
            .stderr(Stdio::piped())
            .stdout(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {}", rein.display()))?;
        let stderr = child.stderr.take().context("the server's stderr")?;
        let mut lines = std::io::BufReader::new(stderr).lines();
        let base = loop {
            let Some(line) = lines.next() else {
                bail!("rein serve exited before it listened");
            };
            let line = line.context("reading the server's log")?;
            if let Some(addr) = line
                .split("http://")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next())
            {
                break format!("http://{addr}");
            }
        };
        // Drained in the background: a full pipe would block the server.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Server { child, base })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Queues a run of `tenant`; its id.
async fn submit(client: &reqwest::Client, base: &str, tenant: &str) -> Result<String> {
    let response = client
        .post(format!("{base}/v1/agents/order_desk/runs"))
        .bearer_auth(key_of(tenant))
        .json(&json!({"input": "Move order A-1001.", "mode": "queued"}))
        .send()
        .await
        .context("submitting a run")?;
    ensure!(
        response.status().as_u16() == 202,
        "a queued submission answered {}",
        response.status()
    );
    let body: Value = response.json().await.context("the submission's body")?;
    body["run_id"]
        .as_str()
        .map(str::to_owned)
        .context("the submission's run_id")
}

/// Submits one quiet run and waits for it to end; its id.
async fn quiet_run(client: &reqwest::Client, base: &str) -> Result<String> {
    let id = submit(client, base, "quiet").await?;
    let end = tokio::time::Instant::now() + PATIENCE;
    loop {
        let run: Value = client
            .get(format!("{base}/v1/runs/{id}"))
            .bearer_auth(key_of("quiet"))
            .send()
            .await
            .context("polling a quiet run")?
            .json()
            .await
            .context("a quiet run's body")?;
        if !matches!(run["status"].as_str(), Some("queued" | "running")) {
            return Ok(id);
        }
        ensure!(
            tokio::time::Instant::now() < end,
            "quiet run {id} did not end within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The first event of `kind` of run `id` (unix ms).
async fn at_ms(store: &dyn RunStore, id: &RunId, kind: EventKind) -> Result<Option<u64>> {
    Ok(store
        .events(id, 0)
        .await?
        .iter()
        .find(|e| e.kind() == kind)
        .map(|e| e.at_ms.as_millis()))
}

/// Each run's creation and start (unix ms).
async fn times(store: &dyn RunStore, ids: &[String]) -> Result<Vec<(u64, u64)>> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let id = RunId::new(id).map_err(|e| anyhow::anyhow!("run id {id}: {e}"))?;
        let run = store.get_run(&id).await?.context("a quiet run is stored")?;
        let started = at_ms(store, &id, EventKind::RunStarted)
            .await?
            .context("a quiet run started")?;
        out.push((run.created_at_ms.as_millis(), started));
    }
    Ok(out)
}

/// When each of noisy's runs that finished did (unix ms).
async fn noisy_finished(store: &dyn RunStore) -> Result<Vec<u64>> {
    let noisy = tenant("noisy")?;
    let mut out = Vec::new();
    for run in store.list_runs(100_000).await? {
        if run.tenant == noisy
            && let Some(at) = at_ms(store, &run.run_id, EventKind::RunFinished).await?
        {
            out.push(at);
        }
    }
    Ok(out)
}

//! Tenant fairness of `rein serve`'s queue (issue 15), on one real server
//! and a real order desk: a tenant that queued 300 runs does not delay
//! another tenant's runs by more than a small, stated bound.
//!
//! # The bound, and why it counts runs
//!
//! The issue states it as "p99 queue wait of the quiet tenant ≤ 2× its idle
//! value". Alone, a quiet run waits for no other run: a worker picks it as
//! soon as it is queued. Behind the noisy backlog, the fair pick lets each
//! busy worker finish the run it holds, and at most one noisy run per
//! worker is picked before the quiet one (deficit round robin: the quiet
//! lane's turn comes next). So the test counts, for each quiet run, the
//! noisy runs that *started* while it was queued (the store's own
//! `run_started` times): at most [`WORKERS`], against the FIFO's whole
//! backlog. Milliseconds are printed (idle and loaded p99, and their
//! ratio) but not asserted: on a loaded two-core machine they measure the
//! machine as much as the pick.
//!
//! The check can fail: with the test build's `REIN_SABOTAGE=fifo_queue`
//! (the FIFO the fair pick replaced) the same measurement reports the
//! quiet run overtaken by most of the backlog.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::Timestamp;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rein_testkit::order_desk::OrderDesk;

mod common;
use common::Server;
use common::tenants::{
    EXAMPLE_LIMITS, get_as, patient_client, serve, submit_queued, tenant_config,
};

/// The tenants and their bearer keys.
const TENANTS: [(&str, &str); 2] = [("noisy", "key-noisy"), ("quiet", "key-quiet")];

/// The noisy tenant's backlog.
const BACKLOG: usize = 300;

/// The noisy backlog of the sabotaged run: far past the bound, short
/// enough that waiting behind all of it takes seconds.
const FIFO_BACKLOG: usize = 40;

/// The server's queue workers.
const WORKERS: usize = 2;

/// Quiet runs measured alone and then behind the backlog, one after
/// another (the p99 of ten samples is their largest).
const QUIET_RUNS: usize = 10;

/// How long a condition may take to come true before the test fails (a
/// bound that fails, not a measurement).
const PATIENCE: Duration = Duration::from_secs(120);

fn key_of(tenant: &str) -> &'static str {
    TENANTS.iter().find(|(t, _)| *t == tenant).unwrap().1
}

/// The example config with the order API's limits raised (the governor
/// must not set the pace), a key per tenant and [`WORKERS`] workers.
fn config(dir: &Path) -> PathBuf {
    tenant_config(
        dir,
        &TENANTS,
        &[(
            EXAMPLE_LIMITS,
            "rate_per_sec = 100000.0\nburst = 100000\nmax_concurrency = 64",
        )],
        &format!("[server.queue]\nworkers = {WORKERS}\n"),
    )
}

/// Queues one quiet run and waits for it to end; when it was queued and
/// when it started (unix ms, the store's own times).
async fn quiet_run(client: &reqwest::Client, server: &Server) -> (u64, u64) {
    let id = submit_queued(client, server, key_of("quiet")).await;
    let end = tokio::time::Instant::now() + PATIENCE;
    loop {
        let run = get_as(client, server, key_of("quiet"), &format!("/v1/runs/{id}")).await;
        if run["status"] != "queued" && run["status"] != "running" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "quiet's run {id} never ended"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let run = get_as(client, server, key_of("quiet"), &format!("/v1/runs/{id}")).await;
    let created = run["created_at_ms"].as_u64().unwrap();
    let events = get_as(
        client,
        server,
        key_of("quiet"),
        &format!("/v1/runs/{id}/events"),
    )
    .await;
    let started = events
        .as_array()
        .or_else(|| events["events"].as_array())
        .into_iter()
        .flatten()
        .find(|e| e["kind"] == "run_started")
        .and_then(|e| e["at_ms"].as_u64())
        .unwrap_or_else(|| panic!("no run_started in {events}"));
    (created, started)
}

/// What the quiet tenant saw, alone and behind the backlog.
struct Observed {
    idle_ms: Vec<u64>,
    loaded_ms: Vec<u64>,
    /// For each quiet run behind the backlog: noisy runs that started
    /// while it was queued.
    overtaken_by: Vec<usize>,
    /// Noisy runs still queued when quiet's last run ended.
    left: u64,
}

/// The fairness checker: what in `observed` breaks the bound, one line
/// each; empty when quiet was treated fairly.
fn violations(observed: &Observed) -> Vec<String> {
    let mut out: Vec<String> = observed
        .overtaken_by
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > WORKERS)
        .map(|(i, n)| {
            format!(
                "quiet's run {i} was overtaken by {n} noisy runs while it waited; the fair pick \
                 allows {WORKERS} (one per worker)"
            )
        })
        .collect();
    if observed.left == 0 {
        out.push(
            "the backlog ran out before quiet's last run: nothing was measured under load".into(),
        );
    }
    out
}

/// The largest of `waits` that at most 1 % exceed: their p99.
fn p99(waits: &[u64]) -> u64 {
    let mut sorted = waits.to_vec();
    sorted.sort_unstable();
    let rank = (sorted.len() * 99).div_ceil(100).max(1);
    sorted[rank - 1]
}

async fn observe(sabotage: &str, quiet_runs: usize, backlog: usize) -> Observed {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path());
    let db = dir.path().join("rein.db");
    let server = serve(&path, &db, &desk, sabotage).await;
    let client = patient_client(PATIENCE);
    let mut idle = Vec::new();
    for _ in 0..quiet_runs {
        idle.push(quiet_run(&client, &server).await);
    }
    let noisy: Vec<String> = futures_util::future::join_all(
        (0..backlog).map(|_| submit_queued(&client, &server, key_of("noisy"))),
    )
    .await;
    let mut loaded = Vec::new();
    for _ in 0..quiet_runs {
        loaded.push(quiet_run(&client, &server).await);
    }
    let noisy_tenant = rein_core::TenantId::new("noisy").unwrap();
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
    let left = rein_store::RunStore::tenant_backlogs(&store, Some(&noisy_tenant), 0)
        .await
        .unwrap()
        .first()
        .map_or(0, |b| b.queued);
    let mut noisy_started = Vec::new();
    for id in &noisy {
        let run_id = rein_core::RunId::new(id).unwrap();
        let events = rein_store::RunStore::events(&store, &run_id, 0)
            .await
            .unwrap();
        if let Some(started) = events
            .iter()
            .find(|e| e.kind() == rein_core::event::EventKind::RunStarted)
        {
            noisy_started.push(started.at_ms);
        }
    }
    server.kill_async().await;
    let overtaken_by = loaded
        .iter()
        .map(|&(queued, started)| {
            noisy_started
                .iter()
                .filter(|&&at| {
                    at > Timestamp::from_millis(queued) && at < Timestamp::from_millis(started)
                })
                .count()
        })
        .collect();
    let wait = |runs: &[(u64, u64)]| runs.iter().map(|(q, s)| s.saturating_sub(*q)).collect();
    Observed {
        idle_ms: wait(&idle),
        loaded_ms: wait(&loaded),
        overtaken_by,
        left,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quiet_tenant_is_overtaken_by_at_most_one_run_per_worker_behind_300() {
    let fair = observe("", QUIET_RUNS, BACKLOG).await;
    let (idle, loaded) = (p99(&fair.idle_ms), p99(&fair.loaded_ms));
    println!(
        "quiet p99 queue wait: idle {idle} ms, behind {BACKLOG} noisy runs {loaded} ms \
         (ratio {:.2}, the issue's bound 2); waits idle {:?}, loaded {:?}; noisy runs that \
         overtook each: {:?} (bound {WORKERS}); noisy still queued: {}",
        loaded as f64 / idle.max(1) as f64,
        fair.idle_ms,
        fair.loaded_ms,
        fair.overtaken_by,
        fair.left
    );
    let found = violations(&fair);
    assert!(found.is_empty(), "{found:#?}");

    // The mechanism off: the FIFO lets the backlog go first, and the same
    // checker reports it. A backlog of FIFO_BACKLOG shows it as well as
    // 300 would, in a fraction of the time.
    if !rein_engine::crash::ENABLED {
        return;
    }
    let fifo = observe("fifo_queue", 1, FIFO_BACKLOG).await;
    println!(
        "with fifo_queue: quiet waited {:?} ms, overtaken by {:?}",
        fifo.loaded_ms, fifo.overtaken_by
    );
    let found = violations(&fifo);
    assert!(
        found.iter().any(|v| v.contains("overtaken")),
        "the FIFO must be reported: {found:?}, overtaken by {:?}",
        fifo.overtaken_by
    );
}

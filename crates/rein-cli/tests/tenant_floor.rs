//! The tenant floor of `rein serve`'s queue workers (issue 15): behind a
//! noisy tenant's 300 queued runs, a quiet tenant's run never waits for a
//! noisy run to END — one worker of each process is kept for a tenant with
//! nothing running there (`rein_server::queue::floor`).
//!
//! # What is counted, and why it is structural
//!
//! The fair pick already puts a quiet run first in line; what is left of
//! its wait is a worker to be free. So the structural test holds every
//! noisy run at the order desk (`get_order` is held until the test lets it
//! go): no noisy run can end unless the test releases it. With the floor,
//! the quiet run starts while every noisy run is still held — the store's
//! own event times show no noisy `run_finished` between its creation and
//! its `run_started`: bound 0, per process and on two processes sharing a
//! store. With the floor lent like the rest (the test build's
//! `REIN_SABOTAGE=no_tenant_floor`) every worker holds a noisy run, the
//! quiet run starts only once the test released them, and the same count
//! shows the noisy runs it waited for.
//!
//! The second test runs the harness of `benches/queue_wait.rs` (the
//! queue wait in milliseconds, noisy runs flowing) short, so CI proves it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use rein_core::event::EventKind;
use rein_core::{RunId, TenantId};
use rein_store::RunStore;
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};

mod common;
mod queue_wait;
use common::Server;
use common::tenants::{
    EXAMPLE_LIMITS, HOLDABLE, get_as, patient_client, serve, submit_queued, tenant_config, until,
};

/// The tenants and their bearer keys.
const TENANTS: [(&str, &str); 2] = [("noisy", "key-noisy"), ("quiet", "key-quiet")];

/// The noisy tenant's backlog.
const BACKLOG: usize = 300;

/// `queue.workers` of each server (each runs one more: the floor).
const WORKERS: usize = 2;

/// The worker loops of one server: `queue.workers` and the floor.
const LOOPS: usize = WORKERS + rein_server::queue::floor::FLOOR;

/// How long a condition may take to come true before the test fails (a
/// bound that fails, not a measurement).
const PATIENCE: Duration = Duration::from_secs(120);

fn key_of(tenant: &str) -> &'static str {
    TENANTS.iter().find(|(t, _)| *t == tenant).unwrap().1
}

/// The example config with the order API's rate raised and its
/// concurrency unlimited (the governor must not set the pace), a key per tenant, [`WORKERS`] workers and, when
/// `held`, `get_order` allowed to be held for longer than the test waits
/// (its latency profile and the run's wall clock bound its timeout).
fn config(dir: &Path, held: bool) -> PathBuf {
    let mut edits = vec![(
        EXAMPLE_LIMITS,
        // No concurrency limit: an adaptive one shrinks as held calls
        // come back late, and the pace would be the governor's.
        "rate_per_sec = 100000.0\nburst = 100000",
    )];
    if held {
        edits.extend(HOLDABLE);
    }
    tenant_config(
        dir,
        &TENANTS,
        &edits,
        &format!("[server.queue]\nworkers = {WORKERS}\n"),
    )
}

async fn status(client: &reqwest::Client, server: &Server, tenant: &str, id: &str) -> String {
    let run = get_as(client, server, key_of(tenant), &format!("/v1/runs/{id}")).await;
    run["status"].as_str().unwrap_or_default().to_owned()
}

/// The first event of `kind` of run `id` in the store (unix ms).
async fn at_ms(store: &dyn RunStore, id: &RunId, kind: EventKind) -> Option<u64> {
    store
        .events(id, 0)
        .await
        .unwrap()
        .iter()
        .find(|e| e.kind() == kind)
        .map(|e| e.at_ms.as_millis())
}

/// When each of `tenant`'s runs was created and started, and when each of
/// the others' runs finished (unix ms, the store's own times).
struct Times {
    quiet: Vec<(u64, u64)>,
    noisy_finished: Vec<u64>,
    noisy_left: u64,
}

async fn times(db: &Path, quiet: &[String]) -> Times {
    let store = rein_store_sqlite::SqliteStore::open(db).unwrap();
    let noisy = TenantId::new("noisy").unwrap();
    let mut quiet_times = Vec::new();
    for id in quiet {
        let id = RunId::new(id).unwrap();
        let run = store.get_run(&id).await.unwrap().unwrap();
        let started = at_ms(&store, &id, EventKind::RunStarted).await.unwrap();
        quiet_times.push((run.created_at_ms.as_millis(), started));
    }
    let mut noisy_finished = Vec::new();
    for run in store.list_runs(10_000).await.unwrap() {
        if run.tenant != noisy {
            continue;
        }
        if let Some(at) = at_ms(&store, &run.run_id, EventKind::RunFinished).await {
            noisy_finished.push(at);
        }
    }
    let noisy_left = store
        .tenant_backlogs(Some(&noisy), 0)
        .await
        .unwrap()
        .first()
        .map_or(0, |b| b.queued);
    Times {
        quiet: quiet_times,
        noisy_finished,
        noisy_left,
    }
}

impl Times {
    /// For each quiet run, the noisy runs that ended while it was queued.
    fn ends_waited_for(&self) -> Vec<usize> {
        self.quiet
            .iter()
            .map(|&(queued, started)| {
                self.noisy_finished
                    .iter()
                    .filter(|&&at| at >= queued && at <= started)
                    .count()
            })
            .collect()
    }

    fn waits_ms(&self) -> Vec<u64> {
        self.quiet
            .iter()
            .map(|(q, s)| s.saturating_sub(*q))
            .collect()
    }
}

/// Quiet runs measured behind the held backlog, alternating between the
/// two servers.
const QUIET_HELD: usize = 4;

/// What quiet saw behind noisy's held backlog on two servers sharing a
/// store: the noisy runs that ended while each quiet run was queued (from
/// the store), how many times the test had to release the held noisy runs
/// before it started, and noisy's runs still queued at the end.
struct Held {
    ends_waited_for: Vec<usize>,
    /// Each quiet run's queue wait behind the backlog (ms, for the log
    /// only).
    waits_ms: Vec<u64>,
    /// Quiet's queue waits before the backlog (ms, for the log only).
    idle_ms: Vec<u64>,
    releases: Vec<usize>,
    noisy_left: u64,
}

/// Two servers with [`WORKERS`] workers each on one SQLite store; every
/// `get_order` held at the desk. Quiet's runs alone first; then noisy
/// queues [`BACKLOG`] runs and holds every worker it may hold
/// (`saturated` at the desk: its `queue.workers` per server with the floor
/// kept, all [`LOOPS`] with the floor lent), and each quiet run is queued
/// behind it ([`quiet_run_held`]).
async fn behind_held_backlog(sabotage: &str, saturated: usize) -> Held {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default().with_faults(Faults::none().always(GET_ORDER, Fault::Hold)),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), true);
    let db = dir.path().join("rein.db");
    let servers = [
        serve(&path, &db, &desk, sabotage).await,
        serve(&path, &db, &desk, sabotage).await,
    ];
    let client = patient_client(PATIENCE);
    // Alone first: quiet's idle queue wait on the same servers.
    let mut idle = Vec::new();
    for i in 0..QUIET_HELD {
        idle.push(quiet_run_held(&client, &servers[i % 2], &desk).await.0);
    }
    let flood = futures_util::future::join_all(
        (0..BACKLOG).map(|i| submit_queued(&client, &servers[i % 2], key_of("noisy"))),
    )
    .await;
    assert_eq!(flood.len(), BACKLOG);
    let mut quiet = Vec::new();
    let mut releases = Vec::new();
    for i in 0..QUIET_HELD {
        until(PATIENCE, "noisy holds every worker it may", || async {
            desk.held_count() >= saturated
        })
        .await;
        let (id, released) = quiet_run_held(&client, &servers[i % 2], &desk).await;
        quiet.push(id);
        releases.push(released);
    }
    for server in servers {
        server.kill_async().await;
    }
    desk.clear_faults();
    desk.release_held();
    let loaded = times(&db, &quiet).await;
    Held {
        ends_waited_for: loaded.ends_waited_for(),
        idle_ms: times(&db, &idle).await.waits_ms(),
        waits_ms: loaded.waits_ms(),
        releases,
        noisy_left: loaded.noisy_left,
    }
}

/// Queues one quiet run on `server` while the desk holds every
/// `get_order`, and waits for it to start: the held calls are released
/// only when every worker of both servers provably holds one (nothing else
/// can start). Then lets it go on to its end. Its id, and how many times
/// the held calls had to be released before it started.
async fn quiet_run_held(
    client: &reqwest::Client,
    server: &Server,
    desk: &OrderDesk,
) -> (String, usize) {
    let id = submit_queued(client, server, key_of("quiet")).await;
    let mut released = 0;
    let end = tokio::time::Instant::now() + PATIENCE;
    while status(client, server, "quiet", &id).await == "queued" {
        assert!(
            tokio::time::Instant::now() < end,
            "quiet's run {id} never started"
        );
        // Every worker of both servers holds a call: only a run end can
        // free one.
        if desk.held_count() == 2 * LOOPS {
            desk.release_held();
            released += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Started: let it (and the noisy runs held with it) go on, and wait
    // for its end, so the next quiet run finds quiet with nothing running.
    until(PATIENCE, "quiet's run ended", || async {
        desk.release_held();
        !matches!(
            status(client, server, "quiet", &id).await.as_str(),
            "queued" | "running"
        )
    })
    .await;
    (id, released)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quiet_run_never_waits_for_a_noisy_run_to_end_on_two_servers() {
    // The floor kept: noisy holds `queue.workers` of each server.
    let kept = behind_held_backlog("", 2 * WORKERS).await;
    println!(
        "floor kept: noisy runs ended while each quiet run was queued {:?} (bound 0), \
         releases needed {:?}, quiet's waits idle {:?} ms, behind the held backlog {:?} ms, \
         noisy still queued {}",
        kept.ends_waited_for, kept.releases, kept.idle_ms, kept.waits_ms, kept.noisy_left
    );
    assert!(kept.noisy_left > 0, "measured behind the backlog");
    assert!(
        kept.ends_waited_for.iter().all(|&n| n == 0),
        "a quiet run waited for noisy runs to end: {:?}",
        kept.ends_waited_for
    );
    assert!(kept.releases.iter().all(|&n| n == 0), "{:?}", kept.releases);

    // The floor lent like the rest: noisy holds every worker, and each
    // quiet run waits for noisy runs to end.
    if !rein_engine::crash::ENABLED {
        return;
    }
    let lent = behind_held_backlog("no_tenant_floor", 2 * LOOPS).await;
    println!(
        "floor lent (no_tenant_floor): noisy runs ended while each quiet run was queued {:?}, \
         releases needed {:?}, quiet's waits idle {:?} ms, behind the held backlog {:?} ms",
        lent.ends_waited_for, lent.releases, lent.idle_ms, lent.waits_ms
    );
    assert!(
        lent.ends_waited_for.iter().all(|&n| n >= 1),
        "without the floor every quiet run waits for a run end: {:?}",
        lent.ends_waited_for
    );
}

/// The harness of `benches/queue_wait.rs`, run short: it proves the
/// harness works and that the backlog outlasts the quiet runs, with the
/// floor kept and lent. Its milliseconds are printed (`--nocapture`) and
/// not asserted: on a loaded two-core machine, and a debug build, they
/// measure the machine as much as the pick; the bench gives the figures.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn quiet_queue_wait_idle_and_behind_a_flowing_backlog_is_reported() {
    let mut modes = vec![""];
    if rein_engine::crash::ENABLED {
        modes.push("no_tenant_floor");
    }
    for sabotage in modes {
        let config = queue_wait::QueueWaitConfig {
            workers: WORKERS,
            backlog: BACKLOG,
            quiet_runs: 20,
            sabotage: sabotage.to_owned(),
            ..queue_wait::QueueWaitConfig::default()
        };
        let report = queue_wait::run(Path::new(env!("CARGO_BIN_EXE_rein")), config)
            .await
            .unwrap();
        println!("{report}");
        assert_eq!(report.loaded_ms.len(), 20, "{report}");
        assert!(
            report.noisy_left > 0,
            "the backlog ran out before quiet's last run: nothing was measured under load: {report}"
        );
    }
}

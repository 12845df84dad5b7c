//! Interactive runs keep their share of a resource group under a batch
//! flood (issue 15), on a real `rein serve` and a real order desk: while
//! queued runs hold `order_api` (one slot, every other batch call waiting
//! in its governor), sync runs' calls are served ahead of the waiting
//! batch calls, measured at the desk by class (arrival order of requests
//! by run).
//!
//! The check can fail: with the test build's
//! `REIN_SABOTAGE=no_class_priority` every call is admitted as batch, and
//! the same measurement reports the sync runs served behind the flood.
//!
//! # Why counts, not milliseconds
//!
//! How long a sync run waited measures the machine as much as the
//! governor. Which calls the desk got before the sync runs' measures the
//! governor alone: the group has one slot, so the desk receives calls in
//! exactly the order the governor grants them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};
use serde_json::{Value, json};

mod common;
use common::Server;
use common::tenants::{EXAMPLE_LIMITS, HOLDABLE, patient_client, serve, tenant_config, until};

/// How long a condition may take to come true before the test fails (a
/// bound that fails, not a measurement).
const PATIENCE: Duration = Duration::from_secs(60);

/// Queued runs of the flood: one holds the group's only slot, the others'
/// first calls wait in its governor.
const FLOOD: usize = 12;

/// Sync runs submitted while the flood holds the group.
const INTERACTIVE: usize = 3;

/// Batch calls the desk may receive before the last sync run's first
/// call: the governor serves interactive first, but batch keeps its
/// reserved share (`batch_share`, 10 %) of the grants while both classes
/// wait, so one batch call goes between the first and the second of three
/// interactive ones (`rein_core::governor::FairQueue`); one more for the
/// arbiter's accounting starting over when a lane runs empty.
const OVERTAKE_BOUND: usize = 2;

/// The example config with `order_api` down to one slot (and no rate to
/// speak of), `get_order` allowed to be held longer than the test waits,
/// and `workers` queue workers.
fn config(dir: &Path, workers: usize) -> PathBuf {
    let [latency, wall_clock] = HOLDABLE;
    tenant_config(
        dir,
        &[],
        &[
            (
                EXAMPLE_LIMITS,
                "rate_per_sec = 100000.0\nburst = 100000\nmax_concurrency = 1",
            ),
            latency,
            wall_clock,
        ],
        &format!("[server.queue]\nworkers = {workers}\n"),
    )
}

async fn get(client: &reqwest::Client, server: &Server, path: &str) -> Value {
    client
        .get(server.url(path))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// What the desk saw of one flood.
struct Flood {
    /// Batch calls the desk received after the flood held the group and
    /// before the last sync run's first call.
    overtakes: usize,
    /// The class of each call the desk received from then on, in arrival
    /// order (`I` interactive, `B` batch), for the log.
    order: String,
}

/// Whether run `id`'s first turn is planned: its calls are at the governor
/// (nothing between the plan and step 4 waits on anything outside).
async fn planned(client: &reqwest::Client, server: &Server, id: &str) -> bool {
    let events = get(client, server, &format!("/v1/runs/{id}/events")).await;
    let list = events
        .as_array()
        .or_else(|| events["events"].as_array())
        .cloned()
        .unwrap_or_default();
    list.iter().any(|e| e["kind"] == "plan_created")
}

/// [`FLOOD`] queued runs, one holding `order_api`'s slot at the desk and
/// the others waiting for it; then [`INTERACTIVE`] sync runs, planned and
/// waiting too; then the desk answers again, and the order in which it
/// received calls is read by class.
async fn flood(sabotage: &str) -> Flood {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default().with_faults(Faults::none().always(GET_ORDER, Fault::Hold)),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), FLOOD + INTERACTIVE);
    let server = serve(&path, &dir.path().join("rein.db"), &desk, sabotage).await;
    let client = patient_client(PATIENCE);
    let url = server.url("/v1/agents/order_desk/runs");

    let mut batch = HashSet::new();
    for _ in 0..FLOOD {
        let answer: Value = client
            .post(&url)
            .json(&json!({"input": "Move order A-1001.", "mode": "queued"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        batch.insert(answer["run_id"].as_str().unwrap().to_owned());
    }
    until(
        PATIENCE,
        "one batch call holds the slot at the desk",
        || async { desk.held_count() == 1 },
    )
    .await;
    for id in &batch {
        until(
            PATIENCE,
            "every batch run's first call waits at the governor",
            || planned(&client, &server, id),
        )
        .await;
    }

    let syncs: Vec<_> = (0..INTERACTIVE)
        .map(|_| {
            let (c, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                c.post(url)
                    .json(&json!({"input": "Move order A-1001."}))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
            })
        })
        .collect();
    let end = tokio::time::Instant::now() + PATIENCE;
    let interactive: Vec<String> = loop {
        let page = get(&client, &server, "/v1/runs").await;
        let ids: Vec<String> = page["runs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["run_id"].as_str())
            .filter(|id| !batch.contains(*id))
            .map(str::to_owned)
            .collect();
        if ids.len() == INTERACTIVE {
            break ids;
        }
        assert!(
            tokio::time::Instant::now() < end,
            "never: the sync runs exist"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    for id in &interactive {
        until(
            PATIENCE,
            "every sync run's first call waits at the governor",
            || planned(&client, &server, id),
        )
        .await;
    }

    // Nothing reached the desk since: its one slot is held.
    let from = desk.requests().len();
    assert_eq!(desk.held_count(), 1, "the slot is still held");
    desk.clear_faults();
    desk.release_held();
    let arrived = |id: &str| {
        desk.requests()
            .iter()
            .any(|r| r.headers.run_id.as_deref() == Some(id))
    };
    until(
        PATIENCE,
        "every sync run's first call reached the desk",
        || async { interactive.iter().all(|id| arrived(id)) },
    )
    .await;
    for sync in syncs {
        let status = sync.await.unwrap().unwrap();
        assert!(status < 500, "a sync run answered {status}");
    }

    let requests = desk.requests();
    let after: Vec<_> = requests[from..]
        .iter()
        .filter_map(|r| r.headers.run_id.as_deref())
        .collect();
    // Where the sync run served last had its first call.
    let last_sync = interactive
        .iter()
        .filter_map(|s| after.iter().position(|id| id == s))
        .max()
        .unwrap();
    let overtakes = after[..last_sync]
        .iter()
        .filter(|id| batch.contains(**id))
        .count();
    let order = after
        .iter()
        .map(|id| if batch.contains(*id) { 'B' } else { 'I' })
        .collect();
    server.kill_async().await;
    Flood { overtakes, order }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sync_runs_keep_their_share_of_a_group_held_by_a_batch_flood() {
    let fair = flood("").await;
    println!(
        "with class priority: {} batch calls before the last sync run's first call (bound {OVERTAKE_BOUND}); desk order {}",
        fair.overtakes, fair.order
    );
    assert!(
        fair.overtakes <= OVERTAKE_BOUND,
        "sync runs were served behind {} batch calls (bound {OVERTAKE_BOUND}); desk order {}",
        fair.overtakes,
        fair.order
    );

    // The mechanism off: every call is batch, and the sync runs' calls
    // wait behind the whole flood: the same measurement reports it.
    if !rein_engine::crash::ENABLED {
        return;
    }
    let fifo = flood("no_class_priority").await;
    println!(
        "with no_class_priority: {} batch calls before the last sync run's first call; desk order {}",
        fifo.overtakes, fifo.order
    );
    assert!(
        fifo.overtakes > OVERTAKE_BOUND,
        "without class priority the sync runs wait behind the flood: {} batch calls first; desk order {}",
        fifo.overtakes,
        fifo.order
    );
    assert!(
        fifo.overtakes >= FLOOD - 1,
        "every waiting batch call went first: {}",
        fifo.overtakes
    );
}

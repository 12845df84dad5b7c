//! Submissions that settle after a crash (issue 13, item 2): a real
//! `rein serve` is killed while sync and queued submissions with an
//! `Idempotency-Key` are in flight, and restarted on the same database.
//!
//! Each resolution a retry can make of a record whose holder died is
//! produced on purpose, at a chosen moment (`REIN_CRASH_AT`), and seen in
//! the server's log: released (the holder died before its run existed),
//! recovering (its run is in flight, nobody closes it yet), completed (its
//! run ended). Then random SIGKILLs: afterwards every key replays the
//! answer of the one run it started, no key answers 409 once its holder is
//! dead, and the order desk's own log shows that no run executed an effect
//! twice. A last test drains a server with a sync run in flight: the
//! retries follow the run to its final view, never replaying "handed on".
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::sys::signal::Signal;
use rein_testkit::order_desk::{
    EffectKind, Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig, SEND_EMAIL,
    UPDATE_DELIVERY_TIME,
};
use serde_json::Value;

mod common;
use common::{Server, example_config, example_config_with, serve_command};
use rein_store::RunStore;

/// The bound of each test as a whole: generous for two loaded cores,
/// never a measurement.
const TEST_BOUND: Duration = Duration::from_secs(60);
/// Kill rounds before the last, undisturbed start.
const KILLS: usize = 3;
/// New keys each round brings (every round also retries the earlier ones):
/// even ones sync, odd ones queued.
const NEW_PER_ROUND: usize = 3;
/// Keys of the random rounds.
const KEYS: usize = KILLS * NEW_PER_ROUND;
/// Generous client timeouts (never a bound the test asserts).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// A config whose orphan scan closes a run nobody drives after
/// `orphan_threshold`.
fn config(dir: &Path, orphan_threshold: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    example_config(
        dir,
        &format!(
            "[server.queue]\nlease = \"3s\"\nworkers = 2\n\
             [server.reconciliation]\nheartbeat_interval = \"1s\"\norphan_threshold = \"{orphan_threshold}\"\nscan_interval = \"1s\"\n"
        ),
    )
}

fn body(i: usize) -> String {
    let mode = if i % 2 == 0 { "sync" } else { "queued" };
    format!(
        r#"{{"input": "Move order A-1001 (submission {i}).", "mode": "{mode}", "metadata": {{"n": {i}}}}}"#
    )
}

/// One answer to a submission: its status, the run it names, whether it
/// was marked a replay, its body.
#[derive(Debug, Clone)]
struct Seen {
    status: u16,
    run: Option<String>,
    replayed: bool,
    body: Value,
}

async fn submit_as(client: &reqwest::Client, base: &str, key: &str, body: String) -> Option<Seen> {
    let response = client
        .post(format!("{base}/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .header("Idempotency-Key", key)
        .body(body)
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned)
    };
    let location = header("location");
    let replayed = header("idempotency-replayed").as_deref() == Some("true");
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let run = body["run_id"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| location.and_then(|l| l.rsplit('/').next().map(str::to_owned)));
    Some(Seen {
        status,
        run,
        replayed,
        body,
    })
}

async fn submit(client: &reqwest::Client, base: &str, i: usize) -> Option<Seen> {
    submit_as(client, base, &format!("kill-test-{i}"), body(i)).await
}

/// A small deterministic generator for the kill moments (the moments
/// vary; what the test asserts holds at any of them).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

async fn run_status(client: &reqwest::Client, server: &Server, run: &str) -> Value {
    loop {
        if let Ok(r) = client
            .get(server.url(&format!("/v1/runs/{run}")))
            .send()
            .await
            && let Ok(v) = r.json::<Value>().await
            && !matches!(v["status"].as_str(), Some("queued" | "running") | None)
        {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A server that aborts when it reaches crash point `point`.
async fn start_crashing(config: &Path, db: &Path, desk: &str, point: &str) -> Server {
    let mut command = serve_command(
        Command::new(env!("CARGO_BIN_EXE_rein")),
        config,
        db,
        &[
            ("ORDER_DESK_URL", desk),
            ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
        ],
    );
    command.env("REIN_CRASH_AT", point);
    Server::spawn_async(command).await
}

/// How many of the server's log lines resolve a record as `resolution`.
/// How many times the server resolved a record as `resolution`, once it
/// has logged at least one: the log is read by a thread of its own, so the
/// line may reach this test after the answer it preceded.
fn resolved_at_least_once(server: &Server, resolution: &str) -> usize {
    let wanted = format!("resolution={resolution}");
    tokio::task::block_in_place(|| {
        server.wait_for_line(|l| {
            l.contains("resolving an idempotency record in progress") && l.contains(&wanted)
        })
    });
    resolved(server, resolution)
}

fn resolved(server: &Server, resolution: &str) -> usize {
    server
        .log_lines()
        .iter()
        .filter(|l| {
            l.contains("resolving an idempotency record in progress")
                && l.contains(&format!("resolution={resolution}"))
        })
        .count()
}

/// The desk's effects applied per (run, tool).
fn applied(desk: &OrderDesk) -> BTreeMap<(String, String), usize> {
    let requests = desk.requests();
    let mut applied: BTreeMap<(String, String), usize> = BTreeMap::new();
    for effect in desk.side_effects() {
        if effect.effect != EffectKind::Applied {
            continue;
        }
        let run = requests
            .iter()
            .find(|r| r.seq == effect.request_seq)
            .and_then(|r| r.headers.run_id.clone())
            .unwrap_or_default();
        *applied.entry((run, effect.tool.clone())).or_default() += 1;
    }
    applied
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_settle_after_kills_without_a_409_or_a_second_run() {
    tokio::time::timeout(TEST_BOUND, keys_settle())
        .await
        .expect("the test ends within its bound");
}

async fn keys_settle() {
    // Slow enough that kills land mid-run: every read and update takes a
    // while at the desk.
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default().with_faults(
            Faults::none()
                .always(GET_ORDER, Fault::Delay(Duration::from_millis(50)))
                .always(
                    UPDATE_DELIVERY_TIME,
                    Fault::Delay(Duration::from_millis(300)),
                ),
        ),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // Orphans are closed 3 s after their last heartbeat; with `waiting`, not
    // for an hour (a run in flight stays in flight).
    let closing = config(&dir.path().join("closing"), "3s");
    let waiting = config(&dir.path().join("waiting"), "1h");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::builder()
        .timeout(CLIENT_TIMEOUT)
        .build()
        .unwrap();
    let base_of = |server: &Server| server.url("");
    let sync =
        |n: &str| format!(r#"{{"input": "Move order A-1001 ({n}).", "metadata": {{"n": "{n}"}}}}"#);

    // Released: the holder dies after reserving, before its run exists.
    let mut server = start_crashing(&waiting, &db, desk.base_url(), "after_reservation").await;
    let lost = submit_as(&client, &base_of(&server), "release", sync("release")).await;
    assert!(lost.is_none(), "the caller lost its answer: {lost:?}");
    server.exited(CLIENT_TIMEOUT).await;
    let server = Server::start_async(&waiting, &db, desk.base_url()).await;
    let fresh = submit_as(&client, &base_of(&server), "release", sync("release"))
        .await
        .unwrap();
    assert_eq!(fresh.status, 200, "executed fresh: {:?}", fresh.body);
    assert!(!fresh.replayed);
    assert_eq!(fresh.body["status"], "succeeded", "{:?}", fresh.body);
    assert_eq!(
        resolved_at_least_once(&server, "Release"),
        1,
        "{}",
        server.log_tail()
    );
    let released_run = fresh.run.clone().unwrap();
    server.kill_async().await;

    // Recovering, then completed: the holder dies after its update was
    // answered, before it was recorded.
    let mut server = start_crashing(&waiting, &db, desk.base_url(), "after_call:2").await;
    let lost = submit_as(&client, &base_of(&server), "recover", sync("recover")).await;
    assert!(lost.is_none(), "the caller lost its answer: {lost:?}");
    server.exited(CLIENT_TIMEOUT).await;
    let server = Server::start_async(&waiting, &db, desk.base_url()).await;
    let recovering = submit_as(&client, &base_of(&server), "recover", sync("recover"))
        .await
        .unwrap();
    assert_eq!(recovering.status, 202, "{:?}", recovering.body);
    assert!(!recovering.replayed, "nothing stored was replayed");
    assert_eq!(recovering.body["status"], "running");
    assert_eq!(
        resolved_at_least_once(&server, "Recovering"),
        1,
        "{}",
        server.log_tail()
    );
    let recovered_run = recovering.run.clone().unwrap();
    server.kill_async().await;
    let server = Server::start_async(&closing, &db, desk.base_url()).await;
    let ended = loop {
        let answer = submit_as(&client, &base_of(&server), "recover", sync("recover"))
            .await
            .unwrap();
        assert_eq!(answer.run.as_deref(), Some(recovered_run.as_str()));
        match answer.status {
            202 => tokio::time::sleep(Duration::from_millis(200)).await,
            200 => break answer,
            other => panic!("{other}: {:?}", answer.body),
        }
    };
    assert!(ended.replayed);
    assert_eq!(ended.body["status"], "failed", "closed as orphaned");
    assert!(ended.body["report"].is_object(), "{:?}", ended.body);
    assert_eq!(
        resolved_at_least_once(&server, "Complete"),
        1,
        "{}",
        server.log_tail()
    );
    server.kill_async().await;

    // Random kills, queued and sync keys mixed.
    let mut seen: BTreeMap<usize, Vec<Seen>> = BTreeMap::new();
    let mut rng = Lcg(20_261_129);
    let mut resolutions: BTreeMap<&str, usize> = BTreeMap::new();
    let tally = |server: &Server, resolutions: &mut BTreeMap<&str, usize>| {
        for r in ["Wait", "Release", "Recovering", "Complete"] {
            *resolutions.entry(r).or_default() += resolved(server, r);
        }
    };
    for round in 0..KILLS {
        let server = Server::start_async(&closing, &db, desk.base_url()).await;
        let pending: Vec<_> = (0..NEW_PER_ROUND * (round + 1))
            .map(|i| {
                let (client, base) = (client.clone(), base_of(&server));
                tokio::spawn(async move { (i, submit(&client, &base, i).await) })
            })
            .collect();
        // Anywhere from before the requests arrive to mid-way through
        // their runs.
        tokio::time::sleep(Duration::from_millis(10 + rng.below(700))).await;
        let log = server.log_tail();
        tally(&server, &mut resolutions);
        server.kill_async().await;
        for task in pending {
            let (i, answer) = task.await.unwrap();
            if let Some(answer) = answer {
                assert_ne!(
                    answer.status, 409,
                    "round {round}: key {i} answered 409 although its holder was dead: {:?}\n{log}",
                    answer.body
                );
                seen.entry(i).or_default().push(answer);
            }
        }
    }

    // The last start: nobody kills it. Every key settles on one run.
    let server = Server::start_async(&closing, &db, desk.base_url()).await;
    let mut runs: BTreeMap<usize, String> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..KEYS {
        let last = loop {
            let answer = submit(&client, &base_of(&server), i)
                .await
                .expect("the server answers");
            assert_ne!(
                answer.status,
                409,
                "key {i}: {:?}\n{}",
                answer.body,
                server.log_tail()
            );
            assert!(
                matches!(answer.status, 200 | 202),
                "key {i}: {} {:?}",
                answer.status,
                answer.body
            );
            seen.entry(i).or_default().push(answer.clone());
            // A sync key answers 202 only while its run is being
            // recovered (closed by the orphan scan, or driven by a
            // worker): its final answer is the run's view, 200.
            if i % 2 == 1 || answer.status == 200 {
                break answer;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let run = last.run.clone().expect("every answer names its run");
        let ended = run_status(&client, &server, &run).await;
        assert!(ended["report"].is_object(), "{ended}");
        *outcomes
            .entry(ended["status"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
        runs.insert(i, run);
    }
    tally(&server, &mut resolutions);

    // A replay now is the stored answer of the key's run, marked.
    for i in 0..KEYS {
        let again = submit(&client, &base_of(&server), i).await.unwrap();
        assert!(again.replayed, "key {i}");
        assert_eq!(again.run.as_deref(), Some(runs[&i].as_str()), "key {i}");
        if i % 2 == 0 {
            assert!(
                again.body["report"].is_object(),
                "a sync key replays its run's final view: {:?}",
                again.body
            );
        }
    }

    // Every answer any round gave names the key's one run.
    for (i, answers) in &seen {
        for answer in answers {
            if let Some(run) = &answer.run {
                assert_eq!(run, &runs[i], "key {i} named two runs: {answers:?}");
            }
        }
    }
    let distinct: BTreeSet<&String> = runs.values().collect();
    assert_eq!(distinct.len(), KEYS, "one run per key");
    // No run without a key: the store holds exactly the keys' runs.
    let list = {
        let db = db.clone();
        tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_rein"))
                .args(["idempotency", "list", "--json", "--data"])
                .arg(&db)
                .output()
                .unwrap()
        })
        .await
        .unwrap()
    };
    let listed: Value = serde_json::from_slice(&list.stdout).unwrap();
    let records = listed.as_array().unwrap();
    assert_eq!(records.len(), KEYS + 2, "{listed}");
    let mut expected: BTreeMap<String, String> = runs
        .iter()
        .map(|(i, run)| (format!("kill-test-{i}"), run.clone()))
        .collect();
    expected.insert("release".into(), released_run.clone());
    expected.insert("recover".into(), recovered_run.clone());
    for record in records {
        assert_eq!(record["state"], "completed", "{record}");
        let key = record["key"].as_str().unwrap();
        assert_eq!(
            record["run_id"].as_str(),
            Some(expected[key].as_str()),
            "{record}"
        );
    }
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();

    let stored: BTreeSet<String> = store
        .list_runs(1000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id.to_string())
        .collect();
    assert_eq!(
        stored,
        expected.values().cloned().collect::<BTreeSet<_>>(),
        "every run in the store is the one run of a key"
    );

    // The desk's own log: no run applied an effect twice.
    let applied = applied(&desk);
    for ((run, tool), n) in &applied {
        assert!(
            stored.contains(run),
            "an effect of a run nobody knows ({run}, {tool})"
        );
        assert!(
            *n == 1 || (tool != SEND_EMAIL && tool != UPDATE_DELIVERY_TIME),
            "run {run} applied {tool} {n} times"
        );
    }
    let mut statuses: BTreeMap<(&str, u16), usize> = BTreeMap::new();
    for (i, answers) in &seen {
        for answer in answers {
            let mode = if i % 2 == 0 { "sync" } else { "queued" };
            *statuses.entry((mode, answer.status)).or_default() += 1;
        }
    }
    eprintln!(
        "{KILLS} kills; answers by mode and status {statuses:?}; runs ended {outcomes:?}; \
         resolutions in the random rounds {resolutions:?}; {} effects applied",
        applied.values().sum::<usize>()
    );
}

/// The example config (with `server_keys` in its `[server]` table and
/// `extra` appended) where an update may take up to 5 s (p99), so rein
/// gives a slow update its time instead of timing it out and retrying:
/// the desk's delay is then a tool genuinely in flight.
fn slow_update_config(dir: &Path, server_keys: &str, extra: &str) -> PathBuf {
    let path = example_config_with(dir, server_keys, extra);
    let text = std::fs::read_to_string(&path).unwrap();
    let fast =
        "[tools.update_delivery_time.latency]\np50 = \"80ms\"\np95 = \"200ms\"\np99 = \"400ms\"";
    assert!(text.contains(fast), "the example's update latency changed");
    let slow = "[tools.update_delivery_time.latency]\np50 = \"1s\"\np95 = \"3s\"\np99 = \"5s\"";
    std::fs::write(&path, text.replace(fast, slow)).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sync_run_handed_on_while_draining_replays_its_final_view_not_the_hand_on() {
    tokio::time::timeout(TEST_BOUND, handed_on_replays_the_final_view())
        .await
        .expect("the test ends within its bound");
}

async fn handed_on_replays_the_final_view() {
    // The first read outlasts the grace: the run is interrupted mid-call
    // (an interrupt aborts a read in flight; a write already sent would be
    // let finish, and the run would not be handed on).
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().then(GET_ORDER, Fault::Delay(Duration::from_secs(6)))),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = slow_update_config(dir.path(), "shutdown_grace = \"1s\"", "");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let body = r#"{"input": "Move order A-1001."}"#.to_owned();

    let mut first = Server::start_async(&config, &db, desk.base_url()).await;
    let sync = tokio::spawn({
        let (client, base, body) = (client.clone(), first.url(""), body.clone());
        async move { submit_as(&client, &base, "drained", body).await }
    });
    while desk.request_count(GET_ORDER) == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.signal(Signal::SIGTERM);
    let handed = sync
        .await
        .unwrap()
        .expect("the caller keeps its connection");
    assert_eq!(handed.status, 202, "{:?}", handed.body);
    assert!(handed.body["handed_on"].is_object(), "{:?}", handed.body);
    let run = handed.run.clone().unwrap();
    assert_eq!(first.exited(Duration::from_secs(30)).await.code(), Some(0));

    // The next server resumes the run; a retry follows it to its end and
    // never replays the hand-on as if it were the answer.
    let second = Server::start_async(&config, &db, desk.base_url()).await;
    let last = loop {
        let answer = submit_as(&client, &second.url(""), "drained", body.clone())
            .await
            .unwrap();
        assert_eq!(answer.run.as_deref(), Some(run.as_str()));
        assert!(
            answer.body.get("handed_on").is_none(),
            "a retry is never the stored hand-on: {:?}",
            answer.body
        );
        match answer.status {
            202 => {
                assert!(!answer.replayed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            200 => break answer,
            other => panic!("{other}: {:?}", answer.body),
        }
    };
    assert!(last.replayed);
    assert_eq!(last.body["status"], "succeeded", "{:?}", last.body);
    assert!(last.body["report"].is_object());
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    second.kill_async().await;
}

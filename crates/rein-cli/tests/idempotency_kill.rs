//! Submissions that settle after a crash (issue 13, item 2): a real
//! `rein serve` is SIGKILLed again and again while queued and sync
//! submissions with an `Idempotency-Key` are in flight, and restarted on
//! the same database. Afterwards every key replays the answer of the one
//! run it started (or executed fresh when nothing had run), no key ever
//! answers 409 once its holder is dead, and the order desk's own log shows
//! that no run executed an effect twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rein_testkit::order_desk::{
    EffectKind, Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig, SEND_EMAIL,
    UPDATE_DELIVERY_TIME,
};
use serde_json::Value;

mod common;
use common::{Server, example_config};

/// Kill rounds before the last, undisturbed start.
const KILLS: usize = 6;
/// New keys each round brings (every round also retries the earlier ones):
/// even ones sync, odd ones queued.
const NEW_PER_ROUND: usize = 4;
/// Keys in all.
const KEYS: usize = KILLS * NEW_PER_ROUND;
/// Generous client timeouts (never a bound the test asserts).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

fn fast_config(dir: &std::path::Path) -> std::path::PathBuf {
    example_config(
        dir,
        "[server.queue]\nlease = \"3s\"\nworkers = 2\n\
         [server.reconciliation]\nheartbeat_interval = \"1s\"\norphan_threshold = \"3s\"\nscan_interval = \"1s\"\n",
    )
}

fn body(i: usize) -> String {
    let mode = if i % 2 == 0 { "sync" } else { "queued" };
    format!(
        r#"{{"input": "Move order A-1001 (submission {i}).", "mode": "{mode}", "metadata": {{"n": {i}}}}}"#
    )
}

/// One answer to a submission: its status and the run it names, if any.
#[derive(Debug, Clone)]
struct Seen {
    status: u16,
    run: Option<String>,
    body: Value,
}

async fn submit(client: &reqwest::Client, base: &str, i: usize) -> Option<Seen> {
    let response = client
        .post(format!("{base}/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .header("Idempotency-Key", format!("kill-test-{i}"))
        .body(body(i))
        .send()
        .await
        .ok()?;
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .and_then(|l| l.to_str().ok())
        .map(str::to_owned);
    let body: Value = response.json().await.unwrap_or(Value::Null);
    let run = body["run_id"]
        .as_str()
        .map(str::to_owned)
        .or_else(|| location.and_then(|l| l.rsplit('/').next().map(str::to_owned)));
    Some(Seen { status, run, body })
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
    for _ in 0..400 {
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
    panic!("run {run} did not end");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_settle_after_repeated_kills_without_a_409_or_a_second_run() {
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
    let config = fast_config(dir.path());
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::builder()
        .timeout(CLIENT_TIMEOUT)
        .build()
        .unwrap();
    let mut seen: BTreeMap<usize, Vec<Seen>> = BTreeMap::new();
    let mut rng = Lcg(20_261_129);

    for round in 0..KILLS {
        let server = Server::start(&config, &db, desk.base_url());
        let pending: Vec<_> = (0..NEW_PER_ROUND * (round + 1))
            .map(|i| {
                let (client, base) = (client.clone(), server.url(""));
                tokio::spawn(async move { (i, submit(&client, &base, i).await) })
            })
            .collect();
        // Anywhere from before the requests arrive to mid-way through
        // their runs.
        tokio::time::sleep(Duration::from_millis(10 + rng.below(900))).await;
        let log = server.log_tail();
        server.kill();
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
    let server = Server::start(&config, &db, desk.base_url());
    let mut runs: BTreeMap<usize, String> = BTreeMap::new();
    let mut outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..KEYS {
        let mut last = None;
        for _ in 0..200 {
            let answer = submit(&client, &server.url(""), i)
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
            // recovered: its final answer is the run's view, 200.
            let recovering = i % 2 == 0 && answer.status == 202;
            last = Some(answer);
            if !recovering {
                break;
            }
            // A sync run whose process died is being recovered (closed by
            // the orphan scan, or driven by a worker): ask again.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let last = last.unwrap();
        let run = last.run.clone().expect("every answer names its run");
        let ended = run_status(&client, &server, &run).await;
        assert!(ended["report"].is_object(), "{ended}");
        *outcomes
            .entry(ended["status"].as_str().unwrap_or("?").to_owned())
            .or_default() += 1;
        runs.insert(i, run);
    }

    // A replay now is the stored answer of the key's run, marked.
    for i in 0..KEYS {
        let again = client
            .post(server.url("/v1/agents/order_desk/runs"))
            .header("content-type", "application/json")
            .header("Idempotency-Key", format!("kill-test-{i}"))
            .body(body(i))
            .send()
            .await
            .unwrap();
        assert_eq!(again.headers()["idempotency-replayed"], "true", "key {i}");
        let view: Value = again.json().await.unwrap();
        assert_eq!(view["run_id"].as_str(), Some(runs[&i].as_str()), "key {i}");
        if i % 2 == 0 {
            assert!(
                view["report"].is_object(),
                "a sync key replays its run's final view: {view}"
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
    let listed: serde_json::Value = serde_json::from_slice(
        &std::process::Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(["idempotency", "list", "--json", "--data"])
            .arg(&db)
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let records = listed.as_array().unwrap();
    assert_eq!(records.len(), KEYS, "{listed}");
    for record in records {
        assert_eq!(record["state"], "completed", "{record}");
        let i: usize = record["key"]
            .as_str()
            .unwrap()
            .trim_start_matches("kill-test-")
            .parse()
            .unwrap();
        assert_eq!(
            record["run_id"].as_str(),
            Some(runs[&i].as_str()),
            "{record}"
        );
    }
    let store = rein_store::SqliteStore::open(&db).unwrap();
    use rein_store::Store;
    let stored: BTreeSet<String> = store
        .list_runs(1000)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.run_id.to_string())
        .collect();
    assert_eq!(
        stored,
        runs.values().cloned().collect::<BTreeSet<_>>(),
        "every run in the store is the one run of a key"
    );

    // The desk's own log: no run applied an effect twice.
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
        "{KILLS} kills; answers by mode and status {statuses:?}; runs ended {outcomes:?}; {} effects applied",
        applied.values().sum::<usize>()
    );
}

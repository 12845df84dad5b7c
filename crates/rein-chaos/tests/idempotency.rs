//! `Idempotency-Key` submissions under storage faults and slow work (issue
//! 13 review): a real `rein serve` in this process (the example order-desk
//! config, the testkit's order desk on loopback, a real SQLite file), its
//! store wrapped by [`FaultyStore`] where a fault is wanted.
//!
//! - A sync run whose end cannot be recorded leaves its key to be resolved
//!   from that run: a retry never starts a second run (no second update at
//!   the desk), it follows the one that exists.
//! - A holder renews its reservation while its run works longer than a
//!   lease: retries get 409 the whole time, never a release.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::Timestamp;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rein_chaos::store_fault::{StoreFault, faulty};
use rein_core::TenantId;
use rein_engine::config::{CompiledSchemas, Loader};
use rein_server::AppState;
use rein_store::{IdempotencyState, RunStatus, Store};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{
    Fault, Faults, OrderDesk, OrderDeskConfig, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::Value;
use tokio::sync::oneshot;

/// A bound that fails a test rather than measures it.
const GENEROUS: Duration = Duration::from_secs(30);

const RUNS: &str = "/v1/agents/order_desk/runs";

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk")
}

struct Served {
    base: String,
    desk: OrderDesk,
    sqlite: Arc<dyn Store>,
    faults: Arc<rein_chaos::store_fault::FaultyStore>,
    state: Arc<AppState>,
    http: reqwest::Client,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

/// The example server with its store wrapped in `faults`, a queue lease of
/// `lease` and an orphan threshold of a millisecond (a run nobody drives
/// is closed by the next scan, which the test calls itself).
async fn serve(desk_faults: Faults, faults: Vec<StoreFault>, lease: Duration) -> Served {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(desk_faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    // An update may take up to 5 s (p99), so rein gives a slow update
    // its time instead of timing it out and retrying it: the desk's delay
    // is then a tool genuinely in flight.
    let config = std::fs::read_to_string(example_dir().join("rein.toml")).unwrap();
    let fast =
        "[tools.update_delivery_time.latency]\np50 = \"80ms\"\np95 = \"200ms\"\np99 = \"400ms\"";
    assert!(
        config.contains(fast),
        "the example's update latency changed"
    );
    let slow = "[tools.update_delivery_time.latency]\np50 = \"1s\"\np95 = \"3s\"\np99 = \"5s\"";
    std::fs::write(dir.path().join("rein.toml"), config.replace(fast, slow)).unwrap();
    std::fs::copy(
        example_dir().join("demo.script.json"),
        dir.path().join("demo.script.json"),
    )
    .unwrap();
    let desk_url = desk.base_url().to_owned();
    let registry = Loader::with_env(move |k| match k {
        "ORDER_DESK_URL" => Some(desk_url.clone()),
        "MOCK_MODEL_URL" => Some("http://127.0.0.1:9".into()),
        _ => None,
    })
    .load(&dir.path().join("rein.toml"))
    .unwrap();
    let mut settings = registry.server().clone();
    settings.queue.lease = lease;
    settings.reconciliation.orphan_threshold = Duration::from_millis(1);
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let faults = Arc::new(faulty(sqlite.clone(), faults));
    let store: Arc<dyn Store> = faults.clone();
    let client = rein_engine::run::http_client().unwrap();
    let engine =
        rein_server::build_engine(&registry, store.clone(), client.clone(), Some(5)).unwrap();
    let models = rein_server::bind_models(&registry, &client).unwrap();
    let schemas = CompiledSchemas::compile(&registry).unwrap();
    let mut state = AppState::new(registry, schemas, store, engine, client, models);
    state.settings = settings;
    state.workers = 0;
    let state = Arc::new(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(rein_server::serve(state.clone(), listener, async move {
        let _ = stopped.await;
    }));
    Served {
        base,
        desk,
        sqlite,
        faults,
        state,
        http: reqwest::Client::builder()
            .timeout(GENEROUS)
            .build()
            .unwrap(),
        _stop: stop,
        _dir: dir,
    }
}

impl Served {
    async fn submit(&self, key: &str) -> (u16, Option<String>, Option<String>, Value) {
        let response = self
            .http
            .post(format!("{}{RUNS}", self.base))
            .header("content-type", "application/json")
            .header("Idempotency-Key", key)
            .body(r#"{"input": "Move order A-1001."}"#)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let (location, replayed) = (header("location"), header("idempotency-replayed"));
        (status, location, replayed, response.json().await.unwrap())
    }

    /// The key's record, while it is in progress.
    async fn in_progress(&self, key: &str) -> Option<rein_store::IdempotencyRecord> {
        let tenant = TenantId::new("default").unwrap();
        self.sqlite
            .idempotency_records(Some(&tenant), Some(IdempotencyState::InProgress), 100)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.key == key)
    }
}

/// The store refuses the run's end six times (a blink): the engine offers
/// it again until it lands, and the sync request answers the finished run.
/// One run, one update.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_end_the_store_refused_briefly_ends_recorded() {
    let served = serve(
        Faults::none(),
        vec![StoreFault::EndsUnavailable { count: 6 }],
        Duration::from_secs(60),
    )
    .await;
    let (status, _, _, view) = served.submit("end-blinked").await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["status"], "succeeded", "{view}");
    let runs = served.sqlite.list_runs(10).await.unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(
        runs[0].status,
        RunStatus::Finished(rein_core::Outcome::Succeeded)
    );
    assert_eq!(served.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert!(served.in_progress("end-blinked").await.is_none());
}

/// The run's end cannot be recorded (the store refuses it for longer than
/// the engine's patience, `STORE_PATIENCE`): the sync request fails with
/// 503, but its run exists and made its effects. The key is not released:
/// a retry follows that run (202 while it is recovered), and once the
/// orphan scan closed it, replays its final view. One run, one update, one
/// email.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_end_was_not_recorded_keeps_its_key_and_no_retry_runs_it_again() {
    let served = serve(
        Faults::none(),
        vec![StoreFault::EndsUnavailable { count: u32::MAX }],
        Duration::from_secs(60),
    )
    .await;
    let (status, _, _, problem) = served.submit("end-lost").await;
    assert_eq!(status, 503, "{problem}");
    let runs = served.sqlite.list_runs(10).await.unwrap();
    assert_eq!(runs.len(), 1);
    let run = runs[0].clone();
    assert_eq!(run.status, RunStatus::Running, "its end is not recorded");
    assert_eq!(served.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    let record = served.in_progress("end-lost").await.expect("not released");
    assert_eq!(record.run_id.as_ref(), Some(&run.run_id));

    // The retry: the same run, still being recovered. Not a replay.
    let (status, location, replayed, view) = served.submit("end-lost").await;
    assert_eq!(status, 202, "{view}");
    assert_eq!(
        location.as_deref(),
        Some(format!("/v1/runs/{}", run.run_id).as_str())
    );
    assert_eq!(replayed, None, "nothing stored was replayed");
    assert_eq!(view["status"], "running");
    assert!(view["report"].is_null());
    assert!(view.get("basis").is_none());
    served.faults.hooks().heal();

    // Closed by the orphan scan once the store takes ends again: the retry
    // replays the run's final view, and keeps replaying it.
    assert_eq!(
        rein_server::lifecycle::recovery::scan_orphans(&served.state, &mut None).await,
        1
    );
    for _ in 0..2 {
        let (status, location, replayed, view) = served.submit("end-lost").await;
        assert_eq!(status, 200, "{view}");
        assert_eq!(
            location.as_deref(),
            Some(format!("/v1/runs/{}", run.run_id).as_str())
        );
        assert_eq!(replayed.as_deref(), Some("true"));
        assert_eq!(view["status"], "failed", "{view}");
        assert!(view["report"].is_object(), "{view}");
        assert!(
            view["report"].get("basis").is_none(),
            "the report's basis is the store's, not the API's: {view}"
        );
    }
    assert_eq!(served.sqlite.list_runs(10).await.unwrap().len(), 1);
    assert_eq!(served.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert!(served.desk.applied_count(SEND_EMAIL) <= 1);
}

/// The update takes more than two leases (3 s each, the shortest a config
/// may set): the holder renews its reservation every second, so every retry
/// meanwhile is a 409 (the holder answers), never a release and a second
/// run; the first answer is stored and replayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_that_works_longer_than_a_lease_keeps_its_key_by_renewing_it() {
    let lease = Duration::from_secs(3);
    let served = Arc::new(
        serve(
            Faults::none().then(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::from_secs(7))),
            Vec::new(),
            lease,
        )
        .await,
    );
    let first = tokio::spawn({
        let served = served.clone();
        async move { served.submit("slow").await }
    });
    let until = tokio::time::Instant::now() + GENEROUS;
    while served.desk.request_count(UPDATE_DELIVERY_TIME) == 0 {
        assert!(tokio::time::Instant::now() < until, "no update arrived");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reserved = served.in_progress("slow").await.expect("reserved");
    let first_until = reserved.holder_until_ms.expect("a heartbeat");
    // Retries until the first answer is in, each a 409; at least one after
    // the reservation's first lease ran out.
    let mut conflicts = 0;
    let mut past_first_lease = false;
    while !first.is_finished() {
        let (status, _, _, body) = served.submit("slow").await;
        if status == 200 {
            // The first request answered between the check and this retry.
            break;
        }
        assert_eq!(status, 409, "{body}");
        conflicts += 1;
        if let Some(record) = served.in_progress("slow").await {
            let renewed = record.holder_until_ms.unwrap_or(Timestamp::from_millis(0));
            past_first_lease |=
                rein_server::lifecycle::recovery::now_ms() > first_until && renewed > first_until;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(conflicts > 0);
    assert!(
        past_first_lease,
        "the reservation was renewed past its first lease"
    );
    let (status, location, _, view) = first.await.unwrap();
    assert_eq!(status, 200, "{view}");
    let (again, again_location, replayed, _) = served.submit("slow").await;
    assert_eq!((again, again_location), (200, location));
    assert_eq!(replayed.as_deref(), Some("true"));
    assert_eq!(served.sqlite.list_runs(10).await.unwrap().len(), 1);
    assert_eq!(served.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

//! The real server over loopback: the example order-desk config with API
//! keys for two tenants, the testkit's order desk, a real SQLite file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::Timestamp;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rein_core::TenantId;
use rein_engine::config::{CompiledSchemas, Loader};
use rein_engine::run::http_client;
use rein_server::AppState;
use rein_store::{IdempotencyState, Store, StoreExt};
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{Fault, Faults, OrderDesk, OrderDeskConfig, UPDATE_DELIVERY_TIME};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;

const ACME: &str = "acme-secret-key";
const GLOBEX: &str = "globex-secret-key";

fn example_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk")
}

fn sha(key: &str) -> String {
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

struct Api {
    base: String,
    desk: OrderDesk,
    store: Arc<dyn Store>,
    /// The server's state, to drain it from the test.
    state: Arc<AppState>,
    http: reqwest::Client,
    _stop: oneshot::Sender<()>,
    _dir: tempfile::TempDir,
}

#[derive(Default)]
struct Options {
    workers: usize,
    max_attempts: Option<u32>,
    /// Runs recorded as abandoned by a dead worker before the server starts.
    abandoned: Vec<&'static str>,
    /// Runs, older than those, stopped for their caller (a Ctrl-C'd `rein
    /// run`): running, no claim, and not this server's to take.
    kept_for_caller: usize,
    idempotency_disabled: bool,
    body_limit: Option<usize>,
    max_key_length: Option<usize>,
    faults: Option<Faults>,
    /// TOML appended to the config.
    extra: &'static str,
    /// Tenants that may read the process's figures (`server.metrics_tenants`).
    operators: &'static [&'static str],
}

async fn start(options: Options) -> Api {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default().with_faults(options.faults.unwrap_or_else(Faults::none)),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = std::fs::read_to_string(example_dir().join("rein.toml")).unwrap();
    config.push_str(&format!(
        "\n[[server.api_keys]]\ntenant = \"acme\"\nsha256 = \"{}\"\n[[server.api_keys]]\ntenant = \"globex\"\nsha256 = \"{}\"\n",
        sha(ACME),
        sha(GLOBEX)
    ));
    config.push_str(options.extra);
    std::fs::write(dir.path().join("rein.toml"), config).unwrap();
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
    settings.idempotency.enabled = !options.idempotency_disabled;
    if let Some(limit) = options.body_limit {
        settings.body_limit = limit;
    }
    if let Some(length) = options.max_key_length {
        settings.idempotency.max_key_length = length;
    }
    if let Some(n) = options.max_attempts.and_then(std::num::NonZeroU32::new) {
        settings.queue.max_attempts = n;
    }
    settings.metrics_tenants = options
        .operators
        .iter()
        .map(|t| rein_core::TenantId::new(*t).unwrap())
        .collect();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    for n in 0..options.kept_for_caller {
        kept_for_caller(store.as_ref(), &format!("kept-{n:02}")).await;
    }
    for id in &options.abandoned {
        abandoned(store.as_ref(), id).await;
    }
    let client = http_client().unwrap();
    let engine =
        rein_server::build_engine(&registry, store.clone(), client.clone(), Some(5)).unwrap();
    let models = rein_server::bind_models(&registry, &client).unwrap();
    let schemas = CompiledSchemas::compile(&registry).unwrap();
    let mut state = AppState::new(registry, schemas, store.clone(), engine, client, models);
    state.settings = settings;
    state.workers = options.workers;
    let state = Arc::new(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(rein_server::serve(state.clone(), listener, async move {
        let _ = stopped.await;
    }));
    Api {
        base,
        desk,
        store,
        state,
        http: reqwest::Client::new(),
        _stop: stop,
        _dir: dir,
    }
}

impl Api {
    fn post(&self, path: &str, key: &str) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base))
            .bearer_auth(key)
            .header("content-type", "application/json")
    }

    fn get(&self, path: &str, key: &str) -> reqwest::RequestBuilder {
        self.http
            .get(format!("{}{path}", self.base))
            .bearer_auth(key)
    }

    /// Polls the run until it ends (synchronizing on its state).
    async fn finished(&self, location: &str, key: &str) -> Value {
        for _ in 0..400 {
            let run: Value = self
                .get(location, key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if !matches!(run["status"].as_str(), Some("queued" | "running")) {
                return run;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        panic!("run {location} did not finish");
    }
}

/// The kinds of a run's events, in order.
async fn kinds_of(api: &Api, location: &str) -> Vec<String> {
    let events: Value = api
        .get(&format!("{location}/events"), ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["kind"].as_str().map(str::to_owned))
        .collect()
}

/// Submits a queued run as acme; its `Location`.
async fn submit_queued(api: &Api) -> String {
    let r = api
        .post(RUNS, ACME)
        .body(json!({"input": "Move order A-1001.", "mode": "queued"}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    r.headers()["location"].to_str().unwrap().to_owned()
}

const RUNS: &str = "/v1/agents/order_desk/runs";

async fn problem(response: reqwest::Response, status: StatusCode, kind: &str) -> Value {
    assert_eq!(response.status(), status);
    assert_eq!(
        response.headers()["content-type"],
        "application/problem+json"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["type"],
        format!("https://rein.dev/problems/{kind}"),
        "{body}"
    );
    assert_eq!(body["status"], status.as_u16());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_required_and_tenants_see_only_their_runs() {
    let api = start(Options::default()).await;
    let body = json!({"input": "Move order A-1001."}).to_string();
    let r = api
        .http
        .post(format!("{}{RUNS}", api.base))
        .header("content-type", "application/json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    // RFC 6750: the realm, and no error code when no key was presented.
    assert_eq!(r.headers()["www-authenticate"], r#"Bearer realm="rein""#);
    problem(r, StatusCode::UNAUTHORIZED, "unauthorized").await;
    let r = api
        .post(RUNS, "wrong-key")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()["www-authenticate"],
        r#"Bearer realm="rein", error="invalid_token""#
    );
    problem(r, StatusCode::UNAUTHORIZED, "unauthorized").await;

    let r = api.post(RUNS, ACME).body(body).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let run: Value = r.json().await.unwrap();
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(
        location,
        format!("/v1/runs/{}", run["run_id"].as_str().unwrap())
    );

    let mine = api.get(&location, ACME).send().await.unwrap();
    assert_eq!(mine.status(), StatusCode::OK);
    for path in [
        location.clone(),
        format!("{location}/events"),
        format!("{location}/ledger"),
    ] {
        let theirs = api.get(&path, GLOBEX).send().await.unwrap();
        problem(theirs, StatusCode::NOT_FOUND, "not-found").await;
    }
    let ledger: Value = api
        .get(&format!("{location}/ledger"), ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ledger["records"].as_array().unwrap().len(), 2, "{ledger}");
    let missing = api.get("/v1/runs/no-such-run", ACME).send().await.unwrap();
    problem(missing, StatusCode::NOT_FOUND, "not-found").await;
    let unknown = api
        .post("/v1/agents/nobody/runs", ACME)
        .body(json!({"input": "x"}).to_string())
        .send()
        .await
        .unwrap();
    let p = problem(unknown, StatusCode::NOT_FOUND, "not-found").await;
    assert!(
        p["known_agents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a == "order_desk"),
        "{p}"
    );
}

/// The CORS layer sits outside the drain's: a page on a listed origin
/// reads the 503 (and its `Retry-After`) that sends it elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_origin_reads_the_draining_503() {
    let app = "http://app.example:3000";
    let api = start(Options {
        extra: "[server.cors]\nallowed_origins = [\"http://app.example:3000\"]\n",
        ..Options::default()
    })
    .await;
    api.state.drain.begin();
    let r = api
        .post(RUNS, ACME)
        .header("origin", app)
        .body(json!({"input": "Move order A-1001."}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["access-control-allow-origin"], app);
    let exposed = r.headers()["access-control-expose-headers"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(exposed.contains("retry-after"), "{exposed}");
    assert!(r.headers().contains_key("retry-after"));
    problem(r, StatusCode::SERVICE_UNAVAILABLE, "draining").await;
    assert!(api.desk.requests().is_empty(), "nothing ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_structured_400s_and_oversized_ones_413() {
    let api = start(Options {
        body_limit: Some(2048),
        ..Options::default()
    })
    .await;
    let r = api
        .post(RUNS, ACME)
        .body(r#"{"input": 7}"#)
        .send()
        .await
        .unwrap();
    let p = problem(r, StatusCode::BAD_REQUEST, "bad-request").await;
    assert_eq!(p["field"], "/input", "{p}");
    let r = api
        .post(RUNS, ACME)
        .body(r#"{"input": "x", "mode": "later"}"#)
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::BAD_REQUEST, "bad-request").await;
    let big = json!({"input": "x".repeat(4096)}).to_string();
    let r = api.post(RUNS, ACME).body(big).send().await.unwrap();
    problem(r, StatusCode::PAYLOAD_TOO_LARGE, "payload-too-large").await;
    assert!(
        api.store.list_runs(10).await.unwrap().is_empty(),
        "nothing ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_runs_are_accepted_then_driven_and_stream_their_events() {
    let api = start(Options {
        workers: 1,
        ..Options::default()
    })
    .await;
    let r = api
        .post(RUNS, ACME)
        .body(
            json!({"input": "Move order A-1001.", "mode": "queued", "metadata": {"ticket": 7}})
                .to_string(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    let accepted: Value = r.json().await.unwrap();
    assert_eq!(accepted["metadata"]["ticket"], 7);
    assert!(
        matches!(accepted["status"].as_str(), Some("queued" | "running")),
        "{accepted}"
    );

    // The live stream ends with the terminal event.
    let mut sse = api
        .get(&format!("{location}/events"), ACME)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(sse.headers()["content-type"], "text/event-stream");
    let mut text = String::new();
    tokio::time::timeout(Duration::from_secs(20), async {
        while let Some(chunk) = sse.chunk().await.unwrap() {
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .expect("the stream ends with the run");
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds.first(), Some(&"run_started"), "{text}");
    assert_eq!(kinds.last(), Some(&"run_finished"), "{text}");
    let run = api.finished(&location, ACME).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let events: Value = api
        .get(&format!("{location}/events"), ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(events["events"].as_array().unwrap().len(), kinds.len());
    assert_eq!(api.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_runs_cancel_through_the_store_and_terminal_ones_refuse() {
    let api = start(Options::default()).await; // no workers: work stays queued
    let location = submit_queued(&api).await;
    let theirs = api
        .post(&format!("{location}/cancel"), GLOBEX)
        .send()
        .await
        .unwrap();
    problem(theirs, StatusCode::NOT_FOUND, "not-found").await;
    let r = api
        .post(&format!("{location}/cancel"), ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let run: Value = api
        .get(&location, ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "cancelled", "{run}");
    let again = api
        .post(&format!("{location}/cancel"), ACME)
        .send()
        .await
        .unwrap();
    problem(again, StatusCode::CONFLICT, "run-terminal").await;
    let unknown = api.post("/v1/runs/nope/cancel", ACME).send().await.unwrap();
    problem(unknown, StatusCode::NOT_FOUND, "not-found").await;
    assert_eq!(
        api.desk.request_count(UPDATE_DELIVERY_TIME),
        0,
        "a cancelled run never starts"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_keys_follow_the_table_exactly() {
    // The first update takes a while, so a duplicate can arrive meanwhile.
    let api = Arc::new(
        start(Options {
            faults: Some(Faults::none().then(
                UPDATE_DELIVERY_TIME,
                Fault::Delay(Duration::from_millis(800)),
            )),
            ..Options::default()
        })
        .await,
    );
    let body = json!({"input": "Move order A-1001."}).to_string();

    // First request reserves the key and executes.
    let first = {
        let api = api.clone();
        let body = body.clone();
        tokio::spawn(async move {
            api.post(RUNS, ACME)
                .header("Idempotency-Key", "order-1")
                .body(body)
                .send()
                .await
                .unwrap()
        })
    };
    // Same key while still in progress: 409.
    let tenant = TenantId::new("acme").unwrap();
    for _ in 0..400 {
        let held = api
            .store
            .idempotency_records(Some(&tenant), Some(IdempotencyState::InProgress), 10)
            .await
            .unwrap();
        if !held.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = api
        .post(RUNS, ACME)
        .header("Idempotency-Key", "order-1")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::CONFLICT, "idempotency-in-progress").await;

    let first = first.await.unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get("idempotency-replayed").is_none());
    let location = first.headers()["location"].clone();
    let first_body = first.bytes().await.unwrap();

    // Same key, completed: the stored response, replayed.
    let r = api
        .post(RUNS, ACME)
        .header("Idempotency-Key", "order-1")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()["idempotency-replayed"], "true");
    assert_eq!(r.headers()["location"], location);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.bytes().await.unwrap(), first_body);
    assert_eq!(
        api.desk.applied_count(UPDATE_DELIVERY_TIME),
        1,
        "one run, one effect"
    );
    assert_eq!(api.store.list_runs(10).await.unwrap().len(), 1);

    // Another tenant's identical key is its own.
    let r = api
        .post(RUNS, GLOBEX)
        .header("Idempotency-Key", "order-1")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.headers().get("idempotency-replayed").is_none());

    // Same key, different raw body (even equivalent JSON): 422.
    let respaced = json!({"input": "Move order A-1001."})
        .to_string()
        .replace(':', ": ");
    let r = api
        .post(RUNS, ACME)
        .header("Idempotency-Key", "order-1")
        .body(respaced)
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::UNPROCESSABLE_ENTITY, "idempotency-mismatch").await;
    // ... or a different path: 422.
    let r = api
        .post("/v1/agents/order_desk_live/runs", ACME)
        .header("Idempotency-Key", "order-1")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::UNPROCESSABLE_ENTITY, "idempotency-mismatch").await;

    // A key over the limit, or on a streaming request: 400.
    let r = api
        .post(RUNS, ACME)
        .header("Idempotency-Key", "k".repeat(256))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::BAD_REQUEST, "idempotency-key-invalid").await;
    let r = api
        .post(RUNS, ACME)
        .header("Idempotency-Key", "streamed")
        .body(r#"{"input": "x", "stream": true}"#)
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::BAD_REQUEST, "idempotency-stream").await;

    // A failing endpoint releases the reservation: the retry executes again.
    for _ in 0..2 {
        let r = api
            .post(RUNS, ACME)
            .header("Idempotency-Key", "bad-1")
            .body(r#"{"input": 1}"#)
            .send()
            .await
            .unwrap();
        assert!(r.headers().get("idempotency-replayed").is_none());
        problem(r, StatusCode::BAD_REQUEST, "bad-request").await;
    }
    let held = api
        .store
        .idempotency_records(Some(&tenant), None, 10)
        .await
        .unwrap();
    assert_eq!(held.len(), 1, "only the completed key is kept: {held:?}");
    assert_eq!(held[0].state, IdempotencyState::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_while_idempotency_is_disabled_is_501_and_nothing_runs() {
    let api = start(Options {
        idempotency_disabled: true,
        ..Options::default()
    })
    .await;
    let r = api
        .post(RUNS, ACME)
        .header("Idempotency-Key", "order-1")
        .body(json!({"input": "Move order A-1001."}).to_string())
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::NOT_IMPLEMENTED, "idempotency-disabled").await;
    assert!(api.store.list_runs(10).await.unwrap().is_empty());
    assert_eq!(api.desk.requests().len(), 0);
}

/// What the API fuzzer (rein-cli's `tests/api_fuzz.rs`) found: input that
/// was answered 500, or that the OpenAPI document and the server disagreed
/// on. Each is a 4xx, or accepted, as documented.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inputs_the_api_fuzzer_found_are_answered_as_documented() {
    let api = start(Options {
        max_key_length: Some(1024),
        ..Options::default()
    })
    .await;
    let queued = json!({"input": "Move order A-1001.", "mode": "queued"}).to_string();
    // A tab or a space in the key was stored as given, and the store
    // refused the control character: 500.
    for key in ["a\tb", "a b"] {
        let r = api
            .post(RUNS, ACME)
            .header("Idempotency-Key", key)
            .body(queued.clone())
            .send()
            .await
            .unwrap();
        problem(r, StatusCode::BAD_REQUEST, "idempotency-key-invalid").await;
    }
    // A key the config allows (up to 1024) but over the store's old 255
    // bytes: 500.
    let r = api
        .post(RUNS, ACME)
        .header("Idempotency-Key", "k".repeat(300))
        .body(queued.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    // JSON Schema's integer admits 4064.0.
    let r = api
        .post(RUNS, ACME)
        .body(r#"{"input": "x", "mode": "queued", "budgets": {"max_tokens": 4064.0, "max_steps": 3.0}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let r = api
        .post(RUNS, ACME)
        .body(r#"{"input": "x", "budgets": {"max_steps": 2.5}}"#)
        .send()
        .await
        .unwrap();
    let p = problem(r, StatusCode::BAD_REQUEST, "bad-request").await;
    assert_eq!(p["field"], "/budgets/max_steps", "{p}");
    // Cost limits outside [one micro-dollar, 1e12], as documented.
    for usd in ["0.0000001", "1e13"] {
        let r = api
            .post(RUNS, ACME)
            .body(format!(
                r#"{{"input": "x", "budgets": {{"max_cost_usd": {usd}}}}}"#
            ))
            .send()
            .await
            .unwrap();
        let p = problem(r, StatusCode::BAD_REQUEST, "bad-request").await;
        assert_eq!(p["field"], "/budgets/max_cost_usd", "{p}");
    }
    // Metadata is an object, as documented.
    let r = api
        .post(RUNS, ACME)
        .body(r#"{"input": "x", "metadata": "note"}"#)
        .send()
        .await
        .unwrap();
    let p = problem(r, StatusCode::BAD_REQUEST, "bad-request").await;
    assert_eq!(p["field"], "/metadata", "{p}");
    let r = api
        .post(RUNS, ACME)
        .body(r#"{"input": "x", "mode": "queued", "metadata": {"ticket": 7}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let view: Value = r.json().await.unwrap();
    assert_eq!(view["metadata"], json!({"ticket": 7}));
    assert_eq!(view["report"], Value::Null, "documented as nullable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_routers_own_errors_are_problems_too() {
    let api = start(Options::default()).await;
    // A segment that is not UTF-8 names no run and no agent (it was a
    // plain-text 400).
    let r = api.get("/v1/runs/%FF", ACME).send().await.unwrap();
    problem(r, StatusCode::NOT_FOUND, "not-found").await;
    let r = api
        .post("/v1/agents/%FF/runs", ACME)
        .body(r#"{"input": "x"}"#)
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::NOT_FOUND, "not-found").await;
    // A method the route does not have (it was an empty 405).
    let r = api
        .http
        .delete(format!("{}/v1/runs/x", api.base))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["allow"], "GET,HEAD");
    let p = problem(r, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;
    assert!(p["detail"].as_str().unwrap().contains("DELETE"), "{p}");
    // A POST to a route without one is 405 too, whatever its body (the
    // fuzzer found it answered 415).
    let r = api
        .http
        .post(format!("{}/healthz", api.base))
        .send()
        .await
        .unwrap();
    problem(r, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;
    // Router-level errors on the gateway carry OpenAI's member.
    let r = api
        .http
        .get(format!("{}/v1/chat/completions", api.base))
        .send()
        .await
        .unwrap();
    let p = problem(r, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;
    assert_eq!(p["error"]["type"], "invalid_request_error", "{p}");
    let r = api
        .http
        .post(format!("{}/v1/chat/completions", api.base))
        .header("content-type", "text/plain")
        .body("hi")
        .send()
        .await
        .unwrap();
    let p = problem(
        r,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "unsupported-media-type",
    )
    .await;
    assert_eq!(p["error"]["code"], "unsupported_media_type", "{p}");
    assert!(
        p["error"]["message"]
            .as_str()
            .unwrap()
            .contains("text/plain"),
        "{p}"
    );
    let r = api
        .post("/v1/chat/completions", "wrong-key")
        .body("{}")
        .send()
        .await
        .unwrap();
    let p = problem(r, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(p["error"]["type"], "authentication_error", "{p}");
    // A cancel or resume body other than nothing or `{}` is a 400 with a
    // pointer to the member.
    let r = api
        .post("/v1/runs/x/cancel", ACME)
        .body(r#"{"force": true}"#)
        .send()
        .await
        .unwrap();
    let p = problem(r, StatusCode::BAD_REQUEST, "bad-request").await;
    assert_eq!(p["field"], "/force", "{p}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_says_what_the_server_does() {
    let api = start(Options {
        max_key_length: Some(64),
        // acme is an operator: it may read the config.
        operators: &["acme"],
        ..Options::default()
    })
    .await;
    let doc: Value = api
        .http
        .get(format!("{}/openapi.json", api.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let create = &doc["paths"]["/v1/agents/{name}/runs"]["post"];
    let key = create["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "Idempotency-Key")
        .unwrap();
    assert_eq!(key["in"], "header");
    assert_eq!(key["required"], false);
    assert_eq!(key["schema"]["type"], "string", "{key}");
    assert_eq!(key["schema"]["minLength"], 1);
    assert_eq!(key["schema"]["maxLength"], 64, "from the config: {key}");
    // `after` is a query parameter, not a path one.
    let after = doc["paths"]["/v1/runs/{id}/events"]["get"]["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "after")
        .unwrap();
    assert_eq!(after["in"], "query");
    assert_eq!(after["required"], false);
    // Every error is problem+json (Anthropic's error object on its
    // Messages API routes, either on the models routes), every authenticated operation can be 401.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, response) in op["responses"].as_object().unwrap() {
                if !(status.starts_with('4') || status.starts_with('5')) {
                    continue;
                }
                if path.starts_with("/v1/messages") {
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/AnthropicError",
                        "{method} {path} {status}: {response}"
                    );
                    assert!(response["content"]["application/problem+json"].is_null());
                } else if path.starts_with("/v1/models") {
                    // Problems to an OpenAI caller, Anthropic's error
                    // object to an Anthropic one.
                    assert!(
                        response["content"]["application/problem+json"].is_object(),
                        "{method} {path} {status}: {response}"
                    );
                    assert_eq!(
                        response["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/AnthropicError",
                        "{method} {path} {status}: {response}"
                    );
                } else {
                    assert!(
                        response["content"]["application/problem+json"].is_object(),
                        "{method} {path} {status}: {response}"
                    );
                    assert!(response["content"]["application/json"].is_null());
                }
            }
            if op["security"].is_array() {
                assert!(
                    op["responses"]["401"].is_object(),
                    "{method} {path} documents 401"
                );
            }
        }
    }
    // What the front door may answer before a handler runs, on every
    // operation; and every POST takes JSON only, with a required body.
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for status in ["400", "403", "421"] {
                assert!(
                    op["responses"][status].is_object(),
                    "{method} {path} documents {status}"
                );
            }
            if method == "post" {
                assert!(
                    op["responses"]["415"].is_object(),
                    "{method} {path} documents 415"
                );
                let body = &op["requestBody"];
                assert_eq!(body["required"], true, "{method} {path}: {body}");
                let types: Vec<&String> = body["content"].as_object().unwrap().keys().collect();
                assert_eq!(types, ["application/json"], "{method} {path}");
            }
        }
    }
    let run = &doc["components"]["schemas"]["RunView"]["properties"];
    assert_eq!(run["report"]["type"], json!(["object", "null"]));
    assert_eq!(run["consumed"]["type"], json!(["object", "null"]));

    // Every member a real answer has is in the document: a submission's
    // answer (with its metadata) and the run read back.
    let accepted = api
        .post(RUNS, ACME)
        .body(json!({"input": "Move order A-1001.", "metadata": {"ticket": 7}}).to_string())
        .send()
        .await
        .unwrap();
    let location = accepted.headers()["location"].to_str().unwrap().to_owned();
    let accepted: Value = accepted.json().await.unwrap();
    let ended = api.finished(&location, ACME).await;
    for answer in [&accepted, &ended] {
        for member in answer.as_object().unwrap().keys() {
            assert!(
                run.get(member).is_some(),
                "`{member}` is answered but not in RunView's schema: {answer}"
            );
        }
    }
    assert!(accepted.get("metadata").is_some() && ended.get("metadata").is_none());
    for member in ["metadata", "handed_on", "awaiting_approval"] {
        assert!(run.get(member).is_some(), "{member} in {run}");
    }

    // The other typed answers, member by member, nested ones too.
    let run_path = location.trim_start_matches(&api.base).to_owned();
    for (path, schema) in [
        ("/v1/config".to_owned(), "ConfigView"),
        ("/v1/live".to_owned(), "Live"),
        (format!("{run_path}/events"), "EventList"),
        (format!("{run_path}/ledger"), "LedgerList"),
        ("/v1/stats?buckets=2".to_owned(), "Stats"),
        ("/v1/breakers".to_owned(), "BreakerList"),
        ("/v1/runs".to_owned(), "RunList"),
    ] {
        let answer = api.get(&path, ACME).send().await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{path}");
        let answer: Value = answer.json().await.unwrap();
        every_member_documented(&doc, schema, &answer, &path);
    }
    // The config is the process's: globex is no operator.
    let refused = api.get("/v1/config", GLOBEX).send().await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let refused: Value = refused.json().await.unwrap();
    assert!(
        refused["detail"]
            .as_str()
            .unwrap()
            .contains("server.metrics_tenants lists acme"),
        "{refused}"
    );
}

/// Fails unless every member of `value`, nested objects' included, is a
/// property of `schema` (a component of `doc`) where it is answered.
fn every_member_documented(doc: &Value, schema: &str, value: &Value, at: &str) {
    /// The schema `schema` names: references followed, `T | null`
    /// (`oneOf [null, T]`) read as `T`, and an `allOf` (a flattened
    /// member) read as the union of its parts' properties.
    fn resolve(doc: &Value, schema: &Value, at: &str) -> Value {
        let mut schema = schema;
        while let Some(name) = schema["$ref"].as_str() {
            let name = name.trim_start_matches("#/components/schemas/");
            schema = &doc["components"]["schemas"][name];
            assert!(!schema.is_null(), "{at}: no component {name}");
        }
        if let Some(one) = schema["oneOf"].as_array() {
            if let Some(typed) = one.iter().find(|s| s["type"] != "null") {
                return resolve(doc, typed, at);
            }
        }
        if let Some(parts) = schema["allOf"].as_array() {
            let mut properties = serde_json::Map::new();
            for part in parts {
                if let Some(own) = resolve(doc, part, at)["properties"].as_object() {
                    properties.extend(own.clone());
                }
            }
            return json!({"type": "object", "properties": properties});
        }
        schema.clone()
    }
    fn walk(doc: &Value, schema: &Value, value: &Value, at: &str) {
        let schema = &resolve(doc, schema, at);
        match value {
            Value::Object(members) => {
                let Some(properties) = schema["properties"].as_object() else {
                    // A map (`additionalProperties`) or a free object.
                    if let Some(each) = schema.get("additionalProperties").filter(|e| e.is_object())
                    {
                        for (key, member) in members {
                            walk(doc, each, member, &format!("{at}.{key}"));
                        }
                    }
                    return;
                };
                for (key, member) in members {
                    let Some(property) = properties.get(key) else {
                        panic!("`{at}.{key}` is answered but not documented: {schema}");
                    };
                    walk(doc, property, member, &format!("{at}.{key}"));
                }
            }
            Value::Array(items) => {
                if let Some(each) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        walk(doc, each, item, &format!("{at}[{i}]"));
                    }
                }
            }
            _ => {}
        }
    }
    let root = json!({"$ref": format!("#/components/schemas/{schema}")});
    walk(doc, &root, value, at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_the_openapi_document() {
    let api = start(Options::default()).await;
    assert_eq!(
        api.http
            .get(format!("{}/healthz", api.base))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    assert_eq!(
        api.http
            .get(format!("{}/readyz", api.base))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
    let doc: Value = api
        .http
        .get(format!("{}/openapi.json", api.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for path in [
        "/v1/agents/{name}/runs",
        "/v1/runs/{id}",
        "/v1/runs/{id}/events",
        "/v1/runs/{id}/cancel",
        "/v1/runs/{id}/ledger",
        "/v1/runs/{id}/handoff",
        "/v1/runs/{id}/resume",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} documented");
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    let nowhere = api
        .http
        .get(format!("{}/v2/nothing", api.base))
        .send()
        .await
        .unwrap();
    problem(nowhere, StatusCode::NOT_FOUND, "no-route").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_run_is_cancelled_by_its_owner_and_settles() {
    // The email is slow: the run is cancelled while it is in flight, after
    // the delivery update landed.
    let api = Arc::new(
        start(Options {
            faults: Some(Faults::none().then(
                rein_testkit::order_desk::SEND_EMAIL,
                Fault::Delay(Duration::from_secs(5)),
            )),
            ..Options::default()
        })
        .await,
    );
    let submitted = {
        let api = api.clone();
        tokio::spawn(async move {
            api.post(RUNS, ACME)
                .body(json!({"input": "Move order A-1001."}).to_string())
                .send()
                .await
                .unwrap()
        })
    };
    // Wait until the email is in flight at the desk.
    let mut run_id = None;
    for _ in 0..400 {
        if api
            .desk
            .requests()
            .iter()
            .any(|r| r.tool == rein_testkit::order_desk::SEND_EMAIL)
        {
            run_id = api
                .store
                .list_runs(1)
                .await
                .unwrap()
                .first()
                .map(|r| r.run_id.to_string());
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let run_id = run_id.expect("the email was sent");
    let other = api
        .post(&format!("/v1/runs/{run_id}/cancel"), GLOBEX)
        .send()
        .await
        .unwrap();
    problem(other, StatusCode::NOT_FOUND, "not-found").await;
    let r = api
        .post(&format!("/v1/runs/{run_id}/cancel"), ACME)
        .send()
        .await
        .unwrap();
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, StatusCode::ACCEPTED, "{text}");
    let answered = tokio::time::timeout(Duration::from_secs(4), submitted)
        .await
        .expect("the cancelled run ends before the slow email would have")
        .unwrap();
    let run: Value = answered.json().await.unwrap();
    // The email may have been sent (it was in flight): the run cannot
    // claim the world is as before, so it hands off; it never succeeds.
    assert!(
        matches!(run["status"].as_str(), Some("cancelled" | "handed_off")),
        "{run}"
    );
    let kinds = kinds_of(&api, &format!("/v1/runs/{run_id}")).await;
    assert!(kinds.iter().any(|k| k == "run_finished"), "{kinds:?}");
    let again = api
        .post(&format!("/v1/runs/{run_id}/cancel"), ACME)
        .send()
        .await
        .unwrap();
    problem(again, StatusCode::CONFLICT, "run-terminal").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_driven_elsewhere_is_cancelled_through_the_store() {
    let api = start(Options::default()).await;
    // A run another process is driving: recorded running, not live here.
    let run_id = rein_core::RunId::new("driven-elsewhere").unwrap();
    api.store
        .create_run(rein_store::NewRun {
            run_id: run_id.clone(),
            tenant: TenantId::new("acme").unwrap(),
            agent: "order_desk".into(),
            input: "x".into(),
            parent_run_id: None,
            budget: json!({}),
            created_at_ms: Timestamp::from_millis(1),
            trace_parent: None,
        })
        .await
        .unwrap();
    api.store
        .set_run_status(
            &run_id,
            rein_store::RunStatus::Running,
            None,
            Timestamp::from_millis(2),
        )
        .await
        .unwrap();
    // Its claim, as the driving process wrote it: that process's pid and
    // host, and its public node id.
    let owner = "pid:4242+17@db-host-7#n0de1.t0ken";
    let now = rein_server::lifecycle::recovery::now_ms();
    api.store
        .acquire_lease(rein_store::Lease {
            lease_id: format!("run:{run_id}"),
            run_id: run_id.clone(),
            intent_id: None,
            kind: rein_store::LeaseKind::Run,
            pgid: None,
            path: None,
            owner: owner.into(),
            acquired_at_ms: now,
            expires_at_ms: now + Duration::from_millis(600_000),
        })
        .await
        .unwrap();
    let r = api
        .post("/v1/runs/driven-elsewhere/cancel", ACME)
        .send()
        .await
        .unwrap();
    // Taken for the driving process: recorded in the store, where that
    // process reads it at its next claim renewal.
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    let p: serde_json::Value = r.json().await.unwrap();
    assert_eq!(p["status"], "cancelling", "{p}");
    assert_eq!(p["delivery"], "store", "{p}");
    // The driving node by its opaque id; never its PID or host.
    assert_eq!(p["driving_node"], "n0de1", "{p}");
    // Value by value, nested ones too: the answer's timestamps are numbers
    // whose digits may hold "4242" by chance, so a number leaks only if it
    // is the PID.
    fn leaks(value: &serde_json::Value) -> bool {
        match value {
            serde_json::Value::String(s) => s.contains("4242") || s.contains("db-host"),
            serde_json::Value::Number(n) => n.as_u64() == Some(4242),
            serde_json::Value::Array(items) => items.iter().any(leaks),
            serde_json::Value::Object(fields) => fields.values().any(leaks),
            _ => false,
        }
    }
    assert!(!leaks(&p), "the answer names the driving process: {p}");
    let stored = api.store.cancel_request(&run_id).await.unwrap();
    assert!(stored.is_some(), "the request must be durable");
    // A resume is refused the same way: the run's live owner is elsewhere.
    let r = api
        .post("/v1/runs/driven-elsewhere/resume", ACME)
        .send()
        .await
        .unwrap();
    let p = problem(r, StatusCode::CONFLICT, "not-resumable").await;
    let detail = p["detail"].as_str().unwrap();
    assert!(detail.contains("node n0de1"), "{p}");
    assert!(
        !detail.contains("4242") && !detail.contains("db-host"),
        "{p}"
    );
}

/// Records a queued run whose worker died mid-way: running, started by a
/// queue worker, with no claim left.
async fn abandoned(store: &dyn Store, id: &str) -> rein_core::RunId {
    let run_id = rein_core::RunId::new(id).unwrap();
    store
        .create_run(rein_store::NewRun {
            run_id: run_id.clone(),
            tenant: TenantId::new("acme").unwrap(),
            agent: "order_desk".into(),
            input: "Move order A-1001.".into(),
            parent_run_id: None,
            budget: json!({}),
            created_at_ms: Timestamp::from_millis(1),
            trace_parent: None,
        })
        .await
        .unwrap();
    let started = rein_core::Event {
        run_id: run_id.clone(),
        seq: 0,
        step: 0,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms: Timestamp::from_millis(2),
        data: run_started(true),
    };
    store
        .commit_step(
            &run_id,
            rein_store::StepCommit {
                status: Some(rein_store::StatusChange {
                    status: rein_store::RunStatus::Running,
                    report: None,
                    at_ms: Timestamp::from_millis(2),
                }),
                events: vec![started],
                ..rein_store::StepCommit::default()
            },
        )
        .await
        .unwrap();
    run_id
}

/// The `run_started` of an `order_desk` run, queued first or not.
fn run_started(enqueued: bool) -> rein_core::EventData {
    let data = json!({
        "agent": "order_desk", "model": "m", "provider": "p", "tools": [], "input": "x",
        "enqueued": enqueued,
        "budget": {"wall_clock": {"secs": 30, "nanos": 0}, "steps": null, "tokens": null,
                   "cost": null},
    });
    rein_core::EventData::decode(rein_core::EventKind::RunStarted, data).unwrap()
}

/// A run `rein run` stopped on a signal, kept for the user's `rein
/// resume`: running, interrupted for its caller, no claim; created before
/// any [`abandoned`] run.
async fn kept_for_caller(store: &dyn Store, id: &str) -> rein_core::RunId {
    let run_id = rein_core::RunId::new(id).unwrap();
    store
        .create_run(rein_store::NewRun {
            run_id: run_id.clone(),
            tenant: TenantId::new("acme").unwrap(),
            agent: "order_desk".into(),
            input: "Move order A-1001.".into(),
            parent_run_id: None,
            budget: json!({}),
            created_at_ms: Timestamp::from_millis(0),
            trace_parent: None,
        })
        .await
        .unwrap();
    let event = |seq, kind, data| rein_core::Event {
        run_id: run_id.clone(),
        seq,
        step: 0,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms: Timestamp::from_millis(1),
        data: rein_core::EventData::decode(kind, data).unwrap(),
    };
    store
        .commit_step(
            &run_id,
            rein_store::StepCommit {
                status: Some(rein_store::StatusChange {
                    status: rein_store::RunStatus::Running,
                    report: None,
                    at_ms: Timestamp::from_millis(1),
                }),
                events: vec![
                    event(
                        0,
                        rein_core::EventKind::RunStarted,
                        run_started(false).to_value().unwrap(),
                    ),
                    event(
                        0,
                        rein_core::EventKind::RunInterrupted,
                        json!({"reason": "its process is stopping", "handed_on": false,
                               "continue_with": "caller", "resumable": true,
                               "completed_steps": 0}),
                    ),
                ],
                ..rein_store::StepCommit::default()
            },
        )
        .await
        .unwrap();
    run_id
}

/// Review item 7: the takeover looks at every running run in turn, not
/// only the 16 oldest. Twenty older runs it must pass over (stopped for
/// their caller) do not keep it from taking over abandoned queued work;
/// and it leaves those twenty alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn takeover_is_not_stalled_by_many_older_runs_it_must_pass_over() {
    let api = start(Options {
        workers: 1,
        kept_for_caller: 20,
        abandoned: vec!["abandoned-after-many"],
        ..Options::default()
    })
    .await;
    let run = api.finished("/v1/runs/abandoned-after-many", ACME).await;
    assert_eq!(run["status"], "succeeded", "taken over and finished: {run}");
    for n in 0..20 {
        let kept: Value = api
            .get(&format!("/v1/runs/kept-{n:02}"), ACME)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(kept["status"], "running", "{kept}");
    }
    let kinds = kinds_of(&api, "/v1/runs/kept-00").await;
    assert!(!kinds.iter().any(|k| k == "run_resumed"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_queued_work_is_taken_over_or_dead_lettered() {
    let api = start(Options {
        workers: 1,
        abandoned: vec!["abandoned-once"],
        ..Options::default()
    })
    .await;
    let run = api.finished("/v1/runs/abandoned-once", ACME).await;
    assert_eq!(run["status"], "succeeded", "taken over and finished: {run}");
    assert!(run["report"]["resume"].is_object(), "{run}");
    assert_eq!(api.desk.applied_count(UPDATE_DELIVERY_TIME), 1);

    let api = start(Options {
        workers: 1,
        max_attempts: Some(1),
        abandoned: vec!["abandoned-for-good"],
        ..Options::default()
    })
    .await;
    let run = api.finished("/v1/runs/abandoned-for-good", ACME).await;
    assert_eq!(run["status"], "failed", "{run}");
    let events: Value = api
        .get("/v1/runs/abandoned-for-good/events", ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let failed = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "run_failed")
        .expect("a run_failed event");
    assert_eq!(failed["data"]["error_type"], "dead_letter", "{failed}");
    // Its live stream ends too, even resumed past its last event.
    let last = events["events"].as_array().unwrap().last().unwrap()["seq"].clone();
    for after in [json!(0), last] {
        let mut sse = api
            .get("/v1/runs/abandoned-for-good/events", ACME)
            .header("accept", "text/event-stream")
            .header("last-event-id", after.to_string())
            .send()
            .await
            .unwrap();
        tokio::time::timeout(Duration::from_secs(10), async {
            while sse.chunk().await.unwrap().is_some() {}
        })
        .await
        .expect("the stream of an ended run ends");
    }
    assert_eq!(
        api.desk.requests().len(),
        0,
        "a dead letter is not run again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_queued_work_never_races_the_worker_starting_it() {
    let api = start(Options {
        workers: 2,
        ..Options::default()
    })
    .await;
    let mut locations = Vec::new();
    for _ in 0..30 {
        let location = submit_queued(&api).await;
        let c = api
            .post(&format!("{location}/cancel"), ACME)
            .send()
            .await
            .unwrap();
        assert!(
            matches!(c.status().as_u16(), 202 | 409),
            "{}",
            c.text().await.unwrap()
        );
        locations.push(location);
    }
    let mut started = 0;
    for location in &locations {
        let run = api.finished(location, ACME).await;
        let id = run["run_id"].as_str().unwrap();
        if run["report"]["steps"].as_u64().unwrap_or(0) > 0 {
            started += 1;
        }
        let never_started = run["report"]["summary"]
            .as_str()
            .is_some_and(|s| s.contains("cancelled while queued"));
        if never_started {
            // It never started: nothing ran, no event after its end.
            assert!(
                api.desk
                    .requests()
                    .iter()
                    .all(|r| r.headers.run_id.as_deref() != Some(id)),
                "run {id} says it never started, yet it called tools"
            );
            assert_eq!(kinds_of(&api, location).await, ["run_finished"], "run {id}");
        }
    }
    eprintln!(
        "{started} of {} runs started before their cancellation",
        locations.len()
    );
}

/// Issue 18, item 4: `GET /v1/runs` pages through 1,000 runs of two
/// tenants with its cursor: each tenant sees every one of its own runs
/// exactly once, newest first, and none of the other's, however the two
/// interleave in time (pairs created in the same millisecond); filters
/// narrow the pages; and every parameter error is a 400 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_pages_a_thousand_runs_per_tenant_never_across_tenants() {
    let api = start(Options::default()).await;
    let tenants = [("acme", ACME), ("globex", GLOBEX)];
    let mut created: Vec<(String, String, u64)> = Vec::new();
    for n in 0..1_000u64 {
        let (tenant, _) = tenants[(n % 2) as usize];
        let run_id = format!("listed-{n:04}");
        let at = 1_700_000_000_000 + n / 4;
        api.store
            .create_run(rein_store::NewRun {
                run_id: rein_core::RunId::new(run_id.clone()).unwrap(),
                tenant: TenantId::new(tenant).unwrap(),
                agent: if n % 3 == 0 {
                    "order_desk_live"
                } else {
                    "order_desk"
                }
                .into(),
                input: "Move order A-1001.".into(),
                parent_run_id: None,
                budget: json!({}),
                created_at_ms: Timestamp::from_millis(at),
                trace_parent: None,
            })
            .await
            .unwrap();
        if n % 5 == 0 {
            api.store
                .set_run_status(
                    &rein_core::RunId::new(run_id.clone()).unwrap(),
                    rein_store::RunStatus::Finished(rein_core::Outcome::Succeeded),
                    None,
                    Timestamp::from_millis(at + 1),
                )
                .await
                .unwrap();
        }
        created.push((tenant.to_owned(), run_id, at));
    }

    /// Every page of `query`, as `key`; the runs in order and the number of
    /// pages.
    async fn pages(api: &Api, key: &str, query: &str) -> (Vec<Value>, usize) {
        let (mut runs, mut count, mut cursor) = (Vec::new(), 0, None::<String>);
        loop {
            let url = match &cursor {
                Some(c) => format!("/v1/runs?{query}&cursor={c}"),
                None => format!("/v1/runs?{query}"),
            };
            let r = api.get(&url, key).send().await.unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{url}");
            let page: Value = r.json().await.unwrap();
            count += 1;
            runs.extend(page["runs"].as_array().unwrap().iter().cloned());
            match page["next_cursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return (runs, count),
            }
            assert!(count < 1_000, "the listing never ends");
        }
    }

    for (tenant, key) in tenants {
        let (runs, count) = pages(&api, key, "limit=37").await;
        let mut expected: Vec<&(String, String, u64)> =
            created.iter().filter(|(t, _, _)| t == tenant).collect();
        expected.sort_by(|a, b| (b.2, &b.1).cmp(&(a.2, &a.1)));
        let ids: Vec<&str> = runs.iter().map(|r| r["run_id"].as_str().unwrap()).collect();
        assert_eq!(
            ids,
            expected
                .iter()
                .map(|(_, id, _)| id.as_str())
                .collect::<Vec<_>>(),
            "{tenant}: every own run exactly once, newest first"
        );
        assert_eq!(count, 500_usize.div_ceil(37), "{tenant}: full pages of 37");
        assert!(runs.iter().all(|r| r["tenant"] == tenant), "{tenant}");
        let first = &runs[0];
        assert!(
            matches!(
                first["agent"].as_str(),
                Some("order_desk" | "order_desk_live")
            ),
            "{first}"
        );
        assert!(
            first["created_at_ms"].as_u64().is_some() && first["updated_at_ms"].as_u64().is_some()
        );

        // Filters, paged with the default limit.
        let (done, _) = pages(&api, key, "status=succeeded").await;
        assert_eq!(done.len(), 100, "{tenant}: one in five ended");
        assert!(
            done.iter()
                .all(|r| r["status"] == "succeeded" && r["outcome"] == "succeeded")
        );
        let (queued, _) = pages(&api, key, "status=queued&agent=order_desk_live").await;
        let want = created
            .iter()
            .enumerate()
            .filter(|(n, (t, _, _))| t == tenant && n % 3 == 0 && n % 5 != 0)
            .count();
        assert_eq!(queued.len(), want, "{tenant}: queued live-agent runs");
        assert!(queued.iter().all(|r| r["outcome"].is_null()));
        let (window, _) = pages(
            &api,
            key,
            "created_after=1700000000010&created_before=1700000000020&limit=500",
        )
        .await;
        assert_eq!(
            window.len(),
            9 * 2,
            "{tenant}: 9 ms of 4 runs, half of them its own"
        );
    }

    // A cursor only positions: another tenant's cursor shows nothing of
    // theirs.
    let first: Value = api
        .get("/v1/runs?limit=3", ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let cursor = first["next_cursor"].as_str().unwrap();
    let theirs: Value = api
        .get(&format!("/v1/runs?limit=500&cursor={cursor}"), GLOBEX)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        theirs["runs"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["tenant"] == "globex")
    );

    for (query, parameter) in [
        ("limit=0", "limit"),
        ("limit=501", "limit"),
        ("status=paused", "status"),
        ("agent=", "agent"),
        ("created_after=yesterday", "created_after"),
        ("created_before=-5", "created_before"),
        ("cursor=garbage", "cursor"),
        ("stauts=running", "stauts"),
        ("limit=5&limit=6", "limit"),
    ] {
        let r = api
            .get(&format!("/v1/runs?{query}"), ACME)
            .send()
            .await
            .unwrap();
        let body = problem(r, StatusCode::BAD_REQUEST, "bad-request").await;
        assert_eq!(body["parameter"], parameter, "{query}: {body}");
    }
    let anonymous = api
        .http
        .get(format!("{}/v1/runs", api.base))
        .send()
        .await
        .unwrap();
    problem(anonymous, StatusCode::UNAUTHORIZED, "unauthorized").await;
}

/// Issue 14: a run whose checkpoint cannot be decoded is not resumed with
/// a default in its place; `POST /v1/runs/{id}/resume` says which field
/// was wrong, and the run is left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_from_a_corrupted_checkpoint_is_refused_naming_the_field() {
    let api = start(Options::default()).await;
    let run_id = kept_for_caller(api.store.as_ref(), "corrupted-checkpoint").await;
    api.store
        .commit_step(
            &run_id,
            rein_store::StepCommit {
                checkpoint: Some(rein_store::Checkpoint {
                    run_id: run_id.clone(),
                    step: 1,
                    messages: json!([{"role": "user", "content": "Move order A-1001."}]),
                    completed_intents: vec![],
                    consumed: rein_core::deadline::Usage::default(),
                    elapsed_ms: 10,
                    state: json!({"calls": "not a list", "facts": [], "tools_tried": [],
                                  "provider_calls": 1}),
                    at_ms: Timestamp::from_millis(2),
                }),
                ..rein_store::StepCommit::default()
            },
        )
        .await
        .unwrap();
    let r = api
        .post("/v1/runs/corrupted-checkpoint/resume", ACME)
        .send()
        .await
        .unwrap();
    let p = problem(r, StatusCode::CONFLICT, "not-resumable").await;
    let detail = p["detail"].as_str().unwrap();
    assert!(
        detail.contains("its checkpoint of step 1 cannot be decoded: `state.calls`"),
        "{p}"
    );
    let run: Value = api
        .get("/v1/runs/corrupted-checkpoint", ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "running", "left as it was: {run}");
    assert_eq!(api.desk.request_count(UPDATE_DELIVERY_TIME), 0);
}

/// Two model bindings beside the example's agents: what `GET /v1/models`
/// lists.
const MODELS: &str = r#"
[models.chat]
provider = "mock"
model = "gpt-4o-mini"

[models.alpha]
provider = "replay"
model = "demo"
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_models_are_the_bindings_in_the_caller_s_shape() {
    let api = start(Options {
        extra: MODELS,
        ..Options::default()
    })
    .await;
    // OpenAI's list, by id, to a bearer caller.
    let r = api.get("/v1/models", ACME).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let id = r.headers()["request-id"].clone();
    assert_eq!(r.headers()["x-request-id"], id, "the same id twice");
    let list: Value = r.json().await.unwrap();
    assert_eq!(list["object"], "list", "{list}");
    let data = list["data"].as_array().unwrap();
    let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["alpha", "chat"]);
    assert_eq!(data[1]["object"], "model");
    assert_eq!(data[1]["owned_by"], "mock");
    assert!(
        data[1]["created"].as_u64().unwrap() > 1_700_000_000,
        "{list}"
    );
    let one: Value = api
        .get("/v1/models/chat", ACME)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one, data[1]);

    // Anthropic's page to a caller with its headers.
    let anthropic = |path: &str| {
        api.http
            .get(format!("{}{path}", api.base))
            .header("x-api-key", ACME)
            .header("anthropic-version", "2023-06-01")
    };
    let page: Value = anthropic("/v1/models")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(page["has_more"], false, "{page}");
    assert_eq!(page["first_id"], "alpha");
    assert_eq!(page["last_id"], "chat");
    let chat = &page["data"][1];
    assert_eq!(chat["type"], "model");
    assert_eq!(chat["id"], "chat");
    assert_eq!(chat["display_name"], "chat (mock/gpt-4o-mini)");
    let created = chat["created_at"].as_str().unwrap();
    assert!(
        created.len() == 20 && created.ends_with('Z') && created.as_bytes()[10] == b'T',
        "{created}"
    );
    let first: Value = anthropic("/v1/models?limit=1")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(first["has_more"], true, "{first}");
    assert_eq!(first["last_id"], "alpha");
    let next: Value = anthropic("/v1/models?limit=1&after_id=alpha")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(next["data"][0]["id"], "chat", "{next}");
    assert_eq!(next["has_more"], false);

    // An unknown binding: 404 in each caller's shape, naming the known.
    let r = api.get("/v1/models/nope", ACME).send().await.unwrap();
    let p = problem(r, StatusCode::NOT_FOUND, "model-not-found").await;
    assert_eq!(p["error"]["code"], "model_not_found", "{p}");
    assert_eq!(p["error"]["param"], "model");
    let r = anthropic("/v1/models/nope").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.headers()["content-type"], "application/json");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], "not_found_error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("alpha, chat"),
        "{e}"
    );
    // The same keys as every gateway route; a bad page is a 400.
    let r = api.get("/v1/models", "wrong-key").send().await.unwrap();
    let p = problem(r, StatusCode::UNAUTHORIZED, "unauthorized").await;
    assert_eq!(p["error"]["type"], "authentication_error", "{p}");
    let r = anthropic("/v1/models?limit=0").send().await.unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_gateway_paths_answer_in_the_caller_s_wire_format() {
    let api = start(Options::default()).await;
    // An OpenAI client's call of a path rein does not serve.
    let r = api
        .post("/v1/moderations", ACME)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert!(r.headers().contains_key("x-request-id"));
    let p = problem(r, StatusCode::NOT_FOUND, "no-route").await;
    let message = p["error"]["message"].as_str().unwrap();
    assert!(message.contains("POST /v1/moderations"), "{p}");
    assert_eq!(p["error"]["type"], "not_found_error");
    assert_eq!(p["error"]["code"], "no_route");
    assert!(p["error"]["param"].is_null());
    // An Anthropic client's.
    let r = api
        .http
        .post(format!("{}/v1/messages/batches", api.base))
        .header("x-api-key", ACME)
        .header("anthropic-version", "2023-06-01")
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(r.headers()["content-type"], "application/json");
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["type"], "error", "{e}");
    assert_eq!(e["error"]["type"], "not_found_error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("/v1/messages/batches"),
        "{e}"
    );
    // A 405 on a path both formats serve, in each shape, `Allow` kept.
    let r = api
        .post("/v1/models", ACME)
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["allow"], "GET,HEAD");
    let p = problem(r, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed").await;
    assert_eq!(p["error"]["type"], "invalid_request_error", "{p}");
    let r = api
        .http
        .delete(format!("{}/v1/models/chat", api.base))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::METHOD_NOT_ALLOWED);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
    // rein's own API keeps plain problems, without x-request-id.
    let r = api
        .http
        .get(format!("{}/v1/runs/x/nope", api.base))
        .header("anthropic-version", "2023-06-01")
        .send()
        .await
        .unwrap();
    assert!(!r.headers().contains_key("x-request-id"));
    let p = problem(r, StatusCode::NOT_FOUND, "no-route").await;
    assert!(p["error"].is_null(), "{p}");
}

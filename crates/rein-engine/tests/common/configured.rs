//! Processes that run the agent `desk` of a `rein.toml` the test writes
//! (the observed-latency tests, `latency.rs` and `latency_scale.rs`): each
//! process its own store handle on a shared SQLite file and its own engine,
//! the tools at the order desk (`ORDER_DESK_URL`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rein_core::event::LatencyDegraded;
use rein_core::{Event, EventData, Outcome};
use rein_engine::bind::{bind_agent, process_env};
use rein_engine::config::{CompiledSchemas, Loader, Registry};
use rein_engine::run::{Engine, Observer, RunRequest};
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::OrderDesk;
use serde_json::{Value, json};

use super::{answer, pause_safe};

/// Writes `config` as `rein.toml` into `dir`, beside the `script.json` its
/// scripted provider reads: `turns`, then the answer; the config's path.
pub fn write_config(dir: &Path, config: &str, mut turns: Vec<Value>) -> PathBuf {
    turns.push(answer("Looked them up."));
    std::fs::write(
        dir.join("script.json"),
        json!({ "turns": turns }).to_string(),
    )
    .unwrap();
    let path = dir.join("rein.toml");
    std::fs::write(&path, config).unwrap();
    path
}

/// The registry of the config at `path`, its tools at `desk`.
pub fn registry(path: &Path, desk: &OrderDesk) -> Registry {
    let url = desk.base_url().to_owned();
    Loader::with_env(move |name| (name == "ORDER_DESK_URL").then(|| url.clone()))
        .load(path)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// One process: its own store handle on the shared file `db`, its engine.
pub fn engine(db: &Path, registry: &Registry) -> Engine {
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(db).unwrap());
    let store: Arc<dyn Store> = Arc::new(pause_safe(sqlite));
    let client = rein_engine::run::http_client().unwrap();
    Engine::builder(store)
        .rng_seed(7)
        .registry(registry, &client, process_env())
        .build()
        .unwrap()
}

/// Runs the agent `desk` of `registry` on `engine`; its outcome and events.
pub async fn run(engine: &Engine, registry: &Registry) -> (Outcome, Vec<Event>) {
    let client = rein_engine::run::http_client().unwrap();
    let agent = bind_agent(registry, "desk", &client, &|_| None).unwrap();
    let schemas = CompiledSchemas::compile(registry).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let observer: Observer = Arc::new(move |e: &Event| sink.lock().unwrap().push(e.clone()));
    let out = engine
        .run(
            &agent,
            &schemas,
            RunRequest {
                input: "Look the orders up.".into(),
                observer: Some(observer),
                ..RunRequest::default()
            },
        )
        .await
        .unwrap();
    let events = seen.lock().unwrap().clone();
    (out.report.outcome, events)
}

/// The latency degradations reported among `events`, in order.
pub fn degradations(events: &[Event]) -> Vec<LatencyDegraded> {
    events
        .iter()
        .filter_map(|e| match &e.data {
            EventData::LatencyDegraded(d) => Some(d.clone()),
            _ => None,
        })
        .collect()
}

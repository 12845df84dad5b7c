//! Health memory across runs and processes (issue 16 item 4): two engines
//! on one SQLite file, each with its own mock model, against one order
//! desk. After a tool's breaker opens in one, or the tool asks it to wait
//! (429 with Retry-After), a run in the other does not call the tool until
//! that ends, and its model saw "unavailable until HH:MM UTC; choose
//! another way" in the tool's description.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::{Event, EventData};
use rein_engine::bind::{bind_agent, process_env};
use rein_engine::config::{CompiledSchemas, Loader, Registry};
use rein_engine::run::{Engine, Observer, RunRequest};
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{MockModel, Reply};
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig};
use serde_json::{Value, json};

const CONFIG: &str = r#"
[providers.mock]
kind = "openai"
base_url = "${MOCK_MODEL_URL}/v1"
max_output_tokens = { m = 4096 }

[breakers.tool]
consecutive_failures = 1
break_duration = "10m"

[resource_groups.order_api]
max_concurrency = 8

[tools.get_order]
description = "Look up one order."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
schema = { type = "object", properties = { order_id = { type = "string", description = "The order id." } }, required = ["order_id"] }
latency = { p50 = "20ms", p95 = "60ms", p99 = "120ms" }
adapter = { kind = "http", url = "${ORDER_DESK_URL}/tools/get_order" }

[agents.desk]
provider = "mock"
model = "m"
system_prompt = "Look orders up."
tools = ["get_order"]
[agents.desk.budget]
wall_clock = "60s"
max_steps = 5
"#;

/// One process: its config (pointing at its own mock model), its store
/// handle on the shared file, its engine sharing breakers.
struct Process {
    registry: Registry,
    engine: Engine,
    model: MockModel,
}

async fn process(dir: &Path, db: &Path, desk: &OrderDesk, node: &str) -> Process {
    let model = MockModel::start([
        Reply::tool_call(GET_ORDER, &json!({"order_id": "A-1001"})),
        Reply::text("Done."),
    ])
    .await
    .unwrap();
    let dir = dir.join(node);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("rein.toml"), CONFIG).unwrap();
    let (desk_url, model_url) = (desk.base_url().to_owned(), model.base_url().to_owned());
    let registry = Loader::with_env(move |name| match name {
        "ORDER_DESK_URL" => Some(desk_url.clone()),
        "MOCK_MODEL_URL" => Some(model_url.clone()),
        _ => None,
    })
    .load(&dir.join("rein.toml"))
    .unwrap_or_else(|e| panic!("{e}"));
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(db).unwrap());
    let client = rein_engine::run::http_client().unwrap();
    let engine = Engine::builder(store)
        .registry(&registry, &client, process_env())
        .shared_breakers(node, Duration::ZERO)
        .build()
        .unwrap();
    Process {
        registry,
        engine,
        model,
    }
}

/// Runs the agent; its events.
async fn run(p: &Process) -> Vec<Event> {
    let client = rein_engine::run::http_client().unwrap();
    let agent = bind_agent(&p.registry, "desk", &client, &|_| None).unwrap();
    let schemas = CompiledSchemas::compile(&p.registry).unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let observer: Observer = Arc::new(move |e: &Event| sink.lock().unwrap().push(e.clone()));
    p.engine
        .run(
            &agent,
            &schemas,
            RunRequest {
                input: "Look A-1001 up.".into(),
                observer: Some(observer),
                ..RunRequest::default()
            },
        )
        .await
        .unwrap();
    seen.lock().unwrap().clone()
}

/// The description of `get_order` in the model's `n`th request.
fn description(model: &MockModel, n: usize) -> String {
    let body: Value = model.requests()[n].body.clone();
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == GET_ORDER)
        .and_then(|t| t["function"]["description"].as_str())
        .unwrap()
        .to_owned()
}

/// Whether the run refused `get_order` as shared, naming who opened it.
fn refused_as_shared(events: &[Event]) -> bool {
    events.iter().any(|e| match &e.data {
        EventData::CallRejected(r) => {
            let v = serde_json::to_value(r).unwrap();
            v["name"] == GET_ORDER && v["shared"] == true && v["opened_by"] == "a"
        }
        _ => false,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_whose_breaker_opened_in_one_process_is_not_called_by_the_other() {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().always(GET_ORDER, Fault::status(401))),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let (a, b) = (
        process(dir.path(), &db, &desk, "a").await,
        process(dir.path(), &db, &desk, "b").await,
    );
    run(&a).await;
    assert_eq!(desk.request_count(GET_ORDER), 1, "process a called it once");
    assert!(
        !description(&a.model, 0).contains("unavailable"),
        "nothing was known before: {}",
        description(&a.model, 0)
    );

    let events = run(&b).await;
    assert_eq!(
        desk.request_count(GET_ORDER),
        1,
        "process b never called the tool whose arm process a opened"
    );
    assert!(refused_as_shared(&events), "{events:#?}");
    let seen = description(&b.model, 0);
    assert!(
        seen.contains("[unavailable until ") && seen.contains(" UTC; choose another way]"),
        "the model of process b was told before it planned: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_in_one_process_is_honoured_by_every_run_of_every_process() {
    let faults = Faults::none().then(GET_ORDER, Fault::rate_limited(RetryAfter::Seconds(3_600)));
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let (a, b) = (
        process(dir.path(), &db, &desk, "a").await,
        process(dir.path(), &db, &desk, "b").await,
    );
    run(&a).await;
    assert_eq!(desk.request_count(GET_ORDER), 1);

    // Another process: told, and refused without a call.
    let events = run(&b).await;
    assert_eq!(
        desk.request_count(GET_ORDER),
        1,
        "process b waited as asked"
    );
    assert!(refused_as_shared(&events), "{events:#?}");
    assert!(description(&b.model, 0).contains("choose another way"));

    // The same process's next run too: no local arm holds a cooldown.
    a.model.push_replies([
        Reply::tool_call(GET_ORDER, &json!({"order_id": "A-1002"})),
        Reply::text("Done."),
    ]);
    run(&a).await;
    assert_eq!(
        desk.request_count(GET_ORDER),
        1,
        "process a's next run waited too"
    );
    assert!(description(&a.model, 2).contains("unavailable until"));
}

//! The harness the run-loop integration tests share: the testkit's order
//! desk on loopback, a real SQLite file, an engine over it, and the agent,
//! tool and script builders the tests drive it with.
//!
//! Each test file compiles this module on its own and uses part of it.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod configured;
mod paused_store;
pub use paused_store::pause_safe;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rein_core::deadline::BudgetLimits;
use rein_core::idempotency::Normalizer;
use rein_core::registry::DEFAULT_IDEMPOTENCY_HEADER;
use rein_core::registry::{ArgSource, CompensationGrade, CompensationSpec};
use rein_core::{EventKind, LatencyProfile, ToolClass};
use rein_engine::provider::{ModelProvider, ScriptedProvider};
use rein_engine::run::{
    AcceptAll, AgentBinding, ArgValidator, CompensationBinding, Engine, EngineBuilder, RunOutput,
    RunRequest, ToolBinding,
};
use rein_engine::tool_http::HttpTarget;
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig, RESTORE_DELIVERY_TIME, SEND_EMAIL,
    UPDATE_DELIVERY_TIME,
};
use serde_json::{Value, json};

pub struct Harness {
    pub desk: OrderDesk,
    pub store: Arc<dyn Store>,
    pub engine: Engine,
    pub _dir: tempfile::TempDir,
}

/// A desk with `faults`, a fresh SQLite store and an engine seeded with 7.
///
/// The store is wrapped in a pause-safe store ([`pause_safe`]), so a test may run under
/// `start_paused`: the engine's clock follows tokio's time, and time moves
/// only while nothing (no store call, no loopback I/O) is pending.
pub async fn harness(faults: Faults) -> Harness {
    harness_with(faults, |b| b).await
}

/// As [`harness`], with `configure` applied to the engine's builder after
/// the seed.
pub async fn harness_with(
    faults: Faults,
    configure: impl FnOnce(EngineBuilder) -> EngineBuilder,
) -> Harness {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let store: Arc<dyn Store> = Arc::new(pause_safe(sqlite));
    let engine = configure(Engine::builder(store.clone()).rng_seed(7))
        .build()
        .unwrap();
    Harness {
        desk,
        store,
        engine,
        _dir: dir,
    }
}

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

pub fn tool(desk: &OrderDesk, name: &str, class: ToolClass, status_url: bool) -> ToolBinding {
    ToolBinding {
        name: name.to_owned(),
        class,
        latency: LatencyProfile::new(ms(10), ms(100), ms(250), 100).unwrap(),
        normalizer: Normalizer::default(),
        target: HttpTarget {
            name: name.to_owned(),
            url: desk.tool_url(name),
            method: reqwest::Method::POST,
            headers: BTreeMap::new(),
            idempotency_header: DEFAULT_IDEMPOTENCY_HEADER.to_owned(),
            status_url: status_url.then(|| format!("{}/tools/{name}/status", desk.base_url())),
            max_result_bytes: 16 * 1024,
        }
        .into(),
        resource_group: Some("order_api".to_owned()),
        self_heal_allowance: None,
        declared: Default::default(),
    }
}

pub fn agent(desk: &OrderDesk, provider: Arc<dyn ModelProvider>, status_url: bool) -> AgentBinding {
    let tools: BTreeMap<String, ToolBinding> = [
        tool(desk, GET_ORDER, ToolClass::Read, false),
        tool(
            desk,
            UPDATE_DELIVERY_TIME,
            ToolClass::IdempotentWrite,
            status_url,
        ),
        tool(desk, SEND_EMAIL, ToolClass::Irreversible, false),
    ]
    .into_iter()
    .map(|t| (t.name.clone(), t))
    .collect();
    let mut agent = AgentBinding::new(
        "order_desk",
        BudgetLimits::new(Duration::from_secs(20))
            .unwrap()
            .with_steps(10)
            .unwrap(),
    )
    .with_model(provider, "mock-model")
    .with_system_prompt("You adjust orders.")
    .with_model_latency(LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap());
    agent.tools = tools;
    agent.compensations = [(
        UPDATE_DELIVERY_TIME.to_owned(),
        restore(desk, CompensationGrade::Strong),
    )]
    .into_iter()
    .collect();
    agent
}

/// `restore_delivery_time` as the compensation of `update_delivery_time`.
pub fn restore(desk: &OrderDesk, grade: CompensationGrade) -> CompensationBinding {
    let args = [
        ("order_id", "args.order_id"),
        ("delivery_date", "result.previous_delivery_date"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.parse::<ArgSource>().unwrap()))
    .collect();
    CompensationBinding {
        spec: CompensationSpec::new(RESTORE_DELIVERY_TIME, grade, None, args),
        tool: tool(
            desk,
            RESTORE_DELIVERY_TIME,
            ToolClass::IdempotentWrite,
            true,
        ),
    }
}

pub fn script(turns: Value) -> Arc<dyn ModelProvider> {
    Arc::new(ScriptedProvider::from_json("replay", &json!({ "turns": turns }).to_string()).unwrap())
}

pub fn call(name: &str, args: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": args}]})
}

pub fn answer(text: &str) -> Value {
    json!({"text": text})
}

pub fn update(order: &str, date: &str) -> Value {
    call(
        UPDATE_DELIVERY_TIME,
        json!({"order_id": order, "delivery_date": date}),
    )
}

pub async fn run_with(
    h: &Harness,
    agent: &AgentBinding,
    validator: &dyn ArgValidator,
) -> RunOutput {
    h.engine
        .run(
            agent,
            validator,
            RunRequest {
                input: "Move order A-1001 to 2026-12-24 and tell the buyer.".into(),
                ..RunRequest::default()
            },
        )
        .await
        .unwrap()
}

pub async fn run(h: &Harness, agent: &AgentBinding) -> RunOutput {
    run_with(h, agent, &AcceptAll).await
}

/// Three updates, of A-1001 to A-1003, then the answer.
pub fn three_updates() -> Value {
    json!([
        update("A-1001", "2026-02-01T10:00:00Z"),
        update("A-1002", "2026-02-02T10:00:00Z"),
        update("A-1003", "2026-02-03T10:00:00Z"),
        answer("could not finish"),
    ])
}

/// The desk answers the `nth` next update with a 409 conflict (not
/// retryable), and the ones before it normally.
pub fn conflict_on_update(desk: &OrderDesk, nth: usize) {
    for _ in 1..nth {
        desk.push_fault(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::ZERO))
            .unwrap();
    }
    desk.push_fault(UPDATE_DELIVERY_TIME, Fault::status(409))
        .unwrap();
}

/// The run's events, as (kind, data).
pub async fn kinds(h: &Harness, out: &RunOutput) -> Vec<(EventKind, Value)> {
    h.store
        .events(&out.run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind(), e.data.to_value().unwrap()))
        .collect()
}

/// The tool messages of the run's latest checkpoint, in transcript order.
pub async fn tool_messages(h: &Harness, out: &RunOutput) -> Vec<Value> {
    let checkpoint = h
        .store
        .latest_checkpoint(&out.run_id)
        .await
        .unwrap()
        .unwrap();
    checkpoint
        .messages
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .cloned()
        .collect()
}

/// The desk's side effects in the order they happened, as (tool, order id).
pub fn effect_order(desk: &OrderDesk) -> Vec<(String, String)> {
    desk.side_effects()
        .into_iter()
        .map(|e| (e.tool, e.args["order_id"].as_str().unwrap().to_owned()))
        .collect()
}

/// `pairs` of (tool, order id) as [`effect_order`] returns them.
pub fn effects(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(tool, order)| ((*tool).to_owned(), (*order).to_owned()))
        .collect()
}

/// A turn of `n` reads of `get_order`, all planned at once, then the
/// answer: the fan-out a rate limit must hold against.
pub fn fan_out(n: usize) -> Value {
    let calls = (0..n)
        .map(|i| {
            json!({"id": format!("c{i}"), "name": rein_testkit::order_desk::GET_ORDER,
                   "arguments": {"order_id": "A-1001"}})
        })
        .collect();
    json!([{ "tool_calls": Value::Array(calls) }, answer("looked")])
}

/// `agent` with resource group `order_api` limited to `per_sec` calls per
/// second with `burst`, a wall clock long enough for a fan-out of
/// thirty-six to wait its turn (each branch gets a thirty-sixth of it), and
/// a cap on calls per turn that lets such a fan-out through to the
/// governor (the default cap of 16 would refuse it before it is planned).
pub fn rate_limited(mut agent: AgentBinding, per_sec: f64, burst: u32) -> AgentBinding {
    agent.fan_out = rein_core::registry::FanOutLimits::new(std::num::NonZeroU32::new(64).unwrap());
    agent.group_rates.insert(
        "order_api".to_owned(),
        rein_core::registry::RateLimit::new(per_sec, burst),
    );
    agent.budget = BudgetLimits::new(Duration::from_secs(360))
        .unwrap()
        .with_steps(10)
        .unwrap();
    agent
}

/// The worst excess of the desk's request log over a token bucket of
/// `burst` refilled at `per_sec`: for every pair of requests to `tool`,
/// those received between them (both included) minus what the bucket
/// allows over that span, `burst + ⌊per_sec × span⌋`. Zero or less: the
/// log never exceeds the bucket in any window.
pub fn bucket_excess(desk: &OrderDesk, tool: &str, per_sec: f64, burst: u32) -> i64 {
    let mut at: Vec<Duration> = desk
        .requests()
        .into_iter()
        .filter(|r| r.tool == tool)
        .map(|r| r.received)
        .collect();
    at.sort_unstable();
    let mut worst = i64::MIN;
    for i in 0..at.len() {
        for j in i..at.len() {
            let span = at[j].saturating_sub(at[i]).as_secs_f64();
            let allowed = i64::from(burst) + (per_sec * span + 1e-9).floor() as i64;
            worst = worst.max((j - i + 1) as i64 - allowed);
        }
    }
    worst
}

/// The most requests to `tool` the desk received within any `window`.
pub fn most_in_window(desk: &OrderDesk, tool: &str, window: Duration) -> usize {
    let mut at: Vec<Duration> = desk
        .requests()
        .into_iter()
        .filter(|r| r.tool == tool)
        .map(|r| r.received)
        .collect();
    at.sort_unstable();
    (0..at.len())
        .map(|i| at[i..].iter().take_while(|t| **t < at[i] + window).count())
        .max()
        .unwrap_or(0)
}

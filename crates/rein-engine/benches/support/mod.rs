//! The agent run the engine benches share: one real 10-step run (nine
//! tool calls, then the answer) of a scripted model against the loopback
//! order desk.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rein_core::deadline::BudgetLimits;
use rein_core::idempotency::Normalizer;
use rein_core::registry::DEFAULT_IDEMPOTENCY_HEADER;
use rein_core::{LatencyProfile, TenantId, ToolClass};
use rein_engine::provider::ScriptedProvider;
use rein_engine::run::{AgentBinding, RunRequest, ToolBinding};
use rein_engine::tool_http::HttpTarget;
use rein_testkit::order_desk::{GET_ORDER, OrderDesk, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};

/// Model turns per run: nine tool calls, then the answer.
pub const STEPS: u32 = 10;
pub const INPUT: &str = "Check orders A-1001..A-1003 and move their delivery dates.";

pub fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// The nine calls: reads and idempotent writes alternating, all arguments
/// distinct, so every call adds a new fact and the loop guard never trips.
pub fn calls() -> Vec<(&'static str, Value)> {
    let orders = ["A-1001", "A-1002", "A-1003"];
    (0..STEPS as usize - 1)
        .map(|i| {
            let order = orders[i % orders.len()];
            if i % 2 == 0 {
                (GET_ORDER, json!({"order_id": order}))
            } else {
                let date = format!("2026-12-{:02}T10:00:00Z", 10 + i);
                (
                    UPDATE_DELIVERY_TIME,
                    json!({"order_id": order, "delivery_date": date}),
                )
            }
        })
        .collect()
}

pub fn script(calls: &[(&str, Value)]) -> String {
    let mut turns: Vec<Value> = calls
        .iter()
        .map(|(name, args)| json!({"tool_calls": [{"name": name, "arguments": args}]}))
        .collect();
    turns.push(json!({"text": "Done: three orders checked, four dates moved."}));
    json!({ "turns": turns }).to_string()
}

pub fn tool(desk: &OrderDesk, name: &str, class: ToolClass) -> ToolBinding {
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
            status_url: Some(format!("{}/tools/{name}/status", desk.base_url())),
            max_result_bytes: 16 * 1024,
        }
        .into(),
        resource_group: Some("order_api".to_owned()),
        self_heal_allowance: None,
        declared: Default::default(),
    }
}

/// The agent without its provider (a placeholder one, replaced per run).
pub fn agent(desk: &OrderDesk, script: &str) -> AgentBinding {
    let tools: BTreeMap<String, ToolBinding> = [
        tool(desk, GET_ORDER, ToolClass::Read),
        tool(desk, UPDATE_DELIVERY_TIME, ToolClass::IdempotentWrite),
    ]
    .into_iter()
    .map(|t| (t.name.clone(), t))
    .collect();
    let mut agent = AgentBinding::new(
        "order_desk",
        BudgetLimits::new(Duration::from_secs(60))
            .unwrap()
            .with_steps(20)
            .unwrap(),
    )
    .with_model(provider(script), "scripted")
    .with_system_prompt("You adjust orders.")
    .with_model_latency(LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap());
    agent.tools = tools;
    agent
}

/// A fresh scripted model: it is stateful (its cursor is the run's place in
/// the script), so each run needs its own.
pub fn provider(script: &str) -> Arc<ScriptedProvider> {
    Arc::new(ScriptedProvider::from_json("scripted", script).unwrap())
}

pub fn request(observer: Option<rein_engine::run::Observer>) -> RunRequest {
    RunRequest {
        input: INPUT.into(),
        tenant: Some(TenantId::new("acme").unwrap()),
        observer,
        ..RunRequest::default()
    }
}

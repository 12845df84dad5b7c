//! The sabotage switches break what they say, against the real order desk
//! on loopback: each test shows the violation a chaos checker must catch.
//! Run with `cargo test -p rein-engine --features sabotage --test sabotage`.
#![cfg(feature = "sabotage")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use rein_core::deadline::BudgetLimits;
use rein_core::idempotency::Normalizer;
use rein_core::loop_guard::LoopGuardConfig;
use rein_core::registry::{ArgSource, CompensationGrade, CompensationSpec};
use rein_core::retry::RetryPolicy;
use rein_core::{EventKind, LatencyProfile, Outcome, ToolClass};
use rein_engine::provider::{ModelProvider, ScriptedProvider};
use rein_engine::run::{
    AcceptAll, AgentBinding, CompensationBinding, Engine, RunOutput, RunRequest, ToolBinding,
};
use rein_engine::sabotage::Sabotage;
use rein_engine::tool_http::{DEFAULT_IDEMPOTENCY_HEADER, HttpTarget};
use rein_store::{SqliteStore, Store};
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, OrderDesk, OrderDeskConfig, RESTORE_DELIVERY_TIME, SEND_EMAIL,
    UPDATE_DELIVERY_TIME,
};
use serde_json::{Value, json};

struct Harness {
    desk: OrderDesk,
    store: Arc<dyn Store>,
    engine: Engine,
    _dir: tempfile::TempDir,
}

async fn harness(faults: Faults, sabotage: Sabotage) -> Harness {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(faults))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(dir.path().join("rein.db")).unwrap());
    let engine = Engine::builder(store.clone())
        .rng_seed(7)
        .sabotage(sabotage)
        .build()
        .unwrap();
    Harness {
        desk,
        store,
        engine,
        _dir: dir,
    }
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

fn tool(desk: &OrderDesk, name: &str, class: ToolClass, status_url: bool) -> ToolBinding {
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
    }
}

fn agent(desk: &OrderDesk, turns: Value, status_url: bool) -> AgentBinding {
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
    let args = [
        ("order_id", "args.order_id"),
        ("delivery_date", "result.previous_delivery_date"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.parse::<ArgSource>().unwrap()))
    .collect();
    let restore = CompensationBinding {
        spec: CompensationSpec::new(RESTORE_DELIVERY_TIME, CompensationGrade::Strong, None, args),
        tool: tool(
            desk,
            RESTORE_DELIVERY_TIME,
            ToolClass::IdempotentWrite,
            true,
        ),
    };
    let provider: Arc<dyn ModelProvider> = Arc::new(
        ScriptedProvider::from_json("replay", &json!({ "turns": turns }).to_string()).unwrap(),
    );
    AgentBinding {
        name: "order_desk".into(),
        model: "mock-model".into(),
        system_prompt: "You adjust orders.".into(),
        provider,
        price: None,
        tool_definitions: vec![],
        tools,
        budget: BudgetLimits::new(Duration::from_secs(20))
            .unwrap()
            .with_steps(10)
            .unwrap(),
        retry: RetryPolicy::default(),
        loop_guard: LoopGuardConfig::default(),
        model_latency: LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap(),
        on_failure: rein_core::FailurePolicy::default(),
        compensation_reserve: rein_core::Ratio::new("r", 0.2).unwrap(),
        compensations: [(UPDATE_DELIVERY_TIME.to_owned(), restore)]
            .into_iter()
            .collect(),
        group_limits: BTreeMap::new(),
    }
}

fn call(name: &str, args: Value) -> Value {
    json!({"tool_calls": [{"name": name, "arguments": args}]})
}

fn answer(text: &str) -> Value {
    json!({"text": text})
}

fn update(order: &str, date: &str) -> Value {
    call(
        UPDATE_DELIVERY_TIME,
        json!({"order_id": order, "delivery_date": date}),
    )
}

async fn run(h: &Harness, agent: &AgentBinding) -> RunOutput {
    h.engine
        .run(
            agent,
            &AcceptAll,
            RunRequest {
                input: "Move order A-1001 to 2026-12-24 and tell the buyer.".into(),
                ..RunRequest::default()
            },
        )
        .await
        .unwrap()
}

async fn events(h: &Harness, out: &RunOutput) -> Vec<(EventKind, Value)> {
    h.store
        .events(&out.run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.kind, e.data))
        .collect()
}

/// The keys (and intent ids) of every request to `tool`, in order.
fn keys_of(desk: &OrderDesk, tool: &str) -> Vec<(Option<String>, Option<String>)> {
    desk.requests()
        .into_iter()
        .filter(|r| r.tool == tool)
        .map(|r| (r.headers.idempotency_key, r.headers.intent_id))
        .collect()
}

/// The contents of the tool messages the model was sent back.
async fn tool_replies(h: &Harness, out: &RunOutput) -> Vec<String> {
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
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn no_switch_on_changes_nothing() {
    // The scenario of the next test, unsabotaged: the retry carries the
    // same key and the desk collapses it.
    let h = harness(
        Faults::none().then(UPDATE_DELIVERY_TIME, Fault::LoseResponse),
        Sabotage::default(),
    )
    .await;
    let a = agent(
        &h.desk,
        json!([update("A-1001", "2026-12-24"), answer("done")]),
        false,
    );
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(h.desk.replayed_count(UPDATE_DELIVERY_TIME), 1);
}

#[tokio::test]
async fn fresh_key_per_attempt_applies_a_retried_idempotent_write_twice() {
    let h = harness(
        Faults::none().then(UPDATE_DELIVERY_TIME, Fault::LoseResponse),
        Sabotage {
            fresh_key_per_attempt: true,
            ..Sabotage::default()
        },
    )
    .await;
    let a = agent(
        &h.desk,
        json!([update("A-1001", "2026-12-24"), answer("done")]),
        false,
    );
    let out = run(&h, &a).await;

    assert_eq!(
        h.desk.applied_count(UPDATE_DELIVERY_TIME),
        2,
        "one intent, two effects"
    );
    assert_eq!(h.desk.replayed_count(UPDATE_DELIVERY_TIME), 0);
    let keys = keys_of(&h.desk, UPDATE_DELIVERY_TIME);
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0].0, keys[1].0, "a different key on the retry");
    assert_eq!(keys[0].1, keys[1].1, "for the same intent");
    // The ledger still holds the intent's original key: the first one sent.
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(
        ledger[0].idempotency_key.as_ref().map(|k| k.to_string()),
        keys[0].0
    );
}

#[tokio::test]
async fn fresh_key_per_attempt_also_looks_up_by_the_fresh_key() {
    // Attempt 1 is refused; attempt 2 (fresh key) applies but its answer is
    // lost, so rein looks it up — by the fresh key too.
    let h = harness(
        Faults::none()
            .then(UPDATE_DELIVERY_TIME, Fault::status(503))
            .then(UPDATE_DELIVERY_TIME, Fault::LoseResponse),
        Sabotage {
            fresh_key_per_attempt: true,
            ..Sabotage::default()
        },
    )
    .await;
    let a = agent(
        &h.desk,
        json!([update("A-1001", "2026-12-24"), answer("done")]),
        true,
    );
    let out = run(&h, &a).await;

    let keys = keys_of(&h.desk, UPDATE_DELIVERY_TIME);
    assert_eq!(keys.len(), 2);
    assert_ne!(keys[0].0, keys[1].0);
    let lookups: Vec<Value> = h
        .desk
        .requests()
        .into_iter()
        .filter(|r| r.tool == format!("{UPDATE_DELIVERY_TIME}/status"))
        .map(|r| r.args["key"].clone())
        .collect();
    assert_eq!(lookups, vec![json!(keys[1].0)]);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(
        ledger[0].idempotency_key.as_ref().map(|k| k.to_string()),
        keys[0].0
    );
}

#[tokio::test]
async fn retry_irreversible_sends_an_email_twice_after_a_503() {
    let h = harness(
        Faults::none().then(SEND_EMAIL, Fault::status(503)),
        Sabotage {
            retry_irreversible: true,
            ..Sabotage::default()
        },
    )
    .await;
    let email = json!({"to": "buyer@example.com", "subject": "s", "body": "b"});
    let a = agent(
        &h.desk,
        json!([call(SEND_EMAIL, email), answer("sent")]),
        true,
    );
    let out = run(&h, &a).await;

    assert_eq!(h.desk.request_count(SEND_EMAIL), 2, "an irreversible retry");
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 1);
    let events = events(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::RetryScheduled && d["tool"] == SEND_EMAIL)
    );
}

#[tokio::test]
async fn forward_order_compensation_undoes_in_execution_order() {
    let h = harness(
        Faults::none(),
        Sabotage {
            forward_order_compensation: true,
            ..Sabotage::default()
        },
    )
    .await;
    let a = agent(
        &h.desk,
        json!([
            update("A-1001", "2026-02-01T10:00:00Z"),
            update("A-1002", "2026-02-02T10:00:00Z"),
            update("A-1003", "2026-02-03T10:00:00Z"),
            answer("could not finish"),
        ]),
        true,
    );
    // The third update conflicts: not retryable, so the first two are undone.
    for fault in [
        Fault::Delay(Duration::ZERO),
        Fault::Delay(Duration::ZERO),
        Fault::status(409),
    ] {
        h.desk.push_fault(UPDATE_DELIVERY_TIME, fault).unwrap();
    }
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Failed, "{:#?}", out.report);
    let order: Vec<(String, String)> = h
        .desk
        .side_effects()
        .into_iter()
        .map(|e| (e.tool, e.args["order_id"].as_str().unwrap().to_owned()))
        .collect();
    assert_eq!(
        order,
        vec![
            (UPDATE_DELIVERY_TIME.to_owned(), "A-1001".to_owned()),
            (UPDATE_DELIVERY_TIME.to_owned(), "A-1002".to_owned()),
            (RESTORE_DELIVERY_TIME.to_owned(), "A-1001".to_owned()),
            (RESTORE_DELIVERY_TIME.to_owned(), "A-1002".to_owned()),
        ],
        "forward order, not reverse"
    );
}

#[tokio::test]
async fn raw_error_text_sends_the_tools_error_message_to_the_model() {
    // The desk's structured error body says, in its `message`, "get_order
    // refused the request with HTTP 400 (injected fault)".
    let server_message = "refused the request with HTTP 400 (injected fault)";
    let turns = json!([
        call(GET_ORDER, json!({"order_id": "A-1001"})),
        answer("gave up")
    ]);
    let h = harness(
        Faults::none().then(GET_ORDER, Fault::status(400)),
        Sabotage {
            raw_error_text: true,
            ..Sabotage::default()
        },
    )
    .await;
    let out = run(&h, &agent(&h.desk, turns.clone(), true)).await;
    let replies = tool_replies(&h, &out).await;
    assert_eq!(replies.len(), 1);
    assert!(replies[0].contains(server_message), "{replies:?}");

    // Unsabotaged, the model gets the structured placeholder only.
    let h = harness(
        Faults::none().then(GET_ORDER, Fault::status(400)),
        Sabotage::default(),
    )
    .await;
    let out = run(&h, &agent(&h.desk, turns, true)).await;
    let replies = tool_replies(&h, &out).await;
    assert_eq!(replies.len(), 1);
    assert!(!replies[0].contains(server_message), "{replies:?}");
}

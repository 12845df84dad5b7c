//! Fan-out control at planning time, against the real order desk on
//! loopback under paused time: a turn over the agent's cap runs none of its
//! calls and tells the model to batch or narrow; writes of one turn to the
//! same order run one at a time, in the model's order, while other calls
//! still run in parallel.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::num::NonZeroU32;

use common::{agent, answer, effect_order, harness, kinds, ms, run, script, tool_messages};
use rein_core::registry::{FanOutLimits, ResourceKey};
use rein_core::{EventKind, Outcome};
use rein_engine::run::{AgentBinding, Declared};
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER, OrderDesk, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};

fn capped(mut a: AgentBinding, cap: u32) -> AgentBinding {
    a.fan_out = FanOutLimits::new(NonZeroU32::new(cap).unwrap());
    a
}

/// `a` with `update_delivery_time` declaring `resource_key = "args.order_id"`.
fn keyed(mut a: AgentBinding) -> AgentBinding {
    a.tools.get_mut(UPDATE_DELIVERY_TIME).unwrap().declared =
        Declared::writing(ResourceKey::parse("args.order_id").unwrap());
    a
}

fn read(id: &str, order: &str) -> Value {
    json!({"id": id, "name": GET_ORDER, "arguments": {"order_id": order}})
}

fn update(id: &str, order: &str, date: &str) -> Value {
    json!({"id": id, "name": UPDATE_DELIVERY_TIME,
           "arguments": {"order_id": order, "delivery_date": date}})
}

/// When each update of `order` arrived at the desk, in order of arrival.
fn arrivals(desk: &OrderDesk, order: &str) -> Vec<std::time::Duration> {
    desk.requests()
        .into_iter()
        .filter(|r| r.tool == UPDATE_DELIVERY_TIME && r.args["order_id"] == order)
        .map(|r| r.received)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_turn_over_the_cap_runs_none_of_its_calls_and_tells_the_model_to_batch() {
    let h = harness(Faults::none()).await;
    let turns = json!([
        {"tool_calls": [read("a", "A-1001"), read("b", "A-1002"), read("c", "A-1003"),
                        update("d", "A-1001", "2026-12-24")]},
        answer("I will ask for less"),
    ]);
    let a = capped(agent(&h.desk, script(turns), true), 3);
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.requests().len(), 0, "nothing reached the desk");
    assert!(
        h.store.ledger(&out.run_id).await.unwrap().is_empty(),
        "no intent was declared"
    );
    let replies = tool_messages(&h, &out).await;
    assert_eq!(replies.len(), 4, "one reply per proposed call");
    for (reply, tool) in replies
        .iter()
        .zip([GET_ORDER, GET_ORDER, GET_ORDER, UPDATE_DELIVERY_TIME])
    {
        let content = reply["content"].as_str().unwrap();
        let (placeholder, problem) = content.split_once(" problems: ").unwrap();
        assert!(
            placeholder.starts_with(&format!(
                "tool_error target={tool} category=invalid_arguments effect=not_applied"
            )),
            "{placeholder}"
        );
        assert!(
            problem.starts_with("too many calls in one turn (4 > 3): batch or narrow"),
            "{problem}"
        );
        assert!(
            problem.ends_with("none of this turn's calls ran"),
            "{problem}"
        );
    }
    let refused: Vec<Value> = kinds(&h, &out)
        .await
        .into_iter()
        .filter(|(k, _)| *k == EventKind::FanOutRefused)
        .map(|(_, d)| d)
        .collect();
    assert_eq!(
        refused,
        vec![json!({"proposed": 4, "cap": 3, "tools": [GET_ORDER, UPDATE_DELIVERY_TIME]})]
    );
    assert!(
        !kinds(&h, &out)
            .await
            .iter()
            .any(|(k, _)| *k == EventKind::PlanCreated),
        "a refused turn plans nothing"
    );
    assert_eq!(h.engine.metrics().get("rein_fan_out_refused_total", &[]), 1);
}

#[tokio::test(start_paused = true)]
async fn a_turn_at_the_cap_runs_every_call() {
    let h = harness(Faults::none()).await;
    let turns = json!([
        {"tool_calls": [read("a", "A-1001"), read("b", "A-1002"), read("c", "A-1003")]},
        answer("looked"),
    ]);
    let a = capped(agent(&h.desk, script(turns), true), 3);
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.request_count(GET_ORDER), 3);
    assert!(
        !kinds(&h, &out)
            .await
            .iter()
            .any(|(k, _)| *k == EventKind::FanOutRefused)
    );
}

/// Every update takes 100 ms at the desk. Two updates of A-1001 and one of
/// A-1002 in one turn: A-1001's second starts only after its first
/// answered (100 ms later), in the model's order, and A-1002's runs beside
/// the first — a lane per resource, not a queue for the turn.
#[tokio::test(start_paused = true)]
async fn writes_to_the_same_order_run_one_at_a_time_in_the_models_order() {
    let h = harness(Faults::none().always(UPDATE_DELIVERY_TIME, Fault::Delay(ms(100)))).await;
    let turns = json!([
        {"tool_calls": [update("a", "A-1001", "2026-12-24"), update("b", "A-1002", "2026-12-25"),
                        update("c", "A-1001", "2026-12-31")]},
        answer("moved"),
    ]);
    let a = keyed(agent(&h.desk, script(turns), true));
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);

    let same = arrivals(&h.desk, "A-1001");
    assert_eq!(same.len(), 2, "{same:?}");
    assert!(
        same[1] >= same[0] + ms(100),
        "the second write of A-1001 arrived {:?} after the first, while it was still being applied",
        same[1] - same[0]
    );
    let other = arrivals(&h.desk, "A-1002");
    assert!(
        other[0] < same[0] + ms(100),
        "A-1002 ran beside A-1001's first write, not after it: {other:?} vs {same:?}"
    );
    assert_eq!(
        effect_order(&h.desk)
            .into_iter()
            .filter(|(_, order)| order == "A-1001")
            .count(),
        2
    );
    let dates: Vec<Value> = h
        .desk
        .side_effects()
        .into_iter()
        .filter(|e| e.args["order_id"] == "A-1001")
        .map(|e| e.args["delivery_date"].clone())
        .collect();
    assert_eq!(
        dates,
        vec![json!("2026-12-24"), json!("2026-12-31")],
        "the model's order"
    );
    assert_eq!(
        h.desk.order("A-1001").unwrap().delivery_date,
        "2026-12-31",
        "the model's last word stands"
    );
}

/// Without a declared `resource_key` the same turn goes out at once: the
/// lanes come from the declaration, and the desk's delay tells parallel
/// from serial (the control for the test above).
#[tokio::test(start_paused = true)]
async fn writes_without_a_resource_key_run_in_parallel() {
    let h = harness(Faults::none().always(UPDATE_DELIVERY_TIME, Fault::Delay(ms(100)))).await;
    let turns = json!([
        {"tool_calls": [update("a", "A-1001", "2026-12-24"), update("c", "A-1001", "2026-12-31")]},
        answer("moved"),
    ]);
    let a = agent(&h.desk, script(turns), true);
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let same = arrivals(&h.desk, "A-1001");
    assert_eq!(same.len(), 2);
    assert!(same[1] < same[0] + ms(100), "{same:?}");
}

//! The sabotage switches break what they say, against the real order desk
//! on loopback: each test shows the violation a chaos checker must catch.
//! Run with `cargo test -p rein-engine --features sabotage --test sabotage`.
#![cfg(feature = "sabotage")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{
    Harness, agent, answer, bucket_excess, call, conflict_on_update, effect_order, effects,
    fan_out, harness_with, kinds, most_in_window, ms, rate_limited, run, script, three_updates,
    tool_messages, update,
};
use rein_core::{EventKind, Outcome};
use rein_engine::run::RunOutput;
use rein_engine::sabotage::Sabotage;
use rein_testkit::order_desk::{
    Fault, Faults, GET_ORDER, OrderDesk, RESTORE_DELIVERY_TIME, SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use serde_json::{Value, json};

/// A harness whose engine has the `sabotage` switches on.
async fn sabotaged(faults: Faults, sabotage: Sabotage) -> Harness {
    harness_with(faults, |b| b.sabotage(sabotage)).await
}

/// An update whose first answer is lost (the desk applied it).
fn lost_update_response() -> Faults {
    Faults::none().then(UPDATE_DELIVERY_TIME, Fault::LoseResponse)
}

/// Only `fresh_key_per_attempt` on.
fn fresh_key_per_attempt() -> Sabotage {
    Sabotage {
        fresh_key_per_attempt: true,
        ..Sabotage::default()
    }
}

/// Runs the order-desk agent through the scripted `turns`.
async fn run_turns(h: &Harness, turns: Value, status_url: bool) -> RunOutput {
    run(h, &agent(&h.desk, script(turns), status_url)).await
}

/// One update of A-1001, then the answer.
fn one_update() -> Value {
    json!([update("A-1001", "2026-12-24"), answer("done")])
}

/// The idempotency key of the run's first ledger record.
async fn first_ledger_key(h: &Harness, out: &RunOutput) -> Option<String> {
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    ledger[0].idempotency_key.as_ref().map(|k| k.to_string())
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
    tool_messages(h, out)
        .await
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn no_switch_on_changes_nothing() {
    // The scenario of the next test, unsabotaged: the retry carries the
    // same key and the desk collapses it.
    let h = sabotaged(lost_update_response(), Sabotage::default()).await;
    let out = run_turns(&h, one_update(), false).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(h.desk.replayed_count(UPDATE_DELIVERY_TIME), 1);
}

#[tokio::test]
async fn fresh_key_per_attempt_applies_a_retried_idempotent_write_twice() {
    let h = sabotaged(lost_update_response(), fresh_key_per_attempt()).await;
    let out = run_turns(&h, one_update(), false).await;

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
    assert_eq!(first_ledger_key(&h, &out).await, keys[0].0);
}

#[tokio::test]
async fn fresh_key_per_attempt_also_looks_up_by_the_fresh_key() {
    // Attempt 1 is refused; attempt 2 (fresh key) applies but its answer is
    // lost, so rein looks it up — by the fresh key too.
    let h = sabotaged(
        Faults::none()
            .then(UPDATE_DELIVERY_TIME, Fault::status(503))
            .then(UPDATE_DELIVERY_TIME, Fault::LoseResponse),
        fresh_key_per_attempt(),
    )
    .await;
    let out = run_turns(&h, one_update(), true).await;

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
    assert_eq!(first_ledger_key(&h, &out).await, keys[0].0);
}

#[tokio::test]
async fn retry_irreversible_sends_an_email_twice_after_a_503() {
    let h = sabotaged(
        Faults::none().then(SEND_EMAIL, Fault::status(503)),
        Sabotage {
            retry_irreversible: true,
            ..Sabotage::default()
        },
    )
    .await;
    let email = json!({"to": "buyer@example.com", "subject": "s", "body": "b"});
    let out = run_turns(&h, json!([call(SEND_EMAIL, email), answer("sent")]), true).await;

    assert_eq!(h.desk.request_count(SEND_EMAIL), 2, "an irreversible retry");
    assert_eq!(h.desk.applied_count(SEND_EMAIL), 1);
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::RetryScheduled && d["tool"] == SEND_EMAIL)
    );
}

#[tokio::test]
async fn forward_order_compensation_undoes_in_execution_order() {
    let h = sabotaged(
        Faults::none(),
        Sabotage {
            forward_order_compensation: true,
            ..Sabotage::default()
        },
    )
    .await;
    // The third update conflicts: not retryable, so the first two are undone.
    conflict_on_update(&h.desk, 3);
    let out = run_turns(&h, three_updates(), true).await;

    assert_eq!(out.report.outcome, Outcome::Failed, "{:#?}", out.report);
    assert_eq!(
        effect_order(&h.desk),
        effects(&[
            (UPDATE_DELIVERY_TIME, "A-1001"),
            (UPDATE_DELIVERY_TIME, "A-1002"),
            (RESTORE_DELIVERY_TIME, "A-1001"),
            (RESTORE_DELIVERY_TIME, "A-1002"),
        ]),
        "forward order, not reverse"
    );
}

/// The tool replies the model got after a `get_order` the desk refused
/// with 400, with the `sabotage` switches on.
async fn replies_to_a_refused_read(sabotage: Sabotage) -> Vec<String> {
    let turns = json!([
        call(GET_ORDER, json!({"order_id": "A-1001"})),
        answer("gave up")
    ]);
    let h = sabotaged(Faults::none().then(GET_ORDER, Fault::status(400)), sabotage).await;
    let out = run_turns(&h, turns, true).await;
    tool_replies(&h, &out).await
}

#[tokio::test]
async fn raw_error_text_sends_the_tools_error_message_to_the_model() {
    // The desk's structured error body says, in its `message`, "get_order
    // refused the request with HTTP 400 (injected fault)".
    let server_message = "refused the request with HTTP 400 (injected fault)";
    let replies = replies_to_a_refused_read(Sabotage {
        raw_error_text: true,
        ..Sabotage::default()
    })
    .await;
    assert_eq!(replies.len(), 1);
    assert!(replies[0].contains(server_message), "{replies:?}");

    // Unsabotaged, the model gets the structured placeholder only.
    let replies = replies_to_a_refused_read(Sabotage::default()).await;
    assert_eq!(replies.len(), 1);
    assert!(!replies[0].contains(server_message), "{replies:?}");
}

/// `bypass_governor`: the fan-out of `tests/governor.rs` (36 reads against
/// `order_api` at 20/s, burst 20) with no governor: all 36 reach the desk
/// within one 100 ms window, and the bucket checker reports the excess.
#[tokio::test(start_paused = true)]
async fn bypass_governor_lets_a_fan_out_exceed_the_groups_bucket() {
    let sabotage = Sabotage {
        bypass_governor: true,
        ..Sabotage::default()
    };
    let h = sabotaged(Faults::none(), sabotage).await;
    let a = rate_limited(agent(&h.desk, script(fan_out(36)), true), 20.0, 20);
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.request_count(GET_ORDER), 36);
    assert_eq!(most_in_window(&h.desk, GET_ORDER, ms(100)), 36);
    assert!(
        bucket_excess(&h.desk, GET_ORDER, 20.0, 20) > 0,
        "the checker sees the violation"
    );
}

/// `charge_after_call` checks no cost before a call: the second turn is
/// asked for although the money left cannot pay for its prompt, and the
/// run ends over its ceiling (the run-loop test of the same setup ends at
/// or under it).
#[tokio::test(start_paused = true)]
async fn charge_after_call_overruns_a_cost_ceiling() {
    let s = Sabotage {
        charge_after_call: true,
        ..Sabotage::default()
    };
    let h = sabotaged(Faults::none(), s).await;
    let mut first = call(GET_ORDER, json!({"order_id": "A-1001"}));
    first["usage"] = json!({"input": 1000, "output": 0});
    let mut second = call(GET_ORDER, json!({"order_id": "A-1002"}));
    second["usage"] = json!({"input": 1000, "output": 0});
    let mut a = agent(&h.desk, script(json!([first, second, answer("x")])), true);
    a.price = Some(rein_core::registry::Price::new(
        rein_core::deadline::Cost::from_micros(1_000_000),
        rein_core::deadline::Cost::from_micros(4_000_000),
    ));
    a.budget = rein_core::deadline::BudgetLimits::new(std::time::Duration::from_secs(20))
        .unwrap()
        .with_cost(rein_core::deadline::Cost::from_micros(1_500))
        .unwrap();
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::BudgetExhausted);
    assert_eq!(
        out.report.consumed.cost,
        rein_core::deadline::Cost::from_micros(2_000),
        "charged after the call: over the ceiling"
    );
}

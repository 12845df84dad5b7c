//! Breaker permits on the tool path are held by a guard (issue 14, item 4):
//! a tool call dropped mid-attempt — a run cancelled from outside by
//! dropping its future, a timeout around it — gives its half-open probe
//! slot back, so the next call may probe the target instead of being
//! refused until the arm reopens.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{agent, answer, call, harness_with, run, script};
use rein_core::breaker::{ArmKind, BreakersConfig, Transition};
use rein_core::{EventData, EventKind, ManualClock, Outcome};
use rein_engine::run::{AcceptAll, RunRequest};
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probe_dropped_mid_attempt_gives_its_slot_back() {
    let clock = ManualClock::new();
    let mut breakers = BreakersConfig::default();
    breakers.tool.consecutive_failures = Some(1);
    breakers.tool.break_duration = Duration::from_secs(10);
    breakers.tool.half_open_probes = 1;
    breakers.tool.close_after_successes = 1;
    // The first `get_order` opens the arm; the second, the probe, hangs
    // until its run is dropped; the third answers.
    let faults = Faults::none()
        .then(GET_ORDER, Fault::status(401))
        .then(GET_ORDER, Fault::Delay(Duration::from_secs(60)));
    let engine_clock: Arc<dyn rein_engine::Timer> = Arc::new(clock.clone());
    let h = harness_with(faults, |b| b.breakers(breakers).clock(engine_clock)).await;
    let lookup = || {
        agent(
            &h.desk,
            script(json!([
                call(GET_ORDER, json!({"order_id": "A-1001"})),
                answer("done"),
            ])),
            true,
        )
    };

    // 1. A failure opens the tool's arm.
    let opened = run(&h, &lookup()).await;
    assert_ne!(opened.report.outcome, Outcome::Succeeded);
    assert_eq!(h.desk.request_count(GET_ORDER), 1);

    // 2. After the break the arm admits one probe; its run is dropped
    // while the probe's attempt is at the tool.
    clock.advance(Duration::from_secs(11));
    let started = Arc::new(tokio::sync::Notify::new());
    let on_event = started.clone();
    let observer: rein_engine::run::Observer = Arc::new(move |event: &rein_core::Event| {
        if event.kind() == EventKind::ToolCallStarted {
            on_event.notify_one();
        }
    });
    let probing = lookup();
    let probe = h.engine.run(
        &probing,
        &AcceptAll,
        RunRequest {
            input: "Look A-1001 up.".into(),
            observer: Some(observer),
            ..RunRequest::default()
        },
    );
    tokio::select! {
        out = probe => panic!("the probe's run ended although its tool hangs: {:?}", out.map(|o| o.report)),
        () = started.notified() => {}
    }
    // The run's future is dropped here, mid-attempt. Its request reached
    // the order desk (or is on its way); nothing reported an outcome.

    // 3. The slot came back: the next call is admitted as the probe, and
    // its success closes the arm.
    let after = run(&h, &lookup()).await;
    assert_eq!(
        after.report.outcome,
        Outcome::Succeeded,
        "{:#?}",
        after.report
    );
    let events = h.store.events(&after.run_id, 0).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.data, EventData::BreakerStateChanged(b)
                if b.arm == ArmKind::Tool && matches!(b.transition, Transition::Closed { .. }))),
        "the probe closed the arm: {events:#?}"
    );
    assert!(
        !events.iter().any(|e| e.kind() == EventKind::CallRejected),
        "no call was refused by a leaked probe slot"
    );
}

//! The engine's clock seam (issue 14, item 3): the engine reads *and waits
//! on* the clock it was built with, so a test that owns the clock owns
//! every wait of a run.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::{agent, answer, call, harness_with, kinds, run, script};
use rein_core::{Clock, EventKind, Instant, Outcome};
use rein_engine::{SystemClock, Timer};
use rein_testkit::RetryAfter;
use rein_testkit::order_desk::{Fault, Faults, GET_ORDER};
use serde_json::json;

/// The system clock, noting every instant a wait was placed at.
struct NotingClock {
    inner: SystemClock,
    waits: Mutex<Vec<Instant>>,
}

impl NotingClock {
    fn new() -> Self {
        NotingClock {
            inner: SystemClock::new(),
            waits: Mutex::new(Vec::new()),
        }
    }

    fn waits(&self) -> Vec<Instant> {
        self.waits.lock().unwrap().clone()
    }
}

impl Clock for NotingClock {
    fn now(&self) -> Instant {
        self.inner.now()
    }

    fn system_now(&self) -> SystemTime {
        self.inner.system_now()
    }
}

impl Timer for NotingClock {
    fn timer_instant(&self, at: Instant) -> tokio::time::Instant {
        self.waits.lock().unwrap().push(at);
        self.inner.timer_instant(at)
    }
}

#[tokio::test(start_paused = true)]
async fn a_retry_waits_on_the_engines_clock_exactly_the_servers_hint() {
    let clock = Arc::new(NotingClock::new());
    let for_engine: Arc<dyn Timer> = clock.clone();
    let h = harness_with(
        Faults::none().then(GET_ORDER, Fault::rate_limited(RetryAfter::Seconds(2))),
        move |b| b.clock(for_engine),
    )
    .await;
    let a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            answer("ok")
        ])),
        true,
    );
    let before = clock.waits().len();
    let out = run(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    let events = kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::RetryScheduled && d["delay_ms"] == 2000)
    );
    // Paused time: the 429 came at the origin, so the pause before the
    // retry ends two seconds later on the engine's own time line — and the
    // engine placed that wait on its clock, not on a timer of its own.
    let waits = clock.waits()[before..].to_vec();
    assert!(
        waits.contains(&Instant::from_origin(Duration::from_secs(2))),
        "{waits:?}"
    );
    assert_eq!(clock.now(), Instant::from_origin(Duration::from_secs(2)));
    // Every attempt's first-byte limit is a wait on the clock too: one per
    // attempt, each after the clock's reading when it was placed.
    assert!(waits.len() >= 3, "two attempts and the pause: {waits:?}");
}

#[tokio::test(start_paused = true)]
async fn the_engines_clock_is_the_one_its_host_sees() {
    let clock: Arc<dyn Timer> = Arc::new(SystemClock::new());
    let for_engine = clock.clone();
    let h = harness_with(Faults::none(), move |b| b.clock(for_engine)).await;
    assert!(Arc::ptr_eq(h.engine.clock(), &clock));
    // A host's wait on it is a wait on the engine's time line.
    let at = h.engine.clock().now() + Duration::from_millis(750);
    h.engine.clock().sleep_until(at).await;
    assert_eq!(clock.now(), at);
}

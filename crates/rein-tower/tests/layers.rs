//! The layers under paused time: deadline propagation, retry with
//! Retry-After, the breaker opening, the governor waiting, and all of them
//! composed in seed 002's order. The services are tower `service_fn`s
//! that script their answers and note when each call arrived (virtual
//! time: exact, no waiting).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::breaker::{BreakerConfig, BreakerState};
use rein_core::governor::GovernorConfig;
use rein_core::{Category, ToolClass};
use rein_tower::{
    AdoptDeadlineLayer, BoxError, BreakerLayer, CallDeadline, DeadlineLayer, GovernorLayer,
    IDEMPOTENCY_KEY, RetryLayer, refused,
};
use tokio::time::Instant;
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};

type Response = http::Response<String>;
/// A scripted answer: a status and its `Retry-After`.
type Answer = (u16, Option<&'static str>);
/// A call as the target saw it: when, and the deadline header it carried.
type Seen = (Instant, Option<String>);

/// A target that answers `script` in order (then 200s) and notes when
/// each call arrived and the deadline header it carried.
#[derive(Clone, Default)]
struct Target {
    script: Arc<Mutex<Vec<Answer>>>,
    calls: Arc<Mutex<Vec<Seen>>>,
}

impl Target {
    fn answering(script: &[Answer]) -> Target {
        let mut script = script.to_vec();
        script.reverse();
        Target {
            script: Arc::new(Mutex::new(script)),
            calls: Arc::default(),
        }
    }

    fn service(
        &self,
    ) -> impl Service<
        http::Request<String>,
        Response = Response,
        Error = BoxError,
        Future = impl Send + 'static,
    > + Clone
    + Send
    + 'static {
        let target = self.clone();
        service_fn(move |request: http::Request<String>| {
            let target = target.clone();
            async move {
                let header = request
                    .headers()
                    .get("rein-deadline-ms")
                    .map(|v| v.to_str().unwrap().to_owned());
                target.calls.lock().unwrap().push((Instant::now(), header));
                let (status, retry_after) =
                    target.script.lock().unwrap().pop().unwrap_or((200, None));
                let mut response = http::Response::builder().status(status);
                if let Some(wait) = retry_after {
                    response = response.header("retry-after", wait);
                }
                Ok::<_, BoxError>(response.body(String::new()).unwrap())
            }
        })
    }

    fn calls(&self) -> Vec<Seen> {
        self.calls.lock().unwrap().clone()
    }
}

fn get() -> http::Request<String> {
    http::Request::builder()
        .uri("http://orders.test/orders/42")
        .body(String::new())
        .unwrap()
}

fn within(request: http::Request<String>, d: Duration) -> http::Request<String> {
    let mut request = request;
    request.extensions_mut().insert(CallDeadline::within(d));
    request
}

async fn call<S>(service: &mut S, request: http::Request<String>) -> Result<Response, BoxError>
where
    S: Service<http::Request<String>, Response = Response, Error = BoxError>,
{
    service.ready().await?.call(request).await
}

/// `actual` is `expected` on tokio's paused clock, whose timers fire on
/// the next whole millisecond: never early, at most 1 ms late.
fn about(actual: Duration, expected: Duration, what: &str) {
    assert!(
        actual >= expected && actual <= expected + Duration::from_millis(1),
        "{what}: {actual:?}, expected {expected:?}"
    );
}

fn category(error: &BoxError) -> Category {
    refused(error)
        .unwrap_or_else(|| panic!("a layer's refusal: {error}"))
        .failure()
        .category()
}

// ---- deadline ----

#[tokio::test(start_paused = true)]
async fn the_deadline_goes_out_as_remaining_milliseconds_and_is_adopted_by_the_callee() {
    // The callee adopts its caller's header and reports the time it has.
    let callee =
        AdoptDeadlineLayer::new().layer(service_fn(|request: http::Request<String>| async move {
            let left = request
                .extensions()
                .get::<CallDeadline>()
                .map(CallDeadline::remaining);
            Ok::<_, BoxError>(http::Response::new(format!("{left:?}")))
        }));
    let mut client = DeadlineLayer::new().layer(callee);

    tokio::time::advance(Duration::from_millis(1)).await;
    let mut request = within(get(), Duration::from_millis(2_500));
    tokio::time::advance(Duration::from_millis(500)).await;
    let answer = call(&mut client, request.clone()).await.unwrap();
    assert_eq!(
        answer.body(),
        &format!("{:?}", Some(Duration::from_millis(2_000)))
    );

    // Without a deadline nothing is sent or invented.
    request.extensions_mut().clear();
    let answer = call(&mut client, request).await.unwrap();
    assert_eq!(answer.body(), "None");
}

#[tokio::test(start_paused = true)]
async fn a_call_outliving_its_deadline_ends_as_a_timeout_and_a_spent_one_is_never_sent() {
    let slow = service_fn(|_: http::Request<String>| async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        Ok::<_, BoxError>(http::Response::new(String::new()))
    });
    let mut client = DeadlineLayer::new()
        .within(Duration::from_secs(1))
        .layer(slow);
    let began = Instant::now();
    let error = call(&mut client, get()).await.unwrap_err();
    assert_eq!(category(&error), Category::Timeout);
    assert_eq!(
        began.elapsed(),
        Duration::from_secs(1),
        "cut at the deadline"
    );

    let target = Target::answering(&[]);
    let mut client = DeadlineLayer::new().layer(target.service());
    let spent = within(get(), Duration::ZERO);
    let error = call(&mut client, spent).await.unwrap_err();
    assert_eq!(category(&error), Category::BudgetExhausted);
    assert!(target.calls().is_empty(), "never sent");
}

#[tokio::test(start_paused = true)]
async fn a_malformed_deadline_header_is_refused_as_invalid_arguments() {
    let target = Target::answering(&[]);
    let mut callee = AdoptDeadlineLayer::new().layer(target.service());
    let mut request = get();
    request
        .headers_mut()
        .insert("rein-deadline-ms", http::HeaderValue::from_static("1.5s"));
    let error = call(&mut callee, request).await.unwrap_err();
    assert_eq!(category(&error), Category::InvalidArguments);
    assert!(target.calls().is_empty());
}

// ---- retry ----

#[tokio::test(start_paused = true)]
async fn a_rate_limited_read_is_retried_after_the_servers_wait() {
    let target = Target::answering(&[(429, Some("3")), (503, None)]);
    let mut client = RetryLayer::new("orders", ToolClass::Read, Duration::from_millis(50))
        .rng_seed(7)
        .layer(target.service());
    let answer = call(&mut client, get()).await.unwrap();
    assert_eq!(answer.status(), 200);
    let calls = target.calls();
    assert_eq!(calls.len(), 3, "429, 503, then 200");
    about(
        calls[1].0 - calls[0].0,
        Duration::from_secs(3),
        "the server's Retry-After, not shortened",
    );
    // The 503 had no Retry-After: a full-jitter pause within the first
    // ceiling (250 ms).
    assert!(calls[2].0 - calls[1].0 <= Duration::from_millis(250));
}

#[tokio::test(start_paused = true)]
async fn an_irreversible_call_is_never_repeated() {
    let target = Target::answering(&[(503, None)]);
    let mut client = RetryLayer::new("mail", ToolClass::Irreversible, Duration::from_millis(50))
        .layer(target.service());
    let answer = call(&mut client, get()).await.unwrap();
    assert_eq!(answer.status(), 503, "the service's own answer");
    assert_eq!(target.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_write_whose_effect_is_unknown_is_repeated_only_under_its_idempotency_key() {
    let target = Target::answering(&[(502, None)]);
    let mut client = RetryLayer::new(
        "orders",
        ToolClass::IdempotentWrite,
        Duration::from_millis(50),
    )
    .rng_seed(7)
    .layer(target.service());
    let answer = call(&mut client, get()).await.unwrap();
    assert_eq!(answer.status(), 502, "no key: not repeated");
    assert_eq!(target.calls().len(), 1);

    let target = Target::answering(&[(502, None)]);
    let mut client = RetryLayer::new(
        "orders",
        ToolClass::IdempotentWrite,
        Duration::from_millis(50),
    )
    .rng_seed(7)
    .layer(target.service());
    let mut keyed = get();
    keyed.headers_mut().insert(
        IDEMPOTENCY_KEY,
        http::HeaderValue::from_static("order-42-move"),
    );
    let answer = call(&mut client, keyed).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert_eq!(target.calls().len(), 2, "sent again under its key");
}

#[tokio::test(start_paused = true)]
async fn retries_leave_room_for_one_attempt_before_the_deadline() {
    // The server asks for 10 s; the call has 2 s: not retried.
    let target = Target::answering(&[(429, Some("10"))]);
    let mut client = RetryLayer::new("orders", ToolClass::Read, Duration::from_millis(50))
        .layer(target.service());
    let answer = call(&mut client, within(get(), Duration::from_secs(2)))
        .await
        .unwrap();
    assert_eq!(answer.status(), 429);
    assert_eq!(target.calls().len(), 1);
}

// ---- breaker ----

#[tokio::test(start_paused = true)]
async fn consecutive_failures_open_the_breaker_and_it_probes_after_its_break() {
    let target = Target::answering(&[(500, None); 5]);
    let breaker = BreakerLayer::new("orders", BreakerConfig::default()).unwrap();
    let mut client = breaker.layer(target.service());
    for _ in 0..5 {
        assert_eq!(call(&mut client, get()).await.unwrap().status(), 500);
    }
    assert_eq!(breaker.state(), BreakerState::Open);

    let error = call(&mut client, get()).await.unwrap_err();
    let failure = refused(&error).unwrap().failure();
    assert_eq!(failure.category(), Category::CircuitOpen);
    assert_eq!(failure.retry_after(), Some(Duration::from_secs(30)));
    assert_eq!(target.calls().len(), 5, "the refused call never left");

    // After the break a probe goes through, and successes close it.
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(call(&mut client, get()).await.unwrap().status(), 200);
    assert_eq!(breaker.state(), BreakerState::HalfOpen);
    assert_eq!(call(&mut client, get()).await.unwrap().status(), 200);
    assert_eq!(breaker.state(), BreakerState::Closed);
}

// ---- governor ----

fn one_per_second() -> GovernorConfig {
    let mut config = GovernorConfig::default();
    config.rate_per_sec = Some(1.0);
    config.burst = Some(1);
    config
}

#[tokio::test(start_paused = true)]
async fn the_governor_makes_a_call_wait_its_turn_and_sheds_one_that_cannot_come_in_time() {
    let target = Target::answering(&[]);
    let governor = GovernorLayer::new("orders", one_per_second()).unwrap();
    let client = governor.layer(target.service());

    let (first, second) =
        tokio::join!(client.clone().oneshot(get()), client.clone().oneshot(get()));
    assert_eq!(first.unwrap().status(), 200);
    assert_eq!(second.unwrap().status(), 200);
    let calls = target.calls();
    assert_eq!(
        calls[1].0 - calls[0].0,
        Duration::from_secs(1),
        "one per second"
    );

    // The bucket is empty for a second; a call with 200 ms is shed at
    // once, with the wait it would have needed.
    let began = Instant::now();
    let error = client
        .clone()
        .oneshot(within(get(), Duration::from_millis(200)))
        .await
        .unwrap_err();
    let failure = refused(&error).unwrap().failure();
    assert_eq!(failure.category(), Category::RateLimited);
    assert!(failure.retry_after().is_some());
    assert_eq!(began.elapsed(), Duration::ZERO, "not waited in vain");
    assert_eq!(target.calls().len(), 2);
    assert_eq!(governor.in_flight(), 0);
    assert_eq!(governor.queued(), 0, "the shed ticket left the queue");
}

#[tokio::test(start_paused = true)]
async fn a_waiter_dropped_in_the_queue_leaves_no_slot_behind() {
    let target = Target::answering(&[]);
    let governor = GovernorLayer::new("orders", one_per_second()).unwrap();
    let client = governor.layer(target.service());
    client.clone().oneshot(get()).await.unwrap();
    let waiting = tokio::spawn(client.clone().oneshot(get()));
    tokio::task::yield_now().await;
    assert_eq!(governor.queued(), 1);
    waiting.abort();
    let _ = waiting.await;
    assert_eq!(governor.queued(), 0);
    assert_eq!(governor.in_flight(), 0);
}

// ---- composed ----

#[tokio::test(start_paused = true)]
async fn composed_in_seed_002s_order_one_call_is_one_admission_and_one_breaker_outcome() {
    let target = Target::answering(&[(503, None), (503, None)]);
    let breaker = BreakerLayer::new("orders", BreakerConfig::default()).unwrap();
    let governor = GovernorLayer::new("orders", GovernorConfig::default()).unwrap();
    let mut client = ServiceBuilder::new()
        .layer(breaker.clone())
        .layer(governor.clone())
        .layer(RetryLayer::new("orders", ToolClass::Read, Duration::from_millis(50)).rng_seed(7))
        .layer(DeadlineLayer::new())
        .service(target.service());

    let answer = call(&mut client, within(get(), Duration::from_secs(10)))
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let calls = target.calls();
    assert_eq!(calls.len(), 3, "retried inside one admission");
    let sent: Vec<u64> = calls
        .iter()
        .map(|(_, h)| h.as_deref().unwrap().parse().unwrap())
        .collect();
    assert!(
        sent.windows(2).all(|w| w[1] <= w[0]),
        "one deadline, shrinking: {sent:?}"
    );
    assert!(sent[0] <= 10_000);
    assert_eq!(breaker.state(), BreakerState::Closed, "one success outcome");
    assert_eq!(governor.in_flight(), 0, "the permit came back");
}

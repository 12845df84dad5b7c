//! The order desk over real loopback HTTP.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use rein_core::{Category, Effect};
use rein_testkit::RetryAfter;
use rein_testkit::order_desk::{
    DEADLINE_HEADER, DeskLog, EffectKind, ErrorBody, Fault, Faults, GET_ORDER,
    IDEMPOTENCY_KEY_HEADER, OrderDesk, OrderDeskConfig, REPLAYED_HEADER, RESTORE_DELIVERY_TIME,
    SEND_EMAIL, UPDATE_DELIVERY_TIME,
};
use reqwest::{Client, StatusCode};
use serde_json::{Value, json};

const NEW_DATE: &str = "2026-01-06T09:00:00Z";

fn update_args() -> Value {
    json!({"order_id": "A-1001", "delivery_date": NEW_DATE})
}

fn email_args() -> Value {
    json!({"to": "buyer-a1001@example.com", "subject": "New delivery time", "body": "Tomorrow morning."})
}

async fn call(
    client: &Client,
    desk: &OrderDesk,
    tool: &str,
    key: Option<&str>,
    args: &Value,
) -> reqwest::Response {
    let mut request = client.post(desk.tool_url(tool)).json(args);
    if let Some(key) = key {
        request = request.header(IDEMPOTENCY_KEY_HEADER, key);
    }
    request.send().await.expect("the desk answers")
}

async fn error_of(response: reqwest::Response) -> ErrorBody {
    response
        .json::<ErrorBody>()
        .await
        .expect("a structured error body")
}

#[tokio::test]
async fn get_order_returns_the_seeded_order() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let response = call(
        &client,
        &desk,
        GET_ORDER,
        None,
        &json!({"order_id": "A-1001"}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let order: Value = response.json().await.unwrap();
    assert_eq!(order["order_id"], "A-1001");
    assert_eq!(order["status"], "confirmed");
    assert_eq!(order["delivery_date"], "2026-01-05T14:00:00Z");
    assert_eq!(order["buyer_email"], "buyer-a1001@example.com");
    assert_eq!(order["items"][0]["sku"], "SKU-CHAIR-01");
    assert!(
        desk.side_effects().is_empty(),
        "a read performs no side effect"
    );
    desk.shutdown().await.unwrap();
}

#[tokio::test]
async fn unknown_order_is_404_not_found_with_structured_body() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let response = call(&client, &desk, GET_ORDER, None, &json!({"order_id": "Z-9"})).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body = error_of(response).await;
    assert_eq!(body.error.category, Category::NotFound);
    assert!(!body.error.retryable);
    assert_eq!(body.error.effect, Effect::NotApplied);
    assert_eq!(body.error.retry_after_ms, None);
}

#[tokio::test]
async fn error_body_has_exactly_the_contract_fields() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let response = call(&client, &desk, GET_ORDER, None, &json!({})).await;
    let body: Value = response.json().await.unwrap();
    let fields: Vec<&str> = body["error"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let mut fields = fields;
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "category",
            "effect",
            "message",
            "retry_after_ms",
            "retryable"
        ]
    );
    assert_eq!(body["error"]["category"], "invalid_arguments");
    assert_eq!(body["error"]["effect"], "not_applied");
    assert_eq!(body["error"]["retry_after_ms"], Value::Null);
}

#[tokio::test]
async fn invalid_arguments_are_400_and_never_applied() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let cases = [
        (
            UPDATE_DELIVERY_TIME,
            json!({"order_id": "A-1001"}),
            "delivery_date",
        ),
        (
            UPDATE_DELIVERY_TIME,
            json!({"order_id": 1001, "delivery_date": NEW_DATE}),
            "order_id",
        ),
        (
            SEND_EMAIL,
            json!({"to": "x@example.com", "subject": "s"}),
            "body",
        ),
        (SEND_EMAIL, json!(["not", "an", "object"]), "object"),
    ];
    for (tool, args, mentioned) in cases {
        let response = call(&client, &desk, tool, Some("k-invalid"), &args).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{tool} {args}");
        let body = error_of(response).await;
        assert_eq!(body.error.category, Category::InvalidArguments);
        assert!(!body.error.retryable);
        assert!(
            body.error.message.contains(mentioned),
            "{}",
            body.error.message
        );
    }
    let not_json = client
        .post(desk.tool_url(GET_ORDER))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(not_json.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        error_of(not_json).await.error.category,
        Category::InvalidArguments
    );
    assert!(desk.side_effects().is_empty());
    assert_eq!(
        desk.order("A-1001").unwrap().delivery_date,
        "2026-01-05T14:00:00Z"
    );
}

#[tokio::test]
async fn unknown_tool_is_404_not_found() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let response = call(&client, &desk, "cancel_order", None, &json!({})).await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body = error_of(response).await;
    assert_eq!(body.error.category, Category::NotFound);
    assert!(body.error.message.contains("get_order"));
}

#[tokio::test]
async fn update_without_idempotency_key_is_400_and_changes_nothing() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let response = call(&client, &desk, UPDATE_DELIVERY_TIME, None, &update_args()).await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = error_of(response).await;
    assert_eq!(body.error.category, Category::InvalidArguments);
    assert!(body.error.message.contains(IDEMPOTENCY_KEY_HEADER));
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 0);
}

#[tokio::test]
async fn same_key_twice_applies_once_and_replays_the_stored_result() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();

    let first = call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("key-1"),
        &update_args(),
    )
    .await;
    assert_eq!(first.status(), StatusCode::OK);
    assert!(first.headers().get(REPLAYED_HEADER).is_none());
    let first: Value = first.json().await.unwrap();
    assert_eq!(
        first,
        json!({"order_id": "A-1001", "previous_delivery_date": "2026-01-05T14:00:00Z", "delivery_date": NEW_DATE})
    );

    let second = call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("key-1"),
        &update_args(),
    )
    .await;
    assert_eq!(second.status(), StatusCode::OK);
    assert_eq!(second.headers()[REPLAYED_HEADER], "true");
    let second: Value = second.json().await.unwrap();
    assert_eq!(
        second, first,
        "the replay is the stored result, not a new one"
    );

    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(desk.replayed_count(UPDATE_DELIVERY_TIME), 1);
    let applied = desk.applied(UPDATE_DELIVERY_TIME);
    assert_eq!(applied[0].idempotency_key.as_deref(), Some("key-1"));
    assert_eq!(applied[0].args, update_args());
    assert_eq!(desk.order("A-1001").unwrap().delivery_date, NEW_DATE);
    let requests = desk.requests();
    assert_eq!(requests.len(), 2);
    assert!(!requests[0].replayed);
    assert!(requests[1].replayed);
}

#[tokio::test]
async fn reused_key_with_other_arguments_is_409_conflict() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("key-1"),
        &update_args(),
    )
    .await;
    let other = json!({"order_id": "A-1001", "delivery_date": "2026-02-01T09:00:00Z"});
    let response = call(&client, &desk, UPDATE_DELIVERY_TIME, Some("key-1"), &other).await;
    assert_eq!(response.status(), StatusCode::CONFLICT);
    assert_eq!(error_of(response).await.error.category, Category::Conflict);
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(desk.order("A-1001").unwrap().delivery_date, NEW_DATE);
}

#[tokio::test]
async fn lost_response_errors_the_client_but_applies_once_and_lookup_finds_it() {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().then(UPDATE_DELIVERY_TIME, Fault::LoseResponse)),
    )
    .await
    .unwrap();
    let client = Client::new();

    // The status line and headers arrive, then the connection aborts: the
    // client must not read a 200 it never finished as a success.
    let response = client
        .post(desk.tool_url(UPDATE_DELIVERY_TIME))
        .header(IDEMPOTENCY_KEY_HEADER, "key-lost")
        .json(&update_args())
        .send()
        .await
        .expect("headers arrive before the abort");
    assert_eq!(response.status(), StatusCode::OK);
    let body = response.json::<Value>().await;
    assert!(
        body.is_err(),
        "a lost response must not read as a success: {body:?}"
    );

    // The effect happened exactly once.
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(desk.order("A-1001").unwrap().delivery_date, NEW_DATE);
    let record = &desk.requests()[0];
    assert_eq!(record.fault, Some(Fault::LoseResponse));
    assert!(record.response_lost);
    assert_eq!(record.status, Some(200));

    // Lookup by key finds the stored result.
    let lookup = client
        .get(desk.status_url(UPDATE_DELIVERY_TIME, "key-lost"))
        .send()
        .await
        .unwrap();
    assert_eq!(lookup.status(), StatusCode::OK);
    let stored: Value = lookup.json().await.unwrap();
    assert_eq!(stored["delivery_date"], NEW_DATE);
    assert_eq!(stored["previous_delivery_date"], "2026-01-05T14:00:00Z");

    // A retry with the same key collapses into the stored result.
    let retry = call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("key-lost"),
        &update_args(),
    )
    .await;
    assert_eq!(retry.status(), StatusCode::OK);
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");
    assert_eq!(retry.json::<Value>().await.unwrap(), stored);
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

#[tokio::test]
async fn lookup_of_a_key_never_applied_is_404_not_found() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let response = client
        .get(desk.status_url(UPDATE_DELIVERY_TIME, "never sent & odd=key"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body = error_of(response).await;
    assert_eq!(body.error.category, Category::NotFound);
    assert!(
        body.error.message.contains("never sent & odd=key"),
        "{}",
        body.error.message
    );

    let no_key = client
        .get(format!(
            "{}/tools/{UPDATE_DELIVERY_TIME}/status",
            desk.base_url()
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(no_key.status(), StatusCode::BAD_REQUEST);

    let not_keyed = client
        .get(desk.status_url(SEND_EMAIL, "k"))
        .send()
        .await
        .unwrap();
    assert_eq!(not_keyed.status(), StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn rate_limit_answers_429_with_retry_after_and_applies_nothing() {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(
        Faults::none().then(SEND_EMAIL, Fault::rate_limited(RetryAfter::Seconds(3600))),
    ))
    .await
    .unwrap();
    let client = Client::new();
    let response = call(&client, &desk, SEND_EMAIL, None, &email_args()).await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(response.headers()["retry-after"], "3600");
    let body = error_of(response).await;
    assert_eq!(body.error.category, Category::RateLimited);
    assert!(body.error.retryable);
    assert_eq!(body.error.retry_after_ms, Some(3_600_000));
    assert_eq!(body.error.effect, Effect::NotApplied);
    assert_eq!(desk.applied_count(SEND_EMAIL), 0);

    // The queue held one fault: the next request sends.
    let response = call(&client, &desk, SEND_EMAIL, None, &email_args()).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
}

#[tokio::test]
async fn retry_after_can_be_an_http_date() {
    let at = SystemTime::now() + Duration::from_secs(120);
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().then(GET_ORDER, Fault::rate_limited(RetryAfter::Date(at)))),
    )
    .await
    .unwrap();
    let client = Client::new();
    let response = call(
        &client,
        &desk,
        GET_ORDER,
        None,
        &json!({"order_id": "A-1001"}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let header = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(header.ends_with(" GMT"), "{header}");
    let wait_ms = error_of(response).await.error.retry_after_ms.unwrap();
    assert!((100_000..=120_000).contains(&wait_ms), "{wait_ms}");
}

#[tokio::test]
async fn injected_5xx_is_structured_and_not_applied() {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().always(UPDATE_DELIVERY_TIME, Fault::status(503))),
    )
    .await
    .unwrap();
    let client = Client::new();
    for _ in 0..2 {
        let response = call(
            &client,
            &desk,
            UPDATE_DELIVERY_TIME,
            Some("k"),
            &update_args(),
        )
        .await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        let body = error_of(response).await;
        assert_eq!(body.error.category, Category::Transient);
        assert!(body.error.retryable);
        assert_eq!(body.error.effect, Effect::NotApplied);
    }
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 0);
    desk.clear_faults();
    let response = call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("k"),
        &update_args(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
}

#[tokio::test]
async fn apply_then_status_applies_but_reports_maybe_applied() {
    let desk = OrderDesk::start().await.unwrap();
    desk.push_fault(UPDATE_DELIVERY_TIME, Fault::ApplyThenStatus { code: 500 })
        .unwrap();
    let client = Client::new();
    let response = call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("k-500"),
        &update_args(),
    )
    .await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    let body = error_of(response).await;
    assert_eq!(body.error.effect, Effect::MaybeApplied);
    assert_eq!(body.error.category, Category::Transient);
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    let lookup = client
        .get(desk.status_url(UPDATE_DELIVERY_TIME, "k-500"))
        .send()
        .await
        .unwrap();
    assert_eq!(lookup.status(), StatusCode::OK);
}

#[tokio::test]
async fn email_is_never_deduplicated() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let first = call(&client, &desk, SEND_EMAIL, Some("same-key"), &email_args()).await;
    let second = call(&client, &desk, SEND_EMAIL, Some("same-key"), &email_args()).await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(second.status(), StatusCode::OK);
    assert!(second.headers().get(REPLAYED_HEADER).is_none());
    let first: Value = first.json().await.unwrap();
    let second: Value = second.json().await.unwrap();
    assert_eq!(first["status"], "sent");
    assert_ne!(first["message_id"], second["message_id"]);
    assert_eq!(desk.applied_count(SEND_EMAIL), 2);
    assert_eq!(desk.replayed_count(SEND_EMAIL), 0);
}

#[tokio::test]
async fn restore_delivery_time_compensates_and_is_idempotent() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("fwd"),
        &update_args(),
    )
    .await;
    let back = json!({"order_id": "A-1001", "delivery_date": "2026-01-05T14:00:00Z"});
    for _ in 0..2 {
        let response = call(&client, &desk, RESTORE_DELIVERY_TIME, Some("comp"), &back).await;
        assert_eq!(response.status(), StatusCode::OK);
        let result: Value = response.json().await.unwrap();
        assert_eq!(result["previous_delivery_date"], NEW_DATE);
        assert_eq!(result["delivery_date"], "2026-01-05T14:00:00Z");
    }
    assert_eq!(desk.applied_count(RESTORE_DELIVERY_TIME), 1);
    assert_eq!(desk.replayed_count(RESTORE_DELIVERY_TIME), 1);
    assert_eq!(
        desk.order("A-1001").unwrap().delivery_date,
        "2026-01-05T14:00:00Z"
    );
}

#[tokio::test]
async fn rein_headers_are_recorded_in_the_request_log() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    client
        .post(desk.tool_url(UPDATE_DELIVERY_TIME))
        .header(IDEMPOTENCY_KEY_HEADER, "k-h")
        .header(DEADLINE_HEADER, "12345")
        .header("Rein-Run-Id", "run-1")
        .header("Rein-Intent-Id", "intent-7")
        .header("Rein-Attempt", "2")
        .json(&update_args())
        .send()
        .await
        .unwrap();
    let record = &desk.requests()[0];
    assert_eq!(record.method, "POST");
    assert_eq!(record.tool, UPDATE_DELIVERY_TIME);
    assert_eq!(record.headers.idempotency_key.as_deref(), Some("k-h"));
    assert_eq!(record.headers.deadline_ms.as_deref(), Some("12345"));
    assert_eq!(record.headers.run_id.as_deref(), Some("run-1"));
    assert_eq!(record.headers.intent_id.as_deref(), Some("intent-7"));
    assert_eq!(record.headers.attempt.as_deref(), Some("2"));
    assert_eq!(record.args, update_args());
    assert_eq!(record.status, Some(200));
    assert_eq!(record.fault, None);
}

#[tokio::test(start_paused = true)]
async fn delay_fault_answers_late_in_tokio_time() {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default()
            .with_faults(Faults::none().then(GET_ORDER, Fault::Delay(Duration::from_secs(30)))),
    )
    .await
    .unwrap();
    let client = Client::new();
    let started = tokio::time::Instant::now();
    let response = call(
        &client,
        &desk,
        GET_ORDER,
        None,
        &json!({"order_id": "A-1002"}),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(started.elapsed() >= Duration::from_secs(30));
    assert_eq!(
        desk.requests()[0].fault,
        Some(Fault::Delay(Duration::from_secs(30)))
    );
}

#[tokio::test]
async fn a_held_request_waits_unhandled_until_released_then_applies_once() {
    let desk = OrderDesk::start_with(
        OrderDeskConfig::default().with_faults(
            Faults::none()
                .then(UPDATE_DELIVERY_TIME, Fault::Hold)
                .then(UPDATE_DELIVERY_TIME, Fault::Hold),
        ),
    )
    .await
    .unwrap();
    let client = Client::new();
    let args = json!({"order_id": "A-1001", "delivery_date": "2026-12-24"});
    let first = tokio::spawn({
        let (client, url, args) = (
            client.clone(),
            desk.tool_url(UPDATE_DELIVERY_TIME),
            args.clone(),
        );
        async move {
            client
                .post(url)
                .header(IDEMPOTENCY_KEY_HEADER, "k-1")
                .json(&args)
                .send()
                .await
        }
    });
    assert!(
        desk.until_held(1, Duration::from_secs(10)).await,
        "the request arrived"
    );
    assert_eq!(
        desk.request_count(UPDATE_DELIVERY_TIME),
        1,
        "logged on arrival"
    );
    assert_eq!(
        desk.applied_count(UPDATE_DELIVERY_TIME),
        0,
        "nothing handled while held"
    );
    assert!(!first.is_finished());
    desk.release_held();
    let answered = first.await.unwrap().unwrap();
    assert_eq!(answered.status(), StatusCode::OK);
    assert_eq!(desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert_eq!(desk.held_count(), 0);

    // The next held request waits for the next release, here over HTTP.
    let second = tokio::spawn({
        let (client, url) = (client.clone(), desk.tool_url(UPDATE_DELIVERY_TIME));
        async move {
            client
                .post(url)
                .header(IDEMPOTENCY_KEY_HEADER, "k-2")
                .json(&args)
                .send()
                .await
        }
    });
    assert!(desk.until_held(1, Duration::from_secs(10)).await);
    let released = client
        .post(format!("{}/_release", desk.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(released.status(), StatusCode::NO_CONTENT);
    assert_eq!(second.await.unwrap().unwrap().status(), StatusCode::OK);
    assert_eq!(desk.requests()[1].fault, Some(Fault::Hold));
}

#[tokio::test]
async fn faults_can_be_set_over_http_and_log_is_served() {
    let desk = OrderDesk::start().await.unwrap();
    let client = Client::new();
    let plan = json!({
        "send_email": {"queue": [{"kind": "status", "code": 429, "retry_after": {"seconds": 5}}]},
        "update_delivery_time": {"always": {"kind": "apply_then_status", "code": 502}},
    });
    let set = client
        .post(format!("{}/_faults", desk.base_url()))
        .json(&plan)
        .send()
        .await
        .unwrap();
    assert_eq!(set.status(), StatusCode::OK);
    assert_eq!(
        desk.faults(),
        Faults::none()
            .then(SEND_EMAIL, Fault::rate_limited(RetryAfter::Seconds(5)))
            .always(UPDATE_DELIVERY_TIME, Fault::ApplyThenStatus { code: 502 })
    );

    let refused = client
        .post(format!("{}/_faults", desk.base_url()))
        .json(&json!({"send_email": {"queue": [{"kind": "status", "code": 200}]}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    assert_eq!(
        error_of(refused).await.error.category,
        Category::InvalidArguments
    );

    let email = call(&client, &desk, SEND_EMAIL, None, &email_args()).await;
    assert_eq!(email.status(), StatusCode::TOO_MANY_REQUESTS);
    let update = call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("k"),
        &update_args(),
    )
    .await;
    assert_eq!(update.status(), StatusCode::BAD_GATEWAY);

    let log: DeskLog = client
        .get(format!("{}/_log", desk.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(log, desk.log());
    assert_eq!(log.requests.len(), 2);
    assert_eq!(log.side_effects.len(), 1);
    assert_eq!(log.side_effects[0].effect, EffectKind::Applied);
    assert_eq!(log.orders.len(), 3);

    let cleared = client
        .delete(format!("{}/_faults", desk.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(cleared.status(), StatusCode::NO_CONTENT);
    assert!(desk.faults().is_empty());
}

#[tokio::test]
async fn demo_faults_play_the_seed_scenario() {
    let desk = OrderDesk::start_with(OrderDeskConfig::demo())
        .await
        .unwrap();
    let client = Client::new();

    let read = call(
        &client,
        &desk,
        GET_ORDER,
        None,
        &json!({"order_id": "A-1001"}),
    )
    .await;
    assert_eq!(read.status(), StatusCode::OK);

    let lost = async {
        call(
            &client,
            &desk,
            UPDATE_DELIVERY_TIME,
            Some("demo-key"),
            &update_args(),
        )
        .await
        .json::<Value>()
        .await
    }
    .await;
    assert!(lost.is_err());
    let retry = call(
        &client,
        &desk,
        UPDATE_DELIVERY_TIME,
        Some("demo-key"),
        &update_args(),
    )
    .await;
    assert_eq!(retry.headers()[REPLAYED_HEADER], "true");

    let email = call(&client, &desk, SEND_EMAIL, None, &email_args()).await;
    assert_eq!(email.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(error_of(email).await.error.retry_after_ms, Some(3_600_000));

    let log = desk.log();
    let applied: Vec<_> = log
        .side_effects
        .iter()
        .filter(|e| e.effect == EffectKind::Applied)
        .map(|e| e.tool.as_str())
        .collect();
    assert_eq!(
        applied,
        [UPDATE_DELIVERY_TIME],
        "exactly one update and no email"
    );
}

#[tokio::test]
async fn invalid_fault_status_is_refused_at_start() {
    let err = OrderDesk::start_with(
        OrderDeskConfig::default().with_faults(Faults::none().then(GET_ORDER, Fault::status(302))),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("302"), "{err}");
}

#[tokio::test]
async fn shutdown_stops_the_service() {
    let desk = OrderDesk::start().await.unwrap();
    let url = desk.tool_url(GET_ORDER);
    let client = Client::new();
    call(
        &client,
        &desk,
        GET_ORDER,
        None,
        &json!({"order_id": "A-1001"}),
    )
    .await;
    desk.shutdown().await.unwrap();
    let after = Client::new()
        .post(url)
        .json(&json!({"order_id": "A-1001"}))
        .send()
        .await;
    assert!(after.is_err(), "{after:?}");
}

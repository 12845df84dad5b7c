//! A plain HTTP client (reqwest) behind rein's layers, against a real
//! service on loopback: rein's order desk, which answers the first move of
//! an order `429` with `Retry-After: 1`, then `502`.
//!
//! The call carries a 10 s deadline and an `Idempotency-Key`. The retry
//! layer waits the server's second (never less), then repeats the write
//! after the 502 only because the key makes it safe (the desk deduplicates
//! by it); the desk sees every attempt with the remaining milliseconds of
//! the one deadline. The breaker and the governor see one call.
//!
//! ```text
//! cargo run -p rein-tower --example tower_client
//! ```
//!
//! Exits non-zero if the desk applied the move other than once.

use std::time::Duration;

use rein_core::ToolClass;
use rein_core::breaker::BreakerConfig;
use rein_core::governor::GovernorConfig;
use rein_testkit::RetryAfter;
use rein_testkit::order_desk::{Fault, OrderDesk, UPDATE_DELIVERY_TIME};
use rein_tower::{
    BoxError, BreakerLayer, CallDeadline, DeadlineLayer, GovernorLayer, IDEMPOTENCY_KEY, RetryLayer,
};
use tower::{Service, ServiceBuilder, ServiceExt, service_fn};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let desk = OrderDesk::start().await?;
    desk.push_fault(
        UPDATE_DELIVERY_TIME,
        Fault::rate_limited(RetryAfter::Seconds(1)),
    )?;
    desk.push_fault(UPDATE_DELIVERY_TIME, Fault::status(502))?;

    // The transport: any client that is a tower service over
    // `http::Request`; here reqwest, adapted in a few lines.
    let http = reqwest::Client::new();
    let transport = service_fn(move |request: http::Request<String>| {
        let http = http.clone();
        async move {
            let response = http.execute(reqwest::Request::try_from(request)?).await?;
            let (status, headers) = (response.status(), response.headers().clone());
            let mut answer = http::Response::new(response.text().await?);
            *answer.status_mut() = status;
            *answer.headers_mut() = headers;
            Ok::<_, BoxError>(answer)
        }
    });

    let breaker = BreakerLayer::new("order-desk", BreakerConfig::default())?;
    let mut group = GovernorConfig::default();
    group.rate_per_sec = Some(20.0);
    let mut client = ServiceBuilder::new()
        .layer(breaker.clone())
        .layer(GovernorLayer::new("order-desk", group)?)
        .layer(RetryLayer::new(
            "order-desk",
            ToolClass::IdempotentWrite,
            Duration::from_millis(50),
        ))
        .layer(DeadlineLayer::new())
        .service(transport);

    let body = serde_json::json!({"order_id": "A-1001", "delivery_date": "2026-12-24"});
    let mut request = http::Request::post(desk.tool_url(UPDATE_DELIVERY_TIME))
        .header("content-type", "application/json")
        .header(IDEMPOTENCY_KEY, "move-A-1001-to-christmas-eve")
        .body(body.to_string())?;
    request
        .extensions_mut()
        .insert(CallDeadline::within(Duration::from_secs(10)));

    let began = std::time::Instant::now();
    let response = client.ready().await?.call(request).await?;
    let took = began.elapsed();

    let attempts: Vec<String> = desk
        .requests()
        .into_iter()
        .filter(|r| r.tool == UPDATE_DELIVERY_TIME)
        .map(|r| {
            format!(
                "{} (deadline {} ms)",
                r.status.map_or("-".to_owned(), |s| s.to_string()),
                r.headers.deadline_ms.unwrap_or_default()
            )
        })
        .collect();
    println!("answered {} after {took:.1?}", response.status());
    println!("attempts the desk saw: {}", attempts.join(", "));
    println!("breaker: {}", breaker.state().as_str());
    let applied = desk.applied_count(UPDATE_DELIVERY_TIME);
    println!("moves applied: {applied}");
    if !response.status().is_success() || applied != 1 || attempts.len() != 3 {
        return Err(format!(
            "expected 429, 502, 200 and one move; got {} with {applied} move(s)",
            response.status()
        )
        .into());
    }
    Ok(())
}

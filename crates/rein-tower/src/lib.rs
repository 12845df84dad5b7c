//! tower layers that give a plain service call rein's guarantees, outside
//! any run.
//!
//! A program that calls a service (an HTTP API through hyper or reqwest,
//! anything that is a [`tower::Service`] over [`http::Request`]) gets the
//! same policies rein's tool calls get, each a [`tower::Layer`] over
//! rein-core's pure policy:
//!
//! | layer | policy | what it does |
//! | --- | --- | --- |
//! | [`BreakerLayer`] | [`rein_core::breaker::Breaker`] | refuses calls while the target is failing (`circuit_open`, with the wait) |
//! | [`GovernorLayer`] | [`rein_core::governor::Governor`] | a rate, a burst, an adaptive concurrency limit, fair shares between tenants; waits within the deadline or sheds |
//! | [`RetryLayer`] | [`rein_core::retry::RetryPolicy::decide`] | classified retries: never an irreversible call, the server's `Retry-After`, full jitter, a retry budget, room before the deadline |
//! | [`DeadlineLayer`] | [`rein_core::deadline::Deadline`] | sends `Rein-Deadline-Ms` on and stops waiting when it is spent |
//! | [`AdoptDeadlineLayer`] | the same | a service adopts its caller's `Rein-Deadline-Ms` |
//!
//! # Order
//!
//! Seed 002's composition: the breaker outermost (a refused call costs
//! nothing, not even a place in the queue), then admission, then retry
//! innermost, so that every attempt of one call is one admission and one
//! breaker outcome, and the deadline below all of them, on each attempt.
//!
//! ```
//! use std::time::Duration;
//! use rein_core::breaker::BreakerConfig;
//! use rein_core::governor::GovernorConfig;
//! use rein_core::ToolClass;
//! use rein_tower::{BreakerLayer, CallDeadline, DeadlineLayer, GovernorLayer, RetryLayer};
//! use tower::{Service, ServiceBuilder, service_fn};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let mut governor = GovernorConfig::default();
//! governor.rate_per_sec = Some(50.0);
//! let mut client = ServiceBuilder::new()
//!     .layer(BreakerLayer::new("orders", BreakerConfig::default())?)
//!     .layer(GovernorLayer::new("orders", governor)?)
//!     .layer(RetryLayer::new("orders", ToolClass::Read, Duration::from_millis(50)))
//!     .layer(DeadlineLayer::new())
//!     .service(service_fn(|request: http::Request<String>| async move {
//!         // A real client (hyper, reqwest) goes here; this one answers
//!         // with the deadline it was sent.
//!         let sent = request.headers()["rein-deadline-ms"].to_str()?.to_owned();
//!         Ok::<_, Box<dyn std::error::Error + Send + Sync>>(http::Response::new(sent))
//!     }));
//!
//! let mut request = http::Request::new(String::new());
//! request.extensions_mut().insert(CallDeadline::within(Duration::from_secs(2)));
//! let response = client.call(request).await?;
//! assert!(response.body().parse::<u64>()? <= 2_000);
//! # Ok(())
//! # }
//! ```
//!
//! # Time
//!
//! Every layer reads tokio's clock (and sleeps on it), so a test under
//! `tokio::time::pause` drives deadlines, breaks and buckets without
//! waiting.

mod breaker;
mod classify;
mod deadline;
mod error;
mod governor;
mod retry;
mod time;

pub use breaker::{BreakerLayer, BreakerService};
pub use classify::{Classify, HttpStatus};
pub use deadline::{AdoptDeadline, AdoptDeadlineLayer, DeadlineLayer, DeadlineService};
pub use error::{Refused, refused};
pub use governor::{Caller, GovernorLayer, GovernorService};
pub use retry::{IDEMPOTENCY_KEY, Retry, RetryLayer};
pub use time::CallDeadline;
pub use tower::BoxError;

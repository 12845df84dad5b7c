//! rein-testkit: test services shared by rein's tests and demo: order desk,
//! mock model server.
//!
//! # Why
//!
//! rein's claims are about the outside world — "this key produced one side
//! effect", "the model never saw raw error text" — so its tests must look at
//! the outside world, not at rein's own bookkeeping. This crate provides two
//! real HTTP services on loopback that keep their own ground truth:
//!
//! | service | module | ground truth it keeps |
//! | --- | --- | --- |
//! | the order desk: `get_order`, `update_delivery_time`, `restore_delivery_time`, `send_email` | [`order_desk`] | every side effect it actually performed, every request and the fault injected into it |
//! | a mock OpenAI-compatible Chat Completions server | [`mock_model`] | every request body the "model" received |
//!
//! Both start in-process on `127.0.0.1:0` and hand back a handle with the
//! base URL, inspection methods and a graceful `shutdown()`; dropping the
//! handle also stops the service. Faults are injected by the services
//! themselves (lost responses, rate limits, delays, failures after the
//! effect), so a test exercises rein's real HTTP adapters end to end.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use rein_testkit::order_desk::{OrderDesk, OrderDeskConfig};
//!
//! let desk = OrderDesk::start_with(OrderDeskConfig::default()).await?;
//! let url = format!("{}/tools/update_delivery_time", desk.base_url());
//! let args = serde_json::json!({"order_id": "A-1001", "delivery_date": "2026-01-08T14:00:00Z"});
//! let client = reqwest::Client::new();
//! for _ in 0..2 {
//!     // One intent sent twice under its key, as a retry would: the desk
//!     // applies it once and answers the repeat from what it stored.
//!     let answer = client.post(&url).header("Idempotency-Key", "k-1").json(&args).send().await?;
//!     assert!(answer.status().is_success());
//! }
//! assert_eq!(desk.applied_count("update_delivery_time"), 1);
//! desk.shutdown().await?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
pub mod mock_model;
pub mod order_desk;
mod retry_after;
mod server;

pub use error::TestkitError;
pub use retry_after::RetryAfter;

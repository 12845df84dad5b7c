//! rein-engine: the async run engine — the loop, tool adapters, model
//! providers, the governor, the ledger and compensation, the reconciler,
//! workers and leases.
//!
//! The foundation issue lays this crate out and gives it the real clock;
//! the run engine issue fills the rest. See `DESIGN.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod bind;
mod clock;
pub mod config;
pub mod crash;
#[cfg(unix)]
pub mod lease;
pub mod log;
pub mod metrics;
pub mod provider;
#[cfg(unix)]
pub mod reconcile;
pub mod recovery;
pub mod run;
#[cfg(feature = "sabotage")]
pub mod sabotage;
mod secrets;
pub mod startup;
pub mod telemetry;
#[cfg(feature = "test-util")]
pub mod testing;
pub mod tool;

// The adapters under their former paths, for embedders that import them.
#[cfg(unix)]
pub use tool::command as tool_command;
pub use tool::http as tool_http;

pub use clock::{SystemClock, Timer};

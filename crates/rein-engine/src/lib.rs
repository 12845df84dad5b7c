//! rein-engine: the async run engine — the loop, tool adapters, model
//! providers, the governor, the ledger and compensation, the reconciler,
//! workers and leases.
//!
//! The foundation issue lays this crate out and gives it the real clock;
//! the run engine issue fills the rest. See `DESIGN.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod clock;

pub use clock::SystemClock;

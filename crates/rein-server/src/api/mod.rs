//! The runs API and its companions: submit, list, inspect, cancel and
//! resume runs; decide approvals and handoffs; breakers, stats, the work
//! in flight and webhooks; the `Idempotency-Key` of a submission.

pub mod approvals;
pub mod breakers;
pub mod cancel;
pub mod config;
pub mod events;
pub mod handoff;
pub mod idempotency;
pub mod listing;
pub mod live;
pub mod runs;
pub mod stats;
pub mod submission;
pub mod webhooks;

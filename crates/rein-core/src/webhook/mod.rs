//! Webhooks: what rein tells an outside receiver, and how it proves it
//! was rein.
//!
//! | module | concept |
//! | --- | --- |
//! | [`Topic`] | the events a webhook can subscribe to, read off a run's [`EventData`](crate::event::EventData) |
//! | [`signature`] | `Rein-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>` |
//! | [`DeliverySchedule`] | when a failed delivery is tried again (full jitter), and when it is given up (a maximum age) |
//!
//! # Why the payload is decided here and sent elsewhere
//!
//! The store records a webhook event in the transaction that appends the
//! run event it comes from (the outbox), and a background dispatcher of
//! `rein serve` sends it later, at least once. Nothing here does I/O: the
//! topic, the signature and the retry schedule are pure functions of their
//! inputs, so the store's writer, the dispatcher and a receiver's tests
//! agree on them without a network.

mod schedule;
pub mod signature;
mod topic;

pub use schedule::{DEFAULT_MAX_AGE, DEFAULT_TIMEOUT, DeliverySchedule, FIRST_RETRY, MAX_RETRY};
pub use signature::{EVENT_ID_HEADER, SIGNATURE_HEADER, sign, signature_header};
pub use topic::{Topic, UnknownTopic};

//! The row codec every backend shares: rein's types to and from column
//! values, one implementation for SQLite and PostgreSQL.
//!
//! # Why shared
//!
//! Both backends store the same tables with the same columns, in the same
//! order, and must decode them alike: a row one backend calls corrupt, the
//! other must too. Each backend only maps its driver's values to the few
//! kinds of [`Columns`] (text, integer, blob, each nullable); the checks
//! (ids validated, names parsed, JSON decoded, integers range-checked) and
//! the `*_COLUMNS` lists live here once.
//!
//! # Why decoding is fallible everywhere
//!
//! The database outlives the process, is shared, and can be written by an
//! older or newer rein, an operator, or damaged. Every value read is
//! checked and a bad one becomes a [`StoreError::Corrupt`](crate::StoreError::Corrupt)
//! naming table, column and row, never a panic in the engine or the server.
//!
//! NOTE: each `*_COLUMNS` list and its `decode_*` function must change
//! together, and both must match the SQLite schema
//! (`rein-store-sqlite/src/schema.rs`) and the PostgreSQL migrations
//! (`rein-store-postgres/migrations/`).

mod columns;
mod decode;
mod encode;

pub use columns::{Columns, RowReader};
pub use decode::{
    APPROVAL_COLUMNS, BREAKER_OPENING_COLUMNS, CHECKPOINT_COLUMNS, CHECKPOINT_DELTA_COLUMNS,
    EVENT_COLUMNS, IDEMPOTENCY_COLUMNS, INTENT_COLUMNS, LEASE_COLUMNS, LEDGER_COLUMNS, RUN_COLUMNS,
    SINGLETON_COLUMNS, WEBHOOK_DELIVERY_COLUMNS, WEBHOOK_EVENT_COLUMNS, decode_approval,
    decode_breaker_opening, decode_checkpoint, decode_checkpoint_delta, decode_due_delivery,
    decode_event, decode_idempotency, decode_intent, decode_lease, decode_ledger, decode_run,
    decode_singleton, decode_webhook_delivery, decode_webhook_event,
};
pub use encode::{
    StoredInt, event_data_text, headers_text, int, json_text, opt_json_text, serde_name,
};

//! rein-store: rein's durable state behind the [`Store`] trait, with the
//! embedded SQLite backend [`SqliteStore`].
//!
//! # Why a separate crate
//!
//! The engine decides; the store remembers. Keeping the storage behind a
//! trait (as restate separates its `storage-api` from the partition store)
//! lets the engine run on an embedded SQLite file on one node and on
//! PostgreSQL across several, and lets every backend be held to one
//! conformance suite (`conformance`, behind the feature of that name).
//!
//! | module | concept |
//! | --- | --- |
//! | [`Store`] | the trait: runs, events, intents, ledger, checkpoints, leases, idempotency records, singleton leases, breaker openings, latency histograms, share leases |
//! | [`StepCommit`], [`ClaimFence`] | one atomic write per step (group-committed), optionally fenced by a run claim |
//! | [`RunStatus`], [`NewRun`], [`RunRecord`] | runs and their final outcome |
//! | [`RunFilter`], [`RunCursor`], [`RunPage`] | listing runs, newest first, a page at a time |
//! | [`PlannedIntent`] | intent ids persisted at plan time |
//! | [`LedgerMark`] | a change to a declared side effect |
//! | [`Checkpoint`], [`CheckpointDelta`] | the state a resume continues from, and what each step appends to it |
//! | [`Lease`], [`LeaseKind`], [`LeaseChange`], [`LeaseFilter`] | resources (process groups, temp paths) held for a run until released or reaped |
//! | [`IdempotencyRecord`], [`IdempotencyState`], [`StoredResponse`], [`Reservation`] | HTTP `Idempotency-Key` records, per tenant, until they expire |
//! | [`SingletonLease`] | elects one owner of each periodic service among processes sharing the store |
//! | [`BreakerOpening`] | a node's open circuit breaker arm, shared with every process sharing the store |
//! | [`LatencyRecord`], [`LatencyRows`], [`CorruptLatency`] | observed latency histograms, summed over every process sharing the store |
//! | [`StatsQuery`], [`RunStats`] | runs by agent, status and model, and guardrails fired, counted by the store over a window |
//! | share leases ([`MAX_SHARE_LEASE_LEN`]) | which nodes divide a resource group's limits among them |
//! | [`StoreError`] | refusals and failures, classified by `is_transient` |
//! | [`SqliteStore`], [`SqliteOptions`] | the SQLite backend |
//!
//! # Example
//!
//! ```
//! use rein_core::{RunId, TenantId};
//! use rein_store::{NewRun, RunStatus, SqliteStore, Store};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("rein-store-doc-{}", std::process::id()));
//! let store = SqliteStore::open(dir.join("rein.db"))?;
//! # let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! # runtime.block_on(async {
//! let run = store
//!     .create_run(NewRun {
//!         run_id: RunId::new("run-1")?,
//!         tenant: TenantId::new("acme")?,
//!         agent: "order-desk".to_owned(),
//!         input: "move order 42 to Friday".to_owned(),
//!         parent_run_id: None,
//!         budget: serde_json::json!({ "max_steps": 10 }),
//!         created_at_ms: 1_700_000_000_000,
//!     })
//!     .await?;
//! assert_eq!(run.status, RunStatus::Queued);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod backlog;
mod breaker;
mod cancel;
mod checkpoint;
mod commit;
mod error;
mod idempotency;
mod intent;
mod latency;
mod lease;
mod ledger;
mod notify;
mod run;
mod share;
mod singleton;
mod sqlite;
mod stats;
mod store;

#[cfg(feature = "conformance")]
pub mod conformance;

/// The backend-neutral rules every backend applies inside its own atomic
/// write: argument checks, and the decisions a claim or a publish makes
/// from the row it found. Shared so that SQLite and PostgreSQL decide
/// alike; the conformance suite holds them to it.
pub mod rules {
    pub use crate::breaker::{published, validate_breaker_text, validate_opening};
    pub use crate::cancel::{
        requestable as cancel_requestable, validate_request as validate_cancel_request,
    };
    pub use crate::idempotency::{record_not_found, validate_reservation};
    pub use crate::latency::{
        decoded as latency_decoded, merged as latency_merged,
        validate_subject as validate_latency_subject,
    };
    pub use crate::lease::validate_owner;
    pub use crate::share::{validate_share_renewal, validate_share_text};
    pub use crate::singleton::{claimed, validate_claim, validate_singleton_text};
    pub use crate::stats::{stored_count, stored_guardrail, stored_status};
}

pub use backlog::TenantBacklog;
pub use breaker::{BreakerOpening, MAX_BREAKER_ARM_LEN, MAX_BREAKER_REASON_LEN};
pub use cancel::{CancelRequest, MAX_CANCEL_REQUESTER_LEN};
pub use checkpoint::{Checkpoint, CheckpointDelta};
pub use commit::{ClaimFence, Committed, StepCommit};
pub use error::StoreError;
pub use idempotency::{
    DEFAULT_IDEMPOTENCY_RETENTION, Holder, IdempotencyRecord, IdempotencySettled,
    IdempotencySettlement, IdempotencyState, MAX_IDEMPOTENCY_KEY_LEN, NewReservation, Reservation,
    ReservationFence, StoredResponse,
};
pub use intent::PlannedIntent;
pub use latency::{CorruptLatency, LatencyRecord, LatencyRows, MAX_LATENCY_SUBJECT_LEN};
pub use lease::{Lease, LeaseChange, LeaseFilter, LeaseKind, MAX_LEASE_ID_LEN};
pub use ledger::LedgerMark;
pub use notify::Notification;
pub use run::{NewRun, RunCursor, RunFilter, RunPage, RunRecord, RunStatus, StatusChange};
pub use share::MAX_SHARE_LEASE_LEN;
pub use singleton::{MAX_SINGLETON_LEN, SingletonLease};
pub use sqlite::{
    DEFAULT_BUSY_TIMEOUT, DEFAULT_SYNCHRONOUS_FULL, DIRECTORY_MODE, FILE_MODE, MAX_BUSY_TIMEOUT,
    SCHEMA_VERSION, SqliteOptions, SqliteStore, is_world_readable, world_readable_files,
};
pub use stats::{GuardrailCount, ModelCount, RunStats, StatsQuery, StatusCount};
pub use store::Store;

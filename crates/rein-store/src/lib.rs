//! rein-store: the API of rein's durable state, the [`Store`] trait, with
//! its types, the rules every backend applies, and the conformance suite
//! every backend passes. The backends are crates of their own:
//! `rein-store-sqlite` (embedded, the default for one node) and
//! `rein-store-postgres` (several nodes sharing the work).
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
//! | [`Store`] | the store API: [`RunStore`] (runs, events, intents, ledger, checkpoints, step commits, run statistics, cancel requests, notifications), [`LeaseStore`] (leases and their fenced claims), [`IdempotencyStore`], [`SingletonStore`], [`HealthStore`] (breaker openings, latency histograms, retry outcomes, governor share leases), [`WebhookStore`] (the webhook outbox), all together |
//! | [`StoreExt`] | conveniences composed of one atomic call each, for every [`Store`] |
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
//! | [`RetryOutcomes`] | retry outcomes per target and ordinal, summed over every process sharing the store and fading with time |
//! | [`webhook`]: [`WebhookEvent`], [`WebhookDelivery`], [`WebhookAttempt`] | the webhook outbox, written with the events it comes from, and each webhook's deliveries |
//! | [`StatsQuery`], [`RunStats`] | runs by agent, status and model, and guardrails fired, counted by the store over a window |
//! | share leases ([`MAX_SHARE_LEASE_LEN`]) | which nodes divide a resource group's limits among them |
//! | [`Intercepted`], [`Intercept`] | a store wrapping another (fault injection, metering, test doubles): the calls it changes, every other forwarded |
//! | [`StoreError`] | refusals and failures, classified by `is_transient` |
//! | [`codec`] | the row codec every backend shares: the `*_COLUMNS` lists and `decode_*` functions over a driver's [`Columns`](codec::Columns) |
//!
//! # Which crate to depend on
//!
//! This crate depends on no database driver: an embedder that runs on
//! PostgreSQL only never compiles SQLite. Pick a backend for the store
//! itself, and depend on this crate for the types and the trait:
//!
//! | you run | backend | why |
//! | --- | --- | --- |
//! | one node (`rein run`, one `rein serve`) | `rein-store-sqlite`'s `SqliteStore` | one file, no setup; see its crate docs for opening a store and creating a run |
//! | several nodes sharing the work | `rein-store-postgres`'s `PostgresStore` | row locks, `LISTEN`/`NOTIFY`, one database for every node |
//! | a backend of your own | implement the capability traits and run the conformance suite | [`Store`] is implemented for you once all of them are |
//!
//! # Code against the trait, checks against the suite
//!
//! The engine and the server hold an `Arc<dyn Store>` and never name a
//! backend, so code written against [`Store`] (or one capability trait)
//! runs on either. What makes that safe is the conformance suite
//! (`rein_store::conformance`, behind the `conformance` feature): every
//! backend's tests run each of its checks as a test of their own with
//! `rein_store::conformance_tests!`, on a real instance (SQLite on a
//! temporary file, PostgreSQL on a scratch database), so that gap-free
//! event streams, the ledger's state machine and final outcomes hold
//! whichever backend is underneath.
//!
//! The decisions a backend makes from the rows it read are not its own:
//! they are the functions of [`rules`], shared by both backends. They,
//! and the records and filters of this crate, need no database, so the
//! example below runs without one.
//!
//! # Example
//!
//! ```
//! use rein_core::{IntentId, LedgerRecord, LedgerStatus, Outcome, RunId, TenantId, ToolClass};
//! use rein_store::{
//!     LedgerMark, NewRun, RunCursor, RunFilter, RunRecord, RunStatus, RunStore, StatusChange,
//!     Store, StoreError, Timestamp, rules,
//! };
//!
//! /// Written once against the trait: runs on SQLite and on PostgreSQL.
//! async fn queued_runs(store: &dyn Store, tenant: TenantId) -> Result<usize, StoreError> {
//!     let filter = RunFilter::all().of_tenant(tenant).with_status(RunStatus::Queued);
//!     Ok(store.list_runs_page(&filter, None, 50).await?.runs.len())
//! }
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let at = Timestamp::from_millis(1_700_000_000_000);
//! // What `create_run` stores: a new run is queued, with no report.
//! let run = RunRecord::new(NewRun {
//!     run_id: RunId::new("run-1")?,
//!     tenant: TenantId::new("acme")?,
//!     agent: "order-desk".to_owned(),
//!     input: "move order 42 to Friday".to_owned(),
//!     parent_run_id: None,
//!     budget: serde_json::json!({ "max_steps": 10 }),
//!     created_at_ms: at,
//!     trace_parent: None,
//! });
//! assert_eq!(run.status, RunStatus::Queued);
//! // The filter is what a backend's query must select.
//! let acme = RunFilter::all().of_tenant(TenantId::new("acme")?);
//! let globex = RunFilter::all().of_tenant(TenantId::new("globex")?);
//! assert!(acme.matches(&run) && !globex.matches(&run));
//! // A page's cursor goes to clients as an opaque token and comes back.
//! let cursor = RunCursor::after(&run);
//! assert_eq!(RunCursor::from_token(&cursor.to_token())?, cursor);
//!
//! // A finished run's status never changes again, on any backend.
//! let finished = RunStatus::Finished(Outcome::Succeeded);
//! let reopen = StatusChange { status: RunStatus::Running, report: None, at_ms: at };
//! let refused = rules::validate_status_change(&run.run_id, finished, &reopen);
//! assert!(matches!(refused, Err(StoreError::FinishedRun { .. })));
//!
//! // An effect that happened is never declared pending again.
//! let sent = LedgerRecord {
//!     run_id: run.run_id.clone(),
//!     intent_id: IntentId::new("intent-1")?,
//!     seq: 1,
//!     step: 1,
//!     tool: "send_email".to_owned(),
//!     class: ToolClass::Irreversible,
//!     idempotency_key: None,
//!     args: serde_json::json!({ "to": "customer@example.com" }),
//!     status: LedgerStatus::Succeeded,
//!     result: None,
//!     failure: None,
//!     attempts: 1,
//!     created_at_ms: at,
//!     updated_at_ms: at,
//! };
//! let again = LedgerMark {
//!     status: LedgerStatus::Pending,
//!     result: None,
//!     failure: None,
//!     attempts: 1,
//!     at_ms: at,
//! };
//! assert!(matches!(rules::marked(sent, again), Err(StoreError::InvalidTransition(_))));
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod approval;
mod backlog;
mod breaker;
mod cancel;
mod checkpoint;
pub mod codec;
mod commit;
mod error;
mod ext;
mod idempotency;
mod intent;
pub mod intercept;
mod latency;
mod lease;
mod ledger;
mod notify;
mod retry_outcome;
mod run;
mod share;
mod singleton;
mod spend;
mod stats;
mod store;
mod token_ratio;
mod trace;
pub mod webhook;

#[cfg(feature = "conformance")]
pub mod conformance;

/// The backend-neutral rules every backend applies inside its own atomic
/// write: argument checks, the decisions a claim or a publish makes from
/// the row it found, and what a step commit or a merge writes over the
/// rows it read. Shared so that SQLite and PostgreSQL decide
/// alike; the conformance suite holds them to it.
pub mod rules {
    pub use crate::breaker::{published, validate_breaker_text, validate_opening};
    pub use crate::cancel::{
        requestable as cancel_requestable, validate_request as validate_cancel_request,
    };
    pub use crate::commit::{
        marked, next_seq, reopened_outcome, same_run, stamp_revision, validate_delta_step,
        validate_reopen, validate_revised_report, validate_status_change,
    };
    pub use crate::idempotency::{record_not_found, validate_reservation};
    pub use crate::latency::{
        decoded as latency_decoded, merged as latency_merged,
        validate_subject as validate_latency_subject,
    };
    pub use crate::lease::validate_owner;
    pub use crate::retry_outcome::{
        RetryMerge, aged as retry_aged, from_stored as retry_from_stored,
        merge_step as retry_merge_step, merged as retry_merged, seen as retry_seen,
        slot_of as retry_slot, validate_target as validate_retry_target,
    };
    pub use crate::share::{validate_share_renewal, validate_share_text};
    pub use crate::singleton::{claimed, validate_claim, validate_singleton_text};
    pub use crate::spend::validate_spend;
    pub use crate::stats::{stored_count, stored_guardrail, stored_status};
}

pub use approval::{ApprovalFilter, ApprovalRequest, Decided};
pub use backlog::{QueueHead, TenantBacklog};
pub use breaker::{BreakerOpening, MAX_BREAKER_ARM_LEN, MAX_BREAKER_REASON_LEN};
pub use cancel::{CancelRequest, MAX_CANCEL_REQUESTER_LEN};
pub use checkpoint::{Checkpoint, CheckpointDelta};
pub use commit::{ClaimFence, Committed, StepCommit};
pub use error::StoreError;
pub use ext::StoreExt;
pub use idempotency::{
    DEFAULT_IDEMPOTENCY_RETENTION, Holder, IdempotencyRecord, IdempotencySettled,
    IdempotencySettlement, IdempotencyState, MAX_IDEMPOTENCY_KEY_LEN, NewReservation, Reservation,
    ReservationFence, StoredResponse,
};
pub use intent::PlannedIntent;
pub use intercept::{Intercept, Intercepted};
pub use latency::{CorruptLatency, LatencyRecord, LatencyRows, MAX_LATENCY_SUBJECT_LEN};
pub use lease::{Lease, LeaseChange, LeaseFilter, LeaseKind, MAX_LEASE_ID_LEN};
pub use ledger::LedgerMark;
pub use notify::Notification;
/// Points in time in the store API (see [`rein_core::timestamp`] for the rule).
pub use rein_core::Timestamp;
pub use retry_outcome::{MAX_RETRY_TARGET_LEN, RetryOutcomes};
pub use run::{NewRun, RunCursor, RunFilter, RunPage, RunRecord, RunStatus, StatusChange};
pub use share::MAX_SHARE_LEASE_LEN;
pub use singleton::{MAX_SINGLETON_LEN, SingletonLease};
pub use spend::{Day, MAX_SPEND_TEXT_LEN, SpendDelta, SpendQuery, SpendRow};
pub use stats::{GuardrailCount, ModelCount, RunStats, StatsQuery, StatusCount};
pub use store::{
    HealthStore, IdempotencyStore, LeaseStore, RunStore, SingletonStore, SpendStore, Store,
    WebhookStore,
};
pub use token_ratio::{StoredRatio, TokenRatioRecord};
pub use trace::SpanRef;
pub use webhook::{
    AttemptNext, DeliveryState, DueDelivery, WebhookAttempt, WebhookDelivery, WebhookEvent,
};

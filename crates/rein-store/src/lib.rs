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
//! # Backends
//!
//! This crate depends on no database driver: an embedder that runs on
//! PostgreSQL only never compiles SQLite. See `rein-store-sqlite`'s crate
//! docs for an example of opening a store and creating a run.
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
pub use stats::{GuardrailCount, ModelCount, RunStats, StatsQuery, StatusCount};
pub use store::{
    HealthStore, IdempotencyStore, LeaseStore, RunStore, SingletonStore, Store, WebhookStore,
};
pub use token_ratio::{StoredRatio, TokenRatioRecord};
pub use trace::SpanRef;
pub use webhook::{
    AttemptNext, DeliveryState, DueDelivery, WebhookAttempt, WebhookDelivery, WebhookEvent,
};

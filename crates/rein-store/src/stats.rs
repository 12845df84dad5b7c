//! Run statistics aggregated by the store ([`Store::run_stats`]): runs by
//! agent and status, by model, and guardrails fired by agent, over a
//! window of creation times.
//!
//! # Why the store aggregates
//!
//! `GET /v1/stats` and `rein stats` once read every run of the window,
//! whole reports included, to add up a few numbers; a busy tenant's day
//! is more runs than one request should carry. The backends group in SQL
//! instead, over the runs' creation-time index, and return a few rows per
//! agent and model whatever the window holds. Guardrails are counted from
//! the `guardrail` column each event is stored with ([`Guardrail::of`]),
//! under an index of the events that have one.
//!
//! [`Store::run_stats`]: crate::Store::run_stats

use rein_core::TenantId;
use rein_core::Timestamp;
use rein_core::event::Guardrail;

use crate::error::StoreError;
use crate::run::RunStatus;

/// Which runs [`RunStore::run_stats`](crate::RunStore::run_stats) counts: those
/// created in `[since_ms, until_ms)`, of one tenant (or every tenant) and
/// one agent (or every agent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsQuery {
    /// Only this tenant's runs; `None`: every tenant's (a store file read
    /// by its operator).
    pub tenant: Option<TenantId>,
    /// Only this agent's runs.
    pub agent: Option<String>,
    /// Runs created at or after, Unix ms.
    pub since_ms: Timestamp,
    /// Runs created before, Unix ms.
    pub until_ms: Timestamp,
}

/// Runs of one agent with one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCount {
    /// The agent.
    pub agent: String,
    /// The status.
    pub status: RunStatus,
    /// How many runs.
    pub runs: u64,
    /// Tokens their reports say they consumed (0 without a report).
    pub tokens: u64,
    /// Cost their reports say they consumed, micro-dollars.
    pub cost_micros: u64,
}

/// Ended runs that used one model (`provider/model` in their report's
/// `models`), with one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelCount {
    /// The model.
    pub model: String,
    /// The status (always an outcome: only reports name models).
    pub status: RunStatus,
    /// How many runs.
    pub runs: u64,
    /// Tokens those runs consumed, all models together.
    pub tokens: u64,
    /// Cost those runs consumed, micro-dollars.
    pub cost_micros: u64,
}

/// How often one guardrail fired in one agent's runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardrailCount {
    /// The agent.
    pub agent: String,
    /// The guardrail.
    pub guardrail: Guardrail,
    /// Events recording it firing.
    pub fired: u64,
    /// Runs in which it fired at least once.
    pub runs: u64,
}

/// What [`RunStore::run_stats`](crate::RunStore::run_stats) answers: rows in no
/// particular order, each group once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunStats {
    /// By agent and status.
    pub statuses: Vec<StatusCount>,
    /// By model and status.
    pub models: Vec<ModelCount>,
    /// By agent and guardrail.
    pub guardrails: Vec<GuardrailCount>,
}

/// A stored status name, or [`StoreError::Corrupt`].
///
/// # Errors
///
/// When `text` is not a status.
pub fn stored_status(text: &str) -> Result<RunStatus, StoreError> {
    RunStatus::parse(text).ok_or_else(|| StoreError::Corrupt {
        table: "runs",
        column: "status",
        reason: format!("expected a run status, found {text:?}"),
    })
}

/// A stored guardrail name, or [`StoreError::Corrupt`].
///
/// # Errors
///
/// When `text` is not a guardrail.
pub fn stored_guardrail(text: &str) -> Result<Guardrail, StoreError> {
    Guardrail::parse(text).ok_or_else(|| StoreError::Corrupt {
        table: "events",
        column: "guardrail",
        reason: format!("expected a guardrail name, found {text:?}"),
    })
}

/// A stored count or sum, or [`StoreError::Corrupt`] when negative.
///
/// # Errors
///
/// When `value` is negative.
pub fn stored_count(value: i64, column: &'static str) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Corrupt {
        table: "runs",
        column,
        reason: format!("expected a count from 0, found {value}"),
    })
}

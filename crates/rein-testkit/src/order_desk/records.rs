//! What the desk records: its side effects, the requests it saw, and the
//! structured error body it answers with.

use rein_core::{Category, Effect};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Fault, Order};

/// One entry of the side-effect log: the ground truth that chaos and
/// integration tests compare against rein's ledger.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SideEffect {
    /// Position in the log, from 1.
    pub seq: u64,
    /// The request ([`RequestRecord::seq`]) that caused it.
    pub request_seq: u64,
    /// The tool, e.g. `update_delivery_time`.
    pub tool: String,
    /// The `Idempotency-Key` the request carried, if any.
    pub idempotency_key: Option<String>,
    /// The request's arguments.
    pub args: Value,
    /// Whether the world changed (`applied`) or a stored result was
    /// returned (`replayed`).
    pub effect: EffectKind,
    /// The result stored or sent.
    pub result: Value,
}

/// Whether a [`SideEffect`] entry changed the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectKind {
    /// The effect was performed: an order changed, an email went out.
    Applied,
    /// A duplicate key: the stored result was returned and nothing changed.
    Replayed,
}

/// The rein headers a request carried, raw, so tests can check exactly what
/// crossed the process boundary (including malformed values).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReinHeaders {
    /// `Idempotency-Key`.
    pub idempotency_key: Option<String>,
    /// `Rein-Deadline-Ms`: the caller's remaining budget.
    pub deadline_ms: Option<String>,
    /// `Rein-Run-Id`.
    pub run_id: Option<String>,
    /// `Rein-Intent-Id`.
    pub intent_id: Option<String>,
    /// `Rein-Attempt`.
    pub attempt: Option<String>,
    /// `traceparent`: the span of the attempt, when the caller traces.
    #[serde(default)]
    pub traceparent: Option<String>,
}

/// One entry of the request log: every request the desk received, whether
/// or not it had an effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// Position in the log, from 1.
    pub seq: u64,
    /// `POST` for tool calls, `GET` for status lookups.
    pub method: String,
    /// The tool, or `<tool>/status` for a lookup by key.
    pub tool: String,
    /// The rein headers it carried.
    pub headers: ReinHeaders,
    /// The parsed JSON body (`null` if it was not JSON), or `{"key": K}` for
    /// a lookup.
    pub args: Value,
    /// The fault injected into this request, if any.
    pub fault: Option<Fault>,
    /// The status the desk answered (or began to answer, if lost); `None`
    /// while the request is still being handled.
    pub status: Option<u16>,
    /// Whether the answer was a replay of a stored result.
    pub replayed: bool,
    /// Whether the answer was cut off by a `LoseResponse` fault.
    pub response_lost: bool,
    /// When it arrived, since the desk started, on tokio's clock (paused
    /// in a paused-time test): what a rate-limit check measures at the
    /// receiving end.
    #[serde(default)]
    pub received: std::time::Duration,
}

/// Everything the desk knows, as `GET /_log` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeskLog {
    /// The side-effect log, in order.
    pub side_effects: Vec<SideEffect>,
    /// The request log, in order of arrival.
    pub requests: Vec<RequestRecord>,
    /// The current state of every order, by id.
    pub orders: Vec<Order>,
}

/// The structured error body of every desk error (issue 3, item 4):
/// `{"error": {"category", "retryable", "retry_after_ms", "effect", "message"}}`.
///
/// # Why
///
/// rein's HTTP adapter lets this body win over inference from the status
/// code; only the tool knows whether its effect landed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// The error.
    pub error: ErrorDetail,
}

/// The fields of an [`ErrorBody`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    /// rein's failure category, snake_case.
    pub category: Category,
    /// Whether the tool invites a retry.
    pub retryable: bool,
    /// The requested wait, when the tool has one.
    pub retry_after_ms: Option<u64>,
    /// Whether the request changed anything.
    pub effect: Effect,
    /// Human-readable detail; rein never passes it to the model.
    pub message: String,
}

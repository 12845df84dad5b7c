//! The names of the HTTP headers rein sends and reads across process
//! boundaries, one definition each: the engine's HTTP adapter sends them,
//! the server and gateway read and answer them, the registry reserves
//! them, and the test services (order desk, chaos proxy) read them.
//!
//! | header | direction | carries |
//! | --- | --- | --- |
//! | [`DEADLINE_HEADER`] `Rein-Deadline-Ms` | to a tool, provider, child process or the gateway | the caller's remaining milliseconds |
//! | [`RUN_ID_HEADER`] `Rein-Run-Id` | to a tool | the run |
//! | [`INTENT_ID_HEADER`] `Rein-Intent-Id` | to a tool | the planned action, the same on every retry and resume |
//! | [`ATTEMPT_HEADER`] `Rein-Attempt` | to a tool | the attempt number, from 1 |
//! | [`ATTEMPT_ID_HEADER`] `Rein-Attempt-Id` | to a tool | the attempt's id |
//! | [`IDEMPOTENCY_KEY_HEADER`] `Idempotency-Key` | to a tool (unless its entry names another), to `rein serve` | the idempotency key |
//! | [`TOOL_REPLAYED_HEADER`] `Idempotent-Replayed` | from a tool | `true`: a stored result replayed for the key |
//! | [`IDEMPOTENCY_REPLAYED_HEADER`] `Idempotency-Replayed` | from `rein serve` (and accepted from a tool) | `true`: a submission's stored answer replayed |
//! | [`MODEL_HEADER`] `Rein-Model` | from the gateway | the `provider/model` that answered |
//! | [`FALLBACK_HEADER`] `Rein-Fallback` | from the gateway | `true` when a fallback link answered |
//! | [`IGNORED_HEADER`] `Rein-Ignored` | from the gateway | the request members the answer did not honour |
//! | [`TRACEPARENT_HEADER`] `traceparent` | to a tool or provider; to `rein serve` (runs and gateway) | the W3C trace context: the span the request belongs to |
//!
//! HTTP compares header names without case; these are the spellings rein
//! sends.

pub use crate::deadline::DEADLINE_HEADER;

/// The header carrying the run id of a tool call.
pub const RUN_ID_HEADER: &str = "Rein-Run-Id";

/// The header carrying the intent id of a tool call.
pub const INTENT_ID_HEADER: &str = "Rein-Intent-Id";

/// The header carrying the attempt number of a tool call (1 for the first).
pub const ATTEMPT_HEADER: &str = "Rein-Attempt";

/// The header carrying the attempt id of a tool call.
pub const ATTEMPT_ID_HEADER: &str = "Rein-Attempt-Id";

/// The header an idempotency key travels in: to a tool whose entry names
/// no other header, and to `rein serve` with a submission.
pub const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";

/// The response header by which a tool says it replayed the stored result
/// for the key (`true`).
pub const TOOL_REPLAYED_HEADER: &str = "Idempotent-Replayed";

/// The response header by which `rein serve` says it replayed a
/// submission's stored answer (`true`); the HTTP adapter accepts it from a
/// tool too.
pub const IDEMPOTENCY_REPLAYED_HEADER: &str = "Idempotency-Replayed";

/// The gateway's response header naming the `provider/model` that answered.
pub const MODEL_HEADER: &str = "Rein-Model";

/// The gateway's response header saying whether a fallback link answered.
pub const FALLBACK_HEADER: &str = "Rein-Fallback";

/// The gateway's response header saying that the output ceiling sent to
/// the model is below the client's `max_tokens`, and why:
/// `<sent>; reason=cap` (the answering model's cap, a fallback's smaller
/// one) or `<sent>; reason=budget` (what the budget left). Absent when the
/// client's ask was sent as it was.
pub const MAX_TOKENS_HEADER: &str = "Rein-Max-Tokens";

/// The gateway's response header naming, comma-separated, the request
/// members the answer did not honour: accepted by design and sent nowhere
/// (`store`, `metadata`), or left out by the link that answered because
/// its API has no equivalent (`seed`, `frequency_penalty` on an Anthropic
/// model). Absent when every member was honoured: a member is never
/// dropped without the answer saying so.
pub const IGNORED_HEADER: &str = "Rein-Ignored";

/// The W3C Trace Context header (`00-TRACEID-SPANID-FLAGS`): sent to a
/// tool or provider with the span of the attempt, read from a client of
/// `rein serve` as the parent of its run (or gateway call).
pub const TRACEPARENT_HEADER: &str = "traceparent";

//! Tool adapters: how one attempt of a tool call reaches its tool, and
//! what every adapter shares — the attempt's identity and limits
//! ([`Attempt`]), a successful answer ([`ToolOutput`]), and the structured
//! error body a tool may send (`ErrorBody`).
//!
//! | adapter | module | reaches the tool |
//! | --- | --- | --- |
//! | http | [`http`] | an HTTP request, classified by status, body and transport phase |
//! | command | [`command`] (unix) | a local program in its own process group, under a lease |
//! | agent | `agent` (an [`Engine`](crate::run::Engine) method) | a child run of another agent, on a share of the budget |
//! | in_process | [`in_process`] | an async Rust function of the embedding program |
//! | mcp | [`mcp`] | a tool of an MCP server, over its stdio or streamable HTTP |
//!
//! A kind the engine does not build in implements [`ToolAdapter`] (one
//! module) and is bound as [`ToolTarget::Adapter`](crate::run::ToolTarget::Adapter)
//! (one registration); [`InProcessTool`] and [`McpTool`] are two.
//!
//! # Why the adapter classifies
//!
//! Only the adapter knows how far a call got: refused before sending
//! (`not_applied`), or sent and then the answer was lost (`maybe_applied`).
//! That distinction decides between a retry, a lookup by key and
//! compensation, and no outer layer can reconstruct it (seed 000, "Express
//! Failure as a Contract"). A tool's own structured error body wins over
//! inference from the status code or exit status, because the tool knows
//! whether it acted.

//!
//! # One dispatch for every kind
//!
//! The http and command adapters implement [`ToolAdapter`] too, once
//! paired with the target of the tool they call (`reach`): the guarded
//! call, settlement, the reconciler and handoff decisions invoke and look
//! up every kind through that one seam. The agent adapter does not fit it:
//! one attempt is a whole child run, driven by the engine with the
//! *parent run's* context (its lineage in the tree, its cancellation token,
//! its validator, the budget the call may still use), recursive into the
//! engine that invokes it, and never raced against a cancellation (a child
//! settles its effects and records its end before its parent goes on). A
//! trait over it would need an `Attempt` carrying the run's context and an
//! adapter that owns the engine, so the engine runs it itself.

use std::time::Duration;

use rein_core::idempotency::IdempotencyKey;
use rein_core::{AttemptId, Category, Effect, IntentId, RunId};
use serde::Deserialize;
use serde_json::Value;

pub mod adapter;
mod agent;
#[cfg(unix)]
pub mod command;
pub mod http;
pub mod in_process;
pub mod mcp;
mod reach;

pub use adapter::ToolAdapter;
pub(crate) use reach::Reach;

/// The variables of rein's own environment a local program inherits (a
/// command tool, a stdio MCP server): what interpreters and `npx` need to
/// start; everything else (API keys, tokens) stays out unless the tool's
/// or server's `env` names it.
pub const INHERITED_ENV: [&str; 8] = [
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "LC_CTYPE", "TZ",
];
pub use in_process::InProcessTool;
pub use mcp::McpTool;

/// Looks a call to `tool` (reached through `target`) up by its key, at
/// its HTTP status endpoint or its adapter's lookup.
///
/// # Errors
///
/// A [`rein_core::Failure`] when the lookup fails or the tool has none.
pub(crate) async fn lookup(
    http: &http::HttpToolAdapter,
    tool: &str,
    target: &crate::run::ToolTarget,
    key: &IdempotencyKey,
    allowance: Duration,
) -> Result<Option<Value>, rein_core::Failure> {
    match Reach::of(http, None, target) {
        Some(reach) if reach.has_lookup() => reach.lookup(key, allowance).await,
        _ => Err(no_lookup(tool)),
    }
}

fn no_lookup(tool: &str) -> rein_core::Failure {
    rein_core::Failure::new(tool, Category::Unknown)
        .with_human_message(format!("{tool} has no status lookup"))
}

/// One attempt's identity and limits.
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    /// The run.
    pub run_id: &'a RunId,
    /// The planned action.
    pub intent_id: &'a IntentId,
    /// This attempt.
    pub attempt_id: &'a AttemptId,
    /// The attempt number, from 1.
    pub number: u32,
    /// The key, for classes that have one.
    pub key: Option<&'a IdempotencyKey>,
    /// The run's remaining time, sent as `Rein-Deadline-Ms`.
    pub remaining: Duration,
    /// How long this attempt may wait for the response to begin (p99 ×
    /// factor, capped by the remainder): the time-to-first-byte limit.
    pub allowance: Duration,
}

impl Attempt<'_> {
    /// The total limit of the attempt: the first-byte allowance again for
    /// the body, never past the run's remainder.
    pub fn total_limit(&self) -> Duration {
        self.allowance
            .saturating_mul(2)
            .min(self.remaining)
            .max(self.allowance)
    }
}

/// A successful tool answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolOutput {
    /// The result, possibly truncated (then it has a `_truncated` note).
    pub result: Value,
    /// Whether the result was truncated to the size limit.
    pub truncated: bool,
    /// Whether the tool said it replayed a stored result for the key.
    pub replayed: bool,
}

/// The structured error body a tool may send, over HTTP or on a command's
/// stdout: `{"error": {"category", "retryable", "retry_after_ms", "effect",
/// "message"}}`.
#[derive(Debug, Deserialize)]
pub(crate) struct ErrorBody {
    pub(crate) error: ToolError,
}

/// The fields of [`ErrorBody`]; all but `category` optional.
#[derive(Debug, Deserialize)]
pub(crate) struct ToolError {
    pub(crate) category: Category,
    #[serde(default)]
    pub(crate) retryable: Option<bool>,
    #[serde(default)]
    pub(crate) retry_after_ms: Option<u64>,
    #[serde(default)]
    pub(crate) effect: Option<Effect>,
    #[serde(default)]
    pub(crate) message: Option<String>,
}

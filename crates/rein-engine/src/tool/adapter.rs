//! The seam a new kind of tool plugs into: [`ToolAdapter`].
//!
//! # Why a trait beside the built-in adapters
//!
//! The http and command adapters are configured from a registry file and
//! share one client per engine; the agent adapter is a child run (see the
//! module docs of [`crate::tool`]). A tool that is not one of those (an
//! async Rust function in the embedding program, a tool behind an MCP
//! server) carries its own state and reaches its tool its own way, so it
//! comes as an object: one module implementing this trait, registered as
//! [`ToolTarget::Adapter`](crate::run::ToolTarget::Adapter). The guarded
//! call treats it as it treats an HTTP tool: the same deadline, key,
//! retries, lookup by key, ledger and compensation.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use rein_core::Failure;
use rein_core::idempotency::IdempotencyKey;
use serde_json::Value;

use super::{Attempt, ToolOutput};

/// How one attempt of a tool call reaches a tool of a kind the engine does
/// not build in.
///
/// An attempt is aborted by dropping the future [`invoke`](ToolAdapter::invoke)
/// returns (the run was cancelled or interrupted): an adapter that started
/// work elsewhere stops it there or lets it finish without its answer.
#[async_trait]
pub trait ToolAdapter: Send + Sync + fmt::Debug {
    /// The adapter's kind, as events and errors name it (`in_process`).
    fn kind(&self) -> &'static str;

    /// One attempt: `args` as validated against the tool's schema, and the
    /// attempt's identity and limits (`attempt.key` for a keyed class,
    /// `attempt.remaining` the run's time, `attempt.total_limit()` what
    /// this attempt may take).
    ///
    /// # Errors
    ///
    /// The classified [`Failure`]: its category decides retries, its
    /// effect whether a write may have applied (`maybe_applied` leads to a
    /// lookup by key before any repeat).
    async fn invoke(&self, args: &Value, attempt: &Attempt<'_>) -> Result<ToolOutput, Failure>;

    /// Whether [`lookup`](ToolAdapter::lookup) can answer: a write whose
    /// answer was lost is then looked up by its key instead of being
    /// handed to a human.
    fn has_lookup(&self) -> bool {
        false
    }

    /// Looks a call up by its idempotency key: `Some(result)` when the
    /// tool applied it, `None` when it did not.
    ///
    /// # Errors
    ///
    /// A [`Failure`] when the tool cannot say (the default: no lookup).
    async fn lookup(
        &self,
        key: &IdempotencyKey,
        allowance: Duration,
    ) -> Result<Option<Value>, Failure> {
        let _ = (key, allowance);
        Err(Failure::new(self.kind(), rein_core::Category::Unknown)
            .with_human_message(format!("a {} tool has no lookup by key", self.kind())))
    }
}

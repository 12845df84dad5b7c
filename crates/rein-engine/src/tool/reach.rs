//! The one dispatch from a tool's target to the adapter that reaches it:
//! [`Reach::of`].
//!
//! # Why the built-in adapters are bound here
//!
//! The http and command adapters serve every tool of an engine (one
//! connection pool, one lease store, the engine's clock), so they meet a
//! tool's target only when it is called. [`Bound`] pairs the two into a
//! [`ToolAdapter`], so the guarded call, settlement, the reconciler and
//! handoff decisions invoke and look up every kind the same way, whether
//! built in or plugged in. An agent tool has no adapter: its one attempt is
//! a child run the engine drives with the parent run's context (see the
//! module docs of [`crate::tool`]).

use std::ops::Deref;
use std::time::Duration;

use async_trait::async_trait;
use rein_core::Failure;
use rein_core::idempotency::IdempotencyKey;
use serde_json::Value;

use super::command::{CommandTarget, CommandToolAdapter};
use super::http::{HttpTarget, HttpToolAdapter};
use super::{Attempt, ToolAdapter, ToolOutput};
use crate::run::ToolTarget;

/// A shared built-in adapter with the target of one tool.
#[derive(Debug)]
pub(crate) struct Bound<'a, A, T> {
    adapter: &'a A,
    target: &'a T,
}

#[async_trait]
impl ToolAdapter for Bound<'_, HttpToolAdapter, HttpTarget> {
    fn kind(&self) -> &'static str {
        "http"
    }

    async fn invoke(&self, args: &Value, attempt: &Attempt<'_>) -> Result<ToolOutput, Failure> {
        self.adapter.invoke(self.target, args, attempt).await
    }

    fn has_lookup(&self) -> bool {
        self.target.status_url.is_some()
    }

    async fn lookup(
        &self,
        key: &IdempotencyKey,
        allowance: Duration,
    ) -> Result<Option<Value>, Failure> {
        self.adapter.lookup(self.target, key, allowance).await
    }
}

#[async_trait]
impl ToolAdapter for Bound<'_, CommandToolAdapter, CommandTarget> {
    fn kind(&self) -> &'static str {
        "command"
    }

    async fn invoke(&self, args: &Value, attempt: &Attempt<'_>) -> Result<ToolOutput, Failure> {
        self.adapter.invoke(self.target, args, attempt).await
    }
}

/// The adapter that reaches one tool, used as a [`ToolAdapter`].
pub(crate) enum Reach<'a> {
    Http(Bound<'a, HttpToolAdapter, HttpTarget>),
    Command(Bound<'a, CommandToolAdapter, CommandTarget>),
    Adapter(&'a dyn ToolAdapter),
}

impl<'a> Reach<'a> {
    /// The adapter reaching `target`: `None` for an agent tool, and for a
    /// command tool where `command` is `None` (the reconciler and handoff
    /// decisions run no local programs: a program's effect is its own
    /// process's, which they cannot lease).
    pub(crate) fn of(
        http: &'a HttpToolAdapter,
        command: Option<&'a CommandToolAdapter>,
        target: &'a ToolTarget,
    ) -> Option<Reach<'a>> {
        match target {
            ToolTarget::Http(target) => Some(Reach::Http(Bound {
                adapter: http,
                target,
            })),
            ToolTarget::Command(target) => {
                command.map(|adapter| Reach::Command(Bound { adapter, target }))
            }
            ToolTarget::Adapter(adapter) => Some(Reach::Adapter(adapter.as_ref())),
            ToolTarget::Agent(_) => None,
        }
    }
}

impl<'a> Deref for Reach<'a> {
    type Target = dyn ToolAdapter + 'a;

    fn deref(&self) -> &Self::Target {
        match self {
            Reach::Http(bound) => bound,
            Reach::Command(bound) => bound,
            Reach::Adapter(adapter) => *adapter,
        }
    }
}

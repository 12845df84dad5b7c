//! In-process tools: an async Rust function as a tool.
//!
//! # Why
//!
//! A program that embeds rein often has tools that are its own code (a
//! database write, a call through its own client). Putting an HTTP server
//! in front of them only to call them back would add a failure mode, not
//! remove one. An [`InProcessTool`] is the function itself behind the same
//! guarded call: deadline, key, retries decided by class, ledger before
//! and after, compensation. The function gets the attempt's identity
//! ([`Attempt`]: run, intent, attempt, key, remaining time) so that it can
//! deduplicate by key exactly as a remote tool would.

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::FutureExt as _;
use rein_core::idempotency::IdempotencyKey;
use rein_core::{Category, Effect, Failure};
use serde_json::Value;

use super::adapter::ToolAdapter;
use super::{Attempt, ToolOutput};

/// What an in-process tool's function returns.
pub type ToolFuture = Pin<Box<dyn Future<Output = Result<Value, Failure>> + Send>>;
/// What its lookup by key returns.
pub type LookupFuture = Pin<Box<dyn Future<Output = Result<Option<Value>, Failure>> + Send>>;

/// The attempt an in-process tool's function is called with, owned (the
/// function's future may outlive the borrow of the engine's [`Attempt`]).
#[derive(Debug, Clone)]
pub struct Call {
    /// The run.
    pub run_id: rein_core::RunId,
    /// The planned action: the same on every attempt and after a resume.
    pub intent_id: rein_core::IntentId,
    /// This attempt.
    pub attempt_id: rein_core::AttemptId,
    /// The attempt number, from 1.
    pub number: u32,
    /// The key, for an idempotent write: deduplicate by it.
    pub key: Option<IdempotencyKey>,
    /// The run's remaining time.
    pub remaining: Duration,
}

type Invoke = dyn Fn(Value, Call) -> ToolFuture + Send + Sync;
type Lookup = dyn Fn(IdempotencyKey) -> LookupFuture + Send + Sync;

/// An async function as a tool ([`ToolAdapter`]).
///
/// The attempt is bounded by its limit (`Attempt::total_limit`): a function
/// that outlives it is dropped and the attempt is a `timeout` whose
/// effect is unknown. A function that panics fails its attempt
/// (`unknown`, effect unknown), never the run's task or the process.
#[derive(Clone)]
pub struct InProcessTool {
    name: String,
    invoke: Arc<Invoke>,
    lookup: Option<Arc<Lookup>>,
}

impl fmt::Debug for InProcessTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InProcessTool")
            .field("name", &self.name)
            .field("lookup", &self.lookup.is_some())
            .finish()
    }
}

impl InProcessTool {
    /// The tool `name` (as failures name it) calling `invoke`.
    pub fn new<F, Fut>(name: impl Into<String>, invoke: F) -> InProcessTool
    where
        F: Fn(Value, Call) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Value, Failure>> + Send + 'static,
    {
        InProcessTool {
            name: name.into(),
            invoke: Arc::new(move |args, call| Box::pin(invoke(args, call))),
            lookup: None,
        }
    }

    /// With a lookup by key: `Some(result)` when the call with that key
    /// applied, `None` when it did not.
    pub fn with_lookup<F, Fut>(mut self, lookup: F) -> InProcessTool
    where
        F: Fn(IdempotencyKey) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Option<Value>, Failure>> + Send + 'static,
    {
        self.lookup = Some(Arc::new(move |key| Box::pin(lookup(key))));
        self
    }

    /// A failure of this tool.
    fn failure(&self, category: Category, effect: Effect, message: String) -> Failure {
        Failure::new(&self.name, category)
            .with_effect(effect)
            .with_human_message(message)
    }
}

#[async_trait]
impl ToolAdapter for InProcessTool {
    fn kind(&self) -> &'static str {
        "in_process"
    }

    async fn invoke(&self, args: &Value, attempt: &Attempt<'_>) -> Result<ToolOutput, Failure> {
        let call = Call {
            run_id: attempt.run_id.clone(),
            intent_id: attempt.intent_id.clone(),
            attempt_id: attempt.attempt_id.clone(),
            number: attempt.number,
            key: attempt.key.cloned(),
            remaining: attempt.remaining,
        };
        let limit = attempt.total_limit();
        let called = AssertUnwindSafe((self.invoke)(args.clone(), call)).catch_unwind();
        let answer = match tokio::time::timeout(limit, called).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_panic)) => Err(self.failure(
                Category::Unknown,
                Effect::MaybeApplied,
                format!("{} panicked", self.name),
            )),
            Err(_) => Err(self.failure(
                Category::Timeout,
                Effect::MaybeApplied,
                format!("{} did not answer within {limit:?}", self.name),
            )),
        };
        answer
            .map(|result| ToolOutput {
                result,
                truncated: false,
                replayed: false,
            })
            .map_err(|f| f.with_attempt(attempt.attempt_id.clone()))
    }

    fn has_lookup(&self) -> bool {
        self.lookup.is_some()
    }

    async fn lookup(
        &self,
        key: &IdempotencyKey,
        allowance: Duration,
    ) -> Result<Option<Value>, Failure> {
        let Some(lookup) = &self.lookup else {
            return Err(self.failure(
                Category::Unknown,
                Effect::NotApplied,
                format!("{} has no lookup by key", self.name),
            ));
        };
        let looked = AssertUnwindSafe(lookup(key.clone())).catch_unwind();
        match tokio::time::timeout(allowance, looked).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_panic)) => Err(self.failure(
                Category::Unknown,
                Effect::NotApplied,
                format!("{}'s lookup panicked", self.name),
            )),
            Err(_) => Err(self.failure(
                Category::Timeout,
                Effect::NotApplied,
                format!("{}'s lookup did not answer within {allowance:?}", self.name),
            )),
        }
    }
}

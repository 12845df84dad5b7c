//! MCP tools: a tool of an MCP server, called through the guarded call.
//!
//! # What rein adds to a `tools/call`
//!
//! An MCP client sends a tool call and waits. rein sends the same call
//! with what the server needs to behave well under failure, and reads the
//! answer into its failure contract:
//!
//! | sent | how |
//! | --- | --- |
//! | the attempt's deadline | the call is dropped at its allowance (`Attempt::total_limit`), and the SDK sends `notifications/cancelled` for it |
//! | a progress token | `_meta.progressToken`, so a server may report progress |
//! | the idempotency key | `_meta["rein/idempotency-key"]`, for classes that have one |
//! | the correlation ids | `_meta["rein/run-id"]`, `["rein/intent-id"]`, `["rein/attempt"]`, `["rein/deadline-ms"]` |
//!
//! | answer | failure |
//! | --- | --- |
//! | a result | success: `structuredContent`, else the text content (JSON when it parses), images and audio as a note of their type and size |
//! | a result with `isError` | the tool's structured error (`{"error": {"category", …}}`, as HTTP and command tools send) if it gave one, else `unknown`, not retryable, effect unknown |
//! | JSON-RPC invalid params, or an unknown tool | `invalid_arguments` / `not_found`, not applied |
//! | the server's process died or the connection closed mid-call | `transient`, effect unknown (the call was sent) |
//! | no connection could be made | `transient`, not applied; the next attempt starts the server again |
//! | no answer within the allowance | `timeout`, effect unknown, and the server is told to cancel |
//!
//! # Why rein's class decides, not the server's hints
//!
//! A server's `readOnlyHint`, `idempotentHint` and `destructiveHint` are
//! what it says of itself, and it may be wrong or hostile. Every MCP tool
//! an agent calls has a registry entry with rein's own class, key recipe
//! and compensation; `rein mcp import` only suggests them from the hints.
//! So a call is never sent again on its own unless its registry class says
//! it may be: retries are the guarded call's, as for every other tool.
//!
//! MCP has no lookup by idempotency key, so a write whose answer was lost
//! ends as the class says (a human, or compensation) instead of being
//! looked up.

mod classify;
mod discover;
mod session;

use std::sync::Arc;

use async_trait::async_trait;
use rein_core::registry::McpServerSpec;
use rein_core::{Category, Effect, Failure};
use rmcp::model::{CallToolRequestParams, JsonObject, MetaObject, RequestMetaObject};
use serde_json::Value;

pub use discover::{DiscoverError, McpToolDefinition, ToolHints, discover};
pub use session::{ConnectError, McpSession};

use super::adapter::ToolAdapter;
use super::{Attempt, ToolOutput};

/// The `_meta` key carrying the idempotency key.
pub const META_IDEMPOTENCY_KEY: &str = "rein/idempotency-key";
/// The `_meta` key carrying the run's id.
pub const META_RUN_ID: &str = "rein/run-id";
/// The `_meta` key carrying the intent's id (the same on every attempt).
pub const META_INTENT_ID: &str = "rein/intent-id";
/// The `_meta` key carrying the attempt number, from 1.
pub const META_ATTEMPT: &str = "rein/attempt";
/// The `_meta` key carrying the milliseconds this attempt may take.
pub const META_DEADLINE_MS: &str = "rein/deadline-ms";

/// A tool of an MCP server ([`ToolAdapter`]).
#[derive(Debug, Clone)]
pub struct McpTool {
    /// The registry's name, as failures name it.
    name: String,
    /// The tool's name on its server.
    tool: String,
    session: Arc<McpSession>,
    max_result_bytes: usize,
    /// The digest of the definition imported ([`McpToolDefinition::digest`]):
    /// a server whose definition differs is not called.
    pin: Option<String>,
}

impl McpTool {
    /// The tool `tool` of the server `session` reaches, registered as
    /// `name`, keeping at most `max_result_bytes` of each result.
    pub fn new(
        name: impl Into<String>,
        tool: impl Into<String>,
        session: Arc<McpSession>,
        max_result_bytes: usize,
    ) -> McpTool {
        McpTool {
            name: name.into(),
            tool: tool.into(),
            session,
            max_result_bytes: max_result_bytes.max(1),
            pin: None,
        }
    }

    /// Pinned to the definition whose digest is `pin`: while the server's
    /// definition of the tool has another digest (a changed description
    /// or schema, a "rug pull"), calls are refused before they are sent.
    pub fn with_pin(mut self, pin: impl Into<String>) -> McpTool {
        self.pin = Some(pin.into());
        self
    }

    /// The tool `tool` of `server`, over the process-wide session of that
    /// server ([`McpSession::shared`]).
    pub fn of_server(
        name: impl Into<String>,
        server: &McpServerSpec,
        tool: impl Into<String>,
        max_result_bytes: usize,
    ) -> McpTool {
        McpTool::new(name, tool, McpSession::shared(server), max_result_bytes)
    }

    /// The tool's name on its server.
    pub fn remote_name(&self) -> &str {
        &self.tool
    }

    async fn call(&self, args: &Value, attempt: &Attempt<'_>) -> Result<ToolOutput, Failure> {
        let arguments: JsonObject = match args {
            Value::Object(map) => map.clone(),
            Value::Null => JsonObject::new(),
            other => {
                return Err(Failure::new(&self.name, Category::InvalidArguments)
                    .with_effect(Effect::NotApplied)
                    .with_human_message(format!(
                        "{}: MCP tool arguments must be an object, not {}",
                        self.name,
                        classify::json_kind(other)
                    )));
            }
        };
        if let Some(pin) = &self.pin {
            self.check_pin(pin).await?;
        }
        let peer = self
            .session
            .peer()
            .await
            .map_err(|e| classify::not_connected(&self.name, &e))?;
        let mut params = CallToolRequestParams::new(self.tool.clone()).with_arguments(arguments);
        params.meta = Some(call_meta(attempt));
        match peer.call_tool(params).await {
            Ok(result) => classify::result(&self.name, result, self.max_result_bytes),
            Err(e) => Err(classify::service_error(&self.name, &e)),
        }
    }
}

impl McpTool {
    /// Refuses the call when the server's definition of the tool is not
    /// the pinned one.
    async fn check_pin(&self, pin: &str) -> Result<(), Failure> {
        let tools = self.session.tools().await.map_err(|e| match e {
            discover::DiscoverError::Connect(e) => classify::not_connected(&self.name, &e),
            other => Failure::new(&self.name, Category::Transient)
                .with_effect(Effect::NotApplied)
                .with_human_message(format!(
                    "{} was not called: its pinned definition could not be checked: {other}",
                    self.name
                )),
        })?;
        let server = &self.session.spec().name;
        let refused = |why: String| {
            Failure::new(&self.name, Category::Conflict)
                .with_effect(Effect::NotApplied)
                .with_retryable(false)
                .with_human_message(format!(
                    "{} was not called: {why}; review it with `rein mcp import {server} --config …` and update the registry entry and its pin",
                    self.name
                ))
        };
        match tools.get(&self.tool) {
            None => Err(refused(format!(
                "MCP server `{server}` no longer lists the tool `{}`",
                self.tool
            ))),
            Some(definition) if definition.digest() != pin => Err(refused(format!(
                "the definition of `{}` on MCP server `{server}` changed since it was pinned ({pin}, now {})",
                self.tool,
                definition.digest()
            ))),
            Some(_) => Ok(()),
        }
    }
}

/// What rein tells the server of the attempt, in the request's `_meta`.
fn call_meta(attempt: &Attempt<'_>) -> RequestMetaObject {
    let mut meta = JsonObject::new();
    if let Some(key) = attempt.key {
        meta.insert(META_IDEMPOTENCY_KEY.to_owned(), key.as_str().into());
    }
    meta.insert(META_RUN_ID.to_owned(), attempt.run_id.as_str().into());
    meta.insert(META_INTENT_ID.to_owned(), attempt.intent_id.as_str().into());
    meta.insert(META_ATTEMPT.to_owned(), attempt.number.into());
    let ms = u64::try_from(attempt.total_limit().as_millis()).unwrap_or(u64::MAX);
    meta.insert(META_DEADLINE_MS.to_owned(), ms.into());
    RequestMetaObject(MetaObject(meta))
}

#[async_trait]
impl ToolAdapter for McpTool {
    fn kind(&self) -> &'static str {
        "mcp"
    }

    async fn invoke(&self, args: &Value, attempt: &Attempt<'_>) -> Result<ToolOutput, Failure> {
        let limit = attempt.total_limit();
        // Dropping the call at the limit makes the SDK send
        // `notifications/cancelled` for its request id.
        let answer = match tokio::time::timeout(limit, self.call(args, attempt)).await {
            Ok(answer) => answer,
            Err(_) => Err(Failure::new(&self.name, Category::Timeout)
                .with_effect(Effect::MaybeApplied)
                .with_human_message(format!(
                    "{} did not answer within {limit:?}; the server was told to cancel the call",
                    self.name
                ))),
        };
        answer.map_err(|f| f.with_attempt(attempt.attempt_id.clone()))
    }
}

//! What an MCP server says its tools are (`tools/list`), typed for rein:
//! `rein mcp import` writes registry entries from it, and a definition's
//! digest pins what was imported.

use rmcp::model::Tool;
use serde::Serialize;
use serde_json::Value;

use super::session::{ConnectError, McpSession};

/// What a server says of a tool's nature (MCP's annotations). Hints only:
/// rein never takes them for its own class, but suggests a class from
/// them and reports where they contradict the registry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct ToolHints {
    /// `readOnlyHint`: it changes nothing.
    pub read_only: Option<bool>,
    /// `destructiveHint`: its change may destroy something.
    pub destructive: Option<bool>,
    /// `idempotentHint`: repeating it with the same arguments changes
    /// nothing more.
    pub idempotent: Option<bool>,
    /// `openWorldHint`: it reaches outside the server's own world.
    pub open_world: Option<bool>,
}

/// One tool as a server lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct McpToolDefinition {
    /// Its name on the server.
    pub name: String,
    /// Its display title, if any.
    pub title: Option<String>,
    /// Its description.
    pub description: Option<String>,
    /// The JSON Schema of its arguments.
    pub input_schema: Value,
    /// The JSON Schema of its structured result, if declared.
    pub output_schema: Option<Value>,
    /// What it says of its nature.
    pub hints: ToolHints,
}

impl McpToolDefinition {
    /// A digest of what the model is shown of the tool (name, description,
    /// argument schema): two definitions with the same digest present the
    /// same tool, so a changed digest is a changed contract.
    pub fn digest(&self) -> String {
        let shown = serde_json::json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
        });
        rein_core::digest::sha256(shown.to_string().as_bytes())
    }

    pub(super) fn from_tool(tool: &Tool) -> McpToolDefinition {
        let hints = tool
            .annotations
            .as_ref()
            .map(|a| ToolHints {
                read_only: a.read_only_hint,
                destructive: a.destructive_hint,
                idempotent: a.idempotent_hint,
                open_world: a.open_world_hint,
            })
            .unwrap_or_default();
        McpToolDefinition {
            name: tool.name.to_string(),
            title: tool.title.clone(),
            description: tool.description.as_ref().map(ToString::to_string),
            input_schema: Value::Object((*tool.input_schema).clone()),
            output_schema: tool
                .output_schema
                .as_ref()
                .map(|schema| Value::Object((**schema).clone())),
            hints,
        }
    }
}

/// Why the tools could not be listed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiscoverError {
    /// No connection.
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The server refused or failed `tools/list`.
    #[error("tools/list failed: {0}")]
    List(String),
}

/// Every tool the server of `session` lists, following its pages, in
/// name order.
///
/// # Errors
///
/// [`DiscoverError`] when the server cannot be reached or refuses.
pub async fn discover(session: &McpSession) -> Result<Vec<McpToolDefinition>, DiscoverError> {
    Ok(session.tools().await?.values().cloned().collect())
}

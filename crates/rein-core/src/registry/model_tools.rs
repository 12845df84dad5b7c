//! The model-facing tool definitions, generated from the registry.
//!
//! # Why generated
//!
//! A tool description written by hand drifts from what the runtime does —
//! the root cause of tool hallucination (seed 000, "The Tool Registry").
//! Both wire formats are built here from the same [`ToolSpec`], so the
//! model always sees the registry's name, side effects and schema.

use serde_json::{Value, json};

use super::spec::{AgentSpec, Registry, ToolSpec};

impl ToolSpec {
    /// This tool in the OpenAI Chat Completions `tools` format:
    /// `{"type": "function", "function": {"name", "description", "parameters"}}`.
    pub fn openai_tool(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.model_description(),
                "parameters": self.schema,
            }
        })
    }

    /// This tool in the Anthropic Messages `tools` format:
    /// `{"name", "description", "input_schema"}`.
    pub fn anthropic_tool(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.model_description(),
            "input_schema": self.schema,
        })
    }
}

impl Registry {
    /// The tools `agent` offers, in the OpenAI `tools` format, in the
    /// agent's order.
    pub fn openai_tools(&self, agent: &AgentSpec) -> Vec<Value> {
        self.agent_tools(agent).map(ToolSpec::openai_tool).collect()
    }

    /// The tools `agent` offers, in the Anthropic `tools` format, in the
    /// agent's order.
    pub fn anthropic_tools(&self, agent: &AgentSpec) -> Vec<Value> {
        self.agent_tools(agent)
            .map(ToolSpec::anthropic_tool)
            .collect()
    }
}

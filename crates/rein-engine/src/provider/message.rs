//! The provider-neutral conversation: what the run loop sends and receives.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One message of the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// Instructions.
    System {
        /// The text.
        content: String,
    },
    /// The task.
    User {
        /// The text.
        content: String,
    },
    /// A model turn.
    Assistant {
        /// Text, if any.
        content: Option<String>,
        /// Proposed tool calls, if any.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// What rein tells the model about one tool call: a fact on success, a
    /// structured placeholder on failure — never raw error text.
    Tool {
        /// The model's id of the call this answers.
        call_id: String,
        /// The content.
        content: String,
    },
}

/// A tool call as the model proposed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The model's id for the call.
    pub id: String,
    /// The tool's name as the model wrote it (may not exist).
    pub name: String,
    /// The arguments as the model wrote them: JSON text, possibly malformed
    /// or truncated.
    pub arguments: String,
}

pub use rein_core::model::{FinishReason, TokenUsage};

/// A request for the next turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    /// The model to ask.
    pub model: String,
    /// The transcript so far.
    pub messages: Vec<Message>,
    /// Tool definitions in OpenAI `tools` format (the registry generates
    /// them; providers with another format convert).
    pub tools: Vec<Value>,
    /// An output-token ceiling, if the budget imposes one.
    pub max_tokens: Option<u64>,
    /// Sampling and format options in OpenAI's names (`temperature`,
    /// `top_p`, `stop`, `seed`, `tool_choice`, `response_format`), passed
    /// through from a gateway caller; each provider maps what it supports.
    /// Empty for a run's turns.
    pub options: serde_json::Map<String, Value>,
}

/// The next turn.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelResponse {
    /// Text, if any.
    pub text: Option<String>,
    /// Proposed tool calls.
    pub tool_calls: Vec<ToolCall>,
    /// Why it stopped.
    pub finish: FinishReason,
    /// The stop sequence it wrote, when `finish` is
    /// [`FinishReason::StopSequence`] and the provider named it (Anthropic's
    /// `stop_sequence`, vLLM's `stop_reason`): the gateway answers it to a
    /// client that asked for several. Not recorded in the run's events: a
    /// resumed turn has `None`.
    pub stop_sequence: Option<String>,
    /// What it consumed.
    pub usage: TokenUsage,
}

impl ModelResponse {
    /// Whether the turn was cut at the output-token limit: its text may be
    /// partial and its tool calls' arguments may be cut JSON, so none of it
    /// is a complete answer (see [`FinishReason`]).
    pub fn is_truncated(&self) -> bool {
        self.finish.is_truncated()
    }
}

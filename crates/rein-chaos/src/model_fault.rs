//! Model-side faults, each expressible for both providers the suite
//! drives: the scripted provider (a turn of its script) and the
//! OpenAI-compatible one (a reply of the testkit's mock model server).
//!
//! # Why one vocabulary for both
//!
//! The same fault must mean the same thing whichever provider carries it:
//! a 429 from a script and a 429 over HTTP go through one classification,
//! and a scenario pair (one per provider) shows that they do.

use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{Reply, ToolCall};
use serde_json::{Value, json};

/// A fault of the model gateway layer (seed 000).
#[derive(Debug, Clone, PartialEq)]
pub enum ModelFault {
    /// 429 with a server hint.
    RateLimited {
        /// The hint, in seconds.
        retry_after_s: u64,
    },
    /// 503: the provider is overloaded.
    Overloaded,
    /// The prompt no longer fits the model's context window.
    ContextOverflow,
    /// The answer is cut at the output-token limit.
    TruncatedOutput {
        /// What made it out.
        text: &'static str,
    },
    /// A tool call whose arguments are cut mid-JSON.
    BrokenToolJson {
        /// The tool.
        tool: &'static str,
        /// The raw argument text.
        raw: &'static str,
    },
    /// A call of a tool that does not exist.
    HallucinatedTool {
        /// The invented name.
        name: &'static str,
        /// Its arguments.
        args: Value,
    },
    /// A real tool called with invented values.
    HallucinatedArgs {
        /// The tool.
        tool: &'static str,
        /// The invented arguments.
        args: Value,
    },
}

impl ModelFault {
    /// The fault as a turn of the scripted provider's script.
    pub fn script_turn(&self) -> Value {
        let usage = json!({"input": 300, "output": 40});
        match self {
            ModelFault::RateLimited { retry_after_s } => {
                json!({"error": {"status": 429, "retry_after_ms": retry_after_s * 1000}})
            }
            ModelFault::Overloaded => json!({"error": {"status": 503}}),
            ModelFault::ContextOverflow => json!({"error": {"category": "context_overflow"}}),
            ModelFault::TruncatedOutput { text } => {
                json!({"text": text, "finish_reason": "length", "usage": usage})
            }
            ModelFault::BrokenToolJson { tool, raw } => {
                json!({"tool_calls": [{"name": tool, "arguments": raw}], "usage": usage})
            }
            ModelFault::HallucinatedTool { name: tool, args }
            | ModelFault::HallucinatedArgs { tool, args } => {
                json!({"tool_calls": [{"name": tool, "arguments": args}], "usage": usage})
            }
        }
    }

    /// The fault as a reply of the mock OpenAI-compatible server.
    pub fn mock_reply(&self) -> Reply {
        match self {
            ModelFault::RateLimited { retry_after_s } => {
                Reply::rate_limited(Some(RetryAfter::Seconds(*retry_after_s)))
            }
            ModelFault::Overloaded => Reply::unavailable(),
            ModelFault::ContextOverflow => Reply::context_length_exceeded(),
            ModelFault::TruncatedOutput { text } => Reply::truncated(text),
            ModelFault::BrokenToolJson { tool, raw } => {
                Reply::tool_calls([ToolCall::raw(tool, raw)])
            }
            ModelFault::HallucinatedTool { name: tool, args }
            | ModelFault::HallucinatedArgs { tool, args } => Reply::tool_call(tool, args),
        }
    }
}

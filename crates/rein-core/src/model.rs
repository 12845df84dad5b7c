//! The vocabulary of a model call that outlives the call: why the model
//! stopped and what it consumed. The engine's providers produce these; the
//! event stream records them, and resume and the budget read them back.

use serde::{Deserialize, Serialize};

/// Why the model stopped.
///
/// `Length` is the one way a *returned* answer can be incomplete: the
/// model hit its output-token limit (OpenAI `length`, Anthropic
/// `max_tokens`), so its text may stop mid-sentence and its last tool
/// call's arguments may be cut JSON. [`is_truncated`](Self::is_truncated)
/// says so; the engine must treat such output as a parse failure (the
/// model's output is unusable as it stands, ask again with more room or
/// less input), not as a generation failure (the call failed; retry it)
/// and never as a complete answer. A stream that is cut for any other
/// reason — a dropped connection, a stall, a mangled event — is not
/// returned as an answer at all: it ends in a [`Failure`](crate::Failure).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end.
    Stop,
    /// It wrote one of the request's stop sequences (Anthropic
    /// `stop_reason: "stop_sequence"`; an OpenAI-compatible server that
    /// names the match, as vLLM does in `stop_reason`). OpenAI's own API
    /// says `stop` for a natural end and a stop sequence alike, so a turn
    /// from it is [`Stop`](Self::Stop) either way: rein claims a stop
    /// sequence only when the provider said so. The answer is complete,
    /// as for `Stop`.
    StopSequence,
    /// It proposed tool calls.
    ToolCalls,
    /// It hit the output-token limit: the output may be truncated.
    Length,
    /// A content filter stopped it.
    ContentFilter,
    /// Anything else.
    Other,
}

impl FinishReason {
    /// Whether the output was cut before the model finished it, so text
    /// and tool-call arguments may be incomplete.
    pub fn is_truncated(self) -> bool {
        matches!(self, FinishReason::Length)
    }
}

/// Tokens a call consumed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
}

impl TokenUsage {
    /// Input plus output.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }
}

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
    /// The task, or a caller's turn.
    User {
        /// The text (of its text parts, when it has [`Part`]s).
        content: String,
        /// The message in order when it holds more than text (an image,
        /// audio): its text parts included, so a provider sends exactly
        /// these. Empty for a text-only message, nearly every one; such a
        /// message is written as before, so stored transcripts read alike.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        parts: Vec<Part>,
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

impl Message {
    /// A text-only user message.
    pub fn user(content: impl Into<String>) -> Message {
        Message::User {
            content: content.into(),
            parts: Vec::new(),
        }
    }

    /// A user message of `parts` in order; text-only when every part is
    /// text (their texts concatenated, as the wire formats read parts).
    pub fn user_parts(parts: Vec<Part>) -> Message {
        let content = parts
            .iter()
            .filter_map(|p| match p {
                Part::Text { text } => Some(text.as_str()),
                Part::Image { .. } | Part::Audio { .. } => None,
            })
            .collect::<String>();
        let parts = if parts.iter().all(|p| matches!(p, Part::Text { .. })) {
            Vec::new()
        } else {
            parts
        };
        Message::User { content, parts }
    }

    /// The parts of a user message that are not text (none for any other
    /// message).
    pub fn media(&self) -> impl Iterator<Item = &Part> {
        let parts = match self {
            Message::User { parts, .. } => parts.as_slice(),
            _ => &[],
        };
        parts.iter().filter(|p| !matches!(p, Part::Text { .. }))
    }
}

/// One part of a user message that holds more than text, in the terms
/// every provider rein speaks can express (OpenAI's content parts,
/// Anthropic's content blocks); each provider maps what it takes and
/// refuses, naming the part, what it does not.
///
/// # Why no files
///
/// rein bounds a prompt's tokens before sending it (invariant 2). An
/// image's tokens are bounded whatever its size (providers scale it down,
/// see [`IMAGE_TOKENS_BOUND`]) and audio's by its length, but a document's
/// depend on its pages and their text, which its bytes do not bound
/// within reason; the gateways refuse file parts saying so.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image, by URL: `https://…`, or a `data:image/png;base64,…` URL.
    Image {
        /// Where the image is, or the image itself as a data URL.
        url: String,
        /// OpenAI's `detail` (`low`, `high`, `auto`), when the caller set
        /// one; providers without it leave it out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// Audio, base64-encoded.
    Audio {
        /// The audio's bytes, base64.
        data: String,
        /// Its format (`wav`, `mp3`).
        format: String,
    },
}

/// The most prompt tokens one image may cost with any provider rein
/// speaks: Anthropic scales an image to about 1.15 megapixels, about
/// 1,600 tokens; OpenAI's tile models to at most 8 tiles, 1,445 tokens;
/// its patch models to 1,536 patches, counted at up to 1.72 tokens each
/// (2,642). Bounded above all of them, whatever the image's size.
pub const IMAGE_TOKENS_BOUND: u64 = 3_000;

/// Decoded audio bytes per prompt token at most: OpenAI counts audio at
/// ten tokens a second, and the least dense audio it takes (MP3 at
/// 8 kbit/s) is 1,000 bytes a second; half that, for a margin.
pub const AUDIO_BYTES_PER_TOKEN: u64 = 50;

impl Part {
    /// An upper bound of the prompt tokens of a part that is not text
    /// (a text part is counted as text, so 0 here).
    pub fn media_tokens_bound(&self) -> u64 {
        match self {
            Part::Text { .. } => 0,
            Part::Image { .. } => IMAGE_TOKENS_BOUND,
            Part::Audio { data, .. } => {
                // Base64 holds 3 bytes in 4 characters.
                let decoded = u64::try_from(data.len()).unwrap_or(u64::MAX) / 4 * 3;
                decoded.div_ceil(AUDIO_BYTES_PER_TOKEN)
            }
        }
    }

    /// What the part is called in messages: `text`, `image`, `audio`.
    pub fn kind(&self) -> &'static str {
        match self {
            Part::Text { .. } => "text",
            Part::Image { .. } => "image",
            Part::Audio { .. } => "audio",
        }
    }
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

/// What an embedding model returned for a request's inputs (the texts of
/// its user messages): one vector per input, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Embeddings {
    /// The vectors.
    pub vectors: Vec<Vec<f32>>,
    /// What they consumed (input tokens only).
    pub usage: TokenUsage,
}

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
    /// `top_p`, `stop`, `seed`, `tool_choice`, `response_format`, …), and
    /// in the Messages API's for the two only it has (`top_k`,
    /// `output_config`), passed through from a gateway caller; each value
    /// is in the shape of its member in `rein_core::wire`'s requests. Each
    /// provider maps what it supports ([`ModelRequest::option`]) and names
    /// the rest as ignored. Empty for a run's turns.
    pub options: serde_json::Map<String, Value>,
    /// Whether the last message, an assistant's text, is the start of the
    /// answer to continue (a prefill), not a turn already taken: the
    /// model writes only what extends it. rein asks so to recover a
    /// stream cut after its first token (see
    /// [`recovering`](crate::run::recovering)); a provider that cannot
    /// refuses it in [`ModelProvider::carries`](super::ModelProvider::carries),
    /// which is the default.
    pub continuation: bool,
}

impl ModelRequest {
    /// The text a [`continuation`](Self::continuation) request asks the
    /// model to extend: its last message's, when that is an assistant's.
    pub fn prefix(&self) -> Option<&str> {
        if !self.continuation {
            return None;
        }
        match self.messages.last() {
            Some(Message::Assistant {
                content: Some(text),
                tool_calls,
            }) if tool_calls.is_empty() => Some(text),
            _ => None,
        }
    }

    /// The option `key`, read as `T`: the type of the member in the wire
    /// request that holds it (`rein_core::wire`); `null` is absent. Both
    /// providers read the options they carry through here, so a value of
    /// the wrong shape is refused by the provider instead of sent half-read.
    ///
    /// # Errors
    ///
    /// The option's value is not a `T`.
    pub fn option<'a, T: Deserialize<'a>>(
        &'a self,
        key: &str,
    ) -> Result<Option<T>, serde_json::Error> {
        match self.options.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => T::deserialize(value).map(Some),
        }
    }
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

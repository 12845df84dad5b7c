//! Anthropic's Messages API: the answer to `POST /v1/messages` and the
//! events of its stream.
//!
//! Writers (the gateway, the mock model) build these values and serialize
//! them: the output is the API's own shape, member for member. Readers
//! (the Anthropic provider) deserialize what an upstream sent, tolerating
//! what the API may add: a block or a delta of a kind rein does not read
//! (`thinking`, a server tool's) reads as `Other`, and members absent from
//! a compatible server's answer read as their default.

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod request;

/// A whole answer (`"type": "message"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Its id (`msg_…`).
    #[serde(default)]
    pub id: String,
    /// Always `message`.
    #[serde(rename = "type", default)]
    pub tag: MessageTag,
    /// Always `assistant`.
    #[serde(default)]
    pub role: AssistantRole,
    /// The model that answered.
    #[serde(default)]
    pub model: String,
    /// The answer's blocks, in order. Required: an answer without it is
    /// not one.
    pub content: Vec<Block>,
    /// Why the model stopped (`end_turn`, `tool_use`, `max_tokens`,
    /// `stop_sequence`, `refusal`, …); `null` in a stream's
    /// `message_start`.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The stop sequence that stopped it, if one did.
    #[serde(default)]
    pub stop_sequence: Option<String>,
    /// What it counted (`null` read as nothing counted).
    #[serde(default, deserialize_with = "super::nullable")]
    pub usage: Usage,
}

impl Message {
    /// Answer `id` of `model` with nothing in it yet: what a stream's
    /// `message_start` carries, and what a writer fills in.
    pub fn opened(id: impl Into<String>, model: impl Into<String>) -> Message {
        Message {
            id: id.into(),
            tag: MessageTag::Message,
            role: AssistantRole::Assistant,
            model: model.into(),
            content: Vec::new(),
            stop_reason: None,
            stop_sequence: None,
            usage: Usage::default(),
        }
    }
}

/// The `type` of a [`Message`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MessageTag {
    /// `message`.
    #[default]
    Message,
}

/// The `role` of a [`Message`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssistantRole {
    /// `assistant`.
    #[default]
    Assistant,
}

/// One block of an answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Text (`""` when a stream's block starts).
    Text {
        /// The text.
        #[serde(default)]
        text: String,
    },
    /// A call of one of the request's tools.
    ToolUse {
        /// Its id (`toolu_…`), which the tool's result names.
        #[serde(default)]
        id: Option<String>,
        /// The tool; a reader refuses a call without one.
        #[serde(default)]
        name: Option<String>,
        /// Its input: a JSON object (`{}` when a stream's block starts).
        #[serde(default)]
        input: Value,
    },
    /// A block rein does not read (thinking, a server tool's use or
    /// result, …). Read only: never written.
    #[serde(other)]
    Other,
}

/// What an answer counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Uncached input tokens (a `message_delta` may leave them out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Input tokens written to the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<u64>,
    /// Input tokens read from the prompt cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
}

impl Usage {
    /// Input and output tokens, as a writer states them.
    pub fn of(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: Some(input),
            output_tokens: Some(output),
            ..Usage::default()
        }
    }

    /// Every billed input token: uncached, plus cache writes and reads;
    /// `None` when `input_tokens` is absent.
    pub fn billed_input(&self) -> Option<u64> {
        let base = self.input_tokens?;
        Some(
            base.saturating_add(self.cache_creation_input_tokens.unwrap_or(0))
                .saturating_add(self.cache_read_input_tokens.unwrap_or(0)),
        )
    }
}

/// One event of a streamed answer: its `type` is also the SSE event's
/// name ([`StreamEvent::name`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// The answer begins: its id, model and the prompt's tokens, no
    /// content yet.
    MessageStart {
        /// The answer so far. A compatible server may leave out its empty
        /// `content` here (read as none), unlike in a whole answer.
        #[serde(deserialize_with = "started")]
        message: Message,
    },
    /// A block begins at `index`.
    ContentBlockStart {
        /// Its index in the answer.
        index: u64,
        /// The block, empty (`text: ""`, `input: {}`) or whole.
        content_block: Block,
    },
    /// More of the block at `index`.
    ContentBlockDelta {
        /// The block's index.
        index: u64,
        /// What is added.
        delta: BlockDelta,
    },
    /// The block at `index` is complete.
    ContentBlockStop {
        /// The block's index.
        index: u64,
    },
    /// The answer's end: why it stopped, and the output counted.
    MessageDelta {
        /// Why it stopped (absent: no reason given).
        #[serde(default)]
        delta: MessageDelta,
        /// What it counted (`output_tokens`, at least; absent or `null`
        /// read as nothing counted).
        #[serde(default, deserialize_with = "super::nullable")]
        usage: Usage,
        /// rein's mark of a stream it recovered after a cut (the
        /// gateway's extension; absent otherwise).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rein: Option<Value>,
    },
    /// The stream's last event.
    MessageStop,
    /// Keeps the connection open.
    Ping,
    /// An in-band error: the answer ends unfinished.
    Error {
        /// What went wrong (absent: nothing said).
        #[serde(default)]
        error: ErrorBody,
    },
    /// An event rein does not read. Read only: never written.
    #[serde(other)]
    Other,
}

impl StreamEvent {
    /// The event's `type`, which is also its SSE `event:` name.
    pub fn name(&self) -> &'static str {
        match self {
            StreamEvent::MessageStart { .. } => "message_start",
            StreamEvent::ContentBlockStart { .. } => "content_block_start",
            StreamEvent::ContentBlockDelta { .. } => "content_block_delta",
            StreamEvent::ContentBlockStop { .. } => "content_block_stop",
            StreamEvent::MessageDelta { .. } => "message_delta",
            StreamEvent::MessageStop => "message_stop",
            StreamEvent::Ping => "ping",
            StreamEvent::Error { .. } => "error",
            StreamEvent::Other => "other",
        }
    }

    /// The event as the stream sends it: `event: NAME`, its JSON `data`,
    /// and the blank line that ends it.
    pub fn to_sse(&self) -> String {
        // Serializing a value of these types cannot fail (no map with
        // non-string keys, no float that is not finite).
        let data = serde_json::to_string(self).unwrap_or_default();
        format!("event: {}\ndata: {data}\n\n", self.name())
    }
}

/// What a `content_block_delta` adds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BlockDelta {
    /// More text.
    TextDelta {
        /// The text added.
        #[serde(default)]
        text: String,
    },
    /// More of a tool call's input, as a piece of its JSON.
    InputJsonDelta {
        /// The piece.
        #[serde(default)]
        partial_json: String,
    },
    /// A delta rein does not read (thinking, a signature, a citation).
    /// Read only: never written.
    #[serde(other)]
    Other,
}

/// The `delta` of a `message_delta`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageDelta {
    /// Why the model stopped.
    #[serde(default)]
    pub stop_reason: Option<String>,
    /// The stop sequence that stopped it, if one did.
    #[serde(default)]
    pub stop_sequence: Option<String>,
}

/// The `error` of an in-band error event (and of an error answer).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Its kind: `overloaded_error`, `api_error`, `rate_limit_error`, …;
    /// `""` when a compatible server leaves it out.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// For humans.
    #[serde(default)]
    pub message: String,
    /// A code for machines: not Anthropic's, but an OpenAI-style proxy in
    /// front of a compatible server may send one (`context_length_exceeded`,
    /// `content_filter`), and it refines the error's category. Read, and
    /// written only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// The message of a `message_start`: a [`Message`] whose `content` may be
/// absent (read as empty). Only this event's reader allows it; a whole
/// answer without `content` is not one.
fn started<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Message, D::Error> {
    let mut message = serde_json::Map::<String, Value>::deserialize(deserializer)?;
    message
        .entry("content")
        .or_insert_with(|| Value::Array(Vec::new()));
    Message::deserialize(Value::Object(message)).map_err(serde::de::Error::custom)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn an_answer_is_written_member_for_member() {
        let message = Message {
            content: vec![
                Block::Text {
                    text: "On it.".into(),
                },
                Block::ToolUse {
                    id: Some("toolu_1".into()),
                    name: Some("get_order".into()),
                    input: json!({"order_id": "A"}),
                },
            ],
            stop_reason: Some("tool_use".into()),
            usage: Usage::of(10, 3),
            ..Message::opened("msg_1", "claude")
        };
        assert_eq!(
            serde_json::to_value(&message).unwrap(),
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude",
                   "content": [{"type": "text", "text": "On it."},
                               {"type": "tool_use", "id": "toolu_1", "name": "get_order", "input": {"order_id": "A"}}],
                   "stop_reason": "tool_use", "stop_sequence": null,
                   "usage": {"input_tokens": 10, "output_tokens": 3}})
        );
    }

    #[test]
    fn a_reader_tolerates_what_the_api_adds_and_what_a_compatible_server_leaves_out() {
        let read: Message = serde_json::from_value(json!({
            "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text"},
                        {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search"}],
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 5}}))
        .unwrap();
        assert_eq!(
            read.content,
            [
                Block::Other,
                Block::Text {
                    text: String::new()
                },
                Block::Other
            ]
        );
        assert_eq!(read.usage.billed_input(), Some(15));
        assert_eq!(read.stop_reason, None);
        assert!(
            serde_json::from_value::<Message>(json!({"usage": {}})).is_err(),
            "no content"
        );
        let event: StreamEvent = serde_json::from_value(
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "signature_delta", "signature": "x"}}),
        )
        .unwrap();
        assert_eq!(
            event,
            StreamEvent::ContentBlockDelta {
                index: 1,
                delta: BlockDelta::Other
            }
        );
        let started: StreamEvent = serde_json::from_value(
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 4}}}),
        )
        .unwrap();
        let StreamEvent::MessageStart { message } = started else {
            panic!("{started:?}");
        };
        assert_eq!(
            (message.content, message.usage.input_tokens),
            (Vec::new(), Some(4))
        );
        let unknown: StreamEvent = serde_json::from_value(json!({"type": "future_event"})).unwrap();
        assert_eq!(unknown, StreamEvent::Other);
    }

    #[test]
    fn an_event_is_sent_under_its_own_name() {
        let event = StreamEvent::MessageDelta {
            delta: MessageDelta {
                stop_reason: Some("end_turn".into()),
                stop_sequence: None,
            },
            usage: Usage {
                output_tokens: Some(7),
                ..Usage::default()
            },
            rein: None,
        };
        assert_eq!(
            event.to_sse(),
            "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":7}}\n\n"
        );
        assert_eq!(
            StreamEvent::Ping.to_sse(),
            "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
    }
}

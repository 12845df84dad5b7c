//! OpenAI's Chat Completions: the answer to `POST /v1/chat/completions`,
//! the chunks of its stream, and the error body of both.
//!
//! Writers (the gateway, the mock model) build these values and serialize
//! them. Readers (the OpenAI-compatible provider) deserialize what an
//! upstream sent, and a compatible server is not OpenAI:
//!
//! - the members rein never reads (an answer's `id`, `object`, `created`
//!   and `model`, a message's `role`, a tool call's `type`) are written but
//!   not read, so any value there is taken: Azure OpenAI's first chunk says
//!   `"object": ""` and `"id": ""`;
//! - a member rein reads may be absent or `null` (read as its default,
//!   except an answer's `choices` and a choice's `message`, without which
//!   there is no answer), the arguments of a tool call may come as a JSON
//!   object instead of a string (read as its text), and vLLM names the
//!   stop sequence that matched (`stop_reason`);
//! - a member rein reads that holds the wrong type is not guessed at: the
//!   answer or chunk is malformed, a transient failure.
//!
//! A chunk's writer borrows the answer's id and model ([`Cow`]): the
//! gateway writes one chunk per token from the names it already holds.

use std::borrow::Cow;

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

pub mod request;

/// A whole answer (`"object": "chat.completion"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    /// Its id (`chatcmpl-…`). Written, not read.
    #[serde(skip_deserializing)]
    pub id: String,
    /// Always `chat.completion`. Written, not read.
    #[serde(skip_deserializing)]
    pub object: CompletionTag,
    /// When it was made, in seconds since the Unix epoch. Written, not
    /// read.
    #[serde(skip_deserializing)]
    pub created: u64,
    /// The model that answered. Written, not read.
    #[serde(skip_deserializing)]
    pub model: String,
    /// The answers; rein asks for one and reads the first. Required: a
    /// body without it is not an answer.
    pub choices: Vec<Choice>,
    /// What it counted.
    #[serde(default, deserialize_with = "super::nullable")]
    pub usage: Usage,
}

impl Completion {
    /// Answer `id` of `model`, made at `created`: one choice, `message`,
    /// finished for `finish_reason`, having counted `usage`.
    pub fn of(
        id: String,
        created: u64,
        model: String,
        message: AssistantMessage,
        finish_reason: &str,
        usage: Usage,
    ) -> Completion {
        Completion {
            id,
            object: CompletionTag::Completion,
            created,
            model,
            choices: vec![Choice {
                index: 0,
                message,
                logprobs: None,
                finish_reason: Some(finish_reason.to_owned()),
                stop_reason: None,
            }],
            usage,
        }
    }
}

/// The `object` of a [`Completion`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum CompletionTag {
    /// `chat.completion`.
    #[default]
    #[serde(rename = "chat.completion")]
    Completion,
}

/// One answer of a [`Completion`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Choice {
    /// Its index among the answers.
    #[serde(default, deserialize_with = "super::nullable")]
    pub index: u64,
    /// The assistant's message. Required: a choice without it is not one.
    pub message: AssistantMessage,
    /// Log probabilities: rein asks for none and writes `null`.
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Why the model stopped (`stop`, `tool_calls`, `length`,
    /// `content_filter`).
    #[serde(default)]
    pub finish_reason: Option<String>,
    /// The stop sequence that matched, as vLLM names it; a number there
    /// (a stop *token*) reads as none. Never written.
    #[serde(
        default,
        deserialize_with = "stop_sequence",
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_reason: Option<String>,
}

/// The assistant's message of a [`Choice`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Always `assistant`. Written, not read.
    #[serde(skip_deserializing)]
    pub role: AssistantRole,
    /// Its text; `null` when it only calls tools.
    #[serde(default)]
    pub content: Option<String>,
    /// The tools it calls, in order.
    #[serde(
        default,
        deserialize_with = "super::nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tool_calls: Vec<ToolCall>,
}

/// The `role` of an assistant's message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AssistantRole {
    /// `assistant`.
    #[default]
    Assistant,
}

/// A call of one of the request's tools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Its id (`call_…`), which the tool's result names.
    #[serde(default)]
    pub id: Option<String>,
    /// Always `function`. Written, not read.
    #[serde(rename = "type", skip_deserializing)]
    pub kind: FunctionKind,
    /// The function called.
    #[serde(default, deserialize_with = "super::nullable")]
    pub function: FunctionCall,
}

impl ToolCall {
    /// Call `id` of the function `name` with `arguments` (JSON text).
    pub fn function(id: String, name: String, arguments: String) -> ToolCall {
        ToolCall {
            id: Some(id),
            kind: FunctionKind::Function,
            function: FunctionCall {
                name: Some(name),
                arguments: Some(arguments),
            },
        }
    }
}

/// The `type` of a tool, a tool call and a named tool choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum FunctionKind {
    /// `function`.
    #[default]
    Function,
}

/// The function of a [`ToolCall`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionCall {
    /// The tool; a reader refuses a call without one.
    #[serde(default)]
    pub name: Option<String>,
    /// Its arguments, as JSON text; `None` when absent or `null`.
    #[serde(default, deserialize_with = "arguments")]
    pub arguments: Option<String>,
}

/// What an answer counted. In a stream, only the usage chunk holds it
/// (`stream_options.include_usage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Output tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Their sum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
}

impl Usage {
    /// Input and output tokens, as a writer states them, with their sum.
    pub fn of(input: u64, output: u64) -> Usage {
        Usage {
            prompt_tokens: Some(input),
            completion_tokens: Some(output),
            total_tokens: Some(input.saturating_add(output)),
        }
    }
}

/// One event of a streamed answer (`"object": "chat.completion.chunk"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chunk<'a> {
    /// The answer's id, the same on every chunk. Written, not read.
    #[serde(skip_deserializing)]
    pub id: Cow<'a, str>,
    /// Always `chat.completion.chunk`. Written, not read.
    #[serde(skip_deserializing)]
    pub object: ChunkTag,
    /// When the answer was made, in seconds since the Unix epoch. Written,
    /// not read.
    #[serde(skip_deserializing)]
    pub created: u64,
    /// The model that answers. Written, not read.
    #[serde(skip_deserializing)]
    pub model: Cow<'a, str>,
    /// What each answer adds; empty in the usage chunk. Borrowed when
    /// written ([`Chunk::new`]), owned when read.
    #[serde(borrow, default, deserialize_with = "super::nullable")]
    pub choices: Cow<'a, [ChunkChoice<'a>]>,
    /// What the answer counted: in the last chunk only, when asked for.
    /// OpenAI then sends `"usage": null` on every other chunk: a writer
    /// that does so sets `Some(None)`; `None` leaves the member out. A
    /// reader reads `null` and absence alike, as `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Option<Usage>>,
    /// An in-band error: the answer ends unfinished. Read only: a writer
    /// sends an [`ErrorAnswer`] instead.
    #[serde(default, skip_serializing)]
    pub error: Option<Value>,
    /// rein's mark of a stream it recovered after a cut (the gateway's
    /// extension, on the last chunk; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rein: Option<Value>,
}

impl<'a> Chunk<'a> {
    /// A chunk of answer `id` by `model`, made at `created`, with
    /// `choices`, borrowed: a writer keeps the one choice of a token's
    /// chunk on its stack (`[ChunkChoice::first(…)]`), so writing a chunk
    /// allocates nothing but its bytes.
    pub fn new(
        id: &'a str,
        created: u64,
        model: &'a str,
        choices: &'a [ChunkChoice<'a>],
    ) -> Chunk<'a> {
        Chunk {
            id: Cow::Borrowed(id),
            object: ChunkTag::Chunk,
            created,
            model: Cow::Borrowed(model),
            choices: Cow::Borrowed(choices),
            usage: None,
            error: None,
            rein: None,
        }
    }

    /// The chunk as a stream's `data:` line and the blank line that ends
    /// the event.
    pub fn to_sse(&self) -> String {
        sse_data(self)
    }
}

/// The `object` of a [`Chunk`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ChunkTag {
    /// `chat.completion.chunk`.
    #[default]
    #[serde(rename = "chat.completion.chunk")]
    Chunk,
}

/// What one answer adds in a [`Chunk`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChunkChoice<'a> {
    /// Its index among the answers.
    #[serde(default, deserialize_with = "super::nullable")]
    pub index: u64,
    /// What is added.
    #[serde(borrow, default, deserialize_with = "super::nullable")]
    pub delta: Delta<'a>,
    /// Log probabilities: rein asks for none and writes `null`.
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Why the model stopped, on the answer's last chunk. A compatible
    /// server may send `""` on every chunk: a reader takes it for none.
    #[serde(borrow, default)]
    pub finish_reason: Option<Cow<'a, str>>,
    /// The stop sequence that matched, as vLLM names it. Never written.
    #[serde(
        default,
        deserialize_with = "stop_sequence",
        skip_serializing_if = "Option::is_none"
    )]
    pub stop_reason: Option<String>,
}

impl<'a> ChunkChoice<'a> {
    /// The first (and only) answer's choice: it adds `delta`, and
    /// finishes for `finish_reason` when given.
    pub fn first(delta: Delta<'a>, finish_reason: Option<&'a str>) -> ChunkChoice<'a> {
        ChunkChoice {
            index: 0,
            delta,
            logprobs: None,
            finish_reason: finish_reason.map(Cow::Borrowed),
            stop_reason: None,
        }
    }

    /// The finish reason, unless absent or empty.
    pub fn finished(&self) -> Option<&str> {
        self.finish_reason.as_deref().filter(|r| !r.is_empty())
    }
}

/// The `delta` of a [`ChunkChoice`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Delta<'a> {
    /// `assistant`, on the first chunk only. Written, not read.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub role: Option<AssistantRole>,
    /// More text.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Cow<'a, str>>,
    /// More of the tool calls, each by its index.
    #[serde(
        borrow,
        default,
        deserialize_with = "super::nullable",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tool_calls: Vec<ToolCallDelta<'a>>,
}

impl<'a> Delta<'a> {
    /// A delta of `text` alone.
    pub fn text(text: &'a str) -> Delta<'a> {
        Delta {
            content: Some(Cow::Borrowed(text)),
            ..Delta::default()
        }
    }
}

/// More of one tool call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ToolCallDelta<'a> {
    /// Which call: its position among the answer's calls. A server that
    /// leaves it out numbers calls by their place in the chunk.
    #[serde(default)]
    pub index: Option<u64>,
    /// The call's id, on its first piece.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Cow<'a, str>>,
    /// `function`, on its first piece. Written, not read.
    #[serde(
        rename = "type",
        skip_deserializing,
        skip_serializing_if = "Option::is_none"
    )]
    pub kind: Option<FunctionKind>,
    /// The function's name and the next piece of its arguments.
    #[serde(borrow, default, deserialize_with = "super::nullable")]
    pub function: FunctionDelta<'a>,
}

/// The `function` of a [`ToolCallDelta`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FunctionDelta<'a> {
    /// The tool, on the call's first piece.
    #[serde(borrow, default, skip_serializing_if = "Option::is_none")]
    pub name: Option<Cow<'a, str>>,
    /// The next piece of the arguments' JSON text; `None` when absent or
    /// `null`.
    #[serde(default, deserialize_with = "arguments")]
    pub arguments: Option<String>,
}

/// An error answer, and an in-band error event of a stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorAnswer {
    /// What went wrong.
    pub error: ErrorBody,
}

impl ErrorAnswer {
    /// The event as a stream's `data:` line and the blank line that ends
    /// it.
    pub fn to_sse(&self) -> String {
        sse_data(self)
    }
}

/// The `error` member OpenAI's SDKs raise with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// For humans.
    #[serde(default)]
    pub message: String,
    /// Its kind: `invalid_request_error`, `server_error`, ….
    #[serde(rename = "type", default)]
    pub kind: String,
    /// The request member it is about, if one.
    #[serde(default)]
    pub param: Option<String>,
    /// A code for machines, if one.
    #[serde(default)]
    pub code: Option<String>,
}

/// `value` as one SSE `data:` event.
fn sse_data(value: &impl Serialize) -> String {
    // Serializing a value of these types cannot fail (no map with
    // non-string keys, no float that is not finite).
    let data = serde_json::to_string(value).unwrap_or_default();
    format!("data: {data}\n\n")
}

/// A tool call's arguments: a string as it is; any other JSON (a server
/// that sends the object itself) as its text; `null` as none.
fn arguments<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Arguments {
        Text(String),
        Json(Value),
    }
    Ok(match Option::<Arguments>::deserialize(deserializer)? {
        Some(Arguments::Text(text)) => Some(text),
        Some(Arguments::Json(json)) => Some(json.to_string()),
        None => None,
    })
}

/// vLLM's `stop_reason`: the matched stop sequence when a string; a stop
/// token's number (or anything else) is no sequence.
fn stop_sequence<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum StopReason {
        Sequence(String),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Option::<StopReason>::deserialize(deserializer)? {
        Some(StopReason::Sequence(sequence)) => Some(sequence),
        Some(StopReason::Other(_)) | None => None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use serde_json::json;

    use super::*;

    #[test]
    fn an_answer_is_written_member_for_member() {
        let completion = Completion {
            id: "chatcmpl-1".into(),
            object: CompletionTag::Completion,
            created: 7,
            model: "gpt".into(),
            choices: vec![Choice {
                index: 0,
                message: AssistantMessage {
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: Some("call_1".into()),
                        kind: FunctionKind::Function,
                        function: FunctionCall {
                            name: Some("get_order".into()),
                            arguments: Some(r#"{"order_id":"A"}"#.into()),
                        },
                    }],
                    ..AssistantMessage::default()
                },
                logprobs: None,
                finish_reason: Some("tool_calls".into()),
                stop_reason: None,
            }],
            usage: Usage::of(10, 3),
        };
        assert_eq!(
            serde_json::to_value(&completion).unwrap(),
            json!({"id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "gpt",
                   "choices": [{"index": 0, "logprobs": null, "finish_reason": "tool_calls",
                                "message": {"role": "assistant", "content": null, "tool_calls": [
                                    {"id": "call_1", "type": "function",
                                     "function": {"name": "get_order", "arguments": "{\"order_id\":\"A\"}"}}]}}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}})
        );
    }

    #[test]
    fn a_chunk_is_written_as_the_stream_sends_it() {
        let choice = [ChunkChoice::first(Delta::text("Hi \"there\""), None)];
        let chunk = Chunk::new("c", 7, "m", &choice);
        assert_eq!(
            chunk.to_sse(),
            "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi \\\"there\\\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n"
        );
        let mut usage = Chunk::new("c", 7, "m", &[]);
        usage.usage = Some(Some(Usage::of(1, 2)));
        assert_eq!(
            serde_json::to_value(&usage).unwrap()["usage"],
            json!({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
        );
    }

    #[test]
    fn a_reader_tolerates_nulls_absences_and_object_arguments() {
        let chunk: Chunk<'_> = serde_json::from_str(
            r#"{"choices":[{"index":null,"delta":{"content":null,"tool_calls":[
                {"function":{"name":"f","arguments":{"a":1}}}]},"finish_reason":"","stop_reason":128009}],
                "usage":null,"error":null}"#,
        )
        .unwrap();
        let choice = &chunk.choices[0];
        assert_eq!(choice.index, 0);
        assert_eq!(choice.finished(), None);
        assert_eq!(choice.stop_reason, None);
        assert_eq!(
            choice.delta.tool_calls[0].function.arguments.as_deref(),
            Some(r#"{"a":1}"#)
        );
        assert_eq!(chunk.usage, None);
        // Azure OpenAI's first chunk (and its content filter's), and
        // members rein never reads holding anything.
        let azure: Chunk<'_> = serde_json::from_str(
            r#"{"id":"","object":"","created":0,"model":"","choices":[],"prompt_filter_results":[{"prompt_index":0}]}"#,
        )
        .unwrap();
        assert!(azure.choices.is_empty());
        let odd: Chunk<'_> = serde_json::from_str(
            r#"{"id":null,"object":7,"model":null,"created":null,"choices":[{"delta":{"role":"model","content":"x",
                "tool_calls":[{"type":"","index":0,"function":{"name":"f"}}]}}]}"#,
        )
        .unwrap();
        assert_eq!(odd.choices[0].delta.content.as_deref(), Some("x"));
        let whole: Completion = serde_json::from_str(
            r#"{"object":"","choices":[{"message":{"role":null,"content":"hi","tool_calls":[{"type":null,"function":{"name":"f"}}]}}]}"#,
        )
        .unwrap();
        assert_eq!(whole.choices[0].message.content.as_deref(), Some("hi"));
        let bare: Chunk<'_> = serde_json::from_str(r#"{"choices":null}"#).unwrap();
        assert!(bare.choices.is_empty());
        let vllm: Completion = serde_json::from_str(
            r#"{"choices":[{"message":{"content":"1, 2","tool_calls":null},"finish_reason":"stop","stop_reason":"END"}],"usage":null}"#,
        )
        .unwrap();
        assert_eq!(vllm.choices[0].stop_reason.as_deref(), Some("END"));
        assert_eq!(vllm.usage, Usage::default());
        for malformed in [
            r#"{}"#,
            r#"{"choices":[{}]}"#,
            r#"{"choices":[{"message":{"content":7}}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":"3"}}"#,
        ] {
            assert!(
                serde_json::from_str::<Completion>(malformed).is_err(),
                "{malformed}"
            );
        }
    }
}

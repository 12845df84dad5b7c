//! The scripted replies of the mock model.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::RetryAfter;

/// Token usage a reply reports when the script does not say.
pub const DEFAULT_USAGE: Usage = Usage {
    prompt_tokens: 100,
    completion_tokens: 20,
};

/// One scripted answer to one `POST /v1/chat/completions` or
/// `POST /v1/messages`, streamed or not: the same reply is rendered in the
/// shape of the route and mode that asked.
///
/// ```
/// use std::time::Duration;
/// use rein_testkit::mock_model::{Reply, StreamFault, ToolCall};
/// use rein_testkit::RetryAfter;
/// let script = vec![
///     Reply::tool_call("get_order", &serde_json::json!({"order_id": "A-1001"})),
///     Reply::rate_limited(Some(RetryAfter::Seconds(2))),
///     Reply::text("The delivery time is updated.").with_usage(1200, 40),
///     Reply::text("cut short").with_stream_fault(StreamFault::Drop { after: 3 }),
///     Reply::text("late").delayed(Duration::from_millis(50)),
/// ];
/// assert_eq!(script.len(), 5);
/// ```
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Reply {
    /// A 200 with one assistant message.
    Message(AssistantMessage),
    /// An error status with an OpenAI error body.
    Error(ApiError),
    /// `reply`, after sleeping `delay` (tokio time: paused-time tests stay
    /// instant). Nothing is sent while it sleeps, not even headers: for a
    /// stream this is a stall before the first byte.
    Delayed {
        /// How long to wait before answering.
        delay: Duration,
        /// The answer.
        reply: Box<Reply>,
    },
    /// A 200 whose body is cut off mid-way: the connection aborts, the
    /// client never reads a complete completion. A stream sends half its
    /// events first.
    LoseResponse,
    /// `reply`, streamed with `fault`. A non-streamed request gets `reply`
    /// as if there were no fault: the faults are about stream framing.
    Faulted {
        /// What goes wrong in the stream.
        fault: StreamFault,
        /// The answer being streamed.
        reply: Box<Reply>,
    },
}

/// What goes wrong in a streamed answer (see [`Reply::with_stream_fault`]).
///
/// Events are counted as the stream sends them, from the first: for Chat
/// Completions every `data:` line, for the Messages API every event
/// including `message_start` and `ping`. A stall before any byte (headers
/// not sent) is [`Reply::delayed`].
///
/// # Why
///
/// Streams fail in ways a single response cannot: a server that sends
/// headers and then nothing, a connection that dies between two events, an
/// event a proxy mangled, a body that ends without its terminator. A client
/// that treats any of these as a complete answer returns a cut answer as
/// if it were whole; each variant is one of those ways.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StreamFault {
    /// Send `after` events, then nothing for `hold` with the connection
    /// open, then abort it. `after: 0` is headers, then silence.
    Stall {
        /// Events sent before the stall.
        after: usize,
        /// How long the connection is held idle before it is aborted.
        hold: Duration,
    },
    /// Send `after` events, then abort the connection: no terminator, an
    /// incomplete chunked body.
    Drop {
        /// Events sent before the drop.
        after: usize,
    },
    /// Send `after` events, then one whose data is not JSON (cut mid-object),
    /// then the rest of the stream as if nothing happened.
    Malformed {
        /// Events sent before the malformed one.
        after: usize,
    },
    /// Send `after` events, then an in-band error event (Chat Completions:
    /// `data: {"error": {…}}`; Messages API: `event: error`) saying the
    /// server is overloaded — quoting the request's key header when the
    /// mock echoes it ([`MockModelConfig::with_echoed_authorization`](super::MockModelConfig::with_echoed_authorization))
    /// — then end the body cleanly, with no terminator.
    Error {
        /// Events sent before the error.
        after: usize,
    },
    /// Send every event except the terminator (`data: [DONE]`, or
    /// `message_stop`), then end the body cleanly. The final chunk with the
    /// finish reason and the usage chunk (or `message_delta`) are sent.
    NoTerminator,
}

impl StreamFault {
    /// Headers, then silence for `hold`, then an aborted connection.
    pub fn silent(hold: Duration) -> StreamFault {
        StreamFault::Stall { after: 0, hold }
    }
}

impl Reply {
    /// A final answer: `text`, `finish_reason: "stop"`.
    pub fn text(text: &str) -> Reply {
        Reply::Message(AssistantMessage {
            content: Some(text.to_owned()),
            tool_calls: Vec::new(),
            finish_reason: FinishReason::Stop,
            stop_sequence: None,
            usage: DEFAULT_USAGE,
        })
    }

    /// A reply cut at the token limit: `text`, `finish_reason: "length"`.
    pub fn truncated(text: &str) -> Reply {
        Reply::text(text).with_finish_reason(FinishReason::Length)
    }

    /// One tool call of `name` with `arguments` (encoded as the JSON string
    /// OpenAI sends), `finish_reason: "tool_calls"`.
    pub fn tool_call(name: &str, arguments: &Value) -> Reply {
        Reply::tool_calls([ToolCall::new(name, arguments)])
    }

    /// Several tool calls in one turn, `finish_reason: "tool_calls"`.
    pub fn tool_calls(calls: impl IntoIterator<Item = ToolCall>) -> Reply {
        Reply::Message(AssistantMessage {
            content: None,
            tool_calls: calls.into_iter().collect(),
            finish_reason: FinishReason::ToolCalls,
            stop_sequence: None,
            usage: DEFAULT_USAGE,
        })
    }

    /// An error answer.
    pub fn error(error: ApiError) -> Reply {
        Reply::Error(error)
    }

    /// 429 `rate_limit_exceeded`, with `Retry-After` when given.
    pub fn rate_limited(retry_after: Option<RetryAfter>) -> Reply {
        Reply::Error(ApiError {
            retry_after,
            ..ApiError::new(
                429,
                "requests",
                "Rate limit reached for requests. Please try again later.",
            )
            .with_code("rate_limit_exceeded")
        })
    }

    /// 500 `server_error`.
    pub fn server_error() -> Reply {
        Reply::Error(ApiError::new(
            500,
            "server_error",
            "The server had an error while processing your request.",
        ))
    }

    /// 503 `server_error`: overloaded.
    pub fn unavailable() -> Reply {
        Reply::Error(ApiError::new(
            503,
            "server_error",
            "The engine is currently overloaded, please try again later.",
        ))
    }

    /// 400 `invalid_request_error` with `message`.
    pub fn bad_request(message: &str) -> Reply {
        Reply::Error(ApiError::new(400, "invalid_request_error", message))
    }

    /// 400 `context_length_exceeded`: rein must classify it as
    /// `context_overflow`, not as a plain bad request.
    pub fn context_length_exceeded() -> Reply {
        Reply::Error(
            ApiError::new(
                400,
                "invalid_request_error",
                "This model's maximum context length is 8192 tokens. However, your messages \
                 resulted in 9000 tokens. Please reduce the length of the messages.",
            )
            .with_code("context_length_exceeded")
            .with_param("messages"),
        )
    }

    /// 401 `invalid_api_key`.
    pub fn unauthorized() -> Reply {
        Reply::Error(
            ApiError::new(401, "invalid_request_error", "Incorrect API key provided.")
                .with_code("invalid_api_key"),
        )
    }

    /// A lost response: see [`Reply::LoseResponse`].
    pub fn lose_response() -> Reply {
        Reply::LoseResponse
    }

    /// This reply, streamed with `fault` when the request asks for a
    /// stream; answered normally otherwise.
    pub fn with_stream_fault(self, fault: StreamFault) -> Reply {
        Reply::Faulted {
            fault,
            reply: Box::new(self),
        }
    }

    /// This reply, answered after `delay`: for a stream, a stall before the
    /// first byte (headers not sent).
    pub fn delayed(self, delay: Duration) -> Reply {
        Reply::Delayed {
            delay,
            reply: Box::new(self),
        }
    }

    /// Sets the reported token usage (messages only).
    pub fn with_usage(mut self, prompt_tokens: u64, completion_tokens: u64) -> Reply {
        if let Some(message) = self.message_mut() {
            message.usage = Usage {
                prompt_tokens,
                completion_tokens,
            };
        }
        self
    }

    /// Sets the text beside tool calls (messages only).
    pub fn with_text(mut self, text: &str) -> Reply {
        if let Some(message) = self.message_mut() {
            message.content = Some(text.to_owned());
        }
        self
    }

    /// Sets the finish reason (messages only).
    pub fn with_finish_reason(mut self, finish_reason: FinishReason) -> Reply {
        if let Some(message) = self.message_mut() {
            message.finish_reason = finish_reason;
        }
        self
    }

    /// Stops the answer at the stop sequence `sequence` (messages only):
    /// the Messages API says `stop_reason: "stop_sequence"` with
    /// `stop_sequence`, Chat Completions `finish_reason: "stop"` (OpenAI
    /// does not say which sequence matched). The text is sent as scripted:
    /// like the real APIs, without the sequence.
    pub fn with_stop_sequence(mut self, sequence: &str) -> Reply {
        if let Some(message) = self.message_mut() {
            message.finish_reason = FinishReason::Stop;
            message.stop_sequence = Some(sequence.to_owned());
        }
        self
    }

    fn message_mut(&mut self) -> Option<&mut AssistantMessage> {
        match self {
            Reply::Message(message) => Some(message),
            Reply::Delayed { reply, .. } | Reply::Faulted { reply, .. } => reply.message_mut(),
            Reply::Error(_) | Reply::LoseResponse => None,
        }
    }
}

/// An assistant message the mock answers with.
#[derive(Debug, Clone, PartialEq)]
pub struct AssistantMessage {
    /// The text, or `None` (JSON `null`) for a pure tool-call turn.
    pub content: Option<String>,
    /// The tool calls; omitted from the JSON when empty.
    pub tool_calls: Vec<ToolCall>,
    /// Why the model stopped.
    pub finish_reason: FinishReason,
    /// The stop sequence it stopped at, with `finish_reason` `Stop` (see
    /// [`Reply::with_stop_sequence`]).
    pub stop_sequence: Option<String>,
    /// The token usage to report.
    pub usage: Usage,
}

/// One tool call in OpenAI's format:
/// `{"id", "type": "function", "function": {"name", "arguments": "<json string>"}}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The call id; `None` gets `call_<n>_<i>` (completion number, index).
    pub id: Option<String>,
    /// The function name.
    pub name: String,
    /// The arguments exactly as sent: a JSON string, or deliberately
    /// malformed text to test rein's handling of broken model output.
    pub arguments: String,
}

impl ToolCall {
    /// A call of `name` with `arguments` encoded as JSON text.
    pub fn new(name: &str, arguments: &Value) -> ToolCall {
        ToolCall::raw(name, &arguments.to_string())
    }

    /// A call of `name` whose arguments text is sent verbatim (it need not
    /// be valid JSON).
    pub fn raw(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: None,
            name: name.to_owned(),
            arguments: arguments.to_owned(),
        }
    }

    /// Sets the call id.
    pub fn with_id(mut self, id: &str) -> ToolCall {
        self.id = Some(id.to_owned());
        self
    }
}

/// Why the model stopped, as OpenAI names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// A natural end: a final answer.
    Stop,
    /// The model wants tools run.
    ToolCalls,
    /// Cut at the token limit.
    Length,
    /// Refused by a content filter.
    ContentFilter,
}

impl FinishReason {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Length => "length",
            FinishReason::ContentFilter => "content_filter",
        }
    }
}

/// Token usage of one completion; `total_tokens` is their sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens.
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
}

impl Usage {
    /// `prompt_tokens + completion_tokens`.
    pub fn total_tokens(&self) -> u64 {
        self.prompt_tokens.saturating_add(self.completion_tokens)
    }
}

/// An OpenAI error answer: status, `{"error": {"message", "type", "param",
/// "code"}}`, and an optional `Retry-After` header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// `error.message`.
    pub message: String,
    /// `error.type`, e.g. `invalid_request_error`.
    pub error_type: String,
    /// `error.code`, e.g. `context_length_exceeded`.
    pub code: Option<String>,
    /// `error.param`, e.g. `messages`.
    pub param: Option<String>,
    /// The `Retry-After` header to send.
    pub retry_after: Option<RetryAfter>,
}

impl ApiError {
    /// An error with no code, param or `Retry-After`.
    pub fn new(status: u16, error_type: &str, message: &str) -> ApiError {
        ApiError {
            status,
            message: message.to_owned(),
            error_type: error_type.to_owned(),
            code: None,
            param: None,
            retry_after: None,
        }
    }

    /// Sets `error.code`.
    pub fn with_code(mut self, code: &str) -> ApiError {
        self.code = Some(code.to_owned());
        self
    }

    /// Sets `error.param`.
    pub fn with_param(mut self, param: &str) -> ApiError {
        self.param = Some(param.to_owned());
        self
    }

    /// Sets the `Retry-After` header.
    pub fn with_retry_after(mut self, retry_after: RetryAfter) -> ApiError {
        self.retry_after = Some(retry_after);
        self
    }
}

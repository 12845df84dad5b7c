//! OpenAI's wire format: `POST /v1/chat/completions`.
//!
//! # Errors
//!
//! Errors are problem+json like the rest of the API, with an `error` member
//! in OpenAI's shape (`message`, `type`, `code`) so the SDKs raise them
//! with their message. A streamed answer that fails after its first event
//! ends with an in-band `{"error": …}` event and no `[DONE]`.
//!
//! A client's `max_tokens` (or `max_completion_tokens`) above the primary
//! model's cap is refused with the 400 OpenAI sends: `param` the member,
//! `code: "invalid_value"`, the cap in the message.

use std::borrow::Cow;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use rein_core::Category;
use rein_core::wire::openai;
use rein_core::wire::openai::request::{ChatMessage, ChatRequest, Content, ContentPart};
use rein_engine::provider::{
    FinishReason, Message, ModelRequest, ModelResponse, Part, ResponseFormat, StreamEvent,
    ToolCall, TurnStream,
};
use rein_engine::run::ModelError;
use serde::Serialize;
use serde_json::{Value, json};

use super::{Call, EventStream, OverCap, Wire};
use crate::http::auth::Caller;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// An OpenAI-compatible chat completion.
#[utoipa::path(
    post, path = "/v1/chat/completions", tag = "gateway",
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, pattern = "^[!-~]+$",
            description = "Non-streaming requests only: makes the request safe to retry"),
           ("Rein-Deadline-Ms" = Option<u64>, Header, nullable = false, minimum = 1,
            description = "How long the call may take, fallbacks and retries included (default: the binding's `deadline`, 600000 unless set)")),
    request_body(content = ChatRequest, description = "OpenAI's chat completion request; `model` names a [models.*] binding"),
    responses(
        (status = 200, description = "the completion (JSON), or its chunks (`text/event-stream` when `stream: true`)", body = Object,
         headers(("Rein-Model" = String, description = "provider/model that answered"),
                 ("Rein-Fallback" = String, description = "true when a fallback link answered"),
                 ("Rein-Max-Tokens" = String, description = "`<sent>; reason=cap|budget`: the output ceiling sent was below the client's max_tokens"),
                 ("Rein-Ignored" = String, description = "the request members the answer did not honour, comma-separated: `store` and `metadata` by design, and what the answering link's API has no equivalent for"))),
        (status = 400, description = "invalid request: a malformed or unrecognized member, a member rein cannot honour (`n` > 1, `logprobs`, audio, …), a max_tokens above the primary model's output cap, or the input does not fit any configured context window", body = Problem),
        (status = 401, description = "missing or invalid API key", body = Problem),
        (status = 404, description = "unknown model binding", body = Problem),
        (status = 409, description = "the same Idempotency-Key is still in progress", body = Problem),
        (status = 408, description = "the body stopped arriving (server.limits.body_timeout)", body = Problem),
        (status = 413, description = "body over the limit", body = Problem),
        (status = 422, description = "the same Idempotency-Key with another request", body = Problem),
        (status = 429, description = "every link is rate limited: the provider said so, its pause after a 429 holds, or rein's limits on it admit no call within the deadline (with `Retry-After`, the wait in whole seconds, when rein knows it)", body = Problem),
        (status = 501, description = "Idempotency-Key sent while idempotency is disabled", body = Problem),
        (status = 502, description = "every link failed", body = Problem),
        (status = 503, description = "every link's circuit is open, or the server is draining (`type` ends in `/draining`, with `Retry-After`)", body = Problem),
        (status = 504, description = "the deadline ran out", body = Problem),
    ),
    security(("bearer" = []))
)]
pub async fn chat_completions(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    super::handle::<OpenAi>(state, caller, headers, body).await
}

/// What OpenAI's wire format needs beyond the [`Call`].
struct OpenAi {
    /// `stream_options.include_usage`: a last chunk with the usage.
    include_usage: bool,
}

impl Wire for OpenAi {
    const PATH: &'static str = "/v1/chat/completions";

    fn parse(body: &[u8]) -> Result<Call<OpenAi>, Problem> {
        parse(body)
    }

    fn over_cap(over: &OverCap) -> Problem {
        ERRORS.over_cap(over)
    }

    fn failed(e: &ModelError) -> Problem {
        ERRORS.failed(e)
    }

    fn bad_deadline(message: String) -> Problem {
        ERRORS.bad_deadline(message)
    }

    fn body(_call: &Call<OpenAi>, model: &str, response: &ModelResponse) -> Value {
        // Serializing the answer's own types cannot fail.
        serde_json::to_value(completion_body(model, response)).unwrap_or(Value::Null)
    }

    fn events(
        call: Call<OpenAi>,
        model: String,
        turn: TurnStream,
        _prompt: Option<u64>,
    ) -> EventStream {
        let relay = Relay {
            turn,
            id: completion_id(),
            created: unix_secs(),
            model,
            include_usage: call.wire.include_usage,
            started: false,
            ended: false,
            recoveries: Vec::new(),
        };
        Box::pin(futures_util::stream::unfold(
            relay,
            |mut relay| async move {
                let bytes = relay.next().await?;
                Some((bytes, relay))
            },
        ))
    }
}

/// OpenAI's error shape under a route's title: problem+json with an
/// `error` member (`message`, `type`, `param`, `code`) that OpenAI's SDKs
/// raise with. Chat completions and responses answer their errors alike,
/// from this one renderer.
#[derive(Debug, Clone, Copy)]
pub(super) struct Errors {
    /// The problem's `title`.
    title: &'static str,
}

/// The errors of `/v1/chat/completions`.
const ERRORS: Errors = Errors::titled("Chat completion failed");

impl Errors {
    /// The errors of a route whose problems say `title`.
    pub(super) const fn titled(title: &'static str) -> Errors {
        Errors { title }
    }

    /// An error both problem+json readers and OpenAI SDKs understand.
    pub(super) fn problem(
        self,
        status: StatusCode,
        kind: &str,
        code: &str,
        message: String,
    ) -> Problem {
        let error = openai::ErrorAnswer {
            error: openai::ErrorBody {
                message: message.clone(),
                kind: kind.to_owned(),
                param: None,
                code: Some(code.to_owned()),
            },
        };
        // Serializing the error's own type cannot fail.
        Problem::new(status, &kind.replace('_', "-"), self.title, message)
            .with(serde_json::to_value(error).unwrap_or(Value::Null))
    }

    /// A 400 about the member `pointer` names (a JSON pointer), if any: the
    /// problem's `field`, and OpenAI's `param`.
    pub(super) fn invalid_at(self, message: String, pointer: Option<String>) -> Problem {
        let mut problem = self.problem(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_request",
            message,
        );
        if let (Some(pointer), Some(extra)) = (pointer, problem.extra.as_mut()) {
            extra["field"] = json!(pointer);
            extra["error"]["param"] = json!(pointer);
        }
        problem
    }

    /// The problem of a `Rein-Deadline-Ms` that is not a positive number.
    pub(super) fn bad_deadline(self, message: String) -> Problem {
        self.problem(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_deadline",
            message,
        )
    }

    /// The 400 OpenAI sends for a ceiling above the model's cap.
    pub(super) fn over_cap(self, over: &OverCap) -> Problem {
        let OverCap {
            param,
            asked,
            cap,
            model,
        } = over;
        let message = format!(
            "{param} is too large: {asked}. This model ({model}) supports at most {cap} completion tokens, whereas you provided {asked}."
        );
        let mut problem = self.problem(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "invalid_value",
            message,
        );
        if let Some(extra) = problem.extra.as_mut() {
            extra["field"] = json!(format!("/{param}"));
            extra["error"]["param"] = json!(param);
            extra["max_output_tokens"] = json!(cap);
        }
        problem
    }

    /// The problem of a binding that gave no answer.
    pub(super) fn failed(self, e: &ModelError) -> Problem {
        let (status, kind) = match e.category {
            Category::ContextOverflow => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            Category::InvalidArguments => (StatusCode::BAD_REQUEST, "invalid_request_error"),
            Category::ContentBlocked => (StatusCode::BAD_REQUEST, "content_filter"),
            Category::RateLimited => (StatusCode::TOO_MANY_REQUESTS, "rate_limit_error"),
            Category::CircuitOpen | Category::Overloaded => {
                (StatusCode::SERVICE_UNAVAILABLE, "service_unavailable")
            }
            Category::BudgetExhausted | Category::Timeout => {
                (StatusCode::GATEWAY_TIMEOUT, "timeout")
            }
            // The provider refused rein's own credentials: a gateway
            // misconfiguration, not the client's.
            _ => (StatusCode::BAD_GATEWAY, "upstream_error"),
        };
        let mut problem = self.problem(status, kind, e.category.as_str(), e.message.clone());
        problem.retry_after = super::retry_after(e);
        problem
    }
}

/// A 400 about the member `pointer` names, if any.
fn invalid_at(message: String, pointer: Option<String>) -> Problem {
    ERRORS.invalid_at(message, pointer)
}

// The request is read as `wire::openai::request::ChatRequest`, which is
// also the route's OpenAPI schema: what the document calls valid is
// exactly what is accepted, and its doc's table says what happens to each
// member. Every other member is refused, named, as OpenAI refuses one.

/// Members of OpenAI's chat request rein refuses by name, each with why:
/// what they ask for is something rein's answer does not carry.
const REFUSED: [(&str, &str); 6] = [
    (
        "top_logprobs",
        "log probabilities are not carried through rein's gateway",
    ),
    (
        "audio",
        "audio output is not carried: rein's gateway answers text",
    ),
    (
        "prediction",
        "predicted outputs are not carried through rein's gateway",
    ),
    (
        "functions",
        "the deprecated `functions` are not read: send them as `tools`",
    ),
    (
        "function_call",
        "the deprecated `function_call` is not read: send `tool_choice`",
    ),
    (
        "web_search_options",
        "web search runs on OpenAI's side, and a binding's links may be any provider",
    ),
];

/// The members [`ChatRequest`] reads, for [`unrecognized`].
const READ: [&str; 25] = [
    "model",
    "messages",
    "tools",
    "max_tokens",
    "max_completion_tokens",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "tool_choice",
    "response_format",
    "parallel_tool_calls",
    "user",
    "frequency_penalty",
    "presence_penalty",
    "logit_bias",
    "reasoning_effort",
    "service_tier",
    "n",
    "logprobs",
    "modalities",
    "store",
    "metadata",
];

/// The first member of `body` that [`ChatRequest`] does not read, with the
/// problem that refuses it.
fn unrecognized(body: &[u8]) -> Option<Problem> {
    let member = super::unread_member(body, &READ)?;
    let message = match REFUSED.iter().find(|(name, _)| *name == member) {
        Some((_, why)) => format!("`{member}` is not supported: {why}"),
        None => format!(
            "Unrecognized request argument supplied: {member} (rein reads the members its \
             OpenAPI document lists for this route)"
        ),
    };
    Some(invalid_at(
        message,
        Some(crate::http::pointer::of_keys(&[&member])),
    ))
}

/// The text of the content: a `role` message's other than a user's,
/// whose parts must all be text (a refusal too, for an assistant's).
///
/// # Errors
///
/// A part that cannot be in such a message, named by its pointer.
fn text_of(content: Content, i: usize, role: &str) -> Result<String, Problem> {
    let parts = match content {
        Content::Text(text) => return Ok(text),
        Content::Parts(parts) => parts,
    };
    let mut text = String::new();
    for (j, part) in parts.into_iter().enumerate() {
        match part {
            ContentPart::Text { text: piece } => text.push_str(&piece),
            ContentPart::Refusal { refusal } if role == "assistant" => {
                text.push_str(&refusal);
            }
            other => return Err(misplaced(i, j, other.kind(), role)),
        }
    }
    Ok(text)
}

/// The user message of the content, the `i`-th of the request.
///
/// # Errors
///
/// A refusal part, or a data URL that is not one.
fn user_message(content: Content, i: usize) -> Result<Message, Problem> {
    let parts = match content {
        Content::Text(text) => return Ok(Message::user(text)),
        Content::Parts(parts) => parts,
    };
    let parts = parts
        .into_iter()
        .enumerate()
        .map(|(j, part)| match part {
            ContentPart::Text { text } => Ok(Part::Text { text }),
            ContentPart::ImageUrl { image_url } => match super::parts::image_url(&image_url.url) {
                Ok(()) => Ok(Part::Image {
                    url: image_url.url,
                    detail: image_url.detail.map(|d| d.as_str().to_owned()),
                }),
                Err(why) => Err(invalid_at(
                    format!("messages[{i}].content[{j}].image_url.url: {why}"),
                    Some(format!("/messages/{i}/content/{j}/image_url/url")),
                )),
            },
            ContentPart::InputAudio { input_audio } => Ok(Part::Audio {
                data: input_audio.data,
                format: input_audio.format.as_str().to_owned(),
            }),
            ContentPart::Refusal { .. } => Err(misplaced(i, j, "refusal", "user")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Message::user_parts(parts))
}

/// The 400 for a `kind` part in a `role` message, where OpenAI takes none.
fn misplaced(i: usize, j: usize, kind: &str, role: &str) -> Problem {
    invalid_at(
        format!("messages[{i}].content[{j}]: `{kind}` parts cannot be in {role} messages"),
        Some(format!("/messages/{i}/content/{j}/type")),
    )
}

/// rein's message of `m`, the `i`-th of the request.
///
/// # Errors
///
/// A part that cannot be where it is.
fn transcribe(i: usize, m: ChatMessage) -> Result<Message, Problem> {
    Ok(match m {
        ChatMessage::System { content } => Message::System {
            content: text_of(content, i, "system")?,
        },
        ChatMessage::Developer { content } => Message::System {
            content: text_of(content, i, "developer")?,
        },
        ChatMessage::User { content } => user_message(content, i)?,
        ChatMessage::Assistant {
            content,
            tool_calls,
            ..
        } => Message::Assistant {
            content: content.map(|c| text_of(c, i, "assistant")).transpose()?,
            tool_calls: tool_calls
                .unwrap_or_default()
                .into_iter()
                .map(|c| ToolCall {
                    id: c.id,
                    name: c.function.name,
                    arguments: c.function.arguments,
                })
                .collect(),
        },
        ChatMessage::Tool {
            tool_call_id,
            content,
        } => Message::Tool {
            call_id: tool_call_id,
            content: text_of(content, i, "tool")?,
        },
    })
}

/// Refuses the values of `n`, `logprobs` and `modalities` that ask for
/// more than one text answer: rein answers exactly one, in text.
fn refuse_unanswerable(chat: &ChatRequest) -> Result<(), Problem> {
    if let Some(n) = chat.n.filter(|n| *n != 1) {
        return Err(invalid_at(
            format!("`n` must be 1: rein's gateway answers one choice, and {n} were asked"),
            Some("/n".into()),
        ));
    }
    if chat.logprobs == Some(true) {
        return Err(invalid_at(
            "`logprobs` must be false: log probabilities are not carried through rein's gateway"
                .into(),
            Some("/logprobs".into()),
        ));
    }
    if let Some(modalities) = &chat.modalities
        && modalities.iter().any(|m| m != "text")
    {
        return Err(invalid_at(
            "`modalities` must be [\"text\"]: rein's gateway answers text".into(),
            Some("/modalities".into()),
        ));
    }
    Ok(())
}

/// What a serde error at `pointer` leaves unsaid: which parts rein
/// carries, and why not a file.
fn note(pointer: &str, inner: &str) -> &'static str {
    let steps: Vec<&str> = pointer.split('/').skip(1).collect();
    match steps.as_slice() {
        ["messages", _, "content", _, "type"] if inner.starts_with("unknown variant") => {
            " (rein's gateway carries text, image_url and input_audio parts, and refusal parts of earlier answers; a `file` part is refused: rein bounds every prompt's tokens before sending it, and a document's cannot be bounded from its bytes)"
        }
        _ => "",
    }
}

/// The pointer to the `type` of the part a message's error is about, when
/// it is an unknown part type: a message is read by its `role` tag, which
/// buffers its members, so serde's path stops at the message.
fn unknown_part(body: &[u8], at: &str, inner: &str) -> Option<String> {
    let i: usize = at.strip_prefix("/messages/")?.parse().ok()?;
    let kind = inner.strip_prefix("unknown variant `")?.split('`').next()?;
    let body: Value = serde_json::from_slice(body).ok()?;
    let j = body
        .pointer(&format!("/messages/{i}/content"))?
        .as_array()?
        .iter()
        .position(|part| part["type"] == kind)?;
    Some(format!("/messages/{i}/content/{j}/type"))
}

/// Reads OpenAI's request shape into rein's, naming the offending field.
fn parse(body: &[u8]) -> Result<Call<OpenAi>, Problem> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let chat: ChatRequest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let pointer = crate::http::pointer::of_path(e.path())
            .map(|at| unknown_part(body, &at, &e.inner().to_string()).unwrap_or(at));
        let message = match &pointer {
            Some(pointer) => format!(
                "the body is not a chat completion request: at {pointer}: {}{}",
                e.inner(),
                note(pointer, &e.inner().to_string())
            ),
            None => format!("the body is not a chat completion request: {}", e.inner()),
        };
        invalid_at(message, pointer)
    })?;
    if let Some(problem) = unrecognized(body) {
        return Err(problem);
    }
    if chat.model.is_empty() {
        return Err(invalid_at(
            "`model` must name a [models.*] binding; it is empty".into(),
            Some("/model".into()),
        ));
    }
    refuse_unanswerable(&chat)?;
    if chat.messages.is_empty() {
        return Err(invalid_at(
            "`messages` must not be empty".into(),
            Some("/messages".into()),
        ));
    }
    let max_tokens = chat.max_completion_tokens.or(chat.max_tokens);
    if chat.max_completion_tokens == Some(0) {
        return Err(invalid_at(
            "`max_completion_tokens` must be at least 1".into(),
            Some("/max_completion_tokens".into()),
        ));
    }
    if chat.max_tokens == Some(0) {
        return Err(invalid_at(
            "`max_tokens` must be at least 1".into(),
            Some("/max_tokens".into()),
        ));
    }
    for (field, value, min, max) in [
        ("temperature", chat.temperature, 0.0, 2.0),
        ("top_p", chat.top_p, 0.0, 1.0),
        ("frequency_penalty", chat.frequency_penalty, -2.0, 2.0),
        ("presence_penalty", chat.presence_penalty, -2.0, 2.0),
    ] {
        if let Some(v) = value
            && !(min..=max).contains(&v)
        {
            return Err(invalid_at(
                format!("`{field}` must be between {min} and {max}"),
                Some(crate::http::pointer::of_keys(&[field])),
            ));
        }
    }
    let mut options = serde_json::Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            options.insert(key.to_owned(), value);
        }
    };
    put("temperature", chat.temperature.map(|v| json!(v)));
    put("top_p", chat.top_p.map(|v| json!(v)));
    put("seed", chat.seed.map(|v| json!(v)));
    put(
        "stop",
        chat.stop
            .as_ref()
            .and_then(|v| serde_json::to_value(v).ok()),
    );
    put(
        "tool_choice",
        chat.tool_choice
            .as_ref()
            .and_then(|v| serde_json::to_value(v).ok()),
    );
    put(
        "response_format",
        chat.response_format.clone().map(Value::Object),
    );
    put(
        "parallel_tool_calls",
        chat.parallel_tool_calls.map(Value::Bool),
    );
    put("user", chat.user.clone().map(Value::String));
    put(
        "frequency_penalty",
        chat.frequency_penalty.map(|v| json!(v)),
    );
    put("presence_penalty", chat.presence_penalty.map(|v| json!(v)));
    put("logit_bias", chat.logit_bias.clone().map(Value::Object));
    put(
        "reasoning_effort",
        chat.reasoning_effort.clone().map(Value::String),
    );
    put("service_tier", chat.service_tier.clone().map(Value::String));
    let ignored = [
        ("store", chat.store.is_some()),
        ("metadata", chat.metadata.is_some()),
    ]
    .into_iter()
    .filter_map(|(member, given)| given.then_some(member))
    .collect();
    // A format the links could only guess at is the client's mistake, as
    // it is OpenAI's: refused before any call.
    if let Err(e) = ResponseFormat::of(&options) {
        return Err(invalid_at(e.to_string(), Some("/response_format".into())));
    }
    let messages = chat
        .messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| transcribe(i, m))
        .collect::<Result<Vec<_>, _>>()?;
    let tools = chat
        .tools
        .unwrap_or_default()
        .iter()
        .map(|t| serde_json::to_value(t).unwrap_or(Value::Null))
        .collect();
    Ok(Call {
        binding: chat.model,
        // The caller's, set once the body is parsed.
        tenant: None,
        request: ModelRequest {
            model: String::new(),
            messages,
            tools,
            max_tokens,
            options,
            continuation: false,
        },
        max_tokens_param: if chat.max_completion_tokens.is_some() {
            "max_completion_tokens"
        } else {
            "max_tokens"
        },
        stream: chat.stream.unwrap_or(false),
        // The caller's, read from the headers.
        trace_parent: None,
        ignored,
        spender: None,
        wire: OpenAi {
            include_usage: chat
                .stream_options
                .and_then(|o| o.include_usage)
                .unwrap_or(false),
        },
    })
}

fn finish_reason(finish: FinishReason) -> &'static str {
    match finish {
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::Length => "length",
        FinishReason::ContentFilter => "content_filter",
        // Chat Completions has no reason of its own for a stop sequence.
        FinishReason::Stop | FinishReason::StopSequence | FinishReason::Other => "stop",
    }
}

fn completion_id() -> String {
    format!("chatcmpl-{}", uuid::Uuid::now_v7().simple())
}

/// Now, in whole seconds since the Unix epoch.
pub(super) fn unix_secs() -> u64 {
    crate::lifecycle::recovery::now_ms().as_millis() / 1000
}

fn completion_body(model: &str, response: &ModelResponse) -> openai::Completion {
    let tool_calls = response
        .tool_calls
        .iter()
        .map(|c| openai::ToolCall::function(c.id.clone(), c.name.clone(), c.arguments.clone()))
        .collect();
    let message = openai::AssistantMessage {
        role: openai::AssistantRole::Assistant,
        content: response.text.clone(),
        tool_calls,
    };
    openai::Completion::of(
        completion_id(),
        unix_secs(),
        model.to_owned(),
        message,
        finish_reason(response.finish),
        openai::Usage::of(response.usage.input, response.usage.output),
    )
}

/// One SSE event of `value`, appended to `out`: written straight into the
/// bytes sent, with no `format!` and no intermediate string.
fn sse_into(out: &mut Vec<u8>, value: &impl Serialize) {
    out.extend_from_slice(b"data: ");
    // Writing JSON into a Vec fails only for a map with non-string keys,
    // which no chunk holds; an empty object keeps the event well formed.
    if serde_json::to_writer(&mut *out, value).is_err() {
        out.extend_from_slice(b"{}");
    }
    out.extend_from_slice(b"\n\n");
}

fn sse(value: &impl Serialize) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    sse_into(&mut out, value);
    out
}

/// The in-band error event that ends a stream without `[DONE]`.
fn stream_error(message: String, code: &str) -> openai::ErrorAnswer {
    openai::ErrorAnswer {
        error: openai::ErrorBody {
            message,
            kind: "stream_error".to_owned(),
            param: None,
            code: Some(code.to_owned()),
        },
    }
}

/// Turns a provider-neutral turn stream into OpenAI's chunks, one SSE
/// event (or a few, at the end) per step.
struct Relay {
    turn: rein_engine::provider::TurnStream,
    id: String,
    created: u64,
    model: String,
    include_usage: bool,
    started: bool,
    ended: bool,
    /// The recoveries of a stream cut after its first token, for the mark
    /// on its last chunk.
    recoveries: Vec<rein_core::event::StreamRecovered>,
}

impl Relay {
    /// A chunk of this answer with `choices`, borrowing the answer's id
    /// and model: nearly every event of a stream is one.
    fn chunk<'a>(&'a self, choices: &'a [openai::ChunkChoice<'a>]) -> openai::Chunk<'a> {
        openai::Chunk::new(&self.id, self.created, &self.model, choices)
    }

    /// The next bytes to send; `None` once the stream ended.
    async fn next(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        if !self.started {
            self.started = true;
            let role = openai::Delta {
                role: Some(openai::AssistantRole::Assistant),
                ..openai::Delta::text("")
            };
            let choice = [openai::ChunkChoice::first(role, None)];
            return Some(Bytes::from(sse(&self.chunk(&choice))));
        }
        let mut next = self.turn.next().await;
        // OpenAI's stream says the prompt's tokens in its usage chunk only;
        // a recovery is marked on the last chunk.
        loop {
            match next {
                Some(Ok(StreamEvent::PromptTokens(_))) => {}
                Some(Ok(StreamEvent::Recovered(recovery))) => self.recoveries.push(recovery),
                _ => break,
            }
            next = self.turn.next().await;
        }
        let text = match next {
            Some(Ok(StreamEvent::PromptTokens(_) | StreamEvent::Recovered(_))) | None => {
                self.ended = true;
                sse(&stream_error(
                    "the stream ended without a complete answer".to_owned(),
                    "unknown",
                ))
            }
            Some(Ok(StreamEvent::Delta(delta))) => {
                let tool_calls = delta
                    .tool_calls
                    .iter()
                    .map(|t| openai::ToolCallDelta {
                        index: Some(t.index as u64),
                        id: t.id.as_deref().map(Cow::Borrowed),
                        kind: t.id.as_ref().map(|_| openai::FunctionKind::Function),
                        function: openai::FunctionDelta {
                            name: t.name.as_deref().map(Cow::Borrowed),
                            arguments: Some(t.arguments.clone()),
                        },
                    })
                    .collect();
                let delta = openai::Delta {
                    role: None,
                    content: delta.text.as_deref().map(Cow::Borrowed),
                    tool_calls,
                };
                let choice = [openai::ChunkChoice::first(delta, None)];
                sse(&self.chunk(&choice))
            }
            Some(Ok(StreamEvent::Done(response))) => {
                self.ended = true;
                let choice = [openai::ChunkChoice::first(
                    openai::Delta::default(),
                    Some(finish_reason(response.finish)),
                )];
                let mut last = self.chunk(&choice);
                last.rein = super::recovered_mark(&self.recoveries);
                let mut out = sse(&last);
                if self.include_usage {
                    let mut usage = self.chunk(&[]);
                    usage.usage = Some(Some(openai::Usage::of(
                        response.usage.input,
                        response.usage.output,
                    )));
                    sse_into(&mut out, &usage);
                }
                out.extend_from_slice(b"data: [DONE]\n\n");
                out
            }
            // In band, and no [DONE]: the caller must not take the text
            // so far for a whole answer.
            Some(Err(failure)) => {
                self.ended = true;
                sse(&stream_error(
                    failure.human_message().to_owned(),
                    failure.category().as_str(),
                ))
            }
        };
        Some(Bytes::from(text))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand-kept list the unknown members are refused by is the
    /// request type's members, as its schema lists them: a member added
    /// to the type and not to `READ` would be refused, one in `READ` and
    /// not the type accepted and dropped.
    #[test]
    fn read_is_every_member_the_request_type_reads() {
        let mut read = READ.to_vec();
        read.sort_unstable();
        assert_eq!(super::super::schema_members::<ChatRequest>(), read);
    }

    fn problem_of(body: &str) -> Value {
        let Err(problem) = parse(body.as_bytes()) else {
            panic!("{body} parses");
        };
        serde_json::to_value(problem).unwrap()
    }

    #[test]
    fn image_and_audio_parts_of_a_user_message_are_carried_in_order() {
        let body = json!({"model": "m", "messages": [
            {"role": "system", "content": [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]},
            {"role": "user", "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}]},
            {"role": "assistant", "content": [{"type": "refusal", "refusal": "I cannot."}]},
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]});
        let Ok(call) = parse(body.to_string().as_bytes()) else {
            panic!("{body} does not parse");
        };
        assert_eq!(
            call.request.messages,
            vec![
                Message::System {
                    content: "be brief".into()
                },
                Message::user_parts(vec![
                    Part::Text {
                        text: "what is this?".into()
                    },
                    Part::Image {
                        url: "data:image/png;base64,iVBORw0KGgo=".into(),
                        detail: Some("low".into())
                    },
                    Part::Audio {
                        data: "UklGRg==".into(),
                        format: "wav".into()
                    },
                ]),
                Message::Assistant {
                    content: Some("I cannot.".into()),
                    tool_calls: Vec::new()
                },
                Message::user("ab"),
            ]
        );
    }

    #[test]
    fn a_part_rein_cannot_carry_or_that_is_misplaced_is_named() {
        let user = |part: Value| {
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "see"}, part]}]})
            .to_string()
        };
        let p = problem_of(&user(
            json!({"type": "file", "file": {"file_data": "data:application/pdf;base64,AA=="}}),
        ));
        assert_eq!(p["field"], "/messages/0/content/1/type", "{p}");
        let detail = p["detail"].as_str().unwrap();
        assert!(
            detail.contains("`file`") && detail.contains("cannot be bounded"),
            "{p}"
        );
        let p = problem_of(&user(
            json!({"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}),
        ));
        assert_eq!(p["field"], "/messages/0/content/1/image_url/url", "{p}");
        let p = problem_of(&user(
            json!({"type": "input_audio", "input_audio": {"data": "AA==", "format": "flac"}}),
        ));
        // A message is read by its role tag: serde's path stops there.
        assert_eq!(p["field"], "/messages/0", "{p}");
        assert!(
            p["detail"]
                .as_str()
                .unwrap()
                .contains("`flac`, expected `wav` or `mp3`"),
            "{p}"
        );
        let p = problem_of(&user(json!({"type": "refusal", "refusal": "no"})));
        assert_eq!(p["field"], "/messages/0/content/1/type", "{p}");
        let p = problem_of(
            &json!({"model": "m", "messages": [{"role": "system", "content": [
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]})
            .to_string(),
        );
        assert_eq!(p["field"], "/messages/0/content/0/type", "{p}");
        assert_eq!(
            p["detail"],
            "messages[0].content[0]: `image_url` parts cannot be in system messages"
        );
    }

    #[test]
    fn a_bad_member_is_named_by_a_json_pointer_in_field_and_param() {
        let p = problem_of(
            r#"{"model": "m", "messages": [{"role": "user", "content": "a"}], "max_tokens": "x"}"#,
        );
        assert_eq!(p["status"], 400);
        assert_eq!(p["field"], "/max_tokens", "{p}");
        assert_eq!(p["error"]["param"], "/max_tokens", "{p}");
        assert_eq!(p["error"]["type"], "invalid_request_error");
        let p = problem_of(r#"{"model": "m", "messages": [], "temperature": 3}"#);
        assert_eq!(p["field"], "/messages", "{p}");
        let p = problem_of(
            r#"{"model": "m", "messages": [{"role": "user", "content": "a"}], "top_p": 3}"#,
        );
        assert_eq!(p["field"], "/top_p", "{p}");
        let p = problem_of(
            r#"{"model": "m", "messages": [{"role": "user", "content": "a"}], "max_completion_tokens": 0}"#,
        );
        assert_eq!(p["field"], "/max_completion_tokens", "{p}");
    }

    #[test]
    fn a_function_s_strict_and_the_response_format_are_kept() {
        let Ok(call) = parse(
            json!({"model": "m", "messages": [{"role": "user", "content": "a"}],
                   "tools": [{"type": "function", "function": {"name": "get_order",
                              "parameters": {"type": "object"}, "strict": true}}],
                   "response_format": {"type": "json_schema", "json_schema": {
                       "name": "order", "schema": {"type": "object"}, "strict": true}}})
            .to_string()
            .as_bytes(),
        ) else {
            panic!("parses");
        };
        assert_eq!(call.request.tools[0]["function"]["strict"], true);
        assert_eq!(
            call.request.options["response_format"]["json_schema"]["strict"],
            true
        );
        let p = problem_of(
            r#"{"model": "m", "messages": [{"role": "user", "content": "a"}],
                "response_format": {"type": "json_schema"}}"#,
        );
        assert_eq!(p["field"], "/response_format", "{p}");
        assert_eq!(p["status"], 400);
    }

    #[test]
    fn a_body_that_names_no_member_has_no_field_but_an_openai_error() {
        let p = problem_of("<chat/>");
        assert!(p.get("field").is_none(), "{p}");
        assert_eq!(p["error"]["param"], Value::Null, "{p}");
        assert!(
            p["error"]["message"]
                .as_str()
                .unwrap()
                .contains("not a chat completion request")
        );
        // No `?` or `.` pointers: a step serde could not name ends it.
        let p = problem_of(r#"{"model": "m", "messages": [{"role": "user", "content": 7}]}"#);
        let field = p["field"].as_str().unwrap_or("/");
        assert!(field.starts_with("/messages"), "{p}");
        assert!(!field.contains('?') && !field.contains('.'), "{p}");
    }
}

//! Anthropic's wire format: `POST /v1/messages`, the Messages API.
//!
//! # Why
//!
//! A team using the Anthropic SDK points it at `rein serve` (only its base
//! URL changed) and gets the gateway's breakers, fallbacks and ceilings,
//! whatever provider the binding's links really call.
//!
//! # What maps, what is refused
//!
//! | Messages API | rein's [`ModelRequest`] |
//! | --- | --- |
//! | `system` (a string or text blocks) | one system message per block |
//! | a user `text` block | a user message |
//! | a user `tool_result` block | a tool message (`is_error` prefixes its content with `[error] `) |
//! | assistant `text` and `tool_use` blocks | one assistant message with its tool calls |
//! | `tools` (`name`, `description`, `input_schema`) | function definitions |
//! | `tool_choice` `auto`/`any`/`tool`/`none` | `auto`/`required`/the named function/`none`; `disable_parallel_tool_use` as `parallel_tool_calls: false` |
//! | `stop_sequences`, `temperature`, `top_p` | `stop`, `temperature`, `top_p` |
//! | `metadata.user_id` | `user` |
//!
//! `image` blocks are parts of the user message (see [`ImageSource`]).
//! Blocks the engine has no content for (`document`, `thinking`, …) are
//! refused with a 400 naming the block, never dropped: a model that
//! silently never saw the document answers about something else. Every
//! member is passed, mapped, left out and named, or refused (the table at
//! [`MessagesRequest`]).
//!
//! `max_tokens` is required, as in Anthropic's API. The answer's
//! `stop_reason` is `end_turn`, `tool_use`, `max_tokens`, `refusal` or
//! `stop_sequence` (with the sequence in `stop_sequence`) when the provider
//! that answered said which sequence stopped it: an Anthropic provider
//! does, as does an OpenAI-compatible one that names the match (vLLM's
//! `stop_reason`). OpenAI's own API says `finish_reason: "stop"` for a
//! natural end and a stop sequence alike, so through it a stop sequence is
//! answered as `end_turn`, never guessed.
//!
//! # Errors
//!
//! Every error of this route, whoever answered it (the gateway, the key
//! check, the router, a guard before it), is Anthropic's
//! `{"type": "error", "error": {"type", "message"}}`
//! ([`crate::http::problem::plain_errors_as_problems`] reshapes the problem), with
//! the statuses the SDKs map to their exceptions: 400
//! `invalid_request_error`, 401 `authentication_error`, 404
//! `not_found_error`, 429 `rate_limit_error` (with `retry-after`), 529
//! `overloaded_error` (every link overloaded or its circuit open), 503
//! `overloaded_error` (draining), 504 `timeout_error`, 502 and 500
//! `api_error`. A stream cut after its first event ends with `event:
//! error` (`overloaded_error` or `api_error`) and no `message_stop`, so the
//! SDK raises instead of returning the text so far.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use rein_core::Category;
use rein_core::wire::anthropic as wire;
use rein_core::wire::anthropic::request::{
    ContentBlock, ImageSource, InputMessage, MessageContent, MessagesRequest, MessagesToolChoice,
    OutputFormat, Role, TextContent, Thinking,
};
use rein_core::wire::openai::request::{ChatTool, FunctionDef, ToolChoice, ToolChoiceMode};
use rein_engine::provider::{
    FinishReason, Message, ModelRequest, ModelResponse, Part, StreamEvent, ToolCall, TurnStream,
};
use rein_engine::run::ModelError;
use serde::Serialize;
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use super::{Call, EventStream, OverCap, Wire};
use crate::http::auth::Caller;
use crate::http::problem::Problem;
use crate::http::state::AppState;

/// The route, for the error reshaping of [`crate::http::problem`].
pub const PATH: &str = "/v1/messages";

/// The status Anthropic answers when it is overloaded (its SDKs raise
/// `OverloadedError`).
pub const OVERLOADED: u16 = 529;

/// An Anthropic-compatible message (the Messages API).
#[utoipa::path(
    post, path = "/v1/messages", tag = "gateway",
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, pattern = "^[!-~]+$",
            description = "Non-streaming requests only: makes the request safe to retry"),
           ("Rein-Deadline-Ms" = Option<u64>, Header, nullable = false, minimum = 1,
            description = "How long the call may take, fallbacks and retries included (default: the binding's `deadline`, 600000 unless set)")),
    request_body(content = MessagesRequest, description = "Anthropic's Messages API request; `model` names a [models.*] binding"),
    responses(
        (status = 200, description = "the message (JSON), or its events (`text/event-stream` when `stream: true`)", body = Object,
         headers(("Rein-Model" = String, description = "provider/model that answered"),
                 ("Rein-Fallback" = String, description = "true when a fallback link answered"),
                 ("Rein-Max-Tokens" = String, description = "`<sent>; reason=cap|budget`: the output ceiling sent was below the client's max_tokens"))),
        (status = 400, description = "invalid request (`invalid_request_error`), a max_tokens above the primary model's output cap, a content block that cannot be mapped, or input that fits no configured context window", body = AnthropicError),
        (status = 401, description = "missing or invalid API key (`x-api-key` or `Authorization: Bearer`)", body = AnthropicError),
        (status = 404, description = "unknown model binding", body = AnthropicError),
        (status = 408, description = "the body stopped arriving (server.limits.body_timeout)", body = AnthropicError),
        (status = 409, description = "the same Idempotency-Key is still in progress", body = AnthropicError),
        (status = 413, description = "body over the limit", body = AnthropicError),
        (status = 422, description = "the same Idempotency-Key with another request", body = AnthropicError),
        (status = 429, description = "every link is rate limited: the provider said so, its pause after a 429 holds, or rein's limits on it admit no call within the deadline (`rate_limit_error`, with `retry-after`, the wait in whole seconds, when rein knows it)", body = AnthropicError),
        (status = 501, description = "Idempotency-Key sent while idempotency is disabled", body = AnthropicError),
        (status = 502, description = "every link failed (`api_error`)", body = AnthropicError),
        (status = 503, description = "the server is draining (`overloaded_error`, with `retry-after`)", body = AnthropicError),
        (status = 504, description = "the deadline ran out (`timeout_error`)", body = AnthropicError),
        (status = 529, description = "every link is overloaded or its circuit is open (`overloaded_error`)", body = AnthropicError),
    ),
    security(("bearer" = []), ("api_key" = []))
)]
pub async fn messages(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    super::handle::<Anthropic>(state, caller, headers, body).await
}

/// Anthropic's wire format needs nothing beyond the [`Call`].
pub(super) struct Anthropic;

impl Wire for Anthropic {
    const PATH: &'static str = PATH;

    fn parse(body: &[u8]) -> Result<Call<Anthropic>, Problem> {
        parse(body)
    }

    fn over_cap(over: &OverCap) -> Problem {
        let OverCap {
            param,
            asked,
            cap,
            model,
        } = over;
        invalid_at(
            format!(
                "{param}: {asked} > {cap}, which is the maximum allowed number of output tokens for {model}"
            ),
            Some(format!("/{param}")),
        )
    }

    fn failed(e: &ModelError) -> Problem {
        let (status, kind) = match e.category {
            Category::ContextOverflow | Category::InvalidArguments | Category::ContentBlocked => {
                (StatusCode::BAD_REQUEST, "invalid-request")
            }
            Category::RateLimited => (StatusCode::TOO_MANY_REQUESTS, "rate-limited"),
            Category::CircuitOpen | Category::Overloaded => (
                StatusCode::from_u16(OVERLOADED).unwrap_or(StatusCode::SERVICE_UNAVAILABLE),
                "overloaded",
            ),
            Category::BudgetExhausted | Category::Timeout => {
                (StatusCode::GATEWAY_TIMEOUT, "timeout")
            }
            // The provider refused rein's own credentials: a gateway
            // misconfiguration, not the client's.
            _ => (StatusCode::BAD_GATEWAY, "upstream-error"),
        };
        let mut problem = Problem::new(status, kind, "Message failed", e.message.clone());
        problem.retry_after = super::retry_after(e);
        problem
    }

    fn bad_deadline(message: String) -> Problem {
        invalid_at(message, None)
    }

    fn body(_call: &Call<Anthropic>, model: &str, response: &ModelResponse) -> Value {
        // Serializing the answer's own types cannot fail.
        serde_json::to_value(message_body(model, response)).unwrap_or(Value::Null)
    }

    const ANNOUNCES_PROMPT: bool = true;

    fn events(
        _call: Call<Anthropic>,
        model: String,
        turn: TurnStream,
        prompt: Option<u64>,
    ) -> EventStream {
        let relay = Relay {
            turn,
            id: message_id(),
            model,
            prompt: prompt.unwrap_or(0),
            started: false,
            ended: false,
            open: None,
            blocks: 0,
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

/// Anthropic's error body: what its SDKs read the exception from.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AnthropicError {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: ErrorTag,
    /// What went wrong.
    pub error: ErrorDetail,
}

/// The tag of [`AnthropicError`].
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ErrorTag {
    /// An error.
    Error,
}

/// The error of an [`AnthropicError`].
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// `invalid_request_error`, `authentication_error`, `rate_limit_error`,
    /// `overloaded_error`, `api_error`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// For a human.
    pub message: String,
}

impl AnthropicError {
    /// The error answered with `status`, saying `message`.
    pub fn new(status: u16, message: String) -> AnthropicError {
        AnthropicError {
            kind: ErrorTag::Error,
            error: ErrorDetail {
                kind: error_type(status).to_owned(),
                message,
            },
        }
    }
}

/// The `error.type` Anthropic sends with `status`.
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | OVERLOADED => "overloaded_error",
        504 => "timeout_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// A 400 about the member `pointer` names (a JSON pointer), if any.
fn invalid_at(message: String, pointer: Option<String>) -> Problem {
    let problem = Problem::new(
        StatusCode::BAD_REQUEST,
        "invalid-request",
        "Invalid message request",
        message,
    );
    match pointer {
        Some(pointer) => problem.with(json!({"field": pointer})),
        None => problem,
    }
}

/// Why extended thinking is left out rather than passed: rein's gateway
/// returns no thinking blocks, and Anthropic refuses a tool loop whose
/// assistant turns come back without them, signed. Refusing it instead
/// would break every client that turns it on by default; the answer names
/// it in `Rein-Ignored`, so none takes a plain answer for a thought one.
pub const THINKING_LEFT_OUT: &str = "thinking";

/// The members [`MessagesRequest`] reads.
const READ: [&str; 15] = [
    "model",
    "max_tokens",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "stream",
    "metadata",
    "thinking",
    "output_config",
    "service_tier",
];

/// Members of Anthropic's request rein refuses by name, each with why.
pub const REFUSED: [(&str, &str); 4] = [
    (
        "container",
        "code execution containers run on Anthropic's side, and a binding's links may be any provider",
    ),
    (
        "mcp_servers",
        "Anthropic's MCP connector runs on its side; give the model the tools, or serve them with `rein mcp serve`",
    ),
    (
        "context_management",
        "rein never edits a transcript: an input over the window is refused, or answered by a binding's context_fallbacks",
    ),
    ("output_format", "send it as `output_config.format`"),
];

/// The first member of `body` that [`MessagesRequest`] does not read,
/// refused.
fn unrecognized(body: &[u8]) -> Option<Problem> {
    let member = super::unread_member(body, &READ)?;
    let message = match REFUSED.iter().find(|(name, _)| *name == member) {
        Some((_, why)) => format!("{member}: not supported: {why}"),
        None => format!(
            "{member}: Extra inputs are not permitted (rein reads the members its OpenAPI document lists for this route)"
        ),
    };
    Some(invalid_at(
        message,
        Some(crate::http::pointer::of_keys(&[&member])),
    ))
}

/// `source` as one URL (a `data:` URL for the image itself).
///
/// # Errors
///
/// Why it is no image a provider can be given.
fn image_url(source: ImageSource) -> Result<String, String> {
    let url = match source {
        ImageSource::Base64 { media_type, data } => super::parts::data_url(&media_type, &data),
        ImageSource::Url { url } => url,
    };
    super::parts::image_url(&url).map(|()| url)
}

/// Reads Anthropic's request shape into rein's, naming the offending field.
fn parse(body: &[u8]) -> Result<Call<Anthropic>, Problem> {
    read(body, Ceiling::Required)
}

/// Whether a request must carry `max_tokens`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ceiling {
    /// `POST /v1/messages`: required, as in Anthropic's API.
    Required,
    /// `POST /v1/messages/count_tokens`: nothing is generated, so none.
    None,
}

/// A Messages API request read into rein's terms: [`parse`]'s, and
/// `count_tokens`' (which takes the same body without `max_tokens`).
pub(super) fn read(body: &[u8], ceiling: Ceiling) -> Result<Call<Anthropic>, Problem> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let request: MessagesRequest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let pointer = crate::http::pointer::of_path(e.path());
        let inner = e.inner().to_string();
        // An unknown block type is a block the engine cannot carry.
        let note = if inner.starts_with("unknown variant") && pointer.is_some() {
            " (rein's gateway carries text, image, tool_use and tool_result blocks; a document is refused because its prompt tokens cannot be bounded before sending, and other blocks cannot be mapped)"
        } else {
            ""
        };
        let message = match &pointer {
            Some(pointer) => format!(
                "the body is not a Messages API request: at {pointer}: {inner}{note}"
            ),
            None => format!("the body is not a Messages API request: {inner}"),
        };
        invalid_at(message, pointer)
    })?;
    if let Some(problem) = unrecognized(body) {
        return Err(problem);
    }
    if request.model.is_empty() {
        return Err(invalid_at(
            "model: must name a [models.*] binding; it is empty".into(),
            Some("/model".into()),
        ));
    }
    let mut ignored = Vec::new();
    if matches!(
        request.thinking,
        Some(Thinking::Enabled { .. } | Thinking::Adaptive {})
    ) {
        ignored.push(THINKING_LEFT_OUT);
    }
    if request.service_tier.is_some() {
        ignored.push("service_tier");
    }
    let max_tokens = match (request.max_tokens, ceiling) {
        (Some(max_tokens), _) => max_tokens,
        (None, Ceiling::None) => 1,
        (None, Ceiling::Required) => {
            return Err(invalid_at(
                "max_tokens: Field required".into(),
                Some("/max_tokens".into()),
            ));
        }
    };
    if max_tokens == 0 {
        return Err(invalid_at(
            "max_tokens: must be at least 1".into(),
            Some("/max_tokens".into()),
        ));
    }
    if request.messages.is_empty() {
        return Err(invalid_at(
            "messages: at least one message is required".into(),
            Some("/messages".into()),
        ));
    }
    for (field, value) in [
        ("temperature", request.temperature),
        ("top_p", request.top_p),
    ] {
        if let Some(v) = value
            && !(0.0..=1.0).contains(&v)
        {
            return Err(invalid_at(
                format!("{field}: must be between 0 and 1"),
                Some(crate::http::pointer::of_keys(&[field])),
            ));
        }
    }
    let tools: Vec<Value> = request
        .tools
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            json!(ChatTool::function(FunctionDef {
                name: t.name,
                description: t.description,
                parameters: Some(Value::Object(t.input_schema)),
                strict: None,
            }))
        })
        .collect();
    let mut options = Map::new();
    if let Some(v) = request.temperature {
        options.insert("temperature".into(), json!(v));
    }
    if let Some(v) = request.top_p {
        options.insert("top_p".into(), json!(v));
    }
    if let Some(stop) = request.stop_sequences.filter(|s| !s.is_empty()) {
        options.insert("stop".into(), json!(stop));
    }
    if let Some(user) = request.metadata.and_then(|m| m.user_id) {
        options.insert("user".into(), json!(user));
    }
    if let Some(k) = request.top_k {
        options.insert("top_k".into(), json!(k));
    }
    if let Some(config) = request.output_config {
        if let Some(effort) = config.effort {
            options.insert("output_config".into(), json!({"effort": effort.as_str()}));
        }
        if let Some(OutputFormat::JsonSchema { schema }) = config.format {
            // rein's structured output: the answer is checked against the
            // schema whichever link gives it (see `ResponseFormat`).
            options.insert(
                "response_format".into(),
                json!({"type": "json_schema",
                       "json_schema": {"name": "output", "schema": schema, "strict": true}}),
            );
        }
    }
    if let Some(choice) = request.tool_choice {
        let (choice, single) = match choice {
            MessagesToolChoice::Auto {
                disable_parallel_tool_use,
            } => (
                ToolChoice::Mode(ToolChoiceMode::Auto),
                disable_parallel_tool_use,
            ),
            MessagesToolChoice::Any {
                disable_parallel_tool_use,
            } => (
                ToolChoice::Mode(ToolChoiceMode::Required),
                disable_parallel_tool_use,
            ),
            MessagesToolChoice::Tool {
                name,
                disable_parallel_tool_use,
            } => (ToolChoice::named(name), disable_parallel_tool_use),
            MessagesToolChoice::None {} => (ToolChoice::Mode(ToolChoiceMode::None), None),
        };
        let choice = json!(choice);
        options.insert("tool_choice".into(), choice);
        if single == Some(true) && !tools.is_empty() {
            options.insert("parallel_tool_calls".into(), json!(false));
        }
    }
    let mut messages: Vec<Message> = match request.system {
        None => Vec::new(),
        Some(TextContent::Text(text)) => vec![Message::System { content: text }],
        Some(TextContent::Blocks(blocks)) => blocks
            .into_iter()
            .map(|b| Message::System { content: b.text })
            .collect(),
    };
    for (i, message) in request.messages.into_iter().enumerate() {
        transcribe(i, message, &mut messages)?;
    }
    Ok(Call {
        binding: request.model,
        // The caller's, set once the body is parsed.
        tenant: None,
        request: ModelRequest {
            model: String::new(),
            messages,
            tools,
            max_tokens: Some(max_tokens),
            options,
            continuation: false,
        },
        max_tokens_param: "max_tokens",
        stream: request.stream.unwrap_or(false),
        // The caller's, read from the headers.
        trace_parent: None,
        ignored,
        spender: None,
        wire: Anthropic,
    })
}

/// Appends the rein messages of `message`, the `i`-th of the request.
fn transcribe(i: usize, message: InputMessage, out: &mut Vec<Message>) -> Result<(), Problem> {
    let misplaced = |j: usize, block: &str, role: &str| {
        invalid_at(
            format!("messages.{i}.content.{j}: `{block}` blocks cannot be in {role} messages"),
            Some(format!("/messages/{i}/content/{j}")),
        )
    };
    match (message.role, message.content) {
        (Role::User, MessageContent::Text(text)) => out.push(Message::user(text)),
        (Role::User, MessageContent::Blocks(blocks)) => {
            // Text and images between tool results are one message, in
            // order, when there is an image; each text block is a message
            // of its own otherwise, as before images were read.
            let mut pending: Vec<Part> = Vec::new();
            let flush = |pending: &mut Vec<Part>, out: &mut Vec<Message>| {
                if pending.iter().any(|p| matches!(p, Part::Image { .. })) {
                    out.push(Message::user_parts(std::mem::take(pending)));
                } else {
                    out.extend(pending.drain(..).filter_map(|p| match p {
                        Part::Text { text } => Some(Message::user(text)),
                        Part::Image { .. } | Part::Audio { .. } => None,
                    }));
                }
            };
            for (j, block) in blocks.into_iter().enumerate() {
                match block {
                    ContentBlock::Text { text } => pending.push(Part::Text { text }),
                    ContentBlock::Image { source } => {
                        let url = image_url(source).map_err(|why| {
                            invalid_at(
                                format!("messages.{i}.content.{j}.source: {why}"),
                                Some(format!("/messages/{i}/content/{j}/source")),
                            )
                        })?;
                        pending.push(Part::Image { url, detail: None });
                    }
                    ContentBlock::ToolResult {
                        tool_use_id,
                        content,
                        is_error,
                    } => {
                        let text = content.map(TextContent::text).unwrap_or_default();
                        // The transcript has no error flag: the model reads
                        // it in the content.
                        let content = if is_error == Some(true) {
                            format!("[error] {text}")
                        } else {
                            text
                        };
                        flush(&mut pending, out);
                        out.push(Message::Tool {
                            call_id: tool_use_id,
                            content,
                        });
                    }
                    ContentBlock::ToolUse { .. } => return Err(misplaced(j, "tool_use", "user")),
                }
            }
            flush(&mut pending, out);
        }
        (Role::Assistant, MessageContent::Text(text)) => out.push(Message::Assistant {
            content: Some(text),
            tool_calls: Vec::new(),
        }),
        (Role::Assistant, MessageContent::Blocks(blocks)) => {
            let mut text: Option<String> = None;
            let mut tool_calls = Vec::new();
            for (j, block) in blocks.into_iter().enumerate() {
                match block {
                    ContentBlock::Text { text: piece } => {
                        text.get_or_insert_with(String::new).push_str(&piece);
                    }
                    ContentBlock::ToolUse { id, name, input } => tool_calls.push(ToolCall {
                        id,
                        name,
                        arguments: Value::Object(input).to_string(),
                    }),
                    ContentBlock::ToolResult { .. } => {
                        return Err(misplaced(j, "tool_result", "assistant"));
                    }
                    ContentBlock::Image { .. } => return Err(misplaced(j, "image", "assistant")),
                }
            }
            out.push(Message::Assistant {
                content: text,
                tool_calls,
            });
        }
    }
    Ok(())
}

fn stop_reason(response: &ModelResponse) -> &'static str {
    match response.finish {
        FinishReason::StopSequence => "stop_sequence",
        FinishReason::Length => "max_tokens",
        FinishReason::ContentFilter => "refusal",
        FinishReason::ToolCalls => "tool_use",
        _ if !response.tool_calls.is_empty() => "tool_use",
        _ => "end_turn",
    }
}

/// The answer's `stop_sequence`: the sequence that stopped it, if one did.
fn stop_sequence(response: &ModelResponse) -> Option<String> {
    match (response.finish, &response.stop_sequence) {
        (FinishReason::StopSequence, Some(sequence)) => Some(sequence.clone()),
        _ => None,
    }
}

fn message_id() -> String {
    format!("msg_{}", uuid::Uuid::now_v7().simple())
}

/// A tool call's arguments as the object `input` must be: arguments that
/// are not a JSON object (cut at the output limit, or malformed by the
/// model) become `{}`, and the stop reason says `max_tokens` for a cut.
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}

fn usage(response: &ModelResponse) -> wire::Usage {
    wire::Usage::of(response.usage.input, response.usage.output)
}

fn message_body(model: &str, response: &ModelResponse) -> wire::Message {
    let mut content: Vec<wire::Block> = response
        .text
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|text| wire::Block::Text {
            text: text.to_owned(),
        })
        .into_iter()
        .collect();
    content.extend(response.tool_calls.iter().map(|c| wire::Block::ToolUse {
        id: Some(c.id.clone()),
        name: Some(c.name.clone()),
        input: tool_input(&c.arguments),
    }));
    wire::Message {
        content,
        stop_reason: Some(stop_reason(response).to_owned()),
        stop_sequence: stop_sequence(response),
        usage: usage(response),
        ..wire::Message::opened(message_id(), model)
    }
}

/// The content block a stream has open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    /// Text, at this block index.
    Text(u64),
    /// The tool call of this (provider) index, at this block index.
    Tool { call: usize, block: u64 },
}

/// Turns a provider-neutral turn stream into the Messages API's events:
/// text and tool calls as consecutive content blocks.
struct Relay {
    turn: TurnStream,
    id: String,
    model: String,
    /// rein's bound of the prompt's tokens, for `message_start` when the
    /// upstream did not count them before its first token.
    prompt: u64,
    started: bool,
    ended: bool,
    open: Option<Open>,
    /// Blocks started so far (the next block's index).
    blocks: u64,
    /// The recoveries of a stream cut after its first token, for the mark
    /// on `message_delta`.
    recoveries: Vec<rein_core::event::StreamRecovered>,
}

impl Relay {
    /// Closes the open block, if any.
    fn close(&mut self, out: &mut String) {
        let index = match self.open.take() {
            Some(Open::Text(index) | Open::Tool { block: index, .. }) => index,
            None => return,
        };
        out.push_str(&wire::StreamEvent::ContentBlockStop { index }.to_sse());
    }

    /// Starts the next block with `block`.
    fn start(&mut self, block: wire::Block, out: &mut String) -> u64 {
        let index = self.blocks;
        self.blocks += 1;
        out.push_str(
            &wire::StreamEvent::ContentBlockStart {
                index,
                content_block: block,
            }
            .to_sse(),
        );
        index
    }

    /// The events of one delta (possibly none).
    fn delta(&mut self, delta: &rein_engine::provider::Delta) -> String {
        let mut out = String::new();
        if let Some(text) = delta.text.as_deref().filter(|t| !t.is_empty()) {
            let index = match self.open {
                Some(Open::Text(index)) => index,
                _ => {
                    self.close(&mut out);
                    let index = self.start(
                        wire::Block::Text {
                            text: String::new(),
                        },
                        &mut out,
                    );
                    self.open = Some(Open::Text(index));
                    index
                }
            };
            out.push_str(
                &wire::StreamEvent::ContentBlockDelta {
                    index,
                    delta: wire::BlockDelta::TextDelta {
                        text: text.to_owned(),
                    },
                }
                .to_sse(),
            );
        }
        for call in &delta.tool_calls {
            let index = match self.open {
                Some(Open::Tool { call: c, block }) if c == call.index => block,
                _ => {
                    self.close(&mut out);
                    let id = call
                        .id
                        .clone()
                        .unwrap_or_else(|| format!("toolu_{}", uuid::Uuid::now_v7().simple()));
                    let block = self.start(
                        wire::Block::ToolUse {
                            id: Some(id),
                            name: Some(call.name.clone().unwrap_or_default()),
                            input: Value::Object(Map::new()),
                        },
                        &mut out,
                    );
                    self.open = Some(Open::Tool {
                        call: call.index,
                        block,
                    });
                    block
                }
            };
            if !call.arguments.is_empty() {
                out.push_str(
                    &wire::StreamEvent::ContentBlockDelta {
                        index,
                        delta: wire::BlockDelta::InputJsonDelta {
                            partial_json: call.arguments.clone(),
                        },
                    }
                    .to_sse(),
                );
            }
        }
        out
    }

    /// The in-band error that ends a cut stream: no `message_stop` after
    /// it, so the client cannot take the text so far for a whole answer.
    fn error(&mut self, kind: &str, message: &str) -> String {
        self.ended = true;
        wire::StreamEvent::Error {
            error: wire::ErrorBody {
                kind: kind.to_owned(),
                message: message.to_owned(),
                code: None,
            },
        }
        .to_sse()
    }

    /// The next bytes to send; `None` once the stream ended.
    async fn next(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        if !self.started {
            self.started = true;
            // `message_start` says the prompt's tokens, as Anthropic's
            // does: the upstream's own count when it gave one before its
            // first token (an Anthropic upstream), else rein's bound of
            // them; `message_delta` says what the provider counted.
            let (input, first) = match self.turn.next().await {
                Some(Ok(StreamEvent::PromptTokens(tokens))) => (tokens, None),
                other => (self.prompt, Some(other)),
            };
            let start = wire::StreamEvent::MessageStart {
                message: wire::Message {
                    usage: wire::Usage::of(input, 0),
                    ..wire::Message::opened(self.id.clone(), self.model.clone())
                },
            };
            let mut out = start.to_sse();
            out.push_str(&wire::StreamEvent::Ping.to_sse());
            if let Some(first) = first {
                out.push_str(&self.relay(first));
            }
            return Some(Bytes::from(out));
        }
        loop {
            let item = self.turn.next().await;
            let text = self.relay(item);
            if !text.is_empty() {
                return Some(Bytes::from(text));
            }
        }
    }

    /// The events of the turn's next item (`None`: the turn ended).
    fn relay(&mut self, item: Option<Result<StreamEvent, rein_core::Failure>>) -> String {
        match item {
            // Said in `message_start`, or at most once and first.
            Some(Ok(StreamEvent::PromptTokens(_))) => String::new(),
            // Marked on `message_delta`.
            Some(Ok(StreamEvent::Recovered(recovery))) => {
                self.recoveries.push(recovery);
                String::new()
            }
            Some(Ok(StreamEvent::Delta(delta))) => self.delta(&delta),
            Some(Ok(StreamEvent::Done(response))) => {
                self.ended = true;
                let mut out = String::new();
                self.close(&mut out);
                let last = wire::StreamEvent::MessageDelta {
                    delta: wire::MessageDelta {
                        stop_reason: Some(stop_reason(&response).to_owned()),
                        stop_sequence: stop_sequence(&response),
                    },
                    usage: usage(&response),
                    rein: super::recovered_mark(&self.recoveries),
                };
                out.push_str(&last.to_sse());
                out.push_str(&wire::StreamEvent::MessageStop.to_sse());
                out
            }
            Some(Err(failure)) => {
                let kind = match failure.category() {
                    Category::Overloaded | Category::RateLimited | Category::CircuitOpen => {
                        "overloaded_error"
                    }
                    _ => "api_error",
                };
                self.error(kind, failure.human_message())
            }
            None => self.error("api_error", "the stream ended without a complete answer"),
        }
    }
}

/// Every error answer of [`PATH`] in Anthropic's shape: what
/// [`crate::http::problem::plain_errors_as_problems`] makes of a problem there.
/// The problem's `detail` is the message, the answer's `status` picks the
/// type;
/// headers (`retry-after`, `www-authenticate`, `request-id`) stay.
pub fn reshape(status: u16, problem: &Value) -> AnthropicError {
    let message = problem["detail"]
        .as_str()
        .or_else(|| problem["title"].as_str())
        .unwrap_or("error")
        .to_owned();
    AnthropicError::new(status, message)
}

/// The OpenAPI document's errors of [`PATH`] and of `count_tokens` are
/// [`AnthropicError`]s in `application/json`, including the refusals every
/// operation may answer (added as problems by the document's other
/// modifiers, which run first).
pub struct ErrorShape;

impl utoipa::Modify for ErrorShape {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        for path in crate::http::problem::ANTHROPIC_ROUTES {
            if let Some(post) = openapi
                .paths
                .paths
                .get_mut(path)
                .and_then(|item| item.post.as_mut())
            {
                document_error_shape(post, Documented::Instead);
            }
        }
    }
}

/// Whether Anthropic's error shape replaces the problem+json of an
/// operation's refusals, or is documented beside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Documented {
    /// The route answers only in Anthropic's shape (`POST /v1/messages`).
    Instead,
    /// The route answers in the caller's shape (`GET /v1/models`).
    Beside,
}

/// Documents Anthropic's error shape on every response of `operation`
/// that the document gives as a problem.
pub(crate) fn document_error_shape(
    operation: &mut utoipa::openapi::path::Operation,
    documented: Documented,
) {
    use utoipa::openapi::{ContentBuilder, Ref, RefOr};
    for response in operation.responses.responses.values_mut() {
        let RefOr::T(response) = response else {
            continue;
        };
        let is_problem = response.content.values().any(
            |c| matches!(&c.schema, Some(RefOr::Ref(r)) if r.ref_location.ends_with("/Problem")),
        );
        if is_problem {
            if documented == Documented::Instead {
                response.content.clear();
            }
            response.content.insert(
                "application/json".to_owned(),
                ContentBuilder::new()
                    .schema(Some(Ref::from_schema_name("AnthropicError")))
                    .build(),
            );
        }
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
        assert_eq!(super::super::schema_members::<MessagesRequest>(), read);
    }

    fn parsed(body: Value) -> Call<Anthropic> {
        match parse(body.to_string().as_bytes()) {
            Ok(call) => call,
            Err(p) => panic!("{body} does not parse: {}", p.detail),
        }
    }

    fn refused(body: Value) -> Problem {
        let Err(problem) = parse(body.to_string().as_bytes()) else {
            panic!("{body} parses");
        };
        problem
    }

    #[test]
    fn blocks_map_to_the_transcript_in_order() {
        let call = parsed(json!({
            "model": "m", "max_tokens": 100,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [
                {"role": "user", "content": "Where is A-1?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "t1", "name": "get_order", "input": {"id": "A-1"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "gone"}], "is_error": true},
                    {"type": "text", "text": "And now?"}]}],
            "tools": [{"name": "get_order", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"], "temperature": 0.5, "metadata": {"user_id": "u-1"}
        }));
        let r = &call.request;
        assert_eq!(
            r.messages,
            vec![
                Message::System {
                    content: "be brief".into()
                },
                Message::user("Where is A-1?"),
                Message::Assistant {
                    content: Some("Looking.".into()),
                    tool_calls: vec![ToolCall {
                        id: "t1".into(),
                        name: "get_order".into(),
                        arguments: r#"{"id":"A-1"}"#.into()
                    }]
                },
                Message::Tool {
                    call_id: "t1".into(),
                    content: "[error] gone".into()
                },
                Message::user("And now?"),
            ]
        );
        assert_eq!(r.max_tokens, Some(100));
        assert_eq!(
            r.tools,
            vec![
                json!({"type": "function", "function": {"name": "get_order", "description": "d", "parameters": {"type": "object"}}})
            ]
        );
        assert_eq!(r.options["tool_choice"], "required");
        assert_eq!(r.options["parallel_tool_calls"], false);
        assert_eq!(r.options["stop"], json!(["END"]));
        assert_eq!(r.options["temperature"], 0.5);
        assert_eq!(r.options["user"], "u-1");
    }

    #[test]
    fn output_config_maps_to_effort_and_rein_s_structured_output() {
        let schema = json!({"type": "object", "properties": {"id": {"type": "string"}}});
        let call = parsed(json!({
            "model": "m", "max_tokens": 100, "top_k": 5,
            "messages": [{"role": "user", "content": "Hi."}],
            "output_config": {"effort": "low", "format": {"type": "json_schema", "schema": schema}},
        }));
        let options = &call.request.options;
        assert_eq!(options["top_k"], 5);
        assert_eq!(options["output_config"], json!({"effort": "low"}));
        assert_eq!(
            options["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "output", "schema": schema, "strict": true}})
        );
        let p = refused(json!({"model": "m", "max_tokens": 100,
            "messages": [{"role": "user", "content": "Hi."}],
            "output_config": {"effort": "low", "verbosity": "high"}}));
        assert!(p.detail.contains("verbosity"), "{}", p.detail);
    }

    #[test]
    fn images_and_the_text_around_them_are_one_user_message_in_order() {
        let call = parsed(json!({
            "model": "m", "max_tokens": 100,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "Compare"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/b.jpg"}},
                    {"type": "text", "text": "please."}]}]
        }));
        assert_eq!(
            call.request.messages,
            vec![Message::user_parts(vec![
                Part::Text {
                    text: "Compare".into()
                },
                Part::Image {
                    url: "data:image/png;base64,iVBORw0KGgo=".into(),
                    detail: None
                },
                Part::Image {
                    url: "https://example.com/b.jpg".into(),
                    detail: None
                },
                Part::Text {
                    text: "please.".into()
                },
            ])]
        );
        assert!(
            matches!(&call.request.messages[0], Message::User { content, .. } if content == "Compareplease.")
        );
    }

    #[test]
    fn what_cannot_be_mapped_is_refused_naming_the_block() {
        let p = refused(json!({"model": "m", "messages": [{"role": "user", "content": "a"}]}));
        assert_eq!(p.status, 400);
        assert_eq!(p.detail, "max_tokens: Field required");
        let p = refused(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA=="}}]}]}),
        );
        assert_eq!(p.status, 400);
        assert!(p.detail.contains("/messages/0/content/1"), "{}", p.detail);
        assert!(p.detail.contains("`document`"), "{}", p.detail);
        assert!(p.detail.contains("cannot be bounded"), "{}", p.detail);
        let p = refused(
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "text/plain", "data": "AA=="}}]}]}),
        );
        assert_eq!(p.extra.unwrap()["field"], "/messages/0/content/0/source");
        assert!(p.detail.contains("`text/plain`"), "{}", p.detail);
        let p = refused(json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "assistant", "content": [{"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}}]}]}));
        assert_eq!(
            p.detail,
            "messages.0.content.0: `image` blocks cannot be in assistant messages"
        );
        let p = refused(json!({"model": "m", "max_tokens": 5, "temperature": 1.5,
                               "messages": [{"role": "user", "content": "a"}]}));
        assert_eq!(p.extra.unwrap()["field"], "/temperature");
        let p = refused(json!({"model": "m", "max_tokens": 5, "messages": [
            {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]}]}));
        assert!(p.detail.contains("messages.0.content.0"), "{}", p.detail);
    }

    #[test]
    fn each_status_has_the_error_type_the_sdks_map() {
        for (status, kind) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (404, "not_found_error"),
            (409, "invalid_request_error"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (502, "api_error"),
            (503, "overloaded_error"),
            (504, "timeout_error"),
            (529, "overloaded_error"),
        ] {
            assert_eq!(error_type(status), kind, "{status}");
        }
        let e = reshape(
            401,
            &json!({"type": "https://rein.dev/problems/x", "status": 401, "detail": "no key"}),
        );
        assert_eq!(
            serde_json::to_value(e).unwrap(),
            json!({"type": "error", "error": {"type": "authentication_error", "message": "no key"}})
        );
    }
}

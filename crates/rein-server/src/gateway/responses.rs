//! OpenAI's Responses API: `POST /v1/responses`, bridged onto the same
//! model bindings as chat completions.
//!
//! # Why
//!
//! OpenAI's newer client surfaces call `/v1/responses`, not chat
//! completions: `client.responses.create(...)`, and the Agents SDK
//! (`openai-agents`), whose default model speaks nothing else. Pointed at
//! `rein serve` (only the base URL changed), they get the gateway's
//! breakers, fallbacks and ceilings like any chat client, whatever provider
//! the binding's links really call. A response is one model turn, so it
//! maps onto rein's provider-neutral request like a chat completion does.
//!
//! # Stateless
//!
//! OpenAI can keep a response and its conversation and let the next
//! request name them (`previous_response_id`, `conversation`). rein stores
//! nothing: such a request is refused with a 400 saying the client must
//! send the whole conversation in `input` (the Agents SDK does, unless told
//! to chain responses), never answered as if the earlier turns had not
//! happened. For the same reason `store` is ignored and every answer says
//! `"store": false`.
//!
//! # What maps, what is refused
//!
//! | member | how |
//! | --- | --- |
//! | `model` | passed: names a `[models.*]` binding |
//! | `input`, a string | mapped: one user message |
//! | `input` message items: `role` `user`, `assistant`, `system` or `developer`; `content` a string or `input_text`/`output_text`/`refusal` parts | mapped: one message each (`developer` as system), parts concatenated |
//! | `input_image` parts of a user message (`image_url` a URL or a data URL) | mapped: passed to a provider that reads images, refused naming the part by one that does not; a `file_id` is refused (rein keeps no files) |
//! | `input` `function_call` items (`call_id`, `name`, `arguments`) | mapped: tool calls of the assistant turn before them (consecutive calls make one turn) |
//! | `input` `function_call_output` items (`call_id`, `output`) | mapped: a tool message |
//! | other items and parts (`reasoning`, `item_reference`, hosted tools' calls, `input_file`, …) | refused, naming the item: the engine has no content to carry them (a file's prompt tokens cannot be bounded before sending) |
//! | `instructions` | mapped: the first system message |
//! | `tools` of type `function` (`name`, `description`, `parameters`, `strict`) | mapped: function definitions, `strict` kept |
//! | hosted `tools` (`web_search`, `file_search`, `mcp`, …) | refused: they run on OpenAI's side |
//! | `tool_choice` `none`, `auto`, `required`, `{"type": "function", "name"}` | mapped to chat's; other choices are refused |
//! | `parallel_tool_calls` | passed (with tools) |
//! | `max_output_tokens` | mapped: the output ceiling, checked against the primary's cap like chat's `max_tokens` |
//! | `temperature` (0–2), `top_p` (0–1), `user` | passed |
//! | `text.format` `text`, `json_object`, `json_schema` | mapped: no `response_format`, `{"type": "json_object"}`, `{"type": "json_schema", "json_schema": {name, schema, description, strict}}` (chat's `response_format`, passed on as there) |
//! | `text.verbosity`, `reasoning` | ignored by design: hints for some models, set by a client that does not know which model the binding calls (the Agents SDK sends both by default); passed on, they would fail every call to a model without them. Echoed in the answer |
//! | `store` | ignored by design: rein stores nothing |
//! | `metadata` | ignored by design: echoed in the answer, not sent to the provider |
//! | `include` | ignored by design: each value extends output rein never produces (hosted tools' results, reasoning items, logprobs) |
//! | `truncation` `disabled` | accepted: rein never drops input (an input over the context window is refused, or goes to a `context_fallbacks` link) |
//! | `truncation` `auto` | refused: rein does not drop input items |
//! | `stream` | answer as server-sent events |
//! | `previous_response_id`, `conversation` | refused: rein keeps no response state |
//! | `background: true` | refused: rein answers within the request |
//! | `prompt` | refused: a prompt template stored with OpenAI |
//! | other members (`service_tier`, `top_logprobs`, `prompt_cache_key`, …) | allowed and ignored, as on `/v1/chat/completions` |
//!
//! # The answer
//!
//! A `response` object in the shape OpenAI's SDKs parse. `output` holds the
//! text as one `message` item with one `output_text` part (no annotations),
//! then one `function_call` item per tool call (`call_id` the provider's
//! id). `status` is `completed`, or `incomplete` with
//! `incomplete_details.reason` `max_output_tokens` (cut at the ceiling: the
//! text or arguments may be partial) or `content_filter`. `usage` has the
//! provider's input and output tokens; cached and reasoning tokens say 0,
//! which rein does not know. The request's settings are echoed, as OpenAI
//! does.
//!
//! # Streams
//!
//! `response.created`, `response.in_progress`; per text item
//! `response.output_item.added`, `response.content_part.added`,
//! `response.output_text.delta`…, `response.output_text.done`,
//! `response.content_part.done`, `response.output_item.done`; per tool call
//! `response.output_item.added`, `response.function_call_arguments.delta`…,
//! `response.function_call_arguments.done`, `response.output_item.done`;
//! then `response.completed` (or `response.incomplete`) with the whole
//! response. Each event has its `event:` line and a `sequence_number` from
//! 0. A stream cut after its first event ends with an `error` event (its
//! `code` the failure's category) and no `response.completed`: the Agents
//! SDK raises, and the SDK's `responses.stream()` has no final response.
//!
//! # Errors
//!
//! As on `/v1/chat/completions` ([`super::openai`]): problem+json with an
//! `error` member in OpenAI's shape, so the SDKs raise with its message.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use futures_util::StreamExt;
use rein_engine::provider::{
    Delta, FinishReason, Message, ModelRequest, ModelResponse, StreamEvent, ToolCall,
    ToolCallDelta, TurnStream,
};
use rein_engine::run::ModelError;
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use super::openai::{Errors, unix_secs};
use super::{Call, EventStream, OverCap, Wire};
use crate::http::auth::Caller;
use crate::http::problem::Problem;
use crate::http::state::AppState;
use rein_core::wire::openai::request::{
    ChatTool, FunctionDef, FunctionKind, ImageDetail, ToolChoice, ToolChoiceMode,
};
use rein_core::wire::string_or_seq;

/// The route.
pub const PATH: &str = "/v1/responses";

/// The errors of this route: OpenAI's shape, as on chat completions.
const ERRORS: Errors = Errors::titled("Response failed");

/// An OpenAI-compatible response (the Responses API).
#[utoipa::path(
    post, path = "/v1/responses", tag = "gateway",
    params(("Idempotency-Key" = Option<String>, Header, nullable = false, min_length = 1, pattern = "^[!-~]+$",
            description = "Non-streaming requests only: makes the request safe to retry"),
           ("Rein-Deadline-Ms" = Option<u64>, Header, nullable = false, minimum = 1,
            description = "How long the call may take, fallbacks and retries included (default: the binding's `deadline`, 600000 unless set)")),
    request_body(content = ResponsesRequest, description = "OpenAI's Responses API request; `model` names a [models.*] binding. rein keeps no response state: the whole conversation comes in `input`"),
    responses(
        (status = 200, description = "the response (JSON), or its events (`text/event-stream` when `stream: true`)", body = Object,
         headers(("Rein-Model" = String, description = "provider/model that answered"),
                 ("Rein-Fallback" = String, description = "true when a fallback link answered"),
                 ("Rein-Max-Tokens" = String, description = "`<sent>; reason=cap|budget`: the output ceiling sent was below the client's max_output_tokens"))),
        (status = 400, description = "invalid request; a member or item rein cannot map (`previous_response_id`, `conversation`, hosted tools, images, …); a max_output_tokens above the primary model's output cap; or input that fits no configured context window", body = Problem),
        (status = 401, description = "missing or invalid API key", body = Problem),
        (status = 404, description = "unknown model binding", body = Problem),
        (status = 408, description = "the body stopped arriving (server.limits.body_timeout)", body = Problem),
        (status = 409, description = "the same Idempotency-Key is still in progress", body = Problem),
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
pub async fn responses(
    State(state): State<Arc<AppState>>,
    caller: Caller,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    super::handle::<Responses>(state, caller, headers, body).await
}

/// What the Responses API needs beyond the [`Call`]: the request's
/// settings, which every response object echoes.
struct Responses {
    echo: Map<String, Value>,
}

impl Wire for Responses {
    const PATH: &'static str = PATH;

    fn parse(body: &[u8]) -> Result<Call<Responses>, Problem> {
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

    fn body(call: &Call<Responses>, model: &str, response: &ModelResponse) -> Value {
        let outcome = Outcome::of(response.finish);
        let mut items: Vec<Item> = response
            .text
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(|text| Item::message(text.to_owned()))
            .into_iter()
            .collect();
        items.extend(
            response
                .tool_calls
                .iter()
                .map(|c| Item::call(c.id.clone(), c.name.clone(), c.arguments.clone())),
        );
        if items.is_empty() {
            // An empty answer is still a message, so `output_text` is "".
            items.push(Item::message(String::new()));
        }
        // Whole: every item is closed.
        for item in &mut items {
            item.status = outcome.item_status();
        }
        let shell = Shell {
            id: response_id(),
            created_at: unix_secs(),
            model,
            echo: &call.wire.echo,
        };
        shell.render(outcome.status(), &items, Some(response))
    }

    fn events(
        call: Call<Responses>,
        model: String,
        turn: TurnStream,
        _prompt: Option<u64>,
    ) -> EventStream {
        let relay = Relay {
            turn,
            id: response_id(),
            created_at: unix_secs(),
            model,
            echo: call.wire.echo,
            sequence: 0,
            started: false,
            ended: false,
            items: Vec::new(),
            text: None,
            calls: Vec::new(),
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

/// OpenAI's Responses API request, as far as the gateway reads it. The
/// parser and the OpenAPI document are this one type; members it does not
/// name (`service_tier`, `top_logprobs`, …) are allowed and ignored, as on
/// chat completions. See the module's table for what each member does.
#[derive(Debug, Deserialize, ToSchema)]
pub struct ResponsesRequest {
    /// A `[models.*]` binding.
    #[schema(min_length = 1)]
    pub model: String,
    /// The whole conversation so far: a user message, or items.
    pub input: Input,
    /// Instructions: the first system message.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Function tools the model may call (the caller runs them).
    #[serde(default)]
    pub tools: Option<Vec<FunctionTool>>,
    /// Which tool the model must (or must not) call.
    #[serde(default)]
    pub tool_choice: Option<ResponsesToolChoice>,
    /// The output ceiling.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<u64>,
    /// Sampling temperature.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    /// Whether to answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Whether the model may call several tools in one turn.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// The caller's labels: echoed, not sent to the provider.
    #[serde(default)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Ignored: rein stores nothing.
    #[serde(default)]
    pub store: Option<bool>,
    /// The answer's format; `verbosity` is ignored.
    #[serde(default)]
    pub text: Option<TextConfig>,
    /// Ignored: a hint for reasoning models (echoed).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub reasoning: Option<Map<String, Value>>,
    /// `disabled` only: rein never drops input items.
    #[serde(default)]
    pub truncation: Option<Truncation>,
    /// An opaque id of the end user, passed on.
    #[serde(default)]
    pub user: Option<String>,
    /// Ignored: each value extends output rein never produces.
    #[serde(default)]
    pub include: Option<Vec<String>>,
    /// Refused: rein keeps no response state.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Refused: rein keeps no conversations.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub conversation: Option<Value>,
    /// `true` is refused: rein answers within the request.
    #[serde(default)]
    pub background: Option<bool>,
    /// Refused: a prompt template stored with OpenAI.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub prompt: Option<Value>,
}

/// `input`: a user message, or items.
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Input {
    /// One user message.
    Text(String),
    /// Messages, function calls and their outputs, in order.
    Items(Vec<InputItem>),
}

/// One item of `input`. A struct rather than an enum tagged by `type`,
/// since a message may come without one (`{"role": "user", "content":
/// …}`); the members an item's `type` needs are checked after parsing,
/// each named by its path.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct InputItem {
    /// `message` when absent.
    #[serde(rename = "type", default)]
    pub kind: Option<ItemKind>,
    /// A message's speaker.
    #[serde(default)]
    pub role: Option<Role>,
    /// A message's text.
    #[serde(default)]
    pub content: Option<Content>,
    /// A function call's id (a `function_call` and its output).
    #[serde(default)]
    pub call_id: Option<String>,
    /// The function a `function_call` called.
    #[serde(default)]
    pub name: Option<String>,
    /// A `function_call`'s arguments, as JSON text.
    #[serde(default)]
    pub arguments: Option<String>,
    /// A `function_call_output`'s result.
    #[serde(default)]
    pub output: Option<Content>,
}

/// The kinds of input item the engine can carry.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemKind {
    /// A message.
    Message,
    /// A tool call of an earlier answer.
    FunctionCall,
    /// A tool's result.
    FunctionCallOutput,
}

/// A message's speaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user.
    User,
    /// An earlier answer.
    Assistant,
    /// Instructions.
    System,
    /// Instructions (OpenAI's newer name for `system`).
    Developer,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
            Role::Developer => "developer",
        }
    }
}

/// Text: a string, or parts (a user's images among them).
#[derive(Debug, Serialize, ToSchema)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Text parts.
    Parts(Vec<Part>),
}

/// A part of an item's content. `input_file` and `input_audio` are
/// refused: a document's prompt tokens cannot be bounded before sending
/// (see `rein_engine::provider::Part`), and the Responses API takes no
/// audio input.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part {
    /// The user's (or instructions') text.
    InputText {
        /// The text.
        text: String,
    },
    /// An image (user messages only), by URL or as a data URL; a stored
    /// file's `file_id` is refused (rein has no files).
    InputImage {
        /// `https://…`, or the image itself as `data:image/png;base64,…`.
        #[serde(default)]
        image_url: Option<String>,
        /// A file stored with OpenAI (refused).
        #[serde(default)]
        file_id: Option<String>,
        /// `low`, `high` or `auto`.
        #[serde(default)]
        detail: Option<ImageDetail>,
    },
    /// An earlier answer's text.
    OutputText {
        /// The text.
        text: String,
    },
    /// An earlier answer's refusal, read as its text.
    Refusal {
        /// The text.
        refusal: String,
    },
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match string_or_seq(deserializer)? {
            Ok(text) => Input::Text(text),
            Err(items) => Input::Items(items),
        })
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match string_or_seq(deserializer)? {
            Ok(text) => Content::Text(text),
            Err(parts) => Content::Parts(parts),
        })
    }
}

impl Content {
    /// The text of the content of the `i`-th item, whose `role` takes
    /// text only.
    ///
    /// # Errors
    ///
    /// An image where it cannot be, named by its pointer.
    fn text(self, i: usize, role: &str) -> Result<String, Problem> {
        let parts = match self {
            Content::Text(text) => return Ok(text),
            Content::Parts(parts) => parts,
        };
        let mut text = String::new();
        for (j, part) in parts.into_iter().enumerate() {
            match part {
                Part::InputText { text: piece } | Part::OutputText { text: piece } => {
                    text.push_str(&piece);
                }
                Part::Refusal { refusal } => text.push_str(&refusal),
                Part::InputImage { .. } => {
                    return Err(invalid_at(
                        format!(
                            "input.{i}.content.{j}: input_image parts are read in user messages only, not {role} ones"
                        ),
                        Some(format!("/input/{i}/content/{j}/type")),
                    ));
                }
            }
        }
        Ok(text)
    }

    /// The user message of the content of the `i`-th item.
    ///
    /// # Errors
    ///
    /// An image without a URL, or with one no provider can be given.
    fn user(self, i: usize) -> Result<Message, Problem> {
        let parts = match self {
            Content::Text(text) => return Ok(Message::user(text)),
            Content::Parts(parts) => parts,
        };
        let parts = parts
            .into_iter()
            .enumerate()
            .map(|(j, part)| match part {
                Part::InputText { text } | Part::OutputText { text } => {
                    Ok(rein_engine::provider::Part::Text { text })
                }
                Part::Refusal { refusal } => Ok(rein_engine::provider::Part::Text { text: refusal }),
                Part::InputImage {
                    image_url,
                    file_id,
                    detail,
                } => {
                    let at = |why: String, member: &str| {
                        invalid_at(
                            format!("input.{i}.content.{j}.{member}: {why}"),
                            Some(format!("/input/{i}/content/{j}/{member}")),
                        )
                    };
                    if file_id.is_some() {
                        return Err(at(
                            "a stored file cannot be read: rein keeps no files; send the image as `image_url` (a URL or a data URL)".into(),
                            "file_id",
                        ));
                    }
                    let url = image_url.ok_or_else(|| {
                        at("an input_image needs `image_url`".into(), "image_url")
                    })?;
                    super::parts::image_url(&url).map_err(|why| at(why, "image_url"))?;
                    Ok(rein_engine::provider::Part::Image {
                        url,
                        detail: detail.map(|d| d.as_str().to_owned()),
                    })
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Message::user_parts(parts))
    }
}

/// A function tool. Hosted tools (`web_search`, `file_search`, `mcp`, …)
/// are refused: they run on OpenAI's side.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FunctionTool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    /// Its name.
    #[schema(min_length = 1)]
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments' JSON Schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub parameters: Option<Map<String, Value>>,
    /// Whether the arguments must follow the schema exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `tool_choice`: a mode, or one function.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(untagged)]
pub enum ResponsesToolChoice {
    /// `none`, `auto` or `required`.
    Mode(ToolChoiceMode),
    /// This function.
    Function(FunctionChoice),
}

/// A named function choice.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct FunctionChoice {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    /// The function.
    pub name: String,
}

/// `text`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
pub struct TextConfig {
    /// The answer's format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<TextFormat>,
    /// Ignored: a hint some models take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verbosity: Option<Verbosity>,
}

/// `text.format`.
#[derive(Debug, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum TextFormat {
    /// Plain text.
    Text {},
    /// Any JSON object.
    JsonObject {},
    /// JSON following a schema.
    JsonSchema {
        /// The format's name.
        name: String,
        /// The JSON Schema.
        #[schema(value_type = Object)]
        schema: Map<String, Value>,
        /// What the format is for.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Whether the answer must follow the schema exactly.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

/// `text.verbosity`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verbosity {
    /// Terse.
    Low,
    /// The default.
    Medium,
    /// Wordy.
    High,
}

/// `truncation`.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Truncation {
    /// Drop input items to fit (refused).
    Auto,
    /// Fail when the input does not fit.
    Disabled,
}

/// What a serde error at `pointer` leaves unsaid: which items, parts,
/// tools and choices rein can carry.
fn note(pointer: &str, inner: &str) -> &'static str {
    if !inner.starts_with("unknown variant") && !inner.starts_with("data did not match") {
        return "";
    }
    let steps: Vec<&str> = pointer.split('/').skip(1).collect();
    match steps.as_slice() {
        ["input", _, "type"] => {
            " (rein's gateway carries message, function_call and function_call_output items; reasoning items, item references and hosted tools' calls cannot be mapped: rein keeps no response state and runs no hosted tools)"
        }
        ["input", _, "content" | "output", _, "type"] => {
            " (rein's gateway carries input_text, input_image, output_text and refusal parts; a file is refused because its prompt tokens cannot be bounded before sending, and the Responses API takes no audio)"
        }
        ["tools", _, "type"] => {
            " (rein's gateway carries function tools; hosted tools run on OpenAI's side and cannot be mapped)"
        }
        ["tool_choice"] => {
            " (rein's gateway takes `none`, `auto`, `required` or {\"type\": \"function\", \"name\": …})"
        }
        _ => "",
    }
}

/// A 400 about the member `pointer` names, if any.
fn invalid_at(message: String, pointer: Option<String>) -> Problem {
    ERRORS.invalid_at(message, pointer)
}

/// The 400 of a member rein cannot honour, saying why.
fn refused(member: &str, why: &str) -> Problem {
    let mut problem = invalid_at(
        format!("`{member}` is not supported by rein's gateway: {why}"),
        Some(crate::http::pointer::of_keys(&[member])),
    );
    if let Some(extra) = problem.extra.as_mut() {
        extra["error"]["code"] = json!("unsupported_parameter");
    }
    problem
}

/// Why a request naming earlier state is refused.
const STATELESS: &str = "rein keeps no response state, so it cannot resume an earlier response or conversation; send the whole conversation in `input` (the Agents SDK does unless told to chain responses)";

/// Refuses the members rein cannot honour.
fn refuse_unsupported(request: &ResponsesRequest) -> Result<(), Problem> {
    if request.previous_response_id.is_some() {
        return Err(refused("previous_response_id", STATELESS));
    }
    if request.conversation.as_ref().is_some_and(|c| !c.is_null()) {
        return Err(refused("conversation", STATELESS));
    }
    if request.background == Some(true) {
        return Err(refused(
            "background",
            "rein answers within the request and keeps no response to poll; send `background: false` or leave it out",
        ));
    }
    if request.prompt.as_ref().is_some_and(|p| !p.is_null()) {
        return Err(refused(
            "prompt",
            "a prompt template is stored with OpenAI, and rein cannot read it; send its text in `instructions` and `input`",
        ));
    }
    if matches!(request.truncation, Some(Truncation::Auto)) {
        return Err(refused(
            "truncation",
            "rein does not drop input items (an input over the context window is refused, or answered by a binding's context_fallbacks); send `disabled` or leave it out",
        ));
    }
    Ok(())
}

/// Reads the Responses API's request shape into rein's, naming the
/// offending member.
fn parse(body: &[u8]) -> Result<Call<Responses>, Problem> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let mut request: ResponsesRequest = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let pointer = crate::http::pointer::of_path(e.path());
        let inner = e.inner().to_string();
        let message = match &pointer {
            Some(pointer) => format!(
                "the body is not a Responses API request: at {pointer}: {inner}{}",
                note(pointer, &inner)
            ),
            None => format!("the body is not a Responses API request: {inner}"),
        };
        invalid_at(message, pointer)
    })?;
    refuse_unsupported(&request)?;
    if request.model.is_empty() {
        return Err(invalid_at(
            "`model` must name a [models.*] binding; it is empty".into(),
            Some("/model".into()),
        ));
    }
    if request.max_output_tokens == Some(0) {
        return Err(invalid_at(
            "`max_output_tokens` must be at least 1".into(),
            Some("/max_output_tokens".into()),
        ));
    }
    for (field, value, max) in [
        ("temperature", request.temperature, 2.0),
        ("top_p", request.top_p, 1.0),
    ] {
        if let Some(v) = value
            && !(0.0..=max).contains(&v)
        {
            return Err(invalid_at(
                format!("`{field}` must be between 0 and {max}"),
                Some(crate::http::pointer::of_keys(&[field])),
            ));
        }
    }
    let tools = request.tools.take().unwrap_or_default();
    if let Some(i) = tools.iter().position(|t| t.name.is_empty()) {
        return Err(invalid_at(
            format!("tools.{i}.name: a function needs a name; it is empty"),
            Some(format!("/tools/{i}/name")),
        ));
    }
    let echo = echo(&request, &tools);

    let mut messages = Vec::new();
    if let Some(instructions) = request.instructions {
        messages.push(Message::System {
            content: instructions,
        });
    }
    match request.input {
        Input::Text(text) => messages.push(Message::user(text)),
        Input::Items(items) if items.is_empty() => {
            return Err(invalid_at(
                "`input` must not be empty".into(),
                Some("/input".into()),
            ));
        }
        Input::Items(items) => {
            for (i, item) in items.into_iter().enumerate() {
                transcribe(i, item, &mut messages)?;
            }
        }
    }

    let mut options = Map::new();
    let mut put = |key: &str, value: Option<Value>| {
        if let Some(value) = value {
            options.insert(key.to_owned(), value);
        }
    };
    put("temperature", request.temperature.map(|v| json!(v)));
    put("top_p", request.top_p.map(|v| json!(v)));
    put("user", request.user.map(Value::String));
    put(
        "tool_choice",
        request.tool_choice.map(|choice| match choice {
            ResponsesToolChoice::Mode(mode) => json!(mode),
            ResponsesToolChoice::Function(f) => json!(ToolChoice::named(f.name)),
        }),
    );
    put(
        "parallel_tool_calls",
        request
            .parallel_tool_calls
            .filter(|_| !tools.is_empty())
            .map(Value::Bool),
    );
    put(
        "response_format",
        request
            .text
            .as_ref()
            .and_then(|t| t.format.as_ref())
            .and_then(response_format),
    );

    let tools = tools
        .into_iter()
        .map(|t| {
            json!(ChatTool::function(FunctionDef {
                name: t.name,
                description: t.description,
                parameters: t.parameters.map(Value::Object),
                strict: t.strict,
            }))
        })
        .collect();
    Ok(Call {
        binding: request.model,
        // The caller's, set once the body is parsed.
        tenant: None,
        request: ModelRequest {
            model: String::new(),
            messages,
            tools,
            max_tokens: request.max_output_tokens,
            options,
            continuation: false,
        },
        max_tokens_param: "max_output_tokens",
        stream: request.stream.unwrap_or(false),
        // The caller's, read from the headers.
        trace_parent: None,
        ignored: Vec::new(),
        spender: None,
        wire: Responses { echo },
    })
}

/// Chat's `response_format` for `text.format`; `None` for plain text.
fn response_format(format: &TextFormat) -> Option<Value> {
    match format {
        TextFormat::Text {} => None,
        TextFormat::JsonObject {} => Some(json!({"type": "json_object"})),
        TextFormat::JsonSchema {
            name,
            schema,
            description,
            strict,
        } => {
            let mut json_schema = json!({"name": name, "schema": schema});
            if let Some(description) = description {
                json_schema["description"] = json!(description);
            }
            if let Some(strict) = strict {
                json_schema["strict"] = json!(strict);
            }
            Some(json!({"type": "json_schema", "json_schema": json_schema}))
        }
    }
}

/// The request's settings as every response object echoes them.
fn echo(request: &ResponsesRequest, tools: &[FunctionTool]) -> Map<String, Value> {
    let text = match &request.text {
        Some(TextConfig { format, verbosity }) => {
            let mut text = json!({"format": format.as_ref().map_or_else(
                || json!({"type": "text"}),
                |f| serde_json::to_value(f).unwrap_or(Value::Null),
            )});
            if let Some(verbosity) = verbosity {
                text["verbosity"] = json!(verbosity);
            }
            text
        }
        None => json!({"format": {"type": "text"}}),
    };
    let tool_choice = request
        .tool_choice
        .as_ref()
        .and_then(|c| serde_json::to_value(c).ok())
        .unwrap_or_else(|| json!("auto"));
    let echo = json!({
        "instructions": request.instructions,
        "max_output_tokens": request.max_output_tokens,
        "metadata": request.metadata.clone().unwrap_or_default(),
        "parallel_tool_calls": request.parallel_tool_calls.unwrap_or(true),
        "previous_response_id": null,
        "reasoning": request.reasoning,
        "store": false,
        "temperature": request.temperature,
        "text": text,
        "tool_choice": tool_choice,
        "tools": tools.iter().map(|t| serde_json::to_value(t).unwrap_or(Value::Null)).collect::<Vec<_>>(),
        "top_p": request.top_p,
        "truncation": "disabled",
        "user": request.user,
    });
    match echo {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Appends the rein messages of `item`, the `i`-th of `input`.
fn transcribe(i: usize, item: InputItem, out: &mut Vec<Message>) -> Result<(), Problem> {
    let needs = |kind: &str, member: &str| {
        invalid_at(
            format!("input.{i}: a {kind} item needs `{member}`"),
            Some(format!("/input/{i}/{member}")),
        )
    };
    match item.kind.unwrap_or(ItemKind::Message) {
        ItemKind::Message => {
            let role = item.role.ok_or_else(|| needs("message", "role"))?;
            let content = item.content.ok_or_else(|| needs("message", "content"))?;
            if role == Role::User {
                out.push(content.user(i)?);
                return Ok(());
            }
            let text = content.text(i, role.as_str())?;
            match role {
                Role::System | Role::Developer => out.push(Message::System { content: text }),
                Role::User => out.push(Message::user(text)),
                // The text of a turn whose calls came first joins them.
                Role::Assistant => match out.last_mut() {
                    Some(Message::Assistant {
                        content: content @ None,
                        tool_calls,
                    }) if !tool_calls.is_empty() => *content = Some(text),
                    _ => out.push(Message::Assistant {
                        content: Some(text),
                        tool_calls: Vec::new(),
                    }),
                },
            }
        }
        ItemKind::FunctionCall => {
            let call = ToolCall {
                id: item
                    .call_id
                    .ok_or_else(|| needs("function_call", "call_id"))?,
                name: item.name.ok_or_else(|| needs("function_call", "name"))?,
                arguments: item
                    .arguments
                    .ok_or_else(|| needs("function_call", "arguments"))?,
            };
            // Consecutive calls, and the text before them, are one turn.
            match out.last_mut() {
                Some(Message::Assistant { tool_calls, .. }) => tool_calls.push(call),
                _ => out.push(Message::Assistant {
                    content: None,
                    tool_calls: vec![call],
                }),
            }
        }
        ItemKind::FunctionCallOutput => out.push(Message::Tool {
            call_id: item
                .call_id
                .ok_or_else(|| needs("function_call_output", "call_id"))?,
            content: item
                .output
                .ok_or_else(|| needs("function_call_output", "output"))?
                .text(i, "function_call_output")?,
        }),
    }
    Ok(())
}

/// How a turn ended, in the Responses API's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Completed,
    /// Cut short, for this `incomplete_details.reason`.
    Incomplete(&'static str),
}

impl Outcome {
    fn of(finish: FinishReason) -> Outcome {
        match finish {
            FinishReason::Length => Outcome::Incomplete("max_output_tokens"),
            FinishReason::ContentFilter => Outcome::Incomplete("content_filter"),
            _ => Outcome::Completed,
        }
    }

    /// The response's `status`.
    fn status(self) -> Status {
        match self {
            Outcome::Completed => Status::Completed,
            Outcome::Incomplete(reason) => Status::Incomplete(reason),
        }
    }

    /// The `status` of the items it closes.
    fn item_status(self) -> &'static str {
        match self {
            Outcome::Completed => "completed",
            Outcome::Incomplete(_) => "incomplete",
        }
    }
}

/// A response object's `status`.
#[derive(Debug, Clone, Copy)]
enum Status {
    InProgress,
    Completed,
    Incomplete(&'static str),
}

fn response_id() -> String {
    format!("resp_{}", uuid::Uuid::now_v7().simple())
}

fn item_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7().simple())
}

/// One output item.
#[derive(Debug, Clone)]
struct Item {
    /// `msg_…` or `fc_…`.
    id: String,
    body: ItemBody,
    /// `in_progress` until closed.
    status: &'static str,
}

/// What an output item carries.
#[derive(Debug, Clone)]
enum ItemBody {
    Message {
        text: String,
    },
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
}

impl Item {
    fn message(text: String) -> Item {
        Item {
            id: item_id("msg"),
            body: ItemBody::Message { text },
            status: "in_progress",
        }
    }

    fn call(call_id: String, name: String, arguments: String) -> Item {
        Item {
            id: item_id("fc"),
            body: ItemBody::Call {
                call_id,
                name,
                arguments,
            },
            status: "in_progress",
        }
    }

    /// The item as `output` holds it.
    fn json(&self) -> Value {
        match &self.body {
            ItemBody::Message { text } => {
                // An item just added has no part yet.
                let content: Vec<Value> = if self.status == "in_progress" {
                    Vec::new()
                } else {
                    vec![text_part(text)]
                };
                json!({"type": "message", "id": self.id, "role": "assistant",
                       "status": self.status, "content": content})
            }
            ItemBody::Call {
                call_id,
                name,
                arguments,
            } => json!({
                "type": "function_call", "id": self.id, "call_id": call_id, "name": name,
                "arguments": arguments, "status": self.status,
            }),
        }
    }
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

/// What every rendering of one response shares.
struct Shell<'a> {
    id: String,
    created_at: u64,
    model: &'a str,
    echo: &'a Map<String, Value>,
}

impl Shell<'_> {
    /// The response object: `usage` from `response` once there is one.
    fn render(&self, status: Status, items: &[Item], response: Option<&ModelResponse>) -> Value {
        let (status, incomplete) = match status {
            Status::InProgress => ("in_progress", Value::Null),
            Status::Completed => ("completed", Value::Null),
            Status::Incomplete(reason) => ("incomplete", json!({"reason": reason})),
        };
        let mut body = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created_at,
            "status": status,
            "background": false,
            "error": null,
            "incomplete_details": incomplete,
            "model": self.model,
            "output": items.iter().map(Item::json).collect::<Vec<_>>(),
            "usage": response.map(usage),
        });
        if status == "completed" {
            body["completed_at"] = json!(unix_secs());
        }
        if let Value::Object(map) = &mut body {
            map.extend(self.echo.iter().map(|(k, v)| (k.clone(), v.clone())));
        }
        body
    }
}

fn usage(response: &ModelResponse) -> Value {
    json!({
        "input_tokens": response.usage.input,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": response.usage.output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": response.usage.total(),
    })
}

/// Turns a provider-neutral turn stream into the Responses API's events:
/// the text as a message item, each tool call as a function call item.
struct Relay {
    turn: TurnStream,
    id: String,
    created_at: u64,
    model: String,
    echo: Map<String, Value>,
    /// The next event's `sequence_number`.
    sequence: u64,
    started: bool,
    ended: bool,
    /// The output so far, by output index.
    items: Vec<Item>,
    /// The output index of the message being written, if any.
    text: Option<usize>,
    /// Open function calls: the provider's index of each, and its output
    /// index.
    calls: Vec<(usize, usize)>,
    /// The recoveries of a stream cut after its first token, for the mark
    /// on the response its last event carries.
    recoveries: Vec<rein_core::event::StreamRecovered>,
}

impl Relay {
    fn shell(&self) -> Shell<'_> {
        Shell {
            id: self.id.clone(),
            created_at: self.created_at,
            model: &self.model,
            echo: &self.echo,
        }
    }

    /// Appends one event of type `kind`, numbered.
    fn emit(&mut self, kind: &str, mut data: Value, out: &mut String) {
        if let Value::Object(map) = &mut data {
            map.insert("type".into(), json!(kind));
            map.insert("sequence_number".into(), json!(self.sequence));
        }
        self.sequence += 1;
        out.push_str(&format!("event: {kind}\ndata: {data}\n\n"));
    }

    /// Opens a message item.
    fn open_text(&mut self, out: &mut String) -> usize {
        let index = self.items.len();
        let item = Item::message(String::new());
        let (id, json) = (item.id.clone(), item.json());
        self.items.push(item);
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": json}),
            out,
        );
        self.emit(
            "response.content_part.added",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part("")}),
            out,
        );
        self.text = Some(index);
        index
    }

    /// Closes the open message item, if any, with `status`.
    fn close_text(&mut self, status: &'static str, out: &mut String) {
        let Some(index) = self.text.take() else {
            return;
        };
        let Some(item) = self.items.get_mut(index) else {
            return;
        };
        item.status = status;
        let (id, json) = (item.id.clone(), item.json());
        let text = match &item.body {
            ItemBody::Message { text } => text.clone(),
            ItemBody::Call { .. } => String::new(),
        };
        self.emit(
            "response.output_text.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}),
            out,
        );
        self.emit(
            "response.content_part.done",
            json!({"item_id": id, "output_index": index, "content_index": 0, "part": text_part(&text)}),
            out,
        );
        self.emit(
            "response.output_item.done",
            json!({"output_index": index, "item": json}),
            out,
        );
    }

    /// Closes every open function call item with `status`.
    fn close_calls(&mut self, status: &'static str, out: &mut String) {
        for (_, index) in std::mem::take(&mut self.calls) {
            let Some(item) = self.items.get_mut(index) else {
                continue;
            };
            item.status = status;
            let (id, json) = (item.id.clone(), item.json());
            let (name, arguments) = match &item.body {
                ItemBody::Call {
                    name, arguments, ..
                } => (name.clone(), arguments.clone()),
                ItemBody::Message { .. } => (String::new(), String::new()),
            };
            self.emit(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments}),
                out,
            );
            self.emit(
                "response.output_item.done",
                json!({"output_index": index, "item": json}),
                out,
            );
        }
    }

    /// The output index of the provider's call `call`, opening its item
    /// first if it is new.
    fn call_item(&mut self, call: &ToolCallDelta, out: &mut String) -> usize {
        if let Some((_, index)) = self.calls.iter().find(|(c, _)| *c == call.index) {
            return *index;
        }
        // A message the calls follow is complete.
        self.close_text("completed", out);
        let index = self.items.len();
        let call_id = call.id.clone().unwrap_or_else(|| item_id("call"));
        let item = Item::call(
            call_id,
            call.name.clone().unwrap_or_default(),
            String::new(),
        );
        let json = item.json();
        self.items.push(item);
        self.calls.push((call.index, index));
        self.emit(
            "response.output_item.added",
            json!({"output_index": index, "item": json}),
            out,
        );
        index
    }

    /// The events of one delta (possibly none).
    fn delta(&mut self, delta: &Delta) -> String {
        let mut out = String::new();
        if let Some(piece) = delta.text.as_deref().filter(|t| !t.is_empty()) {
            let index = match self.text {
                Some(index) => index,
                None => self.open_text(&mut out),
            };
            let mut id = String::new();
            if let Some(Item {
                id: item,
                body: ItemBody::Message { text },
                ..
            }) = self.items.get_mut(index)
            {
                text.push_str(piece);
                id.clone_from(item);
            }
            self.emit(
                "response.output_text.delta",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                       "delta": piece, "logprobs": []}),
                &mut out,
            );
        }
        for call in &delta.tool_calls {
            let index = self.call_item(call, &mut out);
            let mut id = String::new();
            if let Some(Item {
                id: item,
                body: ItemBody::Call {
                    name, arguments, ..
                },
                ..
            }) = self.items.get_mut(index)
            {
                if name.is_empty()
                    && let Some(late) = &call.name
                {
                    name.clone_from(late);
                }
                arguments.push_str(&call.arguments);
                id.clone_from(item);
            }
            if !call.arguments.is_empty() {
                self.emit(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": call.arguments}),
                    &mut out,
                );
            }
        }
        out
    }

    /// The events that end a whole turn.
    fn done(&mut self, response: &ModelResponse) -> String {
        let mut out = String::new();
        if self.items.is_empty() {
            // Nothing streamed: the answer as one delta, or an empty
            // message so that `output_text` is "".
            let whole = Delta {
                text: response.text.clone(),
                tool_calls: response
                    .tool_calls
                    .iter()
                    .enumerate()
                    .map(|(index, c)| ToolCallDelta {
                        index,
                        id: Some(c.id.clone()),
                        name: Some(c.name.clone()),
                        arguments: c.arguments.clone(),
                    })
                    .collect(),
            };
            out.push_str(&self.delta(&whole));
            if self.items.is_empty() {
                self.open_text(&mut out);
            }
        }
        let outcome = Outcome::of(response.finish);
        self.close_text(outcome.item_status(), &mut out);
        self.close_calls(outcome.item_status(), &mut out);
        let mut body = self
            .shell()
            .render(outcome.status(), &self.items, Some(response));
        if let Some(mark) = super::recovered_mark(&self.recoveries) {
            body["rein"] = mark;
        }
        let kind = match outcome {
            Outcome::Completed => "response.completed",
            Outcome::Incomplete(_) => "response.incomplete",
        };
        self.emit(kind, json!({"response": body}), &mut out);
        out
    }

    /// The in-band error that ends a cut stream: no `response.completed`
    /// after it, so the client cannot take the output so far for a whole
    /// answer.
    fn error(&mut self, code: &str, message: &str) -> String {
        self.ended = true;
        let mut out = String::new();
        self.emit(
            "error",
            json!({"code": code, "message": message, "param": null}),
            &mut out,
        );
        out
    }

    /// The next bytes to send; `None` once the stream ended.
    async fn next(&mut self) -> Option<Bytes> {
        if self.ended {
            return None;
        }
        if !self.started {
            self.started = true;
            let body = self.shell().render(Status::InProgress, &[], None);
            let mut out = String::new();
            self.emit("response.created", json!({"response": body}), &mut out);
            self.emit("response.in_progress", json!({"response": body}), &mut out);
            return Some(Bytes::from(out));
        }
        loop {
            let text = match self.turn.next().await {
                // The Responses API says the prompt's tokens at the end.
                Some(Ok(StreamEvent::PromptTokens(_))) => String::new(),
                // Marked on the last event's response.
                Some(Ok(StreamEvent::Recovered(recovery))) => {
                    self.recoveries.push(recovery);
                    String::new()
                }
                Some(Ok(StreamEvent::Delta(delta))) => self.delta(&delta),
                Some(Ok(StreamEvent::Done(response))) => {
                    self.ended = true;
                    self.done(&response)
                }
                Some(Err(failure)) => {
                    self.error(failure.category().as_str(), failure.human_message())
                }
                None => self.error("unknown", "the stream ended without a complete answer"),
            };
            if !text.is_empty() {
                return Some(Bytes::from(text));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::model::TokenUsage;

    fn parsed(body: Value) -> Call<Responses> {
        match parse(body.to_string().as_bytes()) {
            Ok(call) => call,
            Err(p) => panic!("{body} does not parse: {}", p.detail),
        }
    }

    fn refused_with(body: Value) -> Value {
        let Err(problem) = parse(body.to_string().as_bytes()) else {
            panic!("{body} parses");
        };
        serde_json::to_value(problem).unwrap()
    }

    #[test]
    fn items_map_to_the_transcript_in_order() {
        let call = parsed(json!({
            "model": "m",
            "instructions": "be brief",
            "input": [
                {"role": "developer", "content": "no emoji"},
                {"role": "user", "content": [{"type": "input_text", "text": "Where is "}, {"type": "input_text", "text": "A-1?"}]},
                {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                 "content": [{"type": "output_text", "text": "Looking.", "annotations": [], "logprobs": []}]},
                {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "get_order", "arguments": "{\"id\":\"A-1\"}", "status": "completed"},
                {"type": "function_call", "call_id": "c2", "name": "get_eta", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "shipped"},
                {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "today"}]},
                {"type": "function_call", "call_id": "c3", "name": "get_eta", "arguments": "{}"},
                {"type": "message", "role": "assistant", "content": "Checked."},
            ],
            "tools": [{"type": "function", "name": "get_order", "description": "d",
                       "parameters": {"type": "object"}, "strict": true}],
            "tool_choice": {"type": "function", "name": "get_order"},
            "parallel_tool_calls": false,
            "max_output_tokens": 100, "temperature": 0.5, "top_p": 0.9, "user": "u-1",
            "text": {"format": {"type": "json_schema", "name": "order", "schema": {"type": "object"}, "strict": true},
                     "verbosity": "low"},
            "reasoning": {"effort": "none"}, "store": true, "metadata": {"k": "v"},
            "include": ["reasoning.encrypted_content"], "truncation": "disabled",
            "service_tier": "auto"
        }));
        let r = &call.request;
        let call_of = |id: &str, name: &str, arguments: &str| ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        };
        assert_eq!(
            r.messages,
            vec![
                Message::System {
                    content: "be brief".into()
                },
                Message::System {
                    content: "no emoji".into()
                },
                Message::user("Where is A-1?"),
                Message::Assistant {
                    content: Some("Looking.".into()),
                    tool_calls: vec![
                        call_of("c1", "get_order", r#"{"id":"A-1"}"#),
                        call_of("c2", "get_eta", "{}")
                    ]
                },
                Message::Tool {
                    call_id: "c1".into(),
                    content: "shipped".into()
                },
                Message::Tool {
                    call_id: "c2".into(),
                    content: "today".into()
                },
                Message::Assistant {
                    content: Some("Checked.".into()),
                    tool_calls: vec![call_of("c3", "get_eta", "{}")]
                },
            ]
        );
        assert_eq!(r.max_tokens, Some(100));
        assert_eq!(call.max_tokens_param, "max_output_tokens");
        assert_eq!(
            r.tools,
            vec![
                json!({"type": "function", "function": {"name": "get_order", "description": "d",
                        "parameters": {"type": "object"}, "strict": true}})
            ]
        );
        assert_eq!(
            r.options["tool_choice"],
            json!({"type": "function", "function": {"name": "get_order"}})
        );
        assert_eq!(r.options["parallel_tool_calls"], false);
        assert_eq!(r.options["temperature"], 0.5);
        assert_eq!(r.options["top_p"], 0.9);
        assert_eq!(r.options["user"], "u-1");
        assert_eq!(
            r.options["response_format"],
            json!({"type": "json_schema", "json_schema": {"name": "order", "schema": {"type": "object"}, "strict": true}})
        );
        // Ignored by design: never sent to the provider.
        for ignored in [
            "reasoning",
            "verbosity",
            "metadata",
            "store",
            "include",
            "service_tier",
        ] {
            assert!(!r.options.contains_key(ignored), "{ignored}");
        }
        // Echoed in the answer.
        let echo = &call.wire.echo;
        assert_eq!(echo["metadata"], json!({"k": "v"}));
        assert_eq!(echo["reasoning"], json!({"effort": "none"}));
        assert_eq!(echo["text"]["verbosity"], "low");
        assert_eq!(echo["text"]["format"]["schema"], json!({"type": "object"}));
        assert_eq!(echo["tools"][0]["strict"], true);
        assert_eq!(echo["store"], false);
    }

    #[test]
    fn a_string_input_is_one_user_message_and_defaults_are_echoed() {
        let call =
            parsed(json!({"model": "m", "input": "Hi.", "tools": [], "parallel_tool_calls": true}));
        assert_eq!(call.request.messages, vec![Message::user("Hi.")]);
        // No tools: no parallel_tool_calls for the provider.
        assert!(
            call.request.options.is_empty(),
            "{:?}",
            call.request.options
        );
        assert!(!call.stream);
        let echo = &call.wire.echo;
        assert_eq!(echo["tool_choice"], "auto");
        assert_eq!(echo["text"], json!({"format": {"type": "text"}}));
        assert_eq!(echo["parallel_tool_calls"], true);
        assert_eq!(echo["metadata"], json!({}));
        let json_object = parsed(
            json!({"model": "m", "input": "Hi.", "text": {"format": {"type": "json_object"}}}),
        );
        assert_eq!(
            json_object.request.options["response_format"],
            json!({"type": "json_object"})
        );
    }

    #[test]
    fn state_rein_does_not_keep_is_refused_naming_the_member() {
        for (member, value) in [
            ("previous_response_id", json!("resp_1")),
            ("conversation", json!("conv_1")),
            ("background", json!(true)),
            ("prompt", json!({"id": "pmpt_1"})),
            ("truncation", json!("auto")),
        ] {
            let mut body = json!({"model": "m", "input": "Hi."});
            body[member] = value;
            let p = refused_with(body);
            assert_eq!(p["status"], 400, "{p}");
            assert_eq!(p["field"], format!("/{member}"), "{p}");
            assert_eq!(p["error"]["param"], format!("/{member}"), "{p}");
            assert_eq!(p["error"]["type"], "invalid_request_error", "{p}");
            assert_eq!(p["error"]["code"], "unsupported_parameter", "{p}");
            let message = p["error"]["message"].as_str().unwrap();
            assert!(message.contains(member), "{p}");
        }
        let p =
            refused_with(json!({"model": "m", "input": "Hi.", "previous_response_id": "resp_1"}));
        let message = p["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("keeps no response state") && message.contains("whole conversation"),
            "{p}"
        );
        // Null, or false, is no ask.
        parsed(
            json!({"model": "m", "input": "Hi.", "previous_response_id": null,
                      "conversation": null, "background": false, "prompt": null}),
        );
    }

    #[test]
    fn what_cannot_be_mapped_is_refused_naming_the_item() {
        let p = refused_with(json!({"model": "m", "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "what is this?"},
            {"type": "input_file", "file_id": "file-1"}]}]}));
        assert_eq!(p["field"], "/input/0/content/1/type", "{p}");
        let message = p["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("input_file") && message.contains("cannot be bounded"),
            "{p}"
        );
        let p = refused_with(json!({"model": "m", "input": [
            {"type": "reasoning", "id": "rs_1", "summary": []}]}));
        assert_eq!(p["field"], "/input/0/type", "{p}");
        assert!(p["detail"].as_str().unwrap().contains("reasoning"), "{p}");
        let p = refused_with(json!({"model": "m", "input": "Hi.",
                                    "tools": [{"type": "web_search"}]}));
        assert_eq!(p["field"], "/tools/0/type", "{p}");
        assert!(
            p["detail"].as_str().unwrap().contains("hosted tools"),
            "{p}"
        );
        let p = refused_with(json!({"model": "m", "input": "Hi.",
                                    "tool_choice": {"type": "allowed_tools", "mode": "auto", "tools": []}}));
        assert_eq!(p["field"], "/tool_choice", "{p}");
        let p = refused_with(json!({"model": "m", "input": [
            {"type": "function_call", "call_id": "c1", "arguments": "{}"}]}));
        assert_eq!(p["field"], "/input/0/name", "{p}");
        let p = refused_with(json!({"model": "m", "input": [{"content": "Hi."}]}));
        assert_eq!(p["field"], "/input/0/role", "{p}");
        for (body, field) in [
            (json!({"model": "m", "input": []}), "/input"),
            (json!({"model": "", "input": "Hi."}), "/model"),
            (json!({"model": "m"}), "/"),
            (
                json!({"model": "m", "input": "Hi.", "max_output_tokens": 0}),
                "/max_output_tokens",
            ),
            (
                json!({"model": "m", "input": "Hi.", "temperature": 2.5}),
                "/temperature",
            ),
            (
                json!({"model": "m", "input": "Hi.", "metadata": {"k": 1}}),
                "/metadata/k",
            ),
            (
                json!({"model": "m", "input": "Hi.", "tools": [{"type": "function", "name": ""}]}),
                "/tools/0/name",
            ),
        ] {
            let p = refused_with(body.clone());
            assert_eq!(p["status"], 400, "{body}: {p}");
            if field == "/" {
                assert!(p["detail"].as_str().unwrap().contains("input"), "{p}");
            } else {
                assert_eq!(p["field"], field, "{body}: {p}");
            }
        }
    }

    fn answer(text: Option<&str>, calls: Vec<ToolCall>, finish: FinishReason) -> ModelResponse {
        ModelResponse {
            text: text.map(str::to_owned),
            tool_calls: calls,
            finish,
            stop_sequence: None,
            usage: TokenUsage {
                input: 12,
                output: 5,
            },
        }
    }

    #[test]
    fn the_whole_answer_is_a_response_object() {
        let call = parsed(
            json!({"model": "m", "input": "Hi.", "max_output_tokens": 50,
                                 "metadata": {"k": "v"}}),
        );
        let body = Responses::body(
            &call,
            "mock-model",
            &answer(
                Some("Looking."),
                vec![ToolCall {
                    id: "call_1".into(),
                    name: "get_order".into(),
                    arguments: "{}".into(),
                }],
                FinishReason::ToolCalls,
            ),
        );
        assert!(body["id"].as_str().unwrap().starts_with("resp_"), "{body}");
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["model"], "mock-model");
        assert_eq!(body["incomplete_details"], Value::Null);
        assert_eq!(body["max_output_tokens"], 50);
        assert_eq!(body["metadata"], json!({"k": "v"}));
        let output = body["output"].as_array().unwrap();
        assert_eq!(output.len(), 2, "{body}");
        assert_eq!(output[0]["type"], "message");
        assert_eq!(output[0]["role"], "assistant");
        assert_eq!(output[0]["status"], "completed");
        assert_eq!(
            output[0]["content"],
            json!([{"type": "output_text", "text": "Looking.", "annotations": []}])
        );
        assert_eq!(output[1]["type"], "function_call");
        assert_eq!(output[1]["call_id"], "call_1");
        assert_eq!(output[1]["name"], "get_order");
        assert_eq!(output[1]["arguments"], "{}");
        assert!(output[1]["id"].as_str().unwrap().starts_with("fc_"));
        assert_eq!(body["usage"]["input_tokens"], 12);
        assert_eq!(body["usage"]["output_tokens"], 5);
        assert_eq!(body["usage"]["total_tokens"], 17);
        assert_eq!(body["usage"]["input_tokens_details"]["cached_tokens"], 0);
        assert_eq!(
            body["usage"]["output_tokens_details"]["reasoning_tokens"],
            0
        );

        let cut = Responses::body(
            &call,
            "m",
            &answer(Some("Half"), vec![], FinishReason::Length),
        );
        assert_eq!(cut["status"], "incomplete");
        assert_eq!(
            cut["incomplete_details"],
            json!({"reason": "max_output_tokens"})
        );
        assert_eq!(cut["output"][0]["status"], "incomplete");
        let empty = Responses::body(&call, "m", &answer(None, vec![], FinishReason::Stop));
        assert_eq!(empty["output"][0]["content"][0]["text"], "");
    }

    /// The `(event, data)` pairs of a stream's text.
    fn events(text: &str) -> Vec<(String, Value)> {
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let mut lines = e.lines();
                let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
                let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
                (name.to_owned(), serde_json::from_str(data).unwrap())
            })
            .collect()
    }

    async fn streamed(items: Vec<Result<StreamEvent, rein_core::Failure>>) -> Vec<(String, Value)> {
        let call = parsed(json!({"model": "m", "input": "Hi.", "stream": true}));
        let turn: TurnStream = Box::pin(futures_util::stream::iter(items));
        let bytes: Vec<Bytes> = Responses::events(call, "mock-model".into(), turn, None)
            .collect()
            .await;
        let text: String = bytes
            .iter()
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .collect();
        let events = events(&text);
        for (i, (name, data)) in events.iter().enumerate() {
            assert_eq!(data["type"], name.as_str(), "{data}");
            assert_eq!(data["sequence_number"], i, "{data}");
        }
        events
    }

    #[tokio::test]
    async fn a_stream_has_the_responses_events_in_order() {
        let delta = |text: &str| {
            Ok(StreamEvent::Delta(Delta {
                text: Some(text.into()),
                tool_calls: vec![],
            }))
        };
        let call_delta = |id: Option<&str>, arguments: &str| {
            Ok(StreamEvent::Delta(Delta {
                text: None,
                tool_calls: vec![ToolCallDelta {
                    index: 0,
                    id: id.map(str::to_owned),
                    name: id.map(|_| "get_order".to_owned()),
                    arguments: arguments.into(),
                }],
            }))
        };
        let whole = answer(
            Some("Hello there"),
            vec![ToolCall {
                id: "call_1".into(),
                name: "get_order".into(),
                arguments: r#"{"id":1}"#.into(),
            }],
            FinishReason::ToolCalls,
        );
        let events = streamed(vec![
            delta("Hello"),
            delta(" there"),
            call_delta(Some("call_1"), ""),
            call_delta(None, r#"{"id""#),
            call_delta(None, ":1}"),
            Ok(StreamEvent::Done(whole)),
        ])
        .await;
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        assert_eq!(events[0].1["response"]["status"], "in_progress");
        assert_eq!(events[6].1["text"], "Hello there");
        assert_eq!(events[12].1["arguments"], r#"{"id":1}"#);
        let done = &events[14].1["response"];
        assert_eq!(done["status"], "completed");
        assert_eq!(done["id"], events[0].1["response"]["id"]);
        assert_eq!(done["output"][0]["id"], events[2].1["item"]["id"]);
        assert_eq!(done["output"][0]["content"][0]["text"], "Hello there");
        assert_eq!(done["output"][1]["call_id"], "call_1");
        assert_eq!(done["output"][1]["name"], "get_order");
        assert_eq!(done["output"][1]["id"], events[9].1["item"]["id"]);
        assert_eq!(done["usage"]["total_tokens"], 17);
    }

    #[tokio::test]
    async fn a_cut_stream_ends_in_an_error_event_and_no_completion() {
        let failure = rein_core::Failure::new("mock", rein_core::Category::Transient)
            .with_human_message("the connection dropped");
        let events = streamed(vec![
            Ok(StreamEvent::Delta(Delta {
                text: Some("One, two".into()),
                tool_calls: vec![],
            })),
            Err(failure),
        ])
        .await;
        let (name, data) = events.last().unwrap();
        assert_eq!(name, "error");
        assert_eq!(data["message"], "the connection dropped");
        assert_eq!(data["code"], "transient");
        assert!(
            !events
                .iter()
                .any(|(n, _)| n.starts_with("response.completed"))
        );
        // A turn that ends without its last event is cut too.
        let events = streamed(vec![]).await;
        assert_eq!(events.last().unwrap().0, "error");
    }

    #[tokio::test]
    async fn a_truncated_stream_ends_incomplete() {
        let events = streamed(vec![Ok(StreamEvent::Done(answer(
            Some("Half"),
            vec![],
            FinishReason::Length,
        )))])
        .await;
        let (name, data) = events.last().unwrap();
        assert_eq!(name, "response.incomplete");
        assert_eq!(data["response"]["status"], "incomplete");
        assert_eq!(
            data["response"]["incomplete_details"]["reason"],
            "max_output_tokens"
        );
        assert_eq!(data["response"]["output"][0]["content"][0]["text"], "Half");
    }
}

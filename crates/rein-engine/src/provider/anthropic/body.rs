//! The request body: rein's OpenAI-shaped transcript, tools and options
//! as the Messages API wants them (see [`AnthropicProvider`]'s conversion
//! table), and the answer tool that carries a `response_format`.

use rein_core::wire::anthropic::request::{
    ContentBlock, ImageSource, InputMessage, MessageContent, MessagesRequest, MessagesToolChoice,
    Metadata, Role, TextContent, ToolDef,
};
use rein_core::wire::openai::request as openai;
use rein_core::{Category, Effect, Failure};
use serde::Deserialize;
use serde_json::{Map, Value};

use super::AnthropicProvider;
use crate::provider::{Message, ModelRequest, Part, ResponseFormat};

/// A request ready to send, and how its answer is read.
#[derive(Debug)]
pub(super) struct Prepared {
    /// The Messages API body.
    pub(super) body: MessagesRequest,
    /// The answer tool's name, when a `response_format` asks for JSON and
    /// the model may answer this turn: its `tool_use` input is the
    /// answer's text, not a tool call.
    pub(super) answer: Option<String>,
}

impl AnthropicProvider {
    /// The body of `request`.
    ///
    /// # Errors
    ///
    /// A not-retryable `invalid_arguments` failure, sent nowhere, for a
    /// `response_format` this API cannot honour (see the provider's docs):
    /// answering prose instead would be passed off as the format asked
    /// for; and for a part of a message it cannot take (audio, an image
    /// type it does not read), named by its place.
    pub(super) fn prepare(
        &self,
        request: &ModelRequest,
        stream: bool,
    ) -> Result<Prepared, Failure> {
        let mut system = Vec::new();
        let mut messages: Vec<InputMessage> = Vec::new();
        for message in &request.messages {
            let (role, blocks) = match message {
                Message::System { content } => {
                    system.push(content.as_str());
                    continue;
                }
                Message::User { content, parts } if parts.is_empty() => {
                    (Role::User, text_block(content).into_iter().collect())
                }
                Message::User { content, parts } => {
                    let blocks = parts
                        .iter()
                        .map(Self::part_block)
                        .filter_map(Result::transpose)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|why| self.unsupported(&in_message(&why, content)))?;
                    (Role::User, blocks)
                }
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut blocks: Vec<ContentBlock> = content
                        .as_deref()
                        .and_then(text_block)
                        .into_iter()
                        .collect();
                    blocks.extend(tool_calls.iter().map(|call| ContentBlock::ToolUse {
                        id: call.id.clone(),
                        name: call.name.clone(),
                        input: tool_input(&call.arguments),
                    }));
                    (Role::Assistant, blocks)
                }
                Message::Tool { call_id, content } => (
                    Role::User,
                    vec![ContentBlock::ToolResult {
                        tool_use_id: call_id.clone(),
                        content: Some(TextContent::Text(content.clone())),
                        is_error: None,
                    }],
                ),
            };
            if blocks.is_empty() {
                continue;
            }
            // The API alternates roles: a tool result and the user's next
            // words are one user turn.
            match messages.last_mut() {
                Some(InputMessage {
                    role: last,
                    content: MessageContent::Blocks(existing),
                }) if *last == role => existing.extend(blocks),
                _ => messages.push(InputMessage {
                    role,
                    content: MessageContent::Blocks(blocks),
                }),
            }
        }
        let mut tools: Vec<ToolDef> = request.tools.iter().filter_map(tool_definition).collect();
        let asked: Option<openai::ToolChoice> = self.option(request, "tool_choice")?;
        let choice = ToolChoice::of(asked.as_ref());
        let beside_tools = !tools.is_empty();
        let answer = match ResponseFormat::of(&request.options) {
            Ok(format) => self.answer_tool(format.as_ref(), choice, &tools)?,
            Err(e) => return Err(self.unsupported(&e.to_string())),
        };
        let answer_name = answer.as_ref().map(|tool| tool.name.clone());
        tools.extend(answer);
        let single = self.option(request, "parallel_tool_calls")? == Some(false);
        let choice = match &answer_name {
            Some(name) => Some(choice.with_answer(name, beside_tools)),
            None if !beside_tools => None,
            None => choice.wire(),
        };
        let stop: Option<openai::Stop> = self.option(request, "stop")?;
        let body = MessagesRequest {
            model: request.model.clone(),
            max_tokens: Some(request.max_tokens.unwrap_or(self.max_tokens)),
            messages,
            system: (!system.is_empty()).then(|| TextContent::Text(system.join("\n\n"))),
            tools: (!tools.is_empty()).then_some(tools),
            tool_choice: choice.map(|choice| at_most_one(choice, single)),
            stop_sequences: stop.map(stop_sequences).filter(|s| !s.is_empty()),
            temperature: self.option(request, "temperature")?,
            top_p: self.option(request, "top_p")?,
            top_k: self.option(request, "top_k")?,
            stream: Some(stream),
            metadata: self.option(request, "user")?.map(|user| Metadata {
                user_id: Some(user),
            }),
            thinking: None,
            service_tier: None,
            output_config: self.option(request, "output_config")?,
        };
        Ok(Prepared {
            body,
            answer: answer_name,
        })
    }

    /// The content block of one part of a user message (`None` for empty
    /// text, which the Messages API refuses).
    ///
    /// # Errors
    ///
    /// Why the Messages API cannot take the part.
    fn part_block(part: &Part) -> Result<Option<ContentBlock>, String> {
        if let Some(why) = part_refusal(part) {
            return Err(why);
        }
        match part {
            Part::Text { text } => Ok(text_block(text)),
            Part::Image { url, .. } => image_block(url).map(Some),
            Part::Audio { .. } => Ok(None),
        }
    }

    /// Whether the Messages API can carry `request`: every part of its
    /// messages, and its `response_format` (see
    /// [`ModelProvider::carries`](crate::provider::ModelProvider::carries)).
    ///
    /// # Errors
    ///
    /// What it cannot carry, as [`AnthropicProvider::prepare`] refuses it.
    pub(super) fn check_carries(&self, request: &ModelRequest) -> Result<(), Failure> {
        for message in &request.messages {
            let Message::User { content, parts } = message else {
                continue;
            };
            if let Some(why) = parts.iter().find_map(part_refusal) {
                return Err(self.unsupported(&in_message(&why, content)));
            }
        }
        let format = match ResponseFormat::of(&request.options) {
            Err(e) => return Err(self.unsupported(&e.to_string())),
            Ok(Some(ResponseFormat::Other(kind))) => {
                return Err(self.unsupported(&format!(
                    "`response_format` type `{kind}` has no equivalent in the Messages API"
                )));
            }
            Ok(format) => format,
        };
        // A continuation is the Messages API's own prefill: a last
        // assistant message the model extends. A JSON answer comes as a
        // forced tool call, which a text prefill cannot start.
        if request.continuation {
            if request.prefix().is_none() {
                return Err(self.unsupported(
                    "a continuation's last message must be the assistant's text so far",
                ));
            }
            if format.is_some_and(|f| !matches!(f, ResponseFormat::Text)) {
                return Err(self.unsupported(
                    "a JSON answer is a forced tool call here, which a text prefill cannot continue",
                ));
            }
        }
        Ok(())
    }

    /// The answer tool for `format`, if the model may answer this turn.
    ///
    /// # Errors
    ///
    /// The refusal of a format the Messages API has no way to honour.
    fn answer_tool(
        &self,
        format: Option<&ResponseFormat>,
        choice: ToolChoice<'_>,
        tools: &[ToolDef],
    ) -> Result<Option<ToolDef>, Failure> {
        let (name, description, schema) = match format {
            None | Some(ResponseFormat::Text) => return Ok(None),
            Some(ResponseFormat::Other(kind)) => {
                return Err(self.unsupported(&format!(
                    "`response_format` type `{kind}` has no equivalent in the Messages API"
                )));
            }
            Some(ResponseFormat::JsonObject) => (JSON_OBJECT_TOOL, None, None),
            // `strict` is not sent: Anthropic's strict tool use is a beta
            // behind its own header, for some models only. The answer is
            // checked against the schema where the chain receives it
            // instead, whichever link gave it.
            Some(ResponseFormat::JsonSchema(format)) => (
                format.name.as_str(),
                format.description.as_deref(),
                format.schema.clone(),
            ),
        };
        // A turn that must call one of the caller's tools has no answer.
        if !tools.is_empty() && matches!(choice, ToolChoice::Required | ToolChoice::Named(_)) {
            return Ok(None);
        }
        let taken: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let description = description.map_or_else(
            || ANSWER_DESCRIPTION.to_owned(),
            |d| format!("{ANSWER_DESCRIPTION} {d}"),
        );
        Ok(Some(ToolDef {
            name: answer_tool_name(name, &taken),
            description: Some(description),
            input_schema: object_schema(schema),
        }))
    }

    /// The option `key` of `request`, read as its member in OpenAI's
    /// request (or, for `top_k` and `output_config`, the Messages API's).
    ///
    /// # Errors
    ///
    /// Its value is not in that shape.
    fn option<'a, T: Deserialize<'a>>(
        &self,
        request: &'a ModelRequest,
        key: &str,
    ) -> Result<Option<T>, Failure> {
        request
            .option(key)
            .map_err(|e| self.unsupported(&format!("the option `{key}`: {e}")))
    }

    /// The refusal of a request this API cannot carry: not retryable, not
    /// sent, charged nothing.
    fn unsupported(&self, why: &str) -> Failure {
        Failure::new(&self.endpoint.name, Category::InvalidArguments)
            .with_effect(Effect::NotApplied)
            .with_human_message(format!(
                "{} (an Anthropic provider) cannot carry this request: {why}",
                self.endpoint.name
            ))
    }
}

/// The answer tool's name for a `json_object` format.
const JSON_OBJECT_TOOL: &str = "json_answer";

/// What the answer tool tells the model.
const ANSWER_DESCRIPTION: &str =
    "Give your final answer by calling this tool: its input is the whole answer.";

/// The longest tool name the Messages API accepts.
const MAX_TOOL_NAME: usize = 64;

/// `name` as a Messages API tool name (`[a-zA-Z0-9_-]{1,64}`: other
/// characters become `_`), and not one of `taken` (the caller's tools):
/// the answer must never be read as one of their calls.
fn answer_tool_name(name: &str, taken: &[&str]) -> String {
    let mut base: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_NAME)
        .collect();
    if base.is_empty() {
        base = JSON_OBJECT_TOOL.to_owned();
    }
    let mut candidate = base.clone();
    let mut n = 1u32;
    while taken.contains(&candidate.as_str()) {
        let suffix = format!("_{n}");
        let keep = MAX_TOOL_NAME.saturating_sub(suffix.len()).min(base.len());
        candidate = format!("{}{suffix}", &base[..keep]);
        n += 1;
    }
    candidate
}

/// The caller's `tool_choice`, in OpenAI's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ToolChoice<'a> {
    /// None given.
    Unset,
    /// `auto`.
    Auto,
    /// `required`: some tool must be called.
    Required,
    /// `none`.
    None,
    /// `{"type": "function", "function": {"name"}}`.
    Named(&'a str),
}

impl<'a> ToolChoice<'a> {
    fn of(asked: Option<&'a openai::ToolChoice>) -> ToolChoice<'a> {
        match asked {
            None => ToolChoice::Unset,
            Some(openai::ToolChoice::Mode(openai::ToolChoiceMode::Auto)) => ToolChoice::Auto,
            Some(openai::ToolChoice::Mode(openai::ToolChoiceMode::Required)) => {
                ToolChoice::Required
            }
            Some(openai::ToolChoice::Mode(openai::ToolChoiceMode::None)) => ToolChoice::None,
            Some(openai::ToolChoice::Named(named)) => ToolChoice::Named(&named.function.name),
        }
    }

    /// As the Messages API's `tool_choice` (`required` is `any`, a named
    /// function a named tool); `None` to leave the API's default.
    fn wire(self) -> Option<MessagesToolChoice> {
        let disable_parallel_tool_use = None;
        match self {
            ToolChoice::Unset => None,
            ToolChoice::Auto => Some(MessagesToolChoice::Auto {
                disable_parallel_tool_use,
            }),
            ToolChoice::Required => Some(MessagesToolChoice::Any {
                disable_parallel_tool_use,
            }),
            ToolChoice::None => Some(MessagesToolChoice::None {}),
            ToolChoice::Named(name) => Some(MessagesToolChoice::Tool {
                name: name.to_owned(),
                disable_parallel_tool_use,
            }),
        }
    }

    /// The choice when the answer tool `name` is offered (never beside
    /// the caller's tools with `required` or a named function: see
    /// `answer_tool`): alone, the answer tool itself; `beside_tools` under
    /// `auto`, `any`, so the model calls one of them or answers through
    /// the answer tool, never in prose; under `none`, the answer tool.
    fn with_answer(self, name: &str, beside_tools: bool) -> MessagesToolChoice {
        match self {
            ToolChoice::Auto | ToolChoice::Unset if beside_tools => MessagesToolChoice::Any {
                disable_parallel_tool_use: None,
            },
            _ => MessagesToolChoice::Tool {
                name: name.to_owned(),
                disable_parallel_tool_use: None,
            },
        }
    }
}

/// `choice`, allowing at most one call when `single` (OpenAI's
/// `parallel_tool_calls: false`); `none` has no calls to limit.
fn at_most_one(mut choice: MessagesToolChoice, single: bool) -> MessagesToolChoice {
    if single {
        match &mut choice {
            MessagesToolChoice::Auto {
                disable_parallel_tool_use,
            }
            | MessagesToolChoice::Any {
                disable_parallel_tool_use,
            }
            | MessagesToolChoice::Tool {
                disable_parallel_tool_use,
                ..
            } => *disable_parallel_tool_use = Some(true),
            MessagesToolChoice::None {} => {}
        }
    }
    choice
}

/// The OpenAI-named options this API carries: sampling, stop sequences,
/// the caller's user id, and the tools' (see
/// [`AnthropicProvider::prepare`]). Every other one is left out and
/// reported by [`ignored_options`].
const CARRIED: [&str; 9] = [
    "temperature",
    "top_p",
    "stop",
    "user",
    "tool_choice",
    "parallel_tool_calls",
    "response_format",
    "top_k",
    "output_config",
];

/// The members of `options` an Anthropic request leaves out: those not in
/// [`CARRIED`] (`seed`, the penalties, `logit_bias`, `reasoning_effort`,
/// `service_tier`, …), in the order given.
pub(super) fn ignored_options(options: &serde_json::Map<String, Value>) -> Vec<String> {
    options
        .keys()
        .filter(|key| !CARRIED.contains(&key.as_str()))
        .cloned()
        .collect()
}

/// OpenAI's `stop` (one sequence or several) as `stop_sequences`.
fn stop_sequences(stop: openai::Stop) -> Vec<String> {
    match stop {
        openai::Stop::One(sequence) => vec![sequence],
        openai::Stop::Many(sequences) => sequences,
    }
}

/// A text block, or none for empty text (the API refuses empty blocks).
fn text_block(text: &str) -> Option<ContentBlock> {
    (!text.is_empty()).then(|| ContentBlock::Text {
        text: text.to_owned(),
    })
}

/// The image types the Messages API takes.
const IMAGE_TYPES: [&str; 4] = ["image/jpeg", "image/png", "image/gif", "image/webp"];

/// Why the Messages API cannot take the image at `url`, if it cannot.
fn image_refusal(url: &str) -> Option<String> {
    if let Some(data_url) = url.strip_prefix("data:") {
        let Some((media_type, _)) = data_url.split_once(";base64,") else {
            return Some("an image data URL that is not base64 (`data:TYPE;base64,DATA`)".into());
        };
        return (!IMAGE_TYPES.contains(&media_type)).then(|| {
            format!(
                "an image of type `{media_type}`: the Messages API takes {}",
                IMAGE_TYPES.join(", ")
            )
        });
    }
    (!url.starts_with("https://") && !url.starts_with("http://"))
        .then(|| "an image URL that is neither `http(s)://` nor a `data:` URL".to_owned())
}

/// An image block of `url`: a base64 source for a `data:` URL, a URL
/// source for an `http(s)` one (Anthropic fetches it).
///
/// # Errors
///
/// Why the Messages API cannot take the image.
fn image_block(url: &str) -> Result<ContentBlock, String> {
    if let Some(why) = image_refusal(url) {
        return Err(why);
    }
    Ok(
        match url
            .strip_prefix("data:")
            .and_then(|d| d.split_once(";base64,"))
        {
            Some((media_type, data)) => ContentBlock::Image {
                source: ImageSource::Base64 {
                    media_type: media_type.to_owned(),
                    data: data.to_owned(),
                },
            },
            None => ContentBlock::Image {
                source: ImageSource::Url {
                    url: url.to_owned(),
                },
            },
        },
    )
}

/// `why` a part cannot be carried, with the user message it is in named by
/// the start of its text: the client's own indices are not rein's (system
/// blocks, instructions and tool results are messages of their own here).
fn in_message(why: &str, text: &str) -> String {
    let start: String = text.chars().take(40).collect();
    if start.is_empty() {
        format!("{why}, in a user message without text")
    } else if start.len() < text.len() {
        format!("{why}, in the user message that begins \"{start}…\"")
    } else {
        format!("{why}, in the user message \"{start}\"")
    }
}

/// Why the Messages API cannot take `part` of a user message, if it
/// cannot.
fn part_refusal(part: &Part) -> Option<String> {
    match part {
        Part::Text { .. } => None,
        Part::Image { url, .. } => image_refusal(url),
        Part::Audio { format, .. } => Some(format!(
            "an audio part ({format}): the Messages API takes no audio input"
        )),
    }
}

/// A tool call's arguments as the object `input` must be (see the type's
/// docs for why a non-object becomes `{}`).
fn tool_input(arguments: &str) -> Map<String, Value> {
    serde_json::from_str(arguments).unwrap_or_default()
}

/// A JSON Schema as the object `input_schema` must be: a schema that is
/// not an object (`true`, or none) is any object.
fn object_schema(schema: Option<Value>) -> Map<String, Value> {
    match schema {
        Some(Value::Object(schema)) => schema,
        _ => Map::from_iter([("type".to_owned(), Value::from("object"))]),
    }
}

/// An OpenAI-style function definition as a Messages API tool; a tool
/// already in Anthropic's shape is read as one (its name, description and
/// input schema: members beyond those, such as `cache_control`, are not
/// sent); anything else is dropped with a warning (the registry and the
/// gateways give OpenAI-shaped definitions, so this is a bug, not input).
///
/// A function's `strict` is deliberately not sent. On the Messages API
/// strict tool use belongs to structured outputs, which not every model
/// or API version accepts; sent to one that does not, the member fails
/// the call with a 400, so a fallback link would fail on what its OpenAI
/// primary took. The calls still come back against `input_schema`, and a
/// run validates every call's arguments against its tool's schema
/// before the tool sees them.
fn tool_definition(tool: &Value) -> Option<ToolDef> {
    if let Ok(openai::ChatTool { function, .. }) = openai::ChatTool::deserialize(tool) {
        return Some(ToolDef {
            name: function.name,
            description: function.description,
            input_schema: object_schema(function.parameters),
        });
    }
    if let Ok(tool) = ToolDef::deserialize(tool) {
        return Some(tool);
    }
    tracing::warn!(%tool, "tool definition is neither OpenAI- nor Anthropic-shaped; not offered");
    None
}

#[cfg(test)]
impl Prepared {
    /// The body as it is sent.
    fn json(&self) -> Value {
        serde_json::to_value(&self.body).unwrap()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::provider::{DEFAULT_MAX_TOKENS, ToolCall};

    #[test]
    fn openai_named_options_map_to_the_messages_api() {
        let mut r = request();
        r.options = json!({"temperature": 0.3, "top_p": 0.9, "stop": "END", "seed": 1,
                           "user": "u-1", "top_k": 5, "output_config": {"effort": "low"}})
        .as_object()
        .unwrap()
        .clone();
        let body = provider().prepare(&r, false).unwrap().json();
        for (member, sent) in [
            ("temperature", json!(0.3)),
            ("top_p", json!(0.9)),
            ("stop_sequences", json!(["END"])),
            ("metadata", json!({"user_id": "u-1"})),
            ("top_k", json!(5)),
            ("output_config", json!({"effort": "low"})),
        ] {
            assert_eq!(body[member], sent, "{member}");
        }
        assert!(body.get("seed").is_none(), "{body}");
        assert_eq!(ignored_options(&r.options), ["seed"]);
        let choice = |options: Value, tools: bool| {
            let mut r = request();
            if !tools {
                r.tools.clear();
            }
            r.options = options.as_object().unwrap().clone();
            provider().prepare(&r, false).unwrap().json()["tool_choice"].clone()
        };
        assert_eq!(
            choice(
                json!({"tool_choice": {"type": "function", "function": {"name": "get_order"}}}),
                true
            ),
            json!({"type": "tool", "name": "get_order"})
        );
        assert_eq!(
            choice(json!({"tool_choice": "required"}), true),
            json!({"type": "any"})
        );
        assert_eq!(
            choice(
                json!({"tool_choice": "auto", "parallel_tool_calls": false}),
                true
            ),
            json!({"type": "auto", "disable_parallel_tool_use": true})
        );
        assert_eq!(
            choice(
                json!({"tool_choice": "none", "parallel_tool_calls": false}),
                true
            ),
            json!({"type": "none"})
        );
        assert_eq!(
            choice(json!({"tool_choice": "required"}), false),
            Value::Null,
            "no tools, no tool choice"
        );
    }

    fn schema_format() -> Value {
        json!({"type": "json_schema", "json_schema": {"name": "order.v1", "strict": true,
               "description": "An order.",
               "schema": {"type": "object", "properties": {"id": {"type": "string"}},
                          "required": ["id"], "additionalProperties": false}}})
    }

    #[test]
    fn a_json_schema_is_answered_through_a_forced_answer_tool() {
        let mut r = request();
        r.tools.clear();
        r.options.insert("response_format".into(), schema_format());
        let prepared = provider().prepare(&r, false).unwrap();
        assert_eq!(prepared.answer.as_deref(), Some("order_v1"));
        let body = prepared.json();
        let tools = body["tools"].as_array().unwrap();
        assert_eq!(tools.len(), 1);
        assert_eq!(tools[0]["name"], "order_v1");
        assert_eq!(
            tools[0]["input_schema"],
            schema_format()["json_schema"]["schema"]
        );
        assert!(tools[0].get("strict").is_none(), "strict is not sent");
        assert!(
            tools[0]["description"]
                .as_str()
                .unwrap()
                .ends_with("An order."),
            "{}",
            tools[0]
        );
        assert_eq!(
            prepared.json()["tool_choice"],
            json!({"type": "tool", "name": "order_v1"})
        );
        assert!(prepared.json().get("response_format").is_none());
        // json_object: an open object.
        r.options
            .insert("response_format".into(), json!({"type": "json_object"}));
        let prepared = provider().prepare(&r, true).unwrap();
        assert_eq!(prepared.answer.as_deref(), Some(JSON_OBJECT_TOOL));
        assert_eq!(
            prepared.json()["tools"][0]["input_schema"],
            json!({"type": "object"})
        );
        // text: nothing to force.
        r.options
            .insert("response_format".into(), json!({"type": "text"}));
        let prepared = provider().prepare(&r, false).unwrap();
        assert_eq!(prepared.answer, None);
        assert!(prepared.json().get("tools").is_none());
    }

    #[test]
    fn beside_the_callers_tools_the_model_must_call_one_or_answer() {
        let mut r = request();
        r.options.insert("response_format".into(), schema_format());
        let prepared = provider().prepare(&r, false).unwrap();
        let body = prepared.json();
        let names: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["get_order", "order_v1"]);
        assert_eq!(prepared.json()["tool_choice"], json!({"type": "any"}));
        // `none`: the answer, now.
        r.options.insert("tool_choice".into(), json!("none"));
        let prepared = provider().prepare(&r, false).unwrap();
        assert_eq!(
            prepared.json()["tool_choice"],
            json!({"type": "tool", "name": "order_v1"})
        );
        // `required`: a tool call, no answer this turn.
        r.options.insert("tool_choice".into(), json!("required"));
        let prepared = provider().prepare(&r, false).unwrap();
        assert_eq!(prepared.answer, None);
        assert_eq!(prepared.json()["tools"].as_array().unwrap().len(), 1);
        assert_eq!(prepared.json()["tool_choice"], json!({"type": "any"}));
        // A caller's tool of the schema's name: the answer tool is another.
        assert_eq!(answer_tool_name("get_order", &["get_order"]), "get_order_1");
        assert_eq!(answer_tool_name("", &[]), JSON_OBJECT_TOOL);
        let long = "x".repeat(80);
        assert_eq!(answer_tool_name(&long, &[]).len(), MAX_TOOL_NAME);
        let taken = "x".repeat(MAX_TOOL_NAME);
        let other = answer_tool_name(&long, &[taken.as_str()]);
        assert_eq!(other.len(), MAX_TOOL_NAME);
        assert!(other.ends_with("_1"), "{other}");
    }

    #[test]
    fn a_format_the_api_cannot_honour_is_refused_unsent() {
        let mut r = request();
        for format in [
            json!({"type": "grammar", "grammar": "root ::= x"}),
            json!({"type": "json_schema"}),
        ] {
            r.options.insert("response_format".into(), format.clone());
            let refused = provider().prepare(&r, false).unwrap_err();
            assert_eq!(
                refused.category(),
                rein_core::Category::InvalidArguments,
                "{format}"
            );
            assert!(!refused.retryable());
            assert_eq!(refused.effect(), Effect::NotApplied);
            assert!(
                refused.human_message().contains("response_format"),
                "{}",
                refused.human_message()
            );
        }
    }

    fn provider() -> AnthropicProvider {
        AnthropicProvider::new(
            "claude",
            "http://127.0.0.1:1/v1/",
            None,
            Duration::from_secs(1),
            reqwest::Client::new(),
        )
    }

    fn request() -> ModelRequest {
        ModelRequest {
            model: "claude-test".into(),
            messages: vec![
                Message::System {
                    content: "be brief".into(),
                },
                Message::System {
                    content: "use tools".into(),
                },
                Message::user("move A-1"),
                Message::Assistant {
                    content: Some("Looking.".into()),
                    tool_calls: vec![
                        ToolCall {
                            id: "t1".into(),
                            name: "get_order".into(),
                            arguments: r#"{"order_id":"A-1"}"#.into(),
                        },
                        ToolCall {
                            id: "t2".into(),
                            name: "send".into(),
                            arguments: r#"{"to": "#.into(),
                        },
                    ],
                },
                Message::Tool {
                    call_id: "t1".into(),
                    content: "fact".into(),
                },
                Message::Tool {
                    call_id: "t2".into(),
                    content: "invalid arguments".into(),
                },
                Message::user("and?"),
            ],
            tools: vec![json!({"type": "function", "function": {
                "name": "get_order", "description": "reads an order",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}})],
            max_tokens: None,
            options: Default::default(),
            continuation: false,
        }
    }

    #[test]
    fn images_become_image_blocks_and_audio_is_refused_naming_its_part() {
        let mut r = request();
        r.messages = vec![Message::user_parts(vec![
            Part::Text {
                text: "what is this?".into(),
            },
            Part::Image {
                url: "data:image/png;base64,iVBORw0KGgo=".into(),
                detail: Some("low".into()),
            },
            Part::Image {
                url: "https://example.com/a.jpg".into(),
                detail: None,
            },
        ])];
        let body = provider().prepare(&r, false).unwrap().json();
        assert_eq!(
            body["messages"][0]["content"],
            json!([
                {"type": "text", "text": "what is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/a.jpg"}},
            ])
        );
        for (part, says) in [
            (
                Part::Audio {
                    data: "UklGRg==".into(),
                    format: "wav".into(),
                },
                "an audio part (wav): the Messages API takes no audio input, in the user message \"listen\"",
            ),
            (
                Part::Image {
                    url: "data:image/bmp;base64,Qk0=".into(),
                    detail: None,
                },
                "an image of type `image/bmp`",
            ),
        ] {
            r.messages = vec![
                Message::user("first"),
                Message::user_parts(vec![
                    Part::Text {
                        text: "listen".into(),
                    },
                    part,
                ]),
            ];
            let refused = provider().prepare(&r, false).unwrap_err();
            assert_eq!(refused.category(), Category::InvalidArguments);
            assert!(!refused.retryable());
            assert!(refused.human_message().contains(says), "{refused:?}");
        }
    }

    #[test]
    fn request_body_converts_the_transcript_and_tools() {
        let body = provider().prepare(&request(), true).unwrap().json();
        assert_eq!(body["system"], "be brief\n\nuse tools");
        assert_eq!(body["max_tokens"], DEFAULT_MAX_TOKENS);
        assert_eq!(body["stream"], true);
        let messages = body["messages"].as_array().unwrap();
        assert_eq!(messages.len(), 3, "{messages:?}");
        assert_eq!(
            messages[0],
            json!({"role": "user", "content": [{"type": "text", "text": "move A-1"}]})
        );
        assert_eq!(messages[1]["role"], "assistant");
        assert_eq!(
            messages[1]["content"][0],
            json!({"type": "text", "text": "Looking."})
        );
        assert_eq!(
            messages[1]["content"][1],
            json!({"type": "tool_use", "id": "t1", "name": "get_order", "input": {"order_id": "A-1"}})
        );
        assert_eq!(
            messages[1]["content"][2]["input"],
            json!({}),
            "cut arguments become {{}}"
        );
        assert_eq!(messages[2]["role"], "user");
        assert_eq!(
            messages[2]["content"][0],
            json!({"type": "tool_result", "tool_use_id": "t1", "content": "fact"})
        );
        assert_eq!(messages[2]["content"][1]["tool_use_id"], "t2");
        assert_eq!(messages[2]["content"][2]["text"], "and?");
        assert_eq!(
            body["tools"][0],
            json!({"name": "get_order", "description": "reads an order",
                   "input_schema": {"type": "object", "properties": {"order_id": {"type": "string"}}}})
        );
        let mut capped = request();
        capped.max_tokens = Some(77);
        assert_eq!(
            provider().prepare(&capped, false).unwrap().json()["max_tokens"],
            77
        );
    }
}

//! OpenAI's chat completion request (`POST /v1/chat/completions`), read
//! by the gateway and written by the OpenAI-compatible provider.
//!
//! One type serves both sides, so a member the gateway reads is spelt as
//! the provider writes it. The sides differ in what they tolerate:
//!
//! - reading (the gateway), every member but `model` and `messages` may be
//!   absent; the gateway refuses by name every member this type does not
//!   read, never dropping one silently;
//! - writing (the provider), an absent member is left out, and three
//!   members only some servers read are written, never read: Mistral's
//!   `prefix` on the last assistant message and vLLM's
//!   `continue_final_message` and `add_generation_prompt` (a
//!   continuation).
//!
//! With the `schema` feature each type is also its OpenAPI schema
//! (`utoipa`), which is how rein's gateway documents its route.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

pub use super::FunctionKind;

/// A chat completion request. As rein's gateway reads one, every member
/// is read, mapped, accepted at the one value rein answers with, or
/// refused with a 400 naming it, as OpenAI refuses an unrecognized one,
/// never dropped silently.
///
/// | member | how |
/// | --- | --- |
/// | `model`, `messages`, `tools` (`strict` kept), `tool_choice`, `parallel_tool_calls`, `stream`, `stream_options` | read |
/// | `max_tokens`, `max_completion_tokens` | the output ceiling, checked against the primary's cap |
/// | `temperature`, `top_p`, `stop`, `seed`, `user`, `frequency_penalty`, `presence_penalty`, `logit_bias`, `reasoning_effort`, `service_tier`, `response_format` | passed to an OpenAI-compatible link; an Anthropic link maps `temperature`, `top_p`, `stop`, `user`, the tool members and `response_format`, and leaves out the rest, which the answer names in `Rein-Ignored` |
/// | `n` (1), `logprobs` (false), `modalities` (`["text"]`) | accepted at the value rein answers with; any other is refused |
/// | `store`, `metadata` | accepted by design and sent nowhere (rein stores nothing), named in `Rein-Ignored` |
/// | `top_logprobs`, `audio`, `prediction`, `functions`, `function_call`, `web_search_options`, and any unrecognized member | refused with a 400 naming it |
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ChatRequest {
    /// A `[models.*]` binding.
    #[cfg_attr(feature = "schema", schema(min_length = 1))]
    pub model: String,
    /// The conversation so far.
    #[cfg_attr(feature = "schema", schema(min_items = 1))]
    pub messages: Vec<ChatMessage>,
    /// Tools the model may call (the caller runs them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ChatTool>>,
    /// The output ceiling (older name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = 1))]
    pub max_tokens: Option<u64>,
    /// The output ceiling; wins over `max_tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = 1))]
    pub max_completion_tokens: Option<u64>,
    /// Whether to answer as server-sent events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// Streaming options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = 0, maximum = 2))]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = 0, maximum = 1))]
    pub top_p: Option<f64>,
    /// Where to stop generating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop: Option<Stop>,
    /// A seed for providers that honour one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<i64>,
    /// Which tool the model must (or must not) call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// The answer's format (`{"type": "json_object"}`, `{"type":
    /// "json_schema", "json_schema": {name, schema, strict}}`, …): passed
    /// on to an OpenAI-compatible link, answered through a forced tool by
    /// an Anthropic one; a JSON answer that does not fit it is the link's
    /// failure, never a 200 (see `rein_engine::provider::ResponseFormat`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(value_type = Option<Object>))]
    pub response_format: Option<Map<String, Value>>,
    /// Whether the model may call several tools in one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// The end user, for the provider's abuse monitoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Penalises tokens by how often they appeared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = -2, maximum = 2))]
    pub frequency_penalty: Option<f64>,
    /// Penalises tokens that appeared at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = -2, maximum = 2))]
    pub presence_penalty: Option<f64>,
    /// Token ids and the bias added to their logits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(value_type = Option<Object>))]
    pub logit_bias: Option<Map<String, Value>>,
    /// A reasoning model's effort (`minimal`, `low`, `medium`, `high`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// The provider's processing tier (`auto`, `default`, `flex`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// How many choices: rein answers one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = 1, maximum = 1))]
    pub n: Option<u32>,
    /// Log probabilities: rein carries none, so only `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<bool>,
    /// Output modalities: rein answers text, so only `["text"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub modalities: Option<Vec<String>>,
    /// OpenAI's stored completions: rein stores nothing (ignored, said in
    /// `Rein-Ignored`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<bool>,
    /// Tags for OpenAI's stored completions (ignored, said in
    /// `Rein-Ignored`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(value_type = Option<Object>))]
    pub metadata: Option<Map<String, Value>>,
    /// vLLM's continuation: the last assistant message is continued, not
    /// answered. Written, not read.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub continue_final_message: Option<bool>,
    /// vLLM's chat template opens no new assistant turn (set with
    /// `continue_final_message`). Written, not read.
    #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
    pub add_generation_prompt: Option<bool>,
}

/// `stop`: one sequence or several.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Stop {
    /// One sequence.
    One(String),
    /// Several.
    Many(Vec<String>),
}

/// `tool_choice`: a mode, or one named function.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum ToolChoice {
    /// `none`, `auto` or `required`.
    Mode(ToolChoiceMode),
    /// This function.
    Named(NamedToolChoice),
}

/// A tool-choice mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceMode {
    /// Call no tool.
    None,
    /// The model decides.
    Auto,
    /// Call some tool.
    Required,
}

/// A named tool choice.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct NamedToolChoice {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    /// The function.
    pub function: NamedFunction,
}

/// The function a named tool choice names.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct NamedFunction {
    /// Its name.
    pub name: String,
}

impl ToolChoice {
    /// The choice of the function `name`.
    pub fn named(name: impl Into<String>) -> ToolChoice {
        ToolChoice::Named(NamedToolChoice {
            kind: FunctionKind::Function,
            function: NamedFunction { name: name.into() },
        })
    }
}

/// `stream_options`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct StreamOptions {
    /// Send a last chunk with the usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
}

/// One message, by role.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// Instructions.
    System {
        /// The text.
        content: Content,
    },
    /// Instructions (OpenAI's newer name for `system`).
    Developer {
        /// The text.
        content: Content,
    },
    /// The user.
    User {
        /// The text.
        content: Content,
    },
    /// An earlier answer, with the tool calls it made.
    Assistant {
        /// Its text, if any (`null` when it only calls tools).
        #[serde(default)]
        content: Option<Content>,
        /// Its tool calls, if any.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_calls: Option<Vec<ChatToolCall>>,
        /// Mistral's continuation: this message, the last, is the start
        /// of the answer. Written, not read.
        #[serde(skip_deserializing, skip_serializing_if = "Option::is_none")]
        prefix: Option<bool>,
    },
    /// A tool's result.
    Tool {
        /// The call it answers.
        tool_call_id: String,
        /// The result.
        content: Content,
    },
}

/// A message's content: a string, or parts.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Parts, in order: text, and in a user message images and audio.
    Parts(Vec<ContentPart>),
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match super::super::string_or_seq(deserializer)? {
            Ok(text) => Content::Text(text),
            Err(parts) => Content::Parts(parts),
        })
    }
}

/// One part of a message's content. A `file` part is not here: rein
/// bounds a prompt's tokens before sending it, and a document's cannot be
/// bounded from its bytes (see `rein_engine::provider::Part`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (user messages only): passed to a provider that reads
    /// images, refused naming the part by one that does not.
    ImageUrl {
        /// The image.
        image_url: ImageUrl,
    },
    /// Audio (user messages only): passed to a provider that reads audio,
    /// refused naming the part by one that does not.
    InputAudio {
        /// The audio.
        input_audio: InputAudio,
    },
    /// An earlier answer's refusal (assistant messages only), read as its
    /// text.
    Refusal {
        /// The text.
        refusal: String,
    },
}

impl ContentPart {
    /// The part's `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            ContentPart::Text { .. } => "text",
            ContentPart::ImageUrl { .. } => "image_url",
            ContentPart::InputAudio { .. } => "input_audio",
            ContentPart::Refusal { .. } => "refusal",
        }
    }
}

/// An image part's image.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ImageUrl {
    /// `https://…`, or the image itself as `data:image/png;base64,…`.
    #[cfg_attr(feature = "schema", schema(min_length = 1))]
    pub url: String,
    /// `low`, `high` or `auto`; providers without it leave it out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<ImageDetail>,
}

/// An image's detail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum ImageDetail {
    /// The provider chooses.
    Auto,
    /// A low-resolution pass.
    Low,
    /// The full image.
    High,
}

impl ImageDetail {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            ImageDetail::Auto => "auto",
            ImageDetail::Low => "low",
            ImageDetail::High => "high",
        }
    }

    /// The detail named `name`, if OpenAI has it.
    pub fn named(name: &str) -> Option<ImageDetail> {
        match name {
            "auto" => Some(ImageDetail::Auto),
            "low" => Some(ImageDetail::Low),
            "high" => Some(ImageDetail::High),
            _ => None,
        }
    }
}

/// An audio part's audio.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct InputAudio {
    /// The audio's bytes, base64.
    #[cfg_attr(feature = "schema", schema(min_length = 1))]
    pub data: String,
    /// Its format.
    pub format: AudioFormat,
}

/// The audio formats OpenAI's chat completions read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum AudioFormat {
    /// WAV.
    Wav,
    /// MP3.
    Mp3,
}

impl AudioFormat {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            AudioFormat::Wav => "wav",
            AudioFormat::Mp3 => "mp3",
        }
    }

    /// The format named `name`, if OpenAI reads it.
    pub fn named(name: &str) -> Option<AudioFormat> {
        match name {
            "wav" => Some(AudioFormat::Wav),
            "mp3" => Some(AudioFormat::Mp3),
            _ => None,
        }
    }
}

/// A tool call of an earlier answer. Unlike an answer's tool call, which
/// a reader takes with members missing, a request's call is whole: its id
/// and function are required.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ChatToolCall {
    /// The call's id.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    /// What was called.
    pub function: FunctionCall,
}

impl ChatToolCall {
    /// Call `id` of the function `name` with `arguments` (JSON text).
    pub fn function(id: String, name: String, arguments: String) -> ChatToolCall {
        ChatToolCall {
            id,
            kind: FunctionKind::Function,
            function: FunctionCall { name, arguments },
        }
    }
}

/// The function a tool call of an earlier answer called.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct FunctionCall {
    /// The tool.
    pub name: String,
    /// Its arguments, as JSON text.
    pub arguments: String,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ChatTool {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: FunctionKind,
    /// The function.
    pub function: FunctionDef,
}

impl ChatTool {
    /// The tool that is the function `def`.
    pub fn function(def: FunctionDef) -> ChatTool {
        ChatTool {
            kind: FunctionKind::Function,
            function: def,
        }
    }
}

/// A function's definition.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct FunctionDef {
    /// Its name.
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its arguments' JSON Schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(value_type = Option<Object>))]
    pub parameters: Option<Value>,
    /// Whether the arguments must fit `parameters` exactly (OpenAI's
    /// structured outputs): passed on unchanged to an OpenAI-compatible
    /// link; not sent to an Anthropic one (see its provider).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_request_reads_and_writes_its_members_under_their_names() {
        let body = json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "https://x/a.png", "detail": "low"}},
                    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "ok"}
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}, "strict": true}}],
            "tool_choice": {"type": "function", "function": {"name": "f"}},
            "stop": ["END"],
            "max_completion_tokens": 5,
            "temperature": 0.5
        });
        let request: ChatRequest = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(request.tool_choice, Some(ToolChoice::named("f")));
        assert_eq!(serde_json::to_value(&request).unwrap(), body);
    }

    #[test]
    fn members_only_servers_read_are_written_but_never_read() {
        let body = json!({
            "model": "m",
            "messages": [{"role": "assistant", "content": "Once", "prefix": true}],
            "continue_final_message": true,
            "add_generation_prompt": false
        });
        let request: ChatRequest = serde_json::from_value(body).unwrap();
        assert_eq!(request.continue_final_message, None);
        assert_eq!(request.add_generation_prompt, None);
        assert!(matches!(
            &request.messages[0],
            ChatMessage::Assistant { prefix: None, .. }
        ));
    }

    #[test]
    fn an_unknown_part_is_refused_with_its_type_named() {
        let body =
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "file"}]}]});
        let error = serde_json::from_value::<ChatRequest>(body).unwrap_err();
        assert!(
            error.to_string().contains("unknown variant `file`"),
            "{error}"
        );
    }
}

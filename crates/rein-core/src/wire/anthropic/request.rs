//! Anthropic's Messages request (`POST /v1/messages`), read by the
//! gateway and written by the Anthropic provider.
//!
//! One type serves both sides, so a member the gateway reads is spelt as
//! the provider writes it. Reading, every member but `model` and
//! `messages` may be absent (the gateway refuses by name every member this
//! type does not read); writing, an absent member is left out.
//!
//! With the `schema` feature each type is also its OpenAPI schema
//! (`utoipa`), which is how rein's gateway documents its route.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

/// A Messages request. As rein's gateway reads one, every other member is
/// refused by name, never dropped:
///
/// | member | an Anthropic link | an OpenAI-compatible link |
/// | --- | --- | --- |
/// | `model`, `messages`, `system`, `max_tokens`, `tools`, `tool_choice`, `stream` | passed | mapped |
/// | `temperature`, `top_p`, `stop_sequences`, `metadata.user_id` | passed | mapped (`stop`, `user`) |
/// | `top_k` | passed | left out, named in `Rein-Ignored` |
/// | `output_config.effort` | passed | mapped (`reasoning_effort`) |
/// | `output_config.format` (`json_schema`) | rein's structured output (a forced tool), the answer checked | mapped (`response_format`), the answer checked |
/// | `thinking` `{"type": "disabled"}` | accepted | accepted |
/// | `thinking` enabled or adaptive, `service_tier` | accepted, left out, named in `Rein-Ignored` (the gateway's `THINKING_LEFT_OUT` says why) | the same |
/// | `container`, `mcp_servers`, `context_management`, `output_format`, any other member | refused (400 naming it and why) | refused |
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct MessagesRequest {
    /// A `[models.*]` binding.
    #[cfg_attr(feature = "schema", schema(min_length = 1))]
    pub model: String,
    /// The output ceiling (required, as in Anthropic's API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schema(required = true, nullable = false, minimum = 1)
    )]
    pub max_tokens: Option<u64>,
    /// The conversation so far, user and assistant turns.
    #[cfg_attr(feature = "schema", schema(min_items = 1))]
    pub messages: Vec<InputMessage>,
    /// Instructions: a string or text blocks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<SystemPrompt>,
    /// Tools the model may call (the caller runs them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<ToolDef>>,
    /// Which tool the model must (or must not) call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<MessagesToolChoice>,
    /// Where to stop generating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_sequences: Option<Vec<String>>,
    /// Sampling temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = 0, maximum = 1))]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schema(minimum = 0, maximum = 1))]
    pub top_p: Option<f64>,
    /// Sample from the K likeliest tokens only: passed to an Anthropic
    /// link, left out by an OpenAI-compatible one (named in
    /// `Rein-Ignored`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Whether to answer as server-sent events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// About the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Metadata>,
    /// Extended thinking: accepted and left out by the gateway (its
    /// `THINKING_LEFT_OUT` says why), named in `Rein-Ignored` unless
    /// disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// Anthropic's capacity tier: accepted and left out (a binding's links
    /// may be any provider), named in `Rein-Ignored`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<String>,
    /// How the answer is written: its effort, and its format.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_config: Option<OutputConfig>,
}

/// `thinking`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Thinking {
    /// No thinking: the only setting rein carries.
    Disabled {},
    /// Thinking with a token budget (refused).
    Enabled {
        /// Its budget.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        budget_tokens: Option<u64>,
    },
    /// Thinking as the model sees fit (refused).
    Adaptive {},
}

/// `output_config`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// How much effort the model spends: passed to an Anthropic link,
    /// `reasoning_effort` to an OpenAI-compatible one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<Effort>,
    /// The answer's format: JSON fitting a schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<OutputFormat>,
}

/// `output_config.effort`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Effort {
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
}

/// `output_config.format`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputFormat {
    /// JSON fitting `schema`.
    JsonSchema {
        /// The JSON Schema.
        #[cfg_attr(feature = "schema", schema(value_type = Object))]
        schema: Map<String, Value>,
    },
}

/// `metadata`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Metadata {
    /// An opaque id of the end user, passed on as OpenAI's `user`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<String>,
}

/// One turn of the conversation. A struct rather than an enum tagged by
/// `role`, so an error inside its content keeps its exact path.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct InputMessage {
    /// Who speaks.
    pub role: Role,
    /// A string or blocks.
    pub content: MessageContent,
}

/// A turn's speaker.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user: text and tool results.
    User,
    /// An earlier answer: text and tool calls.
    Assistant,
}

/// A message's content: a string, or blocks.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Blocks.
    Blocks(Vec<ContentBlock>),
}

/// One content block. Any other type (`document`, `thinking`, …) is
/// refused: a document's prompt tokens cannot be bounded before sending
/// (see `rein_engine::provider::Part`), and the others are the model's own.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image (user messages only): passed to a provider that reads
    /// images, refused naming the block by one that does not.
    Image {
        /// Where the image is.
        source: ImageSource,
    },
    /// A tool call of an earlier answer.
    ToolUse {
        /// The call's id.
        id: String,
        /// The tool.
        name: String,
        /// Its arguments.
        #[cfg_attr(feature = "schema", schema(value_type = Object))]
        input: Map<String, Value>,
    },
    /// A tool's result.
    ToolResult {
        /// The call it answers.
        tool_use_id: String,
        /// The result: a string or text blocks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<TextContent>,
        /// Whether the tool failed.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        is_error: Option<bool>,
    },
}

/// An image block's source.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ImageSource {
    /// The image itself.
    Base64 {
        /// `image/jpeg`, `image/png`, `image/gif` or `image/webp`.
        media_type: String,
        /// Its bytes, base64.
        #[cfg_attr(feature = "schema", schema(min_length = 1))]
        data: String,
    },
    /// Where the image is.
    Url {
        /// `https://…`.
        #[cfg_attr(feature = "schema", schema(min_length = 1))]
        url: String,
    },
}

/// Text: a string, or text blocks (concatenated).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(untagged)]
pub enum TextContent {
    /// Plain text.
    Text(String),
    /// Text blocks.
    Blocks(Vec<TextBlock>),
}

/// `system`: a string, or text blocks.
pub type SystemPrompt = TextContent;

/// A text block.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct TextBlock {
    /// Always `text`.
    #[serde(rename = "type")]
    pub kind: TextTag,
    /// The text.
    pub text: String,
}

/// The tag of a [`TextBlock`].
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(rename_all = "lowercase")]
pub enum TextTag {
    /// Text.
    Text,
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ToolDef {
    /// Its name.
    #[cfg_attr(feature = "schema", schema(min_length = 1))]
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Its input's JSON Schema.
    #[cfg_attr(feature = "schema", schema(value_type = Object))]
    pub input_schema: Map<String, Value>,
}

/// `tool_choice`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum MessagesToolChoice {
    /// The model decides.
    Auto {
        /// At most one tool call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    /// Some tool.
    Any {
        /// At most one tool call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    /// This tool.
    Tool {
        /// Its name.
        name: String,
        /// At most one tool call.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        disable_parallel_tool_use: Option<bool>,
    },
    /// No tool.
    None {},
}

impl Effort {
    /// Its name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Effort::Low => "low",
            Effort::Medium => "medium",
            Effort::High => "high",
        }
    }
}

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match super::super::string_or_seq(deserializer)? {
            Ok(text) => MessageContent::Text(text),
            Err(blocks) => MessageContent::Blocks(blocks),
        })
    }
}

impl<'de> Deserialize<'de> for TextContent {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(match super::super::string_or_seq(deserializer)? {
            Ok(text) => TextContent::Text(text),
            Err(blocks) => TextContent::Blocks(blocks),
        })
    }
}

impl TextContent {
    /// The text: the string, or the blocks' texts concatenated.
    pub fn text(self) -> String {
        match self {
            TextContent::Text(text) => text,
            TextContent::Blocks(blocks) => blocks.into_iter().map(|b| b.text).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_request_reads_and_writes_its_members_under_their_names() {
        let body = json!({
            "model": "m",
            "max_tokens": 64,
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
                ]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": false}
                ]}
            ],
            "system": "be brief",
            "tools": [{"name": "f", "description": "does f", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"],
            "temperature": 0.5,
            "top_k": 5,
            "metadata": {"user_id": "u-1"},
            "output_config": {"effort": "low"},
            "stream": true
        });
        let request: MessagesRequest = serde_json::from_value(body.clone()).unwrap();
        assert_eq!(
            request.output_config.as_ref().and_then(|c| c.effort),
            Some(Effort::Low)
        );
        assert_eq!(serde_json::to_value(&request).unwrap(), body);
    }

    #[test]
    fn text_is_a_string_or_its_blocks_joined() {
        let blocks: TextContent = serde_json::from_value(
            json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]),
        )
        .unwrap();
        assert_eq!(blocks.text(), "ab");
        let unknown = serde_json::from_value::<MessageContent>(json!([{"type": "document"}]));
        assert!(
            unknown
                .unwrap_err()
                .to_string()
                .contains("unknown variant `document`")
        );
    }
}

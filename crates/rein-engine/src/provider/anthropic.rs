//! The Anthropic provider: the Messages API with tools, streamed or not.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rein_core::Failure;
use rein_core::deadline::DEADLINE_HEADER;
use serde_json::{Map, Value, json};

use super::http::{self, malformed, post_json, stream_error_failure};
use super::sse::{self, Decoder, Opening, SseEvent, Update, unparseable};
use super::stream::{Delta, StreamSettings, ToolCallDelta, collect_turn};
use super::{
    FinishReason, Message, ModelProvider, ModelRequest, ModelResponse, StreamLimits, TokenUsage,
    ToolCall, TurnStream,
};
use crate::{SystemClock, Timer};

/// The `anthropic-version` header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `max_tokens` sent when the request sets no output ceiling: the
/// Messages API requires one.
pub const DEFAULT_MAX_TOKENS: u64 = 4096;

/// The Anthropic Messages API over HTTP.
///
/// Like [`OpenAiProvider`](super::OpenAiProvider): one `reqwest::Client`
/// per provider, the call's timeout is the run's remainder capped by the
/// provider's own, failures are classified by the same shared code (429
/// with `Retry-After` → `rate_limited`, 529 → `overloaded`, 503 →
/// `transient`, 401/403 → not retryable, "prompt is too long" →
/// `context_overflow`), and streams follow the same rules.
///
/// | setting | default |
/// | --- | --- |
/// | base URL | up to and including `/v1`, e.g. `https://api.anthropic.com/v1` |
/// | `max_tokens` when the request sets none | [`DEFAULT_MAX_TOKENS`] |
/// | `complete` streams | no; see [`with_streaming`](Self::with_streaming) |
///
/// # Conversion
///
/// rein's transcript is OpenAI-shaped; the Messages API differs:
///
/// | rein | Messages API |
/// | --- | --- |
/// | system messages | the top-level `system` text (joined by blank lines) |
/// | user text | a `user` message with a `text` block |
/// | assistant tool calls | `tool_use` blocks (`id`, `name`, `input`) |
/// | tool results | `tool_result` blocks (`tool_use_id`, `content`) in a `user` message |
/// | tools `{"type": "function", "function": {name, description, parameters}}` | `{name, description, input_schema}` |
///
/// Consecutive messages of one role are merged (the API wants turns to
/// alternate, and every result of one assistant turn in the next user
/// message). Tool-call arguments that are not a JSON object — a malformed
/// call rein refused — are sent as `{}`: the API accepts only an object,
/// and the tool result that follows already tells the model its arguments
/// were invalid.
#[derive(Clone)]
pub struct AnthropicProvider {
    name: String,
    base_url: String,
    api_key: Option<String>,
    timeout: Duration,
    client: reqwest::Client,
    max_tokens: u64,
    streaming: Option<StreamSettings>,
    key_env: Option<String>,
    /// Times the limits and dates `Retry-After`.
    clock: Arc<dyn Timer>,
}

impl std::fmt::Debug for AnthropicProvider {
    // By hand: the key is never printed, and the base URL is redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("name", &self.name)
            .field("base_url", &rein_core::redact::text(&self.base_url))
            .field(
                "api_key",
                &self.api_key.as_ref().map(|_| rein_core::redact::REDACTED),
            )
            .field("key_env", &self.key_env)
            .field("timeout", &self.timeout)
            .field("streaming", &self.streaming)
            .finish_non_exhaustive()
    }
}

impl AnthropicProvider {
    /// A provider named `name` at `base_url` (e.g.
    /// `https://api.anthropic.com/v1`), sending `x-api-key: <api_key>` when
    /// given.
    pub fn new(
        name: &str,
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
        client: reqwest::Client,
    ) -> Self {
        // The key is taught to the redactor here, where it enters rein,
        // so no error that echoes it shows it (crate::secrets).
        crate::secrets::teach_provider(api_key.as_deref(), base_url);
        AnthropicProvider {
            name: name.to_owned(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            timeout,
            client,
            max_tokens: DEFAULT_MAX_TOKENS,
            streaming: None,
            key_env: None,
            clock: Arc::new(SystemClock::new()),
        }
    }

    /// Sets the `max_tokens` sent when the request sets no ceiling.
    pub fn with_default_max_tokens(mut self, max_tokens: u64) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// Times the first-byte, idle and overall limits on `clock` instead of
    /// the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Timer>) -> Self {
        self.clock = clock;
        self
    }

    /// Names the environment variable the key came from, for the log
    /// line of a rejected key.
    pub fn with_key_env(mut self, name: Option<&str>) -> Self {
        self.key_env = name.map(str::to_owned);
        self
    }

    /// Makes [`complete`](ModelProvider::complete) stream the answer and
    /// assemble it, under `settings`' first-byte and idle limits (see
    /// [`OpenAiProvider::with_streaming`](super::OpenAiProvider::with_streaming)).
    pub fn with_streaming(mut self, settings: StreamSettings) -> Self {
        self.streaming = Some(settings);
        self
    }

    fn body(&self, request: &ModelRequest, stream: bool) -> Value {
        let mut system = Vec::new();
        let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
        for message in &request.messages {
            let (role, blocks) = match message {
                Message::System { content } => {
                    system.push(content.as_str());
                    continue;
                }
                Message::User { content } => ("user", text_block(content).into_iter().collect()),
                Message::Assistant {
                    content,
                    tool_calls,
                } => {
                    let mut blocks: Vec<Value> = content
                        .as_deref()
                        .and_then(text_block)
                        .into_iter()
                        .collect();
                    blocks.extend(tool_calls.iter().map(|call| {
                        json!({
                            "type": "tool_use",
                            "id": call.id,
                            "name": call.name,
                            "input": tool_input(&call.arguments),
                        })
                    }));
                    ("assistant", blocks)
                }
                Message::Tool { call_id, content } => (
                    "user",
                    vec![
                        json!({"type": "tool_result", "tool_use_id": call_id, "content": content}),
                    ],
                ),
            };
            if blocks.is_empty() {
                continue;
            }
            match messages.last_mut() {
                Some((last, existing)) if *last == role => existing.extend(blocks),
                _ => messages.push((role, blocks)),
            }
        }
        let messages: Vec<Value> = messages
            .into_iter()
            .map(|(role, content)| json!({"role": role, "content": content}))
            .collect();
        let mut body = json!({
            "model": request.model,
            "max_tokens": request.max_tokens.unwrap_or(self.max_tokens),
            "messages": messages,
            "stream": stream,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n\n"));
        }
        let tools: Vec<Value> = request.tools.iter().filter_map(tool_definition).collect();
        let has_tools = !tools.is_empty();
        if has_tools {
            body["tools"] = Value::Array(tools);
        }
        apply_options(&mut body, &request.options, has_tools);
        body
    }

    fn post(&self, body: Vec<u8>, allowance: Duration) -> reqwest::RequestBuilder {
        let url = format!("{}/messages", self.base_url);
        let mut builder = self
            .client
            .post(&url)
            .header(DEADLINE_HEADER, allowance.as_millis().to_string())
            .header("anthropic-version", ANTHROPIC_VERSION)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body);
        if let Some(key) = &self.api_key {
            builder = builder.header("x-api-key", key);
        }
        builder
    }
}

/// Maps the OpenAI-named options this API has: `temperature`, `top_p`,
/// `stop` (as `stop_sequences`) and `tool_choice` (`auto`, `required` as
/// `any`, `none`, a named function as a named tool). `seed` and
/// `response_format` have no equivalent and are left out.
fn apply_options(body: &mut Value, options: &serde_json::Map<String, Value>, has_tools: bool) {
    for key in ["temperature", "top_p"] {
        if let Some(v) = options.get(key).filter(|v| v.is_number()) {
            body[key] = v.clone();
        }
    }
    match options.get("stop") {
        Some(Value::String(s)) => body["stop_sequences"] = json!([s]),
        Some(Value::Array(list)) if !list.is_empty() => {
            body["stop_sequences"] = Value::Array(list.clone());
        }
        _ => {}
    }
    if !has_tools {
        return;
    }
    let choice = match options.get("tool_choice") {
        Some(Value::String(mode)) => match mode.as_str() {
            "auto" => Some(json!({"type": "auto"})),
            "required" => Some(json!({"type": "any"})),
            "none" => Some(json!({"type": "none"})),
            _ => None,
        },
        Some(named) => named["function"]["name"]
            .as_str()
            .map(|name| json!({"type": "tool", "name": name})),
        None => None,
    };
    if let Some(choice) = choice {
        body["tool_choice"] = choice;
    }
}

/// A text block, or none for empty text (the API refuses empty blocks).
fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// A tool call's arguments as the object `input` must be (see the type's
/// docs for why a non-object becomes `{}`).
fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}

/// An OpenAI-style function definition as a Messages API tool; a tool
/// already in Anthropic's shape passes as it is; anything else is dropped
/// with a warning (the registry generates the definitions, so this is a
/// bug, not input).
fn tool_definition(tool: &Value) -> Option<Value> {
    if let Some(function) = tool.get("function") {
        let name = function.get("name").and_then(Value::as_str)?;
        let mut out = json!({
            "name": name,
            "input_schema": function
                .get("parameters")
                .cloned()
                .unwrap_or_else(|| json!({"type": "object"})),
        });
        if let Some(description) = function.get("description").and_then(Value::as_str) {
            out["description"] = json!(description);
        }
        return Some(out);
    }
    if tool.get("name").is_some() && tool.get("input_schema").is_some() {
        return Some(tool.clone());
    }
    tracing::warn!(%tool, "tool definition is neither OpenAI- nor Anthropic-shaped; not offered");
    None
}

#[async_trait]
impl ModelProvider for AnthropicProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn key_env(&self) -> Option<&str> {
        self.key_env.as_deref()
    }

    fn stream_settings(&self) -> Option<StreamSettings> {
        self.streaming
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        allowance: Duration,
    ) -> Result<ModelResponse, Failure> {
        if let Some(settings) = self.streaming {
            let stream = self.stream(request, settings.limits(allowance)).await?;
            return collect_turn(&self.name, stream).await;
        }
        let allowance = http::allowance(&self.name, allowance, self.timeout)?;
        let body = self.body(request, false).to_string().into_bytes();
        let text = post_json(
            &self.name,
            self.post(body, allowance),
            allowance,
            self.clock.as_ref(),
        )
        .await?;
        parse_message(&self.name, &text)
    }

    async fn stream(
        &self,
        request: &ModelRequest,
        limits: StreamLimits,
    ) -> Result<TurnStream, Failure> {
        let allowance = http::allowance(&self.name, limits.allowance, self.timeout)?;
        let body = self.body(request, true).to_string().into_bytes();
        let request_bytes = body.len();
        sse::open(Opening {
            clock: self.clock.clone(),
            name: &self.name,
            request: self.post(body, allowance),
            request_bytes,
            limits: StreamLimits {
                allowance,
                ..limits
            },
            decoder: EventDecoder {
                name: self.name.clone(),
                blocks: Vec::new(),
                tools: 0,
            },
        })
        .await
    }
}

/// A Messages API `stop_reason`.
fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "tool_use" => FinishReason::ToolCalls,
        // Both cut the output short of what the model meant to write.
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// Input tokens of a `usage` object: uncached plus cache writes and reads,
/// which are all billed input.
fn input_tokens(usage: &Value) -> Option<u64> {
    let field = |name: &str| usage.get(name).and_then(Value::as_u64);
    let base = field("input_tokens")?;
    Some(
        base.saturating_add(field("cache_creation_input_tokens").unwrap_or(0))
            .saturating_add(field("cache_read_input_tokens").unwrap_or(0)),
    )
}

/// Reads a Messages API answer; a body that is not one is a retryable
/// failure, never a panic.
fn parse_message(name: &str, text: &str) -> Result<ModelResponse, Failure> {
    let malformed = |why: &str| malformed(name, why, text);
    let body: Value = serde_json::from_str(text).map_err(|_| malformed("not JSON"))?;
    let content = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| malformed("no content"))?;
    let mut answer = String::new();
    let mut tool_calls = Vec::new();
    for (i, block) in content.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                answer.push_str(block.get("text").and_then(Value::as_str).unwrap_or(""));
            }
            Some("tool_use") => {
                let Some(tool) = block.get("name").and_then(Value::as_str) else {
                    return Err(malformed("tool_use block without a name"));
                };
                tool_calls.push(ToolCall {
                    id: block
                        .get("id")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                        .unwrap_or_else(|| format!("call_{i}")),
                    name: tool.to_owned(),
                    arguments: block
                        .get("input")
                        .map_or_else(|| String::from("{}"), Value::to_string),
                });
            }
            // Thinking and server-tool blocks are not part of the answer.
            _ => {}
        }
    }
    let finish = match body
        .get("stop_reason")
        .and_then(Value::as_str)
        .map(stop_reason)
    {
        Some(FinishReason::Other) | None if !tool_calls.is_empty() => FinishReason::ToolCalls,
        Some(finish) => finish,
        None => FinishReason::Other,
    };
    let usage = body.get("usage").unwrap_or(&Value::Null);
    Ok(ModelResponse {
        text: (!answer.is_empty()).then_some(answer),
        tool_calls,
        finish,
        usage: TokenUsage {
            input: input_tokens(usage).unwrap_or(0),
            output: usage
                .get("output_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        },
    })
}

/// What a content block is, by its index in the message.
#[derive(Debug, Clone, Copy)]
enum Block {
    Text,
    /// A tool call, numbered among the turn's tool calls.
    Tool(usize),
    /// Anything rein does not read (thinking, server tools).
    Other,
}

/// Reads Messages API stream events.
struct EventDecoder {
    name: String,
    /// `(index, kind)` of every block started.
    blocks: Vec<(u64, Block)>,
    tools: usize,
}

impl Decoder for EventDecoder {
    const TERMINATOR: &'static str = "message_stop";

    fn decode(&mut self, event: &SseEvent, updates: &mut Vec<Update>) -> Result<(), Failure> {
        let data: Value = serde_json::from_str(&event.data)
            .map_err(|e| unparseable(&self.name, event, &e.to_string()))?;
        let kind = data
            .get("type")
            .and_then(Value::as_str)
            .or(event.event.as_deref())
            .unwrap_or("");
        let index = data.get("index").and_then(Value::as_u64);
        match kind {
            "message_start" => {
                let usage = data.pointer("/message/usage").unwrap_or(&Value::Null);
                updates.push(Update::Usage {
                    input: input_tokens(usage),
                    output: usage.get("output_tokens").and_then(Value::as_u64),
                });
            }
            "content_block_start" => {
                let Some(index) = index else {
                    return Err(unparseable(
                        &self.name,
                        event,
                        "content_block_start without an index",
                    ));
                };
                let block = data.get("content_block").unwrap_or(&Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        self.blocks.push((index, Block::Text));
                        let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                        updates.push(Update::Delta(Delta {
                            text: Some(text.to_owned()),
                            tool_calls: Vec::new(),
                        }));
                    }
                    Some("tool_use") => {
                        let tool = self.tools;
                        self.tools += 1;
                        self.blocks.push((index, Block::Tool(tool)));
                        // The input arrives as `input_json_delta` pieces;
                        // a start that already carries it sends it whole.
                        let arguments = match block.get("input") {
                            Some(Value::Object(map)) if !map.is_empty() => {
                                Value::Object(map.clone()).to_string()
                            }
                            _ => String::new(),
                        };
                        let text =
                            |name: &str| block.get(name).and_then(Value::as_str).map(str::to_owned);
                        updates.push(Update::Delta(Delta {
                            text: None,
                            tool_calls: vec![ToolCallDelta {
                                index: tool,
                                id: text("id"),
                                name: text("name"),
                                arguments,
                            }],
                        }));
                    }
                    _ => self.blocks.push((index, Block::Other)),
                }
            }
            "content_block_delta" => {
                let block = index.and_then(|i| self.blocks.iter().rev().find(|(b, _)| *b == i));
                let Some(&(_, block)) = block else {
                    return Err(unparseable(
                        &self.name,
                        event,
                        "a delta for a block that never started",
                    ));
                };
                let delta = data.get("delta").unwrap_or(&Value::Null);
                let piece =
                    |field: &str| delta.get(field).and_then(Value::as_str).map(str::to_owned);
                match (block, delta.get("type").and_then(Value::as_str)) {
                    (Block::Text, Some("text_delta")) => updates.push(Update::Delta(Delta {
                        text: piece("text"),
                        tool_calls: Vec::new(),
                    })),
                    (Block::Tool(tool), Some("input_json_delta")) => {
                        updates.push(Update::Delta(Delta {
                            text: None,
                            tool_calls: vec![ToolCallDelta {
                                index: tool,
                                id: None,
                                name: None,
                                arguments: piece("partial_json").unwrap_or_default(),
                            }],
                        }));
                    }
                    // Citations, thinking and signatures are not the answer.
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    updates.push(Update::Finish(stop_reason(reason)));
                }
                if let Some(usage) = data.get("usage") {
                    updates.push(Update::Usage {
                        input: input_tokens(usage),
                        output: usage.get("output_tokens").and_then(Value::as_u64),
                    });
                }
            }
            "message_stop" => updates.push(Update::End),
            "error" => {
                return Err(stream_error_failure(
                    &self.name,
                    data.get("error").unwrap_or(&Value::Null),
                ));
            }
            // `ping`, `content_block_stop`, and types added later.
            _ => {}
        }
        Ok(())
    }

    fn whole(&self, body: &str) -> Result<ModelResponse, Failure> {
        parse_message(&self.name, body)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_hand_built_provider_teaches_its_key_and_never_prints_it() {
        const CANARY: &str = "sk-ant-hand-built-canary-17";
        let provider = super::AnthropicProvider::new(
            "p",
            "http://127.0.0.1:9/v1",
            Some(CANARY.into()),
            std::time::Duration::from_secs(1),
            reqwest::Client::new(),
        );
        assert!(!format!("{provider:?}").contains(CANARY));
        assert_eq!(
            rein_core::redact::text(&format!("x-api-key: {CANARY}")),
            "x-api-key: [redacted]"
        );
    }

    #[test]
    fn openai_named_options_map_to_the_messages_api() {
        let mut body = json!({});
        let options = json!({"temperature": 0.3, "top_p": 0.9, "stop": "END", "seed": 1,
                             "tool_choice": {"type": "function", "function": {"name": "get_order"}},
                             "response_format": {"type": "json_object"}});
        apply_options(&mut body, options.as_object().unwrap(), true);
        assert_eq!(
            body,
            json!({"temperature": 0.3, "top_p": 0.9, "stop_sequences": ["END"],
                   "tool_choice": {"type": "tool", "name": "get_order"}})
        );
        let mut body = json!({});
        let required = json!({"tool_choice": "required"});
        apply_options(&mut body, required.as_object().unwrap(), true);
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
        let mut body = json!({});
        apply_options(&mut body, required.as_object().unwrap(), false);
        assert_eq!(body, json!({}), "no tools, no tool choice");
    }

    use super::*;
    use rein_core::Category;

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
                Message::User {
                    content: "move A-1".into(),
                },
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
                Message::User {
                    content: "and?".into(),
                },
            ],
            tools: vec![json!({"type": "function", "function": {
                "name": "get_order", "description": "reads an order",
                "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}}}})],
            max_tokens: None,
            options: Default::default(),
        }
    }

    #[test]
    fn request_body_converts_the_transcript_and_tools() {
        let body = provider().body(&request(), true);
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
        assert_eq!(provider().body(&capped, false)["max_tokens"], 77);
    }

    #[test]
    fn parses_text_tool_use_stop_reason_and_usage() {
        let r = parse_message(
            "claude",
            r#"{"id":"m","type":"message","role":"assistant","content":[
                {"type":"thinking","thinking":"hm"},
                {"type":"text","text":"On it."},
                {"type":"tool_use","id":"toolu_1","name":"get_order","input":{"order_id":"A"}}],
                "stop_reason":"tool_use","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":3}}"#,
        )
        .unwrap();
        assert_eq!(r.text.as_deref(), Some("On it."));
        assert_eq!(r.tool_calls[0].id, "toolu_1");
        assert_eq!(r.tool_calls[0].arguments, r#"{"order_id":"A"}"#);
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(
            r.usage,
            TokenUsage {
                input: 15,
                output: 3
            }
        );
        let cut = parse_message(
            "claude",
            r#"{"content":[{"type":"text","text":"The ord"}],"stop_reason":"max_tokens"}"#,
        )
        .unwrap();
        assert!(cut.is_truncated());
    }

    #[test]
    fn malformed_messages_are_failures_not_panics() {
        for body in [
            "",
            "null",
            "{}",
            r#"{"content": "x"}"#,
            r#"{"content":[{"type":"tool_use","input":{}}]}"#,
        ] {
            let f = parse_message("claude", body).unwrap_err();
            assert_eq!(f.category(), Category::Transient, "{body}");
        }
    }

    fn decode(events: &[(&str, &str)]) -> Result<Vec<Update>, Failure> {
        let mut decoder = EventDecoder {
            name: "claude".into(),
            blocks: Vec::new(),
            tools: 0,
        };
        let mut updates = Vec::new();
        for (event, data) in events {
            decoder.decode(
                &SseEvent {
                    event: Some((*event).to_owned()),
                    data: (*data).to_owned(),
                },
                &mut updates,
            )?;
        }
        Ok(updates)
    }

    #[test]
    fn decoder_refuses_garbage_and_deltas_for_unknown_blocks() {
        let f = decode(&[(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"#,
        )])
        .unwrap_err();
        assert_eq!(f.category(), Category::Transient);
        let f = decode(&[(
            "content_block_delta",
            r#"{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"x"}}"#,
        )])
        .unwrap_err();
        assert!(
            f.human_message().contains("never started"),
            "{}",
            f.human_message()
        );
        let f = decode(&[(
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        )])
        .unwrap_err();
        assert_eq!(f.category(), Category::Overloaded);
        let ok = decode(&[
            ("ping", r#"{"type":"ping"}"#),
            ("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#),
            ("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"x"}}"#),
            ("future_event", r#"{"type":"future_event"}"#),
        ])
        .unwrap();
        assert!(ok.is_empty(), "{ok:?}");
    }
}

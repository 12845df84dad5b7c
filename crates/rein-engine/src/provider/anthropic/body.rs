//! The request body: rein's OpenAI-shaped transcript, tools and options
//! as the Messages API wants them (see [`AnthropicProvider`]'s conversion
//! table).

use serde_json::{Map, Value, json};

use super::AnthropicProvider;
use crate::provider::{Message, ModelRequest};

impl AnthropicProvider {
    pub(super) fn body(&self, request: &ModelRequest, stream: bool) -> Value {
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::provider::{DEFAULT_MAX_TOKENS, ToolCall};

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
}

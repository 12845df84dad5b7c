//! The OpenAI-compatible provider: Chat Completions with tools.

use std::time::{Duration, Instant as StdInstant, SystemTime};

use async_trait::async_trait;
use rein_core::deadline::DEADLINE_HEADER;
use rein_core::failure::{TransportError, TransportPhase};
use rein_core::{Category, Failure};
use serde_json::{Value, json};

use super::{
    FinishReason, Message, ModelProvider, ModelRequest, ModelResponse, TokenUsage, ToolCall,
};

/// Chat Completions over HTTP, against any OpenAI-compatible base URL.
///
/// One `reqwest::Client` (one connection pool, `TCP_NODELAY`) per provider,
/// never one per request. The call's timeout is the remainder of the run's
/// deadline, capped by the provider's own timeout.
#[derive(Debug, Clone)]
pub struct OpenAiProvider {
    name: String,
    base_url: String,
    api_key: Option<String>,
    timeout: Duration,
    client: reqwest::Client,
}

impl OpenAiProvider {
    /// A provider named `name` at `base_url` (e.g. `http://127.0.0.1:8080/v1`),
    /// authenticating with `api_key` when given.
    pub fn new(
        name: &str,
        base_url: &str,
        api_key: Option<String>,
        timeout: Duration,
        client: reqwest::Client,
    ) -> Self {
        OpenAiProvider {
            name: name.to_owned(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            api_key,
            timeout,
            client,
        }
    }

    fn body(request: &ModelRequest) -> Value {
        let messages: Vec<Value> = request.messages.iter().map(wire_message).collect();
        let mut body = json!({
            "model": request.model,
            "messages": messages,
            "stream": false,
        });
        if !request.tools.is_empty() {
            body["tools"] = Value::Array(request.tools.clone());
            body["tool_choice"] = json!("auto");
        }
        if let Some(max) = request.max_tokens {
            body["max_tokens"] = json!(max);
        }
        body
    }
}

fn wire_message(message: &Message) -> Value {
    match message {
        Message::System { content } => json!({"role": "system", "content": content}),
        Message::User { content } => json!({"role": "user", "content": content}),
        Message::Assistant {
            content,
            tool_calls,
        } => {
            let mut m = json!({"role": "assistant", "content": content});
            if !tool_calls.is_empty() {
                m["tool_calls"] = tool_calls
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": c.arguments},
                        })
                    })
                    .collect();
            }
            m
        }
        Message::Tool { call_id, content } => {
            json!({"role": "tool", "tool_call_id": call_id, "content": content})
        }
    }
}

#[async_trait]
impl ModelProvider for OpenAiProvider {
    fn name(&self) -> &str {
        &self.name
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        allowance: Duration,
    ) -> Result<ModelResponse, Failure> {
        let allowance = allowance.min(self.timeout);
        if allowance.is_zero() {
            return Err(Failure::new(&self.name, Category::BudgetExhausted)
                .with_human_message("no time left for a model call"));
        }
        let url = format!("{}/chat/completions", self.base_url);
        let mut builder = self
            .client
            .post(&url)
            .header(DEADLINE_HEADER, allowance.as_millis().to_string())
            .json(&Self::body(request))
            .timeout(allowance);
        if let Some(key) = &self.api_key {
            builder = builder.bearer_auth(key);
        }
        let started = StdInstant::now();
        let response = builder
            .send()
            .await
            .map_err(|e| transport_failure(&self.name, &e, started.elapsed(), allowance))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let text = response
            .text()
            .await
            .map_err(|e| transport_failure(&self.name, &e, started.elapsed(), allowance))?;
        if !(200..300).contains(&status) {
            return Err(http_failure(
                &self.name,
                status,
                retry_after.as_deref(),
                &text,
            ));
        }
        parse_response(&self.name, &text)
    }
}

fn transport_failure(
    name: &str,
    e: &reqwest::Error,
    elapsed: Duration,
    allowance: Duration,
) -> Failure {
    let (kind, phase) = if e.is_connect() {
        (TransportError::Refused, TransportPhase::BeforeSend)
    } else if e.is_timeout() || elapsed >= allowance {
        (TransportError::Timeout, TransportPhase::AfterSend)
    } else {
        (TransportError::Reset, TransportPhase::AfterSend)
    };
    Failure::from_transport(name, kind, phase).with_human_message(format!("{name}: {e}"))
}

/// Classifies an error answer, reading the OpenAI error body for what the
/// status alone cannot say (context length, content filter).
fn http_failure(name: &str, status: u16, retry_after: Option<&str>, body: &str) -> Failure {
    let error = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("error").cloned())
        .unwrap_or(Value::Null);
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
    let lower = message.to_ascii_lowercase();
    let human = format!("{name} answered HTTP {status}: {}", truncate(message, 300));
    if code == "context_length_exceeded" || lower.contains("maximum context length") {
        return Failure::new(name, Category::ContextOverflow).with_human_message(human);
    }
    if code == "content_filter" || code == "content_policy_violation" {
        return Failure::new(name, Category::ContentBlocked).with_human_message(human);
    }
    match Failure::from_http_status(name, status, retry_after, SystemTime::now()) {
        Some(f) => f.with_human_message(human),
        None => Failure::new(name, Category::Unknown).with_human_message(human),
    }
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}

/// Reads a Chat Completions answer. A body that is not one is a retryable
/// failure (a proxy in between may have mangled it), never a panic.
fn parse_response(name: &str, text: &str) -> Result<ModelResponse, Failure> {
    let malformed = |why: &str| {
        Failure::new(name, Category::Transient).with_human_message(format!(
            "{name} returned a malformed completion ({why}): {}",
            truncate(text, 200)
        ))
    };
    let body: Value = serde_json::from_str(text).map_err(|_| malformed("not JSON"))?;
    let choice = body
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| malformed("no choices"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| malformed("no message"))?;
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut tool_calls = Vec::new();
    if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in calls.iter().enumerate() {
            let function = call.get("function").unwrap_or(&Value::Null);
            let name_field = function.get("name").and_then(Value::as_str);
            let Some(tool) = name_field else {
                return Err(malformed("tool call without a function name"));
            };
            let arguments = match function.get("arguments") {
                Some(Value::String(raw)) => raw.clone(),
                Some(Value::Null) | None => String::from("{}"),
                Some(other) => other.to_string(),
            };
            tool_calls.push(ToolCall {
                id: call
                    .get("id")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
                    .unwrap_or_else(|| format!("call_{i}")),
                name: tool.to_owned(),
                arguments,
            });
        }
    }
    let finish = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") => FinishReason::Stop,
        Some("tool_calls") | Some("function_call") => FinishReason::ToolCalls,
        Some("length") => FinishReason::Length,
        Some("content_filter") => FinishReason::ContentFilter,
        _ if !tool_calls.is_empty() => FinishReason::ToolCalls,
        _ => FinishReason::Other,
    };
    let usage = body.get("usage").unwrap_or(&Value::Null);
    let tokens = |field: &str| usage.get(field).and_then(Value::as_u64).unwrap_or(0);
    Ok(ModelResponse {
        text: content,
        tool_calls,
        finish,
        usage: TokenUsage {
            input: tokens("prompt_tokens"),
            output: tokens("completion_tokens"),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tool_calls_usage_and_finish_reason() {
        let r = parse_response(
            "p",
            r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"c1","type":"function","function":{"name":"get_order","arguments":"{\"order_id\":\"A\"}"}}]},
                "finish_reason":"tool_calls"}],"usage":{"prompt_tokens":12,"completion_tokens":3}}"#,
        )
        .unwrap();
        assert_eq!(r.tool_calls[0].name, "get_order");
        assert_eq!(r.tool_calls[0].arguments, r#"{"order_id":"A"}"#);
        assert_eq!(r.finish, FinishReason::ToolCalls);
        assert_eq!(
            r.usage,
            TokenUsage {
                input: 12,
                output: 3
            }
        );
    }

    #[test]
    fn malformed_completions_are_failures_not_panics() {
        for body in [
            "",
            "null",
            "{}",
            r#"{"choices":[]}"#,
            r#"{"choices":[{"message":{"tool_calls":[{"function":{}}]}}]}"#,
        ] {
            let f = parse_response("p", body).unwrap_err();
            assert_eq!(f.category(), Category::Transient, "{body}");
        }
    }

    #[test]
    fn error_bodies_refine_the_status() {
        let ctx = http_failure(
            "p",
            400,
            None,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens","code":"context_length_exceeded"}}"#,
        );
        assert_eq!(ctx.category(), Category::ContextOverflow);
        assert!(!ctx.model_message().contains("8192"));
        let rl = http_failure("p", 429, Some("2"), r#"{"error":{"message":"slow down"}}"#);
        assert_eq!(rl.category(), Category::RateLimited);
        assert_eq!(rl.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(
            http_failure("p", 401, None, "nope").category(),
            Category::Unauthorized
        );
        assert!(!http_failure("p", 422, None, "").retryable());
        assert!(http_failure("p", 503, None, "").retryable());
    }

    #[test]
    fn request_body_carries_tools_and_tool_results() {
        let req = ModelRequest {
            model: "m".into(),
            messages: vec![
                Message::User {
                    content: "hi".into(),
                },
                Message::Assistant {
                    content: None,
                    tool_calls: vec![ToolCall {
                        id: "c".into(),
                        name: "t".into(),
                        arguments: "{}".into(),
                    }],
                },
                Message::Tool {
                    call_id: "c".into(),
                    content: "fact".into(),
                },
            ],
            tools: vec![json!({"type": "function"})],
            max_tokens: Some(100),
        };
        let body = OpenAiProvider::body(&req);
        assert_eq!(
            body["messages"][1]["tool_calls"][0]["function"]["name"],
            "t"
        );
        assert_eq!(body["messages"][2]["tool_call_id"], "c");
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(body["max_tokens"], 100);
    }
}

//! An MCP answer, read into the failure contract (see the module docs of
//! [`super`] for the table).

use std::time::Duration;

use rein_core::{Category, Effect, Failure};
use rmcp::ServiceError;
use rmcp::model::{CallToolResult, ErrorCode};
use serde_json::{Map, Value, json};

use super::session::ConnectError;
use crate::tool::{ErrorBody, ToolOutput};

/// The longest piece of a server's own error text kept in a failure's
/// human message.
const MESSAGE_CHARS: usize = 300;

/// A result: the tool's value, or its failure when it says `isError`.
pub(super) fn result(
    name: &str,
    result: CallToolResult,
    max_bytes: usize,
) -> Result<ToolOutput, Failure> {
    let is_error = result.is_error == Some(true);
    let value = result_value(&result);
    if is_error {
        return Err(tool_error(name, &value));
    }
    let bytes = serde_json::to_vec(&value).unwrap_or_default();
    let (mut result, truncated) = crate::tool::http::shape_result(&bytes, max_bytes);
    // Known secrets go, as for HTTP and command tools.
    rein_core::redact::known_json(&mut result);
    Ok(ToolOutput {
        result,
        truncated,
        replayed: false,
    })
}

/// What the model is given of a result: its `structuredContent` when the
/// server sent one (the typed answer), else its content blocks.
fn result_value(result: &CallToolResult) -> Value {
    if let Some(structured) = &result.structured_content {
        return structured.clone();
    }
    let blocks: Vec<Value> = result
        .content
        .iter()
        .filter_map(|block| serde_json::to_value(block).ok())
        .map(block_value)
        .collect();
    match <[Value; 1]>::try_from(blocks) {
        Ok([one]) => one,
        Err(blocks) if blocks.is_empty() => Value::Null,
        Err(blocks) => json!({ "content": blocks }),
    }
}

/// One content block as the model sees it: text as itself (parsed when it
/// is JSON), binary content as a note of its type and size (base64 would
/// spend the model's tokens on noise), resources by their URI.
fn block_value(block: Value) -> Value {
    let kind = block
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match kind {
        "text" => {
            let text = block
                .get("text")
                .and_then(Value::as_str)
                .unwrap_or_default();
            serde_json::from_str::<Value>(text)
                .ok()
                .filter(|v| v.is_object() || v.is_array())
                .unwrap_or_else(|| json!({ "text": text }))
        }
        "image" | "audio" => {
            let bytes = block
                .get("data")
                .and_then(Value::as_str)
                .map_or(0, |data| data.len() / 4 * 3);
            json!({
                "type": kind,
                "mime_type": block.get("mimeType").cloned().unwrap_or(Value::Null),
                "bytes": bytes,
                "note": format!("{kind} content is not passed to the model"),
            })
        }
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or(Value::Null);
            let mut kept = Map::new();
            for field in ["uri", "mimeType", "text"] {
                if let Some(v) = resource.get(field) {
                    kept.insert(field.to_owned(), v.clone());
                }
            }
            json!({ "type": "resource", "resource": kept })
        }
        "resource_link" => {
            let mut kept = Map::new();
            for field in ["uri", "name", "description", "mimeType"] {
                if let Some(v) = block.get(field) {
                    kept.insert(field.to_owned(), v.clone());
                }
            }
            kept.insert("type".to_owned(), "resource_link".into());
            Value::Object(kept)
        }
        _ => block,
    }
}

/// A result with `isError`: the tool's structured error when it sent one
/// (as structured content, or as the JSON of its text); a protocol error
/// the server's SDK reported as a result; else `unknown` with the effect
/// unknown — the tool ran, and only it knows how far.
fn tool_error(name: &str, value: &Value) -> Failure {
    if let Ok(ErrorBody { error }) = serde_json::from_value::<ErrorBody>(value.clone()) {
        let mut f = Failure::new(name, error.category)
            .with_effect(error.effect.unwrap_or(Effect::MaybeApplied));
        if let Some(retryable) = error.retryable {
            f = f.with_retryable(retryable);
        }
        if let Some(ms) = error.retry_after_ms {
            f = f.with_retry_after(Duration::from_millis(ms));
        }
        let message = error.message.unwrap_or_default();
        return f.with_human_message(format!("{name} reported an error: {}", short(&message)));
    }
    let text = match value.get("text").and_then(Value::as_str) {
        Some(text) => text.to_owned(),
        None => value.to_string(),
    };
    if let Some(refused) = sdk_refusal(name, &text) {
        return refused;
    }
    Failure::new(name, Category::Unknown)
        .with_retryable(false)
        .with_effect(Effect::MaybeApplied)
        .with_human_message(format!("{name} reported an error: {}", short(&text)))
}

/// A JSON-RPC refusal the server's SDK turned into an `isError` result:
/// the TypeScript SDK's `McpServer` answers arguments that fail the
/// tool's schema, and an unknown tool, with the text `MCP error -32602:
/// …` before the tool's handler runs. Such a call did not apply.
fn sdk_refusal(name: &str, text: &str) -> Option<Failure> {
    let code = text
        .strip_prefix("MCP error ")?
        .split(':')
        .next()?
        .trim()
        .parse::<i32>()
        .ok()?;
    let category = match ErrorCode(code) {
        ErrorCode::INVALID_PARAMS => Category::InvalidArguments,
        ErrorCode::METHOD_NOT_FOUND => Category::NotFound,
        _ => return None,
    };
    Some(
        Failure::new(name, category)
            .with_effect(Effect::NotApplied)
            .with_retryable(false)
            .with_human_message(format!(
                "{name}: the MCP server refused the call: {}",
                short(text)
            )),
    )
}

/// A call that failed in the protocol or the transport.
pub(super) fn service_error(name: &str, e: &ServiceError) -> Failure {
    let (category, effect, retryable, what) = match e {
        ServiceError::McpError(data) => {
            let (category, effect, retryable) = match data.code {
                ErrorCode::INVALID_PARAMS => {
                    (Category::InvalidArguments, Effect::NotApplied, false)
                }
                ErrorCode::METHOD_NOT_FOUND => (Category::NotFound, Effect::NotApplied, false),
                ErrorCode::INVALID_REQUEST | ErrorCode::PARSE_ERROR => {
                    (Category::Unknown, Effect::NotApplied, false)
                }
                // The TypeScript SDK's RequestTimeout.
                ErrorCode(-32001) => (Category::Timeout, Effect::MaybeApplied, true),
                _ => (Category::Unknown, Effect::MaybeApplied, false),
            };
            (
                category,
                effect,
                retryable,
                format!(
                    "answered JSON-RPC error {}: {}",
                    data.code.0,
                    short(&data.message)
                ),
            )
        }
        // The request never left: the connection was already gone.
        ServiceError::TransportSend(e) => (
            Category::Transient,
            Effect::NotApplied,
            true,
            format!("could not be sent the call: {e}"),
        ),
        // Sent, and the connection closed before an answer: the server
        // died or dropped us mid-call.
        ServiceError::TransportClosed => (
            Category::Transient,
            Effect::MaybeApplied,
            true,
            "closed the connection before answering (the server stopped?)".to_owned(),
        ),
        ServiceError::Timeout { timeout } => (
            Category::Timeout,
            Effect::MaybeApplied,
            true,
            format!("did not answer within {timeout:?}"),
        ),
        ServiceError::Cancelled { reason } => (
            Category::Cancelled,
            Effect::MaybeApplied,
            false,
            format!(
                "cancelled the call: {}",
                reason.as_deref().unwrap_or("no reason given")
            ),
        ),
        other => (
            Category::Unknown,
            Effect::MaybeApplied,
            false,
            format!("failed: {}", short(&other.to_string())),
        ),
    };
    Failure::new(name, category)
        .with_effect(effect)
        .with_retryable(retryable)
        .with_human_message(format!("{name}: the MCP server {what}"))
}

/// No connection could be opened: nothing was sent.
pub(super) fn not_connected(name: &str, e: &ConnectError) -> Failure {
    let (category, retryable) = match e {
        ConnectError::Unsupported(_) => (Category::Unknown, false),
        _ => (Category::Transient, true),
    };
    Failure::new(name, category)
        .with_effect(Effect::NotApplied)
        .with_retryable(retryable)
        .with_human_message(format!("{name} was not called: {e}"))
}

/// The JSON type of `v`, for messages.
pub(super) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `text` cut to [`MESSAGE_CHARS`] characters, on one line.
fn short(text: &str) -> String {
    let one_line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MESSAGE_CHARS)
        .collect();
    if text.chars().count() > MESSAGE_CHARS {
        format!("{one_line}…")
    } else {
        one_line
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{ContentBlock as Content, ErrorData};

    use super::*;

    #[test]
    fn text_json_and_binary_content_become_values_the_model_can_read() {
        let r = CallToolResult::success(vec![Content::text(r#"{"order":"A-1"}"#)]);
        assert_eq!(
            result("t", r, 1000).unwrap().result,
            json!({"order": "A-1"})
        );
        let r = CallToolResult::success(vec![Content::text("The sum is 3.")]);
        assert_eq!(
            result("t", r, 1000).unwrap().result,
            json!({"text": "The sum is 3."})
        );
        let r = CallToolResult::success(vec![
            Content::text("a picture"),
            Content::image("aGVsbG8h", "image/png"),
        ]);
        let v = result("t", r, 1000).unwrap().result;
        assert_eq!(v["content"][1]["type"], "image");
        assert_eq!(v["content"][1]["bytes"], 6);
        assert!(v.to_string().find("aGVsbG8h").is_none());
    }

    #[test]
    fn a_long_result_is_truncated_and_says_so() {
        let r = CallToolResult::success(vec![Content::text("x".repeat(5000))]);
        let out = result("t", r, 100).unwrap();
        assert!(out.truncated);
        assert!(out.result.get("_truncated").is_some());
    }

    #[test]
    fn is_error_reads_the_tools_structured_error_or_is_unknown_and_maybe_applied() {
        let r = CallToolResult::error(vec![Content::text(
            r#"{"error":{"category":"conflict","effect":"not_applied","message":"locked"}}"#,
        )]);
        let f = result("t", r, 1000).unwrap_err();
        assert_eq!(f.category(), Category::Conflict);
        assert_eq!(f.effect(), Effect::NotApplied);
        let r = CallToolResult::error(vec![Content::text(
            "MCP error -32602: Input validation error: expected number",
        )]);
        let f = result("t", r, 1000).unwrap_err();
        assert_eq!(f.category(), Category::InvalidArguments);
        assert_eq!(f.effect(), Effect::NotApplied);
        let r = CallToolResult::error(vec![Content::text("disk full")]);
        let f = result("t", r, 1000).unwrap_err();
        assert_eq!(f.category(), Category::Unknown);
        assert_eq!(f.effect(), Effect::MaybeApplied);
        assert!(!f.retryable());
        assert!(f.human_message().contains("disk full"));
    }

    #[test]
    fn protocol_errors_say_whether_the_call_applied() {
        let f = service_error(
            "t",
            &ServiceError::McpError(ErrorData::invalid_params("bad a", None)),
        );
        assert_eq!(
            (f.category(), f.effect()),
            (Category::InvalidArguments, Effect::NotApplied)
        );
        let f = service_error("t", &ServiceError::TransportClosed);
        assert_eq!(
            (f.category(), f.effect()),
            (Category::Transient, Effect::MaybeApplied)
        );
        let f = not_connected("t", &ConnectError::Timeout(Duration::from_secs(1)));
        assert_eq!(
            (f.category(), f.effect()),
            (Category::Transient, Effect::NotApplied)
        );
    }
}

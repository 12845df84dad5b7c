//! Continuations: a request whose last message is the assistant's text so
//! far, which the model extends instead of answering a new turn.
//!
//! The Messages API continues any last assistant message (its "prefill");
//! an OpenAI-compatible server only when told: `"prefix": true` on that
//! message (Mistral, DeepSeek) or `"continue_final_message": true` on the
//! request (vLLM). A real model continues its own words, so the mock
//! answers a scripted text that begins with the prefix from where the
//! prefix ends (leading whitespace the prefix left out included); any other
//! text is answered whole, as a model that wrote something else would.

use serde_json::Value;

use super::AssistantMessage;

/// The text `request` asks the model to continue, if any: its last
/// message's, when that is the assistant's and (unless `native`, the
/// Messages API) marked as a prefix.
pub(crate) fn prefix(request: &Value, native: bool) -> Option<String> {
    let last = request.get("messages")?.as_array()?.last()?;
    if last.get("role").and_then(Value::as_str) != Some("assistant") {
        return None;
    }
    let marked = last.get("prefix").and_then(Value::as_bool) == Some(true)
        || request
            .get("continue_final_message")
            .and_then(Value::as_bool)
            == Some(true);
    if !native && !marked {
        return None;
    }
    match last.get("content")? {
        Value::String(text) => Some(text.clone()),
        Value::Array(blocks) => Some(
            blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect(),
        ),
        _ => None,
    }
}

/// `message` continued from `prefix`.
pub(crate) fn continued(mut message: AssistantMessage, prefix: Option<&str>) -> AssistantMessage {
    if let (Some(prefix), Some(text)) = (prefix, message.content.as_deref())
        && let Some(rest) = text.strip_prefix(prefix)
    {
        message.content = Some(rest.to_owned());
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_marked_or_native_prefix_is_continued() {
        let plain = json!({"messages": [{"role": "user", "content": "go"},
                                        {"role": "assistant", "content": "The quick"}]});
        assert_eq!(prefix(&plain, false), None);
        assert_eq!(prefix(&plain, true).as_deref(), Some("The quick"));
        let marked = json!({"messages": [{"role": "assistant", "content": "The", "prefix": true}]});
        assert_eq!(prefix(&marked, false).as_deref(), Some("The"));
        let blocks = json!({"messages": [{"role": "assistant",
                                          "content": [{"type": "text", "text": "The"}]}]});
        assert_eq!(prefix(&blocks, true).as_deref(), Some("The"));
    }
}

//! A whole Messages API answer, read into a [`ModelResponse`].

use rein_core::Failure;
use rein_core::wire::anthropic as wire;

use crate::provider::http::malformed;
use crate::provider::{FinishReason, ModelResponse, TokenUsage, ToolCall};

/// A Messages API `stop_reason`.
pub(super) fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" => FinishReason::Stop,
        "stop_sequence" => FinishReason::StopSequence,
        "tool_use" => FinishReason::ToolCalls,
        // Both cut the output short of what the model meant to write.
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

/// Reads a Messages API answer ([`wire::Message`]); a body that is not one
/// is a retryable failure, never a panic. The input of a `tool_use` of the
/// `answer` tool (see `Prepared::answer`) is the answer's text, serialised
/// JSON, not a tool call; a turn whose only tool use is that one finishes
/// `stop`, as the OpenAI model answering the same `response_format` would.
pub(super) fn parse_message(
    name: &str,
    text: &str,
    answer_tool: Option<&str>,
) -> Result<ModelResponse, Failure> {
    let malformed = |why: &str| malformed(name, why, text);
    let body: wire::Message = serde_json::from_str(text).map_err(|e| {
        if e.is_syntax() || e.is_eof() {
            malformed("not JSON")
        } else {
            malformed(&format!("not a message ({e})"))
        }
    })?;
    let mut answer = String::new();
    let mut tool_calls = Vec::new();
    let mut answered = false;
    for (i, block) in body.content.into_iter().enumerate() {
        match block {
            wire::Block::Text { text } => answer.push_str(&text),
            wire::Block::ToolUse { id, name, input } => {
                let Some(tool) = name else {
                    return Err(malformed("tool_use block without a name"));
                };
                if answer_tool == Some(tool.as_str()) {
                    answered = true;
                    answer.push_str(&input.to_string());
                    continue;
                }
                tool_calls.push(ToolCall {
                    id: id.unwrap_or_else(|| format!("call_{i}")),
                    name: tool,
                    // An input the answer left out is no arguments.
                    arguments: if input.is_null() {
                        String::from("{}")
                    } else {
                        input.to_string()
                    },
                });
            }
            // Thinking and server-tool blocks are not part of the answer.
            wire::Block::Other => {}
        }
    }
    let finish = match body.stop_reason.as_deref().map(stop_reason) {
        Some(FinishReason::Other) | None if !tool_calls.is_empty() => FinishReason::ToolCalls,
        Some(FinishReason::ToolCalls) if answered && tool_calls.is_empty() => FinishReason::Stop,
        Some(finish) => finish,
        None => FinishReason::Other,
    };
    Ok(ModelResponse {
        text: (!answer.is_empty()).then_some(answer),
        tool_calls,
        finish,
        stop_sequence: body.stop_sequence,
        usage: TokenUsage {
            input: body.usage.billed_input().unwrap_or(0),
            output: body.usage.output_tokens.unwrap_or(0),
        },
    })
}

#[cfg(test)]
mod tests {
    use rein_core::Category;

    use super::*;

    #[test]
    fn parses_text_tool_use_stop_reason_and_usage() {
        let r = parse_message(
            "claude",
            r#"{"id":"m","type":"message","role":"assistant","content":[
                {"type":"thinking","thinking":"hm"},
                {"type":"text","text":"On it."},
                {"type":"tool_use","id":"toolu_1","name":"get_order","input":{"order_id":"A"}}],
                "stop_reason":"tool_use","usage":{"input_tokens":10,"cache_read_input_tokens":5,"output_tokens":3}}"#,
            None,
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
            None,
        )
        .unwrap();
        assert!(cut.is_truncated());
    }

    #[test]
    fn a_stop_sequence_is_its_own_finish_with_the_sequence_it_wrote() {
        let r = parse_message(
            "claude",
            r#"{"content":[{"type":"text","text":"1, 2, 3"}],"stop_reason":"stop_sequence","stop_sequence":"END"}"#,
            None,
        )
        .unwrap();
        assert_eq!(r.finish, FinishReason::StopSequence);
        assert_eq!(r.stop_sequence.as_deref(), Some("END"));
        assert!(!r.is_truncated());
        let natural = parse_message(
            "claude",
            r#"{"content":[{"type":"text","text":"done"}],"stop_reason":"end_turn","stop_sequence":null}"#,
            None,
        )
        .unwrap();
        assert_eq!(natural.finish, FinishReason::Stop);
        assert_eq!(natural.stop_sequence, None);
    }

    #[test]
    fn the_answer_tool_s_input_is_the_answer_s_text() {
        let body = r#"{"content":[{"type":"tool_use","id":"toolu_1","name":"order",
            "input":{"id":"A-1","qty":2}}],"stop_reason":"tool_use",
            "usage":{"input_tokens":10,"output_tokens":3}}"#;
        let r = parse_message("claude", body, Some("order")).unwrap();
        assert_eq!(r.text.as_deref(), Some(r#"{"id":"A-1","qty":2}"#));
        assert!(r.tool_calls.is_empty());
        assert_eq!(r.finish, FinishReason::Stop);
        // Without an answer tool it is a tool call, as always.
        let r = parse_message("claude", body, None).unwrap();
        assert_eq!(r.text, None);
        assert_eq!(r.tool_calls[0].name, "order");
        assert_eq!(r.finish, FinishReason::ToolCalls);
        // Beside a call of the caller's tool: both, and the turn's finish
        // is the tool call's.
        let both = r#"{"content":[
            {"type":"tool_use","id":"t1","name":"get_order","input":{"order_id":"A"}},
            {"type":"tool_use","id":"t2","name":"order","input":{}}],"stop_reason":"tool_use"}"#;
        let r = parse_message("claude", both, Some("order")).unwrap();
        assert_eq!(r.text.as_deref(), Some("{}"));
        assert_eq!(r.tool_calls.len(), 1);
        assert_eq!(r.finish, FinishReason::ToolCalls);
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
            let f = parse_message("claude", body, None).unwrap_err();
            assert_eq!(f.category(), Category::Transient, "{body}");
        }
    }
}

//! The Messages API's stream events, decoded into rein's deltas.

use rein_core::Failure;
use serde_json::Value;

use super::message::{input_tokens, parse_message, stop_reason, stop_sequence};
use crate::provider::ModelResponse;
use crate::provider::http::stream_error_failure;
use crate::provider::sse::{Decoder, SseEvent, Update, unparseable};
use crate::provider::stream::{Delta, ToolCallDelta};

/// What a content block is, by its index in the message.
#[derive(Debug, Clone, Copy)]
pub(super) enum Block {
    Text,
    /// A tool call, numbered among the turn's tool calls.
    Tool(usize),
    /// Anything rein does not read (thinking, server tools).
    Other,
}

/// Reads Messages API stream events.
pub(super) struct EventDecoder {
    pub(super) name: String,
    /// `(index, kind)` of every block started.
    pub(super) blocks: Vec<(u64, Block)>,
    pub(super) tools: usize,
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
                let delta = data.get("delta").unwrap_or(&Value::Null);
                if let Some(reason) = delta.get("stop_reason").and_then(Value::as_str) {
                    updates.push(Update::Finish(stop_reason(reason)));
                }
                if let Some(sequence) = stop_sequence(delta) {
                    updates.push(Update::StopSequence(sequence));
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
    use rein_core::Category;

    use super::*;

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

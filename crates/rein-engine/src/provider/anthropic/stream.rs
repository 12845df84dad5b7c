//! The Messages API's stream events, decoded into rein's deltas.
//!
//! The answer tool of a `response_format` (see `Prepared::answer`) streams
//! as text: its `input_json_delta` pieces are the answer's text deltas, so
//! a streamed structured answer reaches the client as content, as an
//! OpenAI model's does, and a turn whose only tool use is the answer
//! finishes `stop`.

use rein_core::Failure;
use serde_json::Value;

use super::message::{input_tokens, parse_message, stop_reason, stop_sequence};
use crate::provider::http::stream_error_failure;
use crate::provider::sse::{Decoder, SseEvent, Update, unparseable};
use crate::provider::stream::{Delta, ToolCallDelta};
use crate::provider::{FinishReason, ModelResponse};

/// What a content block is, by its index in the message.
#[derive(Debug, Clone, Copy)]
pub(super) enum Block {
    Text,
    /// A tool call, numbered among the turn's tool calls.
    Tool(usize),
    /// The answer tool's input: the answer's text.
    Answer,
    /// Anything rein does not read (thinking, server tools).
    Other,
}

/// Reads Messages API stream events.
pub(super) struct EventDecoder {
    name: String,
    /// The answer tool's name, when the request has one.
    answer: Option<String>,
    /// `(index, kind)` of every block started.
    blocks: Vec<(u64, Block)>,
    /// Tool calls started (the answer tool's not counted).
    tools: usize,
    /// Whether an answer block started.
    answered: bool,
    /// Whether the answer block being read has sent any text.
    answer_text: bool,
}

impl EventDecoder {
    /// A decoder for the stream of provider `name`, reading the input of
    /// the tool named `answer` as the answer's text.
    pub(super) fn new(name: &str, answer: Option<String>) -> EventDecoder {
        EventDecoder {
            name: name.to_owned(),
            answer,
            blocks: Vec::new(),
            tools: 0,
            answered: false,
            answer_text: false,
        }
    }
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
                    Some("tool_use")
                        if self.answer.is_some()
                            && block.get("name").and_then(Value::as_str)
                                == self.answer.as_deref() =>
                    {
                        self.blocks.push((index, Block::Answer));
                        self.answered = true;
                        // As for a tool call: a start that already carries
                        // the input sends it whole.
                        let text = match block.get("input") {
                            Some(Value::Object(map)) if !map.is_empty() => {
                                Value::Object(map.clone()).to_string()
                            }
                            _ => String::new(),
                        };
                        self.answer_text = !text.is_empty();
                        if self.answer_text {
                            updates.push(Update::Delta(Delta {
                                text: Some(text),
                                tool_calls: Vec::new(),
                            }));
                        }
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
                    (Block::Answer, Some("input_json_delta")) => {
                        let text = piece("partial_json").unwrap_or_default();
                        if !text.is_empty() {
                            self.answer_text = true;
                            updates.push(Update::Delta(Delta {
                                text: Some(text),
                                tool_calls: Vec::new(),
                            }));
                        }
                    }
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
                    let finish = match stop_reason(reason) {
                        FinishReason::ToolCalls if self.answered && self.tools == 0 => {
                            FinishReason::Stop
                        }
                        finish => finish,
                    };
                    updates.push(Update::Finish(finish));
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
            // An answer whose input was empty (`{}`, sent as no piece) is
            // still an answer.
            "content_block_stop" => {
                let block = index.and_then(|i| self.blocks.iter().rev().find(|(b, _)| *b == i));
                if let Some((_, Block::Answer)) = block
                    && !std::mem::replace(&mut self.answer_text, true)
                {
                    updates.push(Update::Delta(Delta {
                        text: Some("{}".to_owned()),
                        tool_calls: Vec::new(),
                    }));
                }
            }
            "message_stop" => updates.push(Update::End),
            "error" => {
                return Err(stream_error_failure(
                    &self.name,
                    data.get("error").unwrap_or(&Value::Null),
                ));
            }
            // `ping`, and types added later.
            _ => {}
        }
        Ok(())
    }

    fn whole(&self, body: &str) -> Result<ModelResponse, Failure> {
        parse_message(&self.name, body, self.answer.as_deref())
    }
}

#[cfg(test)]
mod tests {
    use rein_core::Category;

    use super::*;

    fn decode(events: &[(&str, &str)]) -> Result<Vec<Update>, Failure> {
        decode_with(None, events)
    }

    fn decode_with(answer: Option<&str>, events: &[(&str, &str)]) -> Result<Vec<Update>, Failure> {
        let mut decoder = EventDecoder::new("claude", answer.map(str::to_owned));
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

    fn text_of(updates: &[Update]) -> (String, Vec<FinishReason>, usize) {
        let mut text = String::new();
        let mut finishes = Vec::new();
        let mut calls = 0;
        for update in updates {
            match update {
                Update::Delta(d) => {
                    text.push_str(d.text.as_deref().unwrap_or(""));
                    calls += d.tool_calls.len();
                }
                Update::Finish(f) => finishes.push(*f),
                _ => {}
            }
        }
        (text, finishes, calls)
    }

    #[test]
    fn the_answer_tool_streams_as_text_and_finishes_stop() {
        let events = [
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"order","input":{}}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"id\": \"A"}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"-1\"}"}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
            (
                "message_delta",
                r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":7}}"#,
            ),
        ];
        let (text, finishes, calls) = text_of(&decode_with(Some("order"), &events).unwrap());
        assert_eq!(text, r#"{"id": "A-1"}"#);
        assert_eq!(finishes, [FinishReason::Stop]);
        assert_eq!(calls, 0);
        // Without an answer tool the same events are a tool call.
        let (text, finishes, calls) = text_of(&decode(&events).unwrap());
        assert_eq!(text, "");
        assert_eq!(finishes, [FinishReason::ToolCalls]);
        assert!(calls > 0);
        // An empty input is the empty object.
        let empty = [
            (
                "content_block_start",
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_1","name":"order","input":{}}}"#,
            ),
            (
                "content_block_stop",
                r#"{"type":"content_block_stop","index":0}"#,
            ),
        ];
        let (text, _, _) = text_of(&decode_with(Some("order"), &empty).unwrap());
        assert_eq!(text, "{}");
    }
}

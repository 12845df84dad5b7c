//! The Messages API's stream events, decoded into rein's deltas.
//!
//! The answer tool of a `response_format` (see `Prepared::answer`) streams
//! as text: its `input_json_delta` pieces are the answer's text deltas, so
//! a streamed structured answer reaches the client as content, as an
//! OpenAI model's does, and a turn whose only tool use is the answer
//! finishes `stop`.

use rein_core::Failure;
use rein_core::wire::anthropic as wire;
use serde_json::Value;

use super::message::{parse_message, stop_reason};
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
        match read_event(&self.name, event)? {
            wire::StreamEvent::MessageStart { message } => updates.push(Update::Usage {
                input: message.usage.billed_input(),
                output: message.usage.output_tokens,
            }),
            wire::StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => self.start(index, content_block, updates),
            wire::StreamEvent::ContentBlockDelta { index, delta } => {
                let Some(&(_, block)) = self.blocks.iter().rev().find(|(b, _)| *b == index) else {
                    return Err(unparseable(
                        &self.name,
                        event,
                        "a delta for a block that never started",
                    ));
                };
                self.add(block, delta, updates);
            }
            wire::StreamEvent::MessageDelta { delta, usage, .. } => {
                if let Some(reason) = &delta.stop_reason {
                    let finish = match stop_reason(reason) {
                        FinishReason::ToolCalls if self.answered && self.tools == 0 => {
                            FinishReason::Stop
                        }
                        finish => finish,
                    };
                    updates.push(Update::Finish(finish));
                }
                if let Some(sequence) = delta.stop_sequence {
                    updates.push(Update::StopSequence(sequence));
                }
                updates.push(Update::Usage {
                    input: usage.billed_input(),
                    output: usage.output_tokens,
                });
            }
            // An answer whose input was empty (`{}`, sent as no piece) is
            // still an answer.
            wire::StreamEvent::ContentBlockStop { index } => {
                let block = self.blocks.iter().rev().find(|(b, _)| *b == index);
                if let Some((_, Block::Answer)) = block
                    && !std::mem::replace(&mut self.answer_text, true)
                {
                    updates.push(Update::Delta(Delta {
                        text: Some("{}".to_owned()),
                        tool_calls: Vec::new(),
                    }));
                }
            }
            wire::StreamEvent::MessageStop => updates.push(Update::End),
            wire::StreamEvent::Error { error } => {
                // The error's own type serializes without fail.
                let error = serde_json::to_value(&error).unwrap_or(Value::Null);
                return Err(stream_error_failure(&self.name, &error));
            }
            // `ping`, and types added later.
            wire::StreamEvent::Ping | wire::StreamEvent::Other => {}
        }
        Ok(())
    }

    fn whole(&self, body: &str) -> Result<ModelResponse, Failure> {
        parse_message(&self.name, body, self.answer.as_deref())
    }
}

impl EventDecoder {
    /// A block starts at `index`: text, the answer tool's input, a tool
    /// call, or something rein does not read.
    fn start(&mut self, index: u64, block: wire::Block, updates: &mut Vec<Update>) {
        // A start that already carries a tool's input sends it whole; it
        // usually arrives as `input_json_delta` pieces after an empty one.
        let whole_input = |input: &Value| match input {
            Value::Object(map) if !map.is_empty() => input.to_string(),
            _ => String::new(),
        };
        match block {
            wire::Block::Text { text } => {
                self.blocks.push((index, Block::Text));
                updates.push(Update::Delta(Delta {
                    text: Some(text),
                    tool_calls: Vec::new(),
                }));
            }
            wire::Block::ToolUse { name, input, .. }
                if self.answer.is_some() && name == self.answer =>
            {
                self.blocks.push((index, Block::Answer));
                self.answered = true;
                let text = whole_input(&input);
                self.answer_text = !text.is_empty();
                if self.answer_text {
                    updates.push(Update::Delta(Delta {
                        text: Some(text),
                        tool_calls: Vec::new(),
                    }));
                }
            }
            wire::Block::ToolUse { id, name, input } => {
                let tool = self.tools;
                self.tools += 1;
                self.blocks.push((index, Block::Tool(tool)));
                updates.push(Update::Delta(Delta {
                    text: None,
                    tool_calls: vec![ToolCallDelta {
                        index: tool,
                        id,
                        name,
                        arguments: whole_input(&input),
                    }],
                }));
            }
            wire::Block::Other => self.blocks.push((index, Block::Other)),
        }
    }

    /// More of the started `block`.
    fn add(&mut self, block: Block, delta: wire::BlockDelta, updates: &mut Vec<Update>) {
        match (block, delta) {
            (Block::Text, wire::BlockDelta::TextDelta { text }) => {
                updates.push(Update::Delta(Delta {
                    text: Some(text),
                    tool_calls: Vec::new(),
                }));
            }
            (Block::Answer, wire::BlockDelta::InputJsonDelta { partial_json })
                if !partial_json.is_empty() =>
            {
                self.answer_text = true;
                updates.push(Update::Delta(Delta {
                    text: Some(partial_json),
                    tool_calls: Vec::new(),
                }));
            }
            (Block::Tool(tool), wire::BlockDelta::InputJsonDelta { partial_json }) => {
                updates.push(Update::Delta(Delta {
                    text: None,
                    tool_calls: vec![ToolCallDelta {
                        index: tool,
                        id: None,
                        name: None,
                        arguments: partial_json,
                    }],
                }));
            }
            // Citations, thinking and signatures are not the answer.
            _ => {}
        }
    }
}

/// One event, read as its type. A compatible server that names the event
/// only in the SSE `event:` line (the data's `type` absent or not a
/// string) is read by that name, and data that names no event at all is
/// skipped; only then is the data read twice.
fn read_event(name: &str, event: &SseEvent) -> Result<wire::StreamEvent, Failure> {
    let typed = match serde_json::from_str::<wire::StreamEvent>(&event.data) {
        Ok(read) => return Ok(read),
        Err(e) => e,
    };
    let refused = || unparseable(name, event, &typed.to_string());
    let Ok(mut data) = serde_json::from_str::<serde_json::Map<String, Value>>(&event.data) else {
        return Err(refused());
    };
    if data.get("type").is_some_and(Value::is_string) {
        return Err(refused());
    }
    let Some(kind) = &event.event else {
        return Ok(wire::StreamEvent::Other);
    };
    data.insert("type".to_owned(), Value::String(kind.clone()));
    serde_json::from_value(Value::Object(data))
        .map_err(|e| unparseable(name, event, &e.to_string()))
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

    /// What a compatible server leaves out, or names only in the SSE
    /// line, is read as Anthropic's API would have said it; an error's
    /// code refines its category.
    #[test]
    fn decoder_tolerates_a_compatible_servers_omissions() {
        let updates = decode(&[
            (
                "message_start",
                r#"{"type":"message_start","message":{"id":"m","usage":null}}"#,
            ),
            (
                "content_block_start",
                r#"{"index":0,"content_block":{"type":"text","text":""}}"#,
            ),
            (
                "content_block_delta",
                r#"{"type":null,"index":0,"delta":{"type":"text_delta","text":"hi"}}"#,
            ),
            ("message_delta", r#"{"type":"message_delta","usage":null}"#),
            ("", r#"{}"#),
        ])
        .unwrap();
        let (text, finishes, _) = text_of(&updates);
        assert_eq!((text.as_str(), finishes.len()), ("hi", 0));
        let skipped = decode_events(&[(None, r#"{"index":0}"#)]).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        let filtered = decode(&[(
            "error",
            r#"{"type":"error","error":{"type":"invalid_request_error","code":"context_length_exceeded","message":"too long"}}"#,
        )])
        .unwrap_err();
        assert_eq!(filtered.category(), Category::ContextOverflow);
        let bare = decode(&[("error", r#"{"type":"error"}"#)]).unwrap_err();
        assert!(
            bare.human_message().contains("sent an error"),
            "{}",
            bare.human_message()
        );
    }

    fn decode_events(events: &[(Option<&str>, &str)]) -> Result<Vec<Update>, Failure> {
        let mut decoder = EventDecoder::new("claude", None);
        let mut updates = Vec::new();
        for (event, data) in events {
            decoder.decode(
                &SseEvent {
                    event: event.map(str::to_owned),
                    data: (*data).to_owned(),
                },
                &mut updates,
            )?;
        }
        Ok(updates)
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

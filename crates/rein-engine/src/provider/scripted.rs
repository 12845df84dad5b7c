//! The scripted provider: replays a file of model turns.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use rein_core::{Category, Clock, Failure};
use serde::Deserialize;
use serde_json::Value;

use super::{FinishReason, ModelProvider, ModelRequest, ModelResponse, TokenUsage, ToolCall};
use crate::{SystemClock, Timer};

/// A script that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    // NOTE: the I/O error is part of the message and deliberately not a
    // `#[source]`: a report that prints the error chain would otherwise
    // say the cause twice.
    #[error("cannot read model script {path}: {error}")]
    Read {
        /// The script's path.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The file is not a valid script.
    #[error("model script {path} is invalid: {reason}")]
    Invalid {
        /// The script's path.
        path: PathBuf,
        /// What is wrong, with line and column.
        reason: String,
    },
}

/// The file format: `{"turns": [...]}`, one entry per model call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Script {
    turns: Vec<Turn>,
}

/// One scripted model call: an answer, or a failure.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Turn {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    tool_calls: Vec<ScriptedCall>,
    #[serde(default)]
    usage: TokenUsage,
    #[serde(default)]
    finish_reason: Option<FinishReason>,
    #[serde(default)]
    error: Option<ScriptedError>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    /// A JSON value, or a string taken verbatim as the raw argument text (to
    /// script malformed or truncated JSON).
    arguments: Value,
}

/// A scripted failure, by HTTP status (classified like a real response) or
/// by category.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedError {
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    category: Option<Category>,
    #[serde(default)]
    retry_after: Option<String>,
    #[serde(default)]
    retry_after_ms: Option<u64>,
}

/// Replays a file of model turns, in order, one per call.
///
/// # Why
///
/// Tests, the demo and trace replay need a model that proposes exactly the
/// calls a scenario requires, deterministically and offline. A scripted
/// failure goes through the same classification as a real HTTP answer, so
/// a scripted 429 exercises the same retry path as a real one. One provider
/// per run: the cursor is the run's position in the script.
pub struct ScriptedProvider {
    name: String,
    turns: Vec<Turn>,
    cursor: Mutex<usize>,
    /// Dates a scripted HTTP-date `Retry-After`.
    clock: Arc<dyn Timer>,
}

impl std::fmt::Debug for ScriptedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptedProvider")
            .field("name", &self.name)
            .field("turns", &self.turns)
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl ScriptedProvider {
    /// Reads a script file.
    ///
    /// # Errors
    ///
    /// [`ScriptError`] when the file cannot be read or is not a script.
    pub fn from_file(name: &str, path: &Path) -> Result<Self, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|error| ScriptError::Read {
            path: path.to_owned(),
            error,
        })?;
        Self::from_json(name, &text).map_err(|reason| ScriptError::Invalid {
            path: path.to_owned(),
            reason,
        })
    }

    /// Parses a script from JSON text; the error says what is wrong where.
    ///
    /// # Errors
    ///
    /// A message with line and column when the text is not a script.
    pub fn from_json(name: &str, text: &str) -> Result<Self, String> {
        let script: Script = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for (i, turn) in script.turns.iter().enumerate() {
            if let Some(err) = &turn.error
                && err.status.is_none()
                && err.category.is_none()
            {
                return Err(format!("turns[{i}].error needs a status or a category"));
            }
        }
        Ok(ScriptedProvider {
            name: name.to_owned(),
            turns: script.turns,
            cursor: Mutex::new(0),
            clock: Arc::new(SystemClock::new()),
        })
    }

    /// Reads the wall clock from `clock` instead of the system clock.
    pub fn with_clock(mut self, clock: Arc<dyn Timer>) -> Self {
        self.clock = clock;
        self
    }

    /// How many turns have been served.
    pub fn served(&self) -> usize {
        self.cursor.lock().map(|c| *c).unwrap_or(0)
    }

    fn next_turn(&self) -> Option<(usize, Turn)> {
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let index = *cursor;
        let turn = self.turns.get(index)?.clone();
        *cursor += 1;
        Some((index, turn))
    }
}

#[async_trait]
impl ModelProvider for ScriptedProvider {
    fn name(&self) -> &str {
        &self.name
    }

    fn resume_at(&self, calls: usize) {
        let mut cursor = self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        *cursor = calls.min(self.turns.len());
    }

    async fn complete(
        &self,
        request: &ModelRequest,
        _allowance: Duration,
    ) -> Result<ModelResponse, Failure> {
        let Some((index, turn)) = self.next_turn() else {
            return Err(
                Failure::new(&self.name, Category::Unknown).with_human_message(format!(
                    "model script exhausted after {} turns",
                    self.turns.len()
                )),
            );
        };
        if let Some(err) = turn.error {
            return Err(scripted_failure(&self.name, &err, self.clock.system_now()));
        }
        let tool_calls: Vec<ToolCall> = turn
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| ToolCall {
                id: call.id.unwrap_or_else(|| format!("call_{index}_{i}")),
                name: call.name,
                arguments: match call.arguments {
                    Value::String(raw) => raw,
                    other => other.to_string(),
                },
            })
            .collect();
        let finish = turn.finish_reason.unwrap_or(if tool_calls.is_empty() {
            FinishReason::Stop
        } else {
            FinishReason::ToolCalls
        });
        let mut usage = turn.usage;
        // Like a real model, a scripted one stops at the output ceiling: the
        // answer is cut (no complete tool call survives) and says so.
        if let Some(max) = request.max_tokens
            && usage.output > max
        {
            usage.output = max;
            return Ok(ModelResponse {
                text: turn.text,
                tool_calls: Vec::new(),
                finish: FinishReason::Length,
                stop_sequence: None,
                usage,
            });
        }
        Ok(ModelResponse {
            text: turn.text,
            tool_calls,
            finish,
            stop_sequence: None,
            usage,
        })
    }
}

fn scripted_failure(name: &str, err: &ScriptedError, now: SystemTime) -> Failure {
    let retry_after_header = err
        .retry_after
        .clone()
        .or_else(|| err.retry_after_ms.map(|ms| ms.div_ceil(1000).to_string()));
    if let Some(status) = err.status
        && let Some(f) = Failure::from_http_status(name, status, retry_after_header.as_deref(), now)
    {
        return f.with_human_message(format!("scripted HTTP {status} from {name}"));
    }
    let category = err.category.unwrap_or(Category::Unknown);
    let mut f =
        Failure::new(name, category).with_human_message(format!("scripted {category} from {name}"));
    if let Some(ms) = err.retry_after_ms {
        f = f.with_retry_after(Duration::from_millis(ms));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> ModelRequest {
        ModelRequest {
            model: "m".into(),
            messages: vec![],
            tools: vec![],
            max_tokens: None,
            options: Default::default(),
            continuation: false,
        }
    }

    fn deadline() -> Duration {
        Duration::from_secs(60)
    }

    #[tokio::test]
    async fn scripted_turns_replay_in_order_then_fail_clearly() {
        let p = ScriptedProvider::from_json(
            "replay",
            r#"{"turns": [
                {"text": "looking", "tool_calls": [{"name": "get_order", "arguments": {"order_id": "A-1"}}],
                 "usage": {"input": 10, "output": 5}},
                {"tool_calls": [{"id": "x", "name": "t", "arguments": "{\"a\": 1, \"b\": "}]},
                {"error": {"status": 429, "retry_after": "3"}},
                {"error": {"category": "context_overflow"}},
                {"text": "done"}
            ]}"#,
        )
        .unwrap();
        let first = p.complete(&request(), deadline()).await.unwrap();
        assert_eq!(first.tool_calls[0].id, "call_0_0");
        assert_eq!(first.tool_calls[0].arguments, r#"{"order_id":"A-1"}"#);
        assert_eq!(first.finish, FinishReason::ToolCalls);
        assert_eq!(first.usage.total(), 15);
        let second = p.complete(&request(), deadline()).await.unwrap();
        assert_eq!(second.tool_calls[0].arguments, r#"{"a": 1, "b": "#);
        let third = p.complete(&request(), deadline()).await.unwrap_err();
        assert_eq!(third.category(), Category::RateLimited);
        assert_eq!(third.retry_after(), Some(Duration::from_secs(3)));
        let fourth = p.complete(&request(), deadline()).await.unwrap_err();
        assert_eq!(fourth.category(), Category::ContextOverflow);
        let fifth = p.complete(&request(), deadline()).await.unwrap();
        assert_eq!(fifth.finish, FinishReason::Stop);
        let done = p.complete(&request(), deadline()).await.unwrap_err();
        assert!(done.human_message().contains("exhausted after 5 turns"));
    }

    #[test]
    fn invalid_script_says_where() {
        let err = ScriptedProvider::from_json("r", r#"{"turns": [{"txt": 1}]}"#).unwrap_err();
        assert!(err.contains("unknown field `txt`"), "{err}");
        assert!(err.contains("line 1"), "{err}");
        let err = ScriptedProvider::from_json("r", r#"{"turns": [{"error": {}}]}"#).unwrap_err();
        assert!(err.contains("turns[0].error"), "{err}");
    }
}

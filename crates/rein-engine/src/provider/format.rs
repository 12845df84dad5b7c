//! `response_format`: the shape a gateway caller asked the answer to have,
//! read once from [`ModelRequest::options`](super::ModelRequest::options),
//! and the check of an answer against it.
//!
//! # Why
//!
//! A client that sends `response_format: {"type": "json_schema", ...}`
//! (the Agents SDK with an `output_type`, Pydantic AI, LangChain's
//! `with_structured_output`) parses the answer's text as that JSON and
//! fails when it is anything else. An OpenAI model honours the member; a
//! model behind another API, or an OpenAI-compatible server that ignores
//! it, may answer prose with a 200. rein's chains switch providers under
//! the caller, so "the answer is JSON of this schema" is checked where the
//! answer is received, whichever link gave it: an answer that is not is a
//! failure of that link ([`FormatError`]), never passed on as if it were
//! the answer asked for.
//!
//! # What is checked
//!
//! | format | the answer's text must be |
//! | --- | --- |
//! | none, `text`, another type | anything: not checked |
//! | `json_object` | a JSON object |
//! | `json_schema` | JSON that fits `json_schema.schema` (when the schema compiles; else JSON) |
//!
//! The schema is checked whether or not `strict` is set: a client that
//! sent a schema parses the answer with it either way. A turn with tool
//! calls is not an answer and is not checked, nor is one cut at the token
//! limit or by a content filter: its finish reason already tells the
//! client it is not a whole answer, as OpenAI's does.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::ModelResponse;
use super::message::FinishReason;

/// The `response_format` of a request, as far as rein reads it.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// `{"type": "text"}`: plain text, as without one.
    Text,
    /// `{"type": "json_object"}`: any JSON object.
    JsonObject,
    /// `{"type": "json_schema", "json_schema": {...}}`: JSON of a schema.
    JsonSchema(JsonSchemaFormat),
    /// A type rein does not know (an OpenAI-compatible server's own):
    /// passed on to OpenAI-compatible providers, not checked.
    Other(String),
}

/// The `json_schema` member of a `json_schema` format.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct JsonSchemaFormat {
    /// The schema's name (`[a-zA-Z0-9_-]`, at most 64, for OpenAI).
    pub name: String,
    /// What the answer is for, if said.
    #[serde(default)]
    pub description: Option<String>,
    /// The answer's JSON Schema; none accepts any JSON.
    #[serde(default)]
    pub schema: Option<Value>,
    /// Whether the provider must keep to the schema exactly (OpenAI's
    /// structured outputs).
    #[serde(default)]
    pub strict: Option<bool>,
}

/// A `response_format` rein cannot read, or an answer that does not have
/// the format asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// The member itself is malformed.
    #[error("`response_format` is not one rein can read: {0}")]
    Unreadable(String),
    /// The answer has no text.
    #[error("the answer has no text, but `response_format` asks for JSON")]
    Empty,
    /// The answer's text is not JSON.
    #[error("the answer is not JSON ({0}), but `response_format` asks for JSON")]
    NotJson(String),
    /// `json_object` asked, another JSON value answered.
    #[error("the answer is JSON but not an object, as `response_format` `json_object` asks")]
    NotObject,
    /// The answer does not fit the schema.
    #[error("the answer does not fit the `{name}` schema of `response_format`: {problems}")]
    Schema {
        /// The schema's name.
        name: String,
        /// Where and how, without quoting the answer.
        problems: String,
    },
}

/// The options member the format is read from.
const MEMBER: &str = "response_format";

impl ResponseFormat {
    /// The format `options` ask for; `None` without one.
    ///
    /// # Errors
    ///
    /// [`FormatError::Unreadable`] for a member without a string `type`,
    /// or a `json_schema` without a readable `json_schema` (a `name`, at
    /// least).
    pub fn of(options: &Map<String, Value>) -> Result<Option<ResponseFormat>, FormatError> {
        let value = match options.get(MEMBER) {
            None | Some(Value::Null) => return Ok(None),
            Some(value) => value,
        };
        let Some(kind) = value.get("type").and_then(Value::as_str) else {
            return Err(FormatError::Unreadable("it has no string `type`".into()));
        };
        Ok(Some(match kind {
            "text" => ResponseFormat::Text,
            "json_object" => ResponseFormat::JsonObject,
            "json_schema" => {
                let member = value.get("json_schema").ok_or_else(|| {
                    FormatError::Unreadable("a `json_schema` format without `json_schema`".into())
                })?;
                let format = JsonSchemaFormat::deserialize(member).map_err(|e| {
                    FormatError::Unreadable(format!("its `json_schema` member: {e}"))
                })?;
                ResponseFormat::JsonSchema(format)
            }
            other => ResponseFormat::Other(other.to_owned()),
        }))
    }

    /// Whether the answer must be JSON.
    pub fn wants_json(&self) -> bool {
        matches!(
            self,
            ResponseFormat::JsonObject | ResponseFormat::JsonSchema(_)
        )
    }

    /// Whether `response` has this format (see the module's table for
    /// what is checked, and what is not).
    ///
    /// # Errors
    ///
    /// What is wrong with the answer, in words that never quote it.
    pub fn check(&self, response: &ModelResponse) -> Result<(), FormatError> {
        if !self.wants_json()
            || !response.tool_calls.is_empty()
            || matches!(
                response.finish,
                FinishReason::Length | FinishReason::ContentFilter
            )
        {
            return Ok(());
        }
        let text = response.text.as_deref().unwrap_or("");
        if text.trim().is_empty() {
            return Err(FormatError::Empty);
        }
        let answer: Value =
            serde_json::from_str(text).map_err(|e| FormatError::NotJson(e.to_string()))?;
        match self {
            ResponseFormat::JsonObject if !answer.is_object() => Err(FormatError::NotObject),
            ResponseFormat::JsonSchema(format) => format.check(&answer),
            _ => Ok(()),
        }
    }
}

impl JsonSchemaFormat {
    /// Whether `answer` fits the schema. A schema that does not compile
    /// (a remote `$ref`, which rein never fetches, or one the provider
    /// would have refused) is not checked: the answer is JSON, which is
    /// what can be known.
    fn check(&self, answer: &Value) -> Result<(), FormatError> {
        let Some(schema) = &self.schema else {
            return Ok(());
        };
        let validator = match jsonschema::options().build(schema) {
            Ok(validator) => validator,
            Err(e) => {
                tracing::debug!(name = %self.name, error = %e,
                    "response_format schema does not compile; the answer is checked as JSON only");
                return Ok(());
            }
        };
        if validator.is_valid(answer) {
            return Ok(());
        }
        let problems = crate::config::schema::problems(&validator, answer)
            .iter()
            .map(|p| {
                if p.path.is_empty() {
                    format!("the answer {}", p.message)
                } else {
                    format!("{} {}", p.path, p.message)
                }
            })
            .collect::<Vec<_>>()
            .join("; ");
        Err(FormatError::Schema {
            name: self.name.clone(),
            problems,
        })
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::provider::{TokenUsage, ToolCall};

    fn options(format: Value) -> Map<String, Value> {
        let mut options = Map::new();
        options.insert(MEMBER.into(), format);
        options
    }

    fn answer(text: Option<&str>, finish: FinishReason) -> ModelResponse {
        ModelResponse {
            text: text.map(str::to_owned),
            tool_calls: Vec::new(),
            finish,
            stop_sequence: None,
            usage: TokenUsage::default(),
        }
    }

    fn order() -> ResponseFormat {
        ResponseFormat::of(&options(json!({"type": "json_schema", "json_schema": {
            "name": "order", "strict": true,
            "schema": {"type": "object", "properties": {"id": {"type": "string"},
                       "qty": {"type": "integer", "minimum": 1}},
                       "required": ["id", "qty"], "additionalProperties": false}}})))
        .unwrap()
        .unwrap()
    }

    #[test]
    fn the_format_is_read_or_refused_by_name() {
        assert_eq!(ResponseFormat::of(&Map::new()), Ok(None));
        assert_eq!(
            ResponseFormat::of(&options(json!({"type": "json_object"}))),
            Ok(Some(ResponseFormat::JsonObject))
        );
        assert_eq!(
            ResponseFormat::of(&options(json!({"type": "grammar", "grammar": "x"}))),
            Ok(Some(ResponseFormat::Other("grammar".into())))
        );
        let ResponseFormat::JsonSchema(format) = order() else {
            panic!("a json_schema format");
        };
        assert_eq!((format.name.as_str(), format.strict), ("order", Some(true)));
        for bad in [
            json!({"json_schema": {}}),
            json!({"type": "json_schema"}),
            json!({"type": "json_schema", "json_schema": {"schema": {}}}),
        ] {
            assert!(
                matches!(
                    ResponseFormat::of(&options(bad.clone())),
                    Err(FormatError::Unreadable(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn prose_is_refused_and_fitting_json_passes() {
        let format = order();
        let stop = FinishReason::Stop;
        assert_eq!(
            format.check(&answer(Some(r#"{"id": "A-1", "qty": 2}"#), stop)),
            Ok(())
        );
        assert!(matches!(
            format.check(&answer(Some("Sure! The order is A-1."), stop)),
            Err(FormatError::NotJson(_))
        ));
        assert_eq!(format.check(&answer(None, stop)), Err(FormatError::Empty));
        let Err(FormatError::Schema { name, problems }) =
            format.check(&answer(Some(r#"{"id": "SECRET-9", "qty": 0}"#), stop))
        else {
            panic!("a schema failure");
        };
        assert_eq!(name, "order");
        assert!(problems.contains("/qty"), "{problems}");
        assert!(
            !problems.contains("SECRET"),
            "never quotes the answer: {problems}"
        );
        let object = ResponseFormat::JsonObject;
        assert_eq!(
            object.check(&answer(Some("[1]"), stop)),
            Err(FormatError::NotObject)
        );
        assert_eq!(object.check(&answer(Some("{}"), stop)), Ok(()));
    }

    #[test]
    fn turns_that_are_not_a_whole_answer_are_not_checked() {
        let format = order();
        assert_eq!(
            format.check(&answer(Some("{\"id\": "), FinishReason::Length)),
            Ok(())
        );
        assert_eq!(
            format.check(&answer(None, FinishReason::ContentFilter)),
            Ok(())
        );
        let mut tools = answer(None, FinishReason::ToolCalls);
        tools.tool_calls.push(ToolCall {
            id: "c".into(),
            name: "get_order".into(),
            arguments: "{}".into(),
        });
        assert_eq!(format.check(&tools), Ok(()));
        assert_eq!(
            ResponseFormat::Text.check(&answer(Some("prose"), FinishReason::Stop)),
            Ok(())
        );
        // A schema rein cannot compile (a remote $ref is never fetched):
        // JSON is what can be checked.
        let remote = ResponseFormat::JsonSchema(JsonSchemaFormat {
            name: "r".into(),
            description: None,
            schema: Some(json!({"$ref": "http://169.254.169.254/schema.json"})),
            strict: None,
        });
        assert_eq!(
            remote.check(&answer(Some("{}"), FinishReason::Stop)),
            Ok(())
        );
        assert!(
            remote
                .check(&answer(Some("no"), FinishReason::Stop))
                .is_err()
        );
    }
}

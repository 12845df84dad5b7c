//! Tool argument schemas: compiled once at load, checked on every proposed
//! call before it reaches the tool.

use std::collections::HashMap;
use std::fmt;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::{ValidationError, Validator};
use rein_core::registry::{ConfigProblem, Registry, SchemaIssue};
use serde::Serialize;
use serde_json::Value;

use super::ConfigErrors;

/// At most this many problems are returned for one call's arguments: the
/// model fixes a call from the first few, and a long list only costs
/// context.
pub const MAX_ARG_PROBLEMS: usize = 8;

/// Values quoted in a problem (an enum's options, a pattern) are cut to
/// this many characters, so a huge schema cannot flood the model.
const MAX_QUOTE_CHARS: usize = 120;

/// One way a proposed call's arguments do not fit the tool's schema.
///
/// # Why not the library's message
///
/// These go back to the model as a structured clarification. A schema
/// library's text quotes the offending value (possibly the whole, huge
/// argument object) and its own internals; the model needs where (`path`)
/// and what to change (`message`), in a few words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArgProblem {
    /// JSON Pointer to the offending argument (`/delivery_date`); empty for
    /// the arguments as a whole.
    pub path: String,
    /// What to change, e.g. "is required", "must be a string".
    pub message: String,
}

impl fmt::Display for ArgProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "arguments: {}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

/// Every tool's argument schema, compiled.
///
/// Compiling happens once, at load (no per-call schema or regex compilation
/// — DESIGN.md, "Performance notes"); [`validate_args`] is then cheap.
///
/// [`validate_args`]: CompiledSchemas::validate_args
pub struct CompiledSchemas {
    validators: HashMap<String, Validator>,
}

impl fmt::Debug for CompiledSchemas {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut tools: Vec<_> = self.validators.keys().collect();
        tools.sort();
        f.debug_struct("CompiledSchemas")
            .field("tools", &tools)
            .finish()
    }
}

impl CompiledSchemas {
    /// Compiles the schema of every tool in `registry`.
    ///
    /// # Errors
    ///
    /// [`ConfigErrors`] naming each tool whose schema does not compile. A
    /// registry from [`load`](super::load) has had its schemas compiled
    /// already, so this fails only for a registry built another way.
    pub fn compile(registry: &Registry) -> Result<CompiledSchemas, ConfigErrors> {
        let mut validators = HashMap::new();
        let mut problems = Vec::new();
        for (name, tool) in registry.tools() {
            match compile(&tool.schema) {
                Ok(validator) => {
                    validators.insert(name.clone(), validator);
                }
                Err(err) => {
                    let issue = schema_issue(&err);
                    let field = if issue.path.is_empty() {
                        format!("tools.{name}.schema")
                    } else {
                        format!("tools.{name}.schema.{}", issue.path)
                    };
                    problems.push(ConfigProblem::new(&tool.source, field, issue.message));
                }
            }
        }
        if problems.is_empty() {
            Ok(CompiledSchemas { validators })
        } else {
            Err(ConfigErrors::new(problems))
        }
    }

    /// Whether `args` fit the schema of `tool`.
    ///
    /// # Errors
    ///
    /// Up to [`MAX_ARG_PROBLEMS`] [`ArgProblem`]s, for the model to fix the
    /// call; one problem when `tool` has no schema here (an unknown tool).
    pub fn validate_args(&self, tool: &str, args: &Value) -> Result<(), Vec<ArgProblem>> {
        let Some(validator) = self.validators.get(tool) else {
            return Err(vec![ArgProblem {
                path: String::new(),
                message: format!("`{tool}` is not an available tool"),
            }]);
        };
        if validator.is_valid(args) {
            return Ok(());
        }
        Err(problems(validator, args))
    }
}

/// Up to [`MAX_ARG_PROBLEMS`] ways `value` does not fit `validator`'s
/// schema, in a few words each and never quoting the value: for a tool's
/// arguments, and for a structured answer
/// ([`ResponseFormat`](crate::provider::ResponseFormat)).
pub(crate) fn problems(validator: &Validator, value: &Value) -> Vec<ArgProblem> {
    let mut problems = Vec::new();
    for err in validator.iter_errors(value) {
        arg_problems(&err, &mut problems);
        if problems.len() >= MAX_ARG_PROBLEMS {
            break;
        }
    }
    problems.truncate(MAX_ARG_PROBLEMS);
    problems
}

/// Compiles `schema` with format checking on: a `"format": "date-time"` in
/// a tool schema is a promise to the tool, so rein enforces it.
fn compile(schema: &Value) -> Result<Validator, ValidationError<'static>> {
    jsonschema::options()
        .should_validate_formats(true)
        .build(schema)
}

/// The [`SchemaCheck`](rein_core::registry::SchemaCheck) the loader hands
/// to the integrity check: compile, and report what the compiler refuses.
pub(super) fn schema_issues(schema: &Value) -> Vec<SchemaIssue> {
    match compile(schema) {
        Ok(_) => Vec::new(),
        Err(err) => vec![schema_issue(&err)],
    }
}

/// A compile error as a problem at its place inside the schema.
fn schema_issue(err: &ValidationError<'_>) -> SchemaIssue {
    // For a schema that fails its meta-schema, the "instance" is the schema
    // itself, so the instance path is where in the schema the fault is.
    let path = err
        .instance_path()
        .to_string()
        .trim_start_matches('/')
        .split('/')
        .filter(|s| !s.is_empty())
        .map(unescape_pointer)
        .collect::<Vec<_>>()
        .join(".");
    let message = match err.kind() {
        ValidationErrorKind::Referencing(_) => {
            "has a $ref rein cannot resolve; only references inside the schema are supported"
                .to_owned()
        }
        _ => format!("is not a valid JSON Schema: {}", quote(&err.to_string())),
    };
    SchemaIssue::new(path, message)
}

/// Appends the problems `err` stands for.
fn arg_problems(err: &ValidationError<'_>, out: &mut Vec<ArgProblem>) {
    let at = err.instance_path().to_string();
    let mut push = |path: String, message: String| out.push(ArgProblem { path, message });
    match err.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property
                .as_str()
                .map_or_else(|| property.to_string(), str::to_owned);
            push(
                format!("{at}/{}", escape_pointer(&name)),
                "is required".into(),
            );
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            for name in unexpected {
                push(
                    format!("{at}/{}", escape_pointer(name)),
                    "is not an accepted argument".into(),
                );
            }
        }
        kind => push(at, kind_message(kind)),
    }
}

/// A few words on what to change, never quoting the offending value.
fn kind_message(kind: &ValidationErrorKind) -> String {
    use ValidationErrorKind as K;
    match kind {
        K::Type { kind } => {
            let types: Vec<String> = match kind {
                TypeKind::Single(t) => vec![t.to_string()],
                TypeKind::Multiple(set) => set.iter().map(|t| t.to_string()).collect(),
            };
            format!("must be of type {}", types.join(" or "))
        }
        K::Enum { options } => format!("must be one of {}", quote(&options.to_string())),
        K::Constant { expected_value } => {
            format!("must be {}", quote(&expected_value.to_string()))
        }
        K::Format { format } => format!("must be a valid {format}"),
        K::Pattern { pattern } => format!("must match the pattern {}", quote(pattern)),
        K::MinLength { limit } => format!("must be at least {limit} characters long"),
        K::MaxLength { limit } => format!("must be at most {limit} characters long"),
        K::Minimum { limit } => format!("must be at least {limit}"),
        K::Maximum { limit } => format!("must be at most {limit}"),
        K::ExclusiveMinimum { limit } => format!("must be greater than {limit}"),
        K::ExclusiveMaximum { limit } => format!("must be less than {limit}"),
        K::MultipleOf { multiple_of } => format!("must be a multiple of {multiple_of}"),
        K::MinItems { limit } => format!("must have at least {limit} items"),
        K::MaxItems { limit } => format!("must have at most {limit} items"),
        K::MinProperties { limit } => format!("must have at least {limit} properties"),
        K::MaxProperties { limit } => format!("must have at most {limit} properties"),
        K::UniqueItems => "must not repeat items".into(),
        K::AnyOf { .. } | K::OneOfNotValid { .. } => {
            "does not match any of the accepted forms".into()
        }
        K::OneOfMultipleValid { .. } => "matches more than one of the accepted forms".into(),
        K::Not { .. } | K::FalseSchema => "is not accepted here".into(),
        other => format!("is invalid ({})", other.keyword()),
    }
}

/// `text`, cut to [`MAX_QUOTE_CHARS`] characters.
fn quote(text: &str) -> String {
    if text.chars().count() <= MAX_QUOTE_CHARS {
        return text.to_owned();
    }
    let cut: String = text.chars().take(MAX_QUOTE_CHARS).collect();
    format!("{cut}…")
}

/// RFC 6901 escaping of one pointer segment.
fn escape_pointer(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

fn unescape_pointer(segment: &str) -> String {
    segment.replace("~1", "/").replace("~0", "~")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schemas(schema: Value) -> CompiledSchemas {
        CompiledSchemas {
            validators: HashMap::from([("t".to_owned(), compile(&schema).unwrap())]),
        }
    }

    fn order_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "description": "id"},
                "delivery_date": {"type": "string", "format": "date-time", "description": "when"},
                "priority": {"enum": ["low", "high"], "description": "how urgent"}
            },
            "required": ["order_id", "delivery_date"],
            "additionalProperties": false
        })
    }

    #[test]
    fn valid_arguments_pass() {
        let s = schemas(order_schema());
        assert_eq!(
            s.validate_args(
                "t",
                &json!({"order_id": "A-1", "delivery_date": "2026-01-08T14:00:00Z"})
            ),
            Ok(())
        );
    }

    #[test]
    fn invalid_arguments_give_pointer_and_short_message() {
        let s = schemas(order_schema());
        let huge = "x".repeat(10_000);
        let mut problems = s
            .validate_args(
                "t",
                &json!({"order_id": 7, "delivery_date": huge, "priority": "urgent", "note": "n"}),
            )
            .unwrap_err();
        problems.sort_by(|a, b| a.path.cmp(&b.path));
        assert_eq!(
            problems,
            vec![
                ArgProblem {
                    path: "/delivery_date".into(),
                    message: "must be a valid date-time".into()
                },
                ArgProblem {
                    path: "/note".into(),
                    message: "is not an accepted argument".into()
                },
                ArgProblem {
                    path: "/order_id".into(),
                    message: "must be of type string".into()
                },
                ArgProblem {
                    path: "/priority".into(),
                    message: "must be one of [\"low\",\"high\"]".into()
                },
            ]
        );
        assert!(problems.iter().all(|p| !p.message.contains("xxx")));
    }

    #[test]
    fn missing_arguments_point_at_the_missing_property() {
        let s = schemas(order_schema());
        let problems = s.validate_args("t", &json!({})).unwrap_err();
        let paths: Vec<_> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            paths,
            vec!["/order_id: is required", "/delivery_date: is required"]
        );
    }

    #[test]
    fn non_object_arguments_and_unknown_tools_are_problems_at_the_root() {
        let s = schemas(order_schema());
        let problems = s.validate_args("t", &json!([1, 2])).unwrap_err();
        assert_eq!(problems[0].to_string(), "arguments: must be of type object");
        let problems = s.validate_args("nope", &json!({})).unwrap_err();
        assert_eq!(problems[0].message, "`nope` is not an available tool");
    }

    #[test]
    fn problems_are_capped() {
        let props: serde_json::Map<String, Value> = (0..20)
            .map(|i| {
                (
                    format!("p{i}"),
                    json!({"type": "string", "description": "d"}),
                )
            })
            .collect();
        let required: Vec<String> = props.keys().cloned().collect();
        let s = schemas(json!({"type": "object", "properties": props, "required": required}));
        let problems = s.validate_args("t", &json!({})).unwrap_err();
        assert_eq!(problems.len(), MAX_ARG_PROBLEMS);
    }

    #[test]
    fn invalid_schema_is_an_issue_at_its_place() {
        let issues = schema_issues(&json!({
            "type": "object",
            "properties": {"a": {"type": "strin", "description": "d"}}
        }));
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].path, "properties.a.type");
        assert!(
            issues[0].message.starts_with("is not a valid JSON Schema"),
            "{}",
            issues[0].message
        );
    }

    #[test]
    fn remote_refs_are_refused() {
        let issues = schema_issues(&json!({
            "type": "object",
            "properties": {"a": {"$ref": "https://example.com/s.json", "description": "d"}}
        }));
        assert_eq!(issues.len(), 1, "{issues:?}");
        assert!(issues[0].message.contains("$ref"), "{}", issues[0].message);
    }

    #[test]
    fn compiled_schemas_are_shareable_across_tasks() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<CompiledSchemas>();
    }
}

//! How a tool's effect is undone: [`CompensationGrade`], [`CompensationSpec`]
//! and the argument mapping [`ArgSource`].

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// How well a compensation undoes its forward call (DESIGN.md vocabulary).
///
/// | grade | meaning | compensation tool must be |
/// | --- | --- | --- |
/// | `strong` | precisely reversible, safe to repeat | `idempotent_write` |
/// | `weak` | pushes toward consistency; run once, then a human takes over | `idempotent_write` or `irreversible` |
/// | `none` | cannot be undone | (no tool) |
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CompensationGrade {
    /// Precisely reversible and safe to repeat.
    Strong,
    /// Pushes toward consistency; run once, then hand to a human.
    Weak,
    /// No compensation exists.
    None,
}

impl CompensationGrade {
    /// The grade's name as it appears in config and events.
    pub fn as_str(self) -> &'static str {
        match self {
            CompensationGrade::Strong => "strong",
            CompensationGrade::Weak => "weak",
            CompensationGrade::None => "none",
        }
    }
}

impl fmt::Display for CompensationGrade {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where one argument of a compensation call comes from: a dotted path into
/// the forward call's arguments (`args.order_id`) or its result
/// (`result.previous_delivery_date`). A path segment that is a number
/// indexes an array.
///
/// # Why a mapping, not a template
///
/// A compensation must undo exactly what the forward call did, long after
/// the model's context is gone (possibly after a crash and resume). Both
/// inputs it may draw from — the arguments rein sent and the result it
/// recorded — are in the ledger, so a path into them is all it needs and
/// can be checked against the schemas at load.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ArgSource {
    /// A path into the forward call's arguments.
    Args(Vec<String>),
    /// A path into the forward call's result.
    Result(Vec<String>),
}

/// A mapping source that is not `args.<path>` or `result.<path>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be `args.<path>` or `result.<path>` (a dotted path), but it is `{found}`")]
pub struct ArgSourceError {
    /// The text that was refused.
    pub found: String,
}

impl FromStr for ArgSource {
    type Err = ArgSourceError;

    fn from_str(s: &str) -> Result<ArgSource, ArgSourceError> {
        let refuse = || ArgSourceError {
            found: s.to_owned(),
        };
        let (root, rest) = s.split_once('.').ok_or_else(refuse)?;
        let path: Vec<String> = rest.split('.').map(str::to_owned).collect();
        if path.iter().any(|segment| segment.is_empty()) {
            return Err(refuse());
        }
        match root {
            "args" => Ok(ArgSource::Args(path)),
            "result" => Ok(ArgSource::Result(path)),
            _ => Err(refuse()),
        }
    }
}

impl fmt::Display for ArgSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (root, path) = match self {
            ArgSource::Args(path) => ("args", path),
            ArgSource::Result(path) => ("result", path),
        };
        write!(f, "{root}.{}", path.join("."))
    }
}

impl ArgSource {
    /// The path below `args` or `result`.
    pub fn path(&self) -> &[String] {
        match self {
            ArgSource::Args(path) | ArgSource::Result(path) => path,
        }
    }

    /// The value this source names, taken from the forward call's `args` or
    /// `result`; `None` when the path leads nowhere.
    pub fn resolve(&self, args: &Value, result: &Value) -> Option<Value> {
        let root = match self {
            ArgSource::Args(_) => args,
            ArgSource::Result(_) => result,
        };
        self.path()
            .iter()
            .try_fold(root, |value, segment| match value {
                Value::Object(map) => map.get(segment),
                Value::Array(items) => segment.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            })
            .cloned()
    }
}

/// A compensation argument whose source led nowhere in the recorded call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "compensation argument `{target}` comes from `{from}`, which the forward call does not hold"
)]
pub struct UnresolvedArg {
    /// The compensation tool's argument.
    pub target: String,
    /// Where it should have come from (`args.…` or `result.…`).
    pub from: String,
}

/// How to undo a tool's effect: call `tool` with arguments mapped from the
/// forward call, within `window`.
///
/// Only `strong` and `weak` compensations exist as values; a tool declared
/// `grade = "none"` has no `CompensationSpec` (see
/// [`ToolSpec::compensation_grade`](super::ToolSpec::compensation_grade)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CompensationSpec {
    /// The compensation tool.
    pub tool: String,
    /// `strong` or `weak`.
    pub grade: CompensationGrade,
    /// How long after the forward call compensation still works; unlimited
    /// when `None`.
    pub window: Option<Duration>,
    /// Compensation argument → where its value comes from.
    pub args: BTreeMap<String, ArgSource>,
}

impl CompensationSpec {
    /// A compensation by `tool` of `grade` within `window`, with its
    /// argument mapping (target argument → source). The registry builds
    /// these from config after its integrity check; this constructor is
    /// for programs that bind tools themselves.
    pub fn new(
        tool: impl Into<String>,
        grade: CompensationGrade,
        window: Option<Duration>,
        args: BTreeMap<String, ArgSource>,
    ) -> CompensationSpec {
        CompensationSpec {
            tool: tool.into(),
            grade,
            window,
            args,
        }
    }

    /// The compensation call's arguments for a forward call that was sent
    /// `args` and answered `result`.
    ///
    /// # Errors
    ///
    /// [`UnresolvedArg`] for the first mapped argument whose source is not
    /// in `args` or `result`: a compensation with a missing argument would
    /// undo the wrong thing, so it is not attempted.
    pub fn arguments(&self, args: &Value, result: &Value) -> Result<Value, UnresolvedArg> {
        let mut out = Map::new();
        for (target, source) in &self.args {
            let value = source.resolve(args, result).ok_or_else(|| UnresolvedArg {
                target: target.clone(),
                from: source.to_string(),
            })?;
            out.insert(target.clone(), value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn arg_source_parses_args_and_result_paths() {
        assert_eq!(
            "args.order_id".parse::<ArgSource>().unwrap(),
            ArgSource::Args(vec!["order_id".into()])
        );
        assert_eq!(
            "result.a.0.b".parse::<ArgSource>().unwrap(),
            ArgSource::Result(vec!["a".into(), "0".into(), "b".into()])
        );
        assert_eq!(
            "result.a.0.b".parse::<ArgSource>().unwrap().to_string(),
            "result.a.0.b"
        );
    }

    #[test]
    fn arg_source_refuses_other_roots_and_empty_segments() {
        for bad in ["order_id", "input.x", "args.", "args..x", "result", ""] {
            let err = bad.parse::<ArgSource>().unwrap_err();
            assert_eq!(err.found, bad);
        }
    }

    #[test]
    fn resolve_walks_objects_and_arrays() {
        let args = json!({"order_id": "A-1", "lines": [{"sku": "S1"}]});
        let result = json!({"previous_delivery_date": "2026-01-05"});
        let src = |s: &str| s.parse::<ArgSource>().unwrap();
        assert_eq!(
            src("args.order_id").resolve(&args, &result),
            Some(json!("A-1"))
        );
        assert_eq!(
            src("args.lines.0.sku").resolve(&args, &result),
            Some(json!("S1"))
        );
        assert_eq!(
            src("result.previous_delivery_date").resolve(&args, &result),
            Some(json!("2026-01-05"))
        );
        assert_eq!(src("args.lines.x").resolve(&args, &result), None);
        assert_eq!(src("result.missing").resolve(&args, &result), None);
    }

    #[test]
    fn arguments_maps_every_target_or_names_the_missing_one() {
        let spec = CompensationSpec {
            tool: "restore".into(),
            grade: CompensationGrade::Strong,
            window: None,
            args: BTreeMap::from([
                ("order_id".into(), "args.order_id".parse().unwrap()),
                ("delivery_date".into(), "result.previous".parse().unwrap()),
            ]),
        };
        assert_eq!(
            spec.arguments(&json!({"order_id": "A-1"}), &json!({"previous": "d0"}))
                .unwrap(),
            json!({"order_id": "A-1", "delivery_date": "d0"})
        );
        let err = spec
            .arguments(&json!({"order_id": "A-1"}), &json!({}))
            .unwrap_err();
        assert_eq!(err.target, "delivery_date");
        assert_eq!(err.from, "result.previous");
    }
}

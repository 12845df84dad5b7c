//! Fan-out control at planning time (seed 000, "Fan-out convergence and
//! write conflicts"): how many calls one model turn may propose, and which
//! argument names the resource a write changes.
//!
//! # Why at planning time
//!
//! The fan-out of a turn is decided by the model and has no upper bound a
//! priori. Rate limits spread a thirty-six-call turn over time; they do not
//! make it smaller. A cap on the calls of one turn tells the model, before
//! anything runs, to batch or narrow. And two writes of one turn to the
//! same order, run in parallel, are a lost update waiting to happen: they
//! run one at a time, in the model's order.
//!
//! | setting | default |
//! | --- | --- |
//! | `[agents.NAME.fan_out] max_calls_per_turn` | [`DEFAULT_MAX_CALLS_PER_TURN`] |
//! | `[tools.NAME] resource_key` | none: the tool's writes never conflict |

use std::num::NonZeroU32;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::compensation::ArgSource;

/// Calls one model turn may propose when the agent does not say
/// otherwise: enough for a turn that reads a handful of records and writes
/// a few, small enough that a turn fanning out over a whole list is told
/// to batch.
pub const DEFAULT_MAX_CALLS_PER_TURN: u32 = 16;

/// The largest `max_calls_per_turn` accepted: beyond it the cap caps
/// nothing a model sends.
pub const MAX_CALLS_PER_TURN: u32 = 1024;

/// `[agents.NAME.fan_out]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct FanOutConfig {
    /// Calls one model turn may propose; a turn with more runs none of
    /// them, and the model is told to batch or narrow. Default
    /// [`DEFAULT_MAX_CALLS_PER_TURN`], in 1..=[`MAX_CALLS_PER_TURN`].
    pub max_calls_per_turn: Option<u32>,
}

/// An agent's fan-out limits, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct FanOutLimits {
    /// Calls one model turn may propose.
    pub max_calls_per_turn: NonZeroU32,
}

impl FanOutLimits {
    /// Limits with a cap of `max_calls_per_turn` (at least 1).
    pub fn new(max_calls_per_turn: NonZeroU32) -> FanOutLimits {
        FanOutLimits { max_calls_per_turn }
    }

    /// Whether a turn proposing `calls` calls is over the cap.
    pub fn exceeded_by(&self, calls: usize) -> bool {
        u32::try_from(calls).map_or(true, |n| n > self.max_calls_per_turn.get())
    }
}

impl Default for FanOutLimits {
    fn default() -> Self {
        FanOutLimits {
            max_calls_per_turn: NonZeroU32::new(DEFAULT_MAX_CALLS_PER_TURN)
                .unwrap_or(NonZeroU32::MIN),
        }
    }
}

/// The argument that names the resource a write changes
/// (`resource_key = "args.order_id"`): calls of one turn to tools of the
/// same resource group whose key has the same value write the same
/// resource, and run one at a time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ResourceKey {
    path: Vec<String>,
}

impl ResourceKey {
    /// The key at `args.<path>`.
    ///
    /// # Errors
    ///
    /// The text refused, when it is not `args.<dotted path>`.
    pub fn parse(text: &str) -> Result<ResourceKey, String> {
        match text.parse::<ArgSource>() {
            Ok(ArgSource::Args(path)) => Ok(ResourceKey { path }),
            _ => Err(format!(
                "must be `args.<path>` (a dotted path into the call's arguments), but it is `{text}`"
            )),
        }
    }

    /// The path below `args`.
    pub fn path(&self) -> &[String] {
        &self.path
    }

    /// The value that names the resource in `args`, as canonical text;
    /// `None` when the call does not name one (it then conflicts with
    /// nothing: a write without a key cannot be matched to another).
    pub fn value_in(&self, args: &Value) -> Option<String> {
        let value = self
            .path
            .iter()
            .try_fold(args, |v, segment| v.get(segment.as_str()))?;
        (!value.is_null()).then(|| value.to_string())
    }
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "args.{}", self.path.join("."))
    }
}

/// A problem of a fan-out setting: the field below the table it is in,
/// and what is wrong.
pub(super) type FieldProblem = (&'static str, String);

/// Validates `[agents.NAME.fan_out]`.
pub(super) fn check_fan_out(c: &FanOutConfig) -> Result<FanOutLimits, FieldProblem> {
    let cap = c.max_calls_per_turn.unwrap_or(DEFAULT_MAX_CALLS_PER_TURN);
    match NonZeroU32::new(cap) {
        Some(cap) if cap.get() <= MAX_CALLS_PER_TURN => Ok(FanOutLimits::new(cap)),
        _ => Err((
            "fan_out.max_calls_per_turn",
            format!("must be in 1..={MAX_CALLS_PER_TURN}, but it is {cap}"),
        )),
    }
}

/// Validates a tool's `resource_key` against its class and the properties
/// of its schema (`None`: no schema to check against yet).
pub(super) fn check_resource_key(
    text: &str,
    class: Option<crate::tool::ToolClass>,
    properties: Option<&serde_json::Map<String, Value>>,
) -> Result<ResourceKey, FieldProblem> {
    const FIELD: &str = "resource_key";
    if class == Some(crate::tool::ToolClass::Read) {
        return Err((
            FIELD,
            "is only for writes: reads of the same resource never conflict, so the key would change nothing"
                .to_owned(),
        ));
    }
    let key = ResourceKey::parse(text).map_err(|e| (FIELD, e))?;
    if let (Some(props), Some(first)) = (properties, key.path.first())
        && !props.contains_key(first.as_str())
    {
        return Err((
            FIELD,
            format!("reads `{key}`, but the tool's schema has no argument `{first}`"),
        ));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resource_key_reads_a_nested_value_and_refuses_a_result_path() {
        let key = ResourceKey::parse("args.order.id").unwrap();
        assert_eq!(
            key.value_in(&json!({"order": {"id": "A-1"}})).as_deref(),
            Some("\"A-1\"")
        );
        assert_eq!(key.value_in(&json!({"order": {}})), None);
        assert_eq!(key.value_in(&json!({"order": {"id": null}})), None);
        assert!(ResourceKey::parse("result.id").is_err());
        assert!(ResourceKey::parse("order_id").is_err());
    }

    #[test]
    fn check_refuses_a_cap_out_of_range_and_a_key_on_a_read_or_off_the_schema() {
        let zero = FanOutConfig {
            max_calls_per_turn: Some(0),
        };
        assert_eq!(
            check_fan_out(&zero).unwrap_err().0,
            "fan_out.max_calls_per_turn"
        );
        let huge = FanOutConfig {
            max_calls_per_turn: Some(MAX_CALLS_PER_TURN + 1),
        };
        assert!(check_fan_out(&huge).is_err());
        assert_eq!(
            check_fan_out(&FanOutConfig::default()).unwrap(),
            FanOutLimits::default()
        );
        let props = json!({"order_id": {"type": "string"}});
        let props = props.as_object();
        let read = check_resource_key("args.order_id", Some(crate::tool::ToolClass::Read), props);
        assert!(read.unwrap_err().1.contains("only for writes"));
        let off = check_resource_key(
            "args.id",
            Some(crate::tool::ToolClass::IdempotentWrite),
            props,
        );
        assert!(off.unwrap_err().1.contains("no argument `id`"));
        let ok = check_resource_key(
            "args.order_id",
            Some(crate::tool::ToolClass::IdempotentWrite),
            props,
        );
        assert_eq!(ok.unwrap().to_string(), "args.order_id");
    }

    #[test]
    fn limits_are_exceeded_only_above_the_cap() {
        let limits = FanOutLimits::new(NonZeroU32::new(3).unwrap());
        assert!(!limits.exceeded_by(3));
        assert!(limits.exceeded_by(4));
        assert_eq!(
            FanOutLimits::default().max_calls_per_turn.get(),
            DEFAULT_MAX_CALLS_PER_TURN
        );
    }
}

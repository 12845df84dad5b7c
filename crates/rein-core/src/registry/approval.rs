//! Which calls wait for a human's approval: `[tools.NAME] approval` (always,
//! or when a rule on the arguments matches) and `[agents.NAME.approval]`
//! (a tier gate, the window, whether the wait counts against the wall
//! clock, what an expiry does).
//!
//! ```toml
//! [tools.send_email]
//! approval = "required"
//!
//! [tools.refund.approval]
//! when = { "args.amount" = { gt = 1000 } }
//!
//! [agents.support.approval]
//! from_tier = "high"      # calls to tools of this tier or above
//! window = "24h"          # default
//! pause_clock = true      # default: the wall clock stops while a call waits
//! on_expiry = "reject"    # default; or "handoff"
//! ```
//!
//! # Why a small rule language
//!
//! A rule is read by the human who wrote it, by `rein check`, and by the
//! operator wondering why a call waited. Comparisons of one argument
//! against a constant (`gt`, `ge`, `lt`, `le`, `eq`, `ne`, `in`), all of
//! which must hold, cover "refunds over $1,000" and "emails outside our
//! domain list" without becoming a second programming language to debug.
//! A comparison whose argument is missing or of the wrong type needs
//! approval: a gate fails closed.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;

use super::compensation::ArgSource;
use super::spec::SideEffectTier;

/// The approval window when an agent does not set one: a working day and
/// a night, so a call planned in the evening can be decided the next
/// morning.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The longest approval window accepted: a call held for longer is not
/// waiting for a decision, it is forgotten.
pub const MAX_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

/// `[tools.NAME] approval` as written: `"required"`, `"never"` (the
/// default), or a table `{ when = { "args.PATH" = { OP = VALUE } } }`.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub enum ToolApprovalConfig {
    /// No approval of its own (an agent's tier gate may still apply).
    #[default]
    Never,
    /// Every call waits for a human.
    Required,
    /// A call waits when every comparison holds.
    When(BTreeMap<String, BTreeMap<String, Value>>),
    /// Something else, kept to be reported by the check with its field.
    Invalid(String),
}

/// The shapes [`ToolApprovalConfig`] reads: the check, not the parser,
/// refuses what these allow but rein does not (an operator on a
/// non-number, an unknown argument path).
impl JsonSchema for ToolApprovalConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ToolApproval".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Whether a call waits for a human: \"required\", \"never\" (the default), or { when = { \"args.PATH\" = { OP = VALUE } } }, every comparison of which must hold.",
            "oneOf": [
                { "type": "string", "enum": ["required", "never"] },
                {
                    "type": "object",
                    "properties": {
                        "when": {
                            "type": "object",
                            "propertyNames": { "pattern": "^args\\." },
                            "additionalProperties": {
                                "type": "object",
                                "propertyNames": { "enum": ["gt", "ge", "lt", "le", "eq", "ne", "in"] },
                                "minProperties": 1
                            }
                        }
                    },
                    "required": ["when"],
                    "additionalProperties": false
                }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for ToolApprovalConfig {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Shape;
        impl<'de> Visitor<'de> for Shape {
            type Value = ToolApprovalConfig;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"required\", \"never\" or a table { when = { … } }")
            }

            fn visit_str<E: de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(match text {
                    "required" => ToolApprovalConfig::Required,
                    "never" => ToolApprovalConfig::Never,
                    other => ToolApprovalConfig::Invalid(format!("{other:?}")),
                })
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut when = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == "when" {
                        when = Some(map.next_value::<BTreeMap<String, BTreeMap<String, Value>>>()?);
                    } else {
                        return Err(de::Error::unknown_field(&key, &["when"]));
                    }
                }
                Ok(match when {
                    Some(when) => ToolApprovalConfig::When(when),
                    None => ToolApprovalConfig::Invalid("a table without `when`".to_owned()),
                })
            }
        }
        deserializer.deserialize_any(Shape)
    }
}

/// A tool's own approval rule, validated.
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub enum ToolApproval {
    /// None of its own.
    #[default]
    Never,
    /// Every call.
    Required,
    /// Calls whose arguments match.
    When(Rule),
}

/// Comparisons of arguments against constants, all of which must hold.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    conditions: Vec<(ArgSource, Comparison)>,
}

/// One comparison of an argument against a constant.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Comparison {
    /// Greater than.
    Gt(f64),
    /// Greater than or equal to.
    Ge(f64),
    /// Less than.
    Lt(f64),
    /// Less than or equal to.
    Le(f64),
    /// Equal to (any JSON value).
    Eq(Value),
    /// Not equal to.
    Ne(Value),
    /// One of.
    In(Vec<Value>),
}

impl Comparison {
    /// Whether `value` (absent: `None`) satisfies it. Any comparison of a
    /// missing argument holds, and a numeric one of a non-numeric value
    /// (the gate fails closed); numbers compare by value (`2` = `2.0`).
    fn holds(&self, value: Option<&Value>) -> bool {
        let Some(value) = value else {
            return true;
        };
        let number = value.as_f64();
        match self {
            Comparison::Gt(c) => number.is_none_or(|n| n > *c),
            Comparison::Ge(c) => number.is_none_or(|n| n >= *c),
            Comparison::Lt(c) => number.is_none_or(|n| n < *c),
            Comparison::Le(c) => number.is_none_or(|n| n <= *c),
            Comparison::Eq(c) => same(value, c),
            Comparison::Ne(c) => !same(value, c),
            Comparison::In(cs) => cs.iter().any(|c| same(value, c)),
        }
    }
}

/// JSON equality with numbers compared by value.
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Comparison::Gt(c) => write!(f, "> {c}"),
            Comparison::Ge(c) => write!(f, ">= {c}"),
            Comparison::Lt(c) => write!(f, "< {c}"),
            Comparison::Le(c) => write!(f, "<= {c}"),
            Comparison::Eq(c) => write!(f, "= {c}"),
            Comparison::Ne(c) => write!(f, "!= {c}"),
            Comparison::In(cs) => write!(f, "in {}", Value::Array(cs.clone())),
        }
    }
}

impl Rule {
    /// Why `args` match, for the human; `None` when they do not.
    pub fn matches(&self, args: &Value) -> Option<String> {
        let mut said = Vec::with_capacity(self.conditions.len());
        for (path, comparison) in &self.conditions {
            let value = path.resolve(args, &Value::Null);
            if !comparison.holds(value.as_ref()) {
                return None;
            }
            said.push(format!("{path} {comparison}"));
        }
        Some(said.join(" and "))
    }
}

/// What an expired approval does.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OnExpiry {
    /// The call is not made; the model is told nobody decided in time,
    /// and the run goes on without it.
    #[default]
    Reject,
    /// The run stops `handed_off`: what it did so far waits for a human.
    Handoff,
}

impl OnExpiry {
    /// Its name in config.
    pub fn as_str(self) -> &'static str {
        match self {
            OnExpiry::Reject => "reject",
            OnExpiry::Handoff => "handoff",
        }
    }
}

/// `[agents.NAME.approval]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ApprovalConfig {
    /// Calls to tools of this tier or above wait for a human's approval.
    pub from_tier: Option<SideEffectTier>,
    /// How long a call waits for a decision; default
    /// [`DEFAULT_APPROVAL_WINDOW`](super::DEFAULT_APPROVAL_WINDOW), at most
    /// [`MAX_APPROVAL_WINDOW`](super::MAX_APPROVAL_WINDOW).
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub window: Option<Duration>,
    /// Whether the run's wall clock stops while a call waits (default
    /// true: a human's night does not spend the run's minutes); `false`
    /// counts the wait against it.
    pub pause_clock: Option<bool>,
    /// What an expiry does: `reject` (default) or `handoff`.
    pub on_expiry: OnExpiry,
}

/// An agent's approval settings, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ApprovalSettings {
    /// The tier gate, if any.
    pub from_tier: Option<SideEffectTier>,
    /// How long a call waits for a decision.
    pub window: Duration,
    /// Whether the wall clock stops while a call waits.
    pub pause_clock: bool,
    /// What an expiry does.
    pub on_expiry: OnExpiry,
}

impl Default for ApprovalSettings {
    fn default() -> Self {
        ApprovalSettings {
            from_tier: None,
            window: DEFAULT_WINDOW,
            pause_clock: true,
            on_expiry: OnExpiry::Reject,
        }
    }
}

impl ApprovalSettings {
    /// Why a call to a tool of `tier` with approval rule `tool` and
    /// arguments `args` needs a human's approval; `None` when it does not.
    pub fn needed(
        &self,
        tool: &ToolApproval,
        tier: Option<SideEffectTier>,
        args: &Value,
    ) -> Option<String> {
        match tool {
            ToolApproval::Required => return Some("the tool requires approval".to_owned()),
            ToolApproval::When(rule) => {
                if let Some(why) = rule.matches(args) {
                    return Some(format!("its arguments match the tool's rule: {why}"));
                }
            }
            ToolApproval::Never => {}
        }
        let gate = self.from_tier?;
        match tier {
            Some(tier) if tier >= gate => Some(format!(
                "the tool's side-effect tier is {tier}, and the agent asks for approval from tier {gate}"
            )),
            Some(_) => None,
            // A gate fails closed: a tool that does not say how visible
            // its effect is may be at any tier.
            None => Some(format!(
                "the tool declares no side-effect tier, and the agent asks for approval from tier {gate}"
            )),
        }
    }
}

/// A problem of a setting: the field below the table it is in, and what
/// is wrong.
type FieldProblem = (String, String);

/// Validates `[agents.NAME.approval]`.
pub(super) fn check_approval(c: &ApprovalConfig) -> Result<ApprovalSettings, FieldProblem> {
    let window = c.window.unwrap_or(DEFAULT_WINDOW);
    if window.is_zero() || window > MAX_WINDOW {
        return Err((
            "approval.window".to_owned(),
            format!(
                "must be more than 0 and at most {} days, but it is {} s",
                MAX_WINDOW.as_secs() / 86_400,
                window.as_secs()
            ),
        ));
    }
    Ok(ApprovalSettings {
        from_tier: c.from_tier,
        window,
        pause_clock: c.pause_clock.unwrap_or(true),
        on_expiry: c.on_expiry,
    })
}

/// Validates `[tools.NAME] approval` against the tool's schema properties
/// (`None`: no schema to check against).
pub(super) fn check_tool_approval(
    c: &ToolApprovalConfig,
    properties: Option<&serde_json::Map<String, Value>>,
) -> Result<ToolApproval, FieldProblem> {
    let field = |below: &str| {
        if below.is_empty() {
            "approval".to_owned()
        } else {
            format!("approval.when.\"{below}\"")
        }
    };
    let when = match c {
        ToolApprovalConfig::Never => return Ok(ToolApproval::Never),
        ToolApprovalConfig::Required => return Ok(ToolApproval::Required),
        ToolApprovalConfig::Invalid(found) => {
            return Err((
                field(""),
                format!(
                    "must be \"required\", \"never\" or {{ when = {{ \"args.PATH\" = {{ gt = 1000 }} }} }}, but it is {found}"
                ),
            ));
        }
        ToolApprovalConfig::When(when) => when,
    };
    if when.is_empty() {
        return Err((
            "approval.when".to_owned(),
            "is empty: a rule needs at least one comparison (use approval = \"required\" for every call)".to_owned(),
        ));
    }
    let mut conditions = Vec::new();
    for (path_text, ops) in when {
        let path = match path_text.parse::<ArgSource>() {
            Ok(p @ ArgSource::Args(_)) => p,
            _ => {
                return Err((
                    field(path_text),
                    "must name an argument as `args.<path>`".to_owned(),
                ));
            }
        };
        if let (Some(props), Some(first)) = (properties, path.path().first())
            && !props.contains_key(first.as_str())
        {
            return Err((
                field(path_text),
                format!("reads `{path}`, but the tool's schema has no argument `{first}`"),
            ));
        }
        if ops.is_empty() {
            return Err((
                field(path_text),
                "needs a comparison: gt, ge, lt, le, eq, ne or in".to_owned(),
            ));
        }
        for (op, constant) in ops {
            let number = || {
                constant.as_f64().ok_or_else(|| {
                    (
                        format!("{}.{op}", field(path_text)),
                        format!("compares numbers, but it is {constant}"),
                    )
                })
            };
            let comparison = match op.as_str() {
                "gt" => Comparison::Gt(number()?),
                "ge" => Comparison::Ge(number()?),
                "lt" => Comparison::Lt(number()?),
                "le" => Comparison::Le(number()?),
                "eq" => Comparison::Eq(constant.clone()),
                "ne" => Comparison::Ne(constant.clone()),
                "in" => match constant {
                    Value::Array(items) if !items.is_empty() => Comparison::In(items.clone()),
                    _ => {
                        return Err((
                            format!("{}.in", field(path_text)),
                            format!("must be a non-empty list, but it is {constant}"),
                        ));
                    }
                },
                other => {
                    return Err((
                        format!("{}.{other}", field(path_text)),
                        "is not a comparison: gt, ge, lt, le, eq, ne or in".to_owned(),
                    ));
                }
            };
            conditions.push((path.clone(), comparison));
        }
    }
    Ok(ToolApproval::When(Rule { conditions }))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    fn rule(text: &str) -> Result<ToolApproval, FieldProblem> {
        #[derive(Deserialize)]
        struct T {
            approval: ToolApprovalConfig,
        }
        let t: T = toml::from_str(text).unwrap();
        let props = json!({"amount": {}, "to": {}});
        check_tool_approval(&t.approval, props.as_object())
    }

    #[test]
    fn a_rule_on_the_arguments_matches_only_when_every_comparison_holds() {
        let ToolApproval::When(r) =
            rule(r#"approval = { when = { "args.amount" = { gt = 1000, le = 5000 } } }"#).unwrap()
        else {
            panic!("a rule");
        };
        assert!(r.matches(&json!({"amount": 999})).is_none());
        let why = r.matches(&json!({"amount": 1500})).unwrap();
        assert!(why.contains("args.amount > 1000"), "{why}");
        assert!(r.matches(&json!({"amount": 6000})).is_none());
        // Missing or not a number: the gate fails closed.
        assert!(r.matches(&json!({})).is_some());
        assert!(r.matches(&json!({"amount": "lots"})).is_some());
    }

    #[test]
    fn equality_compares_numbers_by_value_and_a_missing_argument_needs_approval() {
        let ToolApproval::When(r) =
            rule(r#"approval = { when = { "args.amount" = { in = [1, 2] } } }"#).unwrap()
        else {
            panic!("a rule");
        };
        assert!(r.matches(&json!({"amount": 2.0})).is_some(), "2.0 is 2");
        assert!(r.matches(&json!({"amount": 3})).is_none());
        assert!(r.matches(&json!({})).is_some(), "missing: fails closed");
        let ToolApproval::When(r) =
            rule(r#"approval = { when = { "args.to" = { ne = "team@example.com" } } }"#).unwrap()
        else {
            panic!("a rule");
        };
        assert!(r.matches(&json!({"to": "team@example.com"})).is_none());
        assert!(r.matches(&json!({"to": "x@evil.example"})).is_some());
        assert!(r.matches(&json!({})).is_some(), "missing: fails closed");
    }

    #[test]
    fn a_rule_is_refused_with_its_field_when_it_reads_nothing_real() {
        assert_eq!(
            rule(r#"approval = "required""#).unwrap(),
            ToolApproval::Required
        );
        let (field, why) = rule(r#"approval = "sometimes""#).unwrap_err();
        assert_eq!(field, "approval");
        assert!(why.contains("\"sometimes\""), "{why}");
        let (field, _) =
            rule(r#"approval = { when = { "args.ammount" = { gt = 1 } } }"#).unwrap_err();
        assert_eq!(field, "approval.when.\"args.ammount\"");
        let (field, _) =
            rule(r#"approval = { when = { "args.amount" = { gt = "x" } } }"#).unwrap_err();
        assert_eq!(field, "approval.when.\"args.amount\".gt");
        let (field, _) =
            rule(r#"approval = { when = { "args.amount" = { about = 1 } } }"#).unwrap_err();
        assert_eq!(field, "approval.when.\"args.amount\".about");
        assert!(rule(r#"approval = { when = { "args.to" = { in = ["a", "b"] } } }"#).is_ok());
    }

    #[test]
    fn the_tier_gate_and_the_tool_rule_each_ask_for_approval() {
        let s = ApprovalSettings {
            from_tier: Some(SideEffectTier::High),
            ..ApprovalSettings::default()
        };
        assert!(
            s.needed(
                &ToolApproval::Never,
                Some(SideEffectTier::Medium),
                &json!({})
            )
            .is_none()
        );
        assert!(
            s.needed(&ToolApproval::Never, Some(SideEffectTier::High), &json!({}))
                .is_some()
        );
        assert!(
            ApprovalSettings::default()
                .needed(
                    &ToolApproval::Required,
                    Some(SideEffectTier::None),
                    &json!({})
                )
                .is_some()
        );
    }
}

//! `[tools.NAME.lint]`: the lint rules silenced for one tool, each with
//! the reason (see [`crate::lint`]).
//!
//! ```toml
//! [tools.send_email.lint]
//! allow = [
//!   { rule = "destructive-without-confirmation", reason = "approved in the ticket UI before the run starts" },
//! ]
//! ```
//!
//! # Why a reason is required
//!
//! A silenced rule without a reason is indistinguishable from one silenced
//! to make CI pass. The reason is shown beside the silenced finding in
//! every `rein lint` output, so the next reader can judge it; an unknown
//! rule id is refused (a typo would silence nothing and say so nowhere).

use schemars::JsonSchema;
use serde::Deserialize;

use crate::lint::{Allowance, Rule};

/// `[tools.NAME.lint]` as written in config.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ToolLintConfig {
    /// Rules silenced for this tool.
    pub allow: Vec<AllowConfig>,
}

/// One entry of `[tools.NAME.lint] allow`.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AllowConfig {
    /// The rule's id (`free-text-enum`); required.
    pub rule: Option<String>,
    /// Why the rule does not apply to this tool; required, not blank.
    pub reason: Option<String>,
}

/// A problem of a setting: the field below the tool's table, and what is
/// wrong.
type FieldProblem = (String, String);

/// Validates `[tools.NAME.lint]`: every entry names a known rule, once,
/// with a reason. Returns every problem, not just the first.
pub(super) fn check_lint(c: &ToolLintConfig) -> Result<Vec<Allowance>, Vec<FieldProblem>> {
    let mut allowances: Vec<Allowance> = Vec::new();
    let mut problems = Vec::new();
    for (i, entry) in c.allow.iter().enumerate() {
        let at = format!("lint.allow[{i}]");
        let rule = match entry.rule.as_deref() {
            None => {
                problems.push((
                    format!("{at}.rule"),
                    "is required: the id of the rule to silence, e.g. \"free-text-enum\""
                        .to_owned(),
                ));
                None
            }
            Some(id) => match id.parse::<Rule>() {
                Ok(rule) => Some(rule),
                Err(unknown) => {
                    problems.push((format!("{at}.rule"), unknown.to_string()));
                    None
                }
            },
        };
        let reason = entry
            .reason
            .as_deref()
            .map(str::trim)
            .filter(|r| !r.is_empty());
        if reason.is_none() {
            problems.push((
                format!("{at}.reason"),
                "is required: say why the rule does not apply to this tool".to_owned(),
            ));
        }
        if let (Some(rule), Some(reason)) = (rule, reason) {
            if allowances.iter().any(|a| a.rule == rule) {
                problems.push((
                    format!("{at}.rule"),
                    format!("silences `{rule}` a second time"),
                ));
            } else {
                allowances.push(Allowance::new(rule, reason));
            }
        }
    }
    if problems.is_empty() {
        Ok(allowances)
    } else {
        Err(problems)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lint(text: &str) -> Result<Vec<Allowance>, Vec<FieldProblem>> {
        let c: ToolLintConfig = toml::from_str(text).unwrap();
        check_lint(&c)
    }

    #[test]
    fn a_known_rule_with_a_reason_is_allowed() {
        let allowed =
            lint(r#"allow = [{ rule = "free-text-enum", reason = "any label" }]"#).unwrap();
        assert_eq!(allowed, [Allowance::new(Rule::FreeTextEnum, "any label")]);
    }

    #[test]
    fn an_unknown_rule_a_blank_reason_and_a_repeat_are_refused() {
        let problems = lint(
            r#"allow = [
                { rule = "free-text", reason = "x" },
                { rule = "missing-unit", reason = "  " },
                { rule = "missing-unit", reason = "y" },
                { rule = "missing-unit", reason = "z" },
            ]"#,
        )
        .unwrap_err();
        let fields: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            fields,
            [
                "lint.allow[0].rule",
                "lint.allow[1].reason",
                "lint.allow[3].rule"
            ]
        );
        assert!(
            problems[0].1.contains("is not a lint rule"),
            "{}",
            problems[0].1
        );
    }

    #[test]
    fn a_missing_rule_is_refused() {
        let problems = lint(r#"allow = [{ reason = "x" }]"#).unwrap_err();
        assert_eq!(problems[0].0, "lint.allow[0].rule");
    }
}

//! [`Rule::AnnotationContradictsClass`]: an MCP server's annotations
//! against rein's class for the same tool.
//!
//! # Why rein's class wins, and why a contradiction still matters
//!
//! rein never trusts a server's hints for safety: the class in the
//! registry decides retries, keys and the ledger. But a server that says
//! `readOnlyHint: false` about a tool rein retries freely as a `read` knows
//! something the registry's author may not. Where rein would be *less*
//! careful than the server says, the finding is an error; where it is
//! more careful, a warning (someone is wrong, and the cost is only
//! caution).

use super::definition::ToolDefinition;
use super::finding::Finding;
use super::rule::{Rule, Severity};
use crate::tool::ToolClass;

/// Runs the rule on `tool`.
pub(super) fn check(tool: &ToolDefinition, out: &mut Vec<Finding>) {
    let Some(class) = tool.class else {
        return;
    };
    let hints = tool.annotations;
    let class_name = class.as_str();
    let mut contradiction = |severity: Severity, hint: &str, value: bool, meaning: &str| {
        out.push(
            Finding::new(
                Rule::AnnotationContradictsClass,
                &tool.name,
                "class",
                format!(
                    "rein's class is `{class_name}` but the server says {hint}: {value}, {meaning}"
                ),
            )
            .with_severity(severity),
        );
    };
    match class {
        ToolClass::Read => {
            if hints.read_only == Some(false) {
                contradiction(
                    Severity::Error,
                    "readOnlyHint",
                    false,
                    "that it changes something; rein retries reads freely",
                );
            }
            if hints.destructive == Some(true) {
                contradiction(
                    Severity::Error,
                    "destructiveHint",
                    true,
                    "that it destroys something; rein retries reads freely",
                );
            }
        }
        ToolClass::IdempotentWrite => {
            if hints.idempotent == Some(false) {
                contradiction(
                    Severity::Error,
                    "idempotentHint",
                    false,
                    "that a repeated call has a further effect; rein retries idempotent writes",
                );
            }
            if hints.read_only == Some(true) {
                contradiction(
                    Severity::Warning,
                    "readOnlyHint",
                    true,
                    "that it changes nothing",
                );
            }
        }
        ToolClass::Irreversible => {
            if hints.destructive == Some(false) {
                contradiction(
                    Severity::Warning,
                    "destructiveHint",
                    false,
                    "that it only adds and destroys nothing",
                );
            }
            if hints.idempotent == Some(true) {
                contradiction(
                    Severity::Warning,
                    "idempotentHint",
                    true,
                    "that repeating a call is harmless",
                );
            }
            if hints.read_only == Some(true) {
                contradiction(
                    Severity::Warning,
                    "readOnlyHint",
                    true,
                    "that it changes nothing",
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::lint::Annotations;

    fn found(class: ToolClass, hints: Annotations) -> Vec<Severity> {
        let tool = ToolDefinition::new("t", "Does t.", json!({}))
            .with_class(class)
            .with_annotations(hints);
        let mut out = Vec::new();
        check(&tool, &mut out);
        out.into_iter().map(|f| f.severity).collect()
    }

    #[test]
    fn an_irreversible_tool_the_server_calls_not_destructive_warns() {
        assert_eq!(
            found(
                ToolClass::Irreversible,
                Annotations::new(Some(false), Some(false), None)
            ),
            [Severity::Warning]
        );
    }

    #[test]
    fn a_read_the_server_says_writes_is_an_error() {
        assert_eq!(
            found(ToolClass::Read, Annotations::new(Some(false), None, None)),
            [Severity::Error]
        );
        assert_eq!(
            found(
                ToolClass::IdempotentWrite,
                Annotations::new(None, None, Some(false))
            ),
            [Severity::Error]
        );
    }

    #[test]
    fn agreeing_or_unstated_annotations_pass() {
        assert!(
            found(
                ToolClass::Read,
                Annotations::new(Some(true), Some(false), Some(true))
            )
            .is_empty()
        );
        assert!(
            found(
                ToolClass::Irreversible,
                Annotations::new(Some(false), Some(true), Some(false))
            )
            .is_empty()
        );
        assert!(found(ToolClass::IdempotentWrite, Annotations::default()).is_empty());
    }
}

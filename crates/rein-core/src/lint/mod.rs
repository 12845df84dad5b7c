//! The tool-definition lint: seed 002's advice on what makes a tool
//! description reliable, as named rules with a severity and a fix.
//!
//! # Why
//!
//! The model decides which tool to call and how to fill its arguments from
//! four things only: the tool's name, its description, each parameter's
//! name and each parameter's description (seed 002, "Tool Call Schema
//! Design"). A `priority` without an enum, a unitless `timeout` or a
//! `send_notification` that only emails fail silently: the call succeeds,
//! with the wrong value. `rein check` checks that a registry is
//! consistent; this lint checks that what the model reads is unambiguous —
//! the cheapest reliability there is.
//!
//! # Input
//!
//! [`lint`] reads a slice of [`ToolDefinition`]s, whichever source they
//! came from: [`definitions`] builds them from a [`Registry`], an MCP
//! client from a server's tool list (name, description, input schema,
//! annotations). Rules that need a fact a definition lacks (rein's class,
//! a server's annotations) skip it.
//!
//! # Rules
//!
//! | id | severity | looks for |
//! | --- | --- | --- |
//! | `verb-object-first` | warning | the first sentence opens with a non-verb (`This tool…`), has no object, or its verb contradicts the class (a read verb on a write, a write verb on a read) |
//! | `name-description-mismatch` | warning (note) | the name's verb and the description's differ in kind; the name says a general channel (`send_notification`) and the description one (`email`), or names another; (note) the description never mentions the name's object |
//! | `description-length` | warning | more than [`MAX_DESCRIPTION_WORDS`] words |
//! | `free-text-enum` | warning | a string named `…priority`, `…status`, `…level`, `…mode`, `…type`, … without `enum`/`const`/`pattern`/`format` |
//! | `missing-unit` | warning (note) | a number named for a duration, size or money without a unit in its name (`timeout` → `timeout_seconds`); a note when only the description names the unit |
//! | `boolean-third-state` | warning (note) | a nullable boolean, or one named for a degree (`include_details`, `verbose`); (note) an optional boolean without a default |
//! | `id-without-lookup` | warning | an `…_id`/`…_key` without enum whose descriptions name no source (another tool, "from", "returned", "call", "list", …) |
//! | `missing-example` | note | a formatted string (date, time, query, filter, path, url, code, id, …) without format, pattern, enum or an example in its description |
//! | `negative-constraint` | warning | two tools with the same object and verbs of one kind (`update_record`/`patch_record`) whose description neither names the other nor says what it does not do |
//! | `inconsistent-naming` | warning | one concept spelled two ways across tools (`order_id`/`orderId`), or a bare `id` where another tool says `order_id` |
//! | `destructive-without-confirmation` | warning | an irreversible tool, or a destructive one, without a `confirm`/`dry_run` parameter or an approval gate |
//! | `strict-mode` | note | what OpenAI's strict mode refuses: open objects, optional properties, unsupported keywords, size limits |
//! | `annotation-contradicts-class` | error (warning) | MCP annotations against rein's class; an error where rein would be less careful than the server says |
//! | `hidden-unicode` | error | zero-width, bidi-control, tag and other invisible characters in any model-facing string |
//! | `instruction-like-text` | warning | "ignore previous instructions", "you must always", `<IMPORTANT>`, "do not tell the user", paths to secrets |
//!
//! Each rule's full heuristic is [`Rule::looks_for`]; `docs/lint.md`
//! gives them all, with the command's usage (a test keeps the two equal).
//!
//! # Silencing
//!
//! A finding that is wrong for one tool is silenced for that tool, with a
//! reason ([`ToolDefinition::allow`]; in config `[tools.NAME.lint] allow =
//! [{ rule = "…", reason = "…" }]`). Silenced findings are not dropped:
//! the [`Report`] lists them with their reasons, so that a review sees
//! what was waived and why; and an allowance that silences nothing is
//! listed too ([`Report::unused`]), before it hides a future finding.
//!
//! ```
//! use rein_core::lint::{self, Rule, ToolDefinition};
//! use serde_json::json;
//!
//! let tool = ToolDefinition::new(
//!     "create_ticket",
//!     "Create one ticket in the tracker.",
//!     json!({
//!         "type": "object",
//!         "properties": { "priority": { "type": "string", "description": "Ticket priority" } },
//!         "required": ["priority"],
//!         "additionalProperties": false
//!     }),
//! );
//! let report = lint::lint(&[tool.clone()]);
//! assert_eq!(report.findings[0].rule, Rule::FreeTextEnum);
//!
//! let waived = tool
//!     .allowing(Rule::FreeTextEnum, "the tracker accepts any label")
//!     .allowing(Rule::MissingUnit, "no quantities here");
//! let report = lint::lint(&[waived]);
//! assert!(report.findings.is_empty());
//! assert_eq!(report.silenced[0].reason, "the tracker accepts any label");
//! assert_eq!(report.unused[0].rule, Rule::MissingUnit);
//! ```

mod annotations;
mod definition;
mod description;
mod destructive;
mod finding;
mod param;
mod parameters;
mod poisoning;
mod rule;
mod strict_mode;
mod tool_set;
mod units;
mod words;

pub use definition::{Allowance, Annotations, ApprovalGate, ToolDefinition, definitions};
pub use finding::{Finding, Report, Silenced, UnusedAllowance};
pub use rule::{Rule, Severity, UnknownRule};
pub use strict_mode::{MAX_STRICT_DEPTH, MAX_STRICT_ENUM_VALUES, MAX_STRICT_PROPERTIES};

#[cfg(doc)]
use crate::registry::Registry;
use crate::tool::ToolClass;

/// The longest tool description, in words, before
/// [`Rule::DescriptionLength`] fires: past it, a tool is usually doing
/// too many things (seed 002, "Keep descriptions within ~200 words").
pub const MAX_DESCRIPTION_WORDS: usize = 200;

/// Runs every rule over `tools` (one tool set: the cross-tool rules compare
/// them with one another) and sorts the findings into those that stand and
/// those an [`Allowance`] silenced.
///
/// Findings are ordered by tool (in the order given), then field, then
/// rule, so that output is stable from run to run.
pub fn lint(tools: &[ToolDefinition]) -> Report {
    let mut found = Vec::new();
    for tool in tools {
        description::check(tool, &mut found);
        parameters::check(tool, tools, &mut found);
        units::check(tool, &mut found);
        destructive::check(tool, &mut found);
        strict_mode::check(tool, &mut found);
        annotations::check(tool, &mut found);
        poisoning::check(tool, &mut found);
    }
    tool_set::check(tools, &mut found);
    let position = |name: &str| tools.iter().position(|tool| tool.name == name);
    found.sort_by(|a, b| {
        (position(&a.tool), &a.field, a.rule).cmp(&(position(&b.tool), &b.field, b.rule))
    });
    let mut report = Report::default();
    for finding in found {
        let reason = tools
            .iter()
            .find(|tool| tool.name == finding.tool)
            .and_then(|tool| tool.allowed(finding.rule));
        match reason {
            Some(reason) => report.silenced.push(Silenced {
                reason: reason.to_owned(),
                finding,
            }),
            None => report.findings.push(finding),
        }
    }
    for tool in tools {
        for (index, allowance) in tool.allow.iter().enumerate() {
            let used = report
                .silenced
                .iter()
                .any(|s| s.finding.tool == tool.name && s.finding.rule == allowance.rule);
            if !used {
                report.unused.push(UnusedAllowance {
                    tool: tool.name.clone(),
                    rule: allowance.rule,
                    index,
                });
            }
        }
    }
    report
}

/// Whether `tool` changes something: from rein's class when it has one,
/// else from its server's `readOnlyHint`; `None` when nothing says.
fn is_write(tool: &ToolDefinition) -> Option<bool> {
    match tool.class {
        Some(class) => Some(class != ToolClass::Read),
        None => tool.annotations.read_only.map(|read_only| !read_only),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, description: &str) -> ToolDefinition {
        ToolDefinition::new(
            name,
            description,
            json!({
                "type": "object",
                "properties": {
                    "timeout": {"type": "integer", "description": "How long to wait."},
                    "priority": {"type": "string", "description": "How urgent."}
                },
                "required": ["timeout", "priority"],
                "additionalProperties": false
            }),
        )
    }

    #[test]
    fn findings_come_by_tool_in_the_order_given_then_by_field() {
        let report = lint(&[
            tool("zeta_job", "This job runs."),
            tool("alpha_job", "Start one job."),
        ]);
        let order: Vec<(&str, &str)> = report
            .findings
            .iter()
            .map(|f| (f.tool.as_str(), f.field.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("zeta_job", "description"),
                ("zeta_job", "schema.properties.priority"),
                ("zeta_job", "schema.properties.timeout"),
                ("alpha_job", "schema.properties.priority"),
                ("alpha_job", "schema.properties.timeout"),
            ]
        );
    }

    #[test]
    fn an_allowance_silences_its_rule_on_its_tool_only() {
        let report = lint(&[
            tool("zeta_job", "Start one job.").allowing(Rule::MissingUnit, "a count of ticks"),
            tool("alpha_job", "Start one job."),
        ]);
        assert_eq!(report.silenced.len(), 1);
        assert_eq!(report.silenced[0].finding.tool, "zeta_job");
        assert!(
            report
                .findings
                .iter()
                .any(|f| f.rule == Rule::MissingUnit && f.tool == "alpha_job")
        );
        assert!(report.unused.is_empty());
        assert!(report.any_at_or_above(Severity::Warning));
        assert!(!report.any_at_or_above(Severity::Error));
    }
}

//! [`Rule::DestructiveWithoutConfirmation`]: a tool that cannot be taken
//! back needs a step where someone looks before it acts (seed 002,
//! "Handling Destructive and Irreversible Operations").
//!
//! Two such steps count: a parameter the model must set on purpose
//! (`confirm = true`, or `dry_run = false` after a preview), or a human's
//! approval through rein's gate. Either turns "the model proposed it" into
//! "the model, or a human, confirmed it".

use super::definition::{ApprovalGate, ToolDefinition};
use super::finding::Finding;
use super::param::params;
use super::rule::Rule;
use super::words::{is_destructive_verb, name_words};
use crate::registry::{CompensationGrade, SideEffectTier};
use crate::tool::ToolClass;

/// Parameter names that make a call confirm itself or only preview.
const CONFIRMATION_NAMES: &[&[&str]] = &[
    &["confirm"],
    &["confirmed"],
    &["confirmation"],
    &["dry", "run"],
    &["dryrun"],
    &["preview"],
    &["simulate"],
    &["validate", "only"],
];

/// Runs the rule on `tool`.
pub(super) fn check(tool: &ToolDefinition, out: &mut Vec<Finding>) {
    let Some(why) = destructive(tool) else {
        return;
    };
    if tool.approval != ApprovalGate::None {
        return;
    }
    let confirms = params(&tool.schema).iter().any(|param| {
        param.field.matches(".properties.").count() == 1
            && CONFIRMATION_NAMES.iter().any(|words| {
                param
                    .words
                    .iter()
                    .map(String::as_str)
                    .eq(words.iter().copied())
            })
    });
    if confirms {
        return;
    }
    out.push(Finding::new(
        Rule::DestructiveWithoutConfirmation,
        &tool.name,
        "",
        format!(
            "{why}, yet a call needs neither a `confirm`/`dry_run` parameter nor a human's approval"
        ),
    ));
}

/// Why `tool` cannot be taken back, or `None` when it can.
fn destructive(tool: &ToolDefinition) -> Option<String> {
    match tool.class {
        Some(ToolClass::Irreversible) => return Some("the tool is irreversible".to_owned()),
        Some(ToolClass::Read) => return None,
        _ => {}
    }
    if tool.annotations.destructive == Some(true) && tool.annotations.read_only != Some(true) {
        return Some("its server says the tool is destructive".to_owned());
    }
    let undone = tool.compensation == Some(CompensationGrade::Strong);
    if tool.side_effect_tier == Some(SideEffectTier::High) && !undone {
        return Some(
            "its side-effect tier is high (visible and hard to take back), and no strong compensation undoes it"
                .to_owned(),
        );
    }
    let verb = name_words(&tool.name).into_iter().next()?;
    (is_destructive_verb(&verb) && !undone)
        .then(|| format!("the tool's name says it {verb}s, and no strong compensation undoes it"))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn delete_record(with_confirm: bool) -> ToolDefinition {
        let mut props =
            json!({"record_id": {"type": "string", "description": "Record to delete."}});
        if with_confirm {
            props["confirm"] = json!({"type": "boolean", "default": false, "description": "Must be true to delete."});
        }
        ToolDefinition::new(
            "delete_record",
            "PERMANENT deletion of a record.",
            json!({"type": "object", "properties": props}),
        )
        .with_class(ToolClass::Irreversible)
    }

    fn found(tool: &ToolDefinition) -> usize {
        let mut out = Vec::new();
        check(tool, &mut out);
        out.len()
    }

    #[test]
    fn an_irreversible_tool_without_confirm_or_approval_fires() {
        assert_eq!(found(&delete_record(false)), 1);
    }

    #[test]
    fn a_confirm_parameter_or_an_approval_gate_passes() {
        assert_eq!(found(&delete_record(true)), 0);
        assert_eq!(
            found(&delete_record(false).with_approval(ApprovalGate::Always)),
            0
        );
        assert_eq!(
            found(&delete_record(false).with_approval(ApprovalGate::Conditional)),
            0
        );
    }

    #[test]
    fn a_dry_run_in_camel_case_counts() {
        let mut tool = delete_record(false);
        tool.schema["properties"]["dryRun"] =
            json!({"type": "boolean", "description": "Preview only."});
        assert_eq!(found(&tool), 0);
    }

    #[test]
    fn a_delete_verb_on_an_unclassified_tool_fires_and_a_read_does_not() {
        let mcp = ToolDefinition::new("remove_user", "Removes a user.", json!({"type": "object"}));
        assert_eq!(found(&mcp), 1);
        let read = ToolDefinition::new("remove_user", "x", json!({})).with_class(ToolClass::Read);
        assert_eq!(found(&read), 0);
    }

    #[test]
    fn a_high_tier_write_fires_unless_a_strong_compensation_undoes_it() {
        let mut charge =
            ToolDefinition::new("charge_card", "Charge a card.", json!({"type": "object"}))
                .with_class(ToolClass::IdempotentWrite);
        charge.side_effect_tier = Some(SideEffectTier::High);
        assert_eq!(found(&charge), 1);
        charge.compensation = Some(CompensationGrade::Strong);
        assert_eq!(found(&charge), 0);
        charge.side_effect_tier = Some(SideEffectTier::Medium);
        charge.compensation = Some(CompensationGrade::None);
        assert_eq!(found(&charge), 0);
    }

    #[test]
    fn a_destructive_hint_fires_on_an_unclassified_tool() {
        let hinted = ToolDefinition::new("tidy", "Tidies up.", json!({}))
            .with_annotations(crate::lint::Annotations::new(Some(false), Some(true), None));
        assert_eq!(found(&hinted), 1);
    }
}

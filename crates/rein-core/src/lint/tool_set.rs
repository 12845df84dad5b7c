//! Rules over the tool set as a whole (seed 002, "Multi-Tool Coherence"):
//! one concept, one name in every tool ([`Rule::InconsistentNaming`]), and
//! near-twin tools that say when not to use each
//! ([`Rule::NegativeConstraint`]).
//!
//! A value copied from one tool's output into another's input under a
//! different name is a silent error: the wrong id is passed, a different
//! record is read, and the agent goes on unaware.

use std::collections::BTreeMap;

use super::definition::ToolDefinition;
use super::finding::Finding;
use super::param::params;
use super::rule::Rule;
use super::words::{has_phrase, name_words, text_words, verb_stems};

/// Runs the tool-set rules over `tools`.
pub(super) fn check(tools: &[ToolDefinition], out: &mut Vec<Finding>) {
    inconsistent_spelling(tools, out);
    bare_id(tools, out);
    negative_constraint(tools, out);
}

/// One parameter of one tool.
struct Use<'a> {
    tool: &'a str,
    field: String,
    name: &'a str,
}

/// Parameters that are the same words spelled differently: every spelling
/// but the most common one (ties: snake_case, then the first in name
/// order) is flagged.
fn inconsistent_spelling(tools: &[ToolDefinition], out: &mut Vec<Finding>) {
    let mut concepts: BTreeMap<String, Vec<Use<'_>>> = BTreeMap::new();
    for tool in tools {
        for param in params(&tool.schema) {
            concepts
                .entry(param.words.join("_"))
                .or_default()
                .push(Use {
                    tool: &tool.name,
                    field: param.field.clone(),
                    name: param.name,
                });
        }
    }
    for uses in concepts.values() {
        let mut spellings: BTreeMap<&str, usize> = BTreeMap::new();
        for use_ in uses {
            *spellings.entry(use_.name).or_default() += 1;
        }
        if spellings.len() < 2 {
            continue;
        }
        // The most used spelling; a tie goes to snake_case (what JSON
        // Schema examples and rein's own config use), then to the first.
        let snake = |name: &str| !name.chars().any(char::is_uppercase);
        let Some((common, _)) = spellings
            .iter()
            .max_by(|a, b| (a.1, snake(a.0)).cmp(&(b.1, snake(b.0))).then(b.0.cmp(a.0)))
        else {
            continue;
        };
        let example = uses
            .iter()
            .find(|u| u.name == *common)
            .map_or("", |u| u.tool);
        for use_ in uses.iter().filter(|u| u.name != *common) {
            out.push(
                Finding::new(
                    Rule::InconsistentNaming,
                    use_.tool,
                    &use_.field,
                    format!(
                        "`{}` here is `{common}` in `{example}`: the same concept under two names",
                        use_.name
                    ),
                )
                .with_help(format!("name it `{common}` as the other tools do")),
            );
        }
    }
}

/// A bare `id` in a tool about `X` when another tool takes `X_id`.
fn bare_id(tools: &[ToolDefinition], out: &mut Vec<Finding>) {
    for tool in tools {
        let objects = objects_of(&tool.name);
        for param in params(&tool.schema) {
            if param.words != ["id"] || param.field.matches(".properties.").count() != 1 {
                continue;
            }
            let named = tools
                .iter()
                .filter(|other| other.name != tool.name)
                .find_map(|other| {
                    params(&other.schema).into_iter().find_map(|p| {
                        let (id, object) = p.words.split_last()?;
                        (id == "id" && objects.iter().any(|o| *o == object.join("_")))
                            .then(|| (other.name.clone(), p.name.to_owned()))
                    })
                });
            if let Some((other, name)) = named {
                out.push(
                    Finding::new(
                        Rule::InconsistentNaming,
                        &tool.name,
                        &param.field,
                        format!(
                            "`id` here is `{name}` in `{other}`: the same concept under two names"
                        ),
                    )
                    .with_help(format!("name it `{name}` as `{other}` does")),
                );
            }
        }
    }
}

/// What a tool's name is about: every run of words after its first (the
/// verb), singular: `get_order_details` → `order_details`, `order`,
/// `details`, `detail`.
fn objects_of(name: &str) -> Vec<String> {
    let words = name_words(name);
    let rest = words.get(1..).unwrap_or_default();
    let mut objects = Vec::new();
    for start in 0..rest.len() {
        for end in start + 1..=rest.len() {
            let joined = rest[start..end].join("_");
            objects.extend(verb_stems(&joined));
        }
    }
    objects
}

/// Verbs of one kind: two tools on the same object with verbs of one group
/// are easily confused.
const VERB_GROUPS: &[&[&str]] = &[
    &[
        "update",
        "patch",
        "modify",
        "edit",
        "change",
        "set",
        "replace",
        "overwrite",
    ],
    &[
        "delete", "remove", "destroy", "purge", "erase", "drop", "archive",
    ],
    &["get", "fetch", "read", "lookup", "find", "retrieve", "show"],
    &["send", "post", "publish", "notify"],
    &["create", "add", "insert", "make", "register"],
];

/// Words that say what a tool does not do or when another is meant.
const NEGATIONS: &[&str] = &[
    "not",
    "never",
    "only",
    "instead",
    "unlike",
    "rather than",
    "don't",
    "doesn't",
    "cannot",
    "without",
];

fn negative_constraint(tools: &[ToolDefinition], out: &mut Vec<Finding>) {
    let group_of = |verb: &str| VERB_GROUPS.iter().position(|g| g.contains(&verb));
    for tool in tools {
        let words = name_words(&tool.name);
        let Some((verb, object)) = words.split_first() else {
            continue;
        };
        let Some(group) = group_of(verb) else {
            continue;
        };
        let twin = tools.iter().find(|other| {
            let theirs = name_words(&other.name);
            other.name != tool.name
                && theirs.split_first().is_some_and(|(v, o)| {
                    v != verb && o == object && !o.is_empty() && group_of(v) == Some(group)
                })
        });
        let Some(twin) = twin else {
            continue;
        };
        let said = text_words(&tool.description);
        if tool.description.contains(twin.name.as_str())
            || NEGATIONS.iter().any(|n| has_phrase(&said, n))
        {
            continue;
        }
        out.push(
            Finding::new(
                Rule::NegativeConstraint,
                &tool.name,
                "description",
                format!(
                    "`{}` and `{}` sound alike, and this description does not say what sets it apart",
                    tool.name, twin.name
                ),
            )
            .with_help(format!(
                "front-load the difference and name the other: \"… Fields not included are unchanged. Use {} to …\"",
                twin.name
            )),
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tool(name: &str, description: &str, param: &str) -> ToolDefinition {
        ToolDefinition::new(
            name,
            description,
            json!({"type": "object", "properties": {param: {"type": "string", "description": "x"}}}),
        )
    }

    fn found(tools: &[ToolDefinition]) -> Vec<(Rule, String, String)> {
        let mut out = Vec::new();
        check(tools, &mut out);
        out.into_iter().map(|f| (f.rule, f.tool, f.field)).collect()
    }

    #[test]
    fn order_id_and_order_id_in_camel_case_fire_on_the_minority() {
        let tools = [
            tool("get_order", "Look up an order.", "order_id"),
            tool("cancel_order", "Cancel an order.", "order_id"),
            tool("refund_order", "Refund an order.", "orderId"),
        ];
        assert_eq!(
            found(&tools),
            [(
                Rule::InconsistentNaming,
                "refund_order".to_owned(),
                "schema.properties.orderId".to_owned()
            )]
        );
    }

    #[test]
    fn a_bare_id_fires_when_another_tool_says_order_id() {
        let tools = [
            tool("get_order", "Look up an order.", "id"),
            tool("cancel_order", "Cancel an order.", "order_id"),
        ];
        assert_eq!(
            found(&tools),
            [(
                Rule::InconsistentNaming,
                "get_order".to_owned(),
                "schema.properties.id".to_owned()
            )]
        );
    }

    #[test]
    fn one_name_everywhere_passes() {
        let tools = [
            tool("get_order", "Look up an order.", "order_id"),
            tool("cancel_order", "Cancel an order.", "order_id"),
            tool("get_user", "Look up a user.", "id"),
        ];
        assert!(found(&tools).is_empty());
    }

    #[test]
    fn update_and_patch_of_one_record_fire_unless_they_say_how_they_differ() {
        let vague = [
            tool(
                "update_record",
                "Updates a record in the database.",
                "record_id",
            ),
            tool(
                "patch_record",
                "Patches a record with partial data.",
                "record_id",
            ),
        ];
        let rules: Vec<String> = found(&vague).into_iter().map(|f| f.1).collect();
        assert_eq!(rules, ["update_record", "patch_record"]);
        let clear = [
            tool(
                "update_record",
                "Overwrites all fields of a record. Use patch_record to change some.",
                "record_id",
            ),
            tool(
                "patch_record",
                "Updates specific fields of a record. Fields not included are unchanged.",
                "record_id",
            ),
        ];
        assert!(found(&clear).is_empty());
    }

    #[test]
    fn get_one_and_list_many_are_no_twins() {
        let tools = [
            tool("get_order", "Look up an order.", "order_id"),
            tool("list_orders", "List orders.", "status_filter"),
        ];
        assert!(found(&tools).is_empty());
    }
}

//! Rules on each parameter's schema: free text where an enum belongs
//! ([`Rule::FreeTextEnum`]), booleans that hide a third state
//! ([`Rule::BooleanThirdState`]), ids without lookup guidance
//! ([`Rule::IdWithoutLookup`]) and formatted strings without an example
//! ([`Rule::MissingExample`]) — seed 002's "five failure modes" and "the
//! example rule".

use super::definition::ToolDefinition;
use super::finding::Finding;
use super::param::{Param, params};
use super::rule::{Rule, Severity};
use super::words::{has_phrase, name_words, text_words};

/// Runs the parameter rules on `tool`; `set` is the whole tool set (an
/// id's description may name the tool that lists its values).
pub(super) fn check(tool: &ToolDefinition, set: &[ToolDefinition], out: &mut Vec<Finding>) {
    for param in params(&tool.schema) {
        free_text_enum(tool, &param, out);
        boolean_third_state(tool, &param, out);
        id_without_lookup(tool, set, &param, out);
        missing_example(tool, &param, out);
    }
}

/// Last name words that say "one of a few values".
const ENUM_WORDS: &[&str] = &[
    "priority",
    "status",
    "state",
    "level",
    "mode",
    "type",
    "kind",
    "category",
    "severity",
    "tier",
    "channel",
    "sort",
    "direction",
    "visibility",
    "role",
    "stage",
    "phase",
    "environment",
    "strategy",
    "scope",
    "granularity",
    "format",
];

fn free_text_enum(tool: &ToolDefinition, param: &Param<'_>, out: &mut Vec<Finding>) {
    if !param.is("string")
        || !param.ends_with_any(ENUM_WORDS)
        || param.is_enumerated()
        || param.schema.contains_key("pattern")
        || param.schema.contains_key("format")
    {
        return;
    }
    out.push(
        Finding::new(
            Rule::FreeTextEnum,
            &tool.name,
            &param.field,
            format!(
                "`{}` is free text, but its name says it takes one of a few values: the model will guess their spelling",
                param.name
            ),
        )
        .with_help(format!(
            "list the accepted values: {} = {{ type = \"string\", enum = [\"low\", \"high\"], description = \"… use 'high' only for …\" }}",
            param.name
        )),
    );
}

/// Name words that are a degree, not a yes/no.
const DEGREE_WORDS: &[&str] = &[
    "detail", "details", "detailed", "verbose", "full", "extended", "extra", "deep", "brief",
    "summary", "rich", "advanced", "complete", "more",
];

fn boolean_third_state(tool: &ToolDefinition, param: &Param<'_>, out: &mut Vec<Finding>) {
    if !param.is("boolean") {
        return;
    }
    let finding =
        |message: String| Finding::new(Rule::BooleanThirdState, &tool.name, &param.field, message);
    let nullable = param.is("null")
        || param
            .schema
            .get("nullable")
            .and_then(serde_json::Value::as_bool)
            == Some(true);
    if nullable {
        out.push(finding(format!(
            "`{}` is true, false or null: null is a third state whose meaning the model must guess",
            param.name
        )));
    } else if param.has_any(DEGREE_WORDS) {
        out.push(finding(format!(
            "`{}` is a degree (how much detail), not a yes/no: the model decides what counts as true",
            param.name
        )));
    } else if !param.required
        && !param.schema.contains_key("default")
        && !text_words(param.description())
            .iter()
            .any(|w| w == "default" || w == "defaults")
    {
        out.push(
            finding(format!(
                "`{}` is optional with no default: absent is a third state besides true and false",
                param.name
            ))
            .with_severity(Severity::Note)
            .with_help("give it a `default` (and say it in the description), or make it required"),
        );
    }
}

/// Name words of keys that are credentials or recipes, not ids of records.
const NOT_RECORD_KEYS: &[&str] = &[
    "api",
    "secret",
    "access",
    "idempotency",
    "private",
    "public",
    "encryption",
    "sort",
    "license",
    "signing",
];

/// Words that say where a value comes from.
const SOURCE_PHRASES: &[&str] = &[
    "from",
    "returned",
    "returns",
    "call",
    "list",
    "look up",
    "lookup",
    "search",
    "given",
    "provided",
    "obtain",
    "obtained",
    "retrieve",
    "retrieved",
    "as shown",
    "found",
    "appears",
];

/// Whether `param` names a record by id or key.
pub(super) fn is_id(param: &Param<'_>) -> bool {
    let Some(last) = param.words.last() else {
        return false;
    };
    match last.as_str() {
        "id" | "ids" | "uuid" => true,
        "key" | "keys" => !param.has_any(NOT_RECORD_KEYS) && param.words.len() > 1,
        _ => false,
    }
}

fn id_without_lookup(
    tool: &ToolDefinition,
    set: &[ToolDefinition],
    param: &Param<'_>,
    out: &mut Vec<Finding>,
) {
    if !(param.is("string") || param.is("integer")) || !is_id(param) || param.is_enumerated() {
        return;
    }
    let said = format!("{} {}", param.description(), tool.description);
    let words = text_words(&said);
    let names_a_tool = set
        .iter()
        .any(|other| other.name != tool.name && said.contains(other.name.as_str()));
    if names_a_tool
        || SOURCE_PHRASES
            .iter()
            .any(|phrase| has_phrase(&words, phrase))
    {
        return;
    }
    out.push(
        Finding::new(
            Rule::IdWithoutLookup,
            &tool.name,
            &param.field,
            format!(
                "nothing says where the model gets a valid `{}`: it will infer one from the conversation",
                param.name
            ),
        )
        .with_help(format!(
            "enumerate the values if they are few, or say where they come from: \"{} as returned by list_…\", \"call list_… first\"",
            param.name
        )),
    );
}

/// Name words of strings with a format the backend expects exactly.
const FORMATTED_WORDS: &[&str] = &[
    "date",
    "time",
    "timestamp",
    "datetime",
    "since",
    "until",
    "query",
    "filter",
    "expression",
    "expr",
    "sql",
    "path",
    "url",
    "uri",
    "phone",
    "range",
    "cron",
    "regex",
    "selector",
    "sku",
    "code",
    "locale",
    "version",
];

/// Words and marks that introduce an example or name a format.
fn has_example(text: &str) -> bool {
    let words = text_words(text);
    let lower = text.to_lowercase();
    lower.contains("e.g.")
        || ["example", "examples", "iso", "rfc", "yyyy"]
            .iter()
            .any(|w| words.iter().any(|x| x == w))
        || has_phrase(&words, "such as")
        || has_phrase(&words, "for instance")
        || quoted(text)
}

/// Whether `text` quotes a value: `'…'`, `"…"` or `` `…` ``. An opening
/// mark has no letter right before it, so the apostrophe of `order's` is
/// none.
fn quoted(text: &str) -> bool {
    let chars: Vec<char> = text.chars().collect();
    ['\'', '"', '`'].iter().any(|&q| {
        chars.iter().enumerate().any(|(i, &c)| {
            c == q
                && (i == 0 || !chars[i - 1].is_alphanumeric())
                && chars[i + 1..]
                    .iter()
                    .position(|&d| d == q)
                    .is_some_and(|len| {
                        len > 0 && chars.get(i + 2 + len).is_none_or(|n| !n.is_alphanumeric())
                    })
        })
    })
}

fn missing_example(tool: &ToolDefinition, param: &Param<'_>, out: &mut Vec<Finding>) {
    if !param.is("string")
        || param.is_enumerated()
        || ["format", "pattern", "examples", "default"]
            .iter()
            .any(|key| param.schema.contains_key(*key))
    {
        return;
    }
    if !(param.has_any(FORMATTED_WORDS) || is_id(param)) || has_example(param.description()) {
        return;
    }
    out.push(
        Finding::new(
            Rule::MissingExample,
            &tool.name,
            &param.field,
            format!(
                "`{}` has a format but its description shows no example of it",
                param.name
            ),
        )
        .with_help(format!(
            "add one value in the exact format the backend expects: \"{}, e.g. …\"",
            name_words(param.name).join(" ")
        )),
    );
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn with_props(props: Value, required: &[&str]) -> ToolDefinition {
        ToolDefinition::new(
            "create_ticket",
            "Create one ticket.",
            json!({"type": "object", "properties": props, "required": required}),
        )
    }

    fn rules(tool: &ToolDefinition) -> Vec<Rule> {
        let mut out = Vec::new();
        check(tool, std::slice::from_ref(tool), &mut out);
        out.into_iter().map(|f| f.rule).collect()
    }

    #[test]
    fn a_free_text_priority_fires_and_an_enumerated_one_does_not() {
        let free = with_props(
            json!({"priority": {"type": "string", "description": "Ticket priority level"}}),
            &["priority"],
        );
        assert_eq!(rules(&free), [Rule::FreeTextEnum]);
        let listed = with_props(
            json!({"priority": {"type": "string", "enum": ["low", "high"], "description": "Ticket priority."}}),
            &["priority"],
        );
        assert!(rules(&listed).is_empty());
    }

    #[test]
    fn a_status_of_const_branches_counts_as_enumerated() {
        let branches = with_props(
            json!({"status": {"type": "string", "oneOf": [{"const": "open"}, {"const": "closed"}], "description": "Status."}}),
            &["status"],
        );
        assert!(rules(&branches).is_empty());
    }

    #[test]
    fn a_degree_boolean_fires_and_a_plain_required_one_does_not() {
        let degree = with_props(
            json!({"include_details": {"type": "boolean", "description": "Whether to include detailed information"}}),
            &["include_details"],
        );
        assert_eq!(rules(&degree), [Rule::BooleanThirdState]);
        let plain = with_props(
            json!({"notify_buyer": {"type": "boolean", "description": "Email the buyer too."}}),
            &["notify_buyer"],
        );
        assert!(rules(&plain).is_empty());
    }

    #[test]
    fn a_nullable_boolean_fires() {
        let nullable = with_props(
            json!({"archived": {"type": ["boolean", "null"], "description": "Archived or not."}}),
            &["archived"],
        );
        assert_eq!(rules(&nullable), [Rule::BooleanThirdState]);
    }

    #[test]
    fn an_optional_boolean_without_default_is_a_note_and_with_one_passes() {
        let tool = with_props(
            json!({"notify_buyer": {"type": "boolean", "description": "Email the buyer too."}}),
            &[],
        );
        let mut out = Vec::new();
        check(&tool, std::slice::from_ref(&tool), &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(
            (out[0].rule, out[0].severity),
            (Rule::BooleanThirdState, Severity::Note)
        );
        let defaulted = with_props(
            json!({"notify_buyer": {"type": "boolean", "default": false, "description": "Email the buyer too."}}),
            &[],
        );
        assert!(rules(&defaulted).is_empty());
    }

    #[test]
    fn an_id_without_a_source_fires() {
        let bare = with_props(
            json!({"project_key": {"type": "string", "description": "The Jira project key, e.g. ENG."}}),
            &["project_key"],
        );
        assert_eq!(rules(&bare), [Rule::IdWithoutLookup]);
    }

    #[test]
    fn an_id_whose_source_is_named_passes() {
        let told = with_props(
            json!({"project_key": {"type": "string", "description": "Jira project key, e.g. ENG. Call list_projects first to get valid keys."}}),
            &["project_key"],
        );
        assert!(rules(&told).is_empty());
        let listed = with_props(
            json!({"project_key": {"type": "string", "enum": ["ENG", "INFRA"], "description": "Project."}}),
            &["project_key"],
        );
        assert!(rules(&listed).is_empty());
    }

    #[test]
    fn an_api_key_is_no_record_id() {
        let key = with_props(
            json!({"api_key": {"type": "string", "description": "The caller's API key, e.g. sk-1."}}),
            &["api_key"],
        );
        assert!(rules(&key).is_empty());
    }

    #[test]
    fn a_date_without_an_example_is_a_note_and_one_with_passes() {
        let bare = with_props(
            json!({"date_range": {"type": "string", "description": "Date range for the query."}}),
            &["date_range"],
        );
        assert_eq!(rules(&bare), [Rule::MissingExample]);
        let shown = with_props(
            json!({"date_range": {"type": "string", "description": "Date range: 'last_7_days' or '2026-01-01/2026-03-31'. Do not use relative terms."}}),
            &["date_range"],
        );
        assert!(rules(&shown).is_empty());
        let formatted = with_props(
            json!({"since": {"type": "string", "format": "date-time", "description": "Start."}}),
            &["since"],
        );
        assert!(rules(&formatted).is_empty());
    }

    #[test]
    fn an_apostrophe_is_no_quote() {
        assert!(!quoted("the order's date and the buyer's"));
        assert!(quoted("one of 'low' or 'high'"));
        assert!(quoted("like \"2026-Q1\""));
    }
}

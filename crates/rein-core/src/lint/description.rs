//! Rules on the tool's description as a whole: what its first sentence
//! says ([`Rule::VerbObjectFirst`]), whether it agrees with the name
//! ([`Rule::NameDescriptionMismatch`]), and its length
//! ([`Rule::DescriptionLength`]).
//!
//! Models pattern-match on the name and the start of the description and
//! often read no further (seed 002, "Name-description mismatch"), so the
//! start must carry what the tool does and what it changes.

use super::definition::ToolDefinition;
use super::finding::Finding;
use super::rule::{Rule, Severity};
use super::words::{
    NON_OPENERS, VerbKind, first_sentence, first_verb, name_words, same_stem, text_words, verb_kind,
};
use super::{MAX_DESCRIPTION_WORDS, is_write};

/// Runs the description rules on `tool`.
pub(super) fn check(tool: &ToolDefinition, out: &mut Vec<Finding>) {
    verb_object_first(tool, out);
    name_description_mismatch(tool, out);
    description_length(tool, out);
}

fn verb_object_first(tool: &ToolDefinition, out: &mut Vec<Finding>) {
    let finding =
        |message: String| Finding::new(Rule::VerbObjectFirst, &tool.name, "description", message);
    let sentence = first_sentence(&tool.description);
    let words = text_words(sentence);
    let Some(opener) = words.first() else {
        out.push(finding(
            "is empty: the model has only the name to go by".to_owned(),
        ));
        return;
    };
    if NON_OPENERS.contains(&opener.as_str()) {
        out.push(finding(format!(
            "the first sentence opens with `{}`, not with what the tool does",
            sentence.split_whitespace().next().unwrap_or(opener)
        )));
        return;
    }
    if words.len() < 2 {
        out.push(finding(format!(
            "the first sentence, \"{sentence}\", names no object of its verb"
        )));
        return;
    }
    let Some((verb, kind)) = first_verb(sentence) else {
        return;
    };
    match (kind, is_write(tool)) {
        (VerbKind::Read, Some(true)) => out.push(
            finding(format!(
                "the first sentence opens with `{verb}`, a read, but the tool changes something: its side effect should come first"
            ))
            .with_help("open with the effect: \"Overwrite every field of a record\", not \"Get a record and overwrite …\""),
        ),
        (VerbKind::Write, Some(false)) => out.push(finding(format!(
            "the first sentence opens with `{verb}`, a write, but the tool is a read"
        ))
        .with_help("describe what the tool reads, or correct its class if it does write")),
        _ => {}
    }
}

/// Channels a message can go out on, each with the words that name it.
const CHANNELS: &[(&str, &[&str])] = &[
    ("email", &["email", "emails", "mail", "e-mail"]),
    ("sms", &["sms", "texts"]),
    ("slack", &["slack"]),
    ("push", &["push"]),
    ("teams", &["teams"]),
    ("webhook", &["webhook", "webhooks"]),
    ("whatsapp", &["whatsapp"]),
    ("telegram", &["telegram"]),
    ("discord", &["discord"]),
];

/// Name words that say "some channel" without saying which.
const GENERAL_CHANNEL_WORDS: &[&str] = &[
    "notification",
    "notify",
    "message",
    "alert",
    "notifications",
    "messages",
    "alerts",
];

/// Name words that carry no object of their own.
const FILLER_WORDS: &[&str] = &[
    "by", "for", "of", "to", "from", "all", "one", "new", "id", "ids", "a", "the", "and", "or",
    "v1", "v2",
];

fn channels_in(words: &[String]) -> Vec<&'static str> {
    CHANNELS
        .iter()
        .filter(|(_, names)| words.iter().any(|w| names.contains(&w.as_str())))
        .map(|(channel, _)| *channel)
        .collect()
}

fn name_description_mismatch(tool: &ToolDefinition, out: &mut Vec<Finding>) {
    let name = name_words(&tool.name);
    let description = text_words(&tool.description);
    if description.is_empty() || name.is_empty() {
        return;
    }
    let finding =
        |message: String| Finding::new(Rule::NameDescriptionMismatch, &tool.name, "", message);
    // The name's verb against the description's.
    if let (Some(name_kind), Some((verb, description_kind))) = (
        verb_kind(&name[0]),
        first_verb(first_sentence(&tool.description)),
    ) && name_kind != description_kind
    {
        let said = |kind| match kind {
            VerbKind::Read => "a read",
            VerbKind::Write => "a write",
        };
        out.push(finding(format!(
            "the name starts with `{}`, {}, but the description with `{verb}`, {}",
            name[0],
            said(name_kind),
            said(description_kind)
        )));
        return;
    }
    // Channels: the name general or specific, the description specific.
    let in_name = channels_in(&name);
    let in_description = channels_in(&description);
    let general = name
        .iter()
        .any(|w| GENERAL_CHANNEL_WORDS.contains(&w.as_str()));
    if in_name.is_empty()
        && general
        && in_description.len() == 1
        && !description
            .iter()
            .any(|w| w == "channel" || w == "channels")
    {
        out.push(
            finding(format!(
                "the name says `{}` (any channel) but the description only {}",
                tool.name, in_description[0]
            ))
            .with_help(format!(
                "name it after the one channel (e.g. send_{}), or say in the description which channels it sends on and add a `channel` parameter",
                in_description[0]
            )),
        );
        return;
    }
    if let (Some(named), false) = (in_name.first(), in_description.is_empty())
        && !in_description.contains(named)
    {
        out.push(finding(format!(
            "the name says {named} but the description says {}",
            in_description.join(", ")
        )));
        return;
    }
    // The object: some word of the name after its verb should appear.
    let objects: Vec<&String> = name
        .iter()
        .skip(usize::from(verb_kind(&name[0]).is_some()))
        .filter(|w| !FILLER_WORDS.contains(&w.as_str()) && w.len() > 2)
        .collect();
    if !objects.is_empty()
        && !objects
            .iter()
            .any(|object| description.iter().any(|w| same_stem(w, object)))
    {
        out.push(
            finding(format!(
                "the description never mentions {}, which the name is about",
                objects
                    .iter()
                    .map(|w| format!("`{w}`"))
                    .collect::<Vec<_>>()
                    .join(" or ")
            ))
            .with_severity(Severity::Note),
        );
    }
}

fn description_length(tool: &ToolDefinition, out: &mut Vec<Finding>) {
    let words = tool.description.split_whitespace().count();
    if words > MAX_DESCRIPTION_WORDS {
        out.push(Finding::new(
            Rule::DescriptionLength,
            &tool.name,
            "description",
            format!("has {words} words, more than {MAX_DESCRIPTION_WORDS}"),
        ));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tool::ToolClass;

    fn run(tool: ToolDefinition) -> Vec<Finding> {
        let mut out = Vec::new();
        check(&tool, &mut out);
        out
    }

    fn rules(tool: ToolDefinition) -> Vec<Rule> {
        run(tool).into_iter().map(|f| f.rule).collect()
    }

    fn tool(name: &str, description: &str) -> ToolDefinition {
        ToolDefinition::new(name, description, json!({"type": "object"}))
    }

    #[test]
    fn a_description_opening_with_this_tool_fires() {
        let found = run(tool("get_order", "This tool returns an order."));
        assert_eq!(found[0].rule, Rule::VerbObjectFirst);
        assert!(found[0].message.contains("`This`"), "{}", found[0].message);
    }

    #[test]
    fn a_verb_and_its_object_first_passes() {
        assert!(rules(tool("get_order", "Look up one order by its id. Read-only.")).is_empty());
    }

    #[test]
    fn a_lone_verb_names_no_object() {
        assert_eq!(rules(tool("purge", "Purges.")), [Rule::VerbObjectFirst]);
    }

    #[test]
    fn a_write_described_as_a_read_fires_and_a_write_first_does_not() {
        let hidden = tool("update_record", "Gets a record, then overwrites it.")
            .with_class(ToolClass::IdempotentWrite);
        assert!(rules(hidden).contains(&Rule::VerbObjectFirst));
        let front = tool("update_record", "Overwrites every field of a record.")
            .with_class(ToolClass::IdempotentWrite);
        assert!(rules(front).is_empty());
    }

    #[test]
    fn a_read_described_with_a_write_verb_fires() {
        let read = tool("archive_report", "Deletes the report from the archive.")
            .with_class(ToolClass::Read);
        assert!(rules(read).contains(&Rule::VerbObjectFirst));
    }

    #[test]
    fn a_server_read_only_hint_stands_in_for_a_missing_class() {
        let hinted = tool("tidy_cache", "Deletes stale cache entries.")
            .with_annotations(crate::lint::Annotations::new(Some(true), None, None));
        assert!(rules(hinted).contains(&Rule::VerbObjectFirst));
        let unknown = tool("tidy_cache", "Deletes stale cache entries.");
        assert!(!rules(unknown).contains(&Rule::VerbObjectFirst));
    }

    #[test]
    fn send_notification_described_as_email_fires() {
        let found = rules(tool(
            "send_notification",
            "Sends an email to the specified user.",
        ));
        assert_eq!(found, [Rule::NameDescriptionMismatch]);
    }

    #[test]
    fn send_notification_over_several_channels_passes() {
        let found = rules(tool(
            "send_notification",
            "Sends a notification to a user by email, SMS or Slack, as `channel` says.",
        ));
        assert!(found.is_empty(), "{found:?}");
        assert!(rules(tool("send_email", "Sends an email to the specified user.")).is_empty());
    }

    #[test]
    fn a_named_channel_and_another_described_fires() {
        assert_eq!(
            rules(tool("send_sms", "Sends an email to a user.")),
            [Rule::NameDescriptionMismatch]
        );
    }

    #[test]
    fn a_read_name_with_a_write_description_fires() {
        assert_eq!(
            rules(tool("get_user", "Deletes a user for good.")),
            [Rule::NameDescriptionMismatch]
        );
    }

    #[test]
    fn a_description_that_never_mentions_the_object_is_a_note() {
        let found = run(tool("get_invoice", "Look up one bill by its number."));
        assert_eq!(found.len(), 1);
        assert_eq!(
            (found[0].rule, found[0].severity),
            (Rule::NameDescriptionMismatch, Severity::Note)
        );
    }

    #[test]
    fn a_description_over_200_words_fires_and_200_does_not() {
        let long = format!("Look up one order. {}", "word ".repeat(200));
        assert!(rules(tool("get_order", &long)).contains(&Rule::DescriptionLength));
        let fits = format!("Look up one order. {}", "word ".repeat(196));
        assert!(!rules(tool("get_order", &fits)).contains(&Rule::DescriptionLength));
    }
}

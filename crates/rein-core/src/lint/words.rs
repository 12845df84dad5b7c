//! The small language knowledge the rules share: splitting names into
//! words, finding the first sentence, and which verbs read and which write.
//!
//! # Why word lists, not a language model
//!
//! A lint runs in CI on every change and must say the same thing every
//! time; its findings must be explainable by a table in the docs. Short
//! lists of the words tool descriptions actually use, matched on word
//! boundaries, catch the common failures (seed 002) with few false
//! positives, and a false positive is silenced with a reason.

/// The words of a name: `send_notification`, `orderId`, `HTTPTimeout`,
/// `dry-run` → `send notification`, `order id`, `http timeout`, `dry run`,
/// lowercase.
pub(super) fn name_words(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            flush(&mut words, &mut current);
            continue;
        }
        if c.is_uppercase() && !current.is_empty() {
            let previous_lower = chars
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_lowercase() || p.is_ascii_digit());
            // `HTTPTimeout`: the `T` of `Timeout` starts a word because a
            // lowercase letter follows it.
            let acronym_end = chars
                .get(i.wrapping_sub(1))
                .is_some_and(|p| p.is_uppercase())
                && chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            if previous_lower || acronym_end {
                flush(&mut words, &mut current);
            }
        }
        current.extend(c.to_lowercase());
    }
    flush(&mut words, &mut current);
    words
}

fn flush(words: &mut Vec<String>, current: &mut String) {
    if !current.is_empty() {
        words.push(std::mem::take(current));
    }
}

/// The lowercase words of prose: letters, digits and `'`, split at
/// everything else.
pub(super) fn text_words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Whether `text` holds `phrase` (lowercase words) as whole words.
pub(super) fn has_phrase(words: &[String], phrase: &str) -> bool {
    let wanted: Vec<&str> = phrase.split(' ').collect();
    !wanted.is_empty()
        && words
            .windows(wanted.len())
            .any(|window| window.iter().zip(&wanted).all(|(w, p)| w == p))
}

/// The first sentence of `text`: up to the first `.`, `!` or `?` followed
/// by whitespace or the end, or a blank line; `e.g.`, `i.e.`, `etc.` and
/// `vs.` do not end it.
pub(super) fn first_sentence(text: &str) -> &str {
    let text = text.trim();
    let bytes = text.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        let at_end = i + 1 == bytes.len() || bytes[i + 1].is_ascii_whitespace();
        if b == b'\n' && bytes.get(i + 1) == Some(&b'\n') {
            return &text[..i];
        }
        if matches!(b, b'.' | b'!' | b'?') && at_end {
            let before = text[..i].to_ascii_lowercase();
            if [" e.g", " i.e", " etc", " vs"]
                .iter()
                .any(|a| before.ends_with(a))
                || before == "e.g"
                || before == "i.e"
            {
                continue;
            }
            return &text[..i];
        }
    }
    text
}

/// What a verb does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum VerbKind {
    /// Looks at something without changing it.
    Read,
    /// Changes something.
    Write,
}

/// Verbs that only look.
const READ_VERBS: &[&str] = &[
    "get",
    "fetch",
    "look",
    "lookup",
    "list",
    "search",
    "find",
    "query",
    "read",
    "show",
    "view",
    "describe",
    "count",
    "retrieve",
    "load",
    "inspect",
    "browse",
    "preview",
    "peek",
    "scan",
    "return",
    "calculate",
    "compute",
    "estimate",
    "summarize",
    "summarise",
    "translate",
    "convert",
    "validate",
    "verify",
    "check",
    "resolve",
    "explain",
    "compare",
    "download",
    "lookup",
    "select",
    "report",
];

/// Verbs that change something.
///
/// Verbs that often do not (`add` two numbers, `run` a query, `open` a
/// file, `apply` a filter, `start`/`execute`/`trigger`, `make`, `mark`,
/// `file`, `issue`, `push`, `tag`, `link`), and words that open a
/// description as nouns as often as verbs (`email` address, `store`
/// hours, `book` details), are left out on purpose: a contradiction is
/// only reported on a verb that cannot be read two ways.
const WRITE_VERBS: &[&str] = &[
    "create",
    "insert",
    "update",
    "patch",
    "change",
    "set",
    "edit",
    "modify",
    "put",
    "write",
    "save",
    "upload",
    "assign",
    "move",
    "rename",
    "restore",
    "reset",
    "enable",
    "disable",
    "restart",
    "schedule",
    "reserve",
    "approve",
    "reject",
    "close",
    "merge",
    "submit",
    "register",
    "subscribe",
    "unsubscribe",
    "invite",
    "grant",
    "revoke",
    "lock",
    "unlock",
    "publish",
    "post",
    "send",
    "notify",
    "reply",
    "forward",
    "charge",
    "pay",
    "refund",
    "transfer",
    "cancel",
    "delete",
    "remove",
    "drop",
    "purge",
    "destroy",
    "erase",
    "wipe",
    "truncate",
    "archive",
    "deploy",
    "rollback",
    "kill",
    "terminate",
    "ban",
    "block",
    "unblock",
    "buy",
    "sell",
    "import",
    "overwrite",
    "replace",
    "clear",
    "upsert",
    "increment",
    "decrement",
    "append",
    "commit",
    "provision",
    "resize",
];

/// Write verbs that destroy what was there.
pub(super) const DESTRUCTIVE_VERBS: &[&str] = &[
    "delete",
    "remove",
    "drop",
    "purge",
    "destroy",
    "erase",
    "wipe",
    "truncate",
    "terminate",
    "revoke",
];

/// The kind of `word` as a verb, trying its inflections (`deletes`,
/// `queries`, `patches`); `None` when it is no verb rein knows.
pub(super) fn verb_kind(word: &str) -> Option<VerbKind> {
    let word = word.to_lowercase();
    verb_stems(&word).into_iter().find_map(|stem| {
        if READ_VERBS.contains(&stem.as_str()) {
            Some(VerbKind::Read)
        } else if WRITE_VERBS.contains(&stem.as_str()) {
            Some(VerbKind::Write)
        } else {
            None
        }
    })
}

/// `word` and the stems it may be an inflection of: `queries` → `query`,
/// `patches` → `patch`, `sends` → `send`.
pub(super) fn verb_stems(word: &str) -> Vec<String> {
    let mut stems = vec![word.to_owned()];
    if let Some(stem) = word.strip_suffix("ies") {
        stems.push(format!("{stem}y"));
    }
    if let Some(stem) = word.strip_suffix("es") {
        stems.push(stem.to_owned());
    }
    if let Some(stem) = word.strip_suffix('s') {
        stems.push(stem.to_owned());
    }
    stems
}

/// Whether `word` (lowercase) is a destructive verb or an inflection of one.
pub(super) fn is_destructive_verb(word: &str) -> bool {
    verb_stems(word)
        .iter()
        .any(|stem| DESTRUCTIVE_VERBS.contains(&stem.as_str()))
}

/// Words that open a description without saying what the tool does.
pub(super) const NON_OPENERS: &[&str] = &[
    "this", "the", "a", "an", "tool", "function", "helper", "utility", "used", "it", "allows",
    "lets", "wrapper", "api", "endpoint", "for", "when", "if", "here", "note", "my", "our", "your",
    "we", "i", "can", "will", "should", "may", "to", "method", "service",
];

/// The verb a sentence opens with, after leading adverbs (`Permanently
/// deletes …`); `None` when its first word is no verb rein knows. Only the
/// opening word counts: later words are too often nouns (`email`, `file`,
/// `report`) to be read as verbs.
pub(super) fn first_verb(sentence: &str) -> Option<(String, VerbKind)> {
    let word = text_words(sentence)
        .into_iter()
        .find(|word| !(word.len() > 4 && word.ends_with("ly")))?;
    verb_kind(&word).map(|kind| (word, kind))
}

/// Whether `word` looks like a plural or singular form of `other` (same
/// first four letters and one a prefix-with-inflection of the other):
/// `orders`/`order`, `entries`/`entry`.
pub(super) fn same_stem(word: &str, other: &str) -> bool {
    if word == other {
        return true;
    }
    let a = verb_stems(word);
    let b = verb_stems(other);
    a.iter().any(|x| b.contains(x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_at_underscores_dashes_and_case() {
        assert_eq!(name_words("send_notification"), ["send", "notification"]);
        assert_eq!(name_words("orderId"), ["order", "id"]);
        assert_eq!(name_words("HTTPTimeout"), ["http", "timeout"]);
        assert_eq!(name_words("dry-run"), ["dry", "run"]);
        assert_eq!(name_words("OrderID"), ["order", "id"]);
        assert_eq!(name_words("timeout_ms"), ["timeout", "ms"]);
    }

    #[test]
    fn the_first_sentence_ends_at_a_stop_but_not_at_e_g() {
        assert_eq!(
            first_sentence("Look up one order, e.g. A-1. Call it first."),
            "Look up one order, e.g. A-1"
        );
        assert_eq!(first_sentence("Send an email"), "Send an email");
        assert_eq!(first_sentence("v1.2 of it. More."), "v1.2 of it");
    }

    #[test]
    fn verbs_are_known_through_their_inflections() {
        assert_eq!(verb_kind("Deletes"), Some(VerbKind::Write));
        assert_eq!(verb_kind("queries"), Some(VerbKind::Read));
        assert_eq!(verb_kind("patches"), Some(VerbKind::Write));
        assert_eq!(verb_kind("order"), None);
        assert!(is_destructive_verb("removes"));
    }

    #[test]
    fn the_opening_verb_skips_adverbs_and_ignores_later_nouns() {
        assert_eq!(
            first_verb("Permanently deletes one record"),
            Some(("deletes".to_owned(), VerbKind::Write))
        );
        assert_eq!(first_verb("Email address of the buyer"), None);
        assert_eq!(
            first_verb("Look up the email of the buyer"),
            Some(("look".to_owned(), VerbKind::Read))
        );
        assert_eq!(first_verb("Adds two numbers"), None);
        assert_eq!(first_verb("PERMANENT deletion of a record"), None);
    }

    #[test]
    fn phrases_match_whole_words_only() {
        let words = text_words("Do NOT use it, rather than that.");
        assert!(has_phrase(&words, "rather than"));
        assert!(has_phrase(&words, "not"));
        assert!(!has_phrase(&words, "no"));
    }
}

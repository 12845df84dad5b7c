//! JSON pointers (RFC 6901) to the member of a request body that is wrong:
//! the `field` of every 400.
//!
//! # Why pointers
//!
//! `serde_path_to_error` writes paths its own way (`budgets.max_steps`,
//! `messages[0].content`, `?` for a step it could not name, `.` for the
//! whole body). A client cannot resolve those against its own document: a
//! key holding a dot or a bracket is ambiguous. A JSON pointer is exact:
//! `/budgets/max_steps`, `/messages/0/content`, with `~` written `~0` and
//! `/` written `~1`.

use serde_path_to_error::{Path, Segment};

/// Appends `key` to `pointer`, escaped.
pub fn push_key(pointer: &mut String, key: &str) {
    pointer.push('/');
    for c in key.chars() {
        match c {
            '~' => pointer.push_str("~0"),
            '/' => pointer.push_str("~1"),
            c => pointer.push(c),
        }
    }
}

/// The pointer to `keys` (member names from the root), escaped.
pub fn of_keys(keys: &[&str]) -> String {
    let mut pointer = String::new();
    for key in keys {
        push_key(&mut pointer, key);
    }
    pointer
}

/// The pointer to the member `path` names: the deepest member it names
/// for certain, if any. A step `serde_path_to_error` could not name (an
/// untagged or internally tagged enum) ends the pointer there, at the
/// member that holds the error; a path naming no member (the body itself
/// is not JSON, or a member is missing at the top) is `None`, and the
/// problem has no `field`.
pub fn of_path(path: &Path) -> Option<String> {
    let mut pointer = String::new();
    for segment in path {
        match segment {
            Segment::Seq { index } => {
                pointer.push('/');
                pointer.push_str(&index.to_string());
            }
            Segment::Map { key } => push_key(&mut pointer, key),
            // An externally tagged variant is a member name in JSON.
            Segment::Enum { variant } => push_key(&mut pointer, variant),
            Segment::Unknown => break,
        }
    }
    (!pointer.is_empty()).then_some(pointer)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Doc {
        budgets: Option<Budgets>,
        messages: Option<Vec<Message>>,
        tags: Option<BTreeMap<String, u32>>,
        input: Option<String>,
    }

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Budgets {
        max_steps: Option<u32>,
    }

    #[derive(Debug, Deserialize)]
    #[allow(dead_code)]
    struct Message {
        content: String,
    }

    fn pointer_of(body: &str) -> Option<String> {
        let mut de = serde_json::Deserializer::from_str(body);
        let err = serde_path_to_error::deserialize::<_, Doc>(&mut de).unwrap_err();
        of_path(err.path())
    }

    #[test]
    fn paths_become_pointers_with_indices_and_escapes() {
        assert_eq!(
            pointer_of(r#"{"budgets": {"max_steps": "x"}}"#).as_deref(),
            Some("/budgets/max_steps")
        );
        assert_eq!(
            pointer_of(r#"{"messages": [{"content": "a"}, {"content": 7}]}"#).as_deref(),
            Some("/messages/1/content")
        );
        assert_eq!(
            pointer_of(r#"{"tags": {"a/b~c": "x"}}"#).as_deref(),
            Some("/tags/a~1b~0c")
        );
        assert_eq!(pointer_of(r#"{"input": 7}"#).as_deref(), Some("/input"));
    }

    #[test]
    fn a_body_that_names_no_member_has_no_pointer() {
        assert_eq!(pointer_of("<xml/>"), None);
        assert_eq!(pointer_of("7"), None);
    }

    #[test]
    fn an_unknown_member_is_pointed_at() {
        assert_eq!(
            pointer_of(r#"{"budgets": {"max_stepz": 1}}"#).as_deref(),
            Some("/budgets/max_stepz")
        );
    }

    #[test]
    fn of_keys_escapes_each_key() {
        assert_eq!(
            of_keys(&["budgets", "max_cost_usd"]),
            "/budgets/max_cost_usd"
        );
        assert_eq!(of_keys(&["a/b", "~"]), "/a~1b/~0");
    }
}

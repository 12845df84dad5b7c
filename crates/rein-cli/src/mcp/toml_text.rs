//! JSON values written as TOML inline values, for entries a person reads
//! (`rein mcp import`).
//!
//! # Why by hand
//!
//! The `toml` serializer writes nested objects as `[a.b.c]` tables, which
//! would scatter one tool's schema over a dozen headers; an inline value
//! keeps an entry on a few lines, as the example configs write them.
//! TOML has no null: a null is left out of a table and written as an
//! empty string in an array (JSON Schema has neither in practice).

use serde_json::Value;

/// `name` as a TOML key: bare when it can be, else a quoted string.
pub fn key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare { name.to_owned() } else { string(name) }
}

/// `v` as a TOML inline value.
pub fn value(v: &Value) -> String {
    match v {
        Value::Null => "\"\"".to_owned(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => string(s),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(value).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(map) => {
            let fields: Vec<String> = map
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{} = {}", key(k), value(v)))
                .collect();
            if fields.is_empty() {
                "{}".to_owned()
            } else {
                format!("{{ {} }}", fields.join(", "))
            }
        }
    }
}

/// A TOML basic string: JSON's escapes are TOML's, but for `\/` (never
/// written by serde_json) and control characters, written as `\uXXXX`
/// in both.
fn string(s: &str) -> String {
    Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_schema_round_trips_through_toml() {
        let schema = json!({
            "type": "object",
            "properties": {
                "a b": {"type": "number", "description": "First \"number\"\n"},
                "tags": {"type": "array", "items": {"type": "string"}, "default": []},
                "$schema": "http://json-schema.org/draft-07/schema#"
            },
            "required": ["a b"],
            "additionalProperties": false
        });
        let text = format!("schema = {}", value(&schema));
        let parsed: toml::Value = toml::from_str(&text).unwrap();
        let back = serde_json::to_value(&parsed["schema"]).unwrap();
        assert_eq!(back, schema);
    }

    #[test]
    fn keys_are_bare_when_they_can_be() {
        assert_eq!(key("get-sum"), "get-sum");
        assert_eq!(key("a.b"), "\"a.b\"");
    }
}

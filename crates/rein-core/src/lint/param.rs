//! [`Param`]: one property of a tool's schema, wherever it is nested, with
//! the facts the parameter rules read.

use serde_json::{Map, Value};

use super::words::name_words;

/// One property of a tool's argument schema.
#[derive(Debug, Clone)]
pub(super) struct Param<'a> {
    /// Its dotted path from the tool: `schema.properties.a.items.properties.b`.
    pub field: String,
    /// Its property name.
    pub name: &'a str,
    /// Its name's words.
    pub words: Vec<String>,
    /// Its schema.
    pub schema: &'a Map<String, Value>,
    /// Whether its object lists it in `required`.
    pub required: bool,
    /// The other properties of its object (for a `currency` beside an
    /// `amount`).
    pub siblings: &'a Map<String, Value>,
}

impl Param<'_> {
    /// Whether its `type` is (or includes) `kind`.
    pub fn is(&self, kind: &str) -> bool {
        types(self.schema).contains(&kind)
    }

    /// Its description, or the empty string.
    pub fn description(&self) -> &str {
        self.schema
            .get("description")
            .and_then(Value::as_str)
            .unwrap_or("")
    }

    /// Whether its values are fixed: `enum`, `const`, or a `oneOf`/`anyOf`
    /// whose every branch is a `const` or `enum`.
    pub fn is_enumerated(&self) -> bool {
        if self.schema.contains_key("enum") || self.schema.contains_key("const") {
            return true;
        }
        ["oneOf", "anyOf"].iter().any(|key| {
            self.schema
                .get(*key)
                .and_then(Value::as_array)
                .is_some_and(|branches| {
                    !branches.is_empty()
                        && branches.iter().all(|b| {
                            b.get("const").is_some()
                                || b.get("enum").is_some()
                                || b.get("type").and_then(Value::as_str) == Some("null")
                        })
                })
        })
    }

    /// Whether its last name word is one of `words`.
    pub fn ends_with_any(&self, words: &[&str]) -> bool {
        self.words
            .last()
            .is_some_and(|last| words.contains(&last.as_str()))
    }

    /// Whether any of its name words is one of `words`.
    pub fn has_any(&self, words: &[&str]) -> bool {
        self.words.iter().any(|w| words.contains(&w.as_str()))
    }
}

/// The `type` of a schema as a list (`"string"` or `["string", "null"]`).
pub(super) fn types(schema: &Map<String, Value>) -> Vec<&str> {
    match schema.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

/// Every property of `schema` (the tool's argument schema), depth first:
/// properties of nested objects and of array items included.
pub(super) fn params(schema: &Value) -> Vec<Param<'_>> {
    let mut out = Vec::new();
    if let Some(map) = schema.as_object() {
        collect(map, "schema", &mut out);
    }
    out
}

fn collect<'a>(object: &'a Map<String, Value>, at: &str, out: &mut Vec<Param<'a>>) {
    if let Some(items) = object.get("items").and_then(Value::as_object) {
        collect(items, &format!("{at}.items"), out);
    }
    let Some(properties) = object.get("properties").and_then(Value::as_object) else {
        return;
    };
    let required: Vec<&str> = object
        .get("required")
        .and_then(Value::as_array)
        .map(|names| names.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        let Some(schema) = property.as_object() else {
            continue;
        };
        let field = format!("{at}.properties.{name}");
        out.push(Param {
            field: field.clone(),
            name,
            words: name_words(name),
            schema,
            required: required.contains(&name.as_str()),
            siblings: properties,
        });
        collect(schema, &field, out);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn nested_properties_and_array_items_are_walked_with_their_paths() {
        let schema = json!({
            "type": "object",
            "properties": {
                "order": {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": ["order_id"]},
                "lines": {"type": "array", "items": {"type": "object", "properties": {"sku": {"type": "string"}}}}
            }
        });
        let mut fields: Vec<(String, bool)> = params(&schema)
            .into_iter()
            .map(|p| (p.field, p.required))
            .collect();
        fields.sort();
        assert_eq!(
            fields,
            [
                ("schema.properties.lines".to_owned(), false),
                (
                    "schema.properties.lines.items.properties.sku".to_owned(),
                    false
                ),
                ("schema.properties.order".to_owned(), false),
                (
                    "schema.properties.order.properties.order_id".to_owned(),
                    true
                ),
            ]
        );
    }
}

//! [`Rule::StrictMode`]: whether OpenAI's structured-outputs strict mode
//! (`"strict": true` on a function) would accept the schema.
//!
//! Strict mode makes the model's arguments always match the schema, which
//! removes a whole class of validation round trips; it accepts a subset of
//! JSON Schema. rein does not send `strict: true` itself, so a finding is
//! a note: it says what to change before turning strict mode on, or before
//! handing the definitions to a client that does.
//!
//! | limit | value |
//! | --- | --- |
//! | nesting depth | [`MAX_STRICT_DEPTH`] |
//! | properties in all | [`MAX_STRICT_PROPERTIES`] |
//! | enum values in all | [`MAX_STRICT_ENUM_VALUES`] |

use serde_json::{Map, Value};

use super::definition::ToolDefinition;
use super::finding::Finding;
use super::param::types;
use super::rule::Rule;

/// The deepest nesting of objects strict mode accepts.
pub const MAX_STRICT_DEPTH: usize = 10;

/// The most object properties, over the whole schema, strict mode accepts.
pub const MAX_STRICT_PROPERTIES: usize = 5000;

/// The most enum values, over the whole schema, strict mode accepts.
pub const MAX_STRICT_ENUM_VALUES: usize = 1000;

/// Keywords strict mode refuses.
const UNSUPPORTED: &[&str] = &[
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "dependentRequired",
    "dependentSchemas",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "unevaluatedItems",
    "contains",
    "minContains",
    "maxContains",
    "uniqueItems",
];

/// Runs the rule on `tool`.
pub(super) fn check(tool: &ToolDefinition, out: &mut Vec<Finding>) {
    let Some(root) = tool.schema.as_object() else {
        return;
    };
    let mut walk = Walk {
        tool,
        out,
        properties: 0,
        enum_values: 0,
        too_deep: false,
        open: Vec::new(),
        optional: Vec::new(),
    };
    if !types(root).contains(&"object") || root.contains_key("anyOf") {
        walk.finding(
            "schema",
            "the root must be a plain object schema (type object, no anyOf)".to_owned(),
        );
    }
    walk.schema(root, "schema", 1);
    // One finding for all open objects and one for all optional
    // properties: a schema written without strict mode in mind has many,
    // and one fix each.
    if let Some(first) = walk.open.first().cloned() {
        let message = match walk.open.len() {
            1 => "an object without additionalProperties = false".to_owned(),
            n => format!(
                "{} without additionalProperties = false: {}",
                plural(n, "object"),
                listed(&walk.open)
            ),
        };
        walk.finding(&first, message);
    }
    if let Some((first, _)) = walk.optional.first().cloned() {
        let names: Vec<String> = walk.optional.iter().map(|(_, name)| name.clone()).collect();
        let message = match names.as_slice() {
            [name] => format!(
                "`{name}` is not in `required`: strict mode wants every property required, an optional one as a union with null"
            ),
            _ => format!(
                "{} not in `required` ({}): strict mode wants every property required, an optional one as a union with null",
                plural(names.len(), "property"),
                listed(&names)
            ),
        };
        walk.finding(&first, message);
    }
    if walk.properties > MAX_STRICT_PROPERTIES {
        let n = walk.properties;
        walk.finding(
            "schema",
            format!("has {n} properties in all, more than {MAX_STRICT_PROPERTIES}"),
        );
    }
    if walk.enum_values > MAX_STRICT_ENUM_VALUES {
        let n = walk.enum_values;
        walk.finding(
            "schema",
            format!("has {n} enum values in all, more than {MAX_STRICT_ENUM_VALUES}"),
        );
    }
}

struct Walk<'t, 'o> {
    tool: &'t ToolDefinition,
    out: &'o mut Vec<Finding>,
    properties: usize,
    enum_values: usize,
    too_deep: bool,
    /// Objects without `additionalProperties: false`, by field.
    open: Vec<String>,
    /// Properties not in their object's `required`: field and name.
    optional: Vec<(String, String)>,
}

/// "3 objects", "2 properties" (`n` is more than one).
fn plural(n: usize, what: &str) -> String {
    match what.strip_suffix('y') {
        Some(stem) => format!("{n} {stem}ies"),
        None => format!("{n} {what}s"),
    }
}

/// The first few of `items`, quoted, and how many more.
fn listed(items: &[String]) -> String {
    const SHOWN: usize = 3;
    let mut text = items
        .iter()
        .take(SHOWN)
        .map(|item| format!("`{item}`"))
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        text.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    text
}

impl Walk<'_, '_> {
    fn finding(&mut self, field: &str, message: String) {
        self.out.push(Finding::new(
            Rule::StrictMode,
            &self.tool.name,
            field,
            message,
        ));
    }

    fn schema(&mut self, schema: &Map<String, Value>, at: &str, depth: usize) {
        if let Some(values) = schema.get("enum").and_then(Value::as_array) {
            self.enum_values += values.len();
        }
        for keyword in UNSUPPORTED {
            if schema.contains_key(*keyword) {
                self.finding(
                    &format!("{at}.{keyword}"),
                    format!("`{keyword}` is not supported in strict mode"),
                );
            }
        }
        let is_object = types(schema).contains(&"object") || schema.contains_key("properties");
        if is_object {
            if depth > MAX_STRICT_DEPTH && !self.too_deep {
                self.too_deep = true;
                self.finding(
                    at,
                    format!("nests objects deeper than {MAX_STRICT_DEPTH} levels"),
                );
            }
            if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
                self.open.push(at.to_owned());
            }
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    self.properties += 1;
                    let field = format!("{at}.properties.{name}");
                    if !required.contains(&name.as_str()) {
                        self.optional.push((field.clone(), name.clone()));
                    }
                    if let Some(property) = property.as_object() {
                        self.schema(property, &field, depth + 1);
                    }
                }
            }
        }
        if let Some(items) = schema.get("items").and_then(Value::as_object) {
            self.schema(items, &format!("{at}.items"), depth + 1);
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                for (i, branch) in branches.iter().enumerate() {
                    if let Some(branch) = branch.as_object() {
                        self.schema(branch, &format!("{at}.{key}[{i}]"), depth + 1);
                    }
                }
            }
        }
        for key in ["$defs", "definitions"] {
            if let Some(defs) = schema.get(key).and_then(Value::as_object) {
                for (name, def) in defs {
                    if let Some(def) = def.as_object() {
                        self.schema(def, &format!("{at}.{key}.{name}"), depth);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn fields(schema: Value) -> Vec<String> {
        let tool = ToolDefinition::new("t", "Does t.", schema);
        let mut out = Vec::new();
        check(&tool, &mut out);
        let mut fields: Vec<String> = out.into_iter().map(|f| f.field).collect();
        fields.sort();
        fields
    }

    #[test]
    fn a_strict_schema_passes() {
        let strict = json!({
            "type": "object",
            "properties": {
                "a": {"type": "string"},
                "b": {"type": ["integer", "null"]},
                "c": {"type": "object", "properties": {"d": {"type": "string"}}, "required": ["d"], "additionalProperties": false}
            },
            "required": ["a", "b", "c"],
            "additionalProperties": false
        });
        assert!(fields(strict).is_empty());
    }

    #[test]
    fn open_objects_optional_properties_and_unsupported_keywords_fire_where_they_are() {
        let loose = json!({
            "type": "object",
            "properties": {"a": {"type": "string", "maxLength": 5}},
        });
        assert_eq!(
            fields(loose),
            [
                "schema",
                "schema.properties.a",
                "schema.properties.a.maxLength"
            ]
        );
    }

    #[test]
    fn many_open_objects_and_optional_properties_are_one_finding_each() {
        let loose = json!({
            "type": "object",
            "properties": {
                "a": {"type": "string"}, "b": {"type": "string"}, "c": {"type": "string"}, "d": {"type": "string"},
                "e": {"type": "object", "properties": {}}
            },
        });
        let tool = ToolDefinition::new("t", "Does t.", loose);
        let mut out = Vec::new();
        check(&tool, &mut out);
        let said: Vec<(&str, &str)> = out
            .iter()
            .map(|f| (f.field.as_str(), f.message.as_str()))
            .collect();
        assert_eq!(
            said,
            [
                (
                    "schema",
                    "2 objects without additionalProperties = false: `schema`, `schema.properties.e`"
                ),
                (
                    "schema.properties.a",
                    "5 properties not in `required` (`a`, `b`, `c` and 2 more): strict mode wants every property required, an optional one as a union with null"
                ),
            ]
        );
    }

    #[test]
    fn nesting_deeper_than_the_limit_fires_once() {
        let mut schema = json!({"type": "object", "properties": {}, "required": [], "additionalProperties": false});
        for _ in 0..MAX_STRICT_DEPTH {
            schema = json!({"type": "object", "properties": {"x": schema}, "required": ["x"], "additionalProperties": false});
        }
        let found = fields(schema);
        assert_eq!(found.len(), 1, "{found:?}");
    }

    #[test]
    fn too_many_enum_values_fire() {
        let values: Vec<String> = (0..=MAX_STRICT_ENUM_VALUES)
            .map(|i| i.to_string())
            .collect();
        let schema = json!({"type": "object", "properties": {"v": {"type": "string", "enum": values}}, "required": ["v"], "additionalProperties": false});
        assert_eq!(fields(schema), ["schema"]);
    }
}

//! The JSON Schema of a config file, derived from the config types.
//!
//! # Why derived, and what it cannot say
//!
//! Editors (taplo, Even Better TOML) read a JSON Schema to complete keys
//! and flag a misspelt one as it is typed. Derived from the same types the
//! loader deserializes into, it cannot drift from what rein reads: a field
//! added to a config struct is in the schema. It states shape only: which
//! tables and keys exist, their types and enums. The rules that span
//! fields (a tool's compensation names a tool that exists, a ratio in
//! (0, 1]) stay with `rein check`, which an editor cannot run.

use schemars::generate::SchemaSettings;
use serde_json::Value;

use super::config::ConfigFile;

/// Where the schema says it lives: the draft editors support most widely.
const DRAFT: &str = "http://json-schema.org/draft-07/schema#";

/// The JSON Schema (draft 07) of one config file (`rein.toml`, or each
/// `*.toml` of a config directory).
pub fn config_json_schema() -> Value {
    let generator = SchemaSettings::draft07().into_generator();
    let mut schema = generator.into_root_schema_for::<ConfigFile>().to_value();
    if let Some(root) = schema.as_object_mut() {
        root.insert("$schema".into(), Value::String(DRAFT.to_owned()));
        root.insert("title".into(), Value::String("rein config".to_owned()));
    }
    schema
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_refuses_unknown_sections_and_describes_durations_as_text() {
        let schema = config_json_schema();
        assert_eq!(schema["additionalProperties"], Value::Bool(false));
        for section in ["providers", "models", "tools", "agents", "server", "store"] {
            assert!(schema["properties"].get(section).is_some(), "{section}");
        }
        let text = schema.to_string();
        assert!(
            text.contains("\"Duration\""),
            "durations have their own definition"
        );
        assert!(
            !text.contains("\"nanos\""),
            "no duration is described as a struct"
        );
    }
}

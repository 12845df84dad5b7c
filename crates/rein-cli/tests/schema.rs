//! `rein schema` (issue 37, item 7): the JSON Schema editors read validates
//! every config the repository ships and `rein init` writes, refuses a
//! misspelt key and a wrong type, and the copy in the repository is what
//! the binary prints.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn rein(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "rein {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(&rein(&["schema"])).unwrap();
    jsonschema::validator_for(&schema).unwrap()
}

/// A TOML config as the JSON value the schema describes.
fn as_json(text: &str) -> Value {
    toml::from_str::<Value>(text).unwrap()
}

/// What the schema refuses in `text`, one line per error.
fn errors(validator: &jsonschema::Validator, text: &str) -> Vec<String> {
    validator
        .iter_errors(&as_json(text))
        .map(|e| format!("{}: {e}", e.instance_path()))
        .collect()
}

#[test]
fn the_committed_schema_is_what_rein_schema_prints() {
    let committed = std::fs::read_to_string(workspace().join("schemas/rein.schema.json")).unwrap();
    assert!(
        committed == rein(&["schema"]),
        "schemas/rein.schema.json is stale: run `cargo run -q -p rein-cli -- schema > schemas/rein.schema.json`"
    );
}

#[test]
fn the_schema_accepts_every_config_the_repository_ships_and_init_writes() {
    let validator = validator();
    for file in [
        "examples/order-desk/rein.toml",
        "crates/rein-chaos/world/rein.toml",
    ] {
        let text = std::fs::read_to_string(workspace().join(file)).unwrap();
        assert_eq!(errors(&validator, &text), Vec::<String>::new(), "{file}");
    }
    for provider in ["mock", "openai", "anthropic"] {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("agent");
        rein(&[
            "init",
            target.to_str().unwrap(),
            "--yes",
            "--provider",
            provider,
        ]);
        let text = std::fs::read_to_string(target.join("rein.toml")).unwrap();
        assert_eq!(
            errors(&validator, &text),
            Vec::<String>::new(),
            "{provider}"
        );
    }
}

#[test]
fn the_schema_refuses_a_misspelt_key_a_foreign_adapter_field_and_a_wrong_type() {
    let validator = validator();
    let base = std::fs::read_to_string(workspace().join("examples/order-desk/rein.toml")).unwrap();
    assert!(errors(&validator, &base).is_empty());

    let misspelt = format!("{base}\n[tools.extra]\ndescripton = \"Looks up one thing.\"\n");
    let found = errors(&validator, &misspelt);
    assert!(
        found
            .iter()
            .any(|e| e.contains("/tools/extra") && e.contains("descripton")),
        "{found:?}"
    );

    let foreign = format!(
        "{base}\n[tools.extra]\nadapter = {{ kind = \"http\", url = \"http://x\", program = \"p\" }}\n"
    );
    assert!(!errors(&validator, &foreign).is_empty());

    let mistyped = format!("{base}\n[agents.extra.budget]\nmax_steps = \"ten\"\n");
    let found = errors(&validator, &mistyped);
    assert!(
        found
            .iter()
            .any(|e| e.contains("/agents/extra/budget/max_steps")),
        "{found:?}"
    );

    let duration = format!("{base}\n[agents.extra.budget]\nwall_clock = 30\n");
    assert!(
        !errors(&validator, &duration).is_empty(),
        "a duration is text"
    );
}

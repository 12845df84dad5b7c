//! `rein lint --format sarif`: the findings as a SARIF 2.1.0 log, the
//! format code-scanning services read (GitHub, GitLab, Azure DevOps).
//!
//! One run, whose driver lists every rule (id, summary, full heuristic,
//! help, default level), and one result per finding: its level, its
//! message, its file and line, and its field as a logical location. A
//! finding a tool's `allow` silenced is a result too, with an `inSource`
//! suppression whose justification is the reason: code scanning then
//! shows it as dismissed, with why. Columns count characters
//! (`unicodeCodePoints`), as `rein check`'s do.

use std::path::Path;

use rein_core::lint::{Rule, Severity};
use serde_json::{Value, json};

use super::Placed;

/// The schema a SARIF 2.1.0 log names (`$schema`).
const SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// The SARIF level of `severity`.
fn level(severity: Severity) -> &'static str {
    match severity {
        Severity::Note => "note",
        Severity::Warning => "warning",
        Severity::Error => "error",
    }
}

/// The log of `placed` (standing and silenced findings).
pub(super) fn log(placed: &[Placed<'_>]) -> Value {
    let rules: Vec<Value> = Rule::ALL
        .iter()
        .map(|rule| {
            json!({
                "id": rule.id(),
                "shortDescription": { "text": rule.summary() },
                "fullDescription": { "text": rule.looks_for() },
                "help": { "text": rule.help() },
                "defaultConfiguration": { "level": level(rule.severity()) },
            })
        })
        .collect();
    let results: Vec<Value> = placed.iter().map(result).collect();
    json!({
        "$schema": SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {
                "driver": {
                    "name": "rein lint",
                    "version": env!("CARGO_PKG_VERSION"),
                    "rules": rules,
                }
            },
            "columnKind": "unicodeCodePoints",
            "results": results,
        }]
    })
}

fn result(p: &Placed<'_>) -> Value {
    let finding = p.finding;
    let mut physical = json!({ "artifactLocation": { "uri": uri(&p.file) } });
    if let Some(position) = p.position {
        physical["region"] = json!({ "startLine": position.line, "startColumn": position.column });
    }
    let rule_index = Rule::ALL.iter().position(|rule| *rule == finding.rule);
    let mut result = json!({
        "ruleId": finding.rule.id(),
        "level": level(finding.severity),
        "message": { "text": format!("{finding}. Help: {}", finding.help) },
        "locations": [{
            "physicalLocation": physical,
            "logicalLocations": [{ "fullyQualifiedName": p.config_field, "kind": "member" }],
        }],
    });
    if let Some(index) = rule_index {
        result["ruleIndex"] = json!(index);
    }
    if let Some(reason) = p.reason {
        result["suppressions"] = json!([{ "kind": "inSource", "justification": reason }]);
    }
    result
}

/// `path` as a URI reference: relative paths stay relative (code scanning
/// resolves them against the checkout), absolute ones become `file://`
/// URIs; anything but unreserved characters and `/` is percent-encoded.
fn uri(path: &Path) -> String {
    let text = path.to_string_lossy().replace('\\', "/");
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    if path.is_absolute() {
        format!("file://{out}")
    } else {
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_paths_stay_relative_and_odd_characters_are_encoded() {
        assert_eq!(
            uri(Path::new("examples/order-desk/rein.toml")),
            "examples/order-desk/rein.toml"
        );
        assert_eq!(
            uri(Path::new("my config/a b.toml")),
            "my%20config/a%20b.toml"
        );
        assert_eq!(
            uri(Path::new("/etc/rein/rein.toml")),
            "file:///etc/rein/rein.toml"
        );
    }
}

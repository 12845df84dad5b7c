//! `rein lint`, run as a real process on real config files: compiler-style
//! text, `--json`, SARIF validated against the official schema, exit
//! codes, silencing with a reason, and the shipped example linting clean.
//!
//! Each rule has a fixture that fires and one that does not in rein-core's
//! unit tests (`rein_core::lint`); here one config makes every rule a
//! config can express fire (`annotation-contradicts-class` needs an MCP
//! server's annotations, which a config does not hold).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn rein(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
    cmd.args(args);
    for name in ["ORDER_DESK_URL", "MOCK_MODEL_URL"] {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("the rein binary runs")
}

fn lint(config: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["lint", "--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    rein(&args, &[])
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is one JSON document ({e}): {}\nstderr: {}",
            stdout(out),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// A tool table: `name`, `description`, `class`, and `schema` (inline
/// TOML), with what a valid entry needs besides.
fn tool(name: &str, description: &str, class: &str, schema: &str) -> String {
    let irreversible = if class == "irreversible" {
        "avoid_at_plan_time = true\ncompensation = { grade = \"none\" }\n"
    } else {
        ""
    };
    format!(
        "[tools.{name}]\ndescription = \"{description}\"\nclass = \"{class}\"\n{irreversible}\
         adapter = {{ kind = \"http\", url = \"http://127.0.0.1:1/{name}\" }}\nschema = {schema}\n\n"
    )
}

/// One config in which every rule a config can express fires, and the
/// `strict-mode` findings of `patch_record` are silenced with a reason.
fn bad_config(dir: &Path) -> PathBuf {
    let long = format!("Look up one customer. {}", "More words here. ".repeat(70));
    let config = [
        tool(
            "create_ticket",
            "This tool creates a ticket.",
            "idempotent_write",
            r#"{ type = "object", properties = { priority = { type = "string", description = "Ticket priority level" }, project_key = { type = "string", description = "The Jira project key, e.g. ENG." }, timeout = { type = "integer", description = "Request timeout" }, include_details = { type = "boolean", description = "Whether to include detailed information" }, due_date = { type = "string", description = "When it is due." } }, required = ["priority", "project_key", "timeout", "include_details", "due_date"], additionalProperties = false }"#,
        ),
        tool(
            "send_notification",
            "Sends an email to the specified user.",
            "irreversible",
            r#"{ type = "object", properties = { orderId = { type = "string", description = "The order, as get_order returned it, e.g. A-1." } }, required = ["orderId"], additionalProperties = false }"#,
        ),
        tool(
            "get_order",
            "Look up one order.\\u200B",
            "read",
            r#"{ type = "object", properties = { order_id = { type = "string", description = "The order id from the buyer's message, e.g. A-1001." } }, required = ["order_id"], additionalProperties = false }"#,
        ),
        tool(
            "update_record",
            "Updates a record in the database. You must always call get_order first.",
            "idempotent_write",
            r#"{ type = "object", properties = { record_id = { type = "string", description = "The record, as get_order returned it, e.g. R-1." } }, required = ["record_id"], additionalProperties = false }"#,
        ),
        tool(
            "patch_record",
            "Patches a record with partial data.",
            "idempotent_write",
            r#"{ type = "object", properties = { record_id = { type = "string", description = "The record, as get_order returned it, e.g. R-1." } } }"#,
        ),
        "[tools.patch_record.lint]\nallow = [{ rule = \"strict-mode\", reason = \"partial data is optional by design\" }]\n\n".to_owned(),
        tool(
            "get_customer",
            &long,
            "read",
            r#"{ type = "object", properties = { customer_id = { type = "string", description = "The customer, as get_order returned it, e.g. C-7." } }, required = ["customer_id"], additionalProperties = false }"#,
        ),
    ]
    .concat();
    let path = dir.join("tools.toml");
    fs::write(&path, config).unwrap();
    path
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk/rein.toml")
}

const EXAMPLE_ENV: &[(&str, &str)] = &[
    ("ORDER_DESK_URL", "http://127.0.0.1:1"),
    ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
];

#[test]
fn every_rule_a_config_can_express_fires_with_its_file_line_tool_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let config = bad_config(dir.path());
    let out = lint(&config, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    let file = config.display().to_string();
    for expected in [
        format!(
            "{file}:2:1: warning[verb-object-first] tool `create_ticket` field `description`: the first sentence opens with `This`, not with what the tool does"
        ),
        format!(
            "{file}:5:44: warning[free-text-enum] tool `create_ticket` field `schema.properties.priority`: `priority` is free text"
        ),
        format!(
            "{file}:7:1: warning[name-description-mismatch] tool `send_notification`: the name says `send_notification` (any channel) but the description only email"
        ),
        format!(
            "{file}:7:1: warning[destructive-without-confirmation] tool `send_notification`: the tool is irreversible"
        ),
        format!(
            "{file}:16:1: error[hidden-unicode] tool `get_order` field `description`: holds 1 hidden character (the first, U+200B ZERO WIDTH SPACE, at character 19)"
        ),
    ] {
        assert!(text.contains(&expected), "missing {expected:?} in:\n{text}");
    }
    assert!(
        text.contains("  help: list the accepted values: priority = { type = \"string\", enum ="),
        "{text}"
    );
    // In file order, as a compiler reports.
    let places: Vec<(u32, u32)> = text
        .lines()
        .filter_map(|line| line.strip_prefix(&format!("{file}:")))
        .map(|rest| {
            let mut parts = rest.splitn(3, ':');
            let line = parts.next().unwrap().parse().unwrap();
            let column = parts.next().unwrap().parse().unwrap();
            (line, column)
        })
        .collect();
    assert!(places.len() > 10, "{text}");
    assert!(places.windows(2).all(|w| w[0] <= w[1]), "{places:?}");
    let summary = text.lines().last().unwrap();
    assert!(
        summary == "1 error, 12 warnings, 1 note in 6 tools (2 silenced with a reason)",
        "{summary}"
    );
}

#[test]
fn json_lists_every_finding_with_its_place_and_the_silenced_with_their_reasons() {
    let dir = tempfile::tempdir().unwrap();
    let config = bad_config(dir.path());
    let out = lint(&config, &["--json"]);
    assert_eq!(out.status.code(), Some(1));
    let doc = json(&out);
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["deny"], "warning");
    assert_eq!(doc["tools"], 6);
    let found: std::collections::BTreeSet<(String, String)> = doc["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            assert_eq!(f["file"], config.display().to_string());
            assert!(f["line"].as_u64().unwrap() > 0, "{f}");
            (
                f["rule"].as_str().unwrap().to_owned(),
                f["tool"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    for (rule, tool) in [
        ("verb-object-first", "create_ticket"),
        ("free-text-enum", "create_ticket"),
        ("id-without-lookup", "create_ticket"),
        ("missing-unit", "create_ticket"),
        ("boolean-third-state", "create_ticket"),
        ("missing-example", "create_ticket"),
        ("name-description-mismatch", "send_notification"),
        ("destructive-without-confirmation", "send_notification"),
        ("inconsistent-naming", "send_notification"),
        ("hidden-unicode", "get_order"),
        ("negative-constraint", "update_record"),
        ("negative-constraint", "patch_record"),
        ("instruction-like-text", "update_record"),
        ("description-length", "get_customer"),
    ] {
        assert!(
            found.contains(&(rule.to_owned(), tool.to_owned())),
            "no {rule} on {tool} in {found:?}"
        );
    }
    let silenced = doc["silenced"].as_array().unwrap();
    assert!(!silenced.is_empty());
    for s in silenced {
        assert_eq!(s["rule"], "strict-mode");
        assert_eq!(s["tool"], "patch_record");
        assert_eq!(s["reason"], "partial data is optional by design");
    }
    assert!(!found.contains(&("strict-mode".to_owned(), "patch_record".to_owned())));
}

#[test]
fn an_allowance_that_silences_nothing_is_a_note_that_does_not_fail() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.toml");
    let schema = r#"{ type = "object", properties = { order_id = { type = "string", description = "The order id from the buyer, e.g. A-1." } }, required = ["order_id"], additionalProperties = false }"#;
    let config = format!(
        "{}[tools.get_order.lint]\nallow = [{{ rule = \"missing-unit\", reason = \"once had a timeout\" }}]\n",
        tool("get_order", "Look up one order.", "read", schema)
    );
    fs::write(&path, config).unwrap();
    let out = lint(&path, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let file = path.display().to_string();
    assert!(
        stdout(&out).starts_with(&format!("{file}:8:10: note: tool `get_order` field `tools.get_order.lint.allow[0]`: silences `missing-unit`, which finds nothing here\n")),
        "{}",
        stdout(&out)
    );
    let doc = json(&lint(&path, &["--json"]));
    assert_eq!(doc["unused_allowances"][0]["rule"], "missing-unit");
    assert_eq!(doc["unused_allowances"][0]["line"], 8);
}

#[test]
fn deny_sets_the_severity_that_fails() {
    let dir = tempfile::tempdir().unwrap();
    let config = bad_config(dir.path());
    // An error (hidden-unicode) is at or above every level.
    assert_eq!(lint(&config, &["--deny", "error"]).status.code(), Some(1));
    // Without it, warnings fail by default and pass under --deny error.
    let text = fs::read_to_string(&config).unwrap().replace("\\u200B", "");
    fs::write(&config, text).unwrap();
    assert_eq!(lint(&config, &[]).status.code(), Some(1));
    let out = lint(&config, &["--deny", "error", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(json(&out)["ok"], true);
}

#[test]
fn sarif_output_validates_against_the_sarif_2_1_0_schema() {
    // The OASIS schema (sarif-2.1/schema/sarif-schema-2.1.0.json of
    // oasis-tcs/sarif-spec, errata01), vendored.
    let schema: Value =
        serde_json::from_str(include_str!("fixtures/sarif-schema-2.1.0.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = bad_config(dir.path());
    let out = lint(&config, &["--format", "sarif"]);
    assert_eq!(out.status.code(), Some(1));
    let log = json(&out);
    let errors: Vec<String> = validator
        .iter_errors(&log)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(errors.is_empty(), "{errors:#?}\n{log:#}");
    // The validator is no rubber stamp: a wrong version fails it.
    let mut broken = log.clone();
    broken["version"] = Value::from("2.0.0");
    assert!(!validator.is_valid(&broken));
    assert_eq!(log["version"], "2.1.0");
    let run = &log["runs"][0];
    let rules = run["tool"]["driver"]["rules"].as_array().unwrap();
    assert_eq!(rules.len(), rein_core::lint::Rule::ALL.len());
    let results = run["results"].as_array().unwrap();
    let hidden = results
        .iter()
        .find(|r| r["ruleId"] == "hidden-unicode")
        .unwrap();
    assert_eq!(hidden["level"], "error");
    assert_eq!(
        hidden["locations"][0]["physicalLocation"]["region"]["startLine"],
        16
    );
    assert_eq!(
        rules[hidden["ruleIndex"].as_u64().unwrap() as usize]["id"],
        "hidden-unicode"
    );
    let suppressed = results
        .iter()
        .find(|r| r["suppressions"].is_array())
        .unwrap();
    assert_eq!(
        suppressed["suppressions"][0]["justification"],
        "partial data is optional by design"
    );
    // The example's log (no standing result, its silenced ones) validates too.
    let out = rein(
        &[
            "lint",
            "--config",
            example().to_str().unwrap(),
            "--format",
            "sarif",
        ],
        EXAMPLE_ENV,
    );
    let log = json(&out);
    assert!(validator.is_valid(&log), "{log:#}");
}

#[test]
fn an_unknown_rule_or_a_missing_reason_is_refused_by_check_and_lint() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rein.toml");
    let schema = r#"{ type = "object", properties = { order_id = { type = "string", description = "The order id from the buyer, e.g. A-1." } }, required = ["order_id"], additionalProperties = false }"#;
    let config = format!(
        "{}[tools.get_order.lint]\nallow = [\n  {{ rule = \"free-text\", reason = \"typo\" }},\n  {{ rule = \"missing-unit\" }},\n]\n",
        tool("get_order", "Look up one order.", "read", schema)
    );
    fs::write(&path, config).unwrap();
    let out = lint(&path, &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let file = path.display().to_string();
    assert!(
        stderr.contains(&format!("{file}:9:5: tools.get_order.lint.allow[0].rule: `free-text` is not a lint rule; the rules are verb-object-first,")),
        "{stderr}"
    );
    assert!(
        stderr.contains("tools.get_order.lint.allow[1].reason: is required: say why"),
        "{stderr}"
    );
    let out = rein(&["check", path.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("tools.get_order.lint.allow[0].rule"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn unset_variables_do_not_stop_the_lint() {
    // Linting reads definitions, not a deployment: CI needs no URLs.
    let out = rein(&["lint", "--config", example().to_str().unwrap()], &[]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_config_that_does_not_load_exits_2() {
    let out = lint(Path::new("/nonexistent/rein.toml"), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}

#[test]
fn the_shipped_example_lints_clean_with_its_silenced_findings_reasoned() {
    let out = rein(
        &["lint", "--config", example().to_str().unwrap()],
        EXAMPLE_ENV,
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.starts_with("ok: 4 tools, no findings ("), "{text}");
    let out = rein(
        &[
            "lint",
            "--config",
            example().to_str().unwrap(),
            "--json",
            "--deny",
            "note",
        ],
        EXAMPLE_ENV,
    );
    assert_eq!(out.status.code(), Some(0));
    let doc = json(&out);
    assert_eq!(doc["findings"].as_array().unwrap().len(), 0, "{doc:#}");
    for silenced in doc["silenced"].as_array().unwrap() {
        assert!(
            silenced["reason"].as_str().unwrap().len() > 20,
            "a real reason: {silenced}"
        );
    }
    // And `rein check` accepts the allowances.
    let out = rein(&["check", example().to_str().unwrap()], EXAMPLE_ENV);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

//! Every config field rein accepts has an effect someone can observe, or
//! `rein check` refuses it with the reason (issue 15, item 5).
//!
//! # How
//!
//! The fields are not listed by hand: each table's field list is read from
//! its serde derive (a table with an unknown key `__probe` is refused with
//! "expected one of `a`, `b`, …" — every table refuses unknown fields), for
//! every table path in [`TABLES`]. Each field must then have an entry in
//! `fixtures/config-effects.txt`, one line per field:
//!
//! - `observed`: the test that observes what the field changes
//!   (an event, a request, a result, a refusal at run time), named as
//!   `file::function`; this test checks the function exists in that file;
//! - `refused`: a snippet setting the field, which `rein check`
//!   must refuse under that field's path with a message holding the reason;
//! - `table`: a sub-table, whose own fields are enumerated (it
//!   must be in [`TABLES`]).
//!
//! A field added to a config struct without an entry fails
//! `every_config_field_has_an_observed_effect_or_is_refused`, naming it: a
//! setting that is parsed and never honoured cannot come back unnoticed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rein_core::registry::{AdapterConfig, AdapterKind, ConfigFile, ConfigSource, check};

/// How a field's effect is observed, as a line of
/// `fixtures/config-effects.txt` says.
enum Effect {
    /// By this test (`crates/<crate>/<path>::<fn>`), which observes it as
    /// the text says.
    Observed(String, String),
    /// `rein check` refuses this snippet (merged into the base config)
    /// naming the field, with a message containing the text.
    Refused(String, String),
    /// A table whose fields are listed under its own path.
    Table,
    /// Owed by another piece of work, named; only the fields in [`OWED`].
    Owed(String),
}

/// The list: one line per field, `field | kind | test or snippet | how`.
const EFFECTS_FILE: &str = include_str!("fixtures/config-effects.txt");

/// Every listed field and its effect, in file order.
fn effects() -> Vec<(String, Effect)> {
    EFFECTS_FILE
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|line| {
            let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
            let cell = |i: usize| cells.get(i).copied().unwrap_or("").to_owned();
            let effect = match cells.get(1).copied() {
                Some("table") => Effect::Table,
                Some("observed") => Effect::Observed(cell(2), cell(3)),
                Some("refused") => Effect::Refused(cell(2).replace("\\n", "\n"), cell(3)),
                Some("owed") => Effect::Owed(cell(3)),
                other => panic!("config-effects.txt: `{line}` has kind {other:?}"),
            };
            (cell(0), effect)
        })
        .collect()
}

/// Every table of the config, as a path (`*` for a name, `[]` for an array
/// item) and a snippet that puts the unknown key `__probe` in it.
const TABLES: &[(&str, &str)] = &[
    ("", "__probe = 1"),
    ("providers.*", "[providers.p]\n__probe = 1"),
    ("providers.*.stream", "[providers.p.stream]\n__probe = 1"),
    (
        "providers.*.prices.*",
        "[providers.p.prices.m]\n__probe = 1",
    ),
    ("models.*", "[models.m]\n__probe = 1"),
    (
        "models.*.fallbacks[]",
        "[models.m]\nfallbacks = [{ __probe = 1 }]",
    ),
    ("resource_groups.*", "[resource_groups.g]\n__probe = 1"),
    ("tools.*", "[tools.t]\n__probe = 1"),
    ("tools.*.idempotency", "[tools.t.idempotency]\n__probe = 1"),
    (
        "tools.*.compensation",
        "[tools.t.compensation]\n__probe = 1",
    ),
    ("tools.*.latency", "[tools.t.latency]\n__probe = 1"),
    (
        "tools.*.latency.scale",
        "[tools.t.latency.scale]\n__probe = 1",
    ),
    // Probed kind by kind: see `adapter_fields`.
    ("tools.*.adapter", ""),
    ("tools.*.lint", "[tools.t.lint]\n__probe = 1"),
    (
        "tools.*.lint.allow[]",
        "[tools.t.lint]\nallow = [{ __probe = 1 }]",
    ),
    ("agents.*", "[agents.a]\n__probe = 1"),
    ("agents.*.budget", "[agents.a.budget]\n__probe = 1"),
    ("agents.*.retry", "[agents.a.retry]\n__probe = 1"),
    ("agents.*.loop_guard", "[agents.a.loop_guard]\n__probe = 1"),
    (
        "agents.*.model_retry",
        "[agents.a.model_retry]\n__probe = 1",
    ),
    ("agents.*.fan_out", "[agents.a.fan_out]\n__probe = 1"),
    ("agents.*.planner", "[agents.a.planner]\n__probe = 1"),
    ("agents.*.approval", "[agents.a.approval]\n__probe = 1"),
    ("breakers", "[breakers]\n__probe = 1"),
    ("breakers.*", "[breakers.tool]\n__probe = 1"),
    (
        "breakers.*.failure_ratio",
        "[breakers.tool.failure_ratio]\n__probe = 1",
    ),
    ("server", "[server]\n__probe = 1"),
    ("server.idempotency", "[server.idempotency]\n__probe = 1"),
    (
        "server.metrics_labels",
        "[server.metrics_labels]\n__probe = 1",
    ),
    ("server.queue", "[server.queue]\n__probe = 1"),
    (
        "server.reconciliation",
        "[server.reconciliation]\n__probe = 1",
    ),
    ("server.agent_graph", "[server.agent_graph]\n__probe = 1"),
    ("server.api_keys[]", "[[server.api_keys]]\n__probe = 1"),
    (
        "server.api_keys[].budget",
        "[[server.api_keys]]\n[server.api_keys.budget]\n__probe = 1",
    ),
    ("server.limits", "[server.limits]\n__probe = 1"),
    ("server.cors", "[server.cors]\n__probe = 1"),
    ("server.quotas", "[server.quotas]\n__probe = 1"),
    (
        "server.quotas.budget",
        "[server.quotas.budget]\n__probe = 1",
    ),
    (
        "server.quotas.tenants.*.budget",
        "[server.quotas.tenants.t.budget]\n__probe = 1",
    ),
    (
        "server.quotas.tenants.*",
        "[server.quotas.tenants.t]\n__probe = 1",
    ),
    ("telemetry", "[telemetry]\n__probe = 1"),
    ("store", "[store]\n__probe = 1"),
    ("webhooks.*", "[webhooks.w]\n__probe = 1"),
    ("mcp_servers.*", "[mcp_servers.m]\n__probe = 1"),
];

/// The fields another piece of work owes an effect. None now; an `Owed`
/// entry for any field not listed here fails the test.
const OWED: &[&str] = &[];

/// The fields of the table `probe` reaches, from serde's refusal of the
/// unknown key.
fn fields_of(path: &str, probe: &str) -> Vec<String> {
    let err = toml::from_str::<ConfigFile>(probe)
        .err()
        .unwrap_or_else(|| panic!("table `{path}` accepted an unknown field"));
    let message = err.message().to_owned();
    assert!(
        message.contains("unknown field `__probe`"),
        "table `{path}`: {message}"
    );
    let Some((_, expected)) = message.split_once("expected") else {
        return Vec::new();
    };
    expected
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The fields of `[tools.NAME.adapter]`: `kind` and every kind's own.
///
/// A tool keeps its adapter table as read (`AdapterTable`), problems and
/// all, so the whole-file probe cannot see the adapter's fields; each
/// kind's table is probed through the tagged enum instead, whose variants
/// refuse unknown fields as every other table does.
fn adapter_fields() -> Vec<String> {
    let mut fields = vec!["kind".to_owned()];
    for kind in AdapterKind::ALL {
        let probe = format!("kind = \"{kind}\"\n__probe = 1");
        let err = toml::from_str::<AdapterConfig>(&probe)
            .err()
            .unwrap_or_else(|| panic!("a {kind} adapter accepted an unknown field"));
        let message = err.message();
        assert!(
            message.contains("unknown field `__probe`"),
            "{kind}: {message}"
        );
        let listed = message.split_once("expected").map_or("", |(_, list)| list);
        for field in listed.split('`').skip(1).step_by(2) {
            if !fields.iter().any(|f| f == field) {
                fields.push(field.to_owned());
            }
        }
    }
    fields
}

/// Where the workspace is.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[test]
fn every_config_field_has_an_observed_effect_or_is_refused() {
    let mut wrong = Vec::new();
    let mut every = BTreeSet::new();
    for (table, probe) in TABLES {
        let fields = if *table == "tools.*.adapter" {
            adapter_fields()
        } else {
            fields_of(table, probe)
        };
        for field in fields {
            let path = if table.is_empty() {
                field
            } else {
                format!("{table}.{field}")
            };
            every.insert(path);
        }
    }
    let effects = effects();
    let known: BTreeSet<&str> = effects.iter().map(|(p, _)| p.as_str()).collect();
    // The list, field → how its effect is observed (`--nocapture` shows it).
    for (path, effect) in &effects {
        match effect {
            Effect::Observed(test, how) => println!("{path}: {how} ({test})"),
            Effect::Refused(_, reason) => println!("{path}: refused by rein check ({reason})"),
            Effect::Owed(why) => println!("{path}: OWED — {why}"),
            Effect::Table => {}
        }
    }
    for path in &every {
        if !known.contains(path.as_str()) {
            wrong.push(format!(
                "`{path}` has no effect listed: name the test that observes it, or make `rein check` refuse it"
            ));
        }
    }
    for (path, effect) in &effects {
        let path = path.as_str();
        if !every.contains(path) {
            wrong.push(format!("`{path}` is listed but no config table has it"));
            continue;
        }
        match effect {
            Effect::Table => {
                let table = TABLES.iter().any(|(t, _)| {
                    *t == path
                        || t.strip_suffix(".*") == Some(path)
                        || t.strip_suffix("[]") == Some(path)
                });
                if !table {
                    wrong.push(format!("`{path}` is a table, but TABLES does not list it"));
                }
            }
            Effect::Owed(_) => {
                if !OWED.contains(&path) {
                    wrong.push(format!(
                        "`{path}` is owed an effect, but only {OWED:?} may be"
                    ));
                }
            }
            Effect::Observed(test, _) => {
                let (file, function) = test.split_once("::").unwrap();
                let text = std::fs::read_to_string(workspace().join(file)).unwrap_or_default();
                if !text.contains(&format!("fn {function}(")) {
                    wrong.push(format!("`{path}`: no test `{function}` in {file}"));
                }
            }
            Effect::Refused(snippet, reason) => {
                if let Some(problem) = refusal(path, snippet, reason) {
                    wrong.push(problem);
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A config `rein check` accepts, which each refusal's snippet extends.
const BASE: &str = r#"
[providers.p]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
max_output_tokens = { m = 4096 }

[resource_groups.g]

[tools.t]
description = "Look an order up."
class = "idempotent_write"
resource_group = "g"
side_effect_tier = "low"
owner = "team"
schema = { type = "object", properties = { id = { type = "string", description = "The id." } }, required = ["id"], additionalProperties = false }
latency = { p50 = "5ms", p95 = "10ms", p99 = "20ms" }
adapter = { kind = "http", url = "http://127.0.0.1:9/t" }

[agents.a]
provider = "p"
model = "m"
tools = ["t"]
"#;

fn checked(text: &str) -> Result<(), Vec<rein_core::registry::ConfigProblem>> {
    let config: ConfigFile = toml::from_str(text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    check(&[ConfigSource::new("rein.toml", config)], &|_| Vec::new()).map(|_| ())
}

/// `None` when `rein check` refuses `snippet` under `path` (its `*` and
/// `[]` filled as the snippet fills them) with a message holding `reason`.
fn refusal(path: &str, snippet: &str, reason: &str) -> Option<String> {
    let text = format!("{BASE}\n{snippet}");
    match checked(&text) {
        Ok(()) => Some(format!("`{path}`: rein check accepts\n{snippet}")),
        Err(problems) => {
            let pattern: Vec<&str> = path.split('.').collect();
            let hit = problems.iter().any(|p| {
                let field: Vec<&str> = p.field.split('.').collect();
                field.len() == pattern.len()
                    && field.iter().zip(&pattern).all(|(f, want)| {
                        *want == "*" || f == want || want.trim_end_matches("[]") == *f
                    })
                    && p.message.contains(reason)
            });
            (!hit).then(|| format!("`{path}`: refused otherwise than expected: {problems:?}"))
        }
    }
}

#[test]
fn the_base_config_is_accepted() {
    checked(BASE).unwrap();
}

//! `rein stats` as a real process over the store `rein run` wrote — a
//! SQLite file, and a PostgreSQL database — after runs with faults: a tool
//! failure and a refused call, a step budget exhausted, a loop guard trip.
//! Every number is derived from the runs' own reports and events; another
//! tenant's run is never counted in a tenant's numbers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use rein_store_postgres::scratch::ScratchDatabase;
use rein_testkit::order_desk::OrderDesk;
use serde_json::Value;

mod common;
use common::example_dir;

/// A tool failure (no such order) and a call refused by validation (no
/// `order_id`), then an answer.
const FAILING: &str = r#"{"turns": [
  {"tool_calls": [{"id": "c1", "name": "get_order", "arguments": {"order_id": "Z-404"}}], "usage": {"input": 100, "output": 10}},
  {"tool_calls": [{"id": "c2", "name": "get_order", "arguments": {}}], "usage": {"input": 90, "output": 9}},
  {"text": "The order does not exist."}
]}"#;

/// Three lookups where the budget allows two steps.
const LONG: &str = r#"{"turns": [
  {"tool_calls": [{"id": "c1", "name": "get_order", "arguments": {"order_id": "A-1001"}}], "usage": {"input": 100, "output": 10}},
  {"tool_calls": [{"id": "c2", "name": "get_order", "arguments": {"order_id": "A-1002"}}], "usage": {"input": 100, "output": 10}},
  {"tool_calls": [{"id": "c3", "name": "get_order", "arguments": {"order_id": "A-1003"}}], "usage": {"input": 100, "output": 10}},
  {"text": "Done."}
]}"#;

/// The same lookup again and again (`max_repeats = 3`).
const LOOPING: &str = r#"{"turns": [
  {"tool_calls": [{"id": "c1", "name": "get_order", "arguments": {"order_id": "A-1001"}}], "usage": {"input": 100, "output": 10}},
  {"tool_calls": [{"id": "c2", "name": "get_order", "arguments": {"order_id": "A-1001"}}], "usage": {"input": 100, "output": 10}},
  {"tool_calls": [{"id": "c3", "name": "get_order", "arguments": {"order_id": "A-1001"}}], "usage": {"input": 100, "output": 10}},
  {"tool_calls": [{"id": "c4", "name": "get_order", "arguments": {"order_id": "A-1001"}}], "usage": {"input": 100, "output": 10}},
  {"tool_calls": [{"id": "c5", "name": "get_order", "arguments": {"order_id": "A-1001"}}], "usage": {"input": 100, "output": 10}},
  {"text": "Done."}
]}"#;

fn process(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(args)
        .env_remove("REIN_API_KEY")
        .env_remove("REIN_CRASH_AT")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn rein(args: &[&str], env: &[(&str, &str)]) -> Output {
    let output = process(args, env);
    assert!(
        output.status.success(),
        "rein {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap()
}

/// One `rein run` of the example agent with `script` (and `max_steps`),
/// for `tenant`, into `data`: its `--json` document.
fn drive(dir: &Path, desk: &str, data: &str, tenant: &str, script: &str, steps: u32) -> Value {
    let mut config = std::fs::read_to_string(example_dir().join("rein.toml")).unwrap();
    assert!(config.contains("max_steps = 10"), "the example's budget");
    config = config.replacen("max_steps = 10", &format!("max_steps = {steps}"), 1);
    std::fs::write(dir.join("rein.toml"), config).unwrap();
    std::fs::write(dir.join("demo.script.json"), script).unwrap();
    let config = dir.join("rein.toml").display().to_string();
    // Its exit code says the outcome; the document says it too.
    json(&process(
        &[
            "run",
            "--config",
            &config,
            "--data",
            data,
            "--agent",
            "order_desk",
            "--tenant",
            tenant,
            "--input",
            "x",
            "--json",
        ],
        &[
            ("ORDER_DESK_URL", desk),
            ("MOCK_MODEL_URL", "http://127.0.0.1:9"),
        ],
    ))
}

/// The guardrail an event records firing, as the test reads it from the
/// event's stored form (the documented table of `Guardrail`).
fn guardrail(event: &Value) -> Option<String> {
    let data = &event["data"];
    match event["kind"].as_str()? {
        "budget_exhausted" => Some(format!(
            "budget_{}",
            data["exhausted"]["dimension"].as_str()?
        )),
        "loop_detected" => Some(data["trip"]["reason"].as_str()?.to_owned()),
        "call_rejected" if data.get("arm").is_some() => Some("breaker".to_owned()),
        "call_rejected" => Some("validation".to_owned()),
        "fan_out_refused" => Some("fan_out".to_owned()),
        "call_shed" => Some("call_shed".to_owned()),
        "tool_disabled" => Some("tool_disabled".to_owned()),
        _ => None,
    }
}

/// Drives the runs into `data`, then checks `rein stats` against them.
fn stats_match_the_runs(data: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let desk = runtime.block_on(OrderDesk::start()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut reports = Vec::new();
    for (script, steps) in [(FAILING, 10), (LONG, 2), (LOOPING, 10)] {
        reports.push(drive(
            dir.path(),
            desk.base_url(),
            data,
            "acme",
            script,
            steps,
        ));
    }
    let demo = std::fs::read_to_string(example_dir().join("demo.script.json")).unwrap();
    let theirs = drive(dir.path(), desk.base_url(), data, "other", &demo, 10);

    let outcome = |doc: &Value| doc["report"]["outcome"].as_str().unwrap().to_owned();
    let outcomes: Vec<String> = reports.iter().map(outcome).collect();
    assert!(
        outcomes.contains(&"budget_exhausted".to_owned()),
        "{outcomes:?}"
    );
    // What the runs' own events say fired, per guardrail: (fired, runs).
    let mut expected = std::collections::BTreeMap::<String, (u64, u64)>::new();
    for doc in &reports {
        let run_id = doc["run_id"].as_str().unwrap();
        let events = json(&rein(
            &["runs", "events", run_id, "--data", data, "--json"],
            &[],
        ));
        let mut seen = std::collections::BTreeSet::new();
        for event in events.as_array().unwrap() {
            if let Some(name) = guardrail(event) {
                let entry = expected.entry(name.clone()).or_default();
                entry.0 += 1;
                if seen.insert(name) {
                    entry.1 += 1;
                }
            }
        }
    }
    for name in ["budget_steps", "repeated_action", "validation"] {
        assert!(expected.contains_key(name), "{name} fired: {expected:?}");
    }

    let stats = json(&rein(
        &["stats", "--data", data, "--tenant", "acme", "--json"],
        &[],
    ));
    let total = &stats["total"];
    assert_eq!(total["runs"], 3, "{stats}");
    assert_eq!(total["unfinished"], 0, "{stats}");
    for name in ["succeeded", "failed", "budget_exhausted", "partial_success"] {
        let n = outcomes.iter().filter(|o| *o == name).count() as u64;
        assert_eq!(
            total["outcomes"][name].as_u64().unwrap_or(0),
            n,
            "{name}: {stats}"
        );
    }
    let sum = |field: &str| -> u64 {
        reports
            .iter()
            .map(|d| &d["report"]["consumed"][field])
            // Reports say dollars; stats sum micro-dollars.
            .map(|n| {
                n.as_u64()
                    .unwrap_or_else(|| (n.as_f64().unwrap() * 1e6).round() as u64)
            })
            .sum()
    };
    assert!(sum("tokens") > 0);
    assert_eq!(total["tokens"], sum("tokens"), "{stats}");
    assert_eq!(total["cost_micros"], sum("cost_usd"), "{stats}");
    assert_eq!(stats["by_agent"]["order_desk"], *total, "{stats}");
    let fired: std::collections::BTreeMap<String, (u64, u64)> = stats["guardrails"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, t)| {
            assert_eq!(t["by_agent"]["order_desk"]["fired"], t["fired"], "{stats}");
            (
                name.clone(),
                (t["fired"].as_u64().unwrap(), t["runs"].as_u64().unwrap()),
            )
        })
        .collect();
    assert_eq!(fired, expected, "the guardrails the runs' events record");

    // The other tenant's numbers are its own, and every tenant's together.
    let other = json(&rein(
        &["stats", "--data", data, "--tenant", "other", "--json"],
        &[],
    ));
    assert_eq!(other["total"]["runs"], 1, "{other}");
    assert_eq!(
        other["total"]["tokens"], theirs["report"]["consumed"]["tokens"],
        "{other}"
    );
    let everyone = json(&rein(&["stats", "--data", data, "--json"], &[]));
    assert_eq!(everyone["total"]["runs"], 4, "{everyone}");
    let nobody = json(&rein(
        &[
            "stats", "--data", data, "--tenant", "acme", "--agent", "nobody", "--json",
        ],
        &[],
    ));
    assert_eq!(nobody["total"]["runs"], 0, "{nobody}");

    // The table a human reads.
    let table = String::from_utf8(
        rein(
            &[
                "stats",
                "--data",
                data,
                "--tenant",
                "acme",
                "--since",
                "1h",
                "--group-by",
                "guardrail",
            ],
            &[],
        )
        .stdout,
    )
    .unwrap();
    assert!(table.contains("3 runs (0 unfinished)"), "{table}");
    let line = table
        .lines()
        .find(|l| l.starts_with("budget_steps"))
        .unwrap_or_else(|| panic!("a budget_steps row: {table}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    let (steps_fired, steps_runs) = expected["budget_steps"];
    assert_eq!(
        cells[..3],
        [
            "budget_steps",
            &steps_fired.to_string(),
            &steps_runs.to_string()
        ],
        "{table}"
    );
    assert!(!table.contains("by model"), "--group-by shows one table");
}

#[test]
fn rein_stats_over_a_sqlite_file_counts_the_runs_and_their_guardrails() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    stats_match_the_runs(&db.display().to_string());
}

#[test]
fn rein_stats_over_postgres_counts_the_runs_and_their_guardrails() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let Some(database) = runtime.block_on(ScratchDatabase::create("cli_stats")) else {
        return;
    };
    stats_match_the_runs(&database.url_text());
    runtime.block_on(database.drop_database());
}

/// Over every tenant of a store file, two tenants' keys of one name are
/// told apart (`tenant/key`), never summed as one.
#[tokio::test]
async fn key_spend_over_every_tenant_names_each_tenants_key() {
    use rein_store::{SpendDelta, SpendStore};
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
    let today = rein_core::registry::day_of(
        u64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis(),
        )
        .unwrap(),
    );
    let delta = |tenant: &str, tokens| SpendDelta {
        tenant: rein_core::TenantId::new(tenant).unwrap(),
        key: "ci".to_owned(),
        model: "mock/mock-model".to_owned(),
        day: today,
        tokens,
        cost_micros: tokens,
    };
    store
        .add_spend(&[delta("acme", 10), delta("globex", 7)])
        .await
        .unwrap();
    drop(store);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["stats", "--json", "--data"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["keys"]["acme/ci"]["tokens"], 10, "{stats}");
    assert_eq!(stats["keys"]["globex/ci"]["tokens"], 7, "{stats}");
}

//! Loading configs from disk: the example order desk, directories of files,
//! and every kind of problem reported with its file and field.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rein_core::ToolClass;
use rein_core::deadline::ChildCaps;
use rein_core::registry::{AdapterSpec, ProviderKind};
use rein_engine::config::{CompiledSchemas, ConfigErrors, Loader, Registry};
use rein_engine::run::ToolTarget;
use serde_json::json;

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk/rein.toml")
}

fn demo_env(name: &str) -> Option<String> {
    match name {
        "ORDER_DESK_URL" => Some("http://127.0.0.1:7001".into()),
        "MOCK_MODEL_URL" => Some("http://127.0.0.1:7002".into()),
        _ => None,
    }
}

fn load(path: &Path) -> Result<Registry, ConfigErrors> {
    Loader::with_env(demo_env).load(path)
}

/// `(file name, field)` of every problem.
fn places(errors: &ConfigErrors) -> Vec<(String, String)> {
    errors
        .problems()
        .iter()
        .map(|p| {
            let name = p.file.file_name().unwrap().to_string_lossy().into_owned();
            (name, p.field.clone())
        })
        .collect()
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    path
}

#[test]
fn example_order_desk_config_loads_with_env_injected() {
    let registry = load(&example()).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<_> = registry.tools().keys().map(String::as_str).collect();
    assert_eq!(
        names,
        vec![
            "get_order",
            "restore_delivery_time",
            "send_email",
            "update_delivery_time"
        ]
    );
    let update = registry.tool("update_delivery_time").unwrap();
    assert_eq!(update.class, ToolClass::IdempotentWrite);
    assert_eq!(
        update.compensation.as_ref().map(|c| c.tool.as_str()),
        Some("restore_delivery_time")
    );
    match &update.adapter {
        AdapterSpec::Http {
            url, status_url, ..
        } => {
            assert_eq!(url, "http://127.0.0.1:7001/tools/update_delivery_time");
            assert_eq!(
                status_url.as_deref(),
                Some("http://127.0.0.1:7001/tools/update_delivery_time/status")
            );
        }
        other => panic!("{other:?}"),
    }
    let send = registry.tool("send_email").unwrap();
    assert_eq!(send.class, ToolClass::Irreversible);
    assert!(send.avoid_at_plan_time);
    assert!(
        send.model_description()
            .starts_with("[irreversible: runs at most once and is never retried; cannot be undone; avoid unless necessary] ")
    );
    match &registry.provider("replay").unwrap().kind {
        ProviderKind::Scripted { script } => {
            assert_eq!(
                script,
                &example().parent().unwrap().join("demo.script.json")
            );
        }
        other => panic!("{other:?}"),
    }
    match &registry.provider("mock").unwrap().kind {
        ProviderKind::OpenAi { base_url, .. } => assert_eq!(base_url, "http://127.0.0.1:7002/v1"),
        other => panic!("{other:?}"),
    }
    let agent = registry.agent("order_desk").unwrap();
    assert_eq!(agent.provider, "replay");
    let offered: Vec<_> = registry
        .openai_tools(agent)
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        offered,
        vec!["get_order", "update_delivery_time", "send_email"]
    );
    assert_eq!(registry.anthropic_tools(agent).len(), 3);
}

#[test]
fn example_schemas_compile_and_validate_arguments() {
    let registry = load(&example()).unwrap();
    let schemas = CompiledSchemas::compile(&registry).unwrap();
    assert_eq!(
        schemas.validate_args(
            "update_delivery_time",
            &json!({"order_id": "A-1001", "delivery_date": "2026-01-08T14:00:00Z"})
        ),
        Ok(())
    );
    let problems = schemas
        .validate_args(
            "update_delivery_time",
            &json!({"order_id": "A-1001", "delivery_date": "next tuesday"}),
        )
        .unwrap_err();
    assert_eq!(problems.len(), 1);
    assert_eq!(
        problems[0].to_string(),
        "/delivery_date: must be a valid date-time"
    );
}

#[test]
fn bound_agent_carries_the_concurrency_ceilings_of_its_tools_groups() {
    let registry = load(&example()).unwrap_or_else(|e| panic!("{e}"));
    let client = reqwest::Client::new();
    let agent = rein_engine::bind::bind_agent(&registry, "order_desk", &client, &demo_env)
        .unwrap_or_else(|e| panic!("{e}"));
    let limits: Vec<(&str, u32)> = agent
        .group_limits
        .iter()
        .map(|(g, n)| (g.as_str(), n.get()))
        .collect();
    assert_eq!(limits, vec![("order_api", 8)]);
}

#[test]
fn unset_env_variable_is_reported_once_with_file_and_field() {
    let only_desk = |name: &str| (name == "ORDER_DESK_URL").then(|| "http://h:1".to_owned());
    let errors = Loader::with_env(only_desk).load(&example()).unwrap_err();
    assert_eq!(
        places(&errors),
        vec![("rein.toml".into(), "providers.mock.base_url".into())]
    );
    assert!(
        errors.to_string().ends_with(
            "rein.toml:16:1: providers.mock.base_url: uses ${MOCK_MODEL_URL}, but the environment variable MOCK_MODEL_URL is not set"
        ),
        "{errors}"
    );
}

const PROVIDERS: &str = r#"
[providers.replay]
kind = "scripted"
script = "s.json"

[resource_groups.api]
"#;

const TOOLS: &str = r#"
[tools.lookup]
description = "Look something up."
class = "read"
resource_group = "api"
side_effect_tier = "none"
owner = "team"
latency = { mode = "observe", fallback_p99 = "1s" }
adapter = { kind = "http", url = "${DESK}/lookup" }
schema = { type = "object", properties = { q = { type = "strin", description = "query" } } }

[tools.charge]
description = "Charge a card."
class = "irreversible"
resource_group = "billing"
side_effect_tier = "high"
owner = "team"
latency = { mode = "observe", fallback_p99 = "1s" }
adapter = { kind = "http", url = "http://x/charge" }
schema = { type = "object", properties = { amount = { type = "number" } } }
[tools.charge.compensation]
tool = "lookup"
grade = "strong"

[agents.a]
provider = "replay"
model = "m"
tools = ["lookup", "charge", "refund"]
"#;

#[test]
fn directory_reports_every_problem_across_files_with_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "10-providers.toml", PROVIDERS);
    write(dir.path(), "20-tools.toml", TOOLS);
    write(dir.path(), "30-dup.toml", "[resource_groups.api]\n");
    write(dir.path(), "notes.txt", "not a config");
    let errors = Loader::with_env(|_| None).load(dir.path()).unwrap_err();
    assert_eq!(
        places(&errors),
        vec![
            (
                "20-tools.toml".into(),
                "tools.charge.schema.properties.amount.description".into()
            ),
            ("20-tools.toml".into(), "tools.charge.resource_group".into()),
            (
                "20-tools.toml".into(),
                "tools.charge.compensation.tool".into()
            ),
            (
                "20-tools.toml".into(),
                "tools.lookup.schema.properties.q.type".into()
            ),
            ("20-tools.toml".into(), "agents.a.tools".into()),
            ("20-tools.toml".into(), "tools.lookup.adapter.url".into()),
            ("30-dup.toml".into(), "resource_groups.api".into()),
        ]
    );
    // One line per problem, each naming file and field.
    let text = errors.to_string();
    assert_eq!(text.lines().count(), 7);
    assert!(
        text.lines()
            .all(|l| l.contains("20-tools.toml:") || l.contains("30-dup.toml:")),
        "{text}"
    );
}

#[test]
fn entry_type_errors_do_not_hide_other_files_problems() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.toml", "[tools.x]\nclass = \"sometimes\"\n");
    write(
        dir.path(),
        "b.toml",
        "[agents.y]\nprovider = \"nope\"\nmodel = \"m\"\ntools = [\"x\"]\n",
    );
    let errors = load(dir.path()).unwrap_err();
    // `x` is read without its bad class: the class is reported once, as
    // written (not again as missing), the rest of `x` in the same pass,
    // and the agent's reference to `x` is not "unknown".
    assert_eq!(
        places(&errors),
        vec![
            ("a.toml".into(), "tools.x.class".into()),
            ("a.toml".into(), "tools.x.description".into()),
            ("a.toml".into(), "tools.x.schema".into()),
            ("a.toml".into(), "tools.x.adapter".into()),
            ("b.toml".into(), "agents.y.provider".into()),
        ]
    );
    let first = &errors.problems()[0];
    assert_eq!(first.position.map(|p| p.line), Some(2));
    assert!(
        first.message.starts_with("unknown variant `sometimes`"),
        "{}",
        first.message
    );
}

#[test]
fn syntax_error_reports_file_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "rein.toml",
        "[tools.x]\nclass = \"read\nowner = 1\n",
    );
    let errors = load(&path).unwrap_err();
    assert_eq!(errors.len(), 1);
    let p = &errors.problems()[0];
    assert_eq!(p.position.map(|p| (p.line, p.column)), Some((2, 14)));
    assert!(
        errors
            .to_string()
            .starts_with(&format!("{}:2:14: ", path.display())),
        "{errors}"
    );
}

#[test]
fn missing_path_and_empty_directory_are_problems() {
    let dir = tempfile::tempdir().unwrap();
    let errors = load(&dir.path().join("nope.toml")).unwrap_err();
    assert!(errors.problems()[0].message.starts_with("cannot be read"));
    let errors = load(dir.path()).unwrap_err();
    assert!(
        errors.problems()[0]
            .message
            .starts_with("holds no *.toml files")
    );
}

#[test]
fn scripted_provider_script_resolves_against_its_own_file_in_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let sub = dir.path().join("conf");
    fs::create_dir(&sub).unwrap();
    write(&sub, "p.toml", PROVIDERS);
    let registry = load(&sub).unwrap();
    assert_eq!(
        registry.provider("replay").unwrap().kind,
        ProviderKind::Scripted {
            script: sub.join("s.json")
        }
    );
    let _ = HashMap::<(), ()>::new();
}

const AGENT_TOOL: &str = r#"
[providers.model]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
max_output_tokens = { m = 4096 }

[resource_groups.agents]
max_concurrency = 2

[agents.researcher]
provider = "model"
model = "m"
system_prompt = "You research."
tools = ["research"]

[agents.desk]
provider = "model"
model = "m"
tools = ["research"]

[tools.research]
description = "Ask the research agent a question; answers with its findings."
class = "read"
resource_group = "agents"
side_effect_tier = "none"
owner = "research-team"
schema = { type = "object", properties = { task = { type = "string", description = "What the child agent should do." } }, required = ["task"], additionalProperties = false }
[tools.research.adapter]
kind = "agent"
agent = "researcher"
budget_ratio = 0.25
max_tokens = 20000
max_steps = 5
wall_clock = "30s"
"#;

#[test]
fn agent_tool_binds_to_a_child_agent_target() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "rein.toml", AGENT_TOOL);
    let registry = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let client = reqwest::Client::new();
    // The agent that offers the tool, and the agent the tool runs (itself).
    for name in ["desk", "researcher"] {
        let agent = rein_engine::bind::bind_agent(&registry, name, &client, &demo_env)
            .unwrap_or_else(|e| panic!("{e}"));
        let tool = &agent.tools["research"];
        assert_eq!(tool.class, ToolClass::Read);
        assert_eq!(tool.resource_group.as_deref(), Some("agents"));
        // No latency declared: the agent tool default, capped by wall_clock.
        assert_eq!(tool.latency.p99(), Duration::from_secs(30));
        match &tool.target {
            ToolTarget::Agent(target) => {
                assert_eq!(target.agent, "researcher");
                assert_eq!(target.budget_ratio.get(), 0.25);
                assert_eq!(
                    target.caps,
                    ChildCaps {
                        wall_clock: Some(Duration::from_secs(30)),
                        steps: Some(5),
                        tokens: Some(20_000),
                        cost: None,
                    }
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            agent.tool_definitions[0]["function"]["name"],
            json!("research")
        );
        assert_eq!(agent.group_limits["agents"].get(), 2);
    }
    let all = rein_engine::bind::bind_tools(&registry).unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(all["research"].target, ToolTarget::Agent(_)));
}

#[test]
fn a_model_binding_gives_its_agents_their_chain_prices_and_provider_ceilings() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(
        dir.path(),
        "rein.toml",
        r#"
[providers.main]
kind = "openai"
base_url = "http://127.0.0.1:1/v1"
max_concurrency = 4
[providers.main.prices."small"]
input_per_mtok_usd = 1.0
output_per_mtok_usd = 2.0
[providers.main.max_output_tokens]
small = 4000
large = 8000

[providers.backup]
kind = "anthropic"
base_url = "http://127.0.0.1:2/v1"
max_output_tokens = { claude = 2000 }
tokens_per_minute = 90000
token_burst = 30000

[models.smart]
provider = "main"
model = "small"
fallbacks = [{ provider = "backup", model = "claude" }]
context_fallbacks = [{ provider = "main", model = "large" }]

[agents.helper]
model = "smart"
system_prompt = "Help."
[agents.helper.budget]
wall_clock = "30s"
"#,
    );
    let registry = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let client = reqwest::Client::new();
    let agent = rein_engine::bind::bind_agent(&registry, "helper", &client, &demo_env)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (agent.provider.name(), agent.model.as_str()),
        ("main", "small")
    );
    assert!(agent.price.is_some(), "the primary's price");
    let links = |l: &[rein_engine::run::ModelLink]| {
        l.iter()
            .map(|l| format!("{}/{}", l.provider.name(), l.model))
            .collect::<Vec<_>>()
    };
    assert_eq!(links(&agent.fallbacks), vec!["backup/claude"]);
    assert_eq!(links(&agent.context_fallbacks), vec!["main/large"]);
    // Each link carries its own model's output cap.
    assert_eq!(agent.max_output_tokens, Some(4000));
    assert_eq!(agent.fallbacks[0].max_output_tokens, Some(2000));
    assert_eq!(agent.context_fallbacks[0].max_output_tokens, Some(8000));
    let ceilings: Vec<(&str, u32)> = agent
        .provider_limits
        .iter()
        .map(|(p, n)| (p.as_str(), n.get()))
        .collect();
    assert_eq!(ceilings, vec![("main", 4)], "backup is unlimited");
    // The token bucket of every provider the agent may ask goes with it.
    let buckets: Vec<(&str, u64, u64)> = agent
        .provider_tokens
        .iter()
        .map(|(p, t)| (p.as_str(), t.per_minute.get(), t.burst.get()))
        .collect();
    assert_eq!(buckets, vec![("backup", 90_000, 30_000)], "main has none");
}

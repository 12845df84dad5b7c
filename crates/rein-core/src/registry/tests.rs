//! The integrity check, end to end over TOML text, and the generated tool
//! definitions.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::deadline::Cost;
use crate::ids::TenantId;
use crate::tool::ToolClass;

const BASE: &str = r#"
[providers.replay]
kind = "scripted"
script = "demo.script.json"

[providers.mock]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "OPENAI_API_KEY"
[providers.mock.prices."gpt-4o-mini"]
input_per_mtok_usd = 0.15
output_per_mtok_usd = 0.60

[resource_groups.order_api]
rate_per_sec = 20.5
max_concurrency = 8

[tools.get_order]
description = "Look up one order."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
latency = { p50 = "20ms", p95 = "50ms", p99 = "90ms", samples = 500 }
adapter = { kind = "http", url = "http://desk/tools/get_order" }
schema = { type = "object", properties = { order_id = { type = "string", description = "Order id, e.g. A-1001" } }, required = ["order_id"], additionalProperties = false }

[tools.update_delivery_time]
description = "Change the promised delivery time of one order."
class = "idempotent_write"
resource_group = "order_api"
side_effect_tier = "medium"
owner = "orders-team"
self_heal_allowance = 1
schema = { type = "object", properties = { order_id = { type = "string", description = "Order id" }, delivery_date = { type = "string", description = "RFC 3339 date-time" } }, required = ["order_id", "delivery_date"] }
[tools.update_delivery_time.idempotency]
volatile_fields = ["trace_id"]
header = "X-Idem"
[tools.update_delivery_time.compensation]
tool = "restore_delivery_time"
grade = "strong"
window = "24h"
args = { order_id = "args.order_id", delivery_date = "result.previous_delivery_date" }
[tools.update_delivery_time.latency]
mode = "observe"
fallback_p99 = "5s"
[tools.update_delivery_time.adapter]
kind = "http"
url = "https://desk/tools/update_delivery_time"
headers = { "X-Team" = "orders" }
status_url = "https://desk/tools/update_delivery_time/status"

[tools.restore_delivery_time]
description = "Put an order's delivery time back."
class = "idempotent_write"
resource_group = "order_api"
side_effect_tier = "medium"
owner = "orders-team"
latency = { mode = "observe", fallback_p99 = "5s", min_samples = 10 }
adapter = { kind = "http", url = "http://desk/tools/restore_delivery_time", method = "PUT", max_result_bytes = 1024 }
schema = { type = "object", properties = { order_id = { type = "string", description = "Order id" }, delivery_date = { type = "string", description = "RFC 3339 date-time" } }, required = ["order_id", "delivery_date"] }

[tools.send_email]
description = "Email the buyer of an order."
class = "irreversible"
resource_group = "order_api"
side_effect_tier = "high"
owner = "comms-team"
avoid_at_plan_time = true
compensation = { grade = "none" }
latency = { p50 = "100ms", p95 = "300ms", p99 = "1s" }
adapter = { kind = "http", url = "http://desk/tools/send_email" }
schema = { type = "object", properties = { order_id = { type = "string", description = "Order id" }, body = { type = "string", description = "Plain text" } }, required = ["order_id", "body"] }

[agents.order_desk]
provider = "replay"
model = "gpt-4o-mini"
system_prompt = "You adjust orders."
tools = ["get_order", "update_delivery_time", "send_email"]
[agents.order_desk.budget]
wall_clock = "30s"
max_steps = 10
[agents.order_desk.loop_guard]
self_heal_overrides = { send_email = 0 }
"#;

fn source(path: &str, text: &str) -> ConfigSource {
    let config: ConfigFile = toml::from_str(text).unwrap_or_else(|e| panic!("{path}: {e}"));
    ConfigSource::new(path, config)
}

fn build(files: &[(&str, &str)]) -> Result<Registry, Vec<ConfigProblem>> {
    let sources: Vec<_> = files.iter().map(|(p, t)| source(p, t)).collect();
    check(&sources, &|_| Vec::new())
}

/// `(file, field)` of every problem, in order.
fn problems(files: &[(&str, &str)]) -> Vec<(String, String)> {
    match build(files) {
        Ok(_) => panic!("expected problems"),
        Err(problems) => problems
            .iter()
            .map(|p| (p.file.display().to_string(), p.field.clone()))
            .collect(),
    }
}

fn fields(text: &str) -> Vec<String> {
    problems(&[("rein.toml", text)])
        .into_iter()
        .map(|(_, field)| field)
        .collect()
}

fn message_of(text: &str, field: &str) -> String {
    let problems = build(&[("rein.toml", text)]).unwrap_err();
    problems
        .iter()
        .find(|p| p.field == field)
        .unwrap_or_else(|| panic!("no problem at {field}: {problems:?}"))
        .message
        .clone()
}

/// BASE with `extra` tables appended.
fn with_extra(extra: &str) -> String {
    format!("{BASE}\n{extra}")
}

#[test]
fn base_config_builds_a_registry_with_defaults_applied() {
    let reg = build(&[("conf/rein.toml", BASE)]).unwrap();
    assert_eq!(reg.tools().len(), 4);
    let update = &reg.tools()["update_delivery_time"];
    assert_eq!(update.class, ToolClass::IdempotentWrite);
    assert_eq!(update.idempotency.header, "X-Idem");
    assert_eq!(
        update.idempotency.normalizer.volatile_fields,
        vec!["trace_id"]
    );
    assert_eq!(update.source, PathBuf::from("conf/rein.toml"));
    let comp = update.compensation.as_ref().unwrap();
    assert_eq!(comp.tool, "restore_delivery_time");
    assert_eq!(comp.grade, CompensationGrade::Strong);
    assert_eq!(comp.window, Some(Duration::from_secs(24 * 3600)));
    assert_eq!(
        comp.arguments(
            &json!({"order_id": "A-1", "delivery_date": "new"}),
            &json!({"previous_delivery_date": "old"})
        )
        .unwrap(),
        json!({"order_id": "A-1", "delivery_date": "old"})
    );
    match update.latency {
        LatencySpec::Observe {
            fallback,
            min_samples,
        } => {
            assert_eq!(fallback.p99(), Duration::from_secs(5));
            assert_eq!(fallback.p50(), Duration::from_secs(5));
            assert_eq!(min_samples, DEFAULT_OBSERVE_MIN_SAMPLES);
        }
        other => panic!("{other:?}"),
    }
    match &update.adapter {
        AdapterSpec::Http {
            method,
            headers,
            status_url,
            max_result_bytes,
            ..
        } => {
            assert_eq!(*method, HttpMethod::Post);
            assert_eq!(headers["X-Team"], "orders");
            assert!(status_url.is_some());
            assert_eq!(*max_result_bytes, DEFAULT_MAX_RESULT_BYTES);
        }
        other => panic!("{other:?}"),
    }
    let get = &reg.tools()["get_order"];
    assert_eq!(get.idempotency.header, DEFAULT_IDEMPOTENCY_HEADER);
    assert_eq!(
        get.idempotency.normalizer,
        crate::idempotency::NormalizerConfig::default()
    );
    assert_eq!(reg.tools()["send_email"].compensation, None);
    assert_eq!(
        reg.tools()["send_email"].compensation_grade(),
        CompensationGrade::None
    );

    // Script paths resolve against the config file's directory.
    assert_eq!(
        reg.provider("replay").unwrap().kind,
        ProviderKind::Scripted {
            script: Path::new("conf").join("demo.script.json")
        }
    );
    let mock = reg.provider("mock").unwrap();
    assert_eq!(
        mock.kind,
        ProviderKind::OpenAi {
            base_url: "http://127.0.0.1:9/v1".into(),
            api_key_env: Some("OPENAI_API_KEY".into()),
            timeout: DEFAULT_PROVIDER_TIMEOUT,
        }
    );
    assert_eq!(
        mock.price("gpt-4o-mini").unwrap().input_per_mtok,
        Cost::from_micros(150_000)
    );

    let group = reg.resource_group("order_api").unwrap();
    assert_eq!(group.rate.unwrap().burst, 21);
    assert_eq!(group.max_concurrency.map(|n| n.get()), Some(8));

    let agent = reg.agent("order_desk").unwrap();
    assert_eq!(agent.budget.steps(), Some(10));
    assert_eq!(agent.budget.wall_clock(), Duration::from_secs(30));
    // The tool's own allowance fills in; the agent's explicit one is kept.
    assert_eq!(
        agent
            .loop_guard
            .self_heal_overrides
            .get("update_delivery_time"),
        Some(&1)
    );
    assert_eq!(
        agent.loop_guard.self_heal_overrides.get("send_email"),
        Some(&0)
    );
    assert_eq!(*reg.breakers(), crate::breaker::BreakersConfig::default());
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let text = r#"
[tools.a]
class = "read"
schema = { type = "object" }
[agents.x]
tools = ["nope", "a", "a"]
[agents.x.budget]
max_steps = 0
"#;
    assert_eq!(
        fields(text),
        vec![
            "tools.a.description",
            "tools.a.adapter",
            "agents.x.provider",
            "agents.x.model",
            "agents.x.tools",
            "agents.x.tools",
            "agents.x.budget.max_steps",
        ]
    );
}

#[test]
fn duplicate_names_across_files_are_reported_at_the_later_file() {
    let other = r#"
[resource_groups.order_api]
[tools.get_order]
description = "Again."
[breakers]
"#;
    let found = problems(&[("a/base.toml", BASE), ("a/more.toml", other)]);
    assert!(found.contains(&("a/more.toml".into(), "resource_groups.order_api".into())));
    assert!(found.contains(&("a/more.toml".into(), "tools.get_order".into())));
    assert_eq!(found.len(), 2, "{found:?}");
    let problems = build(&[("a/base.toml", BASE), ("a/more.toml", other)]).unwrap_err();
    assert_eq!(
        problems[0].message,
        "is also defined in a/base.toml; each name may be defined once across all files"
    );
    // Two [breakers] tables are one too many as well.
    let found = problems_of_two("[breakers]\n", "[breakers]\n");
    assert_eq!(found, vec![("b.toml".into(), "breakers".into())]);
}

fn problems_of_two(a: &str, b: &str) -> Vec<(String, String)> {
    problems(&[("a.toml", a), ("b.toml", b)])
}

#[test]
fn problems_are_grouped_by_file_in_source_order() {
    let first = "[agents.x]\nprovider = \"nope\"\nmodel = \"m\"\n";
    let second = "[agents.y]\nprovider = \"nope\"\nmodel = \"m\"\n";
    let found = problems(&[("z.toml", first), ("a.toml", second)]);
    assert_eq!(
        found,
        vec![
            ("z.toml".into(), "agents.x.provider".into()),
            ("a.toml".into(), "agents.y.provider".into())
        ]
    );
}

#[test]
fn unknown_references_are_refused_naming_the_reference() {
    let text = BASE
        .replace("provider = \"replay\"", "provider = \"nowhere\"")
        .replace(
            "tools = [\"get_order\", \"update_delivery_time\", \"send_email\"]",
            "tools = [\"get_order\", \"update_delivery_time\", \"send_email\", \"refund\"]",
        )
        .replacen(
            "resource_group = \"order_api\"",
            "resource_group = \"billing\"",
            1,
        );
    assert_eq!(
        fields(&text),
        vec![
            "tools.get_order.resource_group",
            "agents.order_desk.provider",
            "agents.order_desk.tools",
        ]
    );
    assert_eq!(
        message_of(&text, "agents.order_desk.tools"),
        "names `refund`, which is not a tool; define [tools.refund]"
    );
}

#[test]
fn irreversible_tool_without_compensation_needs_avoid_at_plan_time() {
    let unguarded = BASE.replace("avoid_at_plan_time = true\n", "");
    assert_eq!(
        fields(&unguarded),
        vec!["tools.send_email.compensation.grade"]
    );
    let absent = unguarded.replace("compensation = { grade = \"none\" }\n", "");
    assert_eq!(fields(&absent), vec!["tools.send_email.compensation"]);
    // Explicitly avoided and without any compensation table: accepted.
    let avoided = BASE.replace("compensation = { grade = \"none\" }\n", "");
    assert!(build(&[("rein.toml", &avoided)]).is_ok());
}

#[test]
fn compensation_class_rules_are_enforced() {
    let comp = |tool: &str, grade: &str| {
        BASE.replace(
            "tool = \"restore_delivery_time\"\ngrade = \"strong\"",
            &format!("tool = \"{tool}\"\ngrade = \"{grade}\""),
        )
    };
    // A read tool never compensates.
    assert_eq!(
        fields(&comp("get_order", "strong")),
        vec![
            "tools.update_delivery_time.compensation.tool",
            // get_order's schema has no delivery_date
            "tools.update_delivery_time.compensation.args.delivery_date",
        ]
    );
    assert!(
        message_of(
            &comp("get_order", "weak"),
            "tools.update_delivery_time.compensation.tool"
        )
        .contains("a read tool")
    );
    // An irreversible compensation only with grade weak.
    let irreversible = comp("send_email", "strong");
    assert!(
        message_of(
            &irreversible,
            "tools.update_delivery_time.compensation.tool"
        )
        .contains("must be safe to repeat (idempotent_write)")
    );
    let weak_irreversible = comp("send_email", "weak").replace(
        "args = { order_id = \"args.order_id\", delivery_date = \"result.previous_delivery_date\" }",
        "args = { order_id = \"args.order_id\", body = \"result.previous_delivery_date\" }",
    );
    assert!(build(&[("rein.toml", &weak_irreversible)]).is_ok());
    // Unknown and self.
    assert_eq!(
        message_of(
            &comp("restore_everything", "strong"),
            "tools.update_delivery_time.compensation.tool"
        ),
        "names `restore_everything`, which is not a tool; define [tools.restore_everything]"
    );
    assert!(
        message_of(
            &comp("update_delivery_time", "strong"),
            "tools.update_delivery_time.compensation.tool"
        )
        .contains("cannot undo itself")
    );
}

#[test]
fn compensation_grade_and_tool_must_agree() {
    let none_with_tool = BASE.replace("grade = \"strong\"", "grade = \"none\"");
    assert_eq!(
        fields(&none_with_tool),
        vec![
            "tools.update_delivery_time.compensation.tool",
            "tools.update_delivery_time.compensation.window",
            "tools.update_delivery_time.compensation.args",
        ]
    );
    let strong_without_tool = BASE.replace("tool = \"restore_delivery_time\"\n", "");
    assert_eq!(
        message_of(
            &strong_without_tool,
            "tools.update_delivery_time.compensation.tool"
        ),
        "is required when grade is strong"
    );
    let on_read = with_extra("[tools.get_order.compensation]\ngrade = \"none\"\n");
    assert_eq!(
        message_of(&on_read, "tools.get_order.compensation"),
        "is not allowed on a read tool: a read has no effect to undo"
    );
    let no_grade = BASE.replace("grade = \"strong\"\n", "");
    assert_eq!(
        fields(&no_grade),
        vec!["tools.update_delivery_time.compensation.grade"]
    );
}

#[test]
fn argument_mapping_must_read_known_arguments_and_fill_required_ones() {
    let text = BASE.replace(
        "args = { order_id = \"args.order_id\", delivery_date = \"result.previous_delivery_date\" }",
        "args = { order_id = \"args.order\", note = \"input.x\", delivery_date = \"result.a\" }",
    );
    assert_eq!(
        fields(&text),
        vec![
            "tools.update_delivery_time.compensation.args.note",
            "tools.update_delivery_time.compensation.args.order_id",
        ]
    );
    assert_eq!(
        message_of(
            &text,
            "tools.update_delivery_time.compensation.args.order_id"
        ),
        "reads `args.order`, but the schema of `update_delivery_time` has no argument `order`"
    );
    let missing = BASE.replace(
        "args = { order_id = \"args.order_id\", delivery_date = \"result.previous_delivery_date\" }",
        "args = { order_id = \"args.order_id\", extra = \"args.order_id\" }",
    );
    assert_eq!(
        fields(&missing),
        vec![
            "tools.update_delivery_time.compensation.args.extra",
            "tools.update_delivery_time.compensation.args",
        ]
    );
    assert_eq!(
        message_of(&missing, "tools.update_delivery_time.compensation.args"),
        "does not fill `delivery_date`, which `restore_delivery_time` requires"
    );
}

#[test]
fn schema_structure_rules_are_enforced() {
    let text = BASE.replace(
        "schema = { type = \"object\", properties = { order_id = { type = \"string\", description = \"Order id, e.g. A-1001\" } }, required = [\"order_id\"], additionalProperties = false }",
        "schema = { type = \"array\", properties = { order_id = { type = \"string\" } }, required = [\"order\"] }",
    );
    assert_eq!(
        fields(&text),
        vec![
            "tools.get_order.schema.type",
            "tools.get_order.schema.properties.order_id.description",
            "tools.get_order.schema.required",
        ]
    );
}

#[test]
fn schema_compiler_issues_are_reported_under_the_schema_field() {
    let sources = [source("rein.toml", BASE)];
    let problems = check(&sources, &|schema| {
        if schema["properties"].get("body").is_some() {
            vec![SchemaIssue::new("properties.body.type", "is not a type")]
        } else {
            Vec::new()
        }
    })
    .unwrap_err();
    assert_eq!(problems.len(), 1);
    assert_eq!(
        problems[0].to_string(),
        "rein.toml: tools.send_email.schema.properties.body.type: is not a type"
    );
}

#[test]
fn core_config_errors_are_prefixed_with_their_table_path() {
    let text = BASE
        .replace("max_steps = 10", "max_steps = 0")
        .replace(
            "self_heal_overrides = { send_email = 0 }",
            "self_heal_overrides = { send_email = 0 }\nmax_repeats = 0",
        )
        .replace("p95 = \"300ms\"", "p95 = \"50ms\"")
        + "[agents.order_desk.retry]\nmax_attempts = 0\n[breakers.provider]\nbreak_duration = \"0s\"\n";
    assert_eq!(
        fields(&text),
        vec![
            "tools.send_email.latency.p95",
            "agents.order_desk.budget.max_steps",
            "agents.order_desk.retry.max_attempts",
            "agents.order_desk.loop_guard.max_repeats",
            "breakers.provider.break_duration",
        ]
    );
    assert_eq!(
        message_of(&text, "agents.order_desk.budget.max_steps"),
        "must be greater than zero"
    );
    assert!(
        message_of(&text, "tools.send_email.latency.p95")
            .starts_with("must not be less than latency.p50"),
    );
}

#[test]
fn latency_modes_refuse_the_other_modes_fields() {
    let text = BASE.replace(
        "latency = { p50 = \"100ms\", p95 = \"300ms\", p99 = \"1s\" }",
        "latency = { p50 = \"100ms\", p99 = \"1s\", min_samples = 3 }",
    );
    assert_eq!(
        fields(&text),
        vec![
            "tools.send_email.latency.min_samples",
            "tools.send_email.latency.p95",
        ]
    );
    let observe = BASE.replace(
        "latency = { mode = \"observe\", fallback_p99 = \"5s\", min_samples = 10 }",
        "latency = { mode = \"observe\", p99 = \"1s\", min_samples = 0 }",
    );
    assert_eq!(
        fields(&observe),
        vec![
            "tools.restore_delivery_time.latency.p99",
            "tools.restore_delivery_time.latency.min_samples",
            "tools.restore_delivery_time.latency.fallback_p99",
        ]
    );
}

#[test]
fn allowance_factor_and_model_latency_are_checked_and_honoured() {
    let set = BASE
        .replace(
            "latency = { p50 = \"100ms\", p95 = \"300ms\", p99 = \"1s\" }",
            "latency = { p50 = \"100ms\", p95 = \"300ms\", p99 = \"1s\", allowance_factor = 1.5 }",
        )
        .replace(
            "system_prompt = \"You adjust orders.\"",
            "system_prompt = \"You adjust orders.\"\nmodel_latency = \"2s\"",
        );
    let registry = build(&[("rein.toml", &set)]).unwrap();
    let factors: Vec<f64> = registry
        .tools()
        .values()
        .map(|t| t.allowance_factor.get())
        .collect();
    assert!(
        factors.contains(&1.5) && factors.contains(&2.0),
        "{factors:?}"
    );
    let agent = registry.agent("order_desk").unwrap();
    assert_eq!(agent.model_latency, Duration::from_secs(2));

    let bad = BASE
        .replace(
            "latency = { p50 = \"100ms\", p95 = \"300ms\", p99 = \"1s\" }",
            "latency = { p50 = \"100ms\", p95 = \"300ms\", p99 = \"1s\", allowance_factor = 0.5 }",
        )
        .replace(
            "latency = { mode = \"observe\", fallback_p99 = \"5s\", min_samples = 10 }",
            "latency = { mode = \"observe\", fallback_p99 = \"5s\", min_samples = 10, allowance_factor = 11 }",
        )
        .replace(
            "system_prompt = \"You adjust orders.\"",
            "system_prompt = \"You adjust orders.\"\nmodel_latency = \"11m\"",
        );
    assert_eq!(
        fields(&bad),
        vec![
            "tools.restore_delivery_time.latency.allowance_factor",
            "tools.send_email.latency.allowance_factor",
            "agents.order_desk.model_latency",
        ]
    );
    assert!(
        message_of(&bad, "tools.send_email.latency.allowance_factor").contains("[1, 10]"),
        "names the range"
    );
    let zero = BASE.replace(
        "system_prompt = \"You adjust orders.\"",
        "system_prompt = \"You adjust orders.\"\nmodel_latency = \"0s\"",
    );
    assert_eq!(fields(&zero), vec!["agents.order_desk.model_latency"]);
}

#[test]
fn adapter_rules_refuse_bad_urls_reserved_headers_and_status_url_without_key() {
    let text = BASE
        .replace(
            "url = \"http://desk/tools/send_email\" }",
            "url = \"http://desk/tools/send_email\", status_url = \"http://desk/s\" }",
        )
        .replace("url = \"http://desk/tools/get_order\"", "url = \"desk/tools\"")
        .replace(
            "headers = { \"X-Team\" = \"orders\" }",
            "headers = { \"Rein-Run-Id\" = \"forged\", \"x-idem\" = \"k\", \"Bad Header\" = \"v\" }",
        );
    assert_eq!(
        fields(&text),
        vec![
            "tools.get_order.adapter.url",
            "tools.send_email.adapter.status_url",
            "tools.update_delivery_time.adapter.headers.Bad Header",
            "tools.update_delivery_time.adapter.headers.Rein-Run-Id",
            "tools.update_delivery_time.adapter.headers.x-idem",
        ]
    );
    let reserved_key_header = BASE.replace("header = \"X-Idem\"", "header = \"rein-attempt\"");
    assert_eq!(
        fields(&reserved_key_header),
        vec!["tools.update_delivery_time.idempotency.header"]
    );
    // Every header the HTTP adapter sets is reserved, the attempt id too
    // (a configured one would travel beside rein's own).
    let forged_attempt_id = BASE.replace(
        "headers = { \"X-Team\" = \"orders\" }",
        "headers = { \"rein-attempt-id\" = \"forged\" }",
    );
    assert_eq!(
        fields(&forged_attempt_id),
        vec!["tools.update_delivery_time.adapter.headers.rein-attempt-id"]
    );
}

#[test]
fn provider_fields_must_match_their_kind() {
    let text = r#"
[providers.a]
kind = "scripted"
base_url = "http://x/v1"
timeout = "5s"
[providers.b]
kind = "openai"
script = "s.json"
api_key_env = "1BAD"
[providers.c]
script = "s.json"
[providers.d]
kind = "openai"
base_url = "http://x/v1"
[providers.d.prices.m]
input_per_mtok_usd = -1.0
output_per_mtok_usd = 1.0
"#;
    assert_eq!(
        fields(text),
        vec![
            "providers.a.base_url",
            "providers.a.timeout",
            "providers.a.script",
            "providers.b.script",
            "providers.b.base_url",
            "providers.b.api_key_env",
            "providers.c.kind",
            "providers.d.prices.m.input_per_mtok_usd",
        ]
    );
}

#[test]
fn cost_budget_needs_a_price_for_the_agents_model() {
    let text = BASE.replace("max_steps = 10", "max_steps = 10\nmax_cost_usd = 1.0");
    assert_eq!(fields(&text), vec!["agents.order_desk.budget.max_cost_usd"]);
    let priced = text.replace("provider = \"replay\"", "provider = \"mock\"");
    assert!(build(&[("rein.toml", &priced)]).is_ok());
}

#[test]
fn resource_group_limits_are_validated() {
    let text = r#"
[resource_groups.a]
rate_per_sec = 0.0
[resource_groups.b]
burst = 3
[resource_groups.c]
rate_per_sec = 2.0
burst = 0
max_concurrency = 0
"#;
    assert_eq!(
        fields(text),
        vec![
            "resource_groups.a.rate_per_sec",
            "resource_groups.b.burst",
            "resource_groups.c.burst",
            "resource_groups.c.max_concurrency",
        ]
    );
}

/// The governor's own ranges are the registry's: what it would refuse to
/// govern (and leave unlimited) is refused at load, naming the field.
#[test]
fn resource_group_limits_beyond_the_governors_ranges_are_refused() {
    let text = r#"
[resource_groups.slow]
rate_per_sec = 0.0000001
[resource_groups.fast]
rate_per_sec = 2000000000.0
[resource_groups.wide]
max_concurrency = 100001
[resource_groups.edge]
rate_per_sec = 1000000000.0
max_concurrency = 100000
"#;
    assert_eq!(
        fields(text),
        vec![
            "resource_groups.fast.rate_per_sec",
            "resource_groups.slow.rate_per_sec",
            "resource_groups.wide.max_concurrency",
        ]
    );
}

#[test]
fn broken_entries_count_as_defined_so_errors_do_not_cascade() {
    let without = BASE.replace("[tools.send_email]", "[unused.send_email]");
    let (head, _) = without.split_once("[unused.send_email]").unwrap();
    let (_, tail) = without.split_once("[agents.order_desk]").unwrap();
    let text = format!("{head}[agents.order_desk]{tail}");
    // Without the broken marker, the agent's reference is unknown.
    assert_eq!(fields(&text), vec!["agents.order_desk.tools"]);
    let sources = [source("rein.toml", &text).with_broken("tools.send_email")];
    assert!(check(&sources, &|_| Vec::new()).is_ok());
}

#[test]
fn tool_names_must_suit_model_apis() {
    let text = BASE
        .replace("[tools.get_order]", "[tools.\"get order\"]")
        .replace("tools = [\"get_order\",", "tools = [\"get order\",");
    assert_eq!(fields(&text), vec!["tools.get order"]);
}

#[test]
fn model_descriptions_state_side_effects_first() {
    let reg = build(&[("rein.toml", BASE)]).unwrap();
    let d = |name: &str| reg.tools()[name].model_description();
    assert_eq!(d("get_order"), "[read-only] Look up one order.");
    assert_eq!(
        d("update_delivery_time"),
        "[idempotent write: safe to retry, deduplicated by key] Change the promised delivery time of one order."
    );
    assert_eq!(
        d("send_email"),
        "[irreversible: runs at most once and is never retried; cannot be undone; avoid unless necessary] Email the buyer of an order."
    );
}

#[test]
fn openai_tools_snapshot() {
    let reg = build(&[("rein.toml", BASE)]).unwrap();
    let agent = reg.agent("order_desk").unwrap();
    let tools = reg.openai_tools(agent);
    assert_eq!(
        serde_json::Value::Array(tools),
        json!([
            {
                "type": "function",
                "function": {
                    "name": "get_order",
                    "description": "[read-only] Look up one order.",
                    "parameters": {
                        "type": "object",
                        "properties": {"order_id": {"type": "string", "description": "Order id, e.g. A-1001"}},
                        "required": ["order_id"],
                        "additionalProperties": false
                    }
                }
            },
            {
                "type": "function",
                "function": {
                    "name": "update_delivery_time",
                    "description": "[idempotent write: safe to retry, deduplicated by key] Change the promised delivery time of one order.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "order_id": {"type": "string", "description": "Order id"},
                            "delivery_date": {"type": "string", "description": "RFC 3339 date-time"}
                        },
                        "required": ["order_id", "delivery_date"]
                    }
                }
            },
            {
                "type": "function",
                "function": {
                    "name": "send_email",
                    "description": "[irreversible: runs at most once and is never retried; cannot be undone; avoid unless necessary] Email the buyer of an order.",
                    "parameters": {
                        "type": "object",
                        "properties": {
                            "order_id": {"type": "string", "description": "Order id"},
                            "body": {"type": "string", "description": "Plain text"}
                        },
                        "required": ["order_id", "body"]
                    }
                }
            }
        ])
    );
}

#[test]
fn anthropic_tools_snapshot() {
    let reg = build(&[("rein.toml", BASE)]).unwrap();
    let agent = reg.agent("order_desk").unwrap();
    let tools = reg.anthropic_tools(agent);
    assert_eq!(tools.len(), 3);
    assert_eq!(
        tools[0],
        json!({
            "name": "get_order",
            "description": "[read-only] Look up one order.",
            "input_schema": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "Order id, e.g. A-1001"}},
                "required": ["order_id"],
                "additionalProperties": false
            }
        })
    );
    assert_eq!(
        tools[2],
        json!({
            "name": "send_email",
            "description": "[irreversible: runs at most once and is never retried; cannot be undone; avoid unless necessary] Email the buyer of an order.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "Order id"},
                    "body": {"type": "string", "description": "Plain text"}
                },
                "required": ["order_id", "body"]
            }
        })
    );
    // The restore tool is a compensation only: the model is not offered it.
    assert!(tools.iter().all(|t| t["name"] != "restore_delivery_time"));
}

/// A command tool appended to [`BASE`]: `adapter` is the adapter table's
/// body.
fn with_command_tool(adapter: &str) -> String {
    format!(
        r#"{BASE}
[tools.run_report]
description = "Render the order report."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
latency = {{ p50 = "1s", p95 = "2s", p99 = "5s" }}
schema = {{ type = "object", properties = {{ order_id = {{ type = "string", description = "Order id" }} }} }}
[tools.run_report.adapter]
{adapter}
"#
    )
}

#[test]
fn command_adapter_resolves_paths_against_the_config_file() {
    let text = with_command_tool(
        r#"kind = "command"
program = "bin/report.sh"
args = ["--format", "json"]
working_dir = "work"
env = { REPORT_MODE = "fast" }
max_output_bytes = 4096"#,
    );
    let reg = build(&[("conf/rein.toml", &text)]).unwrap();
    match &reg.tools()["run_report"].adapter {
        AdapterSpec::Command {
            program,
            args,
            working_dir,
            env,
            max_output_bytes,
            ..
        } => {
            assert_eq!(program, Path::new("conf/bin/report.sh"));
            assert_eq!(args, &["--format", "json"]);
            assert_eq!(working_dir.as_deref(), Some(Path::new("conf/work")));
            assert_eq!(env["REPORT_MODE"], "fast");
            assert_eq!(*max_output_bytes, 4096);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn command_adapter_keeps_bare_names_for_path_lookup_and_has_defaults() {
    let text = with_command_tool(
        r#"kind = "command"
program = "jq""#,
    );
    let reg = build(&[("conf/rein.toml", &text)]).unwrap();
    match &reg.tools()["run_report"].adapter {
        AdapterSpec::Command {
            program,
            args,
            working_dir,
            env,
            max_output_bytes,
            ..
        } => {
            assert_eq!(program, Path::new("jq"));
            assert!(args.is_empty());
            assert_eq!(*working_dir, None);
            assert!(env.is_empty());
            assert_eq!(*max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn command_adapter_rules_refuse_empty_program_status_url_and_reserved_env() {
    let text = with_command_tool(
        r#"kind = "command"
program = "  "
status_url = "http://desk/s"
url = "http://desk/x"
headers = { "X-A" = "b" }
working_dir = ""
env = { REIN_RUN_ID = "forged", "1BAD" = "x", rein_deadline_ms = "9" }
max_output_bytes = 0"#,
    );
    assert_eq!(
        fields(&text),
        vec![
            "tools.run_report.adapter.headers",
            "tools.run_report.adapter.status_url",
            "tools.run_report.adapter.url",
            "tools.run_report.adapter.program",
            "tools.run_report.adapter.working_dir",
            "tools.run_report.adapter.env.1BAD",
            "tools.run_report.adapter.env.REIN_RUN_ID",
            "tools.run_report.adapter.env.rein_deadline_ms",
            "tools.run_report.adapter.max_output_bytes",
        ]
    );
    let missing = with_command_tool(r#"kind = "command""#);
    assert_eq!(fields(&missing), vec!["tools.run_report.adapter.program"]);
}

#[test]
fn a_bad_adapter_table_does_not_hide_the_tools_other_problems() {
    // A field of another kind, a misspelt one and a wrong type in the
    // adapter, and a problem elsewhere in the same tool: all in one pass.
    let text = BASE.replace(
        "adapter = { kind = \"http\", url = \"http://desk/tools/get_order\" }",
        "adapter = { kind = \"http\", url = \"http://desk/tools/get_order\", program = \"x\", methd = \"GET\", max_result_bytes = \"big\" }",
    )
    .replacen("description = \"Look up one order.\"", "description = \" \"", 1);
    let found = fields(&text);
    for field in [
        "tools.get_order.description",
        "tools.get_order.adapter.max_result_bytes",
        "tools.get_order.adapter.methd",
        "tools.get_order.adapter.program",
    ] {
        assert!(found.iter().any(|f| f == field), "{field} in {found:?}");
    }
    assert!(
        message_of(&text, "tools.get_order.adapter.methd")
            .starts_with("is not a field of an http adapter; it takes url, method,"),
    );
}

#[test]
fn http_adapter_refuses_command_settings() {
    let text = BASE.replace(
        "adapter = { kind = \"http\", url = \"http://desk/tools/get_order\" }",
        "adapter = { kind = \"http\", url = \"http://desk/tools/get_order\", program = \"x\", args = [\"a\"], max_output_bytes = 9 }",
    );
    assert_eq!(
        fields(&text),
        vec![
            "tools.get_order.adapter.args",
            "tools.get_order.adapter.max_output_bytes",
            "tools.get_order.adapter.program",
        ]
    );
}

// ----- agent tools -------------------------------------------------------------

/// [`BASE`] with an agent `researcher` and an agent tool `research` whose
/// adapter table body is `adapter`; `latency` is the tool's latency line
/// (empty for none).
fn with_agent_tool(adapter: &str, latency: &str) -> String {
    format!(
        r#"{BASE}
[agents.researcher]
provider = "replay"
model = "gpt-4o-mini"
system_prompt = "You research orders."
tools = ["get_order"]

[tools.research]
description = "Ask the research agent a question; answers with its findings."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
{latency}
schema = {{ type = "object", properties = {{ task = {{ type = "string", description = "What the child agent should do." }} }}, required = ["task"], additionalProperties = false }}
[tools.research.adapter]
{adapter}
"#
    )
}

fn agent_adapter(reg: &Registry, tool: &str) -> (String, crate::config::Ratio, ChildCaps) {
    match &reg.tools()[tool].adapter {
        AdapterSpec::Agent {
            agent,
            budget_ratio,
            caps,
            ..
        } => (agent.clone(), *budget_ratio, *caps),
        other => panic!("{other:?}"),
    }
}

fn ms(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

use crate::deadline::ChildCaps;

#[test]
fn agent_adapter_reads_agent_ratio_and_caps() {
    let text = with_agent_tool(
        r#"kind = "agent"
agent = "researcher"
budget_ratio = 0.25
max_tokens = 20000
max_steps = 5
wall_clock = "30s"
max_cost_usd = 0.5"#,
        "",
    );
    let reg = build(&[("conf/rein.toml", &text)]).unwrap();
    let (agent, ratio, caps) = agent_adapter(&reg, "research");
    assert_eq!(agent, "researcher");
    assert_eq!(ratio.get(), 0.25);
    assert_eq!(
        caps,
        ChildCaps {
            wall_clock: Some(Duration::from_secs(30)),
            steps: Some(5),
            tokens: Some(20_000),
            cost: Some(Cost::from_micros(500_000)),
        }
    );
    // No latency declared: the default, its p99 lowered to the wall clock cap.
    let profile = reg.tools()["research"].latency.profile(None);
    assert_eq!(
        (profile.p50(), profile.p95(), profile.p99()),
        (ms(5_000), ms(20_000), ms(30_000))
    );
}

#[test]
fn agent_adapter_defaults_to_half_the_budget_without_caps() {
    let text = with_agent_tool("kind = \"agent\"\nagent = \"researcher\"", "");
    let reg = build(&[("rein.toml", &text)]).unwrap();
    let (_, ratio, caps) = agent_adapter(&reg, "research");
    assert_eq!(ratio.get(), DEFAULT_AGENT_BUDGET_RATIO);
    assert_eq!(caps, ChildCaps::default());
    let (p50, p95, p99) = DEFAULT_AGENT_TOOL_LATENCY;
    assert_eq!(
        reg.tools()["research"].latency,
        LatencySpec::Declared(crate::tool::LatencyProfile::new(p50, p95, p99, 0).unwrap())
    );
}

#[test]
fn agent_tool_latency_caps_every_quantile_at_a_short_wall_clock_and_may_be_declared() {
    let text = with_agent_tool(
        "kind = \"agent\"\nagent = \"researcher\"\nwall_clock = \"2s\"",
        "",
    );
    let profile = build(&[("rein.toml", &text)]).unwrap().tools()["research"]
        .latency
        .profile(None);
    assert_eq!(
        (profile.p50(), profile.p95(), profile.p99()),
        (ms(2_000), ms(2_000), ms(2_000))
    );
    let text = with_agent_tool(
        "kind = \"agent\"\nagent = \"researcher\"",
        "latency = { p50 = \"1s\", p95 = \"2s\", p99 = \"3s\" }",
    );
    let profile = build(&[("rein.toml", &text)]).unwrap().tools()["research"]
        .latency
        .profile(None);
    assert_eq!(profile.p99(), ms(3_000));
}

#[test]
fn a_tool_without_a_latency_profile_is_observed_with_a_slow_fallback() {
    let text = with_command_tool("kind = \"command\"\nprogram = \"jq\"").replace(
        "latency = { p50 = \"1s\", p95 = \"2s\", p99 = \"5s\" }\n",
        "",
    );
    let reg = build(&[("rein.toml", &text)]).unwrap();
    let tool = reg.tools().get("run_report").unwrap();
    match tool.latency {
        LatencySpec::Observe {
            fallback,
            min_samples,
        } => {
            assert_eq!(fallback.p99(), crate::registry::DEFAULT_TOOL_FALLBACK_P99);
            assert_eq!(min_samples, crate::registry::DEFAULT_OBSERVE_MIN_SAMPLES);
        }
        other => panic!("observed, not {other:?}"),
    }
    assert!(tool.defaulted.contains(&"latency"), "{:?}", tool.defaulted);
}

/// Issue 37, item 3: name, description, schema, class and adapter are
/// enough; rein fills in the rest and says so.
#[test]
fn a_minimal_tool_gets_documented_defaults() {
    let text = r#"
[providers.replay]
kind = "scripted"
script = "s.json"
[models.m]
provider = "replay"
model = "x"
[tools.save]
description = "Save a thing."
class = "idempotent_write"
schema = { type = "object", properties = { id = { type = "string", description = "The id." } }, required = ["id"] }
adapter = { kind = "http", url = "http://127.0.0.1:9/save" }
[tools.look]
description = "Look a thing up."
class = "read"
schema = { type = "object", properties = { id = { type = "string", description = "The id." } }, required = ["id"] }
adapter = { kind = "http", url = "http://127.0.0.1:9/look" }
side_effect_tier = "low"
owner = "data-team"
[agents.a]
model = "m"
system_prompt = "Do it."
tools = ["save", "look"]
"#;
    let reg = build(&[("rein.toml", text)]).unwrap_or_else(|p| panic!("{p:?}"));
    let save = reg.tools().get("save").unwrap();
    assert_eq!(save.resource_group, "save", "its own group");
    assert_eq!(
        save.side_effect_tier,
        SideEffectTier::Medium,
        "from its class"
    );
    assert_eq!(save.owner, crate::registry::DEFAULT_TOOL_OWNER);
    assert_eq!(
        save.defaulted,
        ["resource_group", "side_effect_tier", "owner", "latency"]
    );
    // What is set is kept, and not listed as a default.
    let look = reg.tools().get("look").unwrap();
    assert_eq!(look.side_effect_tier, SideEffectTier::Low);
    assert_eq!(look.owner, "data-team");
    assert_eq!(look.defaulted, ["resource_group", "latency"]);
}

#[test]
fn agent_tool_may_name_the_agent_that_offers_it() {
    let text = with_agent_tool("kind = \"agent\"\nagent = \"researcher\"", "").replace(
        "tools = [\"get_order\"]",
        "tools = [\"get_order\", \"research\"]",
    );
    let reg = build(&[("rein.toml", &text)]).unwrap();
    let researcher = reg.agent("researcher").unwrap();
    assert_eq!(agent_adapter(&reg, "research").0, "researcher");
    // It is a tool like any other for the model.
    let openai = reg.openai_tools(researcher);
    assert_eq!(
        openai[1],
        json!({
            "type": "function",
            "function": {
                "name": "research",
                "description": "[read-only] Ask the research agent a question; answers with its findings.",
                "parameters": {
                    "type": "object",
                    "properties": {"task": {"type": "string", "description": "What the child agent should do."}},
                    "required": ["task"],
                    "additionalProperties": false
                }
            }
        })
    );
    let anthropic = reg.anthropic_tools(researcher);
    assert_eq!(anthropic[1]["name"], "research");
    assert_eq!(
        anthropic[1]["input_schema"],
        openai[1]["function"]["parameters"]
    );
}

#[test]
fn agent_adapter_needs_a_known_agent() {
    let missing = with_agent_tool("kind = \"agent\"", "");
    assert_eq!(
        problems(&[("conf/tools.toml", &missing)]),
        vec![(
            "conf/tools.toml".to_owned(),
            "tools.research.adapter.agent".to_owned()
        )]
    );
    let unknown = with_agent_tool("kind = \"agent\"\nagent = \"scholar\"", "");
    assert_eq!(
        problems(&[("conf/tools.toml", &unknown)]),
        vec![(
            "conf/tools.toml".to_owned(),
            "tools.research.adapter.agent".to_owned()
        )]
    );
    assert_eq!(
        message_of(&unknown, "tools.research.adapter.agent"),
        "names `scholar`, which is not an agent; define [agents.scholar]"
    );
    // An agent defined in another file counts.
    let split_tool = r#"
[tools.research]
description = "Ask."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
schema = { type = "object" }
adapter = { kind = "agent", agent = "order_desk" }
"#;
    let reg = build(&[("a.toml", BASE), ("b.toml", split_tool)]).unwrap();
    assert_eq!(agent_adapter(&reg, "research").0, "order_desk");
}

#[test]
fn agent_adapter_budget_ratio_must_be_in_zero_to_one() {
    for ratio in ["0", "0.0", "1.5", "-0.1"] {
        let text = with_agent_tool(
            &format!("kind = \"agent\"\nagent = \"researcher\"\nbudget_ratio = {ratio}"),
            "",
        );
        assert_eq!(
            fields(&text),
            vec!["tools.research.adapter.budget_ratio"],
            "{ratio}"
        );
        assert!(
            message_of(&text, "tools.research.adapter.budget_ratio")
                .starts_with("must be a number in (0, 1]"),
            "{ratio}"
        );
    }
    for ratio in ["nan", "inf", "-inf"] {
        let text = with_agent_tool(
            &format!("kind = \"agent\"\nagent = \"researcher\"\nbudget_ratio = {ratio}"),
            "",
        );
        assert_eq!(
            message_of(&text, "tools.research.adapter.budget_ratio"),
            "must be a finite number, not nan or inf",
            "{ratio}"
        );
    }
    let whole = with_agent_tool(
        "kind = \"agent\"\nagent = \"researcher\"\nbudget_ratio = 1.0",
        "",
    );
    let reg = build(&[("rein.toml", &whole)]).unwrap();
    assert_eq!(agent_adapter(&reg, "research").1.get(), 1.0);
}

#[test]
fn agent_adapter_refuses_zero_caps() {
    let text = with_agent_tool(
        r#"kind = "agent"
agent = "researcher"
max_tokens = 0
max_steps = 0
wall_clock = "0s"
max_cost_usd = 0.0"#,
        "",
    );
    assert_eq!(
        fields(&text),
        vec![
            "tools.research.adapter.max_tokens",
            "tools.research.adapter.max_steps",
            "tools.research.adapter.wall_clock",
            "tools.research.adapter.max_cost_usd",
        ]
    );
    let negative = with_agent_tool(
        "kind = \"agent\"\nagent = \"researcher\"\nmax_cost_usd = -1.0",
        "",
    );
    assert_eq!(
        fields(&negative),
        vec!["tools.research.adapter.max_cost_usd"]
    );
}

#[test]
fn agent_adapter_refuses_other_kinds_settings_and_they_refuse_its() {
    let text = with_agent_tool(
        r#"kind = "agent"
agent = "researcher"
url = "http://desk/x"
status_url = "http://desk/s"
program = "jq"
max_output_bytes = 9"#,
        "",
    );
    assert_eq!(
        fields(&text),
        vec![
            "tools.research.adapter.max_output_bytes",
            "tools.research.adapter.program",
            "tools.research.adapter.status_url",
            "tools.research.adapter.url",
        ]
    );
    let http = BASE.replace(
        "adapter = { kind = \"http\", url = \"http://desk/tools/get_order\" }",
        "adapter = { kind = \"http\", url = \"http://desk/tools/get_order\", agent = \"order_desk\", budget_ratio = 0.5, wall_clock = \"1s\" }",
    );
    assert_eq!(
        fields(&http),
        vec![
            "tools.get_order.adapter.agent",
            "tools.get_order.adapter.budget_ratio",
            "tools.get_order.adapter.wall_clock",
        ]
    );
    let command =
        with_command_tool("kind = \"command\"\nprogram = \"jq\"\nmax_steps = 3\nmax_tokens = 9");
    assert_eq!(
        fields(&command),
        vec![
            "tools.run_report.adapter.max_steps",
            "tools.run_report.adapter.max_tokens",
        ]
    );
}

// ----- [server] --------------------------------------------------------------

/// The hex SHA-256 of `key`, as an operator writes it in `sha256`.
fn sha256_hex(key: &str) -> String {
    use sha2::{Digest as _, Sha256};
    Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

const FULL_SERVER: &str = r#"
[server]
listen = "0.0.0.0:9000"
body_limit = "512KiB"
[server.idempotency]
enabled = false
max_key_length = 1024
retention = "2h"
[server.queue]
lease = "3s"
max_attempts = 5
workers = 64
[server.reconciliation]
heartbeat_interval = "10s"
orphan_threshold = "10s"
scan_interval = "30s"
max_runs_per_scan = 7
[server.agent_graph]
max_depth = 0
max_total_tokens = 0
max_total_runs = 4
[[server.api_keys]]
tenant = "acme"
sha256 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
name = "ci"
[[server.api_keys]]
tenant = "globex"
sha256 = "SHA_OF_OTHER"
"#;

fn full_server() -> String {
    FULL_SERVER.replace("SHA_OF_OTHER", &sha256_hex("other-key").to_uppercase())
}

/// The fields of the problems in BASE plus a `[server]` table.
fn server_fields(server: &str) -> Vec<String> {
    fields(&with_extra(server))
}

#[test]
fn server_defaults_apply_when_the_section_is_absent() {
    let reg = build(&[("rein.toml", BASE)]).unwrap();
    let server = reg.server();
    assert_eq!(*server, ServerSpec::default());
    assert_eq!(server.listen, DEFAULT_LISTEN);
    assert_eq!(server.body_limit, DEFAULT_BODY_LIMIT);
    assert!(server.idempotency.enabled);
    assert_eq!(server.idempotency.max_key_length, DEFAULT_MAX_KEY_LENGTH);
    assert_eq!(server.idempotency.retention, DEFAULT_IDEMPOTENCY_RETENTION);
    assert_eq!(server.queue.lease, DEFAULT_QUEUE_LEASE);
    assert_eq!(server.queue.max_attempts.get(), DEFAULT_QUEUE_MAX_ATTEMPTS);
    assert_eq!(server.queue.workers.get(), DEFAULT_QUEUE_WORKERS);
    assert_eq!(
        server.reconciliation.heartbeat_interval,
        DEFAULT_HEARTBEAT_INTERVAL
    );
    assert_eq!(
        server.reconciliation.orphan_threshold,
        DEFAULT_ORPHAN_THRESHOLD
    );
    assert_eq!(server.reconciliation.scan_interval, DEFAULT_SCAN_INTERVAL);
    assert_eq!(
        server.reconciliation.max_runs_per_scan.get(),
        DEFAULT_MAX_RUNS_PER_SCAN
    );
    assert_eq!(server.agent_graph.max_depth, DEFAULT_AGENT_GRAPH_MAX_DEPTH);
    assert_eq!(
        server.agent_graph.max_total_tokens.map(|n| n.get()),
        Some(DEFAULT_AGENT_GRAPH_MAX_TOTAL_TOKENS)
    );
    assert_eq!(
        server.agent_graph.max_total_runs.map(|n| n.get()),
        Some(DEFAULT_AGENT_GRAPH_MAX_TOTAL_RUNS)
    );
    assert!(server.api_keys.is_empty());
    assert_eq!(server.source, None);
    assert_eq!(server.tenant_for("anything"), None);
}

#[test]
fn server_empty_table_takes_every_default_and_notes_its_file() {
    let reg = build(&[("conf/a.toml", BASE), ("conf/serve.toml", "[server]\n")]).unwrap();
    let expected = ServerSpec {
        source: Some(PathBuf::from("conf/serve.toml")),
        ..ServerSpec::default()
    };
    assert_eq!(*reg.server(), expected);
}

#[test]
fn server_full_section_is_read_field_by_field() {
    let reg = build(&[("rein.toml", &with_extra(&full_server()))]).unwrap();
    let server = reg.server();
    assert_eq!(server.listen, "0.0.0.0:9000".parse().unwrap());
    assert_eq!(server.body_limit, 512 * 1024);
    assert!(!server.idempotency.enabled);
    assert_eq!(server.idempotency.max_key_length, 1024);
    assert_eq!(server.idempotency.retention, Duration::from_secs(7200));
    assert_eq!(server.queue.lease, Duration::from_secs(3));
    assert_eq!(server.queue.max_attempts.get(), 5);
    assert_eq!(server.queue.workers.get(), 64);
    assert_eq!(
        server.reconciliation.heartbeat_interval,
        Duration::from_secs(10)
    );
    assert_eq!(
        server.reconciliation.orphan_threshold,
        Duration::from_secs(10)
    );
    assert_eq!(server.reconciliation.scan_interval, Duration::from_secs(30));
    assert_eq!(server.reconciliation.max_runs_per_scan.get(), 7);
    assert_eq!(server.agent_graph.max_depth, 0);
    assert_eq!(server.agent_graph.max_total_tokens, None);
    assert_eq!(server.agent_graph.max_total_runs.map(|n| n.get()), Some(4));
    assert_eq!(server.api_keys.len(), 2);
    assert_eq!(server.api_keys[0].tenant.as_str(), "acme");
    assert_eq!(server.api_keys[0].name.as_deref(), Some("ci"));
    assert_eq!(server.api_keys[0].sha256[..2], [0x9f, 0x86]);
    assert_eq!(server.api_keys[1].name, None);
    assert_eq!(server.source, Some(PathBuf::from("rein.toml")));

    // An integer body_limit is bytes; IPv6 listen addresses work.
    let reg = build(&[(
        "rein.toml",
        "[server]\nlisten = \"[::1]:0\"\nbody_limit = 1024\n",
    )])
    .unwrap();
    assert_eq!(reg.server().body_limit, 1024);
    assert_eq!(reg.server().listen, "[::1]:0".parse().unwrap());
}

#[test]
fn server_tenant_for_matches_the_right_key_and_rejects_others() {
    let reg = build(&[("rein.toml", &with_extra(&full_server()))]).unwrap();
    let server = reg.server();
    let acme = server.tenant_for("test").expect("sha256(test) is listed");
    assert_eq!(acme.tenant.as_str(), "acme");
    assert_eq!(acme.label(), "ci");
    let globex = server.tenant_for("other-key").expect("uppercase hex works");
    assert_eq!(globex.tenant.as_str(), "globex");
    assert!(globex.label().starts_with("sha256:"));
    for wrong in [
        "",
        "Test",
        "test ",
        "other-key\n",
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    ] {
        assert_eq!(server.tenant_for(wrong), None, "{wrong:?}");
    }
}

#[test]
fn server_listen_and_body_limit_are_validated() {
    for (listen, ok) in [
        ("127.0.0.1:8787", true),
        ("localhost:8787", false),
        ("127.0.0.1", false),
        ("127.0.0.1:99999", false),
    ] {
        let found = problems_or_none(&format!("[server]\nlisten = \"{listen}\"\n"));
        let expected: Vec<String> = if ok {
            vec![]
        } else {
            vec!["server.listen".into()]
        };
        assert_eq!(found, expected, "{listen}");
    }
    let msg = message_of("[server]\nlisten = \"localhost:1\"\n", "server.listen");
    assert!(
        msg.contains("IP address and port") && msg.contains("`localhost:1`"),
        "{msg}"
    );

    for limit in ["1023", "\"1023B\"", "\"65MiB\"", "-1", "0", "\"1GiB\""] {
        let found = server_fields(&format!("[server]\nbody_limit = {limit}\n"));
        assert_eq!(found, vec!["server.body_limit"], "{limit}");
    }
    let msg = message_of("[server]\nbody_limit = \"65MiB\"\n", "server.body_limit");
    assert!(msg.contains("68157440 bytes"), "{msg}");
    for unparsable in ["\"1MB\"", "\"1.5MiB\"", "\"lots\""] {
        let text = format!("[server]\nbody_limit = {unparsable}\n");
        let msg = message_of(&text, "server.body_limit");
        assert!(msg.contains("like \"1MiB\""), "{msg}");
    }
    for limit in ["1024", "\"1KiB\"", "\"64MiB\"", "67108864", "\"1 mib\""] {
        let found = problems_or_none(&format!("[server]\nbody_limit = {limit}\n"));
        assert!(found.is_empty(), "{limit}: {found:?}");
    }
}

/// The problems' fields, or none when the text builds.
fn problems_or_none(text: &str) -> Vec<String> {
    match build(&[("rein.toml", text)]) {
        Ok(_) => Vec::new(),
        Err(problems) => problems.into_iter().map(|p| p.field).collect(),
    }
}

#[test]
fn server_counts_and_durations_out_of_range_name_their_field() {
    let text = r#"
[server.idempotency]
max_key_length = 0
retention = "0s"
[server.queue]
lease = "2s"
max_attempts = 0
workers = 65
[server.reconciliation]
heartbeat_interval = "0s"
orphan_threshold = "0s"
scan_interval = "0s"
max_runs_per_scan = 0
"#;
    assert_eq!(
        fields(text),
        vec![
            "server.idempotency.max_key_length",
            "server.idempotency.retention",
            "server.queue.lease",
            "server.queue.max_attempts",
            "server.queue.workers",
            "server.reconciliation.heartbeat_interval",
            "server.reconciliation.orphan_threshold",
            "server.reconciliation.scan_interval",
            "server.reconciliation.max_runs_per_scan",
        ]
    );
    assert_eq!(
        fields("[server.idempotency]\nmax_key_length = 1025\n[server.queue]\nworkers = 0\n"),
        vec!["server.idempotency.max_key_length", "server.queue.workers"]
    );
    let msg = message_of("[server.queue]\nlease = \"2s\"\n", "server.queue.lease");
    assert_eq!(
        msg,
        "must be at least 3s: it is renewed at a third of its length, but it is 2s"
    );
}

#[test]
fn server_orphan_threshold_must_not_be_below_heartbeat_interval() {
    let text = "[server.reconciliation]\nheartbeat_interval = \"1m\"\norphan_threshold = \"59s\"\n";
    assert_eq!(fields(text), vec!["server.reconciliation.orphan_threshold"]);
    let msg = message_of(text, "server.reconciliation.orphan_threshold");
    assert!(
        msg.starts_with("must not be less than heartbeat_interval (1m)"),
        "{msg}"
    );
    assert!(msg.ends_with("but it is 59s"), "{msg}");
    // Against the default threshold (5m) the message says so.
    let text = "[server.reconciliation]\nheartbeat_interval = \"10m\"\n";
    let msg = message_of(text, "server.reconciliation.orphan_threshold");
    assert!(msg.ends_with("but it is 5m (the default)"), "{msg}");
    // Equal is fine; a zero interval is reported once, not twice.
    assert!(problems_or_none("[server.reconciliation]\nheartbeat_interval = \"5m\"\n").is_empty());
    assert_eq!(
        fields("[server.reconciliation]\nheartbeat_interval = \"0s\"\norphan_threshold = \"1s\"\n"),
        vec!["server.reconciliation.heartbeat_interval"]
    );
}

#[test]
fn server_api_keys_are_validated_naming_their_index() {
    let good = sha256_hex("k1");
    let nonhex = format!("{}g", &good[..63]);
    let text = format!(
        r#"
[[server.api_keys]]
tenant = "acme"
sha256 = "{good}"
[[server.api_keys]]
tenant = ""
sha256 = "{short}"
[[server.api_keys]]
tenant = "globex"
sha256 = "{nonhex}"
name = " "
[[server.api_keys]]
tenant = "initech"
sha256 = "{upper}"
[[server.api_keys]]
sha256 = "{empty}"
name = "bad\u0007"
[[server.api_keys]]
"#,
        short = &good[..63],
        upper = good.to_uppercase(),
        empty = sha256_hex(""),
    );
    assert_eq!(
        fields(&text),
        vec![
            "server.api_keys[1].tenant",
            "server.api_keys[1].sha256",
            "server.api_keys[2].sha256",
            "server.api_keys[2].name",
            "server.api_keys[3].sha256",
            "server.api_keys[4].tenant",
            "server.api_keys[4].sha256",
            "server.api_keys[4].name",
            "server.api_keys[5].tenant",
            "server.api_keys[5].sha256",
        ]
    );
    assert_eq!(
        message_of(&text, "server.api_keys[1].tenant"),
        "tenant id must not be empty"
    );
    assert_eq!(
        message_of(&text, "server.api_keys[3].sha256"),
        "is also the digest of server.api_keys[0]; each key may be listed once, for one tenant"
    );
    let problems = build(&[("conf/serve.toml", &text)]).unwrap_err();
    let shown = problems
        .iter()
        .find(|p| p.field == "server.api_keys[1].sha256")
        .unwrap()
        .to_string();
    assert_eq!(
        shown,
        "conf/serve.toml: server.api_keys[1].sha256: must be 64 hex digits (the SHA-256 of the key, never the key), but it is 63 characters"
    );
}

#[test]
fn server_in_two_files_is_reported_at_the_later_file() {
    let found = problems_of_two("[server]\n", "[server]\nlisten = \"127.0.0.1:1\"\n");
    assert_eq!(found, vec![("b.toml".into(), "server".into())]);
    let problems = build(&[("a.toml", "[server]\n"), ("b.toml", "[server]\n")]).unwrap_err();
    assert_eq!(
        problems[0].to_string(),
        "b.toml: server: is also defined in a.toml; only one file may hold [server]"
    );
}

// ----- [server] exposure: allowed_hosts, cors, metrics (issue 12) ---------

#[test]
fn exposure_settings_are_read_normalized() {
    let reg = build(&[(
        "rein.toml",
        &with_extra(
            r#"
[server]
allowed_hosts = ["Rein.Example.com", "*.internal.example:8443", "10.0.0.5"]
metrics = "open"
[server.cors]
allowed_origins = ["http://localhost:3000", "HTTPS://App.Example.com"]
allowed_methods = ["get"]
allowed_headers = ["Authorization", "content-type"]
"#,
        ),
    )])
    .unwrap();
    let server = reg.server();
    let hosts: Vec<_> = server
        .allowed_hosts
        .iter()
        .map(|h| (h.pattern.clone(), h.port))
        .collect();
    assert_eq!(
        hosts,
        vec![
            (
                HostPattern::Exact(HostName::parse("rein.example.com").unwrap()),
                None
            ),
            (
                HostPattern::Below(HostName::parse("internal.example").unwrap()),
                Some(8443)
            ),
            (
                HostPattern::Exact(HostName::parse("10.0.0.5").unwrap()),
                None
            ),
        ]
    );
    assert_eq!(server.metrics, MetricsAccess::Open);
    let cors = server.cors.as_ref().unwrap();
    let origins: Vec<String> = cors
        .allowed_origins
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        origins,
        ["http://localhost:3000", "https://app.example.com"]
    );
    assert_eq!(cors.allowed_methods, ["GET"]);
    assert_eq!(cors.allowed_headers, ["authorization", "content-type"]);
}

#[test]
fn exposure_defaults_are_loopback_only_no_cors_and_protected_metrics() {
    let reg = build(&[(
        "rein.toml",
        &with_extra("[server]\n[server.cors]\nallowed_origins = [\"http://localhost:3000\"]\n"),
    )])
    .unwrap();
    let server = reg.server();
    assert!(server.allowed_hosts.is_empty());
    assert_eq!(server.metrics, MetricsAccess::Protected);
    let cors = server.cors.as_ref().unwrap();
    assert_eq!(cors.allowed_methods, DEFAULT_CORS_ALLOWED_METHODS);
    assert_eq!(cors.allowed_headers, DEFAULT_CORS_ALLOWED_HEADERS);
    assert_eq!(ServerSpec::default().cors, None);
}

#[test]
fn bad_exposure_settings_are_refused_naming_the_field() {
    let text = with_extra(
        r#"
[server]
allowed_hosts = ["ok.example", "http://rein.example.com", "rein.example.com/x", "re*in.example"]
[server.cors]
allowed_origins = ["*", "null", "http://localhost:3000/", "http://fine.example"]
allowed_methods = ["POST", "DELETE"]
allowed_headers = ["*"]
"#,
    );
    assert_eq!(
        fields(&text),
        [
            "server.allowed_hosts[1]",
            "server.allowed_hosts[2]",
            "server.allowed_hosts[3]",
            "server.cors.allowed_origins[0]",
            "server.cors.allowed_origins[1]",
            "server.cors.allowed_origins[2]",
            "server.cors.allowed_methods[1]",
            "server.cors.allowed_headers[0]",
        ]
    );
    assert!(message_of(&text, "server.allowed_hosts[1]").contains("without a scheme"));
    assert!(message_of(&text, "server.cors.allowed_origins[0]").contains("every web page"));
    assert!(message_of(&text, "server.cors.allowed_methods[1]").contains("`DELETE`"));
    let empty = with_extra("[server.cors]\nallowed_origins = []\n");
    assert_eq!(fields(&empty), ["server.cors.allowed_origins"]);
    let err = toml::from_str::<ConfigFile>("[server]\nmetrics = \"public\"\n").unwrap_err();
    assert!(err.to_string().contains("protected"), "{err}");
}

/// `[server]` with one key each for `acme` and `ops`, and `lines`.
fn with_keys(lines: &str) -> String {
    with_extra(&format!(
        "[server]\n{lines}\n[[server.api_keys]]\ntenant = \"acme\"\nsha256 = \"{}\"\n[[server.api_keys]]\ntenant = \"ops\"\nsha256 = \"{}\"\n",
        "a".repeat(64),
        "b".repeat(64)
    ))
}

#[test]
fn metrics_tenants_are_read_and_default_to_none() {
    let reg = build(&[("rein.toml", &with_keys("metrics_tenants = [\"ops\"]"))]).unwrap();
    let tenants: Vec<&str> = reg
        .server()
        .metrics_tenants
        .iter()
        .map(TenantId::as_str)
        .collect();
    assert_eq!(tenants, ["ops"]);
    let reg = build(&[("rein.toml", &with_keys(""))]).unwrap();
    assert!(reg.server().metrics_tenants.is_empty());
    assert_eq!(reg.server().metrics, MetricsAccess::Protected);
}

#[test]
fn metrics_tenants_without_a_key_or_with_open_metrics_are_refused() {
    let text = with_keys("metrics_tenants = [\"ops\", \"nobody\", \"\"]");
    assert_eq!(
        fields(&text),
        ["server.metrics_tenants[1]", "server.metrics_tenants[2]"]
    );
    let message = message_of(&text, "server.metrics_tenants[1]");
    assert!(
        message.contains("`nobody` has none") && message.contains("acme, ops"),
        "{message}"
    );
    let open = with_keys("metrics = \"open\"\nmetrics_tenants = [\"ops\"]");
    assert_eq!(fields(&open), ["server.metrics_tenants"]);
    assert!(message_of(&open, "server.metrics_tenants").contains("no effect"));
    // Open mode: no key, so no tenant a scraper could be.
    let no_keys = with_extra("[server]\nmetrics_tenants = [\"ops\"]\n");
    assert!(
        message_of(&no_keys, "server.metrics_tenants[0]").contains("keys exist for: no tenant")
    );
}

#[test]
fn metrics_labels_are_read_and_default_to_the_first_fifty_seen() {
    let reg = build(&[(
        "rein.toml",
        &with_keys(
            "[server.metrics_labels]\ntenants = [\"acme\"]\nagents = [\"order_desk\"]\nmax_values = 5\n",
        ),
    )])
    .unwrap();
    let labels = &reg.server().metrics_labels;
    assert_eq!(labels.tenants, Some(vec![TenantId::new("acme").unwrap()]));
    assert_eq!(labels.agents, Some(vec!["order_desk".to_owned()]));
    assert_eq!(labels.max_values, 5);
    let reg = build(&[("rein.toml", BASE)]).unwrap();
    assert_eq!(reg.server().metrics_labels, MetricsLabels::default());
    assert_eq!(
        reg.server().metrics_labels.max_values,
        DEFAULT_METRICS_LABEL_VALUES
    );
}

#[test]
fn metrics_labels_no_request_could_carry_are_refused_with_their_field() {
    let text = with_keys(
        "[server.metrics_labels]\ntenants = [\"acme\", \"nobody\", \"acme\"]\nagents = [\"ghost\"]\nmax_values = 2\n",
    );
    assert_eq!(
        fields(&text),
        [
            "server.metrics_labels.tenants",
            "server.metrics_labels.tenants[1]",
            "server.metrics_labels.tenants[2]",
            "server.metrics_labels.agents[0]",
        ]
    );
    assert!(message_of(&text, "server.metrics_labels.tenants").contains("max_values (2)"));
    assert!(
        message_of(&text, "server.metrics_labels.tenants[1]").contains("keys exist for: acme, ops")
    );
    assert!(message_of(&text, "server.metrics_labels.tenants[2]").contains("listed twice"));
    assert!(
        message_of(&text, "server.metrics_labels.agents[0]").contains("agents: order_desk"),
        "{}",
        message_of(&text, "server.metrics_labels.agents[0]")
    );
    // Without keys every request is `default`'s.
    let no_keys = with_extra("[server.metrics_labels]\ntenants = [\"default\", \"acme\"]\n");
    assert_eq!(fields(&no_keys), ["server.metrics_labels.tenants[1]"]);
    let zero = with_extra("[server.metrics_labels]\nmax_values = 0\n");
    assert!(message_of(&zero, "server.metrics_labels.max_values").contains("1..=1000"));
}

#[test]
fn numeric_allowed_hosts_are_refused_naming_the_address() {
    let text = with_extra("[server]\nallowed_hosts = [\"10.0.0.05:8787\", \"127.1\"]\n");
    assert_eq!(
        fields(&text),
        ["server.allowed_hosts[0]", "server.allowed_hosts[1]"]
    );
    assert!(message_of(&text, "server.allowed_hosts[0]").contains("\"10.0.0.5:8787\""));
    assert!(message_of(&text, "server.allowed_hosts[1]").contains("\"127.0.0.1\""));
}

// ----- providers that stay up (issue 7) --------------------------------------

/// An anthropic provider `claude` (streaming with the default limits, at
/// most 4 calls at once), a binding `smart` over `mock`, `claude` and
/// `replay`, and an agent `helper` that names it.
const MODELS: &str = r#"
[providers.claude]
kind = "anthropic"
base_url = "https://api.anthropic.com/v1"
api_key_env = "ANTHROPIC_API_KEY"
max_concurrency = 4
max_output_tokens = { "claude-sonnet" = 8192 }
[providers.claude.stream]
[providers.claude.prices."claude-sonnet"]
input_per_mtok_usd = 3.0
output_per_mtok_usd = 15.0

[models.smart]
provider = "mock"
model = "gpt-4o-mini"
fallbacks = [{ provider = "claude", model = "claude-sonnet" }, { provider = "replay", model = "llama" }]
context_fallbacks = [{ provider = "mock", model = "gpt-4o-128k" }]

[agents.helper]
model = "smart"
tools = ["get_order"]
"#;

fn link(provider: &str, model: &str) -> ModelLink {
    ModelLink::new(provider, model)
}

#[test]
fn anthropic_provider_builds_with_its_settings_and_stream_defaults() {
    let reg = build(&[("rein.toml", &with_extra(MODELS))]).unwrap();
    let claude = reg.provider("claude").unwrap();
    assert_eq!(
        claude.kind,
        ProviderKind::Anthropic {
            base_url: "https://api.anthropic.com/v1".into(),
            api_key_env: Some("ANTHROPIC_API_KEY".into()),
            timeout: DEFAULT_PROVIDER_TIMEOUT,
        }
    );
    assert_eq!(claude.kind.timeout(), Some(DEFAULT_PROVIDER_TIMEOUT));
    assert_eq!(claude.max_concurrency.map(|n| n.get()), Some(4));
    let stream = claude.stream.unwrap();
    assert_eq!(stream.first_byte_timeout, DEFAULT_STREAM_FIRST_BYTE_TIMEOUT);
    assert_eq!(stream.idle_timeout, DEFAULT_STREAM_IDLE_TIMEOUT);
    assert!(claude.price("claude-sonnet").is_some());
    // Without the settings: no limit, no streaming.
    let mock = reg.provider("mock").unwrap();
    assert_eq!(mock.max_concurrency, None);
    assert_eq!(mock.stream, None);
    assert_eq!(reg.provider("replay").unwrap().kind.timeout(), None);
}

#[test]
fn provider_stream_and_concurrency_are_read_when_set() {
    let text = r#"
[providers.fast]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
timeout = "30s"
max_concurrency = 2
stream = { first_byte_timeout = "30s", idle_timeout = "1s" }
[providers.replay]
kind = "scripted"
script = "demo.script.json"
max_concurrency = 1
"#;
    let reg = build(&[("rein.toml", text)]).unwrap();
    let fast = reg.provider("fast").unwrap();
    assert_eq!(fast.max_concurrency.map(|n| n.get()), Some(2));
    let stream = fast.stream.unwrap();
    assert_eq!(stream.first_byte_timeout, Duration::from_secs(30));
    assert_eq!(stream.idle_timeout, Duration::from_secs(1));
    // A concurrency limit is rein's own, so a scripted provider may rehearse
    // it.
    let replay = reg.provider("replay").unwrap();
    assert_eq!(replay.max_concurrency.map(|n| n.get()), Some(1));
    assert_eq!(replay.stream, None);
}

#[test]
fn anthropic_provider_is_validated_like_openai() {
    let text = r#"
[providers.a]
kind = "anthropic"
script = "s.json"
api_key_env = "1BAD"
timeout = "0s"
[providers.b]
kind = "scripted"
script = "s.json"
base_url = "http://x/v1"
[providers.c]
base_url = "http://x/v1"
[providers.d]
kind = "anthropic"
base_url = "api.anthropic.com"
"#;
    assert_eq!(
        fields(text),
        vec![
            "providers.a.script",
            "providers.a.base_url",
            "providers.a.api_key_env",
            "providers.a.timeout",
            "providers.b.base_url",
            "providers.c.kind",
            "providers.d.base_url",
        ]
    );
    assert_eq!(
        message_of(text, "providers.a.base_url"),
        "is required for an anthropic provider, e.g. \"https://api.anthropic.com/v1\""
    );
    assert_eq!(
        message_of(text, "providers.b.base_url"),
        "is only for openai and anthropic providers; remove base_url"
    );
    assert_eq!(
        message_of(text, "providers.c.kind"),
        "is required: openai, anthropic or scripted"
    );
}

#[test]
fn provider_token_bucket_is_read_and_refused_where_it_could_not_hold() {
    let text = r#"
[providers.fast]
kind = "openai"
base_url = "http://127.0.0.1:9/v1"
tokens_per_minute = 90000
[providers.wide]
kind = "scripted"
script = "s.json"
tokens_per_minute = 60000
token_burst = 15000
"#;
    let reg = build(&[("rein.toml", text)]).unwrap();
    let fast = reg.provider("fast").unwrap().tokens.unwrap();
    assert_eq!((fast.per_minute.get(), fast.burst.get()), (90_000, 90_000));
    let wide = reg.provider("wide").unwrap().tokens.unwrap();
    assert_eq!((wide.per_minute.get(), wide.burst.get()), (60_000, 15_000));
    assert_eq!(reg.provider("fast").unwrap().max_concurrency, None);

    let bad = r#"
[providers.a]
kind = "openai"
base_url = "http://x/v1"
tokens_per_minute = 0
[providers.b]
kind = "openai"
base_url = "http://x/v1"
token_burst = 100
[providers.c]
kind = "openai"
base_url = "http://x/v1"
tokens_per_minute = 1000
token_burst = 0
[providers.d]
kind = "openai"
base_url = "http://x/v1"
tokens_per_minute = 2000000000000
"#;
    assert_eq!(
        fields(bad),
        vec![
            "providers.a.tokens_per_minute",
            "providers.b.token_burst",
            "providers.c.token_burst",
            "providers.d.tokens_per_minute",
        ]
    );
    assert_eq!(
        message_of(bad, "providers.a.tokens_per_minute"),
        "must be greater than zero; leave it out for no token bucket"
    );
    assert_eq!(
        message_of(bad, "providers.b.token_burst"),
        "has no effect without tokens_per_minute: set both, or leave both out"
    );
}

#[test]
fn provider_settings_out_of_range_name_their_field() {
    let text = r#"
[providers.a]
kind = "openai"
base_url = "http://x/v1"
max_concurrency = 0
stream = { first_byte_timeout = "0s", idle_timeout = "61s" }
[providers.b]
kind = "anthropic"
base_url = "http://x/v1"
timeout = "5s"
stream = { idle_timeout = "5s" }
[providers.c]
kind = "scripted"
script = "s.json"
stream = {}
"#;
    assert_eq!(
        fields(text),
        vec![
            "providers.a.max_concurrency",
            "providers.a.stream.first_byte_timeout",
            "providers.c.stream",
        ]
    );
    assert_eq!(
        message_of(text, "providers.a.max_concurrency"),
        "must be greater than zero; leave it out for no limit"
    );
    // Stream limits above the provider's timeout are fine: it bounds a
    // non-streamed call, not a stream (issue 35).
    assert_eq!(
        message_of(text, "providers.a.stream.first_byte_timeout"),
        "must be greater than zero"
    );
    assert!(message_of(text, "providers.c.stream").contains("no stream to time"));
}

#[test]
fn model_binding_builds_and_an_agent_naming_it_takes_its_models() {
    let reg = build(&[("conf/rein.toml", &with_extra(MODELS))]).unwrap();
    let smart = reg.model("smart").unwrap();
    assert_eq!(reg.models().len(), 1);
    assert_eq!(smart.name, "smart");
    assert_eq!(smart.primary, link("mock", "gpt-4o-mini"));
    assert_eq!(
        smart.fallbacks,
        vec![link("claude", "claude-sonnet"), link("replay", "llama")]
    );
    assert_eq!(smart.context_fallbacks, vec![link("mock", "gpt-4o-128k")]);
    assert_eq!(smart.source, PathBuf::from("conf/rein.toml"));
    let helper = reg.agent("helper").unwrap();
    assert_eq!(helper.provider, "mock");
    assert_eq!(helper.model, "gpt-4o-mini");
    assert_eq!(helper.primary(), smart.primary);
    assert_eq!(helper.fallbacks, smart.fallbacks);
    assert_eq!(helper.context_fallbacks, smart.context_fallbacks);
    assert_eq!(helper.model_binding.as_deref(), Some("smart"));
    // The provider + model form has no binding and no fallbacks by default.
    let desk = reg.agent("order_desk").unwrap();
    assert_eq!(desk.model_binding, None);
    assert!(desk.fallbacks.is_empty() && desk.context_fallbacks.is_empty());
    assert_eq!(
        link("claude", "claude-sonnet").to_string(),
        "claude/claude-sonnet"
    );
}

#[test]
fn agent_with_provider_may_list_fallbacks_inline() {
    let text = with_extra(
        r#"
[agents.inline]
provider = "mock"
model = "gpt-4o-mini"
fallbacks = [{ provider = "replay", model = "llama" }]
context_fallbacks = [{ provider = "mock", model = "gpt-4o-128k" }, { provider = "replay", model = "big" }]
"#,
    );
    let reg = build(&[("rein.toml", &text)]).unwrap();
    let agent = reg.agent("inline").unwrap();
    assert_eq!(agent.primary(), link("mock", "gpt-4o-mini"));
    assert_eq!(agent.fallbacks, vec![link("replay", "llama")]);
    assert_eq!(
        agent.context_fallbacks,
        vec![link("mock", "gpt-4o-128k"), link("replay", "big")]
    );
    assert_eq!(agent.model_binding, None);
}

#[test]
fn model_binding_fields_and_links_are_validated_naming_their_field() {
    let text = with_extra(
        r#"
[models.a]
fallbacks = [{ provider = "mock" }, { model = "m" }]
[models.b]
provider = "nowhere"
model = " "
context_fallbacks = [{ provider = "nowhere", model = "m" }]
[models.c]
provider = "mock"
model = "gpt-4o-mini"
fallbacks = [{ provider = "replay", model = "x" }, { provider = "mock", model = "gpt-4o-mini" }, { provider = "replay", model = "x" }]
context_fallbacks = [{ provider = "mock", model = "gpt-4o-mini" }, { provider = "replay", model = "big" }, { provider = "replay", model = "big" }]
"#,
    );
    assert_eq!(
        fields(&text),
        vec![
            "models.a.provider",
            "models.a.model",
            "models.a.fallbacks[0].model",
            "models.a.fallbacks[1].provider",
            "models.b.provider",
            "models.b.model",
            "models.b.context_fallbacks[0].provider",
            "models.c.fallbacks[1]",
            "models.c.fallbacks[2]",
            "models.c.context_fallbacks[0]",
            "models.c.context_fallbacks[2]",
        ]
    );
    assert_eq!(
        message_of(&text, "models.b.context_fallbacks[0].provider"),
        "names `nowhere`, which is not a provider; define [providers.nowhere]"
    );
    assert_eq!(
        message_of(&text, "models.c.fallbacks[1]"),
        "is the primary model (`gpt-4o-mini` of provider `mock`); a fallback must be another model, \
         or it would only retry the one that just failed (retries are the retry policy's job)"
    );
    assert_eq!(
        message_of(&text, "models.c.fallbacks[2]"),
        "repeats models.c.fallbacks[0] (`x` of provider `replay`); the same model would be tried twice"
    );
    assert!(
        message_of(&text, "models.c.context_fallbacks[0]")
            .contains("on context_overflow the same model is never retried"),
    );
    assert!(
        message_of(&text, "models.c.context_fallbacks[2]")
            .starts_with("repeats models.c.context_fallbacks[1] ")
    );
}

#[test]
fn a_link_repeated_across_the_two_lists_is_allowed() {
    // A model can be both the fallback for an outage and the one with the
    // larger window: the two lists answer different failures.
    let text = with_extra(
        r#"
[models.both]
provider = "mock"
model = "gpt-4o-mini"
fallbacks = [{ provider = "replay", model = "big" }]
context_fallbacks = [{ provider = "replay", model = "big" }]
"#,
    );
    assert!(build(&[("rein.toml", &text)]).is_ok());
}

#[test]
fn same_model_retries_default_and_are_checked_in_range_at_their_field() {
    let reg = build(&[("rein.toml", &with_extra(MODELS))]).unwrap();
    assert_eq!(
        reg.models()["smart"].same_model,
        crate::retry::SameModelRetry::default()
    );
    let set = with_extra(MODELS).replace(
        "[agents.helper]",
        "[models.smart2]\nprovider = \"mock\"\nmodel = \"gpt-4o-mini\"\n\
         retry_before_fallback = 0\nretry_after_max = \"2s\"\nretry_timeouts = true\n\
         [agents.helper]",
    );
    let reg = build(&[("rein.toml", &set)]).unwrap();
    let same = reg.models()["smart2"].same_model;
    assert_eq!(
        (same.retries, same.retry_after_max, same.retry_timeouts),
        (0, Duration::from_secs(2), true)
    );
    let out_of_range = with_extra(MODELS).replace(
        "[agents.helper]",
        "[models.smart2]\nprovider = \"mock\"\nmodel = \"gpt-4o-mini\"\n\
         retry_before_fallback = 9\nretry_after_max = \"2m\"\n[agents.helper]",
    );
    assert_eq!(
        fields(&out_of_range),
        vec![
            "models.smart2.retry_before_fallback",
            "models.smart2.retry_after_max"
        ]
    );
    assert!(
        message_of(&out_of_range, "models.smart2.retry_before_fallback")
            .starts_with("must be at most 5")
    );
    assert!(message_of(&out_of_range, "models.smart2.retry_after_max").ends_with("but it is 2m"));
}

#[test]
fn an_embedding_binding_needs_no_output_cap_and_serves_no_agent() {
    // `text-embedding-3-small` has no output cap anywhere: fine for an
    // embedding binding.
    let embedding = with_extra(MODELS).replace(
        "[agents.helper]",
        "[models.embed]\nkind = \"embedding\"\nprovider = \"mock\"\nmodel = \"text-embedding-3-small\"\n\
         [agents.helper]",
    );
    let reg = build(&[("rein.toml", &embedding)]).unwrap();
    assert_eq!(
        reg.models()["embed"].kind,
        crate::registry::BindingKind::Embedding
    );
    assert_eq!(
        reg.models()["smart"].kind,
        crate::registry::BindingKind::Chat
    );
    // As a chat binding, it would need one.
    let chat = embedding.replace("kind = \"embedding\"\n", "");
    assert_eq!(fields(&chat), vec!["models.embed.model"]);
    // An agent cannot take turns from it.
    let agent = embedding.replace("model = \"smart\"", "model = \"embed\"");
    assert_eq!(fields(&agent), vec!["agents.helper.model"]);
    assert!(
        message_of(&agent, "agents.helper.model").contains("`embed`, an embedding binding"),
        "{}",
        message_of(&agent, "agents.helper.model")
    );
}

#[test]
fn agent_without_provider_needs_model_to_name_a_binding() {
    let text = with_extra(MODELS).replace("model = \"smart\"", "model = \"clever\"");
    assert_eq!(fields(&text), vec!["agents.helper.provider"]);
    assert_eq!(
        message_of(&text, "agents.helper.provider"),
        "is required unless `model` names a [models.*] binding, and `clever` names none; known bindings: smart"
    );
    let none = BASE.replace("provider = \"replay\"\n", "");
    assert_eq!(
        message_of(&none, "agents.order_desk.provider"),
        "is required unless `model` names a [models.*] binding, and `gpt-4o-mini` names none; no [models.*] binding is defined"
    );
}

#[test]
fn agent_fallbacks_need_a_provider_and_are_checked_like_a_bindings() {
    let text = with_extra(
        r#"
[agents.x]
model = "smart"
fallbacks = [{ provider = "replay", model = "llama" }]
context_fallbacks = [{ provider = "replay", model = "big" }]
[agents.y]
provider = "mock"
model = "gpt-4o-mini"
fallbacks = [{ provider = "mock", model = "gpt-4o-mini" }, { provider = "ghost", model = "m" }]
context_fallbacks = [{ model = "m" }]
"#,
    );
    let text = format!(
        "{text}\n{}",
        MODELS.split_once("[agents.helper]").unwrap().0
    );
    assert_eq!(
        fields(&text),
        vec![
            "agents.x.fallbacks",
            "agents.x.context_fallbacks",
            "agents.y.fallbacks[0]",
            "agents.y.fallbacks[1].provider",
            "agents.y.context_fallbacks[0].provider",
        ]
    );
    assert!(message_of(&text, "agents.x.fallbacks").starts_with("needs `provider`"));
}

#[test]
fn an_agent_naming_a_binding_that_failed_reports_nothing_more() {
    let text = with_extra(MODELS).replace(
        "[models.smart]\nprovider = \"mock\"",
        "[models.smart]\nprovider = \"ghost\"",
    );
    assert_eq!(fields(&text), vec!["models.smart.provider"]);
    // A binding that did not even parse counts as defined too.
    let without = with_extra(MODELS).replace("[models.smart]", "[unused.smart]");
    let (head, _) = without.split_once("[unused.smart]").unwrap();
    let (_, tail) = without.split_once("[agents.helper]").unwrap();
    let text = format!("{head}[agents.helper]{tail}");
    assert_eq!(fields(&text), vec!["agents.helper.provider"]);
    // The loader has reported the broken binding (and refuses the config);
    // the check adds nothing about the agent that names it.
    let sources = [source("rein.toml", &text).with_broken("models.smart")];
    assert!(check(&sources, &|_| Vec::new()).is_ok());
}

#[test]
fn model_binding_defined_in_two_files_is_reported_at_the_later_file() {
    let a = "[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n[models.m]\nprovider = \"p\"\nmodel = \"x\"\n";
    let b = "[models.m]\nprovider = \"p\"\nmodel = \"y\"\n";
    assert_eq!(
        problems_of_two(a, b),
        vec![("b.toml".into(), "models.m".into())]
    );
    assert_eq!(
        fields(
            "[models.\" \"]\nprovider = \"p\"\nmodel = \"x\"\n[providers.p]\nkind = \"scripted\"\nscript = \"s.json\"\n"
        ),
        vec!["models. "]
    );
}

#[test]
fn cost_budget_needs_a_price_for_every_model_the_agent_can_use() {
    let budget = "[agents.helper.budget]\nmax_cost_usd = 1.0\n";
    // `replay/llama` (a fallback) and `mock/gpt-4o-128k` (a context
    // fallback) have no price; `mock/gpt-4o-mini` and `claude/claude-sonnet`
    // do.
    let text = format!("{}\n{budget}", with_extra(MODELS));
    assert_eq!(
        fields(&text),
        vec![
            "agents.helper.budget.max_cost_usd",
            "agents.helper.budget.max_cost_usd",
        ]
    );
    let problems = build(&[("rein.toml", &text)]).unwrap_err();
    assert_eq!(
        problems[0].message,
        "needs a price for fallback model `llama` in [providers.replay.prices] (used through [models.smart]): without one no cost is counted"
    );
    assert_eq!(
        problems[1].message,
        "needs a price for context fallback model `gpt-4o-128k` in [providers.mock.prices] (used through [models.smart]): without one no cost is counted"
    );
    let priced = format!(
        "{text}\n[providers.replay.prices.llama]\ninput_per_mtok_usd = 0.0\noutput_per_mtok_usd = 0.0\n[providers.mock.prices.\"gpt-4o-128k\"]\ninput_per_mtok_usd = 1.0\noutput_per_mtok_usd = 2.0\n"
    );
    assert!(build(&[("rein.toml", &priced)]).is_ok());
    // Inline fallbacks are held to the same rule.
    let inline = BASE
        .replace("provider = \"replay\"\nmodel", "provider = \"mock\"\nmodel")
        .replace(
            "max_steps = 10",
            "max_steps = 10\nmax_cost_usd = 1.0",
        )
        .replace(
            "system_prompt = \"You adjust orders.\"",
            "system_prompt = \"You adjust orders.\"\nfallbacks = [{ provider = \"replay\", model = \"llama\" }]",
        );
    assert_eq!(
        fields(&inline),
        vec!["agents.order_desk.budget.max_cost_usd"]
    );
    assert_eq!(
        message_of(&inline, "agents.order_desk.budget.max_cost_usd"),
        "needs a price for fallback model `llama` in [providers.replay.prices]: without one no cost is counted"
    );
}

#[test]
fn an_agents_model_retry_ceiling_is_read_with_defaults_and_checked() {
    let reg = build(&[("rein.toml", BASE)]).unwrap();
    let spec = reg.agent("order_desk").unwrap().model_retry;
    assert_eq!(spec.max_retries, DEFAULT_MAX_MODEL_RETRIES);
    assert_eq!(spec.max_wait, DEFAULT_MAX_MODEL_RETRY_WAIT);
    assert_eq!(spec.max_wasted_tokens, None);

    let set = with_extra(
        "[agents.order_desk.model_retry]\nmax_retries = 3\nmax_wait = \"10s\"\nmax_wasted_tokens = 5000\n",
    );
    let spec = build(&[("rein.toml", &set)])
        .unwrap()
        .agent("order_desk")
        .unwrap()
        .model_retry;
    assert_eq!(
        (spec.max_retries, spec.max_wait, spec.max_wasted_tokens),
        (3, std::time::Duration::from_secs(10), Some(5000))
    );

    let zero = with_extra("[agents.order_desk.model_retry]\nmax_wasted_tokens = 0\n");
    assert_eq!(
        fields(&zero),
        vec!["agents.order_desk.model_retry.max_wasted_tokens"]
    );
}

#[test]
fn server_limits_and_shutdown_grace_are_read_and_checked_by_field() {
    let text = with_extra(
        "[server]\nshutdown_grace = \"2s\"\n[server.limits]\nheader_timeout = \"1s\"\nbody_timeout = \"1500ms\"\nidle_timeout = \"2s\"\nmax_connections = 16\n",
    );
    let reg = build(&[("rein.toml", &text)]).unwrap();
    let limits = reg.server().limits;
    assert_eq!(limits.header_timeout, Duration::from_secs(1));
    assert_eq!(limits.body_timeout, Duration::from_millis(1500));
    assert_eq!(limits.idle_timeout, Duration::from_secs(2));
    assert_eq!(limits.max_connections.get(), 16);
    assert_eq!(reg.server().shutdown_grace, Duration::from_secs(2));
    let zero = build(&[(
        "rein.toml",
        &with_extra("[server]\nshutdown_grace = \"0s\"\n"),
    )])
    .unwrap();
    assert_eq!(zero.server().shutdown_grace, Duration::ZERO);

    for (field, value) in [
        ("header_timeout", "\"50ms\""),
        ("body_timeout", "\"0s\""),
        ("idle_timeout", "\"2h\""),
        ("max_connections", "0"),
        ("max_connections", "65537"),
    ] {
        let found = server_fields(&format!("[server.limits]\n{field} = {value}\n"));
        assert_eq!(found, vec![format!("server.limits.{field}")], "{value}");
    }
    let msg = message_of(
        &with_extra("[server.limits]\nheader_timeout = \"50ms\"\n"),
        "server.limits.header_timeout",
    );
    assert!(
        msg.contains("between 100ms and 1h") && msg.contains("50ms"),
        "{msg}"
    );
    let found = server_fields("[server]\nshutdown_grace = \"2h\"\n");
    assert_eq!(found, vec!["server.shutdown_grace"]);
}

#[test]
fn a_model_without_a_known_output_cap_needs_max_output_tokens() {
    let unknown = with_extra(
        r#"
[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8/v1"

[agents.local_desk]
provider = "local"
model = "llama-3-70b"
fallbacks = [{ provider = "mock", model = "gpt-4o-mini" }, { provider = "local", model = "qwen" }]
"#,
    );
    assert_eq!(
        fields(&unknown),
        vec!["agents.local_desk.model", "agents.local_desk.fallbacks"]
    );
    let message = message_of(&unknown, "agents.local_desk.model");
    assert!(
        message.contains("model `llama-3-70b` has no known output cap")
            && message.contains("[providers.local.max_output_tokens]"),
        "{message}"
    );
    // With the caps set it builds, and the provider gives each model its
    // cap: configured first, then the table of well-known models.
    let capped = unknown.replace(
        "base_url = \"http://127.0.0.1:8/v1\"",
        "base_url = \"http://127.0.0.1:8/v1\"\nmax_output_tokens = { \"llama-3-70b\" = 4096, qwen = 8192 }",
    );
    let registry = build(&[("rein.toml", &capped)]).unwrap_or_else(|e| panic!("{e:?}"));
    let local = registry.provider("local").unwrap();
    assert_eq!(local.output_cap("llama-3-70b").map(|c| c.get()), Some(4096));
    assert_eq!(local.output_cap("qwen").map(|c| c.get()), Some(8192));
    let mock = registry.provider("mock").unwrap();
    assert_eq!(
        mock.output_cap("gpt-4o-mini").map(|c| c.get()),
        Some(16_384)
    );
    // A scripted provider replays recordings: its models need no cap.
    let replay = registry.provider("replay").unwrap();
    assert_eq!(replay.output_cap("whatever"), None);
    // Zero is no cap at all.
    let zero = capped.replace("qwen = 8192", "qwen = 0");
    assert_eq!(
        fields(&zero),
        vec!["providers.local.max_output_tokens.qwen"]
    );
}

#[test]
fn an_agents_planner_and_value_of_success_are_read_with_defaults_and_checked() {
    let reg = build(&[("rein.toml", BASE)]).unwrap();
    let planner = reg.agent("order_desk").unwrap().planner;
    assert_eq!(planner, PlannerSettings::default());
    assert!(planner.show_budget && planner.final_turn);
    assert_eq!(planner.value_of_success, None);

    let set = format!(
        "{}\n[agents.order_desk.planner]\nshow_budget = false\nfinal_turn = false\n",
        BASE.replace(
            "system_prompt = \"You adjust orders.\"",
            "system_prompt = \"You adjust orders.\"\nvalue_of_success_usd = 2.5",
        )
    );
    let planner = build(&[("rein.toml", &set)])
        .unwrap()
        .agent("order_desk")
        .unwrap()
        .planner;
    assert!(!planner.show_budget && !planner.final_turn);
    assert_eq!(
        planner.value_of_success,
        Some(crate::deadline::Cost::from_micros(2_500_000))
    );

    for bad in ["0", "-1.0", "nan"] {
        let set = BASE.replace(
            "system_prompt = \"You adjust orders.\"",
            &format!("system_prompt = \"You adjust orders.\"\nvalue_of_success_usd = {bad}"),
        );
        assert_eq!(
            fields(&set),
            vec!["agents.order_desk.value_of_success_usd"],
            "{bad}"
        );
    }
}

fn with_mcp_tool(adapter: &str) -> String {
    format!(
        r#"{BASE}
[mcp_servers.everything]
command = "node"
args = ["server.js", "stdio"]

[tools.get_sum]
description = "Return the sum of two numbers."
class = "read"
resource_group = "order_api"
side_effect_tier = "none"
owner = "orders-team"
latency = {{ mode = "observe", fallback_p99 = "2s" }}
schema = {{ type = "object", properties = {{ a = {{ type = "number", description = "The first." }}, b = {{ type = "number", description = "The second." }} }}, required = ["a", "b"] }}
[tools.get_sum.adapter]
{adapter}
"#
    )
}

#[test]
fn mcp_adapter_names_its_server_and_defaults_to_the_registry_name() {
    let reg = build(&[(
        "conf/rein.toml",
        &with_mcp_tool("kind = \"mcp\"\nserver = \"everything\"\ntool = \"get-sum\""),
    )])
    .unwrap();
    match &reg.tools()["get_sum"].adapter {
        AdapterSpec::Mcp { server, tool, .. } => {
            assert_eq!(server.name, "everything");
            assert_eq!(tool, "get-sum");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(reg.mcp_servers().len(), 1);
    let reg = build(&[(
        "conf/rein.toml",
        &with_mcp_tool("kind = \"mcp\"\nserver = \"everything\""),
    )])
    .unwrap();
    assert!(matches!(
        &reg.tools()["get_sum"].adapter,
        AdapterSpec::Mcp { tool, .. } if tool == "get_sum"
    ));
}

#[test]
fn mcp_adapter_needs_a_known_server_and_refuses_other_kinds_settings() {
    assert_eq!(
        fields(&with_mcp_tool("kind = \"mcp\"")),
        ["tools.get_sum.adapter.server"]
    );
    let unknown = with_mcp_tool("kind = \"mcp\"\nserver = \"nothing\"");
    assert_eq!(
        message_of(&unknown, "tools.get_sum.adapter.server"),
        "names `nothing`, which is not an MCP server; define [mcp_servers.nothing]"
    );
    assert_eq!(
        fields(&with_mcp_tool(
            "kind = \"mcp\"\nserver = \"everything\"\nurl = \"http://h/x\"\nprogram = \"p\"\nstatus_url = \"http://h/s\""
        )),
        [
            "tools.get_sum.adapter.program",
            "tools.get_sum.adapter.status_url",
            "tools.get_sum.adapter.url",
        ]
    );
    // And the other kinds refuse the mcp adapter's settings.
    let http = with_mcp_tool(
        "kind = \"http\"\nurl = \"http://127.0.0.1:1/x\"\nserver = \"everything\"\ntool = \"get-sum\"",
    );
    assert_eq!(
        fields(&http),
        ["tools.get_sum.adapter.server", "tools.get_sum.adapter.tool"]
    );
}

#[test]
fn key_budgets_are_read_and_their_bad_limits_named() {
    let text = format!(
        r#"
[[server.api_keys]]
tenant = "acme"
sha256 = "{a}"
[server.api_keys.budget]
tokens_per_day = 1000
cost_usd_per_month = 2.5
[[server.api_keys]]
tenant = "acme"
sha256 = "{b}"
[server.api_keys.budget]
tokens_per_month = 0
cost_usd_per_day = -1.0
cost_usd_per_month = 0.0000001
[[server.api_keys]]
tenant = "acme"
sha256 = "{c}"
"#,
        a = sha256_hex("k1"),
        b = sha256_hex("k2"),
        c = sha256_hex("k3"),
    );
    assert_eq!(
        fields(&text),
        vec![
            "server.api_keys[1].budget.tokens_per_month",
            "server.api_keys[1].budget.cost_usd_per_day",
            "server.api_keys[1].budget.cost_usd_per_month",
        ]
    );
    let good = text.replace(
        "tokens_per_month = 0\ncost_usd_per_day = -1.0\ncost_usd_per_month = 0.0000001\n",
        "",
    );
    let reg = build(&[("rein.toml", &with_extra(&good))]).unwrap();
    let keys = &reg.server().api_keys;
    assert_eq!(keys[0].budget.tokens_per_day, Some(1000));
    assert_eq!(
        keys[0].budget.cost_per_month,
        Some(crate::deadline::Cost::from_micros(2_500_000))
    );
    assert!(
        !keys[1].budget.is_limited(),
        "an empty budget limits nothing"
    );
    assert!(!keys[2].budget.is_limited());
}

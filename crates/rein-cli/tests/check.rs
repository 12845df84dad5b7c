//! `rein check`, run as a real process against real files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rein_check(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
    cmd.arg("check").args(args);
    for name in ["ORDER_DESK_URL", "MOCK_MODEL_URL", "DESK"] {
        cmd.env_remove(name);
    }
    cmd.envs(env.iter().copied());
    cmd.output().expect("the rein binary runs")
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk/rein.toml")
}

/// A config directory with problems in two files: a tool file and an agent
/// file.
fn bad_config() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(
        dir.path().join("tools.toml"),
        r#"
[resource_groups.api]

[tools.send_email]
description = "Email a customer."
class = "irreversible"
resource_group = "mail"
side_effect_tier = "high"
owner = "comms"
latency = { mode = "observe", fallback_p99 = "2s" }
adapter = { kind = "http", url = "${DESK}/send_email" }
schema = { type = "object", properties = { to = { type = "string" } } }
[tools.send_email.compensation]
tool = "unsend_email"
grade = "strong"
"#,
    )
    .unwrap();
    fs::write(
        dir.path().join("agents.toml"),
        r#"
[agents.support]
provider = "openai"
model = "gpt-4o-mini"
tools = ["send_email", "lookup_order"]
[agents.support.budget]
max_steps = 0
"#,
    )
    .unwrap();
    dir
}

#[test]
fn check_lists_every_problem_across_files_with_file_line_and_field() {
    let dir = bad_config();
    let out = rein_check(
        &[dir.path().to_str().unwrap()],
        &[("DESK", "http://127.0.0.1:1")],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let tools = dir.path().join("tools.toml").display().to_string();
    let agents = dir.path().join("agents.toml").display().to_string();
    let expected = [
        format!("{agents}:3:1: agents.support.provider: names `openai`, which is not a provider"),
        format!("{agents}:5:1: agents.support.tools: names `lookup_order`, which is not a tool"),
        format!("{agents}:7:1: agents.support.budget.max_steps: must be greater than zero"),
        format!("{tools}:12:44: tools.send_email.schema.properties.to.description: is required"),
        format!("{tools}:7:1: tools.send_email.resource_group: names `mail`"),
        format!(
            "{tools}:14:1: tools.send_email.compensation.tool: names `unsend_email`, which is not a tool"
        ),
    ];
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), expected.len() + 1, "{stderr}");
    for (line, want) in lines.iter().zip(&expected) {
        assert!(
            line.starts_with(want.as_str()),
            "{line}\n  does not start with\n{want}"
        );
    }
    assert_eq!(
        lines[expected.len()],
        format!("error: 6 problems in {}", dir.path().display())
    );
}

#[test]
fn check_json_reports_every_problem_as_data() {
    let dir = bad_config();
    // DESK unset: the interpolation problem joins the list.
    let out = rein_check(&[dir.path().to_str().unwrap(), "--json"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    let problems = doc["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 7, "{doc:#}");
    let fields: Vec<&str> = problems
        .iter()
        .map(|p| p["field"].as_str().unwrap())
        .collect();
    assert!(
        fields.contains(&"tools.send_email.adapter.url"),
        "{fields:?}"
    );
    for p in problems {
        assert!(p["file"].as_str().unwrap().ends_with(".toml"));
        assert!(!p["message"].as_str().unwrap().is_empty());
    }
}

#[test]
fn check_json_reports_syntax_errors_with_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rein.toml");
    fs::write(&file, "[tools.x]\nclass = = \"read\"\n").unwrap();
    let out = rein_check(&[file.to_str().unwrap(), "--json"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let p = &doc["problems"][0];
    assert_eq!(p["line"], 2);
    assert_eq!(p["field"], "");
}

#[test]
fn check_passes_the_example_config() {
    let out = rein_check(
        &[example().to_str().unwrap()],
        &[
            ("ORDER_DESK_URL", "http://127.0.0.1:7001"),
            ("MOCK_MODEL_URL", "http://127.0.0.1:7002"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "ok: 4 tools, 2 agents, 2 providers, 1 resource group\n\
         model mock/gpt-4o-mini: output ceiling in max_tokens (known model), at most 16384"
    );
    let out = rein_check(
        &[example().to_str().unwrap(), "--json"],
        &[
            ("ORDER_DESK_URL", "http://127.0.0.1:7001"),
            ("MOCK_MODEL_URL", "http://127.0.0.1:7002"),
        ],
    );
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc,
        serde_json::json!({"ok": true, "problems": [], "warnings": [],
            "output_fields": [{"provider": "mock", "model": "gpt-4o-mini",
                "field": "max_tokens", "source": "known model", "max_output_tokens": 16384}]})
    );
}

#[test]
fn check_warns_of_a_provider_key_too_short_to_redact_naming_the_field() {
    let env = [
        ("ORDER_DESK_URL", "http://127.0.0.1:7001"),
        ("MOCK_MODEL_URL", "http://127.0.0.1:7002"),
        ("OPENAI_API_KEY", "sk-1"),
    ];
    let out = rein_check(&[example().to_str().unwrap()], &env);
    assert!(out.status.success(), "a warning does not fail the check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: ")
            && stderr.contains("providers.mock.api_key_env: its secret is 4 characters long"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("sk-1"),
        "the value itself is not shown: {stderr}"
    );
    let out = rein_check(&[example().to_str().unwrap(), "--json"], &env);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["warnings"][0]["field"], "providers.mock.api_key_env");
}

/// Issue 13 item 5, through the binary: an overflowing duration is refused
/// by `rein check` (it passed, then panicked `rein run`), naming file, line
/// and field, and `rein run` refuses it the same way.
#[test]
fn r13_check_and_run_refuse_an_overflowing_wall_clock_alike() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.json"),
        r#"{"turns": [{"text": "done"}]}"#,
    )
    .unwrap();
    let config = dir.path().join("rein.toml");
    std::fs::write(
        &config,
        "[providers.s]\nkind = \"scripted\"\nscript = \"s.json\"\n\
         [agents.a]\nprovider = \"s\"\nmodel = \"m\"\n\
         [agents.a.budget]\nwall_clock = \"18446744073709551615s\"\n",
    )
    .unwrap();
    let out = rein_check(&[config.to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let expected = format!(
        "{}:8:1: agents.a.budget.wall_clock: must be at most 366d",
        config.display()
    );
    assert!(stderr.contains(&expected), "{stderr}");
    let out = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args([
            "run",
            "-c",
            config.to_str().unwrap(),
            "-a",
            "a",
            "-i",
            "x",
            "--data",
        ])
        .arg(dir.path().join("rein.db"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "refused, not a panic");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&expected), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn check_example_without_env_names_the_missing_variables() {
    let out = rein_check(&[example().to_str().unwrap()], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("providers.mock.base_url: uses ${MOCK_MODEL_URL}, but the environment variable MOCK_MODEL_URL is not set"),
        "{stderr}"
    );
    assert!(
        stderr.contains("tools.get_order.adapter.url: uses ${ORDER_DESK_URL}"),
        "{stderr}"
    );
}

/// Issue 12's settings: `rein check` refuses what `rein serve` could not
/// honour, naming each field; the same config does not start a server.
#[test]
fn check_refuses_bad_exposure_settings_naming_each_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = fs::read_to_string(example()).unwrap();
    config = config.replacen(
        "\n[server]\n",
        "\n[server]\nallowed_hosts = [\"http://rein.example.com\", \"*.ok.example\"]\n",
        1,
    );
    config.push_str("\n[server.cors]\nallowed_origins = [\"*\"]\nallowed_methods = [\"PUT\"]\n");
    let path = dir.path().join("rein.toml");
    fs::write(&path, config).unwrap();
    fs::copy(
        example().with_file_name("demo.script.json"),
        dir.path().join("demo.script.json"),
    )
    .unwrap();
    let env = [
        ("ORDER_DESK_URL", "http://127.0.0.1:7001"),
        ("MOCK_MODEL_URL", "http://127.0.0.1:7002"),
    ];
    let out = rein_check(&[path.to_str().unwrap(), "--json"], &env);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let fields: Vec<&str> = doc["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["field"].as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "server.allowed_hosts[0]",
            "server.cors.allowed_origins[0]",
            "server.cors.allowed_methods[0]"
        ],
        "{doc}"
    );
    let serve = Command::new(env!("CARGO_BIN_EXE_rein"))
        .envs(env)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .arg("--data")
        .arg(dir.path().join("rein.db"))
        .output()
        .unwrap();
    assert_eq!(
        serve.status.code(),
        Some(2),
        "rein serve refuses it at start"
    );
    assert!(String::from_utf8_lossy(&serve.stderr).contains("server.allowed_hosts[0]"));
}

/// A config of one scripted agent that answers at once, with `server`
/// TOML appended; its path.
fn answering_config(dir: &Path, server: &str) -> PathBuf {
    fs::write(dir.join("s.json"), r#"{"turns": [{"text": "done"}]}"#).unwrap();
    let config = dir.join("rein.toml");
    fs::write(
        &config,
        format!(
            "[providers.s]\nkind = \"scripted\"\nscript = \"s.json\"\n\
             [agents.a]\nprovider = \"s\"\nmodel = \"m\"\n{server}"
        ),
    )
    .unwrap();
    config
}

/// Issue 13 (review): `rein run`, which never listens, refused a config
/// whose `server.listen` is not loopback and that has no API keys; and
/// the problem named file `""` when there was no `[server]` table.
#[test]
fn a_public_listen_without_keys_is_a_serve_only_problem() {
    let dir = tempfile::tempdir().unwrap();
    let config = answering_config(dir.path(), "[server]\nlisten = \"0.0.0.0:8787\"\n");
    let path = config.to_str().unwrap();
    let out = rein_check(&[path], &[]);
    assert!(out.status.success(), "a warning for rein check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: {path}:8:1: server.listen: rein serve would refuse"
        )),
        "{stderr}"
    );
    let out = rein_check(&[path, "--serve"], &[]);
    assert_eq!(out.status.code(), Some(1), "an error with --serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{path}:8:1: server.listen: is 0.0.0.0:8787, not a loopback"
        )),
        "{stderr}"
    );
    let run = Command::new(env!("CARGO_BIN_EXE_rein"))
        .args(["run", "-c", path, "-a", "a", "-i", "x", "--data"])
        .arg(dir.path().join("rein.db"))
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "rein run does not listen: {}",
        String::from_utf8_lossy(&run.stderr)
    );

    // No [server] table: the problem names the config and the flag.
    let dir = tempfile::tempdir().unwrap();
    let config = answering_config(dir.path(), "");
    let path = config.to_str().unwrap();
    let out = rein_check(&[path, "--listen", "0.0.0.0:9"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "{path}: server.listen: is 0.0.0.0:9 (given by --listen), not a loopback"
        )),
        "{stderr}"
    );
}

/// Issue 13 (review): warnings were dropped whenever there were errors.
#[test]
fn warnings_are_shown_with_the_problems() {
    let dir = tempfile::tempdir().unwrap();
    let config = answering_config(
        dir.path(),
        "[providers.o]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
         api_key_env = \"CHECK_SHORT_KEY\"\n[agents.a.budget]\nmax_steps = 0\n",
    );
    let path = config.to_str().unwrap();
    let env = [("CHECK_SHORT_KEY", "abc")];
    let out = rein_check(&[path], &env);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("agents.a.budget.max_steps"), "{stderr}");
    assert!(
        stderr.contains("warning: ") && stderr.contains("providers.o.api_key_env"),
        "{stderr}"
    );
    let out = rein_check(&[path, "--json"], &env);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["problems"][0]["field"], "agents.a.budget.max_steps");
    assert_eq!(doc["warnings"][0]["field"], "providers.o.api_key_env");
}

#[test]
fn check_refuses_a_data_url_serve_would_refuse_without_showing_its_password() {
    let env = [
        ("ORDER_DESK_URL", "http://127.0.0.1:1"),
        ("MOCK_MODEL_URL", "http://127.0.0.1:2"),
    ];
    let config = example();
    let config = config.to_str().unwrap();
    let good = rein_check(
        &[
            config,
            "--data",
            "postgres://rein:pw-kept-secret-3@db.internal:5432/rein",
        ],
        &env,
    );
    assert_eq!(
        good.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    for (data, reason) in [
        (
            "postgres://rein:pw-kept-secret-3@db.internal/rein?sslmode=require&sslcert=/c.pem",
            "sslcert: client certificates are not supported",
        ),
        (
            "postgres://rein:pw-kept-secret-3@db.internal/rein?sslmode=verify-full",
            "sslrootcert=PATH",
        ),
        (
            "postgres://rein:pw-kept-secret-3@db.internal/rein?sslmode=verify-ca&sslrootcert=/nonexistent/ca.pem",
            "/nonexistent/ca.pem",
        ),
        (
            "postgres://rein:pw-kept-secret-3@db.internal:99999/rein",
            "invalid",
        ),
        (
            "postgres://rein:pw-kept-secret-3@db.internal:5432/",
            "naming its database",
        ),
    ] {
        let out = rein_check(&[config, "--json", "--data", data], &env);
        assert_eq!(out.status.code(), Some(1), "{data}");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let problem = &doc["problems"][0];
        assert_eq!(problem["field"], "--data", "{doc}");
        assert!(
            problem["message"].as_str().unwrap().contains(reason),
            "{doc}"
        );
        assert!(!doc.to_string().contains("pw-kept-secret-3"), "{doc}");
        assert!(
            problem["file"]
                .as_str()
                .unwrap()
                .contains("[redacted]@db.internal"),
            "{doc}"
        );
    }
}

/// `server.quotas.run_slots` that leave batch work fewer slots than the
/// queue workers and their tenant floor: a warning naming the field, its
/// line and the numbers; the check still passes (the server works, with
/// less). Enough slots: no warning.
#[test]
fn too_few_batch_slots_for_the_workers_and_the_floor_is_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    let config = answering_config(
        dir.path(),
        "[server.queue]\nworkers = 3\n[server.quotas]\nrun_slots = 4\n",
    );
    let path = config.to_str().unwrap();
    let out = rein_check(&[path], &[]);
    assert!(out.status.success(), "a warning, not a refusal");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "warning: {path}:10:1: server.quotas.run_slots: 3 batch slots (run_slots 4 - \
             interactive_reserve 1) for 4 queue workers (queue.workers 3 + the tenant floor 1): \
             the floor is not kept"
        )),
        "{stderr}"
    );
    let out = rein_check(&[path, "--json"], &[]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true);
    assert_eq!(doc["warnings"][0]["field"], "server.quotas.run_slots");
    assert_eq!(doc["warnings"][0]["line"], 10);

    let dir = tempfile::tempdir().unwrap();
    let enough = answering_config(
        dir.path(),
        "[server.queue]\nworkers = 3\n[server.quotas]\nrun_slots = 5\n",
    );
    let out = rein_check(&[enough.to_str().unwrap(), "--json"], &[]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["warnings"], serde_json::json!([]), "{doc}");
}

/// An agent without a `[budget]` runs under rein's defaults: `--explain`
/// shows them, marked, beside the limits the config sets.
#[test]
fn explain_shows_every_limit_an_agent_gets_with_the_defaults_marked() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = fs::read_to_string(example()).unwrap();
    config.push_str(
        "\n[agents.bare]\nprovider = \"replay\"\nmodel = \"gpt-4o-mini\"\n\
         system_prompt = \"Look orders up.\"\ntools = [\"get_order\", \"send_email\", \"ping\"]\n\
         [agents.bare.approval]\nfrom_tier = \"high\"\n\
         [tools.ping]\ndescription = \"Is the desk up?\"\nclass = \"read\"\n\
         schema = { type = \"object\", properties = {} }\n\
         adapter = { kind = \"http\", url = \"http://127.0.0.1:7001/ping\" }\n",
    );
    fs::write(dir.path().join("rein.toml"), config).unwrap();
    fs::copy(
        example().with_file_name("demo.script.json"),
        dir.path().join("demo.script.json"),
    )
    .unwrap();
    let config = dir.path().join("rein.toml");
    let env = [
        ("ORDER_DESK_URL", "http://127.0.0.1:7001"),
        ("MOCK_MODEL_URL", "http://127.0.0.1:7002"),
    ];
    let out = rein_check(&[config.to_str().unwrap(), "--explain"], &env);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bare: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "agent bare:")
        .take(8)
        .collect();
    assert_eq!(
        bare,
        [
            "agent bare:",
            "  budget: 40 steps (default), 5m wall clock (default), 1m of it kept for compensation, 200000 tokens (default), no cost ceiling",
            "  per turn: at most 16 calls (default); an action repeated more than 3 times ends the run",
            "  retries: up to 4 attempts (default) per call (irreversible tools: one)",
            "  approval: calls to tools of tier high or above wait for a human, up to 1d; the wall clock stops while they wait",
            // A tool with only a name, description, schema, class and
            // adapter passes, and what rein chose for it is shown.
            "  tool ping (rein's defaults; set them to override): resource_group ping (its own), side_effect_tier none (from class read), owner unassigned, latency observed, planned at a p99 of 5 s until 50 calls are measured",
            "  resource group order_api: 20/s, bursts of 40, at most 8 at once",
            "  resource group ping: ungoverned",
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains("  budget: 10 steps, 30 s wall clock, 6 s of it kept for compensation, 50000 tokens, no cost ceiling"),
        "the example's own budget: {stdout}"
    );
    let out = rein_check(&[config.to_str().unwrap(), "--explain", "--json"], &env);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc["explain"]["bare"][0],
        "  budget: 40 steps (default), 5m wall clock (default), 1m of it kept for compensation, 200000 tokens (default), no cost ceiling"
    );
}

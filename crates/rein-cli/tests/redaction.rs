//! Issue 12 item 3: the secrets rein holds appear nowhere it writes.
//!
//! Canary secrets sit in a provider key, a tool header, a tool URL's query
//! and path (both `${VAR}`s) and a literal query; faults put each in an
//! error path — the mock model answers 401 quoting the `Authorization`
//! header, and the tools' URLs refuse connections, so reqwest's error names
//! the URL. A real `rein serve` (at `RUST_LOG=debug`, the most it logs),
//! `rein run` and `rein check` then run the scenarios, and no canary may
//! appear in the server's stderr, `/metrics`, any event, ledger row, run,
//! problem body or gateway error, the CLI's output, or any byte of the
//! SQLite files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rein_testkit::mock_model::{MockModel, MockModelConfig};
use serde_json::{Value, json};

const PROVIDER_KEY: &str = "sk-canary-provider-5f3a9";
const HEADER_TOKEN: &str = "hdr-canary-77e1c0";
const QUERY_TOKEN: &str = "qry-canary-91b2d4";
const PATH_TOKEN: &str = "pth-canary-a1b2c3d4";
const LITERAL_QUERY: &str = "lit-canary-3c3c";
/// sha256("client-canary-key-0042"), the API key clients present.
const CLIENT_KEY: &str = "client-canary-key-0042";

fn canaries() -> Vec<String> {
    vec![
        PROVIDER_KEY.into(),
        HEADER_TOKEN.into(),
        QUERY_TOKEN.into(),
        PATH_TOKEN.into(),
        LITERAL_QUERY.into(),
        CLIENT_KEY.into(),
        digest(CLIENT_KEY),
    ]
}

fn digest(key: &str) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(key.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Fails naming `what` and the canary if any canary is in `text`.
fn assert_clean(what: &str, text: &str) {
    for canary in canaries() {
        assert!(
            !text.contains(&canary),
            "{what} leaks {canary}:\n{}",
            &text[text.find(&canary).unwrap().saturating_sub(300)..]
                .chars()
                .take(600)
                .collect::<String>()
        );
    }
}

fn env(model_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CANARY_MODEL_KEY", PROVIDER_KEY.into()),
        ("CANARY_HEADER", HEADER_TOKEN.into()),
        ("CANARY_QUERY", QUERY_TOKEN.into()),
        ("CANARY_PATH", PATH_TOKEN.into()),
        ("MODEL_URL", model_url.into()),
    ]
}

fn config(dir: &Path) -> std::path::PathBuf {
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [
  {"text": "", "tool_calls": [
     {"id": "c1", "name": "lookup", "arguments": {"id": "A-1"}},
     {"id": "c2", "name": "notify", "arguments": {"id": "A-1"}}],
   "usage": {"input": 10, "output": 5}},
  {"text": "Could not look it up.", "usage": {"input": 20, "output": 5}}
]}"#,
    )
    .unwrap();
    let text = format!(
        r#"
[providers.mock]
kind = "openai"
base_url = "${{MODEL_URL}}/v1"
api_key_env = "CANARY_MODEL_KEY"

[providers.script]
kind = "scripted"
script = "script.json"

[models.chat]
provider = "mock"
model = "mock-model"

[resource_groups.api]

[tools.lookup]
description = "Look a thing up."
class = "read"
resource_group = "api"
side_effect_tier = "none"
owner = "ops"
latency = {{ mode = "observe", fallback_p99 = "1s" }}
schema = {{ type = "object", properties = {{ id = {{ type = "string", description = "the id" }} }} }}
adapter = {{ kind = "http", url = "http://127.0.0.1:1/tools/lookup?api_key=${{CANARY_QUERY}}&sig={LITERAL_QUERY}" }}

[tools.notify]
description = "Notify someone."
class = "read"
resource_group = "api"
side_effect_tier = "none"
owner = "ops"
latency = {{ mode = "observe", fallback_p99 = "1s" }}
schema = {{ type = "object", properties = {{ id = {{ type = "string", description = "the id" }} }} }}
[tools.notify.adapter]
kind = "http"
url = "http://127.0.0.1:1/bot${{CANARY_PATH}}/notify"
headers = {{ "X-Api-Token" = "${{CANARY_HEADER}}" }}

[agents.leaky]
provider = "mock"
model = "mock-model"

[agents.tooly]
provider = "script"
model = "m"
tools = ["lookup", "notify"]
[agents.tooly.retry]
max_attempts = 2
base_delay = "1ms"
max_delay = "2ms"

[[server.api_keys]]
tenant = "acme"
sha256 = "{}"
name = "leak-test"
"#,
        digest(CLIENT_KEY)
    );
    std::fs::write(dir.join("rein.toml"), text).unwrap();
    dir.join("rein.toml")
}

/// A child process, killed when dropped (a failed assertion included).
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A `rein serve` at `RUST_LOG=debug` with stderr in `log`; its address.
fn serve(config: &Path, data: &Path, log: &Path, env: &[(&str, String)]) -> (Killed, String) {
    let child = Killed(
        Command::new(env!("CARGO_BIN_EXE_rein"))
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .env("RUST_LOG", "debug")
            .args(["serve", "--config"])
            .arg(config)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(data)
            .stderr(Stdio::from(std::fs::File::create(log).unwrap()))
            .spawn()
            .unwrap(),
    );
    let started = Instant::now();
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(rest) = text.split("listening on http://").nth(1) {
            let addr = rest.split_whitespace().next().unwrap().to_owned();
            return (child, addr);
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "rein serve did not start:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn rein(args: &[&str], env: &[(&str, String)]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rein"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .env("RUST_LOG", "debug")
        .args(args)
        .output()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_secrets_appear_nowhere_rein_writes() {
    let model = MockModel::start_with(
        MockModelConfig::default()
            .with_api_key("the-right-key-0000")
            .with_echoed_authorization(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let env = env(model.base_url());
    let data = dir.path().join("serve-data");
    std::fs::create_dir_all(&data).unwrap();
    let log = dir.path().join("serve.log");
    let (child, addr) = serve(&config, &data.join("rein.db"), &log, &env);
    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://{addr}{path}");
    let mut seen = Vec::new();
    let mut saw_redacted = 0;

    // A run whose provider rejects the key and quotes it back; a run whose
    // tools refuse connections at URLs holding the secrets.
    for agent in ["leaky", "tooly"] {
        let answer = client
            .post(url(&format!("/v1/agents/{agent}/runs")))
            .bearer_auth(CLIENT_KEY)
            .json(&json!({"input": "look up A-1"}))
            .send()
            .await
            .unwrap();
        let body = answer.text().await.unwrap();
        let run: Value = serde_json::from_str(&body).unwrap();
        let id = run["run_id"]
            .as_str()
            .unwrap_or_else(|| panic!("{body}"))
            .to_owned();
        seen.push((format!("run {agent}"), body));
        for path in ["", "/events", "/ledger", "/handoff"] {
            let text = client
                .get(url(&format!("/v1/runs/{id}{path}")))
                .bearer_auth(CLIENT_KEY)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            saw_redacted += text.matches("[redacted]").count();
            seen.push((format!("GET /v1/runs/{{{agent}}}{path}"), text));
        }
    }
    // The gateway's error for the same rejected key, whole and streamed.
    for stream in [false, true] {
        let answer = client
            .post(url("/v1/chat/completions"))
            .bearer_auth(CLIENT_KEY)
            .json(&json!({"model": "chat", "stream": stream,
                          "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        let status = answer.status();
        let text = answer.text().await.unwrap();
        assert_clean("the gateway's error", &text);
        assert!(
            text.contains("[redacted]"),
            "the 401 body is kept, redacted ({status}): {text}"
        );
        seen.push((format!("gateway stream={stream} ({status})"), text));
    }
    let metrics = client
        .get(url("/metrics"))
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap();
    seen.push(("/metrics".into(), metrics.text().await.unwrap()));
    // The mock did get the key: the fault really quoted it.
    assert!(
        model
            .requests()
            .iter()
            .any(|r| r.authorization.as_deref() == Some(&format!("Bearer {PROVIDER_KEY}"))),
        "the provider key was sent"
    );
    drop(child);
    let server_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        server_log.contains("rejected its key") && server_log.contains("CANARY_MODEL_KEY"),
        "the rejected key is logged naming its variable:\n{server_log}"
    );
    seen.push(("rein serve stderr".into(), server_log));

    // The CLI: `rein run` in both output shapes, and `rein check` on the
    // config and on a broken copy quoting an interpolated value.
    let run_db = dir.path().join("run-data/rein.db");
    let run_db = run_db.to_str().unwrap();
    let config_arg = config.to_str().unwrap();
    for agent in ["leaky", "tooly"] {
        for json_flag in [&["--json"][..], &[][..]] {
            let mut args = vec![
                "run",
                "-c",
                config_arg,
                "-a",
                agent,
                "-i",
                "look up A-1",
                "--data",
                run_db,
            ];
            args.extend_from_slice(json_flag);
            let out = rein(&args, &env);
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            saw_redacted += stdout.matches("[redacted]").count();
            seen.push((format!("rein run {agent} {json_flag:?} stdout"), stdout));
            seen.push((
                format!("rein run {agent} stderr"),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            ));
        }
    }
    let out = rein(&["check", config_arg], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    seen.push((
        "rein check".into(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ));
    let broken = dir.path().join("broken.toml");
    let text = std::fs::read_to_string(&config).unwrap().replace(
        "url = \"http://127.0.0.1:1/bot${CANARY_PATH}/notify\"",
        "url = \"not a url ${CANARY_PATH} ${CANARY_HEADER}\"",
    );
    std::fs::write(&broken, text).unwrap();
    for json_flag in [&["--json"][..], &[][..]] {
        let mut args = vec!["check", broken.to_str().unwrap()];
        args.extend_from_slice(json_flag);
        let out = rein(&args, &env);
        assert_eq!(out.status.code(), Some(1), "the broken config is refused");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("tools.notify.adapter.url"), "{text}");
        seen.push((format!("rein check broken {json_flag:?}"), text));
    }

    // The stores, byte by byte (the database and its WAL).
    for store in [data.as_path(), Path::new(run_db).parent().unwrap()] {
        for entry in std::fs::read_dir(store).unwrap() {
            let path = entry.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            seen.push((
                path.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }

    assert!(saw_redacted > 0, "the faults put secrets in error paths");
    for (what, text) in &seen {
        assert_clean(what, text);
    }
}

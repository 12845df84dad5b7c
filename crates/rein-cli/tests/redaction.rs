//! Issue 12 item 3: the secrets rein holds appear nowhere it writes.
//!
//! Canary secrets sit in a provider key, tool headers (one from `${VAR}`,
//! one written literally), a tool URL's query and path (both `${VAR}`s), a
//! literal query and a command tool's environment; faults put each in an
//! error path or a result — the mock model answers 401 quoting the
//! `Authorization` header, a second one breaks its stream mid-way with an
//! error quoting it, the tools' URLs refuse connections (reqwest's error
//! names the URL), and two tools succeed echoing their credential (a
//! debug endpoint, a script printing its variable). A real `rein serve`
//! (at `RUST_LOG=debug`, the most it logs), `rein run` (text and JSON
//! logs) and `rein check` then run the scenarios, and no canary may appear
//! in the server's stderr, `/metrics`, any event, ledger row, run, problem
//! body or gateway error, the CLI's output, or any byte of the SQLite
//! files; each sink where a secret was put says `[redacted]` instead.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, StreamFault};
use serde_json::{Value, json};

const PROVIDER_KEY: &str = "sk-canary-provider-5f3a9";
const HEADER_TOKEN: &str = "hdr-canary-77e1c0";
const QUERY_TOKEN: &str = "qry-canary-91b2d4";
const PATH_TOKEN: &str = "pth-canary-a1b2c3d4";
const LITERAL_QUERY: &str = "lit-canary-3c3c";
const LITERAL_HEADER: &str = "lit-hdr-canary-5d5d";
const ENV_TOKEN: &str = "env-canary-6e6e6e";
/// sha256("client-canary-key-0042"), the API key clients present.
const CLIENT_KEY: &str = "client-canary-key-0042";

fn canaries() -> Vec<String> {
    vec![
        PROVIDER_KEY.into(),
        HEADER_TOKEN.into(),
        QUERY_TOKEN.into(),
        PATH_TOKEN.into(),
        LITERAL_QUERY.into(),
        LITERAL_HEADER.into(),
        ENV_TOKEN.into(),
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

fn env(model_url: &str, model2_url: &str, echo_url: &str) -> Vec<(&'static str, String)> {
    vec![
        ("CANARY_MODEL_KEY", PROVIDER_KEY.into()),
        ("CANARY_HEADER", HEADER_TOKEN.into()),
        ("CANARY_QUERY", QUERY_TOKEN.into()),
        ("CANARY_PATH", PATH_TOKEN.into()),
        ("CANARY_ENV", ENV_TOKEN.into()),
        ("MODEL_URL", model_url.into()),
        ("MODEL2_URL", model2_url.into()),
        ("ECHO_URL", echo_url.into()),
    ]
}

/// A loopback HTTP tool that answers every request 200 with its
/// credential headers echoed in the body, as a debug endpoint does; its
/// origin.
async fn echo_server() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                let head_end = loop {
                    if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        break at + 4;
                    }
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&seen[..head_end]).into_owned();
                let header = |name: &str| {
                    head.lines()
                        .find_map(|l| {
                            let (n, v) = l.split_once(':')?;
                            n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
                        })
                        .unwrap_or_default()
                };
                let length: usize = header("content-length").parse().unwrap_or(0);
                while seen.len() < head_end + length {
                    match socket.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let body = json!({"debug": {
                    "x-api-token": header("x-api-token"),
                    "authorization": header("authorization"),
                }})
                .to_string();
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

fn config(dir: &Path) -> std::path::PathBuf {
    std::fs::write(
        dir.join("script.json"),
        r#"{"turns": [
  {"text": "", "tool_calls": [
     {"id": "c1", "name": "lookup", "arguments": {"id": "A-1"}},
     {"id": "c2", "name": "notify", "arguments": {"id": "A-1"}},
     {"id": "c3", "name": "echo", "arguments": {"id": "A-1"}},
     {"id": "c4", "name": "envecho", "arguments": {"id": "A-1"}}],
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
max_output_tokens = {{ "mock-model" = 4096 }}

[providers.script]
kind = "scripted"
script = "script.json"

[providers.mock2]
kind = "openai"
base_url = "${{MODEL2_URL}}/v1"
api_key_env = "CANARY_MODEL_KEY"
max_output_tokens = {{ "mock-model" = 4096 }}

[models.chat]
provider = "mock"
model = "mock-model"

[models.chat2]
provider = "mock2"
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

[tools.echo]
description = "Echo what it is sent."
class = "idempotent_write"
resource_group = "api"
side_effect_tier = "low"
owner = "ops"
latency = {{ mode = "observe", fallback_p99 = "1s" }}
schema = {{ type = "object", properties = {{ id = {{ type = "string", description = "the id" }} }} }}
[tools.echo.adapter]
kind = "http"
url = "${{ECHO_URL}}/tools/echo"
headers = {{ "X-Api-Token" = "${{CANARY_HEADER}}", "Authorization" = "Bearer {LITERAL_HEADER}" }}

[tools.envecho]
description = "Print its token."
class = "read"
resource_group = "api"
side_effect_tier = "none"
owner = "ops"
latency = {{ mode = "observe", fallback_p99 = "1s" }}
schema = {{ type = "object", properties = {{ id = {{ type = "string", description = "the id" }} }} }}
[tools.envecho.adapter]
kind = "command"
program = "sh"
args = ["-c", "printf '{{\"token\": \"%s\"}}' \"$API_TOKEN\""]
env = {{ API_TOKEN = "${{CANARY_ENV}}" }}

[agents.leaky]
provider = "mock"
model = "mock-model"

[agents.tooly]
provider = "script"
model = "m"
tools = ["lookup", "notify", "echo", "envecho"]
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

/// Fails naming `what` unless `text` says `[redacted]`: a secret was put
/// in this sink, so it must show it was taken out (not that the fault
/// never reached it).
fn assert_redacted(what: &str, text: &str) {
    assert!(
        text.contains("[redacted]"),
        "{what} shows no redaction:\n{text}"
    );
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
    // Accepts any key, and breaks its stream after two events with an
    // error quoting the key it was sent.
    let model2 = MockModel::start_with(
        MockModelConfig::new(vec![
            Reply::text("a streamed answer cut short")
                .with_stream_fault(StreamFault::Error { after: 2 }),
        ])
        .with_echoed_authorization(),
    )
    .await
    .unwrap();
    let echo = echo_server().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path());
    let env = env(model.base_url(), model2.base_url(), &echo);
    let data = dir.path().join("serve-data");
    std::fs::create_dir_all(&data).unwrap();
    let log = dir.path().join("serve.log");
    let (child, addr) = serve(&config, &data.join("rein.db"), &log, &env);
    let client = reqwest::Client::new();
    let url = |path: &str| format!("http://{addr}{path}");
    let mut seen = Vec::new();
    let get = |path: String| {
        let client = client.clone();
        let url = url(&path);
        async move {
            client
                .get(url)
                .bearer_auth(CLIENT_KEY)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };

    // A run whose provider rejects the key and quotes it back; a run whose
    // tools refuse connections at URLs holding the secrets, and whose
    // other tools succeed echoing their credentials.
    let mut runs = Vec::new();
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
            let text = get(format!("/v1/runs/{id}{path}")).await;
            seen.push((format!("GET /v1/runs/{{{agent}}}{path}"), text));
        }
        runs.push(id);
    }
    // Where each secret was put, it is shown taken out.
    let (leaky, tooly) = (&runs[0], &runs[1]);
    assert_redacted(
        "the leaky run (401 reason)",
        &get(format!("/v1/runs/{leaky}")).await,
    );
    assert_redacted(
        "the leaky run's events",
        &get(format!("/v1/runs/{leaky}/events")).await,
    );
    let report = get(format!("/v1/runs/{tooly}")).await;
    assert_redacted("the tooly run (URLs in reasons)", &report);
    let ledger: Value =
        serde_json::from_str(&get(format!("/v1/runs/{tooly}/ledger")).await).unwrap_or(Value::Null);
    let ledger_text = ledger.to_string();
    let report_doc: Value = serde_json::from_str(&report).unwrap();
    let results = report_doc.to_string();
    assert!(
        results.contains(r#""x-api-token":"[redacted]""#)
            && results.contains(r#""authorization":"[redacted]""#)
            && results.contains(r#""token":"[redacted]""#),
        "the echoed credentials are redacted in the results: {results}\nledger: {ledger_text}"
    );
    assert!(
        ledger["records"].as_array().is_some_and(|r| r
            .iter()
            .any(|r| r["tool"] == "echo" && r["result"]["debug"]["x-api-token"] == "[redacted]")),
        "the write's ledger result is redacted: {ledger_text}"
    );
    let events = get(format!("/v1/runs/{tooly}/events")).await;
    assert_redacted("the tooly run's events", &events);

    // The gateway's error for the same rejected key, whole and streamed
    // (the 401 comes before the stream starts), and a stream that breaks
    // mid-way with an in-band error quoting the key.
    for (model_name, stream) in [("chat", false), ("chat", true), ("chat2", true)] {
        let answer = client
            .post(url("/v1/chat/completions"))
            .bearer_auth(CLIENT_KEY)
            .json(&json!({"model": model_name, "stream": stream,
                          "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        let status = answer.status();
        let text = answer.text().await.unwrap();
        let what = format!("gateway {model_name} stream={stream} ({status})");
        assert_redacted(&what, &text);
        if model_name == "chat2" {
            assert_eq!(status, 200, "{text}");
            assert!(
                text.contains("stream_error") && text.contains("data: "),
                "the error is in band, mid-stream: {text}"
            );
        }
        seen.push((what, text));
    }
    seen.push(("/metrics".into(), get("/metrics".into()).await));
    // The mocks did get the key: the faults really quoted it.
    for m in [&model, &model2] {
        assert!(
            m.requests()
                .iter()
                .any(|r| r.authorization.as_deref() == Some(&format!("Bearer {PROVIDER_KEY}"))),
            "the provider key was sent"
        );
    }
    drop(child);
    let server_log = std::fs::read_to_string(&log).unwrap();
    assert!(
        server_log.contains("rejected its key") && server_log.contains("CANARY_MODEL_KEY"),
        "the rejected key is logged naming its variable:\n{server_log}"
    );
    assert_redacted("rein serve stderr", &server_log);
    seen.push(("rein serve stderr".into(), server_log));

    // The CLI: `rein run` in both output shapes and with JSON logs, and
    // `rein check` on the config and on a broken copy quoting an
    // interpolated value.
    let run_db = dir.path().join("run-data/rein.db");
    let run_db = run_db.to_str().unwrap();
    let config_arg = config.to_str().unwrap();
    for agent in ["leaky", "tooly"] {
        for flags in [&["--json"][..], &[][..], &["--log-format", "json"][..]] {
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
            args.extend_from_slice(flags);
            let out = rein(&args, &env);
            let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
            let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            assert_redacted(&format!("rein run {agent} {flags:?} stdout"), &stdout);
            if flags == ["--log-format", "json"] {
                for line in stderr.lines() {
                    let doc: Value = serde_json::from_str(line)
                        .unwrap_or_else(|e| panic!("{e}: a stderr line is not JSON: {line}"));
                    assert_clean("a JSON log line", &doc.to_string());
                }
                assert_redacted(&format!("rein run {agent} JSON logs"), &stderr);
            }
            seen.push((format!("rein run {agent} {flags:?} stdout"), stdout));
            seen.push((format!("rein run {agent} {flags:?} stderr"), stderr));
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
        assert_redacted("rein check's problem quoting the values", &text);
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

    for (what, text) in &seen {
        assert_clean(what, text);
    }
}

//! A property-based fuzzer against `rein serve`'s own `/openapi.json`:
//! schemathesis generates valid and invalid requests for every documented
//! operation and checks every answer — no 5xx, only documented statuses,
//! content types and bodies, invalid input refused, valid input accepted,
//! auth enforced, one tenant's runs hidden from another — and the server is
//! still alive afterwards.
//!
//! The server is real: the example config with API keys for two tenants, a
//! SQLite file, the testkit's order desk and mock model on loopback, so
//! generated submissions run agents to their end.
//!
//! The fuzzer is pointed at `http://127.0.0.1:PORT`, so its requests carry
//! a loopback `Host` (allowed without `server.allowed_hosts`) and no
//! `Origin`; the document tells it every POST takes `application/json`.
//!
//! Schemathesis is Python. `.ci/run` installs it into `$REIN_PYTHON`'s
//! venv; without it this test says how to install it and passes, except
//! under CI (`CI=true`), where a missing schemathesis fails it. The seed
//! and the number of examples are pinned so a run is reproducible and
//! takes seconds; set `REIN_API_FUZZ_SEED` and `REIN_API_FUZZ_EXAMPLES` to
//! explore further.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::Timestamp;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rein_testkit::mock_model::{MockModel, MockModelConfig};
use rein_testkit::order_desk::OrderDesk;

mod common;
use common::{Server, example_config};

/// The seed CI fuzzes with (the same as its proptest seed).
const SEED: &str = "20261129";
/// Test cases per operation and phase: enough to reach every operation's
/// failure modes, few enough for well under a minute on two cores.
const MAX_EXAMPLES: &str = "40";
/// The fuzzer's own wall-clock limit, after which it is killed.
const FUZZ_TIMEOUT: Duration = Duration::from_secs(240);

/// The tenants the fuzzer acts for, their bearer keys and the keys'
/// SHA-256 as the config holds them (`printf %s KEY | sha256sum`).
const TENANTS: [(&str, &str, &str); 2] = [
    (
        "acme",
        "rein-fuzz-acme",
        "f5e4523590ef4941ba5f364ebbd6c2a8408ca395847baf464ba9dc63564b9fb6",
    ),
    (
        "globex",
        "rein-fuzz-globex",
        "8cdcee6dcc0300f636f23804cd713298da8d7f34b5a80a9aae90ea16b0f31eff",
    ),
];

/// Schemathesis' config (`--config-file`).
const SCHEMATHESIS_TOML: &str = r#"
# Two tenants (Web Fuzzing Commons auth, written by the test): requests act
# for the first; object_level_authorization replays its reads of its own
# runs as the other, which must not see them.
[auth.wfc]
path = "auth.json"
peers = ["acme", "globex"]

# The agents of the example config: most generated submissions name one,
# so runs really start; the rest probe unknown agents.
[dictionaries.agents]
values = ["order_desk", "order_desk_live"]

# `GET /v1/runs?cursor=` takes only a token a listing gave (opaque, so a
# schema cannot describe it); generated requests carry one of these,
# written by the test (any well-formed token is valid for every tenant: it
# only says where a page starts).
[dictionaries.cursors]
values = [CURSORS]

[parameters]
"path.name" = { dictionary = "agents", probability = 0.8 }
"query.cursor" = { dictionary = "cursors", probability = 1.0 }

# positive_data_acceptance: a schema-valid submission may still get 422
# `idempotency-mismatch` when the fuzzer happens to reuse an
# Idempotency-Key with another body. That is seed 004's table, documented
# on the operation, and depends on earlier requests, which a schema cannot
# express. (5xx stay expected here because not_a_server_error reports them.)
[[operations]]
include-operation-id = "create_run"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "404", "409", "422", "5xx"]

# The run listing: the coverage phase ignores dictionaries and sends
# boundary strings as the cursor ("0"), which the server refuses with 400
# `parameter: cursor`, as documented. The other parameters' ranges are held
# to the parser by rein-server's `listing` unit test
# (`the_document_states_exactly_the_ranges_parse_accepts`).
[[operations]]
include-operation-id = "list_runs"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401"]

# The gateway: the same 422 (a key reused across operations is "another
# request"), and 400 for an Idempotency-Key on `stream: true` (seed 004's
# table; the two are documented together, a schema cannot tie them). The
# example config has no [models.*], so valid requests end 404 before any
# provider is asked.
[[operations]]
include-operation-id = "chat_completions"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "422", "429", "5xx"]

# The Anthropic-compatible gateway: the same reasons.
[[operations]]
include-operation-id = "messages"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "422", "429", "5xx"]

# Anthropic's token count: 400 for what a schema cannot tie to a message
# (which blocks a role may hold); the same 404 without [models.*].
[[operations]]
include-operation-id = "count_tokens"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "429", "5xx"]

# The Responses API: the same reasons, and 400 for what a schema cannot
# tie to the request (an item's members, which depend on its `type`; a
# refused `previous_response_id`).
[[operations]]
include-operation-id = "responses"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "422", "429", "5xx"]

# Embeddings: as chat completions, 400 for a member the document does not
# list (refused as OpenAI refuses it) and an integer written as a float
# (`8.0`); the same 422 for a reused Idempotency-Key, and the same 404
# without [models.*].
[[operations]]
include-operation-id = "embeddings"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "404", "409", "422", "429", "5xx"]
"#;

/// How schemathesis is started: a program and the arguments before `run`.
struct Schemathesis {
    program: PathBuf,
    prefix: Vec<&'static str>,
}

impl Schemathesis {
    fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.prefix);
        cmd
    }

    fn answers(&self) -> bool {
        self.command()
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// `$REIN_PYTHON -m schemathesis.cli` (set by `.ci/run`), else the
    /// venv `.ci/run` makes, else `st` on the `PATH`.
    ///
    /// # Panics
    ///
    /// When `REIN_PYTHON` is set but has no schemathesis: that is a broken
    /// install, not an absent one.
    fn find() -> Option<Schemathesis> {
        let module = |python: PathBuf| Schemathesis {
            program: python,
            prefix: vec!["-m", "schemathesis.cli"],
        };
        if let Some(python) = std::env::var_os("REIN_PYTHON").filter(|p| !p.is_empty()) {
            let st = module(PathBuf::from(&python));
            assert!(
                st.answers(),
                "REIN_PYTHON={} has no schemathesis; install it with \
                 `$REIN_PYTHON -m pip install schemathesis` (or run .ci/run)",
                python.to_string_lossy()
            );
            return Some(st);
        }
        let venv = std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(".cache/rein-venv/bin/python"));
        let candidates = venv.into_iter().map(module).chain([Schemathesis {
            program: PathBuf::from("st"),
            prefix: Vec::new(),
        }]);
        candidates.into_iter().find(Schemathesis::answers)
    }
}

/// Valid listing cursors, as TOML strings: the newest and the oldest
/// place a page can start from.
fn cursors() -> String {
    [(253_402_300_799_999, "zzzz"), (0, "run")]
        .iter()
        .map(|(created_at_ms, run_id)| {
            let cursor = rein_store::RunCursor {
                created_at_ms: Timestamp::from_millis(*created_at_ms),
                run_id: rein_core::RunId::new(*run_id).unwrap(),
            };
            format!("\"{}\"", cursor.to_token())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs `st` to its end, or kills it after [`FUZZ_TIMEOUT`]; whether it
/// succeeded, and its output.
fn fuzz(st: &Schemathesis, server: &Server, dir: &Path) -> (bool, String) {
    let seed = std::env::var("REIN_API_FUZZ_SEED").unwrap_or_else(|_| SEED.into());
    let examples = std::env::var("REIN_API_FUZZ_EXAMPLES").unwrap_or_else(|_| MAX_EXAMPLES.into());
    std::fs::write(
        dir.join("schemathesis.toml"),
        SCHEMATHESIS_TOML.replace("CURSORS", &cursors()),
    )
    .unwrap();
    let auth: Vec<serde_json::Value> = TENANTS
        .iter()
        .map(|(tenant, key, _)| {
            serde_json::json!({"name": tenant,
                "fixedHeaders": [{"name": "Authorization", "value": format!("Bearer {key}")}]})
        })
        .collect();
    std::fs::write(
        dir.join("auth.json"),
        serde_json::json!({ "auth": auth }).to_string(),
    )
    .unwrap();
    let output = std::fs::File::create(dir.join("schemathesis.out")).unwrap();
    let mut cmd = st.command();
    cmd.current_dir(dir)
        .args(["--config-file", "schemathesis.toml", "run"])
        .arg(server.url("/openapi.json"))
        .args(["--checks", "all"])
        .args(["--seed", &seed, "--max-examples", &examples])
        // One worker: with a pinned seed, the same requests in the same
        // order. No example database: a run never replays another's.
        .args(["--workers", "1", "--generation-database", "none"])
        .args(["--request-timeout", "30", "--no-color"])
        .stdout(output.try_clone().unwrap())
        .stderr(output);
    let command_line = format!("{cmd:?}");
    let mut child = cmd.spawn().unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if started.elapsed() > FUZZ_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = std::fs::read_to_string(dir.join("schemathesis.out")).unwrap_or_default();
    let summary = format!(
        "{command_line}\nfinished in {:.1?}: {}\n{out}",
        started.elapsed(),
        status.map_or_else(|| "killed after the timeout".to_owned(), |s| s.to_string())
    );
    (status.is_some_and(|s| s.success()), summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_server_error_and_no_schema_violation() {
    let Some(st) = Schemathesis::find() else {
        common::missing_part(
            "schemathesis not installed (run .ci/run, or \
             `python3 -m venv ~/.cache/rein-venv && ~/.cache/rein-venv/bin/pip install schemathesis`, \
             or set REIN_PYTHON to a python that has it)",
        );
        return;
    };
    let desk = OrderDesk::start().await.unwrap();
    let model = MockModel::start_with(MockModelConfig::default())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let keys: String = TENANTS
        .iter()
        .map(|(tenant, _, sha)| {
            format!("[[server.api_keys]]\ntenant = \"{tenant}\"\nsha256 = \"{sha}\"\n")
        })
        .collect();
    let config = example_config(dir.path(), &keys);
    let mut server = Server::start_with_env(
        &config,
        &dir.path().join("rein.db"),
        &[
            ("ORDER_DESK_URL", desk.base_url()),
            ("MOCK_MODEL_URL", model.base_url()),
        ],
    );
    // The keys are accepted (else every request would be a 401 and the
    // fuzzer would test nothing past the auth check).
    let client = reqwest::Client::new();
    for (tenant, key, _) in TENANTS {
        let probe = client
            .get(server.url("/v1/runs/none"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(probe.status(), 404, "{tenant}'s key is accepted");
    }

    let (passed, output) = {
        let (st, server, dir) = (&st, &server, dir.path());
        tokio::task::block_in_place(|| fuzz(st, server, dir))
    };
    let alive = server.is_running();
    let health = client.get(server.url("/healthz")).send().await;
    assert!(
        alive && health.is_ok_and(|r| r.status() == 200),
        "rein serve died or stopped answering under the fuzzer\n{output}\n--- server log ---\n{}",
        server.log_tail()
    );
    assert!(
        passed,
        "schemathesis found failures\n{output}\n--- server log ---\n{}",
        server.log_tail()
    );
    println!("{output}");
}

//! `rein demo` and `rein run` as real processes, against real loopback
//! services: the testkit's order desk and mock OpenAI-compatible server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_store::RunStore;
use rein_store::Timestamp;
use std::path::PathBuf;
use std::process::{Command, Output};

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use rein_testkit::order_desk::OrderDesk;
use serde_json::{Value, json};

fn example_config() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk/rein.toml")
}

/// Runs the binary off the async runtime, so the services on it keep
/// answering while the child process talks to them.
async fn rein(args: Vec<String>, env: Vec<(&'static str, String)>) -> Output {
    tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rein"));
        cmd.args(&args).env_remove("OPENAI_API_KEY");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("the rein binary runs")
    })
    .await
    .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_ends_in_partial_success_with_one_update_and_no_email() {
    let out = rein(vec!["demo".into()], vec![]).await;
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("outcome: partial_success"), "{stdout}");
    assert!(stdout.contains("recoverable: yes"), "{stdout}");
    assert!(stdout.contains("idempotency_lookup"), "{stdout}");
    assert!(
        stdout.contains("update_delivery_time applied 1 time; send_email sent 0 emails"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_json_is_one_document_with_report_ledger_and_events() {
    let out = rein(vec!["demo".into(), "--json".into()], vec![]).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let doc: Value = serde_json::from_slice(&out.stdout).expect("stdout is one JSON document");
    assert_eq!(doc["report"]["outcome"], "partial_success");
    let ledger: Vec<(&str, &str)> = doc["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["tool"].as_str().unwrap(), r["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ledger,
        vec![
            ("update_delivery_time", "succeeded"),
            ("send_email", "failed")
        ]
    );
    assert!(doc["events"].as_array().unwrap().len() > 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_the_scripted_provider_succeeds_without_faults() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("runs/rein.db");
    let out = rein(
        vec![
            "run".into(),
            "--config".into(),
            example_config().display().to_string(),
            "--agent".into(),
            "order_desk".into(),
            "--input".into(),
            "Move A-1001 to 8 January and tell the buyer.".into(),
            "--data".into(),
            db.display().to_string(),
        ],
        vec![
            ("ORDER_DESK_URL", desk.base_url().to_owned()),
            ("MOCK_MODEL_URL", "http://127.0.0.1:9".into()),
        ],
    )
    .await;
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    assert!(stdout.contains("outcome: succeeded"), "{stdout}");
    assert!(stdout.contains("run_finished"), "{stdout}");
    assert_eq!(desk.applied_count("update_delivery_time"), 1);
    assert_eq!(desk.applied_count("send_email"), 1);
    assert!(db.exists(), "the run is recorded in the SQLite file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_against_an_openai_compatible_server() {
    let desk = OrderDesk::start().await.unwrap();
    // Like the real API, the mock refuses a max_tokens above gpt-4o-mini's
    // documented cap with a 400; the example's budget (50,000 tokens) is
    // far above it.
    let model = MockModel::start_with(
        MockModelConfig::new([
            Reply::tool_call("get_order", &json!({"order_id": "A-1002"})),
            Reply::text("Order A-1002 is confirmed for 7 January."),
        ])
        .with_output_cap("gpt-4o-mini", 16_384)
        .with_metered_usage(),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = rein(
        vec![
            "run".into(),
            "--config".into(),
            example_config().display().to_string(),
            "--agent".into(),
            "order_desk_live".into(),
            "--input".into(),
            "When does A-1002 arrive?".into(),
            "--data".into(),
            dir.path().join("rein.db").display().to_string(),
            "--json".into(),
        ],
        vec![
            ("ORDER_DESK_URL", desk.base_url().to_owned()),
            ("MOCK_MODEL_URL", model.base_url().to_owned()),
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["report"]["outcome"], "succeeded");
    assert_eq!(
        doc["report"]["answer"],
        "Order A-1002 is confirmed for 7 January."
    );
    assert_eq!(model.request_count(), 2);
    // Every call asked for at most the model's cap, in the member
    // gpt-4o-mini takes (never both), and both were answered.
    for request in model.requests() {
        let max = request.body["max_tokens"].as_u64().unwrap();
        assert!(max <= 16_384, "max_tokens {max}");
        assert!(request.body.get("max_completion_tokens").is_none());
    }
    assert_eq!(model.usage_log().len(), 2);
    // What the model side counted is what the report says was consumed,
    // and within the example's budget.
    let counted: u64 = model
        .usage_log()
        .iter()
        .map(|u| u.prompt_tokens + u.completion_tokens)
        .sum();
    assert_eq!(doc["report"]["consumed"]["tokens"].as_u64(), Some(counted));
    assert!(counted <= 50_000);
    // The model was offered the registry's definitions, side effects first.
    let tools = model.requests()[0].body["tools"].clone();
    let email = tools
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "send_email")
        .unwrap();
    assert!(
        email["function"]["description"]
            .as_str()
            .unwrap()
            .starts_with("[irreversible")
    );
    // Cost comes from the config's price table.
    assert!(doc["report"]["consumed"]["cost_usd"].as_f64().unwrap() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_bad_config_names_the_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(&path, "[agents.a]\nprovider = \"nowhere\"\nmodel = \"m\"\nsystem_prompt = \"s\"\ntools = [\"ghost\"]\n").unwrap();
    let out = rein(
        vec![
            "run".into(),
            "--config".into(),
            path.display().to_string(),
            "--agent".into(),
            "a".into(),
            "--input".into(),
            "x".into(),
        ],
        vec![],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("bad.toml"), "{stderr}");
    assert!(stderr.contains("agents.a.provider"), "{stderr}");
    assert!(stderr.contains("agents.a.tools"), "{stderr}");
    assert!(out.stdout.is_empty());
}

/// Issue 14: `rein resume` of a run whose checkpoint cannot be decoded
/// fails and says which field was wrong, instead of resuming with a
/// default transcript; nothing is sent to the tools.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_from_a_corrupted_checkpoint_fails_naming_the_field() {
    use rein_store::{Checkpoint, NewRun, RunStatus, StatusChange, StepCommit};
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("rein.db");
    let run_id = rein_core::RunId::new("r-corrupted").unwrap();
    {
        // A run whose process died after step 1, its checkpoint's
        // transcript damaged.
        let store = rein_store_sqlite::SqliteStore::open(&db).unwrap();
        store
            .create_run(NewRun {
                run_id: run_id.clone(),
                tenant: rein_core::TenantId::new("default").unwrap(),
                agent: "order_desk".into(),
                input: "Move A-1001 to 8 January.".into(),
                parent_run_id: None,
                budget: json!({}),
                created_at_ms: Timestamp::from_millis(1),
                trace_parent: None,
            })
            .await
            .unwrap();
        store
            .commit_step(
                &run_id,
                StepCommit {
                    status: Some(StatusChange {
                        status: RunStatus::Running,
                        report: None,
                        at_ms: Timestamp::from_millis(2),
                    }),
                    checkpoint: Some(Checkpoint {
                        run_id: run_id.clone(),
                        step: 1,
                        messages: json!([{"role": "narrator", "content": "?"}]),
                        completed_intents: vec![],
                        consumed: rein_core::deadline::Usage::default(),
                        elapsed_ms: 10,
                        state: json!({"calls": [], "facts": [], "tools_tried": [],
                                      "provider_calls": 1}),
                        at_ms: Timestamp::from_millis(3),
                    }),
                    ..StepCommit::default()
                },
            )
            .await
            .unwrap();
    }
    let out = rein(
        vec![
            "resume".into(),
            run_id.to_string(),
            "--config".into(),
            example_config().display().to_string(),
            "--data".into(),
            db.display().to_string(),
        ],
        vec![
            ("ORDER_DESK_URL", desk.base_url().to_owned()),
            ("MOCK_MODEL_URL", "http://127.0.0.1:9".into()),
        ],
    )
    .await;
    let stderr = text(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(
            "cannot be resumed: its checkpoint of step 1 cannot be decoded: `messages[0].role`"
        ),
        "{stderr}"
    );
    assert_eq!(desk.request_count("update_delivery_time"), 0);
    assert_eq!(desk.request_count("get_order"), 0);
}

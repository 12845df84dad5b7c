//! Approvals over real `rein serve` processes (issue 33, item 1): a run
//! pauses before an irreversible email, its server is SIGKILLed and
//! another started on the same store, the decision arrives through the
//! API, and the order desk shows exactly one email, with the approved
//! arguments. A rejection is told to the model; an expiry is recorded
//! `expired` and nothing is sent; another tenant's key sees nothing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rein_testkit::order_desk::{OrderDesk, SEND_EMAIL, UPDATE_DELIVERY_TIME};
use serde_json::{Value, json};

mod common;
use common::{Server, example_config};

/// The example with its email behind a human's approval (the agent asks
/// from tier `high`, the email's tier), `window` long, and short leases.
fn gated_config(dir: &std::path::Path, window: &str, extra: &str) -> std::path::PathBuf {
    example_config(
        dir,
        &format!(
            "[agents.order_desk.approval]\nfrom_tier = \"high\"\nwindow = \"{window}\"\n\
             [server.queue]\nlease = \"3s\"\nworkers = 1\n{extra}"
        ),
    )
}

/// Submits a sync run and returns its answer, which must say it waits.
async fn submit_paused(client: &reqwest::Client, server: &Server, key: Option<&str>) -> Value {
    let mut request = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001 to 8 January and tell the buyer."}"#);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let answer = request.send().await.unwrap();
    assert_eq!(answer.status(), 202, "a paused sync run is not an end");
    assert!(answer.headers().contains_key("location"));
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["status"], "awaiting_approval", "{body}");
    assert_eq!(body["awaiting_approval"][0]["tool"], SEND_EMAIL, "{body}");
    body
}

async fn decide(
    client: &reqwest::Client,
    server: &Server,
    key: Option<&str>,
    paused: &Value,
    body: Value,
) -> reqwest::Response {
    let run = paused["run_id"].as_str().unwrap();
    let intent = paused["awaiting_approval"][0]["intent_id"]
        .as_str()
        .unwrap();
    let mut request = client
        .post(server.url(&format!("/v1/runs/{run}/approvals/{intent}")))
        .json(&body);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    request.send().await.unwrap()
}

async fn until_ended(
    client: &reqwest::Client,
    server: &Server,
    run: &str,
    key: Option<&str>,
) -> Value {
    for _ in 0..600 {
        let mut request = client.get(server.url(&format!("/v1/runs/{run}")));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        if let Ok(r) = request.send().await
            && let Ok(view) = r.json::<Value>().await
            && !matches!(
                view["status"].as_str(),
                Some("queued" | "running" | "awaiting_approval") | None
            )
        {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run} did not end");
}

async fn events(client: &reqwest::Client, server: &Server, run: &str) -> Vec<Value> {
    let body: Value = client
        .get(server.url(&format!("/v1/runs/{run}/events")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["events"].as_array().cloned().unwrap_or_default()
}

/// A run pauses at one node, which is SIGKILLed; the decision arrives at
/// another node on the same store (`db`: a file or a database URL), which
/// continues the run: one email, with the approved arguments.
async fn survives_a_killed_node(db: &std::path::Path) {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = gated_config(dir.path(), "1h", "");
    let db = db.to_owned();
    let client = reqwest::Client::new();

    let first = Server::start_async(&config, &db, desk.base_url()).await;
    let paused = submit_paused(&client, &first, None).await;
    let run = paused["run_id"].as_str().unwrap().to_owned();
    assert_eq!(
        desk.applied_count(UPDATE_DELIVERY_TIME),
        1,
        "below the tier: sent"
    );
    assert_eq!(
        desk.applied_count(SEND_EMAIL),
        0,
        "nothing sent while it waits"
    );
    let listed: Value = client
        .get(first.url("/v1/approvals"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["approvals"].as_array().unwrap().len(), 1, "{listed}");
    first.kill_async().await;

    // Another server on the same store: the decision continues the run.
    let second = Server::start_async(&config, &db, desk.base_url()).await;
    let decided = decide(
        &client,
        &second,
        None,
        &paused,
        json!({"decision": "approved", "by": "alice"}),
    )
    .await;
    assert_eq!(decided.status(), 200);
    let decided: Value = decided.json().await.unwrap();
    assert_eq!(decided["decision"]["by"], "alice");
    assert_eq!(decided["continues"], true);
    let again = decide(
        &client,
        &second,
        None,
        &paused,
        json!({"decision": "rejected"}),
    )
    .await;
    assert_eq!(again.status(), 409, "a call is decided once");
    let again: Value = again.json().await.unwrap();
    assert_eq!(
        again["approval"]["decision"]["verdict"], "approved",
        "{again}"
    );

    let view = until_ended(&client, &second, &run, None).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    let sent = desk.applied(SEND_EMAIL);
    assert_eq!(sent.len(), 1, "exactly one email");
    assert_eq!(
        sent[0].args, paused["awaiting_approval"][0]["args"],
        "the approved arguments"
    );
    let kinds: Vec<String> = events(&client, &second, &run)
        .await
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        kinds.contains(&"approval_requested".to_owned()),
        "{kinds:?}"
    );
    assert!(kinds.contains(&"approval_decided".to_owned()), "{kinds:?}");
    second.kill_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_survives_a_killed_server_and_sends_the_approved_email_once() {
    let dir = tempfile::tempdir().unwrap();
    survives_a_killed_node(&dir.path().join("rein.db")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres_an_approval_at_a_second_node_continues_the_run() {
    let Some(database) =
        rein_store_postgres::scratch::ScratchDatabase::create("cli_approval").await
    else {
        return;
    };
    survives_a_killed_node(&std::path::PathBuf::from(database.url_text())).await;
    database.drop_database().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejection_is_told_to_the_model_and_an_expiry_sends_nothing() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = gated_config(dir.path(), "1s", "");
    let db = dir.path().join("rein.db");
    let client = reqwest::Client::new();
    let server = Server::start_async(&config, &db, desk.base_url()).await;

    // Expiry: nobody decides within the second; the sweep records it.
    let expiring = submit_paused(&client, &server, None).await;
    let run = expiring["run_id"].as_str().unwrap();
    let view = until_ended(&client, &server, run, None).await;
    assert_ne!(view["status"], "succeeded", "{view}");
    let listed: Value = client
        .get(server.url(&format!("/v1/approvals?pending=false&run_id={run}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let decision = &listed["approvals"][0]["decision"];
    assert_eq!(
        (decision["verdict"].as_str(), decision["by"].as_str()),
        (Some("expired"), Some("rein")),
        "{listed}"
    );
    assert_eq!(
        desk.applied_count(SEND_EMAIL),
        0,
        "an expired call is never sent"
    );
    server.kill_async().await;

    // Rejection, on a window long enough to decide in.
    let dir = tempfile::tempdir().unwrap();
    let config = gated_config(dir.path(), "1h", "");
    let server = Server::start_async(&config, &dir.path().join("rein.db"), desk.base_url()).await;
    let paused = submit_paused(&client, &server, None).await;
    let run = paused["run_id"].as_str().unwrap();
    let rejected = decide(
        &client,
        &server,
        None,
        &paused,
        json!({"decision": "rejected", "reason": "wrong buyer"}),
    )
    .await;
    assert_eq!(rejected.status(), 200);
    let view = until_ended(&client, &server, run, None).await;
    assert_ne!(view["status"], "succeeded", "{view}");
    assert_eq!(
        desk.applied_count(SEND_EMAIL),
        0,
        "a rejected call is never sent"
    );
    assert!(
        view["report"]
            .to_string()
            .contains("a human declined it: wrong buyer"),
        "the report says why: {view}"
    );
    server.kill_async().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_records_the_keys_name_and_another_tenant_sees_nothing() {
    use sha2::Digest as _;
    let sha = |key: &str| -> String {
        sha2::Sha256::digest(key.as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    };
    let keys = format!(
        "[[server.api_keys]]\ntenant = \"acme\"\nname = \"ops-alice\"\nsha256 = \"{}\"\n\
         [[server.api_keys]]\ntenant = \"globex\"\nsha256 = \"{}\"\n",
        sha("acme-key"),
        sha("globex-key")
    );
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = gated_config(dir.path(), "1h", &keys);
    let client = reqwest::Client::new();
    let server = Server::start_async(&config, &dir.path().join("rein.db"), desk.base_url()).await;
    let paused = submit_paused(&client, &server, Some("acme-key")).await;
    let run = paused["run_id"].as_str().unwrap();

    let theirs = decide(
        &client,
        &server,
        Some("globex-key"),
        &paused,
        json!({"decision": "approved"}),
    )
    .await;
    assert_eq!(theirs.status(), 404, "another tenant's run is not there");
    let listed: Value = client
        .get(server.url("/v1/approvals"))
        .bearer_auth("globex-key")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed["approvals"], json!([]), "{listed}");
    let ours = decide(
        &client,
        &server,
        Some("acme-key"),
        &paused,
        json!({"decision": "approved", "by": "mallory"}),
    )
    .await;
    assert_eq!(ours.status(), 200, "a body's `by` is ignored with keys");
    let ours: Value = ours.json().await.unwrap();
    assert_eq!(ours["decision"]["by"], "ops-alice", "{ours}");
    let view = until_ended(&client, &server, run, Some("acme-key")).await;
    assert_eq!(view["status"], "succeeded", "{view}");
    assert_eq!(desk.applied_count(SEND_EMAIL), 1);
    server.kill_async().await;
}

/// Runs the binary off the async runtime, so the desk on it keeps
/// answering while the child process talks to it.
async fn rein(args: Vec<String>, desk: &OrderDesk) -> std::process::Output {
    let desk = desk.base_url().to_owned();
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_rein"))
            .args(&args)
            .env("ORDER_DESK_URL", desk)
            .env("MOCK_MODEL_URL", "http://127.0.0.1:9")
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn args(words: &[&str], paths: &[&std::path::Path]) -> Vec<String> {
    words
        .iter()
        .map(|w| (*w).to_owned())
        .chain(paths.iter().map(|p| p.display().to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rein_run_exits_76_and_the_cli_decides_then_resume_sends_once() {
    let desk = OrderDesk::start().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = gated_config(dir.path(), "1h", "");
    let db = dir.path().join("rein.db");
    let input = "Move A-1001 to 8 January and tell the buyer.";

    let out = rein(
        args(
            &[
                "run",
                "--agent",
                "order_desk",
                "--input",
                input,
                "--json",
                "--config",
            ],
            &[&config],
        )
        .into_iter()
        .chain(args(&["--data"], &[&db]))
        .collect(),
        &desk,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(76), "{stderr}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["status"], "awaiting_approval", "{doc}");
    let run = doc["run_id"].as_str().unwrap().to_owned();
    let intent = doc["awaiting_approval"][0]["intent_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        stderr.contains(&format!("rein approve {run} {intent}")),
        "{stderr}"
    );
    assert_eq!(desk.applied_count(SEND_EMAIL), 0);

    let listed = rein(
        args(&["approvals", "list", "--json", "--data"], &[&db]),
        &desk,
    )
    .await;
    assert_eq!(
        listed.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");

    let approve = args(&["approve", &run, &intent, "--by", "bob", "--data"], &[&db]);
    let approved = rein(approve.clone(), &desk).await;
    let said = String::from_utf8_lossy(&approved.stdout).into_owned();
    assert_eq!(
        approved.status.code(),
        Some(0),
        "{said}{}",
        String::from_utf8_lossy(&approved.stderr)
    );
    assert!(
        said.contains("approved") && said.contains("by bob"),
        "{said}"
    );
    let again = rein(approve, &desk).await;
    assert_eq!(again.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("decided already: approved by bob"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    let resumed = rein(
        args(&["resume", &run, "--config"], &[&config])
            .into_iter()
            .chain(args(&["--data"], &[&db]))
            .collect(),
        &desk,
    )
    .await;
    let stdout = String::from_utf8_lossy(&resumed.stdout).into_owned();
    assert_eq!(
        resumed.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(stdout.contains("outcome: succeeded"), "{stdout}");
    assert_eq!(desk.applied_count(SEND_EMAIL), 1, "exactly one email");
}

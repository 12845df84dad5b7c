//! `rein dev` (issue 37, item 1): the order desk and the mock model start
//! as standalone loopback services, say where they are, answer, and stop
//! cleanly on Ctrl-C.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// Starts `rein dev` with `args` (and `--json`) and reads the line that
/// says where its services are.
async fn start_dev(args: &[&str]) -> (std::process::Child, Value) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_rein"))
        .arg("dev")
        .args(args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).unwrap();
        line
    })
    .await
    .unwrap();
    let urls = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
    (child, urls)
}

/// Sends `signal` to `child` and waits for it: it must exit 0.
async fn stop(mut child: std::process::Child, signal: nix::sys::signal::Signal) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap()),
        signal,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_the_desk_and_the_model_until_ctrl_c() {
    let (child, urls) =
        start_dev(&["--desk-port", "0", "--model-port", "0", "--faults", "demo"]).await;
    let desk = urls["order_desk_url"].as_str().unwrap();
    let model = urls["mock_model_url"].as_str().unwrap();
    assert_eq!(urls["faults"], "demo");
    let client = reqwest::Client::new();

    // The desk serves its tools, with the demo's fault plan in place.
    let faults: Value = client
        .get(format!("{desk}/_faults"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(faults.get("send_email").is_some(), "{faults}");
    let order = client
        .post(format!("{desk}/tools/get_order"))
        .json(&json!({"order_id": "A-1001"}))
        .send()
        .await
        .unwrap();
    assert_eq!(order.status(), 200);

    // The model answers in OpenAI's format.
    let answer: Value = client
        .post(format!("{model}/v1/chat/completions"))
        .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["object"], "chat.completion", "{answer}");

    // Ctrl-C stops both, and the command exits 0.
    stop(child, nix::sys::signal::Signal::SIGINT).await;
    assert!(
        client.get(format!("{desk}/_log")).send().await.is_err(),
        "the desk is gone"
    );
}

/// The mock model's switches reach a `rein dev` from outside: a queued
/// 429 with `Retry-After` is answered as such, then the queued tool call,
/// then the fallback text; a malformed script is a 400 that says the form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_models_switches_queue_faults_from_outside() {
    let (child, urls) = start_dev(&["--desk-port", "0", "--model-port", "0"]).await;
    let model = urls["mock_model_url"].as_str().unwrap().to_owned();
    let client = reqwest::Client::new();
    let queued: Value = client
        .post(format!("{model}/_script"))
        .json(&json!({"replies": [
            {"kind": "rate_limited", "retry_after_s": 2},
            {"kind": "tool_call", "name": "get_order", "arguments": {"order_id": "A-1001"}},
        ]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(queued["queued"], 2);
    let chat = || {
        client
            .post(format!("{model}/v1/chat/completions"))
            .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
    };
    let limited = chat().await.unwrap();
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "2");
    let called: Value = chat().await.unwrap().json().await.unwrap();
    assert_eq!(
        called["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_order",
        "{called}"
    );
    let plain = chat().await.unwrap();
    assert_eq!(
        plain.status(),
        200,
        "the script is empty: the fallback text"
    );
    let refused = client
        .post(format!("{model}/_script"))
        .json(&json!({"replies": [{"kind": "no_such_kind"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 400);
    let said: Value = refused.json().await.unwrap();
    assert!(
        said["error"].as_str().unwrap().contains("\"replies\""),
        "{said}"
    );

    stop(child, nix::sys::signal::Signal::SIGTERM).await;
}

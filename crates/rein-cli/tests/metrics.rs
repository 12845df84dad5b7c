//! `/metrics` of a real `rein serve` over loopback: a run against the order
//! desk with the demo's faults (a lost update, an email rate limited for an
//! hour) and gateway calls to the testkit's mock model — whole and
//! streamed, answered and failing, one stream cut mid-way — then every
//! counter and histogram they should have moved, read from the scraped
//! text, and the text parsed by Prometheus's own `promtool check metrics`.
//!
//! `promtool` comes from Debian's `prometheus` package (`.ci/run` installs
//! it); without it the parser check is skipped outside CI and fails under
//! `CI=true`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::process::{Command, Stdio};

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply, StreamFault};
use rein_testkit::order_desk::{Faults, OrderDesk, OrderDeskConfig};
use serde_json::Value;

mod common;
use common::Server;

/// The key of tenant `acme` and its SHA-256 (`printf %s KEY | sha256sum`).
const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";
/// The key of tenant `globex`, which `[server.metrics_labels]` does not
/// name: its calls are counted as `other`.
const GLOBEX_KEY: &str = "rein-globex-key";
const GLOBEX_KEY_SHA256: &str = "7e9a121db69b0909f4cb2d5b0ba9b1d063e4ca6386db80d50dc38c666cfa055c";

/// The value of the sample `series` (its name and labels exactly as
/// rendered) in `text`; 0 when absent.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map_or(0.0, |v| v.parse().unwrap())
}

/// The sum of every sample of `name` whose labels include all `labels`.
fn sum(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

async fn chat(client: &reqwest::Client, server: &Server, stream: bool) -> reqwest::Response {
    chat_as(client, server, stream, KEY).await
}

async fn chat_as(
    client: &reqwest::Client,
    server: &Server,
    stream: bool,
    key: &str,
) -> reqwest::Response {
    client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(key)
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"model": "chat", "stream": {stream}, "messages": [{{"role": "user", "content": "Hi."}}]}}"#
        ))
        .send()
        .await
        .unwrap()
}

/// Runs `promtool check metrics` on `text`: its complaints, or why it could
/// not run.
fn promtool_check(text: &str) -> Result<Result<(), String>, String> {
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => {
            return Err(format!(
                "promtool not found ({e}): `apt-get install prometheus` (.ci/run does)"
            ));
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    if out.status.success() {
        Ok(Ok(()))
    } else {
        Ok(Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_and_gateway_calls_move_every_counter_and_histogram_and_promtool_parses_them() {
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::demo()))
        .await
        .unwrap();
    let model = MockModel::start_with(MockModelConfig::default().with_model("gpt-4o-mini"))
        .await
        .unwrap();
    model.push_replies([
        Reply::text("Whole.").with_usage(100, 10),
        Reply::text("Streamed in pieces.").with_usage(200, 20),
        // Cut mid-way: two events, then an in-band error (recovery is
        // off for this binding; gateway_continuation counts recoveries).
        Reply::text("This stream breaks.")
            .with_usage(300, 30)
            .with_stream_fault(StreamFault::Error { after: 2 }),
        Reply::bad_request("no such thing"),
        Reply::text("For globex.").with_usage(1, 1),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let config = common::example_config_with(
        dir.path(),
        "metrics_tenants = [\"acme\"]",
        &format!(
            "[server.metrics_labels]\ntenants = [\"acme\"]\n\n\
             [[server.api_keys]]\ntenant = \"acme\"\nsha256 = \"{KEY_SHA256}\"\nname = \"metrics-test\"\n\n\
             [[server.api_keys]]\ntenant = \"globex\"\nsha256 = \"{GLOBEX_KEY_SHA256}\"\nname = \"globex\"\n\n\
             [models.chat]\nprovider = \"mock\"\nmodel = \"gpt-4o-mini\"\n\
             recover_streams = false\n"
        ),
    );
    let server = Server::start_with_env(
        &config,
        &dir.path().join("rein.db"),
        &[
            ("ORDER_DESK_URL", desk.base_url()),
            ("MOCK_MODEL_URL", model.base_url()),
        ],
    );
    let client = reqwest::Client::new();

    // A run: the demo's script against the faulty desk.
    let run: Value = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .body(r#"{"input": "Move order A-1001 to 2026-12-24.", "mode": "sync"}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "partial_success", "{run}");

    // Gateway calls: whole, streamed, streamed and cut, refused upstream.
    let whole = chat(&client, &server, false).await;
    assert_eq!(whole.status(), 200);
    whole.bytes().await.unwrap();
    let streamed = chat(&client, &server, true).await;
    assert_eq!(streamed.status(), 200);
    let body = streamed.text().await.unwrap();
    assert!(body.contains("[DONE]"), "{body}");
    let cut = chat(&client, &server, true).await;
    assert_eq!(cut.status(), 200, "committed at the first event");
    let body = cut.text().await.unwrap();
    assert!(body.contains("error"), "the cut is in-band: {body}");
    let refused = chat(&client, &server, false).await;
    assert_eq!(refused.status(), 400);
    refused.bytes().await.unwrap();
    let globex = chat_as(&client, &server, false, GLOBEX_KEY).await;
    assert_eq!(globex.status(), 200);
    globex.bytes().await.unwrap();

    let text = client
        .get(server.url("/metrics"))
        .bearer_auth(KEY)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let ctx = || format!("{text}\nserver log:\n{}", server.log_tail());

    // The run, per tenant and agent.
    let whose = "tenant=\"acme\",agent=\"order_desk\"";
    assert_eq!(
        value(&text, &format!("rein_runs_started_total{{{whose}}}")),
        1.0,
        "{}",
        ctx()
    );
    assert_eq!(
        value(
            &text,
            &format!("rein_runs_finished_total{{{whose},outcome=\"partial_success\"}}")
        ),
        1.0,
        "{}",
        ctx()
    );
    assert_eq!(
        value(
            &text,
            "rein_run_duration_seconds_count{agent=\"order_desk\"}"
        ),
        1.0
    );
    // The lost update: looked up by its key, found, collapsed.
    assert_eq!(
        value(
            &text,
            &format!("rein_idempotency_collapses_total{{{whose},tool=\"update_delivery_time\"}}")
        ),
        1.0,
        "{}",
        ctx()
    );
    // Tool attempts with their class and their time.
    assert!(
        value(
            &text,
            &format!(
                "rein_tool_calls_total{{{whose},tool=\"get_order\",class=\"read\",outcome=\"ok\"}}"
            )
        ) >= 1.0,
        "{}",
        ctx()
    );
    let read_count = value(
        &text,
        "rein_tool_call_duration_seconds_count{tool=\"get_order\",class=\"read\",outcome=\"ok\"}",
    );
    assert!(read_count >= 1.0, "{}", ctx());
    assert_eq!(
        value(
            &text,
            "rein_tool_call_duration_seconds_bucket{tool=\"get_order\",class=\"read\",outcome=\"ok\",le=\"+Inf\"}"
        ),
        read_count
    );
    assert!(
        sum(
            &text,
            "rein_tool_attempts_total",
            &["tool=\"update_delivery_time\"", "attempt=\"first\""]
        ) >= 1.0,
        "{}",
        ctx()
    );
    // The email's failure, counted with its category, not as ok.
    assert!(
        sum(
            &text,
            "rein_tool_calls_total",
            &["tool=\"send_email\"", "outcome=\"rate_limited\""]
        ) >= 1.0,
        "{}",
        ctx()
    );

    // Gateway calls: tenant of the key, no agent; every streamed call,
    // the cut one included, counted at its stream's end.
    let gw = "tenant=\"acme\",agent=\"none\",provider=\"mock\",model=\"gpt-4o-mini\"";
    assert_eq!(
        value(
            &text,
            &format!("rein_model_calls_total{{{gw},outcome=\"ok\"}}")
        ),
        2.0,
        "{}",
        ctx()
    );
    let failed = sum(&text, "rein_model_calls_total", &[gw]) - 2.0;
    assert_eq!(failed, 2.0, "the cut stream and the 400: {}", ctx());
    assert_eq!(
        sum(
            &text,
            "rein_model_call_duration_seconds_count",
            &["provider=\"mock\"", "streamed=\"true\""]
        ),
        2.0,
        "{}",
        ctx()
    );
    assert_eq!(
        value(
            &text,
            "rein_model_time_to_first_event_seconds_count{provider=\"mock\",model=\"gpt-4o-mini\"}"
        ),
        2.0,
        "{}",
        ctx()
    );
    // Tokens of the answered calls (100+200 in, 10+20 out); the cut
    // stream reported none before it broke.
    assert_eq!(
        value(
            &text,
            &format!("rein_model_tokens_total{{{gw},direction=\"output\"}}")
        ),
        30.0,
        "{}",
        ctx()
    );
    assert!(
        value(
            &text,
            &format!("rein_model_tokens_total{{{gw},direction=\"input\"}}")
        ) >= 300.0
    );
    // At the example's price: 0.15 $/Mtok in, 0.60 $/Mtok out.
    let cost = value(&text, &format!("rein_model_cost_usd_total{{{gw}}}"));
    assert!(cost >= 0.000_063, "{cost}: {}", ctx());

    // A tenant [server.metrics_labels] does not name is `other`.
    assert_eq!(
        value(
            &text,
            "rein_model_calls_total{tenant=\"other\",agent=\"none\",provider=\"mock\",model=\"gpt-4o-mini\",outcome=\"ok\"}"
        ),
        1.0,
        "{}",
        ctx()
    );
    assert!(!text.contains("globex"), "{text}");

    // API requests, by route template, method and status class.
    assert_eq!(
        value(
            &text,
            "rein_http_request_duration_seconds_count{route=\"/v1/chat/completions\",method=\"POST\",status=\"2xx\"}"
        ),
        4.0,
        "{}",
        ctx()
    );
    assert_eq!(
        value(
            &text,
            "rein_http_request_duration_seconds_count{route=\"/v1/chat/completions\",method=\"POST\",status=\"4xx\"}"
        ),
        1.0
    );
    assert_eq!(
        value(
            &text,
            "rein_http_request_duration_seconds_count{route=\"/v1/agents/{name}/runs\",method=\"POST\",status=\"2xx\"}"
        ),
        1.0,
        "{}",
        ctx()
    );
    assert!(value(&text, "rein_connections_accepted_total") >= 1.0);
    assert!(text.contains("# TYPE rein_work_admitted gauge"), "{text}");

    // Help texts end in one full stop (the encoder adds it).
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("# HELP") && l.ends_with("..")),
        "{text}"
    );

    // Prometheus's own parser and linter accept the exposition.
    match promtool_check(&text) {
        Ok(Ok(())) => {}
        Ok(Err(complaints)) => panic!("promtool check metrics: {complaints}\n{text}"),
        Err(why) => common::missing_part(&why),
    }
}

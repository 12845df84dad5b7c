//! Traces of a real `rein serve`: `[telemetry]` points it at an OTLP/HTTP
//! receiver on loopback (axum, the protobuf decoded with
//! `opentelemetry-proto`). A sync run and a gateway call sent with a
//! `traceparent` are spans under the client's span, and SIGTERM exports
//! them: the batch delay is set far beyond the test, so only the drain's
//! flush can have sent them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use rein_testkit::order_desk::{Faults, OrderDesk, OrderDeskConfig};
use serde_json::Value;

mod common;
mod otlp;
use common::Server;
use otlp::{attr, hex, receiver};

const KEY: &str = "rein-gateway-key";
const KEY_SHA256: &str = "5266a8d2b07490eb2852a8a32974e26c4c24a59701709187f794d75d1b323310";
const TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const RUN_PARENT: &str = "b7ad6b7169203331";
const CHAT_PARENT: &str = "c7ad6b7169203332";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_traces_runs_and_gateway_calls_under_the_callers_traceparent_and_flushes_on_sigterm()
{
    let (otlp, spans) = receiver().await;
    let desk = OrderDesk::start_with(OrderDeskConfig::default().with_faults(Faults::none()))
        .await
        .unwrap();
    let model = MockModel::start_with(MockModelConfig::default().with_model("gpt-4o-mini"))
        .await
        .unwrap();
    model.push_replies([Reply::text("Hello.").with_usage(12, 3)]);
    let dir = tempfile::tempdir().unwrap();
    let config = common::example_config_with(
        dir.path(),
        "",
        &format!(
            "[[server.api_keys]]\ntenant = \"acme\"\nsha256 = \"{KEY_SHA256}\"\n\n\
             [models.chat]\nprovider = \"mock\"\nmodel = \"gpt-4o-mini\"\n\n\
             [telemetry]\notlp_endpoint = \"{otlp}\"\nservice_name = \"rein-serve-test\"\n"
        ),
    );
    let mut server = Server::start_with_env(
        &config,
        &dir.path().join("rein.db"),
        &[
            ("ORDER_DESK_URL", desk.base_url()),
            ("MOCK_MODEL_URL", model.base_url()),
            // Nothing is exported on the batch timer during the test.
            ("OTEL_BSP_SCHEDULE_DELAY", "3600000"),
        ],
    );
    let client = reqwest::Client::new();
    let run: Value = client
        .post(server.url("/v1/agents/order_desk/runs"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{TRACE}-{RUN_PARENT}-01"))
        .body(r#"{"input": "Move order A-1001 to 2026-12-24.", "mode": "sync"}"#)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run_id = run["run_id"].as_str().expect("a run id").to_owned();
    let chat = client
        .post(server.url("/v1/chat/completions"))
        .bearer_auth(KEY)
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{TRACE}-{CHAT_PARENT}-01"))
        .body(r#"{"model": "chat", "messages": [{"role": "user", "content": "Hi."}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    chat.bytes().await.unwrap();
    assert!(
        spans.lock().unwrap().is_empty(),
        "nothing exported before the drain"
    );

    server.signal(nix::sys::signal::Signal::SIGTERM);
    let status = server.wait_exit(Duration::from_secs(60));
    assert!(status.success(), "{}", server.log_tail());

    let spans = spans.lock().unwrap();
    let ctx = || {
        spans
            .iter()
            .map(|s| format!("{} parent {}", s.name, hex(&s.parent_span_id)))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(spans.iter().all(|s| hex(&s.trace_id) == TRACE), "{}", ctx());
    let run_span = spans
        .iter()
        .find(|s| s.name == "run order_desk")
        .unwrap_or_else(|| panic!("{}", ctx()));
    assert_eq!(hex(&run_span.parent_span_id), RUN_PARENT);
    assert_eq!(
        attr(run_span, "rein.run_id").as_deref(),
        Some(run_id.as_str())
    );
    assert_eq!(attr(run_span, "rein.tenant").as_deref(), Some("acme"));
    let gateway = spans
        .iter()
        .find(|s| s.name == "gateway chat")
        .unwrap_or_else(|| panic!("{}", ctx()));
    assert_eq!(hex(&gateway.parent_span_id), CHAT_PARENT);
    let asked = spans
        .iter()
        .find(|s| s.parent_span_id == gateway.span_id)
        .unwrap_or_else(|| panic!("{}", ctx()));
    assert_eq!(asked.name, "chat gpt-4o-mini");
    assert_eq!(attr(asked, "gen_ai.system").as_deref(), Some("mock"));
    assert_eq!(
        attr(asked, "gen_ai.response.model").as_deref(),
        Some("gpt-4o-mini")
    );
    assert_eq!(
        attr(asked, "gen_ai.usage.input_tokens").as_deref(),
        Some("12")
    );
    assert_eq!(
        attr(asked, "gen_ai.usage.output_tokens").as_deref(),
        Some("3")
    );
    // The mock got the gateway call's model-call span.
    let sent = model
        .requests()
        .last()
        .unwrap()
        .traceparent
        .clone()
        .unwrap();
    assert_eq!(sent, format!("00-{TRACE}-{}-01", hex(&asked.span_id)));
}

//! Traces on real parts: an OTLP/HTTP receiver on loopback (axum, the
//! protobuf decoded with `opentelemetry-proto`), two mock model servers,
//! the order desk and a real SQLite file. A run with a model fallback, a
//! tool retry and a compensation is one span tree under the caller's
//! `traceparent`, and the desk and the models receive the spans of the
//! calls they answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::routing::post;
use common::{Harness, agent, harness_with};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::trace::v1::Span;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use prost::Message as _;
use rein_core::Outcome;
use rein_engine::provider::{ModelProvider, OpenAiProvider};
use rein_engine::run::{AcceptAll, AgentBinding, ModelLink, RunOutput, RunRequest};
use rein_engine::telemetry::TraceParent;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use rein_testkit::order_desk::{Fault, Faults, UPDATE_DELIVERY_TIME};
use serde_json::json;

/// The client's span: the run's parent.
const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// What the receiver got: the spans, and each export's `service.name`.
#[derive(Default)]
struct Received {
    spans: Vec<Span>,
    services: Vec<String>,
}

/// An OTLP/HTTP traces receiver on loopback; its base URL and what it got.
async fn receiver() -> (String, Arc<Mutex<Received>>) {
    let received = Arc::new(Mutex::new(Received::default()));
    let sink = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).unwrap();
                let mut got = sink.lock().unwrap();
                for resource in request.resource_spans {
                    for kv in resource.resource.iter().flat_map(|r| &r.attributes) {
                        if kv.key == "service.name" {
                            got.services
                                .push(text(kv.value.as_ref()).unwrap_or_default());
                        }
                    }
                    for scope in resource.scope_spans {
                        got.spans.extend(scope.spans);
                    }
                }
                ExportTraceServiceResponse::default().encode_to_vec()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, received)
}

fn text(v: Option<&opentelemetry_proto::tonic::common::v1::AnyValue>) -> Option<String> {
    match v?.value.as_ref()? {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        Any::ArrayValue(a) => Some(
            a.values
                .iter()
                .filter_map(|v| text(Some(v)))
                .collect::<Vec<_>>()
                .join(","),
        ),
        other => Some(format!("{other:?}")),
    }
}

fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| text(kv.value.as_ref()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A config file holding only `[telemetry]`, loaded as `rein` loads one.
fn traces_config(dir: &std::path::Path, table: &str) -> rein_core::registry::TelemetrySpec {
    let path = dir.join("telemetry.toml");
    std::fs::write(&path, table).unwrap();
    let registry = rein_engine::config::load(&path).unwrap();
    registry.telemetry().cloned().expect("[telemetry] is on")
}

fn openai(name: &str, base_url: &str) -> Arc<dyn ModelProvider> {
    Arc::new(OpenAiProvider::new(
        name,
        base_url,
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ))
}

async fn mock(model: &str, replies: Vec<Reply>) -> MockModel {
    MockModel::start_with(
        MockModelConfig::new(replies)
            .with_model(model)
            .with_fallback_text("done"),
    )
    .await
    .unwrap()
}

/// The desk's order agent on `primary` with `backup` as its fallback.
fn chained(h: &Harness, primary: &MockModel, backup: &MockModel) -> AgentBinding {
    let mut a = agent(
        &h.desk,
        openai("primary", &primary.openai_base_url()),
        false,
    );
    a.model = "primary-model".into();
    a.fallbacks = vec![ModelLink {
        provider: openai("backup", &backup.openai_base_url()),
        model: "backup-model".into(),
        price: None,
        max_output_tokens: None,
    }];
    a
}

async fn run(h: &Harness, a: &AgentBinding, parent: Option<TraceParent>) -> RunOutput {
    h.engine
        .run(
            a,
            &AcceptAll,
            RunRequest {
                input: "Move A-1001 and A-1002.".into(),
                trace_parent: parent,
                ..RunRequest::default()
            },
        )
        .await
        .unwrap()
}

fn update(order: &str) -> Reply {
    Reply::tool_call(
        UPDATE_DELIVERY_TIME,
        &json!({"order_id": order, "delivery_date": "2026-03-01T10:00:00Z"}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_a_retry_a_fallback_and_a_compensation_is_one_span_tree_under_the_callers_traceparent()
 {
    let (url, received) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = traces_config(
        dir.path(),
        &format!("[telemetry]\notlp_endpoint = \"{url}\"\nservice_name = \"orders-agent\"\n"),
    );
    assert_eq!(spec.traces_url, format!("{url}/v1/traces"));
    let h = harness_with(Faults::none(), |b| b.traces(Some(spec))).await;
    // Step 1: the primary is down (the turn falls back to the backup),
    // and the first update is refused with a 503 once (retried). Step 2:
    // the primary answers; the second update conflicts (409, not
    // retryable), so the first is compensated and the run fails.
    let primary = mock(
        "primary-model",
        vec![Reply::unavailable(), update("A-1002")],
    )
    .await;
    let backup = mock("backup-model", vec![update("A-1001")]).await;
    h.desk
        .push_fault(UPDATE_DELIVERY_TIME, Fault::status(503))
        .unwrap();
    h.desk
        .push_fault(UPDATE_DELIVERY_TIME, Fault::Delay(Duration::ZERO))
        .unwrap();
    h.desk
        .push_fault(UPDATE_DELIVERY_TIME, Fault::status(409))
        .unwrap();
    let a = chained(&h, &primary, &backup);
    let parent = TraceParent::parse(&format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")).unwrap();
    let out = run(&h, &a, Some(parent)).await;
    assert_eq!(out.report.outcome, Outcome::Failed, "{:#?}", out.report);
    assert_eq!(out.report.compensations.len(), 1, "{:#?}", out.report);
    h.engine.telemetry().unwrap().shutdown().await;

    let got = received.lock().unwrap();
    assert!(
        got.services.iter().all(|s| s == "orders-agent"),
        "{:?}",
        got.services
    );
    let spans = &got.spans;
    assert!(
        spans.iter().all(|s| hex(&s.trace_id) == CLIENT_TRACE),
        "every span is in the caller's trace"
    );
    let named = |prefix: &str| -> Vec<&Span> {
        spans
            .iter()
            .filter(|s| s.name.starts_with(prefix))
            .collect()
    };
    let by_id: BTreeMap<String, &Span> = spans.iter().map(|s| (hex(&s.span_id), s)).collect();
    let parent_of = |s: &Span| by_id.get(&hex(&s.parent_span_id)).copied();

    // The run, under the caller's span, with its correlation fields.
    let runs = named("run ");
    assert_eq!(
        runs.len(),
        1,
        "{:?}",
        spans.iter().map(|s| &s.name).collect::<Vec<_>>()
    );
    let run_span = runs[0];
    assert_eq!(run_span.name, "run order_desk");
    assert_eq!(hex(&run_span.parent_span_id), CLIENT_SPAN);
    assert_eq!(
        attr(run_span, "rein.run_id").as_deref(),
        Some(out.run_id.as_str())
    );
    assert_eq!(attr(run_span, "rein.tenant").as_deref(), Some("default"));
    assert_eq!(attr(run_span, "rein.outcome").as_deref(), Some("failed"));
    assert_eq!(
        run_span.status.as_ref().unwrap().code,
        StatusCode::Error as i32
    );

    // Three steps under the run: the last is the model's answer to the
    // conflict, after which the run settles.
    let steps = named("step ");
    let tree: Vec<String> = spans
        .iter()
        .map(|s| {
            let events: Vec<&str> = s.events.iter().map(|e| e.name.as_str()).collect();
            format!(
                "{} <- {:?} {events:?}",
                s.name,
                parent_of(s).map(|p| &p.name)
            )
        })
        .collect();
    assert_eq!(steps.len(), 3, "{tree:#?}");
    for step in &steps {
        assert_eq!(parent_of(step).unwrap().span_id, run_span.span_id);
    }
    let step_of = |s: &Span| attr(parent_of(s).unwrap(), "rein.step");

    // Model calls: the primary failed, the backup answered (the fallback),
    // then the primary answered steps 2 and 3; each under its step, with
    // the GenAI attributes.
    let chats = named("chat ");
    assert_eq!(chats.len(), 4, "{tree:#?}");
    for chat in &chats {
        assert_eq!(attr(chat, "gen_ai.operation.name").as_deref(), Some("chat"));
        assert!(parent_of(chat).unwrap().name.starts_with("step "));
        assert_eq!(
            attr(chat, "rein.run_id").as_deref(),
            Some(out.run_id.as_str())
        );
    }
    let failed = chats
        .iter()
        .find(|s| attr(s, "error.type").is_some())
        .expect("the primary's failure");
    assert_eq!(attr(failed, "gen_ai.system").as_deref(), Some("primary"));
    assert_eq!(
        attr(failed, "gen_ai.request.model").as_deref(),
        Some("primary-model")
    );
    assert_eq!(attr(failed, "gen_ai.response.model"), None);
    assert_eq!(
        failed.status.as_ref().unwrap().code,
        StatusCode::Error as i32
    );
    let fallback = chats
        .iter()
        .find(|s| attr(s, "gen_ai.system").as_deref() == Some("backup"))
        .expect("the backup's answer");
    assert_eq!(
        attr(fallback, "gen_ai.provider.name").as_deref(),
        Some("backup")
    );
    assert_eq!(
        attr(fallback, "gen_ai.request.model").as_deref(),
        Some("backup-model")
    );
    assert_eq!(
        attr(fallback, "gen_ai.response.model").as_deref(),
        Some("backup-model")
    );
    assert_eq!(
        attr(fallback, "gen_ai.response.finish_reasons").as_deref(),
        Some("tool_calls")
    );
    assert!(
        attr(fallback, "gen_ai.usage.input_tokens")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert!(
        attr(fallback, "gen_ai.usage.output_tokens")
            .unwrap()
            .parse::<u64>()
            .unwrap()
            > 0
    );
    assert_eq!(
        step_of(failed),
        step_of(fallback),
        "the fallback answered the same turn"
    );
    let step_one = parent_of(fallback).unwrap();
    assert!(
        step_one
            .events
            .iter()
            .any(|e| e.name == "model_fallback_used"),
        "the switch is an event of its step"
    );

    // Tool attempts: the update of A-1001 failed once and was retried
    // under the same intent and key; the update of A-1002 conflicted.
    let tools = named("execute_tool update_delivery_time");
    assert_eq!(tools.len(), 3, "{tree:#?}");
    let first: Vec<&&Span> = tools
        .iter()
        .filter(|s| parent_of(s).unwrap().span_id == step_one.span_id)
        .collect();
    assert_eq!(first.len(), 2, "the attempt and its retry are in step 1");
    let (a1, a2) = (first[0], first[1]);
    assert_eq!(attr(a1, "rein.attempt").as_deref(), Some("1"));
    assert_eq!(attr(a2, "rein.attempt").as_deref(), Some("2"));
    assert!(attr(a1, "error.type").is_some());
    assert_eq!(attr(a2, "error.type"), None);
    assert_eq!(attr(a1, "rein.intent_id"), attr(a2, "rein.intent_id"));
    assert!(attr(a1, "rein.idempotency_key").is_some());
    assert_eq!(
        attr(a1, "rein.idempotency_key"),
        attr(a2, "rein.idempotency_key")
    );
    assert_ne!(attr(a1, "rein.attempt_id"), attr(a2, "rein.attempt_id"));
    assert_eq!(
        attr(a1, "gen_ai.tool.name").as_deref(),
        Some(UPDATE_DELIVERY_TIME)
    );
    assert_eq!(
        attr(a1, "rein.tool.class").as_deref(),
        Some("idempotent_write")
    );
    assert!(step_one.events.iter().any(|e| e.name == "retry_scheduled"));

    // The compensation, under the run, with the restore's attempt in it.
    let compensations = named("compensate ");
    assert_eq!(compensations.len(), 1);
    let compensation = compensations[0];
    assert_eq!(compensation.name, "compensate update_delivery_time");
    assert_eq!(parent_of(compensation).unwrap().span_id, run_span.span_id);
    assert_eq!(
        attr(compensation, "rein.compensation.status").as_deref(),
        Some("compensated")
    );
    let restores = named("execute_tool restore_delivery_time");
    assert_eq!(restores.len(), 1);
    assert_eq!(
        parent_of(restores[0]).unwrap().span_id,
        compensation.span_id
    );

    // The desk got each attempt's own span as its traceparent.
    let sent: Vec<String> = h
        .desk
        .requests()
        .into_iter()
        .filter(|r| r.tool == UPDATE_DELIVERY_TIME)
        .map(|r| r.headers.traceparent.expect("a traceparent"))
        .collect();
    assert_eq!(sent.len(), 3);
    for (header, attempt) in sent.iter().zip([a1, a2]) {
        assert_eq!(
            *header,
            format!("00-{CLIENT_TRACE}-{}-01", hex(&attempt.span_id))
        );
    }
    // And each model its call's.
    let asked = backup.requests()[0]
        .traceparent
        .clone()
        .expect("a traceparent");
    assert_eq!(
        asked,
        format!("00-{CLIENT_TRACE}-{}-01", hex(&fallback.span_id))
    );
    assert!(primary.requests().iter().all(|r| {
        r.traceparent
            .as_deref()
            .is_some_and(|t| t.contains(CLIENT_TRACE))
    }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sample_ratio_of_zero_exports_no_span_yet_tools_still_get_a_trace_context() {
    let (url, received) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = traces_config(
        dir.path(),
        &format!("[telemetry]\notlp_endpoint = \"{url}/v1/traces\"\nsample_ratio = 0.0\n"),
    );
    let h = harness_with(Faults::none(), |b| b.traces(Some(spec))).await;
    let primary = mock("primary-model", vec![update("A-1001")]).await;
    let backup = mock("backup-model", vec![]).await;
    let a = chained(&h, &primary, &backup);
    let out = run(&h, &a, None).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    h.engine.telemetry().unwrap().shutdown().await;

    assert!(
        received.lock().unwrap().spans.is_empty(),
        "nothing was sampled"
    );
    let sent = h.desk.requests()[0].headers.traceparent.clone().unwrap();
    let parsed = TraceParent::parse(&sent).unwrap();
    assert!(sent.ends_with("-00"), "not sampled: {sent}");
    assert_ne!(parsed.trace_id(), CLIENT_TRACE);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_telemetry_no_traceparent_is_sent() {
    let h = harness_with(Faults::none(), |b| b).await;
    assert!(h.engine.telemetry().is_none());
    let primary = mock("primary-model", vec![update("A-1001")]).await;
    let backup = mock("backup-model", vec![]).await;
    let a = chained(&h, &primary, &backup);
    let out = run(&h, &a, None).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(h.desk.requests()[0].headers.traceparent, None);
    assert_eq!(primary.requests()[0].traceparent, None);
}

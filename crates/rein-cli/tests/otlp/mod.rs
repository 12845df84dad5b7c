//! An OTLP/HTTP traces receiver on loopback, shared by the trace tests
//! (`traces.rs`, `traces_queued.rs`): axum, the protobuf decoded with
//! `opentelemetry-proto`, every span kept for the test to read.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
pub use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;

/// Starts a receiver: its base URL and the spans it has received.
pub async fn receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let sink = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        post(move |body: Bytes| {
            let sink = sink.clone();
            async move {
                let request = ExportTraceServiceRequest::decode(body).unwrap();
                let mut got = sink.lock().unwrap();
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        got.extend(scope.spans);
                    }
                }
                ExportTraceServiceResponse::default().encode_to_vec()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (url, spans)
}

/// The value of `span`'s attribute `key`, as text.
pub fn attr(span: &Span, key: &str) -> Option<String> {
    let kv = span.attributes.iter().find(|kv| kv.key == key)?;
    match kv.value.as_ref()?.value.as_ref()? {
        Any::StringValue(s) => Some(s.clone()),
        Any::IntValue(i) => Some(i.to_string()),
        other => Some(format!("{other:?}")),
    }
}

/// Lowercase hex of a trace or span id.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

//! Fixtures for the tests that drive the engine's model calls directly
//! (`Engine::ask_model`), in this crate and in the crates that run it on
//! their store (`rein-store-postgres`'s `health_notify`): behind the
//! `test-util` feature, never in a shipped build.
//!
//! # Why here
//!
//! The same binding and question were written once per test file, in two
//! crates; a test crate cannot share a module with another crate's tests,
//! and `rein-testkit` cannot name engine types (the engine's tests depend
//! on it).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test fixtures: a broken fixture panics the test that built it"
)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rein_core::{Event, EventKind, LatencyProfile};
use serde_json::Value;

use crate::provider::{Message, ModelProvider, ModelRequest, OpenAiProvider, StreamSettings};
use crate::run::{CancellationToken, ModelAsk, ModelBinding, ModelLink, Observer};

/// What an observer kept of a call: each event's kind and data, in order.
pub type Seen = Arc<Mutex<Vec<(EventKind, Value)>>>;

/// A binding of the OpenAI-compatible provider `primary` at `base_url`
/// alone (model `primary-model`, no fallbacks, default retries, a model
/// latency of 5/50/100 ms).
pub fn openai_binding(base_url: &str) -> ModelBinding {
    let provider: Arc<dyn ModelProvider> = Arc::new(OpenAiProvider::new(
        "primary",
        base_url,
        None,
        Duration::from_secs(5),
        crate::run::http_client().expect("an HTTP client"),
    ));
    let ms = Duration::from_millis;
    ModelBinding {
        name: "b".into(),
        kind: rein_core::registry::BindingKind::Chat,
        primary: ModelLink {
            provider,
            model: "primary-model".into(),
            price: None,
            max_output_tokens: None,
        },
        fallbacks: Vec::new(),
        context_fallbacks: Vec::new(),
        provider_limits: std::collections::BTreeMap::new(),
        provider_tokens: Default::default(),
        retry: rein_core::retry::RetryPolicy::default(),
        model_latency: LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap(),
        stream: StreamSettings::default(),
        same_model: rein_core::retry::SameModelRetry::default(),
        deadline: rein_core::registry::DEFAULT_GATEWAY_DEADLINE,
        recover_streams: true,
    }
}

/// A one-message question ("Hi.", 10 s, not streamed), with an observer
/// that keeps its events in the returned [`Seen`].
pub fn question() -> (ModelAsk, Seen) {
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let observer: Observer = Arc::new(move |e: &Event| {
        sink.lock()
            .unwrap()
            .push((e.kind(), e.data.to_value().unwrap()));
    });
    let ask = ModelAsk {
        request: ModelRequest {
            model: String::new(),
            messages: vec![Message::user("Hi.")],
            tools: Vec::new(),
            max_tokens: None,
            options: Default::default(),
            continuation: false,
        },
        deadline: Duration::from_secs(10),
        stream: false,
        cancel: CancellationToken::new(),
        observer: Some(observer),
        tenant: None,
        trace_parent: None,
    };
    (ask, seen)
}

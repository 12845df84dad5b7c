//! Model chains on real parts: two mock model servers over loopback, the
//! OpenAI-compatible provider, a real SQLite file. A turn moves to the next
//! link only on a transient failure, never silently, and a provider that
//! keeps failing is no longer asked once its breaker opened.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Harness, agent, harness, kinds, ms};
use rein_core::registry::Price;
use rein_core::{EventKind, Outcome};
use rein_engine::provider::{ModelProvider, OpenAiProvider};
use rein_engine::run::{AcceptAll, AgentBinding, ModelLink, RunOutput, RunRequest};
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use rein_testkit::order_desk::Faults;
use serde_json::Value;

fn openai(name: &str, base_url: &str) -> Arc<dyn ModelProvider> {
    Arc::new(OpenAiProvider::new(
        name,
        base_url,
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ))
}

async fn mock(model: &str) -> MockModel {
    MockModel::start_with(
        MockModelConfig::default()
            .with_model(model)
            .with_fallback_text("answered"),
    )
    .await
    .unwrap()
}

/// An agent whose primary is `primary` (model `primary-model`) with
/// `backup` (model `backup-model`, priced) as its one fallback.
fn chained(h: &Harness, primary: &str, backup: &str) -> AgentBinding {
    let mut a = agent(&h.desk, openai("primary", primary), false);
    a.model = "primary-model".into();
    a.fallbacks = vec![ModelLink {
        provider: openai("backup", backup),
        model: "backup-model".into(),
        price: Some(Price::new(
            rein_core::deadline::Cost::from_micros(1_000_000),
            rein_core::deadline::Cost::from_micros(1_000_000),
        )),
        max_output_tokens: None,
    }];
    a
}

async fn ask(h: &Harness, a: &AgentBinding) -> RunOutput {
    h.engine
        .run(
            a,
            &AcceptAll,
            RunRequest {
                input: "Say something.".into(),
                ..RunRequest::default()
            },
        )
        .await
        .unwrap()
}

fn events_of(all: &[(EventKind, Value)], kind: EventKind) -> Vec<Value> {
    all.iter()
        .filter(|(k, _)| *k == kind)
        .map(|(_, d)| d.clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_failures_move_the_turn_to_the_next_link_and_say_so() {
    let h = harness(Faults::none()).await;
    for (why, reply) in [
        ("503", Some(Reply::unavailable())),
        ("429", Some(Reply::rate_limited(None))),
        ("connection refused", None),
    ] {
        let primary = mock("primary-model").await;
        let backup = mock("backup-model").await;
        let primary_url = match reply {
            Some(reply) => {
                primary.push_reply(reply);
                primary.openai_base_url()
            }
            // Nothing listens there.
            None => "http://127.0.0.1:9/v1".to_owned(),
        };
        let a = chained(&h, &primary_url, &backup.openai_base_url());
        let out = ask(&h, &a).await;
        assert_eq!(
            out.report.outcome,
            Outcome::Succeeded,
            "{why}: {:?}",
            out.report
        );
        assert_eq!(out.report.answer.as_deref(), Some("answered"));
        assert_eq!(backup.request_count(), 1, "{why}: the backup answered");
        if reply_was_sent(why) {
            assert_eq!(
                primary.request_count(),
                1,
                "{why}: the primary was asked once"
            );
        }
        let all = kinds(&h, &out).await;
        let used = events_of(&all, EventKind::ModelFallbackUsed);
        assert_eq!(used.len(), 1, "{why}: a switch is never silent");
        assert_eq!(used[0]["primary"]["model"], "primary-model");
        assert_eq!(used[0]["answered"]["provider"], "backup");
        assert_eq!(used[0]["answered"]["model"], "backup-model");
        // The answering model is on record, and its price is what was
        // charged.
        let finished = events_of(&all, EventKind::ModelCallFinished);
        let ok = finished.iter().find(|e| e["ok"] == true).unwrap();
        assert_eq!(ok["model"], "backup-model");
        assert_eq!(
            out.report.models,
            vec!["backup/backup-model".to_owned()],
            "{why}"
        );
        assert!(
            out.report.consumed.cost.micros() > 0,
            "{why}: priced at the backup's rate"
        );
    }
}

/// Each attempt asks at most the output cap of the model that answers it:
/// the two mocks refuse anything above their model's cap with a 400, as
/// the real API does, and both answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_asks_at_most_the_output_cap_of_the_model_it_goes_to() {
    let h = harness(Faults::none()).await;
    let capped = |model: &str, cap: u64| {
        MockModelConfig::default()
            .with_model(model)
            .with_fallback_text("answered")
            .with_output_cap(model, cap)
    };
    let primary = MockModel::start_with(capped("primary-model", 4096))
        .await
        .unwrap();
    primary.push_reply(Reply::unavailable());
    let backup = MockModel::start_with(capped("backup-model", 1000))
        .await
        .unwrap();
    let mut a = chained(&h, &primary.openai_base_url(), &backup.openai_base_url());
    a.max_output_tokens = Some(4096);
    a.fallbacks[0].max_output_tokens = Some(1000);
    // A budget far above both caps.
    a.budget = a.budget.with_tokens(1_000_000).unwrap();
    let out = ask(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
    let asked = |m: &MockModel| -> Vec<u64> {
        m.requests()
            .iter()
            .map(|r| r.body["max_tokens"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(asked(&primary), vec![4096]);
    assert_eq!(asked(&backup), vec![1000]);
    assert_eq!(backup.usage_log().len(), 1, "the backup answered, no 400");
}

fn reply_was_sent(why: &str) -> bool {
    why != "connection refused"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_failures_and_content_filters_never_fall_back() {
    let h = harness(Faults::none()).await;
    for (why, reply) in [
        ("401", Reply::unauthorized()),
        (
            "403",
            Reply::error(rein_testkit::mock_model::ApiError::new(
                403,
                "permission_error",
                "this key may not use that model",
            )),
        ),
        (
            "content filter",
            Reply::text("")
                .with_finish_reason(rein_testkit::mock_model::FinishReason::ContentFilter),
        ),
    ] {
        let primary = mock("primary-model").await;
        let backup = mock("backup-model").await;
        primary.push_reply(reply);
        let a = chained(&h, &primary.openai_base_url(), &backup.openai_base_url());
        let out = ask(&h, &a).await;
        assert_ne!(out.report.outcome, Outcome::Succeeded, "{why}");
        assert_eq!(backup.request_count(), 0, "{why}: never switched");
        let all = kinds(&h, &out).await;
        assert!(
            events_of(&all, EventKind::ModelFallbackUsed).is_empty(),
            "{why}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_that_keeps_failing_is_not_asked_once_its_circuit_opened() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    primary.push_replies((0..10).map(|_| Reply::server_error()));
    let a = chained(&h, &primary.openai_base_url(), &backup.openai_base_url());
    for run in 1..=6 {
        let out = ask(&h, &a).await;
        assert_eq!(
            out.report.outcome,
            Outcome::Succeeded,
            "run {run}: {:?}",
            out.report
        );
    }
    // Five counted failures opened the primary's arm: the sixth turn went
    // straight to the backup.
    assert_eq!(primary.request_count(), 5);
    assert_eq!(backup.request_count(), 6);
    // Every decision is counted, per provider.
    let m = h.engine.metrics();
    assert_eq!(
        m.get(
            "rein_breaker_transitions_total",
            &[
                ("arm", "provider"),
                ("name", "primary"),
                ("transition", "opened")
            ]
        ),
        1,
        "{}",
        m.render()
    );
    assert_eq!(
        m.get(
            "rein_model_fallbacks_total",
            &[
                ("primary", "primary/primary-model"),
                ("answered", "backup/backup-model")
            ]
        ),
        6
    );
    assert_eq!(
        m.get(
            "rein_calls_rejected_total",
            &[("arm", "provider"), ("name", "primary")]
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_overflow_goes_to_a_larger_window_and_never_to_the_same_model() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let large = mock("large-model").await;
    primary.push_reply(Reply::context_length_exceeded());
    let mut a = agent(
        &h.desk,
        openai("primary", &primary.openai_base_url()),
        false,
    );
    a.model = "primary-model".into();
    a.context_fallbacks = vec![ModelLink {
        provider: openai("large", &large.openai_base_url()),
        model: "large-model".into(),
        price: None,
        max_output_tokens: None,
    }];
    let out = ask(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
    assert_eq!(primary.request_count(), 1);
    assert_eq!(large.request_count(), 1);

    // Without a larger window: failed at once, the model asked once.
    let primary = mock("primary-model").await;
    primary.push_reply(Reply::context_length_exceeded());
    let mut a = agent(
        &h.desk,
        openai("primary", &primary.openai_base_url()),
        false,
    );
    a.model = "primary-model".into();
    let out = ask(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Failed, "{:?}", out.report);
    assert_eq!(primary.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_link_fails_the_first_failure_is_surfaced_naming_every_link() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    primary.push_reply(Reply::rate_limited(None));
    backup.push_replies((0..10).map(|_| Reply::unauthorized()));
    let a = chained(&h, &primary.openai_base_url(), &backup.openai_base_url());
    let out = ask(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Failed, "{:?}", out.report);
    let summary = &out.report.summary;
    assert!(
        summary.contains("rate_limited") || summary.contains("429"),
        "{summary}"
    );
    assert!(summary.contains("primary/primary-model"), "{summary}");
    assert!(summary.contains("backup/backup-model"), "{summary}");
    let _ = ms(0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_over_a_providers_limit_wait_in_line_and_never_exceed_it() {
    let h = harness(Faults::none()).await;
    let slow = MockModel::start_with(
        MockModelConfig::default()
            .with_fallback_text("answered")
            .with_latency(ms(100)),
    )
    .await
    .unwrap();
    let mut a = agent(&h.desk, openai("primary", &slow.openai_base_url()), false);
    a.provider_limits
        .insert("primary".into(), std::num::NonZeroU32::new(2).unwrap());
    let runs: Vec<_> = (0..6).map(|_| ask(&h, &a)).collect();
    let outs = futures_util::future::join_all(runs).await;
    for out in &outs {
        assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
    }
    assert_eq!(
        slow.request_count(),
        6,
        "every call waited instead of failing"
    );
    assert!(
        slow.peak_in_flight() <= 2,
        "peak {} over the limit",
        slow.peak_in_flight()
    );
    let mut waited = 0;
    for out in &outs {
        waited += events_of(&kinds(&h, out).await, EventKind::ModelQueueWaited).len();
    }
    assert!(waited > 0, "some calls queued for a slot");
}

#[tokio::test(start_paused = true)]
async fn a_first_byte_that_does_not_come_in_time_falls_back() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    primary.push_reply(Reply::text("late").with_stream_fault(
        rein_testkit::mock_model::StreamFault::silent(Duration::from_secs(5)),
    ));
    let mut a = chained(&h, &primary.openai_base_url(), &backup.openai_base_url());
    let streaming = rein_engine::provider::StreamSettings::new(ms(300), ms(300)).unwrap();
    a.provider = Arc::new(
        OpenAiProvider::new(
            "primary",
            &primary.openai_base_url(),
            None,
            Duration::from_secs(5),
            rein_engine::run::http_client().unwrap(),
        )
        .with_streaming(streaming),
    );
    let out = ask(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
    let used = events_of(&kinds(&h, &out).await, EventKind::ModelFallbackUsed);
    assert_eq!(used.len(), 1);
    assert_eq!(used[0]["after"][0]["category"], "timeout", "{used:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recovered_primary_takes_traffic_back_after_one_break_duration() {
    let clock = Arc::new(rein_core::clock::ManualClock::new());
    let for_engine: Arc<dyn rein_engine::Timer> = clock.clone();
    let h = common::harness_with(Faults::none(), move |b| b.clock(for_engine)).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    primary.push_replies((0..5).map(|_| Reply::server_error()));
    let a = chained(&h, &primary.openai_base_url(), &backup.openai_base_url());
    for _ in 0..6 {
        assert_eq!(ask(&h, &a).await.report.outcome, Outcome::Succeeded);
    }
    assert_eq!((primary.request_count(), backup.request_count()), (5, 6));
    // Still open just before the break ends.
    clock.advance(rein_core::breaker::DEFAULT_BREAK_DURATION - ms(1));
    ask(&h, &a).await;
    assert_eq!((primary.request_count(), backup.request_count()), (5, 7));
    // After it, the primary (recovered) is probed and answers.
    clock.advance(ms(2));
    let out = ask(&h, &a).await;
    assert_eq!(out.report.models, vec!["primary/primary-model".to_owned()]);
    assert_eq!((primary.request_count(), backup.request_count()), (6, 7));
    let out = ask(&h, &a).await;
    assert_eq!(out.report.models, vec!["primary/primary-model".to_owned()]);
}

/// A gateway-style binding of `primary` alone, under `limit`.
fn binding_of(primary: &str, limit: Option<u32>) -> rein_engine::run::ModelBinding {
    let mut provider_limits = std::collections::BTreeMap::new();
    if let Some(n) = limit {
        provider_limits.insert("primary".to_owned(), std::num::NonZeroU32::new(n).unwrap());
    }
    rein_engine::run::ModelBinding {
        name: "b".into(),
        kind: rein_core::registry::BindingKind::Chat,
        primary: ModelLink {
            provider: openai("primary", primary),
            model: "primary-model".into(),
            price: None,
            max_output_tokens: None,
        },
        fallbacks: Vec::new(),
        context_fallbacks: Vec::new(),
        provider_limits,
        provider_tokens: Default::default(),
        retry: rein_core::retry::RetryPolicy::default(),
        model_latency: rein_core::LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap(),
        stream: rein_engine::provider::StreamSettings::default(),
        same_model: rein_core::retry::SameModelRetry::NONE,
        deadline: rein_core::registry::DEFAULT_GATEWAY_DEADLINE,
        recover_streams: true,
    }
}

fn question(stream: bool) -> rein_engine::run::ModelAsk {
    rein_engine::run::ModelAsk {
        request: rein_engine::provider::ModelRequest {
            model: String::new(),
            messages: vec![rein_engine::provider::Message::user("Hi.")],
            tools: Vec::new(),
            max_tokens: None,
            options: Default::default(),
            continuation: false,
        },
        deadline: Duration::from_secs(10),
        stream,
        cancel: rein_engine::run::CancellationToken::new(),
        observer: None,
        tenant: None,
        trace_parent: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_holds_its_provider_slot_until_it_ends() {
    use futures_util::StreamExt;
    let h = harness(Faults::none()).await;
    let slow = MockModel::start_with(
        MockModelConfig::default()
            .with_fallback_text("one two three four five six")
            .with_event_interval(ms(20)),
    )
    .await
    .unwrap();
    let binding = binding_of(&slow.openai_base_url(), Some(1));
    let one = || async {
        let answer = h.engine.ask_model(&binding, question(true)).await.unwrap();
        let rein_engine::run::ModelReply::Stream(mut stream) = answer.reply else {
            panic!("a stream was asked for");
        };
        let mut done = false;
        while let Some(item) = stream.next().await {
            done |= matches!(item.unwrap(), rein_engine::provider::StreamEvent::Done(_));
        }
        assert!(done);
    };
    futures_util::future::join3(one(), one(), one()).await;
    assert_eq!(slow.request_count(), 3);
    assert_eq!(slow.peak_in_flight(), 1, "one stream at a time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_call_is_counted_when_its_stream_ends_and_a_dropped_one_as_cancelled() {
    use futures_util::StreamExt;
    let h = harness(Faults::none()).await;
    let model = MockModel::start_with(
        MockModelConfig::default().with_fallback_text("one two three four five six"),
    )
    .await
    .unwrap();
    let binding = binding_of(&model.openai_base_url(), None);
    let calls = |outcome: &str| {
        h.engine.metrics().get(
            "rein_model_calls_total",
            &[("provider", "primary"), ("outcome", outcome)],
        )
    };
    // Read to its end: counted once, ok, with its time to first event.
    let answer = h.engine.ask_model(&binding, question(true)).await.unwrap();
    let rein_engine::run::ModelReply::Stream(mut stream) = answer.reply else {
        panic!("a stream was asked for");
    };
    assert_eq!(calls("ok"), 0, "not before the stream ends");
    while stream.next().await.is_some() {}
    assert_eq!(calls("ok"), 1, "{}", h.engine.metrics().render());
    drop(stream);
    assert_eq!(calls("ok"), 1, "the drop after the end adds nothing");
    assert_eq!(
        h.engine.metrics().get(
            "rein_model_time_to_first_event_seconds_count",
            &[("provider", "primary")]
        ),
        1
    );
    // Dropped after its first event: the caller went away.
    let answer = h.engine.ask_model(&binding, question(true)).await.unwrap();
    let rein_engine::run::ModelReply::Stream(mut stream) = answer.reply else {
        panic!("a stream was asked for");
    };
    stream.next().await.unwrap().unwrap();
    drop(stream);
    assert_eq!(calls("cancelled"), 1, "{}", h.engine.metrics().render());
    assert_eq!(calls("ok"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_5xx_of_a_provider_falls_back() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    primary.push_reply(Reply::error(rein_testkit::mock_model::ApiError::new(
        520,
        "server_error",
        "origin error",
    )));
    let a = chained(&h, &primary.openai_base_url(), &backup.openai_base_url());
    let out = ask(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
    assert_eq!(out.report.models, vec!["backup/backup-model".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_larger_window_that_then_fails_is_reported_as_its_own_failure_not_an_overflow() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let large = mock("large-model").await;
    primary.push_reply(Reply::context_length_exceeded());
    large.push_replies((0..10).map(|_| Reply::unauthorized()));
    let mut a = agent(
        &h.desk,
        openai("primary", &primary.openai_base_url()),
        false,
    );
    a.model = "primary-model".into();
    a.context_fallbacks = vec![ModelLink {
        provider: openai("large", &large.openai_base_url()),
        model: "large-model".into(),
        price: None,
        max_output_tokens: None,
    }];
    let out = ask(&h, &a).await;
    assert_eq!(out.report.outcome, Outcome::Failed, "{:?}", out.report);
    let summary = &out.report.summary;
    assert!(summary.contains("large answered HTTP 401"), "{summary}");
    assert!(!summary.contains("context"), "{summary}");
    assert!(
        summary.contains("primary/primary-model") && summary.contains("large/large-model"),
        "{summary}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_primary_leaves_the_fallback_its_share_of_the_deadline() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    primary.push_reply(Reply::text("too late").delayed(Duration::from_secs(30)));
    let mut binding = binding_of(&primary.openai_base_url(), None);
    binding.fallbacks = vec![ModelLink {
        provider: openai("backup", &backup.openai_base_url()),
        model: "backup-model".into(),
        price: None,
        max_output_tokens: None,
    }];
    let mut ask = question(false);
    ask.deadline = Duration::from_secs(2);
    let answer = h.engine.ask_model(&binding, ask).await.unwrap();
    assert_eq!(answer.provider, "backup");
    assert!(answer.fell_back);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_circuit_tells_the_caller_when_to_come_back() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    primary.push_replies((0..20).map(|_| Reply::server_error()));
    let binding = binding_of(&primary.openai_base_url(), None);
    let mut rejected = None;
    for _ in 0..10 {
        match h.engine.ask_model(&binding, question(false)).await {
            Err(e) if e.category == rein_core::Category::CircuitOpen => {
                rejected = Some(e);
                break;
            }
            Err(_) => {}
            Ok(_) => panic!("the provider only fails"),
        }
    }
    let e = rejected.expect("the circuit opened");
    let after = e.retry_after.expect("a retry-after");
    assert!(
        after <= rein_core::breaker::DEFAULT_BREAK_DURATION && !after.is_zero(),
        "{after:?}"
    );
    assert_eq!(
        primary.request_count(),
        5,
        "the open circuit was not called"
    );
}

#[tokio::test(start_paused = true)]
async fn each_link_streams_under_its_own_providers_limits() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    primary.push_reply(Reply::text("late").with_stream_fault(
        rein_testkit::mock_model::StreamFault::silent(Duration::from_secs(60)),
    ));
    // The binding's own stream limits are generous; the primary's provider
    // allows 300 ms to the first byte, and that is what cuts it.
    let mut binding = binding_of(&primary.openai_base_url(), None);
    binding.primary.provider = Arc::new(
        OpenAiProvider::new(
            "primary",
            &primary.openai_base_url(),
            None,
            Duration::from_secs(60),
            rein_engine::run::http_client().unwrap(),
        )
        .with_streaming(rein_engine::provider::StreamSettings::new(ms(300), ms(300)).unwrap()),
    );
    binding.fallbacks = vec![ModelLink {
        provider: openai("backup", &backup.openai_base_url()),
        model: "backup-model".into(),
        price: None,
        max_output_tokens: None,
    }];
    let mut ask = question(true);
    ask.deadline = Duration::from_secs(60);
    let started = tokio::time::Instant::now();
    let answer = h.engine.ask_model(&binding, ask).await.unwrap();
    assert_eq!(answer.provider, "backup");
    // Paused time: exactly the primary's 300 ms, not half of the 60 s
    // deadline.
    assert_eq!(started.elapsed(), ms(300));
}

/// `binding_of(primary)` with `backup` as its fallback and the gateway's
/// same-model retries (issue 35).
fn gateway_chain(primary: &str, backup: &str) -> rein_engine::run::ModelBinding {
    let mut binding = binding_of(primary, None);
    binding.fallbacks = vec![ModelLink {
        provider: openai("backup", backup),
        model: "backup-model".into(),
        price: None,
        max_output_tokens: None,
    }];
    binding.same_model = rein_core::retry::SameModelRetry::default();
    binding
}

/// The `retry_scheduled` events `seen`, as JSON.
fn retries(seen: &rein_engine::testing::Seen) -> Vec<Value> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(kind, _)| *kind == EventKind::RetryScheduled)
        .map(|(_, data)| data.clone())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_short_retry_after_is_waited_out_on_the_primary_before_any_fallback() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    primary.push_reply(Reply::rate_limited(Some(
        rein_testkit::RetryAfter::Seconds(2),
    )));
    let binding = gateway_chain(&primary.openai_base_url(), &backup.openai_base_url());
    let (ask, seen) = rein_engine::testing::question();
    let started = tokio::time::Instant::now();
    let answer = h.engine.ask_model(&binding, ask).await.unwrap();
    assert_eq!(
        (answer.provider.as_str(), answer.fell_back),
        ("primary", false)
    );
    // Paused time: the server's wait, exactly, before the retry.
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!((primary.request_count(), backup.request_count()), (2, 0));
    let retries = retries(&seen);
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0]["before_fallback"], "retry_after");
    assert_eq!(retries[0]["delay_ms"], 2_000);
    assert_eq!(retries[0]["from_server"], true);
}

#[tokio::test(start_paused = true)]
async fn a_single_500_is_retried_on_the_primary_and_a_second_falls_back() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    let binding = gateway_chain(&primary.openai_base_url(), &backup.openai_base_url());
    primary.push_reply(Reply::server_error());
    let (ask, seen) = rein_engine::testing::question();
    let answer = h.engine.ask_model(&binding, ask).await.unwrap();
    assert_eq!(answer.provider, "primary");
    assert_eq!(retries(&seen)[0]["before_fallback"], "transient");
    // Two in a row: one same-model retry (the default), then the fallback.
    primary.push_replies([Reply::server_error(), Reply::server_error()]);
    let (ask, _) = rein_engine::testing::question();
    let answer = h.engine.ask_model(&binding, ask).await.unwrap();
    assert_eq!(
        (answer.provider.as_str(), answer.fell_back),
        ("backup", true)
    );
    assert_eq!((primary.request_count(), backup.request_count()), (4, 1));
}

#[tokio::test(start_paused = true)]
async fn a_429_cools_down_its_model_without_counting_against_the_provider() {
    let h = harness(Faults::none()).await;
    let primary = mock("primary-model").await;
    let backup = mock("backup-model").await;
    let binding = gateway_chain(&primary.openai_base_url(), &backup.openai_base_url());
    // Far beyond retry_after_max: the fallback answers, and the next call
    // moves on without asking the cooled-down model.
    primary.push_reply(Reply::rate_limited(Some(
        rein_testkit::RetryAfter::Seconds(60),
    )));
    for _ in 0..2 {
        let (ask, _) = rein_engine::testing::question();
        let answer = h.engine.ask_model(&binding, ask).await.unwrap();
        assert_eq!(answer.provider, "backup");
    }
    assert_eq!(
        primary.request_count(),
        1,
        "a cooled-down model is not asked"
    );
    // The provider's other model is not cooled down, and its arm counted
    // nothing: more 429s than consecutive_failures leave it closed.
    let mut other = binding_of(&primary.openai_base_url(), None);
    other.primary.model = "other-model".into();
    for _ in 0..6 {
        primary.push_reply(Reply::rate_limited(None));
    }
    // Its calls retry them under the policy until the script is spent.
    while primary.pending() > 0 {
        let (ask, _) = rein_engine::testing::question();
        let _ = h.engine.ask_model(&other, ask).await;
    }
    let (ask, _) = rein_engine::testing::question();
    let answer = h.engine.ask_model(&other, ask).await.unwrap();
    assert_eq!(answer.model, "other-model");
}

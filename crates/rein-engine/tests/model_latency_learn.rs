//! Observed model latency (issue 16, item 1): streamed answers are sampled
//! (time to first event and total), and a model's observed latency
//! replaces the configured `model_latency` once `min_samples` calls exist
//! — in the process that observed them and in a second one on the same
//! store. Against the testkit's mock OpenAI server on loopback, with an
//! injected delay, under paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{agent, harness_with, ms, pause_safe, run};
use futures_util::StreamExt;
use rein_core::deadline::BudgetLimits;
use rein_core::latency::LatencyHistogram;
use rein_core::{EventKind, Outcome};
use rein_engine::provider::{ModelProvider, OpenAiProvider};
use rein_engine::run::{Engine, ModelReply};
use rein_store::Store;
use rein_store_sqlite::SqliteStore;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use rein_testkit::order_desk::Faults;

/// Calls observed before a model's latency is trusted, in these tests.
const MIN_SAMPLES: u64 = 5;

/// The mock's injected delay before every answer.
const DELAY: Duration = Duration::from_millis(300);

fn openai(model: &MockModel) -> Arc<dyn ModelProvider> {
    Arc::new(OpenAiProvider::new(
        "mock",
        &model.openai_base_url(),
        None,
        Duration::from_secs(5),
        rein_engine::run::http_client().unwrap(),
    ))
}

/// One more process on the SQLite file `db`.
fn process(db: &std::path::Path) -> Engine {
    let sqlite: Arc<dyn Store> = Arc::new(SqliteStore::open(db).unwrap());
    Engine::builder(Arc::new(pause_safe(sqlite)))
        .rng_seed(7)
        .model_latency_min_samples(MIN_SAMPLES)
        .build()
        .unwrap()
}

/// The stored histogram of `subject`.
async fn stored(store: &dyn Store, subject: &str) -> Option<LatencyHistogram> {
    let rows = store.latency_histograms().await.unwrap();
    rows.records
        .into_iter()
        .find(|r| r.subject == subject)
        .map(|r| r.histogram)
}

#[tokio::test(start_paused = true)]
async fn a_models_observed_latency_replaces_the_configured_one_here_and_in_a_second_process() {
    let h = harness_with(Faults::none(), |b| b.model_latency_min_samples(MIN_SAMPLES)).await;
    let model = MockModel::start_with(MockModelConfig::default().with_latency(DELAY))
        .await
        .unwrap();
    // Configured: a 5 ms median. The model takes 300 ms.
    let roomy = agent(&h.desk, openai(&model), true);
    // 250 ms of wall clock, 200 ms of it forward: room for the configured
    // median, not for the observed one.
    let mut tight = roomy.clone();
    tight.budget = BudgetLimits::new(ms(250)).unwrap().with_steps(10).unwrap();

    // Before min_samples, the configured median decides: the tight run's
    // call is sent (and times out against the 300 ms model).
    for n in 1..MIN_SAMPLES {
        let out = run(&h, &roomy).await;
        assert_eq!(out.report.outcome, Outcome::Succeeded, "run {n}");
    }
    let sent = model.request_count();
    let out = run(&h, &tight).await;
    assert_eq!(
        model.request_count(),
        sent + 1,
        "{} samples: configured latency",
        MIN_SAMPLES - 1
    );
    assert_ne!(out.report.outcome, Outcome::Succeeded);

    // One more answered call: the observed median (300 ms) is in force,
    // and the tight run ends before it sends anything.
    run(&h, &roomy).await;
    let sent = model.request_count();
    let out = run(&h, &tight).await;
    assert_eq!(model.request_count(), sent, "no model call was sent");
    assert_eq!(
        out.report.outcome,
        Outcome::BudgetExhausted,
        "{:#?}",
        out.report
    );
    let events = common::kinds(&h, &out).await;
    assert!(
        events
            .iter()
            .any(|(k, d)| *k == EventKind::BudgetExhausted && d["scope"] == "model_call"),
        "{events:#?}"
    );

    // Persisted: every run's end flushed its samples.
    let calls = stored(h.store.as_ref(), "model:mock/mock-model")
        .await
        .expect("the model's calls are stored");
    assert!(calls.samples() >= MIN_SAMPLES, "{}", calls.samples());
    let p50 = calls.profile().unwrap().p50();
    assert!((DELAY..DELAY + ms(50)).contains(&p50), "{p50:?}");

    // A second process on the same file plans with the persisted profile
    // from its first call.
    let second = process(&h._dir.path().join("rein.db"));
    let sent = model.request_count();
    let out = second
        .run(
            &tight,
            &rein_engine::run::AcceptAll,
            rein_engine::run::RunRequest {
                input: "Hello.".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(out.report.outcome, Outcome::BudgetExhausted);
    assert_eq!(
        model.request_count(),
        sent,
        "the second process sent nothing"
    );

    // A fresh store knows nothing: the same tight run sends its call.
    let fresh = tempfile::tempdir().unwrap();
    let third = process(&fresh.path().join("rein.db"));
    let sent = model.request_count();
    third
        .run(
            &tight,
            &rein_engine::run::AcceptAll,
            rein_engine::run::RunRequest {
                input: "Hello.".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(model.request_count(), sent + 1);
}

#[tokio::test(start_paused = true)]
async fn a_streamed_answer_is_sampled_to_its_first_event_and_to_its_end() {
    let h = harness_with(Faults::none(), |b| b.model_latency_min_samples(MIN_SAMPLES)).await;
    let model = MockModel::start_with(
        MockModelConfig::new([Reply::text("one two three four five six")])
            .with_latency(DELAY)
            .with_event_interval(ms(100)),
    )
    .await
    .unwrap();
    let binding = rein_engine::run::ModelBinding {
        name: "b".into(),
        kind: rein_core::registry::BindingKind::Chat,
        primary: rein_engine::run::ModelLink {
            provider: openai(&model),
            model: "mock-model".into(),
            price: None,
            max_output_tokens: None,
        },
        fallbacks: Vec::new(),
        context_fallbacks: Vec::new(),
        provider_limits: Default::default(),
        provider_tokens: Default::default(),
        retry: rein_core::retry::RetryPolicy::default(),
        model_latency: rein_core::LatencyProfile::new(ms(5), ms(50), ms(100), 0).unwrap(),
        stream: rein_engine::provider::StreamSettings::default(),
        same_model: rein_core::retry::SameModelRetry::NONE,
        deadline: rein_core::registry::DEFAULT_GATEWAY_DEADLINE,
        recover_streams: true,
    };
    let ask = rein_engine::run::ModelAsk {
        request: rein_engine::provider::ModelRequest {
            model: String::new(),
            messages: vec![rein_engine::provider::Message::user("Count.")],
            tools: Vec::new(),
            max_tokens: None,
            options: Default::default(),
            continuation: false,
        },
        deadline: Duration::from_secs(30),
        stream: true,
        cancel: rein_engine::run::CancellationToken::new(),
        observer: None,
        tenant: None,
        trace_parent: None,
    };
    let answer = h.engine.ask_model(&binding, ask).await.unwrap();
    let ModelReply::Stream(mut stream) = answer.reply else {
        panic!("a stream was asked for");
    };
    let mut events = 0;
    while let Some(event) = stream.next().await {
        event.unwrap();
        events += 1;
    }
    drop(stream);
    assert!(events > 2, "several events: {events}");
    h.engine.flush_latency().await;

    let first = stored(h.store.as_ref(), "model_first_token:mock/mock-model")
        .await
        .expect("the first event is sampled");
    let total = stored(h.store.as_ref(), "model:mock/mock-model")
        .await
        .expect("the whole stream is sampled");
    let per_token = stored(h.store.as_ref(), "model_per_token:mock/mock-model")
        .await
        .expect("normalised by its output tokens");
    assert_eq!(
        (first.samples(), total.samples(), per_token.samples()),
        (1, 1, 1)
    );
    let (first, total) = (first.profile().unwrap(), total.profile().unwrap());
    // The delay, and at most one interval before the first event.
    assert!((DELAY..DELAY + ms(150)).contains(&first.p50()), "{first:?}");
    // Every event after the first waited 100 ms.
    assert!(
        total.p50() >= first.p50() + ms(100),
        "{total:?} after {first:?}"
    );
    assert!(per_token.profile().unwrap().p50() < total.p50());
}

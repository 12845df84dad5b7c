//! The `[breakers.cost]` arm on model calls, on real parts: the mock model
//! server over loopback streaming through the OpenAI-compatible provider.
//! Every model call of a run passes its cost account's arm (`tenant/agent`);
//! calls that consume tokens and give no answer are counted against it, and
//! once it opens no model call of that account is made — the next run of
//! the same agent and tenant is refused before anything is sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{agent, harness_with, kinds};
use rein_core::breaker::BreakersConfig;
use rein_core::{EventKind, Outcome};
use rein_engine::provider::{ModelProvider, OpenAiProvider, StreamSettings};
use rein_engine::run::{AcceptAll, RunRequest};
use rein_testkit::mock_model::{MockModel, Reply, StreamFault};
use rein_testkit::order_desk::Faults;
use serde_json::Value;

fn streaming(base_url: &str) -> Arc<dyn ModelProvider> {
    let generous = Duration::from_secs(5);
    Arc::new(
        OpenAiProvider::new(
            "mock",
            base_url,
            None,
            generous,
            rein_engine::run::http_client().unwrap(),
        )
        .with_streaming(StreamSettings::new(generous, generous).unwrap()),
    )
}

/// A stream that delivers some of its answer, then drops: tokens consumed,
/// nothing usable.
fn paid_and_dropped() -> Reply {
    Reply::text("the order arrives on the twenty-fourth of december")
        .with_usage(1500, 20)
        .with_stream_fault(StreamFault::Drop { after: 3 })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paid_failures_open_the_cost_arm_and_the_next_run_is_refused_unsent() {
    let mut breakers = BreakersConfig::default();
    // The provider arm stays closed: what stops the calls is the cost arm.
    breakers.provider.consecutive_failures = Some(100);
    breakers.cost.consecutive_failures = Some(2);
    breakers.cost.break_duration = Duration::from_secs(600);
    let h = harness_with(Faults::none(), move |b| b.breakers(breakers)).await;
    let model = MockModel::start([paid_and_dropped(), paid_and_dropped(), paid_and_dropped()])
        .await
        .unwrap();
    let a = agent(&h.desk, streaming(&model.openai_base_url()), false);
    let run = || {
        h.engine.run(
            &a,
            &AcceptAll,
            RunRequest {
                input: "When does A-1001 arrive?".into(),
                ..RunRequest::default()
            },
        )
    };

    let first = run().await.unwrap();
    assert_ne!(first.report.outcome, Outcome::Succeeded);
    assert_eq!(
        model.request_count(),
        2,
        "two paid failures open the arm; the third attempt is not sent"
    );
    let events = kinds(&h, &first).await;
    let opened: Vec<&Value> = events
        .iter()
        .filter(|(k, d)| *k == EventKind::BreakerStateChanged && d["arm"] == "cost")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(opened.len(), 1, "{events:#?}");
    assert_eq!(opened[0]["name"], "default/order_desk");
    assert_eq!(
        opened[0]["transition"]["transition"], "opened",
        "{}",
        opened[0]
    );

    let second = run().await.unwrap();
    assert_ne!(second.report.outcome, Outcome::Succeeded);
    assert_eq!(
        model.request_count(),
        2,
        "nothing of the second run was sent"
    );
    let refused: Vec<Value> = kinds(&h, &second)
        .await
        .into_iter()
        .filter(|(k, _)| *k == EventKind::CallRejected)
        .map(|(_, d)| d)
        .collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["arm"], "cost");
    assert_eq!(refused[0]["name"], "default/order_desk");
    assert_eq!(refused[0]["reason"], "circuit_open");
}

//! A model provider's own limits, on real parts: the mock model server over
//! loopback, the OpenAI-compatible provider, a real SQLite file, paused
//! tokio time (issue 15, model calls).
//!
//! - `tokens_per_minute`: each call is charged its prompt estimate plus its
//!   reserved output *before* it is sent, so two concurrent calls cannot
//!   both spend the same minute; the charge is settled with the usage the
//!   provider counted (a refund lets the next call go at once, a debt makes
//!   it wait). Measured at the mock: the gaps between arrivals.
//! - A 429 with `Retry-After` pauses the provider for every run of the
//!   engine: the mock (holding its 429 for the whole account, as a real
//!   provider does) sees no request until the wait is over.
//! - A call the bucket can never admit, or not before its deadline, is
//!   shed unsent (`call_shed`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use common::{Harness, agent, harness, kinds};
use rein_core::deadline::BudgetLimits;
use rein_core::registry::TokenLimit;
use rein_core::{EventKind, Outcome};
use rein_engine::provider::{ModelProvider, OpenAiProvider};
use rein_engine::run::{AcceptAll, AgentBinding, RunOutput, RunRequest};
use rein_testkit::RetryAfter;
use rein_testkit::mock_model::{MockModel, MockModelConfig, Reply};
use rein_testkit::order_desk::Faults;
use serde_json::Value;

/// 60 000 tokens per minute: 1 000 tokens a second.
const TOKENS_PER_MINUTE: u64 = 60_000;
/// Holds one call of [`OUTPUT_CAP`] but not two.
const TOKEN_BURST: u64 = 15_000;
/// The model's output cap: every call reserves it (no token budget), so a
/// call is charged a little more than this (its prompt's bound on top).
const OUTPUT_CAP: u32 = 10_000;

fn openai(base_url: &str) -> Arc<dyn ModelProvider> {
    Arc::new(OpenAiProvider::new(
        "primary",
        base_url,
        None,
        Duration::from_secs(60),
        rein_engine::run::http_client().unwrap(),
    ))
}

/// A text-only agent on `mock` (no tools: a prompt of a few hundred
/// tokens at most), whose provider has `tokens`, with `wall_clock`.
fn text_agent(
    h: &Harness,
    mock: &MockModel,
    tokens: Option<TokenLimit>,
    wall_clock: Duration,
) -> AgentBinding {
    let mut a = agent(&h.desk, openai(&mock.openai_base_url()), false);
    a.tools.clear();
    a.compensations.clear();
    a.max_output_tokens = Some(OUTPUT_CAP);
    a.budget = BudgetLimits::new(wall_clock)
        .unwrap()
        .with_steps(5)
        .unwrap();
    if let Some(tokens) = tokens {
        a.provider_tokens.insert("primary".into(), tokens);
    }
    a
}

fn bucket() -> TokenLimit {
    TokenLimit::new(
        NonZeroU64::new(TOKENS_PER_MINUTE).unwrap(),
        NonZeroU64::new(TOKEN_BURST).unwrap(),
    )
}

async fn ask(h: &Harness, a: &AgentBinding, request: RunRequest) -> RunOutput {
    h.engine
        .run(
            a,
            &AcceptAll,
            RunRequest {
                input: "Say something.".into(),
                ..request
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

/// The gap between the `i`-th and `j`-th arrival at the mock.
fn gap(mock: &MockModel, i: usize, j: usize) -> Duration {
    let at = mock.arrivals();
    at[j].saturating_duration_since(at[i])
}

#[tokio::test(start_paused = true)]
async fn a_call_is_charged_before_it_is_sent_so_a_concurrent_one_waits_for_tokens() {
    let h = harness(Faults::none()).await;
    // The first answer takes 10 s: its usage is not known when the second
    // call is decided, so only the charge made before it was sent can
    // hold the second one back.
    let mock = MockModel::start_with(MockModelConfig::new([
        Reply::text("slow")
            .with_usage(100, 50)
            .delayed(Duration::from_secs(10)),
        Reply::text("quick").with_usage(100, 50),
    ]))
    .await
    .unwrap();
    let a = text_agent(&h, &mock, Some(bucket()), Duration::from_secs(60));
    let first = ask(&h, &a, RunRequest::default());
    let second = async {
        while mock.request_count() == 0 {
            tokio::task::yield_now().await;
        }
        ask(&h, &a, RunRequest::default()).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(
        first.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        first.report
    );
    assert_eq!(
        second.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        second.report
    );
    assert_eq!(mock.request_count(), 2);
    // Each call is charged more than OUTPUT_CAP: the second waits until
    // the bucket has refilled 2 × 10 000 − 15 000 tokens at least, 5 s at
    // 1 000 a second — measured at the mock.
    assert!(
        gap(&mock, 0, 1) >= Duration::from_secs(5),
        "{:?}",
        gap(&mock, 0, 1)
    );
    let waited = events_of(&kinds(&h, &second).await, EventKind::RateLimited);
    assert_eq!(waited.len(), 1, "{waited:?}");
    assert_eq!(waited[0]["bucket"], "tokens");
    assert_eq!(waited[0]["resource_group"], "primary");
    assert_eq!(waited[0]["model"], "primary/mock-model");
    assert!(
        waited[0]["waited_ms"].as_u64().unwrap() >= 5_000,
        "{waited:?}"
    );
    assert!(events_of(&kinds(&h, &first).await, EventKind::RateLimited).is_empty());
}

#[tokio::test(start_paused = true)]
async fn the_charge_is_settled_with_the_usage_a_refund_frees_tokens_and_a_debt_is_waited_out() {
    let h = harness(Faults::none()).await;
    let mock = MockModel::start_with(MockModelConfig::new([
        // Far below the estimate: the difference goes back.
        Reply::text("small").with_usage(10, 10),
        // Far above it: the excess is owed.
        Reply::text("huge").with_usage(20_000, 5_000),
        Reply::text("after").with_usage(10, 10),
    ]))
    .await
    .unwrap();
    let a = text_agent(&h, &mock, Some(bucket()), Duration::from_secs(120));
    for _ in 0..2 {
        let out = ask(&h, &a, RunRequest::default()).await;
        assert_eq!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
        // Refunded: the second call finds the bucket (nearly) full again
        // and goes at once; had the estimate stayed charged, 15 000 less
        // one charge would not hold another.
        assert!(events_of(&kinds(&h, &out).await, EventKind::RateLimited).is_empty());
    }
    let third = ask(&h, &a, RunRequest::default()).await;
    assert_eq!(
        third.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        third.report
    );
    // The second call used 25 000 tokens against a charge of about
    // 10 000: the bucket is about 10 000 in debt, and the third call's
    // charge needs about 20 s of refill (at least 15 s for any prompt
    // bound below 5 000 tokens).
    assert!(
        gap(&mock, 1, 2) >= Duration::from_secs(15),
        "{:?}",
        gap(&mock, 1, 2)
    );
    let waited = events_of(&kinds(&h, &third).await, EventKind::RateLimited);
    assert_eq!(waited.len(), 1, "{waited:?}");
    assert_eq!(waited[0]["bucket"], "tokens");
    assert!(
        waited[0]["waited_ms"].as_u64().unwrap() >= 15_000,
        "{waited:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_call_larger_than_the_token_burst_is_shed_unsent() {
    let h = harness(Faults::none()).await;
    let mock = MockModel::start(Vec::<Reply>::new()).await.unwrap();
    let small = TokenLimit::new(
        NonZeroU64::new(TOKENS_PER_MINUTE).unwrap(),
        NonZeroU64::new(1_000).unwrap(),
    );
    let a = text_agent(&h, &mock, Some(small), Duration::from_secs(20));
    let out = ask(&h, &a, RunRequest::default()).await;
    assert_ne!(out.report.outcome, Outcome::Succeeded, "{:?}", out.report);
    assert_eq!(mock.request_count(), 0, "never sent");
    let events = kinds(&h, &out).await;
    let shed = events_of(&events, EventKind::CallShed);
    assert_eq!(shed.len(), 1, "{events:?}");
    assert_eq!(shed[0]["reason"], "rejected");
    assert_eq!(shed[0]["model"], "primary/mock-model");
    assert!(shed[0].get("tool").is_none(), "{shed:?}");
    assert!(events_of(&events, EventKind::ModelCallStarted).is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_call_the_bucket_admits_only_after_its_deadline_is_shed_at_once() {
    let h = harness(Faults::none()).await;
    let mock = MockModel::start_with(MockModelConfig::new([Reply::text("slow")
        .with_usage(100, 50)
        .delayed(Duration::from_secs(10))]))
    .await
    .unwrap();
    let patient = text_agent(&h, &mock, Some(bucket()), Duration::from_secs(60));
    // Three seconds: the bucket holds its call's tokens only after ~5 s.
    let hurried = text_agent(&h, &mock, Some(bucket()), Duration::from_secs(3));
    let first = ask(&h, &patient, RunRequest::default());
    let second = async {
        while mock.request_count() == 0 {
            tokio::task::yield_now().await;
        }
        ask(&h, &hurried, RunRequest::default()).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(
        first.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        first.report
    );
    assert_ne!(second.report.outcome, Outcome::Succeeded);
    assert_eq!(mock.request_count(), 1, "the hurried call never went out");
    let shed = events_of(&kinds(&h, &second).await, EventKind::CallShed);
    assert_eq!(shed.len(), 1, "{shed:?}");
    assert_eq!(shed[0]["reason"], "no_time");
    assert_eq!(
        shed[0]["waited_ms"], 0,
        "shed at once, not after waiting in vain"
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_with_retry_after_pauses_the_provider_for_every_run() {
    let h = harness(Faults::none()).await;
    // The mock holds its 429 for the whole account for 3 s, as a real
    // provider does: any request within them is answered 429 again and
    // counted as hammering.
    let mock = MockModel::start_with(
        MockModelConfig::new([Reply::rate_limited(Some(RetryAfter::Seconds(3)))])
            .with_enforced_retry_after(),
    )
    .await
    .unwrap();
    // No limit of its own: the pause is the provider's, not the config's.
    let a = text_agent(&h, &mock, None, Duration::from_secs(30));
    let limited = Arc::new(tokio::sync::Notify::new());
    let signal = limited.clone();
    let observer: rein_engine::run::Observer = Arc::new(move |e: &rein_core::event::Event| {
        if e.kind() == EventKind::RetryScheduled {
            signal.notify_one();
        }
    });
    let first = ask(
        &h,
        &a,
        RunRequest {
            observer: Some(observer),
            ..RunRequest::default()
        },
    );
    // The second run starts once the first was told 429 and waits to
    // retry: within the provider's 3 s.
    let second = async {
        limited.notified().await;
        ask(&h, &a, RunRequest::default()).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(
        first.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        first.report
    );
    assert_eq!(
        second.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        second.report
    );
    assert_eq!(
        mock.hammered(),
        0,
        "nothing was sent while the provider's 429 held"
    );
    assert_eq!(
        mock.request_count(),
        3,
        "the 429, its retry, the second run's call"
    );
    let waited = events_of(&kinds(&h, &second).await, EventKind::RateLimited);
    assert_eq!(waited.len(), 1, "{waited:?}");
    assert_eq!(waited[0]["bucket"], "provider");
    assert!(
        waited[0]["waited_ms"].as_u64().unwrap() >= 2_000,
        "{waited:?}"
    );
}

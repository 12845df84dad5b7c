#![allow(clippy::unwrap_used)]
use rein_core::Timestamp;
use std::time::Duration;

use super::*;
use rein_core::breaker::{ArmKind, OpenReason, Transition};
use rein_core::event::{
    BreakerStateChanged, CallRejected, CircuitOpen, CircuitRejected, Flag, ModelAnswered,
    ModelCallFailed, ModelCallFinished, ModelCallResult, PlanCreated, Refused, RetryScheduled,
    RetryTarget,
};
use rein_core::model::{FinishReason, TokenUsage};
use rein_core::{Category, Event, EventData, RunId};

fn event(data: impl Into<EventData>) -> Event {
    Event {
        run_id: RunId::new("r").unwrap(),
        seq: 0,
        step: 0,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms: Timestamp::from_millis(0),
        data: data.into(),
    }
}

fn retry(target: RetryTarget) -> RetryScheduled {
    RetryScheduled {
        target,
        next_attempt: 2,
        reason: Category::RateLimited,
        delay: Duration::from_millis(5),
        from_server: false,
        backoff_ceiling: Duration::from_millis(10),
        clamped: false,
        remaining: Duration::from_secs(1),
        same_key: None,
        before_fallback: None,
        worth: None,
    }
}

fn scope() -> Scope {
    Scope {
        tenant: "acme".into(),
        agent: "desk".into(),
    }
}

#[test]
fn decisions_are_counted_per_target_and_rendered_for_prometheus() {
    let m = Metrics::default();
    let s = scope();
    m.record(&event(retry(RetryTarget::Provider("openai".into()))), &s);
    m.record(&event(retry(RetryTarget::Tool("update".into()))), &s);
    m.record(&event(retry(RetryTarget::Provider("openai".into()))), &s);
    m.record(
        &event(BreakerStateChanged {
            arm: ArmKind::Provider,
            name: "openai".into(),
            transition: Transition::Opened {
                reason: OpenReason::ConsecutiveFailures {
                    count: 5,
                    threshold: 5,
                },
                until: rein_core::Instant::ORIGIN,
                break_duration: Duration::from_secs(1),
            },
        }),
        &s,
    );
    m.record(
        &event(ModelCallFinished {
            provider: "openai".into(),
            model: "m\"x".into(),
            attempt: 1,
            cost: None,
            elapsed: Some(Duration::from_millis(300)),
            first_event: None,
            result: ModelCallResult::Failed(ModelCallFailed {
                ok: Flag,
                category: Category::RateLimited,
                reason: "slow down".into(),
                tokens_spent: 0,
                key_env: None,
            }),
        }),
        &s,
    );
    m.record(
        &event(PlanCreated {
            intents: Vec::new(),
            rejected: 0,
        }),
        &s,
    );
    assert_eq!(
        m.get(
            "rein_retries_total",
            &[("kind", "model"), ("target", "openai")]
        ),
        2
    );
    assert_eq!(
        m.get(
            "rein_retries_total",
            &[("kind", "tool"), ("target", "update")]
        ),
        1
    );
    assert_eq!(
        m.get(
            "rein_model_calls_total",
            &[
                ("tenant", "acme"),
                ("agent", "desk"),
                ("provider", "openai"),
                ("model", "m\"x"),
                ("outcome", "rate_limited")
            ]
        ),
        1
    );
    let text = m.render();
    assert!(
        text.contains(
            "rein_breaker_transitions_total{arm=\"provider\",name=\"openai\",transition=\"opened\"} 1"
        ),
        "{text}"
    );
    assert!(
        text.contains("rein_breaker_state{arm=\"provider\",name=\"openai\"} 2"),
        "{text}"
    );
    assert!(text.contains("model=\"m\\\"x\""), "escaped: {text}");
    assert!(text.contains("# TYPE rein_retries_total counter"), "{text}");
    // The failed call's 300 ms is in the 0.5 s bucket, not the 0.25 s one.
    assert!(
        text.contains("rein_model_call_duration_seconds_bucket{provider=\"openai\",model=\"m\\\"x\",outcome=\"rate_limited\",streamed=\"false\",le=\"0.25\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("rein_model_call_duration_seconds_bucket{provider=\"openai\",model=\"m\\\"x\",outcome=\"rate_limited\",streamed=\"false\",le=\"0.5\"} 1"),
        "{text}"
    );
}

#[test]
fn an_open_arm_and_a_validation_refusal_are_separate_series() {
    let m = Metrics::default();
    let s = scope();
    m.record(
        &event(CallRejected::CircuitOpen(CircuitRejected {
            arm: ArmKind::Tool,
            name: "update".into(),
            reason: CircuitOpen::CircuitOpen,
            retry_after: Duration::from_secs(3),
            shared: None,
            opened_by: None,
            open_reason: None,
        })),
        &s,
    );
    m.record(
        &event(CallRejected::Refused(Refused {
            tool: "update".into(),
            call_id: Some("c1".into()),
            category: Some(Category::InvalidArguments),
            reason: "missing field".into(),
        })),
        &s,
    );
    assert_eq!(m.get("rein_calls_rejected_total", &[("name", "update")]), 1);
    assert_eq!(
        m.get(
            "rein_calls_refused_total",
            &[("tool", "update"), ("category", "invalid_arguments")]
        ),
        1
    );
}

#[test]
fn tokens_and_cost_are_counted_per_tenant_agent_and_model() {
    let m = Metrics::default();
    let answered = |input: u64, output: u64| ModelCallFinished {
        provider: "p".into(),
        model: "m".into(),
        attempt: 1,
        cost: Some(rein_core::deadline::Cost::from_micros(1_500_000)),
        elapsed: Some(Duration::from_millis(40)),
        first_event: Some(Duration::from_millis(15)),
        result: ModelCallResult::Answered(ModelAnswered {
            ok: Flag,
            usage: TokenUsage { input, output },
            finish: FinishReason::Stop,
            tool_calls: Vec::new(),
        }),
    };
    m.record(&event(answered(100, 7)), &scope());
    m.record(&event(answered(50, 3)), &scope());
    assert_eq!(
        m.get("rein_model_tokens_total", &[("direction", "input")]),
        150
    );
    assert_eq!(
        m.get(
            "rein_model_tokens_total",
            &[("tenant", "acme"), ("direction", "output")]
        ),
        10
    );
    let text = m.render();
    assert!(
        text.contains(
            "rein_model_cost_usd_total{tenant=\"acme\",agent=\"desk\",provider=\"p\",model=\"m\"} 3"
        ),
        "{text}"
    );
    assert!(
        text.contains("rein_model_time_to_first_event_seconds_count{provider=\"p\",model=\"m\"} 2"),
        "{text}"
    );
}

#[test]
fn a_host_registers_its_own_metrics_in_the_same_exposition() {
    let m = Metrics::default();
    let c: prometheus_client::metrics::counter::Counter = Default::default();
    m.register("rein_host_things", "Things the host counted.", c.clone());
    c.inc_by(4);
    assert_eq!(m.get("rein_host_things_total", &[]), 4);
}

/// The example config with `[server.metrics_labels]` `lines`, loaded as
/// every command loads it.
fn example_with_labels(lines: &str) -> crate::config::Registry {
    let example =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/order-desk");
    let dir = tempfile::tempdir().unwrap();
    let mut text = std::fs::read_to_string(example.join("rein.toml")).unwrap();
    text.push_str(&format!("\n[server.metrics_labels]\n{lines}\n"));
    std::fs::write(dir.path().join("rein.toml"), text).unwrap();
    std::fs::copy(
        example.join("demo.script.json"),
        dir.path().join("demo.script.json"),
    )
    .unwrap();
    let env = |k: &str| k.ends_with("_URL").then(|| "http://127.0.0.1:9".to_owned());
    crate::config::Loader::with_env(env)
        .load(&dir.path().join("rein.toml"))
        .unwrap()
}

#[test]
fn the_configured_agents_and_max_values_bound_the_labels() {
    // Named agents keep their value; any other agent is `other`.
    let registry = example_with_labels("agents = [\"order_desk\"]");
    let m = Metrics::new(LabelBounds::from(&registry.server().metrics_labels));
    assert_eq!(m.scope("acme", "order_desk").agent, "order_desk");
    assert_eq!(m.scope("acme", "order_desk_live").agent, OTHER);
    // No list: the first `max_values` seen keep theirs.
    let registry = example_with_labels("max_values = 1");
    let m = Metrics::new(LabelBounds::from(&registry.server().metrics_labels));
    assert_eq!(m.scope("acme", "order_desk").tenant, "acme");
    assert_eq!(m.scope("globex", "order_desk_live").tenant, OTHER);
    assert_eq!(m.scope("globex", "order_desk_live").agent, OTHER);
    assert_eq!(m.scope("acme", "order_desk").agent, "order_desk");
}

/// The governor's three decisions each count under their own family, with
/// the labels an operator filters by.
#[test]
fn governor_decisions_are_counted_by_group_and_cause() {
    use rein_core::event::{CallShed, ConcurrencyAdjusted, RateLimited};
    let m = Metrics::default();
    let s = scope();
    let waited = RateLimited {
        tool: "get_order".into(),
        model: None,
        resource_group: "order_api".into(),
        bucket: "requests".into(),
        waited: Duration::from_millis(40),
    };
    m.record(&event(waited.clone()), &s);
    m.record(&event(waited), &s);
    m.record(
        &event(CallShed {
            tool: "update".into(),
            model: None,
            resource_group: "order_api".into(),
            reason: "no_time".into(),
            waited: Duration::ZERO,
        }),
        &s,
    );
    for (old, new) in [(4, 3), (3, 4)] {
        m.record(
            &event(ConcurrencyAdjusted {
                resource_group: "order_api".into(),
                old,
                new,
                reason: "test".into(),
            }),
            &s,
        );
    }
    let group = ("group", "order_api");
    assert_eq!(
        m.get(
            "rein_governor_rate_limited_total",
            &[group, ("bucket", "requests")]
        ),
        2
    );
    assert_eq!(
        m.get(
            "rein_governor_calls_shed_total",
            &[group, ("reason", "no_time")]
        ),
        1
    );
    for direction in ["down", "up"] {
        assert_eq!(
            m.get(
                "rein_governor_concurrency_adjusted_total",
                &[group, ("direction", direction)]
            ),
            1,
            "{direction}"
        );
    }
}

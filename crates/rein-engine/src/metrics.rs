//! Counters of every decision the engine makes, per provider, tool and
//! arm: breaker transitions, fallbacks, queue waits, retries, calls and
//! run outcomes.
//!
//! # Why counters beside events
//!
//! Events explain one run; an operator watching a fleet needs rates: how
//! often a provider's breaker opens, how often a turn fell back, how long
//! the provider queue is. Counting the events as they are emitted (not as
//! they are stored) keeps one source of truth: a decision that made no
//! event is not counted, and a counted decision can always be found in a
//! run's stream. Model retries, tool retries and self-healing are separate
//! series, so one cannot hide in the other.
//!
//! Counters live in the engine's process, like its breakers; a cluster is
//! summed by the scraper. Rendered in the Prometheus text format by
//! [`Metrics::render`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};

use rein_core::event::{CallRejected, LinkName, RetryTarget, ToolCallFinished, TruncationAction};
use rein_core::{Category, Event, EventData};

/// A counter's identity: its name and its labels, in order.
type Key = (&'static str, Vec<(&'static str, String)>);

/// The engine's counters.
#[derive(Debug, Default)]
pub struct Metrics {
    counters: Mutex<BTreeMap<Key, u64>>,
}

/// The help line of each counter.
const HELP: [(&str, &str); 15] = [
    ("rein_runs_finished_total", "Runs that ended, by outcome."),
    (
        "rein_model_calls_total",
        "Model call attempts, by provider, model and outcome (ok or the failure category).",
    ),
    (
        "rein_tool_calls_total",
        "Tool call attempts, by tool and outcome (ok or the failure category).",
    ),
    (
        "rein_retries_total",
        "Retries scheduled, by kind (model or tool) and target: model retries and tool retries are separate series.",
    ),
    (
        "rein_breaker_transitions_total",
        "Breaker arm transitions, by arm kind, name and transition.",
    ),
    (
        "rein_calls_rejected_total",
        "Calls refused without being made because an arm was open, by arm kind and name.",
    ),
    (
        "rein_model_fallbacks_total",
        "Model turns answered by a link other than the primary, by primary and answering provider/model.",
    ),
    (
        "rein_model_queue_waits_total",
        "Model calls that waited for a provider slot, by provider and whether the wait expired.",
    ),
    (
        "rein_tool_queue_expired_total",
        "Tool attempts not made because no resource-group slot came in time, by group.",
    ),
    (
        "rein_model_output_truncated_total",
        "Model turns whose structured output was cut, by what rein did (salvaged or asked_again).",
    ),
    (
        "rein_self_heal_exhausted_total",
        "Tools disabled for the rest of a run because the model's own re-tries (self-healing) used up their allowance, by tool.",
    ),
    (
        "rein_loop_guard_trips_total",
        "Runs stopped by the loop guard.",
    ),
    (
        "rein_fan_out_refused_total",
        "Model turns that proposed more calls than their agent's max_calls_per_turn; none of their calls ran.",
    ),
    (
        "rein_compensations_total",
        "Compensations that finished, by status.",
    ),
    (
        "rein_latency_degraded_total",
        "Windows of samples whose p99 came out above twice the baseline, by subject (tool:NAME or model:PROVIDER/MODEL).",
    ),
];

/// The label value of something an event does not say.
const NONE: &str = "none";

impl Metrics {
    /// Counts what `event` says, if it is a decision worth a counter.
    pub fn record(&self, event: &Event) {
        let outcome = |ok: bool, category: Option<Category>| {
            if ok {
                "ok".to_owned()
            } else {
                category.map_or_else(|| NONE.to_owned(), |c| c.as_str().to_owned())
            }
        };
        let link = |l: &LinkName| format!("{}/{}", l.provider, l.model);
        let key: Key = match &event.data {
            EventData::RunFinished(d) => (
                "rein_runs_finished_total",
                vec![("outcome", d.outcome.as_str().to_owned())],
            ),
            EventData::ModelCallFinished(d) => (
                "rein_model_calls_total",
                vec![
                    ("provider", d.provider.clone()),
                    ("model", d.model.clone()),
                    ("outcome", outcome(d.ok(), d.category())),
                ],
            ),
            EventData::ToolCallFinished(d) if !matches!(d, ToolCallFinished::Skipped(_)) => (
                "rein_tool_calls_total",
                vec![
                    ("tool", d.tool().to_owned()),
                    ("outcome", outcome(d.ok(), d.category())),
                ],
            ),
            EventData::RetryScheduled(d) => {
                let kind = match d.target {
                    RetryTarget::Provider(_) => "model",
                    RetryTarget::Tool(_) => "tool",
                };
                (
                    "rein_retries_total",
                    vec![
                        ("kind", kind.to_owned()),
                        ("target", d.target.name().to_owned()),
                    ],
                )
            }
            EventData::BreakerStateChanged(d) => (
                "rein_breaker_transitions_total",
                vec![
                    ("arm", d.arm.as_str().to_owned()),
                    ("name", d.name.clone()),
                    ("transition", d.transition.as_str().to_owned()),
                ],
            ),
            EventData::CallRejected(d) => {
                let (arm, name) = match d {
                    CallRejected::CircuitOpen(c) => (c.arm.as_str().to_owned(), c.name.clone()),
                    // NOTE: a refusal names no arm; its labels have always
                    // read `none`.
                    CallRejected::Refused(_) => (NONE.to_owned(), NONE.to_owned()),
                };
                (
                    "rein_calls_rejected_total",
                    vec![("arm", arm), ("name", name)],
                )
            }
            EventData::ModelFallbackUsed(d) => (
                "rein_model_fallbacks_total",
                vec![
                    ("primary", link(&d.primary)),
                    ("answered", link(&d.answered)),
                ],
            ),
            EventData::ModelQueueWaited(d) => (
                "rein_model_queue_waits_total",
                vec![
                    ("provider", d.provider.clone()),
                    ("expired", d.expired.to_string()),
                ],
            ),
            EventData::ConcurrencyWaitExpired(d) => (
                "rein_tool_queue_expired_total",
                vec![("group", d.resource_group.clone())],
            ),
            EventData::RateLimited(d) => (
                "rein_governor_rate_limited_total",
                vec![
                    ("group", d.resource_group.clone()),
                    ("bucket", d.bucket.clone()),
                ],
            ),
            EventData::CallShed(d) => (
                "rein_governor_calls_shed_total",
                vec![
                    ("group", d.resource_group.clone()),
                    ("reason", d.reason.clone()),
                ],
            ),
            EventData::ConcurrencyAdjusted(d) => (
                "rein_governor_concurrency_adjusted_total",
                vec![
                    ("group", d.resource_group.clone()),
                    (
                        "direction",
                        if d.new < d.old { "down" } else { "up" }.to_owned(),
                    ),
                ],
            ),
            EventData::LatencyDegraded(d) => (
                "rein_latency_degraded_total",
                vec![("subject", d.subject.clone())],
            ),
            EventData::LoopDetected(_) => ("rein_loop_guard_trips_total", Vec::new()),
            EventData::FanOutRefused(_) => ("rein_fan_out_refused_total", Vec::new()),
            EventData::ToolDisabled(d) => (
                "rein_self_heal_exhausted_total",
                vec![("tool", d.tool.clone())],
            ),
            EventData::ModelOutputTruncated(d) => (
                "rein_model_output_truncated_total",
                vec![(
                    "action",
                    match d.action {
                        TruncationAction::Salvaged => "salvaged",
                        TruncationAction::AskedAgain => "asked_again",
                    }
                    .to_owned(),
                )],
            ),
            EventData::CompensationFinished(d) => (
                "rein_compensations_total",
                vec![("status", d.status.as_str().to_owned())],
            ),
            _ => return,
        };
        *self
            .counters
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key)
            .or_insert(0) += 1;
    }

    /// The value of counter `name` with exactly `labels` (0 when never
    /// counted).
    pub fn get(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        counters
            .iter()
            .find(|((n, l), _)| {
                *n == name
                    && l.len() == labels.len()
                    && l.iter()
                        .zip(labels)
                        .all(|((k, v), (k2, v2))| k == k2 && v == v2)
            })
            .map_or(0, |(_, v)| *v)
    }

    /// Every counter in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let counters = self.counters.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        for (name, help) in HELP {
            let labelled: Vec<(Vec<(&str, &str)>, u64)> = counters
                .iter()
                .filter(|((n, _), _)| *n == name)
                .map(|((_, labels), value)| {
                    let labels = labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    (labels, *value)
                })
                .collect();
            let samples: Vec<(&[(&str, &str)], u64)> = labelled
                .iter()
                .map(|(labels, value)| (labels.as_slice(), *value))
                .collect();
            write_family(&mut out, name, Kind::Counter, help, &samples);
        }
        out
    }
}

/// The type of a metric family in the text format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever grows.
    Counter,
    /// Goes up and down.
    Gauge,
}

/// Appends one metric family to `out` in the Prometheus text exposition
/// format: its `HELP` and `TYPE` lines, then each sample with its labels
/// (values escaped). Shared by every part of rein that exposes metrics, so
/// they all render alike.
pub fn write_family(
    out: &mut String,
    name: &str,
    kind: Kind,
    help: &str,
    samples: &[(&[(&str, &str)], u64)],
) {
    let kind = match kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
    };
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
            continue;
        }
        let labels: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
            .collect();
        let _ = writeln!(out, "{name}{{{}}} {value}", labels.join(","));
    }
}

/// A label value escaped for the text format.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::time::Duration;

    use super::*;
    use rein_core::RunId;
    use rein_core::breaker::{ArmKind, OpenReason, Transition};
    use rein_core::event::{
        BreakerStateChanged, Flag, ModelCallFailed, ModelCallFinished, ModelCallResult,
        PlanCreated, RetryScheduled,
    };

    fn event(data: impl Into<EventData>) -> Event {
        Event {
            run_id: RunId::new("r").unwrap(),
            seq: 0,
            step: 0,
            intent_id: None,
            attempt_id: None,
            idempotency_key: None,
            at_ms: 0,
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
        }
    }

    #[test]
    fn decisions_are_counted_per_target_and_rendered_for_prometheus() {
        let m = Metrics::default();
        m.record(&event(retry(RetryTarget::Provider("openai".into()))));
        m.record(&event(retry(RetryTarget::Tool("update".into()))));
        m.record(&event(retry(RetryTarget::Provider("openai".into()))));
        m.record(&event(BreakerStateChanged {
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
        }));
        m.record(&event(ModelCallFinished {
            provider: "openai".into(),
            model: "m\"x".into(),
            attempt: 1,
            cost: None,
            result: ModelCallResult::Failed(ModelCallFailed {
                ok: Flag,
                category: Category::RateLimited,
                reason: "slow down".into(),
                tokens_spent: 0,
                key_env: None,
            }),
        }));
        m.record(&event(PlanCreated {
            intents: Vec::new(),
            rejected: 0,
        }));
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
        assert!(text.contains("model=\"m\\\"x\""), "escaped: {text}");
        assert!(text.contains("# TYPE rein_runs_finished_total counter"));
    }
}

//! Human rendering of the event stream and the run report.

use std::fmt::Write as _;

use std::time::Duration;

use rein_core::event::{
    AbandonReason, CallRejected, ModelCallResult, StopReason, ToolCallFinished,
};
use rein_core::retry::GiveUpReason;
use rein_core::{Category, Effect, Event, EventData, Outcome, RunReport, Timestamp};
use serde_json::Value;

/// One readable line for an event: time since the run started, step, kind,
/// and what the decision was and why.
pub fn line(event: &Event, started: Timestamp) -> String {
    let offset = event.at_ms.as_millis().saturating_sub(started.as_millis());
    let detail = match &event.data {
        EventData::RunStarted(d) => {
            format!("agent {} on {} ({})", d.agent, d.provider, d.model)
        }
        EventData::ModelCallStarted(d) => format!(
            "{} attempt {} (allowance {}ms)",
            d.provider,
            d.attempt,
            ms(d.allowance)
        ),
        EventData::ModelCallFinished(d) => match &d.result {
            ModelCallResult::Answered(a) => {
                let tokens = a.usage.input + a.usage.output;
                if a.tool_calls.is_empty() {
                    format!("answered ({tokens} tokens)")
                } else {
                    format!("proposed {} ({tokens} tokens)", a.tool_calls.join(", "))
                }
            }
            ModelCallResult::Failed(f) => format!("failed: {} — {}", f.category, f.reason),
        },
        EventData::PlanCreated(d) => {
            format!("{} intent(s) planned and persisted", d.intents.len())
        }
        EventData::BudgetAllocated(d) => format!(
            "{} branches share the remainder: {}ms each",
            d.branches,
            d.each.map_or(0, ms)
        ),
        EventData::CallRejected(CallRejected::CircuitOpen(d)) => format!(
            "{} {}: circuit open, no call made (retry after {}ms)",
            d.arm.as_str(),
            d.name,
            ms(d.retry_after)
        ),
        EventData::CallRejected(CallRejected::Refused(d)) => format!(
            "{}: {} — {} (never sent)",
            d.tool,
            d.category.map_or("", Category::as_str),
            d.reason
        ),
        EventData::ToolCallStarted(d) => format!(
            "{} attempt {} (allowance {}ms, {}ms left)",
            d.tool,
            d.attempt,
            ms(d.allowance),
            ms(d.remaining)
        ),
        EventData::ToolCallFinished(ToolCallFinished::Succeeded(d)) => {
            let replayed = if d.replayed { ", replayed by key" } else { "" };
            format!("{} ok in {}ms{replayed}", d.tool, ms(d.elapsed))
        }
        EventData::ToolCallFinished(ToolCallFinished::Skipped(d)) if d.ok => {
            format!("{} ok in 0ms", d.tool)
        }
        EventData::ToolCallFinished(d) => {
            let (effect, reason) = match d {
                ToolCallFinished::Skipped(s) => (s.effect, s.reason.as_str()),
                ToolCallFinished::NotSent(s) => (Some(s.effect), s.reason.as_str()),
                ToolCallFinished::Failed(s) => (Some(s.effect), s.reason.as_str()),
                ToolCallFinished::Succeeded(_) => (None, ""),
            };
            format!(
                "{} failed: {}, effect {} — {reason}",
                d.tool(),
                d.category().map_or("", Category::as_str),
                effect.map_or("", Effect::as_str),
            )
        }
        EventData::RetryScheduled(d) => {
            let source = if d.from_server {
                "server's Retry-After".to_owned()
            } else {
                format!("full jitter on [0, {}ms]", ms(d.backoff_ceiling))
            };
            let key = if d.same_key == Some(true) {
                ", same key"
            } else {
                ""
            };
            format!(
                "{} attempt {} in {}ms ({source}{key})",
                d.target.name(),
                d.next_attempt,
                ms(d.delay)
            )
        }
        EventData::RetryAbandoned(d) => {
            format!("{} not retried: {}", d.target.name(), reason(&d.reason))
        }
        EventData::IdempotencyLookup(d) => format!("{}: {}", d.tool, d.reason),
        EventData::LedgerRecorded(d) => format!(
            "{} → {}",
            d.tool.as_deref().unwrap_or(""),
            d.status.as_str()
        ),
        EventData::BreakerStateChanged(d) => {
            format!("{} {}: {}", d.arm.as_str(), d.name, d.transition.as_str())
        }
        EventData::BudgetExhausted(d) => format!(
            "{} budget: needs {}, {} remain",
            d.exhausted.dimension, d.exhausted.needed, d.exhausted.remaining
        ),
        EventData::FinalTurnRequested(d) => {
            format!("{}; asked for a final answer without tools", d.reason)
        }
        EventData::LoopDetected(d) => d.message.clone(),
        EventData::FanOutRefused(d) => format!(
            "{} calls proposed, at most {} per turn: none ran, the model is told to batch or narrow",
            d.proposed, d.cap
        ),
        EventData::RateLimited(d) => match &d.model {
            Some(model) => format!(
                "model call to {model} waited {} for provider {}'s {} bucket",
                human(d.waited),
                d.resource_group,
                d.bucket
            ),
            None => format!(
                "{} waited {} for resource group {}'s {} bucket",
                d.tool,
                human(d.waited),
                d.resource_group,
                d.bucket
            ),
        },
        EventData::CallShed(d) => match &d.model {
            Some(model) => format!(
                "model call to {model} shed unsent by provider {} ({}) after waiting {}: never sent",
                d.resource_group,
                shed_reason(&d.reason),
                human(d.waited)
            ),
            None => format!(
                "{} shed unsent by resource group {} ({}) after waiting {}: never declared, never sent",
                d.tool,
                d.resource_group,
                shed_reason(&d.reason),
                human(d.waited)
            ),
        },
        EventData::ConcurrencyAdjusted(d) => format!(
            "resource group {} concurrency limit {} → {}: {}",
            d.resource_group, d.old, d.new, d.reason
        ),
        EventData::ToolDisabled(d) => format!(
            "{} disabled for this run after {} failures",
            d.tool, d.failures
        ),
        EventData::PartialSuccessReturned(d) => {
            format!("{} completed, {} not completed", d.completed, d.incomplete)
        }
        EventData::RunResumed(d) => {
            let mut line = format!(
                "continued after step {}: {} step(s) not run again, {} effect(s) not repeated, {} repeated under their keys",
                d.marker.continued_from_step,
                d.marker.steps_skipped,
                d.marker.not_reexecuted.len(),
                d.marker.reexecuted_with_same_key.len()
            );
            if !d.marker.retried.is_empty() {
                let _ = write!(
                    line,
                    "; {} action(s) its report said to retry sent again under their intent ids{}",
                    d.marker.retried.len(),
                    if d.marker.retried_early {
                        ", before their wait ended (--now)"
                    } else {
                        ""
                    }
                );
            }
            if let Some(change) = &d.marker.contract_changed {
                let _ = write!(
                    line,
                    "; its contract changed since it started ({} then, {} now)",
                    change.was, change.now
                );
            }
            line
        }
        EventData::RunFinished(d) => format!(
            "{} after {} step(s) in {}ms",
            d.outcome.as_str(),
            d.steps,
            ms(d.elapsed)
        ),
        data => data.to_value().unwrap_or_default().to_string(),
    };
    format!(
        "{:>8.3}s  step {:<2} {:<24} {}",
        offset as f64 / 1000.0,
        event.step,
        event.kind().as_str(),
        detail
    )
}

/// Whole milliseconds, as the event stream writes them.
fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// A wait in human units, to the millisecond (`0s` for none).
fn human(d: Duration) -> String {
    let whole = Duration::from_millis(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
    humantime::format_duration(whole).to_string()
}

/// What a `call_shed` reason means.
fn shed_reason(reason: &str) -> &str {
    match reason {
        "no_time" => "admitted only after its latest start",
        "wait_expired" => "no slot before its latest start",
        "rejected" => "never admissible",
        "share_unknown" => "its node's part of the shared limit unknown in time",
        "budget_after_wait" => "the wait left less than the call needs",
        other => other,
    }
}

fn reason(r: &AbandonReason) -> String {
    match r {
        AbandonReason::GaveUp(GiveUpReason::ServerWaitBeyondDeadline {
            retry_after,
            remaining,
        }) => format!(
            "the server asks to wait {} but only {} remain",
            humantime::format_duration(*retry_after),
            humantime::format_duration(*remaining)
        ),
        AbandonReason::GaveUp(GiveUpReason::Irreversible) => {
            "irreversible tools are never retried".into()
        }
        AbandonReason::GaveUp(GiveUpReason::NotRetryable { category }) => {
            format!("{category} is not retryable")
        }
        AbandonReason::GaveUp(GiveUpReason::AttemptsExhausted {
            attempts,
            max_attempts,
        }) => format!("{attempts} of {max_attempts} attempts used"),
        AbandonReason::GaveUp(GiveUpReason::RetryBudgetExhausted) => {
            "the target's retry budget is spent".into()
        }
        AbandonReason::GaveUp(GiveUpReason::DeadlineTooClose { .. }) => {
            "not enough time left for another attempt".into()
        }
        AbandonReason::GaveUp(GiveUpReason::NotWorthItsCost { worth }) => format!(
            "worth ${:.4} ({} of {} retries succeeded) is below its cost ${:.4}",
            worth.expected_value_micros as f64 / 1e6,
            worth.rate.successes,
            worth.rate.tries,
            worth.expected_cost_micros as f64 / 1e6
        ),
        AbandonReason::Stopped(StopReason::Cancelled) => "cancelled".into(),
        AbandonReason::Stopped(StopReason::CircuitOpen { .. }) => "circuit_open".into(),
        AbandonReason::RunBudget(_) => "the run's model retry allowance is spent".into(),
    }
}

/// The report, for a terminal.
pub fn report(report: &RunReport, limits: Option<&rein_core::deadline::BudgetLimits>) -> String {
    let mut out = String::new();
    let mark = match report.outcome {
        Outcome::Succeeded => "✔",
        Outcome::PartialSuccess => "◐",
        _ => "✘",
    };
    let _ = writeln!(out, "{mark} outcome: {}", report.outcome);
    let _ = writeln!(out, "  {}", report.summary);
    if !report.completed.is_empty() {
        let _ = writeln!(out, "  completed:");
        for a in &report.completed {
            let ledger = a
                .ledger
                .map(|l| format!(" [ledger: {l}]"))
                .unwrap_or_default();
            let _ = writeln!(out, "    ✔ {}{ledger} {}", a.tool, compact(&a.result));
        }
    }
    if !report.incomplete.is_empty() {
        let _ = writeln!(out, "  not completed:");
        for a in &report.incomplete {
            let ledger = a
                .ledger
                .map(|l| format!(" [ledger: {l}]"))
                .unwrap_or_default();
            let doubt = if a.maybe_applied {
                " (may have taken effect)"
            } else {
                " (did not take effect)"
            };
            let _ = writeln!(
                out,
                "    ✘ {} — {}{doubt}{ledger}: {}",
                a.tool, a.category, a.reason
            );
        }
    }
    let _ = writeln!(
        out,
        "  recoverable: {}",
        if report.recoverable { "yes" } else { "no" }
    );
    let _ = writeln!(out, "  recommendation: {}", report.recommendation);
    if let Some(answer) = &report.answer {
        let _ = writeln!(out, "  model's answer: {answer}");
    }
    let _ = writeln!(
        out,
        "  consumed: {}",
        crate::limits::consumed_line(report, limits)
    );
    out
}

fn compact(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 120 {
        format!("{}…", text.chars().take(120).collect::<String>())
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rein_core::RunId;
    use rein_core::event::{CallShed, ConcurrencyAdjusted, RateLimited};

    fn event(data: EventData) -> Event {
        Event {
            run_id: RunId::new("run-1").unwrap_or_else(|_| unreachable!("a valid id")),
            seq: 1,
            step: 2,
            intent_id: None,
            attempt_id: None,
            idempotency_key: None,
            at_ms: Timestamp::from_millis(1_250),
            data,
        }
    }

    #[test]
    fn governor_decisions_read_as_sentences_not_json() {
        let waited = line(
            &event(EventData::RateLimited(RateLimited {
                tool: "get_order".into(),
                model: None,
                resource_group: "order_api".into(),
                bucket: "requests".into(),
                waited: Duration::from_millis(350),
            })),
            Timestamp::from_millis(1_000),
        );
        assert!(waited.contains("rate_limited"), "{waited}");
        assert!(
            waited
                .contains("get_order waited 350ms for resource group order_api's requests bucket"),
            "{waited}"
        );
        let shed = line(
            &event(EventData::CallShed(CallShed {
                tool: "update_delivery_time".into(),
                model: None,
                resource_group: "order_api".into(),
                reason: "no_time".into(),
                waited: Duration::ZERO,
            })),
            Timestamp::from_millis(1_000),
        );
        assert!(shed.contains("call_shed"), "{shed}");
        assert!(
            shed.contains("update_delivery_time shed unsent by resource group order_api (admitted only after its latest start) after waiting 0s"),
            "{shed}"
        );
        let adjusted = line(
            &event(EventData::ConcurrencyAdjusted(ConcurrencyAdjusted {
                resource_group: "order_api".into(),
                old: 4,
                new: 3,
                reason: "the target signalled overload".into(),
            })),
            Timestamp::from_millis(1_000),
        );
        assert!(
            adjusted.contains(
                "resource group order_api concurrency limit 4 → 3: the target signalled overload"
            ),
            "{adjusted}"
        );
        for l in [&waited, &shed, &adjusted] {
            assert!(!l.contains('{'), "no raw JSON: {l}");
        }
    }
}

//! Human rendering of the event stream and the run report.

use std::fmt::Write as _;

use std::time::Duration;

use rein_core::event::{
    AbandonReason, AbortedWork, BaselineSource, CallRejected, HandOn, ModelCallResult, StopReason,
    ToolCallFinished, TruncationAction,
};
use rein_core::model::FinishReason;
use rein_core::plural::count;
use rein_core::retry::GiveUpReason;
use rein_core::{Category, Effect, Event, EventData, FailurePolicy, Outcome, RunReport, Timestamp};
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
            "{} attempt {} (allowance {})",
            d.provider,
            d.attempt,
            crate::limits::human(d.allowance)
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
            format!("{} planned and persisted", count(d.intents.len(), "intent"))
        }
        EventData::BudgetAllocated(d) => format!(
            "{} share the remainder: {} each",
            count(d.branches, "branch"),
            crate::limits::human(d.each.unwrap_or_default())
        ),
        EventData::CallRejected(CallRejected::CircuitOpen(d)) => format!(
            "{} {}: circuit open, no call made (retry after {})",
            d.arm.as_str(),
            d.name,
            crate::limits::human(d.retry_after)
        ),
        EventData::CallRejected(CallRejected::Refused(d)) => format!(
            "{}: {} — {} (never sent)",
            d.tool,
            d.category.map_or("", Category::as_str),
            d.reason
        ),
        EventData::ToolCallStarted(d) => format!(
            "{} attempt {} (allowance {}, {} left)",
            d.tool,
            d.attempt,
            crate::limits::human(d.allowance),
            crate::limits::human(d.remaining)
        ),
        EventData::ToolCallFinished(ToolCallFinished::Succeeded(d)) => {
            let replayed = if d.replayed { ", replayed by key" } else { "" };
            format!(
                "{} ok in {}{replayed}",
                d.tool,
                crate::limits::human(d.elapsed)
            )
        }
        EventData::ToolCallFinished(ToolCallFinished::Skipped(d)) if d.ok => {
            format!("{} ok, answered from the ledger", d.tool)
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
                format!(
                    "full jitter on [0, {}]",
                    crate::limits::human(d.backoff_ceiling)
                )
            };
            let key = if d.same_key == Some(true) {
                ", same key"
            } else {
                ""
            };
            format!(
                "{} attempt {} in {} ({source}{key})",
                d.target.name(),
                d.next_attempt,
                crate::limits::human(d.delay)
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
            "{} proposed, at most {} per turn: none ran, the model is told to batch or narrow",
            count(d.proposed, "call"),
            d.cap
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
            "{} disabled for this run after {}",
            d.tool,
            count(d.failures, "failure")
        ),
        EventData::PartialSuccessReturned(d) => {
            format!("{} completed, {} not completed", d.completed, d.incomplete)
        }
        EventData::RunResumed(d) => {
            let mut line = format!(
                "continued after step {}: {} not run again, {} not repeated, {} repeated under their keys",
                d.marker.continued_from_step,
                count(d.marker.steps_skipped, "step"),
                count(d.marker.not_reexecuted.len(), "effect"),
                d.marker.reexecuted_with_same_key.len()
            );
            if !d.marker.retried.is_empty() {
                let _ = write!(
                    line,
                    "; {} its report said to retry sent again under {} intent {}{}",
                    count(d.marker.retried.len(), "action"),
                    if d.marker.retried.len() == 1 {
                        "its"
                    } else {
                        "their"
                    },
                    if d.marker.retried.len() == 1 {
                        "id"
                    } else {
                        "ids"
                    },
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
            "{} after {} in {}",
            d.outcome.as_str(),
            count(d.steps, "step"),
            crate::limits::human(d.elapsed)
        ),
        EventData::RunCancelled(d) => {
            let at = match (d.aborted, &d.provider, d.at_step_boundary) {
                (Some(AbortedWork::ModelCall), Some(provider), _) => {
                    format!("; its call to {provider} was abandoned")
                }
                (Some(AbortedWork::ModelCall), None, _) => "; its model call was abandoned".into(),
                (_, _, Some(true)) => " at a step boundary".into(),
                _ => String::new(),
            };
            format!("{}{at}", d.reason)
        }
        EventData::RunFailed(d) => format!("{}: {}", d.error_type, d.reason),
        EventData::ConcurrencyWaitExpired(d) => format!(
            "{} attempt {}: no slot of resource group {} (limit {}) within {}",
            d.tool,
            d.attempt,
            d.resource_group,
            d.max_concurrency,
            crate::limits::human(d.queue_wait)
        ),
        EventData::ModelQueueWaited(d) => {
            let ended = if d.expired { "gave up after" } else { "waited" };
            format!(
                "{ended} {} for one of {} concurrent calls to {}",
                crate::limits::human(d.queue_wait),
                d.max_concurrency,
                d.provider
            )
        }
        EventData::ModelFallbackUsed(d) => {
            let after = d
                .after
                .iter()
                .map(|m| format!("{}/{} {}", m.provider, m.model, m.category.as_str()))
                .collect::<Vec<_>>()
                .join(", ");
            format!(
                "answered by {}/{} instead of {}/{} (after {after})",
                d.answered.provider, d.answered.model, d.primary.provider, d.primary.model
            )
        }
        EventData::StreamRecovered(d) => {
            let sent = format!(
                "stream from {}/{} cut ({}) after {} sent",
                d.cut.provider,
                d.cut.model,
                d.category.as_str(),
                count(d.sent_chars as usize, "character")
            );
            match (&d.answered, &d.failure) {
                (Some(by), _) => format!(
                    "{sent}: {} by {}/{}",
                    d.recovery.as_str(),
                    by.provider,
                    by.model
                ),
                (None, Some(why)) => format!("{sent}: not recovered ({why})"),
                (None, None) => format!("{sent}: not recovered"),
            }
        }
        EventData::ModelOutputTruncated(d) => {
            let kept = match d.action {
                TruncationAction::Salvaged => format!("kept {}", list(&d.salvaged)),
                TruncationAction::AskedAgain if d.salvaged.is_empty() => {
                    format!("asked again for {}", list(&d.asked_again))
                }
                TruncationAction::AskedAgain => format!(
                    "kept {}, asked again for {}",
                    list(&d.salvaged),
                    list(&d.asked_again)
                ),
            };
            format!(
                "output cut ({}) in {}: {kept}",
                finish(d.finish),
                count(d.calls, "call")
            )
        }
        EventData::CheckpointWritten(_) => "the run's state is durable up to here".into(),
        EventData::SettlementStarted(d) => {
            let mut line = format!(
                "policy {}: {} to settle",
                policy(d.policy),
                count(d.open_records, "open record")
            );
            if d.child_runs > 0 {
                let _ = write!(line, ", {}", count(d.child_runs, "child run"));
            }
            if d.irreversible_open {
                line.push_str(", an irreversible effect among them");
            }
            if d.already_with_a_human {
                line.push_str(", some already with a human");
            }
            line
        }
        EventData::CompensationStarted(d) => format!(
            "undoing {} with {} ({} compensation)",
            d.tool,
            d.compensation_tool,
            d.grade.as_str()
        ),
        EventData::CompensationFinished(d) => {
            format!("{} → {}: {}", d.tool, d.status.as_str(), d.note)
        }
        EventData::HandoffCreated(d) => match &d.package {
            Some(p) => format!(
                "handed to a human: {} ({} awaiting a decision, {} in doubt)",
                p.reason,
                count(p.awaiting_decision, "record"),
                p.uncertain
            ),
            None => "handed to a human".into(),
        },
        EventData::RunInterrupted(d) => {
            let next = match (d.resumable, d.continue_with) {
                (false, _) => "not resumable".to_owned(),
                (true, Some(HandOn::AnyWorker)) => "any worker continues it".to_owned(),
                (true, _) => "resumable by its caller".to_owned(),
            };
            format!(
                "{} after {}; {next}",
                d.reason,
                count(d.completed_steps, "completed step")
            )
        }
        EventData::LatencyDegraded(d) => format!(
            "{}: p99 {} over {}, against a {} baseline of {}",
            d.subject,
            crate::limits::human(d.p99),
            count(d.samples, "sample"),
            match d.baseline_source {
                BaselineSource::Declared => "declared",
                BaselineSource::Observed => "observed",
            },
            crate::limits::human(d.baseline)
        ),
        EventData::ApprovalRequested(d) => {
            format!("{} waits for a human's approval: {}", d.tool, d.why)
        }
        EventData::ApprovalDecided(d) => {
            let reason = d
                .reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            format!(
                "{} {} by {} after {}{reason}",
                d.tool,
                d.verdict.as_str(),
                d.by,
                crate::limits::human(Duration::from_millis(d.waited_ms))
            )
        }
        EventData::HandoffDecided(d) => {
            let mut line = format!(
                "{} decided {} by {}: {} → {}",
                d.tool,
                d.decision.as_str(),
                d.by,
                d.from.as_str(),
                d.status.as_str()
            );
            if let Some(failed) = &d.failed {
                let _ = write!(line, " (the action failed: {failed})");
            }
            if let Some(closed) = d.closed {
                let _ = write!(line, "; the run closed {}", closed.as_str());
            }
            line
        }
        // A kind added after this match (`EventData` is non-exhaustive):
        // its stored form, until it gets a sentence (the timeline test
        // over every stored kind fails first).
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

/// A failure policy as config writes it.
fn policy(policy: FailurePolicy) -> &'static str {
    match policy {
        FailurePolicy::Compensate => "compensate",
        FailurePolicy::Continue => "continue",
        FailurePolicy::Handoff => "handoff",
    }
}

/// Names, or `none`.
fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// Why a model stopped, as a person says it.
fn finish(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length limit",
        FinishReason::ContentFilter => "content filter",
        FinishReason::ToolCalls => "cut inside its tool calls",
        FinishReason::Stop | FinishReason::StopSequence => "stopped",
        FinishReason::Other => "other",
    }
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

    /// One event of every kind and shape rein has stored (rein-core's wire
    /// fixture): each reads as a sentence, pinned here as the operator
    /// sees it.
    #[test]
    fn every_stored_event_kind_reads_as_a_sentence() {
        const STORED: &str = include_str!("../../rein-core/tests/fixtures/events-v1.jsonl");
        let mut lines = Vec::new();
        for text in STORED.lines().filter(|l| !l.trim().is_empty()) {
            let event: Event = serde_json::from_str(text).expect("a stored event");
            let rendered = line(&event, event.at_ms);
            let detail = rendered.splitn(5, char::is_whitespace).last().unwrap_or("");
            assert!(
                !rendered.contains("{\""),
                "{} reads as JSON: {rendered}",
                event.kind().as_str()
            );
            assert!(!detail.trim().is_empty(), "{rendered}");
            lines.push(rendered);
        }
        insta::assert_snapshot!(lines.join("\n"));
    }

    #[test]
    fn counts_are_singular_for_one() {
        assert_eq!(count(1u32, "intent"), "1 intent");
        assert_eq!(count(3usize, "intent"), "3 intents");
        assert_eq!(count(2u64, "branch"), "2 branches");
        assert_eq!(count(0u32, "step"), "0 steps");
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

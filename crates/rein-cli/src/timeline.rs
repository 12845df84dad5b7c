//! Human rendering of the event stream and the run report.

use std::fmt::Write as _;

use rein_core::{Event, EventKind, Outcome, RunReport};
use serde_json::Value;

/// One readable line for an event: time since the run started, step, kind,
/// and what the decision was and why.
pub fn line(event: &Event, started_ms: u64) -> String {
    let offset = event.at_ms.saturating_sub(started_ms);
    let d = &event.data;
    let s = |key: &str| d.get(key).and_then(Value::as_str).unwrap_or("");
    let n = |key: &str| d.get(key).and_then(Value::as_u64).unwrap_or(0);
    let detail = match event.kind {
        EventKind::RunStarted => {
            format!("agent {} on {} ({})", s("agent"), s("provider"), s("model"))
        }
        EventKind::ModelCallStarted => format!(
            "{} attempt {} (allowance {}ms)",
            s("provider"),
            n("attempt"),
            n("allowance_ms")
        ),
        EventKind::ModelCallFinished => {
            if d["ok"] == true {
                let calls: Vec<&str> = d["tool_calls"]
                    .as_array()
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let usage = &d["usage"];
                let tokens =
                    usage["input"].as_u64().unwrap_or(0) + usage["output"].as_u64().unwrap_or(0);
                if calls.is_empty() {
                    format!("answered ({tokens} tokens)")
                } else {
                    format!("proposed {} ({tokens} tokens)", calls.join(", "))
                }
            } else {
                format!("failed: {} — {}", s("category"), s("reason"))
            }
        }
        EventKind::PlanCreated => {
            let intents = d["intents"].as_array().map(Vec::len).unwrap_or(0);
            format!("{intents} intent(s) planned and persisted")
        }
        EventKind::BudgetAllocated => format!(
            "{} branches share the remainder: {}ms each",
            n("branches"),
            n("each_ms")
        ),
        EventKind::CallRejected => {
            if d["salvaged"] == true {
                format!(
                    "{}: truncated arguments salvaged ({} bytes dropped)",
                    s("tool"),
                    n("dropped_bytes")
                )
            } else if d.get("arm").is_some() {
                format!(
                    "{} {}: circuit open, no call made (retry after {}ms)",
                    s("arm"),
                    s("name"),
                    n("retry_after_ms")
                )
            } else {
                format!(
                    "{}: {} — {} (never sent)",
                    s("tool"),
                    s("category"),
                    s("reason")
                )
            }
        }
        EventKind::ToolCallStarted => format!(
            "{} attempt {} (allowance {}ms, {}ms left)",
            s("tool"),
            n("attempt"),
            n("allowance_ms"),
            n("remaining_ms")
        ),
        EventKind::ToolCallFinished => {
            if d["ok"] == true {
                let replayed = if d["replayed"] == true {
                    ", replayed by key"
                } else {
                    ""
                };
                format!("{} ok in {}ms{replayed}", s("tool"), n("elapsed_ms"))
            } else {
                format!(
                    "{} failed: {}, effect {} — {}",
                    s("tool"),
                    s("category"),
                    s("effect"),
                    s("reason")
                )
            }
        }
        EventKind::RetryScheduled => {
            let target = if s("tool").is_empty() {
                s("provider")
            } else {
                s("tool")
            };
            let source = if d["from_server"] == true {
                "server's Retry-After".to_owned()
            } else {
                format!("full jitter on [0, {}ms]", n("backoff_ceiling_ms"))
            };
            let key = if d["same_key"] == true {
                ", same key"
            } else {
                ""
            };
            format!(
                "{target} attempt {} in {}ms ({source}{key})",
                n("next_attempt"),
                n("delay_ms")
            )
        }
        EventKind::RetryAbandoned => {
            let target = if s("tool").is_empty() {
                s("provider")
            } else {
                s("tool")
            };
            format!("{target} not retried: {}", reason(&d["reason"]))
        }
        EventKind::IdempotencyLookup => format!("{}: {}", s("tool"), s("reason")),
        EventKind::LedgerRecorded => format!("{} → {}", s("tool"), s("status")),
        EventKind::BreakerStateChanged => format!(
            "{} {}: {}",
            s("arm"),
            s("name"),
            d["transition"]["transition"].as_str().unwrap_or("changed")
        ),
        EventKind::BudgetExhausted => {
            let e = &d["exhausted"];
            format!(
                "{} budget: needs {}, {} remain",
                e["dimension"].as_str().unwrap_or("?"),
                e["needed"],
                e["remaining"]
            )
        }
        EventKind::LoopDetected => s("message").to_owned(),
        EventKind::ToolDisabled => format!(
            "{} disabled for this run after {} failures",
            s("tool"),
            n("failures")
        ),
        EventKind::PartialSuccessReturned => format!(
            "{} completed, {} not completed",
            n("completed"),
            n("incomplete")
        ),
        EventKind::RunFinished => format!(
            "{} after {} step(s) in {}ms",
            s("outcome"),
            n("steps"),
            n("elapsed_ms")
        ),
        _ => d.to_string(),
    };
    format!(
        "{:>8.3}s  step {:<2} {:<24} {}",
        offset as f64 / 1000.0,
        event.step,
        event.kind.as_str(),
        detail
    )
}

fn reason(r: &Value) -> String {
    let kind = r["kind"].as_str().unwrap_or("?");
    match kind {
        "server_wait_beyond_deadline" => format!(
            "the server asks to wait {} but only {} remain",
            r["retry_after"].as_str().unwrap_or("?"),
            r["remaining"].as_str().unwrap_or("?")
        ),
        "irreversible" => "irreversible tools are never retried".into(),
        "not_retryable" => format!("{} is not retryable", r["category"].as_str().unwrap_or("?")),
        "attempts_exhausted" => format!("{} of {} attempts used", r["attempts"], r["max_attempts"]),
        "retry_budget_exhausted" => "the target's retry budget is spent".into(),
        "deadline_too_close" => "not enough time left for another attempt".into(),
        other => other.to_owned(),
    }
}

/// The report, for a terminal.
pub fn report(report: &RunReport) -> String {
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
    let c = &report.consumed;
    let _ = writeln!(
        out,
        "  consumed: {} step(s), {} tokens, {} in {}ms",
        report.steps, c.tokens, c.cost, report.elapsed_ms
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

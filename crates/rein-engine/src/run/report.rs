//! The honest outcome of a run and its report.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use rein_core::deadline::{Exhausted, Usage};
use rein_core::loop_guard::Trip;
use rein_core::outcome::{CompletedAction, IncompleteAction};
use rein_core::{Category, Effect, Outcome, RunReport, ToolClass};
use serde_json::Value;

use super::guarded::CallResult;

/// Why the loop stopped.
#[derive(Debug, Clone)]
pub enum End {
    /// The model answered without tool calls.
    Answer(Option<String>),
    /// A budget ceiling was reached.
    Budget(Exhausted),
    /// The loop guard tripped.
    Loop(Trip),
    /// The model could not be reached (after retries) or answered unusably.
    ModelFailed(Category, String),
    /// An interrupted settlement resumed: the forward path is over and its
    /// effects are being settled.
    Settling(String),
    /// rein could not record the run durably.
    StoreFailed(String),
    /// The caller cancelled the run.
    Cancelled(String),
    /// The process stopped driving the run ([`Engine::interrupt`]): it is
    /// handed on unfinished, never settled.
    ///
    /// [`Engine::interrupt`]: super::Engine::interrupt
    Interrupted,
}

/// The longest result kept per completed action in the report.
const MAX_REPORT_RESULT_BYTES: usize = 2048;

/// Builds the report from every call the run made.
pub fn build(
    end: &End,
    calls: &[CallResult],
    consumed: Usage,
    elapsed_ms: u64,
    steps: u32,
) -> RunReport {
    let completed: Vec<CompletedAction> = calls
        .iter()
        .filter_map(|call| {
            let result = call.outcome.as_ref().ok()?;
            Some(CompletedAction {
                intent_id: call.planned.intent_id.clone(),
                tool: call.planned.tool.clone(),
                result: key_fields(result),
                ledger: call.ledger,
            })
        })
        .collect();
    let succeeded_tools: BTreeSet<&str> = calls
        .iter()
        .filter(|c| c.outcome.is_ok())
        .map(|c| c.planned.tool.as_str())
        .collect();
    let incomplete: Vec<IncompleteAction> = calls
        .iter()
        .enumerate()
        .filter_map(|(i, call)| {
            let failure = call.outcome.as_ref().err()?;
            // A failed read the model could correct (bad arguments, not
            // found) is forgiven when the same tool later succeeded: the
            // model corrected its call. Any other failed read is a gap.
            if call.class == ToolClass::Read
                && failure.category().is_correctable()
                && calls[i + 1..]
                    .iter()
                    .any(|later| later.planned.tool == call.planned.tool && later.outcome.is_ok())
            {
                return None;
            }
            // An action that certainly did not happen and was later done
            // (the same tool with the same arguments succeeded) completed.
            if failure.effect() == Effect::NotApplied
                && calls[i + 1..].iter().any(|later| {
                    later.planned.tool == call.planned.tool
                        && later.planned.args == call.planned.args
                        && later.outcome.is_ok()
                })
            {
                return None;
            }
            // A call the model proposed wrongly and rein refused before any
            // attempt is a clarification, not a planned action that failed.
            if call.attempts == 0 && failure.category() == Category::InvalidArguments {
                return None;
            }
            Some(IncompleteAction {
                intent_id: call.planned.intent_id.clone(),
                tool: call.planned.tool.clone(),
                category: failure.category(),
                reason: failure.human_message().to_owned(),
                ledger: call.ledger,
                maybe_applied: failure.effect() != Effect::NotApplied,
            })
        })
        .collect();
    let _ = succeeded_tools;

    let outcome = match end {
        End::Budget(_) => Outcome::BudgetExhausted,
        End::Cancelled(_) => Outcome::Cancelled,
        End::Answer(_) if incomplete.is_empty() => Outcome::Succeeded,
        _ if completed.is_empty() => Outcome::Failed,
        _ => Outcome::PartialSuccess,
    };
    // A retry can run without repeating side effects unless an irreversible
    // effect is in doubt: completed writes are keyed or recorded, and resume
    // skips completed intents.
    let recoverable = !incomplete.iter().any(|a| {
        a.maybe_applied
            && calls
                .iter()
                .any(|c| c.planned.intent_id == a.intent_id && c.class == ToolClass::Irreversible)
    });
    let recommendation = recommend(end, &incomplete, recoverable);
    let answer = match end {
        End::Answer(text) => text.clone(),
        _ => None,
    };
    let summary = summarize(outcome, end, &completed, &incomplete);
    RunReport {
        outcome,
        completed,
        incomplete,
        recoverable,
        recommendation,
        summary,
        answer,
        consumed,
        elapsed_ms,
        steps,
        models: Vec::new(),
        compensations: Vec::new(),
        handoff: None,
        resume: None,
    }
}

/// The scalar top-level fields of a result, bounded in size: what a report
/// reader needs (ids, statuses, dates), not whole payloads.
fn key_fields(result: &Value) -> Value {
    let text = result.to_string();
    if text.len() <= MAX_REPORT_RESULT_BYTES {
        return result.clone();
    }
    match result {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, v)| !v.is_object() && !v.is_array())
                .filter(|(_, v)| v.to_string().len() <= 256)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        _ => Value::String(text.chars().take(256).collect()),
    }
}

fn recommend(end: &End, incomplete: &[IncompleteAction], recoverable: bool) -> String {
    let mut advice: Vec<String> = Vec::new();
    match end {
        End::Budget(e) => advice.push(format!(
            "raise the {} budget or narrow the task, then resume",
            e.dimension
        )),
        End::Loop(trip) => advice.push(format!(
            "the agent stopped making progress ({}); refine the task or hand it to a human",
            trip.as_str()
        )),
        End::ModelFailed(..) => advice.push("retry once the model provider is available".into()),
        End::Settling(_) => {}
        End::Interrupted => advice.push("resume it; completed steps will not run again".into()),
        End::Cancelled(_) => {
            advice.push("submit the task again if it is still wanted".into());
        }
        End::StoreFailed(_) => {
            advice.push("restore the run store, then reconcile the ledger".into())
        }
        End::Answer(_) => {}
    }
    for action in incomplete {
        let line = if action.maybe_applied {
            format!(
                "check whether {} took effect before retrying it (its ledger record awaits reconciliation)",
                action.tool
            )
        } else {
            match action.category {
                Category::RateLimited | Category::Overloaded | Category::CircuitOpen => format!(
                    "retry {} later, when the target accepts calls again; it did not take effect",
                    action.tool
                ),
                Category::BudgetExhausted => format!(
                    "{} was not started for lack of budget; retry with a larger budget",
                    action.tool
                ),
                Category::InvalidArguments | Category::NotFound | Category::Conflict => {
                    format!(
                        "review the input for {}; retrying unchanged will fail again",
                        action.tool
                    )
                }
                Category::Unauthorized | Category::Forbidden => {
                    format!("fix rein's credentials for {}", action.tool)
                }
                _ => format!("retry {}; it did not take effect", action.tool),
            }
        };
        if !advice.contains(&line) {
            advice.push(line);
        }
    }
    if advice.is_empty() {
        return "nothing to do".into();
    }
    let mut text = advice.join("; ");
    if recoverable && !incomplete.is_empty() {
        text.push_str("; resuming is safe: completed steps will not run again");
    }
    text
}

fn summarize(
    outcome: Outcome,
    end: &End,
    completed: &[CompletedAction],
    incomplete: &[IncompleteAction],
) -> String {
    let mut s = format!("The run ended {outcome}");
    match end {
        End::Budget(e) => {
            let _ = write!(s, " ({e})");
        }
        End::Loop(trip) => {
            let _ = write!(s, " (loop guard: {trip})");
        }
        End::ModelFailed(_, why)
        | End::StoreFailed(why)
        | End::Settling(why)
        | End::Cancelled(why) => {
            let _ = write!(s, " ({why})");
        }
        End::Interrupted => s.push_str(" (interrupted: its process is stopping)"),
        End::Answer(_) => {}
    }
    s.push('.');
    if completed.is_empty() {
        s.push_str(" No action completed.");
    } else {
        let names: Vec<&str> = completed.iter().map(|a| a.tool.as_str()).collect();
        let _ = write!(s, " Completed: {}.", names.join(", "));
    }
    if !incomplete.is_empty() {
        let parts: Vec<String> = incomplete
            .iter()
            .map(|a| {
                let doubt = if a.maybe_applied {
                    ", may have taken effect"
                } else {
                    ", did not take effect"
                };
                format!("{} ({}{doubt})", a.tool, a.category)
            })
            .collect();
        let _ = write!(s, " Not completed: {}.", parts.join(", "));
    }
    s
}

//! Resuming a finished, recoverable run by doing what its report
//! recommended: sending again the actions that were refused for a time.
//!
//! # Why
//!
//! A run whose email was refused with `Retry-After: 3600` ends
//! `partial_success`, recoverable, with the advice "retry send_email after
//! 1h". A resume that only asked the model again never sent the email: the
//! model had already given up, and its new turn is a new decision, not the
//! recommended retry. Here the resume sends exactly the actions the report
//! listed as incomplete and retryable, under their original intent ids (so
//! their keys and ledger records are theirs), with their recorded
//! arguments, before the model is asked anything new.
//!
//! # What is sent again
//!
//! Only what certainly did not take effect: an incomplete action the
//! report says did not apply, whose advice is to try again (a rate limit,
//! an open breaker, a budget, a passing fault), whose plan was persisted,
//! and whose ledger record, if it has one, is `failed` (decided not
//! applied). A record `pending` (in doubt) or one that took effect is
//! never sent again: an irreversible action in doubt is never repeated.

use std::collections::HashMap;
use std::time::Duration;

use rein_core::advice::{FailureHint, Subject, advise};
use rein_core::{Failure, IntentId, LedgerRecord, LedgerStatus, Timestamp};
use rein_store::{PlannedIntent, RunRecord};

use crate::provider::{FinishReason, ModelResponse, ToolCall};

use super::guarded::CallResult;
use super::step::ResumedTurn;

/// When a resume sends again what a run's report said to retry later.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RetryTiming {
    /// Once the time the refusal asked for (its `Retry-After`, the open
    /// breaker's cooldown) has passed; before that the resume is refused
    /// with [`EngineError::NotYet`](super::EngineError::NotYet), which says
    /// how long is left.
    #[default]
    AfterWait,
    /// At once, whatever time is left: the operator decided (`rein resume
    /// --now`). A Retry-After cooldown other runs share for those tools
    /// does not hold the retries back either; the run's events and its
    /// resume marker say they were sent early.
    Now,
}

/// The refused actions a resume sends again, as a turn replayed before
/// the model is asked.
pub(super) struct RefusedRetry {
    /// The turn that sends them: their recorded tool and arguments under
    /// their intent ids.
    pub(super) turn: ResumedTurn,
    /// Their intents, in the order they were first planned.
    pub(super) intents: Vec<IntentId>,
    /// Those of them sent with an idempotency key (writes).
    pub(super) keyed: Vec<IntentId>,
    /// The longest wait still asked for, if any has not passed.
    pub(super) wait: Option<Wait>,
}

/// A wait a refused action asked for that has not passed yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Wait {
    /// The tool that asked.
    pub(super) tool: String,
    /// How long is left.
    pub(super) left: Duration,
}

/// The actions of `record`'s run to send again before its model is asked,
/// if it finished recoverable and its report lists any (see the module
/// documentation); `step` is the step they are sent in, `at_ms` now.
pub(super) fn refused_retries(
    run: &RunRecord,
    intents: &[(u32, PlannedIntent)],
    ledger: &[LedgerRecord],
    calls: &[CallResult],
    step: u32,
    at_ms: Timestamp,
) -> Option<RefusedRetry> {
    if !run.status.is_finished() {
        return None;
    }
    let report = run.report.as_ref().filter(|r| r.recoverable)?;
    let plans: HashMap<&IntentId, (u32, &PlannedIntent)> = intents
        .iter()
        .map(|(step, plan)| (&plan.intent_id, (*step, plan)))
        .collect();
    let records: HashMap<&IntentId, &LedgerRecord> =
        ledger.iter().map(|r| (&r.intent_id, r)).collect();
    let mut picked: Vec<(u32, &PlannedIntent, Option<&LedgerRecord>)> = Vec::new();
    for action in &report.incomplete {
        if action.maybe_applied {
            continue;
        }
        let advice = advise(
            action.category,
            Subject::Tool(&action.tool),
            &FailureHint::default(),
        );
        if !advice.recoverable {
            continue;
        }
        let Some((planned_at, plan)) = plans.get(&action.intent_id).copied() else {
            continue;
        };
        let record = records.get(&action.intent_id).copied();
        // The ledger as it stands decides, not the report: a record
        // reconciled since (it took effect after all, or is in doubt) is
        // not sent again.
        if record.is_some_and(|r| r.status != LedgerStatus::Failed) {
            continue;
        }
        picked.push((planned_at, plan, record));
    }
    if picked.is_empty() {
        return None;
    }
    picked.sort_by_key(|(step, plan, _)| (*step, plan.ordinal));
    let wait = picked
        .iter()
        .filter_map(|(_, plan, record)| {
            let failure = match record {
                Some(r) => r.failure.as_ref(),
                None => last_failure(calls, &plan.intent_id),
            }?;
            // From when its record was marked; a call without a record of
            // its own (a read) from the run's end: never shorter than asked.
            let since = record.map_or(run.updated_at_ms, |r| r.updated_at_ms);
            let left = since
                .saturating_add(failure.retry_after()?)
                .saturating_duration_since(at_ms);
            (!left.is_zero()).then(|| Wait {
                tool: plan.tool.clone(),
                left,
            })
        })
        .max_by_key(|w| w.left);
    let tool_calls: Vec<ToolCall> = picked
        .iter()
        .map(|(_, plan, _)| ToolCall {
            // A fresh id for the transcript: the original call and its
            // reply are in it already, and providers want each id once.
            id: format!("{}_retry{step}", plan.call_id),
            name: plan.tool.clone(),
            arguments: plan.args.to_string(),
        })
        .collect();
    let ids = || picked.iter().map(|(_, plan, _)| plan.intent_id.clone());
    Some(RefusedRetry {
        turn: ResumedTurn {
            response: ModelResponse {
                text: None,
                tool_calls,
                finish: FinishReason::ToolCalls,
                stop_sequence: None,
                usage: Default::default(),
            },
            intent_ids: ids().map(Some).collect(),
            prior: picked
                .iter()
                .filter_map(|(_, plan, record)| record.map(|r| (plan.intent_id.clone(), r.clone())))
                .collect(),
        },
        intents: ids().collect(),
        keyed: picked
            .iter()
            .filter(|(_, _, record)| record.is_some_and(|r| r.idempotency_key.is_some()))
            .map(|(_, plan, _)| plan.intent_id.clone())
            .collect(),
        wait,
    })
}

/// The failure the last call of `intent` ended with, from the run's calls.
fn last_failure<'a>(calls: &'a [CallResult], intent: &IntentId) -> Option<&'a Failure> {
    calls
        .iter()
        .rev()
        .find(|c| &c.planned.intent_id == intent)
        .and_then(|c| c.outcome.as_ref().err())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use rein_core::report::{End, RunFacts, Settled, derive};
    use rein_core::{Category, Effect, Outcome, RunId, TenantId, ToolClass};
    use rein_store::{NewRun, RunStatus};
    use serde_json::json;

    use super::*;
    use crate::run::guarded::Planned;

    const ENDED_MS: u64 = 1_000_000;

    fn intent(n: u32) -> IntentId {
        IntentId::new(format!("i-{n}")).unwrap()
    }

    fn plan(n: u32, tool: &str) -> (u32, PlannedIntent) {
        (
            n,
            PlannedIntent {
                intent_id: intent(n),
                ordinal: 0,
                call_id: format!("call_{n}"),
                tool: tool.into(),
                args: json!({"n": n}),
            },
        )
    }

    fn call(n: u32, tool: &str, class: ToolClass, failure: Option<Failure>) -> CallResult {
        CallResult {
            planned: Planned {
                intent_id: intent(n),
                call_id: format!("call_{n}"),
                tool: tool.into(),
                args: json!({"n": n}),
                step: n,
                position: 0,
                salvaged: false,
            },
            class,
            outcome: failure.map_or(Ok(json!({"ok": n})), Err),
            ledger: None,
            attempts: 1,
        }
    }

    fn record(n: u32, tool: &str, status: LedgerStatus, failure: Option<Failure>) -> LedgerRecord {
        LedgerRecord {
            run_id: RunId::new("r").unwrap(),
            intent_id: intent(n),
            seq: u64::from(n),
            step: n,
            tool: tool.into(),
            class: ToolClass::Irreversible,
            idempotency_key: None,
            args: json!({"n": n}),
            status,
            result: None,
            failure,
            attempts: 1,
            created_at_ms: Timestamp::from_millis(ENDED_MS - 10),
            updated_at_ms: Timestamp::from_millis(ENDED_MS - 10),
        }
    }

    /// A run that ended as `derive` reports its `calls` and `ledger`.
    fn ended(calls: Vec<CallResult>, ledger: &[LedgerRecord], end: End) -> RunRecord {
        let facts = RunFacts {
            run_id: RunId::new("r").unwrap(),
            agent: "desk".into(),
            input: "move A-1 and tell the buyer".into(),
            end,
            settled: Settled::Kept,
            outcome: None,
            calls,
            consumed: Default::default(),
            elapsed_ms: 5,
            steps: 4,
            models: Vec::new(),
            compensations: Vec::new(),
            resume: None,
            in_flight: Vec::new(),
            strategies_not_tried: Vec::new(),
            notes: Vec::new(),
            hint: Default::default(),
            owners: Default::default(),
        };
        let report = derive(&facts, ledger);
        let mut run = RunRecord::new(NewRun {
            run_id: RunId::new("r").unwrap(),
            tenant: TenantId::new("t").unwrap(),
            agent: "desk".into(),
            input: "move".into(),
            parent_run_id: None,
            budget: json!({}),
            created_at_ms: Timestamp::from_millis(1),
            trace_parent: None,
        });
        run.status = RunStatus::Finished(report.outcome);
        run.report = Some(report);
        run.updated_at_ms = Timestamp::from_millis(ENDED_MS);
        run
    }

    fn rate_limited() -> Failure {
        Failure::new("send_email", Category::RateLimited)
            .with_effect(Effect::NotApplied)
            .with_retry_after(Duration::from_secs(3600))
    }

    #[test]
    fn a_refused_email_is_sent_again_under_its_intent_once_its_wait_is_over() {
        let ledger = [record(
            3,
            "send_email",
            LedgerStatus::Failed,
            Some(rate_limited()),
        )];
        let calls = vec![
            call(1, "get_order", ToolClass::Read, None),
            call(
                3,
                "send_email",
                ToolClass::Irreversible,
                Some(rate_limited()),
            ),
        ];
        let run = ended(calls.clone(), &ledger, End::Answer(Some("later".into())));
        assert_eq!(
            run.report.as_ref().unwrap().outcome,
            Outcome::PartialSuccess
        );
        let intents = [plan(1, "get_order"), plan(3, "send_email")];

        let early = Timestamp::from_millis(ENDED_MS + 60_000);
        let retry = refused_retries(&run, &intents, &ledger, &calls, 5, early).unwrap();
        assert_eq!(retry.intents, vec![intent(3)]);
        assert_eq!(retry.turn.intent_ids, vec![Some(intent(3))]);
        let sent = &retry.turn.response.tool_calls[0];
        assert_eq!(
            (sent.name.as_str(), sent.id.as_str()),
            ("send_email", "call_3_retry5")
        );
        assert_eq!(sent.arguments, json!({"n": 3}).to_string());
        let wait = retry.wait.unwrap();
        assert_eq!(wait.tool, "send_email");
        // An hour from its mark, less the 70 s since.
        assert_eq!(wait.left, Duration::from_millis(3_600_000 - 60_010));

        let later = Timestamp::from_millis(ENDED_MS + 3_600_000);
        let retry = refused_retries(&run, &intents, &ledger, &calls, 5, later).unwrap();
        assert_eq!(retry.wait, None);
    }

    #[test]
    fn nothing_in_doubt_done_or_wrongly_asked_is_sent_again() {
        let doubt = Failure::new("send_email", Category::Timeout).with_effect(Effect::MaybeApplied);
        let calls = vec![call(
            3,
            "send_email",
            ToolClass::Irreversible,
            Some(doubt.clone()),
        )];
        let intents = [plan(3, "send_email")];
        let at = Timestamp::from_millis(ENDED_MS + 3_600_000);
        // In doubt: pending, never repeated (the report is not even
        // recoverable).
        let pending = [record(3, "send_email", LedgerStatus::Pending, Some(doubt))];
        let run = ended(calls.clone(), &pending, End::Answer(None));
        assert!(refused_retries(&run, &intents, &pending, &calls, 5, at).is_none());
        // Reconciled since the report: the ledger decides.
        let refused = vec![call(
            3,
            "send_email",
            ToolClass::Irreversible,
            Some(rate_limited()),
        )];
        let failed = [record(
            3,
            "send_email",
            LedgerStatus::Failed,
            Some(rate_limited()),
        )];
        let run = ended(refused.clone(), &failed, End::Answer(None));
        let succeeded = [record(3, "send_email", LedgerStatus::Succeeded, None)];
        assert!(refused_retries(&run, &intents, &succeeded, &refused, 5, at).is_none());
        // Refused as invalid: sending it unchanged fails again.
        let invalid =
            Failure::new("send_email", Category::InvalidArguments).with_effect(Effect::NotApplied);
        let calls = vec![call(
            3,
            "send_email",
            ToolClass::Irreversible,
            Some(invalid.clone()),
        )];
        let ledger = [record(3, "send_email", LedgerStatus::Failed, Some(invalid))];
        let run = ended(calls.clone(), &ledger, End::Answer(None));
        assert!(refused_retries(&run, &intents, &ledger, &calls, 5, at).is_none());
        // A run still running is resumed as interrupted, not retried.
        let mut running = ended(refused.clone(), &failed, End::Answer(None));
        running.status = RunStatus::Running;
        assert!(refused_retries(&running, &intents, &failed, &refused, 5, at).is_none());
    }
}

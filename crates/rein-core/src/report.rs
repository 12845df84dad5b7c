//! The run report, derived from the ledger as it stands: [`derive()`].
//!
//! # Why one function
//!
//! A run can end in many ways: the model answered, a budget ran out, its
//! effects were undone or handed to a human, it was cancelled, its process
//! died and the orphan scan closed it, its deliveries ran out and it was
//! dead-lettered, rein itself panicked; and the reconciler may settle its
//! records days later. Reports built separately on each path contradicted
//! the ledger (an orphaned run that sent an email said "no action
//! completed") and themselves (a summary written before settlement said
//! `partial_success` above an outcome of `handed_off`). Here every report
//! is one function of the same facts: the run's calls ([`CallResult`]),
//! why it stopped ([`End`]), what its settlement concluded ([`Settled`]),
//! and the ledger records as they stand now. Outcome, summary,
//! recommendation and handoff package are computed together, once, from
//! them; re-deriving after the ledger changed gives the report the run
//! would have had with that ledger.
//!
//! # What the ledger decides
//!
//! | ledger status now | the action is listed as | it awaits a human |
//! | --- | --- | --- |
//! | `succeeded`, `compensated`, `uncompensatable` | completed (it took effect) | `uncompensatable` |
//! | `manual` with a result | completed (it took effect) | yes |
//! | `manual` without a result, `pending` | incomplete, may have taken effect | yes |
//! | `failed` | incomplete, did not take effect | no |
//! | no record (a read) | as the call ended | no |
//!
//! A record the run's calls do not mention (a step interrupted before its
//! calls were checkpointed) is listed from the ledger alone. A handoff
//! package is attached whenever any record of the run (or of a child run
//! settled with it) awaits a human.
//!
//! # Outcome
//!
//! | settlement | outcome |
//! | --- | --- |
//! | handed off | `handed_off` |
//! | undone completely | `cancelled` for a cancelled run, `failed` otherwise |
//! | kept (or none) | from [`End`]: budget → `budget_exhausted`, cancel → `cancelled`, an answer with nothing incomplete → `succeeded`, closed from outside or internal error → `failed`, nothing completed → `failed`, otherwise `partial_success` |
//!
//! A run already finished keeps its outcome when its report is derived
//! again ([`RunFacts::outcome`]): outcomes are final, the report's account
//! of the ledger is not.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::advice::{FailureHint, Subject, advise};
use crate::call::CallResult;
use crate::deadline::{Exhausted, Usage};
use crate::failure::{Category, Effect};
use crate::handoff::{
    EffectState, HandoffPackage, InFlight, TimelineEntry, ToolOwner, input_digest,
};
use crate::ids::{IntentId, RunId};
use crate::ledger::{LedgerRecord, LedgerStatus};
use crate::loop_guard::Trip;
use crate::outcome::{
    CompensationResult, CompletedAction, IncompleteAction, Outcome, ReportNote, ResumeMarker,
    RunReport,
};
use crate::plural;
use crate::tool::ToolClass;

/// The longest result kept per completed action in the report.
pub const MAX_REPORT_RESULT_BYTES: usize = 2048;

/// The `error_type` of a run that rein itself failed (a panic inside the
/// run was caught at its boundary).
pub const INTERNAL: &str = "internal";

/// Why a run stopped.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
pub enum End {
    /// The model answered without tool calls.
    Answer(Option<String>),
    /// A budget ceiling was reached.
    Budget(Exhausted),
    /// The budget was too short for another tool round trip (`short` says
    /// which dimension and by how much), so the model was asked once more,
    /// without tools, for its final answer from what it knew: the run
    /// ends `budget_exhausted` with that answer attached
    /// ([`crate::budget_view`]).
    FinalTurn {
        /// Why the budget was short.
        short: Exhausted,
        /// The model's last answer, if it gave text.
        answer: Option<String>,
    },
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
    /// The run was closed from outside the process that would drive it:
    /// its process died (`orphaned`), its deliveries ran out
    /// (`dead_letter`), it was settled with its root, or it was cancelled
    /// before it started (no `error_type`).
    Closed {
        /// What closed it, as the `run_failed` event says.
        error_type: Option<String>,
        /// Why, for a human.
        reason: String,
    },
    /// rein failed the run: a panic inside it was caught at its boundary
    /// (`error_type` [`INTERNAL`]).
    Internal(String),
    /// The process stopped driving the run (the engine was interrupted): it
    /// is handed on unfinished, never settled; its report is provisional.
    Interrupted,
    /// A call's approval window closed before anyone decided, and the
    /// agent's `approval.on_expiry` is `handoff`: nothing of the turn was
    /// sent, and the run goes to a human with what it did so far (why).
    ApprovalExpired(String),
}

impl End {
    /// The `error_type` a `run_failed` event gives for this end, if any.
    pub fn error_type(&self) -> Option<&str> {
        match self {
            End::Closed { error_type, .. } => error_type.as_deref(),
            End::Internal(_) => Some(INTERNAL),
            _ => None,
        }
    }
}

/// What the settlement of a run that did not succeed concluded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "reason", rename_all = "snake_case")]
pub enum Settled {
    /// Nothing was undone: the effects stand (a success, a failure that
    /// time may fix, the `continue` policy, or nothing to settle).
    Kept,
    /// Every effect was undone in reverse order: the world is as before.
    Undone,
    /// Automation stopped and a human has the handoff package, for the
    /// reason given.
    HandedOff(String),
}

/// What a report is derived from, besides the ledger and what the report
/// itself lists, kept in the report ([`RunReport::basis`]) so it can be
/// derived again when the ledger changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportBasis {
    /// Why the run stopped.
    pub end: End,
    /// What its settlement concluded.
    pub settled: Settled,
    /// What may still be running besides the calls in doubt (held
    /// leases): [`RunFacts::in_flight`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub in_flight: Vec<InFlight>,
    /// What rein deliberately did not try: [`RunFacts::strategies_not_tried`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub strategies_not_tried: Vec<String>,
    /// What the failure that ended the run said besides its category:
    /// [`RunFacts::hint`].
    #[serde(default, skip_serializing_if = "FailureHint::is_empty")]
    pub hint: FailureHint,
    /// Who answers for each tool: [`RunFacts::owners`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub owners: BTreeMap<String, ToolOwner>,
    /// The revision of the run's ledger the report reflects, set by the
    /// store when it stores the report (`None` before, and in reports
    /// stored before revisions existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger_revision: Option<u64>,
}

/// Everything a report is derived from except the ledger.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFacts {
    /// The run.
    pub run_id: RunId,
    /// Its agent.
    pub agent: String,
    /// Its task.
    pub input: String,
    /// Why it stopped.
    pub end: End,
    /// What its settlement concluded.
    pub settled: Settled,
    /// Its outcome when it already finished (outcomes are final); `None`
    /// to decide it here.
    pub outcome: Option<Outcome>,
    /// The calls it made, in order (from its last checkpoint when it was
    /// closed from outside).
    pub calls: Vec<CallResult>,
    /// What it consumed.
    pub consumed: Usage,
    /// Wall-clock time it took, in milliseconds.
    pub elapsed_ms: u64,
    /// Model turns taken.
    pub steps: u32,
    /// The models that answered its turns.
    pub models: Vec<String>,
    /// What its settlement did to each effect, in order.
    pub compensations: Vec<CompensationResult>,
    /// How it was resumed, if it was.
    pub resume: Option<ResumeMarker>,
    /// Actions that may still be running besides its calls in doubt (held
    /// leases), for the handoff package.
    pub in_flight: Vec<InFlight>,
    /// What rein deliberately did not try, for the handoff package.
    pub strategies_not_tried: Vec<String>,
    /// What the facts could not establish (e.g. an unreadable checkpoint):
    /// the report carries them and its summary says them.
    pub notes: Vec<ReportNote>,
    /// What the model failure that ended the run said besides its
    /// category (the env var of the key a 401 rejected, a `Retry-After`),
    /// for advice that names what to fix.
    pub hint: FailureHint,
    /// Who answers for each of the agent's tools, by tool name, for the
    /// handoff package; a run closed from outside takes them from its
    /// `tool_call_started` events (the tools it started).
    pub owners: BTreeMap<String, ToolOwner>,
}

/// Whether a record of a run that ended waits for a human: in doubt, or
/// left `manual` or `uncompensatable`.
pub fn awaits_human(record: &LedgerRecord) -> bool {
    matches!(
        record.status,
        LedgerStatus::Pending | LedgerStatus::Manual | LedgerStatus::Uncompensatable
    )
}

/// Whether a record's effect took place, as far as the ledger knows.
fn took_effect(record: &LedgerRecord) -> bool {
    match record.status {
        LedgerStatus::Succeeded
        | LedgerStatus::Compensated
        | LedgerStatus::Uncompensatable
        | LedgerStatus::Accepted => true,
        LedgerStatus::Manual => record.result.is_some(),
        LedgerStatus::Pending | LedgerStatus::Failed => false,
    }
}

/// The report of a run, derived from `facts` and `ledger`: the records of
/// the run and of every child run settled with it (the child runs'
/// records only feed the handoff package).
///
/// # Examples
///
/// ```
/// # use rein_core::report::{derive, End, RunFacts, Settled};
/// # use rein_core::{Outcome, RunId};
/// let facts = RunFacts {
///     run_id: RunId::new("r-1")?,
///     agent: "desk".into(),
///     input: "move A-1".into(),
///     end: End::Answer(Some("done".into())),
///     settled: Settled::Kept,
///     outcome: None,
///     calls: Vec::new(),
///     consumed: Default::default(),
///     elapsed_ms: 5,
///     steps: 1,
///     models: Vec::new(),
///     compensations: Vec::new(),
///     resume: None,
///     in_flight: Vec::new(),
///     strategies_not_tried: Vec::new(),
///     notes: Vec::new(),
///     hint: Default::default(),
///     owners: Default::default(),
/// };
/// let report = derive(&facts, &[]);
/// assert_eq!(report.outcome, Outcome::Succeeded);
/// assert!(report.summary.starts_with("The run ended succeeded."));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn derive(facts: &RunFacts, ledger: &[LedgerRecord]) -> RunReport {
    let own: BTreeMap<&IntentId, &LedgerRecord> = ledger
        .iter()
        .filter(|r| r.run_id == facts.run_id)
        .map(|r| (&r.intent_id, r))
        .collect();
    let (completed, incomplete) = actions(facts, &own);
    let awaiting: Vec<&LedgerRecord> = ledger.iter().filter(|r| awaits_human(r)).collect();

    let base = match &facts.end {
        // A final turn's answer was given because the budget stopped the
        // work, not because the work was done: the outcome says so, and
        // the answer is attached (invariant 2: never a silent truncation
        // behind an answer that looks complete).
        End::Budget(_) | End::FinalTurn { .. } => Outcome::BudgetExhausted,
        End::Cancelled(_) => Outcome::Cancelled,
        // A record of its own still `pending` is an effect the ledger does
        // not hold as done (its mark did not land): never a success, even
        // when the call answered (issue 31: a store blink left `send_email`
        // pending under a run reported `succeeded`).
        End::Answer(_)
            if incomplete.is_empty()
                && !own.values().any(|r| r.status == LedgerStatus::Pending) =>
        {
            Outcome::Succeeded
        }
        End::Closed { .. } | End::Internal(_) => Outcome::Failed,
        _ if completed.is_empty() => Outcome::Failed,
        _ => Outcome::PartialSuccess,
    };
    let outcome = facts.outcome.unwrap_or(match &facts.settled {
        Settled::HandedOff(_) => Outcome::HandedOff,
        Settled::Undone if base == Outcome::Cancelled => Outcome::Cancelled,
        Settled::Undone => Outcome::Failed,
        Settled::Kept => base,
    });
    let recoverable = awaiting.is_empty()
        && match (&facts.settled, &facts.end) {
            (Settled::HandedOff(_), _) => false,
            (Settled::Undone, _) => true,
            (Settled::Kept, End::Internal(_)) => false,
            (Settled::Kept, End::Closed { .. }) => {
                own.values().all(|r| r.status == LedgerStatus::Failed)
            }
            // A model failure recovers by trying again only when its
            // category says so (not a rejected key, not an invalid request).
            (Settled::Kept, End::ModelFailed(category, _))
                if !advise(*category, Subject::Model, &facts.hint).recoverable =>
            {
                false
            }
            // A retry can run without repeating side effects unless an
            // irreversible effect is in doubt: completed writes are keyed
            // or recorded, and resume skips completed intents.
            (Settled::Kept, _) => !incomplete.iter().any(|a| {
                a.maybe_applied
                    && own
                        .get(&a.intent_id)
                        .map(|r| r.class)
                        .or_else(|| class_of(facts, &a.intent_id))
                        == Some(ToolClass::Irreversible)
            }),
        };
    let handoff = (matches!(facts.settled, Settled::HandedOff(_)) || !awaiting.is_empty())
        .then(|| package(facts, ledger));
    let recommendation = recommend(facts, &incomplete, &completed, &awaiting, recoverable);
    let mut summary = summarize(facts, outcome, &completed, &incomplete, awaiting.len());
    for note in &facts.notes {
        let _ = write!(summary, " Note: {note}.");
    }
    let mut report = RunReport {
        outcome,
        completed,
        incomplete,
        recoverable,
        recommendation,
        summary,
        answer: match &facts.end {
            End::Answer(text) | End::FinalTurn { answer: text, .. } => text.clone(),
            _ => None,
        },
        consumed: facts.consumed,
        elapsed_ms: facts.elapsed_ms,
        steps: facts.steps,
        models: facts.models.clone(),
        compensations: facts.compensations.clone(),
        handoff,
        resume: facts.resume.clone(),
        basis: Some(ReportBasis {
            end: facts.end.clone(),
            settled: facts.settled.clone(),
            in_flight: facts.in_flight.clone(),
            strategies_not_tried: facts.strategies_not_tried.clone(),
            hint: facts.hint.clone(),
            owners: facts.owners.clone(),
            ledger_revision: None,
        }),
        notes: facts.notes.clone(),
    };
    // Every report is built here, so every report is redacted here: a
    // panic payload, a store error or a hand-off reason quoting one
    // carries no secret into the stored report or an API answer.
    crate::redact::report(&mut report);
    report
}

fn class_of(facts: &RunFacts, intent: &IntentId) -> Option<ToolClass> {
    facts
        .calls
        .iter()
        .find(|c| &c.planned.intent_id == intent)
        .map(|c| c.class)
}

/// Completed and incomplete actions: the calls, each with its ledger
/// record as it stands, then the records no call mentions.
fn actions(
    facts: &RunFacts,
    own: &BTreeMap<&IntentId, &LedgerRecord>,
) -> (Vec<CompletedAction>, Vec<IncompleteAction>) {
    let calls = &facts.calls;
    let mut completed = Vec::new();
    let mut incomplete = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let intent = &call.planned.intent_id;
        // A call sent again under its intent (a resume retried what was
        // refused without effect) is one action: listed as it last ended.
        if calls[i + 1..]
            .iter()
            .any(|later| &later.planned.intent_id == intent)
        {
            continue;
        }
        let record = own.get(intent).copied();
        let status = record.map(|r| r.status).or(call.ledger);
        match (&call.outcome, record) {
            (Ok(result), _) => completed.push(CompletedAction {
                intent_id: intent.clone(),
                tool: call.planned.tool.clone(),
                result: key_fields(result),
                ledger: status,
            }),
            // The call gave up, but the ledger learned since that it took
            // effect (found by its key, settled later): it completed.
            (Err(_), Some(r)) if took_effect(r) => completed.push(CompletedAction {
                intent_id: intent.clone(),
                tool: call.planned.tool.clone(),
                result: r.result.as_ref().map_or(Value::Null, key_fields),
                ledger: status,
            }),
            (Err(failure), record) => {
                // A failed read the model could correct (bad arguments, not
                // found) is forgiven when the same tool later succeeded: the
                // model corrected its call. Any other failed read is a gap.
                if call.class == ToolClass::Read
                    && failure.category().is_correctable()
                    && calls[i + 1..].iter().any(|later| {
                        later.planned.tool == call.planned.tool && later.outcome.is_ok()
                    })
                {
                    continue;
                }
                let decided_not_applied = record.is_some_and(|r| r.status == LedgerStatus::Failed);
                let not_applied = failure.effect() == Effect::NotApplied || decided_not_applied;
                // An action that certainly did not happen and was later done
                // (the same tool with the same arguments succeeded) completed.
                if not_applied
                    && calls[i + 1..].iter().any(|later| {
                        later.planned.tool == call.planned.tool
                            && later.planned.args == call.planned.args
                            && later.outcome.is_ok()
                    })
                {
                    continue;
                }
                // A call the model proposed wrongly and rein refused before
                // any attempt is a clarification, not a planned action that
                // failed.
                if call.attempts == 0 && failure.category() == Category::InvalidArguments {
                    continue;
                }
                incomplete.push(IncompleteAction {
                    intent_id: intent.clone(),
                    tool: call.planned.tool.clone(),
                    category: failure.category(),
                    reason: failure.human_message().to_owned(),
                    ledger: status,
                    maybe_applied: !not_applied,
                });
            }
        }
    }
    let mentioned: BTreeSet<&IntentId> = calls.iter().map(|c| &c.planned.intent_id).collect();
    let mut unmentioned: Vec<&LedgerRecord> = own
        .values()
        .copied()
        .filter(|r| !mentioned.contains(&r.intent_id))
        .collect();
    unmentioned.sort_by_key(|r| r.seq);
    for r in unmentioned {
        if took_effect(r) {
            completed.push(CompletedAction {
                intent_id: r.intent_id.clone(),
                tool: r.tool.clone(),
                result: r.result.as_ref().map_or(Value::Null, key_fields),
                ledger: Some(r.status),
            });
        } else {
            let (category, reason) = match &r.failure {
                Some(f) => (f.category(), f.human_message().to_owned()),
                None if r.status == LedgerStatus::Failed => (
                    Category::Unknown,
                    "it did not take effect (decided after the run stopped)".to_owned(),
                ),
                None => (
                    Category::Unknown,
                    "the run stopped while the call was in flight".to_owned(),
                ),
            };
            incomplete.push(IncompleteAction {
                intent_id: r.intent_id.clone(),
                tool: r.tool.clone(),
                category,
                reason,
                ledger: Some(r.status),
                maybe_applied: r.status != LedgerStatus::Failed,
            });
        }
    }
    (completed, incomplete)
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

fn recommend(
    facts: &RunFacts,
    incomplete: &[IncompleteAction],
    completed: &[CompletedAction],
    awaiting: &[&LedgerRecord],
    recoverable: bool,
) -> String {
    match &facts.settled {
        Settled::HandedOff(_) => {
            return format!(
                "a human must decide: {} {} a decision (rein handoff {})",
                plural::count(awaiting.len(), "record"),
                plural::agree(awaiting.len(), "awaits", "await"),
                facts.run_id
            );
        }
        Settled::Undone => {
            return "the world is as before the run; fix the cause and run the task again".into();
        }
        Settled::Kept => {}
    }
    let mut advice: Vec<String> = Vec::new();
    match &facts.end {
        End::Budget(e) | End::FinalTurn { short: e, .. } => advice.push(format!(
            "raise the {} budget or narrow the task, then resume",
            e.dimension
        )),
        End::Loop(trip) => advice.push(format!(
            "the agent stopped making progress ({}); refine the task or hand it to a human",
            trip.as_str()
        )),
        End::ModelFailed(category, _) => {
            advice.push(advise(*category, Subject::Model, &facts.hint).recommendation);
        }
        End::Settling(_) | End::Answer(_) => {}
        End::ApprovalExpired(_) => advice.push(
            "decide what the run left (rein handoff), then submit the task again if the call is still wanted"
                .into(),
        ),
        End::Interrupted => advice.push("resume it; completed steps will not run again".into()),
        End::Cancelled(_) => {
            advice.push("submit the task again if it is still wanted".into());
        }
        End::StoreFailed(_) => {
            advice.push("restore the run store, then reconcile the ledger".into())
        }
        End::Internal(_) => advice.push(
            "rein failed the run (an internal error): report it with the run's events".into(),
        ),
        End::Closed { .. } => {}
    }
    if matches!(facts.end, End::Closed { .. } | End::Internal(_)) {
        // What stands in the world now: an effect undone (`compensated`)
        // took place, but is no reason not to submit the task again.
        let done: Vec<&str> = completed
            .iter()
            .filter(|c| c.ledger.is_some_and(|s| s != LedgerStatus::Compensated))
            .map(|c| c.tool.as_str())
            .collect();
        let undone: Vec<&str> = completed
            .iter()
            .filter(|c| c.ledger == Some(LedgerStatus::Compensated))
            .map(|c| c.tool.as_str())
            .collect();
        if done.is_empty() && incomplete.iter().all(|a| !a.maybe_applied) {
            if undone.is_empty() {
                advice.push(
                    "nothing took effect; submit the task again if it is still wanted".into(),
                );
            } else {
                advice.push(format!(
                    "every effect was undone ({}); submit the task again if it is still wanted",
                    undone.join(", ")
                ));
            }
        } else if !done.is_empty() {
            advice.push(format!(
                "{} took effect: do not submit the task again without checking the run's ledger",
                done.join(", ")
            ));
        }
    }
    for action in incomplete {
        let line = if action.maybe_applied {
            format!(
                "check whether {} took effect before retrying it (its ledger record awaits reconciliation)",
                action.tool
            )
        } else {
            // The wait the tool asked for, so the advice names it (the
            // call's own failure says it).
            let hint = FailureHint {
                key_env: None,
                retry_after_ms: facts
                    .calls
                    .iter()
                    .rev()
                    .find(|c| c.planned.intent_id == action.intent_id)
                    .and_then(|c| c.outcome.as_ref().err())
                    .and_then(crate::failure::Failure::retry_after)
                    .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            };
            let advice = advise(action.category, Subject::Tool(&action.tool), &hint);
            if advice.recoverable && action.category != Category::BudgetExhausted {
                format!("{}; it did not take effect", advice.recommendation)
            } else {
                advice.recommendation
            }
        };
        if !advice.contains(&line) {
            advice.push(line);
        }
    }
    if !awaiting.is_empty() {
        advice.push(format!(
            "{} {} a human decision (rein handoff {})",
            plural::count(awaiting.len(), "record"),
            plural::agree(awaiting.len(), "awaits", "await"),
            facts.run_id
        ));
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
    facts: &RunFacts,
    outcome: Outcome,
    completed: &[CompletedAction],
    incomplete: &[IncompleteAction],
    awaiting: usize,
) -> String {
    let mut s = format!("The run ended {outcome}");
    match &facts.end {
        End::Budget(e) => {
            let _ = write!(s, " ({e})");
        }
        End::FinalTurn { short, .. } => {
            let _ = write!(
                s,
                " (too little {} left for another tool round trip: needs {}, {} remain; the model gave a final answer from what it knew, without tools)",
                short.dimension, short.needed, short.remaining
            );
        }
        End::Loop(trip) => {
            let _ = write!(s, " (loop guard: {trip})");
        }
        End::ModelFailed(_, why)
        | End::StoreFailed(why)
        | End::Settling(why)
        | End::Cancelled(why)
        | End::ApprovalExpired(why) => {
            let _ = write!(s, " ({why})");
        }
        End::Closed {
            error_type: Some(kind),
            reason,
        } => {
            let _ = write!(s, " ({kind}: {reason})");
        }
        End::Closed {
            error_type: None,
            reason,
        } => {
            let _ = write!(s, " ({reason})");
        }
        End::Internal(why) => {
            let _ = write!(s, " ({INTERNAL}: {why})");
        }
        End::Interrupted => s.push_str(" (interrupted: its process is stopping)"),
        End::Answer(_) => {}
    }
    s.push('.');
    let with_status = |tool: &str, ledger: Option<LedgerStatus>| match ledger {
        None | Some(LedgerStatus::Succeeded) => tool.to_owned(),
        Some(status) => format!("{tool} ({status})"),
    };
    if completed.is_empty() {
        s.push_str(" No action completed.");
    } else {
        let names: Vec<String> = completed
            .iter()
            .map(|a| with_status(&a.tool, a.ledger))
            .collect();
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
    match &facts.settled {
        Settled::Undone if !facts.compensations.is_empty() => {
            let names: Vec<&str> = facts
                .compensations
                .iter()
                .map(|c| c.tool.as_str())
                .collect();
            let _ = write!(
                s,
                " Its effects were undone in reverse order: {}.",
                names.join(", ")
            );
        }
        Settled::HandedOff(reason) => {
            let _ = write!(s, " Handed off: {reason}.");
        }
        _ if awaiting > 0 => {
            let _ = write!(
                s,
                " {} {} a human decision.",
                plural::count(awaiting, "record"),
                plural::agree(awaiting, "awaits", "await")
            );
        }
        _ => {}
    }
    s
}

/// The package for a human: every action, what is certain and what is
/// not, what rein tried, what may still be running, and what awaits a
/// decision.
fn package(facts: &RunFacts, ledger: &[LedgerRecord]) -> HandoffPackage {
    let status_of: BTreeMap<(&RunId, &IntentId), LedgerStatus> = ledger
        .iter()
        .map(|r| ((&r.run_id, &r.intent_id), r.status))
        .collect();
    let mut timeline: Vec<TimelineEntry> = facts
        .calls
        .iter()
        .map(|call| TimelineEntry {
            step: call.planned.step,
            intent_id: call.planned.intent_id.clone(),
            tool: call.planned.tool.clone(),
            input_digest: input_digest(&call.planned.args),
            ledger: status_of
                .get(&(&facts.run_id, &call.planned.intent_id))
                .copied()
                .or(call.ledger),
            result: match &call.outcome {
                Ok(v) => v.clone(),
                Err(f) => {
                    json!({"failed": f.category(), "effect": f.effect(), "reason": f.human_message()})
                }
            },
        })
        .collect();
    // The run's records no call mentions (an interrupted step) belong on
    // the timeline too.
    let mentioned: BTreeSet<&IntentId> = facts.calls.iter().map(|c| &c.planned.intent_id).collect();
    for r in ledger
        .iter()
        .filter(|r| r.run_id == facts.run_id && !mentioned.contains(&r.intent_id))
    {
        timeline.push(TimelineEntry {
            step: r.step,
            intent_id: r.intent_id.clone(),
            tool: r.tool.clone(),
            input_digest: input_digest(&r.args),
            ledger: Some(r.status),
            result: r.result.clone().unwrap_or(Value::Null),
        });
    }
    let state = |r: &LedgerRecord, note: String| EffectState {
        intent_id: r.intent_id.clone(),
        tool: r.tool.clone(),
        status: r.status,
        note,
        owner: facts.owners.get(&r.tool).map(|o| o.owner.clone()),
        side_effect_tier: facts.owners.get(&r.tool).map(|o| o.side_effect_tier),
    };
    let mut certain = Vec::new();
    let mut uncertain = Vec::new();
    let mut awaiting = Vec::new();
    for r in ledger {
        match r.status {
            LedgerStatus::Succeeded => certain.push(state(r, "took effect".into())),
            LedgerStatus::Failed => certain.push(state(r, "did not take effect".into())),
            LedgerStatus::Compensated => {
                certain.push(state(r, "took effect and was undone".into()))
            }
            LedgerStatus::Accepted => certain.push(state(r, "stands, as a human decided".into())),
            LedgerStatus::Pending => {
                uncertain.push(state(
                    r,
                    "may have taken effect; the tool could not confirm".into(),
                ));
                awaiting.push(state(r, "decide whether it happened".into()));
            }
            LedgerStatus::Uncompensatable => {
                certain.push(state(r, "took effect and cannot be undone".into()));
                awaiting.push(state(
                    r,
                    "decide how to make good an effect rein cannot undo".into(),
                ));
            }
            LedgerStatus::Manual if r.result.is_some() => {
                certain.push(state(r, "took effect; rein did not undo it".into()));
                awaiting.push(state(r, "undo it by hand or accept it".into()));
            }
            LedgerStatus::Manual => {
                uncertain.push(state(
                    r,
                    "may have taken effect, or its compensation did not complete".into(),
                ));
                awaiting.push(state(
                    r,
                    "check whether it happened; undo it by hand or accept it".into(),
                ));
            }
        }
    }
    let mut tried = Vec::new();
    for call in &facts.calls {
        if call.attempts > 1 {
            tried.push(format!(
                "{}: {} attempts with the same key and deadline",
                call.planned.tool, call.attempts
            ));
        }
    }
    for c in &facts.compensations {
        tried.push(format!("{}: {}", c.tool, c.note));
    }
    let mut not_tried = vec!["no irreversible call was retried (never automatic)".to_owned()];
    not_tried.extend(facts.strategies_not_tried.iter().cloned());
    // A call in doubt is still in flight only while the ledger has not
    // decided it.
    let mut in_flight: Vec<InFlight> = facts
        .calls
        .iter()
        .filter(|c| {
            c.class != ToolClass::Read
                && matches!(&c.outcome, Err(f) if f.effect() == Effect::MaybeApplied)
                && status_of
                    .get(&(&facts.run_id, &c.planned.intent_id))
                    .is_none_or(|s| matches!(s, LedgerStatus::Pending | LedgerStatus::Manual))
        })
        .map(|c| InFlight {
            intent_id: Some(c.planned.intent_id.clone()),
            what: format!("{} call (timed out or lost its answer)", c.planned.tool),
            may_be_running: true,
            advice: "check with the target before repeating it; it may still complete".into(),
        })
        .collect();
    in_flight.extend(facts.in_flight.iter().cloned());
    let reason = match (&facts.settled, &facts.end) {
        (Settled::HandedOff(reason), _) => reason.clone(),
        (_, End::Closed { error_type, reason }) => format!(
            "the run was closed from outside ({}{reason}) and {} {} a human",
            error_type
                .as_deref()
                .map(|t| format!("{t}: "))
                .unwrap_or_default(),
            plural::count(awaiting.len(), "record"),
            plural::agree(awaiting.len(), "awaits", "await")
        ),
        (_, End::Internal(why)) => format!(
            "rein failed the run ({INTERNAL}: {why}) and {} {} a human",
            plural::count(awaiting.len(), "record"),
            plural::agree(awaiting.len(), "awaits", "await")
        ),
        _ => format!(
            "{} {} a human decision after the run ended",
            plural::count(awaiting.len(), "record"),
            plural::agree(awaiting.len(), "awaits", "await")
        ),
    };
    HandoffPackage {
        run_id: facts.run_id.clone(),
        agent: facts.agent.clone(),
        input: facts.input.clone(),
        reason,
        timeline,
        certain,
        uncertain,
        strategies_tried: tried,
        strategies_not_tried: not_tried,
        in_flight,
        awaiting_decision: awaiting,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::Planned;
    use crate::failure::Failure;
    use crate::timestamp::Timestamp;

    fn run_id() -> RunId {
        RunId::new("r-1").unwrap()
    }

    fn call(n: u32, tool: &str, class: ToolClass, outcome: Result<Value, Failure>) -> CallResult {
        CallResult {
            planned: Planned {
                intent_id: IntentId::new(format!("i-{n}")).unwrap(),
                call_id: format!("c-{n}"),
                tool: tool.into(),
                args: json!({"n": n}),
                step: n,
                position: 0,
                salvaged: false,
            },
            class,
            ledger: (class != ToolClass::Read).then_some(if outcome.is_ok() {
                LedgerStatus::Succeeded
            } else {
                LedgerStatus::Pending
            }),
            outcome,
            attempts: 1,
        }
    }

    fn record(n: u32, tool: &str, class: ToolClass, status: LedgerStatus) -> LedgerRecord {
        LedgerRecord {
            run_id: run_id(),
            intent_id: IntentId::new(format!("i-{n}")).unwrap(),
            seq: u64::from(n),
            step: n,
            tool: tool.into(),
            class,
            idempotency_key: None,
            args: json!({"n": n}),
            status,
            result: matches!(
                status,
                LedgerStatus::Succeeded | LedgerStatus::Compensated | LedgerStatus::Uncompensatable
            )
            .then(|| json!({"ok": n})),
            failure: None,
            attempts: 1,
            created_at_ms: Timestamp::from_millis(1),
            updated_at_ms: Timestamp::from_millis(1),
        }
    }

    fn facts(end: End, settled: Settled, calls: Vec<CallResult>) -> RunFacts {
        RunFacts {
            run_id: run_id(),
            agent: "desk".into(),
            input: "move A-1 and tell the buyer".into(),
            end,
            settled,
            outcome: None,
            calls,
            consumed: Usage::default(),
            elapsed_ms: 10,
            steps: 3,
            models: Vec::new(),
            compensations: Vec::new(),
            resume: None,
            in_flight: Vec::new(),
            strategies_not_tried: Vec::new(),
            notes: Vec::new(),
            hint: Default::default(),
            owners: Default::default(),
        }
    }

    fn read() -> CallResult {
        call(1, "get_order", ToolClass::Read, Ok(json!({"id": "A-1"})))
    }

    fn update() -> CallResult {
        call(
            2,
            "update",
            ToolClass::IdempotentWrite,
            Ok(json!({"moved": true})),
        )
    }

    fn email_failed(effect: Effect, category: Category) -> CallResult {
        call(
            3,
            "send_email",
            ToolClass::Irreversible,
            Err(Failure::new("send_email", category).with_effect(effect)),
        )
    }

    fn statuses(report: &RunReport) -> Vec<(String, Option<LedgerStatus>)> {
        report
            .completed
            .iter()
            .map(|a| (a.tool.clone(), a.ledger))
            .chain(report.incomplete.iter().map(|a| (a.tool.clone(), a.ledger)))
            .collect()
    }

    /// Summary and outcome are one decision: the summary names the outcome
    /// the report carries, whatever the path.
    fn assert_agrees(report: &RunReport) {
        assert!(
            report
                .summary
                .starts_with(&format!("The run ended {}", report.outcome)),
            "{} vs {}",
            report.summary,
            report.outcome
        );
    }

    #[test]
    fn derive_when_the_model_answered_after_every_call_succeeded_is_a_success() {
        let ledger = [record(
            2,
            "update",
            ToolClass::IdempotentWrite,
            LedgerStatus::Succeeded,
        )];
        let report = derive(
            &facts(
                End::Answer(Some("done".into())),
                Settled::Kept,
                vec![read(), update()],
            ),
            &ledger,
        );
        assert_eq!(report.outcome, Outcome::Succeeded);
        assert_eq!(report.answer.as_deref(), Some("done"));
        assert_eq!(
            statuses(&report),
            [
                ("get_order".into(), None),
                ("update".into(), Some(LedgerStatus::Succeeded))
            ]
        );
        assert!(report.handoff.is_none());
        assert!(report.recoverable);
        assert_agrees(&report);
    }

    #[test]
    fn derive_when_a_completed_call_is_still_pending_in_the_ledger_is_no_success() {
        // The email was sent and answered; its mark did not land.
        let email = call(
            3,
            "send_email",
            ToolClass::Irreversible,
            Ok(json!({"sent": true})),
        );
        let ledger = [
            record(
                2,
                "update",
                ToolClass::IdempotentWrite,
                LedgerStatus::Succeeded,
            ),
            record(
                3,
                "send_email",
                ToolClass::Irreversible,
                LedgerStatus::Pending,
            ),
        ];
        let report = derive(
            &facts(
                End::Answer(Some("done".into())),
                Settled::Kept,
                vec![read(), update(), email],
            ),
            &ledger,
        );
        assert_eq!(report.outcome, Outcome::PartialSuccess);
        assert!(!report.recoverable);
        assert!(
            report.summary.contains("send_email (pending)"),
            "{}",
            report.summary
        );
        assert_agrees(&report);
    }

    #[test]
    fn derive_when_effects_are_kept_after_a_rate_limit_is_a_recoverable_partial_success() {
        let ledger = [
            record(
                2,
                "update",
                ToolClass::IdempotentWrite,
                LedgerStatus::Succeeded,
            ),
            record(
                3,
                "send_email",
                ToolClass::Irreversible,
                LedgerStatus::Failed,
            ),
        ];
        let calls = vec![
            read(),
            update(),
            email_failed(Effect::NotApplied, Category::RateLimited),
        ];
        let report = derive(&facts(End::Answer(None), Settled::Kept, calls), &ledger);
        assert_eq!(report.outcome, Outcome::PartialSuccess);
        assert!(report.recoverable);
        assert_eq!(report.incomplete[0].ledger, Some(LedgerStatus::Failed));
        assert!(!report.incomplete[0].maybe_applied);
        assert!(report.recommendation.contains("retry send_email later"));
        assert_agrees(&report);
    }

    #[test]
    fn derive_lists_an_action_retried_under_its_intent_once_as_it_last_ended() {
        let ledger = [
            record(
                2,
                "update",
                ToolClass::IdempotentWrite,
                LedgerStatus::Succeeded,
            ),
            record(
                3,
                "send_email",
                ToolClass::Irreversible,
                LedgerStatus::Succeeded,
            ),
        ];
        let mut retried = call(
            3,
            "send_email",
            ToolClass::Irreversible,
            Ok(json!({"sent": 1})),
        );
        retried.planned.step = 5;
        let calls = vec![
            read(),
            update(),
            email_failed(Effect::NotApplied, Category::RateLimited),
            retried,
        ];
        let report = derive(
            &facts(End::Answer(Some("notified".into())), Settled::Kept, calls),
            &ledger,
        );
        assert_eq!(report.outcome, Outcome::Succeeded);
        assert!(report.incomplete.is_empty(), "{:?}", report.incomplete);
        let emails = report
            .completed
            .iter()
            .filter(|a| a.tool == "send_email")
            .count();
        assert_eq!(emails, 1, "{:?}", report.completed);
        assert_agrees(&report);
    }

    #[test]
    fn derive_after_undoing_every_effect_is_failed_and_lists_them_compensated() {
        let ledger = [record(
            2,
            "update",
            ToolClass::IdempotentWrite,
            LedgerStatus::Compensated,
        )];
        let mut f = facts(
            End::Answer(None),
            Settled::Undone,
            vec![
                update(),
                call(
                    4,
                    "update",
                    ToolClass::IdempotentWrite,
                    Err(Failure::new("update", Category::Conflict)),
                ),
            ],
        );
        f.compensations = vec![CompensationResult {
            intent_id: IntentId::new("i-2").unwrap(),
            tool: "update".into(),
            compensation_tool: Some("restore".into()),
            status: LedgerStatus::Compensated,
            note: "undone".into(),
        }];
        let report = derive(&f, &ledger);
        assert_eq!(report.outcome, Outcome::Failed);
        assert_eq!(report.completed[0].ledger, Some(LedgerStatus::Compensated));
        assert!(report.summary.contains("undone in reverse order: update"));
        assert!(report.summary.contains("update (compensated)"));
        assert!(report.recoverable);
        assert_agrees(&report);
    }

    #[test]
    fn derive_of_a_cancelled_run_undone_stays_cancelled() {
        let ledger = [record(
            2,
            "update",
            ToolClass::IdempotentWrite,
            LedgerStatus::Compensated,
        )];
        let report = derive(
            &facts(
                End::Cancelled("by the caller".into()),
                Settled::Undone,
                vec![update()],
            ),
            &ledger,
        );
        assert_eq!(report.outcome, Outcome::Cancelled);
        assert_agrees(&report);
    }

    #[test]
    fn derive_when_handed_off_carries_the_package_and_says_so_in_the_summary() {
        let ledger = [
            record(
                2,
                "update",
                ToolClass::IdempotentWrite,
                LedgerStatus::Manual,
            ),
            record(
                3,
                "send_email",
                ToolClass::Irreversible,
                LedgerStatus::Uncompensatable,
            ),
        ];
        let calls = vec![
            update(),
            call(
                3,
                "send_email",
                ToolClass::Irreversible,
                Ok(json!({"sent": true})),
            ),
            call(
                4,
                "update",
                ToolClass::IdempotentWrite,
                Err(Failure::new("update", Category::Conflict)),
            ),
        ];
        let report = derive(
            &facts(
                End::Answer(None),
                Settled::HandedOff("cannot undo the email".into()),
                calls,
            ),
            &ledger,
        );
        assert_eq!(report.outcome, Outcome::HandedOff);
        assert!(!report.recoverable);
        assert_agrees(&report);
        assert!(
            report
                .summary
                .contains("Handed off: cannot undo the email.")
        );
        let package = report.handoff.clone().expect("a package");
        assert_eq!(package.reason, "cannot undo the email");
        assert_eq!(package.awaiting_decision.len(), 2);
        assert_eq!(
            statuses(&report)[..2],
            [
                ("update".into(), Some(LedgerStatus::Manual)),
                ("send_email".into(), Some(LedgerStatus::Uncompensatable))
            ]
        );
        assert!(report.recommendation.contains("2 records await a decision"));
    }

    #[test]
    fn derive_of_an_orphaned_run_lists_what_it_did_and_what_is_in_doubt() {
        // Its checkpoint knew the update; the email's step was interrupted
        // after the ledger declared it.
        let ledger = [
            record(
                2,
                "update",
                ToolClass::IdempotentWrite,
                LedgerStatus::Succeeded,
            ),
            record(
                3,
                "send_email",
                ToolClass::Irreversible,
                LedgerStatus::Pending,
            ),
        ];
        let mut f = facts(
            End::Closed {
                error_type: Some("orphaned".into()),
                reason: "its process stopped signalling".into(),
            },
            Settled::Kept,
            vec![read(), update()],
        );
        f.outcome = Some(Outcome::Failed);
        let report = derive(&f, &ledger);
        assert_eq!(report.outcome, Outcome::Failed);
        assert_agrees(&report);
        assert!(
            report
                .summary
                .contains("(orphaned: its process stopped signalling)")
        );
        assert_eq!(
            statuses(&report),
            [
                ("get_order".into(), None),
                ("update".into(), Some(LedgerStatus::Succeeded)),
                ("send_email".into(), Some(LedgerStatus::Pending))
            ]
        );
        assert!(report.incomplete[0].maybe_applied);
        assert!(!report.recoverable);
        assert!(
            report
                .recommendation
                .contains("update took effect: do not submit the task again"),
            "{}",
            report.recommendation
        );
        let package = report.handoff.expect("a record in doubt awaits a human");
        assert_eq!(package.uncertain[0].tool, "send_email");
        assert!(package.reason.contains("orphaned"));
        assert_eq!(package.timeline.len(), 3, "the email is on the timeline");
    }

    #[test]
    fn derive_of_a_run_closed_before_it_did_anything_is_recoverable() {
        let mut f = facts(
            End::Closed {
                error_type: None,
                reason: "cancelled while queued: the run never started".into(),
            },
            Settled::Kept,
            Vec::new(),
        );
        f.outcome = Some(Outcome::Cancelled);
        let report = derive(&f, &[]);
        assert_eq!(report.outcome, Outcome::Cancelled);
        assert!(report.recoverable);
        assert!(report.handoff.is_none());
        assert!(report.recommendation.contains("nothing took effect"));
        assert_agrees(&report);
    }

    #[test]
    fn derive_again_after_the_ledger_changed_keeps_the_outcome_and_follows_the_ledger() {
        let calls = vec![update()];
        let first = derive(
            &facts(
                End::Budget(Exhausted {
                    dimension: crate::deadline::Dimension::Steps,
                    needed: 4,
                    remaining: 0,
                }),
                Settled::Kept,
                calls.clone(),
            ),
            &[record(
                2,
                "update",
                ToolClass::IdempotentWrite,
                LedgerStatus::Succeeded,
            )],
        );
        assert_eq!(first.outcome, Outcome::BudgetExhausted);
        assert!(first.handoff.is_none());
        let basis = first.basis.clone().unwrap();
        let mut again = facts(basis.end, basis.settled, calls);
        again.outcome = Some(first.outcome);
        let revised = derive(
            &again,
            &[record(
                2,
                "update",
                ToolClass::IdempotentWrite,
                LedgerStatus::Manual,
            )],
        );
        assert_eq!(revised.outcome, Outcome::BudgetExhausted);
        assert_agrees(&revised);
        assert_eq!(revised.completed[0].ledger, Some(LedgerStatus::Manual));
        assert!(!revised.recoverable, "a record awaits a human");
        assert!(revised.handoff.is_some());
        assert!(revised.summary.contains("1 record awaits a human decision"));
    }

    #[test]
    fn derive_lists_a_call_that_gave_up_in_doubt_as_completed_once_the_ledger_knows() {
        let calls = vec![call(
            2,
            "update",
            ToolClass::IdempotentWrite,
            Err(Failure::new("update", Category::Timeout).with_effect(Effect::MaybeApplied)),
        )];
        let ledger = [record(
            2,
            "update",
            ToolClass::IdempotentWrite,
            LedgerStatus::Succeeded,
        )];
        let report = derive(
            &facts(End::Answer(None), Settled::Kept, calls.clone()),
            &ledger,
        );
        assert_eq!(report.completed[0].ledger, Some(LedgerStatus::Succeeded));
        assert!(report.incomplete.is_empty());
        let never = [record(
            2,
            "update",
            ToolClass::IdempotentWrite,
            LedgerStatus::Failed,
        )];
        let report = derive(&facts(End::Answer(None), Settled::Kept, calls), &never);
        assert!(
            !report.incomplete[0].maybe_applied,
            "the ledger says it never ran"
        );
        assert!(report.handoff.is_none());
    }

    #[test]
    fn derive_of_a_closed_run_whose_effects_were_all_undone_does_not_say_they_stand() {
        let ledger = [record(
            2,
            "update",
            ToolClass::IdempotentWrite,
            LedgerStatus::Compensated,
        )];
        let closed = End::Closed {
            error_type: Some("orphaned".into()),
            reason: "its process died".into(),
        };
        let report = derive(&facts(closed, Settled::Kept, vec![update()]), &ledger);
        assert_agrees(&report);
        assert_eq!(report.completed[0].ledger, Some(LedgerStatus::Compensated));
        assert!(
            !report.recommendation.contains("do not submit"),
            "{}",
            report.recommendation
        );
        assert!(
            report
                .recommendation
                .contains("every effect was undone (update); submit the task again"),
            "{}",
            report.recommendation
        );
    }

    #[test]
    fn derive_keeps_the_held_leases_and_the_strategies_not_tried_in_its_basis() {
        let mut f = facts(End::Answer(None), Settled::Kept, vec![update()]);
        f.in_flight = vec![InFlight {
            intent_id: None,
            what: "process group 42".into(),
            may_be_running: true,
            advice: "kill it".into(),
        }];
        f.strategies_not_tried = vec!["automatic compensation: the policy is Continue".into()];
        let basis = derive(&f, &[]).basis.unwrap();
        assert_eq!(basis.in_flight, f.in_flight);
        assert_eq!(basis.strategies_not_tried, f.strategies_not_tried);
        assert_eq!(basis.ledger_revision, None, "the store stamps it");
    }

    #[test]
    fn derive_of_an_internal_error_is_failed_and_not_recoverable() {
        let ledger = [record(
            2,
            "update",
            ToolClass::IdempotentWrite,
            LedgerStatus::Succeeded,
        )];
        let report = derive(
            &facts(
                End::Internal("attempt to add with overflow".into()),
                Settled::Kept,
                vec![update()],
            ),
            &ledger,
        );
        assert_eq!(report.outcome, Outcome::Failed);
        assert!(!report.recoverable);
        assert!(
            report
                .summary
                .contains("(internal: attempt to add with overflow)")
        );
        assert!(report.recommendation.contains("internal error"));
        assert_agrees(&report);
        assert_eq!(
            report.basis.map(|b| b.end.error_type().map(str::to_owned)),
            Some(Some("internal".into()))
        );
    }

    #[test]
    fn a_child_runs_records_feed_the_package_but_not_the_parents_actions() {
        let mut child = record(
            9,
            "update",
            ToolClass::IdempotentWrite,
            LedgerStatus::Manual,
        );
        child.run_id = RunId::new("r-1-child").unwrap();
        let report = derive(
            &facts(
                End::Answer(None),
                Settled::HandedOff("the child's update stands".into()),
                vec![read()],
            ),
            &[child],
        );
        assert_eq!(report.completed.len(), 1, "only the parent's read");
        let package = report.handoff.unwrap();
        assert_eq!(package.awaiting_decision.len(), 1);
        assert_eq!(package.timeline.len(), 1);
    }

    #[test]
    fn end_round_trips_through_serde() {
        for end in [
            End::Answer(Some("a".into())),
            End::ModelFailed(Category::Timeout, "slow".into()),
            End::Closed {
                error_type: Some("dead_letter".into()),
                reason: "3 deliveries".into(),
            },
            End::Internal("boom".into()),
        ] {
            let text = serde_json::to_string(&end).unwrap();
            assert_eq!(serde_json::from_str::<End>(&text).unwrap(), end, "{text}");
        }
    }
}

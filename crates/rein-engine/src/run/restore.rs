//! Restoring a run's loop state from what the store holds of it: its
//! record, its latest checkpoint, its persisted plans, its ledger and its
//! events.
//!
//! # Why pure
//!
//! The resume reads the records and claims the run (the imperative shell,
//! [`Engine::resume`](super::Engine::resume)); what the loop continues
//! with is decided here, from the records and `now` alone, so that every
//! rule of a resume (nothing refunded, nothing run twice, the interrupted
//! step replayed with its intents) is tested without a store or a clock.
//!
//! # Why strict
//!
//! A default is a silent lie about the past. A transcript that cannot be
//! decoded resumed as `[system, user]`, or calls and facts resumed as
//! empty lists, would continue a run that forgot what it did: its report
//! would understate what completed and its loop guard would see no
//! progress. Anything that cannot be decoded makes the run
//! [`RestoreError::NotResumable`], naming the field and what was wrong, so
//! that an operator sees it on `rein resume` and on the API.

use rein_core::Timestamp;
use std::collections::{BTreeSet, HashMap};

use rein_core::deadline::{Budget, Cost, Deadline};
use rein_core::event::{ModelCallResult, RetryTarget};
use rein_core::loop_guard::LoopGuard;
use rein_core::outcome::ResumeMarker;
use rein_core::{
    ConfigError, Event, EventData, EventKind, Instant, IntentId, LedgerRecord, ToolClass,
};
use rein_store::{Checkpoint, PlannedIntent, RunRecord};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::provider::{FinishReason, Message, ModelResponse, ToolCall};

use super::checkpoint::Checkpointed;
use super::ctx::ModelRetryUse;
use super::guarded::{self, CallResult};
use super::progress::Progress;
use super::retry_refused::{Wait, refused_retries};
use super::step::{LoopState, ResumedTurn};
use super::{AgentBinding, End};

/// What the store holds of a run, as the resume read it.
pub(super) struct Stored<'a> {
    /// The run's record.
    pub(super) record: &'a RunRecord,
    /// Its latest checkpoint, if a step completed.
    pub(super) checkpoint: Option<&'a Checkpoint>,
    /// Every persisted plan, by step.
    pub(super) intents: Vec<(u32, PlannedIntent)>,
    /// Its ledger records.
    pub(super) ledger: Vec<LedgerRecord>,
    /// Its events, in order.
    pub(super) events: &'a [Event],
    /// When the resume reads it (the wall clock, as events record time).
    pub(super) at_ms: Timestamp,
}

/// A run's state restored: what the loop continues with, and what the
/// run's context starts from.
pub(super) struct Restored {
    /// The loop's state, with its resume marker.
    pub(super) state: LoopState,
    /// The interrupted step's plan, replayed instead of a model turn.
    pub(super) resumed: Option<ResumedTurn>,
    /// The run was settling: the settlement is finished, never rolled
    /// forward.
    pub(super) settling: Option<End>,
    /// Model calls already served (the scripted provider's position).
    pub(super) served: u64,
    /// Input tokens of the last answered model call.
    pub(super) last_input_tokens: u64,
    /// What the run already spent retrying model calls.
    pub(super) model_retries: ModelRetryUse,
    /// The models that answered its turns so far, in first-use order.
    pub(super) models: Vec<String>,
    /// The refused actions of a finished, recoverable run that
    /// [`Restored::resumed`] sends again before the model is asked.
    pub(super) retried: Option<Retried>,
}

/// What a resume retries of a finished run ([`super::retry_refused`]).
pub(super) struct Retried {
    /// The intents sent again.
    pub(super) intents: Vec<IntentId>,
    /// The longest wait their refusals still ask for, if any.
    pub(super) wait: Option<Wait>,
}

/// Why a run's state cannot be restored.
#[derive(Debug, thiserror::Error)]
pub(super) enum RestoreError {
    /// A record could not be decoded: resuming would lose what it held.
    #[error("{reason}")]
    NotResumable {
        /// What was wrong, naming the field.
        reason: String,
    },
    /// The agent's settings are invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
}

/// The loop state of `stored`'s run for `agent`, resumed at `now`.
///
/// The budget is not reset: what the checkpoint consumed, and what the
/// interrupted step consumed after it (its model turn and its time), is
/// charged, so a crash never refunds budget (invariant 2).
///
/// # Errors
///
/// [`RestoreError::NotResumable`] when the checkpoint cannot be decoded,
/// naming the field; [`RestoreError::Config`] when the agent's loop guard
/// or budget settings are invalid.
pub(super) fn restore(
    stored: Stored<'_>,
    agent: &AgentBinding,
    now: Instant,
) -> Result<Restored, RestoreError> {
    let Stored {
        record,
        checkpoint,
        intents,
        ledger,
        events,
        at_ms,
    } = stored;
    let guard = LoopGuard::new(agent.loop_guard.clone())?;
    let decoded = match checkpoint {
        Some(c) => decode(c)?,
        None => Decoded::fresh(agent, record),
    };
    let done_step = checkpoint.map_or(0, |c| c.step);
    // A settlement that started is finished, never rolled forward.
    let settling = events
        .iter()
        .any(|e| e.kind() == EventKind::SettlementStarted)
        .then(|| End::Settling("an interrupted settlement was resumed".into()));
    // What the interrupted step consumed before the crash (its model
    // turn is durable with the plan) and the time it ran: charged, so a
    // crash never refunds budget.
    let after_checkpoint: Vec<&Event> = events.iter().filter(|e| e.step > done_step).collect();
    let since_ms = checkpoint.map_or(record.created_at_ms, |c| c.at_ms);
    let interrupted_ms = active_ms(
        &after_checkpoint,
        since_ms,
        agent.approval.pause_clock,
        at_ms,
    );
    let elapsed_before_ms = checkpoint.map_or(0, |c| c.elapsed_ms) + interrupted_ms;
    let mut consumed = checkpoint.map(|c| c.consumed).unwrap_or_default();
    let (tokens, cost) = interrupted_usage(&after_checkpoint, agent);
    consumed.tokens = consumed.tokens.saturating_add(tokens);
    consumed.cost = consumed.cost.saturating_add(cost);

    let resumed = settling
        .is_none()
        .then(|| resumed_turn(&intents, &ledger, done_step, &after_checkpoint))
        .flatten();
    // The model has served the checkpointed calls, and the interrupted
    // step's turn when its plan exists.
    let mut served = decoded.provider_calls + u64::from(resumed.is_some());
    // A finished run that its report said to retry: the refused actions
    // are sent again first, as the step after its checkpoint.
    let retry = match (&resumed, &settling) {
        (None, None) => refused_retries(
            record,
            &intents,
            &ledger,
            &decoded.calls,
            done_step + 1,
            at_ms,
        ),
        _ => None,
    };
    if retry.is_some() {
        // Its model answered every call it made, its last answer included
        // (not checkpointed: the run ended there); the retry is followed
        // by a new turn, not by that answer again.
        served = decoded.provider_calls + model_calls(&after_checkpoint);
    }

    // Only the active time that remained is available.
    let forward_wall = agent.budget.wall_clock()
        - agent
            .compensation_reserve
            .of_duration(agent.budget.wall_clock());
    let left = forward_wall
        .saturating_sub(std::time::Duration::from_millis(elapsed_before_ms))
        .max(std::time::Duration::from_millis(1));
    let reserve = agent
        .compensation_reserve
        .of_duration(agent.budget.wall_clock());
    let full_deadline = Deadline::after(now, left + reserve);
    let mut budget = Budget::start(agent.budget.with_wall_clock(left)?, now);
    let _ = budget.charge(consumed, now);

    let mut marker = marker(done_step, resumed.as_ref());
    let (resumed, retried) = match retry {
        Some(retry) => {
            marker.retried = retry.intents.clone();
            marker.reexecuted_with_same_key = retry.keyed;
            let tools: Vec<&str> = retry
                .turn
                .response
                .tool_calls
                .iter()
                .map(|c| c.name.as_str())
                .collect();
            marker.note = format!(
                "continued after step {done_step}; completed steps were not run again; what its report said to retry ({}) was sent again under its intent ids, having certainly not taken effect, before the model was asked anything new",
                tools.join(", ")
            );
            (
                Some(retry.turn),
                Some(Retried {
                    intents: retry.intents,
                    wait: retry.wait,
                }),
            )
        }
        None => (resumed, None),
    };
    let (model_retries, models) = model_use(events);
    Ok(Restored {
        state: LoopState {
            budget,
            full_deadline,
            started: now,
            elapsed_before_ms,
            guard,
            // What the checkpoint holds; without one, nothing yet: the
            // first transcript goes into the next step's delta.
            checkpointed: match checkpoint {
                Some(_) => Checkpointed {
                    messages: decoded.messages.len(),
                    calls: decoded.calls.len(),
                },
                None => Checkpointed::default(),
            },
            messages: decoded.messages,
            calls: decoded.calls,
            progress: Progress::from_parts(decoded.facts, decoded.tools_tried),
            step: done_step,
            resume: Some(marker),
        },
        resumed,
        settling,
        served,
        last_input_tokens: last_input_tokens(events),
        model_retries,
        models,
        retried,
    })
}

/// The model calls among `events`, failed ones included (each moved a
/// scripted provider on).
fn model_calls(events: &[&Event]) -> u64 {
    let calls = events
        .iter()
        .filter(|e| e.kind() == EventKind::ModelCallFinished)
        .count();
    u64::try_from(calls).unwrap_or(u64::MAX)
}

/// What a checkpoint holds, decoded.
struct Decoded {
    messages: Vec<Message>,
    calls: Vec<CallResult>,
    facts: BTreeSet<String>,
    tools_tried: BTreeSet<String>,
    provider_calls: u64,
}

impl Decoded {
    /// A run that never completed a step: its first transcript, nothing
    /// done yet (not a fallback: there is no checkpoint to lose).
    fn fresh(agent: &AgentBinding, record: &RunRecord) -> Decoded {
        Decoded {
            messages: vec![
                Message::System {
                    content: agent.system_prompt.clone(),
                },
                Message::user(record.input.clone()),
            ],
            calls: Vec::new(),
            facts: BTreeSet::new(),
            tools_tried: BTreeSet::new(),
            provider_calls: 0,
        }
    }
}

/// Decodes `checkpoint` strictly: every field a step's delta writes (see
/// [`super::checkpoint`]), as the store rebuilt them into one checkpoint,
/// or as a release before deltas wrote them whole, must be there and
/// decode.
// NOTE: the fields read here are the ones `checkpoint::delta` writes (and
// the whole form wrote); they change together.
fn decode(checkpoint: &Checkpoint) -> Result<Decoded, RestoreError> {
    let undecodable = |(field, why): (String, String)| RestoreError::NotResumable {
        reason: format!(
            "its checkpoint of step {} cannot be decoded: `{field}` {why}",
            checkpoint.step
        ),
    };
    let messages = decode_field(&checkpoint.messages, "messages").map_err(undecodable)?;
    let Some(state) = checkpoint.state.as_object() else {
        return Err(undecodable((
            "state".into(),
            format!("is not an object but {}", kind(&checkpoint.state)),
        )));
    };
    Ok(Decoded {
        messages,
        calls: state_field(state, "calls").map_err(undecodable)?,
        facts: state_field(state, "facts").map_err(undecodable)?,
        tools_tried: state_field(state, "tools_tried").map_err(undecodable)?,
        provider_calls: state_field(state, "provider_calls").map_err(undecodable)?,
    })
}

/// Decodes the field `name` of a checkpoint's `state`, which must be there.
fn state_field<T: DeserializeOwned>(
    state: &serde_json::Map<String, Value>,
    name: &str,
) -> Result<T, (String, String)> {
    let path = format!("state.{name}");
    match state.get(name) {
        Some(value) => decode_field(value, &path),
        None => Err((path, "is missing".into())),
    }
}

/// Decodes `value` (the field `name`) as a `T`: the failing path inside it
/// and why, on error.
fn decode_field<T: DeserializeOwned>(value: &Value, name: &str) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." || path.is_empty() {
            name.to_owned()
        } else if path.starts_with('[') {
            format!("{name}{path}")
        } else {
            format!("{name}.{path}")
        };
        (field, format!("does not decode: {}", e.into_inner()))
    })
}

/// A value's JSON kind, for an error.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The tokens and cost of the model calls made after the checkpoint: failed
/// calls count too (what a cut stream consumed is charged), at the price of
/// the model that answered (a fallback may cost more than the primary), as
/// each call recorded it; the primary's price only for calls recorded
/// before calls carried their cost.
fn interrupted_usage(after_checkpoint: &[&Event], agent: &AgentBinding) -> (u64, Cost) {
    let calls = || {
        after_checkpoint.iter().filter_map(|e| match &e.data {
            EventData::ModelCallFinished(f) => Some(f),
            _ => None,
        })
    };
    let interrupted_tokens: (u64, u64) = calls().fold((0, 0), |(i, o), f| {
        (i + f.input_tokens(), o + f.output_tokens())
    });
    let interrupted_cost = calls().fold(Cost::default(), |sum, f| {
        let cost = match f.cost {
            Some(cost) => cost,
            None => agent
                .price
                .map(|p| p.cost(f.input_tokens(), f.output_tokens()))
                .unwrap_or_default(),
        };
        sum.saturating_add(cost)
    });
    (
        interrupted_tokens.0 + interrupted_tokens.1,
        interrupted_cost,
    )
}

/// Input tokens of the last answered model call: the floor of the next
/// prompt.
fn last_input_tokens(events: &[Event]) -> u64 {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            EventData::ModelCallFinished(f) if f.ok() => Some(f.input_tokens()),
            _ => None,
        })
        .unwrap_or(0)
}

/// The active time of the interrupted step: from `since` (its checkpoint)
/// to its last event, without the waits for a human's decision when the
/// clock pauses for them (`pause_clock`), or with them, up to `now` for
/// the wait that just ended, when it does not.
fn active_ms(events: &[&Event], since: Timestamp, pause_clock: bool, now: Timestamp) -> u64 {
    let Some(last) = events.iter().map(|e| e.at_ms).max() else {
        return 0;
    };
    let mut active = last.saturating_duration_since(since);
    // The waits: from a pause's `approval_requested` to the next event,
    // which is of the run continued.
    let mut waits = std::time::Duration::ZERO;
    let mut waiting_since = None;
    for e in events {
        if e.kind() == EventKind::ApprovalRequested {
            waiting_since.get_or_insert(e.at_ms);
        } else if let Some(from) = waiting_since.take() {
            waits += e.at_ms.saturating_duration_since(from);
        }
    }
    if pause_clock {
        active = active.saturating_sub(waits);
    } else if let Some(from) = waiting_since {
        active += now.saturating_duration_since(from);
    }
    super::guarded::millis(active)
}

/// The interrupted step (the one after `done_step`): its plan, if it was
/// persisted, replayed with its intents and their ledger records.
fn resumed_turn(
    intents: &[(u32, PlannedIntent)],
    ledger: &[LedgerRecord],
    done_step: u32,
    after_checkpoint: &[&Event],
) -> Option<ResumedTurn> {
    let mut planned: Vec<PlannedIntent> = intents
        .iter()
        .filter(|(step, _)| *step == done_step + 1)
        .map(|(_, intent)| intent.clone())
        .collect();
    planned.sort_by_key(|i| i.ordinal);
    if planned.is_empty() {
        // A step that sent earlier intents again (a resume's retry of what
        // was refused) persisted no new plan: its `plan_created` names
        // them, and they replay like any interrupted plan.
        planned = replanned(intents, done_step + 1, after_checkpoint);
    }
    if planned.is_empty() {
        return None;
    }
    let ledger: HashMap<&IntentId, &LedgerRecord> =
        ledger.iter().map(|r| (&r.intent_id, r)).collect();
    Some(ResumedTurn {
        response: ModelResponse {
            text: None,
            tool_calls: planned
                .iter()
                .map(|i| ToolCall {
                    id: i.call_id.clone(),
                    name: i.tool.clone(),
                    arguments: i.args.to_string(),
                })
                .collect(),
            finish: FinishReason::ToolCalls,
            stop_sequence: None,
            usage: Default::default(),
        },
        intent_ids: planned.iter().map(|i| Some(i.intent_id.clone())).collect(),
        prior: planned
            .iter()
            .filter_map(|i| {
                ledger
                    .get(&i.intent_id)
                    .map(|r| (i.intent_id.clone(), (*r).clone()))
            })
            .collect(),
    })
}

/// The earlier intents a `plan_created` of `step` planned again, in its
/// order, with the call ids it gave them.
fn replanned(
    intents: &[(u32, PlannedIntent)],
    step: u32,
    after_checkpoint: &[&Event],
) -> Vec<PlannedIntent> {
    let Some(plan) = after_checkpoint.iter().find_map(|e| match &e.data {
        EventData::PlanCreated(p) if e.step == step => Some(p),
        _ => None,
    }) else {
        return Vec::new();
    };
    plan.intents
        .iter()
        .enumerate()
        .filter_map(|(ordinal, summary)| {
            let (_, stored) = intents
                .iter()
                .find(|(_, i)| i.intent_id == summary.intent_id)?;
            Some(PlannedIntent {
                ordinal: u32::try_from(ordinal).unwrap_or(u32::MAX),
                call_id: summary.call_id.clone(),
                ..stored.clone()
            })
        })
        .collect()
}

/// The resume marker the report carries: which intents were reused, which
/// of them run again (under their original keys) and which do not.
fn marker(done_step: u32, resumed: Option<&ResumedTurn>) -> ResumeMarker {
    let (not_reexecuted, reexecuted): (Vec<IntentId>, Vec<IntentId>) = resumed
        .map(|t| {
            t.intent_ids.iter().flatten().cloned().partition(|id| {
                // Run again: a write in doubt (under its key), and a
                // call its interrupted process never sent.
                t.prior.get(id).is_some_and(|r| {
                    let again = (r.status == rein_core::LedgerStatus::Pending
                        && r.class == ToolClass::IdempotentWrite)
                        || guarded::is_unsent(r);
                    !again
                })
            })
        })
        .unwrap_or_default();
    let reexecuted_with_same_key: Vec<IntentId> = reexecuted
        .into_iter()
        .filter(|id| resumed.is_some_and(|t| t.prior.contains_key(id)))
        .collect();
    ResumeMarker {
        continued_from_step: done_step,
        steps_skipped: done_step,
        reused_intents: resumed
            .map(|t| t.intent_ids.iter().flatten().cloned().collect())
            .unwrap_or_default(),
        not_reexecuted,
        reexecuted_with_same_key,
        maybe_duplicated: false,
        note: format!(
            "continued after step {done_step}; completed steps were not run again; effects in doubt were repeated only with their original idempotency keys, irreversible ones never"
        ),
        contract_changed: None,
        retried: Vec::new(),
        retried_early: false,
    }
}

/// What the run already spent retrying model calls (it stays spent), and
/// the models that answered before the interruption (they stay on record).
fn model_use(events: &[Event]) -> (ModelRetryUse, Vec<String>) {
    let retried_so_far = ModelRetryUse::default();
    for e in events {
        if let EventData::RetryScheduled(r) = &e.data
            && matches!(r.target, RetryTarget::Provider(_))
        {
            retried_so_far
                .retries
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            retried_so_far.wait_ms.fetch_add(
                guarded::millis(r.delay),
                std::sync::atomic::Ordering::AcqRel,
            );
        }
        if let EventData::ModelCallFinished(f) = &e.data
            && let ModelCallResult::Failed(failed) = &f.result
        {
            retried_so_far
                .wasted_tokens
                .fetch_add(failed.tokens_spent, std::sync::atomic::Ordering::AcqRel);
        }
    }
    let mut answered_so_far: Vec<String> = Vec::new();
    for e in events {
        if let EventData::ModelCallFinished(f) = &e.data
            && f.ok()
        {
            let name = format!("{}/{}", f.provider, f.model);
            if !answered_so_far.contains(&name) {
                answered_so_far.push(name);
            }
        }
    }
    (retried_so_far, answered_so_far)
}

#[cfg(test)]
mod tests;

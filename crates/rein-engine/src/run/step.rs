//! The loop: run → step → handle.

use std::collections::{BTreeSet, HashMap};

use rein_core::deadline::{Budget, Dimension, Exhausted, Usage};
use rein_core::loop_guard::{Action, FailureVerdict, LoopGuard, StateDigest, Verdict};
use rein_core::{Category, Clock, EventKind, Failure, IntentId, LedgerRecord};
use rein_store::{PlannedIntent, StepCommit};
use serde_json::{Value, json};

use crate::provider::{FinishReason, Message, ModelResponse};

use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::Engine;
use super::error::EngineError;
use super::guarded::{CallResult, millis};
use super::start::RunOutput;
use super::validate::CUT_ARGUMENTS;
use super::{ArgValidator, End, report};

impl Engine {
    /// The loop: from `state` (fresh or restored from a checkpoint) to the
    /// run's end, its settlement and its final record (see
    /// [`Engine::conclude`] for when that cannot be recorded).
    pub(super) async fn drive(
        &self,
        ctx: &RunCtx<'_>,
        validator: &dyn ArgValidator,
        state: LoopState,
        mut resumed: Option<ResumedTurn>,
        settling: Option<End>,
    ) -> Result<RunOutput, EngineError> {
        let agent = ctx.agent;
        let run_id = ctx.run_id.clone();
        let LoopState {
            mut budget,
            full_deadline,
            started,
            elapsed_before_ms,
            mut guard,
            mut messages,
            mut calls,
            mut facts,
            mut tools_tried,
            mut step,
            resume,
        } = state;

        // The steps checkpointed so far: what an interrupted run has done.
        let mut completed_steps = step;
        let end = if let Some(end) = settling {
            end
        } else {
            loop {
                let now = self.clock.now();
                if ctx.is_interrupted() {
                    break End::Interrupted;
                }
                if ctx.is_cancelled() {
                    ctx.emitter.emit(
                        EventKind::RunCancelled,
                        &Correlation {
                            step,
                            ..Correlation::default()
                        },
                        json!({"reason": "cancelled by the caller", "at_step_boundary": true}),
                    );
                    break End::Cancelled("cancelled by the caller".into());
                }
                if let Verdict::Trip(trip) = guard.check_budget(&budget, now) {
                    let exhausted = match trip {
                        rein_core::loop_guard::Trip::Budget(e) => e,
                        _ => wall_clock_exhausted(),
                    };
                    ctx.emitter.emit(
                        EventKind::BudgetExhausted,
                        &Correlation {
                            step,
                            ..Correlation::default()
                        },
                        json!({"scope": "run", "exhausted": exhausted, "used": budget.used()}),
                    );
                    break End::Budget(exhausted);
                }
                step += 1;
                let _ = budget.charge(Usage::ONE_STEP, now);
                let c = Correlation {
                    step,
                    ..Correlation::default()
                };

                // A resumed turn replays its persisted plan instead of asking
                // the model again: the intents, their ids and keys are durable.
                let (response, prior, prior_ids, price) = match resumed.take() {
                    Some(turn) => (turn.response, turn.prior, turn.intent_ids, agent.price),
                    None => match self.model_turn(ctx, &messages, &mut budget, step).await {
                        Ok((response, price)) => (response, HashMap::new(), Vec::new(), price),
                        // A turn cut short by the hand-on is not a failure
                        // of the model: the step runs again on resume.
                        Err(_) if ctx.is_interrupted() => break End::Interrupted,
                        Err(end) => break end,
                    },
                };
                let cost = price
                    .map(|p| p.cost(response.usage.input, response.usage.output))
                    .unwrap_or_default();
                let usage = Usage {
                    steps: 0,
                    tokens: response.usage.total(),
                    cost,
                };
                let charged = budget.charge(usage, self.clock.now());
                messages.push(Message::Assistant {
                    content: response.text.clone(),
                    tool_calls: response.tool_calls.clone(),
                });
                if let Err(exhausted) = charged {
                    ctx.emitter.emit(
                        EventKind::BudgetExhausted,
                        &c,
                        json!({"scope": "model_turn", "exhausted": exhausted, "used": budget.used(),
                           "proposed_calls_not_run": response.tool_calls.len()}),
                    );
                    break End::Budget(exhausted);
                }
                if response.tool_calls.is_empty() {
                    if response.finish == FinishReason::Length {
                        break End::ModelFailed(
                            Category::Unknown,
                            "the final answer was cut off at the output-token limit".into(),
                        );
                    }
                    if response.finish == FinishReason::ContentFilter {
                        break End::ModelFailed(
                            Category::ContentBlocked,
                            "the final answer was stopped by a content filter".into(),
                        );
                    }
                    break End::Answer(response.text);
                }

                // Validate and plan: intent ids are assigned and persisted
                // before anything runs.
                // Replies are matched to calls by position, not by the model's
                // call id: a model may repeat an id, and a completed write must
                // never be reported to it as failed.
                let mut planned = Vec::new();
                let mut replies: Vec<Option<String>> = vec![None; response.tool_calls.len()];
                let mut observed: Vec<(String, Value)> = Vec::new();
                let mut rejected_failures: Vec<(String, String)> = Vec::new();
                for (position, call) in response.tool_calls.iter().enumerate() {
                    match self.validate_call(ctx, &guard, validator, call, step, position) {
                        Ok(mut p) => {
                            if let Some(Some(id)) = prior_ids.get(position) {
                                p.intent_id = id.clone();
                            }
                            observed.push((p.tool.clone(), p.args.clone()));
                            planned.push(p);
                        }
                        Err((clarification, args, reason)) => {
                            observed.push((call.name.clone(), args));
                            rejected_failures.push((call.name.clone(), reason));
                            replies[position] = Some(clarification);
                        }
                    }
                }
                // A cut turn is said so, call by call: salvaged (a read's
                // complete fields) or asked again (never a write from partial
                // arguments).
                let salvaged = planned.iter().filter(|p| p.salvaged).count();
                let asked_again: Vec<&str> = rejected_failures
                    .iter()
                    .filter(|(_, reason)| reason.starts_with(CUT_ARGUMENTS))
                    .map(|(tool, _)| tool.as_str())
                    .collect();
                if response.finish.is_truncated() || salvaged > 0 || !asked_again.is_empty() {
                    ctx.emitter.emit(
                        EventKind::ModelOutputTruncated,
                        &c,
                        json!({
                            "finish": response.finish,
                            "calls": response.tool_calls.len(),
                            "salvaged": planned.iter().filter(|p| p.salvaged).map(|p| &p.tool).collect::<Vec<_>>(),
                            "asked_again": asked_again,
                            "action": if asked_again.is_empty() { "salvaged" } else { "asked_again" },
                        }),
                    );
                }
                if !planned.is_empty() {
                    let intents: Vec<(u32, PlannedIntent)> = planned
                        .iter()
                        .enumerate()
                        .map(|(i, p)| {
                            (
                                step,
                                PlannedIntent {
                                    intent_id: p.intent_id.clone(),
                                    ordinal: u32::try_from(i).unwrap_or(u32::MAX),
                                    call_id: p.call_id.clone(),
                                    tool: p.tool.clone(),
                                    args: p.args.clone(),
                                },
                            )
                        })
                        .collect();
                    ctx.emitter.emit(
                        EventKind::PlanCreated,
                        &c,
                        json!({"intents": planned.iter().map(|p| json!({
                        "intent_id": p.intent_id, "tool": p.tool, "call_id": p.call_id,
                        "class": agent.tools.get(&p.tool).map(|t| t.class),
                        "salvaged": p.salvaged,
                    })).collect::<Vec<_>>(),
                    "rejected": rejected_failures.len()}),
                    );
                    let commit = StepCommit {
                        intents,
                        events: ctx.emitter.drain(),
                        ..StepCommit::default()
                    };
                    if let Err(e) = ctx.commit(commit).await {
                        break End::StoreFailed(format!("cannot persist the plan: {e}"));
                    }
                }

                // Execute: independent calls concurrently on a divided budget;
                // irreversible calls after the others succeeded.
                let any_rejected = !rejected_failures.is_empty();
                let results = self
                    .execute(ctx, &mut budget, planned, step, any_rejected, &prior)
                    .await;
                // Interrupted mid-step: nothing of this step is checkpointed
                // and nothing of its results is observed (the loop guard
                // would count the interrupt's own refusals as failures).
                // Its plan and ledger are durable, so a resume replays it
                // with the same intents and keys: what completed is not run
                // again, what was never sent is sent afresh.
                if ctx.is_interrupted() {
                    break End::Interrupted;
                }
                for result in &results {
                    let content = match &result.outcome {
                        Ok(value) => {
                            json!({"tool": result.planned.tool, "ok": true, "result": value})
                                .to_string()
                        }
                        Err(failure) => self.failure_reply(failure).to_owned(),
                    };
                    if let Some(slot) = replies.get_mut(result.planned.position) {
                        *slot = Some(content);
                    }
                }
                for (call, reply) in response.tool_calls.iter().zip(replies) {
                    let content = reply.unwrap_or_else(|| {
                        Failure::new(&call.name, Category::Unknown)
                            .model_message()
                            .to_owned()
                    });
                    messages.push(Message::Tool {
                        call_id: call.id.clone(),
                        content,
                    });
                }

                // Observe: failures for repeat detection and self-heal, every
                // proposal for repetition and progress.
                let mut trip = None;
                for (tool, reason) in &rejected_failures {
                    if let FailureVerdict::Trip(t) = guard.on_failure(tool, reason) {
                        trip.get_or_insert(t);
                    }
                }
                for result in &results {
                    tools_tried.insert(result.planned.tool.clone());
                    match &result.outcome {
                        Ok(value) => {
                            facts.insert(format!(
                                "{}|{}|{}",
                                result.planned.tool, result.planned.args, value
                            ));
                        }
                        Err(failure) => {
                            match guard.on_failure(&result.planned.tool, failure.human_message()) {
                                FailureVerdict::Trip(t) => {
                                    trip.get_or_insert(t);
                                }
                                FailureVerdict::ToolDisabled {
                                    tool,
                                    failures,
                                    allowance,
                                } => {
                                    ctx.emitter.emit(
                                EventKind::ToolDisabled,
                                &c,
                                json!({"tool": tool, "failures": failures, "allowance": allowance}),
                            );
                                }
                                _ => {}
                            }
                        }
                    }
                }
                calls.extend(results);
                // The state digest: facts obtained and the tools attempted (by
                // name: rephrasing a query of the same tool is not progress).
                let state = StateDigest::of(
                    facts.iter().map(String::as_str),
                    std::iter::empty::<&str>(),
                    tools_tried.iter().map(|t| Action::new(t, &Value::Null)),
                );
                // One observation per step: the no-progress window counts steps,
                // and a turn of several calls is one composite action (the same
                // set of calls on the same state is a repetition).
                let (turn_tool, turn_args) = match observed.as_slice() {
                    [(tool, args)] => (tool.clone(), args.clone()),
                    many => (
                        many.iter()
                            .map(|(t, _)| t.as_str())
                            .collect::<Vec<_>>()
                            .join("+"),
                        Value::Array(many.iter().map(|(t, a)| json!([t, a])).collect()),
                    ),
                };
                if let Verdict::Trip(t) = guard.observe(Action::new(&turn_tool, &turn_args), state)
                {
                    trip.get_or_insert(t);
                }
                let checkpoint = self.checkpoint(
                    ctx,
                    &budget,
                    &messages,
                    &calls,
                    &facts,
                    &tools_tried,
                    step,
                    elapsed_before_ms,
                    started,
                );
                if let Some(trip) = &trip {
                    ctx.emitter.emit(
                        EventKind::LoopDetected,
                        &c,
                        json!({"trip": trip, "message": trip.to_string()}),
                    );
                }
                crate::crash::point("during_checkpoint");
                crate::crash::panic_point("during_checkpoint", &agent.name);
                let commit = StepCommit {
                    checkpoint: Some(checkpoint),
                    events: ctx.emitter.drain(),
                    ..StepCommit::default()
                };
                if let Err(e) = ctx.commit(commit).await {
                    break End::StoreFailed(format!("cannot write the checkpoint: {e}"));
                }
                completed_steps = step;
                if let Some(trip) = trip {
                    break End::Loop(trip);
                }
            }
        };

        let now = self.clock.now();
        let elapsed_ms = elapsed_before_ms + millis(now.saturating_duration_since(started));
        let facts = rein_core::report::RunFacts {
            run_id: run_id.clone(),
            agent: agent.name.clone(),
            input: ctx.input.clone(),
            end: end.clone(),
            settled: rein_core::report::Settled::Kept,
            outcome: None,
            calls,
            consumed: budget.used(),
            elapsed_ms,
            steps: step,
            models: ctx
                .models
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            compensations: Vec::new(),
            resume,
            in_flight: Vec::new(),
            strategies_not_tried: report::strategies_not_tried(agent),
        };
        if matches!(end, End::Interrupted) {
            // Handed on unfinished: never settled (what it did so far is
            // the report, provisional).
            let so_far = rein_core::report::derive(&facts, &[]);
            return Ok(self.hand_on(ctx, so_far, step, completed_steps).await);
        }
        self.conclude(ctx, facts, full_deadline, step, started, elapsed_before_ms)
            .await
    }

    /// What the model is told about a failed call: its structured
    /// placeholder, never raw error text (invariant 10).
    pub(super) fn failure_reply<'f>(&self, failure: &'f Failure) -> &'f str {
        // Sabotage hook `raw_error_text`: the operator's text, which holds
        // the tool's own error message, goes to the model instead.
        #[cfg(feature = "sabotage")]
        if self.sabotage.raw_error_text {
            return failure.human_message();
        }
        failure.model_message()
    }
}

pub(super) struct LoopState {
    pub(super) budget: Budget,
    pub(super) full_deadline: rein_core::deadline::Deadline,
    pub(super) started: rein_core::Instant,
    pub(super) elapsed_before_ms: u64,
    pub(super) guard: LoopGuard,
    pub(super) messages: Vec<Message>,
    pub(super) calls: Vec<CallResult>,
    pub(super) facts: BTreeSet<String>,
    pub(super) tools_tried: BTreeSet<String>,
    pub(super) step: u32,
    pub(super) resume: Option<rein_core::outcome::ResumeMarker>,
}

/// The interrupted step of a resumed run: its persisted plan, replayed.
pub(super) struct ResumedTurn {
    pub(super) response: ModelResponse,
    /// The persisted intent id of each proposed call, by position.
    pub(super) intent_ids: Vec<Option<IntentId>>,
    /// The ledger records of the step's intents.
    pub(super) prior: HashMap<IntentId, LedgerRecord>,
}

pub(super) fn wall_clock_exhausted() -> Exhausted {
    Exhausted {
        dimension: Dimension::WallClock,
        needed: 0,
        remaining: 0,
    }
}

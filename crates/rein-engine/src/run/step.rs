//! The loop: run → step → handle.
//!
//! # Why this shape
//!
//! [`Engine::drive`] runs steps until one ends the run. [`Engine::step`]
//! is one step, in order: its boundary (interrupt, cancellation, budget),
//! the model turn, the plan, the calls and the observation. Each input
//! goes to its `handle_*`, which decides from the input and the loop state
//! alone and returns what follows: the records the store persists (a
//! [`StepCommit`] with the plan's intents, one with the checkpoint) or the
//! run's [`End`]. The step performs only the I/O the handlers ask for (the
//! model call, the guarded calls, the commits): the restate invoker's
//! shape, so that each handler is tested without a model or a tool.
//!
//! ```text
//!  boundary ─► model turn ─► plan ──────► calls ───► results ─► observation
//!  handle_     model_turn    handle_plan   execute    handle_    handle_
//!  boundary    handle_turn     │                      results    observation
//!    │           │             └ commit: intents                   │
//!    └ End       └ End           (before anything runs)            └ commit: checkpoint
//!                                                                    (a trip ends the run)
//! ```

use rein_core::Timestamp;
use std::collections::HashMap;

use rein_core::deadline::{Budget, Dimension, Exhausted, Grant, Usage};
use rein_core::event::{
    BudgetExhausted, BudgetScope, LoopDetected, ModelOutputTruncated, PlanCreated,
    PlannedIntentSummary, RunCancelled, ToolDisabled, TruncationAction,
};
use rein_core::loop_guard::{Action, FailureVerdict, LoopGuard, Trip, Verdict};
use rein_core::registry::Price;
use rein_core::{Category, Clock, Failure, Instant, IntentId, LedgerRecord};
use rein_store::{PlannedIntent, StepCommit};
use serde_json::{Value, json};

use crate::provider::{FinishReason, Message, ModelResponse};

use super::checkpoint::{self, Checkpointed};
use super::ctx::RunCtx;
use super::emitter::{Correlation, unix_ms};
use super::engine::Engine;
use super::error::EngineError;
use super::guarded::{CallResult, Planned, millis};
use super::progress::Progress;
use super::start::RunOutput;
use super::validate::CUT_ARGUMENTS;
use super::{ArgValidator, End, report};

/// Everything the loop carries from step to step.
pub(super) struct LoopState {
    /// The forward path's budget (the compensation reserve excluded).
    pub(super) budget: Budget,
    /// The whole run's deadline, compensation included.
    pub(super) full_deadline: rein_core::deadline::Deadline,
    /// When this process started driving the run.
    pub(super) started: Instant,
    /// Active time the run used before this process drove it (a resume).
    pub(super) elapsed_before_ms: u64,
    /// Repetition, no-progress and repeat-failure detection.
    pub(super) guard: LoopGuard,
    /// The transcript.
    pub(super) messages: Vec<Message>,
    /// Every call made so far, for the report.
    pub(super) calls: Vec<CallResult>,
    /// Facts obtained and tools attempted, with their state digest (the
    /// loop guard's progress inputs).
    pub(super) progress: Progress,
    /// How much of `messages` and `calls` the run's checkpoint holds: a
    /// step checkpoints what lies after it.
    pub(super) checkpointed: Checkpointed,
    /// The last step begun.
    pub(super) step: u32,
    /// How the run was resumed, when it was.
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

/// A model turn as a step handles it: answered now, or replayed from a
/// resumed run's persisted plan.
pub(super) struct Turn {
    /// What the model proposed.
    pub(super) response: ModelResponse,
    /// The persisted intent id of each proposed call, by position (a
    /// replayed turn; empty for a fresh one).
    pub(super) prior_ids: Vec<Option<IntentId>>,
    /// The ledger records of a replayed turn's intents.
    pub(super) prior: HashMap<IntentId, LedgerRecord>,
    /// The price of the model that answered, when known.
    pub(super) price: Option<Price>,
    /// What the answering call reserved: settled with the turn's usage
    /// (`None` for a replayed turn, which reserved nothing).
    pub(super) grant: Option<Grant>,
    /// The budget dimension that set the call's output ceiling, if one did:
    /// an answer cut off there ran out of that budget.
    pub(super) limited_by: Option<Dimension>,
}

impl Turn {
    /// A turn the model answered now.
    pub(super) fn answered(response: ModelResponse, price: Option<Price>) -> Turn {
        Turn {
            response,
            prior_ids: Vec::new(),
            prior: HashMap::new(),
            price,
            grant: None,
            limited_by: None,
        }
    }

    /// The turn, with what its call reserved.
    pub(super) fn with_reservation(
        mut self,
        reserved: super::model_chain::ceiling::Reservation,
    ) -> Turn {
        self.grant = Some(reserved.grant);
        self.limited_by = reserved.limited_by;
        self
    }

    /// A resumed run's interrupted turn, at the agent's `price`.
    pub(super) fn replayed(turn: ResumedTurn, price: Option<Price>) -> Turn {
        Turn {
            response: turn.response,
            prior_ids: turn.intent_ids,
            prior: turn.prior,
            price,
            grant: None,
            limited_by: None,
        }
    }
}

/// A turn's proposed calls, validated: what runs, and what the model is
/// told about the calls refused.
pub(super) struct Plan {
    /// The calls that run, with their intents.
    pub(super) planned: Vec<Planned>,
    /// The reply to each proposed call, by position: so far the
    /// clarifications of the refused ones.
    pub(super) replies: Vec<Option<String>>,
    /// Each proposal (tool, arguments), for the loop guard.
    pub(super) observed: Vec<(String, Value)>,
    /// The refused calls (tool, reason), for the loop guard.
    pub(super) rejected: Vec<(String, String)>,
    /// The intents to persist before anything runs, with the step's events
    /// so far; `None` when nothing was planned.
    pub(super) commit: Option<StepCommit>,
}

/// What a step's observation produced.
pub(super) struct Observation {
    /// The checkpoint with the step's events, to persist.
    pub(super) commit: StepCommit,
    /// The loop guard tripped: the run ends once the checkpoint is durable.
    pub(super) trip: Option<Trip>,
}

/// How a step ended.
pub(super) enum Stepped {
    /// Its checkpoint is durable; the loop guard may have tripped on it.
    Checkpointed {
        /// The trip that ends the run.
        trip: Option<Trip>,
    },
    /// The run ends here, its step not checkpointed.
    Ended(End),
    /// The step's plan is durable and some of its calls wait for a human's
    /// decision: the run pauses before any of them is sent.
    Paused(Vec<rein_store::ApprovalRequest>),
}

/// How a step ends when a commit of it did not land: handed on
/// unfinished when the store stayed away ([`RunCtx::store_away`]), or when
/// the process is stopping; failed only for a store that refused it for
/// good (a broken database, not a blink).
pub(super) fn store_end(ctx: &RunCtx<'_>, why: String) -> End {
    if ctx.store_away().is_some() || ctx.is_interrupted() {
        End::Interrupted
    } else {
        End::StoreFailed(why)
    }
}

impl Engine {
    /// The loop: from `state` (fresh or restored from a checkpoint) to the
    /// run's end, its settlement and its final record (see
    /// [`Engine::conclude`] for when that cannot be recorded).
    pub(super) async fn drive(
        &self,
        ctx: &RunCtx<'_>,
        validator: &dyn ArgValidator,
        mut state: LoopState,
        mut resumed: Option<ResumedTurn>,
        settling: Option<End>,
    ) -> Result<RunOutput, EngineError> {
        // The steps checkpointed so far: what an interrupted run has done.
        let mut completed_steps = state.step;
        let mut paused = None;
        let end = match settling {
            Some(end) => end,
            None => loop {
                match self.step(ctx, validator, &mut state, resumed.take()).await {
                    Stepped::Checkpointed { trip } => {
                        completed_steps = state.step;
                        if let Some(trip) = trip {
                            break End::Loop(trip);
                        }
                    }
                    Stepped::Ended(end) => break end,
                    Stepped::Paused(requests) => {
                        paused = Some(requests);
                        break End::Interrupted;
                    }
                }
            },
        };

        let agent = ctx.agent;
        let now = self.clock.now();
        let elapsed_ms =
            state.elapsed_before_ms + millis(now.saturating_duration_since(state.started));
        let step = state.step;
        let facts = rein_core::report::RunFacts {
            run_id: ctx.run_id.clone(),
            agent: agent.name.clone(),
            input: ctx.input.clone(),
            end: end.clone(),
            settled: rein_core::report::Settled::Kept,
            outcome: None,
            calls: state.calls,
            consumed: state.budget.used(),
            elapsed_ms,
            steps: step,
            models: ctx
                .models
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .clone(),
            compensations: Vec::new(),
            resume: state.resume,
            in_flight: Vec::new(),
            strategies_not_tried: report::strategies_not_tried(agent),
            notes: Vec::new(),
            hint: ctx.failure_hint(&end),
            owners: ctx.agent.owners(),
        };
        if matches!(end, End::Interrupted) {
            // Handed on unfinished, or paused for a human: never settled
            // (what it did so far is the report, provisional).
            let so_far = rein_core::report::derive(&facts, &[]);
            if let Some(requests) = paused {
                return Ok(self.await_approval(ctx, so_far, step, requests).await);
            }
            return Ok(self.hand_on(ctx, so_far, step, completed_steps).await);
        }
        self.conclude(
            ctx,
            facts,
            state.full_deadline,
            step,
            state.started,
            state.elapsed_before_ms,
        )
        .await
    }

    /// One step: its boundary, the model turn (or the replayed plan of a
    /// resumed run), the plan persisted, the calls, their results and the
    /// observation, checkpointed.
    pub(super) async fn step(
        &self,
        ctx: &RunCtx<'_>,
        validator: &dyn ArgValidator,
        state: &mut LoopState,
        resumed: Option<ResumedTurn>,
    ) -> Stepped {
        if let Some(end) = handle_boundary(ctx, state, self.clock.now()) {
            return Stepped::Ended(end);
        }
        // A resumed turn replays its persisted plan instead of asking the
        // model again: the intents, their ids and keys are durable.
        let mut last = None;
        let mut turn = match resumed {
            Some(turn) => Turn::replayed(turn, ctx.agent.price),
            None => {
                // With the budget note, or the last turn without tools
                // (`final_turn`).
                let asked = self.next_turn(ctx, state).await;
                match asked {
                    Ok(asked) => {
                        last = asked.last;
                        let answer = asked.answer;
                        Turn::answered(answer.response, answer.price)
                            .with_reservation(answer.reservation)
                    }
                    // A turn cut short by the hand-on is not a failure of
                    // the model: the step runs again on resume.
                    Err(_) if ctx.is_interrupted() => return Stepped::Ended(End::Interrupted),
                    Err(end) => return Stepped::Ended(end),
                }
            }
        };
        let handled = handle_turn(ctx, state, &mut turn, self.clock.now());
        if let Some(short) = last {
            // The last turn ends the run, with its answer: nothing it
            // proposed runs.
            return Stepped::Ended(super::final_turn::after_last_turn(short, &turn, handled));
        }
        if let Some(end) = handled {
            return Stepped::Ended(end);
        }
        let mut plan = self.handle_plan(ctx, validator, state, &turn);
        if let Some(commit) = plan.commit.take()
            && let Err(e) = self.commit(ctx, commit).await
        {
            return Stepped::Ended(store_end(ctx, format!("cannot persist the plan: {e}")));
        }
        // Calls a human must approve: decided ones are applied, and the
        // run pauses while one still waits (its plan is durable above).
        let replayed = !turn.prior_ids.is_empty();
        let withheld = match self.approval_gate(ctx, &mut plan, replayed).await {
            Ok(super::approval::Approvals::Open(withheld)) => withheld,
            Ok(super::approval::Approvals::Pause(requests)) => return Stepped::Paused(requests),
            Err(end) => return Stepped::Ended(end),
        };
        // Execute: independent calls concurrently on a divided budget;
        // irreversible calls after the others succeeded.
        // A call refused or withheld by a human: the turn did not go as
        // planned, so its irreversible calls do not run after the rest.
        let any_rejected = !plan.rejected.is_empty() || !withheld.is_empty();
        let planned = std::mem::take(&mut plan.planned);
        let results = self
            .execute(
                ctx,
                &mut state.budget,
                planned,
                state.step,
                any_rejected,
                &turn.prior,
            )
            .await;
        // Interrupted mid-step: nothing of this step is checkpointed and
        // nothing of its results is observed (the loop guard would count
        // the interrupt's own refusals as failures). Its plan and ledger
        // are durable, so a resume replays it with the same intents and
        // keys: what completed is not run again, what was never sent is
        // sent afresh.
        if ctx.is_interrupted() {
            return Stepped::Ended(End::Interrupted);
        }
        self.handle_results(
            state,
            &turn.response,
            std::mem::take(&mut plan.replies),
            &results,
        );
        // The calls a human's decision withheld: their replies are given
        // above; the report and the loop guard see them refused.
        let mut results = results;
        results.extend(withheld);
        let observation = handle_observation(
            ctx,
            state,
            &plan,
            results,
            self.clock.now(),
            unix_ms(self.clock.system_now()),
        );
        crate::crash::point("during_checkpoint");
        crate::crash::panic_point("during_checkpoint", &ctx.agent.name);
        if let Err(e) = self.commit(ctx, observation.commit).await {
            return Stepped::Ended(store_end(ctx, format!("cannot write the checkpoint: {e}")));
        }
        state.checkpointed = Checkpointed::all_of(state);
        Stepped::Checkpointed {
            trip: observation.trip,
        }
    }

    /// Validates and plans a turn's proposed calls: intent ids are
    /// assigned (a replayed turn keeps its persisted ones) and returned to
    /// be persisted before anything runs.
    ///
    /// Replies are matched to calls by position, not by the model's call
    /// id: a model may repeat an id, and a completed write must never be
    /// reported to it as failed.
    pub(super) fn handle_plan(
        &self,
        ctx: &RunCtx<'_>,
        validator: &dyn ArgValidator,
        state: &LoopState,
        turn: &Turn,
    ) -> Plan {
        let step = state.step;
        if let Some(refused) = self.refuse_fan_out(ctx, step, turn) {
            return refused;
        }
        let response = &turn.response;
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        let mut planned = Vec::new();
        let mut replies: Vec<Option<String>> = vec![None; response.tool_calls.len()];
        let mut observed: Vec<(String, Value)> = Vec::new();
        let mut rejected_failures: Vec<(String, String)> = Vec::new();
        for (position, call) in response.tool_calls.iter().enumerate() {
            match self.validate_call(ctx, &state.guard, validator, call, step, position) {
                Ok(mut p) => {
                    if let Some(Some(id)) = turn.prior_ids.get(position) {
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
        // A cut turn is said so, call by call: salvaged (a read's complete
        // fields) or asked again (never a write from partial arguments).
        let salvaged = planned.iter().filter(|p| p.salvaged).count();
        let asked_again: Vec<&str> = rejected_failures
            .iter()
            .filter(|(_, reason)| reason.starts_with(CUT_ARGUMENTS))
            .map(|(tool, _)| tool.as_str())
            .collect();
        if response.finish.is_truncated() || salvaged > 0 || !asked_again.is_empty() {
            ctx.emitter.emit(
                &c,
                ModelOutputTruncated {
                    finish: response.finish,
                    calls: response.tool_calls.len(),
                    salvaged: planned
                        .iter()
                        .filter(|p| p.salvaged)
                        .map(|p| p.tool.clone())
                        .collect(),
                    action: if asked_again.is_empty() {
                        TruncationAction::Salvaged
                    } else {
                        TruncationAction::AskedAgain
                    },
                    asked_again: asked_again.iter().map(|t| (*t).to_owned()).collect(),
                },
            );
        }
        let commit = (!planned.is_empty()).then(|| {
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
                &c,
                PlanCreated {
                    intents: planned
                        .iter()
                        .map(|p| PlannedIntentSummary {
                            intent_id: p.intent_id.clone(),
                            tool: p.tool.clone(),
                            call_id: p.call_id.clone(),
                            class: ctx.agent.tools.get(&p.tool).map(|t| t.class),
                            salvaged: p.salvaged,
                        })
                        .collect(),
                    rejected: rejected_failures.len(),
                },
            );
            StepCommit {
                intents,
                events: ctx.emitter.drain(),
                ..StepCommit::default()
            }
        });
        Plan {
            planned,
            replies,
            observed,
            rejected: rejected_failures,
            commit,
        }
    }

    /// Gives the model its replies, by position: a call's fact or
    /// structured placeholder, a refused call's clarification, and for a
    /// call with neither a placeholder of its own.
    pub(super) fn handle_results(
        &self,
        state: &mut LoopState,
        response: &ModelResponse,
        mut replies: Vec<Option<String>>,
        results: &[CallResult],
    ) {
        for result in results {
            let content = match &result.outcome {
                Ok(value) => {
                    json!({"tool": result.planned.tool, "ok": true, "result": value}).to_string()
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
            state.messages.push(Message::Tool {
                call_id: call.id.clone(),
                content,
            });
        }
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

/// The start of a step at `now`: the run ends here when it is interrupted,
/// cancelled or out of budget; otherwise the next step begins and is
/// charged.
pub(super) fn handle_boundary(
    ctx: &RunCtx<'_>,
    state: &mut LoopState,
    now: Instant,
) -> Option<End> {
    let c = Correlation {
        step: state.step,
        ..Correlation::default()
    };
    if ctx.is_interrupted() {
        return Some(End::Interrupted);
    }
    if ctx.is_cancelled() {
        ctx.emitter.emit(
            &c,
            RunCancelled {
                reason: "cancelled by the caller".into(),
                at_step_boundary: Some(true),
                aborted: None,
                provider: None,
            },
        );
        return Some(End::Cancelled("cancelled by the caller".into()));
    }
    if let Verdict::Trip(trip) = state.guard.check_budget(&state.budget, now) {
        let exhausted = match trip {
            Trip::Budget(e) => e,
            _ => wall_clock_exhausted(),
        };
        ctx.emitter.emit(
            &c,
            BudgetExhausted {
                used: Some(state.budget.used()),
                ..BudgetExhausted::new(BudgetScope::Run, exhausted)
            },
        );
        return Some(End::Budget(exhausted));
    }
    state.step += 1;
    let _ = state.budget.charge(Usage::ONE_STEP, now);
    None
}

/// A model turn, charged at `now` (its call's reservation settled with
/// its usage) and added to the transcript: the run ends when it broke the
/// budget, or when it proposes no call (the answer, or a final answer cut
/// off or filtered).
pub(super) fn handle_turn(
    ctx: &RunCtx<'_>,
    state: &mut LoopState,
    turn: &mut Turn,
    now: Instant,
) -> Option<End> {
    let response = &turn.response;
    let cost = turn
        .price
        .map(|p| p.cost(response.usage.input, response.usage.output))
        .unwrap_or_default();
    let usage = Usage {
        steps: 0,
        tokens: response.usage.total(),
        cost,
    };
    let charged = match turn.grant.take() {
        Some(grant) => state.budget.settle(grant, usage, now),
        None => state.budget.charge(usage, now),
    };
    state.messages.push(Message::Assistant {
        content: response.text.clone(),
        tool_calls: response.tool_calls.clone(),
    });
    if let Err(exhausted) = charged {
        ctx.emitter.emit(
            &Correlation {
                step: state.step,
                ..Correlation::default()
            },
            BudgetExhausted {
                used: Some(state.budget.used()),
                proposed_calls_not_run: Some(response.tool_calls.len()),
                ..BudgetExhausted::new(BudgetScope::ModelTurn, exhausted)
            },
        );
        return Some(End::Budget(exhausted));
    }
    if !response.tool_calls.is_empty() {
        return None;
    }
    if response.finish == FinishReason::Length
        && let Some(dimension) = turn.limited_by
    {
        // Cut off at the ceiling the budget left, not at the model's cap:
        // the budget ran out mid-answer.
        let left = state.budget.remaining(now);
        let remaining = match dimension {
            Dimension::Cost => left.cost.map_or(0, rein_core::deadline::Cost::micros),
            _ => left.tokens.unwrap_or(0),
        };
        let exhausted = Exhausted {
            dimension,
            needed: remaining.saturating_add(1),
            remaining,
        };
        ctx.emitter.emit(
            &Correlation {
                step: state.step,
                ..Correlation::default()
            },
            BudgetExhausted {
                used: Some(state.budget.used()),
                reason: Some(format!(
                    "the answer was cut off at the output ceiling the {dimension} budget left"
                )),
                ..BudgetExhausted::new(BudgetScope::ModelTurn, exhausted)
            },
        );
        return Some(End::Budget(exhausted));
    }
    Some(match response.finish {
        FinishReason::Length => End::ModelFailed(
            Category::Unknown,
            "the final answer was cut off at the output-token limit".into(),
        ),
        FinishReason::ContentFilter => End::ModelFailed(
            Category::ContentBlocked,
            "the final answer was stopped by a content filter".into(),
        ),
        _ => End::Answer(response.text.clone()),
    })
}

/// Observes a step's refusals and results: failures for repeat detection
/// and self-heal, every proposal for repetition and progress. The calls
/// join the run's, and what the step added is checkpointed (at `now`,
/// `at_ms` on the wall clock) with its events: none of this handler's work
/// grows with the run's length.
pub(super) fn handle_observation(
    ctx: &RunCtx<'_>,
    state: &mut LoopState,
    plan: &Plan,
    results: Vec<CallResult>,
    now: Instant,
    at_ms: Timestamp,
) -> Observation {
    let c = Correlation {
        step: state.step,
        ..Correlation::default()
    };
    let mut trip = None;
    // What this step recorded first, for its checkpoint delta.
    let (mut learned, mut tried) = (Vec::new(), Vec::new());
    for (tool, reason) in &plan.rejected {
        if let FailureVerdict::Trip(t) = state.guard.on_failure(tool, reason) {
            trip.get_or_insert(t);
        }
    }
    for result in &results {
        if state.progress.try_tool(&result.planned.tool) {
            tried.push(result.planned.tool.clone());
        }
        match &result.outcome {
            Ok(value) => {
                let fact = format!("{}|{}|{}", result.planned.tool, result.planned.args, value);
                if state.progress.learn(&fact) {
                    learned.push(fact);
                }
            }
            Err(failure) => {
                match state
                    .guard
                    .on_failure(&result.planned.tool, failure.human_message())
                {
                    FailureVerdict::Trip(t) => {
                        trip.get_or_insert(t);
                    }
                    FailureVerdict::ToolDisabled {
                        tool,
                        failures,
                        allowance,
                    } => {
                        ctx.emitter.emit(
                            &c,
                            ToolDisabled {
                                tool,
                                failures,
                                allowance,
                            },
                        );
                    }
                    _ => {}
                }
            }
        }
    }
    state.calls.extend(results);
    // The state digest over facts obtained and tools attempted, kept as
    // they grow: only this step's new ones were hashed.
    let digest = state.progress.digest();
    // One observation per step: the no-progress window counts steps, and
    // a turn of several calls is one composite action (the same set of
    // calls on the same state is a repetition).
    let (turn_tool, turn_args) = match plan.observed.as_slice() {
        [(tool, args)] => (tool.clone(), args.clone()),
        many => (
            many.iter()
                .map(|(t, _)| t.as_str())
                .collect::<Vec<_>>()
                .join("+"),
            Value::Array(many.iter().map(|(t, a)| json!([t, a])).collect()),
        ),
    };
    if let Verdict::Trip(t) = state
        .guard
        .observe(Action::new(&turn_tool, &turn_args), digest)
    {
        trip.get_or_insert(t);
    }
    let provider_calls = ctx
        .provider_calls
        .load(std::sync::atomic::Ordering::Acquire);
    let delta = checkpoint::delta(
        &ctx.run_id,
        state,
        &learned,
        &tried,
        provider_calls,
        now,
        at_ms,
    );
    if let Some(trip) = &trip {
        ctx.emitter.emit(
            &c,
            LoopDetected {
                trip: trip.clone(),
                message: trip.to_string(),
            },
        );
    }
    Observation {
        commit: StepCommit {
            checkpoint_delta: Some(delta),
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        },
        trip,
    }
}

/// The exhaustion a loop guard's wall-clock trip stands for.
pub(super) fn wall_clock_exhausted() -> Exhausted {
    Exhausted {
        dimension: Dimension::WallClock,
        needed: 0,
        remaining: 0,
    }
}

#[cfg(test)]
mod tests;

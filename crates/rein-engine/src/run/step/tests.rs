//! The step handlers, each driven with a fixture context: the records,
//! events and ends they return.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::Timestamp;
use rein_core::deadline::BudgetLimits;
use rein_core::{Event, EventData, EventKind, ToolClass};

use super::super::fixture::{Bench, READ, WRITE, agent};
use super::*;
use crate::provider::{TokenUsage, ToolCall};
use crate::run::AcceptAll;

fn state(agent: &super::super::AgentBinding) -> LoopState {
    LoopState {
        budget: Budget::start(agent.budget, Instant::ORIGIN),
        full_deadline: Budget::start(agent.budget, Instant::ORIGIN).deadline(),
        started: Instant::ORIGIN,
        elapsed_before_ms: 0,
        guard: LoopGuard::new(agent.loop_guard.clone()).unwrap(),
        messages: vec![Message::user("Move order A-1.")],
        calls: Vec::new(),
        progress: Progress::new(),
        checkpointed: Checkpointed::default(),
        step: 0,
        resume: None,
    }
}

fn tool_call(id: &str, name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: id.into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn response(calls: Vec<ToolCall>, finish: FinishReason) -> ModelResponse {
    ModelResponse {
        text: Some("done".into()),
        tool_calls: calls,
        finish,
        stop_sequence: None,
        usage: TokenUsage {
            input: 100,
            output: 20,
        },
    }
}

fn kinds(events: &[Event]) -> Vec<EventKind> {
    events.iter().map(Event::kind).collect()
}

fn result(planned: &Planned, outcome: Result<Value, Failure>) -> CallResult {
    CallResult {
        planned: planned.clone(),
        class: ToolClass::Read,
        outcome,
        ledger: None,
        attempts: 1,
    }
}

#[test]
fn handle_boundary_begins_and_charges_the_next_step_without_events() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    assert!(handle_boundary(&ctx, &mut state, Instant::ORIGIN).is_none());
    assert_eq!(state.step, 1);
    assert_eq!(state.budget.used().steps, 1);
    assert!(ctx.emitter.drain().is_empty());
}

#[test]
fn handle_boundary_when_cancelled_ends_cancelled_and_says_so() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    ctx.cancel.cancel();
    let mut state = state(&agent);
    let end = handle_boundary(&ctx, &mut state, Instant::ORIGIN);
    assert!(matches!(end, Some(End::Cancelled(_))), "{end:?}");
    assert_eq!(state.step, 0, "no step begun");
    assert_eq!(kinds(&ctx.emitter.drain()), vec![EventKind::RunCancelled]);
}

#[test]
fn handle_boundary_when_interrupted_ends_interrupted_without_events() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    ctx.interrupt.cancel();
    let mut state = state(&agent);
    let end = handle_boundary(&ctx, &mut state, Instant::ORIGIN);
    assert!(matches!(end, Some(End::Interrupted)), "{end:?}");
    assert!(ctx.emitter.drain().is_empty());
}

#[test]
fn handle_boundary_with_its_steps_spent_ends_budget_exhausted() {
    let (bench, mut agent) = (Bench::new(), agent());
    agent.budget = BudgetLimits::new(std::time::Duration::from_secs(20))
        .unwrap()
        .with_steps(1)
        .unwrap();
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    assert!(handle_boundary(&ctx, &mut state, Instant::ORIGIN).is_none());
    let end = handle_boundary(&ctx, &mut state, Instant::ORIGIN);
    assert!(matches!(end, Some(End::Budget(_))), "{end:?}");
    let events = ctx.emitter.drain();
    assert_eq!(kinds(&events), vec![EventKind::BudgetExhausted]);
    let EventData::BudgetExhausted(b) = &events[0].data else {
        unreachable!("the kinds were checked above")
    };
    assert_eq!(b.scope, BudgetScope::Run);
    assert_eq!(events[0].step, 1);
}

#[test]
fn handle_turn_with_calls_charges_its_tokens_and_adds_it_to_the_transcript() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    let mut turn = Turn::answered(
        response(vec![tool_call("c1", READ, "{}")], FinishReason::ToolCalls),
        None,
    );
    assert!(handle_turn(&ctx, &mut state, &mut turn, Instant::ORIGIN).is_none());
    assert_eq!(state.budget.used().tokens, 120);
    assert!(matches!(
        state.messages.last(),
        Some(Message::Assistant { tool_calls, .. }) if tool_calls.len() == 1
    ));
}

#[test]
fn handle_turn_without_calls_ends_with_the_answer_or_says_why_not() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let end_of = |finish| {
        let mut state = state(&agent);
        let mut turn = Turn::answered(response(vec![], finish), None);
        handle_turn(&ctx, &mut state, &mut turn, Instant::ORIGIN)
    };
    assert!(matches!(end_of(FinishReason::Stop), Some(End::Answer(Some(t))) if t == "done"));
    assert!(matches!(
        end_of(FinishReason::Length),
        Some(End::ModelFailed(Category::Unknown, _))
    ));
    assert!(matches!(
        end_of(FinishReason::ContentFilter),
        Some(End::ModelFailed(Category::ContentBlocked, _))
    ));
}

#[test]
fn an_answer_cut_at_the_ceiling_the_budget_set_ends_budget_exhausted() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut cut = state(&agent);
    let mut turn = Turn::answered(response(vec![], FinishReason::Length), None);
    turn.limited_by = Some(Dimension::Cost);
    let end = handle_turn(&ctx, &mut cut, &mut turn, Instant::ORIGIN);
    assert!(
        matches!(end, Some(End::Budget(e)) if e.dimension == Dimension::Cost),
        "{end:?}"
    );
    // Cut at the model's own cap it is the model's failure, as before.
    let mut capped = state(&agent);
    let mut turn = Turn::answered(response(vec![], FinishReason::Length), None);
    assert!(matches!(
        handle_turn(&ctx, &mut capped, &mut turn, Instant::ORIGIN),
        Some(End::ModelFailed(Category::Unknown, _))
    ));
}

#[test]
fn handle_turn_over_the_token_budget_ends_before_its_calls_run() {
    let (bench, mut agent) = (Bench::new(), agent());
    agent.budget = agent.budget.with_tokens(50).unwrap();
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    let mut turn = Turn::answered(
        response(vec![tool_call("c1", READ, "{}")], FinishReason::ToolCalls),
        None,
    );
    let end = handle_turn(&ctx, &mut state, &mut turn, Instant::ORIGIN);
    assert!(matches!(end, Some(End::Budget(_))), "{end:?}");
    let events = ctx.emitter.drain();
    assert_eq!(kinds(&events), vec![EventKind::BudgetExhausted]);
    let EventData::BudgetExhausted(b) = &events[0].data else {
        unreachable!("the kinds were checked above")
    };
    assert_eq!(b.scope, BudgetScope::ModelTurn);
    assert_eq!(b.proposed_calls_not_run, Some(1));
}

#[test]
fn handle_plan_assigns_intents_and_returns_them_to_persist_before_anything_runs() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    state.step = 3;
    let turn = Turn::answered(
        response(
            vec![
                tool_call("c1", READ, r#"{"order_id": "A-1"}"#),
                tool_call("c2", "launch_rocket", "{}"),
            ],
            FinishReason::ToolCalls,
        ),
        None,
    );
    let plan = bench.engine.handle_plan(&ctx, &AcceptAll, &state, &turn);
    assert_eq!(plan.planned.len(), 1);
    assert_eq!(plan.planned[0].tool, READ);
    assert!(
        plan.replies[0].is_none(),
        "the planned call's reply comes later"
    );
    let clarification = plan.replies[1].as_deref().unwrap();
    assert!(clarification.contains("available tools"), "{clarification}");
    assert_eq!(plan.rejected.len(), 1);
    assert_eq!(plan.observed.len(), 2, "every proposal is observed");
    let commit = plan.commit.expect("the plan is persisted");
    assert_eq!(commit.intents.len(), 1);
    let (step, intent) = &commit.intents[0];
    assert_eq!((*step, &intent.intent_id), (3, &plan.planned[0].intent_id));
    assert_eq!(
        kinds(&commit.events),
        vec![EventKind::CallRejected, EventKind::PlanCreated]
    );
    assert!(ctx.emitter.drain().is_empty(), "all in the commit");
}

#[test]
fn handle_plan_of_a_replayed_turn_keeps_its_persisted_intent_ids() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let state = state(&agent);
    let persisted = IntentId::new("i-persisted").unwrap();
    let turn = Turn::replayed(
        ResumedTurn {
            response: response(
                vec![tool_call("c1", WRITE, r#"{"order_id": "A-1"}"#)],
                FinishReason::ToolCalls,
            ),
            intent_ids: vec![Some(persisted.clone())],
            prior: HashMap::new(),
        },
        None,
    );
    let plan = bench.engine.handle_plan(&ctx, &AcceptAll, &state, &turn);
    assert_eq!(plan.planned[0].intent_id, persisted);
    assert_eq!(plan.commit.unwrap().intents[0].1.intent_id, persisted);
}

#[test]
fn handle_plan_of_refusals_only_persists_nothing() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let state = state(&agent);
    let turn = Turn::answered(
        response(
            vec![tool_call("c1", READ, "{not json")],
            FinishReason::ToolCalls,
        ),
        None,
    );
    let plan = bench.engine.handle_plan(&ctx, &AcceptAll, &state, &turn);
    assert!(plan.planned.is_empty() && plan.commit.is_none());
    // The refusal waits in the emitter for the checkpoint's commit.
    assert_eq!(kinds(&ctx.emitter.drain()), vec![EventKind::CallRejected]);
}

#[test]
fn handle_results_replies_by_position_with_placeholders_never_raw_errors() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    // The model repeated a call id: replies follow positions.
    let turn = Turn::answered(
        response(
            vec![
                tool_call("dup", READ, r#"{"order_id": "A-1"}"#),
                tool_call("dup", READ, r#"{"order_id": "A-2"}"#),
                tool_call("c3", "launch_rocket", "{}"),
            ],
            FinishReason::ToolCalls,
        ),
        None,
    );
    let mut plan = bench.engine.handle_plan(&ctx, &AcceptAll, &state, &turn);
    let raw = "upstream said: stack trace at db.rs:12";
    let failure = Failure::new(READ, Category::Transient).with_human_message(raw);
    let results = vec![
        result(&plan.planned[1], Err(failure.clone())),
        result(&plan.planned[0], Ok(json!({"status": "open"}))),
    ];
    let before = state.messages.len();
    bench.engine.handle_results(
        &mut state,
        &turn.response,
        std::mem::take(&mut plan.replies),
        &results,
    );
    let replies: Vec<&str> = state.messages[before..]
        .iter()
        .map(|m| match m {
            Message::Tool { content, .. } => content.as_str(),
            other => panic!("not a tool reply: {other:?}"),
        })
        .collect();
    assert_eq!(replies.len(), 3);
    assert!(replies[0].contains(r#""ok":true"#), "{}", replies[0]);
    assert_eq!(replies[1], failure.model_message());
    assert!(!replies[1].contains(raw));
    assert!(replies[2].contains("available tools"), "{}", replies[2]);
}

#[test]
fn handle_observation_records_facts_and_checkpoints_the_step() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    state.step = 2;
    let turn = Turn::answered(
        response(
            vec![tool_call("c1", READ, r#"{"order_id": "A-1"}"#)],
            FinishReason::ToolCalls,
        ),
        None,
    );
    let plan = bench.engine.handle_plan(&ctx, &AcceptAll, &state, &turn);
    let results = vec![result(&plan.planned[0], Ok(json!({"status": "open"})))];
    let seen = handle_observation(
        &ctx,
        &mut state,
        &plan,
        results,
        Instant::ORIGIN,
        Timestamp::from_millis(7),
    );
    assert!(seen.trip.is_none());
    assert_eq!(state.calls.len(), 1);
    assert!(state.progress.tools_tried().contains(READ));
    assert_eq!(state.progress.facts().len(), 1);
    let checkpoint = seen
        .commit
        .checkpoint_delta
        .expect("the step is checkpointed");
    assert_eq!(
        (checkpoint.step, checkpoint.at_ms),
        (2, Timestamp::from_millis(7))
    );
    assert_eq!(
        checkpoint.completed_intents,
        vec![plan.planned[0].intent_id.clone()]
    );
    assert_eq!(checkpoint.appended["calls"].len(), 1);
    assert_eq!(
        checkpoint.messages.len(),
        state.messages.len(),
        "nothing was checkpointed before: the whole transcript"
    );
    assert_eq!(checkpoint.appended["facts"].len(), 1);
    assert_eq!(checkpoint.appended["tools_tried"], vec![json!(READ)]);
    assert_eq!(checkpoint.state["provider_calls"], json!(0));
}

/// A step's checkpoint holds what the step added, not what the run holds:
/// its size does not grow with the run.
#[test]
fn handle_observation_after_a_checkpoint_writes_only_what_the_step_added() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    let step = |state: &mut LoopState, order: &str| {
        state.step += 1;
        let args = format!(r#"{{"order_id": "{order}"}}"#);
        let mut turn = Turn::answered(
            response(vec![tool_call("c", READ, &args)], FinishReason::ToolCalls),
            None,
        );
        assert!(handle_turn(&ctx, state, &mut turn, Instant::ORIGIN).is_none());
        let plan = bench.engine.handle_plan(&ctx, &AcceptAll, state, &turn);
        let results = vec![result(&plan.planned[0], Ok(json!({"status": "open"})))];
        bench
            .engine
            .handle_results(state, &turn.response, plan.replies.clone(), &results);
        let seen = handle_observation(
            &ctx,
            state,
            &plan,
            results,
            Instant::ORIGIN,
            Timestamp::from_millis(0),
        );
        // As `Engine::step` does once the commit is durable.
        state.checkpointed = Checkpointed::all_of(state);
        seen.commit.checkpoint_delta.expect("checkpointed")
    };
    let first = step(&mut state, "A-1");
    assert_eq!(
        first.messages.len(),
        3,
        "the user message, the turn, the reply"
    );
    for n in 2..=5 {
        let later = step(&mut state, &format!("A-{n}"));
        assert_eq!(later.step, n);
        assert_eq!(later.messages.len(), 2, "the turn and its reply only");
        assert_eq!(later.appended["calls"].len(), 1, "this step's call only");
        assert_eq!(later.appended["facts"].len(), 1, "its new fact only");
        assert!(
            later.appended["tools_tried"].is_empty(),
            "the tool was tried before"
        );
    }
    assert_eq!(state.calls.len(), 5);
    assert_eq!(state.progress.facts().len(), 5);
}

#[test]
fn handle_observation_trips_on_a_repeated_failure_and_says_so_in_the_checkpoint_commit() {
    let (bench, agent) = (Bench::new(), agent());
    let ctx = bench.ctx(&agent, &AcceptAll);
    let mut state = state(&agent);
    let threshold = agent.loop_guard.repeat_failure_threshold;
    let mut tripped_at = None;
    for attempt in 1..=threshold + 1 {
        state.step = attempt;
        let turn = Turn::answered(
            response(
                vec![tool_call("c", "launch_rocket", "{}")],
                FinishReason::ToolCalls,
            ),
            None,
        );
        let plan = bench.engine.handle_plan(&ctx, &AcceptAll, &state, &turn);
        let seen = handle_observation(
            &ctx,
            &mut state,
            &plan,
            Vec::new(),
            Instant::ORIGIN,
            Timestamp::from_millis(0),
        );
        if seen.trip.is_some() {
            assert!(kinds(&seen.commit.events).contains(&EventKind::LoopDetected));
            assert!(
                seen.commit.checkpoint_delta.is_some(),
                "checkpointed before the end"
            );
            tripped_at = Some(attempt);
            break;
        }
    }
    assert_eq!(
        tripped_at,
        Some(threshold + 1),
        "more than the threshold trips"
    );
}

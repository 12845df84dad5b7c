//! restore() on stored records built by hand: what it restores, and
//! the field it names when something does not decode.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_core::Timestamp;
use std::time::Duration;

use rein_core::call::Planned;
use rein_core::deadline::Usage;
use rein_core::event::{
    Flag, ModelAnswered, ModelCallFailed, ModelCallFinished, RetryScheduled, SettlementStarted,
};
use rein_core::model::TokenUsage;
use rein_core::{Category, LedgerStatus, RunId};
use serde_json::json;

use super::super::checkpoint::{self, Checkpointed};
use super::super::fixture::{READ, WRITE, agent, event, record, run_id, whole_checkpoint};
use super::*;

fn at() -> Instant {
    Instant::from_origin(Duration::from_secs(100))
}

fn intent(id: &str) -> IntentId {
    IntentId::new(id).unwrap()
}

fn call(tool: &str, id: &str, result: Value) -> CallResult {
    CallResult {
        planned: Planned {
            intent_id: intent(id),
            call_id: format!("c-{id}"),
            tool: tool.into(),
            args: json!({"order_id": "A-1"}),
            step: 1,
            position: 0,
            salvaged: false,
        },
        class: ToolClass::Read,
        outcome: Ok(result),
        ledger: None,
        attempts: 1,
    }
}

/// A checkpoint of step 2, whole: as a release before deltas wrote it, and
/// as the store rebuilds it from deltas.
fn checkpoint(messages: Value, state: Value) -> Checkpoint {
    Checkpoint {
        run_id: run_id(),
        step: 2,
        messages,
        completed_intents: vec![],
        consumed: Usage {
            steps: 2,
            tokens: 300,
            cost: Cost::default(),
        },
        elapsed_ms: 4_000,
        state,
        at_ms: Timestamp::from_millis(9_000),
    }
}

fn transcript() -> Value {
    json!([
        Message::System {
            content: "s".into()
        },
        Message::user("u"),
    ])
}

fn state() -> Value {
    json!({
        "calls": [call(READ, "i-1", json!({"status": "open"}))],
        "facts": ["get_order|{}|open"],
        "tools_tried": [READ],
        "provider_calls": 2,
    })
}

fn restored(checkpoint: Option<&Checkpoint>, events: &[Event]) -> Result<Restored, RestoreError> {
    let record = record();
    restore(
        Stored {
            record: &record,
            checkpoint,
            intents: vec![],
            ledger: vec![],
            events,
            at_ms: Timestamp::from_millis(0),
        },
        &agent(),
        at(),
    )
}

fn reason(result: Result<Restored, RestoreError>) -> String {
    match result {
        Err(RestoreError::NotResumable { reason }) => reason,
        Err(other) => panic!("not a NotResumable: {other}"),
        Ok(_) => panic!("restored from an undecodable checkpoint"),
    }
}

#[test]
fn without_a_checkpoint_the_run_restarts_from_its_first_transcript_at_step_zero() {
    let r = restored(None, &[]).unwrap();
    assert_eq!(r.state.step, 0);
    assert_eq!(r.state.messages.len(), 2);
    assert!(
        matches!(&r.state.messages[1], Message::User { content, .. } if content == "Move order A-1.")
    );
    assert!(r.state.calls.is_empty() && r.resumed.is_none() && r.settling.is_none());
    assert_eq!(r.served, 0);
    assert_eq!(r.state.started, at());
    assert_eq!(
        r.state.checkpointed,
        Checkpointed::default(),
        "nothing checkpointed: the first step's delta holds the first transcript"
    );
}

#[test]
fn a_checkpoint_restores_its_transcript_calls_facts_and_model_position() {
    let c = checkpoint(transcript(), state());
    let r = restored(Some(&c), &[]).unwrap();
    assert_eq!(r.state.step, 2);
    assert_eq!(r.state.messages.len(), 2);
    assert_eq!(
        r.state.calls,
        vec![call(READ, "i-1", json!({"status": "open"}))]
    );
    assert!(r.state.progress.facts().contains("get_order|{}|open"));
    assert!(r.state.progress.tools_tried().contains(READ));
    assert_eq!(
        r.state.checkpointed,
        Checkpointed {
            messages: 2,
            calls: 1
        },
        "the next step appends after what the checkpoint holds"
    );
    assert_eq!(
        r.served, 2,
        "no plan after the checkpoint: no extra turn served"
    );
    assert_eq!(r.state.elapsed_before_ms, 4_000);
    assert_eq!(
        r.state.budget.used().tokens,
        300,
        "what the checkpoint consumed stays spent"
    );
    let marker = r.state.resume.unwrap();
    assert_eq!(marker.continued_from_step, 2);
}

#[test]
fn an_undecodable_transcript_is_not_resumable_and_names_messages() {
    let c = checkpoint(json!([{"role": "wizard"}]), state());
    let why = reason(restored(Some(&c), &[]));
    assert!(why.contains("checkpoint of step 2"), "{why}");
    assert!(why.contains("`messages[0].role`"), "{why}");
    assert!(why.contains("wizard"), "{why}");
}

#[test]
fn undecodable_calls_are_not_resumable_and_name_the_field_inside() {
    let mut s = state();
    s["calls"][0]["class"] = json!("teleport");
    let why = reason(restored(Some(&checkpoint(transcript(), s)), &[]));
    assert!(why.contains("`state.calls[0].class`"), "{why}");
    assert!(why.contains("teleport"), "{why}");
}

#[test]
fn each_missing_state_field_is_not_resumable_and_named() {
    for field in ["calls", "facts", "tools_tried", "provider_calls"] {
        let mut s = state();
        s.as_object_mut().unwrap().remove(field);
        let why = reason(restored(Some(&checkpoint(transcript(), s)), &[]));
        assert!(
            why.contains(&format!("`state.{field}` is missing")),
            "{why}"
        );
    }
}

#[test]
fn a_state_of_the_wrong_shape_is_not_resumable() {
    let why = reason(restored(Some(&checkpoint(transcript(), json!([1]))), &[]));
    assert!(
        why.contains("`state` is not an object but an array"),
        "{why}"
    );
    let mut s = state();
    s["facts"] = json!("open");
    let why = reason(restored(Some(&checkpoint(transcript(), s)), &[]));
    assert!(why.contains("`state.facts` does not decode"), "{why}");
}

#[test]
fn the_interrupted_steps_plan_is_replayed_with_its_intents_and_its_turn_is_charged() {
    let c = checkpoint(transcript(), state());
    let record = record();
    let planned = |id: &str, ordinal: u32| PlannedIntent {
        intent_id: intent(id),
        ordinal,
        call_id: format!("c-{id}"),
        tool: WRITE.into(),
        args: json!({"order_id": id}),
    };
    let pending = LedgerRecord {
        run_id: RunId::new("r-1").unwrap(),
        intent_id: intent("i-b"),
        seq: 1,
        step: 3,
        tool: WRITE.into(),
        class: ToolClass::IdempotentWrite,
        idempotency_key: None,
        args: json!({}),
        status: LedgerStatus::Pending,
        result: None,
        failure: None,
        attempts: 1,
        created_at_ms: Timestamp::from_millis(10_000),
        updated_at_ms: Timestamp::from_millis(10_000),
    };
    // Step 3 was planned (two calls, out of order) and its model turn
    // used 120 + 30 tokens, 2 s after the checkpoint.
    let events = [event(
        3,
        Timestamp::from_millis(11_000),
        ModelCallFinished {
            provider: "p".into(),
            model: "m".into(),
            attempt: 1,
            cost: None,
            elapsed: None,
            first_event: None,
            result: ModelCallResult::Answered(ModelAnswered {
                ok: Flag,
                usage: TokenUsage {
                    input: 120,
                    output: 30,
                },
                finish: FinishReason::ToolCalls,
                tool_calls: vec![WRITE.into(), WRITE.into()],
            }),
        },
    )];
    let r = restore(
        Stored {
            record: &record,
            checkpoint: Some(&c),
            intents: vec![
                (3, planned("i-b", 1)),
                (3, planned("i-a", 0)),
                (2, planned("old", 0)),
            ],
            ledger: vec![pending],
            events: &events,
            at_ms: Timestamp::from_millis(0),
        },
        &agent(),
        at(),
    )
    .unwrap();
    let turn = r.resumed.unwrap();
    assert_eq!(
        turn.intent_ids,
        vec![Some(intent("i-a")), Some(intent("i-b"))]
    );
    assert_eq!(turn.response.tool_calls[0].id, "c-i-a");
    assert_eq!(turn.prior.len(), 1, "the ledger record of i-b");
    assert_eq!(r.served, 3, "the interrupted turn was served");
    assert_eq!(r.state.budget.used().tokens, 300 + 150, "never refunded");
    assert_eq!(r.state.elapsed_before_ms, 4_000 + 2_000);
    assert_eq!(r.last_input_tokens, 120);
    assert_eq!(r.models, vec!["p/m".to_owned()]);
    let marker = r.state.resume.unwrap();
    assert_eq!(marker.reused_intents, vec![intent("i-a"), intent("i-b")]);
    assert_eq!(
        marker.reexecuted_with_same_key,
        vec![intent("i-b")],
        "a write in doubt"
    );
}

#[test]
fn a_started_settlement_is_finished_instead_of_replaying_the_plan() {
    let c = checkpoint(transcript(), state());
    let record = record();
    let events = [event(
        3,
        Timestamp::from_millis(10_000),
        SettlementStarted {
            policy: rein_core::FailurePolicy::default(),
            irreversible_open: false,
            open_records: 1,
            already_with_a_human: false,
            child_runs: 0,
        },
    )];
    let r = restore(
        Stored {
            record: &record,
            checkpoint: Some(&c),
            intents: vec![(
                3,
                PlannedIntent {
                    intent_id: intent("i-a"),
                    ordinal: 0,
                    call_id: "c".into(),
                    tool: WRITE.into(),
                    args: json!({}),
                },
            )],
            ledger: vec![],
            events: &events,
            at_ms: Timestamp::from_millis(0),
        },
        &agent(),
        at(),
    )
    .unwrap();
    assert!(matches!(r.settling, Some(End::Settling(_))));
    assert!(r.resumed.is_none());
    assert_eq!(r.served, 2);
}

/// NOTE's contract: what `checkpoint::delta` writes, applied by the store
/// to the checkpoint before it, `decode` reads back to the same state; a
/// field `decode` requires that the delta does not write fails here.
#[test]
fn a_delta_a_step_wrote_restores_to_the_same_state() {
    let c = checkpoint(transcript(), state());
    let first = restored(Some(&c), &[]).unwrap();
    let mut state = first.state;
    state.step = 3;
    state.messages.push(Message::Tool {
        call_id: "c-i-2".into(),
        content: "ok".into(),
    });
    assert!(state.progress.learn("update_order|{}|ok"));
    assert!(state.progress.try_tool(WRITE));
    state.calls.push(call(WRITE, "i-2", json!({"ok": true})));
    let delta = checkpoint::delta(
        &run_id(),
        &state,
        &["update_order|{}|ok".to_owned()],
        &[WRITE.to_owned()],
        5,
        at(),
        Timestamp::from_millis(12_000),
    );
    assert_eq!(delta.messages.len(), 1, "only the step's message");
    assert_eq!(delta.appended["calls"].len(), 1, "only the step's call");
    let mut written = c.clone();
    written.apply(delta).unwrap();
    let again = restored(Some(&written), &[]).unwrap();
    assert_eq!(again.state.step, 3);
    assert_eq!(again.state.messages, state.messages);
    assert_eq!(again.state.calls, state.calls);
    assert_eq!(again.state.progress.facts(), state.progress.facts());
    assert_eq!(
        again.state.progress.tools_tried(),
        state.progress.tools_tried()
    );
    assert_eq!(again.state.progress.digest(), state.progress.digest());
    assert_eq!(again.state.checkpointed, Checkpointed::all_of(&state));
    assert_eq!(again.served, 5);
}

/// A run checkpointed step by step and the same run checkpointed whole
/// after every step (the form of the releases before deltas) restore to
/// the same loop state, at every step.
#[test]
fn deltas_and_the_whole_form_restore_to_the_same_state_at_every_step() {
    let mut state = restored(None, &[]).unwrap().state;
    let mut deltas = Vec::new();
    for step in 1..=4u32 {
        state.step = step;
        let order = format!("A-{step}");
        state.messages.push(Message::Assistant {
            content: None,
            tool_calls: vec![crate::provider::ToolCall {
                id: format!("c-{step}"),
                name: READ.into(),
                arguments: json!({"order_id": order}).to_string(),
            }],
        });
        state.messages.push(Message::Tool {
            call_id: format!("c-{step}"),
            content: format!("status of {order}"),
        });
        // Step 3 learns nothing new and tries no new tool.
        let fact = format!("get_order|{}|open", if step == 3 { 2 } else { step });
        let learned: Vec<String> = state
            .progress
            .learn(&fact)
            .then_some(fact)
            .into_iter()
            .collect();
        let tool = if step == 4 { WRITE } else { READ };
        let tried: Vec<String> = state
            .progress
            .try_tool(tool)
            .then(|| tool.to_owned())
            .into_iter()
            .collect();
        state
            .calls
            .push(call(tool, &format!("i-{step}"), json!({"status": "open"})));
        let _ = state.budget.charge(Usage::ONE_STEP, at());
        let provider_calls = step + 1;
        deltas.push(checkpoint::delta(
            &run_id(),
            &state,
            &learned,
            &tried,
            provider_calls,
            at(),
            Timestamp::from_millis(10_000 + u64::from(step)),
        ));
        state.checkpointed = Checkpointed::all_of(&state);

        let whole = whole_checkpoint(
            &run_id(),
            &state,
            provider_calls,
            at(),
            Timestamp::from_millis(10_000 + u64::from(step)),
        );
        let rebuilt = Checkpoint::rebuild(&run_id(), None, deltas.clone())
            .unwrap()
            .unwrap();
        assert_eq!(rebuilt.step, whole.step);
        assert_eq!(rebuilt.messages, whole.messages, "step {step}");
        assert_eq!(rebuilt.completed_intents, whole.completed_intents);
        assert_eq!(rebuilt.consumed, whole.consumed);
        assert_eq!(rebuilt.state["calls"], whole.state["calls"]);
        let (a, b) = (
            restored(Some(&rebuilt), &[]).unwrap(),
            restored(Some(&whole), &[]).unwrap(),
        );
        assert_eq!(a.state.step, b.state.step);
        assert_eq!(a.state.messages, b.state.messages);
        assert_eq!(a.state.calls, b.state.calls);
        assert_eq!(a.state.progress.facts(), b.state.progress.facts());
        assert_eq!(
            a.state.progress.tools_tried(),
            b.state.progress.tools_tried()
        );
        assert_eq!(a.state.progress.digest(), b.state.progress.digest());
        assert_eq!(a.state.progress.digest(), state.progress.digest());
        assert_eq!(a.state.checkpointed, b.state.checkpointed);
        assert_eq!(a.state.budget.used(), b.state.budget.used());
        assert_eq!(a.state.elapsed_before_ms, b.state.elapsed_before_ms);
        assert_eq!(a.served, b.served);
        assert_eq!(a.state.resume.map(|m| m.continued_from_step), Some(step));
    }
    assert_eq!(
        state.progress.facts().len(),
        3,
        "step 3 learned nothing new"
    );
}

#[test]
fn what_the_interrupted_step_cost_and_retried_stays_spent() {
    let c = checkpoint(transcript(), state());
    let events = [
        event(
            3,
            Timestamp::from_millis(9_500),
            RetryScheduled {
                target: RetryTarget::Provider("p".into()),
                next_attempt: 2,
                reason: Category::Timeout,
                delay: Duration::from_millis(250),
                from_server: false,
                backoff_ceiling: Duration::from_millis(400),
                clamped: false,
                remaining: Duration::from_secs(10),
                same_key: None,
                before_fallback: None,
                worth: None,
            },
        ),
        event(
            3,
            Timestamp::from_millis(10_000),
            ModelCallFinished {
                provider: "p".into(),
                model: "m".into(),
                attempt: 1,
                cost: Some(Cost::from_micros(700)),
                elapsed: None,
                first_event: None,
                result: ModelCallResult::Failed(ModelCallFailed {
                    ok: Flag,
                    category: Category::Timeout,
                    reason: "the stream was cut".into(),
                    tokens_spent: 40,
                    key_env: None,
                }),
            },
        ),
    ];
    let r = restored(Some(&c), &events).unwrap();
    assert_eq!(r.state.budget.used().tokens, 300 + 40);
    assert_eq!(r.state.budget.used().cost, Cost::from_micros(700));
    let used = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Acquire);
    assert_eq!(
        r.model_retries
            .retries
            .load(std::sync::atomic::Ordering::Acquire),
        1
    );
    assert_eq!(used(&r.model_retries.wait_ms), 250);
    assert_eq!(used(&r.model_retries.wasted_tokens), 40);
    assert!(r.models.is_empty(), "a failed call answered nothing");
}

/// The wait for a human is not active time unless the agent counts it:
/// with `pause_clock` (the default) it is left out, without it the wait
/// counts, up to the resume for a wait that just ended.
#[test]
fn a_wait_for_approval_is_active_time_only_when_the_clock_does_not_pause() {
    use rein_core::approval::{ArgsDigest, Verdict};
    use rein_core::event::{ApprovalDecided, ApprovalRequested};
    let t = |ms: u64| Timestamp::from_millis(1_000_000 + ms);
    let requested = || ApprovalRequested {
        tool: "send_email".into(),
        args_digest: ArgsDigest::of(&json!({})),
        why: "the tool requires approval".into(),
        tier: None,
        expires_at_ms: t(86_400_000),
        continue_with: super::super::HandOn::AnyWorker,
    };
    let decided = ApprovalDecided {
        tool: "send_email".into(),
        verdict: Verdict::Approved,
        by: "alice".into(),
        decided_at_ms: t(10_100),
        reason: None,
        waited_ms: 9_900,
    };
    let continued = [
        event(1, t(200), requested()),
        event(1, t(10_200), decided),
        event(
            1,
            t(10_300),
            rein_core::event::RunCancelled {
                reason: "x".into(),
                at_step_boundary: None,
                aborted: None,
                provider: None,
            },
        ),
    ];
    let refs: Vec<&Event> = continued.iter().collect();
    assert_eq!(super::active_ms(&refs, t(0), true, t(20_000)), 300);
    assert_eq!(super::active_ms(&refs, t(0), false, t(20_000)), 10_300);

    // Resumed right after the decision: the wait is the time up to now.
    let paused = [event(1, t(200), requested())];
    let refs: Vec<&Event> = paused.iter().collect();
    assert_eq!(super::active_ms(&refs, t(0), true, t(5_200)), 200);
    assert_eq!(super::active_ms(&refs, t(0), false, t(5_200)), 5_200);
}

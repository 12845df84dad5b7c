//! The checker against evidence broken by hand: each case takes a real
//! scenario's evidence (which holds every invariant), breaks exactly one
//! invariant the way a defective engine would, and requires the checker to
//! name it. Together with `sabotage.rs` (broken engines) this shows no
//! check is vacuous.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use rein_chaos::evidence::Evidence;
use rein_chaos::invariant::{Invariant, check};
use rein_chaos::{RunnerOptions, catalog, run_scenario};
use rein_core::{Event, EventData, EventKind, LedgerStatus, Outcome};
use rein_engine::provider::Message;
use rein_testkit::order_desk::EffectKind;
use serde_json::{Value, json};

async fn evidence(id: u32) -> Evidence {
    let s = catalog().into_iter().find(|s| s.id == id).unwrap();
    let r = run_scenario(&s, &RunnerOptions::default()).await;
    assert!(r.error.is_none(), "{:?}", r.error);
    assert!(
        r.violations.is_empty(),
        "C{id:03} holds: {:?}",
        r.violations
    );
    r.evidence.unwrap()
}

#[track_caller]
fn assert_flags(e: &Evidence, invariant: Invariant, case: &str) {
    let found = check(e);
    assert!(
        found.iter().any(|v| v.invariant == invariant),
        "{case}: expected a {invariant} violation, got {found:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_duplicate_effect_at_the_desk_breaks_invariant_1() {
    let base = evidence(3).await;
    let mut e = base.clone();
    let applied = e
        .desk
        .side_effects
        .iter()
        .find(|s| s.tool == "update_delivery_time" && s.effect == EffectKind::Applied)
        .unwrap()
        .clone();
    e.desk.side_effects.push(applied);
    assert_flags(&e, Invariant::OneEffectPerKey, "the same key applied twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_reported_tokens_and_silent_success_break_invariant_2() {
    let base = evidence(42).await;
    let mut e = base.clone();
    let call = e.runs[0]
        .events
        .iter()
        .find(|x| x.kind() == EventKind::ModelCallFinished)
        .unwrap()
        .clone();
    // The run stopped short of its 2,400 tokens (the next call could not
    // fit; how far short depends on its prompts, the budget note
    // included): eight more calls of 340 tokens each go beyond it.
    for _ in 0..8 {
        e.runs[0].events.push(call.clone());
    }
    assert_flags(
        &e,
        Invariant::BudgetsHold,
        "model usage beyond what the report counts",
    );

    let base = evidence(41).await;
    let mut e = base.clone();
    e.runs[0].report.as_mut().unwrap().outcome = Outcome::Succeeded;
    assert_flags(
        &e,
        Invariant::BudgetsHold,
        "a spent step budget reported as success",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kept_or_unproven_compensations_break_invariant_3() {
    let base = evidence(18).await;
    let compensations: Vec<u64> = base
        .desk
        .requests
        .iter()
        .filter(|q| {
            q.headers
                .intent_id
                .as_deref()
                .is_some_and(|i| i.ends_with("/compensation"))
        })
        .map(|q| q.seq)
        .collect();
    assert!(!compensations.is_empty());

    // Settlement skipped: both moves left standing after a conflict.
    let mut e = base.clone();
    let run = &mut e.runs[0];
    for l in run
        .ledger
        .iter_mut()
        .filter(|l| l.status == LedgerStatus::Compensated)
    {
        l.status = LedgerStatus::Succeeded;
    }
    run.report.as_mut().unwrap().outcome = Outcome::PartialSuccess;
    e.desk
        .side_effects
        .retain(|s| !compensations.contains(&s.request_seq));
    assert_flags(
        &e,
        Invariant::NothingDangles,
        "effects kept after a conflict",
    );

    // The ledger says compensated; the desk never saw a restore.
    let mut e = base.clone();
    e.desk
        .side_effects
        .retain(|s| !compensations.contains(&s.request_seq));
    e.desk.requests.retain(|q| !compensations.contains(&q.seq));
    assert_flags(&e, Invariant::NothingDangles, "compensated only on paper");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_order_compensation_breaks_invariant_4() {
    let mut e = evidence(18).await;
    let run = &mut e.runs[0];
    let starts: Vec<usize> = run
        .events
        .iter()
        .enumerate()
        .filter(|(_, x)| x.kind() == EventKind::CompensationStarted)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(starts.len(), 2);
    let first = wire(&run.events[starts[0]])["forward_seq"].clone();
    let second = wire(&run.events[starts[1]])["forward_seq"].clone();
    edit(&mut run.events[starts[0]], |d| d["forward_seq"] = second);
    edit(&mut run.events[starts[1]], |d| d["forward_seq"] = first);
    assert_flags(
        &e,
        Invariant::ReverseCompensation,
        "compensation started forward",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrecorded_end_breaks_invariant_5() {
    let mut e = evidence(1).await;
    e.runs[0].stored_status = Some("running".into());
    assert_flags(
        &e,
        Invariant::StructuredFailures,
        "the store still says running",
    );
    let mut e = evidence(1).await;
    e.runs[0].report = None;
    assert_flags(&e, Invariant::StructuredFailures, "no report");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_through_an_open_breaker_breaks_invariant_6() {
    let base = evidence(14).await;
    let mut e = base.clone();
    let run = &mut e.runs[0];
    let at = run
        .events
        .iter()
        .position(|x| {
            x.kind() == EventKind::BreakerStateChanged
                && wire(x)["transition"]["transition"] == "opened"
        })
        .unwrap();
    let mut call = run.events[at].clone();
    call.data = payload(
        EventKind::ToolCallStarted,
        json!({"tool": "get_order", "attempt": 1, "class": "read", "allowance_ms": 1000,
               "remaining_ms": 1000, "queue_wait_ms": 0}),
    );
    run.events.insert(at + 1, call);
    assert_flags(
        &e,
        Invariant::OpenBreakerBlocks,
        "a call right after opening",
    );

    // A request that reached the tool with no attempt recorded for it.
    let mut e = base.clone();
    let request = e.tool_trace[0].clone();
    e.tool_trace.insert(0, request);
    e.reconcile_from += 1;
    assert_flags(
        &e,
        Invariant::OpenBreakerBlocks,
        "a call around the guarded path",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breached_ceiling_or_a_starved_tenant_breaks_invariant_7() {
    let base = evidence(53).await;
    let mut e = base.clone();
    e.peaks.insert("order_api".into(), 3);
    assert_flags(
        &e,
        Invariant::ConcurrencyCeiling,
        "3 in flight under a ceiling of 2",
    );
    let mut e = base.clone();
    for r in e.runs.iter_mut().filter(|r| r.tenant == "tenant-b") {
        for x in r
            .events
            .iter_mut()
            .filter(|x| x.kind() == EventKind::ToolCallStarted)
        {
            edit(x, |d| d["queue_wait_ms"] = 7000.into());
        }
    }
    assert_flags(
        &e,
        Invariant::ConcurrencyCeiling,
        "tenant-b waits 7 s for every call",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_planned_step_breaks_invariant_8() {
    let mut e = evidence(1).await;
    let (step, intent) = e.runs[0].intents[0].clone();
    let mut again = intent.clone();
    again.intent_id = rein_core::IntentId::new("re-planned").unwrap();
    e.runs[0].intents.push((step, again));
    assert_flags(&e, Invariant::ResumeReusesIntents, "a step planned twice");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_email_breaks_invariant_9() {
    let mut e = evidence(1).await;
    let email = e
        .tool_trace
        .iter()
        .find(|t| t.tool.as_deref() == Some("send_email"))
        .unwrap()
        .clone();
    e.tool_trace.push(email);
    assert_flags(
        &e,
        Invariant::IrreversibleNotRetried,
        "the email sent twice",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_text_anywhere_in_the_models_input_breaks_invariant_10() {
    let base = evidence(38).await;
    let mut e = base.clone();
    e.runs[0].model_inputs[1].push(Message::user(
        "get_order failed: RAW-UPSTREAM-ERROR: Traceback (most recent call last)",
    ));
    assert_flags(
        &e,
        Invariant::NoRawErrorText,
        "a traceback in a user message",
    );
    let mut e = base.clone();
    let reply = e.runs[0].model_inputs[1]
        .iter_mut()
        .find_map(|m| match m {
            Message::Tool { content, .. } if content.starts_with("tool_error") => Some(content),
            _ => None,
        })
        .unwrap();
    reply.push_str(" KeyError 'order' at line 12");
    assert_flags(
        &e,
        Invariant::NoRawErrorText,
        "text appended after the instruction",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_for_one_submission_key_breaks_invariant_1() {
    let base = evidence(68).await;
    assert!(base.submissions.len() >= 2, "the client retried");
    let mut e = base.clone();
    let mut again = e.runs[0].clone();
    again.run_id = rein_core::RunId::new("second-run").unwrap();
    e.runs.push(again);
    assert_flags(&e, Invariant::OneEffectPerKey, "two runs for one key");
    let mut e = base.clone();
    for a in &mut e.submissions {
        if a.replayed {
            a.location = Some("/v1/runs/another".into());
        }
    }
    assert_flags(
        &e,
        Invariant::OneEffectPerKey,
        "a replay naming another run",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_model_switch_breaks_invariant_5() {
    let mut e = evidence(71).await;
    assert!(
        e.runs[0]
            .events
            .iter()
            .any(|x| x.kind() == EventKind::ModelFallbackUsed)
    );
    e.runs[0]
        .events
        .retain(|x| x.kind() != EventKind::ModelFallbackUsed);
    assert_flags(
        &e,
        Invariant::StructuredFailures,
        "a fallback never announced",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fallback_after_401_breaks_invariants_5_and_6() {
    let base = evidence(82).await;
    assert!(base.backup_trace.is_empty(), "the backup was never asked");
    let run = &base.runs[0];
    let failed = run
        .events
        .iter()
        .position(|x| {
            x.kind() == EventKind::ModelCallFinished && wire(x)["category"] == "unauthorized"
        })
        .unwrap();
    let mut e = base.clone();
    let mut switched = run.events[failed].clone();
    switched.data = payload(
        EventKind::ModelCallStarted,
        json!({"provider": "backup", "model": "chaos-model", "attempt": 1,
               "allowance_ms": 1000, "messages": 2, "stream": false}),
    );
    e.runs[0].events.insert(failed + 1, switched);
    assert_flags(&e, Invariant::StructuredFailures, "a switch after a 401");
    let mut e = base.clone();
    e.backup_trace.push(e.model_trace[0].clone());
    assert_flags(
        &e,
        Invariant::OpenBreakerBlocks,
        "the backup asked unrecorded",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn asking_an_overflowed_model_again_breaks_invariant_5() {
    let base = evidence(80).await;
    let run = &base.runs[0];
    let overflow = run
        .events
        .iter()
        .position(|x| {
            x.kind() == EventKind::ModelCallFinished && wire(x)["category"] == "context_overflow"
        })
        .unwrap();
    let mut e = base.clone();
    let mut again = run.events[overflow].clone();
    let finished = wire(&again);
    again.data = payload(
        EventKind::ModelCallStarted,
        json!({"provider": finished["provider"], "model": finished["model"], "attempt": 2,
               "allowance_ms": 1000, "messages": 2, "stream": false}),
    );
    e.runs[0].events.insert(overflow + 1, again);
    assert_flags(
        &e,
        Invariant::StructuredFailures,
        "the overflowed model asked again",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_of_failed_streams_count_toward_invariant_2() {
    let base = evidence(74).await;
    let mut e = base.clone();
    let failed = e.runs[0]
        .events
        .iter_mut()
        .find(|x| x.kind() == EventKind::ModelCallFinished && wire(x)["ok"] == false)
        .unwrap();
    assert!(wire(failed)["tokens_spent"].as_u64().unwrap() > 0);
    edit(failed, |d| d["tokens_spent"] = json!(1_000_000));
    assert_flags(
        &e,
        Invariant::BudgetsHold,
        "tokens of a cut stream over the limit",
    );
}

/// An event's data in its wire form: what the tampering below edits, so a
/// forged event is one a store could really hold.
fn wire(e: &Event) -> Value {
    e.data.to_value().unwrap()
}

/// Edits an event's data in its wire form, keeping its kind.
fn edit(e: &mut Event, change: impl FnOnce(&mut Value)) {
    let mut data = wire(e);
    change(&mut data);
    e.data = payload(e.kind(), data);
}

/// A payload of `kind` from its wire form.
fn payload(kind: EventKind, data: Value) -> EventData {
    EventData::decode(kind, data).unwrap()
}

/// The ceiling scenarios hold as the model servers count: every call asked
/// for at most the model's cap, and the servers' own usage is within the
/// run's limits. One more answer over the limit in the log is flagged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_the_model_servers_counted_over_a_limit_breaks_invariant_2() {
    for id in [91, 92] {
        let base = evidence(id).await;
        let run = &base.runs[0];
        assert_eq!(
            run.report.as_ref().unwrap().outcome,
            Outcome::BudgetExhausted
        );
        let log: Vec<_> = base.model_usage.iter().chain(&base.backup_usage).collect();
        assert!(log.len() >= 3, "C{id:03}: {log:?}");
        assert!(
            log.iter().all(|u| u.max_tokens.is_some_and(|m| m <= 4096)),
            "C{id:03}: every call within the cap: {log:?}"
        );
        if id == 92 {
            assert!(!base.backup_usage.is_empty(), "the backup answered a turn");
        }
        let mut e = base.clone();
        let mut extra = e.model_usage[0].clone();
        extra.prompt_tokens = 9000;
        extra.completion_tokens = 4000;
        e.model_usage.push(extra);
        assert_flags(&e, Invariant::BudgetsHold, "usage over the limit");
    }
}

/// Invariant 11 from a store scenario's evidence (C106: the update's mark
/// held through an outage, written when the store was back): each way the
/// ledger, the events and the desk's log could part is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ledger_and_events_that_part_break_invariant_11() {
    let base = evidence(106).await;
    let update = |e: &Evidence| {
        e.runs[0]
            .ledger
            .iter()
            .find(|r| r.tool == "update_delivery_time")
            .unwrap()
            .clone()
    };

    // An event stored ahead of the ledger while the call returned.
    let mut e = base.clone();
    let at = e.runs[0].at_return.as_mut().unwrap();
    let declared = at
        .events
        .iter()
        .find(|x| matches!(&x.data, EventData::LedgerRecorded(r) if r.status == LedgerStatus::Pending))
        .unwrap()
        .clone();
    let mut ahead = declared.clone();
    if let EventData::LedgerRecorded(r) = &mut ahead.data {
        r.status = LedgerStatus::Succeeded;
    }
    ahead.seq = 10_000;
    at.events.push(ahead.clone());
    assert_flags(
        &e,
        Invariant::LedgerAgreesWithEvents,
        "an event ahead of the ledger",
    );

    // The same mark stated twice.
    let mut e = base.clone();
    let mut again = e.runs[0]
        .events
        .iter()
        .find(|x| matches!(&x.data, EventData::LedgerRecorded(r) if r.status == LedgerStatus::Succeeded))
        .unwrap()
        .clone();
    again.seq = 10_000;
    e.runs[0].events.push(again);
    assert_flags(&e, Invariant::LedgerAgreesWithEvents, "a mark stated twice");

    // A record the events never mention.
    let mut e = base.clone();
    let intent = update(&e).intent_id;
    e.runs[0]
        .events
        .retain(|x| x.intent_id.as_ref() != Some(&intent));
    assert_flags(
        &e,
        Invariant::LedgerAgreesWithEvents,
        "a record no event states",
    );

    // An effect the desk applied that the ledger says failed.
    let mut e = base.clone();
    e.runs[0]
        .ledger
        .iter_mut()
        .find(|r| r.tool == "update_delivery_time")
        .unwrap()
        .status = LedgerStatus::Failed;
    assert_flags(
        &e,
        Invariant::LedgerAgreesWithEvents,
        "a failed record the desk applied",
    );

    // A succeeded record the desk never saw.
    let mut e = base.clone();
    e.desk
        .side_effects
        .retain(|s| s.tool != "update_delivery_time");
    assert_flags(
        &e,
        Invariant::LedgerAgreesWithEvents,
        "an effect the desk never applied",
    );
}

/// Invariant 12 from the same evidence: a run that ended with a record
/// pending, and a run failed for a store that blinked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_run_with_a_pending_record_or_failed_by_a_blink_breaks_invariant_12() {
    let base = evidence(106).await;
    let mut e = base.clone();
    let at = e.runs[0].at_return.as_mut().unwrap();
    assert!(
        at.ledger.iter().any(|r| r.status == LedgerStatus::Pending),
        "the outage left the update's record pending while the run was handed on"
    );
    at.stored_status = Some("succeeded".into());
    assert_flags(
        &e,
        Invariant::NoTransientFailure,
        "ended with a record pending",
    );

    let mut e = base.clone();
    let report = e.runs[0].report.as_mut().unwrap();
    report.outcome = Outcome::Failed;
    report.summary = "store is unavailable: connection closed (injected by rein-chaos)".into();
    assert_flags(&e, Invariant::NoTransientFailure, "failed by a blink");
}

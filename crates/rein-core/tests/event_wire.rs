//! The event wire form is a compatibility promise: every event already
//! stored (in SQLite files written before payloads were typed) still
//! decodes, and writes back byte for byte, so the API's event JSON does not
//! change.
//!
//! `fixtures/events-v1.jsonl` holds one event per kind and shape as the
//! release before typed payloads wrote them: captured from the store during
//! a run of the engine, chaos, server and CLI test suites (one line per
//! distinct shape), plus `checkpoint_written` (never emitted) and the two
//! shapes no suite reached (a shared breaker's refusal, a retry stopped by
//! cancellation), written by hand in the same form.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use rein_core::event::{ModelCallResult, ToolCallFinished};
use rein_core::{Event, EventData, EventKind};
use serde_json::{Value, json};

const FIXTURE: &str = include_str!("fixtures/events-v1.jsonl");

fn fixture() -> impl Iterator<Item = (usize, &'static str)> {
    FIXTURE
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
}

#[test]
fn every_stored_event_decodes_and_writes_back_byte_for_byte() {
    let mut wrong = Vec::new();
    for (line, text) in fixture() {
        match serde_json::from_str::<Event>(text) {
            Err(e) => wrong.push(format!("line {line} does not decode: {e}\n{text}")),
            Ok(event) => {
                let again = serde_json::to_string(&event).unwrap();
                if again != text {
                    wrong.push(format!("line {line} writes back as\n{again}\nnot\n{text}"));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn the_fixture_covers_every_kind() {
    let stored: BTreeSet<String> = fixture()
        .map(|(_, text)| {
            let v: Value = serde_json::from_str(text).unwrap();
            v["kind"].as_str().unwrap().to_owned()
        })
        .collect();
    // NOTE: one line per kind; a kind added to `EventKind` needs its
    // fixture here (and a variant in `EventData`, which the compiler asks
    // for).
    let every = [
        EventKind::RunStarted,
        EventKind::PlanCreated,
        EventKind::BudgetAllocated,
        EventKind::ModelCallStarted,
        EventKind::ModelCallFinished,
        EventKind::CallRejected,
        EventKind::ToolCallStarted,
        EventKind::ToolCallFinished,
        EventKind::RetryScheduled,
        EventKind::RetryAbandoned,
        EventKind::RunCancelled,
        EventKind::RunFailed,
        EventKind::ConcurrencyWaitExpired,
        EventKind::RateLimited,
        EventKind::CallShed,
        EventKind::ConcurrencyAdjusted,
        EventKind::FanOutRefused,
        EventKind::ModelQueueWaited,
        EventKind::ModelFallbackUsed,
        EventKind::ModelOutputTruncated,
        EventKind::IdempotencyLookup,
        EventKind::LedgerRecorded,
        EventKind::BreakerStateChanged,
        EventKind::BudgetExhausted,
        EventKind::FinalTurnRequested,
        EventKind::LoopDetected,
        EventKind::ToolDisabled,
        EventKind::CheckpointWritten,
        EventKind::SettlementStarted,
        EventKind::CompensationStarted,
        EventKind::CompensationFinished,
        EventKind::HandoffCreated,
        EventKind::PartialSuccessReturned,
        EventKind::RunFinished,
        EventKind::RunResumed,
        EventKind::RunInterrupted,
        EventKind::LatencyDegraded,
        EventKind::ApprovalRequested,
        EventKind::ApprovalDecided,
        EventKind::HandoffDecided,
    ];
    for kind in every {
        assert!(
            stored.contains(kind.as_str()),
            "no stored {kind} in the fixture"
        );
    }
}

/// The fields resume charges back to the budget are read from the shape
/// the engine wrote, not defaulted: renaming `tokens_spent` or
/// `cost_micros` on the wire would fail this, not refund budget.
#[test]
fn resume_reads_tokens_and_cost_from_the_stored_names() {
    let failed = EventData::decode(
        EventKind::ModelCallFinished,
        json!({"attempt": 1, "category": "transient", "cost_micros": 42, "key_env": null,
               "model": "m", "ok": false, "provider": "p", "reason": "cut",
               "tokens_spent": 17}),
    )
    .unwrap();
    let EventData::ModelCallFinished(f) = failed else {
        panic!("decoded as another kind")
    };
    assert_eq!(f.tokens(), 17);
    assert_eq!(f.cost.map(|c| c.micros()), Some(42));
    assert!(matches!(f.result, ModelCallResult::Failed(_)));

    let answered = EventData::decode(
        EventKind::ModelCallFinished,
        json!({"attempt": 1, "cost_micros": 7, "finish": "stop", "model": "m", "ok": true,
               "provider": "p", "tool_calls": [], "usage": {"input": 10, "output": 5}}),
    )
    .unwrap();
    let EventData::ModelCallFinished(a) = answered else {
        panic!("decoded as another kind")
    };
    assert_eq!(
        (a.input_tokens(), a.output_tokens(), a.tokens()),
        (10, 5, 15)
    );
}

#[test]
fn a_payload_without_a_field_it_always_had_is_a_decode_error_naming_the_kind() {
    // `usage` renamed: neither the answered nor the failed shape fits.
    let err = EventData::decode(
        EventKind::ModelCallFinished,
        json!({"attempt": 1, "finish": "stop", "model": "m", "ok": true, "provider": "p",
               "tool_calls": [], "tokens": {"input": 10, "output": 5}}),
    )
    .unwrap_err();
    assert_eq!(err.kind, EventKind::ModelCallFinished);
    assert!(err.to_string().contains("model_call_finished"), "{err}");
    // A wire name of one kind is not another kind's.
    assert!(
        EventData::decode(EventKind::ToolCallStarted, json!({"tool": "t"})).is_err(),
        "a tool_call_started without its attempt and times"
    );
}

#[test]
fn the_shapes_of_one_kind_are_told_apart_by_their_flags() {
    let skipped = json!({"category": null, "effect": null, "ledger": "succeeded", "ok": true,
                         "reason": "done before", "skipped": true, "tool": "t"});
    let not_sent = json!({"category": "cancelled", "effect": "not_applied", "ok": false,
                          "reason": "interrupted", "sent": false, "tool": "t"});
    let ok = json!({"attempt": 1, "elapsed_ms": 3, "ok": true, "replayed": false, "tool": "t",
                    "truncated": false});
    let failed = json!({"attempt": 1, "category": "transient", "effect": "maybe_applied",
                        "elapsed_ms": 3, "ok": false, "reason": "502", "retryable": true,
                        "tool": "t"});
    let shape = |v: Value| match EventData::decode(EventKind::ToolCallFinished, v).unwrap() {
        EventData::ToolCallFinished(f) => f,
        other => panic!("{other:?}"),
    };
    assert!(matches!(shape(skipped), ToolCallFinished::Skipped(_)));
    assert!(matches!(shape(not_sent), ToolCallFinished::NotSent(_)));
    assert!(matches!(shape(ok), ToolCallFinished::Succeeded(_)));
    assert!(matches!(shape(failed), ToolCallFinished::Failed(_)));
    // `ok: true` with a failure's fields is no shape at all.
    let forged = json!({"attempt": 1, "category": "transient", "effect": "maybe_applied",
                        "elapsed_ms": 3, "ok": true, "reason": "502", "retryable": true,
                        "tool": "t"});
    assert!(EventData::decode(EventKind::ToolCallFinished, forged).is_err());
}

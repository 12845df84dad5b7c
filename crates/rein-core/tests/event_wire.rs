//! The event wire form is a compatibility promise: every event already
//! stored still decodes, whichever schema wrote it, and what rein writes
//! now is pinned byte for byte, so the API's event JSON changes only with
//! the schema version.
//!
//! `fixtures/events-v1.jsonl` holds one event per kind and shape as schema
//! 1 (events without `"v"`) wrote them: captured from the store during a
//! run of the engine, chaos, server and CLI test suites (one line per
//! distinct shape), plus `checkpoint_written` (never emitted) and the two
//! shapes no suite reached (a shared breaker's refusal, a retry stopped by
//! cancellation), written by hand in the same form.
//!
//! `fixtures/events-v2.jsonl` holds the same events, line for line, as
//! schema 2 writes them: durations in budgets as text, money in dollars,
//! no process-local instants. Regenerate it (after a deliberate schema
//! change, with the version bumped) with
//! `REIN_BLESS=1 cargo test -p rein-core --test event_wire`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use rein_core::event::{ModelCallResult, ToolCallFinished};
use rein_core::{EVENT_SCHEMA, Event, EventData, EventKind};
use serde_json::{Value, json};

const V1: &str = include_str!("fixtures/events-v1.jsonl");
const V2: &str = include_str!("fixtures/events-v2.jsonl");

fn lines(fixture: &'static str) -> impl Iterator<Item = (usize, &'static str)> {
    fixture
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| (i + 1, l))
}

fn fixture() -> impl Iterator<Item = (usize, &'static str)> {
    lines(V1)
}

#[test]
fn every_schema_1_event_decodes_and_is_written_as_schema_2() {
    let written: Vec<String> = fixture()
        .map(|(line, text)| {
            let event: Event = serde_json::from_str(text)
                .unwrap_or_else(|e| panic!("line {line} does not decode: {e}\n{text}"));
            serde_json::to_string(&event).unwrap()
        })
        .collect();
    if std::env::var_os("REIN_BLESS").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/events-v2.jsonl"
        );
        std::fs::write(path, written.join("\n") + "\n").unwrap();
        return;
    }
    let pinned: Vec<&str> = lines(V2).map(|(_, l)| l).collect();
    assert_eq!(
        written.len(),
        pinned.len(),
        "one schema-2 line per schema-1 line"
    );
    let wrong: Vec<String> = written
        .iter()
        .zip(&pinned)
        .enumerate()
        .filter(|(_, (w, p))| w != *p)
        .map(|(i, (w, p))| format!("line {} is written as\n{w}\nnot\n{p}", i + 1))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn every_schema_2_event_writes_back_byte_for_byte() {
    let mut wrong = Vec::new();
    for (line, text) in lines(V2) {
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

/// Schema 2 says what it promised: no serde duration structs, no bare
/// micro-dollars, and the version on every line.
#[test]
fn schema_2_has_no_unitless_durations_or_money() {
    fn walk(v: &Value, path: &str, found: &mut Vec<String>) {
        match v {
            Value::Object(map) => {
                if map.contains_key("secs") && map.contains_key("nanos") {
                    found.push(format!("{path}: a {{secs, nanos}} duration"));
                }
                for (k, x) in map {
                    if k == "cost" || k == "cost_micros" {
                        found.push(format!("{path}.{k}: money without its unit"));
                    }
                    walk(x, &format!("{path}.{k}"), found);
                }
            }
            Value::Array(items) => items.iter().for_each(|x| walk(x, path, found)),
            _ => {}
        }
    }
    let mut found = Vec::new();
    for (line, text) in lines(V2) {
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["v"], json!(EVENT_SCHEMA), "line {line}");
        walk(
            &v["data"],
            &format!("line {line} {}", v["kind"]),
            &mut found,
        );
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
}

#[test]
fn an_event_of_a_newer_schema_is_refused_by_name() {
    let (_, text) = lines(V2).next().unwrap();
    let mut v: Value = serde_json::from_str(text).unwrap();
    v["v"] = json!(EVENT_SCHEMA + 1);
    let err = serde_json::from_value::<Event>(v).unwrap_err().to_string();
    assert!(err.contains("newer than this rein"), "{err}");
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
        EventKind::StreamRecovered,
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
/// the engine wrote, not defaulted: renaming `tokens_spent`, `cost_usd` or
/// schema 1's `cost_micros` on the wire would fail this, not refund budget.
#[test]
fn resume_reads_tokens_and_cost_from_the_stored_names() {
    for (cost, micros) in [
        (json!({"cost_micros": 42}), 42),
        (json!({"cost_usd": 0.000042}), 42),
    ] {
        let mut data = json!({"attempt": 1, "category": "transient", "key_env": null,
               "model": "m", "ok": false, "provider": "p", "reason": "cut",
               "tokens_spent": 17});
        data.as_object_mut()
            .unwrap()
            .extend(cost.as_object().unwrap().clone());
        let failed = EventData::decode(EventKind::ModelCallFinished, data).unwrap();
        let EventData::ModelCallFinished(f) = failed else {
            panic!("decoded as another kind")
        };
        assert_eq!(f.tokens(), 17);
        assert_eq!(f.cost.map(|c| c.micros()), Some(micros));
        assert!(matches!(f.result, ModelCallResult::Failed(_)));
    }

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

//! The step commit the throughput benches write (`rein-cli`'s
//! `store_commits`, `rein-store-postgres`'s `commits`): one builder, so
//! both benches measure the same write and their figures compare.

use rein_core::deadline::{Cost, Usage};
use rein_core::{
    Event, EventData, EventKind, IntentId, LedgerRecord, LedgerStatus, RunId, TenantId, Timestamp,
    ToolClass,
};
use serde_json::json;

use crate::{Checkpoint, NewRun, StepCommit};

/// A run for a workload to commit steps of: tenant `bench`, an empty
/// budget, created at 1 ms.
pub fn workload_run(run_id: RunId) -> NewRun {
    NewRun {
        run_id,
        tenant: TenantId::new("bench").unwrap(),
        agent: "a".to_owned(),
        input: "x".to_owned(),
        parent_run_id: None,
        budget: json!({}),
        created_at_ms: Timestamp::from_millis(1),
        trace_parent: None,
    }
}

/// What step `step` of a run writes: a ledger declaration, two events and
/// a checkpoint, in one transaction.
pub fn workload_step(run: &RunId, step: u32) -> StepCommit {
    let event = |kind: EventKind, data: serde_json::Value| Event {
        run_id: run.clone(),
        seq: 0,
        step,
        intent_id: None,
        attempt_id: None,
        idempotency_key: None,
        at_ms: Timestamp::from_millis(1_000 + u64::from(step)),
        data: EventData::decode(kind, data).unwrap(),
    };
    let finished = json!({"tool": "t", "attempt": 1, "ok": true, "replayed": false,
                          "truncated": false, "elapsed_ms": 5});
    StepCommit {
        declares: vec![LedgerRecord {
            run_id: run.clone(),
            intent_id: IntentId::new(format!("i-{step}")).unwrap(),
            seq: 0,
            step,
            tool: "update_delivery_time".to_owned(),
            class: ToolClass::IdempotentWrite,
            idempotency_key: None,
            args: json!({"order_id": 42, "delivery": "friday"}),
            status: LedgerStatus::Pending,
            result: None,
            failure: None,
            attempts: 0,
            created_at_ms: Timestamp::from_millis(1_000),
            updated_at_ms: Timestamp::from_millis(1_000),
        }],
        events: vec![
            event(EventKind::ToolCallFinished, finished.clone()),
            event(EventKind::ToolCallFinished, finished),
        ],
        checkpoint: Some(Checkpoint {
            run_id: run.clone(),
            step,
            messages: json!([{"role": "assistant", "content": "moved to friday"}]),
            completed_intents: vec![],
            consumed: Usage {
                steps: step,
                tokens: 300,
                cost: Cost::from_micros(42),
            },
            elapsed_ms: 900,
            state: json!({}),
            at_ms: Timestamp::from_millis(2_000),
        }),
        ..StepCommit::default()
    }
}

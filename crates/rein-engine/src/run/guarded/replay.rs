//! A resumed call whose ledger record already says how it ended.

use rein_core::event::{Flag, ToolCallFinished, ToolCallSkipped};
use rein_core::{Category, Effect, Failure, LedgerRecord, LedgerStatus, ToolClass};
use serde_json::Value;

use super::{CallResult, Planned, is_unsent};
use crate::run::binding::ToolBinding;
use crate::run::emitter::Correlation;
use crate::run::{Engine, RunCtx};

impl Engine {
    /// The result of a resumed call from its ledger record, or `None` when
    /// it must run (an idempotent write in doubt: again, with its key).
    pub(super) fn replay_prior(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        planned: &Planned,
        tool: &ToolBinding,
        record: &LedgerRecord,
    ) -> Option<CallResult> {
        let done = |outcome: Result<Value, Failure>, note: &str| {
            ctx.emitter.emit(
                c,
                ToolCallFinished::Skipped(ToolCallSkipped {
                    tool: tool.name.clone(),
                    skipped: Flag,
                    ok: outcome.is_ok(),
                    category: outcome.as_ref().err().map(Failure::category),
                    effect: outcome.as_ref().err().map(Failure::effect),
                    ledger: record.status,
                    reason: note.to_owned(),
                }),
            );
            Some(CallResult {
                planned: planned.clone(),
                class: tool.class,
                outcome,
                ledger: Some(record.status),
                attempts: 0,
            })
        };
        match record.status {
            LedgerStatus::Pending if tool.class == ToolClass::IdempotentWrite => None,
            // Declared, then never sent: its process was interrupted first.
            // It runs now, under its intent (and key), like any new call.
            // So does one refused without effect that the run's report said
            // to retry, when this resume retries it.
            LedgerStatus::Failed if is_unsent(record) || ctx.retries(&record.intent_id) => None,
            LedgerStatus::Pending => done(
                Err(Failure::new(&tool.name, Category::Unknown)
                    .with_effect(Effect::MaybeApplied)
                    .with_human_message(format!(
                        "{} may have run before the interruption; an irreversible call is never repeated",
                        tool.name
                    ))),
                "in doubt after an interruption; not repeated",
            ),
            LedgerStatus::Succeeded => done(
                Ok(record.result.clone().unwrap_or(Value::Null)),
                "completed before the interruption; not run again",
            ),
            LedgerStatus::Failed => done(
                Err(record.failure.clone().unwrap_or_else(|| {
                    Failure::new(&tool.name, Category::Unknown).with_human_message(format!(
                        "{} failed before the interruption",
                        tool.name
                    ))
                })),
                "failed before the interruption; not run again",
            ),
            // Compensated, uncompensatable or manual: it took effect (or may
            // have), and a human or a compensation has dealt with it.
            other => done(
                Err(Failure::new(&tool.name, Category::Unknown)
                    .with_effect(if other == LedgerStatus::Manual {
                        Effect::MaybeApplied
                    } else {
                        Effect::Applied
                    })
                    .with_human_message(format!(
                        "{} ended {other} before the interruption",
                        tool.name
                    ))),
                "settled before the interruption; not run again",
            ),
        }
    }
}

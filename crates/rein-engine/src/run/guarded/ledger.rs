//! The guarded call's ledger: a side effect declared `pending` durably
//! before the call (write-ahead), and marked with its outcome after it.

use rein_core::event::LedgerRecorded;
use rein_core::idempotency::IdempotencyKey;
use rein_core::{Category, Clock, Effect, Failure, LedgerRecord, LedgerStatus};
use rein_store::{LedgerMark, StepCommit};
use serde_json::Value;

use super::{Planned, is_unsent};
use crate::run::binding::ToolBinding;
use crate::run::emitter::{Correlation, unix_ms};
use crate::run::{Engine, RunCtx};

impl Engine {
    /// Declares the call `pending`, durably, before it is made. A record an
    /// interrupt left unsent (failed, nothing applied) is declared again
    /// under its intent: pending, as if for the first time.
    ///
    /// `Err` when the declaration is not durable: no declaration, no call
    /// (the failure the call is refused with).
    pub(super) async fn declare_pending(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        planned: &Planned,
        tool: &ToolBinding,
        key: Option<&IdempotencyKey>,
        prior: Option<&LedgerRecord>,
    ) -> Result<(), Failure> {
        let at_ms = unix_ms(self.clock.system_now());
        let record = LedgerRecord {
            run_id: ctx.run_id.clone(),
            intent_id: planned.intent_id.clone(),
            seq: 0,
            step: planned.step,
            tool: tool.name.clone(),
            class: tool.class,
            idempotency_key: key.cloned(),
            args: planned.args.clone(),
            status: LedgerStatus::Pending,
            result: None,
            failure: None,
            attempts: 0,
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
        };
        ctx.emitter.emit(
            c,
            LedgerRecorded {
                tool: Some(tool.name.clone()),
                class: Some(tool.class),
                ..LedgerRecorded::new(LedgerStatus::Pending)
            },
        );
        crate::crash::point("before_pending");
        let reopen = prior
            .filter(|r| {
                r.status == LedgerStatus::Failed && (is_unsent(r) || ctx.retries(&r.intent_id))
            })
            .map(|_| {
                (
                    planned.intent_id.clone(),
                    LedgerMark {
                        status: LedgerStatus::Pending,
                        result: None,
                        failure: None,
                        attempts: 0,
                        at_ms,
                    },
                )
            });
        let commit = StepCommit {
            declares: vec![record],
            marks: reopen.into_iter().collect(),
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        if let Err(e) = self.commit(ctx, commit).await {
            // Write-ahead: no durable declaration, no call (the permits go
            // back unused).
            return Err(Failure::new(&tool.name, Category::Unknown)
                .with_human_message(format!("ledger unavailable, call not made: {e}")));
        }
        crate::crash::point("after_pending");
        Ok(())
    }

    /// Marks the call's record with its outcome ([`settled_status`]) and
    /// returns the status the ledger holds: the new one once it is durable,
    /// else still `pending` (the failed write is logged; reconciliation
    /// finds the record in doubt).
    pub(super) async fn mark_ledger(
        &self,
        ctx: &RunCtx<'_>,
        c: &Correlation,
        planned: &Planned,
        tool: &ToolBinding,
        outcome: &Result<Value, Failure>,
        attempts: u32,
    ) -> LedgerStatus {
        let status = settled_status(outcome);
        let mark = LedgerMark {
            status,
            result: outcome.as_ref().ok().cloned(),
            failure: outcome.as_ref().err().cloned(),
            attempts,
            at_ms: unix_ms(self.clock.system_now()),
        };
        ctx.emitter.emit(
            c,
            LedgerRecorded {
                tool: Some(tool.name.clone()),
                attempts: Some(attempts),
                ..LedgerRecorded::new(status)
            },
        );
        let commit = StepCommit {
            marks: vec![(planned.intent_id.clone(), mark)],
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        match self.commit_marks(ctx, commit).await {
            Ok(_) => status,
            Err(e) => {
                tracing::error!(run = %ctx.run_id, intent = %planned.intent_id, "ledger mark failed: {e}");
                LedgerStatus::Pending
            }
        }
    }
}

/// The ledger status of a call's outcome: a failure that applied succeeded
/// all the same, and one that may have applied stays `pending`, in doubt,
/// for reconciliation.
fn settled_status(outcome: &Result<Value, Failure>) -> LedgerStatus {
    match outcome {
        Ok(_) => LedgerStatus::Succeeded,
        Err(f) => match f.effect() {
            Effect::NotApplied => LedgerStatus::Failed,
            Effect::Applied => LedgerStatus::Succeeded,
            // In doubt: left pending for reconciliation.
            Effect::MaybeApplied => LedgerStatus::Pending,
        },
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_outcome_settles_by_its_effect_and_doubt_stays_pending() {
        let failed = |effect| Err(Failure::new("t", Category::Timeout).with_effect(effect));
        assert_eq!(settled_status(&Ok(json!(1))), LedgerStatus::Succeeded);
        assert_eq!(
            settled_status(&failed(Effect::NotApplied)),
            LedgerStatus::Failed
        );
        assert_eq!(
            settled_status(&failed(Effect::Applied)),
            LedgerStatus::Succeeded
        );
        assert_eq!(
            settled_status(&failed(Effect::MaybeApplied)),
            LedgerStatus::Pending
        );
    }
}

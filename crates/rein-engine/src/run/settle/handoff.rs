//! The handoff package: effects left to a human, and the resources still
//! held for the run, which whoever takes over must check first.

use rein_core::event::CompensationFinished;
use rein_core::handoff::InFlight;
use rein_core::outcome::CompensationResult;
use rein_core::report::Settled;
use rein_core::{LedgerRecord, LedgerStatus};
use rein_store::StoreExt;

use super::super::emitter::Correlation;
use super::super::{Engine, RunCtx};
use super::Settlement;

impl Engine {
    /// Leaves every open record to a human: in doubt → `manual`; done with
    /// no compensation → `uncompensatable` (with an alert); done with a
    /// compensation that is deliberately not run → `manual`.
    pub(super) async fn leave_for_human(
        &self,
        ctx: &RunCtx<'_>,
        mut records: Vec<LedgerRecord>,
        step: u32,
    ) -> Vec<CompensationResult> {
        records.sort_by_key(|r| std::cmp::Reverse(r.seq));
        let mut results = Vec::new();
        for record in records {
            let c = Correlation {
                step,
                intent_id: Some(record.intent_id.clone()),
                idempotency_key: record.idempotency_key.clone(),
                ..Correlation::default()
            };
            let compensation = ctx.agent.compensations.get(&record.tool);
            let (status, note) = match (record.status, compensation) {
                (LedgerStatus::Pending, _) => (
                    LedgerStatus::Manual,
                    "in doubt: it may or may not have run; a human must check".to_owned(),
                ),
                (_, None) => (
                    LedgerStatus::Uncompensatable,
                    format!("{} took effect and has no compensation", record.tool),
                ),
                (_, Some(b)) => (
                    LedgerStatus::Manual,
                    format!(
                        "kept for a human to decide; it can be undone with {}",
                        b.tool.name
                    ),
                ),
            };
            ctx.emitter.emit(
                &c,
                CompensationFinished {
                    tool: record.tool.clone(),
                    status,
                    note: note.clone(),
                    compensation_tool: None,
                    attempts: None,
                    alert: Some(status == LedgerStatus::Uncompensatable),
                },
            );
            self.mark(ctx, &c, &record.intent_id, status, None, &note)
                .await;
            results.push(CompensationResult {
                intent_id: record.intent_id.clone(),
                tool: record.tool.clone(),
                compensation_tool: compensation.map(|b| b.tool.name.clone()),
                status,
                note,
            });
        }
        results
    }

    /// Hands the run to a human: what its settlement did, and the
    /// resources still held for it (a process group, a temp dir), which
    /// whoever takes over must check before repeating anything.
    pub(super) async fn hand_off(
        &self,
        ctx: &RunCtx<'_>,
        compensations: Vec<CompensationResult>,
        reason: String,
    ) -> Settlement {
        let mut in_flight = Vec::new();
        if let Ok(leases) = ctx.store.leases_of_run(&ctx.run_id).await {
            for lease in leases
                .into_iter()
                .filter(|l| l.kind != rein_store::LeaseKind::Run)
            {
                in_flight.push(InFlight {
                    intent_id: lease.intent_id.clone(),
                    what: format!(
                        "lease {} ({:?}{}) held by {}",
                        lease.lease_id,
                        lease.kind,
                        lease.pgid.map(|g| format!(", process group {g}")).unwrap_or_default(),
                        lease.owner
                    ),
                    may_be_running: true,
                    advice: "kill the process group (or let rein reconcile reap it) before repeating the action".into(),
                });
            }
        }
        Settlement {
            settled: Settled::HandedOff(reason),
            compensations,
            in_flight,
            lost: false,
        }
    }
}

//! Panic containment: a panic inside one run is caught at the run's
//! boundary ([`Engine::run_in`], [`Engine::resume_in`]) and ends that run,
//! not the task driving it.
//!
//! # Why at the run's boundary
//!
//! A queue worker drives one run after another. A run that panicked (a
//! setting that overflowed, a bug) used to unwind through the worker and
//! end it: three such runs stopped both workers of a server, a healthy
//! agent's queued run then waited forever, and after a restart the same
//! runs panicked again. Caught here, a panic ends its own run honestly:
//!
//! | the run when it panicked | what happens |
//! | --- | --- |
//! | not recorded yet | [`EngineError::Internal`]: nothing ran |
//! | `queued` (it never started) | closed `failed`, `error_type` `internal`; nothing to settle |
//! | `running` | its claim is taken back (it is this process's), its effects settle like any failed run's, and it ends `failed` (or `handed_off` when a human must decide), `error_type` `internal`, with a report derived from its ledger |
//! | finished | its report as recorded |
//!
//! A panic is not retried: a deterministic bug would panic on every
//! delivery. If the settlement itself panics, the run is closed without
//! it, and its records are left to the reconciler (the report says which).
//!
//! The settlement after a panic gets the agent's compensation reserve of
//! its wall clock, at least [`MIN_CONTAINED_SETTLEMENT`]: the run's own
//! deadline was lost with the panic.

use rein_core::Timestamp;
use std::any::Any;
use std::collections::HashMap;
use std::time::Duration;

use rein_core::deadline::Deadline;
use rein_core::event::RunFailed;
use rein_core::report::{End, INTERNAL};
use rein_core::{Clock, Outcome, RunId, RunReport};
use rein_store::{LeaseKind, RunRecord, RunStatus, StoreExt};

use super::close::{Closing, close_run, closing_commit};
use super::emitter::{Correlation, Emitter, unix_ms};
use super::{
    AgentBinding, ArgValidator, CancellationToken, Engine, EngineError, Lineage, ModelRetryUse,
    RunCtx, RunOutput, claim_id, report,
};

/// The least time the settlement of a run that panicked gets.
pub const MIN_CONTAINED_SETTLEMENT: Duration = Duration::from_secs(1);

/// The message of a caught panic.
pub(super) fn message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

impl Engine {
    /// Ends `run_id` after a panic inside it (see the module docs).
    ///
    /// # Errors
    ///
    /// [`EngineError::Internal`] when the run was never recorded, or its
    /// end cannot be recorded.
    pub(super) async fn contain(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        message: String,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        tracing::error!(run = %run_id, agent = %agent.name, "the run panicked: {message}");
        let Some(record) = self.store.get_run(run_id).await? else {
            return Err(internal(run_id, message));
        };
        let at_ms = unix_ms(self.clock.system_now());
        if let Some(ended) = self.end_unstarted(&record, &message, at_ms).await {
            return ended;
        }
        let owner = match self.own_claim(run_id).await {
            Some(owner) => owner,
            None => self.claim(run_id, self.claim_hold(agent)).await?,
        };
        let lost = CancellationToken::new();
        let _heartbeat = self.heartbeat(run_id, &owner, &lost, None);
        let ctx = self.settling_ctx(&record, agent, validator, owner, lost, lineage);
        let end = End::Internal(message.clone());
        let mut facts = report::stored_facts(self.store.as_ref(), &record, end, at_ms).await?;
        facts.strategies_not_tried = report::strategies_not_tried(agent);
        let step = facts.steps;
        ctx.emitter.emit(
            &Correlation {
                step,
                ..Correlation::default()
            },
            RunFailed {
                error_type: INTERNAL.to_owned(),
                reason: message.clone(),
            },
        );
        let reserve = agent
            .compensation_reserve
            .of_duration(agent.budget.wall_clock())
            .max(MIN_CONTAINED_SETTLEMENT);
        let now = self.clock.now();
        let deadline = Deadline::after(now, reserve);
        let elapsed_before_ms = facts.elapsed_ms;
        use futures_util::FutureExt as _;
        // AssertUnwindSafe: sound for the reasons given in `Engine::run_in`;
        // `ctx` is this function's own, and after a second panic only the
        // store is read again.
        let concluded = std::panic::AssertUnwindSafe(self.conclude(
            &ctx,
            facts,
            deadline,
            step,
            now,
            elapsed_before_ms,
        ))
        .catch_unwind()
        .await;
        match concluded {
            Ok(concluded) => concluded,
            Err(again) => {
                let again = self::message(&*again);
                self.close_unsettled(&ctx, record, &message, again).await
            }
        }
    }

    /// The end of a run that panicked before it started or after it ended,
    /// with nothing to settle; `None` when it was running.
    async fn end_unstarted(
        &self,
        record: &RunRecord,
        message: &str,
        at_ms: Timestamp,
    ) -> Option<Result<RunOutput, EngineError>> {
        let run_id = &record.run_id;
        match record.status {
            RunStatus::Finished(_) => Some(match &record.report {
                Some(report) => Ok(output(run_id, report.clone())),
                None => Err(internal(run_id, message.to_owned())),
            }),
            RunStatus::Queued => {
                // It never started: nothing happened, nothing to settle.
                let closing = Closing {
                    outcome: Outcome::Failed,
                    end: End::Internal(message.to_owned()),
                    events: Vec::new(),
                    expect: Some(RunStatus::Queued),
                };
                let closed = close_run(self.store.as_ref(), record, closing, at_ms).await;
                self.release_own_claim(run_id).await;
                Some(closed.map(|report| output(run_id, report)).map_err(|e| {
                    internal(run_id, format!("{message}; its end was not recorded: {e}"))
                }))
            }
            _ => None,
        }
    }

    /// The context the settlement of a run that panicked runs in: the run's
    /// own, rebuilt from its record, under this process's claim.
    fn settling_ctx<'a>(
        &'a self,
        record: &RunRecord,
        agent: &'a AgentBinding,
        validator: &'a dyn ArgValidator,
        claim_owner: String,
        lost: CancellationToken,
        lineage: Lineage,
    ) -> RunCtx<'a> {
        let run_id = &record.run_id;
        RunCtx {
            run_id: run_id.clone(),
            tenant: record.tenant.clone(),
            input: record.input.clone(),
            agent,
            store: &self.store,
            emitter: Emitter::new(run_id.clone(), self.clock.clone(), None).with_metrics(
                self.shared.metrics.clone(),
                self.shared
                    .metrics
                    .scope(record.tenant.as_str(), &agent.name),
            ),
            provider_calls: std::sync::atomic::AtomicU32::new(0),
            last_input_tokens: std::sync::atomic::AtomicU64::new(0),
            model_failures: Default::default(),
            cancel: CancellationToken::new(),
            lost,
            // Settling a run that panicked finishes even while the process
            // stops: it is never handed on half-settled.
            interrupt: CancellationToken::new(),
            store_away: std::sync::Mutex::new(None),
            claim_owner,
            settling: std::sync::atomic::AtomicBool::new(false),
            validator,
            lineage,
            child_usage: std::sync::Mutex::new(HashMap::new()),
            models: std::sync::Mutex::new(Vec::new()),
            model_retries: ModelRetryUse::default(),
            retries: super::ctx::Retries::default(),
        }
    }

    /// The settlement panicked too (with message `again`): closes the run as
    /// it stands, its records left to the reconciler (unless it ended
    /// meanwhile).
    async fn close_unsettled(
        &self,
        ctx: &RunCtx<'_>,
        record: RunRecord,
        message: &str,
        again: String,
    ) -> Result<RunOutput, EngineError> {
        let run_id = &ctx.run_id;
        tracing::error!(run = %run_id, "settling the run that panicked panicked too: {again}");
        let closing = Closing {
            outcome: Outcome::Failed,
            end: End::Internal(format!(
                "{message}; settling it failed too ({again}), its records are left to the reconciler"
            )),
            events: Vec::new(),
            expect: None,
        };
        let at_ms = unix_ms(self.clock.system_now());
        let record = self.store.get_run(run_id).await?.unwrap_or(record);
        if record.status.is_finished() {
            self.release_own_claim(run_id).await;
            return record
                .report
                .map(|report| output(run_id, report))
                .ok_or_else(|| internal(run_id, message.to_owned()));
        }
        let (commit, report) = closing_commit(self.store.as_ref(), &record, closing, at_ms).await?;
        let events = commit.events.clone();
        let closed = self.commit(ctx, commit).await;
        self.release_own_claim(run_id).await;
        closed
            .map_err(|e| internal(run_id, format!("{message}; its end was not recorded: {e}")))?;
        // Stored, so announced: the metrics count its handoff package
        // (`rein_handoffs_total`) and its end like any run's; the closing
        // commit is written past the emitter, which alone counts.
        ctx.emitter.announce(&events);
        Ok(output(run_id, report))
    }

    /// The owner of this process's claim on `run_id`, if this process holds
    /// it: the claim the run that panicked took, which nobody renews now.
    async fn own_claim(&self, run_id: &RunId) -> Option<String> {
        use crate::lease::Owner;
        let me = Owner::current();
        self.store
            .leases_of_run(run_id)
            .await
            .ok()?
            .into_iter()
            .find(|l| l.kind == LeaseKind::Run && Owner::parse(&l.owner).as_ref() == Some(&me))
            .map(|l| l.owner)
    }

    /// Releases this process's claim on `run_id`, if it holds one.
    async fn release_own_claim(&self, run_id: &RunId) {
        if let Some(owner) = self.own_claim(run_id).await
            && let Err(e) = self.store.release_lease_of(&claim_id(run_id), &owner).await
        {
            tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
        }
    }
}

/// The end of a run that panicked, when it cannot be recorded.
fn internal(run_id: &RunId, message: String) -> EngineError {
    EngineError::Internal {
        run_id: run_id.clone(),
        message,
    }
}

/// The output of a contained run: its report; never interrupted.
fn output(run_id: &RunId, report: RunReport) -> RunOutput {
    RunOutput {
        run_id: run_id.clone(),
        report,
        interrupted: false,
        awaiting_approval: Vec::new(),
    }
}

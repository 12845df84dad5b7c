//! The end of a run this process drives: settlement, report, final record.

use rein_core::event::PartialSuccessReturned;
use rein_core::{Clock, LedgerRecord, Outcome, RunId, RunReport};
use rein_store::{RunStatus, StatusChange, StepCommit, StoreError};

use super::ctx::RunCtx;
use super::emitter::{Correlation, unix_ms};
use super::engine::Engine;
use super::error::EngineError;
use super::guarded::millis;
use super::start::RunOutput;
use super::{End, close, report};

/// How often the end of a run is offered to a store that is briefly
/// unavailable, and the first pause (doubled each time): the one write
/// that must land, or the run stays `running` until an orphan sweep.
pub(super) const END_COMMIT_TRIES: u32 = 6;
pub(super) const END_COMMIT_FIRST_PAUSE: std::time::Duration = std::time::Duration::from_millis(20);

impl Engine {
    /// The end of a run this process drives, from `facts` (why it stopped,
    /// its calls, what it consumed): its settlement, decided on the calls
    /// and the ledger as they stand; its report derived from the ledger
    /// afterwards; its final record; its claim released.
    ///
    /// # Errors
    ///
    /// [`EngineError::Store`] when the ledger cannot be read (before the
    /// settlement, or for the report after it) or the run's end cannot be
    /// recorded: the run stays `running` with its claim released, to be
    /// recovered, rather than end with a report that does not say what its
    /// ledger says.
    pub(super) async fn conclude(
        &self,
        ctx: &RunCtx<'_>,
        mut facts: rein_core::report::RunFacts,
        full_deadline: rein_core::deadline::Deadline,
        step: u32,
        started: rein_core::Instant,
        elapsed_before_ms: u64,
    ) -> Result<RunOutput, EngineError> {
        let run_id = ctx.run_id.clone();
        let end = facts.end.clone();
        let lost = |mut report: RunReport| {
            // Another process took the run over and drives it now: no
            // settlement, no status, no release from here.
            report.summary = format!(
                "This process lost its claim on the run to another process, which continues it. {}",
                report.summary
            );
            RunOutput {
                run_id: run_id.clone(),
                report,
                interrupted: false,
                awaiting_approval: Vec::new(),
            }
        };
        if ctx.lost.is_cancelled() {
            return Ok(lost(rein_core::report::derive(&facts, &[])));
        }
        // What the calls and the ledger say before anything is settled: what
        // the settlement decides on (a record of a step cut before its
        // checkpoint is in the ledger only). The report itself is derived
        // once, after.
        let ledger = match self.read_ledger(&run_id).await {
            Ok(ledger) => ledger,
            Err(e) => return Err(self.unrecorded(ctx, "its ledger cannot be read", e).await),
        };
        let before = rein_core::report::derive(&facts, &ledger);
        let settlement = self.settle(ctx, &end, &before, full_deadline, step).await;
        crate::crash::panic_point("after_settlement", &ctx.agent.name);
        if settlement.lost {
            return Ok(lost(before));
        }
        facts.settled = settlement.settled;
        facts.compensations = settlement.compensations;
        facts.in_flight = settlement.in_flight;
        facts.elapsed_ms =
            elapsed_before_ms + millis(self.clock.now().saturating_duration_since(started));
        // Events of the settlement, recorded with the end.
        let pending = ctx.emitter.drain();
        let at_ms = unix_ms(self.clock.system_now());
        let reading = self.clock.now();
        let mut reads = 0u32;
        let mut attempt = 0;
        while attempt < END_COMMIT_TRIES {
            attempt += 1;
            // The revision first, then the ledger as the settlement left it
            // (every effect with its status now): the end is recorded only
            // if no record changed in between (a reconciler marking one),
            // else the report is derived again.
            let derived = async {
                let revision = self
                    .store
                    .get_run(&run_id)
                    .await?
                    .ok_or_else(|| StoreError::NotFound {
                        what: "run",
                        id: run_id.to_string(),
                    })?
                    .ledger_revision;
                let ledger = report::tree_records(self.store.as_ref(), &run_id).await?;
                Ok::<_, StoreError>((revision, rein_core::report::derive(&facts, &ledger)))
            };
            let (revision, report) = match derived.await {
                Ok(derived) => derived,
                // Read again for as long as a commit is offered again
                // (`Engine::commit`): the end is not given up for a blink.
                Err(e)
                    if e.is_transient()
                        && self.clock.now().saturating_duration_since(reading)
                            < self.store_patience =>
                {
                    reads += 1;
                    tracing::warn!(run = %run_id, attempt, reads, "the ledger cannot be read for the report yet: {e}");
                    self.clock.sleep(super::durable::pause_cap(reads)).await;
                    // A read put off is no attempt at the end commit.
                    attempt -= 1;
                    continue;
                }
                Err(e) => return Err(self.unrecorded(ctx, "its ledger cannot be read", e).await),
            };
            let finals = self.final_events(ctx, &facts, &report, step);
            let commit = StepCommit {
                status: Some(StatusChange {
                    status: RunStatus::Finished(report.outcome),
                    report: Some(report.clone()),
                    at_ms,
                }),
                events: pending
                    .iter()
                    .cloned()
                    .chain(finals.iter().cloned())
                    .collect(),
                expect_ledger_revision: Some(revision),
                ..StepCommit::default()
            };
            // Offered again while the store is briefly away
            // (`Engine::commit`); `pending` is kept here and the finals are
            // derived again on a moved ledger.
            let committed = self.commit(ctx, commit).await;
            if committed.is_err() {
                drop(ctx.emitter.drain());
            }
            match committed {
                Ok(committed) => {
                    ctx.emitter.announce(&finals);
                    self.observe_budget_use(ctx, &facts);
                    self.release_claim(ctx).await;
                    return Ok(RunOutput {
                        run_id,
                        // As stored: with the ledger revision it reflects.
                        report: committed.run.and_then(|r| r.report).unwrap_or(report),
                        interrupted: false,
                        awaiting_approval: Vec::new(),
                    });
                }
                Err(StoreError::LedgerChanged { .. }) if attempt < END_COMMIT_TRIES => {
                    tracing::info!(run = %run_id, attempt, "the ledger changed while the run ended; deriving its report again");
                }
                Err(StoreError::ClaimLost { .. }) => return Ok(lost(report)),
                Err(e) => {
                    ctx.emitter.requeue(pending);
                    return Err(self.unrecorded(ctx, "its end cannot be recorded", e).await);
                }
            }
        }
        unreachable!("the last attempt returns")
    }

    /// For a run a budget stopped: the share of the ceiling that stopped
    /// it which it had used (`rein_budget_used_ratio`), the measure of
    /// what a cautious ceiling leaves unspent.
    fn observe_budget_use(&self, ctx: &RunCtx<'_>, facts: &rein_core::report::RunFacts) {
        use rein_core::deadline::Dimension;
        let dimension = match &facts.end {
            End::Budget(exhausted) => exhausted.dimension,
            End::FinalTurn { short, .. } => short.dimension,
            _ => return,
        };
        let limits = &ctx.agent.budget;
        #[allow(clippy::cast_precision_loss)]
        let share = match dimension {
            Dimension::WallClock => {
                let wall = limits.wall_clock().as_millis().max(1) as f64;
                facts.elapsed_ms as f64 / wall
            }
            Dimension::Steps => match limits.steps() {
                Some(n) => f64::from(facts.steps) / f64::from(n.max(1)),
                None => return,
            },
            Dimension::Tokens => match limits.tokens() {
                Some(n) => facts.consumed.tokens as f64 / n.max(1) as f64,
                None => return,
            },
            Dimension::Cost => match limits.cost() {
                Some(c) => facts.consumed.cost.micros() as f64 / c.micros().max(1) as f64,
                None => return,
            },
        };
        let metrics = self.metrics();
        metrics.budget_used(
            &metrics.scope(ctx.tenant.as_str(), &ctx.agent.name),
            &dimension.to_string(),
            share,
        );
    }

    /// The ledger records of `run_id`'s tree, read again while the store
    /// is briefly unavailable (as the end commit is offered again).
    pub(super) async fn read_ledger(
        &self,
        run_id: &RunId,
    ) -> Result<Vec<LedgerRecord>, StoreError> {
        let began = self.clock.now();
        let mut attempt = 1;
        loop {
            match report::tree_records(self.store.as_ref(), run_id).await {
                // For as long as a commit is offered again
                // (`Engine::commit`): the end is not given up for a blink.
                Err(e)
                    if e.is_transient()
                        && self.clock.now().saturating_duration_since(began)
                            < self.store_patience =>
                {
                    tracing::warn!(run = %run_id, attempt, "the ledger cannot be read yet: {e}");
                    self.clock.sleep(super::durable::pause_cap(attempt)).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// The events that end a run with `report`: the handoff package when
    /// a human has it, the partial success, and the terminal
    /// `run_finished`; built, not emitted, so that a report derived again
    /// is not announced twice ([`Emitter::announce`] once they are stored).
    pub(super) fn final_events(
        &self,
        ctx: &RunCtx<'_>,
        facts: &rein_core::report::RunFacts,
        report: &RunReport,
        step: u32,
    ) -> Vec<rein_core::Event> {
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        let mut events = Vec::new();
        if matches!(facts.settled, rein_core::report::Settled::HandedOff(_)) {
            events.push(ctx.emitter.event(&c, close::handoff_data(report)));
        }
        if report.outcome == Outcome::PartialSuccess {
            events.push(ctx.emitter.event(
                &c,
                PartialSuccessReturned {
                    completed: report.completed.len(),
                    incomplete: report.incomplete.len(),
                    recoverable: report.recoverable,
                },
            ));
        }
        events.push(ctx.emitter.event(&c, close::run_finished(report, step)));
        events
    }

    /// The error of a run whose end cannot be recorded (`why`): it stays
    /// `running`, its claim released so that recovery takes it at once.
    pub(super) async fn unrecorded(
        &self,
        ctx: &RunCtx<'_>,
        why: &str,
        e: StoreError,
    ) -> EngineError {
        tracing::error!(run = %ctx.run_id, "the run's end is not recorded: {why}: {e}");
        self.release_claim(ctx).await;
        EngineError::Store(e)
    }
}

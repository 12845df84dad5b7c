//! Handing an interrupted run on, unfinished, to whoever continues it.

use rein_core::RunReport;
use rein_core::event::RunInterrupted;
use rein_store::StepCommit;

use super::claim::claim_id;
use super::conclude::{END_COMMIT_FIRST_PAUSE, END_COMMIT_TRIES};
use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::Engine;
use super::start::RunOutput;

/// Who continues the runs [`Engine::interrupt`] stops: recorded with each
/// run's `run_interrupted` event, read by the servers sharing the store
/// before they take a run over. Defined with the event it is recorded in.
pub use rein_core::event::HandOn;

impl Engine {
    /// Hands an interrupted run on: records that it stopped at a safe
    /// point (with the events of its cut step), leaves it `running`, and
    /// releases its claim so that another process takes it over at once
    /// rather than when the claim expires.
    pub(super) async fn hand_on(
        &self,
        ctx: &RunCtx<'_>,
        mut report: RunReport,
        step: u32,
        completed_steps: u32,
    ) -> RunOutput {
        let run_id = ctx.run_id.clone();
        let to = self
            .shared
            .hand_on
            .get()
            .copied()
            .unwrap_or(HandOn::AnyWorker);
        // Stopped for the store (it stayed away), or because the process
        // is stopping: the same safe point, said as it is.
        let store_away = ctx.store_away();
        let reason = match &store_away {
            Some(_) => "the run store is unavailable".to_owned(),
            None => "its process is stopping".to_owned(),
        };
        ctx.emitter.emit(
            &Correlation {
                step,
                ..Correlation::default()
            },
            RunInterrupted {
                reason: reason.clone(),
                handed_on: to == HandOn::AnyWorker,
                continue_with: Some(to),
                resumable: true,
                completed_steps,
            },
        );
        let events = ctx.emitter.drain();
        let mut pause = END_COMMIT_FIRST_PAUSE;
        for attempt in 1..=END_COMMIT_TRIES {
            let commit = StepCommit {
                events: events.clone(),
                ..StepCommit::default()
            };
            match ctx.commit_once(commit).await {
                Ok(_) => break,
                Err(e) if e.is_transient() && attempt < END_COMMIT_TRIES => {
                    self.clock.sleep(pause).await;
                    pause *= 2;
                }
                Err(e) => {
                    tracing::error!(run = %run_id, "cannot record the run's interruption: {e}");
                    break;
                }
            }
        }
        if !ctx.lost.is_cancelled()
            && let Err(e) = ctx
                .store
                .release_lease_of(&claim_id(&run_id), &ctx.claim_owner)
                .await
        {
            tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
        }
        report.recoverable = true;
        report.recommendation =
            "resume it: it stopped at a safe point and nothing it did is repeated".into();
        let next = match to {
            HandOn::AnyWorker => "its claim released for another process to continue it",
            HandOn::Caller => "its claim released; it continues when it is resumed",
        };
        report.summary = match &store_away {
            Some(error) => format!(
                "The run stopped at a safe point because the run store stayed unavailable ({error}); it is not finished, and nothing it did is lost: what the store did not take is written when it is back, or found by reconciliation. It is still running in the store, resumable, {next}. So far: {}",
                report.summary
            ),
            None => format!(
                "The run was interrupted because its process is stopping; it is not finished. It is still running in the store, resumable, {next}. So far: {}",
                report.summary
            ),
        };
        RunOutput {
            run_id,
            report,
            interrupted: true,
            awaiting_approval: Vec::new(),
        }
    }
}

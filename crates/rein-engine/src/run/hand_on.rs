//! Handing an interrupted run on, unfinished, to whoever continues it.

use rein_core::{EventKind, RunReport};
use rein_store::StepCommit;
use serde_json::{Value, json};

use super::claim::claim_id;
use super::conclude::{END_COMMIT_FIRST_PAUSE, END_COMMIT_TRIES};
use super::ctx::RunCtx;
use super::emitter::Correlation;
use super::engine::Engine;
use super::start::RunOutput;

/// Who continues the runs [`Engine::interrupt`] stops: recorded with each
/// run's `run_interrupted` event (`data.continue_with`), read by the
/// servers sharing the store before they take a run over.
///
/// # Why it is recorded
///
/// `rein run`, `rein resume` and `rein serve` default to the same store.
/// A server that resumed the user's Ctrl-C'd `rein run` would continue it
/// with the server's bindings and environment, and the `rein resume` the
/// user was told to type would then fail or find it done.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum HandOn {
    /// Any process sharing the store continues it at once: a draining
    /// server's runs go to its peers (or to itself, restarted).
    AnyWorker,
    /// Only an explicit resume continues it (`rein resume`, or
    /// `POST /v1/runs/{id}/resume`): a stopped `rein run` stays the user's.
    Caller,
}

impl HandOn {
    /// Its name in `run_interrupted` events.
    pub fn as_str(self) -> &'static str {
        match self {
            HandOn::AnyWorker => "any_worker",
            HandOn::Caller => "caller",
        }
    }

    /// Reads a `run_interrupted` event's data: `continue_with`, or, for
    /// events written before it existed, `handed_on: true` as
    /// [`HandOn::AnyWorker`].
    pub fn of_event(data: &Value) -> Option<HandOn> {
        match data.get("continue_with").and_then(Value::as_str) {
            Some("any_worker") => Some(HandOn::AnyWorker),
            Some("caller") => Some(HandOn::Caller),
            Some(_) => None,
            None => {
                (data.get("handed_on") == Some(&Value::Bool(true))).then_some(HandOn::AnyWorker)
            }
        }
    }
}

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
        ctx.emitter.emit(
            EventKind::RunInterrupted,
            &Correlation {
                step,
                ..Correlation::default()
            },
            json!({"reason": "its process is stopping", "handed_on": to == HandOn::AnyWorker,
                   "continue_with": to.as_str(), "resumable": true,
                   "completed_steps": completed_steps}),
        );
        let mut pause = END_COMMIT_FIRST_PAUSE;
        for attempt in 1..=END_COMMIT_TRIES {
            let commit = StepCommit {
                events: ctx.emitter.drain(),
                ..StepCommit::default()
            };
            match ctx.commit(commit).await {
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
        report.summary = format!(
            "The run was interrupted because its process is stopping; it is not finished. It is still running in the store, resumable, {next}. So far: {}",
            report.summary
        );
        RunOutput {
            run_id,
            report,
            interrupted: true,
        }
    }
}

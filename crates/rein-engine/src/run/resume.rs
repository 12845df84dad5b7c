//! Resuming a run from what the store holds of it.

use rein_core::event::RunResumed;
use rein_core::outcome::ContractPolicy;
use rein_core::{Clock, Outcome, RunId};
use rein_store::{RunRecord, RunStatus, StatusChange, StepCommit, StoreError};
use tokio_util::sync::CancellationToken;

use super::child_stack::OnEnoughStack;
use super::claim::{ClaimGuard, claim_id};
use super::ctx::{Lineage, RunCtx, Taken};
use super::emitter::{Correlation, Emitter, Observer, unix_ms};
use super::engine::Engine;
use super::error::EngineError;
use super::restore::{RestoreError, Restored, Stored, restore};
use super::start::RunOutput;
use super::step::LoopState;
use super::{AgentBinding, ArgValidator, contain};

impl Engine {
    /// Continues a run that stopped mid-way (its process crashed or was
    /// killed) from its last checkpoint, with what is left of its budget.
    ///
    /// Completed steps are not run again. The interrupted step's persisted
    /// plan is replayed with its original intent ids and idempotency keys:
    /// an effect already recorded is not repeated, an idempotent write in
    /// doubt runs again with its key (the tool deduplicates), an
    /// irreversible call in doubt is never repeated. The report carries a
    /// [`ResumeMarker`](rein_core::outcome::ResumeMarker).
    ///
    /// # Errors
    ///
    /// [`EngineError::NotResumable`] for an unknown or finished run, one of
    /// another agent, or one whose checkpoint does not decode (the reason
    /// names the field; its claim is released before the error returns);
    /// [`EngineError::Store`] when its state cannot be read.
    pub async fn resume(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
    ) -> Result<RunOutput, EngineError> {
        let lineage = self.lineage_of(run_id).await?;
        let output = OnEnoughStack::new(self.resume_in(
            agent,
            validator,
            run_id,
            observer,
            None,
            self.retry_timing,
            lineage,
        ))
        .await;
        self.flush_learned().await;
        output
    }

    /// [`Engine::resume`], cancellable like a run started with
    /// [`RunRequest::cancel`](super::RunRequest::cancel).
    ///
    /// # Errors
    ///
    /// As [`Engine::resume`].
    pub async fn resume_cancellable(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
    ) -> Result<RunOutput, EngineError> {
        self.resume_timed(
            agent,
            validator,
            run_id,
            observer,
            cancel,
            self.retry_timing,
        )
        .await
    }

    /// [`Engine::resume_cancellable`] with this resume's own
    /// [`RetryTiming`](super::RetryTiming) in place of the engine's: a
    /// server resumes one run `now` at its caller's word (`{"now": true}`)
    /// while every other resume waits.
    ///
    /// # Errors
    ///
    /// As [`Engine::resume`].
    pub async fn resume_timed(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
        timing: super::RetryTiming,
    ) -> Result<RunOutput, EngineError> {
        let lineage = self.lineage_of(run_id).await?;
        let output = OnEnoughStack::new(
            self.resume_in(agent, validator, run_id, observer, cancel, timing, lineage),
        )
        .await;
        self.flush_learned().await;
        output
    }

    /// A resume at its place in an agent tree, within the same panic
    /// boundary as [`Engine::run_in`].
    #[allow(clippy::too_many_arguments)] // each is one aspect of the resume
    pub(crate) async fn resume_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
        timing: super::RetryTiming,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        use futures_util::FutureExt as _;
        // AssertUnwindSafe: sound for the reasons given in `run_in`.
        let resumed = std::panic::AssertUnwindSafe(self.continue_in(
            agent,
            validator,
            run_id,
            observer,
            cancel,
            timing,
            lineage.clone(),
        ))
        .catch_unwind()
        .await;
        match resumed {
            Ok(result) => result,
            Err(panic) => {
                self.contain(agent, validator, run_id, contain::message(&*panic), lineage)
                    .await
            }
        }
    }

    /// [`Engine::resume_in`] without the panic boundary.
    #[allow(clippy::too_many_arguments)] // as `resume_in`
    pub(super) async fn continue_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
        timing: super::RetryTiming,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        if self.is_interrupted() {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "this process is stopping".into(),
            });
        }
        let Some(mut record) = self.store.get_run(run_id).await? else {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "no such run".into(),
            });
        };
        if record.status == RunStatus::AwaitingApproval {
            // Without a server on its store nobody swept its expiries:
            // windows that closed are recorded now, which continues the
            // run when none of its calls still waits.
            self.store
                .expire_approvals(
                    unix_ms(self.clock.system_now()),
                    rein_store::approval::MAX_APPROVALS_PAGE,
                )
                .await?;
            if let Some(now) = self.store.get_run(run_id).await? {
                record = now;
            }
        }
        let reopen = admit(&record, agent).map_err(|reason| EngineError::NotResumable {
            run_id: run_id.clone(),
            reason,
        })?;
        let owner = self.claim(run_id, self.claim_hold(agent)).await?;
        // Any early return from here until the resume is recorded lets the
        // claim go, so a store hiccup does not lock the run out until the
        // claim expires.
        let mut claimed = ClaimGuard {
            store: self.store.clone(),
            lease_id: claim_id(run_id),
            owner: owner.clone(),
            armed: true,
        };
        // Under the claim the status is authoritative (an owner records a
        // run's end before it lets its claim go): a run that ended or was
        // resumed by someone else between the read above and the claim is
        // left alone.
        let now_status = self.store.get_run(run_id).await?.map(|r| r.status);
        if now_status != Some(record.status) {
            claimed.armed = false;
            if let Err(e) = self.store.release_lease_of(&claim_id(run_id), &owner).await {
                tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
            }
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: format!(
                    "it changed while it was being claimed (it is now {})",
                    now_status.map_or("gone", RunStatus::as_str)
                ),
            });
        }
        let lost = CancellationToken::new();
        let cancel = cancel.unwrap_or_default();
        let _heartbeat = self.heartbeat(run_id, &owner, &lost, Some(&cancel));
        // Whatever the crashed process started (a command's process group,
        // its temp dir) is ended before anything is replayed or settled, so
        // a forward effect cannot land after its own compensation.
        let reaped = crate::lease::Reaper::new()
            .with_clock(self.clock.clone())
            .reap_run(self.store.as_ref(), run_id)
            .await?;
        let checkpoint = self.store.latest_checkpoint(run_id).await?;
        let events = self.store.events(run_id, 0).await?;
        let contract_changed = contract_change(&events, agent);
        if let (Some(change), ContractPolicy::Refuse) = (&contract_changed, self.contract_change) {
            claimed.armed = false;
            if let Err(e) = self.store.release_lease_of(&claim_id(run_id), &owner).await {
                tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
            }
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: format!(
                    "what its model is shown changed since it started (system prompt or tool definitions: {} then, {} now), and changed contracts are refused",
                    change.was, change.now
                ),
            });
        }
        let stored = Stored {
            record: &record,
            checkpoint: checkpoint.as_ref(),
            intents: self.store.intents(run_id).await?,
            ledger: self.store.ledger(run_id).await?,
            events: &events,
            at_ms: unix_ms(self.clock.system_now()),
        };
        let restored = match restore(stored, agent, self.clock.now()) {
            Ok(restored) => restored,
            Err(e) => {
                // Not resumable as it is stored: the claim goes at once, so
                // the caller's next look finds the run as it was.
                claimed.armed = false;
                if let Err(e) = self.store.release_lease_of(&claim_id(run_id), &owner).await {
                    tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
                }
                return Err(match e {
                    RestoreError::NotResumable { reason } => EngineError::NotResumable {
                        run_id: run_id.clone(),
                        reason,
                    },
                    RestoreError::Config(e) => EngineError::Config(e),
                });
            }
        };
        let Restored {
            mut state,
            resumed,
            settling,
            served,
            last_input_tokens,
            model_retries,
            models,
            retried,
        } = restored;
        // What its report said to retry is sent once its wait is over, or
        // now when the operator says so.
        let retry_now = timing == super::RetryTiming::Now;
        if let Some(wait) = retried.as_ref().and_then(|r| r.wait.as_ref())
            && !retry_now
        {
            claimed.armed = false;
            if let Err(e) = self.store.release_lease_of(&claim_id(run_id), &owner).await {
                tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
            }
            return Err(EngineError::NotYet {
                run_id: run_id.clone(),
                tool: wait.tool.clone(),
                left: wait.left,
            });
        }
        if let (Some(retried), Some(marker)) = (&retried, state.resume.as_mut()) {
            marker.retried_early = retried.wait.is_some();
        }
        if let Some(change) = contract_changed {
            tracing::warn!(
                run = %run_id,
                "resuming under a changed contract ({} then, {} now)",
                change.was,
                change.now
            );
            if let Some(marker) = state.resume.as_mut() {
                marker.contract_changed = Some(change);
            }
        }
        agent
            .provider
            .resume_at(usize::try_from(served).unwrap_or(usize::MAX));
        let mut ctx = RunCtx::taken(Taken {
            run_id: run_id.clone(),
            tenant: record.tenant.clone(),
            input: record.input.clone(),
            agent,
            store: &self.store,
            emitter: self.resumed_emitter(&record, &agent.name, observer),
            validator,
            lineage,
            claim_owner: owner,
            cancel,
            lost,
            interrupt: &self.shared.interrupt,
        });
        // Where the restored run had got to with its models.
        ctx.provider_calls =
            std::sync::atomic::AtomicU32::new(u32::try_from(served).unwrap_or(u32::MAX));
        ctx.last_input_tokens = std::sync::atomic::AtomicU64::new(last_input_tokens);
        ctx.models = std::sync::Mutex::new(models);
        ctx.model_retries = model_retries;
        if let Some(retried) = retried {
            ctx.retries = super::ctx::Retries {
                intents: retried.intents.into_iter().collect(),
                now: retry_now,
            };
        }
        let _live = self.shared.live.register(run_id, &ctx.cancel);
        // Not resumed on an error: the guard lets the claim go.
        self.record_resume(&ctx, &state, record.status, reopen, &reaped)
            .await?;
        claimed.armed = false;
        self.drive(&ctx, validator, state, resumed, settling).await
    }
}

impl Engine {
    /// Records that the run resumed (`run_resumed`, status `running`),
    /// atomically with the claim check: only while its status is still
    /// `was`.
    async fn record_resume(
        &self,
        ctx: &RunCtx<'_>,
        state: &LoopState,
        was: RunStatus,
        reopen: bool,
        reaped: &crate::lease::ReapReport,
    ) -> Result<(), EngineError> {
        // `restore` marks every state it returns; only a fresh run's state
        // has no marker, and a fresh run is not resumed.
        if let Some(marker) = &state.resume {
            ctx.emitter.emit(
                &Correlation {
                    step: state.step,
                    ..Correlation::default()
                },
                RunResumed {
                    marker: marker.clone(),
                    remaining: state.budget.remaining(state.started),
                    reclaimed_leases: reaped.reclaimed.len(),
                    leases_left: reaped.skipped.len(),
                },
            );
        }
        let commit = StepCommit {
            reopen,
            // Atomic with the claim check: nobody changed it since.
            expect_status: Some(was),
            status: Some(StatusChange {
                status: RunStatus::Running,
                report: None,
                at_ms: unix_ms(self.clock.system_now()),
            }),
            events: ctx.emitter.drain(),
            // The run's first span, unless an earlier drive stored one (a
            // run first driven with traces off, or by an older rein).
            first_span: ctx.emitter.trace().and_then(|t| t.root_span()),
            ..StepCommit::default()
        };
        match self.store.commit_step(&ctx.run_id, commit).await {
            Ok(_) => Ok(()),
            Err(StoreError::StatusChanged { .. }) => Err(EngineError::NotResumable {
                run_id: ctx.run_id.clone(),
                reason: "it changed while it was being resumed".into(),
            }),
            Err(other) => Err(other.into()),
        }
    }
}

/// Whether `record` may be resumed as a run of `agent`: `Ok(true)` when its
/// finished outcome is reopened, `Ok(false)` when it is still in flight,
/// else why not.
fn admit(record: &RunRecord, agent: &AgentBinding) -> Result<bool, String> {
    // A finished run continues only when its report says a retry can
    // run without repeating side effects (partial success after a
    // rate limit, a budget raised since): its outcome is reopened.
    if record.status == RunStatus::AwaitingApproval {
        return Err(format!(
            "it is waiting for a human's approval: `rein approvals list --run {run}` shows the calls, `rein approve {run} INTENT` or `rein reject {run} INTENT --reason …` decides them, and it continues once every call of its turn is decided",
            run = record.run_id
        ));
    }
    let reopen = record.status.is_finished();
    // A run that succeeded has nothing left to do: reopening it would
    // drive its last step again (a second model call, a second end).
    if record.status == RunStatus::Finished(Outcome::Succeeded) {
        return Err("it succeeded; there is nothing left to continue".into());
    }
    if reopen && !record.report.as_ref().is_some_and(|r| r.recoverable) {
        return Err(format!(
            "it ended {} and is not recoverable; its outcome is final",
            record.status.as_str()
        ));
    }
    if record.agent != agent.name {
        return Err(format!(
            "it is a run of agent `{}`, not `{}`",
            record.agent, agent.name
        ));
    }
    Ok(reopen)
}

impl Engine {
    /// Opens a run begun by a caller's own loop ([`RunHandle`](super::RunHandle))
    /// again in this process: claimed, what its dead process started
    /// reaped, its context and guards as [`Engine::open`] makes them.
    pub(super) async fn reopen<'a>(
        &'a self,
        agent: &'a AgentBinding,
        validator: &'a dyn ArgValidator,
        record: &RunRecord,
        lineage: Lineage,
    ) -> Result<super::start::Opened<'a>, EngineError> {
        let run_id = &record.run_id;
        if self.is_interrupted() {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "this process is stopping".into(),
            });
        }
        let owner = self.claim(run_id, self.claim_hold(agent)).await?;
        let mut claimed = ClaimGuard {
            store: self.store.clone(),
            lease_id: claim_id(run_id),
            owner: owner.clone(),
            armed: true,
        };
        let lost = CancellationToken::new();
        let cancel = CancellationToken::new();
        let heartbeat = self.heartbeat(run_id, &owner, &lost, Some(&cancel));
        crate::lease::Reaper::new()
            .with_clock(self.clock.clone())
            .reap_run(self.store.as_ref(), run_id)
            .await?;
        let ctx = RunCtx::taken(Taken {
            run_id: run_id.clone(),
            tenant: record.tenant.clone(),
            input: record.input.clone(),
            agent,
            store: &self.store,
            emitter: self.resumed_emitter(record, &agent.name, None),
            validator,
            lineage,
            claim_owner: owner,
            cancel,
            lost,
            interrupt: &self.shared.interrupt,
        });
        let live = self.shared.live.register(run_id, &ctx.cancel);
        claimed.armed = false;
        Ok(super::start::Opened {
            ctx,
            _heartbeat: heartbeat,
            _live: live,
        })
    }

    /// Records that a caller's loop took its run back (`run_resumed`,
    /// status `running`), atomically with the status it was read in.
    pub(super) async fn record_rejoin(
        &self,
        ctx: &RunCtx<'_>,
        record: &RunRecord,
        marker: &rein_core::outcome::ResumeMarker,
        budget: &rein_core::deadline::Budget,
    ) -> Result<(), EngineError> {
        ctx.emitter.emit(
            &Correlation::default(),
            RunResumed {
                marker: marker.clone(),
                remaining: budget.remaining(self.clock.now()),
                reclaimed_leases: 0,
                leases_left: 0,
            },
        );
        let commit = StepCommit {
            expect_status: Some(record.status),
            status: Some(StatusChange {
                status: RunStatus::Running,
                report: None,
                at_ms: unix_ms(self.clock.system_now()),
            }),
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        let recorded = self.store.commit_step(&ctx.run_id, commit).await;
        match recorded {
            Ok(_) => Ok(()),
            Err(e) => {
                self.release_claim(ctx).await;
                Err(match e {
                    StoreError::StatusChanged { .. } => EngineError::NotResumable {
                        run_id: ctx.run_id.clone(),
                        reason: "it changed while it was being taken back".into(),
                    },
                    other => other.into(),
                })
            }
        }
    }
}

impl Engine {
    /// The event emitter of a run this process takes back: its metrics
    /// scope, and a run span linked to the run's first.
    fn resumed_emitter(
        &self,
        record: &RunRecord,
        agent: &str,
        observer: Option<Observer>,
    ) -> Emitter {
        Emitter::new(record.run_id.clone(), self.clock.clone(), observer)
            .with_metrics(
                self.shared.metrics.clone(),
                self.shared.metrics.scope(record.tenant.as_str(), agent),
            )
            .with_trace(self.resumed_run_trace(record, agent))
    }
}

/// How the run's contract changed since its start (its `run_started`
/// recorded one, and `agent`'s differs); `None` when it did not, or when
/// the run started before contracts were recorded.
fn contract_change(
    events: &[rein_core::Event],
    agent: &AgentBinding,
) -> Option<rein_core::outcome::ContractChange> {
    let was = events.iter().find_map(|e| match &e.data {
        rein_core::EventData::RunStarted(started) => started.contract.clone(),
        _ => None,
    })?;
    let now = agent.contract();
    (was != now).then_some(rein_core::outcome::ContractChange { was, now })
}

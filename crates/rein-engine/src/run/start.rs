//! Starting a run: its record, its claim, its first state.

use rein_core::Timestamp;

use rein_core::deadline::Budget;
use rein_core::event::RunStarted;
use rein_core::loop_guard::LoopGuard;
use rein_core::{Clock, RunId, RunReport, TenantId};
use rein_store::{NewRun, RunStatus, StatusChange, StepCommit, StoreError};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::provider::Message;

use super::checkpoint::Checkpointed;
use super::child_stack::OnEnoughStack;
use super::claim::claim_id;
use super::ctx::{Lineage, RunCtx, Taken};
use super::emitter::{Correlation, Emitter, Observer, unix_ms};
use super::engine::{Engine, new_id};
use super::error::EngineError;
use super::progress::Progress;
use super::step::LoopState;
use super::{AgentBinding, ArgValidator, contain};

/// What a run needs besides its agent.
#[derive(Clone, Default)]
pub struct RunRequest {
    /// The run id; a new one when `None`.
    pub run_id: Option<RunId>,
    /// The tenant; `default` when `None`.
    pub tenant: Option<TenantId>,
    /// The task.
    pub input: String,
    /// Receives each event as it happens.
    pub observer: Option<Observer>,
    /// Cancels the run: its forward path stops at once (in-flight calls are
    /// aborted) and it settles like a failed run, ending `cancelled`.
    pub cancel: Option<CancellationToken>,
    /// The run was already recorded `queued` by [`Engine::enqueue`]: it is
    /// started, not created (a server accepts the work durably first, a
    /// worker drives it later).
    pub enqueued: bool,
    /// An `enqueued` run's record as the caller has just read it (a queue
    /// worker's pick, from [`RunStore::tenant_backlogs`]): the start
    /// claims the run without reading it again, one store round trip less
    /// between a queued run's pick and its start. A stale record is safe:
    /// the claim is atomic, and the start's status commit changes only a
    /// run still `queued`. `None`: the start reads it. Ignored for a new
    /// run.
    ///
    /// [`RunStore::tenant_backlogs`]: rein_store::RunStore::tenant_backlogs
    pub picked: Option<rein_store::RunRecord>,
    /// The idempotency reservation the run's creation is fenced on (a sync
    /// submission under an `Idempotency-Key`): the run is created only
    /// while the reservation is still its holder's
    /// ([`RunStore::create_run_claimed`](rein_store::RunStore::create_run_claimed)), else the run fails to start with
    /// [`StoreError::ReservationLost`] and
    /// nothing ran. Ignored for an `enqueued` run, which exists already.
    pub reservation: Option<rein_store::ReservationFence>,
    /// The caller's trace context (`traceparent`): the parent of the run's
    /// span when traces are on.
    pub trace_parent: Option<crate::telemetry::TraceParent>,
}

/// The end of a run.
#[derive(Debug, Clone)]
pub struct RunOutput {
    /// The run.
    pub run_id: RunId,
    /// Its report; provisional (what it had done, not an outcome) when
    /// `interrupted`.
    pub report: RunReport,
    /// The run did not end: [`Engine::interrupt`] stopped it at a safe
    /// point. It is still `running` in the store with its claim released,
    /// and resumable ([`Engine::resume`]) by whoever its [`HandOn`](super::HandOn) names.
    pub interrupted: bool,
    /// The run did not end: it waits, `awaiting_approval`, for a human's
    /// decision on these calls of its turn, holding no claim. Empty
    /// otherwise.
    pub awaiting_approval: Vec<rein_store::ApprovalRequest>,
}

/// A run's budgets from `started`: the forward path's (the wall clock
/// minus the compensation reserve) and the whole run's deadline, which
/// compensation may use up to.
pub(super) fn forward_budget(
    agent: &AgentBinding,
    started: rein_core::Instant,
) -> (Budget, rein_core::deadline::Deadline) {
    let full_deadline = Budget::start(agent.budget, started).deadline();
    let forward_wall = agent.budget.wall_clock()
        - agent
            .compensation_reserve
            .of_duration(agent.budget.wall_clock());
    let forward_limits = agent
        .budget
        .with_wall_clock(forward_wall)
        .unwrap_or(agent.budget);
    (Budget::start(forward_limits, started), full_deadline)
}

/// An opened run: its context, with the guards that keep its claim
/// renewed and mark it live in this process while it is held.
pub(super) struct Opened<'a> {
    pub(super) ctx: RunCtx<'a>,
    pub(super) _heartbeat: Option<super::heartbeat::Heartbeat>,
    pub(super) _live: super::tree::LiveEntry<'a>,
}

impl Engine {
    /// Records a run of `agent` as `queued`, durably, without starting it:
    /// [`Engine::run`] with [`RunRequest::enqueued`] starts it later, in
    /// this process or another one sharing the store.
    ///
    /// # Errors
    ///
    /// [`EngineError::Store`] when the store refuses the record.
    pub async fn enqueue(
        &self,
        agent: &AgentBinding,
        tenant: TenantId,
        input: String,
        run_id: Option<RunId>,
    ) -> Result<RunId, EngineError> {
        self.enqueue_run(self.queued_run(agent, tenant, input, run_id))
            .await
    }

    /// Records `run` (made by [`Engine::queued_run`], maybe with its
    /// caller's [`NewRun::trace_parent`] set) as `queued`, as
    /// [`Engine::enqueue`] does.
    ///
    /// # Errors
    ///
    /// [`EngineError::Store`] when the store refuses the record.
    pub async fn enqueue_run(&self, run: NewRun) -> Result<RunId, EngineError> {
        let run_id = run.run_id.clone();
        self.store.create_run(run).await?;
        Ok(run_id)
    }

    /// The record [`Engine::enqueue`] creates for a run of `agent`, for a
    /// caller that stores it together with something else in one write
    /// (a keyed submission: [`IdempotencyStore::submit_queued`](rein_store::IdempotencyStore::submit_queued)). A worker starts it
    /// like any enqueued run.
    pub fn queued_run(
        &self,
        agent: &AgentBinding,
        tenant: TenantId,
        input: String,
        run_id: Option<RunId>,
    ) -> NewRun {
        NewRun {
            run_id: run_id.unwrap_or_else(new_id::<RunId>),
            tenant,
            agent: agent.name.clone(),
            input,
            parent_run_id: None,
            budget: json!(agent.budget),
            created_at_ms: unix_ms(self.clock.system_now()),
            trace_parent: None,
        }
    }

    /// Runs `agent` on a task to its end.
    ///
    /// # Errors
    ///
    /// [`EngineError`] when the run cannot start (the store refuses to
    /// record it, or the agent's settings are invalid), and
    /// [`EngineError::Store`] when its end cannot be recorded (the ledger
    /// its report comes from cannot be read, or the store refuses the end):
    /// the run then exists, `running` with its claim released, and is
    /// recovered like one whose process died. Everything else that happens
    /// once it started ends in the returned report.
    pub async fn run(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        request: RunRequest,
    ) -> Result<RunOutput, EngineError> {
        let lineage = Lineage::root(super::ctx::class_of(request.enqueued));
        // A root too, on the caller's thread, whatever stack it has left.
        let output = OnEnoughStack::new(self.run_in(agent, validator, request, lineage)).await;
        // What the run observed is shared before its caller moves on (a
        // `rein run` exits right after).
        self.flush_learned().await;
        output
    }

    /// A run at its place in an agent tree. A panic inside it is caught
    /// here, at its boundary: the run ends `failed` (`error_type`
    /// `internal`) with its effects settled, and the caller (a queue
    /// worker, a parent run) lives on (see [`contain`]).
    pub(crate) async fn run_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        mut request: RunRequest,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        use futures_util::FutureExt as _;
        let run_id = request.run_id.clone().unwrap_or_else(new_id::<RunId>);
        request.run_id = Some(run_id.clone());
        // AssertUnwindSafe is sound here: nothing the run shares is left
        // half-changed by an unwind. Its mutexes are read with
        // `unwrap_or_else(PoisonError::into_inner)` and hold whole values;
        // governor permits and concurrency slots are guards dropped while
        // unwinding; its claim is released (or taken back by `contain`)
        // through the store, not through state in memory: a `ClaimGuard` is
        // one of the future's live locals, dropped by the unwinding poll
        // itself while `std::thread::panicking()` holds, so it leaves the
        // claim to `contain`; its heartbeat stops with its guard;
        // and `contain` reads the run back from the store only.
        let started =
            std::panic::AssertUnwindSafe(self.start_in(agent, validator, request, lineage.clone()))
                .catch_unwind()
                .await;
        match started {
            Ok(result) => result,
            Err(panic) => {
                self.contain(
                    agent,
                    validator,
                    &run_id,
                    contain::message(&*panic),
                    lineage,
                )
                .await
            }
        }
    }

    /// [`Engine::run_in`] without the panic boundary.
    pub(super) async fn start_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        request: RunRequest,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        crate::crash::panic_point("run_start", &agent.name);
        let run_id = request.run_id.clone().unwrap_or_else(new_id::<RunId>);
        let mut request = request;
        request.run_id = Some(run_id.clone());
        let guard = LoopGuard::new(agent.loop_guard.clone())?;
        let started = self.clock.now();
        let (budget, full_deadline) = forward_budget(agent, started);
        let at_ms = unix_ms(self.clock.system_now());
        // Queued work waits for a process that is not stopping.
        if request.enqueued && self.is_interrupted() {
            return Err(EngineError::NotResumable {
                run_id,
                reason: "this process is stopping; it stays queued".into(),
            });
        }
        let opened = self.open(agent, validator, request, lineage, at_ms).await?;
        let ctx = &opened.ctx;
        let state = LoopState {
            budget,
            full_deadline,
            started,
            elapsed_before_ms: 0,
            guard,
            messages: vec![
                Message::System {
                    content: agent.system_prompt.clone(),
                },
                Message::user(ctx.input.clone()),
            ],
            calls: Vec::new(),
            progress: Progress::new(),
            checkpointed: Checkpointed::default(),
            step: 0,
            resume: None,
        };
        self.drive(ctx, validator, state, None, None).await
    }

    /// Opens a run: its record and its claim (a new run created claimed,
    /// an enqueued one claimed), its heartbeat, its context and its
    /// `run_started`, committed while it is still `queued` (a cancellation
    /// that got there first wins). What the engine's loop and a caller's
    /// own loop ([`RunHandle`](super::RunHandle)) start from.
    pub(super) async fn open<'a>(
        &'a self,
        agent: &'a AgentBinding,
        validator: &'a dyn ArgValidator,
        request: RunRequest,
        lineage: Lineage,
        at_ms: Timestamp,
    ) -> Result<Opened<'a>, EngineError> {
        let run_id = request.run_id.clone().unwrap_or_else(new_id::<RunId>);
        let tenant = match request.tenant.clone() {
            Some(t) => t,
            None => TenantId::new("default").map_err(|e| EngineError::Http(e.to_string()))?,
        };
        let (stored_parent, owner) = self
            .record_start(agent, &request, &run_id, &tenant, &lineage, at_ms)
            .await?;
        // A queued run's caller's context, kept with it: whichever process
        // drives it now parents the run span by it.
        let parent = request.trace_parent.clone().or_else(|| {
            stored_parent
                .as_ref()
                .and_then(crate::telemetry::TraceParent::from_span)
        });
        let lost = CancellationToken::new();
        let cancel = request.cancel.unwrap_or_default();
        let heartbeat = self.heartbeat(&run_id, &owner, &lost, Some(&cancel));
        let scope = self.shared.metrics.scope(tenant.as_str(), &agent.name);
        let trace = self.run_trace(parent.as_ref(), tenant.as_str(), &agent.name);
        let ctx = RunCtx::taken(Taken {
            run_id: run_id.clone(),
            tenant,
            input: request.input.clone(),
            agent,
            store: &self.store,
            emitter: Emitter::new(run_id.clone(), self.clock.clone(), request.observer)
                .with_metrics(self.shared.metrics.clone(), scope)
                .with_trace(trace),
            validator,
            lineage,
            claim_owner: owner,
            cancel,
            lost,
            interrupt: &self.shared.interrupt,
        });
        let live = self.shared.live.register(&run_id, &ctx.cancel);
        ctx.emitter.emit(
            &Correlation::default(),
            RunStarted {
                agent: agent.name.clone(),
                model: agent.model.clone(),
                provider: agent.provider.name().to_owned(),
                budget: agent.budget,
                tools: agent.tools.keys().cloned().collect(),
                input: request.input.clone(),
                enqueued: request.enqueued,
                contract: Some(agent.contract()),
                config: self.config_source.clone(),
            },
        );
        let status = StepCommit {
            status: Some(StatusChange {
                status: RunStatus::Running,
                report: None,
                at_ms,
            }),
            events: ctx.emitter.drain(),
            // What a resume's run span links back to.
            first_span: ctx.emitter.trace().and_then(|t| t.root_span()),
            // Only a run still queued starts: a cancellation (or another
            // starter) that got there first wins, atomically.
            expect_status: Some(RunStatus::Queued),
            ..StepCommit::default()
        };
        // Offered again while the store is briefly away, like every later
        // commit of the run (`Engine::commit`): a blink at a run's start
        // must not fail its submission (a sync POST answered 503 for a run
        // that exists) nor leave it claimed and idle for a lease.
        match self.commit(&ctx, status).await {
            Ok(_) => {}
            Err(StoreError::StatusChanged { .. }) => {
                if let Err(e) = self
                    .store
                    .release_lease_of(&claim_id(&run_id), &ctx.claim_owner)
                    .await
                {
                    tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
                }
                return Err(EngineError::NotResumable {
                    run_id,
                    reason: "it stopped being queued before it started (cancelled?)".into(),
                });
            }
            Err(e) => {
                // Released, so that a worker on any node starts it as soon
                // as the store is back instead of after the claim's lease.
                if let Err(e) = self
                    .store
                    .release_lease_of(&claim_id(&run_id), &ctx.claim_owner)
                    .await
                {
                    tracing::warn!(run = %run_id, "cannot release the run's claim: {e}");
                }
                return Err(e.into());
            }
        }

        Ok(Opened {
            ctx,
            _heartbeat: heartbeat,
            _live: live,
        })
    }

    /// A new run's record, created with this process's claim on it in one
    /// write (fenced on its reservation when it has one), or an enqueued
    /// run's, checked to be a queued run of `agent` and then claimed; the
    /// caller's trace context an enqueued run was stored with, and the
    /// claim's owner.
    ///
    /// A new run is created claimed ([`Engine::claim_new`]) because it is
    /// created `queued`: unclaimed, even for a moment, it is queued work
    /// to every queue worker sharing the store. An enqueued run is that
    /// work, and is claimed as it is (whoever claims it first drives it).
    async fn record_start(
        &self,
        agent: &AgentBinding,
        request: &RunRequest,
        run_id: &RunId,
        tenant: &TenantId,
        lineage: &Lineage,
        at_ms: Timestamp,
    ) -> Result<(Option<rein_store::SpanRef>, String), EngineError> {
        if request.enqueued {
            let record = match &request.picked {
                Some(picked) if picked.run_id == *run_id => Some(picked.clone()),
                _ => self.store.get_run(run_id).await?,
            };
            match record {
                Some(record)
                    if record.status == RunStatus::Queued && record.agent == agent.name =>
                {
                    let owner = self.claim(run_id, self.claim_hold(agent)).await?;
                    Ok((record.trace_parent, owner))
                }
                Some(record) => Err(EngineError::NotResumable {
                    run_id: run_id.clone(),
                    reason: format!(
                        "it is {} (agent `{}`), not a queued run of `{}`",
                        record.status.as_str(),
                        record.agent,
                        agent.name
                    ),
                }),
                None => Err(EngineError::NotResumable {
                    run_id: run_id.clone(),
                    reason: "no such queued run".into(),
                }),
            }
        } else {
            let new = NewRun {
                run_id: run_id.clone(),
                tenant: tenant.clone(),
                agent: agent.name.clone(),
                input: request.input.clone(),
                parent_run_id: lineage.parent.clone(),
                budget: json!(agent.budget),
                created_at_ms: at_ms,
                trace_parent: request.trace_parent.as_ref().and_then(|p| p.to_span()),
            };
            let claim = self.new_claim(run_id, self.claim_hold(agent));
            let owner = self
                .claim_new(new, claim, request.reservation.as_ref())
                .await?;
            Ok((None, owner))
        }
    }
}

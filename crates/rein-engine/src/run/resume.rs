//! Resuming a run from what the store holds of it.

use std::collections::{BTreeSet, HashMap};

use rein_core::deadline::Budget;
use rein_core::loop_guard::LoopGuard;
use rein_core::{Clock, EventKind, IntentId, LedgerRecord, Outcome, RunId, ToolClass};
use rein_store::{PlannedIntent, RunStatus, StatusChange, StepCommit, StoreError};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::provider::{FinishReason, Message, ModelResponse};

use super::claim::{ClaimGuard, claim_id};
use super::ctx::{Lineage, ModelRetryUse, RunCtx};
use super::emitter::{Correlation, Emitter, Observer, unix_ms};
use super::engine::Engine;
use super::error::EngineError;
use super::guarded::CallResult;
use super::start::RunOutput;
use super::step::{LoopState, ResumedTurn};
use super::{AgentBinding, ArgValidator, End, contain, guarded};

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
    /// [`EngineError::NotResumable`] for an unknown or finished run, or one
    /// of another agent; [`EngineError::Store`] when its state cannot be read.
    pub async fn resume(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
    ) -> Result<RunOutput, EngineError> {
        let lineage = self.lineage_of(run_id).await?;
        self.resume_in(agent, validator, run_id, observer, None, lineage)
            .await
    }

    /// [`Engine::resume`], cancellable like a run started with
    /// [`RunRequest::cancel`].
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
        let lineage = self.lineage_of(run_id).await?;
        self.resume_in(agent, validator, run_id, observer, cancel, lineage)
            .await
    }

    /// A resume at its place in an agent tree, within the same panic
    /// boundary as [`Engine::run_in`].
    pub(crate) async fn resume_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
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
    pub(super) async fn continue_in(
        &self,
        agent: &AgentBinding,
        validator: &dyn ArgValidator,
        run_id: &RunId,
        observer: Option<Observer>,
        cancel: Option<CancellationToken>,
        lineage: Lineage,
    ) -> Result<RunOutput, EngineError> {
        if self.is_interrupted() {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "this process is stopping".into(),
            });
        }
        let Some(record) = self.store.get_run(run_id).await? else {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "no such run".into(),
            });
        };
        // A finished run continues only when its report says a retry can
        // run without repeating side effects (partial success after a
        // rate limit, a budget raised since): its outcome is reopened.
        let reopen = record.status.is_finished();
        // A run that succeeded has nothing left to do: reopening it would
        // drive its last step again (a second model call, a second end).
        if record.status == RunStatus::Finished(Outcome::Succeeded) {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: "it succeeded; there is nothing left to continue".into(),
            });
        }
        if reopen && !record.report.as_ref().is_some_and(|r| r.recoverable) {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: format!(
                    "it ended {} and is not recoverable; its outcome is final",
                    record.status.as_str()
                ),
            });
        }
        if record.agent != agent.name {
            return Err(EngineError::NotResumable {
                run_id: run_id.clone(),
                reason: format!(
                    "it is a run of agent `{}`, not `{}`",
                    record.agent, agent.name
                ),
            });
        }
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
        let _heartbeat = self.heartbeat(run_id, &owner, &lost);
        // Whatever the crashed process started (a command's process group,
        // its temp dir) is ended before anything is replayed or settled, so
        // a forward effect cannot land after its own compensation.
        let reaped = crate::lease::Reaper::new()
            .reap_run(self.store.as_ref(), run_id)
            .await?;
        let checkpoint = self.store.latest_checkpoint(run_id).await?;
        let intents = self.store.intents(run_id).await?;
        let ledger: HashMap<IntentId, LedgerRecord> = self
            .store
            .ledger(run_id)
            .await?
            .into_iter()
            .map(|r| (r.intent_id.clone(), r))
            .collect();
        let guard = LoopGuard::new(agent.loop_guard.clone())?;

        let events = self.store.events(run_id, 0).await?;
        let done_step = checkpoint.as_ref().map_or(0, |c| c.step);
        // A settlement that started is finished, never rolled forward.
        let settling = events
            .iter()
            .any(|e| e.kind == EventKind::SettlementStarted)
            .then(|| End::Settling("an interrupted settlement was resumed".into()));
        // What the interrupted step consumed before the crash (its model
        // turn is durable with the plan) and the time it ran: charged, so a
        // crash never refunds budget.
        let after_checkpoint: Vec<&rein_core::Event> =
            events.iter().filter(|e| e.step > done_step).collect();
        // Failed calls count too: what a cut stream consumed is charged.
        let interrupted_tokens: (u64, u64) = after_checkpoint
            .iter()
            .filter(|e| e.kind == EventKind::ModelCallFinished)
            .fold((0, 0), |(i, o), e| {
                (
                    i + e.data["usage"]["input"].as_u64().unwrap_or(0)
                        + e.data["tokens_spent"].as_u64().unwrap_or(0),
                    o + e.data["usage"]["output"].as_u64().unwrap_or(0),
                )
            });
        let last_input_tokens = events
            .iter()
            .rev()
            .find(|e| e.kind == EventKind::ModelCallFinished && e.data["ok"] == true)
            .and_then(|e| e.data["usage"]["input"].as_u64())
            .unwrap_or(0);
        let since_ms = checkpoint
            .as_ref()
            .map_or(record.created_at_ms, |c| c.at_ms);
        let interrupted_ms = after_checkpoint
            .iter()
            .map(|e| e.at_ms)
            .max()
            .map_or(0, |last| last.saturating_sub(since_ms));
        let state_json = checkpoint
            .as_ref()
            .map(|c| c.state.clone())
            .unwrap_or(Value::Null);
        let messages: Vec<Message> = checkpoint
            .as_ref()
            .and_then(|c| serde_json::from_value(c.messages.clone()).ok())
            .unwrap_or_else(|| {
                vec![
                    Message::System {
                        content: agent.system_prompt.clone(),
                    },
                    Message::User {
                        content: record.input.clone(),
                    },
                ]
            });
        let calls: Vec<CallResult> =
            serde_json::from_value(state_json["calls"].clone()).unwrap_or_default();
        let facts: BTreeSet<String> =
            serde_json::from_value(state_json["facts"].clone()).unwrap_or_default();
        let tools_tried: BTreeSet<String> =
            serde_json::from_value(state_json["tools_tried"].clone()).unwrap_or_default();
        let provider_calls = state_json["provider_calls"].as_u64().unwrap_or(0);
        let elapsed_before_ms = checkpoint.as_ref().map_or(0, |c| c.elapsed_ms) + interrupted_ms;
        let mut consumed = checkpoint.as_ref().map(|c| c.consumed).unwrap_or_default();
        consumed.tokens = consumed
            .tokens
            .saturating_add(interrupted_tokens.0 + interrupted_tokens.1);
        // At the price of the model that answered (a fallback may cost
        // more than the primary), as each call recorded it; the primary's
        // price only for calls recorded before calls carried their cost.
        let interrupted_cost = after_checkpoint
            .iter()
            .filter(|e| e.kind == EventKind::ModelCallFinished)
            .fold(rein_core::deadline::Cost::default(), |sum, e| {
                let cost = match e.data["cost_micros"].as_u64() {
                    Some(micros) => rein_core::deadline::Cost::from_micros(micros),
                    None => agent
                        .price
                        .map(|p| {
                            p.cost(
                                e.data["usage"]["input"].as_u64().unwrap_or(0)
                                    + e.data["tokens_spent"].as_u64().unwrap_or(0),
                                e.data["usage"]["output"].as_u64().unwrap_or(0),
                            )
                        })
                        .unwrap_or_default(),
                };
                sum.saturating_add(cost)
            });
        consumed.cost = consumed.cost.saturating_add(interrupted_cost);

        // The interrupted step: its plan, if it was persisted.
        let mut planned: Vec<PlannedIntent> = intents
            .into_iter()
            .filter(|(step, _)| *step == done_step + 1)
            .map(|(_, intent)| intent)
            .collect();
        planned.sort_by_key(|i| i.ordinal);
        let resumed = (!planned.is_empty() && settling.is_none()).then(|| ResumedTurn {
            response: ModelResponse {
                text: None,
                tool_calls: planned
                    .iter()
                    .map(|i| crate::provider::ToolCall {
                        id: i.call_id.clone(),
                        name: i.tool.clone(),
                        arguments: i.args.to_string(),
                    })
                    .collect(),
                finish: FinishReason::ToolCalls,
                usage: Default::default(),
            },
            intent_ids: planned.iter().map(|i| Some(i.intent_id.clone())).collect(),
            prior: planned
                .iter()
                .filter_map(|i| {
                    ledger
                        .get(&i.intent_id)
                        .map(|r| (i.intent_id.clone(), r.clone()))
                })
                .collect(),
        });
        // The model has served the checkpointed calls, and the interrupted
        // step's turn when its plan exists.
        let served = provider_calls + u64::from(resumed.is_some());
        agent
            .provider
            .resume_at(usize::try_from(served).unwrap_or(usize::MAX));

        // The budget is not reset: what the checkpoint consumed is charged,
        // and only the active time that remained is available.
        let started = self.clock.now();
        let forward_wall = agent.budget.wall_clock()
            - agent
                .compensation_reserve
                .of_duration(agent.budget.wall_clock());
        let left = forward_wall
            .saturating_sub(std::time::Duration::from_millis(elapsed_before_ms))
            .max(std::time::Duration::from_millis(1));
        let reserve = agent
            .compensation_reserve
            .of_duration(agent.budget.wall_clock());
        let full_deadline = rein_core::deadline::Deadline::after(started, left + reserve);
        let mut budget = Budget::start(agent.budget.with_wall_clock(left)?, started);
        let _ = budget.charge(consumed, started);

        let (not_reexecuted, reexecuted): (Vec<IntentId>, Vec<IntentId>) = resumed
            .as_ref()
            .map(|t| {
                t.intent_ids.iter().flatten().cloned().partition(|id| {
                    // Run again: a write in doubt (under its key), and a
                    // call its interrupted process never sent.
                    t.prior.get(id).is_some_and(|r| {
                        let again = (r.status == rein_core::LedgerStatus::Pending
                            && r.class == ToolClass::IdempotentWrite)
                            || guarded::is_unsent(r);
                        !again
                    })
                })
            })
            .unwrap_or_default();
        let reexecuted_with_same_key: Vec<IntentId> = reexecuted
            .into_iter()
            .filter(|id| resumed.as_ref().is_some_and(|t| t.prior.contains_key(id)))
            .collect();
        let marker = rein_core::outcome::ResumeMarker {
            continued_from_step: done_step,
            steps_skipped: done_step,
            reused_intents: resumed
                .as_ref()
                .map(|t| t.intent_ids.iter().flatten().cloned().collect())
                .unwrap_or_default(),
            not_reexecuted,
            reexecuted_with_same_key,
            maybe_duplicated: false,
            note: format!(
                "continued after step {done_step}; completed steps were not run again; effects in doubt were repeated only with their original idempotency keys, irreversible ones never"
            ),
        };
        // What the run already spent retrying model calls stays spent.
        let retried_so_far = ModelRetryUse::default();
        for e in &events {
            if e.kind == EventKind::RetryScheduled && e.data.get("provider").is_some() {
                retried_so_far
                    .retries
                    .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                retried_so_far.wait_ms.fetch_add(
                    e.data["delay_ms"].as_u64().unwrap_or(0),
                    std::sync::atomic::Ordering::AcqRel,
                );
            }
            if e.kind == EventKind::ModelCallFinished {
                retried_so_far.wasted_tokens.fetch_add(
                    e.data["tokens_spent"].as_u64().unwrap_or(0),
                    std::sync::atomic::Ordering::AcqRel,
                );
            }
        }
        // The models that answered before the interruption stay on record.
        let mut answered_so_far: Vec<String> = Vec::new();
        for e in &events {
            if e.kind == EventKind::ModelCallFinished
                && e.data["ok"] == true
                && let (Some(p), Some(m)) = (e.data["provider"].as_str(), e.data["model"].as_str())
            {
                let name = format!("{p}/{m}");
                if !answered_so_far.contains(&name) {
                    answered_so_far.push(name);
                }
            }
        }
        let ctx = RunCtx {
            run_id: run_id.clone(),
            tenant: record.tenant.clone(),
            input: record.input.clone(),
            agent,
            store: &self.store,
            emitter: Emitter::new(run_id.clone(), self.clock.clone(), observer)
                .with_metrics(self.shared.metrics.clone()),
            provider_calls: std::sync::atomic::AtomicU32::new(
                u32::try_from(served).unwrap_or(u32::MAX),
            ),
            last_input_tokens: std::sync::atomic::AtomicU64::new(last_input_tokens),
            cancel: cancel.unwrap_or_default(),
            lost,
            interrupt: self.shared.interrupt.clone(),
            claim_owner: owner,
            settling: std::sync::atomic::AtomicBool::new(false),
            validator,
            lineage,
            child_usage: std::sync::Mutex::new(HashMap::new()),
            models: std::sync::Mutex::new(answered_so_far),
            model_retries: retried_so_far,
        };
        let _live = self.shared.live.register(run_id, &ctx.cancel);
        ctx.emitter.emit(
            EventKind::RunResumed,
            &Correlation {
                step: done_step,
                ..Correlation::default()
            },
            json!({"marker": marker, "remaining": budget.remaining(started),
                   "reclaimed_leases": reaped.reclaimed.len(), "leases_left": reaped.skipped.len()}),
        );
        let commit = StepCommit {
            reopen,
            // Atomic with the claim check above: nobody changed it since.
            expect_status: Some(record.status),
            status: Some(StatusChange {
                status: RunStatus::Running,
                report: None,
                at_ms: unix_ms(self.clock.system_now()),
            }),
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        if let Err(e) = self.store.commit_step(run_id, commit).await {
            // Not resumed: the guard lets the claim go.
            return Err(match e {
                StoreError::Conflict {
                    what: "run status", ..
                } => EngineError::NotResumable {
                    run_id: run_id.clone(),
                    reason: "it changed while it was being resumed".into(),
                },
                other => other.into(),
            });
        }
        claimed.armed = false;
        let state = LoopState {
            budget,
            full_deadline,
            started,
            elapsed_before_ms,
            guard,
            messages,
            calls,
            facts,
            tools_tried,
            step: done_step,
            resume: Some(marker),
        };
        self.drive(&ctx, validator, state, resumed, settling).await
    }
}

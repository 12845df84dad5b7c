//! A run driven by the caller's own loop: the public guard API.
//!
//! # Why
//!
//! Many programs already have an agent loop (their own, or a framework's)
//! and want rein's guarantees around its tool calls without handing rein
//! the loop. A [`RunHandle`] is a run whose steps the caller takes: it is
//! recorded and claimed like any run ([`Engine::begin`]), each of its
//! calls is the engine's one guarded call ([`RunHandle::call`]: validate,
//! budget, breakers, governor, key, write-ahead ledger, invoke, classify,
//! retry or look up, record, observe), and its end is the engine's one
//! conclusion ([`RunHandle::finish`]: settlement and compensation by the
//! agent's failure policy, the report derived from the ledger, the final
//! record). The model is the caller's: the agent's provider is not asked.
//!
//! ```text
//! let mut run = engine.begin(&agent, &validator, RunRequest { input, .. }).await?;
//! let order = run.call("get_order", json!({"order_id": "A-1"}), "read-order").await;
//! let moved = run.call("update_delivery_time", args, "move-order").await;
//! let output = run.finish(Some("moved".into())).await?;
//! ```
//!
//! Intents are the caller's names for its calls, unique in the run: the
//! same name twice is the same action, and a call already recorded under
//! it is not made again (its recorded result is the answer).

use std::collections::HashMap;

use rein_core::approval::{ApprovalRequest, Decision, Withheld};
use rein_core::call::CallResult;
use rein_core::deadline::{Budget, Deadline, Usage};
use rein_core::event::{PlanCreated, PlannedIntentSummary};
use rein_core::failure::Effect;
use rein_core::loop_guard::LoopGuard;
use rein_core::registry::OnExpiry;
use rein_core::report::End;
use rein_core::{Category, Clock, Failure, Instant, IntentId, LedgerRecord};
use rein_store::{PlannedIntent, StepCommit};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::approval::Applied;
use super::approval_wait::{Approver, Waited};
use super::ctx::{Lineage, class_of};
use super::emitter::{Correlation, unix_ms};
use super::engine::Engine;
use super::error::EngineError;
use super::guarded::millis;
use super::hand_on::HandOn;
use super::start::{Opened, RunOutput, RunRequest, forward_budget};
use super::{AgentBinding, ArgValidator, report};

/// A run whose loop is the caller's; see the module docs.
///
/// Dropped without [`finish`](RunHandle::finish) (the caller's loop
/// panicked, its process is stopping), the run stays `running` with its
/// claim: once the claim expires the orphan scan of `rein serve` (or
/// `rein reconcile`) closes it and settles its ledger.
pub struct RunHandle<'a> {
    engine: &'a Engine,
    opened: Opened<'a>,
    validator: &'a dyn ArgValidator,
    guard: LoopGuard,
    budget: Budget,
    full_deadline: Deadline,
    started: Instant,
    step: u32,
    calls: Vec<CallResult>,
    /// Records of intents already made in this run, by intent.
    prior: HashMap<IntentId, LedgerRecord>,
    /// Intents with side effects this handle called.
    called: std::collections::HashSet<IntentId>,
    /// How the run was taken back ([`Engine::rejoin`]), for its report.
    resume: Option<rein_core::outcome::ResumeMarker>,
    /// Why the run cannot go on, once a call found it (the budget is
    /// spent, the run was cancelled): its end unless the caller says
    /// otherwise.
    stopped: Option<End>,
    /// Who is asked for a decision while a call waits for its approval,
    /// besides the humans who see it pending
    /// ([`RunHandle::ask_approvals_of`]).
    approver: Option<std::sync::Arc<dyn Approver>>,
    /// Cancelled when the caller stops waiting for approvals
    /// ([`RunHandle::end_waits_with`]).
    waits_end: Option<CancellationToken>,
}

impl Engine {
    /// Begins a run of `agent` whose loop the caller drives: recorded and
    /// claimed as [`Engine::run`] records a run, with `run_started`. The
    /// agent's tools, budget, retry policy, failure policy and
    /// compensations apply; its provider is not asked.
    ///
    /// # Errors
    ///
    /// As [`Engine::run`] when the run cannot start.
    pub async fn begin<'a>(
        &'a self,
        agent: &'a AgentBinding,
        validator: &'a dyn ArgValidator,
        request: RunRequest,
    ) -> Result<RunHandle<'a>, EngineError> {
        let guard = LoopGuard::new(agent.loop_guard.clone())?;
        let started = self.clock.now();
        let (budget, full_deadline) = forward_budget(agent, started);
        let lineage = Lineage::root(class_of(request.enqueued));
        let at_ms = unix_ms(self.clock.system_now());
        let opened = self.open(agent, validator, request, lineage, at_ms).await?;
        Ok(RunHandle {
            engine: self,
            opened,
            validator,
            guard,
            budget,
            full_deadline,
            started,
            step: 0,
            calls: Vec::new(),
            prior: HashMap::new(),
            called: Default::default(),
            resume: None,
            stopped: None,
            approver: None,
            waits_end: None,
        })
    }

    /// Takes back a run begun with [`Engine::begin`] whose process died
    /// (or let it go) before it finished: claimed (a dead owner's claim
    /// taken over), what that process started reaped, `run_resumed`
    /// recorded. Its budget goes on from what it had used (the time
    /// between its first and last recorded event, its steps), never
    /// reset. The caller's loop runs again from its start: every intent
    /// already recorded answers from the ledger without a second effect
    /// (a write in doubt is sent again under its key, an irreversible
    /// call in doubt never), the rest run.
    ///
    /// # Errors
    ///
    /// [`EngineError::NotResumable`] for an unknown or finished run, one
    /// of another agent, or one driven by a live process.
    pub async fn rejoin<'a>(
        &'a self,
        agent: &'a AgentBinding,
        validator: &'a dyn ArgValidator,
        run_id: &rein_core::RunId,
    ) -> Result<RunHandle<'a>, EngineError> {
        let not = |reason: String| EngineError::NotResumable {
            run_id: run_id.clone(),
            reason,
        };
        let Some(record) = self.store.get_run(run_id).await? else {
            return Err(not("no such run".into()));
        };
        if record.status.is_finished() {
            return Err(not(format!("it ended {}", record.status.as_str())));
        }
        if record.agent != agent.name {
            return Err(not(format!(
                "it is a run of agent `{}`, not `{}`",
                record.agent, agent.name
            )));
        }
        let guard = LoopGuard::new(agent.loop_guard.clone())?;
        let lineage = self.lineage_of(run_id).await?;
        let opened = self.reopen(agent, validator, &record, lineage).await?;
        let events = self.store.events(run_id, 0).await?;
        let ledger = self.store.ledger(run_id).await?;
        // What the run used before: active time and steps.
        let used_ms = match (events.first(), events.last()) {
            (Some(first), Some(last)) => last
                .at_ms
                .as_millis()
                .saturating_sub(first.at_ms.as_millis()),
            _ => 0,
        };
        let steps = events
            .iter()
            .filter(|e| e.data.kind() == rein_core::EventKind::PlanCreated)
            .count();
        let now = self.clock.now();
        let started = now - std::time::Duration::from_millis(used_ms);
        let (mut budget, full_deadline) = forward_budget(agent, started);
        for _ in 0..steps {
            let _ = budget.charge(Usage::ONE_STEP, now);
        }
        let step = u32::try_from(steps).unwrap_or(u32::MAX);
        let prior: HashMap<IntentId, LedgerRecord> = ledger
            .into_iter()
            .map(|r| (r.intent_id.clone(), r))
            .collect();
        let marker = rein_core::outcome::ResumeMarker {
            continued_from_step: step,
            steps_skipped: 0,
            reused_intents: prior.keys().cloned().collect(),
            not_reexecuted: prior
                .values()
                .filter(|r| r.status != rein_core::LedgerStatus::Pending)
                .map(|r| r.intent_id.clone())
                .collect(),
            reexecuted_with_same_key: Vec::new(),
            maybe_duplicated: false,
            note: "its caller's loop took the run back; recorded intents answer from the ledger"
                .into(),
            contract_changed: None,
            retried: Vec::new(),
            retried_early: false,
        };
        self.record_rejoin(&opened.ctx, &record, &marker, &budget)
            .await?;
        Ok(RunHandle {
            engine: self,
            opened,
            validator,
            guard,
            budget,
            full_deadline,
            started,
            step,
            calls: Vec::new(),
            prior,
            called: Default::default(),
            resume: Some(marker),
            stopped: None,
            approver: None,
            waits_end: None,
        })
    }
}

impl RunHandle<'_> {
    /// The run.
    pub fn run_id(&self) -> &rein_core::RunId {
        &self.opened.ctx.run_id
    }

    /// Asks `approver` too when a call waits for a human's approval (an
    /// MCP client's user, a prompt of the caller's own), or no one but
    /// the humans who see it pending (`None`). Either way a call that
    /// needs approval waits for a decision made through rein (`rein
    /// approve`, the API, the dashboard, [`RunHandle::decide`]) until the
    /// approval's window closes or the run's deadline comes, and is never
    /// sent without one.
    pub fn ask_approvals_of(&mut self, approver: Option<std::sync::Arc<dyn Approver>>) {
        self.approver = approver;
    }

    /// Ends a call's wait for its approval once `token` is cancelled (its
    /// client went away, the caller's process is stopping): the call is
    /// not sent, fails as `cancelled`, and the run goes on; `None` waits
    /// until the decision, the window or the run's deadline.
    pub fn end_waits_with(&mut self, token: Option<CancellationToken>) {
        self.waits_end = token;
    }

    /// Records `decision` on the approval the call `intent` of this run
    /// waits for (or will find when it is called again): a decision taken
    /// in the caller's own interface. The first decision recorded stands;
    /// a later one is refused with it.
    ///
    /// # Errors
    ///
    /// As [`rein_store::RunStore::decide_approval`]: `NotFound` when no
    /// call of that intent asked for approval, `AlreadyDecided`, `Invalid`.
    pub async fn decide(
        &self,
        intent: &str,
        decision: Decision,
    ) -> Result<rein_core::approval::Approval, rein_store::StoreError> {
        let ctx = &self.opened.ctx;
        let intent = IntentId::new(intent).map_err(|e| rein_store::StoreError::Invalid {
            what: "intent id",
            expected: "an intent id".to_owned(),
            found: e.to_string(),
        })?;
        Ok(ctx
            .store
            .decide_approval(&ctx.run_id, &intent, decision)
            .await?
            .approval)
    }

    /// Calls `tool` with `args` as the action `intent` (the caller's name
    /// for it, unique in the run): the whole guarded call. The outcome is
    /// the fact (`Ok(result)`) or the classified failure rein gave up with;
    /// what the model should read of a failure is
    /// [`Failure::model_message`], never its raw text.
    ///
    /// A call refused before it ran (an unknown tool, arguments the tool's
    /// schema refuses, a spent budget, a cancelled run) fails with its
    /// category and leaves no ledger record.
    pub async fn call(&mut self, tool: &str, args: Value, intent: &str) -> CallResult {
        let engine = self.engine;
        let now = engine.clock.now();
        self.step += 1;
        let step = self.step;
        let intent_id = match IntentId::new(intent) {
            Ok(id) => id,
            Err(e) => {
                return self.refused(
                    tool,
                    args,
                    intent,
                    Category::InvalidArguments,
                    e.to_string(),
                );
            }
        };
        if let Some(end) = self.boundary(now) {
            let why = match &end {
                End::Cancelled(why) => why.clone(),
                End::Interrupted => "not started: the run is being handed on".to_owned(),
                End::ApprovalExpired(why) => {
                    format!("not started: the run goes to a human ({why})")
                }
                _ => "the run's budget is spent".to_owned(),
            };
            let category = match end {
                End::Cancelled(_) | End::Interrupted => Category::Cancelled,
                End::ApprovalExpired(_) => Category::Forbidden,
                _ => Category::BudgetExhausted,
            };
            self.stopped.get_or_insert(end);
            return self.refused(tool, args, intent, category, why);
        }
        let ctx = &self.opened.ctx;
        let call = crate::provider::ToolCall {
            id: intent.to_owned(),
            name: tool.to_owned(),
            arguments: args.to_string(),
        };
        let mut planned =
            match engine.validate_call(ctx, &self.guard, self.validator, &call, step, 0) {
                Ok(planned) => planned,
                Err((_, _, reason)) => {
                    return self.refused(tool, args, intent, Category::InvalidArguments, reason);
                }
            };
        planned.intent_id = intent_id.clone();
        let Some(binding) = ctx.agent.tools.get(tool) else {
            return self.refused(
                tool,
                args,
                intent,
                Category::InvalidArguments,
                "unknown tool".into(),
            );
        };
        // A call that needs a human's decision has its request recorded
        // with its intent, and waits for it below (`approval_wait`). One
        // asked for before (a rejoined run) keeps its terms, whatever the
        // config says now: a "no" stays a "no".
        let needs = ctx.agent.approval.needed(
            &binding.declared.approval,
            binding.declared.side_effect_tier,
            &planned.args,
        );
        let stored = if needs.is_some() || self.resume.is_some() {
            match engine.stored_approval(ctx, &intent_id).await {
                Ok(stored) => stored,
                Err(why) => {
                    return self.refused(
                        tool,
                        planned.args,
                        intent,
                        Category::Unknown,
                        format!("not run: {why}"),
                    );
                }
            }
        } else {
            None
        };
        let (awaits, new_request) = match (stored, needs) {
            (Some(approval), _) => (Some(approval.request), None),
            (None, Some(why)) => {
                let request = engine.approval_request(ctx, &planned, why);
                engine.announce_approval(ctx, &request, HandOn::Caller);
                (Some(request.clone()), Some(request))
            }
            (None, None) => (None, None),
        };
        // The intent is durable before anything runs (write-ahead): a
        // crash after this finds it, and the same intent is never a
        // second action.
        let c = Correlation {
            step,
            ..Correlation::default()
        };
        ctx.emitter.emit(
            &c,
            PlanCreated {
                intents: vec![PlannedIntentSummary {
                    intent_id: intent_id.clone(),
                    tool: tool.to_owned(),
                    call_id: planned.call_id.clone(),
                    class: Some(binding.class),
                    salvaged: false,
                }],
                rejected: 0,
            },
        );
        let plan = StepCommit {
            intents: vec![(
                step,
                PlannedIntent {
                    intent_id: intent_id.clone(),
                    ordinal: 0,
                    call_id: planned.call_id.clone(),
                    tool: tool.to_owned(),
                    args: planned.args.clone(),
                },
            )],
            approvals: new_request.into_iter().collect(),
            events: ctx.emitter.drain(),
            ..StepCommit::default()
        };
        if let Err(e) = engine.commit(ctx, plan).await {
            return self.refused(
                tool,
                planned.args,
                intent,
                Category::Unknown,
                format!("not run: the store refused its intent ({e})"),
            );
        }
        let writes = binding.class != rein_core::ToolClass::Read;
        if writes && self.called.contains(&intent_id) && !self.prior.contains_key(&intent_id) {
            // Made before in this handle, but its record could not be read
            // back: never a second action on a guess.
            return self.refused(
                tool,
                planned.args,
                intent,
                Category::Unknown,
                "not repeated: this intent was called before and its record cannot be read".into(),
            );
        }
        if let Some(request) = awaits
            && let Some(refusal) = self.await_decision(&request, &planned).await
        {
            return self.refused_with(tool, planned.args, intent, refusal);
        }
        let ctx = &self.opened.ctx;
        let (mut child, grant) = self.budget.serial(engine.clock.now());
        let before = self.prior.get(&intent_id);
        let result = engine
            .guarded_call(ctx, planned, binding, &mut child, before, None)
            .await;
        let _ = self
            .budget
            .settle(grant, ctx.take_child_usage(&intent_id), engine.clock.now());
        match ctx.store.ledger(&ctx.run_id).await {
            Ok(ledger) => {
                if let Some(record) = ledger.into_iter().find(|r| r.intent_id == intent_id) {
                    self.prior.insert(intent_id.clone(), record);
                }
            }
            Err(e) => {
                tracing::warn!(run = %ctx.run_id, intent = %intent_id, "cannot read the call's record back: {e}");
            }
        }
        if writes {
            self.called.insert(intent_id);
        }
        self.calls.push(result.clone());
        result
    }

    /// Ends the run with the caller's `answer`: settled by the agent's
    /// failure policy (effects of a failed run compensated in reverse
    /// order), its report derived from the ledger, its end recorded, its
    /// claim released. A run whose budget ran out or that was cancelled
    /// during its calls ends so, whatever the answer; one whose process is
    /// stopping or whose store stayed away is handed on unfinished
    /// ([`RunOutput::interrupted`], to [`Engine::rejoin`]).
    ///
    /// # Errors
    ///
    /// As [`Engine::run`] when the run's end cannot be recorded.
    pub async fn finish(self, answer: Option<String>) -> Result<RunOutput, EngineError> {
        let end = self.stopped.clone().unwrap_or(End::Answer(answer));
        self.conclude(end).await
    }

    /// Ends the run as cancelled by its caller (`why`): its effects are
    /// settled like a failed run's.
    ///
    /// # Errors
    ///
    /// As [`RunHandle::finish`].
    pub async fn abandon(self, why: impl Into<String>) -> Result<RunOutput, EngineError> {
        self.conclude(End::Cancelled(why.into())).await
    }

    async fn conclude(self, end: End) -> Result<RunOutput, EngineError> {
        let engine = self.engine;
        let ctx = &self.opened.ctx;
        let agent = ctx.agent;
        let elapsed_ms = millis(engine.clock.now().saturating_duration_since(self.started));
        let facts = rein_core::report::RunFacts {
            run_id: ctx.run_id.clone(),
            agent: agent.name.clone(),
            input: ctx.input.clone(),
            end: end.clone(),
            settled: rein_core::report::Settled::Kept,
            outcome: None,
            calls: self.calls,
            consumed: self.budget.used(),
            elapsed_ms,
            steps: self.step,
            models: Vec::new(),
            compensations: Vec::new(),
            resume: self.resume,
            in_flight: Vec::new(),
            strategies_not_tried: report::strategies_not_tried(agent),
            notes: Vec::new(),
            hint: ctx.failure_hint(&end),
            owners: agent.owners(),
        };
        if matches!(end, End::Interrupted) || ctx.is_interrupted() {
            // Handed on unfinished, as the engine's loop hands a run on:
            // not settled, resumable ([`Engine::rejoin`]).
            let so_far = rein_core::report::derive(&facts, &[]);
            return Ok(engine.hand_on(ctx, so_far, self.step, self.step).await);
        }
        engine
            .conclude(ctx, facts, self.full_deadline, self.step, self.started, 0)
            .await
    }

    /// Why no call may start now: the run was cancelled, or its budget is
    /// spent. Charges the call's step otherwise.
    fn boundary(&mut self, now: Instant) -> Option<End> {
        // Stopped by an earlier call (an approval expired with
        // `on_expiry = "handoff"`, a cancel): nothing more goes out.
        if let Some(end) = &self.stopped {
            return Some(end.clone());
        }
        let ctx = &self.opened.ctx;
        // The process is stopping, or the store stayed away: handed on
        // unfinished, never failed (its caller's loop may rejoin it).
        if ctx.is_interrupted() {
            return Some(End::Interrupted);
        }
        if ctx.is_cancelled() {
            return Some(End::Cancelled("cancelled by the caller".into()));
        }
        if let Some(exhausted) = self.budget.exhausted(now) {
            return Some(End::Budget(exhausted));
        }
        if self.budget.charge(Usage::ONE_STEP, now).is_err() {
            return self.budget.exhausted(now).map(End::Budget);
        }
        None
    }

    /// Waits for the decision on `request`, `planned`'s approval: `None`
    /// when the call may be sent, else why it is not (see
    /// [`super::approval_wait`]).
    async fn await_decision(
        &mut self,
        request: &ApprovalRequest,
        planned: &rein_core::call::Planned,
    ) -> Option<Failure> {
        let engine = self.engine;
        let ctx = &self.opened.ctx;
        let not_called = |category: Category, why: String| {
            Some(
                Failure::new(&planned.tool, category)
                    .with_effect(Effect::NotApplied)
                    .with_retryable(false)
                    .with_human_message(format!("{} was not called: {why}", planned.tool)),
            )
        };
        let approval = match engine
            .wait_for_decision(
                ctx,
                request,
                self.approver.as_deref(),
                self.budget.deadline().instant(),
                self.waits_end.as_ref(),
            )
            .await
        {
            Waited::Decided(approval) => approval,
            Waited::OutOfTime => {
                return not_called(
                    Category::BudgetExhausted,
                    "no decision on its approval came before the run's deadline".into(),
                );
            }
            Waited::Stopped => {
                let end = if ctx.is_interrupted() {
                    End::Interrupted
                } else {
                    End::Cancelled("cancelled while a call waited for its approval".into())
                };
                self.stopped.get_or_insert(end);
                return not_called(
                    Category::Cancelled,
                    "the run stopped while it waited for its approval".into(),
                );
            }
            Waited::Abandoned => {
                return not_called(
                    Category::Cancelled,
                    "its caller stopped waiting for its approval".into(),
                );
            }
            Waited::Unreadable(why) => return not_called(Category::Unknown, why),
        };
        match engine.apply(ctx, planned, &approval) {
            Applied::Sent => None,
            Applied::Withheld(withheld) => {
                // `on_expiry = "handoff"`: the run goes to a human with
                // what it did so far, whatever its caller answers.
                if matches!(withheld, Withheld::Expired(_))
                    && ctx.agent.approval.on_expiry == OnExpiry::Handoff
                {
                    self.stopped.get_or_insert(End::ApprovalExpired(format!(
                        "{} was not called: {}, and the agent's approval.on_expiry is handoff",
                        planned.tool,
                        withheld.why()
                    )));
                }
                not_called(Category::Forbidden, withheld.why())
            }
        }
    }

    /// A call refused before it ran.
    fn refused(
        &mut self,
        tool: &str,
        args: Value,
        intent: &str,
        category: Category,
        why: String,
    ) -> CallResult {
        self.refused_with(
            tool,
            args,
            intent,
            Failure::new(tool, category).with_human_message(why),
        )
    }

    /// A call refused before it ran, for `failure`.
    fn refused_with(
        &mut self,
        tool: &str,
        args: Value,
        intent: &str,
        failure: Failure,
    ) -> CallResult {
        let class = self
            .opened
            .ctx
            .agent
            .tools
            .get(tool)
            .map_or(rein_core::ToolClass::Read, |t| t.class);
        let planned = rein_core::call::Planned {
            intent_id: IntentId::new(intent)
                .unwrap_or_else(|_| super::engine::new_id::<IntentId>()),
            call_id: intent.to_owned(),
            tool: tool.to_owned(),
            args,
            step: self.step,
            position: 0,
            salvaged: false,
        };
        let result = CallResult::refused(planned, class, failure);
        self.calls.push(result.clone());
        result
    }
}

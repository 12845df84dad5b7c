//! The approval gate: calls a human must approve before they are sent.
//!
//! # Why the whole turn waits
//!
//! A turn's calls were planned together (the model may have meant "refund,
//! then email"), so when one of them has no decision yet none of them
//! runs: the plan is durable, the run pauses in `awaiting_approval`
//! holding no worker, claim or connection, and the decision that completes
//! the turn hands it to any worker (or to its caller's `rein resume`),
//! which replays the persisted plan. Decisions are read from the store at
//! every pass, never from memory, so a kill, a restart or another node in
//! between changes nothing.
//!
//! # Why a digest
//!
//! An approval binds to the digest of the arguments the model proposed,
//! as persisted with the intent. The replayed plan carries those same
//! bytes; a call whose arguments no longer match is never sent on the
//! strength of an approval given for others.

use std::collections::HashMap;

use rein_core::approval::{
    Approval, ApprovalRequest, ArgsDigest, Decision, Standing, Verdict, Withheld,
};
use rein_core::call::CallResult;
use rein_core::event::ApprovalDecided;
use rein_core::failure::Effect;
use rein_core::registry::OnExpiry;
use rein_core::{Category, Clock, Failure, IntentId, RunReport};
use rein_store::approval::MAX_APPROVALS_PAGE;
use rein_store::{ApprovalFilter, RunStatus, StatusChange, StepCommit};

use super::End;
use super::claim::claim_id;
use super::ctx::RunCtx;
use super::emitter::{Correlation, unix_ms};
use super::engine::Engine;
use super::hand_on::HandOn;
use super::start::RunOutput;
use super::step::Plan;

/// What the gate lets through.
pub(super) enum Approvals {
    /// Every call that needed a decision has one, applied to the plan:
    /// these calls were withheld (declined, expired), each refused before
    /// any attempt, for the report and the loop guard; the model's reply
    /// for each is in the plan's replies.
    Open(Vec<CallResult>),
    /// Some call has no decision yet: the turn waits for these.
    Pause(Vec<ApprovalRequest>),
}

/// What became of one call that needed approval.
pub(super) enum Applied {
    /// It runs.
    Sent,
    /// It does not run, for this reason.
    Withheld(Withheld),
}

impl Engine {
    /// Reads the decisions on `plan`'s calls that need one and applies
    /// them: an approved call runs, a declined or expired one is removed
    /// with its reply for the model. [`Approvals::Pause`] when one still waits
    /// (nothing is changed then).
    ///
    /// # Errors
    ///
    /// The run's end when the decisions cannot be read.
    pub(super) async fn approval_gate(
        &self,
        ctx: &RunCtx<'_>,
        plan: &mut Plan,
        replayed: bool,
    ) -> Result<Approvals, End> {
        let mut needs: Vec<(usize, String)> = plan
            .planned
            .iter()
            .enumerate()
            .filter_map(|(i, p)| {
                let tool = ctx.agent.tools.get(&p.tool)?;
                ctx.agent
                    .approval
                    .needed(
                        &tool.declared.approval,
                        tool.declared.side_effect_tier,
                        &p.args,
                    )
                    .map(|why| (i, why))
            })
            .collect();
        // Sabotage hook `skip_approval`: nothing waits for a human.
        #[cfg(feature = "sabotage")]
        if self.sabotage.skip_approval {
            return Ok(Approvals::Open(Vec::new()));
        }
        // A fresh turn that needs no approval has none stored; a replayed
        // one may, whatever the config says now.
        let Some(step) = plan.planned.first().map(|p| p.step) else {
            return Ok(Approvals::Open(Vec::new()));
        };
        if needs.is_empty() && !replayed {
            return Ok(Approvals::Open(Vec::new()));
        }
        let stored = ctx
            .store
            .approvals(&ApprovalFilter {
                run_id: Some(ctx.run_id.clone()),
                step: Some(step),
                limit: MAX_APPROVALS_PAGE,
                ..ApprovalFilter::default()
            })
            .await
            .map_err(|e| super::step::store_end(ctx, format!("cannot read approvals: {e}")))?;
        let mut stored: HashMap<IntentId, Approval> = stored
            .into_iter()
            .map(|a| (a.request.intent_id.clone(), a))
            .collect();
        // A call that waited keeps its approval's terms even when the
        // config no longer asks for one (it changed before this resume):
        // a "no" stays a "no", a wait stays a wait.
        for (i, p) in plan.planned.iter().enumerate() {
            if let Some(a) = stored.get(&p.intent_id)
                && !needs.iter().any(|(n, _)| *n == i)
            {
                needs.push((i, a.request.why.clone()));
            }
        }
        if needs.is_empty() {
            return Ok(Approvals::Open(Vec::new()));
        }
        let now = unix_ms(self.clock.system_now());
        let mut waiting = Vec::new();
        let mut decided = Vec::new();
        for (i, why) in needs {
            let p = &plan.planned[i];
            match stored.remove(&p.intent_id) {
                None => waiting.push(self.approval_request(ctx, p, why)),
                Some(approval) => match approval.standing(now) {
                    Standing::Pending => waiting.push(approval.request),
                    Standing::Lapsed => decided.push((i, self.expire(ctx, approval).await?)),
                    Standing::Decided(_) => decided.push((i, approval)),
                },
            }
        }
        // A child run is driven inside its parent's call, which cannot wait
        // for a human: its call is withheld (a gate fails closed).
        if !waiting.is_empty() && ctx.lineage.parent.is_none() {
            return Ok(Approvals::Pause(waiting));
        }
        let mut withheld: Vec<(usize, Applied)> = waiting
            .iter()
            .filter_map(|request| {
                let i = plan
                    .planned
                    .iter()
                    .position(|p| p.intent_id == request.intent_id)?;
                Some((i, Applied::Withheld(Withheld::ChildCannotWait)))
            })
            .collect();
        // A cancel taken just after the decision that continued the run
        // reaches this process at its first heartbeat: read it now, before
        // an approved call goes out.
        if decided.iter().any(|(_, a)| {
            a.decision
                .as_ref()
                .is_some_and(|d| d.verdict == Verdict::Approved)
        }) && matches!(ctx.store.cancel_request(&ctx.run_id).await, Ok(Some(_)))
        {
            ctx.cancel.cancel();
            let reason = "cancelled by the caller, before its approved calls were sent";
            ctx.emitter.emit(
                &Correlation {
                    step,
                    ..Correlation::default()
                },
                rein_core::event::RunCancelled {
                    reason: reason.into(),
                    at_step_boundary: Some(true),
                    aborted: None,
                    provider: None,
                },
            );
            return Err(End::Cancelled(reason.into()));
        }
        let mut lapsed: Option<String> = None;
        for (i, approval) in decided {
            match self.apply(ctx, &plan.planned[i], &approval) {
                Applied::Sent => {}
                applied => {
                    if let Applied::Withheld(expired @ Withheld::Expired(_)) = &applied {
                        lapsed.get_or_insert_with(|| {
                            format!(
                                "{} was not called: {}, and the agent's approval.on_expiry is handoff (nothing of its turn was sent)",
                                plan.planned[i].tool,
                                expired.why()
                            )
                        });
                    }
                    withheld.push((i, applied));
                }
            }
        }
        // `on_expiry = "handoff"`: the run stops here, before anything of
        // the turn is sent, and goes to a human.
        if ctx.agent.approval.on_expiry == OnExpiry::Handoff
            && let Some(why) = lapsed
        {
            return Err(End::ApprovalExpired(why));
        }
        withheld.sort_by_key(|(i, _)| std::cmp::Reverse(*i));
        let mut refused = Vec::with_capacity(withheld.len());
        for (i, applied) in withheld {
            let Applied::Withheld(withheld) = applied else {
                continue;
            };
            let p = plan.planned.remove(i);
            if let Some(slot) = plan.replies.get_mut(p.position) {
                *slot = Some(withheld.reply(&p.tool));
            }
            let why = withheld.why();
            let class = ctx
                .agent
                .tools
                .get(&p.tool)
                .map_or(rein_core::ToolClass::Irreversible, |t| t.class);
            let failure = Failure::new(&p.tool, Category::Forbidden)
                .with_effect(Effect::NotApplied)
                .with_retryable(false)
                .with_human_message(format!("{} was not called: {why}", p.tool));
            refused.push(CallResult::refused(p, class, failure));
        }
        refused.reverse();
        Ok(Approvals::Open(refused))
    }

    /// Records the expiry of `approval`, whose window closed before anyone
    /// decided (the sweeper may not have come by yet). The decision that
    /// stands is returned: another writer may have recorded it first.
    pub(super) async fn expire(
        &self,
        ctx: &RunCtx<'_>,
        approval: Approval,
    ) -> Result<Approval, End> {
        let request = &approval.request;
        let expiry = Decision::expiry(request.expires_at_ms);
        match ctx
            .store
            .decide_approval(&request.run_id, &request.intent_id, expiry)
            .await
        {
            Ok(decided) => Ok(decided.approval),
            Err(rein_store::StoreError::AlreadyDecided { approval }) => Ok(*approval),
            Err(e) => Err(super::step::store_end(
                ctx,
                format!("cannot record an approval's expiry: {e}"),
            )),
        }
    }

    /// Applies the decision on `approval` to its call `p`, and records
    /// that the run read it.
    pub(super) fn apply(
        &self,
        ctx: &RunCtx<'_>,
        p: &rein_core::call::Planned,
        approval: &Approval,
    ) -> Applied {
        let Some(decision) = &approval.decision else {
            // Not reached: an approval read as decided carries its
            // decision. Withheld all the same (a gate fails closed).
            return Applied::Withheld(Withheld::Declined(None));
        };
        ctx.emitter.emit(
            &Correlation {
                step: p.step,
                intent_id: Some(p.intent_id.clone()),
                ..Correlation::default()
            },
            ApprovalDecided {
                tool: p.tool.clone(),
                verdict: decision.verdict,
                by: decision.by.clone(),
                decided_at_ms: decision.at_ms,
                reason: decision.reason.clone(),
                waited_ms: approval
                    .waited()
                    .map_or(0, |w| u64::try_from(w.as_millis()).unwrap_or(u64::MAX)),
            },
        );
        // Sabotage hook `send_declined`: a "no" is sent as a "yes".
        #[cfg(feature = "sabotage")]
        if self.sabotage.send_declined {
            return Applied::Sent;
        }
        match decision.verdict {
            // The approval is of one tool's call with these arguments: an
            // intent a caller reused for another tool is not approved by it.
            Verdict::Approved
                if approval.request.args_digest == ArgsDigest::of(&p.args)
                    && approval.request.tool == p.tool =>
            {
                Applied::Sent
            }
            Verdict::Approved => Applied::Withheld(Withheld::ArgsChanged),
            Verdict::Rejected => Applied::Withheld(Withheld::Declined(decision.reason.clone())),
            Verdict::Expired => Applied::Withheld(Withheld::Expired(
                approval
                    .request
                    .expires_at_ms
                    .saturating_duration_since(approval.request.requested_at_ms),
            )),
        }
    }

    /// Pauses the run for `requests`: records them with their
    /// `approval_requested` events and the status `awaiting_approval`,
    /// fenced by this process's claim, then lets the claim go. `so_far`
    /// is the provisional report of what the run did.
    pub(super) async fn await_approval(
        &self,
        ctx: &RunCtx<'_>,
        mut so_far: RunReport,
        step: u32,
        requests: Vec<ApprovalRequest>,
    ) -> RunOutput {
        let continue_with = self
            .shared
            .hand_on
            .get()
            .copied()
            .unwrap_or(HandOn::AnyWorker);
        for r in &requests {
            self.announce_approval(ctx, r, continue_with);
        }
        let commit = StepCommit {
            approvals: requests.clone(),
            events: ctx.emitter.drain(),
            status: Some(StatusChange {
                status: RunStatus::AwaitingApproval,
                report: None,
                at_ms: unix_ms(self.clock.system_now()),
            }),
            expect_status: Some(RunStatus::Running),
            ..StepCommit::default()
        };
        if let Err(e) = self.commit(ctx, commit).await {
            // Not paused: handed on as an interrupted run, whose resume
            // reaches this gate again.
            tracing::warn!(run = %ctx.run_id, "cannot record the approvals the run waits for: {e}");
            return self
                .hand_on(ctx, so_far, step, step.saturating_sub(1))
                .await;
        }
        crate::crash::point("awaiting_approval");
        if !ctx.lost.is_cancelled()
            && let Err(e) = ctx
                .store
                .release_lease_of(&claim_id(&ctx.run_id), &ctx.claim_owner)
                .await
        {
            tracing::warn!(run = %ctx.run_id, "cannot release the run's claim: {e}");
        }
        let calls: Vec<String> = requests
            .iter()
            .map(|r| format!("{} ({})", r.tool, r.intent_id))
            .collect();
        so_far.recoverable = true;
        so_far.recommendation = format!(
            "decide: rein approve {run} INTENT, or rein reject {run} INTENT --reason …; it continues once every call of its turn is decided",
            run = ctx.run_id
        );
        so_far.summary = format!(
            "The run is waiting for a human's approval of {}: nothing of its turn was sent. It holds no worker while it waits; {}. So far: {}",
            calls.join(", "),
            match continue_with {
                HandOn::AnyWorker =>
                    "once the last call is decided, a `rein serve` on its store continues it, or `rein resume` does",
                HandOn::Caller => "once the last call is decided, `rein resume` continues it",
            },
            so_far.summary
        );
        RunOutput {
            run_id: ctx.run_id.clone(),
            report: so_far,
            interrupted: false,
            awaiting_approval: requests,
        }
    }
}

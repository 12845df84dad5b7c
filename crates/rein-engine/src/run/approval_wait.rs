//! The approval of a call made through a [`RunHandle`]: its caller waits.
//!
//! # Why the call waits instead of pausing the run
//!
//! The engine's own loop pauses a run for a decision and lets go of it:
//! its turn is persisted, and any worker replays it once decided
//! ([`super::approval`]). A [`RunHandle`]'s loop is its caller's, which
//! rein cannot replay, and the caller is waiting on this very call. So the
//! run stays `running` and keeps its claim; the request is recorded with
//! the call's intent, before anything is sent, where every approver sees
//! it (`rein approvals`, the API, the dashboard, webhooks); and the call
//! waits for the decision. A call that needs approval is never sent
//! without one: the guard API is no way around the gate.
//!
//! # Why the decision is read from the store
//!
//! The human decides in another process (`rein approve`, `rein serve`'s
//! API on the same store), which has no channel to this one but the
//! store: the wait reads it every [`DECISION_POLL`], and ends at the
//! decision, at the approval's window (recorded as expired), at the run's
//! deadline or at a cancel. An [`Approver`] may be asked meanwhile (an MCP
//! client's user, through elicitation): its answer is recorded as any
//! other decision, and the first decision recorded is the one that
//! stands.
//!
//! [`RunHandle`]: super::RunHandle

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use rein_core::approval::{Approval, ApprovalRequest, ArgsDigest, Decision, Standing};
use rein_core::call::Planned;
use rein_core::event::ApprovalRequested;
use rein_core::{Instant, IntentId};
use rein_store::ApprovalFilter;
use tokio_util::sync::CancellationToken;

use super::ctx::RunCtx;
use super::emitter::{Correlation, unix_ms};
use super::engine::Engine;
use super::hand_on::HandOn;

/// How often a waiting call reads its approval: a human's decision is
/// taken up within this.
pub const DECISION_POLL: Duration = Duration::from_millis(250);

/// Someone a caller-driven run may ask for a decision while its call
/// waits ([`super::RunHandle::ask_approvals_of`]): the user of an MCP
/// client through elicitation, a chat prompt of the caller's own.
///
/// An answer is one decision among others: it is recorded in the store
/// as a decision made through the API is, and a decision recorded first
/// (by a human through the API, or the window's expiry) stands instead.
pub trait Approver: Send + Sync {
    /// Asks for a decision on `request`. `None` when there is none to
    /// give (the approver cannot be asked, or gave no answer): the call
    /// then waits for one recorded elsewhere.
    fn ask<'a>(
        &'a self,
        request: &'a ApprovalRequest,
    ) -> Pin<Box<dyn Future<Output = Option<Decision>> + Send + 'a>>;
}

/// How a wait for a decision ended.
pub(super) enum Waited {
    /// The approval has its decision (possibly an expiry).
    Decided(Box<Approval>),
    /// The run's deadline came first: the call is not sent.
    OutOfTime,
    /// The run was cancelled, interrupted or lost its claim.
    Stopped,
    /// The caller stopped waiting ([`super::RunHandle::end_waits_with`]):
    /// the call is not sent; the run goes on.
    Abandoned,
    /// The store could not say (why).
    Unreadable(String),
}

impl Engine {
    /// The request for `p`'s approval, made now, open for the agent's
    /// window.
    pub(super) fn approval_request(
        &self,
        ctx: &RunCtx<'_>,
        p: &Planned,
        why: String,
    ) -> ApprovalRequest {
        let now = unix_ms(self.clock.system_now());
        ApprovalRequest {
            run_id: ctx.run_id.clone(),
            tenant: ctx.tenant.clone(),
            intent_id: p.intent_id.clone(),
            step: p.step,
            tool: p.tool.clone(),
            args: p.args.clone(),
            args_digest: ArgsDigest::of(&p.args),
            why,
            requested_at_ms: now,
            expires_at_ms: now + ctx.agent.approval.window,
        }
    }

    /// Emits `approval_requested` for `r`.
    pub(super) fn announce_approval(
        &self,
        ctx: &RunCtx<'_>,
        r: &ApprovalRequest,
        continue_with: HandOn,
    ) {
        let tier = ctx
            .agent
            .tools
            .get(&r.tool)
            .and_then(|t| t.declared.side_effect_tier);
        ctx.emitter.emit(
            &Correlation {
                step: r.step,
                intent_id: Some(r.intent_id.clone()),
                ..Correlation::default()
            },
            ApprovalRequested {
                tool: r.tool.clone(),
                args_digest: r.args_digest.clone(),
                why: r.why.clone(),
                tier,
                expires_at_ms: r.expires_at_ms,
                continue_with,
            },
        );
    }

    /// The approval stored for `intent`, if any: a call has at most one.
    pub(super) async fn stored_approval(
        &self,
        ctx: &RunCtx<'_>,
        intent: &IntentId,
    ) -> Result<Option<Approval>, String> {
        let stored = ctx
            .store
            .approvals(&ApprovalFilter {
                run_id: Some(ctx.run_id.clone()),
                intent_id: Some(intent.clone()),
                limit: 1,
                ..ApprovalFilter::default()
            })
            .await
            .map_err(|e| format!("cannot read its approval: {e}"))?;
        Ok(stored.into_iter().next())
    }

    /// Waits for the decision on `request` (recorded before): see the
    /// module docs. `deadline` is the run's; `abandon` ends the wait
    /// early when the caller stops waiting.
    pub(super) async fn wait_for_decision(
        &self,
        ctx: &RunCtx<'_>,
        request: &ApprovalRequest,
        mut approver: Option<&dyn Approver>,
        deadline: Instant,
        abandon: Option<&CancellationToken>,
    ) -> Waited {
        let mut asked = None;
        loop {
            let approval = match self.stored_approval(ctx, &request.intent_id).await {
                Ok(Some(approval)) => approval,
                Ok(None) => {
                    return Waited::Unreadable(
                        "its approval request, recorded with its intent, is not in the store"
                            .into(),
                    );
                }
                Err(e) => return Waited::Unreadable(e),
            };
            match approval.standing(unix_ms(self.clock.system_now())) {
                Standing::Decided(_) => return Waited::Decided(Box::new(approval)),
                Standing::Lapsed => {
                    return match self.expire(ctx, approval).await {
                        Ok(approval) => Waited::Decided(Box::new(approval)),
                        Err(_) => Waited::Unreadable("cannot record its approval's expiry".into()),
                    };
                }
                Standing::Pending => {}
            }
            // Asked only once the stored approval is read undecided: a
            // decided one (a call sent again) is never asked again.
            if let Some(approver) = approver.take() {
                asked = Some(approver.ask(request));
            }
            let abandoned = async {
                match abandon {
                    Some(token) => token.cancelled().await,
                    None => std::future::pending().await,
                }
            };
            let answered = {
                let answer = async {
                    match asked.as_mut() {
                        Some(asking) => Some(asking.await),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    answer = answer => answer,
                    () = self.clock.sleep(DECISION_POLL) => None,
                    () = self.clock.sleep_until(deadline) => return Waited::OutOfTime,
                    () = ctx.cancelled() => return Waited::Stopped,
                    () = abandoned => return Waited::Abandoned,
                }
            };
            // Asked once: an approver that answered, or had nothing to
            // say, is not asked again.
            if let Some(answer) = answered {
                asked = None;
                if let Some(decision) = answer {
                    self.record_approvers_answer(ctx, request, decision).await;
                }
            }
        }
    }

    /// Records an approver's `decision` on `request`. One recorded first
    /// stands, and is read back by the wait.
    async fn record_approvers_answer(
        &self,
        ctx: &RunCtx<'_>,
        request: &ApprovalRequest,
        decision: Decision,
    ) {
        match ctx
            .store
            .decide_approval(&request.run_id, &request.intent_id, decision)
            .await
        {
            Ok(_) | Err(rein_store::StoreError::AlreadyDecided { .. }) => {}
            Err(e) => {
                tracing::warn!(run = %ctx.run_id, intent = %request.intent_id, "cannot record the approver's decision: {e}");
            }
        }
    }
}

//! The breakers of a tool call: admission, outcome, and the open arm
//! that stops a retry.

use rein_core::breaker::{Admit, ArmKind};
use rein_core::event::{BreakerStateChanged, CallRejected, CircuitOpen, CircuitRejected};
use rein_core::{Clock, Failure};

use crate::run::Engine;
use crate::run::binding::ToolBinding;
use crate::run::emitter::{Correlation, Emitter};
use crate::run::permit::HeldPermit;

impl Engine {
    /// Admits a tool call through its breakers: the tool's arm, then its
    /// resource group's. `Err` is the `circuit_open` failure of the first
    /// open arm (a permit already taken goes back unused).
    pub(super) fn admit_call(
        &self,
        emitter: &Emitter,
        c: &Correlation,
        tool: &ToolBinding,
    ) -> Result<(HeldPermit, Option<HeldPermit>), Failure> {
        let tool_permit = self.admit(emitter, c, ArmKind::Tool, &tool.name)?;
        let group_permit = match &tool.resource_group {
            Some(group) => Some(self.admit(emitter, c, ArmKind::ResourceGroup, group)?),
            None => None,
        };
        Ok((tool_permit, group_permit))
    }

    /// Refuses a tool call that another process's opening of its arm (or
    /// of its resource group's), or a Retry-After cooldown of the tool,
    /// forbids (shared breakers: health memory across runs and
    /// processes); `None` when nothing does or sharing is off.
    pub(super) async fn admit_shared_call(
        &self,
        emitter: &Emitter,
        c: &Correlation,
        tool: &ToolBinding,
    ) -> Option<Failure> {
        if let Some(refused) = self
            .admit_shared_arm(emitter, c, ArmKind::Tool, &tool.name)
            .await
        {
            return Some(refused);
        }
        let group = tool.resource_group.as_deref()?;
        self.admit_shared_arm(emitter, c, ArmKind::ResourceGroup, group)
            .await
    }

    /// Shares a tool's Retry-After as a cooldown every run and process
    /// honours (when breakers are shared): a 429 with a wait asks every
    /// caller to wait, not only the run that was told.
    pub(super) async fn share_cooldown(&self, tool: &ToolBinding, failure: &Failure) {
        let Some(shared) = self.shared_breakers() else {
            return;
        };
        if failure.category() != rein_core::Category::RateLimited {
            return;
        }
        if let Some(wait) = failure.retry_after().filter(|w| !w.is_zero()) {
            shared.cool_down(ArmKind::Tool, &tool.name, wait).await;
        }
    }

    /// Admits a call through one breaker arm, recording any transition; an
    /// open arm gives the model a `circuit_open` failure and no call is made.
    /// The permit is held: given back unused unless its outcome is reported.
    pub(in crate::run) fn admit(
        &self,
        emitter: &Emitter,
        c: &Correlation,
        kind: ArmKind,
        name: &str,
    ) -> Result<HeldPermit, Failure> {
        let now = self.clock.now();
        let admission = self.shared.breakers().admit(kind, name, now);
        if admission.transition.is_change() {
            emitter.emit(
                c,
                BreakerStateChanged {
                    arm: kind,
                    name: name.to_owned(),
                    transition: admission.transition,
                },
            );
        }
        match admission.admit {
            Admit::Accepted(permit) => Ok(HeldPermit::new(
                self.shared.breakers.clone(),
                kind,
                name,
                permit,
            )),
            Admit::Rejected { retry_after } => {
                emitter.emit(
                    c,
                    CallRejected::CircuitOpen(CircuitRejected {
                        arm: kind,
                        name: name.to_owned(),
                        reason: CircuitOpen::CircuitOpen,
                        retry_after,
                        shared: None,
                        opened_by: None,
                        open_reason: None,
                    }),
                );
                Err(Failure::circuit_open(name, retry_after))
            }
        }
    }

    /// The first open breaker arm of a tool (its own, then its resource
    /// group's), with the time until it may admit again.
    pub(in crate::run) fn open_arm(
        &self,
        tool: &ToolBinding,
    ) -> Option<(ArmKind, String, std::time::Duration)> {
        let now = self.clock.now();
        let breakers = self.shared.breakers();
        let mut arms = vec![(ArmKind::Tool, tool.name.as_str())];
        if let Some(group) = &tool.resource_group {
            arms.push((ArmKind::ResourceGroup, group.as_str()));
        }
        arms.into_iter().find_map(|(kind, name)| {
            let until = breakers.get(kind, name)?.open_until()?;
            (until > now).then(|| (kind, name.to_owned(), until.saturating_duration_since(now)))
        })
    }

    /// Reports a call's final outcome to the arm of `permit`; an opening
    /// or closing is shared with the other processes on the store (when
    /// breakers are shared) before this returns, so the next run anywhere
    /// knows.
    pub(in crate::run) async fn report_outcome(
        &self,
        emitter: &Emitter,
        c: &Correlation,
        mut permit: HeldPermit,
        outcome: Result<(), &Failure>,
    ) {
        let transition = permit.finish(outcome, self.clock.now());
        if let Some(shared) = self.shared_breakers() {
            shared
                .share_arm(permit.kind(), permit.name(), &transition)
                .await;
        }
        if transition.is_change() {
            emitter.emit(
                c,
                BreakerStateChanged {
                    arm: permit.kind(),
                    name: permit.name().to_owned(),
                    transition,
                },
            );
        }
    }
}

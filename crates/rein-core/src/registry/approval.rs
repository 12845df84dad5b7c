//! `[agents.NAME.approval]`: a gate on calls by their tool's
//! `side_effect_tier` — refused by the integrity check until rein has an
//! approval step.
//!
//! # Why refused, not ignored
//!
//! A tier gate means "a call at or above this tier waits for a human's
//! yes". rein has no way yet for a call to wait for a decision (no
//! `awaiting_approval` state, no endpoint to decide): accepting the setting
//! would either let every call through — a protection that looks on and
//! does nothing — or refuse every gated call. So `rein check` refuses it
//! with the reason, and the tier is made visible instead: every
//! `tool_call_started` and every effect of a handoff package names it.

use serde::Deserialize;

use super::spec::SideEffectTier;

/// `[agents.NAME.approval]` as written in config.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct ApprovalConfig {
    /// Calls to tools of this tier or above would need a human's approval;
    /// refused until approvals exist.
    pub from_tier: Option<SideEffectTier>,
}

/// Validates `[agents.NAME.approval]`: the field below the agent's table
/// and the reason, when it asks for what rein cannot do.
pub(super) fn check_approval(c: &ApprovalConfig) -> Result<(), (&'static str, String)> {
    match c.from_tier {
        None => Ok(()),
        Some(tier) => Err((
            "approval.from_tier",
            format!(
                "asks for a human's approval of calls at tier {tier} or above, but rein has no \
                 approval step yet (a call cannot wait for a decision), so the gate would hold \
                 nothing back; leave it out — the tier is shown in every tool_call_started event \
                 and beside each effect of a handoff package"
            ),
        )),
    }
}

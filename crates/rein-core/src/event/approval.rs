//! Payloads of approvals: a call paused for a human, and the decision.

use serde::{Deserialize, Serialize};

use crate::approval::{ArgsDigest, Verdict};
use crate::registry::SideEffectTier;
use crate::timestamp::Timestamp;

use super::run::HandOn;

/// `approval_requested`: a planned call waits for a human's decision; the
/// run paused durably before anything of its turn was sent, holding no
/// worker, claim or connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequested {
    /// The tool.
    pub tool: String,
    /// The digest of the arguments the approval binds to.
    pub args_digest: ArgsDigest,
    /// Why the call needs approval.
    pub why: String,
    /// The tool's side-effect tier, when it declares one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<SideEffectTier>,
    /// When the approval window closes.
    pub expires_at_ms: Timestamp,
    /// Who continues the run once every call of its turn is decided: a
    /// server's worker, or the caller's `rein resume`.
    pub continue_with: HandOn,
}

/// `approval_decided`: the decision on a call that waited, as the run read
/// it when it continued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalDecided {
    /// The tool.
    pub tool: String,
    /// What was decided.
    pub verdict: Verdict,
    /// Who decided (`rein` for an expiry).
    pub by: String,
    /// When it was decided.
    pub decided_at_ms: Timestamp,
    /// Why, in the decider's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How long the call waited, in ms.
    pub waited_ms: u64,
}

//! Approvals: a human's yes before a call, bound to the exact arguments
//! that will be sent.
//!
//! # Why bound to a digest
//!
//! The defects agent frameworks keep shipping with their approval
//! primitives are all one defect: the approval and the call are two
//! things that can drift apart. An approval held in memory is lost on a
//! restart; a resumed call re-planned by the model carries arguments the
//! human never saw; a timeout is recorded as the operator's "no". Here an
//! approval is a stored record of one planned call (its intent, so its
//! idempotency key), holding the arguments as the model proposed them and
//! their [`ArgsDigest`]. The call that is then sent is the persisted plan's,
//! checked against that digest: the human approves bytes, not a
//! description of them.
//!
//! ```text
//!  requested ──► approved ──► sent once, with exactly those arguments
//!      │    └──► rejected ──► never sent; the model is told "a human declined: …"
//!      └───────► expired  ──► never sent; `on_expiry` = reject | handoff
//! ```
//!
//! A verdict is final: a second decision on the same call is refused with
//! the first one.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::ids::{IntentId, RunId, TenantId};
use crate::timestamp::Timestamp;

/// The longest reason kept with a decision, in bytes: a sentence or two for
/// the model and the record, not a document.
pub const MAX_REASON_LEN: usize = 2_000;

/// The longest `by` kept with a decision, in bytes (an API key's name or a
/// `--by` on the CLI).
pub const MAX_DECIDER_LEN: usize = 200;

/// The digest of a call's arguments as they will be sent: `sha256:` and 64
/// hex digits over their JSON text.
///
/// Arguments are a [`serde_json::Value`] whose object keys are sorted, so
/// the text (and so the digest) is the same for the same arguments
/// wherever they were parsed: from the model's answer, from the persisted
/// plan, from a stored approval.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct ArgsDigest(String);

impl ArgsDigest {
    /// The digest of `args`.
    pub fn of(args: &Value) -> ArgsDigest {
        let text = args.to_string();
        let digest = Sha256::digest(text.as_bytes());
        let mut out = String::with_capacity(7 + 64);
        out.push_str("sha256:");
        for byte in digest {
            out.push_str(&format!("{byte:02x}"));
        }
        ArgsDigest(out)
    }

    /// A stored digest, as it was written.
    pub fn from_stored(text: String) -> ArgsDigest {
        ArgsDigest(text)
    }

    /// The digest's text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ArgsDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What became of a call that needed approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// A human said yes: the call is sent, once, with the approved
    /// arguments.
    Approved,
    /// A human said no: the call is never sent; the model is told why.
    Rejected,
    /// Nobody decided within the approval window. Recorded as such, never
    /// as a human's rejection; the call is never sent, and the agent's
    /// `approval.on_expiry` says what follows.
    Expired,
}

impl Verdict {
    /// The verdict's name as stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Approved => "approved",
            Verdict::Rejected => "rejected",
            Verdict::Expired => "expired",
        }
    }

    /// Reads a stored name.
    pub fn parse(text: &str) -> Option<Verdict> {
        match text {
            "approved" => Some(Verdict::Approved),
            "rejected" => Some(Verdict::Rejected),
            "expired" => Some(Verdict::Expired),
            _ => None,
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who decides an expired approval: rein itself, never a human's name.
pub const EXPIRED_BY: &str = "rein";

/// A decision on one call: its verdict, who gave it, when and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// What was decided.
    pub verdict: Verdict,
    /// Who decided: an API key's name, the CLI's `--by`, or
    /// [`EXPIRED_BY`] for an expiry.
    pub by: String,
    /// When it was recorded.
    pub at_ms: Timestamp,
    /// Why, in the decider's words (a rejection's reason is what the model
    /// is told).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Decision {
    /// The expiry of an approval whose window passed at `at_ms`.
    pub fn expiry(at_ms: Timestamp) -> Decision {
        Decision {
            verdict: Verdict::Expired,
            by: EXPIRED_BY.to_owned(),
            at_ms,
            reason: Some("nobody decided within the approval window".to_owned()),
        }
    }

    /// Checks what a human sent before it is recorded.
    ///
    /// # Errors
    ///
    /// The problem, for a human: an `expired` verdict (only rein records
    /// one), an empty or overlong `by`, or an overlong reason.
    pub fn validate(&self) -> Result<(), String> {
        if self.verdict == Verdict::Expired && self.by != EXPIRED_BY {
            return Err("a decision is `approved` or `rejected`: `expired` is recorded by rein when the window passes".to_owned());
        }
        if self.verdict != Verdict::Expired && self.by == EXPIRED_BY {
            return Err(format!(
                "`{EXPIRED_BY}` is the name rein records expiries under: a human decides under another"
            ));
        }
        if self.by.trim().is_empty()
            || self.by.len() > MAX_DECIDER_LEN
            || self.by.chars().any(char::is_control)
        {
            return Err(format!(
                "`by` must be 1 to {MAX_DECIDER_LEN} bytes without control characters"
            ));
        }
        if let Some(reason) = &self.reason
            && reason.len() > MAX_REASON_LEN
        {
            return Err(format!(
                "`reason` must be at most {MAX_REASON_LEN} bytes, but it is {}",
                reason.len()
            ));
        }
        Ok(())
    }
}

/// A call paused for a human's decision, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequest {
    /// The run.
    pub run_id: RunId,
    /// Its tenant: a key of another tenant never sees it.
    pub tenant: TenantId,
    /// The planned call: the intent whose key the call is sent under.
    pub intent_id: IntentId,
    /// The step that planned it.
    pub step: u32,
    /// The tool.
    pub tool: String,
    /// The arguments exactly as the model proposed them.
    pub args: Value,
    /// Their digest: what an approval binds to.
    pub args_digest: ArgsDigest,
    /// Why the call needs approval, for the human.
    pub why: String,
    /// When the run paused for it.
    pub requested_at_ms: Timestamp,
    /// When the approval window closes.
    pub expires_at_ms: Timestamp,
}

/// One approval: the request, and the decision once there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// The call that waits.
    #[serde(flatten)]
    pub request: ApprovalRequest,
    /// The decision, once recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

/// Where an approval stands at a moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Nobody decided yet, and the window is open.
    Pending,
    /// Nobody decided and the window closed: an expiry not yet recorded,
    /// read as [`Verdict::Expired`] (never as pending, never as approved).
    Lapsed,
    /// Decided.
    Decided(Verdict),
}

impl Approval {
    /// Where it stands at `now_ms`.
    pub fn standing(&self, now_ms: Timestamp) -> Standing {
        match &self.decision {
            Some(d) => Standing::Decided(d.verdict),
            None if now_ms >= self.request.expires_at_ms => Standing::Lapsed,
            None => Standing::Pending,
        }
    }

    /// The verdict at `now_ms`: the recorded one, or `expired` for a window
    /// that closed undecided; `None` while pending.
    pub fn verdict(&self, now_ms: Timestamp) -> Option<Verdict> {
        match self.standing(now_ms) {
            Standing::Pending => None,
            Standing::Lapsed => Some(Verdict::Expired),
            Standing::Decided(v) => Some(v),
        }
    }

    /// How long the call waited for its decision.
    pub fn waited(&self) -> Option<Duration> {
        self.decision.as_ref().map(|d| {
            d.at_ms
                .saturating_duration_since(self.request.requested_at_ms)
        })
    }
}

/// Why a call that needed approval was not sent: what the model is told
/// (a structured placeholder, never free text posing as a tool result)
/// and what the report says.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Withheld {
    /// A human rejected it, with their reason.
    Declined(Option<String>),
    /// Nobody decided within the window.
    Expired(Duration),
    /// It was approved, but its arguments are not the ones approved.
    ArgsChanged,
    /// It runs in a child run, which cannot wait for a human (its parent's
    /// call holds it).
    ChildCannotWait,
}

impl Withheld {
    /// Its `error` name in the reply.
    pub fn error(&self) -> &'static str {
        match self {
            Withheld::Declined(_) => "declined_by_human",
            Withheld::Expired(_) => "approval_expired",
            Withheld::ArgsChanged => "arguments_not_approved",
            Withheld::ChildCannotWait => "approval_unavailable",
        }
    }

    /// Why, in one clause.
    pub fn why(&self) -> String {
        match self {
            Withheld::Declined(reason) => format!(
                "a human declined it: {}",
                reason.as_deref().unwrap_or("no reason given")
            ),
            Withheld::Expired(window) => format!(
                "it needed a human's approval and nobody decided within {} s",
                window.as_secs()
            ),
            Withheld::ArgsChanged => "its arguments are not the ones a human approved".to_owned(),
            Withheld::ChildCannotWait => {
                "it needs a human's approval, and a child run cannot wait for one".to_owned()
            }
        }
    }

    /// What the model is told of `tool`'s call.
    pub fn reply(&self, tool: &str) -> String {
        serde_json::json!({
            "tool": tool,
            "ok": false,
            "error": self.error(),
            "message": format!(
                "{tool} was not called: {}. Do not retry it; continue without it or ask the user.",
                self.why()
            ),
            "retryable": false,
        })
        .to_string()
    }

    /// Every reply rein could have given of `tool`'s call under
    /// `approval`: what a checker compares a reply with.
    pub fn possible(approval: &Approval) -> Vec<Withheld> {
        let request = &approval.request;
        vec![
            Withheld::Declined(approval.decision.as_ref().and_then(|d| d.reason.clone())),
            Withheld::Expired(
                request
                    .expires_at_ms
                    .saturating_duration_since(request.requested_at_ms),
            ),
            Withheld::ArgsChanged,
            Withheld::ChildCannotWait,
        ]
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::json;

    #[test]
    fn the_digest_is_the_same_for_the_same_arguments_whatever_their_order() {
        let a: Value = serde_json::from_str(r#"{"to":"a@x","amount":3}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"amount":3,"to":"a@x"}"#).unwrap();
        assert_eq!(ArgsDigest::of(&a), ArgsDigest::of(&b));
        assert_ne!(
            ArgsDigest::of(&a),
            ArgsDigest::of(&json!({"to":"a@x","amount":4}))
        );
        assert!(ArgsDigest::of(&a).as_str().starts_with("sha256:"));
        assert_eq!(ArgsDigest::of(&a).as_str().len(), 7 + 64);
    }

    fn approval(expires: u64, decision: Option<Decision>) -> Approval {
        Approval {
            request: ApprovalRequest {
                run_id: RunId::new("r1").unwrap(),
                tenant: TenantId::new("t").unwrap(),
                intent_id: IntentId::new("i1").unwrap(),
                step: 1,
                tool: "send_email".into(),
                args: json!({}),
                args_digest: ArgsDigest::of(&json!({})),
                why: "tier high".into(),
                requested_at_ms: Timestamp::from_millis(1_000),
                expires_at_ms: Timestamp::from_millis(expires),
            },
            decision,
        }
    }

    #[test]
    fn an_undecided_approval_past_its_window_reads_expired_never_approved() {
        let a = approval(2_000, None);
        assert_eq!(a.standing(Timestamp::from_millis(1_999)), Standing::Pending);
        assert_eq!(a.verdict(Timestamp::from_millis(1_999)), None);
        assert_eq!(a.standing(Timestamp::from_millis(2_000)), Standing::Lapsed);
        assert_eq!(
            a.verdict(Timestamp::from_millis(2_000)),
            Some(Verdict::Expired)
        );
        let decided = approval(
            2_000,
            Some(Decision {
                verdict: Verdict::Approved,
                by: "ops".into(),
                at_ms: Timestamp::from_millis(1_500),
                reason: None,
            }),
        );
        // A decision made in time stands after the window.
        assert_eq!(
            decided.verdict(Timestamp::from_millis(9_000)),
            Some(Verdict::Approved)
        );
        assert_eq!(decided.waited(), Some(Duration::from_millis(500)));
    }

    #[test]
    fn a_human_cannot_record_an_expiry_or_decide_anonymously() {
        let mut d = Decision {
            verdict: Verdict::Expired,
            by: "ops".into(),
            at_ms: Timestamp::from_millis(1),
            reason: None,
        };
        assert!(d.validate().is_err());
        d.verdict = Verdict::Rejected;
        assert!(d.validate().is_ok());
        d.by = " ".into();
        assert!(d.validate().is_err());
        assert!(
            Decision::expiry(Timestamp::from_millis(1))
                .validate()
                .is_ok()
        );
    }

    #[test]
    fn the_model_is_told_a_human_declined_with_the_reason() {
        let reply: Value = serde_json::from_str(
            &Withheld::Declined(Some("amount too high".into())).reply("refund"),
        )
        .unwrap();
        assert_eq!(reply["error"], "declined_by_human");
        assert!(
            reply["message"]
                .as_str()
                .unwrap()
                .contains("amount too high")
        );
        assert_eq!(reply["retryable"], false);
    }
}

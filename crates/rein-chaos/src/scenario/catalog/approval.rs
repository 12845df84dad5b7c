//! Humans in the loop (issue 33): the email needs a human's approval. The
//! run pauses before it, durably, and the human approves, rejects or lets
//! the window close; the process is killed while the run waits, and while
//! a decision is being applied.
//!
//! What must hold besides the rest: an approved email is sent once, with
//! exactly the arguments approved; a rejected or expired one never
//! (invariant 13, judged on the desk's own log).

use super::{Layer, Plan, Scenario, happy};
use crate::invariant::Invariant as I;
use crate::mechanism::Mechanism as M;
use crate::scenario::{Crash, Decide};

const BINDS: [I; 3] = [
    I::ApprovedCallsOnly,
    I::OneEffectPerKey,
    I::ResumeReusesIntents,
];

/// The approval scenarios, C110 to C113.
pub(super) fn approval() -> Vec<Scenario> {
    use Layer::Orchestration as L;
    vec![
        Scenario::new(110, L, "approval-kill-while-waiting",
            "The email waits for approval; the process is killed right after the pause is durable, before its claim is released. The human approves; a resume sends the email once, with the approved arguments.",
            Plan::script(happy())
                .crash("awaiting_approval", 1)
                .decide(Decide::Approve, None))
            .risks(BINDS)
            .expects([M::ApprovalAwaited, M::Resumed]),
        Scenario::new(111, L, "approval-kill-while-applying",
            "The email is approved; the process continuing the run is killed after the desk answered the email and before its result is recorded. The resume never sends it again (irreversible), and what was sent is what was approved.",
            Plan::script(happy()).decide(
                Decide::Approve,
                Some(Crash { point: "after_call", nth: 1 }),
            ))
            .risks([I::ApprovedCallsOnly, I::IrreversibleNotRetried, I::OneEffectPerKey])
            .expects([M::ApprovalAwaited, M::Resumed]),
        Scenario::new(112, L, "approval-rejected",
            "The human rejects the email: it is never sent, the model is told a human declined it, and the run ends without a success.",
            Plan::script(happy()).decide(Decide::Reject, None))
            .risks([I::ApprovedCallsOnly, I::NoRawErrorText])
            .expects([M::ApprovalAwaited]),
        Scenario::new(113, L, "approval-expired",
            "Nobody decides: the window closes and the sweep records the approval expired (by rein, never as a human's rejection); the email is never sent.",
            Plan::script(happy()).decide(Decide::Expire, None))
            .risks([I::ApprovedCallsOnly])
            .expects([M::ApprovalAwaited]),
    ]
}

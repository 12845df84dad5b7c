//! Invariant 13 (issue 33): a human's decision binds what is sent. Judged
//! on the order desk's own log, not on rein's account of itself: every
//! effect the desk applied for a tool that needs approval must belong to
//! an intent whose approval is `approved`, with exactly the approved
//! arguments, once.

use std::collections::{BTreeMap, HashMap};

use rein_core::approval::{Approval, Verdict};
use rein_testkit::order_desk::{EffectKind, RequestRecord};

use super::{Invariant, Violation, request_intent, violation};
use crate::evidence::{Evidence, RunEvidence};

pub(super) fn approved_calls_only(evidence: &Evidence, out: &mut Vec<Violation>) {
    if evidence.gated.is_empty() {
        return;
    }
    let requests: HashMap<u64, &RequestRecord> =
        evidence.desk.requests.iter().map(|r| (r.seq, r)).collect();
    let approvals: HashMap<&str, (&RunEvidence, &Approval)> = evidence
        .runs
        .iter()
        .flat_map(|run| {
            run.approvals
                .iter()
                .map(move |a| (a.request.intent_id.as_str(), (run, a)))
        })
        .collect();
    let mut sent: BTreeMap<&str, (usize, &RunEvidence)> = BTreeMap::new();
    for effect in &evidence.desk.side_effects {
        if effect.effect != EffectKind::Applied || !evidence.gated.contains(&effect.tool) {
            continue;
        }
        let intent = requests
            .get(&effect.request_seq)
            .and_then(|r| request_intent(r));
        let Some((run, approval)) = intent.and_then(|i| approvals.get(i)) else {
            violation(
                out,
                Invariant::ApprovedCallsOnly,
                None,
                format!(
                    "{} was applied at the desk (effect #{}, intent {}) with no approval, though it needs a human's",
                    effect.tool,
                    effect.seq,
                    intent.unwrap_or("unknown")
                ),
            );
            continue;
        };
        let verdict = approval.decision.as_ref().map(|d| d.verdict);
        if verdict != Some(Verdict::Approved) {
            violation(
                out,
                Invariant::ApprovedCallsOnly,
                Some(run),
                format!(
                    "{} (intent {}) was applied at the desk although its approval is {}",
                    effect.tool,
                    approval.request.intent_id,
                    verdict.map_or("undecided", Verdict::as_str)
                ),
            );
        }
        if effect.args != approval.request.args {
            violation(
                out,
                Invariant::ApprovedCallsOnly,
                Some(run),
                format!(
                    "{} (intent {}) was applied with arguments {} other than those approved, {}",
                    effect.tool, approval.request.intent_id, effect.args, approval.request.args
                ),
            );
        }
        sent.entry(approval.request.intent_id.as_str())
            .or_insert((0, run))
            .0 += 1;
    }
    for (intent, (n, run)) in sent {
        if n > 1 {
            violation(
                out,
                Invariant::ApprovedCallsOnly,
                Some(run),
                format!("the approved call {intent} was applied {n} times at the desk"),
            );
        }
    }
}

/// Whether `content` is, byte for byte, the reply rein gives of a call it
/// withheld under one of `run`'s approvals (a human's reason is part of
/// it by design: the model is told why a human declined).
pub(super) fn is_withheld_reply(run: &RunEvidence, content: &str) -> bool {
    run.approvals.iter().any(|approval| {
        rein_core::approval::Withheld::possible(approval)
            .iter()
            .any(|w| w.reply(&approval.request.tool) == content)
    })
}

//! The partial-failure decision: whether a failed run keeps its effects,
//! undoes them or hands them to a human.

use rein_core::report::{End, Settled};
use rein_core::{Category, FailurePolicy, LedgerRecord, LedgerStatus, RunReport};

use super::super::tree_settle::Item;

/// What a failed run does with its effects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Decision {
    /// Nothing is open: nothing to settle; the run concludes as `settled`.
    Nothing(Settled),
    /// The effects stay on purpose: time may fix the failure, or the policy
    /// is to continue. The report says partial success.
    Keep,
    /// The effects go to a human untouched, for `reason`.
    HandOff(String),
    /// The effects are undone in strict reverse order of execution.
    Compensate,
}

/// What the decision is made on: why the run ended, its report before
/// settlement, its policy, and its tree's ledger as it stands.
pub(super) struct Situation<'s> {
    /// Why the run stopped.
    pub(super) end: &'s End,
    /// Its report before settlement (what the calls say).
    pub(super) report: &'s RunReport,
    /// The agent's `on_failure`.
    pub(super) policy: FailurePolicy,
    /// The open records of the whole tree (done, or in doubt).
    pub(super) open: &'s [&'s LedgerRecord],
    /// Some record was already left to a human (by an earlier process or
    /// the reconciler): the run cannot end as if the world were restored.
    pub(super) already_human: bool,
    /// An irreversible effect that cannot be undone is open somewhere in
    /// the tree.
    pub(super) irreversible_open: bool,
}

/// The partial-failure decision for a run that did not succeed.
///
/// In order: nothing open settles nothing; an effect in doubt is never
/// kept silently, but done effects are kept when time may fix the failure
/// or the policy continues; an irreversible effect that cannot be undone
/// stops automatic undoing altogether (reverting the other writes alone
/// could contradict what it already told the world), as does a `handoff`
/// policy; everything else is compensated.
pub(super) fn decide(s: &Situation<'_>) -> Decision {
    // An approval that expired under `on_expiry = "handoff"`: a human
    // takes over, whatever the policy, with what the run did untouched.
    if let End::ApprovalExpired(why) = s.end {
        if s.open.is_empty() && !s.already_human {
            return Decision::Nothing(Settled::HandedOff(why.clone()));
        }
        return Decision::HandOff(format!("{why}; its effects go to a human untouched"));
    }
    // A read-only prefix (or writes that certainly did not happen):
    // degrade, the report already flags the gap.
    if s.open.is_empty() && !s.already_human {
        // An interrupted settlement that had already undone every effect:
        // the run failed and the world is as before.
        return Decision::Nothing(if matches!(s.end, End::Settling(_)) {
            Settled::Undone
        } else {
            Settled::Kept
        });
    }
    let in_doubt = s.open.iter().any(|r| r.status == LedgerStatus::Pending);
    if !s.already_human
        && !in_doubt
        && (fixable_by_time(s.end, s.report) || s.policy == FailurePolicy::Continue)
    {
        return Decision::Keep;
    }
    if s.irreversible_open {
        return Decision::HandOff(
            "the run failed after an irreversible effect that cannot be undone; nothing was undone automatically"
                .to_owned(),
        );
    }
    if s.policy == FailurePolicy::Handoff {
        return Decision::HandOff(
            "the run failed after changing the world and its policy is to hand off".to_owned(),
        );
    }
    Decision::Compensate
}

/// The order compensation runs in: strict reverse order of execution
/// across the tree (invariant 4), a child run's effects at the place of
/// the call that started it.
pub(super) fn compensation_order<'i>(open: &[&'i Item]) -> Vec<&'i Item> {
    let mut order: Vec<&Item> = open.to_vec();
    order.sort_by(|a, b| {
        b.path
            .cmp(&a.path)
            .then_with(|| b.record.seq.cmp(&a.record.seq))
    });
    order
}

/// Whether the failure that stopped the run is one that time may fix: a
/// rate limit, a timeout, an open breaker, an exhausted budget. Then the
/// effects are kept and the run is recoverable by resuming.
pub(super) fn fixable_by_time(end: &End, report: &RunReport) -> bool {
    match end {
        End::Budget(_) | End::FinalTurn { .. } => true,
        // A model that is down may come back; one that refuses the
        // credentials or the request will not.
        End::ModelFailed(category, _) => matches!(
            category,
            Category::Transient
                | Category::Timeout
                | Category::RateLimited
                | Category::Overloaded
                | Category::CircuitOpen
        ),
        // Never settled: an interrupted run is handed on before this.
        End::Interrupted => true,
        End::Loop(_)
        | End::StoreFailed(_)
        | End::Settling(_)
        | End::Cancelled(_)
        | End::Closed { .. }
        | End::Internal(_)
        | End::ApprovalExpired(_) => false,
        End::Answer(_) => report.incomplete.iter().all(|a| {
            matches!(
                a.category,
                Category::Transient
                    | Category::Timeout
                    | Category::RateLimited
                    | Category::Overloaded
                    | Category::CircuitOpen
                    | Category::BudgetExhausted
            )
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use rein_core::Timestamp;
    use rein_core::deadline::{Dimension, Exhausted, Usage};
    use rein_core::report::{RunFacts, derive};
    use rein_core::{IntentId, RunId, ToolClass};
    use serde_json::json;

    use super::*;

    fn report(end: &End) -> RunReport {
        derive(
            &RunFacts {
                run_id: RunId::new("r").unwrap(),
                agent: "a".into(),
                input: "x".into(),
                end: end.clone(),
                settled: Settled::Kept,
                outcome: None,
                calls: vec![],
                consumed: Usage::default(),
                elapsed_ms: 0,
                steps: 1,
                models: vec![],
                compensations: vec![],
                resume: None,
                in_flight: vec![],
                strategies_not_tried: vec![],
                notes: vec![],
                hint: Default::default(),
                owners: Default::default(),
            },
            &[],
        )
    }

    fn record(id: &str, seq: u64, status: LedgerStatus) -> LedgerRecord {
        LedgerRecord {
            run_id: RunId::new("r").unwrap(),
            intent_id: IntentId::new(id).unwrap(),
            seq,
            step: 1,
            tool: "update".into(),
            class: ToolClass::IdempotentWrite,
            idempotency_key: None,
            args: json!({}),
            status,
            result: None,
            failure: None,
            attempts: 1,
            created_at_ms: Timestamp::from_millis(0),
            updated_at_ms: Timestamp::from_millis(0),
        }
    }

    fn budget() -> End {
        End::Budget(Exhausted {
            dimension: Dimension::Steps,
            needed: 1,
            remaining: 0,
        })
    }

    fn decided(
        end: End,
        policy: FailurePolicy,
        open: &[LedgerRecord],
        human: bool,
        irr: bool,
    ) -> Decision {
        let report = report(&end);
        let open: Vec<&LedgerRecord> = open.iter().collect();
        decide(&Situation {
            end: &end,
            report: &report,
            policy,
            open: &open,
            already_human: human,
            irreversible_open: irr,
        })
    }

    fn stuck() -> End {
        End::StoreFailed("the store refused the checkpoint".into())
    }

    #[test]
    fn nothing_open_settles_nothing_and_a_resumed_settlement_counts_as_undone() {
        let p = FailurePolicy::default();
        assert_eq!(
            decided(stuck(), p, &[], false, false),
            Decision::Nothing(Settled::Kept)
        );
        assert_eq!(
            decided(End::Settling("resumed".into()), p, &[], false, false),
            Decision::Nothing(Settled::Undone)
        );
    }

    #[test]
    fn done_effects_are_kept_when_time_may_fix_the_failure_or_the_policy_continues() {
        let done = [record("i", 1, LedgerStatus::Succeeded)];
        assert_eq!(
            decided(budget(), FailurePolicy::default(), &done, false, false),
            Decision::Keep
        );
        assert_eq!(
            decided(stuck(), FailurePolicy::Continue, &done, false, false),
            Decision::Keep
        );
        assert_eq!(
            decided(stuck(), FailurePolicy::default(), &done, false, false),
            Decision::Compensate,
            "a failure time will not fix"
        );
    }

    #[test]
    fn an_effect_in_doubt_or_already_with_a_human_is_never_kept_silently() {
        let in_doubt = [record("i", 1, LedgerStatus::Pending)];
        assert_eq!(
            decided(budget(), FailurePolicy::Continue, &in_doubt, false, false),
            Decision::Compensate
        );
        let done = [record("i", 1, LedgerStatus::Succeeded)];
        assert_eq!(
            decided(budget(), FailurePolicy::Continue, &done, true, false),
            Decision::Compensate
        );
        assert_eq!(
            decided(budget(), FailurePolicy::default(), &[], true, false),
            Decision::Compensate,
            "nothing open, but a human has some of it: not Nothing"
        );
    }

    #[test]
    fn an_irreversible_effect_or_the_handoff_policy_hands_off_untouched() {
        let done = [record("i", 1, LedgerStatus::Succeeded)];
        let Decision::HandOff(why) = decided(stuck(), FailurePolicy::Handoff, &done, false, true)
        else {
            panic!("not handed off");
        };
        assert!(
            why.contains("irreversible"),
            "the irreversible reason wins: {why}"
        );
        let Decision::HandOff(why) = decided(stuck(), FailurePolicy::Handoff, &done, false, false)
        else {
            panic!("not handed off");
        };
        assert!(why.contains("policy is to hand off"), "{why}");
    }

    #[test]
    fn compensation_runs_in_strict_reverse_order_of_execution_across_the_tree() {
        let item = |path: Vec<(u32, u32)>, seq: u64| Item {
            member: None,
            record: record(&format!("i{seq}"), seq, LedgerStatus::Succeeded),
            path,
        };
        // Step 1's call, then step 2's call that started a child with two
        // effects, then step 3's call.
        let items = [
            item(vec![(1, 0)], 1),
            item(vec![(2, 0), (1, 0)], 5),
            item(vec![(2, 0), (1, 1)], 6),
            item(vec![(3, 0)], 9),
        ];
        let open: Vec<&Item> = items.iter().collect();
        let order: Vec<u64> = compensation_order(&open)
            .iter()
            .map(|i| i.record.seq)
            .collect();
        assert_eq!(order, vec![9, 6, 5, 1]);
    }
}

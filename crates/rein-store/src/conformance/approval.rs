//! Conformance checks of approvals ([`StepCommit::approvals`],
//! [`Store::decide_approval`], [`Store::approvals`],
//! [`Store::expire_approvals`]).

use std::time::Duration;

use rein_core::approval::{ApprovalRequest, ArgsDigest, Decision, EXPIRED_BY, Verdict};
use rein_core::{IntentId, Outcome, RunId, TenantId, Timestamp};
use serde_json::json;

use super::{BASE_MS, created, ms, report};
use crate::StoreExt as _;
use crate::{ApprovalFilter, RunStatus, StatusChange, StepCommit, Store, StoreError};

fn request(run_id: &RunId, intent: &str, amount: u64, window: Duration) -> ApprovalRequest {
    let args = json!({ "order_id": "42", "amount": amount });
    ApprovalRequest {
        run_id: run_id.clone(),
        tenant: TenantId::new("tenant-a").unwrap(),
        intent_id: IntentId::new(intent).unwrap(),
        step: 3,
        tool: "refund_order".to_owned(),
        args_digest: ArgsDigest::of(&args),
        args,
        why: "args.amount is 1500, above 1000".to_owned(),
        requested_at_ms: BASE_MS,
        expires_at_ms: BASE_MS + window,
    }
}

fn decision(verdict: Verdict, by: &str, at: Timestamp) -> Decision {
    Decision {
        verdict,
        by: by.to_owned(),
        at_ms: at,
        reason: (verdict == Verdict::Rejected).then(|| "too large".to_owned()),
    }
}

/// Pauses `run_id` for `requests` as the engine does: one commit writes
/// them and moves the run to `awaiting_approval`.
async fn pause(store: &dyn Store, run_id: &RunId, requests: Vec<ApprovalRequest>) {
    store
        .set_run_status(run_id, RunStatus::Running, None, BASE_MS)
        .await
        .unwrap();
    store
        .commit_step(
            run_id,
            StepCommit {
                approvals: requests,
                status: Some(StatusChange {
                    status: RunStatus::AwaitingApproval,
                    report: None,
                    at_ms: BASE_MS + ms(1),
                }),
                expect_status: Some(RunStatus::Running),
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();
}

async fn status(store: &dyn Store, run_id: &RunId) -> RunStatus {
    store.get_run(run_id).await.unwrap().unwrap().status
}

/// The approvals of `run_id` still waiting for a decision.
async fn pending_of(store: &dyn Store, run_id: &RunId) -> Vec<rein_core::approval::Approval> {
    store
        .approvals(&ApprovalFilter {
            pending: true,
            ..of_run(run_id)
        })
        .await
        .unwrap()
}

fn of_run(run_id: &RunId) -> ApprovalFilter {
    ApprovalFilter {
        run_id: Some(run_id.clone()),
        limit: 100,
        ..ApprovalFilter::default()
    }
}

/// A run driven by its caller's loop waits for a decision while it stays
/// `running` (its caller holds it): its request, written with a commit
/// that changes no status, is listed pending; the decision is recorded
/// without moving the run, and a run that ends takes its undecided
/// requests off the pending list.
pub async fn approvals_of_a_running_run_are_pending_and_decided_in_place(store: &dyn Store) {
    let day = Duration::from_secs(86_400);
    let run_id = created(store, "approval-held-run").await;
    store
        .set_run_status(&run_id, RunStatus::Running, None, BASE_MS)
        .await
        .unwrap();
    let (a, b) = (
        request(&run_id, "intent-a", 1500, day),
        request(&run_id, "intent-b", 2500, day),
    );
    store
        .commit_step(
            &run_id,
            StepCommit {
                approvals: vec![a.clone(), b.clone()],
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();
    let listed = pending_of(store, &run_id).await;
    assert_eq!(
        listed.len(),
        2,
        "both pending while the run runs: {listed:?}"
    );
    let one = store
        .approvals(&ApprovalFilter {
            intent_id: Some(b.intent_id.clone()),
            ..of_run(&run_id)
        })
        .await
        .unwrap();
    assert_eq!(
        one.iter().map(|a| &a.request).collect::<Vec<_>>(),
        [&b],
        "one call's, by its intent"
    );

    let yes = decision(Verdict::Approved, "alice", BASE_MS + ms(10));
    let decided = store
        .decide_approval(&run_id, &a.intent_id, yes.clone())
        .await
        .unwrap();
    assert_eq!(decided.approval.decision, Some(yes));
    assert!(!decided.continues, "a running run is not moved");
    assert_eq!(status(store, &run_id).await, RunStatus::Running);

    store
        .set_run_status(
            &run_id,
            RunStatus::Finished(Outcome::Failed),
            Some(report(Outcome::Failed)),
            BASE_MS + ms(20),
        )
        .await
        .unwrap();
    let listed = pending_of(store, &run_id).await;
    assert!(
        listed.is_empty(),
        "an ended run waits for nothing: {listed:?}"
    );
}

/// The requests of a pausing commit are listed pending; each takes one
/// decision (a second is refused with the first); the decision that
/// leaves none undecided moves the run back to `running`, and only it.
pub async fn approvals_are_decided_once_and_the_last_continues_the_run(store: &dyn Store) {
    let day = Duration::from_secs(86_400);
    let run_id = created(store, "approval-run").await;
    let (a, b) = (
        request(&run_id, "intent-a", 1500, day),
        request(&run_id, "intent-b", 2500, day),
    );
    pause(store, &run_id, vec![a.clone(), b.clone()]).await;
    assert_eq!(status(store, &run_id).await, RunStatus::AwaitingApproval);

    let pending = pending_of(store, &run_id).await;
    let requests: Vec<_> = pending.iter().map(|p| p.request.clone()).collect();
    assert_eq!(
        requests,
        vec![a.clone(), b.clone()],
        "both pending, as written"
    );
    assert!(pending.iter().all(|p| p.decision.is_none()));

    // A request written again (a resumed step) keeps the first whole.
    let mut changed = a.clone();
    changed.args = json!({ "order_id": "42", "amount": 1 });
    changed.args_digest = ArgsDigest::of(&changed.args);
    store
        .commit_step(
            &run_id,
            StepCommit {
                approvals: vec![changed],
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();

    let yes = decision(Verdict::Approved, "alice", BASE_MS + ms(10));
    let first = store
        .decide_approval(&run_id, &a.intent_id, yes.clone())
        .await
        .unwrap();
    assert_eq!(first.approval.request, a, "the request as first written");
    assert_eq!(first.approval.decision, Some(yes.clone()));
    assert!(!first.continues, "intent-b still waits");
    assert_eq!(status(store, &run_id).await, RunStatus::AwaitingApproval);

    let again = store
        .decide_approval(
            &run_id,
            &a.intent_id,
            decision(Verdict::Rejected, "mallory", BASE_MS + ms(11)),
        )
        .await
        .unwrap_err();
    match again {
        StoreError::AlreadyDecided { approval } => {
            assert_eq!(approval.decision, Some(yes.clone()), "the first decision");
        }
        other => panic!("a second decision must be AlreadyDecided, got {other:?}"),
    }

    let no = decision(Verdict::Rejected, "bob", BASE_MS + ms(12));
    let last = store
        .decide_approval(&run_id, &b.intent_id, no.clone())
        .await
        .unwrap();
    assert!(last.continues, "the last decision continues the run");
    assert_eq!(status(store, &run_id).await, RunStatus::Running);

    let all = store.approvals(&of_run(&run_id)).await.unwrap();
    let decisions: Vec<_> = all.iter().map(|a| a.decision.clone()).collect();
    assert_eq!(decisions, vec![Some(yes), Some(no)]);
    let pending = pending_of(store, &run_id).await;
    assert!(pending.is_empty(), "none pending: {pending:?}");

    // Tenants see their own only.
    let theirs = store
        .approvals(&ApprovalFilter {
            tenant: Some(TenantId::new("tenant-z").unwrap()),
            ..of_run(&run_id)
        })
        .await
        .unwrap();
    assert!(theirs.is_empty(), "another tenant's listing: {theirs:?}");
}

/// A window that closes is recorded `expired` by rein, never as a human's
/// rejection; a "yes" after it is refused with the expiry; the sweep
/// records only closed windows, once, and continues the run.
pub async fn approvals_expire_once_their_window_closes(store: &dyn Store) {
    let window = Duration::from_secs(60);
    // A late decision: the expiry is recorded, and the "yes" refused.
    let late = created(store, "approval-late").await;
    let a = request(&late, "intent-a", 1500, window);
    pause(store, &late, vec![a.clone()]).await;
    let refused = store
        .decide_approval(
            &late,
            &a.intent_id,
            decision(Verdict::Approved, "alice", a.expires_at_ms + ms(1)),
        )
        .await
        .unwrap_err();
    match refused {
        StoreError::AlreadyDecided { approval } => {
            let decided = approval.decision.expect("the expiry is recorded");
            assert_eq!(decided.verdict, Verdict::Expired);
            assert_eq!(decided.by, EXPIRED_BY);
            assert_eq!(decided.at_ms, a.expires_at_ms);
        }
        other => panic!("a late decision must be AlreadyDecided, got {other:?}"),
    }
    assert_eq!(status(store, &late).await, RunStatus::Running);

    // The sweep. Its windows close before BASE_MS, where no other check's
    // do, and only this check's runs are looked at.
    let swept = created(store, "approval-swept").await;
    let mut b = request(&swept, "intent-b", 1500, window);
    b.requested_at_ms = Timestamp::from_millis(BASE_MS.as_millis() - 600_000);
    b.expires_at_ms = b.requested_at_ms + window;
    pause(store, &swept, vec![b.clone()]).await;
    let mine = |approvals: Vec<rein_core::approval::Approval>| -> Vec<_> {
        approvals
            .into_iter()
            .filter(|a| a.request.run_id == swept)
            .collect()
    };
    let early = store
        .expire_approvals(b.expires_at_ms - ms(1), 1_000)
        .await
        .unwrap();
    assert!(mine(early).is_empty(), "an open window must not expire");
    assert_eq!(status(store, &swept).await, RunStatus::AwaitingApproval);
    let expired = mine(
        store
            .expire_approvals(b.expires_at_ms, 1_000)
            .await
            .unwrap(),
    );
    assert_eq!(expired.len(), 1, "the closed window: {expired:?}");
    let decided = expired[0].decision.clone().unwrap();
    assert_eq!(
        (decided.verdict, decided.by.as_str()),
        (Verdict::Expired, EXPIRED_BY)
    );
    assert_eq!(status(store, &swept).await, RunStatus::Running);
    let again = store
        .expire_approvals(b.expires_at_ms + ms(1), 1_000)
        .await
        .unwrap();
    assert!(mine(again).is_empty(), "an expiry is recorded once");
}

/// Refusals write nothing: an unknown call is not found, a human cannot
/// record `expired` or decide anonymously, a request naming another run
/// fails the whole commit.
pub async fn approval_refusals_write_nothing(store: &dyn Store) {
    let day = Duration::from_secs(86_400);
    let run_id = created(store, "approval-refused").await;
    let a = request(&run_id, "intent-a", 1500, day);
    pause(store, &run_id, vec![a.clone()]).await;

    let unknown = IntentId::new("intent-unknown").unwrap();
    let err = store
        .decide_approval(
            &run_id,
            &unknown,
            decision(Verdict::Approved, "alice", BASE_MS + ms(5)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            StoreError::NotFound {
                what: "approval",
                ..
            }
        ),
        "an unknown call must be NotFound, got {err:?}"
    );
    for (bad, what) in [
        (
            decision(Verdict::Expired, "alice", BASE_MS + ms(5)),
            "expired by a human",
        ),
        (decision(Verdict::Approved, "", BASE_MS + ms(5)), "nobody"),
    ] {
        let err = store
            .decide_approval(&run_id, &a.intent_id, bad)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::Invalid { .. }),
            "{what}: must be Invalid, got {err:?}"
        );
    }
    let pending = pending_of(store, &run_id).await;
    assert_eq!(pending.len(), 1, "still pending after refusals");
    assert_eq!(status(store, &run_id).await, RunStatus::AwaitingApproval);

    // One turn's, by its step.
    let turn = |step| ApprovalFilter {
        step: Some(step),
        ..of_run(&run_id)
    };
    assert_eq!(store.approvals(&turn(3)).await.unwrap().len(), 1);
    assert!(store.approvals(&turn(4)).await.unwrap().is_empty());

    // A run cancelled while it waited: nothing of it is pending any more,
    // and no decision is taken.
    store
        .set_run_status(
            &run_id,
            RunStatus::Finished(Outcome::Cancelled),
            Some(report(Outcome::Cancelled)),
            BASE_MS + ms(9),
        )
        .await
        .unwrap();
    let pending = pending_of(store, &run_id).await;
    assert!(
        pending.is_empty(),
        "a cancelled run waits for nothing: {pending:?}"
    );
    let err = store
        .decide_approval(
            &run_id,
            &a.intent_id,
            decision(Verdict::Approved, "alice", BASE_MS + ms(10)),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::FinishedRun { .. }),
        "a decision on an ended run must be FinishedRun, got {err:?}"
    );

    let other = created(store, "approval-other").await;
    let foreign = request(&run_id, "intent-f", 1500, day);
    let err = store
        .commit_step(
            &other,
            StepCommit {
                approvals: vec![foreign],
                ..StepCommit::default()
            },
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid { .. }),
        "a request of another run must be Invalid, got {err:?}"
    );
    assert!(store.approvals(&of_run(&other)).await.unwrap().is_empty());
}

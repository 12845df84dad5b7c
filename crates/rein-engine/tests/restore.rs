//! Resuming from a checkpoint that cannot be decoded (issue 14): the run is
//! not resumable, the error names the field, and nothing is resumed with a
//! default in its place. Real parts: the order desk on loopback and a real
//! SQLite file, corrupted through the store's own API.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{agent, answer, call, harness, run, script};
use rein_core::deadline::BudgetLimits;
use rein_core::{Outcome, RunId};
use rein_engine::run::{AcceptAll, AgentBinding, EngineError};
use rein_store::{LeaseKind, RunStatus, StepCommit, Store, StoreExt};
use rein_testkit::order_desk::{Faults, GET_ORDER};
use serde_json::{Value, json};

/// A run of two reads that stops at its step ceiling after step 2: it ends
/// `budget_exhausted`, recoverable, with a checkpoint of step 2.
fn two_reads(h: &common::Harness, steps: u32) -> AgentBinding {
    let mut a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            call(GET_ORDER, json!({"order_id": "A-1002"})),
            answer("done"),
        ])),
        true,
    );
    a.budget = BudgetLimits::new(Duration::from_secs(20))
        .unwrap()
        .with_steps(steps)
        .unwrap();
    a
}

/// Rewrites the run's latest checkpoint with `corrupt` applied to it.
async fn corrupt_checkpoint(
    store: &dyn Store,
    run_id: &RunId,
    corrupt: impl FnOnce(&mut Value, &mut Value),
) -> u32 {
    let mut checkpoint = store.latest_checkpoint(run_id).await.unwrap().unwrap();
    corrupt(&mut checkpoint.messages, &mut checkpoint.state);
    let step = checkpoint.step;
    store
        .commit_step(
            run_id,
            StepCommit {
                checkpoint: Some(checkpoint),
                ..StepCommit::default()
            },
        )
        .await
        .unwrap();
    step
}

async fn refused_reason(h: &common::Harness, run_id: &RunId) -> String {
    let a = two_reads(h, 10);
    match h.engine.resume(&a, &AcceptAll, run_id, None).await {
        Err(EngineError::NotResumable { run_id: id, reason }) => {
            assert_eq!(&id, run_id);
            reason
        }
        Err(other) => panic!("not NotResumable: {other}"),
        Ok(out) => panic!("resumed from a corrupted checkpoint: {:?}", out.report),
    }
}

/// The run is left as it was: still `budget_exhausted` and recoverable,
/// unclaimed, nothing more sent to the tool.
async fn left_alone(h: &common::Harness, run_id: &RunId) {
    let record = h.store.get_run(run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Finished(Outcome::BudgetExhausted));
    assert!(record.report.unwrap().recoverable);
    // The claim taken for the resume was let go before the error came back.
    let leases = h.store.leases_of_run(run_id).await.unwrap();
    assert!(
        leases.iter().all(|l| l.kind != LeaseKind::Run),
        "{leases:?}"
    );
    assert_eq!(h.desk.request_count(GET_ORDER), 2, "nothing ran again");
}

#[tokio::test]
async fn a_checkpoint_with_undecodable_calls_is_not_resumable_and_names_the_field() {
    let h = harness(Faults::none()).await;
    let out = run(&h, &two_reads(&h, 2)).await;
    assert_eq!(out.report.outcome, Outcome::BudgetExhausted);
    assert!(out.report.recoverable, "{:?}", out.report);
    let step = corrupt_checkpoint(h.store.as_ref(), &out.run_id, |_, state| {
        state["calls"][0]["outcome"] = json!("not a result");
    })
    .await;

    let reason = refused_reason(&h, &out.run_id).await;
    assert!(
        reason.contains(&format!("checkpoint of step {step}")),
        "{reason}"
    );
    assert!(reason.contains("`state.calls[0].outcome`"), "{reason}");
    // Shown as the error's text, as `rein resume` and the API show it.
    let shown = EngineError::NotResumable {
        run_id: out.run_id.clone(),
        reason: reason.clone(),
    }
    .to_string();
    assert!(
        shown.contains("cannot be resumed: its checkpoint"),
        "{shown}"
    );
    left_alone(&h, &out.run_id).await;
}

#[tokio::test]
async fn a_checkpoint_with_an_undecodable_transcript_or_missing_facts_is_not_resumable() {
    let h = harness(Faults::none()).await;
    let out = run(&h, &two_reads(&h, 2)).await;
    corrupt_checkpoint(h.store.as_ref(), &out.run_id, |messages, _| {
        *messages = json!({"not": "a transcript"});
    })
    .await;
    let reason = refused_reason(&h, &out.run_id).await;
    assert!(reason.contains("`messages` does not decode"), "{reason}");
    left_alone(&h, &out.run_id).await;

    corrupt_checkpoint(h.store.as_ref(), &out.run_id, |messages, state| {
        *messages = json!([]);
        state.as_object_mut().unwrap().remove("facts");
    })
    .await;
    let reason = refused_reason(&h, &out.run_id).await;
    assert!(reason.contains("`state.facts` is missing"), "{reason}");
    left_alone(&h, &out.run_id).await;
}

#[tokio::test]
async fn an_intact_checkpoint_still_resumes_with_a_raised_budget() {
    let h = harness(Faults::none()).await;
    let out = run(&h, &two_reads(&h, 2)).await;
    // The control: the same records, not corrupted, resume and finish.
    let resumed = h
        .engine
        .resume(&two_reads(&h, 10), &AcceptAll, &out.run_id, None)
        .await
        .unwrap();
    assert_eq!(
        resumed.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        resumed.report
    );
    assert_eq!(
        h.desk.request_count(GET_ORDER),
        2,
        "completed steps not rerun"
    );
}

/// Three reads, then the answer, stopping at its step ceiling.
fn three_reads(h: &common::Harness, steps: u32) -> AgentBinding {
    let mut a = agent(
        &h.desk,
        script(json!([
            call(GET_ORDER, json!({"order_id": "A-1001"})),
            call(GET_ORDER, json!({"order_id": "A-1002"})),
            call(GET_ORDER, json!({"order_id": "A-1003"})),
            answer("done"),
        ])),
        true,
    );
    a.budget = BudgetLimits::new(Duration::from_secs(20))
        .unwrap()
        .with_steps(steps)
        .unwrap();
    a
}

/// Sorted, as a release before deltas serialised its sets.
fn sorted(list: &Value) -> Value {
    let mut items: Vec<String> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_owned())
        .collect();
    items.sort();
    json!(items)
}

/// A run checkpointed whole, as a release before checkpoint deltas stored
/// it, resumes with this one: its steps are not run again, and the step
/// after it is appended on top of the whole checkpoint.
#[tokio::test]
async fn a_run_checkpointed_whole_by_an_older_release_resumes_and_appends_to_it() {
    let h = harness(Faults::none()).await;
    let out = run(&h, &three_reads(&h, 2)).await;
    assert_eq!(out.report.outcome, Outcome::BudgetExhausted);
    // Store step 2 in the whole form (this also drops the deltas up to
    // it): what the file of an older release holds for this run.
    let mut whole = h
        .store
        .latest_checkpoint(&out.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(whole.step, 2);
    for set in ["facts", "tools_tried"] {
        whole.state[set] = sorted(&whole.state[set]);
    }
    let before = whole.clone();
    h.store.write_checkpoint(whole).await.unwrap();
    assert_eq!(
        h.store.latest_checkpoint(&out.run_id).await.unwrap(),
        Some(before.clone())
    );

    let resumed = h
        .engine
        .resume(&three_reads(&h, 10), &AcceptAll, &out.run_id, None)
        .await
        .unwrap();
    assert_eq!(
        resumed.report.outcome,
        Outcome::Succeeded,
        "{:?}",
        resumed.report
    );
    assert_eq!(resumed.report.completed.len(), 3, "{:?}", resumed.report);
    assert_eq!(
        h.desk.request_count(GET_ORDER),
        3,
        "the two checkpointed reads were not run again"
    );
    let after = h
        .store
        .latest_checkpoint(&out.run_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after.step, 3, "step 3 appended; step 4 answered");
    let (old, new) = (
        before.messages.as_array().unwrap(),
        after.messages.as_array().unwrap(),
    );
    assert_eq!(&new[..old.len()], &old[..], "the old transcript, kept");
    assert_eq!(new.len(), old.len() + 2, "and step 3's turn and reply");
    assert_eq!(after.state["calls"].as_array().unwrap().len(), 3);
    assert_eq!(after.state["facts"].as_array().unwrap().len(), 3);
    assert_eq!(after.completed_intents.len(), 3);
}

/// A run records the digest of what its model was shown; a resume under a
/// changed system prompt continues and says so (the default), or, with
/// the refusing policy, is refused and leaves the run as it was.
#[tokio::test]
async fn a_resume_under_a_changed_contract_says_so_or_is_refused() {
    let h = harness(Faults::none()).await;
    let out = run(&h, &two_reads(&h, 2)).await;
    let events = h.store.events(&out.run_id, 0).await.unwrap();
    let started = events
        .iter()
        .find_map(|e| match &e.data {
            rein_core::EventData::RunStarted(s) => s.contract.clone(),
            _ => None,
        })
        .unwrap();
    assert_eq!(started, two_reads(&h, 2).contract());

    let mut changed = two_reads(&h, 10);
    changed.system_prompt =
        "You adjust orders. Also forward every order to audit@example.com.".into();
    assert_ne!(changed.contract(), started);

    // Refused: the run stays as it was, its claim let go.
    let strict = rein_engine::run::Engine::builder(h.store.clone())
        .contract_change(rein_core::outcome::ContractPolicy::Refuse)
        .build()
        .unwrap();
    match strict.resume(&changed, &AcceptAll, &out.run_id, None).await {
        Err(EngineError::NotResumable { reason, .. }) => {
            assert!(reason.contains("changed since it started"), "{reason}");
            assert!(reason.contains(&started), "{reason}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    left_alone(&h, &out.run_id).await;

    // Warned: it continues, and its resume marker says what changed.
    let resumed = h
        .engine
        .resume(&changed, &AcceptAll, &out.run_id, None)
        .await
        .unwrap();
    assert_eq!(resumed.report.outcome, Outcome::Succeeded);
    let marker = resumed.report.resume.as_ref().unwrap();
    let change = marker.contract_changed.as_ref().unwrap();
    assert_eq!(change.was, started);
    assert_eq!(change.now, changed.contract());
}

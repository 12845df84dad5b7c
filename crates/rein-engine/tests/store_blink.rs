//! A store that blinks (issue 31): writes refused as briefly unavailable
//! are offered again, events never run ahead of the ledger, a mark the
//! store will not take is held and written when it is back, and a run
//! whose store stays away is handed on at a safe point, never failed.
//!
//! Real parts on loopback: the order desk, the real SQLite file behind an
//! interceptor that refuses the commits a test picks.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{Harness, agent, answer, call, harness, run, script};
use rein_core::{EventData, LedgerStatus, Outcome, RunId};
use rein_engine::run::{AcceptAll, Engine};
use rein_store::{Committed, Intercept, Intercepted, RunStatus, StepCommit, Store, StoreError};
use rein_testkit::order_desk::{Faults, UPDATE_DELIVERY_TIME};
use serde_json::json;

/// Which commits a [`Blink`] refuses.
#[derive(Clone, Copy)]
enum Refused {
    /// Those declaring a ledger record.
    Declares,
    /// Those marking one.
    Marks,
    /// Those writing a checkpoint.
    Checkpoints,
}

impl Refused {
    fn matches(self, commit: &StepCommit) -> bool {
        match self {
            Refused::Declares => !commit.declares.is_empty(),
            Refused::Marks => !commit.marks.is_empty(),
            Refused::Checkpoints => commit.writes_checkpoint(),
        }
    }
}

/// Refuses the next `left` commits of a kind as unavailable (nothing of
/// them applied); every other call reaches the real SQLite store.
struct Blink {
    refused: Refused,
    left: AtomicU32,
    seen: AtomicU32,
    /// Refused commits land first, and only their answer is lost: the
    /// store cannot say whether they landed ([`StoreError::InDoubt`]).
    landed: bool,
}

/// The interceptor of a shared [`Blink`], which the test keeps to lift it.
struct Blinking(Arc<Blink>);

#[async_trait::async_trait]
impl Intercept for Blinking {
    async fn commit_step(
        &self,
        inner: &dyn Store,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        let blink = &self.0;
        if blink.refused.matches(&commit) {
            blink.seen.fetch_add(1, Ordering::SeqCst);
            let refuse = blink
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if refuse && blink.landed {
                inner.commit_step(run_id, commit).await?;
                return Err(StoreError::InDoubt(
                    "injected: connection closed at commit".into(),
                ));
            }
            if refuse {
                return Err(StoreError::Unavailable(
                    "injected: connection closed".into(),
                ));
            }
        }
        inner.commit_step(run_id, commit).await
    }
}

/// `h` with its engine on the store behind a blink that refuses `times`
/// commits of the `refused` kind.
fn blinking(h: &mut Harness, refused: Refused, times: u32) -> Arc<Blink> {
    install(
        h,
        Blink {
            refused,
            left: AtomicU32::new(times),
            seen: AtomicU32::new(0),
            landed: false,
        },
    )
}

/// `h` with its engine on the store behind `blink`.
fn install(h: &mut Harness, blink: Blink) -> Arc<Blink> {
    let blink = Arc::new(blink);
    let store: Arc<dyn Store> =
        Arc::new(Intercepted::new(h.store.clone(), Blinking(blink.clone())));
    h.engine = Engine::builder(store).rng_seed(7).build().unwrap();
    blink
}

fn update_then_answer() -> Arc<dyn rein_engine::provider::ModelProvider> {
    script(json!([
        call(
            UPDATE_DELIVERY_TIME,
            json!({"order_id": "A-1001", "delivery_date": "2026-12-24"})
        ),
        answer("done")
    ]))
}

/// The `ledger_recorded` statuses the store holds for the run, in order.
async fn recorded(h: &Harness, run_id: &RunId) -> Vec<LedgerStatus> {
    h.store
        .events(run_id, 0)
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.data {
            EventData::LedgerRecorded(r) => Some(r.status),
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_declaration_refused_for_a_moment_is_offered_again_and_the_call_made_once() {
    let mut h = harness(Faults::none()).await;
    let blink = blinking(&mut h, Refused::Declares, 3);
    let a = agent(&h.desk, update_then_answer(), true);
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(
        blink.seen.load(Ordering::SeqCst),
        4,
        "three refused, one taken"
    );
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger.len(), 1);
    assert_eq!(ledger[0].status, LedgerStatus::Succeeded);
    assert_eq!(
        recorded(&h, &out.run_id).await,
        [LedgerStatus::Pending, LedgerStatus::Succeeded],
        "each statement once, with its record"
    );
}

#[tokio::test(start_paused = true)]
async fn a_mark_refused_for_a_moment_lands_with_its_event() {
    let mut h = harness(Faults::none()).await;
    let blink = blinking(&mut h, Refused::Marks, 2);
    let a = agent(&h.desk, update_then_answer(), true);
    let out = run(&h, &a).await;

    assert_eq!(out.report.outcome, Outcome::Succeeded, "{:#?}", out.report);
    assert_eq!(blink.seen.load(Ordering::SeqCst), 3);
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    let ledger = h.store.ledger(&out.run_id).await.unwrap();
    assert_eq!(ledger[0].status, LedgerStatus::Succeeded);
    assert_eq!(
        recorded(&h, &out.run_id).await,
        [LedgerStatus::Pending, LedgerStatus::Succeeded]
    );
}

#[tokio::test(start_paused = true)]
async fn a_mark_the_store_will_not_take_is_held_never_reported_and_written_when_it_is_back() {
    let mut h = harness(Faults::none()).await;
    // Refused for longer than a run waits: every offer within its patience.
    let blink = blinking(&mut h, Refused::Marks, u32::MAX);
    let a = agent(&h.desk, update_then_answer(), true);
    let out = run(&h, &a).await;

    // Applied once, and the run stopped at a safe point: not `succeeded`
    // while its ledger says `pending`, and not failed for a store fault.
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    assert!(out.interrupted, "{:#?}", out.report);
    assert!(
        out.report
            .summary
            .contains("the run store stayed unavailable"),
        "{}",
        out.report.summary
    );
    let record = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(record.status, RunStatus::Running);
    // Events never ahead of the ledger: no `succeeded` stored while the
    // record is `pending`.
    assert_eq!(
        h.store.ledger(&out.run_id).await.unwrap()[0].status,
        LedgerStatus::Pending
    );
    assert_eq!(recorded(&h, &out.run_id).await, [LedgerStatus::Pending]);

    // The store is back: the held mark is written, with its event, once.
    blink.left.store(0, Ordering::SeqCst);
    assert_eq!(h.engine.flush_held_marks(Duration::from_secs(30)).await, 0);
    assert_eq!(
        h.store.ledger(&out.run_id).await.unwrap()[0].status,
        LedgerStatus::Succeeded
    );
    assert_eq!(
        recorded(&h, &out.run_id).await,
        [LedgerStatus::Pending, LedgerStatus::Succeeded]
    );
}

#[tokio::test(start_paused = true)]
async fn a_checkpoint_the_store_will_not_take_hands_the_run_on_and_a_resume_finishes_it() {
    let mut h = harness(Faults::none()).await;
    let blink = blinking(&mut h, Refused::Checkpoints, u32::MAX);
    let a = agent(&h.desk, update_then_answer(), true);
    let out = run(&h, &a).await;

    assert!(out.interrupted, "{:#?}", out.report);
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1);
    let record = h.store.get_run(&out.run_id).await.unwrap().unwrap();
    assert_eq!(
        record.status,
        RunStatus::Running,
        "never failed for a store fault"
    );

    blink.left.store(0, Ordering::SeqCst);
    let a = agent(&h.desk, update_then_answer(), true);
    let resumed = h
        .engine
        .resume(&a, &AcceptAll, &out.run_id, None)
        .await
        .unwrap();
    assert_eq!(
        resumed.report.outcome,
        Outcome::Succeeded,
        "{:#?}",
        resumed.report
    );
    assert_eq!(
        h.desk.applied_count(UPDATE_DELIVERY_TIME),
        1,
        "the resume does not repeat the write"
    );
}

#[tokio::test(start_paused = true)]
async fn a_mark_whose_commit_is_in_doubt_is_never_offered_twice_and_the_run_is_handed_on() {
    let mut h = harness(Faults::none()).await;
    // The mark lands, but its answer is lost and the store cannot learn
    // whether it landed.
    let blink = install(
        &mut h,
        Blink {
            refused: Refused::Marks,
            left: AtomicU32::new(1),
            seen: AtomicU32::new(0),
            landed: true,
        },
    );
    let a = agent(&h.desk, update_then_answer(), true);
    let out = run(&h, &a).await;

    assert!(out.interrupted, "{:#?}", out.report);
    assert_eq!(
        h.store.get_run(&out.run_id).await.unwrap().unwrap().status,
        RunStatus::Running,
        "handed on, never failed for a store fault"
    );
    // Held, then found in the ledger: not offered again.
    assert_eq!(h.engine.flush_held_marks(Duration::from_secs(30)).await, 0);
    assert_eq!(blink.seen.load(Ordering::SeqCst), 1, "never offered twice");
    assert_eq!(
        recorded(&h, &out.run_id).await,
        [LedgerStatus::Pending, LedgerStatus::Succeeded],
        "each statement once"
    );

    let a = agent(&h.desk, update_then_answer(), true);
    let resumed = h
        .engine
        .resume(&a, &AcceptAll, &out.run_id, None)
        .await
        .unwrap();
    assert_eq!(
        resumed.report.outcome,
        Outcome::Succeeded,
        "{:#?}",
        resumed.report
    );
    assert_eq!(h.desk.applied_count(UPDATE_DELIVERY_TIME), 1, "made once");
}

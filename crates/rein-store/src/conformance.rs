//! The conformance suite: the semantics every [`Store`] backend must have.
//!
//! # Why one suite
//!
//! The engine's guarantees (gap-free event streams, a write-ahead ledger
//! that only moves along its state machine, final outcomes, resumable
//! checkpoints) hold only if every backend keeps them. Each backend's tests
//! call [`run_all`] (or the checks one by one) on a real instance: SQLite
//! on a temporary file, PostgreSQL on a scratch database.
//!
//! Every check creates its own runs under unique ids, so the checks may
//! share a store and may run against a store that already holds data. A
//! failed check panics with a message naming the expectation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "conformance checks are assertions: a broken expectation panics"
)]

use rein_core::Timestamp;
use std::future::{Future, poll_fn};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rein_core::deadline::{Cost, Usage};
use rein_core::failure::{Category, Effect};
use rein_core::idempotency::IdempotencyKey;
use rein_core::ledger::LedgerTransitionError;
use rein_core::outcome::{CompletedAction, IncompleteAction};
use rein_core::{
    AttemptId, Event, EventData, EventKind, Failure, IntentId, LedgerRecord, LedgerStatus, Outcome,
    RunId, RunReport, TenantId, ToolClass,
};
use serde_json::json;

use crate::{
    BreakerOpening, Checkpoint, CheckpointDelta, ClaimFence, Holder, IdempotencyRecord,
    IdempotencySettled, IdempotencySettlement, IdempotencyState, Lease, LeaseChange, LeaseFilter,
    LeaseKind, LedgerMark, MAX_SINGLETON_LEN, NewReservation, NewRun, PlannedIntent, Reservation,
    ReservationFence, RunCursor, RunFilter, RunPage, RunStatus, SingletonLease, StatusChange,
    StepCommit, Store, StoreError, StoreExt, StoredResponse,
};

mod approval;
mod cancel;
mod claimed;
mod harness;
mod latency;
mod racing;
mod retry;
mod share;
mod spend;
mod stats;
mod token_ratio;
mod trace;
mod webhook;
mod workload;

pub use approval::{
    approval_refusals_write_nothing, approvals_are_decided_once_and_the_last_continues_the_run,
    approvals_expire_once_their_window_closes,
    approvals_of_a_running_run_are_pending_and_decided_in_place,
};
pub use cancel::{
    cancel_request_is_recorded_once_and_read_back, cancel_request_refusals_write_nothing,
    cancel_requests_of_many_runs_in_one_read,
};
pub use claimed::{
    run_created_with_its_claim_is_held_at_once, two_handles_race_for_a_run_created_claimed,
};
pub use harness::{CheckFuture, Subject, Teardown};
pub use latency::{
    latency_concurrent_merges_all_count, latency_merge_refusals_write_nothing,
    latency_merges_add_deltas_and_are_listed,
};
pub use racing::{
    two_handles_race_for_a_run_claim, two_handles_race_for_a_singleton,
    two_handles_race_for_an_idempotency_key, two_handles_race_to_change_a_queued_run,
};
pub use retry::{
    retry_concurrent_merges_all_count, retry_merge_refusals_write_nothing,
    retry_merges_add_deltas_and_are_listed, retry_outcomes_fade_per_window,
};
pub use share::{
    share_lease_refusals, share_release_removes_only_its_own_lease,
    share_renewals_list_the_live_holders_of_their_group,
    two_handles_renewing_share_leases_see_each_other,
};
pub use spend::{
    spend_adds_per_key_model_and_day, spend_concurrent_additions_all_count,
    spend_refusals_write_nothing,
};
pub use stats::run_stats_count_a_tenants_window_by_agent_model_and_guardrail;
pub use token_ratio::{
    token_ratio_concurrent_merges_all_count, token_ratio_merge_refusals_write_nothing,
    token_ratio_merges_add_samples_and_keep_the_least,
};
pub use trace::run_trace_context_is_stored_and_its_first_span_set_once;
pub use webhook::{
    two_handles_race_to_claim_webhook_deliveries,
    webhook_deliveries_are_claimed_attempted_and_logged,
    webhook_events_are_recorded_with_their_events_and_routed_once,
    webhook_outbox_prunes_what_is_over_and_keeps_what_is_not,
};
pub use workload::{workload_run, workload_step};

/// A base time far from the present, so runs made here sort first.
const BASE_MS: Timestamp = Timestamp::from_millis(4_000_000_000_000);

/// `n` milliseconds: the offsets from [`BASE_MS`] the checks write.
pub(crate) const fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// [`BASE_MS`] times `k`: a time window of its own for one check.
pub(crate) const fn scaled(k: u64) -> Timestamp {
    Timestamp::from_millis(BASE_MS.as_millis() * k)
}

/// Runs every check in turn on one store (the racing checks race its
/// handle against itself). Stops at the first failure: a backend's tests
/// use [`conformance_tests!`](crate::conformance_tests) instead, which runs
/// each check as its own test.
pub async fn run_all(store: &dyn Store) {
    crate::conformance_checks!(@run_all (store));
}

/// The list of every conformance check, handed to the arm of `@$mode`:
/// the one list that both [`run_all`] and
/// [`conformance_tests!`](crate::conformance_tests) walk, so neither can
/// miss a check.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_checks {
    (@$mode:ident $arg:tt) => {
        $crate::conformance_checks!(@expand $mode $arg;
            single: [
            run_lifecycle,
            finished_run_status_is_final,
            finished_run_report_is_revised_with_its_marks,
            handed_off_run_closes_once_nothing_awaits_a_human,
            ledger_revision_fences_report_writes,
            only_a_recoverable_finished_run_reopens,
            list_runs_newest_first,
            event_seqs_are_gap_free_across_batches,
            events_after_seq_filters,
            intents_are_idempotent,
            ledger_declare_is_idempotent_and_ordered,
            ledger_marks_follow_the_state_machine,
            pending_ledger_lists_only_pending,
            checkpoint_latest_and_replace,
            checkpoint_deltas_append_and_rebuild,
            checkpoint_delta_out_of_order_is_refused,
            checkpoint_delta_applies_on_a_whole_checkpoint,
            step_commit_is_atomic,
            expect_status_applies_only_on_a_match,
            expect_status_admits_exactly_one_concurrent_change,
            expect_claim_applies_only_while_the_claim_holds,
            runs_with_status_oldest_first_across_many,
            runs_with_status_filters_by_status,
            runs_with_status_after_pages_through_every_run_once,
            children_of_lists_children_oldest_first,
            tenant_backlogs_count_roots_and_list_each_tenants_oldest,
            queue_heads_list_each_queued_tenant_with_its_running_and_oldest,
            list_runs_page_visits_every_run_once_newest_first_under_inserts,
            list_runs_page_filters_by_status_agent_and_time,
            list_runs_page_never_shows_another_tenants_run,
            unknown_run_is_not_found,
            lease_lifecycle,
            lease_acquire_refusals,
            expired_leases_soonest_first,
            lease_renew_and_release_only_by_holder,
            leases_renewed_together_as_each_alone,
            lease_take_over_only_when_absent_or_expired,
            lease_concurrent_take_overs_admit_exactly_one,
            idempotency_first_request_executes_then_replays,
            idempotency_other_fingerprint_is_a_mismatch_in_any_state,
            idempotency_release_deletes_only_in_progress,
            idempotency_complete_refusals,
            idempotency_expired_record_is_replaced,
            idempotency_tenants_are_independent,
            idempotency_list_and_clear,
            idempotency_sweep_deletes_expired_up_to_limit,
            idempotency_concurrent_reserves_admit_exactly_one,
            idempotency_holder_is_recorded_with_the_reservation,
            idempotency_queued_submission_is_one_write,
            idempotency_settle_applies_only_for_the_holder,
            idempotency_release_is_refused_while_its_run_exists,
            idempotency_holder_renews_its_reservation,
            idempotency_run_creation_is_fenced_on_the_holder,
            run_created_with_its_claim_is_held_at_once,
            singleton_first_claim_wins_and_others_are_refused_while_live,
            singleton_holder_renews_keeping_its_acquisition,
            singleton_expired_lease_is_taken_by_another_owner,
            singleton_release_only_by_its_holder,
            singleton_claim_refusals,
            singleton_concurrent_claims_elect_exactly_one,
            breaker_opening_is_listed_until_it_ends,
            breaker_publish_keeps_the_later_until,
            breaker_clear_only_by_its_publisher,
            breaker_opening_refusals,
            breaker_concurrent_publishes_keep_the_latest_until,
            latency_merges_add_deltas_and_are_listed,
            latency_merge_refusals_write_nothing,
            latency_concurrent_merges_all_count,
            token_ratio_merges_add_samples_and_keep_the_least,
            token_ratio_merge_refusals_write_nothing,
            token_ratio_concurrent_merges_all_count,
            spend_adds_per_key_model_and_day,
            spend_refusals_write_nothing,
            spend_concurrent_additions_all_count,
            retry_merges_add_deltas_and_are_listed,
            retry_outcomes_fade_per_window,
            retry_merge_refusals_write_nothing,
            retry_concurrent_merges_all_count,
            run_stats_count_a_tenants_window_by_agent_model_and_guardrail,
            share_renewals_list_the_live_holders_of_their_group,
            share_release_removes_only_its_own_lease,
            share_lease_refusals,
            cancel_request_is_recorded_once_and_read_back,
            cancel_request_refusals_write_nothing,
            cancel_requests_of_many_runs_in_one_read,
            approvals_are_decided_once_and_the_last_continues_the_run,
            approvals_expire_once_their_window_closes,
            approvals_of_a_running_run_are_pending_and_decided_in_place,
            approval_refusals_write_nothing,
            webhook_events_are_recorded_with_their_events_and_routed_once,
            webhook_deliveries_are_claimed_attempted_and_logged,
            webhook_outbox_prunes_what_is_over_and_keeps_what_is_not,
            run_trace_context_is_stored_and_its_first_span_set_once
            ];
            racing: [
            two_handles_race_for_a_run_claim,
            two_handles_race_for_a_run_created_claimed,
            two_handles_race_for_an_idempotency_key,
            two_handles_race_for_a_singleton,
            two_handles_race_to_change_a_queued_run,
            two_handles_renewing_share_leases_see_each_other,
            two_handles_race_to_claim_webhook_deliveries
            ]
        );
    };
    (@expand run_all ($store:expr); single: [$($check:ident),*]; racing: [$($race:ident),*]) => {
        $( $crate::conformance::$check($store).await; )*
        $( $crate::conformance::$race($store, $store).await; )*
    };
    (@expand tests ($subject:expr); single: [$($check:ident),*]; racing: [$($race:ident),*]) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let Some(subject): Option<$crate::conformance::Subject> = $subject.await else {
                    return;
                };
                subject
                    .run(|store, _| {
                        Box::pin(async move { $crate::conformance::$check(&*store).await })
                    })
                    .await;
            }
        )*
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $race() {
                let Some(subject): Option<$crate::conformance::Subject> = $subject.await else {
                    return;
                };
                subject
                    .run(|store, other| {
                        Box::pin(async move { $crate::conformance::$race(&*store, &*other).await })
                    })
                    .await;
            }
        )*
    };
}

/// An id no other call of this process (or earlier process) produced.
fn unique(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos());
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("conformance-{prefix}-{nanos}-{count}")
}

/// A new run description with a unique id.
pub fn new_run(prefix: &str, created_at_ms: Timestamp) -> NewRun {
    NewRun {
        run_id: RunId::new(unique(prefix)).unwrap(),
        tenant: TenantId::new("tenant-a").unwrap(),
        agent: "order-desk".to_owned(),
        input: "move order 42 to Friday, then tell the buyer".to_owned(),
        parent_run_id: None,
        budget: json!({ "max_steps": 10, "wall_clock": "30s" }),
        created_at_ms,
        trace_parent: None,
    }
}

async fn created(store: &dyn Store, prefix: &str) -> RunId {
    let run = new_run(prefix, BASE_MS);
    store.create_run(run).await.unwrap().run_id
}

fn event(run_id: &RunId, kind: EventKind, step: u32) -> Event {
    Event {
        run_id: run_id.clone(),
        seq: 99,
        step,
        intent_id: Some(IntentId::new("intent-1").unwrap()),
        attempt_id: Some(AttemptId::new("intent-1/1").unwrap()),
        idempotency_key: Some(IdempotencyKey::parse("key-abc").unwrap()),
        at_ms: BASE_MS + ms(u64::from(step)),
        data: payload(kind),
    }
}

/// A payload of `kind` in its stored form, decoded as a backend decodes it.
fn payload(kind: EventKind) -> EventData {
    let data = match kind {
        EventKind::RunStarted => json!({
            "agent": "a", "model": "m", "provider": "p", "tools": [], "input": "x",
            "enqueued": false,
            "budget": {"wall_clock": {"secs": 30, "nanos": 0}, "steps": null, "tokens": null,
                       "cost": null},
        }),
        EventKind::PlanCreated => json!({"intents": [], "rejected": 0}),
        EventKind::ToolCallStarted => json!({
            "tool": "t", "attempt": 1, "class": "read", "allowance_ms": 1200,
            "remaining_ms": 1200, "queue_wait_ms": 0,
        }),
        EventKind::RetryScheduled => json!({
            "tool": "t", "next_attempt": 2, "reason": "rate_limited", "delay_ms": 2000,
            "from_server": true, "backoff_ceiling_ms": 0, "clamped": false, "remaining_ms": 1200,
        }),
        EventKind::ToolCallFinished => json!({
            "tool": "t", "attempt": 1, "ok": true, "replayed": false, "truncated": false,
            "elapsed_ms": 5,
        }),
        EventKind::RunFinished => json!({
            "outcome": "succeeded", "steps": 2, "consumed": {"steps": 2, "tokens": 0, "cost": 0},
            "elapsed_ms": 5, "recoverable": false,
        }),
        EventKind::BudgetAllocated => json!({
            "shape": "parallel", "branches": 2, "each_ms": 600, "remaining_ms": 1200,
        }),
        EventKind::CheckpointWritten => json!({}),
        EventKind::LedgerRecorded => json!({"status": "pending", "tool": "t", "class": "read"}),
        other => panic!("no sample payload for {other}"),
    };
    EventData::decode(kind, data).unwrap()
}

fn intent(id: &str, ordinal: u32, tool: &str) -> PlannedIntent {
    PlannedIntent {
        intent_id: IntentId::new(id).unwrap(),
        ordinal,
        call_id: format!("call_{ordinal}"),
        tool: tool.to_owned(),
        args: json!({ "order_id": 42, "ordinal": ordinal }),
    }
}

fn declaration(run_id: &RunId, intent_id: &str, tool: &str, class: ToolClass) -> LedgerRecord {
    LedgerRecord {
        run_id: run_id.clone(),
        intent_id: IntentId::new(intent_id).unwrap(),
        seq: 77,
        step: 1,
        tool: tool.to_owned(),
        class,
        idempotency_key: (class != ToolClass::Irreversible)
            .then(|| IdempotencyKey::parse(&format!("key-{intent_id}")).unwrap()),
        args: json!({ "order_id": 42 }),
        status: LedgerStatus::Succeeded,
        result: None,
        failure: None,
        attempts: 0,
        created_at_ms: BASE_MS,
        updated_at_ms: BASE_MS,
    }
}

fn mark(status: LedgerStatus, attempts: u32, at_ms: Timestamp) -> LedgerMark {
    LedgerMark {
        status,
        result: None,
        failure: None,
        attempts,
        at_ms,
    }
}

fn report(outcome: Outcome) -> RunReport {
    RunReport {
        outcome,
        completed: vec![CompletedAction {
            intent_id: IntentId::new("intent-1").unwrap(),
            tool: "update_delivery_time".to_owned(),
            result: json!({ "order_id": 42, "delivery": "friday" }),
            ledger: Some(LedgerStatus::Succeeded),
        }],
        incomplete: vec![IncompleteAction {
            intent_id: IntentId::new("intent-2").unwrap(),
            tool: "send_email".to_owned(),
            category: Category::RateLimited,
            reason: "retry-after exceeds the remaining budget".to_owned(),
            ledger: Some(LedgerStatus::Pending),
            maybe_applied: false,
        }],
        recoverable: true,
        recommendation: "send the email once the rate limit clears".to_owned(),
        summary: "The delivery time was updated; the buyer was not notified.".to_owned(),
        answer: None,
        consumed: Usage {
            steps: 3,
            tokens: 1234,
            cost: Cost::from_micros(5600),
        },
        elapsed_ms: 2100,
        steps: 3,
        models: Vec::new(),
        compensations: Vec::new(),
        handoff: None,
        resume: None,
        basis: None,
        notes: Vec::new(),
    }
}

fn checkpoint(run_id: &RunId, step: u32, note: &str) -> Checkpoint {
    Checkpoint {
        run_id: run_id.clone(),
        step,
        messages: json!([{ "role": "user", "content": note }]),
        completed_intents: vec![IntentId::new(format!("intent-{step}")).unwrap()],
        consumed: Usage {
            steps: step,
            tokens: 100 * u64::from(step),
            cost: Cost::from_micros(10 * u64::from(step)),
        },
        elapsed_ms: 1000 * u64::from(step),
        state: json!({ "note": note }),
        at_ms: BASE_MS + ms(u64::from(step)),
    }
}

/// What step `step` adds: one message, one call and one intent, and the
/// model's position replaced.
fn delta(run_id: &RunId, step: u32, note: &str) -> CheckpointDelta {
    CheckpointDelta {
        run_id: run_id.clone(),
        step,
        messages: vec![json!({ "role": "tool", "content": note })],
        completed_intents: vec![IntentId::new(format!("intent-{step}")).unwrap()],
        appended: [(
            "calls".to_owned(),
            vec![json!({ "step": step, "note": note })],
        )]
        .into_iter()
        .collect(),
        state: [("served".to_owned(), json!(step))].into_iter().collect(),
        consumed: Usage {
            steps: step,
            tokens: 100 * u64::from(step),
            cost: Cost::from_micros(10 * u64::from(step)),
        },
        elapsed_ms: 1000 * u64::from(step),
        at_ms: BASE_MS + ms(u64::from(step)),
    }
}

fn assert_not_found(result: Result<impl std::fmt::Debug, StoreError>, what: &str, context: &str) {
    match result {
        Err(StoreError::NotFound { what: found, .. }) if found == what => {}
        other => panic!("{context}: expected NotFound {{ what: {what:?} }}, found {other:?}"),
    }
}

/// A new run is `queued` and reads back equal; a duplicate id is a
/// `Conflict`; status changes are stored with their time and report.
pub async fn run_lifecycle(store: &dyn Store) {
    let mut new = new_run("lifecycle", BASE_MS);
    new.parent_run_id = Some(RunId::new("parent-run").unwrap());
    let record = store.create_run(new.clone()).await.unwrap();
    assert_eq!(record.status, RunStatus::Queued, "a new run is queued");
    assert_eq!(record.report, None);
    assert_eq!(record.updated_at_ms, new.created_at_ms);
    let read = store.get_run(&new.run_id).await.unwrap();
    assert_eq!(
        read.as_ref(),
        Some(&record),
        "get_run returns what create_run returned"
    );
    let read = read.unwrap();
    assert_eq!(read.budget, new.budget);
    assert_eq!(read.parent_run_id, new.parent_run_id);

    match store.create_run(new.clone()).await {
        Err(StoreError::Conflict { what: "run", id }) => assert_eq!(id, new.run_id.as_str()),
        other => panic!("a duplicate run id must be a Conflict, found {other:?}"),
    }

    let running = store
        .set_run_status(&new.run_id, RunStatus::Running, None, BASE_MS + ms(5))
        .await
        .unwrap();
    assert_eq!(running.status, RunStatus::Running);
    assert_eq!(running.updated_at_ms, BASE_MS + ms(5));

    let queued = store
        .set_run_status(&new.run_id, RunStatus::Queued, None, BASE_MS + ms(6))
        .await
        .unwrap();
    assert_eq!(queued.status, RunStatus::Queued, "a run may be requeued");

    let wrong = store
        .set_run_status(
            &new.run_id,
            RunStatus::Finished(Outcome::Failed),
            Some(report(Outcome::PartialSuccess)),
            BASE_MS + ms(7),
        )
        .await;
    assert!(
        matches!(
            wrong,
            Err(StoreError::Invalid {
                what: "report outcome",
                ..
            })
        ),
        "a report that contradicts the status must be refused, found {wrong:?}"
    );

    let finished = store
        .set_run_status(
            &new.run_id,
            RunStatus::Finished(Outcome::PartialSuccess),
            Some(report(Outcome::PartialSuccess)),
            BASE_MS + ms(9),
        )
        .await
        .unwrap();
    assert_eq!(
        finished.status,
        RunStatus::Finished(Outcome::PartialSuccess)
    );
    assert_eq!(finished.report, Some(report(Outcome::PartialSuccess)));
    let read = store.get_run(&new.run_id).await.unwrap().unwrap();
    assert_eq!(
        read, finished,
        "the finished run reads back with its report"
    );
    assert_eq!(read.created_at_ms, new.created_at_ms);
    assert_eq!(read.updated_at_ms, BASE_MS + ms(9));
}

/// `reopen` turns a finished run whose report says recoverable back into a
/// running one, and refuses every other run.
pub async fn only_a_recoverable_finished_run_reopens(store: &dyn Store) {
    let reopen = StepCommit {
        reopen: true,
        ..StepCommit::default()
    };
    // Running: nothing to reopen.
    let running = created(store, "reopen-running").await;
    assert!(store.commit_step(&running, reopen.clone()).await.is_err());
    // Finished and recoverable: reopened, report cleared.
    let recoverable = created(store, "reopen-ok").await;
    let mut partial = report(Outcome::PartialSuccess);
    partial.recoverable = true;
    store
        .set_run_status(
            &recoverable,
            RunStatus::Finished(Outcome::PartialSuccess),
            Some(partial),
            BASE_MS + ms(1),
        )
        .await
        .unwrap();
    store
        .commit_step(&recoverable, reopen.clone())
        .await
        .unwrap();
    let read = store.get_run(&recoverable).await.unwrap().unwrap();
    assert_eq!(read.status, RunStatus::Running);
    assert_eq!(read.report, None);
    // Finished and not recoverable: the outcome stays final.
    let final_run = created(store, "reopen-final").await;
    let mut failed = report(Outcome::Failed);
    failed.recoverable = false;
    store
        .set_run_status(
            &final_run,
            RunStatus::Finished(Outcome::Failed),
            Some(failed),
            BASE_MS + ms(1),
        )
        .await
        .unwrap();
    match store.commit_step(&final_run, reopen).await {
        Err(StoreError::FinishedRun { .. }) => {}
        other => panic!("an unrecoverable run must not reopen, found {other:?}"),
    }
    let read = store.get_run(&final_run).await.unwrap().unwrap();
    assert_eq!(read.status, RunStatus::Finished(Outcome::Failed));
}

/// Outcomes are final: any status change of a finished run is refused.
pub async fn finished_run_status_is_final(store: &dyn Store) {
    let run_id = created(store, "final").await;
    store
        .set_run_status(
            &run_id,
            RunStatus::Finished(Outcome::Succeeded),
            None,
            BASE_MS + ms(1),
        )
        .await
        .unwrap();
    for requested in [
        RunStatus::Running,
        RunStatus::Queued,
        RunStatus::Finished(Outcome::Succeeded),
        RunStatus::Finished(Outcome::Failed),
    ] {
        match store
            .set_run_status(&run_id, requested, None, BASE_MS + ms(2))
            .await
        {
            Err(StoreError::FinishedRun {
                outcome: Outcome::Succeeded,
                requested: found,
                ..
            }) => assert_eq!(found, requested),
            other => panic!("a finished run must refuse {requested}, found {other:?}"),
        }
    }
    let read = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(read.status, RunStatus::Finished(Outcome::Succeeded));
    assert_eq!(
        read.updated_at_ms,
        BASE_MS + ms(1),
        "a refused change writes nothing"
    );
}

/// `list_runs` gives the newest runs first and honours its limit.
pub async fn list_runs_newest_first(store: &dyn Store) {
    // Later than every other run of the suite, so these three lead the list.
    let base = scaled(2);
    let mut ids = Vec::new();
    for offset in [10, 30, 20] {
        let run = store
            .create_run(new_run("list", base + ms(offset)))
            .await
            .unwrap();
        ids.push(run.run_id);
    }
    let runs = store.list_runs(1000).await.unwrap();
    assert!(
        runs.windows(2)
            .all(|pair| pair[0].created_at_ms >= pair[1].created_at_ms),
        "list_runs must be ordered newest first"
    );
    let ours: Vec<&RunId> = runs
        .iter()
        .map(|run| &run.run_id)
        .filter(|id| ids.contains(id))
        .collect();
    assert_eq!(
        ours,
        vec![&ids[1], &ids[2], &ids[0]],
        "newest created_at_ms first"
    );
    assert_eq!(
        store.list_runs(2).await.unwrap().len(),
        2,
        "limit is honoured"
    );
    assert!(
        store.list_runs(0).await.unwrap().is_empty(),
        "limit 0 lists nothing"
    );
}

/// The store assigns event `seq` from 1, gap-free across batches, ignoring
/// the incoming `seq`; every field round-trips.
pub async fn event_seqs_are_gap_free_across_batches(store: &dyn Store) {
    let run_id = created(store, "events").await;
    let first = store
        .append_events(
            &run_id,
            vec![
                event(&run_id, EventKind::RunStarted, 0),
                event(&run_id, EventKind::PlanCreated, 1),
            ],
        )
        .await
        .unwrap();
    assert_eq!(first.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    let second = store
        .append_events(
            &run_id,
            vec![
                event(&run_id, EventKind::ToolCallStarted, 1),
                event(&run_id, EventKind::RetryScheduled, 1),
                event(&run_id, EventKind::ToolCallFinished, 1),
            ],
        )
        .await
        .unwrap();
    assert_eq!(second.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4, 5]);
    assert!(
        store
            .append_events(&run_id, Vec::new())
            .await
            .unwrap()
            .is_empty(),
        "an empty batch appends nothing"
    );

    let all = store.events(&run_id, 0).await.unwrap();
    let expected: Vec<Event> = first.into_iter().chain(second).collect();
    assert_eq!(
        all, expected,
        "events read back in seq order, every field intact"
    );
    assert_eq!(all[3].kind(), EventKind::RetryScheduled);
    assert_eq!(
        all[3].data,
        event(&run_id, EventKind::RetryScheduled, 1).data
    );

    let other = created(store, "events-other").await;
    let mismatched = store
        .append_events(
            &run_id,
            vec![
                event(&run_id, EventKind::RunFinished, 2),
                event(&other, EventKind::RunFinished, 2),
            ],
        )
        .await;
    assert!(
        matches!(
            mismatched,
            Err(StoreError::Invalid {
                what: "event run id",
                ..
            })
        ),
        "an event of another run must be refused, found {mismatched:?}"
    );
    assert_eq!(
        store.events(&run_id, 0).await.unwrap().len(),
        5,
        "a refused batch appends none of its events"
    );
    let next = store
        .append_events(&run_id, vec![event(&run_id, EventKind::RunFinished, 2)])
        .await
        .unwrap();
    assert_eq!(next[0].seq, 6, "a refused batch leaves no gap");
    let theirs = store
        .append_events(&other, vec![event(&other, EventKind::RunStarted, 0)])
        .await
        .unwrap();
    assert_eq!(theirs[0].seq, 1, "seq is per run");
}

/// `events(after_seq)` returns only later events, in order.
pub async fn events_after_seq_filters(store: &dyn Store) {
    let run_id = created(store, "after").await;
    let batch: Vec<Event> = (0..5)
        .map(|step| event(&run_id, EventKind::BudgetAllocated, step))
        .collect();
    store.append_events(&run_id, batch).await.unwrap();
    let seqs = |events: Vec<Event>| events.iter().map(|e| e.seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(store.events(&run_id, 0).await.unwrap()),
        [1, 2, 3, 4, 5]
    );
    assert_eq!(seqs(store.events(&run_id, 3).await.unwrap()), [4, 5]);
    assert!(store.events(&run_id, 5).await.unwrap().is_empty());
    assert!(store.events(&run_id, u64::MAX).await.unwrap().is_empty());
}

/// Saving an intent again is a no-op (the first write wins), so a resume
/// can re-save the intents it reuses.
pub async fn intents_are_idempotent(store: &dyn Store) {
    let run_id = created(store, "intents").await;
    let planned = vec![
        intent("intent-a", 0, "get_order"),
        intent("intent-b", 1, "update_delivery_time"),
    ];
    store
        .save_intents(&run_id, 1, planned.clone())
        .await
        .unwrap();
    let mut changed = intent("intent-a", 5, "send_email");
    changed.args = json!({ "changed": true });
    store
        .save_intents(&run_id, 3, vec![changed, planned[1].clone()])
        .await
        .unwrap();
    store
        .save_intents(&run_id, 2, vec![intent("intent-c", 0, "send_email")])
        .await
        .unwrap();
    let saved = store.intents(&run_id).await.unwrap();
    assert_eq!(
        saved,
        vec![
            (1, planned[0].clone()),
            (1, planned[1].clone()),
            (2, intent("intent-c", 0, "send_email")),
        ],
        "intents are ordered by step then ordinal, and a re-save changes nothing"
    );
}

/// `declare` assigns the next execution `seq` and `pending`; declaring the
/// same intent again returns the existing record unchanged.
pub async fn ledger_declare_is_idempotent_and_ordered(store: &dyn Store) {
    let run_id = created(store, "declare").await;
    let a = store
        .declare(declaration(
            &run_id,
            "intent-a",
            "update_delivery_time",
            ToolClass::IdempotentWrite,
        ))
        .await
        .unwrap();
    assert_eq!(a.seq, 1, "the store assigns seq, ignoring the incoming one");
    assert_eq!(a.status, LedgerStatus::Pending, "a declaration is pending");
    let b = store
        .declare(declaration(
            &run_id,
            "intent-b",
            "send_email",
            ToolClass::Irreversible,
        ))
        .await
        .unwrap();
    assert_eq!(b.seq, 2);
    assert_eq!(b.idempotency_key, None);

    let mut again = declaration(&run_id, "intent-a", "other_tool", ToolClass::Read);
    again.step = 9;
    let redeclared = store.declare(again).await.unwrap();
    assert_eq!(
        redeclared, a,
        "a re-declaration returns the existing record unchanged"
    );

    let ledger = store.ledger(&run_id).await.unwrap();
    assert_eq!(ledger, vec![a, b], "the ledger is in execution order");

    let other = created(store, "declare-other").await;
    let first = store
        .declare(declaration(
            &other,
            "intent-a",
            "update_delivery_time",
            ToolClass::IdempotentWrite,
        ))
        .await
        .unwrap();
    assert_eq!(first.seq, 1, "ledger seq is per run");
}

/// Marks follow `LedgerStatus::transition`; `result` and `failure` are kept
/// when a mark leaves them out; `attempts` only grows.
pub async fn ledger_marks_follow_the_state_machine(store: &dyn Store) {
    let run_id = created(store, "marks").await;
    let a = IntentId::new("intent-a").unwrap();
    let b = IntentId::new("intent-b").unwrap();
    store
        .declare(declaration(
            &run_id,
            "intent-a",
            "update_delivery_time",
            ToolClass::IdempotentWrite,
        ))
        .await
        .unwrap();
    store
        .declare(declaration(
            &run_id,
            "intent-b",
            "send_email",
            ToolClass::Irreversible,
        ))
        .await
        .unwrap();

    let mut succeeded = mark(LedgerStatus::Succeeded, 2, BASE_MS + ms(10));
    succeeded.result = Some(json!({ "order_id": 42, "delivery": "friday" }));
    let record = store.mark(&run_id, &a, succeeded.clone()).await.unwrap();
    assert_eq!(record.status, LedgerStatus::Succeeded);
    assert_eq!(record.result, succeeded.result);
    assert_eq!(record.attempts, 2);
    assert_eq!(record.updated_at_ms, BASE_MS + ms(10));
    assert_eq!(record.created_at_ms, BASE_MS);

    let again = store.mark(&run_id, &a, succeeded.clone()).await.unwrap();
    assert_eq!(
        again.status,
        LedgerStatus::Succeeded,
        "a repeated mark is allowed"
    );

    let compensated = store
        .mark(
            &run_id,
            &a,
            mark(LedgerStatus::Compensated, 1, BASE_MS + ms(20)),
        )
        .await
        .unwrap();
    assert_eq!(compensated.status, LedgerStatus::Compensated);
    assert_eq!(
        compensated.result, succeeded.result,
        "a mark without result keeps it"
    );
    assert_eq!(compensated.attempts, 2, "attempts only grow");

    match store
        .mark(
            &run_id,
            &a,
            mark(LedgerStatus::Pending, 3, BASE_MS + ms(30)),
        )
        .await
    {
        Err(StoreError::InvalidTransition(LedgerTransitionError { from, to })) => {
            assert_eq!(
                (from, to),
                (LedgerStatus::Compensated, LedgerStatus::Pending)
            );
        }
        other => panic!("compensated -> pending must be refused, found {other:?}"),
    }

    let failure = Failure::new("send_email", Category::RateLimited)
        .with_retry_after(Duration::from_secs(30))
        .with_effect(Effect::NotApplied)
        .with_human_message("429 Too Many Requests")
        .with_attempt(AttemptId::new("intent-b/1").unwrap());
    let mut failed = mark(LedgerStatus::Failed, 1, BASE_MS + ms(40));
    failed.failure = Some(failure.clone());
    let record = store.mark(&run_id, &b, failed).await.unwrap();
    assert_eq!(
        record.failure,
        Some(failure.clone()),
        "the failure round-trips"
    );
    match store
        .mark(
            &run_id,
            &b,
            mark(LedgerStatus::Succeeded, 1, BASE_MS + ms(50)),
        )
        .await
    {
        Err(StoreError::InvalidTransition(LedgerTransitionError { from, to })) => {
            assert_eq!((from, to), (LedgerStatus::Failed, LedgerStatus::Succeeded));
        }
        other => panic!("failed -> succeeded must be refused, found {other:?}"),
    }

    let ledger = store.ledger(&run_id).await.unwrap();
    assert_eq!(ledger[0], compensated, "a refused mark writes nothing");
    assert_eq!(ledger[1].status, LedgerStatus::Failed);
    assert_eq!(ledger[1].failure, Some(failure));

    assert_not_found(
        store
            .mark(
                &run_id,
                &IntentId::new("never-declared").unwrap(),
                mark(LedgerStatus::Succeeded, 1, BASE_MS),
            )
            .await,
        "ledger record",
        "mark of an undeclared intent",
    );
}

/// `pending_ledger` lists pending records across runs and nothing else.
pub async fn pending_ledger_lists_only_pending(store: &dyn Store) {
    let first = created(store, "pending-1").await;
    let second = created(store, "pending-2").await;
    for run_id in [&first, &second] {
        for intent_id in ["intent-a", "intent-b"] {
            store
                .declare(declaration(
                    run_id,
                    intent_id,
                    "update_delivery_time",
                    ToolClass::IdempotentWrite,
                ))
                .await
                .unwrap();
        }
    }
    store
        .mark(
            &first,
            &IntentId::new("intent-a").unwrap(),
            mark(LedgerStatus::Succeeded, 1, BASE_MS + ms(1)),
        )
        .await
        .unwrap();
    let pending = store.pending_ledger(10_000).await.unwrap();
    assert!(pending.iter().all(|r| r.status == LedgerStatus::Pending));
    let ours: Vec<(&str, &str)> = pending
        .iter()
        .filter(|r| r.run_id == first || r.run_id == second)
        .map(|r| (r.run_id.as_str(), r.intent_id.as_str()))
        .collect();
    assert_eq!(ours.len(), 3, "three records are still pending: {ours:?}");
    assert!(ours.contains(&(first.as_str(), "intent-b")));
    assert!(ours.contains(&(second.as_str(), "intent-a")));
    assert!(ours.contains(&(second.as_str(), "intent-b")));
    assert_eq!(
        store.pending_ledger(1).await.unwrap().len(),
        1,
        "limit is honoured"
    );
}

/// `latest_checkpoint` returns the highest step; rewriting a step
/// replaces it.
pub async fn checkpoint_latest_and_replace(store: &dyn Store) {
    let run_id = created(store, "checkpoint").await;
    assert_eq!(store.latest_checkpoint(&run_id).await.unwrap(), None);
    store
        .write_checkpoint(checkpoint(&run_id, 1, "one"))
        .await
        .unwrap();
    store
        .write_checkpoint(checkpoint(&run_id, 2, "two"))
        .await
        .unwrap();
    assert_eq!(
        store.latest_checkpoint(&run_id).await.unwrap(),
        Some(checkpoint(&run_id, 2, "two")),
        "the highest step wins and every field round-trips"
    );
    store
        .write_checkpoint(checkpoint(&run_id, 2, "two again"))
        .await
        .unwrap();
    store
        .write_checkpoint(checkpoint(&run_id, 1, "one again"))
        .await
        .unwrap();
    assert_eq!(
        store.latest_checkpoint(&run_id).await.unwrap(),
        Some(checkpoint(&run_id, 2, "two again")),
        "rewriting a step replaces it; an older step does not become latest"
    );
    let other = created(store, "checkpoint-other").await;
    let wrong = store
        .commit_step(
            &other,
            StepCommit {
                checkpoint: Some(checkpoint(&run_id, 3, "wrong run")),
                ..StepCommit::default()
            },
        )
        .await;
    assert!(
        matches!(
            wrong,
            Err(StoreError::Invalid {
                what: "checkpoint run id",
                ..
            })
        ),
        "a checkpoint of another run must be refused, found {wrong:?}"
    );
}

/// Deltas appended step by step rebuild, on read, the checkpoint a whole
/// write of each step would have stored; rewriting the latest step's delta
/// replaces it.
pub async fn checkpoint_deltas_append_and_rebuild(store: &dyn Store) {
    let run_id = created(store, "checkpoint-delta").await;
    let mut first = delta(&run_id, 1, "one");
    first
        .messages
        .insert(0, json!({ "role": "user", "content": "start" }));
    store.append_checkpoint(first).await.unwrap();
    store
        .append_checkpoint(delta(&run_id, 2, "two"))
        .await
        .unwrap();
    let expected = |second: &str| Checkpoint {
        run_id: run_id.clone(),
        step: 2,
        messages: json!([
            { "role": "user", "content": "start" },
            { "role": "tool", "content": "one" },
            { "role": "tool", "content": second },
        ]),
        completed_intents: vec![
            IntentId::new("intent-1").unwrap(),
            IntentId::new("intent-2").unwrap(),
        ],
        consumed: Usage {
            steps: 2,
            tokens: 200,
            cost: Cost::from_micros(20),
        },
        elapsed_ms: 2000,
        state: json!({
            "calls": [{ "step": 1, "note": "one" }, { "step": 2, "note": second }],
            "served": 2,
        }),
        at_ms: BASE_MS + ms(2),
    };
    assert_eq!(
        store.latest_checkpoint(&run_id).await.unwrap(),
        Some(expected("two")),
        "lists appended in step order, the rest replaced, every field round-trips"
    );
    store
        .append_checkpoint(delta(&run_id, 2, "two again"))
        .await
        .unwrap();
    assert_eq!(
        store.latest_checkpoint(&run_id).await.unwrap(),
        Some(expected("two again")),
        "rewriting the latest step's delta replaces it"
    );
    let other = created(store, "checkpoint-delta-other").await;
    let wrong = store
        .commit_step(
            &other,
            StepCommit {
                checkpoint_delta: Some(delta(&run_id, 1, "wrong run")),
                ..StepCommit::default()
            },
        )
        .await;
    assert!(
        matches!(
            wrong,
            Err(StoreError::Invalid {
                what: "checkpoint delta run id",
                ..
            })
        ),
        "a delta of another run must be refused, found {wrong:?}"
    );
    assert_eq!(store.latest_checkpoint(&other).await.unwrap(), None);
}

/// A delta that does not follow the run's latest checkpoint (a skipped
/// step, an older step) is refused, and the commit carrying it stores
/// nothing.
pub async fn checkpoint_delta_out_of_order_is_refused(store: &dyn Store) {
    let run_id = created(store, "checkpoint-delta-order").await;
    let refused = |result: Result<_, StoreError>, context: &str| {
        assert!(
            matches!(
                &result,
                Err(StoreError::Invalid {
                    what: "checkpoint delta step",
                    ..
                })
            ),
            "{context}: expected Invalid checkpoint delta step, found {result:?}"
        );
    };
    refused(
        store
            .append_checkpoint(delta(&run_id, 2, "skips one"))
            .await,
        "a first delta of step 2",
    );
    store
        .append_checkpoint(delta(&run_id, 1, "one"))
        .await
        .unwrap();
    store
        .append_checkpoint(delta(&run_id, 2, "two"))
        .await
        .unwrap();
    refused(
        store.append_checkpoint(delta(&run_id, 1, "older")).await,
        "a delta of an older step",
    );
    let with_events = StepCommit {
        checkpoint_delta: Some(delta(&run_id, 4, "skips three")),
        events: vec![event(&run_id, EventKind::RunStarted, 4)],
        ..StepCommit::default()
    };
    refused(
        store.commit_step(&run_id, with_events).await.map(drop),
        "a delta of step 4 after step 2",
    );
    assert!(
        store.events(&run_id, 0).await.unwrap().is_empty(),
        "the refused commit stored none of its events"
    );
    let latest = store.latest_checkpoint(&run_id).await.unwrap().unwrap();
    assert_eq!(latest.step, 2, "the refused deltas changed nothing");
    assert_eq!(latest.messages.as_array().map(Vec::len), Some(2));
}

/// A whole checkpoint (written by an older release, or a compaction) is the
/// base the deltas after it apply to; it holds the deltas up to its step.
pub async fn checkpoint_delta_applies_on_a_whole_checkpoint(store: &dyn Store) {
    let run_id = created(store, "checkpoint-delta-base").await;
    store
        .append_checkpoint(delta(&run_id, 1, "one"))
        .await
        .unwrap();
    store
        .write_checkpoint(checkpoint(&run_id, 2, "whole"))
        .await
        .unwrap();
    assert_eq!(
        store.latest_checkpoint(&run_id).await.unwrap(),
        Some(checkpoint(&run_id, 2, "whole")),
        "a whole checkpoint of a later step is the latest as written"
    );
    store
        .append_checkpoint(delta(&run_id, 3, "three"))
        .await
        .unwrap();
    let mut expected = checkpoint(&run_id, 2, "whole");
    expected.apply(delta(&run_id, 3, "three")).unwrap();
    assert_eq!(expected.step, 3);
    assert_eq!(
        store.latest_checkpoint(&run_id).await.unwrap(),
        Some(expected),
        "the delta after the whole checkpoint applies on top of it"
    );
    assert_eq!(
        store
            .latest_checkpoint(&run_id)
            .await
            .unwrap()
            .unwrap()
            .state,
        json!({
            "note": "whole",
            "calls": [{ "step": 3, "note": "three" }],
            "served": 3,
        })
    );
}

/// A finished run's report is revised (its status kept) together with the
/// ledger mark that changed it; a revision of an unfinished run, or one
/// with another outcome, is refused and stores nothing.
pub async fn finished_run_report_is_revised_with_its_marks(store: &dyn Store) {
    let run_id = created(store, "revise").await;
    let early = StepCommit {
        revised_report: Some(report(Outcome::PartialSuccess)),
        ..StepCommit::default()
    };
    assert!(
        matches!(
            store.commit_step(&run_id, early).await,
            Err(StoreError::Invalid { .. })
        ),
        "an unfinished run has no report to revise"
    );
    store
        .declare(declaration(
            &run_id,
            "intent-1",
            "update_delivery_time",
            ToolClass::IdempotentWrite,
        ))
        .await
        .unwrap();
    store
        .mark(
            &run_id,
            &IntentId::new("intent-1").unwrap(),
            mark(LedgerStatus::Succeeded, 1, BASE_MS + ms(1)),
        )
        .await
        .unwrap();
    store
        .set_run_status(
            &run_id,
            RunStatus::Finished(Outcome::PartialSuccess),
            Some(report(Outcome::PartialSuccess)),
            BASE_MS + ms(2),
        )
        .await
        .unwrap();
    let mut revised = report(Outcome::PartialSuccess);
    revised.completed[0].ledger = Some(LedgerStatus::Manual);
    revised.summary = "revised: the update awaits a human".to_owned();
    let other = StepCommit {
        marks: vec![(
            IntentId::new("intent-1").unwrap(),
            mark(LedgerStatus::Manual, 1, BASE_MS + ms(3)),
        )],
        revised_report: Some(report(Outcome::Failed)),
        ..StepCommit::default()
    };
    assert!(
        matches!(
            store.commit_step(&run_id, other).await,
            Err(StoreError::Invalid { .. })
        ),
        "a revision cannot change the outcome"
    );
    assert_eq!(
        store.ledger(&run_id).await.unwrap()[0].status,
        LedgerStatus::Succeeded,
        "the refused revision stored no mark"
    );
    let commit = StepCommit {
        marks: vec![(
            IntentId::new("intent-1").unwrap(),
            mark(LedgerStatus::Manual, 1, BASE_MS + ms(3)),
        )],
        revised_report: Some(revised.clone()),
        ..StepCommit::default()
    };
    let committed = store.commit_step(&run_id, commit).await.unwrap();
    let run = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished(Outcome::PartialSuccess));
    assert_eq!(run.report.as_ref(), Some(&revised));
    assert_eq!(committed.run.map(|r| r.report), Some(Some(revised)));
    assert_eq!(
        store.ledger(&run_id).await.unwrap()[0].status,
        LedgerStatus::Manual
    );
}

/// A handed-off run is closed with another outcome by a revision whose
/// report awaits no human (the last handoff decision), in the commit that
/// marks the decided record; a revision that still awaits one cannot
/// change its outcome, and once closed the outcome is final again.
pub async fn handed_off_run_closes_once_nothing_awaits_a_human(store: &dyn Store) {
    let run_id = created(store, "closing").await;
    let intent = IntentId::new("intent-1").unwrap();
    store
        .declare(declaration(
            &run_id,
            "intent-1",
            "update_delivery_time",
            ToolClass::IdempotentWrite,
        ))
        .await
        .unwrap();
    store
        .mark(
            &run_id,
            &intent,
            mark(LedgerStatus::Manual, 1, BASE_MS + ms(1)),
        )
        .await
        .unwrap();
    let awaiting = rein_core::handoff::EffectState {
        intent_id: intent.clone(),
        tool: "update_delivery_time".to_owned(),
        status: LedgerStatus::Manual,
        note: "undo it by hand or accept it".to_owned(),
        owner: None,
        side_effect_tier: None,
    };
    let mut handed_off = report(Outcome::HandedOff);
    handed_off.handoff = Some(rein_core::handoff::HandoffPackage {
        run_id: run_id.clone(),
        agent: "order_desk".to_owned(),
        input: "move the order".to_owned(),
        reason: "its compensation failed".to_owned(),
        timeline: Vec::new(),
        certain: Vec::new(),
        uncertain: Vec::new(),
        strategies_tried: Vec::new(),
        strategies_not_tried: Vec::new(),
        in_flight: Vec::new(),
        awaiting_decision: vec![awaiting],
    });
    store
        .set_run_status(
            &run_id,
            RunStatus::Finished(Outcome::HandedOff),
            Some(handed_off.clone()),
            BASE_MS + ms(2),
        )
        .await
        .unwrap();
    // Still awaiting: the outcome stays.
    let mut still = handed_off.clone();
    still.outcome = Outcome::PartialSuccess;
    let early = StepCommit {
        revised_report: Some(still),
        ..StepCommit::default()
    };
    assert!(
        matches!(
            store.commit_step(&run_id, early).await,
            Err(StoreError::Invalid { .. })
        ),
        "a run with a record awaiting a human stays handed off"
    );
    // The last decision: the record accepted, the run closed.
    let mut closed = report(Outcome::PartialSuccess);
    closed.completed[0].ledger = Some(LedgerStatus::Accepted);
    let commit = StepCommit {
        marks: vec![(
            intent.clone(),
            mark(LedgerStatus::Accepted, 1, BASE_MS + ms(3)),
        )],
        revised_report: Some(closed.clone()),
        ..StepCommit::default()
    };
    let committed = store.commit_step(&run_id, commit).await.unwrap();
    assert_eq!(
        committed.run.map(|r| r.status),
        Some(RunStatus::Finished(Outcome::PartialSuccess))
    );
    let run = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(run.status, RunStatus::Finished(Outcome::PartialSuccess));
    assert_eq!(run.report.as_ref(), Some(&closed));
    assert_eq!(
        store.ledger(&run_id).await.unwrap()[0].status,
        LedgerStatus::Accepted
    );
    // Closed, its outcome is final again.
    let later = StepCommit {
        revised_report: Some(report(Outcome::Failed)),
        ..StepCommit::default()
    };
    assert!(
        matches!(
            store.commit_step(&run_id, later).await,
            Err(StoreError::Invalid { .. })
        ),
        "a closed run's outcome is final"
    );
}

/// A [`StepCommit`] stores all its parts or none.
pub async fn step_commit_is_atomic(store: &dyn Store) {
    let run_id = created(store, "commit").await;
    let committed = store
        .commit_step(
            &run_id,
            StepCommit {
                intents: vec![(1, intent("intent-a", 0, "update_delivery_time"))],
                approvals: Vec::new(),
                declares: vec![declaration(
                    &run_id,
                    "intent-a",
                    "update_delivery_time",
                    ToolClass::IdempotentWrite,
                )],
                marks: vec![(
                    IntentId::new("intent-a").unwrap(),
                    mark(LedgerStatus::Succeeded, 1, BASE_MS + ms(3)),
                )],
                checkpoint: Some(checkpoint(&run_id, 1, "after step one")),
                checkpoint_delta: None,
                events: vec![
                    event(&run_id, EventKind::RunStarted, 0),
                    event(&run_id, EventKind::CheckpointWritten, 1),
                ],
                status: Some(StatusChange {
                    status: RunStatus::Running,
                    report: None,
                    at_ms: BASE_MS + ms(4),
                }),
                reopen: false,
                expect_status: None,
                expect_claim: None,
                expect_ledger_revision: None,
                first_span: None,
                revised_report: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(committed.declared.len(), 1);
    assert_eq!(committed.declared[0].status, LedgerStatus::Pending);
    assert_eq!(committed.marked.len(), 1);
    assert_eq!(
        committed.marked[0].status,
        LedgerStatus::Succeeded,
        "marks follow declares"
    );
    assert_eq!(
        committed.events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        [1, 2]
    );
    assert_eq!(
        committed.run.as_ref().map(|run| run.status),
        Some(RunStatus::Running)
    );
    assert_eq!(store.intents(&run_id).await.unwrap().len(), 1);
    assert_eq!(store.ledger(&run_id).await.unwrap(), committed.marked);
    assert_eq!(
        store.latest_checkpoint(&run_id).await.unwrap(),
        Some(checkpoint(&run_id, 1, "after step one"))
    );

    let refused = store
        .commit_step(
            &run_id,
            StepCommit {
                intents: vec![(2, intent("intent-b", 0, "send_email"))],
                approvals: Vec::new(),
                declares: vec![declaration(
                    &run_id,
                    "intent-b",
                    "send_email",
                    ToolClass::Irreversible,
                )],
                marks: vec![(
                    IntentId::new("intent-a").unwrap(),
                    mark(LedgerStatus::Pending, 1, BASE_MS + ms(5)),
                )],
                checkpoint: Some(checkpoint(&run_id, 2, "never stored")),
                checkpoint_delta: Some(delta(&run_id, 3, "never stored")),
                events: vec![event(&run_id, EventKind::ToolCallStarted, 2)],
                status: Some(StatusChange {
                    status: RunStatus::Finished(Outcome::Failed),
                    report: Some(report(Outcome::Failed)),
                    at_ms: BASE_MS + ms(6),
                }),
                reopen: false,
                expect_status: None,
                expect_claim: None,
                expect_ledger_revision: None,
                first_span: None,
                revised_report: None,
            },
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::InvalidTransition(_))),
        "an illegal mark refuses the whole commit, found {refused:?}"
    );
    assert_eq!(
        store.intents(&run_id).await.unwrap().len(),
        1,
        "no intent stored"
    );
    assert_eq!(
        store.ledger(&run_id).await.unwrap().len(),
        1,
        "no declaration stored"
    );
    assert_eq!(
        store.events(&run_id, 0).await.unwrap().len(),
        2,
        "no event stored"
    );
    assert_eq!(
        store
            .latest_checkpoint(&run_id)
            .await
            .unwrap()
            .map(|c| c.step),
        Some(1),
        "no checkpoint stored"
    );
    assert_eq!(
        store.get_run(&run_id).await.unwrap().map(|run| run.status),
        Some(RunStatus::Running),
        "no status change stored"
    );
}

/// Every call about a run that does not exist fails with `NotFound`
/// (`get_run` answers `None`).
pub async fn unknown_run_is_not_found(store: &dyn Store) {
    let run_id = RunId::new(unique("missing")).unwrap();
    assert_eq!(store.get_run(&run_id).await.unwrap(), None);
    assert_not_found(store.events(&run_id, 0).await, "run", "events");
    assert_not_found(store.intents(&run_id).await, "run", "intents");
    assert_not_found(store.ledger(&run_id).await, "run", "ledger");
    assert_not_found(
        store.latest_checkpoint(&run_id).await,
        "run",
        "latest_checkpoint",
    );
    assert_not_found(
        store
            .append_events(&run_id, vec![event(&run_id, EventKind::RunStarted, 0)])
            .await,
        "run",
        "append_events",
    );
    assert_not_found(
        store
            .save_intents(&run_id, 1, vec![intent("intent-a", 0, "get_order")])
            .await,
        "run",
        "save_intents",
    );
    assert_not_found(
        store
            .declare(declaration(
                &run_id,
                "intent-a",
                "get_order",
                ToolClass::Read,
            ))
            .await,
        "run",
        "declare",
    );
    assert_not_found(
        store
            .mark(
                &run_id,
                &IntentId::new("intent-a").unwrap(),
                mark(LedgerStatus::Succeeded, 1, BASE_MS),
            )
            .await,
        "run",
        "mark",
    );
    assert_not_found(
        store.write_checkpoint(checkpoint(&run_id, 1, "x")).await,
        "run",
        "write_checkpoint",
    );
    assert_not_found(
        store.append_checkpoint(delta(&run_id, 1, "x")).await,
        "run",
        "append_checkpoint",
    );
    assert_not_found(
        store
            .set_run_status(&run_id, RunStatus::Running, None, BASE_MS)
            .await,
        "run",
        "set_run_status",
    );
    assert_not_found(store.leases_of_run(&run_id).await, "run", "leases_of_run");
    assert_not_found(
        store
            .acquire_lease(temp_lease(&run_id, &unique("lease"), BASE_MS + ms(10)))
            .await,
        "run",
        "acquire_lease",
    );
}

fn temp_lease(run_id: &RunId, lease_id: &str, expires_at_ms: Timestamp) -> Lease {
    Lease {
        lease_id: lease_id.to_owned(),
        run_id: run_id.clone(),
        intent_id: Some(IntentId::new("intent-1").unwrap()),
        kind: LeaseKind::TempPath,
        pgid: None,
        path: Some(std::path::PathBuf::from(format!(
            "/tmp/rein-lease-{lease_id}"
        ))),
        owner: "pid:4242@conformance-host".to_owned(),
        acquired_at_ms: BASE_MS,
        expires_at_ms,
    }
}

fn group_lease(run_id: &RunId, lease_id: &str, pgid: i32, expires_at_ms: Timestamp) -> Lease {
    Lease {
        lease_id: lease_id.to_owned(),
        run_id: run_id.clone(),
        intent_id: None,
        kind: LeaseKind::ProcessGroup,
        pgid: Some(pgid),
        path: None,
        owner: "pid:4242@conformance-host".to_owned(),
        acquired_at_ms: BASE_MS,
        expires_at_ms,
    }
}

/// A lease reads back as acquired, renews, and releases idempotently;
/// the run's list follows.
pub async fn lease_lifecycle(store: &dyn Store) {
    let run_id = created(store, "lease-life").await;
    assert_eq!(store.leases_of_run(&run_id).await.unwrap(), Vec::new());
    let temp = temp_lease(&run_id, &unique("lease-tmp"), BASE_MS + ms(1_000));
    let group = group_lease(&run_id, &unique("lease-pg"), 31_337, BASE_MS + ms(500));
    assert_eq!(store.acquire_lease(temp.clone()).await.unwrap(), temp);
    assert_eq!(store.acquire_lease(group.clone()).await.unwrap(), group);
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![group.clone(), temp.clone()],
        "a run's leases read back as acquired, soonest expiry first"
    );

    let renewed = store
        .renew_lease(&group.lease_id, BASE_MS + ms(2_000))
        .await
        .unwrap();
    assert_eq!(renewed.expires_at_ms, BASE_MS + ms(2_000));
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![temp.clone(), renewed.clone()],
        "a renewal moves the expiry"
    );
    match store.renew_lease(&group.lease_id, BASE_MS - ms(1)).await {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("renewal to before acquisition: expected Invalid, found {other:?}"),
    }
    assert_not_found(
        store
            .renew_lease(&unique("lease-missing"), BASE_MS + ms(1))
            .await,
        "lease",
        "renew of a lease that is not held",
    );

    assert_eq!(
        store.release_lease(&group.lease_id).await.unwrap(),
        Some(renewed),
        "a release returns the lease it released"
    );
    assert_eq!(
        store.release_lease(&group.lease_id).await.unwrap(),
        None,
        "a second release is a no-op"
    );
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![temp.clone()]
    );
    assert_not_found(
        store.renew_lease(&group.lease_id, BASE_MS + ms(1)).await,
        "lease",
        "renew of a released lease",
    );
    store.release_lease(&temp.lease_id).await.unwrap();
    assert_eq!(store.leases_of_run(&run_id).await.unwrap(), Vec::new());
    // A released id may be taken again.
    store.acquire_lease(temp.clone()).await.unwrap();
    store
        .change_lease(LeaseChange::Release {
            lease_id: temp.lease_id.clone(),
        })
        .await
        .unwrap();
}

/// A held id is a `Conflict`; leases that break their invariants are
/// `Invalid` and nothing is stored.
pub async fn lease_acquire_refusals(store: &dyn Store) {
    let run_id = created(store, "lease-refusals").await;
    let held = temp_lease(&run_id, &unique("lease-held"), BASE_MS + ms(10));
    store.acquire_lease(held.clone()).await.unwrap();
    match store.acquire_lease(held.clone()).await {
        Err(StoreError::Conflict { what: "lease", .. }) => {}
        other => panic!("a held lease id: expected Conflict, found {other:?}"),
    }
    let mut bad = Vec::new();
    let mut no_pgid = group_lease(&run_id, &unique("lease-bad"), 2, BASE_MS + ms(10));
    no_pgid.pgid = None;
    bad.push(("process group without pgid", no_pgid));
    bad.push((
        "process group 1",
        group_lease(&run_id, &unique("lease-bad"), 1, BASE_MS + ms(10)),
    ));
    let mut relative = temp_lease(&run_id, &unique("lease-bad"), BASE_MS + ms(10));
    relative.path = Some(std::path::PathBuf::from("relative/dir"));
    bad.push(("relative temp path", relative));
    bad.push((
        "expiry before acquisition",
        temp_lease(&run_id, &unique("lease-bad"), BASE_MS - ms(1)),
    ));
    bad.push(("empty id", temp_lease(&run_id, "", BASE_MS + ms(10))));
    let mut no_owner = temp_lease(&run_id, &unique("lease-bad"), BASE_MS + ms(10));
    no_owner.owner = String::new();
    bad.push(("empty owner", no_owner));
    for (what, lease) in bad {
        match store.acquire_lease(lease).await {
            Err(StoreError::Invalid { .. }) => {}
            other => panic!("{what}: expected Invalid, found {other:?}"),
        }
    }
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![held.clone()],
        "refused leases are not stored"
    );
    store.release_lease(&held.lease_id).await.unwrap();
}

/// `expired_leases` lists leases whose expiry is at or before `now`,
/// soonest first, up to the limit; the filter combines run and expiry.
pub async fn expired_leases_soonest_first(store: &dyn Store) {
    let run_id = created(store, "lease-expiry").await;
    let late = temp_lease(&run_id, &unique("lease-late"), BASE_MS + ms(300));
    let early = group_lease(&run_id, &unique("lease-early"), 4_000, BASE_MS + ms(100));
    let middle = temp_lease(&run_id, &unique("lease-middle"), BASE_MS + ms(200));
    for lease in [&late, &early, &middle] {
        store.acquire_lease(lease.clone()).await.unwrap();
    }
    let ours = |leases: Vec<Lease>| -> Vec<String> {
        leases
            .into_iter()
            .filter(|l| l.run_id == run_id)
            .map(|l| l.lease_id)
            .collect()
    };
    // Other checks (or data already in the store) may hold leases that
    // expired earlier, so the run's own are compared.
    assert_eq!(
        ours(
            store
                .expired_leases(BASE_MS + ms(200), usize::MAX)
                .await
                .unwrap()
        ),
        vec![early.lease_id.clone(), middle.lease_id.clone()],
        "expiry is inclusive and ordered soonest first"
    );
    assert_eq!(
        ours(
            store
                .expired_leases(Timestamp::from_millis(u64::MAX), usize::MAX)
                .await
                .unwrap()
        ),
        vec![
            early.lease_id.clone(),
            middle.lease_id.clone(),
            late.lease_id.clone()
        ]
    );
    let filtered = store
        .leases(
            &LeaseFilter::all()
                .of_run(run_id.clone())
                .expired_at(BASE_MS + ms(300))
                .limit(2),
        )
        .await
        .unwrap();
    assert_eq!(
        ours(filtered),
        vec![early.lease_id.clone(), middle.lease_id.clone()],
        "the limit keeps the soonest"
    );
    assert_eq!(
        store
            .leases(
                &LeaseFilter::all()
                    .of_run(run_id.clone())
                    .expired_at(BASE_MS + ms(99))
            )
            .await
            .unwrap(),
        Vec::new()
    );
    for lease in [&late, &early, &middle] {
        store.release_lease(&lease.lease_id).await.unwrap();
    }
    assert_eq!(
        store.expired_leases(BASE_MS + ms(300), 0).await.unwrap(),
        Vec::new()
    );
}

/// A fingerprint as the server computes it: 64 lowercase hex digits.
pub fn fingerprint(seed: u8) -> String {
    format!("{seed:02x}").repeat(32)
}

/// A tenant no other check uses, so listings can be compared exactly.
fn unique_tenant(prefix: &str) -> TenantId {
    TenantId::new(unique(prefix)).unwrap()
}

fn response(status: u16, body: &str) -> StoredResponse {
    StoredResponse {
        status,
        content_type: Some("application/json".to_owned()),
        location: Some("/v1/runs/run-42".to_owned()),
        headers: vec![
            ("Rein-Model".to_owned(), "mock/mock-model".to_owned()),
            ("Rein-Fallback".to_owned(), "true".to_owned()),
        ],
        body: body.as_bytes().to_vec(),
    }
}

/// `renew_lease_of` and `release_lease_of` act only for the lease's
/// holder: another owner's call returns `false` and changes nothing, as does
/// one on a missing lease.
pub async fn lease_renew_and_release_only_by_holder(store: &dyn Store) {
    let run_id = created(store, "lease-fenced").await;
    let held = temp_lease(&run_id, &unique("lease-fenced"), BASE_MS + ms(100));
    let holder = held.owner.clone();
    let other = "pid:9999@other-host";
    store.acquire_lease(held.clone()).await.unwrap();
    let stored = || async { store.leases_of_run(&run_id).await.unwrap() };

    assert!(
        store
            .renew_lease_of(&held.lease_id, &holder, BASE_MS + ms(200))
            .await
            .unwrap(),
        "the holder renews its lease"
    );
    let mut renewed = held.clone();
    renewed.expires_at_ms = BASE_MS + ms(200);
    assert_eq!(
        stored().await,
        vec![renewed.clone()],
        "the renewal is stored"
    );

    assert!(
        !store
            .renew_lease_of(&held.lease_id, other, BASE_MS + ms(900))
            .await
            .unwrap(),
        "another owner's renewal is refused"
    );
    assert_eq!(
        stored().await,
        vec![renewed.clone()],
        "a refused renewal leaves the expiry unchanged"
    );
    assert!(
        !store
            .renew_lease_of(&unique("lease-missing"), &holder, BASE_MS + ms(1))
            .await
            .unwrap(),
        "renewing a missing lease returns false"
    );
    match store
        .renew_lease_of(&held.lease_id, &holder, BASE_MS - ms(1))
        .await
    {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("renew_lease_of before acquisition: expected Invalid, found {other:?}"),
    }
    for owner in ["", "  "] {
        match store
            .renew_lease_of(&held.lease_id, owner, BASE_MS + ms(300))
            .await
        {
            Err(StoreError::Invalid {
                what: "lease owner",
                ..
            }) => {}
            other => panic!("renew_lease_of by {owner:?}: expected Invalid, found {other:?}"),
        }
        match store.release_lease_of(&held.lease_id, owner).await {
            Err(StoreError::Invalid {
                what: "lease owner",
                ..
            }) => {}
            other => panic!("release_lease_of by {owner:?}: expected Invalid, found {other:?}"),
        }
    }
    assert_eq!(stored().await, vec![renewed.clone()]);

    assert!(
        !store.release_lease_of(&held.lease_id, other).await.unwrap(),
        "another owner's release is refused"
    );
    assert_eq!(
        stored().await,
        vec![renewed.clone()],
        "a refused release leaves the lease"
    );
    assert!(
        store
            .release_lease_of(&held.lease_id, &holder)
            .await
            .unwrap(),
        "the holder releases its lease"
    );
    assert_eq!(stored().await, Vec::new(), "the release is stored");
    assert!(
        !store
            .release_lease_of(&held.lease_id, &holder)
            .await
            .unwrap(),
        "releasing a missing lease returns false"
    );
}

/// `renew_leases_of` renews each lease as `renew_lease_of` would, in the
/// order given: the holder's renewed, another owner's and a missing one
/// refused (`false`) and unchanged. An invalid renewal among them refuses
/// the whole batch and renews none.
pub async fn leases_renewed_together_as_each_alone(store: &dyn Store) {
    let run_id = created(store, "lease-batch").await;
    let held = temp_lease(&run_id, &unique("lease-batch-a"), BASE_MS + ms(100));
    let also = temp_lease(&run_id, &unique("lease-batch-b"), BASE_MS + ms(100));
    let holder = held.owner.clone();
    store.acquire_lease(held.clone()).await.unwrap();
    store.acquire_lease(also.clone()).await.unwrap();
    let run = &run_id;
    let expiry = |lease_id: String| async move {
        store
            .leases_of_run(run)
            .await
            .unwrap()
            .into_iter()
            .find(|l| l.lease_id == lease_id)
            .map(|l| l.expires_at_ms)
    };

    let batch = vec![
        (also.lease_id.clone(), holder.clone()),
        (unique("lease-batch-missing"), holder.clone()),
        (held.lease_id.clone(), "pid:9999@other-host".to_owned()),
        (held.lease_id.clone(), holder.clone()),
    ];
    assert_eq!(
        store
            .renew_leases_of(&batch, BASE_MS + ms(500))
            .await
            .unwrap(),
        vec![true, false, false, true],
        "each answered in the order given"
    );
    assert_eq!(expiry(held.lease_id.clone()).await, Some(BASE_MS + ms(500)));
    assert_eq!(expiry(also.lease_id.clone()).await, Some(BASE_MS + ms(500)));
    assert_eq!(
        store.renew_leases_of(&[], BASE_MS + ms(600)).await.unwrap(),
        Vec::<bool>::new(),
        "nothing to renew"
    );

    let invalid = vec![
        (held.lease_id.clone(), holder.clone()),
        (also.lease_id.clone(), String::new()),
    ];
    match store.renew_leases_of(&invalid, BASE_MS + ms(900)).await {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("a batch with an empty owner: expected Invalid, found {other:?}"),
    }
    assert_eq!(
        expiry(held.lease_id.clone()).await,
        Some(BASE_MS + ms(500)),
        "a refused batch renews none"
    );
}

/// `take_over_lease` replaces a lease only when it is absent or expired
/// (`expires_at_ms <= now_ms`); while it is live the take-over returns
/// `false` and the holder keeps it, and its renewals and releases keep
/// working. After a take-over, the old holder can neither renew nor
/// release.
pub async fn lease_take_over_only_when_absent_or_expired(store: &dyn Store) {
    let run_id = created(store, "lease-take-over").await;
    let lease_id = unique("lease-claim");
    let claim = |owner: &str, acquired_at_ms: Timestamp, expires_at_ms: Timestamp| Lease {
        lease_id: lease_id.clone(),
        run_id: run_id.clone(),
        intent_id: None,
        kind: LeaseKind::Run,
        pgid: None,
        path: None,
        owner: owner.to_owned(),
        acquired_at_ms,
        expires_at_ms,
    };
    let first = claim("pid:1@host-a", BASE_MS, BASE_MS + ms(100));
    assert!(
        store.take_over_lease(first.clone(), BASE_MS).await.unwrap(),
        "taking over an absent lease acquires it"
    );
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![first.clone()]
    );

    let second = claim("pid:2@host-b", BASE_MS + ms(50), BASE_MS + ms(300));
    assert!(
        !store
            .take_over_lease(second.clone(), BASE_MS + ms(99))
            .await
            .unwrap(),
        "a live lease is not taken over"
    );
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![first.clone()],
        "a refused take-over changes nothing"
    );

    let second = claim("pid:2@host-b", BASE_MS + ms(100), BASE_MS + ms(300));
    assert!(
        store
            .take_over_lease(second.clone(), BASE_MS + ms(100))
            .await
            .unwrap(),
        "a lease expired at now (expiry inclusive) is taken over"
    );
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![second.clone()],
        "the new holder's lease replaced the old one"
    );
    assert!(
        !store
            .renew_lease_of(&lease_id, &first.owner, BASE_MS + ms(1_000))
            .await
            .unwrap(),
        "the old holder cannot renew after a take-over"
    );
    assert!(
        !store
            .release_lease_of(&lease_id, &first.owner)
            .await
            .unwrap(),
        "the old holder cannot release after a take-over"
    );
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![second.clone()],
        "the old holder's calls leave the new lease alone"
    );

    let mut bad = claim("pid:3@host-c", BASE_MS + ms(400), BASE_MS + ms(500));
    bad.owner = String::new();
    match store.take_over_lease(bad, BASE_MS + ms(1_000)).await {
        Err(StoreError::Invalid {
            what: "lease owner",
            ..
        }) => {}
        other => panic!("a take-over with no owner: expected Invalid, found {other:?}"),
    }
    let backwards = claim("pid:3@host-c", BASE_MS + ms(400), BASE_MS + ms(399));
    match store.take_over_lease(backwards, BASE_MS + ms(1_000)).await {
        Err(StoreError::Invalid { .. }) => {}
        other => {
            panic!("a take-over expiring before acquisition: expected Invalid, found {other:?}")
        }
    }
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![second.clone()],
        "refused take-overs change nothing"
    );
    assert!(
        store
            .release_lease_of(&lease_id, &second.owner)
            .await
            .unwrap()
    );
}

/// Of 16 concurrent take-overs of one expired lease by different owners,
/// exactly one wins, and the winner holds the lease.
pub async fn lease_concurrent_take_overs_admit_exactly_one(store: &dyn Store) {
    const TAKERS: usize = 16;
    let run_id = created(store, "lease-take-over-race").await;
    let lease_id = unique("lease-race");
    let claim = |owner: String, acquired_at_ms: Timestamp, expires_at_ms: Timestamp| Lease {
        lease_id: lease_id.clone(),
        run_id: run_id.clone(),
        intent_id: None,
        kind: LeaseKind::Run,
        pgid: None,
        path: None,
        owner,
        acquired_at_ms,
        expires_at_ms,
    };
    store
        .acquire_lease(claim("pid:0@stalled".to_owned(), BASE_MS, BASE_MS + ms(10)))
        .await
        .unwrap();
    let now_ms = BASE_MS + ms(10);
    let futures = (1..=TAKERS)
        .map(|n| {
            let lease = claim(format!("pid:{n}@host"), now_ms, now_ms + ms(1_000));
            Box::pin(async move {
                let owner = lease.owner.clone();
                (owner, store.take_over_lease(lease, now_ms).await.unwrap())
            }) as Pin<Box<dyn Future<Output = (String, bool)> + Send + '_>>
        })
        .collect();
    let outcomes = join_all(futures).await;
    let winners: Vec<&String> = outcomes
        .iter()
        .filter(|(_, won)| *won)
        .map(|(owner, _)| owner)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one take-over wins: {outcomes:?}");
    let held = store.leases_of_run(&run_id).await.unwrap();
    assert_eq!(held.len(), 1, "one lease is held: {held:?}");
    assert_eq!(&held[0].owner, winners[0], "the winner holds the lease");
    assert!(store.release_lease_of(&lease_id, winners[0]).await.unwrap());
}

/// Runs `futures` concurrently on the caller's task and returns their
/// outputs in order (no runtime needed, so the suite runs on any
/// executor).
async fn join_all<'a, T>(futures: Vec<Pin<Box<dyn Future<Output = T> + Send + 'a>>>) -> Vec<T> {
    let mut pending: Vec<_> = futures.into_iter().map(Some).collect();
    let mut outputs: Vec<Option<T>> = pending.iter().map(|_| None).collect();
    poll_fn(|cx| {
        for (slot, output) in pending.iter_mut().zip(outputs.iter_mut()) {
            if let Some(future) = slot
                && let Poll::Ready(value) = future.as_mut().poll(cx)
            {
                *output = Some(value);
                *slot = None;
            }
        }
        if pending.iter().all(Option::is_none) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    outputs.into_iter().map(Option::unwrap).collect()
}

/// The first request reserves its key (`Reserved`); the same request again
/// while it runs is `InProgress` (409); once completed it is `Replay` of
/// the stored status, body, content type, location and other headers.
pub async fn idempotency_first_request_executes_then_replays(store: &dyn Store) {
    let tenant = unique_tenant("idem-replay");
    let key = unique("key");
    let fp = fingerprint(1);
    let expires = BASE_MS + ms(86_400_000);
    assert_eq!(
        store
            .reserve_idempotency(&tenant, &key, &fp, BASE_MS, expires)
            .await
            .unwrap(),
        Reservation::Reserved,
        "the first request executes"
    );
    let in_progress = IdempotencyRecord {
        tenant: tenant.clone(),
        key: key.clone(),
        fingerprint: fp.clone(),
        state: IdempotencyState::InProgress,
        response: None,
        created_at_ms: BASE_MS,
        updated_at_ms: BASE_MS,
        expires_at_ms: expires,
        owner: None,
        run_id: None,
        holder_since_ms: None,
        holder_until_ms: None,
    };
    assert_eq!(
        store
            .reserve_idempotency(&tenant, &key, &fp, BASE_MS + ms(5), expires + ms(5))
            .await
            .unwrap(),
        Reservation::InProgress(in_progress.clone()),
        "the same request while the first runs: 409, the record unchanged"
    );
    let stored = response(201, r#"{"run_id":"run-42"}"#);
    store
        .complete_idempotency(&tenant, &key, stored.clone(), BASE_MS + ms(10))
        .await
        .unwrap();
    let completed = IdempotencyRecord {
        state: IdempotencyState::Completed,
        response: Some(stored),
        updated_at_ms: BASE_MS + ms(10),
        ..in_progress
    };
    for at in [BASE_MS + ms(11), expires - ms(1)] {
        assert_eq!(
            store
                .reserve_idempotency(&tenant, &key, &fp, at, at + ms(1_000))
                .await
                .unwrap(),
            Reservation::Replay(completed.clone()),
            "a completed request replays its response until it expires"
        );
    }
    // An empty body and no headers replay as such.
    let bare = unique("key-bare");
    store
        .reserve_idempotency(&tenant, &bare, &fp, BASE_MS, expires)
        .await
        .unwrap();
    let empty = StoredResponse {
        status: 204,
        content_type: None,
        location: None,
        headers: Vec::new(),
        body: Vec::new(),
    };
    store
        .complete_idempotency(&tenant, &bare, empty.clone(), BASE_MS + ms(1))
        .await
        .unwrap();
    match store
        .reserve_idempotency(&tenant, &bare, &fp, BASE_MS + ms(2), expires)
        .await
        .unwrap()
    {
        Reservation::Replay(record) => assert_eq!(record.response, Some(empty)),
        other => panic!("a completed 204: expected Replay, found {other:?}"),
    }
    for key in [&key, &bare] {
        assert!(store.clear_idempotency(&tenant, key).await.unwrap());
    }
}

/// The same key with another fingerprint is a `Mismatch` (422) while in
/// progress and once completed, and changes nothing.
pub async fn idempotency_other_fingerprint_is_a_mismatch_in_any_state(store: &dyn Store) {
    let tenant = unique_tenant("idem-mismatch");
    let key = unique("key");
    let expires = BASE_MS + ms(1_000);
    store
        .reserve_idempotency(&tenant, &key, &fingerprint(1), BASE_MS, expires)
        .await
        .unwrap();
    match store
        .reserve_idempotency(&tenant, &key, &fingerprint(2), BASE_MS + ms(1), expires)
        .await
        .unwrap()
    {
        Reservation::Mismatch(record) => {
            assert_eq!(record.fingerprint, fingerprint(1), "the stored request");
            assert_eq!(record.state, IdempotencyState::InProgress);
        }
        other => {
            panic!("another fingerprint while in progress: expected Mismatch, found {other:?}")
        }
    }
    store
        .complete_idempotency(&tenant, &key, response(200, "ok"), BASE_MS + ms(2))
        .await
        .unwrap();
    match store
        .reserve_idempotency(&tenant, &key, &fingerprint(2), BASE_MS + ms(3), expires)
        .await
        .unwrap()
    {
        Reservation::Mismatch(record) => {
            assert_eq!(record.fingerprint, fingerprint(1));
            assert_eq!(record.state, IdempotencyState::Completed);
            assert_eq!(record.response, Some(response(200, "ok")));
        }
        other => panic!("another fingerprint once completed: expected Mismatch, found {other:?}"),
    }
    assert!(
        matches!(
            store
                .reserve_idempotency(&tenant, &key, &fingerprint(1), BASE_MS + ms(4), expires)
                .await
                .unwrap(),
            Reservation::Replay(_)
        ),
        "a mismatch leaves the record as it was"
    );
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// A failed or non-2xx endpoint releases its reservation, so a retry
/// executes; a release never deletes a completed record.
pub async fn idempotency_release_deletes_only_in_progress(store: &dyn Store) {
    let tenant = unique_tenant("idem-release");
    let key = unique("key");
    let fp = fingerprint(3);
    let expires = BASE_MS + ms(1_000);
    store
        .reserve_idempotency(&tenant, &key, &fp, BASE_MS, expires)
        .await
        .unwrap();
    assert!(
        store.release_idempotency(&tenant, &key).await.unwrap(),
        "an in-progress reservation is released"
    );
    assert!(
        !store.release_idempotency(&tenant, &key).await.unwrap(),
        "a second release finds nothing"
    );
    assert!(
        !store
            .release_idempotency(&tenant, &unique("never-reserved"))
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .reserve_idempotency(&tenant, &key, &fp, BASE_MS + ms(1), expires)
            .await
            .unwrap(),
        Reservation::Reserved,
        "a retry after a release executes"
    );
    store
        .complete_idempotency(&tenant, &key, response(202, "accepted"), BASE_MS + ms(2))
        .await
        .unwrap();
    assert!(
        !store.release_idempotency(&tenant, &key).await.unwrap(),
        "a completed record is not released"
    );
    assert!(matches!(
        store
            .reserve_idempotency(&tenant, &key, &fp, BASE_MS + ms(3), expires)
            .await
            .unwrap(),
        Reservation::Replay(_)
    ));
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// Completing a missing record is `NotFound`; completing twice, storing a
/// non-2xx response or reserving with malformed arguments is `Invalid`.
pub async fn idempotency_complete_refusals(store: &dyn Store) {
    let tenant = unique_tenant("idem-refusals");
    let key = unique("key");
    assert_not_found(
        store
            .complete_idempotency(&tenant, &key, response(200, "ok"), BASE_MS)
            .await,
        "idempotency record",
        "complete of a key never reserved",
    );
    store
        .reserve_idempotency(&tenant, &key, &fingerprint(4), BASE_MS, BASE_MS + ms(100))
        .await
        .unwrap();
    for status in [199, 302, 409, 500] {
        match store
            .complete_idempotency(&tenant, &key, response(status, "no"), BASE_MS + ms(1))
            .await
        {
            Err(StoreError::Invalid { .. }) => {}
            other => panic!("a {status} response: expected Invalid, found {other:?}"),
        }
    }
    store
        .complete_idempotency(&tenant, &key, response(200, "first"), BASE_MS + ms(1))
        .await
        .unwrap();
    match store
        .complete_idempotency(&tenant, &key, response(200, "second"), BASE_MS + ms(2))
        .await
    {
        Err(StoreError::Invalid { .. }) => {}
        other => panic!("a second completion: expected Invalid, found {other:?}"),
    }
    match store
        .reserve_idempotency(
            &tenant,
            &key,
            &fingerprint(4),
            BASE_MS + ms(3),
            BASE_MS + ms(100),
        )
        .await
        .unwrap()
    {
        Reservation::Replay(record) => {
            assert_eq!(record.response, Some(response(200, "first")), "first wins");
        }
        other => panic!("expected Replay, found {other:?}"),
    }
    let bad = [
        (
            "empty key",
            String::new(),
            fingerprint(4),
            BASE_MS + ms(100),
        ),
        (
            "control key",
            "a\nb".to_owned(),
            fingerprint(4),
            BASE_MS + ms(100),
        ),
        (
            "long key",
            "k".repeat(crate::MAX_IDEMPOTENCY_KEY_LEN + 1),
            fingerprint(4),
            BASE_MS + ms(100),
        ),
        (
            "short fingerprint",
            unique("key"),
            "abc".to_owned(),
            BASE_MS + ms(100),
        ),
        (
            "uppercase fingerprint",
            unique("key"),
            "AB".repeat(32),
            BASE_MS + ms(100),
        ),
        ("expiry at now", unique("key"), fingerprint(4), BASE_MS),
    ];
    for (what, key, fp, expires) in bad {
        match store
            .reserve_idempotency(&tenant, &key, &fp, BASE_MS, expires)
            .await
        {
            Err(StoreError::Invalid { .. }) => {}
            other => panic!("{what}: expected Invalid, found {other:?}"),
        }
    }
    let listed = store
        .idempotency_records(Some(&tenant), None, usize::MAX)
        .await
        .unwrap();
    assert_eq!(listed.len(), 1, "refused reservations are not stored");
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// A record expired at `now` (inclusive) is replaced by a new reservation,
/// whatever its state or fingerprint.
pub async fn idempotency_expired_record_is_replaced(store: &dyn Store) {
    let tenant = unique_tenant("idem-expiry");
    let key = unique("key");
    store
        .reserve_idempotency(&tenant, &key, &fingerprint(5), BASE_MS, BASE_MS + ms(100))
        .await
        .unwrap();
    assert!(matches!(
        store
            .reserve_idempotency(
                &tenant,
                &key,
                &fingerprint(6),
                BASE_MS + ms(99),
                BASE_MS + ms(200)
            )
            .await
            .unwrap(),
        Reservation::Mismatch(_)
    ));
    // A crashed reservation with another request's fingerprint: expired.
    assert_eq!(
        store
            .reserve_idempotency(
                &tenant,
                &key,
                &fingerprint(6),
                BASE_MS + ms(100),
                BASE_MS + ms(300)
            )
            .await
            .unwrap(),
        Reservation::Reserved,
        "expiry is inclusive and replaces the record"
    );
    let replaced = store
        .idempotency_records(Some(&tenant), None, usize::MAX)
        .await
        .unwrap();
    assert_eq!(
        replaced,
        vec![IdempotencyRecord {
            tenant: tenant.clone(),
            key: key.clone(),
            fingerprint: fingerprint(6),
            state: IdempotencyState::InProgress,
            response: None,
            created_at_ms: BASE_MS + ms(100),
            updated_at_ms: BASE_MS + ms(100),
            expires_at_ms: BASE_MS + ms(300),
            owner: None,
            run_id: None,
            holder_since_ms: None,
            holder_until_ms: None,
        }],
        "the replacement is a new record"
    );
    // A completed record expires too, and its response is gone.
    store
        .complete_idempotency(&tenant, &key, response(201, "old"), BASE_MS + ms(150))
        .await
        .unwrap();
    assert_eq!(
        store
            .reserve_idempotency(
                &tenant,
                &key,
                &fingerprint(6),
                BASE_MS + ms(300),
                BASE_MS + ms(400)
            )
            .await
            .unwrap(),
        Reservation::Reserved,
        "the same request after expiry executes again"
    );
    let renewed = store
        .idempotency_records(Some(&tenant), None, usize::MAX)
        .await
        .unwrap();
    assert_eq!(renewed.len(), 1);
    assert_eq!(renewed[0].state, IdempotencyState::InProgress);
    assert_eq!(renewed[0].response, None);
    assert_eq!(renewed[0].created_at_ms, BASE_MS + ms(300));
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// The same key in two tenants names two independent records.
pub async fn idempotency_tenants_are_independent(store: &dyn Store) {
    let first = unique_tenant("idem-tenant-a");
    let second = unique_tenant("idem-tenant-b");
    let key = unique("shared-key");
    let expires = BASE_MS + ms(1_000);
    for tenant in [&first, &second] {
        assert_eq!(
            store
                .reserve_idempotency(tenant, &key, &fingerprint(7), BASE_MS, expires)
                .await
                .unwrap(),
            Reservation::Reserved,
            "tenant {tenant}: its own reservation"
        );
    }
    store
        .complete_idempotency(&first, &key, response(201, "first"), BASE_MS + ms(1))
        .await
        .unwrap();
    assert!(matches!(
        store
            .reserve_idempotency(&second, &key, &fingerprint(7), BASE_MS + ms(2), expires)
            .await
            .unwrap(),
        Reservation::InProgress(_)
    ));
    assert!(store.release_idempotency(&second, &key).await.unwrap());
    assert!(matches!(
        store
            .reserve_idempotency(&first, &key, &fingerprint(7), BASE_MS + ms(3), expires)
            .await
            .unwrap(),
        Reservation::Replay(_)
    ));
    assert_eq!(
        store
            .reserve_idempotency(&second, &key, &fingerprint(8), BASE_MS + ms(4), expires)
            .await
            .unwrap(),
        Reservation::Reserved,
        "another tenant's fingerprint is no mismatch"
    );
    assert!(store.clear_idempotency(&first, &key).await.unwrap());
    assert_eq!(
        store
            .idempotency_records(Some(&second), None, usize::MAX)
            .await
            .unwrap()
            .len(),
        1,
        "clearing one tenant's key leaves the other's"
    );
    assert!(store.clear_idempotency(&second, &key).await.unwrap());
}

/// Records list oldest first, filtered by tenant and state, up to the
/// limit; an operator clears a record in any state.
pub async fn idempotency_list_and_clear(store: &dyn Store) {
    let tenant = unique_tenant("idem-list");
    let other = unique_tenant("idem-list-other");
    let keys: Vec<String> = (0..3).map(|n| format!("{}-{n}", unique("key"))).collect();
    let expires = BASE_MS + ms(10_000);
    // Reserved out of order: key 2 first, then 0, then 1.
    for (at, key) in [
        (BASE_MS + ms(2), &keys[2]),
        (BASE_MS, &keys[0]),
        (BASE_MS + ms(1), &keys[1]),
    ] {
        store
            .reserve_idempotency(&tenant, key, &fingerprint(9), at, expires)
            .await
            .unwrap();
    }
    store
        .reserve_idempotency(&other, &keys[0], &fingerprint(9), BASE_MS, expires)
        .await
        .unwrap();
    store
        .complete_idempotency(&tenant, &keys[1], response(201, "done"), BASE_MS + ms(3))
        .await
        .unwrap();
    let list = |records: Vec<IdempotencyRecord>| -> Vec<String> {
        records.into_iter().map(|record| record.key).collect()
    };
    assert_eq!(
        list(
            store
                .idempotency_records(Some(&tenant), None, usize::MAX)
                .await
                .unwrap()
        ),
        keys,
        "oldest first"
    );
    assert_eq!(
        list(
            store
                .idempotency_records(Some(&tenant), None, 2)
                .await
                .unwrap()
        ),
        keys[..2].to_vec(),
        "the limit keeps the oldest"
    );
    assert_eq!(
        list(
            store
                .idempotency_records(Some(&tenant), Some(IdempotencyState::InProgress), 10)
                .await
                .unwrap()
        ),
        vec![keys[0].clone(), keys[2].clone()],
        "the stuck reservations an operator looks for"
    );
    let completed = store
        .idempotency_records(Some(&tenant), Some(IdempotencyState::Completed), 10)
        .await
        .unwrap();
    assert_eq!(list(completed.clone()), vec![keys[1].clone()]);
    assert_eq!(completed[0].response, Some(response(201, "done")));
    // Across tenants, both tenants' records (among any others) show.
    let everyone = store
        .idempotency_records(None, Some(IdempotencyState::InProgress), usize::MAX)
        .await
        .unwrap();
    for (tenant, key) in [(&tenant, &keys[0]), (&tenant, &keys[2]), (&other, &keys[0])] {
        assert!(
            everyone
                .iter()
                .any(|record| &record.tenant == tenant && &record.key == key),
            "{tenant}/{key} is listed across tenants"
        );
    }
    assert!(
        everyone
            .iter()
            .all(|record| record.state == IdempotencyState::InProgress)
    );
    assert_eq!(
        store
            .idempotency_records(Some(&tenant), None, 0)
            .await
            .unwrap(),
        Vec::new()
    );

    assert!(
        store.clear_idempotency(&tenant, &keys[1]).await.unwrap(),
        "a completed record is cleared"
    );
    assert!(
        store.clear_idempotency(&tenant, &keys[0]).await.unwrap(),
        "an in-progress record is cleared"
    );
    assert!(!store.clear_idempotency(&tenant, &keys[0]).await.unwrap());
    assert_eq!(
        list(
            store
                .idempotency_records(Some(&tenant), None, 10)
                .await
                .unwrap()
        ),
        vec![keys[2].clone()]
    );
    assert_eq!(
        store
            .reserve_idempotency(
                &tenant,
                &keys[0],
                &fingerprint(10),
                BASE_MS + ms(5),
                expires
            )
            .await
            .unwrap(),
        Reservation::Reserved,
        "a cleared key is free"
    );
    for key in [&keys[0], &keys[2]] {
        assert!(store.clear_idempotency(&tenant, key).await.unwrap());
    }
    assert!(store.clear_idempotency(&other, &keys[0]).await.unwrap());
}

/// The sweeper deletes records expired at `now` (inclusive), in any state,
/// soonest expiry first, up to the limit.
///
/// Its records live at times near the epoch, before any real record
/// expires, so a sweep here deletes nothing a real deployment (or another
/// check, all of which use times from `BASE_MS`) still holds.
pub async fn idempotency_sweep_deletes_expired_up_to_limit(store: &dyn Store) {
    // Leftovers of an interrupted earlier run of this check.
    store
        .sweep_idempotency(Timestamp::from_millis(1_000), usize::MAX)
        .await
        .unwrap();
    let tenant = unique_tenant("idem-sweep");
    let key = |n: u64| format!("sweep-{n}");
    for n in 1..=3 {
        store
            .reserve_idempotency(
                &tenant,
                &key(n),
                &fingerprint(11),
                Timestamp::from_millis(0),
                Timestamp::from_millis(n * 100),
            )
            .await
            .unwrap();
    }
    store
        .complete_idempotency(
            &tenant,
            &key(1),
            response(200, "ok"),
            Timestamp::from_millis(10),
        )
        .await
        .unwrap();
    let remaining = || async {
        store
            .idempotency_records(Some(&tenant), None, usize::MAX)
            .await
            .unwrap()
            .into_iter()
            .map(|record| record.key)
            .collect::<Vec<_>>()
    };
    assert_eq!(
        store
            .sweep_idempotency(Timestamp::from_millis(99), usize::MAX)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .sweep_idempotency(Timestamp::from_millis(200), 0)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .sweep_idempotency(Timestamp::from_millis(200), 1)
            .await
            .unwrap(),
        1,
        "the limit bounds one sweep"
    );
    assert_eq!(
        remaining().await,
        vec![key(2), key(3)],
        "the soonest expiry goes first, completed or not"
    );
    assert_eq!(
        store
            .sweep_idempotency(Timestamp::from_millis(200), usize::MAX)
            .await
            .unwrap(),
        1,
        "expiry is inclusive"
    );
    assert_eq!(remaining().await, vec![key(3)]);
    assert_eq!(
        store
            .sweep_idempotency(Timestamp::from_millis(u64::MAX), 1)
            .await
            .unwrap(),
        1
    );
    assert_eq!(remaining().await, Vec::<String>::new());
}

/// Of many concurrent reservations of one key, exactly one is `Reserved`;
/// the others see it `InProgress`.
pub async fn idempotency_concurrent_reserves_admit_exactly_one(store: &dyn Store) {
    const CALLERS: usize = 16;
    let tenant = unique_tenant("idem-race");
    let key = unique("key");
    let fp = fingerprint(12);
    let futures = (0..CALLERS)
        .map(|n| {
            let (tenant, key, fp) = (&tenant, &key, &fp);
            Box::pin(async move {
                store
                    .reserve_idempotency(
                        tenant,
                        key,
                        fp,
                        BASE_MS + ms(n as u64),
                        BASE_MS + ms(10_000),
                    )
                    .await
                    .unwrap()
            }) as Pin<Box<dyn Future<Output = Reservation> + Send + '_>>
        })
        .collect();
    let outcomes = join_all(futures).await;
    let reserved = outcomes
        .iter()
        .filter(|outcome| **outcome == Reservation::Reserved)
        .count();
    assert_eq!(reserved, 1, "exactly one reservation wins: {outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|outcome| matches!(outcome, Reservation::Reserved | Reservation::InProgress(_))),
        "the others see it in progress: {outcomes:?}"
    );
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// Whether `result` is the `StatusChanged` of a lost compare-and-set on
/// `run_id`.
fn is_status_conflict<T>(result: &Result<T, StoreError>, run_id: &RunId) -> bool {
    matches!(
        result,
        Err(StoreError::StatusChanged { run_id: id }) if id == run_id.as_str()
    )
}

/// A commit with `expect_status` applies when the run's status matches;
/// on a mismatch it fails with `StatusChanged` before any
/// part (not even `reopen`) is applied.
pub async fn expect_status_applies_only_on_a_match(store: &dyn Store) {
    let run_id = created(store, "cas").await;
    let start = StepCommit {
        expect_status: Some(RunStatus::Queued),
        events: vec![event(&run_id, EventKind::RunStarted, 0)],
        status: Some(StatusChange {
            status: RunStatus::Running,
            report: None,
            at_ms: BASE_MS + ms(1),
        }),
        ..StepCommit::default()
    };
    let committed = store.commit_step(&run_id, start).await.unwrap();
    assert_eq!(
        committed.run.map(|run| run.status),
        Some(RunStatus::Running),
        "a matching expectation applies the commit"
    );
    assert_eq!(committed.events.len(), 1);

    // Every part of a mismatching commit, none stored.
    let mut declared = declaration(&run_id, "intent-cas", "send_email", ToolClass::Irreversible);
    declared.step = 1;
    let cancel = StepCommit {
        expect_status: Some(RunStatus::Queued),
        intents: vec![(1, intent("intent-cas", 0, "send_email"))],
        declares: vec![declared],
        checkpoint: Some(checkpoint(&run_id, 1, "lost the race")),
        checkpoint_delta: Some(delta(&run_id, 2, "lost the race")),
        events: vec![event(&run_id, EventKind::RunFinished, 1)],
        status: Some(StatusChange {
            status: RunStatus::Finished(Outcome::Cancelled),
            report: Some(report(Outcome::Cancelled)),
            at_ms: BASE_MS + ms(2),
        }),
        ..StepCommit::default()
    };
    let refused = store.commit_step(&run_id, cancel).await;
    assert!(
        is_status_conflict(&refused, &run_id),
        "a mismatching expectation must be StatusChanged, found {refused:?}"
    );
    let read = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(read.status, RunStatus::Running, "no status stored");
    assert_eq!(read.updated_at_ms, BASE_MS + ms(1));
    assert_eq!(read.report, None);
    assert_eq!(
        store.events(&run_id, 0).await.unwrap().len(),
        1,
        "no events stored"
    );
    assert!(
        store.intents(&run_id).await.unwrap().is_empty(),
        "no intents"
    );
    assert!(store.ledger(&run_id).await.unwrap().is_empty(), "no ledger");
    assert_eq!(store.latest_checkpoint(&run_id).await.unwrap(), None);

    // A matching expectation with nothing else to write succeeds.
    let check = StepCommit {
        expect_status: Some(RunStatus::Running),
        ..StepCommit::default()
    };
    assert!(check.is_empty(), "an expectation alone writes nothing");
    store.commit_step(&run_id, check).await.unwrap();

    // Checked before `reopen`: a finished, recoverable run stays finished.
    store
        .set_run_status(
            &run_id,
            RunStatus::Finished(Outcome::PartialSuccess),
            Some(report(Outcome::PartialSuccess)),
            BASE_MS + ms(3),
        )
        .await
        .unwrap();
    let reopen = StepCommit {
        expect_status: Some(RunStatus::Finished(Outcome::Failed)),
        reopen: true,
        ..StepCommit::default()
    };
    let refused = store.commit_step(&run_id, reopen).await;
    assert!(
        is_status_conflict(&refused, &run_id),
        "another outcome than expected is a mismatch, found {refused:?}"
    );
    let read = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(
        read.status,
        RunStatus::Finished(Outcome::PartialSuccess),
        "a refused reopen leaves the run finished"
    );
    assert!(read.report.is_some());

    // An unknown run is still NotFound.
    let missing = RunId::new(unique("cas-missing")).unwrap();
    let commit = StepCommit {
        expect_status: Some(RunStatus::Queued),
        ..StepCommit::default()
    };
    assert_not_found(
        store.commit_step(&missing, commit).await,
        "run",
        "an expectation on an unknown run",
    );
}

/// Of 16 concurrent commits that each expect `queued` and move the run to
/// a different status, exactly one succeeds; the rest are `Conflict`s and
/// store nothing.
pub async fn expect_status_admits_exactly_one_concurrent_change(store: &dyn Store) {
    const CALLERS: usize = 16;
    let run_id = created(store, "cas-race").await;
    let targets = [
        RunStatus::Running,
        RunStatus::Finished(Outcome::Cancelled),
        RunStatus::Finished(Outcome::Failed),
        RunStatus::Finished(Outcome::HandedOff),
    ];
    let commits: Vec<StepCommit> = (0..CALLERS)
        .map(|n| {
            let status = targets[n % targets.len()];
            StepCommit {
                expect_status: Some(RunStatus::Queued),
                events: vec![event(&run_id, EventKind::RunStarted, n as u32)],
                status: Some(StatusChange {
                    status,
                    report: status.outcome().map(report),
                    at_ms: BASE_MS + ms(n as u64),
                }),
                ..StepCommit::default()
            }
        })
        .collect();
    let futures = commits
        .into_iter()
        .map(|commit| {
            let run_id = &run_id;
            Box::pin(async move { store.commit_step(run_id, commit).await })
                as Pin<Box<dyn Future<Output = Result<_, StoreError>> + Send + '_>>
        })
        .collect();
    let outcomes = join_all(futures).await;
    let winners: Vec<usize> = outcomes
        .iter()
        .enumerate()
        .filter(|(_, outcome)| outcome.is_ok())
        .map(|(n, _)| n)
        .collect();
    assert_eq!(winners.len(), 1, "exactly one change wins: {outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|outcome| outcome.is_ok() || is_status_conflict(outcome, &run_id)),
        "the others lose with StatusChanged: {outcomes:?}"
    );
    let winner = winners[0];
    let read = store.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(read.status, targets[winner % targets.len()]);
    assert_eq!(read.updated_at_ms, BASE_MS + ms(winner as u64));
    let events = store.events(&run_id, 0).await.unwrap();
    assert_eq!(events.len(), 1, "only the winner's event is stored");
    assert_eq!(events[0].step, winner as u32);
}

/// Whether `result` is the `Conflict` of a lost claim on `run_id`.
fn is_claim_conflict<T>(result: &Result<T, StoreError>, run_id: &RunId) -> bool {
    matches!(
        result,
        Err(StoreError::ClaimLost { run_id: id }) if id == run_id.as_str()
    )
}

/// A commit with `expect_claim` applies while its lease exists with its
/// owner (even past its expiry); when the lease is missing or held by
/// another owner it fails with `ClaimLost` and stores
/// nothing: no intents, ledger records or marks, checkpoint, events or
/// status.
pub async fn expect_claim_applies_only_while_the_claim_holds(store: &dyn Store) {
    let run_id = created(store, "claim").await;
    let lease_id = unique("claim-lease");
    // Already expired: a lapsed lease that nobody took over still fences.
    let mut claim = temp_lease(&run_id, &lease_id, BASE_MS + ms(1));
    claim.owner = "pid:1@claim-host".to_owned();
    store.acquire_lease(claim.clone()).await.unwrap();
    let fence = ClaimFence {
        lease_id: lease_id.clone(),
        owner: claim.owner.clone(),
    };

    // The fence matches: applied.
    let start = StepCommit {
        expect_claim: Some(fence.clone()),
        declares: vec![declaration(
            &run_id,
            "intent-claim",
            "send_email",
            ToolClass::Irreversible,
        )],
        events: vec![event(&run_id, EventKind::RunStarted, 0)],
        status: Some(StatusChange {
            status: RunStatus::Running,
            report: None,
            at_ms: BASE_MS + ms(1),
        }),
        ..StepCommit::default()
    };
    let committed = store.commit_step(&run_id, start).await.unwrap();
    assert_eq!(
        committed.run.map(|run| run.status),
        Some(RunStatus::Running),
        "a holding claim applies the commit"
    );
    assert_eq!(committed.events.len(), 1);
    assert_eq!(committed.declared.len(), 1);
    let ledger_before = store.ledger(&run_id).await.unwrap();

    let check = StepCommit {
        expect_claim: Some(fence.clone()),
        ..StepCommit::default()
    };
    assert!(check.is_empty(), "a claim alone writes nothing");
    store.commit_step(&run_id, check).await.unwrap();

    // Every part of a refused commit.
    let refused_commit = |step: u32| StepCommit {
        intents: vec![(step, intent("intent-claim-late", 0, "send_email"))],
        marks: vec![(
            IntentId::new("intent-claim").unwrap(),
            mark(LedgerStatus::Succeeded, 1, BASE_MS + ms(10)),
        )],
        checkpoint: Some(checkpoint(&run_id, step, "lost the claim")),
        checkpoint_delta: Some(delta(&run_id, step + 1, "lost the claim")),
        events: vec![event(&run_id, EventKind::RunFinished, step)],
        status: Some(StatusChange {
            status: RunStatus::Finished(Outcome::Failed),
            report: Some(report(Outcome::Failed)),
            at_ms: BASE_MS + ms(10),
        }),
        ..StepCommit::default()
    };
    let assert_nothing_stored = |what: &'static str| {
        let run_id = run_id.clone();
        let ledger_before = ledger_before.clone();
        async move {
            let read = store.get_run(&run_id).await.unwrap().unwrap();
            assert_eq!(read.status, RunStatus::Running, "{what}: no status stored");
            assert_eq!(read.updated_at_ms, BASE_MS + ms(1), "{what}");
            assert_eq!(read.report, None, "{what}");
            assert_eq!(
                store.events(&run_id, 0).await.unwrap().len(),
                1,
                "{what}: no events stored"
            );
            assert!(
                store.intents(&run_id).await.unwrap().is_empty(),
                "{what}: no intents stored"
            );
            assert_eq!(
                store.ledger(&run_id).await.unwrap(),
                ledger_before,
                "{what}: no ledger marks stored"
            );
            assert_eq!(
                store.latest_checkpoint(&run_id).await.unwrap(),
                None,
                "{what}: no checkpoint stored"
            );
        }
    };

    // Held by another owner: another process took the run over.
    let other = ClaimFence {
        lease_id: lease_id.clone(),
        owner: "pid:2@other-host".to_owned(),
    };
    let refused = store
        .commit_step(
            &run_id,
            StepCommit {
                expect_claim: Some(other),
                ..refused_commit(1)
            },
        )
        .await;
    assert!(
        is_claim_conflict(&refused, &run_id),
        "a lease of another owner must be ClaimLost, found {refused:?}"
    );
    assert_nothing_stored("another owner").await;

    // Missing: the lease was released (or never existed).
    assert!(store.release_lease(&lease_id).await.unwrap().is_some());
    let refused = store
        .commit_step(
            &run_id,
            StepCommit {
                expect_claim: Some(fence),
                ..refused_commit(2)
            },
        )
        .await;
    assert!(
        is_claim_conflict(&refused, &run_id),
        "a missing lease must be ClaimLost, found {refused:?}"
    );
    assert_nothing_stored("missing lease").await;
}

/// Creates `runs` concurrently (one batch for backends that group writes).
async fn create_all(store: &dyn Store, runs: Vec<NewRun>) {
    let futures = runs
        .into_iter()
        .map(|run| {
            Box::pin(async move { store.create_run(run).await.map(drop) })
                as Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>>
        })
        .collect();
    for created in join_all(futures).await {
        created.unwrap();
    }
}

/// Sets each run's status concurrently.
async fn set_all(store: &dyn Store, runs: &[RunId], status: RunStatus, at_ms: Timestamp) {
    let futures = runs
        .iter()
        .map(|run_id| {
            Box::pin(async move {
                store
                    .set_run_status(run_id, status, status.outcome().map(report), at_ms)
                    .await
                    .map(drop)
            }) as Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>>
        })
        .collect();
    for set in join_all(futures).await {
        set.unwrap();
    }
}

fn oldest_first(runs: &mut [NewRun]) {
    runs.sort_by(|a, b| {
        (a.created_at_ms, a.run_id.as_str()).cmp(&(b.created_at_ms, b.run_id.as_str()))
    });
}

fn ids(runs: &[crate::RunRecord]) -> Vec<&str> {
    runs.iter().map(|run| run.run_id.as_str()).collect()
}

/// Early creation times, before any run a real store holds, so the runs of
/// [`runs_with_status_oldest_first_across_many`] lead the queue.
const EARLY_MS: Timestamp = Timestamp::from_millis(1_000_000);

/// `runs_with_status` gives the oldest runs first (`created_at_ms`, ties by
/// run id) up to its limit, across more runs than one page of 200.
pub async fn runs_with_status_oldest_first_across_many(store: &dyn Store) {
    const RUNS: u64 = 300;
    const LIMIT: usize = 250;
    // Created out of order (7 is coprime with 300), in pairs of equal
    // times, and in reverse of their ids, so that neither the insertion
    // order nor the creation time alone gives the expected order.
    let mut runs: Vec<NewRun> = (0..RUNS)
        .map(|n| new_run("oldest", EARLY_MS + ms((n * 7 % RUNS) / 2)))
        .collect();
    create_all(store, runs.iter().rev().cloned().collect()).await;
    oldest_first(&mut runs);
    let expected: Vec<&str> = runs[..LIMIT]
        .iter()
        .map(|run| run.run_id.as_str())
        .collect();

    let queued = store
        .runs_with_status(RunStatus::Queued, LIMIT)
        .await
        .unwrap();
    assert_eq!(queued.len(), LIMIT, "the limit is honoured");
    assert_eq!(
        ids(&queued),
        expected,
        "the {LIMIT} oldest queued runs, oldest (created_at_ms, then run id) first"
    );
    let first = store.get_run(&runs[0].run_id).await.unwrap().unwrap();
    assert_eq!(queued[0], first, "records read back whole");
    assert_eq!(
        ids(&store.runs_with_status(RunStatus::Queued, 3).await.unwrap()),
        expected[..3],
        "a smaller limit is a prefix"
    );
    assert!(
        store
            .runs_with_status(RunStatus::Queued, 0)
            .await
            .unwrap()
            .is_empty(),
        "limit 0 lists nothing"
    );

    // Out of the queue: a later suite on the same store starts clean.
    let all: Vec<RunId> = runs.into_iter().map(|run| run.run_id).collect();
    set_all(
        store,
        &all,
        RunStatus::Finished(Outcome::Cancelled),
        BASE_MS,
    )
    .await;
    let queued = store
        .runs_with_status(RunStatus::Queued, LIMIT)
        .await
        .unwrap();
    assert!(
        queued.iter().all(|run| !all.contains(&run.run_id)),
        "a run leaves the status's list when its status changes"
    );
}

/// `runs_with_status` lists only runs of that exact status: a finished
/// status matches its outcome, not every finished run.
pub async fn runs_with_status_filters_by_status(store: &dyn Store) {
    let base = scaled(3);
    let statuses = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Finished(Outcome::Succeeded),
        RunStatus::Finished(Outcome::Failed),
        RunStatus::Finished(Outcome::PartialSuccess),
        RunStatus::Finished(Outcome::Succeeded),
    ];
    // Created newest first, so the order below comes from the query.
    let runs: Vec<NewRun> = (0..statuses.len() as u64)
        .rev()
        .map(|n| new_run("by-status", base + ms(n)))
        .collect();
    for run in &runs {
        store.create_run(run.clone()).await.unwrap();
    }
    let by_time = |n: usize| &runs[runs.len() - 1 - n].run_id;
    for (n, status) in statuses.iter().enumerate() {
        if *status != RunStatus::Queued {
            let report = status.outcome().map(report);
            store
                .set_run_status(by_time(n), *status, report, base + ms(10))
                .await
                .unwrap();
        }
    }
    for status in [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Finished(Outcome::Succeeded),
        RunStatus::Finished(Outcome::Failed),
        RunStatus::Finished(Outcome::PartialSuccess),
        RunStatus::Finished(Outcome::Cancelled),
    ] {
        let listed = store.runs_with_status(status, 100_000).await.unwrap();
        assert!(
            listed.iter().all(|run| run.status == status),
            "runs_with_status({status}) lists only {status} runs"
        );
        assert!(
            listed.windows(2).all(|pair| {
                (pair[0].created_at_ms, pair[0].run_id.as_str())
                    <= (pair[1].created_at_ms, pair[1].run_id.as_str())
            }),
            "runs_with_status({status}) is oldest first"
        );
        let ours: Vec<&RunId> = listed
            .iter()
            .map(|run| &run.run_id)
            .filter(|id| runs.iter().any(|run| &run.run_id == *id))
            .collect();
        let expected: Vec<&RunId> = statuses
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == status)
            .map(|(n, _)| by_time(n))
            .collect();
        assert_eq!(ours, expected, "runs_with_status({status}) of this check");
    }
}

// ----- paging and counting runs by status --------------------------------

/// `runs_with_status_after` pages through every run of a status in the
/// order of `runs_with_status` — each run exactly once, ties on the
/// creation time broken by run id — and `count_runs_with_status` counts
/// them.
pub async fn runs_with_status_after_pages_through_every_run_once(store: &dyn Store) {
    const RUNS: u64 = 11;
    const PAGE: usize = 3;
    let before = store
        .count_runs_with_status(RunStatus::Running)
        .await
        .unwrap();
    // In pairs of equal times, created in reverse, so that neither the
    // insertion order nor the time alone gives the order.
    let mut runs: Vec<NewRun> = (0..RUNS)
        .map(|n| new_run("paged", scaled(5) + ms(n / 2)))
        .collect();
    create_all(store, runs.iter().rev().cloned().collect()).await;
    oldest_first(&mut runs);
    let ours: Vec<RunId> = runs.iter().map(|run| run.run_id.clone()).collect();
    set_all(store, &ours, RunStatus::Running, scaled(5) + ms(100)).await;
    assert_eq!(
        store
            .count_runs_with_status(RunStatus::Running)
            .await
            .unwrap(),
        before + RUNS,
        "count_runs_with_status counts every run of the status"
    );

    let mut seen: Vec<RunId> = Vec::new();
    let mut cursor: Option<crate::RunCursor> = None;
    loop {
        let page = store
            .runs_with_status_after(RunStatus::Running, cursor.as_ref(), PAGE)
            .await
            .unwrap();
        assert!(page.len() <= PAGE, "the limit is honoured");
        assert!(
            page.iter().all(|run| run.status == RunStatus::Running),
            "only runs of the status"
        );
        if let (Some(cursor), Some(first)) = (&cursor, page.first()) {
            assert!(cursor.precedes(first), "a page starts after its cursor");
        }
        let Some(last) = page.last() else {
            break;
        };
        cursor = Some(crate::RunCursor::after(last));
        seen.extend(page.into_iter().map(|run| run.run_id));
    }
    let ours_seen: Vec<&RunId> = seen.iter().filter(|id| ours.contains(id)).collect();
    assert_eq!(
        ours_seen,
        ours.iter().collect::<Vec<_>>(),
        "every run exactly once, oldest (created_at_ms, then run id) first"
    );
    let all = store
        .runs_with_status(RunStatus::Running, 100_000)
        .await
        .unwrap();
    assert_eq!(
        seen,
        all.into_iter().map(|run| run.run_id).collect::<Vec<_>>(),
        "the pages together are runs_with_status"
    );
    let from_start = store
        .runs_with_status_after(RunStatus::Running, None, PAGE)
        .await
        .unwrap();
    assert_eq!(
        from_start,
        store
            .runs_with_status(RunStatus::Running, PAGE)
            .await
            .unwrap(),
        "no cursor starts at the beginning"
    );

    // Out of the status again: a later check on the same store starts
    // clean.
    set_all(
        store,
        &ours,
        RunStatus::Finished(Outcome::Cancelled),
        scaled(5) + ms(200),
    )
    .await;
    assert_eq!(
        store
            .count_runs_with_status(RunStatus::Running)
            .await
            .unwrap(),
        before
    );
}

/// `children_of` lists a parent's direct children, of any status, oldest
/// first; a childless or unknown parent has none.
pub async fn children_of_lists_children_oldest_first(store: &dyn Store) {
    let base = scaled(3);
    let parent = store
        .create_run(new_run("parent", base))
        .await
        .unwrap()
        .run_id;
    let mut children = Vec::new();
    for offset in [30, 10, 20, 20] {
        let mut child = new_run("child", base + ms(offset));
        child.parent_run_id = Some(parent.clone());
        children.push(store.create_run(child).await.unwrap());
    }
    let mut grandchild = new_run("grandchild", base + ms(5));
    grandchild.parent_run_id = Some(children[0].run_id.clone());
    let grandchild = store.create_run(grandchild).await.unwrap();
    let mut other = new_run("other-child", base + ms(1));
    other.parent_run_id = Some(RunId::new(unique("other-parent")).unwrap());
    store.create_run(other).await.unwrap();
    // A child's status does not matter.
    let finished = store
        .set_run_status(
            &children[2].run_id,
            RunStatus::Finished(Outcome::Succeeded),
            None,
            base + ms(40),
        )
        .await
        .unwrap();
    children[2] = finished;

    let mut expected = children.clone();
    expected.sort_by(|a, b| {
        (a.created_at_ms, a.run_id.as_str()).cmp(&(b.created_at_ms, b.run_id.as_str()))
    });
    assert_eq!(
        store.children_of(&parent).await.unwrap(),
        expected,
        "direct children only, whole, oldest (created_at_ms, then run id) first"
    );
    assert_eq!(
        store.children_of(&children[0].run_id).await.unwrap(),
        vec![grandchild.clone()],
        "a child's own children"
    );
    assert!(
        store
            .children_of(&grandchild.run_id)
            .await
            .unwrap()
            .is_empty(),
        "a childless run has none"
    );
    let unknown = RunId::new(unique("no-such-parent")).unwrap();
    assert!(
        store.children_of(&unknown).await.unwrap().is_empty(),
        "an unknown parent has no children (not NotFound)"
    );
}

/// The default singleton lease of seed 004: 60 s.
const SINGLETON_TTL: Duration = Duration::from_secs(60);

fn singleton_lease(
    name: &str,
    owner: &str,
    acquired_at_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> SingletonLease {
    SingletonLease {
        name: name.to_owned(),
        owner: owner.to_owned(),
        acquired_at_ms,
        expires_at_ms,
    }
}

/// The first claim of a free singleton wins and is stored; while it is
/// live, another owner's claim is refused (`None`) and changes nothing.
pub async fn singleton_first_claim_wins_and_others_are_refused_while_live(store: &dyn Store) {
    let name = unique("singleton-first");
    assert_eq!(store.singleton(&name).await.unwrap(), None, "never claimed");
    let expires = BASE_MS + SINGLETON_TTL;
    let won = store
        .claim_singleton(&name, "pid:1@host-a", BASE_MS, expires)
        .await
        .unwrap();
    let expected = singleton_lease(&name, "pid:1@host-a", BASE_MS, expires);
    assert_eq!(won, Some(expected.clone()), "the first claim wins");
    assert_eq!(
        store.singleton(&name).await.unwrap(),
        Some(expected.clone())
    );
    for now in [BASE_MS, BASE_MS + ms(1), expires - ms(1)] {
        assert_eq!(
            store
                .claim_singleton(&name, "pid:2@host-b", now, now + SINGLETON_TTL)
                .await
                .unwrap(),
            None,
            "another owner is refused at {now} while the lease is live"
        );
    }
    assert_eq!(
        store.singleton(&name).await.unwrap(),
        Some(expected),
        "a refused claim changes nothing"
    );
    assert!(
        store
            .release_singleton(&name, "pid:1@host-a")
            .await
            .unwrap()
    );
}

/// The holder's claim of its live lease is a renewal: the expiry moves
/// (later or earlier), the acquisition time stays.
pub async fn singleton_holder_renews_keeping_its_acquisition(store: &dyn Store) {
    let name = unique("singleton-renew");
    let owner = "pid:1@host-a";
    store
        .claim_singleton(&name, owner, BASE_MS, BASE_MS + SINGLETON_TTL)
        .await
        .unwrap()
        .expect("a free singleton is claimed");
    // Renewed every third of the lease, as `rein serve` does.
    let mut now = BASE_MS;
    for _ in 0..3 {
        now += SINGLETON_TTL / 3;
        let renewed = store
            .claim_singleton(&name, owner, now, now + SINGLETON_TTL)
            .await
            .unwrap();
        let expected = singleton_lease(&name, owner, BASE_MS, now + SINGLETON_TTL);
        assert_eq!(
            renewed,
            Some(expected.clone()),
            "a renewal moves the expiry and keeps acquired_at"
        );
        assert_eq!(store.singleton(&name).await.unwrap(), Some(expected));
    }
    let shorter = store
        .claim_singleton(&name, owner, now, now + ms(1))
        .await
        .unwrap();
    assert_eq!(
        shorter,
        Some(singleton_lease(&name, owner, BASE_MS, now + ms(1))),
        "a renewal may also shorten the lease"
    );
    assert!(store.release_singleton(&name, owner).await.unwrap());
}

/// At its expiry (inclusive) a lease is free: another owner takes it as a
/// new tenure, and the old holder is refused until it wins it again. An
/// expired lease won back by its old holder is a new tenure too.
pub async fn singleton_expired_lease_is_taken_by_another_owner(store: &dyn Store) {
    let name = unique("singleton-expire");
    let expires = BASE_MS + SINGLETON_TTL;
    store
        .claim_singleton(&name, "pid:1@host-a", BASE_MS, expires)
        .await
        .unwrap()
        .expect("a free singleton is claimed");
    let held = store.singleton(&name).await.unwrap().unwrap();
    assert!(held.is_expired(expires) && !held.is_expired(expires - ms(1)));
    let taken = store
        .claim_singleton(&name, "pid:2@host-b", expires, expires + SINGLETON_TTL)
        .await
        .unwrap();
    let expected = singleton_lease(&name, "pid:2@host-b", expires, expires + SINGLETON_TTL);
    assert_eq!(
        taken,
        Some(expected.clone()),
        "an expired lease is taken, acquired now"
    );
    assert_eq!(store.singleton(&name).await.unwrap(), Some(expected));
    assert_eq!(
        store
            .claim_singleton(
                &name,
                "pid:1@host-a",
                expires + ms(1),
                expires + ms(1) + SINGLETON_TTL
            )
            .await
            .unwrap(),
        None,
        "the old holder cannot renew a lease it lost"
    );
    // The new holder fails to renew; its lease lapses and the old holder
    // wins it back as a new tenure.
    let later = expires + SINGLETON_TTL;
    let back = store
        .claim_singleton(&name, "pid:1@host-a", later, later + SINGLETON_TTL)
        .await
        .unwrap();
    assert_eq!(
        back,
        Some(singleton_lease(
            &name,
            "pid:1@host-a",
            later,
            later + SINGLETON_TTL
        ))
    );
    // Its own lease, expired and claimed again: acquired anew.
    let last = later + SINGLETON_TTL;
    assert_eq!(
        store
            .claim_singleton(&name, "pid:1@host-a", last, last + SINGLETON_TTL)
            .await
            .unwrap(),
        Some(singleton_lease(
            &name,
            "pid:1@host-a",
            last,
            last + SINGLETON_TTL
        )),
        "an expired lease of one's own is a new tenure, not a renewal"
    );
    assert!(
        store
            .release_singleton(&name, "pid:1@host-a")
            .await
            .unwrap()
    );
}

/// Only the holder releases a lease (live or expired); a released lease is
/// gone and free for anyone at once.
pub async fn singleton_release_only_by_its_holder(store: &dyn Store) {
    let name = unique("singleton-release");
    assert!(
        !store
            .release_singleton(&name, "pid:1@host-a")
            .await
            .unwrap(),
        "nothing to release"
    );
    let expires = BASE_MS + SINGLETON_TTL;
    store
        .claim_singleton(&name, "pid:1@host-a", BASE_MS, expires)
        .await
        .unwrap()
        .expect("a free singleton is claimed");
    assert!(
        !store
            .release_singleton(&name, "pid:2@host-b")
            .await
            .unwrap(),
        "another owner cannot release it"
    );
    assert_eq!(
        store
            .singleton(&name)
            .await
            .unwrap()
            .map(|lease| lease.owner),
        Some("pid:1@host-a".to_owned())
    );
    assert!(
        store
            .release_singleton(&name, "pid:1@host-a")
            .await
            .unwrap()
    );
    assert_eq!(store.singleton(&name).await.unwrap(), None, "released");
    assert!(
        !store
            .release_singleton(&name, "pid:1@host-a")
            .await
            .unwrap(),
        "releasing twice is a no-op"
    );
    assert_eq!(
        store
            .claim_singleton(&name, "pid:2@host-b", BASE_MS + ms(1), expires)
            .await
            .unwrap(),
        Some(singleton_lease(
            &name,
            "pid:2@host-b",
            BASE_MS + ms(1),
            expires
        )),
        "a released lease is free before its old expiry"
    );
    // The holder of an expired lease may still release it.
    assert!(
        store
            .release_singleton(&name, "pid:2@host-b")
            .await
            .unwrap()
    );
    store
        .claim_singleton(&name, "pid:3@host-c", BASE_MS, BASE_MS + ms(1))
        .await
        .unwrap()
        .expect("a free singleton is claimed");
    assert!(
        store
            .release_singleton(&name, "pid:3@host-c")
            .await
            .unwrap()
    );

    // Singletons are independent of one another.
    let other = unique("singleton-release-other");
    store
        .claim_singleton(&name, "pid:1@host-a", BASE_MS, expires)
        .await
        .unwrap()
        .expect("a free singleton is claimed");
    assert!(
        store
            .claim_singleton(&other, "pid:2@host-b", BASE_MS, expires)
            .await
            .unwrap()
            .is_some(),
        "another name is another lease"
    );
    assert!(
        !store
            .release_singleton(&other, "pid:1@host-a")
            .await
            .unwrap()
    );
    assert!(
        store
            .release_singleton(&name, "pid:1@host-a")
            .await
            .unwrap()
    );
    assert!(
        store
            .release_singleton(&other, "pid:2@host-b")
            .await
            .unwrap()
    );
}

/// Malformed names and owners and expiries not after `now` are
/// `Invalid`, and store nothing.
pub async fn singleton_claim_refusals(store: &dyn Store) {
    let name = unique("singleton-invalid");
    let too_long = "n".repeat(MAX_SINGLETON_LEN + 1);
    for bad in ["", "line\nbreak", "nul\0", too_long.as_str()] {
        assert!(
            matches!(
                store
                    .claim_singleton(bad, "pid:1@host-a", BASE_MS, BASE_MS + ms(1))
                    .await,
                Err(StoreError::Invalid {
                    what: "singleton name",
                    ..
                })
            ),
            "name {bad:?}"
        );
        assert!(
            matches!(
                store
                    .claim_singleton(&name, bad, BASE_MS, BASE_MS + ms(1))
                    .await,
                Err(StoreError::Invalid {
                    what: "singleton owner",
                    ..
                })
            ),
            "owner {bad:?}"
        );
        assert!(
            matches!(
                store.release_singleton(&name, bad).await,
                Err(StoreError::Invalid { .. })
            ),
            "release by {bad:?}"
        );
        assert!(
            matches!(store.singleton(bad).await, Err(StoreError::Invalid { .. })),
            "read of {bad:?}"
        );
    }
    for expires in [BASE_MS - ms(1), BASE_MS] {
        assert!(
            matches!(
                store
                    .claim_singleton(&name, "pid:1@host-a", BASE_MS, expires)
                    .await,
                Err(StoreError::Invalid {
                    what: "singleton expires_at_ms",
                    ..
                })
            ),
            "expiry {expires}"
        );
    }
    assert_eq!(
        store.singleton(&name).await.unwrap(),
        None,
        "nothing stored"
    );
    // The longest name and owner are accepted.
    let longest = format!("{name}-{}", "n".repeat(MAX_SINGLETON_LEN - name.len() - 1));
    let owner = "o".repeat(MAX_SINGLETON_LEN);
    assert_eq!(longest.len(), MAX_SINGLETON_LEN);
    assert_eq!(
        store
            .claim_singleton(&longest, &owner, BASE_MS, BASE_MS + ms(1))
            .await
            .unwrap(),
        Some(singleton_lease(&longest, &owner, BASE_MS, BASE_MS + ms(1)))
    );
    assert!(store.release_singleton(&longest, &owner).await.unwrap());
}

/// Of many concurrent claims of one free singleton by different owners,
/// exactly one wins, and it is the one stored.
pub async fn singleton_concurrent_claims_elect_exactly_one(store: &dyn Store) {
    const CLAIMANTS: usize = 16;
    let name = unique("singleton-race");
    let owners: Vec<String> = (0..CLAIMANTS).map(|n| format!("pid:{n}@host")).collect();
    let futures = owners
        .iter()
        .map(|owner| {
            let name = &name;
            Box::pin(async move {
                store
                    .claim_singleton(name, owner, BASE_MS, BASE_MS + SINGLETON_TTL)
                    .await
                    .unwrap()
            }) as Pin<Box<dyn Future<Output = Option<SingletonLease>> + Send + '_>>
        })
        .collect();
    let outcomes = join_all(futures).await;
    let winners: Vec<&SingletonLease> = outcomes.iter().flatten().collect();
    assert_eq!(winners.len(), 1, "exactly one claim wins: {outcomes:?}");
    assert_eq!(
        store.singleton(&name).await.unwrap().as_ref(),
        Some(winners[0]),
        "the winner is the holder"
    );
    assert!(
        store
            .release_singleton(&name, &winners[0].owner)
            .await
            .unwrap()
    );
}

/// An opening of `arm` by `by` until `BASE_MS + ms(until)`.
fn opening(arm: &str, by: &str, until: u64) -> BreakerOpening {
    BreakerOpening {
        arm: arm.to_owned(),
        open_until_ms: BASE_MS + ms(until),
        opened_by: by.to_owned(),
        reason: format!("5 consecutive failures seen by {by}"),
        updated_at_ms: BASE_MS,
    }
}

/// The opening of `arm` the store lists at ``BASE_MS + at` ms`, if any (other
/// checks' arms are ignored: the store may be shared).
async fn listed(store: &dyn Store, arm: &str, at: u64) -> Option<BreakerOpening> {
    store
        .breaker_openings(BASE_MS + ms(at))
        .await
        .unwrap()
        .into_iter()
        .find(|o| o.arm == arm)
}

/// A published opening is returned as stored and listed while in force;
/// from its `open_until_ms` on it is no longer listed.
pub async fn breaker_opening_is_listed_until_it_ends(store: &dyn Store) {
    let arm = unique("provider.ends");
    let published = opening(&arm, "pid:1@a", 30_000);
    assert_eq!(
        store.publish_breaker_open(published.clone()).await.unwrap(),
        published
    );
    assert_eq!(listed(store, &arm, 0).await, Some(published.clone()));
    assert_eq!(listed(store, &arm, 29_999).await, Some(published));
    assert_eq!(
        listed(store, &arm, 30_000).await,
        None,
        "an opening ends at its until (exclusive)"
    );
    let all = store.breaker_openings(BASE_MS).await.unwrap();
    assert!(
        all.windows(2).all(|w| w[0].arm <= w[1].arm),
        "openings are listed by arm"
    );
    assert!(store.clear_breaker_open(&arm, "pid:1@a").await.unwrap());
}

/// Of two openings of one arm the one that stays open longer is kept
/// whole, whichever came first.
pub async fn breaker_publish_keeps_the_later_until(store: &dyn Store) {
    let arm = unique("provider.later");
    let first = opening(&arm, "pid:1@a", 30_000);
    store.publish_breaker_open(first.clone()).await.unwrap();
    let shorter = opening(&arm, "pid:2@b", 10_000);
    assert_eq!(
        store.publish_breaker_open(shorter).await.unwrap(),
        first,
        "a shorter opening does not replace a longer one"
    );
    assert_eq!(listed(store, &arm, 0).await, Some(first));
    let longer = opening(&arm, "pid:2@b", 60_000);
    assert_eq!(
        store.publish_breaker_open(longer.clone()).await.unwrap(),
        longer
    );
    assert_eq!(
        listed(store, &arm, 45_000).await,
        Some(longer),
        "the longer opening replaces node, reason and until"
    );
    // An ended opening is replaced by any new one.
    let reopened = opening(&arm, "pid:1@a", 90_000);
    store.publish_breaker_open(reopened.clone()).await.unwrap();
    assert_eq!(listed(store, &arm, 60_000).await, Some(reopened));
    assert!(store.clear_breaker_open(&arm, "pid:1@a").await.unwrap());
}

/// Only the node that published an opening clears it; clearing twice, or
/// an arm never opened, clears nothing.
pub async fn breaker_clear_only_by_its_publisher(store: &dyn Store) {
    let arm = unique("provider.clear");
    assert!(!store.clear_breaker_open(&arm, "pid:1@a").await.unwrap());
    let published = opening(&arm, "pid:1@a", 30_000);
    store.publish_breaker_open(published.clone()).await.unwrap();
    assert!(
        !store.clear_breaker_open(&arm, "pid:2@b").await.unwrap(),
        "another node's recovery does not clear this node's opening"
    );
    assert_eq!(listed(store, &arm, 0).await, Some(published));
    assert!(store.clear_breaker_open(&arm, "pid:1@a").await.unwrap());
    assert_eq!(listed(store, &arm, 0).await, None);
    assert!(!store.clear_breaker_open(&arm, "pid:1@a").await.unwrap());
}

/// Malformed arms and nodes are refused as [`StoreError::Invalid`]; an
/// overlong reason is cut, not refused.
pub async fn breaker_opening_refusals(store: &dyn Store) {
    let too_long = "n".repeat(crate::MAX_BREAKER_ARM_LEN + 1);
    for bad in ["", "a\nb", too_long.as_str()] {
        let refused = store.publish_breaker_open(opening(bad, "pid:1@a", 1)).await;
        assert!(
            matches!(
                refused,
                Err(StoreError::Invalid {
                    what: "breaker arm",
                    ..
                })
            ),
            "{bad:?}: {refused:?}"
        );
        let refused = store
            .publish_breaker_open(opening("provider.x", bad, 1))
            .await;
        assert!(
            matches!(
                refused,
                Err(StoreError::Invalid {
                    what: "breaker opened_by",
                    ..
                })
            ),
            "{bad:?}: {refused:?}"
        );
        assert!(matches!(
            store.clear_breaker_open(bad, "pid:1@a").await,
            Err(StoreError::Invalid { .. })
        ));
    }
    let arm = unique("provider.reason");
    let mut long = opening(&arm, "pid:1@a", 30_000);
    long.reason = "x".repeat(crate::MAX_BREAKER_REASON_LEN * 2);
    let stored = store.publish_breaker_open(long).await.unwrap();
    assert_eq!(stored.reason.len(), crate::MAX_BREAKER_REASON_LEN);
    assert_eq!(listed(store, &arm, 0).await, Some(stored));
    assert!(store.clear_breaker_open(&arm, "pid:1@a").await.unwrap());
}

/// Of many concurrent publishes of one arm by different nodes, the one
/// that stays open longest is stored, whatever the order they ran in.
pub async fn breaker_concurrent_publishes_keep_the_latest_until(store: &dyn Store) {
    const NODES: u64 = 16;
    let arm = unique("provider.race");
    let openings: Vec<BreakerOpening> = (0..NODES)
        .map(|n| {
            opening(
                &arm,
                &format!("pid:{n}@host"),
                10_000 + (n * 7 % NODES) * 1_000,
            )
        })
        .collect();
    let futures = openings
        .iter()
        .map(|o| {
            Box::pin(async move { store.publish_breaker_open(o.clone()).await.unwrap() })
                as Pin<Box<dyn Future<Output = BreakerOpening> + Send + '_>>
        })
        .collect();
    join_all(futures).await;
    let longest = openings
        .iter()
        .max_by_key(|o| o.open_until_ms)
        .unwrap()
        .clone();
    assert_eq!(listed(store, &arm, 0).await, Some(longest.clone()));
    assert!(
        store
            .clear_breaker_open(&arm, &longest.opened_by)
            .await
            .unwrap()
    );
}

fn reservation(tenant: &TenantId, key: &str, seed: u8, holder: Option<Holder>) -> NewReservation {
    NewReservation {
        tenant: tenant.clone(),
        key: key.to_owned(),
        fingerprint: fingerprint(seed),
        holder,
        now_ms: BASE_MS,
        expires_at_ms: BASE_MS + ms(60_000),
    }
}

fn holder(owner: &str, run: Option<&RunId>) -> Holder {
    Holder {
        owner: owner.to_owned(),
        run_id: run.cloned(),
        until_ms: BASE_MS + ms(3_000),
    }
}

/// A reservation records its holder (owner and run) in the same write,
/// returns it to a retry that finds it in progress, and refuses an empty
/// owner; the owner-less reservation records none.
pub async fn idempotency_holder_is_recorded_with_the_reservation(store: &dyn Store) {
    let tenant = TenantId::new("acme").unwrap();
    let key = unique("held");
    let run = RunId::new(unique("held-run")).unwrap();
    let held = holder("pid:1@host#a", Some(&run));
    assert_eq!(
        store
            .reserve_idempotency_as(reservation(&tenant, &key, 20, Some(held.clone())))
            .await
            .unwrap(),
        Reservation::Reserved
    );
    let Reservation::InProgress(record) = store
        .reserve_idempotency_as(reservation(
            &tenant,
            &key,
            20,
            Some(holder("pid:2@host#b", None)),
        ))
        .await
        .unwrap()
    else {
        panic!("a retry while in progress finds the record");
    };
    assert_eq!(
        record.owner.as_deref(),
        Some("pid:1@host#a"),
        "the first holder stays"
    );
    assert_eq!(record.run_id, Some(run));
    assert!(matches!(
        store
            .reserve_idempotency_as(reservation(
                &tenant,
                &unique("held"),
                20,
                Some(holder("", None))
            ))
            .await,
        Err(StoreError::Invalid { .. })
    ));
    let bare = unique("bare");
    store
        .reserve_idempotency(&tenant, &bare, &fingerprint(20), BASE_MS, BASE_MS + ms(10))
        .await
        .unwrap();
    let listed = store
        .idempotency_records(Some(&tenant), None, usize::MAX)
        .await
        .unwrap();
    let bare_record = listed.iter().find(|r| r.key == bare).unwrap();
    assert_eq!(
        (bare_record.owner.as_ref(), bare_record.run_id.as_ref()),
        (None, None)
    );
    for k in [&key, &bare] {
        assert!(store.clear_idempotency(&tenant, k).await.unwrap());
    }
}

/// A queued submission reserves, enqueues and completes in one write: the
/// run exists `queued` and the record is completed with its id; a retry
/// replays it and creates nothing; another body is a mismatch; a taken run
/// id writes nothing at all.
pub async fn idempotency_queued_submission_is_one_write(store: &dyn Store) {
    let tenant = TenantId::new("acme").unwrap();
    let key = unique("queued");
    let run = new_run("queued-submission", BASE_MS);
    let run_id = run.run_id.clone();
    let accepted = response(202, "accepted");
    assert_eq!(
        store
            .submit_queued(
                reservation(&tenant, &key, 21, Some(holder("pid:1@host#q", None))),
                run.clone(),
                accepted.clone(),
            )
            .await
            .unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        store.get_run(&run_id).await.unwrap().map(|r| r.status),
        Some(RunStatus::Queued)
    );
    let Reservation::Replay(record) = store
        .submit_queued(
            reservation(&tenant, &key, 21, None),
            new_run("queued-again", BASE_MS),
            response(202, "second"),
        )
        .await
        .unwrap()
    else {
        panic!("the same submission again replays");
    };
    assert_eq!(record.response, Some(accepted));
    assert_eq!(
        record.run_id,
        Some(run_id.clone()),
        "the record names its run"
    );
    assert!(matches!(
        store
            .submit_queued(
                reservation(&tenant, &key, 22, None),
                new_run("other-body", BASE_MS),
                response(202, "x")
            )
            .await
            .unwrap(),
        Reservation::Mismatch(_)
    ));
    // A run id that is taken: neither the key nor a run is written.
    let fresh = unique("queued");
    assert!(matches!(
        store
            .submit_queued(
                reservation(&tenant, &fresh, 21, None),
                run,
                response(202, "dup")
            )
            .await,
        Err(StoreError::Conflict { what: "run", .. })
    ));
    assert!(
        !store.clear_idempotency(&tenant, &fresh).await.unwrap(),
        "the refused submission reserved nothing"
    );
    // A response that is not 2xx is refused whole as well.
    let refused = new_run("queued-refused", BASE_MS);
    assert!(matches!(
        store
            .submit_queued(
                reservation(&tenant, &fresh, 21, None),
                refused.clone(),
                response(500, "no")
            )
            .await,
        Err(StoreError::Invalid { .. })
    ));
    assert_eq!(store.get_run(&refused.run_id).await.unwrap(), None);
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// Settling a dead holder's reservation applies only while the record is
/// in progress and held by that owner: it completes it with an answer or
/// releases it; a settlement by a stale reader after the key was reserved
/// afresh changes nothing.
pub async fn idempotency_settle_applies_only_for_the_holder(store: &dyn Store) {
    let tenant = TenantId::new("acme").unwrap();
    let key = unique("settle");
    let dead = "pid:1@host#dead";
    store
        .reserve_idempotency_as(reservation(&tenant, &key, 23, Some(holder(dead, None))))
        .await
        .unwrap();
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &key,
                "pid:2@host#other",
                IdempotencySettlement::Release,
                BASE_MS + ms(1)
            )
            .await
            .unwrap(),
        IdempotencySettled::Superseded,
        "another owner's settlement is refused"
    );
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &key,
                dead,
                IdempotencySettlement::Release,
                BASE_MS + ms(1)
            )
            .await
            .unwrap(),
        IdempotencySettled::Applied
    );
    // The key is free: a fresh request reserves it; a stale release of the
    // dead holder must not free it again.
    let live = "pid:3@host#live";
    assert_eq!(
        store
            .reserve_idempotency_as(reservation(&tenant, &key, 23, Some(holder(live, None))))
            .await
            .unwrap(),
        Reservation::Reserved
    );
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &key,
                dead,
                IdempotencySettlement::Release,
                BASE_MS + ms(2)
            )
            .await
            .unwrap(),
        IdempotencySettled::Superseded,
        "a stale settlement leaves the new reservation alone"
    );
    let answer = response(200, "final view");
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &key,
                live,
                IdempotencySettlement::Complete(answer.clone()),
                BASE_MS + ms(3)
            )
            .await
            .unwrap(),
        IdempotencySettled::Applied
    );
    let Reservation::Replay(record) = store
        .reserve_idempotency_as(reservation(&tenant, &key, 23, None))
        .await
        .unwrap()
    else {
        panic!("a completed record replays");
    };
    assert_eq!(record.response, Some(answer));
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &key,
                live,
                IdempotencySettlement::Release,
                BASE_MS + ms(4)
            )
            .await
            .unwrap(),
        IdempotencySettled::Superseded,
        "a completed record is never released"
    );
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &unique("never"),
                live,
                IdempotencySettlement::Release,
                BASE_MS
            )
            .await
            .unwrap(),
        IdempotencySettled::Superseded
    );
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// A release is refused while the run the record names exists: the run
/// may have made effects, and the key must answer from it. Checked in the
/// settlement's own write, so a holder judged dead that created its run a
/// moment before is never released.
pub async fn idempotency_release_is_refused_while_its_run_exists(store: &dyn Store) {
    let tenant = TenantId::new("acme").unwrap();
    let key = unique("release-run");
    let run = new_run("release-run", BASE_MS);
    let owner = "pid:1@host#runs";
    store
        .reserve_idempotency_as(reservation(
            &tenant,
            &key,
            24,
            Some(holder(owner, Some(&run.run_id))),
        ))
        .await
        .unwrap();
    store.create_run(run.clone()).await.unwrap();
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &key,
                owner,
                IdempotencySettlement::Release,
                BASE_MS + ms(1)
            )
            .await
            .unwrap(),
        IdempotencySettled::RunExists
    );
    assert!(
        matches!(
            store
                .reserve_idempotency_as(reservation(&tenant, &key, 24, None))
                .await
                .unwrap(),
            Reservation::InProgress(_)
        ),
        "the record stays in progress"
    );
    // Completing it from the run applies.
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &key,
                owner,
                IdempotencySettlement::Complete(response(200, "the run's view")),
                BASE_MS + ms(2)
            )
            .await
            .unwrap(),
        IdempotencySettled::Applied
    );
    // A record whose run was never created is released.
    let absent = unique("release-absent");
    let never = RunId::new(unique("never-created")).unwrap();
    store
        .reserve_idempotency_as(reservation(
            &tenant,
            &absent,
            24,
            Some(holder(owner, Some(&never))),
        ))
        .await
        .unwrap();
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &absent,
                owner,
                IdempotencySettlement::Release,
                BASE_MS + ms(1)
            )
            .await
            .unwrap(),
        IdempotencySettled::Applied
    );
    assert!(!store.clear_idempotency(&tenant, &absent).await.unwrap());
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// A reservation records when its holder reserved it and until when it
/// is taken for alive; only the holder renews it, and only while it is in
/// progress.
pub async fn idempotency_holder_renews_its_reservation(store: &dyn Store) {
    let tenant = TenantId::new("acme").unwrap();
    let key = unique("renew");
    let owner = "pid:1@host#renew";
    store
        .reserve_idempotency_as(reservation(&tenant, &key, 25, Some(holder(owner, None))))
        .await
        .unwrap();
    let record = |key: String| async move {
        let Reservation::InProgress(record) = store
            .reserve_idempotency_as(reservation(&tenant_of(), &key, 25, None))
            .await
            .unwrap()
        else {
            panic!("the record is in progress");
        };
        record
    };
    let first = record(key.clone()).await;
    assert_eq!(first.holder_since_ms, Some(BASE_MS), "reserved at now_ms");
    assert_eq!(first.holder_until_ms, Some(BASE_MS + ms(3_000)));
    assert!(first.holder_is_trusted());
    assert!(
        store
            .renew_idempotency(&tenant, &key, owner, BASE_MS + ms(9_000))
            .await
            .unwrap()
    );
    let renewed = record(key.clone()).await;
    assert_eq!(renewed.holder_until_ms, Some(BASE_MS + ms(9_000)));
    assert_eq!(
        renewed.created_at_ms, first.created_at_ms,
        "a renewal is not a new reservation"
    );
    assert!(
        !store
            .renew_idempotency(&tenant, &key, "pid:2@host#other", BASE_MS + ms(99_000))
            .await
            .unwrap(),
        "only the holder renews"
    );
    assert_eq!(
        record(key.clone()).await.holder_until_ms,
        Some(BASE_MS + ms(9_000))
    );
    // Given up: held until now.
    assert!(
        store
            .renew_idempotency(&tenant, &key, owner, BASE_MS + ms(10))
            .await
            .unwrap()
    );
    assert_eq!(
        record(key.clone()).await.holder_until_ms,
        Some(BASE_MS + ms(10))
    );
    store
        .settle_idempotency(
            &tenant,
            &key,
            owner,
            IdempotencySettlement::Complete(response(200, "done")),
            BASE_MS + ms(11),
        )
        .await
        .unwrap();
    assert!(
        !store
            .renew_idempotency(&tenant, &key, owner, BASE_MS + ms(20_000))
            .await
            .unwrap(),
        "a completed record has no holder to renew"
    );
    assert!(
        !store
            .renew_idempotency(&tenant, &unique("none"), owner, BASE_MS)
            .await
            .unwrap()
    );
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

fn fence(tenant: &TenantId, key: &str, owner: &str) -> ReservationFence {
    ReservationFence {
        tenant: tenant.clone(),
        key: key.to_owned(),
        owner: owner.to_owned(),
    }
}

fn tenant_of() -> TenantId {
    TenantId::new("acme").unwrap()
}

/// A sync submission's run is created only while the reservation naming
/// it is still its holder's: after a retry released it (the holder taken
/// for dead), or for another owner, nothing is created.
pub async fn idempotency_run_creation_is_fenced_on_the_holder(store: &dyn Store) {
    let tenant = tenant_of();
    let key = unique("fenced");
    let owner = "pid:1@host#fenced";
    let run = new_run("fenced", BASE_MS);
    store
        .reserve_idempotency_as(reservation(
            &tenant,
            &key,
            26,
            Some(holder(owner, Some(&run.run_id))),
        ))
        .await
        .unwrap();
    let other = new_run("fenced-other", BASE_MS);
    assert!(matches!(
        store
            .create_run_held(other.clone(), &fence(&tenant, &key, "pid:2@host#other"))
            .await,
        Err(StoreError::ReservationLost { .. })
    ));
    assert_eq!(store.get_run(&other.run_id).await.unwrap(), None);
    let created = store
        .create_run_held(run.clone(), &fence(&tenant, &key, owner))
        .await
        .unwrap();
    assert_eq!(created.run_id, run.run_id);
    assert_eq!(created.status, RunStatus::Queued);
    // Released (nothing of it ran): the holder creates nothing any more.
    let released = unique("fenced-released");
    store
        .reserve_idempotency_as(reservation(
            &tenant,
            &released,
            26,
            Some(holder(owner, None)),
        ))
        .await
        .unwrap();
    assert_eq!(
        store
            .settle_idempotency(
                &tenant,
                &released,
                owner,
                IdempotencySettlement::Release,
                BASE_MS + ms(1)
            )
            .await
            .unwrap(),
        IdempotencySettled::Applied
    );
    let late = new_run("fenced-late", BASE_MS);
    assert!(matches!(
        store
            .create_run_held(late.clone(), &fence(&tenant, &released, owner))
            .await,
        Err(StoreError::ReservationLost { .. })
    ));
    assert_eq!(store.get_run(&late.run_id).await.unwrap(), None);
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// Every commit that declares or marks a ledger record bumps the ledger
/// revision of its run and of the runs above it; a commit expecting a
/// revision that moved is refused whole with `LedgerChanged`; a stored report with a basis carries the revision it
/// reflects.
pub async fn ledger_revision_fences_report_writes(store: &dyn Store) {
    let parent = created(store, "revision-parent").await;
    let mut child_run = new_run("revision-child", BASE_MS);
    child_run.parent_run_id = Some(parent.clone());
    let child = store.create_run(child_run).await.unwrap().run_id;
    let revision =
        |id: RunId| async move { store.get_run(&id).await.unwrap().unwrap().ledger_revision };
    assert_eq!(revision(parent.clone()).await, 0, "a new run is at 0");
    store
        .declare(declaration(
            &child,
            "intent-1",
            "update_delivery_time",
            ToolClass::IdempotentWrite,
        ))
        .await
        .unwrap();
    assert_eq!(revision(child.clone()).await, 1);
    assert_eq!(
        revision(parent.clone()).await,
        1,
        "a child's record is in its parent's report too"
    );
    // A writer that read revision 0 is refused, and writes nothing.
    let stale = StepCommit {
        marks: vec![(
            IntentId::new("intent-1").unwrap(),
            mark(LedgerStatus::Succeeded, 1, BASE_MS + ms(1)),
        )],
        events: vec![event(&child, EventKind::LedgerRecorded, 1)],
        expect_ledger_revision: Some(0),
        ..StepCommit::default()
    };
    assert!(matches!(
        store.commit_step(&child, stale).await,
        Err(StoreError::LedgerChanged { .. })
    ));
    assert_eq!(
        store.ledger(&child).await.unwrap()[0].status,
        LedgerStatus::Pending
    );
    assert!(store.events(&child, 0).await.unwrap().is_empty());
    assert_eq!(revision(child.clone()).await, 1);
    // The current revision applies, and moves it.
    let current = StepCommit {
        marks: vec![(
            IntentId::new("intent-1").unwrap(),
            mark(LedgerStatus::Succeeded, 1, BASE_MS + ms(1)),
        )],
        expect_ledger_revision: Some(1),
        ..StepCommit::default()
    };
    store.commit_step(&child, current).await.unwrap();
    assert_eq!(revision(child.clone()).await, 2);
    assert_eq!(revision(parent.clone()).await, 2);
    // Events and status changes alone leave it.
    let mut report = report(Outcome::PartialSuccess);
    report.basis = Some(rein_core::report::ReportBasis {
        end: rein_core::report::End::Answer(None),
        settled: rein_core::report::Settled::Kept,
        in_flight: Vec::new(),
        strategies_not_tried: Vec::new(),
        hint: Default::default(),
        owners: Default::default(),
        ledger_revision: None,
    });
    let end = StepCommit {
        status: Some(StatusChange {
            status: RunStatus::Finished(Outcome::PartialSuccess),
            report: Some(report.clone()),
            at_ms: BASE_MS + ms(2),
        }),
        events: vec![event(&child, EventKind::RunFinished, 1)],
        expect_ledger_revision: Some(2),
        ..StepCommit::default()
    };
    store.commit_step(&child, end).await.unwrap();
    let stored = store.get_run(&child).await.unwrap().unwrap();
    assert_eq!(stored.ledger_revision, 2);
    assert_eq!(
        stored
            .report
            .and_then(|r| r.basis)
            .and_then(|b| b.ledger_revision),
        Some(2),
        "the report reflects revision 2"
    );
    // A revision that lands with its mark reflects the mark.
    let revise = StepCommit {
        marks: vec![(
            IntentId::new("intent-1").unwrap(),
            mark(LedgerStatus::Manual, 1, BASE_MS + ms(3)),
        )],
        revised_report: Some(report.clone()),
        expect_ledger_revision: Some(2),
        ..StepCommit::default()
    };
    store.commit_step(&child, revise).await.unwrap();
    let stored = store.get_run(&child).await.unwrap().unwrap();
    assert_eq!(stored.ledger_revision, 3);
    assert_eq!(
        stored
            .report
            .and_then(|r| r.basis)
            .and_then(|b| b.ledger_revision),
        Some(3)
    );
    // Another writer that read revision 2 before that mark loses.
    let late = StepCommit {
        revised_report: Some(report),
        expect_ledger_revision: Some(2),
        ..StepCommit::default()
    };
    assert!(matches!(
        store.commit_step(&child, late).await,
        Err(StoreError::LedgerChanged { .. })
    ));
}

// ----- listing runs, newest first ----------------------------------------

/// `run` of `tenant` and `agent`, created at `created_at_ms`.
fn run_of(tenant: &TenantId, agent: &str, prefix: &str, created_at_ms: Timestamp) -> NewRun {
    NewRun {
        tenant: tenant.clone(),
        agent: agent.to_owned(),
        ..new_run(prefix, created_at_ms)
    }
}

fn newest_first(runs: &mut [NewRun]) {
    runs.sort_by(|a, b| {
        (b.created_at_ms, b.run_id.as_str()).cmp(&(a.created_at_ms, a.run_id.as_str()))
    });
}

/// Every page of `filter` with pages of `limit`, checking each page's
/// shape; `between` runs after each page, before the next is read.
async fn all_pages(
    store: &dyn Store,
    filter: &RunFilter,
    limit: usize,
    mut between: impl FnMut(&RunPage) -> Option<NewRun>,
) -> Vec<crate::RunRecord> {
    let mut seen = Vec::new();
    let mut cursor: Option<RunCursor> = None;
    for _ in 0..10_000 {
        let page = store
            .list_runs_page(filter, cursor.as_ref(), limit)
            .await
            .unwrap();
        assert!(page.runs.len() <= limit, "the limit is honoured");
        assert!(
            page.runs.iter().all(|run| filter.matches(run)),
            "a page holds only runs the filter selects ({filter:?})"
        );
        if let (Some(cursor), Some(first)) = (&cursor, page.runs.first()) {
            assert!(
                cursor.is_newer_than(first),
                "a page starts after its cursor"
            );
        }
        if let Some(next) = &page.next {
            assert_eq!(page.runs.len(), limit, "only a full page has a next one");
            assert_eq!(Some(next), page.runs.last().map(RunCursor::after).as_ref());
        }
        if page.next.is_some()
            && let Some(run) = between(&page)
        {
            store.create_run(run).await.unwrap();
        }
        seen.extend(page.runs);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return seen,
        }
    }
    panic!("the listing of {filter:?} never ended");
}

/// Paging a tenant's runs with `list_runs_page` visits every run that
/// existed when it began exactly once, newest (created_at_ms, then run id,
/// descending) first, while runs are created between pages: an older one
/// is listed later, a newer one never; the last page has no next cursor.
pub async fn list_runs_page_visits_every_run_once_newest_first_under_inserts(store: &dyn Store) {
    const RUNS: u64 = 23;
    const PAGE: usize = 4;
    let tenant = unique_tenant("paging");
    let base = scaled(7);
    // In pairs of equal times, created out of order, so that neither the
    // insertion order nor the time alone gives the order.
    let mut runs: Vec<NewRun> = (0..RUNS)
        .map(|n| {
            run_of(
                &tenant,
                "order-desk",
                "listed",
                base + ms(1_000) + ms((n * 7 % RUNS) / 2),
            )
        })
        .collect();
    create_all(store, runs.clone()).await;
    newest_first(&mut runs);
    let filter = RunFilter::all().of_tenant(tenant.clone());

    let mut inserted: Vec<NewRun> = Vec::new();
    let mut round = 0u64;
    let seen = all_pages(store, &filter, PAGE, |page| {
        round += 1;
        // Alternately a run newer than every page, and one older than the
        // cursor (listed on a later page).
        let run = if round % 2 == 1 {
            run_of(&tenant, "order-desk", "newer", base + ms(5_000) + ms(round))
        } else {
            let last = page.runs.last()?;
            run_of(
                &tenant,
                "order-desk",
                "older",
                last.created_at_ms.saturating_sub(ms(1)),
            )
        };
        inserted.push(run.clone());
        Some(run)
    })
    .await;
    assert!(
        seen.windows(2).all(|pair| {
            (pair[0].created_at_ms, pair[0].run_id.as_str())
                > (pair[1].created_at_ms, pair[1].run_id.as_str())
        }),
        "strictly newest first: no run twice"
    );
    let originals: Vec<&str> = seen
        .iter()
        .map(|run| run.run_id.as_str())
        .filter(|id| runs.iter().any(|run| run.run_id.as_str() == *id))
        .collect();
    assert_eq!(
        originals,
        runs.iter()
            .map(|run| run.run_id.as_str())
            .collect::<Vec<_>>(),
        "every run that existed at the start, exactly once, newest first"
    );
    for run in &inserted {
        let listed = seen.iter().any(|r| r.run_id == run.run_id);
        let newer = run.created_at_ms > base + ms(5_000);
        assert_eq!(
            listed, !newer,
            "a run created meanwhile is listed iff it sorts after the cursor ({})",
            run.run_id
        );
    }
    let first = store.get_run(&runs[0].run_id).await.unwrap().unwrap();
    let newest = store.list_runs_page(&filter, None, 100).await.unwrap();
    assert!(newest.runs.contains(&first), "records read back whole");
    assert!(
        store
            .list_runs_page(&filter, None, 0)
            .await
            .unwrap()
            .runs
            .is_empty(),
        "limit 0 lists nothing"
    );
}

/// `list_runs_page` selects by status (exactly, as `runs_with_status`),
/// agent and a creation-time range (both ends exclusive), all together.
pub async fn list_runs_page_filters_by_status_agent_and_time(store: &dyn Store) {
    let tenant = unique_tenant("filters");
    let base = scaled(8);
    let statuses = [
        RunStatus::Queued,
        RunStatus::Running,
        RunStatus::Finished(Outcome::Succeeded),
        RunStatus::Finished(Outcome::Failed),
    ];
    let mut runs = Vec::new();
    for n in 0..16u64 {
        let agent = if n % 3 == 0 { "billing" } else { "order-desk" };
        let run = run_of(&tenant, agent, "filtered", base + ms(n));
        store.create_run(run.clone()).await.unwrap();
        let status = statuses[(n % 4) as usize];
        if status != RunStatus::Queued {
            store
                .set_run_status(
                    &run.run_id,
                    status,
                    status.outcome().map(report),
                    base + ms(100),
                )
                .await
                .unwrap();
        }
        runs.push(store.get_run(&run.run_id).await.unwrap().unwrap());
    }
    runs.reverse(); // newest first
    let mine = RunFilter::all().of_tenant(tenant.clone());
    let mut filters = vec![
        mine.clone(),
        mine.clone().of_agent("billing"),
        mine.clone().of_agent("nobody"),
        mine.clone().created_after(base + ms(3)),
        mine.clone().created_before(base + ms(3)),
        mine.clone()
            .created_after(base + ms(3))
            .created_before(base + ms(9)),
        mine.clone()
            .created_after(base + ms(9))
            .created_before(base + ms(3)),
        mine.clone()
            .with_status(RunStatus::Finished(Outcome::Cancelled)),
        mine.clone()
            .with_status(RunStatus::Running)
            .of_agent("order-desk")
            .created_after(base + ms(1)),
    ];
    filters.extend(statuses.iter().map(|s| mine.clone().with_status(*s)));
    for filter in filters {
        let expected: Vec<&str> = runs
            .iter()
            .filter(|run| filter.matches(run))
            .map(|run| run.run_id.as_str())
            .collect();
        for page in [1, 3, 100] {
            let listed = all_pages(store, &filter, page, |_| None).await;
            assert_eq!(
                ids(&listed),
                expected,
                "the runs {filter:?} selects, newest first, in pages of {page}"
            );
        }
    }
}

/// A tenant's listing never holds another tenant's run, whatever the other
/// filters and however the runs interleave in time; with no tenant it
/// holds both.
pub async fn list_runs_page_never_shows_another_tenants_run(store: &dyn Store) {
    let (a, b) = (unique_tenant("isolated-a"), unique_tenant("isolated-b"));
    let base = scaled(9);
    let mut all = Vec::new();
    for n in 0..12u64 {
        let tenant = if n % 2 == 0 { &a } else { &b };
        // Equal times across the two tenants.
        let run = run_of(tenant, "order-desk", "tenant", base + ms(n / 2));
        all.push(run.clone());
        store.create_run(run).await.unwrap();
    }
    for (tenant, other) in [(&a, &b), (&b, &a)] {
        for filter in [
            RunFilter::all().of_tenant(tenant.clone()),
            RunFilter::all()
                .of_tenant(tenant.clone())
                .with_status(RunStatus::Queued),
            RunFilter::all()
                .of_tenant(tenant.clone())
                .of_agent("order-desk")
                .created_after(base),
        ] {
            let listed = all_pages(store, &filter, 2, |_| None).await;
            assert!(
                listed.iter().all(|run| &run.tenant == tenant),
                "{tenant}'s listing holds none of {other}'s runs"
            );
            let expected = all
                .iter()
                .filter(|run| &run.tenant == tenant)
                .filter(|run| {
                    filter
                        .created_after_ms
                        .is_none_or(|ms| run.created_at_ms > ms)
                })
                .count();
            assert_eq!(
                listed.len(),
                expected,
                "all of {tenant}'s runs ({filter:?})"
            );
        }
    }
    let everyone = all_pages(
        store,
        &RunFilter::all()
            .created_after(base - ms(1))
            .created_before(base + ms(6)),
        5,
        |_| None,
    )
    .await;
    for run in &all {
        assert!(
            everyone.iter().any(|r| r.run_id == run.run_id),
            "with no tenant, every tenant's runs are listed"
        );
    }
}

/// The runs both queue checks read: tenant `busy` with five roots created
/// out of time order (two at equal times), the fifth running and the
/// fourth finished, and a running child of the fifth; tenant `quiet` with
/// one queued root. Run ids start with `prefix`.
struct QueueRuns {
    busy: TenantId,
    quiet: TenantId,
    busy_runs: Vec<NewRun>,
    q1: NewRun,
}

impl QueueRuns {
    async fn create(store: &dyn Store, prefix: &str) -> QueueRuns {
        let (busy, quiet) = (unique_tenant("busy"), unique_tenant("quiet"));
        let of = |tenant: &TenantId, name: &str, at: u64| NewRun {
            tenant: tenant.clone(),
            ..new_run(&format!("{prefix}{name}"), EARLY_MS + ms(at))
        };
        let busy_runs = vec![
            of(&busy, "3", 30),
            of(&busy, "1", 10),
            of(&busy, "2", 10),
            of(&busy, "4", 40),
            of(&busy, "5", 50),
        ];
        create_all(store, busy_runs.clone()).await;
        let q1 = of(&quiet, "q1", 5);
        store.create_run(q1.clone()).await.unwrap();
        set_all(
            store,
            &[busy_runs[4].run_id.clone()],
            RunStatus::Running,
            BASE_MS,
        )
        .await;
        set_all(
            store,
            &[busy_runs[3].run_id.clone()],
            RunStatus::Finished(Outcome::Succeeded),
            BASE_MS,
        )
        .await;
        let child = NewRun {
            parent_run_id: Some(busy_runs[4].run_id.clone()),
            ..of(&busy, "child", 60)
        };
        store.create_run(child.clone()).await.unwrap();
        set_all(store, &[child.run_id], RunStatus::Running, BASE_MS).await;
        QueueRuns {
            busy,
            quiet,
            busy_runs,
            q1,
        }
    }

    /// `busy`'s two oldest queued runs, oldest first.
    fn busy_oldest_two(&self) -> Vec<&str> {
        let mut queued: Vec<&NewRun> = self.busy_runs[..3].iter().collect();
        queued.sort_by_key(|r| (r.created_at_ms, r.run_id.as_str()));
        queued[..2].iter().map(|r| r.run_id.as_str()).collect()
    }

    /// Takes every run, and `more`, out of the queue: a later suite on the
    /// same store starts clean.
    async fn finish(self, store: &dyn Store, more: Vec<RunId>) {
        let mut done: Vec<RunId> = self.busy_runs[..3]
            .iter()
            .map(|r| r.run_id.clone())
            .collect();
        done.push(self.busy_runs[4].run_id.clone());
        done.push(self.q1.run_id);
        done.extend(more);
        set_all(
            store,
            &done,
            RunStatus::Finished(Outcome::Cancelled),
            BASE_MS,
        )
        .await;
    }
}

/// `queue_heads` lists each tenant with queued root runs once, in tenant
/// order, with its running roots counted (children and finished runs
/// not) and its oldest queued roots in (`created_at_ms`, run id) order up
/// to the number asked for; a tenant with runs running but none queued is
/// not listed.
pub async fn queue_heads_list_each_queued_tenant_with_its_running_and_oldest(store: &dyn Store) {
    let runs = QueueRuns::create(store, "h").await;
    let idle = unique_tenant("idle");
    let i1 = NewRun {
        tenant: idle.clone(),
        ..new_run("hi1", EARLY_MS + ms(5))
    };
    store.create_run(i1.clone()).await.unwrap();
    set_all(
        store,
        std::slice::from_ref(&i1.run_id),
        RunStatus::Running,
        BASE_MS,
    )
    .await;

    let heads = store.queue_heads(2).await.unwrap();
    assert!(
        heads.windows(2).all(|w| w[0].tenant < w[1].tenant),
        "tenant id order, each once"
    );
    assert!(
        !heads.iter().any(|h| h.tenant == idle),
        "nothing queued, not listed"
    );
    let b = heads.iter().find(|h| h.tenant == runs.busy).unwrap();
    assert_eq!(b.running, 1, "roots only: {b:?}");
    assert_eq!(
        ids(&b.oldest),
        runs.busy_oldest_two(),
        "the 2 oldest queued, oldest first"
    );
    let q = heads.iter().find(|h| h.tenant == runs.quiet).unwrap();
    assert_eq!(q.running, 0);
    assert_eq!(ids(&q.oldest), [runs.q1.run_id.as_str()]);
    let none = store.queue_heads(0).await.unwrap();
    let b0 = none.iter().find(|h| h.tenant == runs.busy).unwrap();
    assert!(b0.oldest.is_empty(), "none asked for");
    runs.finish(store, vec![i1.run_id]).await;
}

/// `tenant_backlogs` counts each tenant's queued and running root runs
/// (children and finished runs not), lists its oldest queued roots in
/// (`created_at_ms`, run id) order up to the number asked for, and with a
/// tenant names only that tenant.
pub async fn tenant_backlogs_count_roots_and_list_each_tenants_oldest(store: &dyn Store) {
    let runs = QueueRuns::create(store, "b").await;
    let (busy, quiet) = (runs.busy.clone(), runs.quiet.clone());
    let all = store.tenant_backlogs(None, 2).await.unwrap();
    let mine: Vec<&crate::TenantBacklog> = all
        .iter()
        .filter(|b| b.tenant == busy || b.tenant == quiet)
        .collect();
    assert!(
        all.windows(2).all(|w| w[0].tenant < w[1].tenant),
        "tenant id order"
    );
    assert_eq!(mine.len(), 2, "both tenants are listed: {mine:?}");
    let b = mine.iter().find(|b| b.tenant == busy).unwrap();
    assert_eq!((b.queued, b.running), (3, 1), "roots only: {b:?}");
    assert_eq!(
        ids(&b.oldest),
        runs.busy_oldest_two(),
        "the 2 oldest queued, oldest first"
    );
    let q = mine.iter().find(|b| b.tenant == quiet).unwrap();
    assert_eq!((q.queued, q.running), (1, 0));
    assert_eq!(ids(&q.oldest), [runs.q1.run_id.as_str()]);

    let only = store.tenant_backlogs(Some(&quiet), 0).await.unwrap();
    assert_eq!(only.len(), 1, "one tenant asked, one listed");
    assert_eq!(
        (only[0].queued, only[0].oldest.len()),
        (1, 0),
        "none asked for"
    );
    assert!(
        store
            .tenant_backlogs(Some(&unique_tenant("nobody")), 5)
            .await
            .unwrap()
            .is_empty(),
        "a tenant with nothing queued or running is not listed"
    );
    runs.finish(store, Vec::new()).await;
}

//! Checks that two handles on one store (two processes) race and exactly
//! one wins: a run's claim, an idempotency key, a singleton, a queued run's
//! start.
//!
//! # Why two handles
//!
//! The single-handle race checks can pass on a backend that serializes
//! inside one handle (a mutex, one connection) but not across processes.
//! Here the racers go through different handles: two opens of a SQLite
//! file, two pools on a PostgreSQL database.

use rein_core::Timestamp;
use std::future::Future;
use std::pin::Pin;

use rein_core::{EventKind, Outcome};

use super::{BASE_MS, SINGLETON_TTL, created, event, fingerprint, join_all, ms, unique};
use super::{reservation, unique_tenant};
use crate::{
    ClaimFence, Lease, LeaseKind, Reservation, RunStatus, SingletonLease, StatusChange, StepCommit,
    Store, StoreError, StoreExt,
};

/// Racers per handle.
const PER_HANDLE: usize = 8;

/// The handle of racer `n`: alternating, so both handles race.
fn handle<'a>(n: usize, store: &'a dyn Store, other: &'a dyn Store) -> &'a dyn Store {
    if n % 2 == 0 { store } else { other }
}

/// Of processes taking over an expired run claim through two handles,
/// exactly one wins; the stalled holder's fenced commit is then refused
/// (`ClaimLost`) and the winner's applies.
pub async fn two_handles_race_for_a_run_claim(store: &dyn Store, other: &dyn Store) {
    let run_id = created(store, "race-claim").await;
    let lease_id = unique("race-claim-lease");
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
    let futures = (1..=2 * PER_HANDLE)
        .map(|n| {
            let lease = claim(format!("pid:{n}@host"), now_ms, now_ms + ms(1_000));
            let racer = handle(n, store, other);
            Box::pin(async move {
                let owner = lease.owner.clone();
                (owner, racer.take_over_lease(lease, now_ms).await.unwrap())
            }) as Pin<Box<dyn Future<Output = (String, bool)> + Send + '_>>
        })
        .collect();
    let outcomes = join_all(futures).await;
    let winners: Vec<String> = outcomes
        .iter()
        .filter(|(_, won)| *won)
        .map(|(owner, _)| owner.clone())
        .collect();
    assert_eq!(winners.len(), 1, "exactly one take-over wins: {outcomes:?}");
    let fenced = |owner: &str| StepCommit {
        events: vec![event(&run_id, EventKind::PlanCreated, 1)],
        expect_claim: Some(ClaimFence {
            lease_id: lease_id.clone(),
            owner: owner.to_owned(),
        }),
        ..StepCommit::default()
    };
    let stale = other.commit_step(&run_id, fenced("pid:0@stalled")).await;
    assert!(
        matches!(&stale, Err(StoreError::ClaimLost { run_id: id }) if id == run_id.as_str()),
        "the stalled holder's commit is fenced off: {stale:?}"
    );
    let fresh = other.commit_step(&run_id, fenced(&winners[0])).await;
    assert!(fresh.is_ok(), "the winner's commit applies: {fresh:?}");
    assert_eq!(store.events(&run_id, 0).await.unwrap().len(), 1);
    assert!(
        store
            .release_lease_of(&lease_id, &winners[0])
            .await
            .unwrap()
    );
}

/// Of reservations of one key through two handles, exactly one is
/// `Reserved`; the others see it in progress, and the holder recorded is
/// the winner's.
pub async fn two_handles_race_for_an_idempotency_key(store: &dyn Store, other: &dyn Store) {
    let tenant = unique_tenant("race-key");
    let key = unique("race-key");
    let futures = (0..2 * PER_HANDLE)
        .map(|n| {
            let racer = handle(n, store, other);
            let mut ask = reservation(
                &tenant,
                &key,
                21,
                Some(super::holder(&format!("pid:{n}@host"), None)),
            );
            ask.now_ms = BASE_MS + ms(n as u64);
            Box::pin(async move { (n, racer.reserve_idempotency_as(ask).await.unwrap()) })
                as Pin<Box<dyn Future<Output = (usize, Reservation)> + Send + '_>>
        })
        .collect();
    let outcomes = join_all(futures).await;
    let winners: Vec<usize> = outcomes
        .iter()
        .filter(|(_, outcome)| *outcome == Reservation::Reserved)
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(
        winners.len(),
        1,
        "exactly one reservation wins: {outcomes:?}"
    );
    assert!(
        outcomes.iter().all(|(_, outcome)| matches!(
            outcome,
            Reservation::Reserved | Reservation::InProgress(_)
        )),
        "the others see it in progress: {outcomes:?}"
    );
    let records = other
        .idempotency_records(Some(&tenant), None, 10)
        .await
        .unwrap();
    assert_eq!(records.len(), 1, "one record: {records:?}");
    let owner = records[0].owner.clone();
    assert_eq!(
        owner,
        Some(format!("pid:{}@host", winners[0])),
        "the winner holds it"
    );
    assert_eq!(records[0].fingerprint, fingerprint(21));
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// Of claims of one free singleton through two handles, exactly one wins
/// and both handles then read the winner as holder.
pub async fn two_handles_race_for_a_singleton(store: &dyn Store, other: &dyn Store) {
    let name = unique("race-singleton");
    let owners: Vec<String> = (0..2 * PER_HANDLE)
        .map(|n| format!("pid:{n}@host"))
        .collect();
    let futures = owners
        .iter()
        .enumerate()
        .map(|(n, owner)| {
            let (name, racer) = (&name, handle(n, store, other));
            Box::pin(async move {
                racer
                    .claim_singleton(name, owner, BASE_MS, BASE_MS + SINGLETON_TTL)
                    .await
                    .unwrap()
            }) as Pin<Box<dyn Future<Output = Option<SingletonLease>> + Send + '_>>
        })
        .collect();
    let outcomes = join_all(futures).await;
    let winners: Vec<&SingletonLease> = outcomes.iter().flatten().collect();
    assert_eq!(winners.len(), 1, "exactly one claim wins: {outcomes:?}");
    for reader in [store, other] {
        assert_eq!(
            reader.singleton(&name).await.unwrap().as_ref(),
            Some(winners[0])
        );
    }
    assert!(
        other
            .release_singleton(&name, &winners[0].owner)
            .await
            .unwrap()
    );
}

/// Of commits moving one queued run on (a worker starting it, a cancel)
/// through two handles, exactly one applies; the others fail with
/// `StatusChanged` and store nothing.
pub async fn two_handles_race_to_change_a_queued_run(store: &dyn Store, other: &dyn Store) {
    let run_id = created(store, "race-queued").await;
    let targets = [RunStatus::Running, RunStatus::Finished(Outcome::Cancelled)];
    let futures = (0..2 * PER_HANDLE)
        .map(|n| {
            let status = targets[n % targets.len()];
            let commit = StepCommit {
                expect_status: Some(RunStatus::Queued),
                events: vec![event(&run_id, EventKind::RunStarted, n as u32)],
                status: Some(StatusChange {
                    status,
                    report: status.outcome().map(super::report),
                    at_ms: BASE_MS + ms(n as u64),
                }),
                ..StepCommit::default()
            };
            let (run_id, racer) = (&run_id, handle(n / 2, store, other));
            Box::pin(async move { racer.commit_step(run_id, commit).await.map(drop) })
                as Pin<Box<dyn Future<Output = Result<(), StoreError>> + Send + '_>>
        })
        .collect();
    let outcomes = join_all(futures).await;
    let winners: Vec<usize> = (0..outcomes.len())
        .filter(|n| outcomes[*n].is_ok())
        .collect();
    assert_eq!(winners.len(), 1, "exactly one change wins: {outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|outcome| outcome.is_ok()
                || matches!(outcome, Err(StoreError::StatusChanged { .. }))),
        "the others lose with StatusChanged: {outcomes:?}"
    );
    let read = other.get_run(&run_id).await.unwrap().unwrap();
    assert_eq!(read.status, targets[winners[0] % targets.len()]);
    let events = other.events(&run_id, 0).await.unwrap();
    assert_eq!(
        events.len(),
        1,
        "only the winner's event is stored: {events:?}"
    );
    assert_eq!(events[0].step, winners[0] as u32);
}

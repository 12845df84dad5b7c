//! Conformance checks of a run created together with its claim
//! ([`RunStore::create_run_claimed`](crate::RunStore::create_run_claimed)).
//!
//! # Why
//!
//! A run is created `queued`; created and claimed in two writes, it was
//! queued work nobody held in between, and a queue worker of another
//! process could claim it first and drive it while its creator was refused
//! (a sync submission answered `409 not-resumable`). These checks hold a
//! backend to one write: the claim is held from the moment the run is
//! visible, and a refusal of either part leaves neither.

use std::future::Future;
use std::pin::Pin;

use rein_core::RunId;

use super::{BASE_MS, fence, holder, join_all, ms, new_run, reservation, tenant_of, unique};
use crate::{Lease, LeaseKind, RunStatus, Store, StoreError, StoreExt};

/// A run claim on `run_id` held by `owner` from `BASE_MS` for a minute.
fn claim_of(run_id: &RunId, lease_id: &str, owner: &str) -> Lease {
    Lease {
        lease_id: lease_id.to_owned(),
        run_id: run_id.clone(),
        intent_id: None,
        kind: LeaseKind::Run,
        pgid: None,
        path: None,
        owner: owner.to_owned(),
        acquired_at_ms: BASE_MS,
        expires_at_ms: BASE_MS + ms(60_000),
    }
}

/// A run created with its claim is `queued` and held by the claim's owner
/// at once: another owner's acquire is a conflict and its take-over is
/// refused, the owner renews and releases it. Each refusal (a claim of
/// another run, an invalid claim, a lease id taken, a run id taken, a
/// reservation lost) writes neither the run nor the claim; a held
/// reservation creates both.
pub async fn run_created_with_its_claim_is_held_at_once(store: &dyn Store) {
    let run = new_run("claimed", BASE_MS);
    let run_id = run.run_id.clone();
    let lease_id = unique("claimed-lease");
    let owner = "pid:1@host#node-a.claim";
    let claim = claim_of(&run_id, &lease_id, owner);
    let created = store
        .create_run_claimed(run.clone(), claim.clone(), None)
        .await
        .unwrap();
    assert_eq!(created.run_id, run_id);
    assert_eq!(created.status, RunStatus::Queued, "a new run is queued");
    assert_eq!(
        store.get_run(&run_id).await.unwrap().map(|r| r.status),
        Some(RunStatus::Queued)
    );
    assert_eq!(
        store.leases_of_run(&run_id).await.unwrap(),
        vec![claim.clone()],
        "the run's claim is held from its creation"
    );
    let rival = claim_of(&run_id, &lease_id, "pid:2@host#node-b.claim");
    let err = store.acquire_lease(rival.clone()).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { what: "lease", .. }),
        "another owner's claim must conflict, got {err:?}"
    );
    assert!(
        !store.take_over_lease(rival, BASE_MS + ms(1)).await.unwrap(),
        "a live claim is not taken over"
    );
    assert!(
        store
            .renew_lease_of(&lease_id, owner, BASE_MS + ms(120_000))
            .await
            .unwrap()
    );

    // A run id taken: refused, and the held claim stays as it was.
    let again = store
        .create_run_claimed(
            run.clone(),
            claim_of(&run_id, &unique("claimed-again"), owner),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(again, StoreError::Conflict { what: "run", .. }),
        "a taken run id must conflict, got {again:?}"
    );
    let held = store.leases_of_run(&run_id).await.unwrap();
    assert_eq!(held.len(), 1, "no second claim: {held:?}");
    assert_eq!(held[0].expires_at_ms, BASE_MS + ms(120_000));
    assert!(store.release_lease_of(&lease_id, owner).await.unwrap());

    // A claim naming another run: invalid, nothing written.
    let stray = new_run("claimed-stray", BASE_MS);
    let err = store
        .create_run_claimed(
            stray.clone(),
            claim_of(&run_id, &unique("claimed-stray"), owner),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid { .. }),
        "a claim of another run must be invalid, got {err:?}"
    );
    assert_eq!(store.get_run(&stray.run_id).await.unwrap(), None);
    assert!(store.leases_of_run(&run_id).await.unwrap().is_empty());

    // An invalid claim (no owner): invalid, no run.
    let ownerless = new_run("claimed-ownerless", BASE_MS);
    let bad = claim_of(&ownerless.run_id, &unique("claimed-ownerless"), " ");
    let err = store
        .create_run_claimed(ownerless.clone(), bad, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Invalid { .. }),
        "an ownerless claim must be invalid, got {err:?}"
    );
    assert_eq!(store.get_run(&ownerless.run_id).await.unwrap(), None);

    // A lease id another run holds: the claim conflicts and the run it
    // came with is rolled back.
    let holder_run = new_run("claimed-holder", BASE_MS);
    let shared_id = unique("claimed-shared");
    store
        .create_run_claimed(
            holder_run.clone(),
            claim_of(&holder_run.run_id, &shared_id, owner),
            None,
        )
        .await
        .unwrap();
    let late = new_run("claimed-late", BASE_MS);
    let err = store
        .create_run_claimed(
            late.clone(),
            claim_of(&late.run_id, &shared_id, owner),
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Conflict { what: "lease", .. }),
        "a held lease id must conflict, got {err:?}"
    );
    assert_eq!(
        store.get_run(&late.run_id).await.unwrap(),
        None,
        "a refused claim must undo its run"
    );
    assert!(store.release_lease_of(&shared_id, owner).await.unwrap());

    // Fenced: another owner's reservation refuses both parts; the
    // holder's creates both.
    let tenant = tenant_of();
    let key = unique("claimed-fenced");
    let fenced = new_run("claimed-fenced", BASE_MS);
    store
        .reserve_idempotency_as(reservation(
            &tenant,
            &key,
            27,
            Some(holder(owner, Some(&fenced.run_id))),
        ))
        .await
        .unwrap();
    let fenced_lease = unique("claimed-fenced-lease");
    let err = store
        .create_run_claimed(
            fenced.clone(),
            claim_of(&fenced.run_id, &fenced_lease, owner),
            Some(&fence(&tenant, &key, "pid:2@host#other")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::ReservationLost { .. }),
        "a reservation not held must refuse, got {err:?}"
    );
    assert_eq!(store.get_run(&fenced.run_id).await.unwrap(), None);
    let made = store
        .create_run_claimed(
            fenced.clone(),
            claim_of(&fenced.run_id, &fenced_lease, owner),
            Some(&fence(&tenant, &key, owner)),
        )
        .await
        .unwrap();
    assert_eq!(made.status, RunStatus::Queued);
    assert_eq!(
        store.leases_of_run(&fenced.run_id).await.unwrap(),
        vec![claim_of(&fenced.run_id, &fenced_lease, owner)]
    );
    assert!(store.release_lease_of(&fenced_lease, owner).await.unwrap());
    assert!(store.clear_idempotency(&tenant, &key).await.unwrap());
}

/// Racers per handle trying to claim the run while it is created.
const RIVALS: usize = 4;

/// How many times a rival tries before it gives up on ever seeing the run.
const MAX_TRIES: usize = 10_000;

/// While one handle creates a run with its claim, rivals on both handles
/// (other processes' queue workers) try to claim it: each sees no run, or
/// a run already held, and none wins; the creator's claim is the one
/// held.
pub async fn two_handles_race_for_a_run_created_claimed(store: &dyn Store, other: &dyn Store) {
    let run = new_run("race-created", BASE_MS);
    let run_id = run.run_id.clone();
    let lease_id = unique("race-created-lease");
    let owner = "pid:1@host#creator.claim";
    let claim = claim_of(&run_id, &lease_id, owner);
    let mut futures: Vec<Pin<Box<dyn Future<Output = Option<String>> + Send + '_>>> = Vec::new();
    for n in 1..=2 * RIVALS {
        let racer = if n % 2 == 0 { store } else { other };
        let rival = claim_of(&run_id, &lease_id, &format!("pid:{}@host#rival", n + 1));
        futures.push(Box::pin(async move {
            for _ in 0..MAX_TRIES {
                match racer.acquire_lease(rival.clone()).await {
                    Err(StoreError::NotFound { .. }) => tokio::task::yield_now().await,
                    Err(StoreError::Conflict { what: "lease", .. }) => return None,
                    Ok(won) => return Some(format!("a rival won the claim: {won:?}")),
                    Err(e) => return Some(format!("a rival's acquire failed: {e:?}")),
                }
            }
            Some("a rival never saw the run".to_owned())
        }));
    }
    let creator = claim.clone();
    futures.push(Box::pin(async move {
        tokio::task::yield_now().await;
        match store.create_run_claimed(run, creator, None).await {
            Ok(_) => None,
            Err(e) => Some(format!("the creation failed: {e:?}")),
        }
    }));
    let failures: Vec<String> = join_all(futures).await.into_iter().flatten().collect();
    assert!(
        failures.is_empty(),
        "no rival may claim a run created claimed: {failures:?}"
    );
    assert_eq!(other.leases_of_run(&run_id).await.unwrap(), vec![claim]);
    assert!(other.release_lease_of(&lease_id, owner).await.unwrap());
}

//! Resource leases and run claims, each change under the lease id's
//! advisory lock (see the module docs of `ops`).

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::{IntentId, RunId};
use rein_store::Timestamp;
use rein_store::rules::validate_owner;
use rein_store::{
    Lease, LeaseChange, LeaseFilter, NewRun, ReservationFence, RunRecord, StoreError,
};

use super::{LockSpace, execute, lock, query_all, query_opt, require_run};
use crate::codec::{LEASE_COLUMNS, at_most_max, decode_lease, int, limit};

async fn lease(client: &impl GenericClient, lease_id: &str) -> Result<Option<Lease>, StoreError> {
    query_opt(
        client,
        &format!("SELECT {LEASE_COLUMNS} FROM leases WHERE lease_id = $1"),
        &[&lease_id],
        decode_lease,
    )
    .await
}

/// Inserts a validated lease whose id is free.
async fn insert_lease(tx: &Transaction<'_>, new: &Lease) -> Result<(), StoreError> {
    execute(
        tx,
        "INSERT INTO leases (lease_id, run_id, intent_id, kind, pgid, path, owner, \
         acquired_at_ms, expires_at_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        &[
            &new.lease_id,
            &new.run_id.as_str(),
            &new.intent_id.as_ref().map(IntentId::as_str),
            &new.kind.as_str(),
            &new.pgid,
            &new.path.as_deref().and_then(std::path::Path::to_str),
            &new.owner,
            &int(new.acquired_at_ms, "lease acquired_at_ms")?,
            &int(new.expires_at_ms, "lease expires_at_ms")?,
        ],
    )
    .await?;
    Ok(())
}

async fn delete_lease(tx: &Transaction<'_>, lease_id: &str) -> Result<(), StoreError> {
    execute(tx, "DELETE FROM leases WHERE lease_id = $1", &[&lease_id]).await?;
    Ok(())
}

/// The lease `lease_id` if `owner` holds it, under the lease's lock.
async fn locked_lease_of(
    tx: &Transaction<'_>,
    lease_id: &str,
    owner: &str,
) -> Result<Option<Lease>, StoreError> {
    validate_owner(owner)?;
    lock(tx, LockSpace::Lease, lease_id).await?;
    Ok(lease(tx, lease_id)
        .await?
        .filter(|held| held.owner == owner))
}

pub(crate) async fn renew_lease_of(
    tx: &Transaction<'_>,
    lease_id: &str,
    owner: &str,
    expires_at_ms: Timestamp,
) -> Result<bool, StoreError> {
    if locked_lease_of(tx, lease_id, owner).await?.is_none() {
        return Ok(false);
    }
    let change = LeaseChange::Renew {
        lease_id: lease_id.to_owned(),
        expires_at_ms,
    };
    Ok(change_lease(tx, change).await?.is_some())
}

/// The most claims renewed in one transaction (see
/// `PostgresStore::renew_leases_of`). The lock table's bound is the whole
/// server's (`max_locks_per_transaction` × connections, 6,400 by default),
/// shared by every node beating at once: small enough that many nodes fit
/// in it together, large enough that a beat of thousands of runs is a few
/// dozen transactions.
pub(crate) const RENEWALS_PER_TRANSACTION: usize = 128;

/// Renews each of `held` its owner holds (see `Store::renew_leases_of`),
/// in the caller's transaction: each under its lease's lock, as
/// [`renew_lease_of`]. The renewals are pipelined (sent without waiting
/// for each answer), in lease id order, so two processes renewing
/// overlapping sets take the locks in the same order and never wait on
/// each other in a cycle.
pub(crate) async fn renew_leases_of(
    tx: &Transaction<'_>,
    held: &[(String, String)],
    expires_at_ms: Timestamp,
) -> Result<Vec<bool>, StoreError> {
    let mut order: Vec<usize> = (0..held.len()).collect();
    order.sort_by(|a, b| held[*a].0.cmp(&held[*b].0));
    let renewed = futures_util::future::try_join_all(order.iter().map(|&i| {
        let (lease_id, owner) = &held[i];
        renew_lease_of(tx, lease_id, owner, expires_at_ms)
    }))
    .await?;
    let mut answer = vec![false; held.len()];
    for (i, renewed) in order.into_iter().zip(renewed) {
        answer[i] = renewed;
    }
    Ok(answer)
}

pub(crate) async fn release_lease_of(
    tx: &Transaction<'_>,
    lease_id: &str,
    owner: &str,
) -> Result<bool, StoreError> {
    if locked_lease_of(tx, lease_id, owner).await?.is_none() {
        return Ok(false);
    }
    delete_lease(tx, lease_id).await?;
    Ok(true)
}

/// Replaces an absent or expired lease with `new`: under the lease's lock,
/// so of concurrent take-overs (of any process) at most one finds it
/// expired.
pub(crate) async fn take_over_lease(
    tx: &Transaction<'_>,
    new: &Lease,
    now_ms: Timestamp,
) -> Result<bool, StoreError> {
    new.validate()?;
    lock(tx, LockSpace::Lease, &new.lease_id).await?;
    require_run(tx, &new.run_id).await?;
    if let Some(held) = lease(tx, &new.lease_id).await? {
        if !held.is_expired(now_ms) {
            return Ok(false);
        }
        delete_lease(tx, &held.lease_id).await?;
    }
    insert_lease(tx, new).await?;
    Ok(true)
}

/// Creates `run` (fenced on its reservation when `fence` is set) and
/// acquires `claim` on it, in the caller's transaction: no other
/// transaction sees the run before its claim (both commit together), and
/// a refused claim rolls the run back.
pub(crate) async fn create_run_claimed(
    tx: &Transaction<'_>,
    run: NewRun,
    claim: Lease,
    fence: Option<&ReservationFence>,
) -> Result<RunRecord, StoreError> {
    if claim.run_id != run.run_id {
        return Err(StoreError::Invalid {
            what: "run claim",
            expected: format!("run {}", run.run_id),
            found: format!("run {}", claim.run_id),
        });
    }
    claim.validate()?;
    let record = match fence {
        Some(fence) => super::idempotency::create_run_held(tx, run, fence).await?,
        None => super::runs::create_run(tx, run).await?,
    };
    change_lease(tx, LeaseChange::Acquire(claim)).await?;
    Ok(record)
}

/// Applies one [`LeaseChange`] under the lease's lock.
pub(crate) async fn change_lease(
    tx: &Transaction<'_>,
    change: LeaseChange,
) -> Result<Option<Lease>, StoreError> {
    match change {
        LeaseChange::Acquire(new) => {
            new.validate()?;
            lock(tx, LockSpace::Lease, &new.lease_id).await?;
            require_run(tx, &new.run_id).await?;
            if lease(tx, &new.lease_id).await?.is_some() {
                return Err(StoreError::Conflict {
                    what: "lease",
                    id: new.lease_id,
                });
            }
            insert_lease(tx, &new).await?;
            Ok(Some(new))
        }
        LeaseChange::Renew {
            lease_id,
            expires_at_ms,
        } => {
            lock(tx, LockSpace::Lease, &lease_id).await?;
            let mut held = lease(tx, &lease_id)
                .await?
                .ok_or_else(|| StoreError::NotFound {
                    what: "lease",
                    id: lease_id.clone(),
                })?;
            if expires_at_ms < held.acquired_at_ms {
                return Err(StoreError::Invalid {
                    what: "lease expires_at_ms",
                    expected: format!("at least acquired_at_ms ({})", held.acquired_at_ms),
                    found: expires_at_ms.to_string(),
                });
            }
            execute(
                tx,
                "UPDATE leases SET expires_at_ms = $2 WHERE lease_id = $1",
                &[&lease_id, &int(expires_at_ms, "lease expires_at_ms")?],
            )
            .await?;
            held.expires_at_ms = expires_at_ms;
            Ok(Some(held))
        }
        LeaseChange::Release { lease_id } => {
            lock(tx, LockSpace::Lease, &lease_id).await?;
            let Some(held) = lease(tx, &lease_id).await? else {
                return Ok(None);
            };
            delete_lease(tx, &lease_id).await?;
            Ok(Some(held))
        }
        other => Err(StoreError::Invalid {
            what: "lease change",
            expected: "an acquire, a renewal or a release".to_owned(),
            found: format!("{other:?}"),
        }),
    }
}

/// The held leases `filter` selects.
pub(crate) async fn leases(
    client: &impl GenericClient,
    filter: &LeaseFilter,
) -> Result<Vec<Lease>, StoreError> {
    if let Some(run_id) = &filter.run_id {
        require_run(client, run_id).await?;
    }
    // An expiry cursor beyond i64::MAX selects every lease.
    let expired_at = filter.expired_at_ms.map(at_most_max);
    query_all(
        client,
        &format!(
            "SELECT {LEASE_COLUMNS} FROM leases \
             WHERE ($1::text IS NULL OR run_id = $1) AND ($2::bigint IS NULL OR expires_at_ms <= $2) \
             ORDER BY expires_at_ms, lease_id LIMIT $3"
        ),
        &[
            &filter.run_id.as_ref().map(RunId::as_str),
            &expired_at,
            &filter.limit.map_or(i64::MAX, limit),
        ],
        decode_lease,
    )
    .await
}

//! HTTP idempotency records, every operation of a key under the key's
//! advisory lock: of concurrent reservations of one key (from any number
//! of processes) exactly one finds it free.

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::{RunId, TenantId};
use rein_store::Timestamp;
use rein_store::rules::{record_not_found, validate_owner, validate_reservation};
use rein_store::{
    IdempotencyRecord, IdempotencySettled, IdempotencySettlement, IdempotencyState, NewReservation,
    NewRun, Reservation, ReservationFence, RunRecord, StoreError, StoredResponse,
};

use super::runs::{create_run, get_run};
use super::{LockSpace, execute, lock, query_all, query_opt};
use crate::codec::{
    IDEMPOTENCY_COLUMNS, at_most_max, decode_idempotency, headers_text, int, limit,
};

/// Takes the lock of `key` in `tenant` for the transaction.
async fn lock_key(tx: &Transaction<'_>, tenant: &TenantId, key: &str) -> Result<(), StoreError> {
    lock(tx, LockSpace::Idempotency, &format!("{tenant}\n{key}")).await
}

async fn record(
    client: &impl GenericClient,
    tenant: &TenantId,
    key: &str,
) -> Result<Option<IdempotencyRecord>, StoreError> {
    query_opt(
        client,
        &format!(
            "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency \
             WHERE tenant = $1 AND idempotency_key = $2"
        ),
        &[&tenant.as_str(), &key],
        decode_idempotency,
    )
    .await
}

/// Reserves a key for `holder`, if any (see
/// `Store::reserve_idempotency_as`).
pub(crate) async fn reserve(
    tx: &Transaction<'_>,
    reservation: &NewReservation,
) -> Result<Reservation, StoreError> {
    let NewReservation {
        tenant,
        key,
        fingerprint,
        holder,
        now_ms,
        expires_at_ms,
    } = reservation;
    validate_reservation(key, fingerprint, *now_ms, *expires_at_ms)?;
    if let Some(holder) = holder {
        validate_owner(&holder.owner)?;
    }
    lock_key(tx, tenant, key).await?;
    if let Some(record) = record(tx, tenant, key).await?
        && !record.is_expired(*now_ms)
    {
        return Ok(if &record.fingerprint != fingerprint {
            Reservation::Mismatch(record)
        } else {
            match record.state {
                IdempotencyState::Completed => Reservation::Replay(record),
                IdempotencyState::InProgress => Reservation::InProgress(record),
            }
        });
    }
    // Absent or expired: an expired record is replaced whole (every
    // column set, as SQLite's backend does).
    let now = int(*now_ms, "idempotency now_ms")?;
    execute(
        tx,
        "INSERT INTO idempotency (tenant, idempotency_key, fingerprint, state, status, \
         content_type, location, body, created_at_ms, updated_at_ms, expires_at_ms, owner, \
         run_id, holder_since_ms, holder_until_ms, headers) \
         VALUES ($1, $2, $3, $4, NULL, NULL, NULL, NULL, $5, $5, $6, $7, $8, $9, $10, NULL) \
         ON CONFLICT (tenant, idempotency_key) DO UPDATE SET \
         fingerprint = excluded.fingerprint, state = excluded.state, status = NULL, \
         content_type = NULL, location = NULL, body = NULL, headers = NULL, \
         created_at_ms = excluded.created_at_ms, updated_at_ms = excluded.updated_at_ms, \
         expires_at_ms = excluded.expires_at_ms, owner = excluded.owner, \
         run_id = excluded.run_id, holder_since_ms = excluded.holder_since_ms, \
         holder_until_ms = excluded.holder_until_ms",
        &[
            &tenant.as_str(),
            &key.as_str(),
            &fingerprint.as_str(),
            &IdempotencyState::InProgress.as_str(),
            &now,
            &int(*expires_at_ms, "idempotency expires_at_ms")?,
            &holder.as_ref().map(|h| h.owner.as_str()),
            &holder
                .as_ref()
                .and_then(|h| h.run_id.as_ref())
                .map(RunId::as_str),
            &holder.as_ref().map(|_| now),
            &holder
                .as_ref()
                .map(|h| int(h.until_ms, "idempotency holder until_ms"))
                .transpose()?,
        ],
    )
    .await?;
    Ok(Reservation::Reserved)
}

/// Reserves a key, creates the queued run and completes the record, in one
/// transaction (see `Store::submit_queued`).
pub(crate) async fn submit_queued(
    tx: &Transaction<'_>,
    mut reservation: NewReservation,
    run: NewRun,
    response: StoredResponse,
) -> Result<Reservation, StoreError> {
    response.validate()?;
    if let Some(holder) = reservation.holder.as_mut() {
        holder.run_id = Some(run.run_id.clone());
    }
    let now_ms = reservation.now_ms;
    let (tenant, key) = (reservation.tenant.clone(), reservation.key.clone());
    if get_run(tx, &run.run_id).await?.is_some() {
        return Err(StoreError::Conflict {
            what: "run",
            id: run.run_id.to_string(),
        });
    }
    match reserve(tx, &reservation).await? {
        Reservation::Reserved => {}
        other => return Ok(other),
    }
    create_run(tx, run).await?;
    complete(tx, &tenant, &key, response, now_ms).await?;
    Ok(Reservation::Reserved)
}

/// Creates `run` while the record of the fence's key is its owner's
/// reservation in progress.
pub(crate) async fn create_run_held(
    tx: &Transaction<'_>,
    run: NewRun,
    fence: &ReservationFence,
) -> Result<RunRecord, StoreError> {
    let ReservationFence { tenant, key, owner } = fence;
    lock_key(tx, tenant, key).await?;
    let held = record(tx, tenant, key).await?.is_some_and(|record| {
        record.state == IdempotencyState::InProgress
            && record.owner.as_deref() == Some(owner.as_str())
    });
    if !held {
        return Err(StoreError::ReservationLost {
            key: format!("{tenant}/{key}"),
        });
    }
    create_run(tx, run).await
}

/// The heartbeat of `owner`'s reservation of `key`; whether it applied.
pub(crate) async fn renew(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    key: &str,
    owner: &str,
    until_ms: Timestamp,
) -> Result<bool, StoreError> {
    lock_key(tx, tenant, key).await?;
    let renewed = execute(
        tx,
        "UPDATE idempotency SET holder_until_ms = $4 \
         WHERE tenant = $1 AND idempotency_key = $2 AND state = $3 AND owner = $5",
        &[
            &tenant.as_str(),
            &key,
            &IdempotencyState::InProgress.as_str(),
            &int(until_ms, "idempotency holder until_ms")?,
            &owner,
        ],
    )
    .await?;
    Ok(renewed > 0)
}

/// Resolves an in-progress record held by `owner`.
pub(crate) async fn settle(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    key: &str,
    owner: &str,
    settlement: IdempotencySettlement,
    now_ms: Timestamp,
) -> Result<IdempotencySettled, StoreError> {
    lock_key(tx, tenant, key).await?;
    let Some(record) = record(tx, tenant, key).await? else {
        return Ok(IdempotencySettled::Superseded);
    };
    if record.state != IdempotencyState::InProgress || record.owner.as_deref() != Some(owner) {
        return Ok(IdempotencySettled::Superseded);
    }
    match settlement {
        IdempotencySettlement::Complete(response) => {
            complete(tx, tenant, key, response, now_ms).await?;
        }
        IdempotencySettlement::Release => {
            // Under the key's lock: a holder creating its run
            // (`create_run_held`) takes it too.
            if let Some(run_id) = &record.run_id
                && get_run(tx, run_id).await?.is_some()
            {
                return Ok(IdempotencySettled::RunExists);
            }
            release(tx, tenant, key).await?;
        }
    }
    Ok(IdempotencySettled::Applied)
}

/// Completes an in-progress record.
pub(crate) async fn complete(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    key: &str,
    response: StoredResponse,
    now_ms: Timestamp,
) -> Result<(), StoreError> {
    response.validate()?;
    lock_key(tx, tenant, key).await?;
    let record = record(tx, tenant, key)
        .await?
        .ok_or_else(|| record_not_found(tenant, key))?;
    if record.state != IdempotencyState::InProgress {
        return Err(StoreError::Invalid {
            what: "idempotency record state",
            expected: format!("{} to complete it", IdempotencyState::InProgress),
            found: format!("{} (record {tenant}/{key})", record.state),
        });
    }
    execute(
        tx,
        "UPDATE idempotency SET state = $3, status = $4, content_type = $5, location = $6, \
         body = $7, updated_at_ms = $8, headers = $9 WHERE tenant = $1 AND idempotency_key = $2",
        &[
            &tenant.as_str(),
            &key,
            &IdempotencyState::Completed.as_str(),
            &i32::from(response.status),
            &response.content_type,
            &response.location,
            &response.body,
            &int(now_ms, "idempotency now_ms")?,
            &headers_text(&response.headers),
        ],
    )
    .await?;
    Ok(())
}

/// Deletes an in-progress record; whether one was deleted.
pub(crate) async fn release(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    key: &str,
) -> Result<bool, StoreError> {
    lock_key(tx, tenant, key).await?;
    let deleted = execute(
        tx,
        "DELETE FROM idempotency WHERE tenant = $1 AND idempotency_key = $2 AND state = $3",
        &[
            &tenant.as_str(),
            &key,
            &IdempotencyState::InProgress.as_str(),
        ],
    )
    .await?;
    Ok(deleted > 0)
}

/// Deletes a record in any state; whether there was one.
pub(crate) async fn clear(
    tx: &Transaction<'_>,
    tenant: &TenantId,
    key: &str,
) -> Result<bool, StoreError> {
    lock_key(tx, tenant, key).await?;
    let deleted = execute(
        tx,
        "DELETE FROM idempotency WHERE tenant = $1 AND idempotency_key = $2",
        &[&tenant.as_str(), &key],
    )
    .await?;
    Ok(deleted > 0)
}

/// Deletes up to `max` records expired at `now_ms`, soonest expiry first.
///
/// `SKIP LOCKED`: a record another transaction is changing (a reservation
/// replacing it) is left for the next sweep, and two nodes sweeping at
/// once split the work instead of waiting for each other. The outer
/// condition is checked again on the row as it is when deleted.
pub(crate) async fn sweep(
    tx: &Transaction<'_>,
    now_ms: Timestamp,
    max: usize,
) -> Result<usize, StoreError> {
    let deleted = execute(
        tx,
        "DELETE FROM idempotency WHERE (tenant, idempotency_key) IN ( \
             SELECT tenant, idempotency_key FROM idempotency WHERE expires_at_ms <= $1 \
             ORDER BY expires_at_ms LIMIT $2 FOR UPDATE SKIP LOCKED) \
         AND expires_at_ms <= $1",
        &[&at_most_max(now_ms), &limit(max)],
    )
    .await?;
    Ok(usize::try_from(deleted).unwrap_or(usize::MAX))
}

/// Stored records, oldest first.
pub(crate) async fn records(
    client: &impl GenericClient,
    tenant: Option<&TenantId>,
    state: Option<IdempotencyState>,
    max: usize,
) -> Result<Vec<IdempotencyRecord>, StoreError> {
    query_all(
        client,
        &format!(
            "SELECT {IDEMPOTENCY_COLUMNS} FROM idempotency \
             WHERE ($1::text IS NULL OR tenant = $1) AND ($2::text IS NULL OR state = $2) \
             ORDER BY created_at_ms, tenant, idempotency_key LIMIT $3"
        ),
        &[
            &tenant.map(TenantId::as_str),
            &state.map(IdempotencyState::as_str),
            &limit(max),
        ],
        decode_idempotency,
    )
    .await
}

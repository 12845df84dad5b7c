//! What nodes share besides runs: singleton leases (one owner of each
//! periodic service) and breaker openings, each changed under its name's
//! advisory lock; a changed opening is announced on [`HEALTH_CHANNEL`].

use deadpool_postgres::{GenericClient, Transaction};
use rein_store::Timestamp;
use rein_store::rules::{
    claimed, published, validate_breaker_text, validate_claim, validate_opening,
    validate_singleton_text,
};
use rein_store::{BreakerOpening, SingletonLease, StoreError};

use super::{LockSpace, execute, lock, query_all, query_opt};
use crate::codec::{
    BREAKER_OPENING_COLUMNS, SINGLETON_COLUMNS, at_most_max, decode_breaker_opening,
    decode_singleton, int,
};

/// The `NOTIFY` channel a published or cleared breaker opening (or
/// cooldown) is announced on when its transaction commits; the payload is
/// the arm's name (at most `MAX_BREAKER_ARM_LEN` bytes, well under
/// PostgreSQL's 8000-byte payload limit).
pub const HEALTH_CHANNEL: &str = "rein_health";

/// Announces a change of `arm`'s opening (delivered at commit, never for a
/// rolled-back transaction).
async fn notify_health(tx: &Transaction<'_>, arm: &str) -> Result<(), StoreError> {
    execute(tx, "SELECT pg_notify($1, $2)", &[&HEALTH_CHANNEL, &arm]).await?;
    Ok(())
}

/// The singleton lease `name`, expired or not.
pub(crate) async fn singleton(
    client: &impl GenericClient,
    name: &str,
) -> Result<Option<SingletonLease>, StoreError> {
    validate_singleton_text("singleton name", name)?;
    query_opt(
        client,
        &format!("SELECT {SINGLETON_COLUMNS} FROM singletons WHERE name = $1"),
        &[&name],
        decode_singleton,
    )
    .await
}

/// Takes or renews a singleton lease, deciding as every backend does
/// ([`claimed`]) from the row read under the name's lock.
pub(crate) async fn claim_singleton(
    tx: &Transaction<'_>,
    name: &str,
    owner: &str,
    now_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> Result<Option<SingletonLease>, StoreError> {
    validate_claim(name, owner, now_ms, expires_at_ms)?;
    lock(tx, LockSpace::Singleton, name).await?;
    let current = singleton(tx, name).await?;
    let Some(lease) = claimed(current, name, owner, now_ms, expires_at_ms) else {
        return Ok(None);
    };
    execute(
        tx,
        "INSERT INTO singletons (name, owner, acquired_at_ms, expires_at_ms) \
         VALUES ($1, $2, $3, $4) \
         ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, \
         acquired_at_ms = excluded.acquired_at_ms, expires_at_ms = excluded.expires_at_ms",
        &[
            &lease.name,
            &lease.owner,
            &int(lease.acquired_at_ms, "singleton acquired_at_ms")?,
            &int(lease.expires_at_ms, "singleton expires_at_ms")?,
        ],
    )
    .await?;
    Ok(Some(lease))
}

/// Deletes the singleton lease `name` if `owner` holds it.
pub(crate) async fn release_singleton(
    tx: &Transaction<'_>,
    name: &str,
    owner: &str,
) -> Result<bool, StoreError> {
    validate_singleton_text("singleton name", name)?;
    validate_singleton_text("singleton owner", owner)?;
    lock(tx, LockSpace::Singleton, name).await?;
    let deleted = execute(
        tx,
        "DELETE FROM singletons WHERE name = $1 AND owner = $2",
        &[&name, &owner],
    )
    .await?;
    Ok(deleted > 0)
}

/// Publishes a breaker opening; the later `open_until_ms` wins
/// ([`published`]).
pub(crate) async fn publish_breaker_open(
    tx: &Transaction<'_>,
    opening: &BreakerOpening,
) -> Result<BreakerOpening, StoreError> {
    let opening = validate_opening(opening)?;
    lock(tx, LockSpace::Breaker, &opening.arm).await?;
    let current = query_opt(
        tx,
        &format!("SELECT {BREAKER_OPENING_COLUMNS} FROM breaker_openings WHERE arm = $1"),
        &[&opening.arm],
        decode_breaker_opening,
    )
    .await?;
    let (kept, write) = published(current, opening);
    if write {
        execute(
            tx,
            "INSERT INTO breaker_openings (arm, open_until_ms, opened_by, reason, updated_at_ms) \
             VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (arm) DO UPDATE SET open_until_ms = excluded.open_until_ms, \
             opened_by = excluded.opened_by, reason = excluded.reason, \
             updated_at_ms = excluded.updated_at_ms",
            &[
                &kept.arm,
                &int(kept.open_until_ms, "breaker open_until_ms")?,
                &kept.opened_by,
                &kept.reason,
                &int(kept.updated_at_ms, "breaker updated_at_ms")?,
            ],
        )
        .await?;
        notify_health(tx, &kept.arm).await?;
    }
    Ok(kept)
}

/// The openings in force at `now_ms`, by arm.
pub(crate) async fn breaker_openings(
    client: &impl GenericClient,
    now_ms: Timestamp,
) -> Result<Vec<BreakerOpening>, StoreError> {
    query_all(
        client,
        &format!(
            "SELECT {BREAKER_OPENING_COLUMNS} FROM breaker_openings \
             WHERE open_until_ms > $1 ORDER BY arm"
        ),
        &[&at_most_max(now_ms)],
        decode_breaker_opening,
    )
    .await
}

/// Deletes `arm`'s opening if `opened_by` published it.
pub(crate) async fn clear_breaker_open(
    tx: &Transaction<'_>,
    arm: &str,
    opened_by: &str,
) -> Result<bool, StoreError> {
    validate_breaker_text("breaker arm", arm)?;
    validate_breaker_text("breaker opened_by", opened_by)?;
    lock(tx, LockSpace::Breaker, arm).await?;
    let deleted = execute(
        tx,
        "DELETE FROM breaker_openings WHERE arm = $1 AND opened_by = $2",
        &[&arm, &opened_by],
    )
    .await?;
    if deleted > 0 {
        notify_health(tx, arm).await?;
    }
    Ok(deleted > 0)
}

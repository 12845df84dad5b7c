//! Share leases: each node's lease of a resource group renewed, and the
//! live holders listed, under the group's advisory lock, so of two nodes
//! renewing at once the second lists the first.

use deadpool_postgres::Transaction;
use rein_store::StoreError;
use rein_store::Timestamp;
use rein_store::rules::{validate_share_renewal, validate_share_text};

use super::{LockSpace, execute, lock, query_all};
use crate::codec::{PgResult, int};

/// Renews `node`'s lease and lists the live holders (see
/// `Store::renew_share_lease`).
pub(crate) async fn renew_share_lease(
    tx: &Transaction<'_>,
    group: &str,
    node: &str,
    now_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> Result<Vec<String>, StoreError> {
    validate_share_renewal(group, node, now_ms, expires_at_ms)?;
    let now = int(now_ms, "share lease now_ms")?;
    let expires = int(expires_at_ms, "share lease expires_at_ms")?;
    lock(tx, LockSpace::Share, group).await?;
    execute(
        tx,
        "INSERT INTO share_leases (resource_group, node, expires_at_ms) VALUES ($1, $2, $3) \
         ON CONFLICT (resource_group, node) DO UPDATE SET expires_at_ms = excluded.expires_at_ms",
        &[&group, &node, &expires],
    )
    .await?;
    execute(
        tx,
        "DELETE FROM share_leases WHERE resource_group = $1 AND expires_at_ms <= $2",
        &[&group, &now],
    )
    .await?;
    query_all(
        tx,
        "SELECT node FROM share_leases WHERE resource_group = $1 ORDER BY node",
        &[&group],
        |row| row.try_get::<_, String>(0).pg(),
    )
    .await
}

/// Deletes `node`'s lease of `group`; whether there was one.
pub(crate) async fn release_share_lease(
    tx: &Transaction<'_>,
    group: &str,
    node: &str,
) -> Result<bool, StoreError> {
    validate_share_text("share lease group", group)?;
    validate_share_text("share lease node", node)?;
    lock(tx, LockSpace::Share, group).await?;
    let deleted = execute(
        tx,
        "DELETE FROM share_leases WHERE resource_group = $1 AND node = $2",
        &[&group, &node],
    )
    .await?;
    Ok(deleted > 0)
}

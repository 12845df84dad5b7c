//! The SQL of the share lease operations (schema v12).

use rein_store::Timestamp;
use rusqlite::{Connection, params};

use super::codec::{SqlResult, int};
use rein_store::StoreError;
use rein_store::rules::{validate_share_renewal, validate_share_text};

/// Renews `node`'s lease and lists the live holders (see
/// [`Store::renew_share_lease`]). The caller provides the transaction: its
/// `IMMEDIATE` write lock makes the write and the read one step across
/// processes.
///
/// [`Store::renew_share_lease`]: crate::Store::renew_share_lease
pub fn renew_share_lease(
    conn: &Connection,
    group: &str,
    node: &str,
    now_ms: Timestamp,
    expires_at_ms: Timestamp,
) -> Result<Vec<String>, StoreError> {
    validate_share_renewal(group, node, now_ms, expires_at_ms)?;
    let now = int(now_ms, "share lease now_ms")?;
    conn.prepare_cached(
        "INSERT INTO share_leases (resource_group, node, expires_at_ms) VALUES (?1, ?2, ?3) \
         ON CONFLICT (resource_group, node) DO UPDATE SET expires_at_ms = excluded.expires_at_ms",
    )
    .sql()?
    .execute(params![
        group,
        node,
        int(expires_at_ms, "share lease expires_at_ms")?
    ])
    .sql()?;
    conn.prepare_cached(
        "DELETE FROM share_leases WHERE resource_group = ?1 AND expires_at_ms <= ?2",
    )
    .sql()?
    .execute(params![group, now])
    .sql()?;
    let mut statement = conn
        .prepare_cached("SELECT node FROM share_leases WHERE resource_group = ?1 ORDER BY node")
        .sql()?;
    let nodes = statement
        .query_map([group], |row| row.get::<_, String>(0))
        .sql()?
        .collect::<Result<Vec<_>, _>>()
        .sql()?;
    Ok(nodes)
}

/// Deletes `node`'s lease of `group`; whether there was one.
pub fn release_share_lease(conn: &Connection, group: &str, node: &str) -> Result<bool, StoreError> {
    validate_share_text("share lease group", group)?;
    validate_share_text("share lease node", node)?;
    let deleted = conn
        .prepare_cached("DELETE FROM share_leases WHERE resource_group = ?1 AND node = ?2")
        .sql()?
        .execute([group, node])
        .sql()?;
    Ok(deleted > 0)
}

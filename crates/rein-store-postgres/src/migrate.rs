//! The schema's versioned migrations, embedded SQL files applied in order.
//!
//! # Why a version table
//!
//! As for SQLite: a rein must never write to a database whose layout it
//! does not know. `rein_schema` records every migration applied; a version
//! newer than [`SCHEMA_VERSION`] is refused with
//! [`StoreError::SchemaTooNew`], older ones are migrated forward in one
//! transaction. Several nodes starting at once migrate exactly once: the
//! migration holds an advisory lock for its transaction.
//!
//! NOTE: a migration, once released, never changes; add a file and an
//! entry to [`MIGRATIONS`] instead.

use std::time::{SystemTime, UNIX_EPOCH};

use deadpool_postgres::{GenericClient, Object};
use rein_store::StoreError;

use crate::codec::PgResult;

/// Migration `n` (1-based) moves the schema from version `n - 1` to `n`.
const MIGRATIONS: [&str; 12] = [
    include_str!("../migrations/0001_schema.sql"),
    include_str!("../migrations/0002_latency.sql"),
    include_str!("../migrations/0003_guardrails.sql"),
    include_str!("../migrations/0004_share_leases.sql"),
    include_str!("../migrations/0005_cancel_requests.sql"),
    include_str!("../migrations/0006_trace_parent.sql"),
    include_str!("../migrations/0007_retry_outcomes.sql"),
    include_str!("../migrations/0008_approvals.sql"),
    include_str!("../migrations/0009_webhooks.sql"),
    include_str!("../migrations/0010_token_ratios.sql"),
    include_str!("../migrations/0011_replayed_headers.sql"),
    include_str!("../migrations/0012_spend.sql"),
];

/// The schema version this binary writes: the number of migrations.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// The advisory lock a migration holds (one key, apart from the spaces of
/// `ops::LockSpace`).
const MIGRATION_LOCK: i64 = 0x7265_696e_0000;

/// Where a database's schema stands against this binary's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaState {
    /// The version the database holds (`0`: none applied).
    pub found: u32,
    /// The version this binary writes.
    pub supported: u32,
}

impl SchemaState {
    /// Migrations this binary would apply.
    pub fn pending(&self) -> u32 {
        self.supported.saturating_sub(self.found)
    }
}

/// The database's schema version, without changing anything.
///
/// # Errors
///
/// [`StoreError::Corrupt`] for a version table that makes no sense;
/// [`StoreError::Unavailable`] or [`StoreError::Backend`] when the query
/// fails.
pub(crate) async fn state(client: &impl GenericClient) -> Result<SchemaState, StoreError> {
    let exists: bool = client
        .query_one("SELECT to_regclass('rein_schema') IS NOT NULL", &[])
        .await
        .pg()?
        .try_get(0)
        .pg()?;
    let found = if exists {
        let max: Option<i64> = client
            .query_one("SELECT MAX(version) FROM rein_schema", &[])
            .await
            .pg()?
            .try_get(0)
            .pg()?;
        version(max.unwrap_or(0))?
    } else {
        0
    };
    Ok(SchemaState {
        found,
        supported: SCHEMA_VERSION,
    })
}

fn version(found: i64) -> Result<u32, StoreError> {
    u32::try_from(found).map_err(|_| StoreError::Corrupt {
        table: "rein_schema",
        column: "version",
        reason: format!("expected a version from 0, found {found}"),
    })
}

/// Brings the database to [`SCHEMA_VERSION`], or refuses a newer one;
/// returns the state it found.
///
/// # Errors
///
/// [`StoreError::SchemaTooNew`] when a newer rein migrated the database;
/// [`StoreError::Backend`] or [`StoreError::Unavailable`] when a statement
/// fails (and nothing is applied).
pub(crate) async fn migrate(client: &mut Object) -> Result<SchemaState, StoreError> {
    let tx = client.transaction().await.pg()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await
        .pg()?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS rein_schema (
            version       BIGINT PRIMARY KEY,
            applied_at_ms BIGINT NOT NULL
        )",
    )
    .await
    .pg()?;
    let before = state(&tx).await?;
    if before.found > SCHEMA_VERSION {
        return Err(StoreError::SchemaTooNew {
            supported: SCHEMA_VERSION,
            found: i64::from(before.found),
        });
    }
    let applied_at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    for (index, migration) in MIGRATIONS.iter().enumerate().skip(before.found as usize) {
        tx.batch_execute(migration).await.pg()?;
        let version = i64::try_from(index + 1).unwrap_or(i64::MAX);
        tx.execute(
            "INSERT INTO rein_schema (version, applied_at_ms) VALUES ($1, $2)",
            &[&version, &applied_at_ms],
        )
        .await
        .pg()?;
    }
    tx.commit().await.pg()?;
    Ok(before)
}

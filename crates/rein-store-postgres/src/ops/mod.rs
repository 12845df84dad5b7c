//! The SQL of each store operation.
//!
//! Reads take any client (a pooled connection or a transaction); writes
//! take the transaction the store opened for them, and each write takes the
//! locks that make its read-check-write one atomic step against every
//! other process on the database:
//!
//! | write | lock |
//! | --- | --- |
//! | a step commit | the run's row, `FOR NO KEY UPDATE` (compatible with the `KEY SHARE` a foreign key check takes, so a lease insert never waits for it) |
//! | a lease change, a take-over, a commit's claim check | the lease id's advisory lock |
//! | an idempotency operation | the key's advisory lock |
//! | a singleton claim or release | the name's advisory lock |
//! | a breaker publish or clear | the arm's advisory lock |
//! | a share lease renewal or release | the resource group's advisory lock |
//! | a cancel request | the run's row, as a step commit |
//! | an approval decision or expiry | the run's row, as a step commit |
//!
//! Transaction-scoped advisory locks stand for the row a write may be about
//! to create: a row lock cannot be taken on a row that does not exist yet,
//! and two first reservations of one key must still exclude each other.
//! A commit locks its run, then its claim's lease; no write locks in the
//! other order, so the locks cannot deadlock.

pub(crate) mod approvals;
pub(crate) mod cancel;
pub(crate) mod commit;
pub(crate) mod idempotency;
pub(crate) mod latency;
pub(crate) mod leases;
pub(crate) mod retry;
pub(crate) mod runs;
pub(crate) mod share;
pub(crate) mod shared;
pub(crate) mod spend;
pub(crate) mod stats;
pub(crate) mod token_ratios;
pub(crate) mod webhooks;

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::RunId;
use rein_store::StoreError;
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::codec::PgResult;

/// The advisory lock spaces (the first key of `pg_advisory_xact_lock`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum LockSpace {
    Lease = 0x7265_0001,
    Idempotency = 0x7265_0002,
    Singleton = 0x7265_0003,
    Breaker = 0x7265_0004,
    Latency = 0x7265_0005,
    Share = 0x7265_0006,
    Retry = 0x7265_0007,
    TokenRatio = 0x7265_0008,
}

/// Takes the transaction-scoped advisory lock of `key` in `space`: held
/// until the transaction ends. Two keys whose hashes collide only wait for
/// each other.
pub(crate) async fn lock(
    tx: &Transaction<'_>,
    space: LockSpace,
    key: &str,
) -> Result<(), StoreError> {
    let statement = tx
        .prepare_cached("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .await
        .pg()?;
    tx.execute(&statement, &[&(space as i32), &key])
        .await
        .pg()?;
    Ok(())
}

/// Runs a cached statement and decodes every row.
pub(crate) async fn query_all<T>(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    decode: fn(&Row) -> Result<T, StoreError>,
) -> Result<Vec<T>, StoreError> {
    let statement = client.prepare_cached(sql).await.pg()?;
    let rows = client.query(&statement, params).await.pg()?;
    rows.iter().map(decode).collect()
}

/// Runs a cached statement and decodes the first row, if any.
pub(crate) async fn query_opt<T>(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
    decode: fn(&Row) -> Result<T, StoreError>,
) -> Result<Option<T>, StoreError> {
    let statement = client.prepare_cached(sql).await.pg()?;
    let row = client.query_opt(&statement, params).await.pg()?;
    row.as_ref().map(decode).transpose()
}

/// Runs a cached statement and returns how many rows it changed.
pub(crate) async fn execute(
    client: &impl GenericClient,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, StoreError> {
    let statement = client.prepare_cached(sql).await.pg()?;
    client.execute(&statement, params).await.pg()
}

/// `NotFound` unless the run exists.
pub(crate) async fn require_run(
    client: &impl GenericClient,
    run_id: &RunId,
) -> Result<(), StoreError> {
    let found = query_opt(
        client,
        "SELECT 1 FROM runs WHERE run_id = $1",
        &[&run_id.as_str()],
        |_| Ok(()),
    )
    .await?;
    found.ok_or_else(|| StoreError::run_not_found(run_id))
}

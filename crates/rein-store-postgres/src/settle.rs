//! A commit whose answer was lost: learning whether it landed.
//!
//! # Why
//!
//! When the connection breaks while PostgreSQL commits a transaction (a
//! failover, `pg_terminate_backend`, a proxy dropping its connections),
//! the client gets an error but the server may have committed: the answer,
//! not the commit, was lost. Reporting that as transient would let the
//! engine offer the same commit again and store its events twice;
//! reporting it as failed would end a run whose step did land.
//!
//! Each write transaction therefore learns its transaction id
//! (`txid_current()`, pipelined with the write's first statement, so it
//! costs no round trip of its own) and, when the commit's answer is lost,
//! asks the database on a fresh connection what became of it
//! (`txid_status`):
//!
//! - `committed`: the write landed; the caller gets `Ok`;
//! - `aborted`: nothing landed; the caller gets the transient error and
//!   may offer the write again;
//! - `in progress`: the old backend is still finishing (its client gone);
//!   it is asked again, and after [`ABANDONED_AFTER`] terminated, which
//!   settles its transaction one way or the other;
//! - no answer within [`SETTLE_PATIENCE`] (the database stays away), or a
//!   transaction too old for the database to know:
//!   [`StoreError::InDoubt`], never repeated.

use std::time::Duration;

use deadpool_postgres::Transaction;
use rein_store::StoreError;
use tokio_postgres::error::SqlState;

use crate::codec::PgResult;
use crate::store::PostgresStore;

/// How long a lost commit's outcome is sought before it is reported in
/// doubt: shorter than the engine's patience with a store that is away,
/// so that a run learns the outcome while it still waits.
pub(crate) const SETTLE_PATIENCE: Duration = Duration::from_secs(10);
/// How long a transaction whose client is gone may stay `in progress`
/// before its backend is terminated (which ends it): a backend blocked
/// in its commit (a synchronous standby away) would otherwise keep the
/// outcome open for as long as it is blocked.
pub(crate) const ABANDONED_AFTER: Duration = Duration::from_secs(1);
/// The pause between two questions.
const PAUSE: Duration = Duration::from_millis(100);

/// Who a write transaction is: its id and its backend's process id.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TxIdentity {
    txid: i64,
    backend: i32,
}

impl TxIdentity {
    /// Asks `tx` who it is (the first statement of a write, so that the
    /// transaction has its id before anything can be lost).
    pub(crate) async fn of(tx: &Transaction<'_>) -> Result<TxIdentity, StoreError> {
        let row = tx
            .query_one("SELECT txid_current(), pg_backend_pid()", &[])
            .await
            .pg()?;
        Ok(TxIdentity {
            txid: row.try_get(0).pg()?,
            backend: row.try_get(1).pg()?,
        })
    }
}

/// Whether a COMMIT that failed with `error` may have landed: the
/// connection broke or the backend was told to stop, so the answer may be
/// all that was lost. A refusal the server sent for the commit itself (a
/// serialization failure, a deadlock) is certain: nothing landed.
pub(crate) fn answer_lost(error: &tokio_postgres::Error) -> bool {
    match error.code() {
        None => true,
        Some(code) => {
            code.code().starts_with("08")
                || [
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                ]
                .contains(code)
        }
    }
}

/// What the database says of a transaction.
enum Status {
    Committed,
    Aborted,
    InProgress,
    /// Too old (or from before a wraparound) to be known.
    Unknown,
}

impl PostgresStore {
    /// Learns whether the transaction `who` whose commit failed with
    /// `lost` landed; see the module docs.
    pub(crate) async fn settle(
        &self,
        who: TxIdentity,
        lost: tokio_postgres::Error,
    ) -> Result<(), StoreError> {
        let lost = crate::codec::pg_error(lost);
        let began = tokio::time::Instant::now();
        let mut terminated = false;
        let mut last = String::from("no answer yet");
        loop {
            let waited = began.elapsed();
            if waited >= SETTLE_PATIENCE {
                break;
            }
            let asked =
                tokio::time::timeout(SETTLE_PATIENCE - waited, self.txid_status(who.txid)).await;
            match asked {
                Ok(Ok(Status::Committed)) => {
                    tracing::info!(txid = who.txid, "a commit whose answer was lost had landed");
                    return Ok(());
                }
                Ok(Ok(Status::Aborted)) => return Err(lost),
                Ok(Ok(Status::Unknown)) => {
                    last = "the database no longer knows the transaction".to_owned();
                    break;
                }
                Ok(Ok(Status::InProgress)) => {
                    last = "the transaction was still in progress".to_owned();
                    if !terminated && began.elapsed() >= ABANDONED_AFTER {
                        terminated = self.terminate(who.backend).await;
                    }
                }
                Ok(Err(e)) => last = e.to_string(),
                Err(_) => break,
            }
            tokio::time::sleep(PAUSE).await;
        }
        tracing::error!(
            txid = who.txid,
            "the outcome of a commit whose answer was lost is unknown: {last}"
        );
        Err(StoreError::InDoubt(format!(
            "{lost}; whether transaction {} committed is unknown after {:.1?}: {last}",
            who.txid,
            began.elapsed()
        )))
    }

    /// `txid_status(txid)` on a connection of the pool (never the one that
    /// broke: the pool discards closed connections).
    async fn txid_status(&self, txid: i64) -> Result<Status, StoreError> {
        let client = self.client().await?;
        let row = client
            .query_one("SELECT txid_status($1)", &[&txid])
            .await
            .pg()?;
        let status: Option<String> = row.try_get(0).pg()?;
        Ok(match status.as_deref() {
            Some("committed") => Status::Committed,
            Some("aborted") => Status::Aborted,
            Some(_) => Status::InProgress,
            None => Status::Unknown,
        })
    }

    /// Terminates the backend `pid` whose client is gone (allowed for the
    /// role's own backends); whether it was signalled.
    async fn terminate(&self, pid: i32) -> bool {
        let Ok(client) = self.client().await else {
            return false;
        };
        match client
            .query_one("SELECT pg_terminate_backend($1)", &[&pid])
            .await
        {
            Ok(row) => row.try_get::<_, bool>(0).unwrap_or(false),
            Err(e) => {
                tracing::warn!(pid, "cannot end the backend of a lost commit: {e}");
                false
            }
        }
    }
}

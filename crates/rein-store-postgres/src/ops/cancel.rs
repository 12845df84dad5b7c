//! Cancel requests: recorded under the run's row lock, so a request and
//! the run finishing exclude each other, and announced on the
//! [`CANCEL_CHANNEL`] when the transaction commits.

use deadpool_postgres::{GenericClient, Transaction};
use rein_core::RunId;
use rein_store::Timestamp;
use rein_store::rules::{cancel_requestable, validate_cancel_request};
use rein_store::{CancelRequest, StoreError};
use tokio_postgres::Row;

use super::commit::lock_run;
use super::{execute, query_all, query_opt};
use crate::codec::{PgResult, int};

/// The `NOTIFY` channel a recorded cancel request is announced on; the
/// payload is the run id.
pub const CANCEL_CHANNEL: &str = "rein_cancel";

/// Records a cancel request (see `Store::request_cancel`) and notifies
/// [`CANCEL_CHANNEL`] (delivered at commit, never for a rolled-back one).
pub(crate) async fn request_cancel(
    tx: &Transaction<'_>,
    request: &CancelRequest,
) -> Result<CancelRequest, StoreError> {
    validate_cancel_request(request)?;
    let (status, _) = lock_run(tx, &request.run_id).await?;
    cancel_requestable(&request.run_id, status)?;
    let inserted = execute(
        tx,
        "INSERT INTO cancel_requests (run_id, requested_by, requested_at_ms) \
         VALUES ($1, $2, $3) ON CONFLICT (run_id) DO NOTHING",
        &[
            &request.run_id.as_str(),
            &request.requested_by,
            &int(request.requested_at_ms, "cancel requested_at_ms")?,
        ],
    )
    .await?;
    if inserted > 0 {
        execute(
            tx,
            "SELECT pg_notify($1, $2)",
            &[&CANCEL_CHANNEL, &request.run_id.as_str()],
        )
        .await?;
    }
    cancel_request(tx, &request.run_id).await?.ok_or_else(|| {
        StoreError::Backend("a cancel request just written cannot be read back".into())
    })
}

/// The run's cancel request, if any.
pub(crate) async fn cancel_request(
    client: &impl GenericClient,
    run_id: &RunId,
) -> Result<Option<CancelRequest>, StoreError> {
    query_opt(
        client,
        "SELECT run_id, requested_by, requested_at_ms FROM cancel_requests WHERE run_id = $1",
        &[&run_id.as_str()],
        decode_cancel,
    )
    .await
}

/// The cancel requests of any of `run_ids`, in one statement.
pub(crate) async fn cancel_requests(
    client: &impl GenericClient,
    run_ids: &[RunId],
) -> Result<Vec<CancelRequest>, StoreError> {
    let ids: Vec<&str> = run_ids.iter().map(RunId::as_str).collect();
    query_all(
        client,
        "SELECT run_id, requested_by, requested_at_ms FROM cancel_requests WHERE run_id = ANY($1)",
        &[&ids],
        decode_cancel,
    )
    .await
}

/// A `cancel_requests` row (`run_id, requested_by, requested_at_ms`).
fn decode_cancel(row: &Row) -> Result<CancelRequest, StoreError> {
    let run_id: String = row.try_get(0).pg()?;
    let at: i64 = row.try_get(2).pg()?;
    Ok(CancelRequest {
        run_id: RunId::new(run_id.clone()).map_err(|e| StoreError::Corrupt {
            table: "cancel_requests",
            column: "run_id",
            reason: format!("{e} (row run_id={run_id})"),
        })?,
        requested_by: row.try_get(1).pg()?,
        requested_at_ms: u64::try_from(at).map(Timestamp::from_millis).map_err(|_| {
            StoreError::Corrupt {
                table: "cancel_requests",
                column: "requested_at_ms",
                reason: format!("expected milliseconds from 0, found {at} (row run_id={run_id})"),
            }
        })?,
    })
}

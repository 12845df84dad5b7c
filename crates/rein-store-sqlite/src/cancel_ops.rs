//! The SQL of the cancel request operations (schema v12).

use rein_core::RunId;
use rusqlite::{Connection, OptionalExtension};

use super::codec::{SqlResult, int};
use super::ops;
use rein_store::StoreError;
use rein_store::rules::{
    cancel_requestable as requestable, validate_cancel_request as validate_request,
};
use rein_store::{CancelRequest, Timestamp};

/// Records a cancel request (see [`Store::request_cancel`]). The caller
/// provides the transaction: its `IMMEDIATE` write lock makes the status
/// check and the insert one step against the run finishing.
///
/// [`Store::request_cancel`]: crate::Store::request_cancel
pub fn request_cancel(
    conn: &Connection,
    request: &CancelRequest,
) -> Result<CancelRequest, StoreError> {
    validate_request(request)?;
    let run = ops::get_run(conn, &request.run_id)?.ok_or_else(|| StoreError::NotFound {
        what: "run",
        id: request.run_id.to_string(),
    })?;
    requestable(&request.run_id, run.status)?;
    conn.prepare_cached(
        "INSERT INTO cancel_requests (run_id, requested_by, requested_at_ms) \
         VALUES (?1, ?2, ?3) ON CONFLICT (run_id) DO NOTHING",
    )
    .sql()?
    .execute((
        request.run_id.as_str(),
        request.requested_by.as_str(),
        int(request.requested_at_ms, "cancel requested_at_ms")?,
    ))
    .sql()?;
    cancel_request(conn, &request.run_id)?.ok_or_else(|| {
        StoreError::Backend("a cancel request just written cannot be read back".into())
    })
}

/// The run's cancel request, if any.
pub fn cancel_request(
    conn: &Connection,
    run_id: &RunId,
) -> Result<Option<CancelRequest>, StoreError> {
    let row: Option<(String, i64)> = conn
        .prepare_cached(
            "SELECT requested_by, requested_at_ms FROM cancel_requests WHERE run_id = ?1",
        )
        .sql()?
        .query_row([run_id.as_str()], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()
        .sql()?;
    row.map(|(requested_by, at)| {
        let requested_at_ms =
            u64::try_from(at)
                .map(Timestamp::from_millis)
                .map_err(|_| StoreError::Corrupt {
                    table: "cancel_requests",
                    column: "requested_at_ms",
                    reason: format!("expected milliseconds from 0, found {at}"),
                })?;
        Ok(CancelRequest {
            run_id: run_id.clone(),
            requested_by,
            requested_at_ms,
        })
    })
    .transpose()
}

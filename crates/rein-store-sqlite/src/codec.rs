//! SQLite's side of the shared row codec (`rein_store::codec`): rusqlite
//! values as [`Columns`], its errors as [`StoreError`]s, and the shared
//! decoders for rusqlite rows.
//!
//! NOTE: the `*_COLUMNS` lists of `rein_store::codec` must match the schema
//! in `schema.rs`.

use rein_core::{Event, LedgerRecord};
use rusqlite::{ErrorCode, Row};

use rein_store::codec::{self, Columns};
pub use rein_store::codec::{
    APPROVAL_COLUMNS, BREAKER_OPENING_COLUMNS, CHECKPOINT_COLUMNS, CHECKPOINT_DELTA_COLUMNS,
    EVENT_COLUMNS, IDEMPOTENCY_COLUMNS, INTENT_COLUMNS, LEASE_COLUMNS, LEDGER_COLUMNS, RUN_COLUMNS,
    SINGLETON_COLUMNS, event_data_text, headers_text, int, json_text, serde_name,
};
use rein_store::{
    BreakerOpening, Checkpoint, CheckpointDelta, IdempotencyRecord, Lease, PlannedIntent,
    RunRecord, SingletonLease, StoreError,
};

/// Maps SQLite errors into [`StoreError`] without making rusqlite part of
/// the public error type.
pub trait SqlResult<T> {
    /// Busy and locked databases are transient ([`StoreError::Unavailable`]);
    /// everything else is [`StoreError::Backend`].
    fn sql(self) -> Result<T, StoreError>;
}

impl<T> SqlResult<T> for rusqlite::Result<T> {
    fn sql(self) -> Result<T, StoreError> {
        self.map_err(sql_error)
    }
}

/// See [`SqlResult::sql`].
pub fn sql_error(error: rusqlite::Error) -> StoreError {
    match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::Unavailable(format!("sqlite: {error}"))
        }
        _ => StoreError::Backend(format!("sqlite: {error}")),
    }
}

/// A rusqlite row as the shared codec reads it.
#[derive(Clone, Copy)]
pub struct SqliteRow<'r, 's>(pub &'r Row<'s>);

impl Columns for SqliteRow<'_, '_> {
    fn column_name(&self, index: usize) -> Option<&str> {
        self.0.as_ref().column_name(index).ok()
    }

    fn text(&self, index: usize) -> Result<Option<String>, String> {
        self.0.get(index).map_err(|error| error.to_string())
    }

    fn integer(&self, index: usize) -> Result<Option<i64>, String> {
        self.0.get(index).map_err(|error| error.to_string())
    }

    fn blob(&self, index: usize) -> Result<Option<Vec<u8>>, String> {
        self.0.get(index).map_err(|error| error.to_string())
    }
}

/// The shared decoders, for rusqlite rows (what `query_map` and friends
/// call): one line each, the decoding itself is `rein_store::codec`'s.
macro_rules! decoders {
    ($($name:ident -> $type:ty,)*) => {
        $(
            #[doc = concat!("`rein_store::codec::", stringify!($name), "` of a rusqlite row.")]
            pub fn $name(row: &Row<'_>) -> Result<$type, StoreError> {
                codec::$name(SqliteRow(row))
            }
        )*
    };
}

decoders! {
    decode_run -> RunRecord,
    decode_event -> Event,
    decode_intent -> (u32, PlannedIntent),
    decode_ledger -> LedgerRecord,
    decode_checkpoint -> Checkpoint,
    decode_checkpoint_delta -> CheckpointDelta,
    decode_lease -> Lease,
    decode_idempotency -> IdempotencyRecord,
    decode_singleton -> SingletonLease,
    decode_breaker_opening -> BreakerOpening,
    decode_approval -> rein_core::approval::Approval,
}

//! PostgreSQL's side of the shared row codec (`rein_store::codec`):
//! tokio-postgres values as [`Columns`], driver errors as [`StoreError`]s,
//! and the shared decoders for tokio-postgres rows.
//!
//! NOTE: the `*_COLUMNS` lists of `rein_store::codec` must match
//! `migrations/`.

use rein_core::{Event, LedgerRecord};
use rein_store::Timestamp;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;

use rein_store::codec::{self, Columns};
pub(crate) use rein_store::codec::{
    APPROVAL_COLUMNS, BREAKER_OPENING_COLUMNS, CHECKPOINT_COLUMNS, CHECKPOINT_DELTA_COLUMNS,
    EVENT_COLUMNS, IDEMPOTENCY_COLUMNS, INTENT_COLUMNS, LEASE_COLUMNS, LEDGER_COLUMNS, RUN_COLUMNS,
    SINGLETON_COLUMNS, WEBHOOK_DELIVERY_COLUMNS, WEBHOOK_EVENT_COLUMNS, event_data_text,
    headers_text, int, json_text, opt_json_text, serde_name,
};
use rein_store::{
    BreakerOpening, Checkpoint, CheckpointDelta, IdempotencyRecord, Lease, PlannedIntent,
    RunRecord, SingletonLease, StoreError,
};

/// Maps driver errors into [`StoreError`] without making the driver part of
/// the public error type.
pub(crate) trait PgResult<T> {
    /// Lost connections, a server shutting down or refusing connections, a
    /// deadlock or serialization failure are transient
    /// ([`StoreError::Unavailable`]); everything else is
    /// [`StoreError::Backend`].
    fn pg(self) -> Result<T, StoreError>;
}

impl<T> PgResult<T> for Result<T, tokio_postgres::Error> {
    fn pg(self) -> Result<T, StoreError> {
        self.map_err(pg_error)
    }
}

impl<T> PgResult<T> for Result<T, deadpool_postgres::PoolError> {
    fn pg(self) -> Result<T, StoreError> {
        self.map_err(pool_error)
    }
}

/// See [`PgResult::pg`].
pub(crate) fn pg_error(error: tokio_postgres::Error) -> StoreError {
    let transient = match error.code() {
        Some(code) => {
            code.code().starts_with("08")
                || [
                    SqlState::T_R_SERIALIZATION_FAILURE,
                    SqlState::T_R_DEADLOCK_DETECTED,
                    SqlState::ADMIN_SHUTDOWN,
                    SqlState::CRASH_SHUTDOWN,
                    SqlState::CANNOT_CONNECT_NOW,
                    SqlState::TOO_MANY_CONNECTIONS,
                    SqlState::QUERY_CANCELED,
                ]
                .contains(code)
        }
        // No SQL state: the connection broke (closed, I/O, a timeout), or
        // the driver refused a value (not transient).
        None => {
            error.is_closed()
                || std::error::Error::source(&error)
                    .is_some_and(|source| source.is::<std::io::Error>())
        }
    };
    // The driver's messages never hold the password (it is sent, never
    // echoed); the database error's detail is kept for the operator.
    let message = match error.as_db_error() {
        Some(db) => format!("postgres: {} ({})", db.message(), db.code().code()),
        None => format!("postgres: {}", with_causes(&error)),
    };
    if transient {
        StoreError::Unavailable(message)
    } else {
        StoreError::Backend(message)
    }
}

/// A connection the pool could not hand out: transient, the database may
/// be restarting; except when the server refused the connection for good
/// ([`refused_for_good`]).
pub(crate) fn pool_error(error: deadpool_postgres::PoolError) -> StoreError {
    match error {
        deadpool_postgres::PoolError::Backend(error) => {
            if let Some(refusal) = refused_for_good(&error) {
                return refusal;
            }
            match pg_error(error) {
                StoreError::Backend(message) => StoreError::Unavailable(message),
                other => other,
            }
        }
        other => StoreError::Unavailable(format!("postgres pool: {other}")),
    }
}

/// A connection the server refuses whatever the wait: the database does
/// not exist, the credentials are wrong, or TLS cannot be agreed on. Permanent, so that `rein
/// serve` stops with the reason instead of retrying forever; the message
/// says how to fix it (the store adds which database).
fn refused_for_good(error: &tokio_postgres::Error) -> Option<StoreError> {
    if let Some(refusal) = tls_refused(error) {
        return Some(refusal);
    }
    let db = error.as_db_error()?;
    let fix = match *db.code() {
        // `hostssl`-only: a plain connection has no pg_hba.conf entry.
        SqlState::INVALID_AUTHORIZATION_SPECIFICATION if db.message().contains("no encryption") => {
            "the server takes only TLS connections: set sslmode=verify-full (or require) in the URL"
        }
        SqlState::INVALID_CATALOG_NAME => {
            "create it (`createdb NAME`) and run `rein migrate --data URL`, or fix the database name in `--data`"
        }
        SqlState::INVALID_PASSWORD | SqlState::INVALID_AUTHORIZATION_SPECIFICATION => {
            "fix the user or password in `--data`"
        }
        _ => return None,
    };
    Some(StoreError::Backend(format!(
        "postgres refused the connection: {} ({}); {fix}",
        db.message(),
        db.code().code()
    )))
}

/// A time compared against stored times: beyond `i64::MAX` compares as
/// `i64::MAX`, after every storable time.
pub(crate) fn at_most_max(at: Timestamp) -> i64 {
    i64::try_from(at.as_millis()).unwrap_or(i64::MAX)
}

/// A count or limit as `BIGINT`.
pub(crate) fn limit(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A tokio-postgres row as the shared codec reads it.
#[derive(Clone, Copy)]
pub(crate) struct PgRow<'r>(pub(crate) &'r Row);

impl Columns for PgRow<'_> {
    fn column_name(&self, index: usize) -> Option<&str> {
        self.0.columns().get(index).map(|column| column.name())
    }

    fn text(&self, index: usize) -> Result<Option<String>, String> {
        self.0.try_get(index).map_err(|error| error.to_string())
    }

    fn integer(&self, index: usize) -> Result<Option<i64>, String> {
        // The schema stores HTTP statuses and process group ids as INTEGER,
        // everything else as BIGINT; both read as i64 here.
        let column_type = self.0.columns().get(index).map(|column| column.type_());
        let value = if column_type == Some(&Type::INT4) {
            self.0
                .try_get::<_, Option<i32>>(index)
                .map(|value| value.map(i64::from))
        } else if column_type == Some(&Type::INT2) {
            self.0
                .try_get::<_, Option<i16>>(index)
                .map(|value| value.map(i64::from))
        } else {
            self.0.try_get::<_, Option<i64>>(index)
        };
        value.map_err(|error| error.to_string())
    }

    fn blob(&self, index: usize) -> Result<Option<Vec<u8>>, String> {
        self.0.try_get(index).map_err(|error| error.to_string())
    }
}

/// A reader of `row` of `table`, identified in errors by the columns at
/// `key` (for the queries that read no whole record).
pub(crate) fn reader<'r>(
    row: &'r Row,
    table: &'static str,
    key: &'static [usize],
) -> codec::RowReader<PgRow<'r>> {
    codec::RowReader::new(PgRow(row), table, key)
}

/// The shared decoders, for tokio-postgres rows (what `query_all` and
/// friends call): one line each, the decoding itself is
/// `rein_store::codec`'s.
macro_rules! decoders {
    ($($name:ident -> $type:ty,)*) => {
        $(
            pub(crate) fn $name(row: &Row) -> Result<$type, StoreError> {
                codec::$name(PgRow(row))
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
    decode_webhook_event -> rein_store::WebhookEvent,
    decode_webhook_delivery -> rein_store::WebhookDelivery,
    decode_due_delivery -> rein_store::DueDelivery,
}

/// `error` and the errors under it, `: `-joined: the driver's own text
/// for a failed TLS handshake is only "error performing TLS handshake",
/// the reason (`invalid peer certificate: UnknownIssuer`) is its cause.
fn with_causes(error: &tokio_postgres::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(error);
    while let Some(next) = cause {
        text.push_str(": ");
        text.push_str(&next.to_string());
        cause = next.source();
    }
    text
}

/// A TLS handshake that failed on what a retry cannot change: a
/// certificate that does not verify, a server without TLS under a mode
/// that requires it. Permanent, so that a node stops with the reason
/// instead of retrying the same handshake forever; a handshake cut by the
/// network (an I/O error of its own) stays transient.
fn tls_refused(error: &tokio_postgres::Error) -> Option<StoreError> {
    let mut cause = std::error::Error::source(error);
    while let Some(next) = cause {
        let tls = next
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>());
        let fix = match tls {
            Some(rustls::Error::InvalidCertificate(_)) => {
                "the server's certificate does not verify: give the CA that signed it \
                 (sslrootcert= in the URL or [store] ca_file), or connect by a host name it lists"
            }
            Some(_) => "TLS could not be agreed on with the server",
            None if next.to_string() == "server does not support TLS" => {
                "the server does not speak TLS: enable ssl on it, or use sslmode=prefer or disable"
            }
            None => {
                cause = next.source();
                continue;
            }
        };
        return Some(StoreError::Backend(format!(
            "postgres refused the connection: {}; {fix}",
            with_causes(error)
        )));
    }
    None
}

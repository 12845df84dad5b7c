//! Conversions between PostgreSQL rows and rein's types, and driver
//! errors as [`StoreError`]s.
//!
//! # Why decoding is fallible everywhere
//!
//! The database outlives the process and is shared: another rein (older,
//! newer) or an operator may have written a row. Every value read is
//! checked (ids validated, names parsed, JSON decoded, integers
//! range-checked) and a bad one becomes a [`StoreError::Corrupt`] naming
//! table, column and row, never a panic.
//!
//! NOTE: each `*_COLUMNS` list and its `decode_*` function must change
//! together, and both must match `migrations/`.

use std::fmt::Display;

use rein_core::deadline::{Cost, Usage};
use rein_core::{Event, EventData, LedgerRecord, LedgerStatus};
use rein_store::{
    BreakerOpening, Checkpoint, CheckpointDelta, IdempotencyRecord, IdempotencyState, Lease,
    LeaseKind, PlannedIntent, RunRecord, RunStatus, SingletonLease, StoreError, StoredResponse,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::FromSql;

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
        None => format!("postgres: {error}"),
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
/// not exist, or the credentials are wrong. Permanent, so that `rein
/// serve` stops with the reason instead of retrying forever; the message
/// says how to fix it (the store adds which database).
fn refused_for_good(error: &tokio_postgres::Error) -> Option<StoreError> {
    let db = error.as_db_error()?;
    let fix = match *db.code() {
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

/// A `u64` as PostgreSQL's `BIGINT`.
pub(crate) fn int(value: u64, what: &'static str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Invalid {
        what,
        expected: format!("at most {}", i64::MAX),
        found: value.to_string(),
    })
}

/// A `u64` compared against stored times: beyond `i64::MAX` compares as
/// `i64::MAX`, after every storable time.
pub(crate) fn at_most_max(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A count or limit as `BIGINT`.
pub(crate) fn limit(value: usize) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// A value as JSON text.
pub(crate) fn json_text<T: Serialize + ?Sized>(
    value: &T,
    what: &'static str,
) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Invalid {
        what,
        expected: "a value serializable as JSON".to_owned(),
        found: error.to_string(),
    })
}

/// An optional value as JSON text.
pub(crate) fn opt_json_text<T: Serialize>(
    value: Option<&T>,
    what: &'static str,
) -> Result<Option<String>, StoreError> {
    value.map(|value| json_text(value, what)).transpose()
}

/// A name stored through serde (`snake_case` enums such as `ToolClass`).
pub(crate) fn serde_name<T: Serialize>(
    value: &T,
    what: &'static str,
) -> Result<String, StoreError> {
    match serde_json::to_value(value) {
        Ok(Value::String(name)) => Ok(name),
        Ok(other) => Err(StoreError::Invalid {
            what,
            expected: "a value that serializes as a name".to_owned(),
            found: other.to_string(),
        }),
        Err(error) => Err(StoreError::Invalid {
            what,
            expected: "a value that serializes as a name".to_owned(),
            found: error.to_string(),
        }),
    }
}

/// An event's `data` column: its payload's JSON form, as SQLite stores it.
pub(crate) fn event_data_text(event: &Event) -> Result<String, StoreError> {
    let data = event.data.to_value().map_err(|error| StoreError::Invalid {
        what: "event data",
        expected: "a payload serializable as JSON".to_owned(),
        found: error.to_string(),
    })?;
    json_text(&data, "event data")
}

/// Reads one row of `table`, turning every failure into
/// [`StoreError::Corrupt`] that names the row by its key columns.
pub(crate) struct RowReader<'r> {
    row: &'r Row,
    table: &'static str,
    key: &'static [usize],
}

impl<'r> RowReader<'r> {
    pub(crate) fn new(row: &'r Row, table: &'static str, key: &'static [usize]) -> Self {
        RowReader { row, table, key }
    }

    pub(crate) fn corrupt(&self, column: &'static str, reason: impl Display) -> StoreError {
        let at: Vec<String> = self
            .key
            .iter()
            .map(|&index| {
                let name = self.row.columns().get(index).map_or("?", |c| c.name());
                let value = self
                    .row
                    .try_get::<_, Option<String>>(index)
                    .ok()
                    .flatten()
                    .unwrap_or_else(|| "?".to_owned());
                format!("{name}={value}")
            })
            .collect();
        StoreError::Corrupt {
            table: self.table,
            column,
            reason: format!("{reason} (row {})", at.join(", ")),
        }
    }

    fn raw<'a, T: FromSql<'a>>(
        &'a self,
        index: usize,
        column: &'static str,
    ) -> Result<T, StoreError>
    where
        'r: 'a,
    {
        self.row
            .try_get::<_, T>(index)
            .map_err(|error| self.corrupt(column, error))
    }

    pub(crate) fn text(&self, index: usize, column: &'static str) -> Result<String, StoreError> {
        self.raw(index, column)
    }

    pub(crate) fn opt_text(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<String>, StoreError> {
        self.raw(index, column)
    }

    fn unsigned<T: TryFrom<i64>>(&self, value: i64, column: &'static str) -> Result<T, StoreError> {
        T::try_from(value).map_err(|_| {
            self.corrupt(
                column,
                format!("expected a non-negative integer in range, found {value}"),
            )
        })
    }

    pub(crate) fn u64(&self, index: usize, column: &'static str) -> Result<u64, StoreError> {
        let value: i64 = self.raw(index, column)?;
        self.unsigned(value, column)
    }

    pub(crate) fn opt_u64(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<u64>, StoreError> {
        let value: Option<i64> = self.raw(index, column)?;
        value.map(|value| self.unsigned(value, column)).transpose()
    }

    pub(crate) fn u32(&self, index: usize, column: &'static str) -> Result<u32, StoreError> {
        let value: i64 = self.raw(index, column)?;
        self.unsigned(value, column)
    }

    pub(crate) fn json<T: DeserializeOwned>(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<T, StoreError> {
        let text = self.text(index, column)?;
        serde_json::from_str(&text).map_err(|error| {
            self.corrupt(
                column,
                format!("expected JSON, found invalid JSON: {error}"),
            )
        })
    }

    pub(crate) fn opt_json<T: DeserializeOwned>(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<T>, StoreError> {
        match self.opt_text(index, column)? {
            None => Ok(None),
            Some(text) => serde_json::from_str(&text).map(Some).map_err(|error| {
                self.corrupt(
                    column,
                    format!("expected JSON, found invalid JSON: {error}"),
                )
            }),
        }
    }

    pub(crate) fn id<T>(&self, index: usize, column: &'static str) -> Result<T, StoreError>
    where
        T: TryFrom<String>,
        T::Error: Display,
    {
        let text = self.text(index, column)?;
        T::try_from(text).map_err(|error| self.corrupt(column, error))
    }

    pub(crate) fn opt_id<T>(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<T>, StoreError>
    where
        T: TryFrom<String>,
        T::Error: Display,
    {
        match self.opt_text(index, column)? {
            None => Ok(None),
            Some(text) => T::try_from(text)
                .map(Some)
                .map_err(|error| self.corrupt(column, error)),
        }
    }

    pub(crate) fn name<T>(
        &self,
        index: usize,
        column: &'static str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<T, StoreError> {
        let text = self.text(index, column)?;
        parse(&text)
            .ok_or_else(|| self.corrupt(column, format!("expected a known name, found {text:?}")))
    }

    pub(crate) fn serde_name<T: DeserializeOwned>(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<T, StoreError> {
        let text = self.text(index, column)?;
        serde_json::from_value(Value::String(text.clone()))
            .map_err(|_| self.corrupt(column, format!("expected a known name, found {text:?}")))
    }
}

/// The columns [`decode_run`] reads, in order.
pub(crate) const RUN_COLUMNS: &str = "run_id, tenant, agent, input, parent_run_id, budget, \
                                      status, report, created_at_ms, updated_at_ms, \
                                      ledger_revision";

pub(crate) fn decode_run(row: &Row) -> Result<RunRecord, StoreError> {
    let r = RowReader::new(row, "runs", &[0]);
    Ok(RunRecord {
        run_id: r.id(0, "run_id")?,
        tenant: r.id(1, "tenant")?,
        agent: r.text(2, "agent")?,
        input: r.text(3, "input")?,
        parent_run_id: r.opt_id(4, "parent_run_id")?,
        budget: r.json(5, "budget")?,
        status: r.name(6, "status", RunStatus::parse)?,
        report: r.opt_json(7, "report")?,
        created_at_ms: r.u64(8, "created_at_ms")?,
        updated_at_ms: r.u64(9, "updated_at_ms")?,
        ledger_revision: r.u64(10, "ledger_revision")?,
    })
}

/// The columns [`decode_event`] reads, in order.
pub(crate) const EVENT_COLUMNS: &str =
    "run_id, seq, step, intent_id, attempt_id, idempotency_key, at_ms, kind, data";

pub(crate) fn decode_event(row: &Row) -> Result<Event, StoreError> {
    let r = RowReader::new(row, "events", &[0]);
    let kind = r.serde_name(7, "kind")?;
    let data =
        EventData::decode(kind, r.json(8, "data")?).map_err(|error| r.corrupt("data", error))?;
    Ok(Event {
        run_id: r.id(0, "run_id")?,
        seq: r.u64(1, "seq")?,
        step: r.u32(2, "step")?,
        intent_id: r.opt_id(3, "intent_id")?,
        attempt_id: r.opt_id(4, "attempt_id")?,
        idempotency_key: r.opt_id(5, "idempotency_key")?,
        at_ms: r.u64(6, "at_ms")?,
        data,
    })
}

/// The columns [`decode_intent`] reads, in order.
pub(crate) const INTENT_COLUMNS: &str = "run_id, intent_id, step, ordinal, call_id, tool, args";

pub(crate) fn decode_intent(row: &Row) -> Result<(u32, PlannedIntent), StoreError> {
    let r = RowReader::new(row, "intents", &[0, 1]);
    Ok((
        r.u32(2, "step")?,
        PlannedIntent {
            intent_id: r.id(1, "intent_id")?,
            ordinal: r.u32(3, "ordinal")?,
            call_id: r.text(4, "call_id")?,
            tool: r.text(5, "tool")?,
            args: r.json(6, "args")?,
        },
    ))
}

/// The columns [`decode_ledger`] reads, in order.
pub(crate) const LEDGER_COLUMNS: &str = "run_id, intent_id, seq, step, tool, class, \
                                         idempotency_key, args, status, result, failure, \
                                         attempts, created_at_ms, updated_at_ms";

pub(crate) fn decode_ledger(row: &Row) -> Result<LedgerRecord, StoreError> {
    let r = RowReader::new(row, "ledger", &[0, 1]);
    Ok(LedgerRecord {
        run_id: r.id(0, "run_id")?,
        intent_id: r.id(1, "intent_id")?,
        seq: r.u64(2, "seq")?,
        step: r.u32(3, "step")?,
        tool: r.text(4, "tool")?,
        class: r.serde_name(5, "class")?,
        idempotency_key: r.opt_id(6, "idempotency_key")?,
        args: r.json(7, "args")?,
        status: r.name(8, "status", LedgerStatus::parse)?,
        result: r.opt_json(9, "result")?,
        failure: r.opt_json(10, "failure")?,
        attempts: r.u32(11, "attempts")?,
        created_at_ms: r.u64(12, "created_at_ms")?,
        updated_at_ms: r.u64(13, "updated_at_ms")?,
    })
}

/// The columns [`decode_checkpoint`] reads, in order.
pub(crate) const CHECKPOINT_COLUMNS: &str = "run_id, step, messages, completed_intents, \
                                             consumed_steps, consumed_tokens, \
                                             consumed_cost_micros, elapsed_ms, state, at_ms";

pub(crate) fn decode_checkpoint(row: &Row) -> Result<Checkpoint, StoreError> {
    let r = RowReader::new(row, "checkpoints", &[0]);
    Ok(Checkpoint {
        run_id: r.id(0, "run_id")?,
        step: r.u32(1, "step")?,
        messages: r.json(2, "messages")?,
        completed_intents: r.json(3, "completed_intents")?,
        consumed: Usage {
            steps: r.u32(4, "consumed_steps")?,
            tokens: r.u64(5, "consumed_tokens")?,
            cost: Cost::from_micros(r.u64(6, "consumed_cost_micros")?),
        },
        elapsed_ms: r.u64(7, "elapsed_ms")?,
        state: r.json(8, "state")?,
        at_ms: r.u64(9, "at_ms")?,
    })
}

/// The columns [`decode_checkpoint_delta`] reads, in order.
pub(crate) const CHECKPOINT_DELTA_COLUMNS: &str = "run_id, step, messages, completed_intents, \
                                                   appended, state, consumed_steps, \
                                                   consumed_tokens, consumed_cost_micros, \
                                                   elapsed_ms, at_ms";

pub(crate) fn decode_checkpoint_delta(row: &Row) -> Result<CheckpointDelta, StoreError> {
    let r = RowReader::new(row, "checkpoint_deltas", &[0]);
    Ok(CheckpointDelta {
        run_id: r.id(0, "run_id")?,
        step: r.u32(1, "step")?,
        messages: r.json(2, "messages")?,
        completed_intents: r.json(3, "completed_intents")?,
        appended: r.json(4, "appended")?,
        state: r.json(5, "state")?,
        consumed: Usage {
            steps: r.u32(6, "consumed_steps")?,
            tokens: r.u64(7, "consumed_tokens")?,
            cost: Cost::from_micros(r.u64(8, "consumed_cost_micros")?),
        },
        elapsed_ms: r.u64(9, "elapsed_ms")?,
        at_ms: r.u64(10, "at_ms")?,
    })
}

/// The columns [`decode_lease`] reads, in order.
pub(crate) const LEASE_COLUMNS: &str =
    "lease_id, run_id, intent_id, kind, pgid, path, owner, acquired_at_ms, expires_at_ms";

pub(crate) fn decode_lease(row: &Row) -> Result<Lease, StoreError> {
    let r = RowReader::new(row, "leases", &[0]);
    Ok(Lease {
        lease_id: r.text(0, "lease_id")?,
        run_id: r.id(1, "run_id")?,
        intent_id: r.opt_id(2, "intent_id")?,
        kind: r.name(3, "kind", LeaseKind::parse)?,
        pgid: r.raw::<Option<i32>>(4, "pgid")?,
        path: r.opt_text(5, "path")?.map(std::path::PathBuf::from),
        owner: r.text(6, "owner")?,
        acquired_at_ms: r.u64(7, "acquired_at_ms")?,
        expires_at_ms: r.u64(8, "expires_at_ms")?,
    })
}

/// The columns [`decode_idempotency`] reads, in order.
pub(crate) const IDEMPOTENCY_COLUMNS: &str = "tenant, idempotency_key, fingerprint, state, \
                                              status, content_type, location, body, \
                                              created_at_ms, updated_at_ms, expires_at_ms, \
                                              owner, run_id, holder_since_ms, holder_until_ms";

pub(crate) fn decode_idempotency(row: &Row) -> Result<IdempotencyRecord, StoreError> {
    let r = RowReader::new(row, "idempotency", &[0, 1]);
    let state = r.name(3, "state", IdempotencyState::parse)?;
    let status = r.raw::<Option<i32>>(4, "status")?;
    let body = r.raw::<Option<Vec<u8>>>(7, "body")?;
    let response = match (state, status, body) {
        (IdempotencyState::Completed, Some(status), Some(body)) => Some(StoredResponse {
            status: u16::try_from(status)
                .ok()
                .filter(|status| (200..300).contains(status))
                .ok_or_else(|| {
                    r.corrupt("status", format!("expected a 2xx status, found {status}"))
                })?,
            content_type: r.opt_text(5, "content_type")?,
            location: r.opt_text(6, "location")?,
            body,
        }),
        (IdempotencyState::Completed, None, _) => {
            return Err(r.corrupt(
                "status",
                "expected a status for a completed record, found NULL",
            ));
        }
        (IdempotencyState::Completed, _, None) => {
            return Err(r.corrupt("body", "expected a body for a completed record, found NULL"));
        }
        (IdempotencyState::InProgress, None, None) => None,
        (IdempotencyState::InProgress, _, _) => {
            return Err(r.corrupt(
                "status",
                "expected no response for an in_progress record, found one",
            ));
        }
    };
    Ok(IdempotencyRecord {
        tenant: r.id(0, "tenant")?,
        key: r.text(1, "idempotency_key")?,
        fingerprint: r.text(2, "fingerprint")?,
        state,
        response,
        created_at_ms: r.u64(8, "created_at_ms")?,
        updated_at_ms: r.u64(9, "updated_at_ms")?,
        expires_at_ms: r.u64(10, "expires_at_ms")?,
        owner: r.opt_text(11, "owner")?,
        run_id: r.opt_id(12, "run_id")?,
        holder_since_ms: r.opt_u64(13, "holder_since_ms")?,
        holder_until_ms: r.opt_u64(14, "holder_until_ms")?,
    })
}

/// The columns [`decode_singleton`] reads, in order.
pub(crate) const SINGLETON_COLUMNS: &str = "name, owner, acquired_at_ms, expires_at_ms";

pub(crate) fn decode_singleton(row: &Row) -> Result<SingletonLease, StoreError> {
    let r = RowReader::new(row, "singletons", &[0]);
    Ok(SingletonLease {
        name: r.text(0, "name")?,
        owner: r.text(1, "owner")?,
        acquired_at_ms: r.u64(2, "acquired_at_ms")?,
        expires_at_ms: r.u64(3, "expires_at_ms")?,
    })
}

/// The columns [`decode_breaker_opening`] reads, in order.
pub(crate) const BREAKER_OPENING_COLUMNS: &str =
    "arm, open_until_ms, opened_by, reason, updated_at_ms";

pub(crate) fn decode_breaker_opening(row: &Row) -> Result<BreakerOpening, StoreError> {
    let r = RowReader::new(row, "breaker_openings", &[0]);
    Ok(BreakerOpening {
        arm: r.text(0, "arm")?,
        open_until_ms: r.u64(1, "open_until_ms")?,
        opened_by: r.text(2, "opened_by")?,
        reason: r.text(3, "reason")?,
        updated_at_ms: r.u64(4, "updated_at_ms")?,
    })
}

//! Conversions between rows and rein's types.
//!
//! # Why decoding is fallible everywhere
//!
//! The database file outlives the process and can be edited by hand, by a
//! newer or older rein, or damaged. Every value read is checked (ids
//! validated, names parsed, JSON decoded, integers range-checked) and a bad
//! one becomes a [`StoreError::Corrupt`] naming table, column and row —
//! never a panic in the engine or the server.
//!
//! NOTE: each `*_COLUMNS` list and its `decode_*` function must change
//! together, and both must match the schema in `schema.rs`.

use std::fmt::Display;

use rein_core::deadline::{Cost, Usage};
use rein_core::{Event, EventData, LedgerRecord, LedgerStatus};
use rusqlite::types::ValueRef;
use rusqlite::{ErrorCode, Row};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use rein_store::BreakerOpening;
use rein_store::PlannedIntent;
use rein_store::SingletonLease;
use rein_store::StoreError;
use rein_store::{Checkpoint, CheckpointDelta};
use rein_store::{IdempotencyRecord, IdempotencyState, StoredResponse};
use rein_store::{Lease, LeaseKind};
use rein_store::{RunRecord, RunStatus};

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

/// A `u64` as SQLite's signed 64-bit integer.
pub fn int(value: u64, what: &'static str) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::Invalid {
        what,
        expected: format!("at most {}", i64::MAX),
        found: value.to_string(),
    })
}

/// A value as JSON text.
pub fn json_text<T: Serialize + ?Sized>(
    value: &T,
    what: &'static str,
) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|error| StoreError::Invalid {
        what,
        expected: "a value serializable as JSON".to_owned(),
        found: error.to_string(),
    })
}

/// A name stored through serde (`snake_case` enums such as `EventKind`).
pub fn serde_name<T: Serialize>(value: &T, what: &'static str) -> Result<String, StoreError> {
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

/// Reads one row of `table`, turning every failure into
/// [`StoreError::Corrupt`] that names the row by its key columns.
pub struct RowReader<'r, 's> {
    row: &'r Row<'s>,
    table: &'static str,
    key: &'static [usize],
}

impl<'r, 's> RowReader<'r, 's> {
    /// A reader of `row`, identified in errors by the columns at `key`.
    pub fn new(row: &'r Row<'s>, table: &'static str, key: &'static [usize]) -> Self {
        RowReader { row, table, key }
    }

    fn corrupt(&self, column: &'static str, reason: impl Display) -> StoreError {
        let mut at = String::new();
        for &index in self.key {
            let name = self.row.as_ref().column_name(index).unwrap_or("?");
            let value = match self.row.get_ref(index) {
                Ok(ValueRef::Text(text)) => String::from_utf8_lossy(text).into_owned(),
                Ok(ValueRef::Integer(number)) => number.to_string(),
                _ => "?".to_owned(),
            };
            if !at.is_empty() {
                at.push_str(", ");
            }
            at.push_str(&format!("{name}={value}"));
        }
        StoreError::Corrupt {
            table: self.table,
            column,
            reason: format!("{reason} (row {at})"),
        }
    }

    fn raw<T: rusqlite::types::FromSql>(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<T, StoreError> {
        self.row
            .get::<_, T>(index)
            .map_err(|error| self.corrupt(column, error))
    }

    /// A text column.
    pub fn text(&self, index: usize, column: &'static str) -> Result<String, StoreError> {
        self.raw(index, column)
    }

    /// A nullable text column.
    pub fn opt_text(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<String>, StoreError> {
        self.raw(index, column)
    }

    /// A non-negative integer column.
    pub fn u64(&self, index: usize, column: &'static str) -> Result<u64, StoreError> {
        let value: i64 = self.raw(index, column)?;
        u64::try_from(value).map_err(|_| {
            self.corrupt(
                column,
                format!("expected a non-negative integer, found {value}"),
            )
        })
    }

    /// A nullable non-negative integer column.
    pub fn opt_u64(&self, index: usize, column: &'static str) -> Result<Option<u64>, StoreError> {
        let value: Option<i64> = self.raw(index, column)?;
        value
            .map(|value| {
                u64::try_from(value).map_err(|_| {
                    self.corrupt(
                        column,
                        format!("expected a non-negative integer, found {value}"),
                    )
                })
            })
            .transpose()
    }

    /// An integer column that must fit `u32`.
    pub fn u32(&self, index: usize, column: &'static str) -> Result<u32, StoreError> {
        let value: i64 = self.raw(index, column)?;
        u32::try_from(value).map_err(|_| {
            self.corrupt(
                column,
                format!("expected an integer in 0..={}, found {value}", u32::MAX),
            )
        })
    }

    /// A nullable blob column.
    pub fn opt_blob(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.raw(index, column)
    }

    /// A JSON text column decoded as `T`.
    pub fn json<T: DeserializeOwned>(
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

    /// A nullable JSON text column decoded as `T`.
    pub fn opt_json<T: DeserializeOwned>(
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

    /// A validated identifier (`RunId`, `IntentId`, `IdempotencyKey`, ...).
    pub fn id<T>(&self, index: usize, column: &'static str) -> Result<T, StoreError>
    where
        T: TryFrom<String>,
        T::Error: Display,
    {
        let text = self.text(index, column)?;
        T::try_from(text).map_err(|error| self.corrupt(column, error))
    }

    /// A nullable validated identifier.
    pub fn opt_id<T>(&self, index: usize, column: &'static str) -> Result<Option<T>, StoreError>
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

    /// A name parsed by `parse` (`RunStatus::parse`, `LedgerStatus::parse`).
    pub fn name<T>(
        &self,
        index: usize,
        column: &'static str,
        parse: fn(&str) -> Option<T>,
    ) -> Result<T, StoreError> {
        let text = self.text(index, column)?;
        parse(&text)
            .ok_or_else(|| self.corrupt(column, format!("expected a known name, found {text:?}")))
    }

    /// A name decoded through serde (`EventKind`, `ToolClass`).
    pub fn serde_name<T: DeserializeOwned>(
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
pub const RUN_COLUMNS: &str = "run_id, tenant, agent, input, parent_run_id, budget, status, \
                               report, created_at_ms, updated_at_ms, ledger_revision";

/// A `runs` row selected with [`RUN_COLUMNS`].
pub fn decode_run(row: &Row<'_>) -> Result<RunRecord, StoreError> {
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

/// An event's `data` column: its payload's JSON form
/// ([`EventData::to_value`]), keys sorted, as events were always stored.
pub fn event_data_text(event: &Event) -> Result<String, StoreError> {
    let data = event.data.to_value().map_err(|error| StoreError::Invalid {
        what: "event data",
        expected: "a payload serializable as JSON".to_owned(),
        found: error.to_string(),
    })?;
    json_text(&data, "event data")
}

/// The columns [`decode_event`] reads, in order.
pub const EVENT_COLUMNS: &str =
    "run_id, seq, step, intent_id, attempt_id, idempotency_key, at_ms, kind, data";

/// An `events` row selected with [`EVENT_COLUMNS`].
pub fn decode_event(row: &Row<'_>) -> Result<Event, StoreError> {
    let r = RowReader::new(row, "events", &[0, 1]);
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
pub const INTENT_COLUMNS: &str = "run_id, intent_id, step, ordinal, call_id, tool, args";

/// An `intents` row selected with [`INTENT_COLUMNS`].
pub fn decode_intent(row: &Row<'_>) -> Result<(u32, PlannedIntent), StoreError> {
    let r = RowReader::new(row, "intents", &[0, 1]);
    let step = r.u32(2, "step")?;
    Ok((
        step,
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
pub const LEDGER_COLUMNS: &str = "run_id, intent_id, seq, step, tool, class, idempotency_key, \
                                  args, status, result, failure, attempts, created_at_ms, \
                                  updated_at_ms";

/// A `ledger` row selected with [`LEDGER_COLUMNS`].
pub fn decode_ledger(row: &Row<'_>) -> Result<LedgerRecord, StoreError> {
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
pub const CHECKPOINT_COLUMNS: &str = "run_id, step, messages, completed_intents, consumed_steps, \
                                      consumed_tokens, consumed_cost_micros, elapsed_ms, state, \
                                      at_ms";

/// A `checkpoints` row selected with [`CHECKPOINT_COLUMNS`].
pub fn decode_checkpoint(row: &Row<'_>) -> Result<Checkpoint, StoreError> {
    let r = RowReader::new(row, "checkpoints", &[0, 1]);
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
pub const CHECKPOINT_DELTA_COLUMNS: &str = "run_id, step, messages, completed_intents, appended, \
                                            state, consumed_steps, consumed_tokens, \
                                            consumed_cost_micros, elapsed_ms, at_ms";

/// A `checkpoint_deltas` row selected with [`CHECKPOINT_DELTA_COLUMNS`].
pub fn decode_checkpoint_delta(row: &Row<'_>) -> Result<CheckpointDelta, StoreError> {
    let r = RowReader::new(row, "checkpoint_deltas", &[0, 1]);
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
pub const LEASE_COLUMNS: &str =
    "lease_id, run_id, intent_id, kind, pgid, path, owner, acquired_at_ms, expires_at_ms";

/// A `leases` row selected with [`LEASE_COLUMNS`].
pub fn decode_lease(row: &Row<'_>) -> Result<Lease, StoreError> {
    let r = RowReader::new(row, "leases", &[0]);
    let pgid = match r.raw::<Option<i64>>(4, "pgid")? {
        None => None,
        Some(value) => Some(i32::try_from(value).map_err(|_| {
            r.corrupt(
                "pgid",
                format!("expected a process group id that fits i32, found {value}"),
            )
        })?),
    };
    Ok(Lease {
        lease_id: r.text(0, "lease_id")?,
        run_id: r.id(1, "run_id")?,
        intent_id: r.opt_id(2, "intent_id")?,
        kind: r.name(3, "kind", LeaseKind::parse)?,
        pgid,
        path: r.opt_text(5, "path")?.map(std::path::PathBuf::from),
        owner: r.text(6, "owner")?,
        acquired_at_ms: r.u64(7, "acquired_at_ms")?,
        expires_at_ms: r.u64(8, "expires_at_ms")?,
    })
}

/// The columns [`decode_idempotency`] reads, in order.
pub const IDEMPOTENCY_COLUMNS: &str = "tenant, idempotency_key, fingerprint, state, status, \
                                       content_type, location, body, created_at_ms, \
                                       updated_at_ms, expires_at_ms, owner, run_id, \
                                       holder_since_ms, holder_until_ms";

/// An `idempotency` row selected with [`IDEMPOTENCY_COLUMNS`].
pub fn decode_idempotency(row: &Row<'_>) -> Result<IdempotencyRecord, StoreError> {
    let r = RowReader::new(row, "idempotency", &[0, 1]);
    let state = r.name(3, "state", IdempotencyState::parse)?;
    let status = r.raw::<Option<i64>>(4, "status")?;
    let body = r.opt_blob(7, "body")?;
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
pub const SINGLETON_COLUMNS: &str = "name, owner, acquired_at_ms, expires_at_ms";

/// A `singletons` row selected with [`SINGLETON_COLUMNS`].
pub fn decode_singleton(row: &Row<'_>) -> Result<SingletonLease, StoreError> {
    let r = RowReader::new(row, "singletons", &[0]);
    Ok(SingletonLease {
        name: r.text(0, "name")?,
        owner: r.text(1, "owner")?,
        acquired_at_ms: r.u64(2, "acquired_at_ms")?,
        expires_at_ms: r.u64(3, "expires_at_ms")?,
    })
}

/// The columns [`decode_breaker_opening`] reads, in order.
pub const BREAKER_OPENING_COLUMNS: &str = "arm, open_until_ms, opened_by, reason, updated_at_ms";

/// A `breaker_openings` row selected with [`BREAKER_OPENING_COLUMNS`].
pub fn decode_breaker_opening(row: &Row<'_>) -> Result<BreakerOpening, StoreError> {
    let r = RowReader::new(row, "breaker_openings", &[0]);
    Ok(BreakerOpening {
        arm: r.text(0, "arm")?,
        open_until_ms: r.u64(1, "open_until_ms")?,
        opened_by: r.text(2, "opened_by")?,
        reason: r.text(3, "reason")?,
        updated_at_ms: r.u64(4, "updated_at_ms")?,
    })
}

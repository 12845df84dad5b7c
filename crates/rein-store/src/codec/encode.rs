//! Values as rein stores them in columns: integers, JSON text, names.

use rein_core::{Event, Timestamp};
use serde::Serialize;
use serde_json::Value;

use crate::error::StoreError;

/// What is stored as a non-negative integer column: counts, and points in
/// time as milliseconds since the epoch. The one place a [`Timestamp`]
/// becomes its integer on the way in (and
/// [`RowReader::timestamp`](crate::codec::RowReader::timestamp) on the way
/// out), so the SQL columns stay the integers they always were.
pub trait StoredInt: Copy {
    /// The value as the unsigned integer stored.
    fn stored(self) -> u64;
}

impl StoredInt for u64 {
    fn stored(self) -> u64 {
        self
    }
}

impl StoredInt for u32 {
    fn stored(self) -> u64 {
        u64::from(self)
    }
}

impl StoredInt for Timestamp {
    fn stored(self) -> u64 {
        self.as_millis()
    }
}

/// A count or a point in time as a signed 64-bit integer column (SQLite's
/// `INTEGER`, PostgreSQL's `BIGINT`).
pub fn int(value: impl StoredInt, what: &'static str) -> Result<i64, StoreError> {
    let value = value.stored();
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

/// An optional value as JSON text.
pub fn opt_json_text<T: Serialize>(
    value: Option<&T>,
    what: &'static str,
) -> Result<Option<String>, StoreError> {
    value.map(|value| json_text(value, what)).transpose()
}

/// An event's `data` column: its payload's JSON form
/// ([`EventData::to_value`](rein_core::EventData::to_value)), keys sorted, as events were always stored.
pub fn event_data_text(event: &Event) -> Result<String, StoreError> {
    let data = event.data.to_value().map_err(|error| StoreError::Invalid {
        what: "event data",
        expected: "a payload serializable as JSON".to_owned(),
        found: error.to_string(),
    })?;
    json_text(&data, "event data")
}

/// A stored response's other headers as the idempotency `headers` column
/// holds them (a JSON array of `[name, value]` pairs); `None` (NULL) when
/// there are none.
pub fn headers_text(headers: &[(String, String)]) -> Option<String> {
    if headers.is_empty() {
        return None;
    }
    // Pairs of strings always serialize.
    serde_json::to_string(headers).ok()
}

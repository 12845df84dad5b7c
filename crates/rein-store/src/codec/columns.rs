//! [`Columns`], what a backend's row gives, and [`RowReader`], the checked
//! reads of rein's types from it.

use std::fmt::Display;

use rein_core::Timestamp;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::StoreError;

/// One row as a backend's driver returns it, reduced to the value kinds
/// rein stores: text, 64-bit integers and blobs, each nullable.
///
/// A read of the wrong kind, or a driver failure, is `Err` with the
/// driver's reason; [`RowReader`] turns it into
/// [`StoreError::Corrupt`] naming the row.
pub trait Columns {
    /// The name of column `index`, if the row has one.
    fn column_name(&self, index: usize) -> Option<&str>;

    /// Column `index` as text; `None` for NULL.
    ///
    /// # Errors
    ///
    /// The driver's reason when the column is not text.
    fn text(&self, index: usize) -> Result<Option<String>, String>;

    /// Column `index` as an integer, widened to `i64`; `None` for NULL.
    ///
    /// # Errors
    ///
    /// The driver's reason when the column is not an integer.
    fn integer(&self, index: usize) -> Result<Option<i64>, String>;

    /// Column `index` as bytes; `None` for NULL.
    ///
    /// # Errors
    ///
    /// The driver's reason when the column is not a blob.
    fn blob(&self, index: usize) -> Result<Option<Vec<u8>>, String>;
}

/// Reads one row of `table`, turning every failure into
/// [`StoreError::Corrupt`] that names the row by its key columns.
pub struct RowReader<R> {
    row: R,
    table: &'static str,
    key: &'static [usize],
}

impl<R: Columns> RowReader<R> {
    /// A reader of `row`, identified in errors by the columns at `key`.
    pub fn new(row: R, table: &'static str, key: &'static [usize]) -> Self {
        RowReader { row, table, key }
    }

    /// A [`StoreError::Corrupt`] of `column` in this row, for `reason`.
    pub fn corrupt(&self, column: &'static str, reason: impl Display) -> StoreError {
        let at: Vec<String> = self
            .key
            .iter()
            .map(|&index| {
                let name = self.row.column_name(index).unwrap_or("?");
                let value = match (self.row.text(index), self.row.integer(index)) {
                    (Ok(Some(text)), _) => text,
                    (_, Ok(Some(number))) => number.to_string(),
                    _ => "?".to_owned(),
                };
                format!("{name}={value}")
            })
            .collect();
        StoreError::Corrupt {
            table: self.table,
            column,
            reason: format!("{reason} (row {})", at.join(", ")),
        }
    }

    /// A nullable text column.
    pub fn opt_text(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<String>, StoreError> {
        self.row
            .text(index)
            .map_err(|reason| self.corrupt(column, reason))
    }

    /// A text column.
    pub fn text(&self, index: usize, column: &'static str) -> Result<String, StoreError> {
        self.opt_text(index, column)?
            .ok_or_else(|| self.corrupt(column, "expected text, found NULL"))
    }

    /// A nullable integer column, as stored.
    pub fn opt_i64(&self, index: usize, column: &'static str) -> Result<Option<i64>, StoreError> {
        self.row
            .integer(index)
            .map_err(|reason| self.corrupt(column, reason))
    }

    fn i64(&self, index: usize, column: &'static str) -> Result<i64, StoreError> {
        self.opt_i64(index, column)?
            .ok_or_else(|| self.corrupt(column, "expected an integer, found NULL"))
    }

    /// A nullable integer column that must fit `T`.
    pub fn opt_int<T: TryFrom<i64>>(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<T>, StoreError> {
        self.opt_i64(index, column)?
            .map(|value| self.fit(value, column))
            .transpose()
    }

    fn fit<T: TryFrom<i64>>(&self, value: i64, column: &'static str) -> Result<T, StoreError> {
        T::try_from(value).map_err(|_| {
            self.corrupt(
                column,
                format!("expected a non-negative integer in range, found {value}"),
            )
        })
    }

    /// A non-negative integer column.
    pub fn u64(&self, index: usize, column: &'static str) -> Result<u64, StoreError> {
        let value = self.i64(index, column)?;
        self.fit(value, column)
    }

    /// A nullable non-negative integer column.
    pub fn opt_u64(&self, index: usize, column: &'static str) -> Result<Option<u64>, StoreError> {
        self.opt_int(index, column)
    }

    /// A point in time: a non-negative integer column of milliseconds
    /// since the Unix epoch.
    pub fn timestamp(&self, index: usize, column: &'static str) -> Result<Timestamp, StoreError> {
        self.u64(index, column).map(Timestamp::from_millis)
    }

    /// A nullable point in time.
    pub fn opt_timestamp(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<Timestamp>, StoreError> {
        Ok(self.opt_u64(index, column)?.map(Timestamp::from_millis))
    }

    /// An integer column that must fit `u32`.
    pub fn u32(&self, index: usize, column: &'static str) -> Result<u32, StoreError> {
        let value = self.i64(index, column)?;
        self.fit(value, column)
    }

    /// A nullable blob column.
    pub fn opt_blob(
        &self,
        index: usize,
        column: &'static str,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        self.row
            .blob(index)
            .map_err(|reason| self.corrupt(column, reason))
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A row of named cells, as a driver would give them.
    enum Cell {
        Null,
        Text(&'static str),
        Int(i64),
    }

    struct Fake(Vec<(&'static str, Cell)>);

    impl Columns for Fake {
        fn column_name(&self, index: usize) -> Option<&str> {
            self.0.get(index).map(|(name, _)| *name)
        }
        fn text(&self, index: usize) -> Result<Option<String>, String> {
            match &self.0[index].1 {
                Cell::Null => Ok(None),
                Cell::Text(text) => Ok(Some((*text).to_owned())),
                Cell::Int(_) => Err("integer, not text".to_owned()),
            }
        }
        fn integer(&self, index: usize) -> Result<Option<i64>, String> {
            match &self.0[index].1 {
                Cell::Null => Ok(None),
                Cell::Int(number) => Ok(Some(*number)),
                Cell::Text(_) => Err("text, not an integer".to_owned()),
            }
        }
        fn blob(&self, _index: usize) -> Result<Option<Vec<u8>>, String> {
            Err("no blobs here".to_owned())
        }
    }

    fn corrupt_reason(error: StoreError) -> (&'static str, String) {
        match error {
            StoreError::Corrupt { column, reason, .. } => (column, reason),
            other => panic!("expected Corrupt, found {other:?}"),
        }
    }

    #[test]
    fn negative_integer_is_corrupt_naming_the_row_by_its_keys() {
        let row = Fake(vec![
            ("run_id", Cell::Text("r-1")),
            ("seq", Cell::Int(7)),
            ("at_ms", Cell::Int(-1)),
        ]);
        let r = RowReader::new(row, "events", &[0, 1]);
        let (column, reason) = corrupt_reason(r.u64(2, "at_ms").unwrap_err());
        assert_eq!(column, "at_ms");
        assert!(reason.contains("found -1"), "{reason}");
        assert!(reason.ends_with("(row run_id=r-1, seq=7)"), "{reason}");
    }

    #[test]
    fn null_in_a_required_text_column_is_corrupt_not_empty() {
        let row = Fake(vec![("run_id", Cell::Text("r-1")), ("agent", Cell::Null)]);
        let r = RowReader::new(row, "runs", &[0]);
        let (column, reason) = corrupt_reason(r.text(1, "agent").unwrap_err());
        assert_eq!(column, "agent");
        assert!(reason.contains("found NULL"), "{reason}");
        assert_eq!(r.opt_text(1, "agent").unwrap(), None);
    }

    #[test]
    fn integer_beyond_u32_and_a_wrong_kind_are_corrupt() {
        let row = Fake(vec![
            ("step", Cell::Int(i64::from(u32::MAX) + 1)),
            ("tool", Cell::Int(3)),
        ]);
        let r = RowReader::new(row, "intents", &[]);
        assert!(r.u32(0, "step").is_err());
        let (_, reason) = corrupt_reason(r.text(1, "tool").unwrap_err());
        assert!(reason.contains("integer, not text"), "{reason}");
    }
}

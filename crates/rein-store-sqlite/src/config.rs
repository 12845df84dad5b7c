//! [`SqliteOptions`]: durability and locking settings of the SQLite backend.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use rein_store::StoreError;

/// Default of [`SqliteOptions::synchronous_full`]: `false`
/// (`synchronous = NORMAL`).
pub const DEFAULT_SYNCHRONOUS_FULL: bool = false;

/// Default of [`SqliteOptions::busy_timeout`]: 5 s.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest [`SqliteOptions::busy_timeout`] accepted: 1 h. A writer
/// blocked longer than that is a stuck process, not contention.
pub const MAX_BUSY_TIMEOUT: Duration = Duration::from_secs(3600);

/// How the SQLite backend trades durability for commit latency, and how long
/// it waits for another process's write lock.
///
/// | setting | default | range |
/// | --- | --- | --- |
/// | `synchronous_full` | [`DEFAULT_SYNCHRONOUS_FULL`] (`false`) | `true`, `false` |
/// | `busy_timeout` | [`DEFAULT_BUSY_TIMEOUT`] (5 s) | 0 ..= [`MAX_BUSY_TIMEOUT`] (1 h) |
///
/// # Why `synchronous = NORMAL` by default
///
/// In WAL mode, `NORMAL` makes a commit durable against a *process* crash
/// (a `kill -9`, a panic, an OOM kill): the commit is in the WAL file, which
/// the operating system holds even if rein dies. That is the failure rein
/// is built to survive, and `NORMAL` avoids an fsync on every commit. What
/// it does not cover is *power loss or an OS crash*, which may lose the
/// last commits since the previous WAL checkpoint (the database stays
/// consistent, never corrupt). Set `synchronous_full = true` (`FULL`: an
/// fsync per commit; group commit keeps it to one per batch) when a lost
/// ledger entry after a power cut is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// `true`: `synchronous = FULL`, every commit survives power loss.
    /// `false`: `synchronous = NORMAL`, every commit survives a process
    /// crash.
    pub synchronous_full: bool,
    /// How long a write waits for another connection's lock before failing
    /// with a transient [`StoreError::Unavailable`].
    #[serde(with = "humantime_serde")]
    pub busy_timeout: Duration,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous_full: DEFAULT_SYNCHRONOUS_FULL,
            busy_timeout: DEFAULT_BUSY_TIMEOUT,
        }
    }
}

impl SqliteOptions {
    /// Sets [`SqliteOptions::synchronous_full`].
    pub fn with_synchronous_full(mut self, full: bool) -> Self {
        self.synchronous_full = full;
        self
    }

    /// Sets [`SqliteOptions::busy_timeout`].
    pub fn with_busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// Checks the ranges in the table above.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] naming `busy_timeout` when it exceeds
    /// [`MAX_BUSY_TIMEOUT`].
    pub fn validate(&self) -> Result<(), StoreError> {
        if self.busy_timeout > MAX_BUSY_TIMEOUT {
            return Err(StoreError::Invalid {
                what: "busy_timeout",
                expected: format!("at most {MAX_BUSY_TIMEOUT:?}"),
                found: format!("{:?}", self.busy_timeout),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_normal_sync_and_five_seconds() {
        let options = SqliteOptions::default();
        assert!(!options.synchronous_full);
        assert_eq!(options.busy_timeout, Duration::from_secs(5));
        assert_eq!(options.validate(), Ok(()));
    }

    #[test]
    fn options_deserialize_with_humantime_and_refuse_unknown_keys() {
        let options: SqliteOptions =
            serde_json::from_str(r#"{"busy_timeout": "250ms", "synchronous_full": true}"#).unwrap();
        assert_eq!(
            options,
            SqliteOptions::default()
                .with_busy_timeout(Duration::from_millis(250))
                .with_synchronous_full(true)
        );
        assert!(serde_json::from_str::<SqliteOptions>(r#"{"sync": true}"#).is_err());
    }

    #[test]
    fn busy_timeout_above_an_hour_is_refused() {
        let err = SqliteOptions::default()
            .with_busy_timeout(Duration::from_secs(3601))
            .validate()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "busy_timeout must be at most 3600s, but it is 3601s"
        );
    }
}

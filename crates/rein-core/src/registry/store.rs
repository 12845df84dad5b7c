//! `[store]`: where runs are recorded, and how the PostgreSQL backend
//! connects, written once in the config instead of on every command line.
//!
//! Optional: without the table, `rein serve` and `rein run` use `--data`
//! (or its default, `rein-data/rein.db`). With it, `url` is the store and
//! `--data` still overrides it (an operator's one-off beats the file).
//!
//! | field | default | range | backend |
//! | --- | --- | --- | --- |
//! | `url` | required | a SQLite path (relative to the config file's directory) or `postgres://user[:password]@host[:port]/db` | both |
//! | `pool_size` | [`DEFAULT_POOL_SIZE`] | 1 to [`MAX_POOL_SIZE`] connections per process | PostgreSQL |
//! | `connect_timeout` | [`DEFAULT_CONNECT_TIMEOUT`] | (0, [`MAX_CONNECT_TIMEOUT`]]: how long a call waits for a connection before the store counts as unavailable | PostgreSQL |
//! | `migrate` | `true` | `false`: refuse to start on a database that is not at this rein's schema (`rein migrate` applies it) | PostgreSQL |
//! | `ca_file` | none | a PEM file of CA certificates (relative to the config file's directory) that the server's certificate must chain to under `sslmode=verify-full`, `verify-ca` or `require`, when the URL has no `sslrootcert` | PostgreSQL |
//! | `synchronous` | `"normal"` | `"normal"`: a commit survives a crash of the process; `"full"`: it survives power loss too, at an fsync per group commit | SQLite |
//! | `busy_timeout` | [`DEFAULT_BUSY_TIMEOUT`] | 0 to [`MAX_BUSY_TIMEOUT`]: how long a write waits for another process's lock on the file before it fails as transient | SQLite |
//!
//! A PostgreSQL-only field with a SQLite `url` is refused with the reason:
//! the embedded store has no pool, connects to nothing and always creates
//! its own schema, so the setting would have no effect. A SQLite-only
//! field with a `postgres://` URL is refused too: PostgreSQL's durability
//! is the server's `synchronous_commit`, and its waits are
//! `connect_timeout`.
//!
//! # Why `synchronous` is a setting
//!
//! In WAL mode `NORMAL` already makes every acknowledged commit durable
//! against what rein is built to survive (a `kill -9`, a panic, an OOM
//! kill): the commit is in the WAL, which the operating system holds. Only
//! power loss or an OS crash can lose the last commits since a checkpoint,
//! and only an fsync per commit closes that, at a cost in commit latency
//! the operator, not rein, should weigh.

use std::num::NonZeroU32;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;

/// Connections one process keeps at most when `pool_size` is not given.
///
/// NOTE: must match `rein_store_postgres::DEFAULT_MAX_CONNECTIONS`.
pub const DEFAULT_POOL_SIZE: u32 = 16;

/// The largest `pool_size`: PostgreSQL's own default `max_connections` is
/// 100 for every node together.
pub const MAX_POOL_SIZE: u32 = 1000;

/// How long a call waits for a connection when `connect_timeout` is not
/// given.
///
/// NOTE: must match the PostgreSQL backend's `CONNECT_TIMEOUT`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `connect_timeout`: beyond it a restarting database looks
/// like a hang to every caller.
pub const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(600);

/// How long a SQLite write waits for another process's lock when
/// `busy_timeout` is not given.
///
/// NOTE: must match `rein_store_sqlite::DEFAULT_BUSY_TIMEOUT`.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest `busy_timeout`: a writer blocked longer is a stuck process,
/// not contention.
///
/// NOTE: must match `rein_store_sqlite::MAX_BUSY_TIMEOUT`.
pub const MAX_BUSY_TIMEOUT: Duration = Duration::from_secs(3600);

/// What a SQLite commit is durable against (`[store] synchronous`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Synchronous {
    /// `PRAGMA synchronous = NORMAL`: a crash of the process.
    #[default]
    Normal,
    /// `PRAGMA synchronous = FULL`: power loss and OS crashes too.
    Full,
}

/// `[store]` as written.
#[derive(Debug, Clone, Default, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct StoreConfig {
    /// A SQLite path or a `postgres://` URL.
    pub url: Option<String>,
    /// PostgreSQL: connections per process.
    pub pool_size: Option<u32>,
    /// PostgreSQL: how long a call waits for a connection.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub connect_timeout: Option<Duration>,
    /// PostgreSQL: apply pending migrations at start.
    pub migrate: Option<bool>,
    /// PostgreSQL: the CA file TLS verifies the server against.
    pub ca_file: Option<PathBuf>,
    /// SQLite: what a commit is durable against.
    pub synchronous: Option<Synchronous>,
    /// SQLite: how long a write waits for another process's lock.
    #[serde(with = "crate::config::duration")]
    #[schemars(with = "Option<crate::config::duration::Text>")]
    pub busy_timeout: Option<Duration>,
}

/// Which backend `[store].url` names.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreUrl {
    /// A SQLite file, resolved against the config file's directory.
    Sqlite(PathBuf),
    /// A PostgreSQL URL, as written (its form is checked where the backend
    /// is, in `rein check` and at start).
    Postgres(String),
}

/// `[store]`, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StoreSpec {
    /// The file holding the table, for messages about it.
    pub file: PathBuf,
    /// The store.
    pub url: StoreUrl,
    /// PostgreSQL: connections per process.
    pub pool_size: NonZeroU32,
    /// PostgreSQL: how long a call waits for a connection.
    pub connect_timeout: Duration,
    /// PostgreSQL: apply pending migrations at start.
    pub migrate: bool,
    /// PostgreSQL: the CA file TLS verifies the server against, resolved
    /// against the config file's directory (whether the URL's `sslmode`
    /// verifies is checked where the backend is, in `rein check` and at
    /// start).
    pub ca_file: Option<PathBuf>,
    /// SQLite: what a commit is durable against.
    pub synchronous: Synchronous,
    /// SQLite: how long a write waits for another process's lock.
    pub busy_timeout: Duration,
}

/// Whether `url` names a PostgreSQL database.
fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Checks `[store]` of `file`: the spec, or every problem as
/// `(field, message)`.
pub(super) fn check_store(
    file: &Path,
    c: &StoreConfig,
) -> Result<StoreSpec, Vec<(&'static str, String)>> {
    let mut problems = Vec::new();
    let url = match c.url.as_deref().map(str::trim) {
        None => {
            problems.push((
                "store.url",
                "is required: a SQLite path (\"rein-data/rein.db\") or a postgres:// URL"
                    .to_owned(),
            ));
            None
        }
        Some("") => {
            problems.push(("store.url", "must not be empty".to_owned()));
            None
        }
        Some(url) if is_postgres(url) => Some(StoreUrl::Postgres(url.to_owned())),
        Some(path) => {
            let dir = file.parent().unwrap_or_else(|| Path::new(""));
            Some(StoreUrl::Sqlite(dir.join(path)))
        }
    };
    if matches!(url, Some(StoreUrl::Sqlite(_))) {
        for (field, given) in [
            ("store.pool_size", c.pool_size.is_some()),
            ("store.connect_timeout", c.connect_timeout.is_some()),
            ("store.migrate", c.migrate.is_some()),
            ("store.ca_file", c.ca_file.is_some()),
        ] {
            if given {
                problems.push((
                    field,
                    "has no effect on a SQLite store (store.url is a file path): only the \
                     PostgreSQL backend has a pool, connects (over TLS) and may be left \
                     unmigrated; \
                     remove it or use a postgres:// URL"
                        .to_owned(),
                ));
            }
        }
    }
    if matches!(url, Some(StoreUrl::Postgres(_))) {
        for (field, given) in [
            ("store.synchronous", c.synchronous.is_some()),
            ("store.busy_timeout", c.busy_timeout.is_some()),
        ] {
            if given {
                problems.push((
                    field,
                    "has no effect on a PostgreSQL store (store.url is a postgres:// URL): \
                     its durability is the server's synchronous_commit and its waits are \
                     store.connect_timeout; remove it or use a SQLite path"
                        .to_owned(),
                ));
            }
        }
    }
    let busy_timeout = match c.busy_timeout {
        None => Some(DEFAULT_BUSY_TIMEOUT),
        Some(d) if d <= MAX_BUSY_TIMEOUT => Some(d),
        Some(d) => {
            problems.push((
                "store.busy_timeout",
                format!(
                    "must be at most {}s, but is {d:?}",
                    MAX_BUSY_TIMEOUT.as_secs()
                ),
            ));
            None
        }
    };
    let pool_size = match c.pool_size {
        None => NonZeroU32::new(DEFAULT_POOL_SIZE),
        Some(n) if (1..=MAX_POOL_SIZE).contains(&n) => NonZeroU32::new(n),
        Some(n) => {
            problems.push((
                "store.pool_size",
                format!("must be 1 to {MAX_POOL_SIZE} connections, but is {n}"),
            ));
            None
        }
    };
    let connect_timeout = match c.connect_timeout {
        None => Some(DEFAULT_CONNECT_TIMEOUT),
        Some(d) if !d.is_zero() && d <= MAX_CONNECT_TIMEOUT => Some(d),
        Some(d) => {
            problems.push((
                "store.connect_timeout",
                format!(
                    "must be more than 0s and at most {}s, but is {d:?}",
                    MAX_CONNECT_TIMEOUT.as_secs()
                ),
            ));
            None
        }
    };
    let dir = file.parent().unwrap_or_else(|| Path::new(""));
    let ca_file = match c.ca_file.as_deref() {
        Some(path) if path.as_os_str().is_empty() => {
            problems.push(("store.ca_file", "must not be empty".to_owned()));
            None
        }
        Some(path) => Some(dir.join(path)),
        None => None,
    };
    match (url, pool_size, connect_timeout, busy_timeout) {
        (Some(url), Some(pool_size), Some(connect_timeout), Some(busy_timeout))
            if problems.is_empty() =>
        {
            Ok(StoreSpec {
                file: file.to_path_buf(),
                url,
                pool_size,
                connect_timeout,
                migrate: c.migrate.unwrap_or(true),
                ca_file,
                synchronous: c.synchronous.unwrap_or_default(),
                busy_timeout,
            })
        }
        _ => Err(problems),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::registry::{ConfigFile, ConfigProblem, ConfigSource, Registry, check};

    fn build(text: &str) -> Result<Registry, Vec<ConfigProblem>> {
        let source = ConfigSource::new(
            "conf/store.toml",
            toml::from_str::<ConfigFile>(text).unwrap(),
        );
        check(&[source], &|_| Vec::new())
    }

    fn fields(text: &str) -> Vec<(String, String)> {
        build(text)
            .unwrap_err()
            .into_iter()
            .map(|p| {
                assert_eq!(p.file, Path::new("conf/store.toml"));
                (p.field, p.message)
            })
            .collect()
    }

    #[test]
    fn without_the_table_there_is_no_store_and_with_it_defaults_apply() {
        assert_eq!(build("").unwrap().store(), None);
        let registry = build("[store]\nurl = \"postgres://rein@db/rein\"\n").unwrap();
        let spec = registry.store().unwrap();
        assert_eq!(
            spec.url,
            StoreUrl::Postgres("postgres://rein@db/rein".into())
        );
        assert_eq!(spec.pool_size.get(), DEFAULT_POOL_SIZE);
        assert_eq!(spec.connect_timeout, DEFAULT_CONNECT_TIMEOUT);
        assert!(spec.migrate);
    }

    #[test]
    fn a_sqlite_path_resolves_against_the_config_files_directory() {
        let registry = build("[store]\nurl = \"data/rein.db\"\n").unwrap();
        assert_eq!(
            registry.store().unwrap().url,
            StoreUrl::Sqlite(PathBuf::from("conf/data/rein.db"))
        );
    }

    #[test]
    fn postgres_settings_are_read() {
        let registry = build(
            "[store]\nurl = \"postgres://rein@db/rein\"\npool_size = 4\n\
             connect_timeout = \"3s\"\nmigrate = false\n",
        )
        .unwrap();
        let spec = registry.store().unwrap();
        assert_eq!(spec.pool_size.get(), 4);
        assert_eq!(spec.connect_timeout, Duration::from_secs(3));
        assert!(!spec.migrate);
        assert_eq!(spec.ca_file, None);
        let registry = build(
            "[store]\nurl = \"postgres://rein@db/rein?sslmode=verify-full\"\n\
             ca_file = \"tls/ca.pem\"\n",
        )
        .unwrap();
        assert_eq!(
            registry.store().unwrap().ca_file,
            Some(PathBuf::from("conf/tls/ca.pem"))
        );
    }

    #[test]
    fn sqlite_settings_are_read_and_default_to_normal_and_five_seconds() {
        let spec = build("[store]\nurl = \"rein.db\"\n")
            .unwrap()
            .store()
            .cloned()
            .unwrap();
        assert_eq!(spec.synchronous, Synchronous::Normal);
        assert_eq!(spec.busy_timeout, DEFAULT_BUSY_TIMEOUT);
        let registry =
            build("[store]\nurl = \"rein.db\"\nsynchronous = \"full\"\nbusy_timeout = \"30s\"\n")
                .unwrap();
        let spec = registry.store().unwrap();
        assert_eq!(spec.synchronous, Synchronous::Full);
        assert_eq!(spec.busy_timeout, Duration::from_secs(30));
    }

    #[test]
    fn sqlite_only_fields_with_a_postgres_url_and_a_long_busy_timeout_are_refused() {
        let problems = fields(
            "[store]\nurl = \"postgres://rein@db/rein\"\nsynchronous = \"full\"\n\
             busy_timeout = \"2h\"\n",
        );
        let named: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            named,
            [
                "store.synchronous",
                "store.busy_timeout",
                "store.busy_timeout"
            ],
            "{problems:?}"
        );
        assert!(problems[0].1.contains("synchronous_commit"), "{problems:?}");
        assert!(problems[2].1.contains("at most 3600s"), "{problems:?}");
    }

    #[test]
    fn postgres_only_fields_with_a_sqlite_url_are_refused_with_the_reason() {
        let problems = fields(
            "[store]\nurl = \"rein.db\"\npool_size = 4\nconnect_timeout = \"3s\"\nmigrate = true\n\
             ca_file = \"ca.pem\"\n",
        );
        let named: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            named,
            [
                "store.pool_size",
                "store.connect_timeout",
                "store.migrate",
                "store.ca_file"
            ]
        );
        assert!(problems[0].1.contains("has no effect on a SQLite store"));
    }

    #[test]
    fn out_of_range_values_and_a_missing_url_name_their_field() {
        let problems = fields("[store]\npool_size = 0\nconnect_timeout = \"0s\"\n");
        let named: Vec<&str> = problems.iter().map(|(f, _)| f.as_str()).collect();
        assert_eq!(
            named,
            ["store.url", "store.pool_size", "store.connect_timeout"]
        );
        assert!(problems[1].1.contains("but is 0"), "{problems:?}");
        let problems = fields("[store]\nurl = \"postgres://db/rein\"\npool_size = 1001\n");
        assert_eq!(problems[0].0, "store.pool_size");
    }
}

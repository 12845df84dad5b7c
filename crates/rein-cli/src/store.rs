//! The run store `--data` names: a SQLite file (the default) or a
//! PostgreSQL database (`postgres://…`), for every command that takes
//! `--data`.
//!
//! # Why one opener
//!
//! Each command opened SQLite itself; with a second backend, each would
//! have to tell them apart and keep the URL's password out of its messages.
//! Here that is done once: [`open`] picks the backend, [`shown`] is the
//! form every message prints.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use rein_core::registry::{StoreSpec, StoreUrl, Synchronous};
use rein_store::Store;
use rein_store_postgres::{PostgresOptions, PostgresStore, PostgresUrl, is_postgres_url};
use rein_store_sqlite::{SqliteOptions, SqliteStore};

/// What `data` names.
pub enum Data {
    /// A SQLite file.
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL database, its URL checked.
    Postgres(Box<PostgresUrl>),
}

impl Data {
    /// `data` as given to `--data`.
    ///
    /// # Errors
    ///
    /// A `postgres://` URL that does not parse or asks for what this build
    /// cannot do (client certificates, `sslmode=allow`, …), named without
    /// its credentials.
    pub fn parse(data: &Path) -> Result<Data> {
        match data.to_str().filter(|text| is_postgres_url(text)) {
            Some(url) => Ok(Data::Postgres(Box::new(PostgresUrl::parse(url)?))),
            None => Ok(Data::Sqlite(data.to_path_buf())),
        }
    }
}

/// `data` as messages show it: a path as it is, a URL without its
/// userinfo and query.
pub fn shown(data: &Path) -> String {
    rein_core::redact::scrub_urls(&data.display().to_string()).into_owned()
}

/// Where `rein serve` and `rein run` record runs without `--data` or
/// `[store]`.
pub const DEFAULT_DATA: &str = "rein-data/rein.db";

/// The store a command uses: `--data` when given (it overrides the
/// config), else `[store].url`, else [`DEFAULT_DATA`].
pub fn chosen(data: Option<&Path>, spec: Option<&StoreSpec>) -> PathBuf {
    match (data, spec.map(|spec| &spec.url)) {
        (Some(data), _) => data.to_path_buf(),
        (None, Some(StoreUrl::Sqlite(path))) => path.clone(),
        (None, Some(StoreUrl::Postgres(url))) => PathBuf::from(url),
        // `StoreUrl` may grow a backend this build does not know.
        (None, Some(_)) | (None, None) => PathBuf::from(DEFAULT_DATA),
    }
}

/// How a PostgreSQL store connects under `[store]` (its pool size,
/// connect timeout, migration setting and TLS CA; the defaults without the
/// table),
/// whichever URL `--data` or `[store].url` gives.
pub fn postgres_options(spec: Option<&StoreSpec>, migrate: bool) -> PostgresOptions {
    let mut options = PostgresOptions {
        migrate,
        ..PostgresOptions::default()
    };
    if let Some(spec) = spec {
        options.max_connections = usize::try_from(spec.pool_size.get()).unwrap_or(usize::MAX);
        options.connect_timeout = spec.connect_timeout;
        options.migrate = migrate && spec.migrate;
        options.ca_file.clone_from(&spec.ca_file);
    }
    options
}

/// [`open`] with the `[store]` table's PostgreSQL settings.
///
/// # Errors
///
/// As [`open`].
pub fn open_configured(data: &Path, spec: Option<&StoreSpec>) -> Result<Arc<dyn Store>> {
    open_options(data, postgres_options(spec, true), sqlite_options(spec))
}

/// How a SQLite store syncs and waits under `[store]` (the defaults
/// without the table), whichever path `--data` or `[store].url` gives.
pub fn sqlite_options(spec: Option<&StoreSpec>) -> SqliteOptions {
    let mut options = SqliteOptions::default();
    if let Some(spec) = spec {
        options.synchronous_full = spec.synchronous == Synchronous::Full;
        options.busy_timeout = spec.busy_timeout;
    }
    options
}

/// Opens (creating or migrating as needed) the store `data` names.
///
/// Blocks the calling thread while connecting: call it at startup, from
/// the CLI's multi-threaded runtime or outside any runtime.
///
/// # Errors
///
/// When the file cannot be opened or the database cannot be reached, with
/// the store named as [`shown`] names it.
pub fn open(data: &Path) -> Result<Arc<dyn Store>> {
    open_with(data, true)
}

/// Opens the store `data` names for reading or deciding what it holds:
/// it must exist (a SQLite file is never created, so a mistyped `--data`
/// is an error, not a new empty store), and a database must already be
/// at this rein's schema (nothing is created or migrated).
///
/// # Errors
///
/// As [`open`]; for a SQLite file that is not there; for a database that
/// is not migrated.
pub fn open_existing(data: &Path) -> Result<Arc<dyn Store>> {
    if let Data::Sqlite(path) = Data::parse(data)?
        && !path.is_file()
    {
        anyhow::bail!(
            "no run store at {} (pass the file `rein run` or `rein serve` wrote with --data)",
            path.display()
        );
    }
    open_with(data, false)
}

fn open_with(data: &Path, migrate: bool) -> Result<Arc<dyn Store>> {
    open_options(
        data,
        postgres_options(None, migrate),
        SqliteOptions::default(),
    )
}

fn open_options(
    data: &Path,
    options: PostgresOptions,
    sqlite: SqliteOptions,
) -> Result<Arc<dyn Store>> {
    let context = || format!("cannot open the run store {}", shown(data));
    match Data::parse(data).with_context(context)? {
        Data::Sqlite(path) => Ok(Arc::new(
            SqliteStore::open_with(&path, sqlite).with_context(context)?,
        )),
        Data::Postgres(url) => {
            let store =
                block_on(PostgresStore::connect_with(&url, options))?.with_context(context)?;
            Ok(Arc::new(store))
        }
    }
}

/// Runs `future` to completion from synchronous code: on the current
/// (multi-threaded) runtime when there is one, so the pool's connections
/// live on it, or on a runtime of its own.
pub fn block_on<T>(future: impl std::future::Future<Output = T>) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => Ok(tokio::task::block_in_place(|| handle.block_on(future))),
        Err(_) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("cannot start a runtime to open the store")?;
            Ok(runtime.block_on(future))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rein_core::registry::{ConfigFile, ConfigSource, StoreConfig, check};
    use std::time::Duration;

    /// `[store]` of `conf/rein.toml`, checked.
    fn spec(edit: impl FnOnce(&mut StoreConfig)) -> StoreSpec {
        let mut store = StoreConfig::default();
        edit(&mut store);
        let mut file = ConfigFile::default();
        file.store = Some(store);
        let registry = check(&[ConfigSource::new("conf/rein.toml", file)], &|_| {
            Vec::new()
        })
        .unwrap();
        registry.store().unwrap().clone()
    }

    fn postgres(c: &mut StoreConfig) {
        c.url = Some("postgres://rein@db/rein".to_owned());
    }

    #[test]
    fn data_overrides_the_store_table_which_overrides_the_default() {
        let pg = spec(postgres);
        assert_eq!(chosen(None, None), PathBuf::from(DEFAULT_DATA));
        assert_eq!(
            chosen(None, Some(&pg)),
            PathBuf::from("postgres://rein@db/rein")
        );
        assert_eq!(
            chosen(Some(Path::new("other.db")), Some(&pg)),
            PathBuf::from("other.db")
        );
        let file = spec(|c| c.url = Some("data/rein.db".to_owned()));
        assert_eq!(
            chosen(None, Some(&file)),
            PathBuf::from("conf/data/rein.db")
        );
    }

    #[test]
    fn the_tables_sqlite_settings_reach_the_store_and_defaults_agree() {
        assert_eq!(sqlite_options(None), SqliteOptions::default());
        let defaults = sqlite_options(Some(&spec(|c| c.url = Some("rein.db".to_owned()))));
        assert_eq!(defaults, SqliteOptions::default());
        assert_eq!(
            rein_core::registry::DEFAULT_BUSY_TIMEOUT,
            rein_store_sqlite::DEFAULT_BUSY_TIMEOUT
        );
        assert_eq!(
            rein_core::registry::MAX_BUSY_TIMEOUT,
            rein_store_sqlite::MAX_BUSY_TIMEOUT
        );
        let full = spec(|c| {
            c.url = Some("rein.db".to_owned());
            c.synchronous = Some(Synchronous::Full);
            c.busy_timeout = Some(Duration::from_secs(30));
        });
        let options = sqlite_options(Some(&full));
        assert!(options.synchronous_full);
        assert_eq!(options.busy_timeout, Duration::from_secs(30));
    }

    #[test]
    fn the_tables_postgres_settings_reach_the_pool() {
        let defaults = postgres_options(None, true);
        assert_eq!(
            defaults.max_connections,
            rein_store_postgres::DEFAULT_MAX_CONNECTIONS
        );
        let pg = spec(|c| {
            postgres(c);
            c.pool_size = Some(3);
            c.connect_timeout = Some(Duration::from_secs(2));
            c.migrate = Some(false);
            c.ca_file = Some(PathBuf::from("tls/ca.pem"));
        });
        let options = postgres_options(Some(&pg), true);
        assert_eq!(options.ca_file, Some(PathBuf::from("conf/tls/ca.pem")));
        assert_eq!(postgres_options(None, true).ca_file, None);
        assert_eq!(options.max_connections, 3);
        assert_eq!(options.connect_timeout, Duration::from_secs(2));
        assert!(!options.migrate, "migrate = false: refuse an old schema");
        // A reading command never migrates, whatever the table says.
        assert!(!postgres_options(Some(&spec(postgres)), false).migrate);
    }
}

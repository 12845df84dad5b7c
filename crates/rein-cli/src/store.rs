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

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use rein_store::Store;
use rein_store_postgres::{PostgresOptions, PostgresStore, PostgresUrl, is_postgres_url};
use rein_store_sqlite::SqliteStore;

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
    /// cannot do (TLS), named without its credentials.
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

/// Opens the store `data` names for reading: a database must already be
/// at this rein's schema (nothing is created or migrated).
///
/// # Errors
///
/// As [`open`], and for a database that is not migrated.
pub fn open_existing(data: &Path) -> Result<Arc<dyn Store>> {
    open_with(data, false)
}

fn open_with(data: &Path, migrate: bool) -> Result<Arc<dyn Store>> {
    let context = || format!("cannot open the run store {}", shown(data));
    match Data::parse(data).with_context(context)? {
        Data::Sqlite(path) => Ok(Arc::new(SqliteStore::open(&path).with_context(context)?)),
        Data::Postgres(url) => {
            let options = PostgresOptions {
                migrate,
                ..PostgresOptions::default()
            };
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

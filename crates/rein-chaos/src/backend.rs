//! The store a scenario runs on: a SQLite file in the scenario's
//! directory (the default), or a PostgreSQL database of its own, created
//! on a server for the scenario and dropped when it ends.
//!
//! # Why a database per scenario
//!
//! The runner judges a scenario by everything its store holds once it
//! ended (the submission layer lists every run to find a duplicate), so
//! each scenario needs an empty store, as it gets an empty SQLite file. A
//! database of its own is also what a node gets: the migrations run, the
//! advisory locks and `NOTIFY` are the production ones.
//!
//! ```text
//! StoreBackend::Sqlite                 → <scenario dir>/rein.db
//! StoreBackend::Postgres(server)       → CREATE DATABASE rein_chaos_c068_<pid>_<n>
//!                                        … the scenario …
//!                                        DROP DATABASE … WITH (FORCE)   (kept with --keep)
//! ```

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rein_store::Store;
use rein_store_postgres::{PostgresStore, PostgresUrl, is_postgres_url};
use rein_store_sqlite::SqliteStore;

use crate::ChaosError;

/// Where the scenarios' stores live.
#[derive(Clone, Default)]
#[non_exhaustive]
pub enum StoreBackend {
    /// A SQLite file in each scenario's directory.
    #[default]
    Sqlite,
    /// A database per scenario on this PostgreSQL server.
    Postgres(Box<PostgresServer>),
}

impl StoreBackend {
    /// `sqlite`, or `postgres://…` naming a server (its database is only
    /// where the suite connects to create and drop the scenarios' own).
    ///
    /// # Errors
    ///
    /// [`ChaosError::Setup`] for anything else, or a URL the PostgreSQL
    /// backend refuses (named without its credentials).
    pub fn parse(text: &str) -> Result<StoreBackend, ChaosError> {
        if text == "sqlite" {
            return Ok(StoreBackend::Sqlite);
        }
        if !is_postgres_url(text) {
            return Err(ChaosError::Setup(format!(
                "the chaos store must be `sqlite` or a postgres:// URL, but it is {:?}",
                rein_core::redact::scrub_urls(text)
            )));
        }
        PostgresServer::parse(text).map(|server| StoreBackend::Postgres(Box::new(server)))
    }

    /// `sqlite` or `postgres`, for results.
    pub fn name(&self) -> &'static str {
        match self {
            StoreBackend::Sqlite => "sqlite",
            StoreBackend::Postgres(_) => "postgres",
        }
    }
}

/// A PostgreSQL server the suite may create databases on.
///
/// `Debug` shows the URL without its credentials.
#[derive(Clone)]
pub struct PostgresServer {
    /// The URL as given, credentials included: the scenario databases'
    /// URLs are made from it, for the crash scenarios' worker process.
    text: String,
    url: PostgresUrl,
}

impl fmt::Debug for PostgresServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("PostgresServer").field(&self.url).finish()
    }
}

impl PostgresServer {
    /// Checks `text` as the PostgreSQL backend does.
    ///
    /// # Errors
    ///
    /// [`ChaosError::Setup`] for a URL the backend refuses.
    pub fn parse(text: &str) -> Result<PostgresServer, ChaosError> {
        let url =
            PostgresUrl::parse(text).map_err(|e| ChaosError::Setup(format!("--store: {e}")))?;
        Ok(PostgresServer {
            text: text.to_owned(),
            url,
        })
    }

    /// The URL of database `name` on this server, credentials included
    /// (for a child process's `--data`, never printed).
    fn database_url_text(&self, name: &str) -> String {
        let (head, tail) = match self.text.split_once('?') {
            Some((head, query)) => (head, format!("?{query}")),
            None => (self.text.as_str(), String::new()),
        };
        let base = head.rsplit_once('/').map_or(head, |(base, _)| base);
        format!("{base}/{name}{tail}")
    }

    /// A connection to the database the URL names, for `CREATE` and
    /// `DROP DATABASE`.
    async fn admin(&self) -> Result<tokio_postgres::Client, ChaosError> {
        // Over TLS as the backend would (the URL's `sslmode`): a server
        // that takes only TLS connections is one chaos must run against.
        let connector = self
            .url
            .connector(None)
            .map_err(|e| ChaosError::Setup(format!("--store {}: {e}", self.url)))?;
        let (client, connection) = self.url.config().connect(connector).await.map_err(|e| {
            ChaosError::Setup(format!("cannot connect to PostgreSQL at {}: {e}", self.url))
        })?;
        tokio::spawn(connection);
        Ok(client)
    }
}

/// Scenario databases made by this process, for unique names.
static MADE: AtomicU64 = AtomicU64::new(0);

/// The store of one scenario, open.
pub(crate) struct ScenarioStore {
    /// What every part of the scenario writes to.
    pub(crate) store: Arc<dyn Store>,
    /// What a worker process is given as `--data`: the SQLite file, or the
    /// database's URL.
    pub(crate) data: PathBuf,
    /// The database, on PostgreSQL.
    database: Option<ScenarioDatabase>,
}

struct ScenarioDatabase {
    server: PostgresServer,
    name: String,
    store: PostgresStore,
}

impl ScenarioStore {
    /// Opens the store of scenario `label` (`C068`), in `dir` or on the
    /// server.
    ///
    /// # Errors
    ///
    /// [`ChaosError::Setup`] when the file cannot be opened, or the
    /// database cannot be created or connected to.
    pub(crate) async fn open(
        backend: &StoreBackend,
        dir: &Path,
        label: &str,
    ) -> Result<ScenarioStore, ChaosError> {
        match backend {
            StoreBackend::Sqlite => {
                let data = dir.join("rein.db");
                let store = SqliteStore::open(&data)
                    .map_err(|e| ChaosError::Setup(format!("the store: {e}")))?;
                Ok(ScenarioStore {
                    store: Arc::new(store),
                    data,
                    database: None,
                })
            }
            StoreBackend::Postgres(server) => {
                let name = format!(
                    "rein_chaos_{}_{}_{}",
                    label.to_ascii_lowercase(),
                    std::process::id(),
                    MADE.fetch_add(1, Ordering::Relaxed)
                );
                server
                    .admin()
                    .await?
                    .batch_execute(&format!("CREATE DATABASE {name}"))
                    .await
                    .map_err(|e| {
                        ChaosError::Setup(format!(
                            "cannot create database {name} at {}: {e}",
                            server.url
                        ))
                    })?;
                let text = server.database_url_text(&name);
                let store = match PostgresStore::connect(&text).await {
                    Ok(store) => store,
                    Err(e) => {
                        drop_database(server, &name).await;
                        return Err(ChaosError::Setup(format!("the store: {e}")));
                    }
                };
                Ok(ScenarioStore {
                    store: Arc::new(store.clone()),
                    data: PathBuf::from(text),
                    database: Some(ScenarioDatabase {
                        server: (**server).clone(),
                        name,
                        store,
                    }),
                })
            }
        }
    }

    /// On PostgreSQL, what ends every connection the scenario's store
    /// holds to its database: `pg_terminate_backend` from a side
    /// connection of its own, as an operator (or a failover) would. `None`
    /// on SQLite.
    pub(crate) fn terminator(&self) -> Option<crate::store_fault::Terminator> {
        let database = self.database.as_ref()?;
        let server = database.server.clone();
        let name = database.name.clone();
        Some(std::sync::Arc::new(move || {
            let server = server.clone();
            let name = name.clone();
            Box::pin(async move { terminate_backends(&server, &name).await })
        }))
    }

    /// The database's name, on PostgreSQL.
    pub(crate) fn database(&self) -> Option<String> {
        self.database.as_ref().map(|d| d.name.clone())
    }

    /// Closes the store; drops the database unless `keep`.
    pub(crate) async fn close(self, keep: bool) {
        if let Some(database) = self.database {
            database.store.close();
            if !keep {
                drop_database(&database.server, &database.name).await;
            }
        }
    }
}

/// Terminates every backend of database `name` but the side connection's
/// own; how many it ended.
async fn terminate_backends(server: &PostgresServer, name: &str) -> Result<u64, String> {
    let admin = server.admin().await.map_err(|e| e.to_string())?;
    let ended = admin
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = $1 AND pid <> pg_backend_pid()",
            &[&name],
        )
        .await
        .map_err(|e| e.to_string())?;
    Ok(ended.len() as u64)
}

/// Drops a scenario database; a failure is logged, not fatal (the
/// scenario's verdict stands).
async fn drop_database(server: &PostgresServer, name: &str) {
    let dropped = match server.admin().await {
        Ok(admin) => admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    if let Err(e) = dropped {
        tracing::warn!("cannot drop the scenario database {name}: {e}");
    }
}

/// Opens the store a worker process is given as `--data`: a SQLite file,
/// or a scenario database's URL.
///
/// # Errors
///
/// [`ChaosError::Setup`] when it cannot be opened.
pub(crate) async fn open_data(data: &Path) -> Result<Arc<dyn Store>, ChaosError> {
    let setup = |e: rein_store::StoreError| ChaosError::Setup(format!("the store: {e}"));
    match data.to_str().filter(|text| is_postgres_url(text)) {
        Some(url) => Ok(Arc::new(PostgresStore::connect(url).await.map_err(setup)?)),
        None => Ok(Arc::new(SqliteStore::open(data).map_err(setup)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_database_url_keeps_the_credentials_and_the_query() {
        let server =
            PostgresServer::parse("postgres://u:pw@127.0.0.1:5432/postgres?connect_timeout=5")
                .unwrap();
        assert_eq!(
            server.database_url_text("rein_chaos_c068_1_0"),
            "postgres://u:pw@127.0.0.1:5432/rein_chaos_c068_1_0?connect_timeout=5"
        );
        assert!(!format!("{server:?}").contains("pw"));
    }

    #[test]
    fn a_store_that_is_neither_sqlite_nor_postgres_is_refused() {
        let Err(e) = StoreBackend::parse("mysql://db/rein") else {
            panic!("mysql is not a chaos store");
        };
        assert!(e.to_string().contains("sqlite"), "{e}");
        assert_eq!(StoreBackend::parse("sqlite").unwrap().name(), "sqlite");
    }
}

//! Scratch databases for tests (feature `scratch`): each test creates its
//! own database on the machine's PostgreSQL and drops it at the end.
//!
//! # Why a database per test
//!
//! A conformance check, or a `rein serve` process test, must start from an
//! empty schema and may leave anything behind; a database of its own (not
//! a schema of a shared one) is what a real node gets, migrations
//! included.
//!
//! The server is `REIN_TEST_POSTGRES_URL` (default
//! `postgres://root@127.0.0.1:5432/postgres`, the machine's trust-auth
//! server). Without one, [`ScratchDatabase::create`] says so and returns
//! `None` (the test skips), except under `CI=true`, where it panics: CI
//! must not pass a test it did not run.
#![allow(
    clippy::expect_used,
    clippy::panic,
    reason = "a test helper: a server that refuses to create or drop a database fails the test"
)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::url::PostgresUrl;

/// The server tests use when `REIN_TEST_POSTGRES_URL` is not set.
pub const DEFAULT_TEST_SERVER: &str = "postgres://root@127.0.0.1:5432/postgres";

/// A database made for one test.
#[derive(Debug)]
pub struct ScratchDatabase {
    server: PostgresUrl,
    url: PostgresUrl,
    name: String,
}

impl ScratchDatabase {
    /// Creates an empty database named after `prefix` (letters, digits and
    /// `_`) on the test server; `None` when no server answers outside CI.
    ///
    /// # Panics
    ///
    /// Under `CI=true` when no server answers; whenever the server refuses
    /// to create the database.
    pub async fn create(prefix: &str) -> Option<ScratchDatabase> {
        let server = std::env::var("REIN_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| DEFAULT_TEST_SERVER.to_owned());
        let server = PostgresUrl::parse(&server).expect("REIN_TEST_POSTGRES_URL is a postgres URL");
        let tls = server
            .connector(None)
            .expect("REIN_TEST_POSTGRES_URL's TLS parameters are usable");
        let admin = match server.config().connect(tls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                client
            }
            Err(error) => {
                let why = format!("no PostgreSQL at {server} ({error})");
                if std::env::var("CI").is_ok_and(|ci| ci == "true") {
                    panic!("{why}: CI must run the PostgreSQL tests (.ci/run starts the server)");
                }
                eprintln!("skipped: {why}; set REIN_TEST_POSTGRES_URL or start PostgreSQL");
                return None;
            }
        };
        let name = unique_name(prefix);
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("the test server creates a scratch database");
        let url = server
            .with_database(&name)
            .expect("a scratch database's URL parses");
        Some(ScratchDatabase { server, url, name })
    }

    /// The scratch database's URL.
    pub fn url(&self) -> &PostgresUrl {
        &self.url
    }

    /// The URL as text, credentials included: for a child process's
    /// `--data` (never printed).
    pub fn url_text(&self) -> String {
        let config = self.url.config();
        let user = config.get_user().unwrap_or("postgres");
        let password = config
            .get_password()
            .map(|password| format!(":{}", String::from_utf8_lossy(password)))
            .unwrap_or_default();
        let (host, port) = host_and_port(config);
        format!("postgres://{user}{password}@{host}:{port}/{}", self.name)
    }

    /// Drops the database, closing whatever connections are left on it.
    ///
    /// # Panics
    ///
    /// When the server refuses.
    pub async fn drop_database(self) {
        let (admin, connection) = self
            .server
            .config()
            .connect(
                self.server
                    .connector(None)
                    .expect("the test server's TLS parameters were usable at create"),
            )
            .await
            .expect("the test server answers to drop a scratch database");
        tokio::spawn(connection);
        admin
            .batch_execute(&format!(
                "DROP DATABASE IF EXISTS {} WITH (FORCE)",
                self.name
            ))
            .await
            .expect("the test server drops a scratch database");
    }
}

/// The first host and port of `config` (a socket directory's host is
/// its path).
fn host_and_port(config: &tokio_postgres::Config) -> (String, u16) {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        #[cfg(unix)]
        Some(tokio_postgres::config::Host::Unix(path)) => path.display().to_string(),
        None => "127.0.0.1".to_owned(),
    };
    (host, config.get_ports().first().copied().unwrap_or(5432))
}

/// A database name no other test (of this or another process) uses.
fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let clean: String = prefix
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(24)
        .collect::<String>()
        .to_ascii_lowercase();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() % 1_000_000_000_000);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("rein_test_{clean}_{}_{nanos}_{count}", std::process::id())
}

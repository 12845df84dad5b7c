//! rein-store-postgres: the [`Store`] on PostgreSQL, for several `rein
//! serve` nodes sharing one database.
//!
//! # Using it
//!
//! Depend on this crate (and `rein-store` for the types) instead of
//! `rein-store-sqlite` when more than one host drives runs: it compiles no
//! SQLite. [`PostgresStore::connect`] (or [`connect_with`] and
//! [`PostgresOptions`]: the pool's size, the connect timeout, whether to
//! migrate or leave that to `rein migrate`) checks the URL
//! ([`PostgresUrl`]), takes one connection and migrates the schema, so a
//! wrong password or a missing database fails at startup, not at the
//! first run. Hand the store to the engine as an `Arc<dyn Store>`; nothing
//! above it knows which backend it is.
//!
//! The URL is checked before anything connects, and a store that cannot
//! reach its database fails with a transient error (the caller retries)
//! rather than hanging; neither needs a server:
//!
//! ```
//! use std::time::Duration;
//! use rein_store_postgres::tls::SslMode;
//! use rein_store_postgres::{PostgresOptions, PostgresStore, PostgresUrl, is_postgres_url};
//! use rein_store::StoreError;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let url = PostgresUrl::parse(
//!     "postgres://rein:hunter2@db.internal:5432/rein?sslmode=verify-full&sslrootcert=system",
//! )?;
//! assert_eq!(url.database(), "rein");
//! assert_eq!(url.tls().mode, SslMode::VerifyFull);
//! // Shown in logs and errors without its credentials.
//! assert!(!url.to_string().contains("hunter2"));
//! // What rein cannot honour is refused by name, not downgraded.
//! let allow = PostgresUrl::parse("postgres://rein@db.internal/rein?sslmode=allow");
//! assert!(matches!(allow, Err(StoreError::Invalid { .. })));
//! // `--data` takes a URL or a SQLite file.
//! assert!(!is_postgres_url("/var/lib/rein/rein.db"));
//!
//! // Nothing listens on port 1: unavailable, a transient error.
//! let nowhere = PostgresUrl::parse("postgres://rein@127.0.0.1:1/rein?sslmode=disable")?;
//! let options = PostgresOptions {
//!     connect_timeout: Duration::from_secs(2),
//!     ..PostgresOptions::default()
//! };
//! let Err(error) = PostgresStore::connect_with(&nowhere, options).await else {
//!     return Err("something answered on port 1".into());
//! };
//! assert!(error.is_transient(), "{error}");
//! # Ok(())
//! # }
//! ```
//!
//! On a real database, the store is every other backend's: this example
//! runs on a scratch database of the server at `REIN_TEST_POSTGRES_URL`
//! (default `postgres://root@127.0.0.1:5432/postgres`, as this crate's
//! tests do), and skips without one, except under `CI=true`, where it
//! fails. Run it with
//! `REIN_TEST_POSTGRES_URL=postgres://user:password@host:5432/postgres
//! cargo test --doc -p rein-store-postgres`; the user needs `CREATEDB`.
//!
//! ```
//! use rein_core::{RunId, TenantId};
//! use rein_store::{NewRun, RunStatus, RunStore, Timestamp};
//! use rein_store_postgres::PostgresStore;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let Some(scratch) = rein_store_postgres::scratch::ScratchDatabase::create("doc").await else {
//! #     return Ok(());
//! # };
//! # let url = scratch.url_text();
//! // `url`: "postgres://rein:…@db.internal:5432/rein"
//! let store = PostgresStore::connect(&url).await?;
//! let run = store
//!     .create_run(NewRun {
//!         run_id: RunId::new("run-1")?,
//!         tenant: TenantId::new("acme")?,
//!         agent: "order-desk".to_owned(),
//!         input: "move order 42 to Friday".to_owned(),
//!         parent_run_id: None,
//!         budget: serde_json::json!({ "max_steps": 10 }),
//!         created_at_ms: Timestamp::from_millis(1_700_000_000_000),
//!         trace_parent: None,
//!     })
//!     .await?;
//! assert_eq!(run.status, RunStatus::Queued);
//! // A second node's store sees the run the first one created.
//! let other = PostgresStore::connect(&url).await?;
//! let seen = other.get_run(&run.run_id).await?.map(|run| run.status);
//! assert_eq!(seen, Some(RunStatus::Queued));
//! store.close();
//! other.close();
//! # scratch.drop_database().await;
//! # Ok(())
//! # }
//! ```
//!
//! [`connect_with`]: PostgresStore::connect_with
//!
//! # Why PostgreSQL
//!
//! SQLite serves one machine: several processes may share its file, but
//! not several hosts. The reliability features that span processes
//! (idempotency keys, run claims and takeover, singleton election, shared
//! breakers) need one store every node writes atomically; PostgreSQL is
//! that store, an existing engine rather than a replication layer of
//! rein's own.
//!
//! # Why tokio-postgres and deadpool-postgres, not sqlx
//!
//! Both are well kept. `sqlx` brings its query macros, several runtimes and
//! backends behind features, and a heavier build; rein writes its SQL by
//! hand (mirroring the SQLite backend statement for statement) and needs
//! none of that. `tokio-postgres` is the async driver alone, on the tokio
//! rein already runs, and `deadpool-postgres` a small pool with prepared
//! statement caching: together they add a few seconds to a build on CI's
//! two cores, not a minute.
//!
//! # Semantics
//!
//! Exactly the SQLite backend's, held to the same conformance suite check
//! by check (`rein_store::conformance_tests!`): every write is one
//! transaction, and each takes the locks that make its check and its write
//! one atomic step against every other node. A step commit
//! locks its run's row (so event and ledger `seq` stay gap-free) and, when
//! fenced by a claim, the claim's lease: a take-over and a commit of the
//! old owner never both land; idempotency keys, singletons and breaker
//! arms take transaction-scoped advisory locks, which stand for rows that
//! may not exist yet. Schema changes are versioned migrations
//! ([`SCHEMA_VERSION`]), applied at connect or by `rein migrate`.
//!
//! # TLS
//!
//! libpq's `sslmode` values on rustls (see [`tls`]): `disable`, `prefer`
//! (the default), `require`, `verify-ca` and `verify-full` against the CA of
//! `sslrootcert=` in the URL or [`PostgresOptions::ca_file`]. What rein does
//! not do (client certificates, `sslmode=allow`, …) is refused by name.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod codec;
mod listen;
mod migrate;
pub(crate) mod ops;
mod settle;
mod store;
pub mod tls;
mod url;

#[cfg(feature = "scratch")]
pub mod scratch;

pub use migrate::{SCHEMA_VERSION, SchemaState};
pub use store::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CONNECTIONS, PostgresOptions, PostgresStore};
pub use url::{PostgresUrl, is_postgres_url};

#[doc(no_inline)]
pub use rein_store::Store;

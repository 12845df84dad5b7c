//! rein-store-postgres: the [`Store`] on PostgreSQL, for several `rein
//! serve` nodes sharing one database.
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

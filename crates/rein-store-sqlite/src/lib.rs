//! rein-store-sqlite: the embedded SQLite backend of rein's [`Store`](rein_store::Store)
//! trait, [`SqliteStore`].
//!
//! # Why SQLite by default
//!
//! `rein run` and `rein serve` on one node need durable state with no setup:
//! one file, WAL mode so readers never block the writer, and a schema that
//! migrates itself. Several processes may open the same file (a CLI
//! `rein report` next to a running `rein serve`); SQLite's locks serialize
//! their writes and `busy_timeout` makes a writer wait instead of failing.
//!
//! | table | key | holds |
//! | --- | --- | --- |
//! | `runs` | `run_id` (indexed by status and by parent, oldest first, in schema v5) | the run, its status and report |
//! | `events` | `run_id, seq` | the event stream |
//! | `intents` | `run_id, intent_id` | planned calls |
//! | `ledger` | `run_id, intent_id` (`seq` unique per run) | declared side effects |
//! | `checkpoints` | `run_id, step` | whole state after a step (the base of the deltas after it) |
//! | `checkpoint_deltas` | `run_id, step` | what each step added to the state (schema v10) |
//! | `leases` | `lease_id` | resources held for a run (schema v2) |
//! | `idempotency` | `tenant, idempotency_key` | HTTP idempotency records (schema v3) |
//! | `singletons` | `name` | singleton election leases (schema v4) |
//! | `breaker_openings` | `arm` | breaker arms opened by a node, shared with the others (schema v6) |
//! | `latency_histograms` | `subject` | observed latency, summed over every process (schema v11) |
//! | `share_leases` | `resource_group, node` | the nodes dividing a resource group's limits (schema v13) |
//! | `retry_outcomes` | `target, ordinal` | retry outcomes, summed over every process and halved per window (schema v16) |
//! | `cancel_requests` | `run_id` | cancels taken by any process for the one driving the run (schema v14) |
//! | `approvals` | `run_id, intent_id` | calls paused for a human's decision, and the decision (schema v18) |
//! | `token_ratios` | `model` | bytes per token each model's provider counted, summed over every process (schema v20) |
//! | `spend` | `tenant, key, day, model` | tokens and micro-dollars each API key spent on each model per UTC day, summed over every process (schema v22) |
//! | `rein_schema` | `version` | migrations applied |
//!
//! # Why its own crate
//!
//! `rein-store` is the store API alone (restate's `storage-api` beside its
//! partition store): an embedder that runs on PostgreSQL only depends on
//! `rein-store-postgres` and never compiles the bundled SQLite library.
//!
//! # Example
//!
//! ```
//! use rein_core::{RunId, TenantId};
//! use rein_store::{NewRun, RunStatus, RunStore};
//! use rein_store_sqlite::SqliteStore;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = std::env::temp_dir().join(format!("rein-store-doc-{}", std::process::id()));
//! let store = SqliteStore::open(dir.join("rein.db"))?;
//! # let runtime = tokio::runtime::Builder::new_current_thread().build()?;
//! # runtime.block_on(async {
//! let run = store
//!     .create_run(NewRun {
//!         run_id: RunId::new("run-1")?,
//!         tenant: TenantId::new("acme")?,
//!         agent: "order-desk".to_owned(),
//!         input: "move order 42 to Friday".to_owned(),
//!         parent_run_id: None,
//!         budget: serde_json::json!({ "max_steps": 10 }),
//!         created_at_ms: rein_store::Timestamp::from_millis(1_700_000_000_000),
//!         trace_parent: None,
//!     })
//!     .await?;
//! assert_eq!(run.status, RunStatus::Queued);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # std::fs::remove_dir_all(&dir)?;
//! # Ok(())
//! # }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod approval_ops;
mod backlog;
mod cancel_ops;
mod codec;
mod config;
mod files;
mod latency_ops;
mod ops;
mod retry_ops;
mod schema;
mod share_ops;
mod spend_ops;
mod stats_ops;
mod token_ratio_ops;
mod webhook_ops;
mod worker;

pub use config::{DEFAULT_BUSY_TIMEOUT, DEFAULT_SYNCHRONOUS_FULL, MAX_BUSY_TIMEOUT, SqliteOptions};
pub use files::{DIRECTORY_MODE, FILE_MODE, is_world_readable, world_readable_files};
pub use schema::SCHEMA_VERSION;

use rein_store::Timestamp;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use rein_core::{Event, LedgerRecord, RunId, TenantId};
use rusqlite::Connection;

use self::codec::SqlResult;
use self::worker::Worker;
use rein_store::BreakerOpening;
use rein_store::Checkpoint;
use rein_store::LatencyRows;
use rein_store::PlannedIntent;
use rein_store::SingletonLease;
use rein_store::StoreError;
use rein_store::TenantBacklog;
use rein_store::{
    Committed, HealthStore, IdempotencyStore, LeaseStore, RunStore, SingletonStore, StepCommit,
};
use rein_store::{
    IdempotencyRecord, IdempotencySettled, IdempotencySettlement, IdempotencyState, NewReservation,
    Reservation, ReservationFence, StoredResponse,
};
use rein_store::{Lease, LeaseChange, LeaseFilter};
use rein_store::{NewRun, RunCursor, RunFilter, RunPage, RunRecord, RunStatus};

/// Prepared statements kept per connection; above the number of distinct
/// statements the store issues, so none is ever re-prepared.
const STATEMENT_CACHE: usize = 64;

/// A [`Store`](rein_store::Store) on one SQLite file.
///
/// Cloning is cheap and shares the connection's thread; the thread and its
/// connection close when the last clone is dropped.
///
/// # Durability
///
/// See [`SqliteOptions`]: by default every acknowledged write survives a
/// crash of the process; power loss may lose the last commits.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    worker: Worker,
    path: PathBuf,
}

impl SqliteStore {
    /// Opens (creating if needed) the store at `path` with default
    /// [`SqliteOptions`].
    ///
    /// # Errors
    ///
    /// See [`SqliteStore::open_with`].
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore, StoreError> {
        SqliteStore::open_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) the store at `path`: creates the parent
    /// directories (`0700`) and the file (`0600`; see [`FILE_MODE`]), switches to WAL, applies `options`, turns
    /// foreign keys on and migrates the schema.
    ///
    /// Blocks the calling thread briefly (file creation, migration): call it
    /// at startup, or from `spawn_blocking`.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for out-of-range options;
    /// [`StoreError::SchemaTooNew`] when a newer rein wrote the file;
    /// [`StoreError::Backend`] when the directory or file cannot be created
    /// or is not a SQLite database; [`StoreError::Unavailable`] when another
    /// process holds the lock longer than the busy timeout.
    pub fn open_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore, StoreError> {
        let path = path.as_ref().to_path_buf();
        options.validate()?;
        let at = |error: StoreError| match error {
            StoreError::Backend(message) => {
                StoreError::Backend(format!("{message} (store file {})", path.display()))
            }
            StoreError::Unavailable(message) => {
                StoreError::Unavailable(format!("{message} (store file {})", path.display()))
            }
            other => other,
        };
        if let Some(parent) = path
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty())
        {
            files::create_private_dir(parent).map_err(|error| {
                StoreError::Backend(format!(
                    "cannot create directory {}: {error}",
                    parent.display()
                ))
            })?;
        }
        files::create_private_file(&path).map_err(|error| {
            StoreError::Backend(format!("cannot create {}: {error}", path.display()))
        })?;
        let mut conn = Connection::open(&path).sql().map_err(at)?;
        configure(&conn, &options).map_err(at)?;
        // After `configure`: the -wal and -shm exist once WAL mode is on.
        files::warn_if_world_readable(&path);
        schema::migrate(&mut conn).map_err(at)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let reader = open_reader(&path, &options).map_err(at)?;
        let checkpointer = open_checkpointer(&path, &options).map_err(at)?;
        let worker = Worker::start(conn, Some(reader), Some(checkpointer))?;
        Ok(SqliteStore { worker, path })
    }

    /// The schema version of the store file at `path` (`0` for a file
    /// that is missing or was never migrated), read without creating,
    /// changing or migrating anything.
    ///
    /// # Errors
    ///
    /// [`StoreError::Backend`] when the file is not a SQLite database;
    /// [`StoreError::Corrupt`] for a version table that makes no sense.
    pub fn schema_version(path: impl AsRef<Path>) -> Result<u32, StoreError> {
        let path = path.as_ref();
        if !path.exists() {
            return Ok(0);
        }
        let conn =
            Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).sql()?;
        schema::found_version(&conn).map_err(|error| match error {
            StoreError::Backend(message) => {
                StoreError::Backend(format!("{message} (store file {})", path.display()))
            }
            other => other,
        })
    }

    /// The file this store writes.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The query-only connection reads go to (see the worker's "Reads on
/// their own connection"), opened once the schema is migrated.
fn open_reader(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).sql()?;
    conn.busy_timeout(options.busy_timeout).sql()?;
    // Any write through it is a bug of ours: refused, not committed
    // outside the writer's group commit.
    conn.execute_batch("PRAGMA query_only = ON; PRAGMA foreign_keys = ON;")
        .sql()?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// The connection checkpoints run on (see the worker's "Checkpoints on
/// their own connection"): it syncs as the writer's `synchronous` says.
fn open_checkpointer(path: &Path, options: &SqliteOptions) -> Result<Connection, StoreError> {
    let conn = Connection::open(path).sql()?;
    conn.busy_timeout(options.busy_timeout).sql()?;
    conn.execute_batch(&format!("PRAGMA synchronous = {};", synchronous(options)))
        .sql()?;
    Ok(conn)
}

fn synchronous(options: &SqliteOptions) -> &'static str {
    if options.synchronous_full {
        "FULL"
    } else {
        "NORMAL"
    }
}

fn configure(conn: &Connection, options: &SqliteOptions) -> Result<(), StoreError> {
    conn.busy_timeout(options.busy_timeout).sql()?;
    let mode: String = conn
        .query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))
        .sql()?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Backend(format!(
            "journal mode must be wal, but sqlite kept {mode}"
        )));
    }
    conn.execute_batch(&format!(
        "PRAGMA synchronous = {}; PRAGMA foreign_keys = ON;",
        synchronous(options)
    ))
    .sql()
}

#[async_trait]
impl RunStore for SqliteStore {
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        self.worker
            .write(move |conn| ops::create_run(conn, run))
            .await
    }

    async fn create_run_claimed(
        &self,
        run: NewRun,
        claim: Lease,
        fence: Option<&ReservationFence>,
    ) -> Result<RunRecord, StoreError> {
        let fence = fence.cloned();
        // One write: the insert and the claim run in one savepoint of a
        // `BEGIN IMMEDIATE`, so no other handle sees the run unclaimed, and
        // a refused claim undoes the insert.
        self.worker
            .write(move |conn| ops::create_run_claimed(conn, run, claim, fence.as_ref()))
            .await
    }

    async fn get_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        let run_id = run_id.clone();
        self.worker
            .read(move |conn| ops::get_run(conn, &run_id))
            .await
    }

    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        self.worker
            .read(move |conn| ops::list_runs(conn, limit))
            .await
    }

    async fn runs_with_status(
        &self,
        status: RunStatus,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        self.worker
            .read(move |conn| ops::runs_with_status(conn, status, limit))
            .await
    }

    async fn runs_with_status_after(
        &self,
        status: RunStatus,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let after = after.cloned();
        self.worker
            .read(move |conn| ops::runs_with_status_after(conn, status, after.as_ref(), limit))
            .await
    }

    async fn list_runs_page(
        &self,
        filter: &RunFilter,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        let (filter, after) = (filter.clone(), after.cloned());
        self.worker
            .read(move |conn| ops::list_runs_page(conn, &filter, after.as_ref(), limit))
            .await
    }

    async fn tenant_backlogs(
        &self,
        tenant: Option<&TenantId>,
        oldest: usize,
    ) -> Result<Vec<crate::TenantBacklog>, StoreError> {
        let tenant = tenant.cloned();
        self.worker
            .read(move |conn| backlog::tenant_backlogs(conn, tenant.as_ref(), oldest))
            .await
    }

    async fn queue_heads(&self, oldest: usize) -> Result<Vec<rein_store::QueueHead>, StoreError> {
        self.worker
            .read(move |conn| backlog::queue_heads(conn, oldest))
            .await
    }

    async fn count_runs_with_status(&self, status: RunStatus) -> Result<u64, StoreError> {
        self.worker
            .read(move |conn| ops::count_runs_with_status(conn, status))
            .await
    }

    async fn children_of(&self, parent: &RunId) -> Result<Vec<RunRecord>, StoreError> {
        let parent = parent.clone();
        self.worker
            .read(move |conn| ops::children_of(conn, &parent))
            .await
    }

    async fn events(&self, run_id: &RunId, after_seq: u64) -> Result<Vec<Event>, StoreError> {
        let run_id = run_id.clone();
        self.worker
            .read(move |conn| ops::events(conn, &run_id, after_seq))
            .await
    }

    async fn intents(&self, run_id: &RunId) -> Result<Vec<(u32, PlannedIntent)>, StoreError> {
        let run_id = run_id.clone();
        self.worker
            .read(move |conn| ops::intents(conn, &run_id))
            .await
    }

    async fn ledger(&self, run_id: &RunId) -> Result<Vec<LedgerRecord>, StoreError> {
        let run_id = run_id.clone();
        self.worker
            .read(move |conn| ops::ledger(conn, &run_id))
            .await
    }

    async fn pending_ledger(&self, limit: usize) -> Result<Vec<LedgerRecord>, StoreError> {
        self.worker
            .read(move |conn| ops::pending_ledger(conn, limit))
            .await
    }

    async fn latest_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError> {
        let run_id = run_id.clone();
        self.worker
            .read(move |conn| ops::latest_checkpoint(conn, &run_id))
            .await
    }

    async fn commit_step(
        &self,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        let run_id = run_id.clone();
        self.worker
            .write(move |conn| ops::commit_step(conn, &run_id, commit))
            .await
    }

    async fn run_stats(
        &self,
        query: &rein_store::StatsQuery,
    ) -> Result<rein_store::RunStats, StoreError> {
        let query = query.clone();
        self.worker
            .read(move |conn| stats_ops::run_stats(conn, &query))
            .await
    }

    async fn request_cancel(
        &self,
        request: rein_store::CancelRequest,
    ) -> Result<rein_store::CancelRequest, StoreError> {
        self.worker
            .write(move |conn| cancel_ops::request_cancel(conn, &request))
            .await
    }

    async fn cancel_request(
        &self,
        run_id: &RunId,
    ) -> Result<Option<rein_store::CancelRequest>, StoreError> {
        let run_id = run_id.clone();
        self.worker
            .read(move |conn| cancel_ops::cancel_request(conn, &run_id))
            .await
    }

    async fn cancel_requests(
        &self,
        run_ids: &[RunId],
    ) -> Result<Vec<rein_store::CancelRequest>, StoreError> {
        let run_ids = run_ids.to_vec();
        // One read on the store's thread for all of them: the hand-off,
        // not the indexed lookup, is what a read costs here.
        self.worker
            .read(move |conn| {
                let mut requests = Vec::new();
                for run_id in &run_ids {
                    requests.extend(cancel_ops::cancel_request(conn, run_id)?);
                }
                Ok(requests)
            })
            .await
    }

    async fn decide_approval(
        &self,
        run_id: &RunId,
        intent_id: &rein_core::IntentId,
        decision: rein_core::approval::Decision,
    ) -> Result<rein_store::Decided, StoreError> {
        let run_id = run_id.clone();
        let intent_id = intent_id.clone();
        self.worker
            .write(move |conn| approval_ops::decide(conn, &run_id, &intent_id, decision))
            .await?
            .into_result()
    }

    async fn approvals(
        &self,
        filter: &rein_store::ApprovalFilter,
    ) -> Result<Vec<rein_core::approval::Approval>, StoreError> {
        let filter = filter.clone();
        self.worker
            .read(move |conn| approval_ops::list(conn, &filter))
            .await
    }

    async fn expire_approvals(
        &self,
        now_ms: rein_store::Timestamp,
        limit: usize,
    ) -> Result<Vec<rein_core::approval::Approval>, StoreError> {
        self.worker
            .write(move |conn| approval_ops::expire(conn, now_ms, limit))
            .await
    }
}

#[async_trait]
impl LeaseStore for SqliteStore {
    async fn change_lease(&self, change: LeaseChange) -> Result<Option<Lease>, StoreError> {
        self.worker
            .write(move |conn| ops::change_lease(conn, change))
            .await
    }

    async fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
        let filter = filter.clone();
        self.worker
            .read(move |conn| ops::leases(conn, &filter))
            .await
    }

    async fn renew_lease_of(
        &self,
        lease_id: &str,
        owner: &str,
        expires_at_ms: Timestamp,
    ) -> Result<bool, StoreError> {
        let (lease_id, owner) = (lease_id.to_owned(), owner.to_owned());
        // A write: the owner check and the renewal run in one `BEGIN
        // IMMEDIATE`, so no take-over (of this or another process) runs
        // between them.
        self.worker
            .write(move |conn| ops::renew_lease_of(conn, &lease_id, &owner, expires_at_ms))
            .await
    }

    async fn renew_leases_of(
        &self,
        held: &[(String, String)],
        expires_at_ms: Timestamp,
    ) -> Result<Vec<bool>, StoreError> {
        let held = held.to_vec();
        // One `BEGIN IMMEDIATE` for all: each check and its renewal are
        // atomic as in `renew_lease_of`, and the beat costs one commit.
        self.worker
            .write(move |conn| {
                held.iter()
                    .map(|(lease_id, owner)| {
                        ops::renew_lease_of(conn, lease_id, owner, expires_at_ms)
                    })
                    .collect()
            })
            .await
    }

    async fn release_lease_of(&self, lease_id: &str, owner: &str) -> Result<bool, StoreError> {
        let (lease_id, owner) = (lease_id.to_owned(), owner.to_owned());
        self.worker
            .write(move |conn| ops::release_lease_of(conn, &lease_id, &owner))
            .await
    }

    async fn take_over_lease(&self, lease: Lease, now_ms: Timestamp) -> Result<bool, StoreError> {
        // A write: the expiry check and the replacement run in one `BEGIN
        // IMMEDIATE`, so of concurrent take-overs (across processes) at most
        // one wins.
        self.worker
            .write(move |conn| ops::take_over_lease(conn, &lease, now_ms))
            .await
    }
}

#[async_trait]
impl IdempotencyStore for SqliteStore {
    async fn reserve_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Reservation, StoreError> {
        let (tenant, key, fingerprint) = (tenant.clone(), key.to_owned(), fingerprint.to_owned());
        // A write: it runs inside the worker's `BEGIN IMMEDIATE`, so no
        // other writer (of this or another process) runs between its read
        // and its insert.
        let reservation = NewReservation {
            tenant,
            key,
            fingerprint,
            holder: None,
            now_ms,
            expires_at_ms,
        };
        self.worker
            .write(move |conn| ops::reserve_idempotency(conn, &reservation))
            .await
    }

    async fn reserve_idempotency_as(
        &self,
        reservation: NewReservation,
    ) -> Result<Reservation, StoreError> {
        self.worker
            .write(move |conn| ops::reserve_idempotency(conn, &reservation))
            .await
    }

    async fn submit_queued(
        &self,
        reservation: NewReservation,
        run: NewRun,
        response: StoredResponse,
    ) -> Result<Reservation, StoreError> {
        // One write: the reservation, the run and the answer commit
        // together or not at all.
        self.worker
            .write(move |conn| ops::submit_queued(conn, reservation, run, response))
            .await
    }

    async fn settle_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        settlement: IdempotencySettlement,
        now_ms: Timestamp,
    ) -> Result<IdempotencySettled, StoreError> {
        let (tenant, key, owner) = (tenant.clone(), key.to_owned(), owner.to_owned());
        self.worker
            .write(move |conn| {
                ops::settle_idempotency(conn, &tenant, &key, &owner, settlement, now_ms)
            })
            .await
    }

    async fn renew_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        until_ms: Timestamp,
    ) -> Result<bool, StoreError> {
        let (tenant, key, owner) = (tenant.clone(), key.to_owned(), owner.to_owned());
        self.worker
            .write(move |conn| ops::renew_idempotency(conn, &tenant, &key, &owner, until_ms))
            .await
    }

    async fn create_run_held(
        &self,
        run: NewRun,
        fence: &ReservationFence,
    ) -> Result<RunRecord, StoreError> {
        let fence = fence.clone();
        // One write: the holder check and the insert run in one `BEGIN
        // IMMEDIATE`, so no release of the record runs between them.
        self.worker
            .write(move |conn| ops::create_run_held(conn, run, &fence))
            .await
    }

    async fn complete_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        response: StoredResponse,
        now_ms: Timestamp,
    ) -> Result<(), StoreError> {
        let (tenant, key) = (tenant.clone(), key.to_owned());
        self.worker
            .write(move |conn| ops::complete_idempotency(conn, &tenant, &key, response, now_ms))
            .await
    }

    async fn release_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        let (tenant, key) = (tenant.clone(), key.to_owned());
        self.worker
            .write(move |conn| ops::release_idempotency(conn, &tenant, &key))
            .await
    }

    async fn idempotency_records(
        &self,
        tenant: Option<&TenantId>,
        state: Option<IdempotencyState>,
        limit: usize,
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        let tenant = tenant.cloned();
        self.worker
            .read(move |conn| ops::idempotency_records(conn, tenant.as_ref(), state, limit))
            .await
    }

    async fn clear_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        let (tenant, key) = (tenant.clone(), key.to_owned());
        self.worker
            .write(move |conn| ops::clear_idempotency(conn, &tenant, &key))
            .await
    }

    async fn sweep_idempotency(
        &self,
        now_ms: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        self.worker
            .write(move |conn| ops::sweep_idempotency(conn, now_ms, limit))
            .await
    }
}

#[async_trait]
impl SingletonStore for SqliteStore {
    async fn claim_singleton(
        &self,
        name: &str,
        owner: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Option<SingletonLease>, StoreError> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        // A write: it runs inside the worker's `BEGIN IMMEDIATE`, so no
        // other writer (of this or another process) runs between its read
        // and its upsert, and two processes never both win.
        self.worker
            .write(move |conn| ops::claim_singleton(conn, &name, &owner, now_ms, expires_at_ms))
            .await
    }

    async fn release_singleton(&self, name: &str, owner: &str) -> Result<bool, StoreError> {
        let (name, owner) = (name.to_owned(), owner.to_owned());
        self.worker
            .write(move |conn| ops::release_singleton(conn, &name, &owner))
            .await
    }

    async fn singleton(&self, name: &str) -> Result<Option<SingletonLease>, StoreError> {
        let name = name.to_owned();
        self.worker
            .read(move |conn| ops::singleton(conn, &name))
            .await
    }
}

#[async_trait]
impl HealthStore for SqliteStore {
    async fn publish_breaker_open(
        &self,
        opening: BreakerOpening,
    ) -> Result<BreakerOpening, StoreError> {
        // A write: its read and upsert run inside the worker's `BEGIN
        // IMMEDIATE`, so of two nodes publishing at once the later `until`
        // wins whatever the order.
        self.worker
            .write(move |conn| ops::publish_breaker_open(conn, &opening))
            .await
    }

    async fn breaker_openings(&self, now_ms: Timestamp) -> Result<Vec<BreakerOpening>, StoreError> {
        self.worker
            .read(move |conn| ops::breaker_openings(conn, now_ms))
            .await
    }

    async fn clear_breaker_open(&self, arm: &str, opened_by: &str) -> Result<bool, StoreError> {
        let (arm, opened_by) = (arm.to_owned(), opened_by.to_owned());
        self.worker
            .write(move |conn| ops::clear_breaker_open(conn, &arm, &opened_by))
            .await
    }

    async fn merge_latency(
        &self,
        deltas: &[(String, rein_core::latency::LatencyHistogram)],
        now_ms: Timestamp,
    ) -> Result<LatencyRows, StoreError> {
        // A write: each read-add-write runs inside the worker's `BEGIN
        // IMMEDIATE`, so two processes merging at once both count.
        let deltas = deltas.to_vec();
        self.worker
            .write(move |conn| latency_ops::merge_latency(conn, &deltas, now_ms))
            .await
    }

    async fn latency_histograms(&self) -> Result<LatencyRows, StoreError> {
        self.worker.read(latency_ops::latency_histograms).await
    }

    async fn merge_token_ratios(
        &self,
        deltas: &[(String, rein_core::token_ratio::TokenRatio)],
        now_ms: Timestamp,
    ) -> Result<Vec<rein_store::TokenRatioRecord>, StoreError> {
        // A write: each read-add-write runs inside the worker's `BEGIN
        // IMMEDIATE`, so two processes merging at once both count.
        let deltas = deltas.to_vec();
        self.worker
            .write(move |conn| token_ratio_ops::merge(conn, &deltas, now_ms))
            .await
    }

    async fn token_ratios(&self) -> Result<Vec<rein_store::TokenRatioRecord>, StoreError> {
        self.worker.read(token_ratio_ops::all).await
    }

    async fn merge_retry_outcomes(
        &self,
        deltas: &[(String, rein_core::retry::RetryRecord)],
        now_ms: Timestamp,
    ) -> Result<Vec<rein_store::RetryOutcomes>, StoreError> {
        // A write: each read-decay-add-write runs inside the worker's
        // `BEGIN IMMEDIATE`, so two processes merging at once both count.
        let deltas = deltas.to_vec();
        self.worker
            .write(move |conn| retry_ops::merge_retry_outcomes(conn, &deltas, now_ms))
            .await
    }

    async fn retry_outcomes(
        &self,
        now_ms: Timestamp,
    ) -> Result<Vec<rein_store::RetryOutcomes>, StoreError> {
        self.worker
            .read(move |conn| retry_ops::retry_outcomes(conn, now_ms))
            .await
    }

    async fn renew_share_lease(
        &self,
        group: &str,
        node: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Vec<String>, StoreError> {
        // A write: the renewal and the listing run inside the worker's
        // `BEGIN IMMEDIATE`, so a node renewing after another lists it.
        let (group, node) = (group.to_owned(), node.to_owned());
        self.worker
            .write(move |conn| {
                share_ops::renew_share_lease(conn, &group, &node, now_ms, expires_at_ms)
            })
            .await
    }

    async fn release_share_lease(&self, group: &str, node: &str) -> Result<bool, StoreError> {
        let (group, node) = (group.to_owned(), node.to_owned());
        self.worker
            .write(move |conn| share_ops::release_share_lease(conn, &group, &node))
            .await
    }
}

#[async_trait]
impl rein_store::WebhookStore for SqliteStore {
    async fn unrouted_webhook_events(
        &self,
        limit: usize,
    ) -> Result<Vec<rein_store::WebhookEvent>, StoreError> {
        self.worker
            .read(move |conn| webhook_ops::unrouted(conn, limit))
            .await
    }

    async fn route_webhook_event(
        &self,
        event_id: &str,
        webhooks: &[String],
        now_ms: Timestamp,
    ) -> Result<(), StoreError> {
        let (event_id, webhooks) = (event_id.to_owned(), webhooks.to_vec());
        self.worker
            .write(move |conn| webhook_ops::route(conn, &event_id, &webhooks, now_ms))
            .await
    }

    async fn claim_webhook_deliveries(
        &self,
        now_ms: Timestamp,
        claim_until_ms: Timestamp,
        limit: usize,
    ) -> Result<Vec<rein_store::DueDelivery>, StoreError> {
        // A write: the select and the claims run inside the worker's
        // `BEGIN IMMEDIATE`, so two processes never claim the same one.
        self.worker
            .write(move |conn| webhook_ops::claim(conn, now_ms, claim_until_ms, limit))
            .await
    }

    async fn record_webhook_attempt(
        &self,
        attempt: &rein_store::WebhookAttempt,
    ) -> Result<rein_store::WebhookDelivery, StoreError> {
        let attempt = attempt.clone();
        self.worker
            .write(move |conn| webhook_ops::record_attempt(conn, &attempt))
            .await
    }

    async fn prune_webhook_outbox(
        &self,
        before_ms: Timestamp,
        limit: usize,
    ) -> Result<u64, StoreError> {
        self.worker
            .write(move |conn| webhook_ops::prune(conn, before_ms, limit))
            .await
    }

    async fn webhook_deliveries(
        &self,
        webhook: &str,
        limit: usize,
    ) -> Result<Vec<rein_store::WebhookDelivery>, StoreError> {
        let webhook = webhook.to_owned();
        self.worker
            .read(move |conn| webhook_ops::deliveries(conn, &webhook, limit))
            .await
    }
}

#[async_trait]
impl rein_store::SpendStore for SqliteStore {
    async fn add_spend(&self, deltas: &[rein_store::SpendDelta]) -> Result<(), StoreError> {
        let deltas = deltas.to_vec();
        self.worker
            .write(move |conn| spend_ops::add(conn, &deltas))
            .await
    }

    async fn spend(
        &self,
        query: &rein_store::SpendQuery,
    ) -> Result<Vec<rein_store::SpendRow>, StoreError> {
        let query = query.clone();
        self.worker
            .read(move |conn| spend_ops::read(conn, &query))
            .await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The `synchronous` the writer commits under, as SQLite reports it
    /// (1 = NORMAL, 2 = FULL).
    async fn writers_synchronous(options: SqliteOptions) -> i64 {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open_with(dir.path().join("rein.db"), options).unwrap();
        store
            .worker
            .write(|conn| {
                conn.query_row("PRAGMA synchronous", [], |row| row.get::<_, i64>(0))
                    .sql()
            })
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn the_writer_commits_under_the_configured_synchronous() {
        assert_eq!(writers_synchronous(SqliteOptions::default()).await, 1);
        let full = SqliteOptions {
            synchronous_full: true,
            ..SqliteOptions::default()
        };
        assert_eq!(writers_synchronous(full).await, 2);
    }
}

//! [`PostgresStore`]: the pool, connecting and migrating, and the
//! [`Store`] methods, each one pooled connection and (for a write) one
//! transaction.

use rein_store::Timestamp;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{Manager, ManagerConfig, Object, Pool, RecyclingMethod, Runtime};
use rein_core::{Event, LedgerRecord, RunId, TenantId};
use rein_store::{
    BreakerOpening, Checkpoint, Committed, HealthStore, IdempotencyRecord, IdempotencySettled,
    IdempotencySettlement, IdempotencyState, IdempotencyStore, Lease, LeaseChange, LeaseFilter,
    LeaseStore, NewReservation, NewRun, PlannedIntent, Reservation, ReservationFence, RunCursor,
    RunFilter, RunPage, RunRecord, RunStatus, RunStore, SingletonLease, SingletonStore, StepCommit,
    StoreError, StoredResponse, TenantBacklog,
};

use crate::codec::PgResult;
use crate::migrate::{self, SchemaState};
use crate::ops::{
    approvals, cancel, commit, idempotency, latency, leases, retry, runs, share, shared, spend,
    stats, token_ratios, webhooks,
};
use crate::settle::{self, TxIdentity};
use crate::tls::Connector;
use crate::url::PostgresUrl;

/// Connections one store keeps at most, by default: enough for a node's
/// workers, its server and its sweepers at once, well under PostgreSQL's
/// default `max_connections` (100) for a few nodes.
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// How long a call waits for a connection (from the pool, or a new one)
/// before it fails as [`StoreError::Unavailable`], by default: a database
/// that is restarting is a transient failure, not a hang.
///
/// NOTE: must match `rein_core::registry::DEFAULT_CONNECT_TIMEOUT`.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a [`PostgresStore`] connects.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// The pool's size (at least 1).
    pub max_connections: usize,
    /// Apply pending migrations at connect (the default); when `false`,
    /// connecting to a database that is not at [`SCHEMA_VERSION`] fails
    /// instead (`rein migrate` applies them).
    ///
    /// [`SCHEMA_VERSION`]: crate::SCHEMA_VERSION
    pub migrate: bool,
    /// Announce each step commit that adds events or changes a run's
    /// status (`NOTIFY rein_events`, the default). Off, live event streams
    /// of other nodes see such a commit at their next poll instead: slower,
    /// never wrong (see `Store::notifications`). Every transaction that
    /// notifies takes PostgreSQL's one notification-queue lock at commit;
    /// `benches/store_commits.rs` in rein-cli measures what that costs.
    /// Cancel requests are announced either way (they are rare, and the
    /// driving node's claim renewal is their only other path).
    pub notify: bool,
    /// How long a call waits for a connection, from the pool or a new one
    /// (also the driver's connect timeout), before it fails as
    /// [`StoreError::Unavailable`] (`[store] connect_timeout`; it replaces
    /// a `connect_timeout` parameter of the URL).
    pub connect_timeout: Duration,
    /// The CA a server's certificate must chain to under
    /// `sslmode=verify-ca` or `verify-full` (or `require`, which then
    /// verifies as `verify-ca`), when the URL names none with `sslrootcert`
    /// (`[store] ca_file`; the URL's wins). A PEM file, read at connect.
    pub ca_file: Option<std::path::PathBuf>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            migrate: true,
            notify: true,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            ca_file: None,
        }
    }
}

/// A [`Store`](rein_store::Store) on one PostgreSQL database.
///
/// Cloning is cheap and shares the pool.
#[derive(Clone)]
pub struct PostgresStore {
    pool: Pool,
    url: PostgresUrl,
    /// The `LISTEN` connection, started by the first
    /// [`Store::notifications`] call and shared by every clone.
    listener: std::sync::Arc<std::sync::OnceLock<crate::listen::Listener>>,
    /// [`PostgresOptions::notify`].
    notify: bool,
    /// The TLS connector of the pool, for the listener's connection too.
    tls: Connector,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl PostgresStore {
    /// Connects to `url` with default [`PostgresOptions`], migrating the
    /// schema.
    ///
    /// # Errors
    ///
    /// See [`PostgresStore::connect_with`].
    pub async fn connect(url: &str) -> Result<PostgresStore, StoreError> {
        PostgresStore::connect_with(&PostgresUrl::parse(url)?, PostgresOptions::default()).await
    }

    /// Connects to `url`: builds the pool, takes one connection (so a bad
    /// URL or a missing database fails here, not at the first run) and
    /// migrates (or, without `options.migrate`, checks) the schema.
    ///
    /// # Errors
    ///
    /// [`StoreError::Invalid`] for a pool size of 0;
    /// [`StoreError::Unavailable`] when the database cannot be reached;
    /// [`StoreError::SchemaTooNew`] when a newer rein migrated it;
    /// [`StoreError::Backend`] when it is behind and `options.migrate` is
    /// off, or a migration fails.
    pub async fn connect_with(
        url: &PostgresUrl,
        options: PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let store = PostgresStore::open_pool(url, &options)?;
        let at = |error: StoreError| store.at(error);
        let mut client = store.client().await.map_err(at)?;
        let state = if options.migrate {
            migrate::migrate(&mut client).await.map_err(at)?
        } else {
            migrate::state(&client).await.map_err(at)?
        };
        if state.found > state.supported {
            return Err(StoreError::SchemaTooNew {
                supported: state.supported,
                found: i64::from(state.found),
            });
        }
        if !options.migrate && state.found != state.supported {
            return Err(store.at(StoreError::Backend(format!(
                "the database is at schema version {}, this rein needs {}: run `rein migrate`",
                state.found, state.supported
            ))));
        }
        drop(client);
        Ok(store)
    }

    /// The schema version of the database at `url`, without migrating:
    /// what `rein migrate --check` reports.
    ///
    /// # Errors
    ///
    /// [`StoreError::Unavailable`] when the database cannot be reached.
    pub async fn schema_state(url: &PostgresUrl) -> Result<SchemaState, StoreError> {
        let store = PostgresStore::open_pool(
            url,
            &PostgresOptions {
                max_connections: 1,
                ..PostgresOptions::default()
            },
        )?;
        let client = store.client().await.map_err(|error| store.at(error))?;
        let state = migrate::state(&client).await;
        store.close();
        state.map_err(|error| store.at(error))
    }

    /// The pool, not yet connected (connections are made on demand).
    fn open_pool(
        url: &PostgresUrl,
        options: &PostgresOptions,
    ) -> Result<PostgresStore, StoreError> {
        let max_connections = options.max_connections;
        if max_connections == 0 {
            return Err(StoreError::Invalid {
                what: "postgres max_connections",
                expected: "at least 1".to_owned(),
                found: "0".to_owned(),
            });
        }
        if options.connect_timeout.is_zero() {
            return Err(StoreError::Invalid {
                what: "postgres connect_timeout",
                expected: "more than 0s".to_owned(),
                found: "0s".to_owned(),
            });
        }
        let tls = url.connector(options.ca_file.as_deref())?;
        let mut config = url.config().clone();
        config.connect_timeout(options.connect_timeout);
        let manager = Manager::from_config(
            config,
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(max_connections)
            .runtime(Runtime::Tokio1)
            .wait_timeout(Some(options.connect_timeout))
            .create_timeout(Some(options.connect_timeout))
            .build()
            .map_err(|error| StoreError::Backend(format!("postgres pool: {error}")))?;
        Ok(PostgresStore {
            pool,
            url: url.clone(),
            listener: Default::default(),
            notify: options.notify,
            tls,
        })
    }

    /// The URL this store connects to (shown without credentials).
    pub fn url(&self) -> &PostgresUrl {
        &self.url
    }

    /// Closes the pool: connections in use close when returned. Tests drop
    /// their scratch database after this.
    pub fn close(&self) {
        self.pool.close();
        if let Some(listener) = self.listener.get() {
            listener.stop();
        }
    }

    /// A pooled connection.
    pub(crate) async fn client(&self) -> Result<Object, StoreError> {
        self.pool.get().await.pg()
    }

    /// `error` naming the database it came from.
    fn at(&self, error: StoreError) -> StoreError {
        match error {
            StoreError::Backend(message) => {
                StoreError::Backend(format!("{message} (database {})", self.url))
            }
            StoreError::Unavailable(message) => {
                StoreError::Unavailable(format!("{message} (database {})", self.url))
            }
            other => other,
        }
    }
}

/// Runs `$op(&tx, args…)` in one transaction of a pooled connection:
/// committed when it returns `Ok`, rolled back (by dropping the
/// transaction) otherwise. A commit whose answer is lost is settled
/// ([`crate::settle`]): `Ok` if it landed, transient if it did not,
/// [`StoreError::InDoubt`] when the database cannot say.
macro_rules! write {
    ($store:expr, $op:path $(, $arg:expr)* $(,)?) => {{
        let mut client = $store.client().await?;
        let tx = client.transaction().await.pg()?;
        // Pipelined: the identity query goes out first, then the write's
        // statements, without waiting for its answer.
        let (who, out) = tokio::join!(TxIdentity::of(&tx), $op(&tx $(, $arg)*));
        let out = out?;
        let who = who?;
        match tx.commit().await {
            Ok(()) => Ok(out),
            Err(e) if settle::answer_lost(&e) => $store.settle(who, e).await.map(|()| out),
            Err(e) => Err(crate::codec::pg_error(e)),
        }
    }};
}

/// Runs the read `$op(&client, args…)` on a pooled connection.
macro_rules! read {
    ($store:expr, $op:path $(, $arg:expr)* $(,)?) => {{
        let client = $store.client().await?;
        $op(&client $(, $arg)*).await
    }};
}

#[async_trait]
impl RunStore for PostgresStore {
    async fn create_run(&self, run: NewRun) -> Result<RunRecord, StoreError> {
        // A transaction, though one statement: a lost answer is settled
        // instead of being offered again into a `Conflict`.
        write!(self, runs::create_run, run)
    }

    async fn create_run_claimed(
        &self,
        run: NewRun,
        claim: Lease,
        fence: Option<&ReservationFence>,
    ) -> Result<RunRecord, StoreError> {
        write!(self, leases::create_run_claimed, run, claim, fence)
    }

    async fn get_run(&self, run_id: &RunId) -> Result<Option<RunRecord>, StoreError> {
        read!(self, runs::get_run, run_id)
    }

    async fn list_runs(&self, limit: usize) -> Result<Vec<RunRecord>, StoreError> {
        read!(self, runs::list_runs, limit)
    }

    async fn runs_with_status(
        &self,
        status: RunStatus,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        read!(self, runs::runs_with_status_after, status, None, limit)
    }

    async fn runs_with_status_after(
        &self,
        status: RunStatus,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<Vec<RunRecord>, StoreError> {
        read!(self, runs::runs_with_status_after, status, after, limit)
    }

    async fn count_runs_with_status(&self, status: RunStatus) -> Result<u64, StoreError> {
        read!(self, runs::count_runs_with_status, status)
    }

    async fn children_of(&self, parent: &RunId) -> Result<Vec<RunRecord>, StoreError> {
        read!(self, runs::children_of, parent)
    }

    async fn list_runs_page(
        &self,
        filter: &RunFilter,
        after: Option<&RunCursor>,
        limit: usize,
    ) -> Result<RunPage, StoreError> {
        read!(self, runs::list_runs_page, filter, after, limit)
    }

    async fn tenant_backlogs(
        &self,
        tenant: Option<&TenantId>,
        oldest: usize,
    ) -> Result<Vec<TenantBacklog>, StoreError> {
        read!(self, runs::tenant_backlogs, tenant, oldest)
    }

    async fn queue_heads(&self, oldest: usize) -> Result<Vec<rein_store::QueueHead>, StoreError> {
        read!(self, runs::queue_heads, oldest)
    }

    async fn events(&self, run_id: &RunId, after_seq: u64) -> Result<Vec<Event>, StoreError> {
        read!(self, runs::events, run_id, after_seq)
    }

    async fn intents(&self, run_id: &RunId) -> Result<Vec<(u32, PlannedIntent)>, StoreError> {
        read!(self, runs::intents, run_id)
    }

    async fn ledger(&self, run_id: &RunId) -> Result<Vec<LedgerRecord>, StoreError> {
        read!(self, runs::ledger, run_id)
    }

    async fn pending_ledger(&self, limit: usize) -> Result<Vec<LedgerRecord>, StoreError> {
        read!(self, runs::pending_ledger, limit)
    }

    async fn latest_checkpoint(&self, run_id: &RunId) -> Result<Option<Checkpoint>, StoreError> {
        // One snapshot: the whole checkpoint and its deltas read together.
        write!(self, runs::latest_checkpoint, run_id)
    }

    async fn commit_step(
        &self,
        run_id: &RunId,
        commit: StepCommit,
    ) -> Result<Committed, StoreError> {
        write!(self, commit::commit_step, run_id, commit, self.notify)
    }

    async fn run_stats(
        &self,
        query: &rein_store::StatsQuery,
    ) -> Result<rein_store::RunStats, StoreError> {
        read!(self, stats::run_stats, query)
    }

    async fn request_cancel(
        &self,
        request: rein_store::CancelRequest,
    ) -> Result<rein_store::CancelRequest, StoreError> {
        write!(self, cancel::request_cancel, &request)
    }

    async fn cancel_request(
        &self,
        run_id: &RunId,
    ) -> Result<Option<rein_store::CancelRequest>, StoreError> {
        read!(self, cancel::cancel_request, run_id)
    }

    async fn cancel_requests(
        &self,
        run_ids: &[RunId],
    ) -> Result<Vec<rein_store::CancelRequest>, StoreError> {
        read!(self, cancel::cancel_requests, run_ids)
    }

    async fn decide_approval(
        &self,
        run_id: &RunId,
        intent_id: &rein_core::IntentId,
        decision: rein_core::approval::Decision,
    ) -> Result<rein_store::Decided, StoreError> {
        write!(self, approvals::decide, run_id, intent_id, decision)?.into_result()
    }

    async fn approvals(
        &self,
        filter: &rein_store::ApprovalFilter,
    ) -> Result<Vec<rein_core::approval::Approval>, StoreError> {
        read!(self, approvals::list, filter)
    }

    async fn expire_approvals(
        &self,
        now_ms: rein_store::Timestamp,
        limit: usize,
    ) -> Result<Vec<rein_core::approval::Approval>, StoreError> {
        write!(self, approvals::expire, now_ms, limit)
    }

    /// Starts the `LISTEN` connection on the first call (on the current
    /// tokio runtime; `None` outside one).
    fn notifications(&self) -> Option<tokio::sync::broadcast::Receiver<rein_store::Notification>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let listener = self.listener.get_or_init(|| {
            crate::listen::Listener::spawn(self.url.config().clone(), self.tls.clone(), &runtime)
        });
        Some(listener.subscribe())
    }
}

#[async_trait]
impl LeaseStore for PostgresStore {
    async fn change_lease(&self, change: LeaseChange) -> Result<Option<Lease>, StoreError> {
        write!(self, leases::change_lease, change)
    }

    async fn leases(&self, filter: &LeaseFilter) -> Result<Vec<Lease>, StoreError> {
        read!(self, leases::leases, filter)
    }

    async fn renew_lease_of(
        &self,
        lease_id: &str,
        owner: &str,
        expires_at_ms: Timestamp,
    ) -> Result<bool, StoreError> {
        write!(self, leases::renew_lease_of, lease_id, owner, expires_at_ms)
    }

    async fn renew_leases_of(
        &self,
        held: &[(String, String)],
        expires_at_ms: Timestamp,
    ) -> Result<Vec<bool>, StoreError> {
        // Every owner checked first: an invalid one renews none, whatever
        // chunk it is in.
        for (_, owner) in held {
            rein_store::rules::validate_owner(owner)?;
        }
        // Each renewal holds its lease's advisory lock until its
        // transaction ends, and the server's lock table is bounded and
        // shared by every session (`max_locks_per_transaction` ×
        // connections, 6,400 by default): a node driving ten thousand runs
        // renews them a chunk per transaction, not all in one.
        let mut renewed = Vec::with_capacity(held.len());
        for chunk in held.chunks(leases::RENEWALS_PER_TRANSACTION) {
            renewed.extend(write!(self, leases::renew_leases_of, chunk, expires_at_ms)?);
        }
        Ok(renewed)
    }

    async fn release_lease_of(&self, lease_id: &str, owner: &str) -> Result<bool, StoreError> {
        write!(self, leases::release_lease_of, lease_id, owner)
    }

    async fn take_over_lease(&self, lease: Lease, now_ms: Timestamp) -> Result<bool, StoreError> {
        write!(self, leases::take_over_lease, &lease, now_ms)
    }
}

#[async_trait]
impl IdempotencyStore for PostgresStore {
    async fn reserve_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        fingerprint: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Reservation, StoreError> {
        let reservation = NewReservation {
            tenant: tenant.clone(),
            key: key.to_owned(),
            fingerprint: fingerprint.to_owned(),
            holder: None,
            now_ms,
            expires_at_ms,
        };
        write!(self, idempotency::reserve, &reservation)
    }

    async fn reserve_idempotency_as(
        &self,
        reservation: NewReservation,
    ) -> Result<Reservation, StoreError> {
        write!(self, idempotency::reserve, &reservation)
    }

    async fn submit_queued(
        &self,
        reservation: NewReservation,
        run: NewRun,
        response: StoredResponse,
    ) -> Result<Reservation, StoreError> {
        write!(self, idempotency::submit_queued, reservation, run, response)
    }

    async fn settle_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        settlement: IdempotencySettlement,
        now_ms: Timestamp,
    ) -> Result<IdempotencySettled, StoreError> {
        write!(
            self,
            idempotency::settle,
            tenant, key, owner, settlement, now_ms
        )
    }

    async fn renew_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        owner: &str,
        until_ms: Timestamp,
    ) -> Result<bool, StoreError> {
        write!(self, idempotency::renew, tenant, key, owner, until_ms)
    }

    async fn create_run_held(
        &self,
        run: NewRun,
        fence: &ReservationFence,
    ) -> Result<RunRecord, StoreError> {
        write!(self, idempotency::create_run_held, run, fence)
    }

    async fn complete_idempotency(
        &self,
        tenant: &TenantId,
        key: &str,
        response: StoredResponse,
        now_ms: Timestamp,
    ) -> Result<(), StoreError> {
        write!(self, idempotency::complete, tenant, key, response, now_ms)
    }

    async fn release_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        write!(self, idempotency::release, tenant, key)
    }

    async fn idempotency_records(
        &self,
        tenant: Option<&TenantId>,
        state: Option<IdempotencyState>,
        limit: usize,
    ) -> Result<Vec<IdempotencyRecord>, StoreError> {
        read!(self, idempotency::records, tenant, state, limit)
    }

    async fn clear_idempotency(&self, tenant: &TenantId, key: &str) -> Result<bool, StoreError> {
        write!(self, idempotency::clear, tenant, key)
    }

    async fn sweep_idempotency(
        &self,
        now_ms: Timestamp,
        limit: usize,
    ) -> Result<usize, StoreError> {
        write!(self, idempotency::sweep, now_ms, limit)
    }
}

#[async_trait]
impl SingletonStore for PostgresStore {
    async fn claim_singleton(
        &self,
        name: &str,
        owner: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Option<SingletonLease>, StoreError> {
        write!(
            self,
            shared::claim_singleton,
            name, owner, now_ms, expires_at_ms
        )
    }

    async fn release_singleton(&self, name: &str, owner: &str) -> Result<bool, StoreError> {
        write!(self, shared::release_singleton, name, owner)
    }

    async fn singleton(&self, name: &str) -> Result<Option<SingletonLease>, StoreError> {
        read!(self, shared::singleton, name)
    }
}

#[async_trait]
impl HealthStore for PostgresStore {
    async fn publish_breaker_open(
        &self,
        opening: BreakerOpening,
    ) -> Result<BreakerOpening, StoreError> {
        write!(self, shared::publish_breaker_open, &opening)
    }

    async fn breaker_openings(&self, now_ms: Timestamp) -> Result<Vec<BreakerOpening>, StoreError> {
        read!(self, shared::breaker_openings, now_ms)
    }

    async fn clear_breaker_open(&self, arm: &str, opened_by: &str) -> Result<bool, StoreError> {
        write!(self, shared::clear_breaker_open, arm, opened_by)
    }

    async fn merge_latency(
        &self,
        deltas: &[(String, rein_core::latency::LatencyHistogram)],
        now_ms: Timestamp,
    ) -> Result<rein_store::LatencyRows, StoreError> {
        write!(self, latency::merge_latency, deltas, now_ms)
    }

    async fn latency_histograms(&self) -> Result<rein_store::LatencyRows, StoreError> {
        read!(self, latency::latency_histograms)
    }

    async fn merge_token_ratios(
        &self,
        deltas: &[(String, rein_core::token_ratio::TokenRatio)],
        now_ms: Timestamp,
    ) -> Result<Vec<rein_store::TokenRatioRecord>, StoreError> {
        write!(self, token_ratios::merge_token_ratios, deltas, now_ms)
    }

    async fn token_ratios(&self) -> Result<Vec<rein_store::TokenRatioRecord>, StoreError> {
        read!(self, token_ratios::token_ratios)
    }

    async fn merge_retry_outcomes(
        &self,
        deltas: &[(String, rein_core::retry::RetryRecord)],
        now_ms: Timestamp,
    ) -> Result<Vec<rein_store::RetryOutcomes>, StoreError> {
        write!(self, retry::merge_retry_outcomes, deltas, now_ms)
    }

    async fn retry_outcomes(
        &self,
        now_ms: Timestamp,
    ) -> Result<Vec<rein_store::RetryOutcomes>, StoreError> {
        read!(self, retry::retry_outcomes, now_ms)
    }

    async fn renew_share_lease(
        &self,
        group: &str,
        node: &str,
        now_ms: Timestamp,
        expires_at_ms: Timestamp,
    ) -> Result<Vec<String>, StoreError> {
        write!(
            self,
            share::renew_share_lease,
            group, node, now_ms, expires_at_ms
        )
    }

    async fn release_share_lease(&self, group: &str, node: &str) -> Result<bool, StoreError> {
        write!(self, share::release_share_lease, group, node)
    }
}

#[async_trait]
impl rein_store::WebhookStore for PostgresStore {
    async fn unrouted_webhook_events(
        &self,
        limit: usize,
    ) -> Result<Vec<rein_store::WebhookEvent>, StoreError> {
        read!(self, webhooks::unrouted, limit)
    }

    async fn route_webhook_event(
        &self,
        event_id: &str,
        webhooks: &[String],
        now_ms: rein_store::Timestamp,
    ) -> Result<(), StoreError> {
        write!(self, webhooks::route, event_id, webhooks, now_ms)
    }

    async fn claim_webhook_deliveries(
        &self,
        now_ms: rein_store::Timestamp,
        claim_until_ms: rein_store::Timestamp,
        limit: usize,
    ) -> Result<Vec<rein_store::DueDelivery>, StoreError> {
        write!(self, webhooks::claim, now_ms, claim_until_ms, limit)
    }

    async fn record_webhook_attempt(
        &self,
        attempt: &rein_store::WebhookAttempt,
    ) -> Result<rein_store::WebhookDelivery, StoreError> {
        write!(self, webhooks::record_attempt, attempt)
    }

    async fn prune_webhook_outbox(
        &self,
        before_ms: rein_store::Timestamp,
        limit: usize,
    ) -> Result<u64, StoreError> {
        write!(self, webhooks::prune, before_ms, limit)
    }

    async fn webhook_deliveries(
        &self,
        webhook: &str,
        limit: usize,
    ) -> Result<Vec<rein_store::WebhookDelivery>, StoreError> {
        read!(self, webhooks::deliveries, webhook, limit)
    }
}

#[async_trait]
impl rein_store::SpendStore for PostgresStore {
    async fn add_spend(&self, deltas: &[rein_store::SpendDelta]) -> Result<(), StoreError> {
        write!(self, spend::add_spend, deltas)
    }

    async fn spend(
        &self,
        query: &rein_store::SpendQuery,
    ) -> Result<Vec<rein_store::SpendRow>, StoreError> {
        read!(self, spend::spend, query)
    }
}

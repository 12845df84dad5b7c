//! The SQLite schema and its migrations.
//!
//! # Why a version table
//!
//! A rein binary must never write to a database whose layout it does not
//! know: a newer rein may have added a column that an older one would leave
//! empty, or a constraint it would violate. `rein_schema` records every
//! migration applied; at open, a version newer than [`SCHEMA_VERSION`] is
//! refused with [`StoreError::SchemaTooNew`], and older ones are migrated
//! forward in one transaction.
//!
//! NOTE: a migration, once released, never changes; add a new entry to
//! [`MIGRATIONS`] instead. The column lists in `codec.rs` must match the
//! latest schema.

use std::time::{SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior};

use super::codec::SqlResult;
use rein_store::StoreError;

/// The schema version this binary writes: the number of migrations.
pub const SCHEMA_VERSION: u32 = 22;

/// Migration `n` (1-based) moves the schema from version `n - 1` to `n`.
///
/// Conventions: tables are `STRICT` (SQLite refuses a value of the wrong
/// type rather than storing it); JSON columns hold text; timestamps are
/// integer milliseconds since the Unix epoch (`*_ms`); every table of a run
/// references `runs`.
const MIGRATIONS: [&str; SCHEMA_VERSION as usize] = [
    // 1: runs, events, intents, ledger, checkpoints.
    r#"
CREATE TABLE runs (
    run_id        TEXT PRIMARY KEY NOT NULL,
    tenant        TEXT NOT NULL,
    agent         TEXT NOT NULL,
    input         TEXT NOT NULL,
    parent_run_id TEXT,
    budget        TEXT NOT NULL,
    status        TEXT NOT NULL,
    report        TEXT,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
CREATE INDEX runs_by_created ON runs (created_at_ms DESC);
CREATE INDEX runs_by_parent ON runs (parent_run_id) WHERE parent_run_id IS NOT NULL;

CREATE TABLE events (
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    seq             INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    intent_id       TEXT,
    attempt_id      TEXT,
    idempotency_key TEXT,
    at_ms           INTEGER NOT NULL,
    kind            TEXT NOT NULL,
    data            TEXT NOT NULL,
    PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;

CREATE TABLE intents (
    run_id    TEXT NOT NULL REFERENCES runs (run_id),
    intent_id TEXT NOT NULL,
    step      INTEGER NOT NULL,
    ordinal   INTEGER NOT NULL,
    call_id   TEXT NOT NULL,
    tool      TEXT NOT NULL,
    args      TEXT NOT NULL,
    PRIMARY KEY (run_id, intent_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE ledger (
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    intent_id       TEXT NOT NULL,
    seq             INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    tool            TEXT NOT NULL,
    class           TEXT NOT NULL,
    idempotency_key TEXT,
    args            TEXT NOT NULL,
    status          TEXT NOT NULL,
    result          TEXT,
    failure         TEXT,
    attempts        INTEGER NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (run_id, intent_id),
    UNIQUE (run_id, seq)
) STRICT;
CREATE INDEX ledger_pending ON ledger (created_at_ms, run_id, seq) WHERE status = 'pending';

CREATE TABLE checkpoints (
    run_id               TEXT NOT NULL REFERENCES runs (run_id),
    step                 INTEGER NOT NULL,
    messages             TEXT NOT NULL,
    completed_intents    TEXT NOT NULL,
    consumed_steps       INTEGER NOT NULL,
    consumed_tokens      INTEGER NOT NULL,
    consumed_cost_micros INTEGER NOT NULL,
    elapsed_ms           INTEGER NOT NULL,
    state                TEXT NOT NULL,
    at_ms                INTEGER NOT NULL,
    PRIMARY KEY (run_id, step)
) STRICT, WITHOUT ROWID;
"#,
    // 2: resource leases (process groups, temporary paths). A row exists
    // while its resource may exist; releasing deletes it.
    r#"
CREATE TABLE leases (
    lease_id       TEXT PRIMARY KEY NOT NULL,
    run_id         TEXT NOT NULL REFERENCES runs (run_id),
    intent_id      TEXT,
    kind           TEXT NOT NULL,
    pgid           INTEGER,
    path           TEXT,
    owner          TEXT NOT NULL,
    acquired_at_ms INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL
) STRICT;
CREATE INDEX leases_by_expiry ON leases (expires_at_ms, lease_id);
CREATE INDEX leases_by_run ON leases (run_id);
"#,
    // 3: HTTP idempotency records of `rein serve`, per tenant and key; not
    // tied to a run (the key is reserved before the run exists). The
    // response columns are set exactly when state = 'completed'.
    r#"
CREATE TABLE idempotency (
    tenant          TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint     TEXT NOT NULL,
    state           TEXT NOT NULL,
    status          INTEGER,
    content_type    TEXT,
    location        TEXT,
    body            BLOB,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (tenant, idempotency_key)
) STRICT;
CREATE INDEX idempotency_by_expiry ON idempotency (expires_at_ms);
CREATE INDEX idempotency_by_state ON idempotency (state, created_at_ms);
"#,
    // 4: singleton election leases of `rein serve`: one row per periodic
    // service, naming the process that owns it until `expires_at_ms`. Not
    // tied to a run; releasing deletes the row.
    r#"
CREATE TABLE singletons (
    name           TEXT PRIMARY KEY NOT NULL,
    owner          TEXT NOT NULL,
    acquired_at_ms INTEGER NOT NULL,
    expires_at_ms  INTEGER NOT NULL
) STRICT;
"#,
    // 5: run queries of `rein serve`, oldest first: by status (the queue of
    // `queued` runs, the `running` ones to recover) and by parent. The
    // parent index replaces version 1's, which could not give the order.
    r#"
CREATE INDEX runs_by_status ON runs (status, created_at_ms, run_id);
CREATE INDEX runs_by_parent_created ON runs (parent_run_id, created_at_ms, run_id)
    WHERE parent_run_id IS NOT NULL;
DROP INDEX runs_by_parent;
"#,
    // 6: breaker openings shared across nodes: one row per arm, naming the
    // node that opened it and until when. Not tied to a run; a row whose
    // `open_until_ms` passed stays until cleared or replaced (one per arm,
    // so they cannot pile up).
    r#"
CREATE TABLE breaker_openings (
    arm           TEXT PRIMARY KEY NOT NULL,
    open_until_ms INTEGER NOT NULL,
    opened_by     TEXT NOT NULL,
    reason        TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
"#,
    // 7: who holds an idempotency reservation (the process executing the
    // request, a lease owner id) and the run the request started, so that
    // a reservation whose process died is resolved instead of blocking its
    // key. NULL in records written before.
    r#"
ALTER TABLE idempotency ADD COLUMN owner TEXT;
ALTER TABLE idempotency ADD COLUMN run_id TEXT;
"#,
    // 8: a run's ledger revision, bumped by every write to the ledger of
    // the run or of a run below it, so that a report derived from the
    // ledger is stored only if the ledger did not change since it was
    // read (`StepCommit::expect_ledger_revision`); and an idempotency
    // holder's own heartbeat (`holder_until_ms`, renewed while it works)
    // with the reservation it belongs to (`holder_since_ms`, equal to
    // `created_at_ms` when this rein wrote the holder).
    //
    // Upgrading: stop every process of the older rein before the first
    // process of this one opens the database. An older process opening it
    // afterwards is refused (`SchemaTooNew`, checked at open since schema
    // 1), but one already running keeps writing by its own rules: a
    // schema-6 process replacing an expired record keeps `owner` and
    // `run_id` of the record it replaced, and one of schema 7 keeps the
    // heartbeat columns; `holder_since_ms` is how this rein tells such a
    // record (`IdempotencyRecord::holder_is_trusted`) and does not believe
    // its holder.
    r#"
ALTER TABLE runs ADD COLUMN ledger_revision INTEGER NOT NULL DEFAULT 0;
ALTER TABLE idempotency ADD COLUMN holder_since_ms INTEGER;
ALTER TABLE idempotency ADD COLUMN holder_until_ms INTEGER;
"#,
    // 9: run listings, newest first (`Store::list_runs_page`): a tenant's
    // runs, and a tenant's runs of one status, both walked backwards in
    // (created_at_ms, run_id) order from a cursor; and every tenant's, for
    // an operator reading the file. Agent and time filters are checked
    // during the walk.
    r#"
CREATE INDEX runs_by_tenant_created ON runs (tenant, created_at_ms, run_id);
CREATE INDEX runs_by_tenant_status ON runs (tenant, status, created_at_ms, run_id);
CREATE INDEX runs_by_created_id ON runs (created_at_ms, run_id);
"#,
    // 10: checkpoints appended step by step (`CheckpointDelta`): one row
    // per step holding only what the step added, so a run of n steps
    // writes O(n) bytes, not the O(n²) of a whole checkpoint per step. The
    // latest checkpoint is the latest row of `checkpoints` (written by
    // releases before this one, or a compaction) with the deltas after it
    // applied. An ordinary rowid table, unlike `checkpoints`: a row holds
    // tool results of any size, and SQLite advises against WITHOUT ROWID
    // for large rows.
    r#"
CREATE TABLE checkpoint_deltas (
    run_id               TEXT NOT NULL REFERENCES runs (run_id),
    step                 INTEGER NOT NULL,
    messages             TEXT NOT NULL,
    completed_intents    TEXT NOT NULL,
    appended             TEXT NOT NULL,
    state                TEXT NOT NULL,
    consumed_steps       INTEGER NOT NULL,
    consumed_tokens      INTEGER NOT NULL,
    consumed_cost_micros INTEGER NOT NULL,
    elapsed_ms           INTEGER NOT NULL,
    at_ms                INTEGER NOT NULL,
    PRIMARY KEY (run_id, step)
) STRICT;
"#,
    // 11: observed latency histograms, one row per subject (`tool:NAME`,
    // `model:PROVIDER/MODEL`, ...), each the sum of every process's
    // samples: a process adds its delta in a write transaction. The
    // histogram is a versioned text form (`LatencyHistogram::encode`);
    // `samples` repeats its count for a reader that only lists. Not tied
    // to a run.
    r#"
CREATE TABLE latency_histograms (
    subject       TEXT PRIMARY KEY NOT NULL,
    histogram     TEXT NOT NULL,
    samples       INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
"#,
    // 12: the guardrail an event records firing (`Guardrail::of`, NULL for
    // every other event), written with the event, so `Store::run_stats`
    // counts guardrails per agent with one indexed join instead of
    // decoding every event of the window. Events stored before are
    // backfilled here from their kind and data.
    // NOTE: the CASE mirrors `rein_core::event::Guardrail::of`.
    r#"
ALTER TABLE events ADD COLUMN guardrail TEXT;
UPDATE events SET guardrail = CASE kind
    WHEN 'budget_exhausted' THEN
        CASE json_extract(data, '$.exhausted.dimension')
            WHEN 'steps' THEN 'budget_steps'
            WHEN 'tokens' THEN 'budget_tokens'
            WHEN 'cost' THEN 'budget_cost'
            WHEN 'wall_clock' THEN 'budget_wall_clock'
        END
    WHEN 'loop_detected' THEN
        CASE json_extract(data, '$.trip.reason')
            WHEN 'repeated_action' THEN 'repeated_action'
            WHEN 'no_progress' THEN 'no_progress'
            WHEN 'repeat_failure' THEN 'repeat_failure'
        END
    WHEN 'call_rejected' THEN
        CASE WHEN json_type(data, '$.arm') IS NULL THEN 'validation' ELSE 'breaker' END
    WHEN 'fan_out_refused' THEN 'fan_out'
    WHEN 'call_shed' THEN 'call_shed'
    WHEN 'tool_disabled' THEN 'tool_disabled'
END
WHERE kind IN ('budget_exhausted', 'loop_detected', 'call_rejected', 'fan_out_refused',
               'call_shed', 'tool_disabled');
CREATE INDEX events_by_guardrail ON events (run_id, guardrail) WHERE guardrail IS NOT NULL;
"#,
    // 13: share leases, one row per resource group and node dividing its
    // limits; a renewal drops the group's expired rows. Not tied to a run.
    r#"
CREATE TABLE share_leases (
    resource_group TEXT NOT NULL,
    node           TEXT NOT NULL,
    expires_at_ms  INTEGER NOT NULL,
    PRIMARY KEY (resource_group, node)
) STRICT;
"#,
    // 14: cancel requests, at most one per run: a cancel taken by any
    // process, seen by the one driving the run at its claim renewal.
    r#"
CREATE TABLE cancel_requests (
    run_id          TEXT PRIMARY KEY NOT NULL REFERENCES runs (run_id),
    requested_by    TEXT NOT NULL,
    requested_at_ms INTEGER NOT NULL
) STRICT;
"#,
    // 15: a run's trace: the caller's `traceparent` it was created with
    // (the parent of the span of whichever process drives it), and the
    // span of its first drive (what a resume's span links to).
    r#"
ALTER TABLE runs ADD COLUMN trace_parent TEXT;
ALTER TABLE runs ADD COLUMN first_span TEXT;
"#,
    // 16: retry outcomes, one row per target (`tool:NAME`,
    // `provider:NAME`, `fallback:PROVIDER/MODEL`) and retry ordinal (1:
    // the first retry, 3: the third and later), summed over every process
    // and halved per window of `RETRY_RATE_HALF_LIFE` since
    // `updated_at_ms` (a merge writes the decayed sum). Not tied to a run.
    r#"
CREATE TABLE retry_outcomes (
    target        TEXT NOT NULL,
    ordinal       INTEGER NOT NULL CHECK (ordinal BETWEEN 1 AND 3),
    tries         INTEGER NOT NULL CHECK (tries >= 0),
    successes     INTEGER NOT NULL CHECK (successes >= 0 AND successes <= tries),
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (target, ordinal)
) STRICT;
"#,
    // 17: the queued and running root runs by tenant, covering the
    // grouped count of `tenant_backlogs` (every queue worker's pick): it
    // walked `runs_by_tenant_status` over every run ever stored, ended
    // ones included (2.4 ms with 33,000 runs in the store, 0.17 ms through
    // this index whatever the history).
    r#"
CREATE INDEX runs_root_backlog ON runs (tenant, status, parent_run_id)
    WHERE parent_run_id IS NULL AND status IN ('queued', 'running');
"#,
    // 18: approvals, one row per call a run paused for (its intent),
    // with the arguments as the model proposed them and their digest; the
    // decision columns are NULL until the one decision is recorded.
    r#"
CREATE TABLE approvals (
    run_id          TEXT NOT NULL REFERENCES runs (run_id),
    intent_id       TEXT NOT NULL,
    tenant          TEXT NOT NULL,
    step            INTEGER NOT NULL,
    tool            TEXT NOT NULL,
    args            TEXT NOT NULL,
    args_digest     TEXT NOT NULL,
    why             TEXT NOT NULL,
    requested_at_ms INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    verdict         TEXT CHECK (verdict IN ('approved', 'rejected', 'expired')),
    decided_by      TEXT,
    decided_at_ms   INTEGER,
    reason          TEXT,
    PRIMARY KEY (run_id, intent_id)
) STRICT;
CREATE INDEX approvals_undecided ON approvals (expires_at_ms) WHERE verdict IS NULL;
CREATE INDEX approvals_by_request ON approvals (requested_at_ms, run_id, intent_id);
"#,
    // 19: the webhook outbox. An event with a webhook topic is recorded in
    // `webhook_events` by the commit that appends it (`routed` = 0 until
    // the dispatcher has made its deliveries); each webhook's delivery of
    // it is a row of `webhook_deliveries`, its log. No reference to `runs`:
    // a delivery log outlives nothing it needs from the run.
    r#"
CREATE TABLE webhook_events (
    event_id      TEXT PRIMARY KEY NOT NULL,
    run_id        TEXT NOT NULL,
    topic         TEXT NOT NULL,
    outcome       TEXT,
    body          TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    routed        INTEGER NOT NULL DEFAULT 0 CHECK (routed IN (0, 1))
) STRICT;
CREATE INDEX webhook_events_unrouted ON webhook_events (created_at_ms, event_id) WHERE routed = 0;
CREATE TABLE webhook_deliveries (
    webhook            TEXT NOT NULL,
    event_id           TEXT NOT NULL REFERENCES webhook_events (event_id),
    state              TEXT NOT NULL CHECK (state IN ('pending', 'delivered', 'given_up')),
    attempts           INTEGER NOT NULL,
    next_attempt_at_ms INTEGER NOT NULL,
    claimed_until_ms   INTEGER NOT NULL,
    last_attempt_at_ms INTEGER,
    last_status        INTEGER,
    last_error         TEXT,
    PRIMARY KEY (webhook, event_id)
) STRICT;
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at_ms) WHERE state = 'pending';
"#,
    // 20: the bytes per token each model's provider was seen to count,
    // one row per `provider/model`: every process's samples summed, the
    // least ratio among them kept (`least` is a ratio, hence REAL).
    r#"
CREATE TABLE token_ratios (
    model         TEXT PRIMARY KEY NOT NULL,
    samples       INTEGER NOT NULL CHECK (samples >= 0),
    least         REAL NOT NULL,
    updated_at_ms INTEGER NOT NULL
) STRICT;
"#,
    // 21: the other headers of a completed idempotent response (a JSON
    // array of [name, value] pairs, NULL for none), so that a replay of a
    // gateway answer says which model answered, as the first did.
    r#"
ALTER TABLE idempotency ADD COLUMN headers TEXT;
"#,
    // 22: what each API key spent on models, one row per tenant, key,
    // model and UTC day (days since the epoch), added to by every process.
    r#"
CREATE TABLE spend (
    tenant      TEXT NOT NULL,
    key         TEXT NOT NULL,
    model       TEXT NOT NULL,
    day         INTEGER NOT NULL CHECK (day >= 0),
    tokens      INTEGER NOT NULL CHECK (tokens >= 0),
    cost_micros INTEGER NOT NULL CHECK (cost_micros >= 0),
    PRIMARY KEY (tenant, key, day, model)
) STRICT;
"#,
];

/// The schema version the database holds (`0` when no migration ran),
/// without changing anything: what `rein migrate --check` reports.
///
/// # Errors
///
/// [`StoreError::Corrupt`] for a negative version; [`StoreError::Backend`]
/// or [`StoreError::Unavailable`] for SQLite failures.
pub fn found_version(conn: &Connection) -> Result<u32, StoreError> {
    let exists: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rein_schema')",
            [],
            |row| row.get(0),
        )
        .sql()?;
    if !exists {
        return Ok(0);
    }
    let found: Option<i64> = conn
        .query_row("SELECT MAX(version) FROM rein_schema", [], |row| row.get(0))
        .sql()?;
    let found = found.unwrap_or(0);
    u32::try_from(found).map_err(|_| StoreError::Corrupt {
        table: "rein_schema",
        column: "version",
        reason: format!("expected a version from 0, found {found}"),
    })
}

/// Brings the database to [`SCHEMA_VERSION`], or refuses a newer one.
///
/// Runs in one `IMMEDIATE` transaction, so two processes opening a fresh
/// file at once migrate it exactly once.
///
/// # Errors
///
/// [`StoreError::SchemaTooNew`] when the file was written by a newer rein;
/// [`StoreError::Backend`] or [`StoreError::Unavailable`] for SQLite
/// failures.
pub fn migrate(conn: &mut Connection) -> Result<(), StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .sql()?;
    tx.execute_batch(
        "CREATE TABLE IF NOT EXISTS rein_schema (
            version       INTEGER PRIMARY KEY NOT NULL,
            applied_at_ms INTEGER NOT NULL
        ) STRICT;",
    )
    .sql()?;
    let found: i64 = tx
        .query_row("SELECT MAX(version) FROM rein_schema", [], |row| {
            row.get::<_, Option<i64>>(0)
        })
        .optional()
        .sql()?
        .flatten()
        .unwrap_or(0);
    if found > i64::from(SCHEMA_VERSION) {
        return Err(StoreError::SchemaTooNew {
            supported: SCHEMA_VERSION,
            found,
        });
    }
    if found < 0 {
        return Err(StoreError::Corrupt {
            table: "rein_schema",
            column: "version",
            reason: format!("expected a version from 0, found {found}"),
        });
    }
    let applied_at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            i64::try_from(since.as_millis()).unwrap_or(i64::MAX)
        });
    for (index, migration) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(found.unsigned_abs() as usize)
    {
        let version = index as i64 + 1;
        tx.execute_batch(migration).sql()?;
        tx.execute(
            "INSERT INTO rein_schema (version, applied_at_ms) VALUES (?1, ?2)",
            (version, applied_at_ms),
        )
        .sql()?;
    }
    tx.commit().sql()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database as the release with migrations `1..=n` left it.
    fn at_version(n: usize) -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE TABLE rein_schema (
                version       INTEGER PRIMARY KEY NOT NULL,
                applied_at_ms INTEGER NOT NULL
            ) STRICT;",
        )
        .unwrap();
        for (index, migration) in MIGRATIONS[..n].iter().enumerate() {
            conn.execute_batch(migration).unwrap();
            conn.execute(
                "INSERT INTO rein_schema (version, applied_at_ms) VALUES (?1, 0)",
                [index as i64 + 1],
            )
            .unwrap();
        }
        conn
    }

    fn version(conn: &Connection) -> i64 {
        conn.query_row("SELECT MAX(version) FROM rein_schema", [], |row| row.get(0))
            .unwrap()
    }

    #[test]
    fn a_version_1_file_upgrades_in_place_and_keeps_its_rows() {
        let mut conn = Connection::open_in_memory().unwrap();
        // A file written by the first release: migration 1 only.
        conn.execute_batch(
            "CREATE TABLE rein_schema (
                version       INTEGER PRIMARY KEY NOT NULL,
                applied_at_ms INTEGER NOT NULL
            ) STRICT;",
        )
        .unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute(
            "INSERT INTO rein_schema (version, applied_at_ms) VALUES (1, 0)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO runs VALUES ('r-1', 't', 'a', 'in', NULL, '{}', 'running', NULL, 1, 1)",
            [],
        )
        .unwrap();

        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        let runs: i64 = conn
            .query_row("SELECT COUNT(*) FROM runs WHERE run_id = 'r-1'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(runs, 1, "the upgrade keeps existing rows");
        conn.execute(
            "INSERT INTO leases VALUES ('l-1', 'r-1', NULL, 'temp_path', NULL, '/tmp/x', \
             'pid:1@h', 1, 2)",
            [],
        )
        .unwrap();
        // Migrating again is a no-op.
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
    }

    #[test]
    fn a_version_2_file_upgrades_and_keeps_its_leases() {
        // A file written by the second release: migrations 1 and 2.
        let mut conn = at_version(2);
        conn.execute(
            "INSERT INTO runs VALUES ('r-1', 't', 'a', 'in', NULL, '{}', 'running', NULL, 1, 1)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO leases VALUES ('l-1', 'r-1', NULL, 'temp_path', NULL, '/tmp/x', \
             'pid:1@h', 1, 2)",
            [],
        )
        .unwrap();
        assert!(
            conn.execute("SELECT 1 FROM idempotency", []).is_err(),
            "no idempotency table before version 3"
        );

        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        let leases: i64 = conn
            .query_row("SELECT COUNT(*) FROM leases", [], |r| r.get(0))
            .unwrap();
        assert_eq!(leases, 1, "the upgrade keeps existing leases");
        conn.execute(
            "INSERT INTO idempotency VALUES ('t', 'k', 'f', 'in_progress', NULL, NULL, NULL, \
             NULL, 1, 1, 2, NULL, NULL, NULL, NULL, NULL)",
            [],
        )
        .unwrap();
        let duplicate = conn.execute(
            "INSERT INTO idempotency VALUES ('t', 'k', 'g', 'in_progress', NULL, NULL, NULL, \
             NULL, 1, 1, 2, NULL, NULL, NULL, NULL, NULL)",
            [],
        );
        assert!(duplicate.is_err(), "one record per tenant and key");
        conn.execute(
            "INSERT INTO idempotency VALUES ('u', 'k', 'f', 'in_progress', NULL, NULL, NULL, \
             NULL, 1, 1, 2, NULL, NULL, NULL, NULL, NULL)",
            [],
        )
        .unwrap();
        let strict = conn.execute(
            "INSERT INTO idempotency VALUES ('v', 'k', 'f', 'completed', 'two hundred', NULL, \
             NULL, X'', 1, 1, 2, NULL, NULL, NULL, NULL)",
            [],
        );
        assert!(strict.is_err(), "STRICT refuses a text status");
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
    }

    #[test]
    fn a_version_3_file_upgrades_to_4_and_keeps_its_idempotency_records() {
        // A file written by the third release: migrations 1 to 3.
        let mut conn = at_version(3);
        conn.execute(
            "INSERT INTO idempotency VALUES ('t', 'k', 'f', 'in_progress', NULL, NULL, NULL, \
             NULL, 1, 1, 2)",
            [],
        )
        .unwrap();
        assert!(
            conn.execute("SELECT 1 FROM singletons", []).is_err(),
            "no singletons table before version 4"
        );

        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        let records: i64 = conn
            .query_row("SELECT COUNT(*) FROM idempotency", [], |r| r.get(0))
            .unwrap();
        assert_eq!(records, 1, "the upgrade keeps existing idempotency records");
        conn.execute(
            "INSERT INTO singletons VALUES ('ledger-reconciler', 'pid:1@h', 1, 2)",
            [],
        )
        .unwrap();
        let duplicate = conn.execute(
            "INSERT INTO singletons VALUES ('ledger-reconciler', 'pid:2@h', 1, 2)",
            [],
        );
        assert!(duplicate.is_err(), "one row per singleton name");
        let strict = conn.execute(
            "INSERT INTO singletons VALUES ('sweeper', 'pid:1@h', 1, 'later')",
            [],
        );
        assert!(strict.is_err(), "STRICT refuses a text expiry");
        let missing_owner =
            conn.execute("INSERT INTO singletons VALUES ('sweeper', NULL, 1, 2)", []);
        assert!(missing_owner.is_err(), "a row always names its owner");
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
    }

    fn run_indexes(conn: &Connection) -> Vec<String> {
        conn.prepare(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'runs' \
             AND sql IS NOT NULL ORDER BY name",
        )
        .unwrap()
        .query_map([], |row| row.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    #[test]
    fn a_version_4_file_upgrades_to_5_and_keeps_its_runs_and_singletons() {
        // A file written by the fourth release: migrations 1 to 4.
        let mut conn = at_version(4);
        conn.execute_batch(
            "INSERT INTO runs VALUES ('r-1', 't', 'a', 'in', NULL, '{}', 'queued', NULL, 2, 2);
             INSERT INTO runs VALUES ('r-2', 't', 'a', 'in', 'r-1', '{}', 'running', NULL, 1, 1);
             INSERT INTO singletons VALUES ('ledger-reconciler', 'pid:1@h', 1, 2);",
        )
        .unwrap();
        assert_eq!(run_indexes(&conn), ["runs_by_created", "runs_by_parent"]);

        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        assert_eq!(
            run_indexes(&conn),
            [
                "runs_by_created",
                "runs_by_created_id",
                "runs_by_parent_created",
                "runs_by_status",
                "runs_by_tenant_created",
                "runs_by_tenant_status",
                "runs_root_backlog"
            ],
            "version 5 replaces the parent index and adds the status index; 9 adds the \
             listing's; 17 the backlog's"
        );
        let kept: i64 = conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM runs) + (SELECT COUNT(*) FROM singletons)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(kept, 3, "the upgrade keeps existing runs and singletons");
        let child: String = conn
            .query_row(
                "SELECT run_id FROM runs WHERE parent_run_id = 'r-1' \
                 ORDER BY created_at_ms, run_id",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(child, "r-2");
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
    }

    #[test]
    fn a_version_5_file_upgrades_to_6_and_gets_breaker_openings() {
        // A file written by the fifth release: migrations 1 to 5.
        let mut conn = at_version(5);
        conn.execute_batch(
            "INSERT INTO runs VALUES ('r-1', 't', 'a', 'in', NULL, '{}', 'queued', NULL, 2, 2);
             INSERT INTO singletons VALUES ('ledger-reconciler', 'pid:1@h', 1, 2);",
        )
        .unwrap();
        assert!(
            conn.execute("SELECT 1 FROM breaker_openings", []).is_err(),
            "no breaker_openings table before version 6"
        );

        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        let kept: i64 = conn
            .query_row(
                "SELECT (SELECT COUNT(*) FROM runs) + (SELECT COUNT(*) FROM singletons)",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(kept, 2, "the upgrade keeps existing runs and singletons");
        conn.execute(
            "INSERT INTO breaker_openings VALUES ('provider.openai', 10, 'pid:1@h', 'r', 1)",
            [],
        )
        .unwrap();
        let duplicate = conn.execute(
            "INSERT INTO breaker_openings VALUES ('provider.openai', 20, 'pid:2@h', 'r', 1)",
            [],
        );
        assert!(duplicate.is_err(), "one row per arm");
        let strict = conn.execute(
            "INSERT INTO breaker_openings VALUES ('provider.x', 'soon', 'pid:2@h', 'r', 1)",
            [],
        );
        assert!(strict.is_err(), "STRICT refuses a text until");
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
    }

    #[test]
    fn lease_rows_must_reference_a_run() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch("PRAGMA foreign_keys = ON;").unwrap();
        migrate(&mut conn).unwrap();
        let refused = conn.execute(
            "INSERT INTO leases VALUES ('l-1', 'nope', NULL, 'temp_path', NULL, '/tmp/x', \
             'pid:1@h', 1, 2)",
            [],
        );
        assert!(refused.is_err());
    }

    #[test]
    fn a_version_6_file_upgrades_to_7_and_its_idempotency_records_have_no_holder() {
        let mut conn = at_version(6);
        conn.execute(
            "INSERT INTO idempotency VALUES ('t', 'k', 'f', 'in_progress', NULL, NULL, NULL, \
             NULL, 1, 1, 2)",
            [],
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        let (owner, run): (Option<String>, Option<String>) = conn
            .query_row("SELECT owner, run_id FROM idempotency", [], |r| {
                Ok((r.get(0)?, r.get(1)?))
            })
            .unwrap();
        assert_eq!(
            (owner, run),
            (None, None),
            "records written before name no holder"
        );
    }

    #[test]
    fn a_version_7_file_upgrades_to_8_at_ledger_revision_0_with_holders_unrenewed() {
        let mut conn = at_version(7);
        conn.execute(
            "INSERT INTO runs VALUES ('r-1', 't', 'a', 'in', NULL, '{}', 'running', NULL, 1, 1)",
            [],
        )
        .unwrap();
        conn.execute(
            "INSERT INTO idempotency VALUES ('t', 'k', 'f', 'in_progress', NULL, NULL, NULL, \
             NULL, 1, 1, 2, 'pid:1@h#a', 'r-1')",
            [],
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        let revision: i64 = conn
            .query_row(
                "SELECT ledger_revision FROM runs WHERE run_id = 'r-1'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(revision, 0, "existing runs start at revision 0");
        let (owner, since, until): (Option<String>, Option<i64>, Option<i64>) = conn
            .query_row(
                "SELECT owner, holder_since_ms, holder_until_ms FROM idempotency",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(
            (owner.as_deref(), since, until),
            (Some("pid:1@h#a"), None, None),
            "a holder recorded before keeps its name and has no heartbeat"
        );
    }

    #[test]
    fn a_version_8_file_upgrades_to_9_and_gets_the_listing_indexes() {
        let mut conn = at_version(8);
        conn.execute(
            "INSERT INTO runs VALUES ('r-1', 't', 'a', 'in', NULL, '{}', 'running', NULL, 1, 1, 0)",
            [],
        )
        .unwrap();
        assert!(!run_indexes(&conn).contains(&"runs_by_tenant_created".to_owned()));
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        for index in [
            "runs_by_tenant_created",
            "runs_by_tenant_status",
            "runs_by_created_id",
        ] {
            assert!(run_indexes(&conn).contains(&index.to_owned()), "{index}");
        }
        let kept: i64 = conn
            .query_row("SELECT COUNT(*) FROM runs WHERE tenant = 't'", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(kept, 1, "the upgrade keeps existing runs");
    }

    #[test]
    fn a_version_9_file_upgrades_to_10_and_keeps_its_whole_checkpoints() {
        let mut conn = at_version(9);
        conn.execute_batch(
            "INSERT INTO runs VALUES ('r-1', 't', 'a', 'in', NULL, '{}', 'running', NULL, 1, 1, 0);
             INSERT INTO checkpoints VALUES ('r-1', 2, '[]', '[]', 2, 0, 0, 10, '{}', 5);",
        )
        .unwrap();
        assert!(
            conn.execute("SELECT 1 FROM checkpoint_deltas", []).is_err(),
            "no checkpoint_deltas table before version 10"
        );
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        let kept: i64 = conn
            .query_row("SELECT COUNT(*) FROM checkpoints", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            kept, 1,
            "the upgrade keeps whole checkpoints: they are bases"
        );
        conn.execute(
            "INSERT INTO checkpoint_deltas VALUES ('r-1', 3, '[]', '[]', '{}', '{}', 3, 0, 0, \
             20, 6)",
            [],
        )
        .unwrap();
        let duplicate = conn.execute(
            "INSERT INTO checkpoint_deltas VALUES ('r-1', 3, '[]', '[]', '{}', '{}', 3, 0, 0, \
             20, 6)",
            [],
        );
        assert!(duplicate.is_err(), "one delta per run and step");
        let strict = conn.execute(
            "INSERT INTO checkpoint_deltas VALUES ('r-1', 4, '[]', '[]', '{}', '{}', 'four', 0, \
             0, 20, 6)",
            [],
        );
        assert!(strict.is_err(), "STRICT refuses a text step count");
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
    }

    #[test]
    fn a_version_14_file_upgrades_to_15_and_its_runs_have_no_trace() {
        let mut conn = at_version(14);
        conn.execute(
            "INSERT INTO runs VALUES ('r-1', 't', 'a', 'in', NULL, '{}', 'running', NULL, 1, 1, 0)",
            [],
        )
        .unwrap();
        migrate(&mut conn).unwrap();
        assert_eq!(version(&conn), i64::from(SCHEMA_VERSION));
        let (parent, first): (Option<String>, Option<String>) = conn
            .query_row(
                "SELECT trace_parent, first_span FROM runs WHERE run_id = 'r-1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            (parent, first),
            (None, None),
            "a run from before has no trace"
        );
    }

    #[test]
    fn a_version_11_file_backfills_each_events_guardrail() {
        // Every stored event shape of the wire fixture, written by a
        // release before events had a guardrail.
        let mut conn = at_version(11);
        conn.execute(
            "INSERT INTO runs (run_id, tenant, agent, input, budget, status, created_at_ms, \
             updated_at_ms) VALUES ('r-1', 't', 'a', 'in', '{}', 'running', 1, 1)",
            [],
        )
        .unwrap();
        let fixture = include_str!("../../rein-core/tests/fixtures/events-v1.jsonl");
        for (seq, line) in fixture.lines().enumerate() {
            let event: serde_json::Value = serde_json::from_str(line).unwrap();
            conn.execute(
                "INSERT INTO events (run_id, seq, step, at_ms, kind, data) \
                 VALUES ('r-1', ?1, 0, 0, ?2, ?3)",
                rusqlite::params![
                    i64::try_from(seq).unwrap() + 1,
                    event["kind"].as_str().unwrap(),
                    event["data"].to_string()
                ],
            )
            .unwrap();
        }
        migrate(&mut conn).unwrap();
        let mut statement = conn
            .prepare("SELECT kind, data, guardrail FROM events ORDER BY seq")
            .unwrap();
        let rows: Vec<(String, String, Option<String>)> = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut fired = 0;
        for (kind, data, guardrail) in rows {
            let kind: rein_core::EventKind =
                serde_json::from_value(serde_json::Value::String(kind)).unwrap();
            let decoded =
                rein_core::EventData::decode(kind, serde_json::from_str(&data).unwrap()).unwrap();
            let expected = decoded.guardrail().map(|g| g.as_str().to_owned());
            assert_eq!(guardrail, expected, "the backfill of {kind} {data}");
            fired += usize::from(expected.is_some());
        }
        assert!(fired >= 5, "the fixture holds guardrail events: {fired}");
    }
}

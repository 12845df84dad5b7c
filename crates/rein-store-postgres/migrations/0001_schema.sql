-- 1: the whole schema of SQLite's version 10, in PostgreSQL's types.
--
-- Conventions (as SQLite's): JSON columns hold text, exactly as written
-- (jsonb would reorder keys, and an event's stored form is its JSON text);
-- timestamps are BIGINT milliseconds since the Unix epoch (`*_ms`); every
-- table of a run references `runs`. Unsigned counters are BIGINT, checked
-- on the way in and out. Text compares byte by byte (COLLATE "C", as
-- SQLite's BINARY), so listings order alike on both backends.

CREATE TABLE runs (
    run_id          TEXT COLLATE "C" PRIMARY KEY,
    tenant          TEXT COLLATE "C" NOT NULL,
    agent           TEXT COLLATE "C" NOT NULL,
    input           TEXT COLLATE "C" NOT NULL,
    parent_run_id   TEXT COLLATE "C",
    budget          TEXT COLLATE "C" NOT NULL,
    status          TEXT COLLATE "C" NOT NULL,
    report          TEXT COLLATE "C",
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    ledger_revision BIGINT NOT NULL DEFAULT 0,
    -- Insertion order: `list_runs` gives ties on created_at_ms to the later
    -- insert, as SQLite's rowid does.
    inserted        BIGINT GENERATED ALWAYS AS IDENTITY
);
CREATE INDEX runs_by_created ON runs (created_at_ms DESC, inserted DESC);
CREATE INDEX runs_by_status ON runs (status, created_at_ms, run_id);
CREATE INDEX runs_by_parent_created ON runs (parent_run_id, created_at_ms, run_id)
    WHERE parent_run_id IS NOT NULL;
CREATE INDEX runs_by_tenant_created ON runs (tenant, created_at_ms, run_id);
CREATE INDEX runs_by_tenant_status ON runs (tenant, status, created_at_ms, run_id);
CREATE INDEX runs_by_created_id ON runs (created_at_ms, run_id);

CREATE TABLE events (
    run_id          TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    seq             BIGINT NOT NULL,
    step            BIGINT NOT NULL,
    intent_id       TEXT COLLATE "C",
    attempt_id      TEXT COLLATE "C",
    idempotency_key TEXT COLLATE "C",
    at_ms           BIGINT NOT NULL,
    kind            TEXT COLLATE "C" NOT NULL,
    data            TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, seq)
);

CREATE TABLE intents (
    run_id    TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    intent_id TEXT COLLATE "C" NOT NULL,
    step      BIGINT NOT NULL,
    ordinal   BIGINT NOT NULL,
    call_id   TEXT COLLATE "C" NOT NULL,
    tool      TEXT COLLATE "C" NOT NULL,
    args      TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (run_id, intent_id)
);

CREATE TABLE ledger (
    run_id          TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    intent_id       TEXT COLLATE "C" NOT NULL,
    seq             BIGINT NOT NULL,
    step            BIGINT NOT NULL,
    tool            TEXT COLLATE "C" NOT NULL,
    class           TEXT COLLATE "C" NOT NULL,
    idempotency_key TEXT COLLATE "C",
    args            TEXT COLLATE "C" NOT NULL,
    status          TEXT COLLATE "C" NOT NULL,
    result          TEXT COLLATE "C",
    failure         TEXT COLLATE "C",
    attempts        BIGINT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (run_id, intent_id),
    UNIQUE (run_id, seq)
);
CREATE INDEX ledger_pending ON ledger (created_at_ms, run_id, seq) WHERE status = 'pending';

CREATE TABLE checkpoints (
    run_id               TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    step                 BIGINT NOT NULL,
    messages             TEXT COLLATE "C" NOT NULL,
    completed_intents    TEXT COLLATE "C" NOT NULL,
    consumed_steps       BIGINT NOT NULL,
    consumed_tokens      BIGINT NOT NULL,
    consumed_cost_micros BIGINT NOT NULL,
    elapsed_ms           BIGINT NOT NULL,
    state                TEXT COLLATE "C" NOT NULL,
    at_ms                BIGINT NOT NULL,
    PRIMARY KEY (run_id, step)
);

CREATE TABLE checkpoint_deltas (
    run_id               TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    step                 BIGINT NOT NULL,
    messages             TEXT COLLATE "C" NOT NULL,
    completed_intents    TEXT COLLATE "C" NOT NULL,
    appended             TEXT COLLATE "C" NOT NULL,
    state                TEXT COLLATE "C" NOT NULL,
    consumed_steps       BIGINT NOT NULL,
    consumed_tokens      BIGINT NOT NULL,
    consumed_cost_micros BIGINT NOT NULL,
    elapsed_ms           BIGINT NOT NULL,
    at_ms                BIGINT NOT NULL,
    PRIMARY KEY (run_id, step)
);

-- A row exists while its resource may exist; releasing deletes it.
CREATE TABLE leases (
    lease_id       TEXT COLLATE "C" PRIMARY KEY,
    run_id         TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    intent_id      TEXT COLLATE "C",
    kind           TEXT COLLATE "C" NOT NULL,
    pgid           INTEGER,
    path           TEXT COLLATE "C",
    owner          TEXT COLLATE "C" NOT NULL,
    acquired_at_ms BIGINT NOT NULL,
    expires_at_ms  BIGINT NOT NULL
);
CREATE INDEX leases_by_expiry ON leases (expires_at_ms, lease_id);
CREATE INDEX leases_by_run ON leases (run_id);

-- HTTP idempotency records, per tenant and key; the response columns are
-- set exactly when state = 'completed'.
CREATE TABLE idempotency (
    tenant          TEXT COLLATE "C" NOT NULL,
    idempotency_key TEXT COLLATE "C" NOT NULL,
    fingerprint     TEXT COLLATE "C" NOT NULL,
    state           TEXT COLLATE "C" NOT NULL,
    status          INTEGER,
    content_type    TEXT COLLATE "C",
    location        TEXT COLLATE "C",
    body            BYTEA,
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    owner           TEXT COLLATE "C",
    run_id          TEXT COLLATE "C",
    holder_since_ms BIGINT,
    holder_until_ms BIGINT,
    PRIMARY KEY (tenant, idempotency_key)
);
CREATE INDEX idempotency_by_expiry ON idempotency (expires_at_ms);
CREATE INDEX idempotency_by_state ON idempotency (state, created_at_ms);

CREATE TABLE singletons (
    name           TEXT COLLATE "C" PRIMARY KEY,
    owner          TEXT COLLATE "C" NOT NULL,
    acquired_at_ms BIGINT NOT NULL,
    expires_at_ms  BIGINT NOT NULL
);

CREATE TABLE breaker_openings (
    arm           TEXT COLLATE "C" PRIMARY KEY,
    open_until_ms BIGINT NOT NULL,
    opened_by     TEXT COLLATE "C" NOT NULL,
    reason        TEXT COLLATE "C" NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

-- Retry outcomes: one row per target (`tool:NAME`, `provider:NAME`,
-- `fallback:PROVIDER/MODEL`) and retry ordinal (1: the first retry, 3: the
-- third and later), summed over every process and halved per window of
-- `RETRY_RATE_HALF_LIFE` since `updated_at_ms` (a merge writes the decayed
-- sum under the target's advisory lock). Not tied to a run.
CREATE TABLE retry_outcomes (
    target        TEXT COLLATE "C" NOT NULL,
    ordinal       INTEGER NOT NULL CHECK (ordinal BETWEEN 1 AND 3),
    tries         BIGINT NOT NULL CHECK (tries >= 0),
    successes     BIGINT NOT NULL CHECK (successes >= 0 AND successes <= tries),
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (target, ordinal)
);

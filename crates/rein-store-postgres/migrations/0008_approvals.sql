-- Approvals, one row per call a run paused for (its intent), with the
-- arguments as the model proposed them and their digest; the decision
-- columns are NULL until the one decision is recorded.
CREATE TABLE approvals (
    run_id          TEXT COLLATE "C" NOT NULL REFERENCES runs (run_id),
    intent_id       TEXT COLLATE "C" NOT NULL,
    tenant          TEXT COLLATE "C" NOT NULL,
    step            BIGINT NOT NULL,
    tool            TEXT NOT NULL,
    args            TEXT NOT NULL,
    args_digest     TEXT COLLATE "C" NOT NULL,
    why             TEXT NOT NULL,
    requested_at_ms BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    verdict         TEXT COLLATE "C" CHECK (verdict IN ('approved', 'rejected', 'expired')),
    decided_by      TEXT,
    decided_at_ms   BIGINT,
    reason          TEXT,
    PRIMARY KEY (run_id, intent_id)
);
CREATE INDEX approvals_undecided ON approvals (expires_at_ms) WHERE verdict IS NULL;
CREATE INDEX approvals_by_request ON approvals (requested_at_ms, run_id, intent_id);

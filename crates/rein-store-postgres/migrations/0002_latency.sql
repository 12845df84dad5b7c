-- Observed latency histograms, one row per subject (`tool:NAME`,
-- `model:PROVIDER/MODEL`, ...), each the sum of every process's samples:
-- a process adds its delta under the subject's advisory lock. The
-- histogram is a versioned text form (`LatencyHistogram::encode`);
-- `samples` repeats its count for a reader that only lists.
CREATE TABLE latency_histograms (
    subject       TEXT COLLATE "C" PRIMARY KEY,
    histogram     TEXT NOT NULL,
    samples       BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

-- Cancel requests, at most one per run: a cancel taken by any node, seen
-- by the one driving the run (at once through `NOTIFY rein_cancel`, and at
-- its claim renewal whatever happened to the notification).
CREATE TABLE cancel_requests (
    run_id          TEXT COLLATE "C" PRIMARY KEY REFERENCES runs (run_id),
    requested_by    TEXT COLLATE "C" NOT NULL,
    requested_at_ms BIGINT NOT NULL
);

-- The webhook outbox. An event with a webhook topic is recorded in
-- webhook_events by the commit that appends it (routed until the
-- dispatcher has made its deliveries); each webhook's delivery of it is a
-- row of webhook_deliveries, its log.
CREATE TABLE webhook_events (
    event_id      TEXT COLLATE "C" PRIMARY KEY,
    run_id        TEXT COLLATE "C" NOT NULL,
    topic         TEXT COLLATE "C" NOT NULL,
    outcome       TEXT COLLATE "C",
    body          TEXT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    routed        BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX webhook_events_unrouted ON webhook_events (created_at_ms, event_id) WHERE NOT routed;
CREATE TABLE webhook_deliveries (
    webhook            TEXT COLLATE "C" NOT NULL,
    event_id           TEXT COLLATE "C" NOT NULL REFERENCES webhook_events (event_id),
    state              TEXT COLLATE "C" NOT NULL CHECK (state IN ('pending', 'delivered', 'given_up')),
    attempts           BIGINT NOT NULL,
    next_attempt_at_ms BIGINT NOT NULL,
    claimed_until_ms   BIGINT NOT NULL,
    last_attempt_at_ms BIGINT,
    last_status        BIGINT,
    last_error         TEXT,
    PRIMARY KEY (webhook, event_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at_ms) WHERE state = 'pending';

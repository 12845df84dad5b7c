-- What each API key spent on models, one row per tenant, key, model and UTC
-- day (days since the epoch). A process adds to a row with one upsert; the
-- row lock makes concurrent additions of every node all count.
CREATE TABLE spend (
    tenant      TEXT COLLATE "C" NOT NULL,
    key         TEXT COLLATE "C" NOT NULL,
    model       TEXT COLLATE "C" NOT NULL,
    day         INTEGER NOT NULL CHECK (day >= 0),
    tokens      BIGINT NOT NULL CHECK (tokens >= 0),
    cost_micros BIGINT NOT NULL CHECK (cost_micros >= 0),
    PRIMARY KEY (tenant, key, day, model)
);

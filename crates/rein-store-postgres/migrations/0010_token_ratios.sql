-- The bytes per token each model's provider was seen to count, one row per
-- `provider/model`: every process's samples summed, the least ratio among
-- them kept. A process adds its delta under the model's advisory lock.
CREATE TABLE token_ratios (
    model         TEXT COLLATE "C" PRIMARY KEY,
    samples       BIGINT NOT NULL CHECK (samples >= 0),
    least         DOUBLE PRECISION NOT NULL,
    updated_at_ms BIGINT NOT NULL
);

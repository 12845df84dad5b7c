-- The other headers of a completed idempotent response (a JSON array of
-- [name, value] pairs, NULL for none), so that a replay of a gateway
-- answer says which model answered, as the first did.
ALTER TABLE idempotency ADD COLUMN headers TEXT;

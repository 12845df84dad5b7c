-- A run's trace: the caller's `traceparent` it was created with (the
-- parent of the span of whichever node drives it), and the span of its
-- first drive (what the span of a resume or a takeover links to). W3C
-- `traceparent` text; NULL for a run without one.
ALTER TABLE runs
    ADD COLUMN trace_parent TEXT,
    ADD COLUMN first_span   TEXT;

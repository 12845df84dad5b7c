-- The guardrail an event records firing (`Guardrail::of`, NULL for every
-- other event), written with the event, so `Store::run_stats` counts
-- guardrails per agent with one indexed join instead of decoding every
-- event of the window. Events stored before are backfilled here from
-- their kind and data.
-- NOTE: the CASE mirrors `rein_core::event::Guardrail::of` (and SQLite's
-- schema v12).
ALTER TABLE events ADD COLUMN guardrail TEXT COLLATE "C";
UPDATE events SET guardrail = CASE kind
    WHEN 'budget_exhausted' THEN
        CASE data::jsonb #>> '{exhausted,dimension}'
            WHEN 'steps' THEN 'budget_steps'
            WHEN 'tokens' THEN 'budget_tokens'
            WHEN 'cost' THEN 'budget_cost'
            WHEN 'wall_clock' THEN 'budget_wall_clock'
        END
    WHEN 'loop_detected' THEN
        CASE data::jsonb #>> '{trip,reason}'
            WHEN 'repeated_action' THEN 'repeated_action'
            WHEN 'no_progress' THEN 'no_progress'
            WHEN 'repeat_failure' THEN 'repeat_failure'
        END
    WHEN 'call_rejected' THEN
        CASE WHEN data::jsonb ? 'arm' THEN 'breaker' ELSE 'validation' END
    WHEN 'fan_out_refused' THEN 'fan_out'
    WHEN 'call_shed' THEN 'call_shed'
    WHEN 'tool_disabled' THEN 'tool_disabled'
END
WHERE kind IN ('budget_exhausted', 'loop_detected', 'call_rejected', 'fan_out_refused',
               'call_shed', 'tool_disabled');
CREATE INDEX events_by_guardrail ON events (run_id, guardrail) WHERE guardrail IS NOT NULL;

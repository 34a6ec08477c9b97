-- The events of the table path that may hold their aggregate back: failed
-- ones (a retry waits, or dead). Held and handed-over events carry no
-- attempt and hold nothing back, so a large backlog handed to the table
-- path stays out of it: fetch_table_owned.sql probes it for each event it
-- returns.
CREATE INDEX IF NOT EXISTS outbox_events_table_blockers_idx
    ON outbox_events (aggregate_type, aggregate_id, id)
    WHERE state <> 'published' AND attempts > 0

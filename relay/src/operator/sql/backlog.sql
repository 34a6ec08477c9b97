-- The table gauges of /metrics under the logical source, read on every
-- scrape. A streamed event published on the happy path stays `pending`
-- with no attempt and no note, so it is not counted: only the events the
-- table path owns and has not published (failed and waiting for a retry,
-- held behind such an event, or handed over by recover-slot) are, read
-- from their partial index outbox_events_table_owned_idx, and the dead
-- ones. The stream's own unsettled events are added by the relay that
-- streams them.
SELECT
    (SELECT COUNT(*) FROM outbox_events
     WHERE state <> 'published' AND (attempts > 0 OR last_error IS NOT NULL)
       AND state = 'pending') AS pending,
    (SELECT COUNT(*) FROM outbox_events WHERE state = 'dead') AS dead,
    (SELECT MIN(created_at) FROM outbox_events
     WHERE state <> 'published' AND (attempts > 0 OR last_error IS NOT NULL)
       AND state = 'pending') AS oldest_pending_at

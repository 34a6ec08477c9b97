-- $1 whether dead events hold their aggregate. Aggregates whose next
-- events must come from the table: one of their events failed and waits
-- (or is dead, under hold), or is held behind such an event. Reads the
-- small partial index outbox_events_table_owned_idx.
SELECT DISTINCT aggregate_type, aggregate_id
FROM outbox_events
WHERE state <> 'published'
  AND (attempts > 0 OR last_error IS NOT NULL)
  AND (state = 'pending' OR $1)

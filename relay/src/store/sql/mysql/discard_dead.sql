-- ? ? event id or NULL, ? ? aggregate type or NULL, ? aggregate id.
DELETE FROM outbox_events
WHERE state = 'dead'
  AND (? IS NULL OR event_id = ?)
  AND (? IS NULL OR (aggregate_type = ? AND aggregate_id = ?))

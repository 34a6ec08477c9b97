-- ? ? event id or NULL, ? ? aggregate type or NULL, ? aggregate id, ? limit.
SELECT id, event_id, event_type, aggregate_type, aggregate_id, topic, attempts, last_error
FROM outbox_events
WHERE state = 'dead'
  AND (? IS NULL OR event_id = ?)
  AND (? IS NULL OR (aggregate_type = ? AND aggregate_id = ?))
ORDER BY id
LIMIT ?

-- ?1 event id or NULL, ?2 aggregate type or NULL, ?3 aggregate id or NULL, ?4 limit.
SELECT id, event_id, event_type, aggregate_type, aggregate_id, topic, attempts, last_error
FROM outbox_events
WHERE state = 'dead'
  AND (?1 IS NULL OR event_id = ?1)
  AND (?2 IS NULL OR (aggregate_type = ?2 AND aggregate_id = ?3))
ORDER BY id
LIMIT ?4

-- One page of `outbox-relay replay`: ? topic, ? created at or after,
-- ? created before, ? after this id, ? page size. Reads only.
SELECT e.id, e.event_id, e.event_type, e.event_version, e.source, e.aggregate_type, e.aggregate_id,
       e.topic, e.payload, e.headers, e.created_at, e.attempts
FROM outbox_events AS e
WHERE e.state = 'published'
  AND e.topic = ?
  AND e.created_at >= ?
  AND e.created_at < ?
  AND e.id > ?
ORDER BY e.id
LIMIT ?

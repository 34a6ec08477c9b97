-- One page of `outbox-relay replay`: ?1 topic, ?2 created at or after,
-- ?3 created before (both as text in the created_at format,
-- %Y-%m-%dT%H:%M:%fZ, which compares in time order), ?4 after this id,
-- ?5 page size. Reads only.
SELECT e.id, e.event_id, e.event_type, e.event_version, e.source, e.aggregate_type, e.aggregate_id,
       e.topic, e.payload, e.headers, e.created_at, e.attempts
FROM outbox_events AS e
WHERE e.state = 'published'
  AND e.topic = ?1
  AND e.created_at >= ?2
  AND e.created_at < ?3
  AND e.id > ?4
ORDER BY e.id
LIMIT ?5

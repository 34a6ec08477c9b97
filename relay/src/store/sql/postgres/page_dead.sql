-- Dead events of the operators' page (/ui) under its filters: $1 topic or
-- NULL, $2 event type or NULL, $3 aggregate type or NULL, $4 aggregate id,
-- $5 a substring of the last error or NULL, $6 created at or after, $7
-- created before, $8 the most rows read.
SELECT id, event_id::text AS event_id, event_type, aggregate_type, aggregate_id, topic, attempts,
       last_error, created_at,
       left(payload::text, 200) AS payload_preview
FROM outbox_events
WHERE state = 'dead'
  AND ($1::text IS NULL OR topic = $1)
  AND ($2::text IS NULL OR event_type = $2)
  AND ($3::text IS NULL OR (aggregate_type = $3 AND aggregate_id = $4))
  AND ($5::text IS NULL OR strpos(COALESCE(last_error, ''), $5) > 0)
  AND created_at >= $6
  AND created_at < $7
ORDER BY id
LIMIT $8

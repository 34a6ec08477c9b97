-- Dead events of the operators' page (/ui) under its filters: ? ? topic or
-- NULL, ? ? event type or NULL, ? ? aggregate type or NULL, ? aggregate
-- id, ? ? a substring of the last error or NULL, ? created at or after,
-- ? created before, ? the most rows read.
SELECT id, event_id, event_type, aggregate_type, aggregate_id, topic, attempts, last_error,
       created_at, LEFT(payload, 200) AS payload_preview
FROM outbox_events
WHERE state = 'dead'
  AND (? IS NULL OR topic = ?)
  AND (? IS NULL OR event_type = ?)
  AND (? IS NULL OR (aggregate_type = ? AND aggregate_id = ?))
  AND (? IS NULL OR LOCATE(?, COALESCE(last_error, '')) > 0)
  AND created_at >= ?
  AND created_at < ?
ORDER BY id
LIMIT ?

-- ? ? event id or NULL, ? ? aggregate type or NULL, ? aggregate id.
UPDATE outbox_events
SET state = 'pending', attempts = 0, next_attempt_at = NULL
WHERE state = 'dead'
  AND (? IS NULL OR event_id = ?)
  AND (? IS NULL OR (aggregate_type = ? AND aggregate_id = ?))

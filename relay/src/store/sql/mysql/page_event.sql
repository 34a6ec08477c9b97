-- One event of the operators' page (/ui), in any state: ? its id.
SELECT id, event_id, event_type, event_version, source, aggregate_type, aggregate_id, topic,
       payload, headers, state, attempts, last_error, created_at, published_at, next_attempt_at
FROM outbox_events
WHERE id = ?

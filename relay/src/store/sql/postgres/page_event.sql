-- One event of the operators' page (/ui), in any state: $1 its id.
SELECT id, event_id::text AS event_id, event_type, event_version, source, aggregate_type,
       aggregate_id, topic, payload::text AS payload, headers::text AS headers, state, attempts,
       last_error, created_at, published_at, next_attempt_at
FROM outbox_events
WHERE id = $1

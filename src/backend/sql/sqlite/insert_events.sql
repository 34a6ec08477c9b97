-- Enqueue a batch in one statement. ?1 is a JSON array of events, each an
-- object with the contract columns; json_each stands in for array binds, and
-- ORDER BY key (the array index) hands out ids in the order of the array.
INSERT INTO outbox_events
    (event_id, event_type, event_version, source, aggregate_type, aggregate_id, topic, payload, headers)
SELECT e.value ->> '$.event_id',
       e.value ->> '$.event_type',
       e.value ->> '$.event_version',
       e.value ->> '$.source',
       e.value ->> '$.aggregate_type',
       e.value ->> '$.aggregate_id',
       e.value ->> '$.topic',
       e.value -> '$.payload',
       e.value -> '$.headers'
FROM json_each(?1) AS e
ORDER BY e.key

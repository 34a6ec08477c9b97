-- Enqueue a batch in one statement. $1 is a JSON array of events, each an
-- object with the contract columns; ORDER BY position hands out ids in the
-- order of the array.
INSERT INTO outbox_events
    (event_id, event_type, event_version, source, aggregate_type, aggregate_id, topic, payload, headers)
SELECT (e.doc ->> 'event_id')::uuid,
       e.doc ->> 'event_type',
       (e.doc ->> 'event_version')::integer,
       e.doc ->> 'source',
       e.doc ->> 'aggregate_type',
       e.doc ->> 'aggregate_id',
       e.doc ->> 'topic',
       e.doc -> 'payload',
       e.doc -> 'headers'
FROM jsonb_array_elements($1::jsonb) WITH ORDINALITY AS e (doc, position)
ORDER BY e.position

-- Enqueue a batch in one statement. The parameter is a JSON array of events,
-- each an object with the contract columns; JSON_TABLE stands in for array
-- binds, and ORDER BY position hands out ids in the order of the array.
INSERT INTO outbox_events
    (event_id, event_type, event_version, source, aggregate_type, aggregate_id, topic, payload, headers)
SELECT e.event_id, e.event_type, e.event_version, e.source, e.aggregate_type, e.aggregate_id, e.topic,
       e.payload, e.headers
FROM JSON_TABLE(?, '$[*]' COLUMNS (
    position       FOR ORDINALITY,
    event_id       CHAR(36)      PATH '$.event_id',
    event_type     VARCHAR(255)  PATH '$.event_type',
    event_version  INT           PATH '$.event_version',
    source         VARCHAR(1024) PATH '$.source',
    aggregate_type VARCHAR(255)  PATH '$.aggregate_type',
    aggregate_id   VARCHAR(255)  PATH '$.aggregate_id',
    topic          VARCHAR(255)  PATH '$.topic',
    payload        JSON          PATH '$.payload',
    headers        JSON          PATH '$.headers'
)) AS e
ORDER BY e.position

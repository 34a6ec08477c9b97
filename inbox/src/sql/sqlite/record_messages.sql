-- ?1 consumer, ?2 the event ids of a batch as a JSON array of strings.
-- Inserts the inbox rows that do not exist yet and returns the ids it
-- inserted: the events the batch handles. (SQLite takes one writer at a
-- time; `WHERE true` keeps `ON CONFLICT` from parsing as a join clause.)
INSERT INTO inbox_messages (consumer, event_id)
SELECT ?1, delivered.value
FROM json_each(?2) AS delivered
WHERE true
ORDER BY delivered.value
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING event_id

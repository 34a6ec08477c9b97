-- $1 consumer, $2 the event ids of a batch (text[]). Inserts the inbox
-- rows that do not exist yet and returns the ids it inserted: the events
-- the batch handles. The rows go in id order, so two batches racing on
-- the same ids take their row locks in one order and cannot deadlock; a
-- racing batch waits for the other's commit, then inserts nothing for the
-- ids it committed. No unique violation is raised.
INSERT INTO inbox_messages (consumer, event_id)
SELECT $1, delivered.event_id
FROM unnest($2::text[]) AS delivered(event_id)
ORDER BY delivered.event_id
ON CONFLICT (consumer, event_id) DO NOTHING
RETURNING event_id

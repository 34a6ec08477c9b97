-- ? consumer, ? the event ids of a batch as a JSON array of strings.
-- Inserts the inbox rows that do not exist yet and returns the ids it
-- inserted: the events the batch handles (MariaDB 10.6 and later:
-- INSERT ... RETURNING and JSON_TABLE). INSERT IGNORE turns a duplicate
-- key into no row; the rows go in id order, so two batches racing on the
-- same ids take their locks in one order and cannot deadlock.
INSERT IGNORE INTO inbox_messages (consumer, event_id)
SELECT ?, delivered.event_id
FROM JSON_TABLE(?, '$[*]' COLUMNS (event_id VARCHAR(255) PATH '$')) AS delivered
ORDER BY delivered.event_id
RETURNING event_id

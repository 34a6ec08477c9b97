-- $1 consumer, $2 event id. Inserts the inbox row unless it exists; a
-- concurrent insert of the same row waits for the other transaction, then
-- inserts nothing if it committed. No unique violation is ever raised, so
-- the transaction stays usable.
INSERT INTO inbox_messages (consumer, event_id) VALUES ($1, $2)
ON CONFLICT (consumer, event_id) DO NOTHING

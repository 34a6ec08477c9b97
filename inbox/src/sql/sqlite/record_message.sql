-- ?1 consumer, ?2 event id. SQLite has one writer; the row either is new or
-- was committed by an earlier transaction.
INSERT INTO inbox_messages (consumer, event_id) VALUES (?1, ?2)
ON CONFLICT (consumer, event_id) DO NOTHING

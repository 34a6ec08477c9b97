-- ? consumer, ? event id. INSERT IGNORE turns the duplicate key into a
-- warning and zero rows affected; a concurrent insert of the same key waits
-- for the other transaction's lock first.
INSERT IGNORE INTO inbox_messages (consumer, event_id) VALUES (?, ?)

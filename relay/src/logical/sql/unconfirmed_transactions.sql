-- $1 slot name, $2 publication name. The transactions the slot would still
-- send: every one that changed the publication's table after the slot's
-- confirmed position. Peeking decodes them without confirming anything.
SELECT DISTINCT xid::text
FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
    'proto_version', '1', 'publication_names', $2)
WHERE xid IS NOT NULL

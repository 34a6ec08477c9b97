-- $1 slot name, $2 publication name. What the slot would still send, after
-- its confirmed position: the Relation (R) and Insert (I) messages of the
-- publication's table, in order. Peeking decodes them without confirming
-- anything.
SELECT data
FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
    'proto_version', '1', 'publication_names', $2)
WHERE get_byte(data, 0) IN (82, 73)
